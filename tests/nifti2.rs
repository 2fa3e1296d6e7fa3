//! NIfTI-2 read and write against nibabel: the fixtures in `tests/data/nifti2/` and what nibabel
//! reads from them (`expected.json`) are made by `tests/fixtures/make_nifti2.py` (nibabel 5.4).
//! Round trips through our writer are checked here and, where python3 with nibabel is available,
//! by nibabel itself; hostile NIfTI-2 headers must be one error line, never a panic.
//! Arrays are `[z, y, x]`; NIfTI / nibabel index `(i, j, k)`.

#![allow(clippy::unwrap_used)] // test helpers: a failed unwrap is a failed test

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use augscope::Volume;
use augscope::io::{self, SaveOptions, nifti};
use serde_json::Value;

const KEEP: SaveOptions = SaveOptions { keep_dtype: true };
const F32: SaveOptions = SaveOptions { keep_dtype: false };
const FIXTURES: [&str; 4] = [
    "i16_scaled.nii",
    "f32_4d.nii",
    "i32_big_endian.nii",
    "f64_2d.nii.gz",
];

mod common;
use common::fixtures::load_volume as load;

fn fixture(name: &str) -> PathBuf {
    common::fixtures::data("nifti2").join(name)
}

fn expected() -> serde_json::Map<String, Value> {
    let text = std::fs::read_to_string(fixture("expected.json")).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    v.as_object().unwrap().clone()
}

/// A float written by Python as its repr (JSON readers need not round numbers correctly; Rust's
/// `parse` does).
fn num(v: &Value) -> f64 {
    let s = v
        .as_str()
        .unwrap_or_else(|| panic!("a float as text, got {v}"));
    s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
}

fn f64s(v: &Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(num).collect()
}

fn i64s(v: &Value) -> Vec<i64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_i64().unwrap())
        .collect()
}

fn matrix(v: &Value) -> Vec<Vec<f64>> {
    v.as_array().unwrap().iter().map(f64s).collect()
}

fn affine_rows(m: &[[f64; 4]; 4]) -> Vec<Vec<f64>> {
    m.iter().map(|r| r.to_vec()).collect()
}

fn assert_affine(got: &[[f64; 4]; 4], want: &[Vec<f64>], tol: f64, what: &str) {
    for r in 0..4 {
        for c in 0..4 {
            assert!(
                (got[r][c] - want[r][c]).abs() <= tol,
                "{what}: affine[{r}][{c}]: got {got:?}, want {want:?}"
            );
        }
    }
}

/// Same values, exact.
fn assert_same_data(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (n, (a, b)) in got.iter().zip(want).enumerate() {
        assert!(a == b, "{what}: value {n}: got {a}, want {b}");
    }
}

fn nifti2(v: &Volume) -> &nifti::Nifti2Fields {
    v.nifti2
        .as_deref()
        .expect("a volume read from NIfTI-2 keeps its NIfTI-2 fields")
}

fn text(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// The header fields recorded by the generator, as the volume's NIfTI-2 fields and the text
/// fields of its header hold them (vox_offset and byte order aside, which a write may change).
fn assert_header_fields(v: &Volume, want: &Value, what: &str) {
    let w = nifti2(v);
    let h = v.nifti_header.as_deref().unwrap();
    assert_eq!(h.sizeof_hdr, 540, "{what}");
    assert_eq!(&h.magic, b"n+2\0", "{what}");
    assert_eq!(
        w.datatype as i64,
        want["datatype"].as_i64().unwrap(),
        "{what}"
    );
    assert_eq!(w.dim.to_vec(), i64s(&want["dim"]), "{what}");
    assert_eq!(w.pixdim.to_vec(), f64s(&want["pixdim"]), "{what}");
    assert_eq!(
        (w.scl_slope, w.scl_inter),
        (num(&want["scl_slope"]), num(&want["scl_inter"])),
        "{what}"
    );
    assert_eq!(
        (w.qform_code as i64, w.sform_code as i64),
        (
            want["qform_code"].as_i64().unwrap(),
            want["sform_code"].as_i64().unwrap()
        ),
        "{what}"
    );
    assert_eq!(w.quatern.to_vec(), f64s(&want["quatern"]), "{what}");
    assert_eq!(w.qoffset.to_vec(), f64s(&want["qoffset"]), "{what}");
    let srow: Vec<Vec<f64>> = w.srow.iter().map(|r| r.to_vec()).collect();
    assert_eq!(srow, matrix(&want["srow"]), "{what}");
    assert_eq!(
        w.intent_code as i64,
        want["intent_code"].as_i64().unwrap(),
        "{what}"
    );
    assert_eq!(w.intent_p.to_vec(), f64s(&want["intent_p"]), "{what}");
    assert_eq!(
        text(&h.intent_name),
        want["intent_name"].as_str().unwrap(),
        "{what}"
    );
    assert_eq!(
        w.xyzt_units as i64,
        want["xyzt_units"].as_i64().unwrap(),
        "{what}"
    );
    assert_eq!(
        (w.slice_code as i64, w.slice_start, w.slice_end),
        (
            want["slice_code"].as_i64().unwrap(),
            want["slice_start"].as_i64().unwrap(),
            want["slice_end"].as_i64().unwrap()
        ),
        "{what}"
    );
    assert_eq!(
        (w.slice_duration, w.toffset, w.cal_min, w.cal_max),
        (
            num(&want["slice_duration"]),
            num(&want["toffset"]),
            num(&want["cal_min"]),
            num(&want["cal_max"])
        ),
        "{what}"
    );
    assert_eq!(
        h.dim_info as i64,
        want["dim_info"].as_i64().unwrap(),
        "{what}"
    );
    assert_eq!(
        text(&h.descrip),
        want["descrip"].as_str().unwrap(),
        "{what}"
    );
    assert_eq!(
        text(&h.aux_file),
        want["aux_file"].as_str().unwrap(),
        "{what}"
    );
}

/// Reads an expected case: shape, channels, dtype, values, affine and spacing.
fn assert_matches(v: &Volume, want: &Value, what: &str) {
    let shape: Vec<usize> = i64s(&want["shape"]).iter().map(|&d| d as usize).collect();
    assert_eq!(v.shape, shape, "{what}");
    assert_eq!(
        v.channels,
        want["channels"].as_u64().unwrap() as usize,
        "{what}"
    );
    assert_eq!(v.dtype.name(), want["dtype"].as_str().unwrap(), "{what}");
    let values: Vec<f32> = f64s(&want["values"]).iter().map(|&x| x as f32).collect();
    assert_same_data(&v.data, &values, what);
    // sform: nibabel's float64 rows as they are; qform: the same formulas in float64.
    assert_affine(&v.world_from_voxel, &matrix(&want["affine"]), 1e-12, what);
    assert_eq!(v.spacing_mm, f64s(&want["spacing_mm"]), "{what}");
}

// ---------------------------------------------------------------------------------------------
// Reading
// ---------------------------------------------------------------------------------------------

/// Every fixture reads as nibabel reads it: int16 scaled by float64 slope/intercept with an
/// oblique float64 sform, 4D float32 with a qform only (qfac -1), big-endian int32, gzip 2D
/// float64 with neither xform code; and the NIfTI-2 header's fields are kept at full width.
#[test]
fn nifti2_fixtures_match_nibabel() {
    let cases = expected();
    assert_eq!(cases.len(), FIXTURES.len());
    for name in FIXTURES {
        let want = &cases[name];
        let v = load(&fixture(name));
        assert_matches(&v, want, name);
        assert_header_fields(&v, &want["header"], name);
        let h = v.nifti_header.as_deref().unwrap();
        let big = h.endianness == ::nifti::Endianness::Big;
        assert_eq!(big, want["big_endian"].as_bool().unwrap(), "{name}");
        assert_eq!(nifti2(&v).vox_offset, 544, "{name}");
    }
}

/// The NIfTI-1 header kept beside the wide fields holds them narrowed: what code that only knows
/// NIfTI-1 headers sees.
#[test]
fn nifti2_header_is_kept_narrowed_in_the_nifti1_header() {
    let v = load(&fixture("i16_scaled.nii"));
    let h = v.nifti_header.as_deref().unwrap();
    let w = nifti2(&v);
    assert_eq!(h.dim, [3, 4, 3, 2, 1, 1, 1, 1]);
    assert_eq!(h.datatype, 4);
    assert_eq!(h.scl_slope, 0.1f32);
    assert_eq!(h.srow_x, w.srow[0].map(|x| x as f32));
    assert_eq!(h.sform_code, 2);
    assert_eq!(h.intent_code, 3);
    assert_eq!(h.vox_offset, 544.0);
}

// ---------------------------------------------------------------------------------------------
// Writing
// ---------------------------------------------------------------------------------------------

fn header_bytes(p: &Path) -> Vec<u8> {
    let raw = std::fs::read(p).unwrap();
    if raw.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&raw[..]), &mut out).unwrap();
        out
    } else {
        raw
    }
}

/// What nibabel reads from `path`: the class, values in augscope's order, affine, zooms and the
/// header fields, as JSON; `None` (test skipped) when python3 or nibabel is missing.
fn nibabel_reads(path: &Path) -> Option<Value> {
    let script = r#"
import io, json, sys
import nibabel as nib
import numpy as np
p = sys.argv[1]
img = nib.load(p)
raw = open(p, "rb").read()
if raw[:2] == b"\x1f\x8b":
    import gzip
    raw = gzip.decompress(raw)
h = nib.Nifti2Header.from_fileobj(io.BytesIO(raw), check=False) if isinstance(img, nib.Nifti2Image) else img.header
f = lambda x: repr(float(x))
d = img.get_fdata(dtype=np.float64)
arr = np.stack([d[..., t].T for t in range(d.shape[3])]) if d.ndim == 4 else d.T
out = {
    "class": type(img).__name__,
    "values": [f(v) for v in arr.astype(np.float32).ravel()],
    "affine": [[f(v) for v in row] for row in img.affine],
    "dtype": str(img.get_data_dtype().newbyteorder("=")),
    "dim": [int(x) for x in h["dim"]],
    "pixdim": [f(x) for x in h["pixdim"]],
    "scl": [f(h["scl_slope"]), f(h["scl_inter"])],
    "codes": [int(h["qform_code"]), int(h["sform_code"])],
    "srow": [[f(v) for v in h[k]] for k in ("srow_x", "srow_y", "srow_z")],
    "intent_code": int(h["intent_code"]),
    "xyzt_units": int(h["xyzt_units"]),
    "cal": [f(h["cal_min"]), f(h["cal_max"])],
    "descrip": h["descrip"].item().decode(),
}
print(json.dumps(out))
"#;
    let o = match Command::new("python3")
        .args(["-c", script])
        .arg(path)
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            common::skipped(&format!("python3 is not available ({e})"));
            return None;
        }
    };
    if !o.status.success() {
        let err = String::from_utf8_lossy(&o.stderr);
        if err.contains("No module named") {
            common::skipped(&format!("nibabel is not available ({})", err.trim()));
            return None;
        }
        panic!("nibabel could not read {}: {err}", path.display());
    }
    Some(serde_json::from_slice(&o.stdout).unwrap())
}

/// A volume read from NIfTI-2 is written back as NIfTI-2 (540-byte header, voxels from 544,
/// little-endian) with every field, in its own type and in float32, .nii and .nii.gz; re-read
/// here it is the same volume, and nibabel reads it as a `Nifti2Image` with the same values,
/// affine and header fields as the original.
#[test]
fn nifti2_round_trip_stays_nifti2_with_every_field() {
    let cases = expected();
    let dir = tempfile::tempdir().unwrap();
    for name in FIXTURES {
        let want = &cases[name];
        let src = load(&fixture(name));
        for (opts, tag) in [(KEEP, "keep"), (F32, "f32")] {
            for ext in ["nii", "nii.gz"] {
                let what = format!("{name} -> {tag}.{ext}");
                let p = dir.path().join(format!("{name}.{tag}.{ext}"));
                io::save(&p, &src, &opts).unwrap();
                let b = header_bytes(&p);
                assert_eq!(&b[0..4], &540i32.to_le_bytes(), "{what}");
                assert_eq!(&b[4..12], b"n+2\0\r\n\x1a\n", "{what}");
                assert_eq!(&b[168..176], &544i64.to_le_bytes(), "{what}");
                assert_eq!(&b[540..544], &[0u8; 4], "{what}");

                let back = load(&p);
                assert_eq!(back.shape, src.shape, "{what}");
                assert_eq!(back.channels, src.channels, "{what}");
                assert_eq!(back.spacing_mm, src.spacing_mm, "{what}");
                assert_same_data(&back.data, &src.data, &what);
                assert_affine(
                    &back.world_from_voxel,
                    &affine_rows(&src.world_from_voxel),
                    0.0,
                    &what,
                );
                let (w, w0) = (nifti2(&back), nifti2(&src));
                if tag == "keep" {
                    assert_eq!(back.dtype, src.dtype, "{what}");
                    let mut same = w0.clone();
                    same.vox_offset = 544;
                    assert_eq!(w, &same, "{what}");
                    assert_header_fields(&back, &want["header"], &what);
                } else {
                    assert_eq!(back.dtype.name(), "float32", "{what}");
                    assert_eq!((w.datatype, w.bitpix), (16, 32), "{what}");
                    assert_eq!((w.scl_slope, w.scl_inter), (1.0, 0.0), "{what}");
                    assert_eq!(
                        (w.srow, w.quatern, w.qoffset),
                        (w0.srow, w0.quatern, w0.qoffset)
                    );
                    assert_eq!(
                        (w.intent_code, w.xyzt_units, w.cal_min, w.cal_max),
                        (w0.intent_code, w0.xyzt_units, w0.cal_min, w0.cal_max),
                        "{what}"
                    );
                }

                let Some(nib) = nibabel_reads(&p) else {
                    continue;
                };
                assert_eq!(nib["class"], "Nifti2Image", "{what}");
                let values: Vec<f32> = f64s(&nib["values"]).iter().map(|&x| x as f32).collect();
                let orig: Vec<f32> = f64s(&want["values"]).iter().map(|&x| x as f32).collect();
                assert_same_data(&values, &orig, &what);
                assert_eq!(matrix(&nib["affine"]), matrix(&want["affine"]), "{what}");
                let wh = &want["header"];
                assert_eq!(nib["dim"], wh["dim"], "{what}");
                assert_eq!(nib["pixdim"], wh["pixdim"], "{what}");
                assert_eq!(nib["srow"], wh["srow"], "{what}");
                assert_eq!(
                    nib["codes"],
                    serde_json::json!([wh["qform_code"], wh["sform_code"]]),
                    "{what}"
                );
                assert_eq!(nib["intent_code"], wh["intent_code"], "{what}");
                assert_eq!(nib["xyzt_units"], wh["xyzt_units"], "{what}");
                assert_eq!(
                    nib["cal"],
                    serde_json::json!([wh["cal_min"], wh["cal_max"]]),
                    "{what}"
                );
                assert_eq!(nib["descrip"], wh["descrip"], "{what}");
                if tag == "keep" {
                    assert_eq!(nib["dtype"], want["dtype"], "{what}");
                    assert_eq!(
                        nib["scl"],
                        serde_json::json!([wh["scl_slope"], wh["scl_inter"]]),
                        "{what}"
                    );
                }
            }
        }
    }
}

/// A changed affine is written into the NIfTI-2 sform at full float64 precision (the qform,
/// which no longer agrees, switched off), as the NIfTI-1 writer does in float32.
#[test]
fn nifti2_changed_affine_goes_to_the_sform_in_float64() {
    let dir = tempfile::tempdir().unwrap();
    let mut v = load(&fixture("f32_4d.nii"));
    v.world_from_voxel[0][3] = 1.0 / 3.0;
    v.world_from_voxel[1][1] = std::f64::consts::PI;
    let p = dir.path().join("moved.nii");
    io::save(&p, &v, &KEEP).unwrap();
    let back = load(&p);
    assert_affine(
        &back.world_from_voxel,
        &affine_rows(&v.world_from_voxel),
        0.0,
        "moved",
    );
    let w = nifti2(&back);
    assert_eq!((w.qform_code, w.sform_code), (0, 1));
}

/// NIfTI-1 dims are 16-bit: a volume with an axis longer than 32767 is written as NIfTI-2
/// (nibabel reads it as a `Nifti2Image` of that shape), one of 32767 stays NIfTI-1, and so does
/// a NIfTI-1 input.
#[test]
fn long_axis_is_written_as_nifti2_and_short_ones_stay_nifti1() {
    let dir = tempfile::tempdir().unwrap();
    let data: Vec<f32> = (0..2 * 40000).map(|i| (i % 251) as f32).collect();
    let long = Volume::new(data, vec![2, 40000], 1);
    let p = dir.path().join("long.nii.gz");
    io::save(&p, &long, &F32).unwrap();
    let b = header_bytes(&p);
    assert_eq!(&b[0..4], &540i32.to_le_bytes());
    let back = load(&p);
    assert_eq!(back.shape, vec![2, 40000]);
    assert_same_data(&back.data, &long.data, "long");
    assert_affine(
        &back.world_from_voxel,
        &affine_rows(&long.world_from_voxel),
        0.0,
        "long",
    );
    assert_eq!(nifti2(&back).dim[..3], [2, 40000, 2]);
    if let Some(nib) = nibabel_reads(&p) {
        assert_eq!(nib["class"], "Nifti2Image");
        assert_eq!(i64s(&nib["dim"])[..3], [2, 40000, 2]);
        let values: Vec<f32> = f64s(&nib["values"]).iter().map(|&x| x as f32).collect();
        assert_same_data(&values, &long.data, "long (nibabel)");
        assert_eq!(
            matrix(&nib["affine"]),
            affine_rows(&long.world_from_voxel),
            "long"
        );
    }

    // Many channels (a 4th axis longer than 32767) need NIfTI-2 too.
    let many = Volume::new(vec![1.5; 40000], vec![1, 1, 1], 40000);
    let p = dir.path().join("channels.nii");
    io::save(&p, &many, &F32).unwrap();
    assert_eq!(&header_bytes(&p)[0..4], &540i32.to_le_bytes());
    let back = load(&p);
    assert_eq!((back.channels, back.shape.clone()), (40000, vec![1, 1, 1]));

    let edge = Volume::new(vec![0.0; 32767], vec![1, 32767], 1);
    let p = dir.path().join("edge.nii");
    io::save(&p, &edge, &F32).unwrap();
    assert_eq!(&header_bytes(&p)[0..4], &348i32.to_le_bytes());
    assert!(load(&p).nifti2.is_none());

    let anat = common::fixtures::data("anatomical.nii");
    let v1 = load(&anat);
    assert!(v1.nifti2.is_none());
    let p = dir.path().join("anat.nii");
    io::save(&p, &v1, &KEEP).unwrap();
    assert_eq!(&header_bytes(&p)[0..4], &348i32.to_le_bytes());
}

// ---------------------------------------------------------------------------------------------
// Hostile input
// ---------------------------------------------------------------------------------------------

/// A little-endian NIfTI-2 header built field by field (not by our writer), plus 4 zero bytes.
fn raw2(dim: [i64; 8], datatype: i16, bitpix: i16) -> Vec<u8> {
    let mut h = vec![0u8; 544];
    h[0..4].copy_from_slice(&540i32.to_le_bytes());
    h[4..12].copy_from_slice(b"n+2\0\r\n\x1a\n");
    h[12..14].copy_from_slice(&datatype.to_le_bytes());
    h[14..16].copy_from_slice(&bitpix.to_le_bytes());
    for (i, d) in dim.iter().enumerate() {
        put_i64(&mut h, 16 + 8 * i, *d);
    }
    for i in 0..8 {
        put_f64(&mut h, 104 + 8 * i, 1.0);
    }
    put_i64(&mut h, 168, 544); // vox_offset
    put_f64(&mut h, 176, 1.0); // scl_slope
    h
}
fn put_i64(b: &mut [u8], off: usize, v: i64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}
fn put_f64(b: &mut [u8], off: usize, v: f64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}
fn gz(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).expect("gzip into memory");
    e.finish().expect("gzip into memory")
}

/// The read fails with one line that names the problem and the path.
fn assert_err(p: &Path, needle: &str) {
    let msg = match nifti::read(p) {
        Ok(v) => panic!("{} loaded as {v:?}, expected '{needle}'", p.display()),
        Err(e) => e.to_string(),
    };
    assert!(!msg.contains('\n'), "one line: {msg}");
    assert!(
        msg.contains(&p.display().to_string()),
        "names the path: {msg}"
    );
    assert!(
        msg.to_lowercase().contains(&needle.to_lowercase()),
        "expected '{needle}' in: {msg}"
    );
}

#[test]
fn hostile_nifti2_files_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let ok_dim = [3, 4, 3, 2, 1, 1, 1, 1];
    let valid = || {
        let mut b = raw2(ok_dim, 4, 16);
        b.extend((0..24i16).flat_map(|v| v.to_le_bytes()));
        b
    };
    // The valid file itself loads (so that each case below fails for its own reason), in both
    // byte orders.
    let p = dir.path().join("valid.nii");
    std::fs::write(&p, valid()).unwrap();
    let want: Vec<f32> = (0..24).map(|v| v as f32).collect();
    assert_eq!(load(&p).data, want);

    let with = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut b = valid();
        f(&mut b);
        b
    };
    let voxels_2_40 = [3, 1 << 14, 1 << 13, 1 << 13, 1, 1, 1, 1];
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "truncated_header.nii",
            valid()[..400].to_vec(),
            "truncated NIfTI-2 header",
        ),
        (
            "header_only_nifti1_length.nii",
            valid()[..348].to_vec(),
            "truncated NIfTI-2 header",
        ),
        ("huge_dims.nii", raw2(voxels_2_40, 4, 16), "truncated data"),
        (
            "negative_vox_offset.nii",
            with(&|b| put_i64(b, 168, -544)),
            "vox_offset -544 is not a byte offset",
        ),
        (
            "vox_offset_in_header.nii",
            with(&|b| put_i64(b, 168, 352)),
            "inside the header",
        ),
        (
            "vox_offset_far.nii",
            with(&|b| put_i64(b, 168, 1 << 62)),
            "beyond the end of the file",
        ),
        (
            "vox_offset_max.nii",
            with(&|b| put_i64(b, 168, i64::MAX)),
            "beyond the end of the file",
        ),
        (
            "negative_dim.nii",
            with(&|b| put_i64(b, 24, -3)),
            "negative",
        ),
        (
            "min_dim.nii",
            with(&|b| put_i64(b, 32, i64::MIN)),
            "negative",
        ),
        ("zero_axis.nii", with(&|b| put_i64(b, 24, 0)), "empty axis"),
        (
            "dims_overflow.nii",
            raw2([3, i64::MAX, i64::MAX, 2, 1, 1, 1, 1], 4, 16),
            "too large",
        ),
        (
            "bytes_overflow.nii",
            raw2([4, 1 << 31, 1 << 31, 1, 8, 1, 1, 1], 64, 64),
            "overflows",
        ),
        (
            "dim0_huge.nii",
            with(&|b| put_i64(b, 16, 1 << 40)),
            "dim[0]",
        ),
        ("dim0_negative.nii", with(&|b| put_i64(b, 16, -1)), "dim[0]"),
        (
            "bad_magic.nii",
            with(&|b| b[4..8].copy_from_slice(b"n+1\0")),
            "NIfTI-2 magic",
        ),
        (
            "pair.nii",
            with(&|b| b[4..8].copy_from_slice(b"ni2\0")),
            ".hdr/.img",
        ),
        (
            "text_mode.nii",
            with(&|b| b[8..12].copy_from_slice(b"\n\n\x1a\n")),
            "text-mode",
        ),
        (
            "nan_pixdim.nii",
            with(&|b| put_f64(b, 112, f64::NAN)),
            "pixdim[1]",
        ),
        (
            "bad_datatype.nii",
            with(&|b| b[12..14].copy_from_slice(&32i16.to_le_bytes())),
            "complex64",
        ),
        (
            "nan_inter.nii",
            with(&|b| {
                put_f64(b, 176, 2.0);
                put_f64(b, 184, f64::INFINITY);
            }),
            "scl_inter",
        ),
        (
            "bad_quaternion.nii",
            with(&|b| {
                b[344..348].copy_from_slice(&1i32.to_le_bytes());
                put_f64(b, 352, 1.0);
                put_f64(b, 360, 1.0);
            }),
            "unit quaternion",
        ),
        (
            "inf_sform.nii",
            with(&|b| {
                b[348..352].copy_from_slice(&1i32.to_le_bytes());
                put_f64(b, 400, f64::INFINITY);
            }),
            "infinite",
        ),
        (
            "truncated_data.nii",
            valid()[..544 + 30].to_vec(),
            "truncated data",
        ),
    ];
    for (name, bytes, needle) in &cases {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        assert_err(&p, needle);
        // The same bytes through gzip: the size is not known before decompressing, so lies about
        // it are caught while streaming, without allocating what the header claims.
        let pz = dir.path().join(format!("{name}.gz"));
        std::fs::write(&pz, gz(bytes)).unwrap();
        let gz_needle = match *needle {
            "beyond the end of the file" => "beyond the end of the data",
            n => n,
        };
        assert_err(&pz, gz_needle);
    }

    // Big-endian: the same header with every field swapped reads the same values; a truncated
    // big-endian header is an error too.
    let mut be = vec![0u8; 544];
    be[0..4].copy_from_slice(&540i32.to_be_bytes());
    be[4..12].copy_from_slice(b"n+2\0\r\n\x1a\n");
    be[12..14].copy_from_slice(&4i16.to_be_bytes());
    be[14..16].copy_from_slice(&16i16.to_be_bytes());
    for (i, d) in ok_dim.iter().enumerate() {
        be[16 + 8 * i..24 + 8 * i].copy_from_slice(&d.to_be_bytes());
    }
    for i in 0..8 {
        be[104 + 8 * i..112 + 8 * i].copy_from_slice(&1.0f64.to_be_bytes());
    }
    be[168..176].copy_from_slice(&544i64.to_be_bytes());
    be.extend((0..24i16).flat_map(|v| v.to_be_bytes()));
    let p = dir.path().join("be.nii");
    std::fs::write(&p, &be).unwrap();
    assert_eq!(load(&p).data, want);
    let p = dir.path().join("be_truncated.nii");
    std::fs::write(&p, &be[..500]).unwrap();
    assert_err(&p, "truncated NIfTI-2 header");
    let p = dir.path().join("be_negative_offset.nii");
    let mut b = be.clone();
    b[168..176].copy_from_slice(&(-1i64).to_be_bytes());
    std::fs::write(&p, &b).unwrap();
    assert_err(&p, "vox_offset -1 is not a byte offset");
}

/// vox_offset 0 (what some writers leave) means the data follow the header and extension flag,
/// as for NIfTI-1; a vox_offset past an extension skips it.
#[test]
fn nifti2_vox_offset_zero_and_extensions() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = raw2([2, 3, 2, 1, 1, 1, 1, 1], 2, 8);
    put_i64(&mut b, 168, 0);
    b.extend([1u8, 2, 3, 4, 5, 6]);
    let p = dir.path().join("zero.nii");
    std::fs::write(&p, &b).unwrap();
    assert_eq!(load(&p).data, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);

    let mut b = raw2([2, 3, 2, 1, 1, 1, 1, 1], 2, 8);
    put_i64(&mut b, 168, 560);
    b[540] = 1; // an extension follows
    b.extend([0u8; 16]);
    b.extend([6u8, 5, 4, 3, 2, 1]);
    let p = dir.path().join("ext.nii");
    std::fs::write(&p, &b).unwrap();
    assert_eq!(load(&p).data, vec![6.0, 5.0, 4.0, 3.0, 2.0, 1.0]);
}
