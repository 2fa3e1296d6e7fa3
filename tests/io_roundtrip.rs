//! NIfTI and 2D image I/O against nibabel and PIL: real scans, generated fixtures, round trips
//! through our writer, and hostile files that must give one-line errors naming the path.
//!
//! Expected values come from nibabel 5.3 / Pillow 13 (the python command sits above each block);
//! the small fixtures in `tests/data/io/` and their expected values are made by
//! `tests/data/make_io_fixtures.py`. Arrays are `[z, y, x]`; NIfTI / nibabel index `(i, j, k)`.

use std::io::Write;
use std::path::{Path, PathBuf};

use augscope::io::{self, IoError, LoadOptions, SaveOptions, nifti};
use augscope::{DType, Volume};

mod common;
use common::fixtures::{data, load_volume as load, root};

fn fixture(name: &str) -> PathBuf {
    data("io").join(name)
}
fn mni() -> PathBuf {
    root().join("assets/mni152_t1.nii.gz")
}
const KEEP: SaveOptions = SaveOptions { keep_dtype: true };
const F32: SaveOptions = SaveOptions { keep_dtype: false };

/// The value at nibabel index `data[i, j, k]` (or `data[i, j, k, c]`).
fn at(v: &Volume, [i, j, k]: [usize; 3], c: usize) -> f32 {
    let (nz, ny, nx) = (v.shape[0], v.shape[1], v.shape[2]);
    assert!(i < nx && j < ny && k < nz);
    v.data[((c * nz + k) * ny + j) * nx + i]
}

fn header(v: &Volume) -> &::nifti::NiftiHeader {
    v.nifti_header
        .as_deref()
        .expect("a NIfTI volume keeps its header")
}

fn assert_affine(got: &[[f64; 4]; 4], want: &[[f64; 4]; 4], tol: f64) {
    for r in 0..4 {
        for c in 0..4 {
            assert!(
                (got[r][c] - want[r][c]).abs() <= tol,
                "affine[{r}][{c}]: got {got:?}, want {want:?}"
            );
        }
    }
}

/// Same values, NaN equal to NaN, exact.
fn assert_same_data(got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len());
    for (n, (a, b)) in got.iter().zip(want).enumerate() {
        assert!(
            a == b || (a.is_nan() && b.is_nan()),
            "value {n}: got {a}, want {b}"
        );
    }
}

fn sum(v: &[f32]) -> f64 {
    v.iter().map(|&x| x as f64).sum()
}

/// The header fields a written file must carry over from its input.
fn assert_same_geometry(got: &::nifti::NiftiHeader, want: &::nifti::NiftiHeader) {
    assert_eq!(got.dim, want.dim);
    assert_eq!(got.pixdim, want.pixdim);
    assert_eq!(
        (got.sform_code, got.qform_code),
        (want.sform_code, want.qform_code)
    );
    assert_eq!(
        (got.srow_x, got.srow_y, got.srow_z),
        (want.srow_x, want.srow_y, want.srow_z)
    );
    assert_eq!(
        [
            got.quatern_b,
            got.quatern_c,
            got.quatern_d,
            got.quatern_x,
            got.quatern_y,
            got.quatern_z
        ],
        [
            want.quatern_b,
            want.quatern_c,
            want.quatern_d,
            want.quatern_x,
            want.quatern_y,
            want.quatern_z
        ]
    );
    assert_eq!(got.xyzt_units, want.xyzt_units);
    assert_eq!(got.descrip, want.descrip);
    assert_eq!(
        (got.intent_code, got.intent_name),
        (want.intent_code, want.intent_name)
    );
    assert_eq!((got.cal_min, got.cal_max), (want.cal_min, want.cal_max));
    assert_eq!(
        (got.dim_info, got.slice_code, got.regular),
        (want.dim_info, want.slice_code, want.regular)
    );
    assert_eq!(got.aux_file, want.aux_file);
}

// ---------------------------------------------------------------------------------------------
// Real scans against nibabel and PIL
// ---------------------------------------------------------------------------------------------

#[test]
fn mni152_matches_nibabel() {
    let v = load(&mni());
    // python3 -c "import nibabel as nib; i = nib.load('assets/mni152_t1.nii.gz');
    //   print(i.shape, i.get_data_dtype(), i.header.get_zooms(), i.affine)"
    // (197, 233, 189) uint8 (1.0, 1.0, 1.0) [[1,0,0,-98],[0,1,0,-134],[0,0,1,-72],[0,0,0,1]]
    assert_eq!(v.shape, vec![189, 233, 197]);
    assert_eq!(v.channels, 1);
    assert_eq!(v.dtype, DType::U8);
    assert_eq!(v.spacing_mm, vec![1.0, 1.0, 1.0]);
    let want = [
        [1.0, 0.0, 0.0, -98.0],
        [0.0, 1.0, 0.0, -134.0],
        [0.0, 0.0, 1.0, -72.0],
        [0.0, 0.0, 0.0, 1.0],
    ];
    assert_affine(&v.world_from_voxel, &want, 0.0);
    // d = nib.load('assets/mni152_t1.nii.gz').get_fdata()
    // [d[p] for p in [(98,134,72), (60,100,90), (150,120,50), (196,232,188), (98,159,70)]], d.sum()
    // -> [71.0, 171.0, 217.0, 0.0, 255.0 (the argmax)], 333468829.0
    assert_eq!(at(&v, [98, 134, 72], 0), 71.0);
    assert_eq!(at(&v, [60, 100, 90], 0), 171.0);
    assert_eq!(at(&v, [150, 120, 50], 0), 217.0);
    assert_eq!(at(&v, [196, 232, 188], 0), 0.0);
    assert_eq!(at(&v, [98, 159, 70], 0), 255.0);
    assert_eq!(sum(&v.data), 333468829.0);
    // h = nib.Nifti1Header.from_fileobj(gzip.open('assets/mni152_t1.nii.gz'), check=False)
    // dim [3 197 233 189 1 1 1 1], pixdim [1]*8, datatype 2, bitpix 8, sform_code 2,
    // qform_code 0, srow_x [1 0 0 -98], srow_y [0 1 0 -134], srow_z [0 0 1 -72], quatern 0 0 0,
    // qoffset -98 -134 -72, scl_slope 1, scl_inter 0, vox_offset 352, xyzt_units 0, endianness <
    let h = header(&v);
    assert_eq!(h.dim, [3, 197, 233, 189, 1, 1, 1, 1]);
    assert_eq!(h.pixdim, [1.0; 8]);
    assert_eq!((h.datatype, h.bitpix), (2, 8));
    assert_eq!((h.sform_code, h.qform_code), (2, 0));
    assert_eq!(h.srow_x, [1.0, 0.0, 0.0, -98.0]);
    assert_eq!(h.srow_y, [0.0, 1.0, 0.0, -134.0]);
    assert_eq!(h.srow_z, [0.0, 0.0, 1.0, -72.0]);
    assert_eq!([h.quatern_b, h.quatern_c, h.quatern_d], [0.0; 3]);
    assert_eq!(
        [h.quatern_x, h.quatern_y, h.quatern_z],
        [-98.0, -134.0, -72.0]
    );
    assert_eq!((h.scl_slope, h.scl_inter, h.vox_offset), (1.0, 0.0, 352.0));
    assert_eq!(h.xyzt_units, 0);
    assert_eq!(h.endianness, ::nifti::Endianness::Little);
}

#[test]
fn anatomical_big_endian_matches_nibabel() {
    let v = load(&data("anatomical.nii"));
    // python3 -c "import nibabel as nib; i = nib.load('tests/data/anatomical.nii');
    //   print(i.shape, i.get_data_dtype(), i.header.get_zooms(), i.affine)"
    // (33, 41, 25) >i2 (2.0, 2.0, 2.0) [[-2,0,0,32],[0,2,0,-40],[0,0,2,-16],[0,0,0,1]]
    assert_eq!(v.shape, vec![25, 41, 33]);
    assert_eq!(v.dtype, DType::I16);
    assert_eq!(v.spacing_mm, vec![2.0, 2.0, 2.0]);
    let want = [
        [-2.0, 0.0, 0.0, 32.0],
        [0.0, 2.0, 0.0, -40.0],
        [0.0, 0.0, 2.0, -16.0],
        [0.0, 0.0, 0.0, 1.0],
    ];
    assert_affine(&v.world_from_voxel, &want, 0.0);
    // d = nib.load('tests/data/anatomical.nii').get_fdata()
    // [d[p] for p in [(16,20,12), (10,30,5), (0,0,0), (32,40,24), (17,23,0), (24,32,14)]], d.sum()
    // -> [11881.0, 6777.0, 10712.0, 2971.0, 30393.0 (max), -610.0 (min)], 284166082.0
    assert_eq!(at(&v, [16, 20, 12], 0), 11881.0);
    assert_eq!(at(&v, [10, 30, 5], 0), 6777.0);
    assert_eq!(at(&v, [0, 0, 0], 0), 10712.0);
    assert_eq!(at(&v, [32, 40, 24], 0), 2971.0);
    assert_eq!(at(&v, [17, 23, 0], 0), 30393.0);
    assert_eq!(at(&v, [24, 32, 14], 0), -610.0);
    assert_eq!(sum(&v.data), 284166082.0);
    // h = nib.Nifti1Header.from_fileobj(open('tests/data/anatomical.nii','rb'), check=False)
    // endianness '>', dim [3 33 41 25 1 1 1 1], pixdim [-1 2 2 2 0 0 0 0], datatype 4,
    // bitpix 16, sform_code 2, qform_code 2, srow_x [-2 0 0 32], srow_y [0 2 0 -40],
    // srow_z [0 0 2 -16], quatern_b/c/d 0 1 0, qoffset 32 -40 -16, xyzt_units 10,
    // descrip b'spm - 3D normalized', regular b'r', scl_slope 1, scl_inter 0
    let h = header(&v);
    assert_eq!(h.endianness, ::nifti::Endianness::Big);
    assert_eq!(h.dim, [3, 33, 41, 25, 1, 1, 1, 1]);
    assert_eq!(h.pixdim, [-1.0, 2.0, 2.0, 2.0, 0.0, 0.0, 0.0, 0.0]);
    assert_eq!((h.datatype, h.bitpix), (4, 16));
    assert_eq!((h.sform_code, h.qform_code), (2, 2));
    assert_eq!(h.srow_x, [-2.0, 0.0, 0.0, 32.0]);
    assert_eq!(h.srow_y, [0.0, 2.0, 0.0, -40.0]);
    assert_eq!(h.srow_z, [0.0, 0.0, 2.0, -16.0]);
    assert_eq!([h.quatern_b, h.quatern_c, h.quatern_d], [0.0, 1.0, 0.0]);
    assert_eq!(
        [h.quatern_x, h.quatern_y, h.quatern_z],
        [32.0, -40.0, -16.0]
    );
    assert_eq!(h.xyzt_units, 10);
    assert_eq!(&h.descrip[..19], b"spm - 3D normalized");
    assert_eq!(h.regular, b'r');
    assert_eq!((h.scl_slope, h.scl_inter), (1.0, 0.0));

    // The qform alone (qfac = -1) gives the same matrix:
    // nib.load('tests/data/anatomical.nii').header.get_qform() -> the affine above.
    let mut q = h.clone();
    q.sform_code = 0;
    assert_affine(&nifti::world_from_voxel(&q).unwrap(), &want, 1e-12);
    // With neither code, nibabel's get_base_affine (x flipped, centred on the middle voxel):
    // h['qform_code'] = 0; h['sform_code'] = 0; h.get_base_affine()
    // -> [[-2,0,0,32],[0,2,0,-40],[0,0,2,-24],[0,0,0,1]]
    q.qform_code = 0;
    let base = [
        [-2.0, 0.0, 0.0, 32.0],
        [0.0, 2.0, 0.0, -40.0],
        [0.0, 0.0, 2.0, -24.0],
        [0.0, 0.0, 0.0, 1.0],
    ];
    assert_affine(&nifti::world_from_voxel(&q).unwrap(), &base, 1e-12);
}

#[test]
fn retina_jpeg_matches_pil() {
    let v = load(&data("retina.jpg"));
    // python3 -c "import numpy as np; from PIL import Image; im = Image.open('tests/data/retina.jpg');
    //   a = np.asarray(im); print(im.mode, a.shape, a.dtype, a[0,0], a[705,705], a[300,900],
    //   a[1000,400], a.reshape(-1,3).mean(0))"
    // RGB (1411, 1411, 3) uint8 [0 0 0] [187 46 26] [208 82 59] [233 107 85]
    // [159.43351444  63.54503418  46.11541945]
    assert_eq!(v.shape, vec![1411, 1411]);
    assert_eq!(v.channels, 3);
    assert_eq!(v.dtype, DType::U8);
    assert_eq!(v.spacing_mm, vec![1.0, 1.0]);
    assert_affine(
        &v.world_from_voxel,
        &augscope::core::volume::identity4(),
        0.0,
    );
    let n = 1411 * 1411;
    let px = |y: usize, x: usize| [0, 1, 2].map(|c| v.data[c * n + y * 1411 + x]);
    assert_eq!(px(0, 0), [0.0, 0.0, 0.0]);
    // The file is 4:2:0 subsampled; zune-jpeg and libjpeg-turbo upsample chroma slightly
    // differently (max |diff| 4, mean 0.08 over the image), so PIL's values hold to a few units.
    for ((y, x), want) in [
        ((705, 705), [187.0, 46.0, 26.0]),
        ((300, 900), [208.0, 82.0, 59.0]),
        ((1000, 400), [233.0, 107.0, 85.0]),
    ] {
        let got = px(y, x);
        for c in 0..3 {
            assert!(
                (got[c] - want[c]).abs() <= 4.0,
                "pixel ({y},{x}): got {got:?}, PIL {want:?}"
            );
        }
    }
    for (c, want) in [159.43351444, 63.54503418, 46.11541945]
        .into_iter()
        .enumerate()
    {
        let mean = sum(&v.data[c * n..(c + 1) * n]) / n as f64;
        assert!(
            (mean - want).abs() < 0.15,
            "channel {c} mean {mean}, PIL {want}"
        );
    }
}

/// Every fixture made by `tests/data/make_io_fixtures.py` reads as nibabel / PIL read it: u8 with
/// a rotated sform, 2D int8 with no xform codes, 4D uint16 gzip with a qform only (rotation,
/// qfac -1), big-endian scaled int16, int32 / uint32 beyond 2^24, float64 gzip, float32 with NaN
/// and infinities, RGB24, and gray / RGBA PNGs and TIFFs.
#[test]
fn fixtures_match_nibabel_and_pil() {
    let text = std::fs::read_to_string(fixture("expected.json")).unwrap();
    let expected: serde_json::Value = serde_json::from_str(&text).unwrap();
    let cases = expected.as_object().unwrap();
    assert!(cases.len() >= 14);
    for (name, want) in cases {
        let v = load(&fixture(name));
        let ints = |k: &str| -> Vec<usize> {
            want[k]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap() as usize)
                .collect()
        };
        assert_eq!(v.shape, ints("shape"), "{name}");
        assert_eq!(
            v.channels,
            want["channels"].as_u64().unwrap() as usize,
            "{name}"
        );
        assert_eq!(v.dtype.name(), want["dtype"].as_str().unwrap(), "{name}");
        let exp = io::npy::read(&fixture(&format!("{name}.expected.npy"))).unwrap();
        assert_same_data(&v.data, &exp.data);
        if let Some(aff) = want.get("affine") {
            let mut m = [[0.0; 4]; 4];
            for (r, row) in aff.as_array().unwrap().iter().enumerate() {
                for (c, x) in row.as_array().unwrap().iter().enumerate() {
                    m[r][c] = x.as_f64().unwrap();
                }
            }
            assert_affine(&v.world_from_voxel, &m, 1e-6);
            let sp: Vec<f64> = want["spacing_mm"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap())
                .collect();
            assert_eq!(v.spacing_mm, sp, "{name}");
            let h = header(&v);
            assert_eq!(
                h.datatype as i64,
                want["datatype"].as_i64().unwrap(),
                "{name}"
            );
            let big = h.endianness == ::nifti::Endianness::Big;
            assert_eq!(big, want["big_endian"].as_bool().unwrap(), "{name}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Round trips through our writer
// ---------------------------------------------------------------------------------------------

#[test]
fn round_trip_float32_nii_and_gz() {
    let dir = tempfile::tempdir().unwrap();
    let src = load(&data("anatomical.nii"));
    for name in ["anat.nii", "anat.nii.gz"] {
        let p = dir.path().join(name);
        io::save(&p, &src, &F32).unwrap();
        let back = load(&p);
        assert_eq!(back.shape, src.shape);
        assert_eq!(back.dtype, DType::F32);
        assert_eq!(back.spacing_mm, src.spacing_mm);
        assert_same_data(&back.data, &src.data);
        assert_affine(&back.world_from_voxel, &src.world_from_voxel, 0.0);
        let (h, h0) = (header(&back), header(&src));
        assert_same_geometry(h, h0);
        assert_eq!(
            (h.datatype, h.bitpix, h.scl_slope, h.scl_inter),
            (16, 32, 1.0, 0.0)
        );
        assert_eq!(
            (h.vox_offset, h.endianness),
            (352.0, ::nifti::Endianness::Little)
        );
    }
    // Checked with nibabel on the files written above:
    // i = nib.load('anat.nii.gz'); i.shape, i.get_data_dtype(), i.affine, i.header.get_qform(),
    // i.header['sform_code'], i.header['qform_code'], i.header['descrip'], i.get_fdata().sum()
    // -> (33, 41, 25) float32, [[-2,0,0,32],[0,2,0,-40],[0,0,2,-16],[0,0,0,1]] (both), 2, 2,
    //    b'spm - 3D normalized', 284166082.0 — the input's values.
}

#[test]
fn round_trip_keep_dtype() {
    let dir = tempfile::tempdir().unwrap();
    for (src_path, name, dt, code) in [
        (data("anatomical.nii"), "anat.nii", DType::I16, 4),
        (mni(), "mni.nii.gz", DType::U8, 2),
        (fixture("f64.nii.gz"), "f64.nii", DType::F64, 64),
        (fixture("u32.nii"), "u32.nii.gz", DType::U32, 768),
        (fixture("i8_2d_nocode.nii"), "i8.nii", DType::I8, 256),
    ] {
        let src = load(&src_path);
        let p = dir.path().join(name);
        io::save(&p, &src, &KEEP).unwrap();
        let back = load(&p);
        assert_eq!(back.dtype, dt, "{name}");
        assert_eq!(back.shape, src.shape, "{name}");
        assert_same_data(&back.data, &src.data);
        assert_affine(&back.world_from_voxel, &src.world_from_voxel, 0.0);
        let h = header(&back);
        assert_same_geometry(h, header(&src));
        assert_eq!(h.datatype, code, "{name}");
    }
    // nib.load('mni.nii.gz'): (197, 233, 189) uint8, affine [[1,0,0,-98],[0,1,0,-134],[0,0,1,-72],
    // [0,0,0,1]], sform_code 2, qform_code 0, get_fdata().sum() 333468829.0 — as the input.
}

#[test]
fn keep_dtype_writes_raw_values_of_a_scaled_file() {
    let dir = tempfile::tempdir().unwrap();
    let src_path = fixture("i16_be_scaled.nii");
    let src = load(&src_path);
    let p = dir.path().join("scaled.nii");
    io::save(&p, &src, &KEEP).unwrap();
    let back = load(&p);
    assert_same_data(&back.data, &src.data);
    let h = header(&back);
    assert_eq!((h.datatype, h.scl_slope, h.scl_inter), (4, 0.5, -10.0));
    // The stored integers are the input's: big-endian there, little-endian here.
    let raw_in = std::fs::read(&src_path).unwrap();
    let raw_out = std::fs::read(&p).unwrap();
    let n = src.data.len();
    let ints = |b: &[u8], be: bool| -> Vec<i16> {
        b[352..352 + 2 * n]
            .chunks_exact(2)
            .map(|c| {
                if be {
                    i16::from_be_bytes([c[0], c[1]])
                } else {
                    i16::from_le_bytes([c[0], c[1]])
                }
            })
            .collect()
    };
    assert_eq!(ints(&raw_out, false), ints(&raw_in, true));
    // nib.load('scaled.nii'): int16, scl_slope 0.5, scl_inter -10, get_fdata().sum() -158.0
    assert_eq!(sum(&back.data), -158.0);

    // Values between steps round to the nearest raw value: (v + 10) / 0.5.
    let mut moved = src.with_data(src.data.iter().map(|v| v + 0.2).collect());
    moved.data[0] = 1e9; // clamps to i16::MAX
    moved.data[1] = f32::NAN; // no integer: raw 0
    io::save(&p, &moved, &KEEP).unwrap();
    let again = load(&p);
    assert_eq!(again.data[0], 32767.0 * 0.5 - 10.0);
    assert_eq!(again.data[1], -10.0);
    assert_same_data(&again.data[2..], &src.data[2..]);
}

#[test]
fn keep_dtype_rounds_and_clamps() {
    let dir = tempfile::tempdir().unwrap();
    let src = load(&fixture("u8_sform.nii"));
    let mut data = src.data.clone();
    data[..6].copy_from_slice(&[-5.0, 300.0, 2.5, 2.49, f32::NAN, f32::INFINITY]);
    let p = dir.path().join("u8.nii");
    io::save(&p, &src.with_data(data), &KEEP).unwrap();
    let back = load(&p);
    assert_eq!(back.dtype, DType::U8);
    assert_eq!(&back.data[..6], &[0.0, 255.0, 3.0, 2.0, 0.0, 255.0]);
}

#[test]
fn nan_and_infinity_survive_float32() {
    let dir = tempfile::tempdir().unwrap();
    let src = load(&fixture("f32_nonfinite.nii"));
    // nibabel: d[0,0,0] nan, d[0,0,1] inf, d[0,1,0] -inf
    assert!(at(&src, [0, 0, 0], 0).is_nan());
    assert_eq!(at(&src, [0, 0, 1], 0), f32::INFINITY);
    assert_eq!(at(&src, [0, 1, 0], 0), f32::NEG_INFINITY);
    let p = dir.path().join("nf.nii.gz");
    io::save(&p, &src, &F32).unwrap();
    assert_same_data(&load(&p).data, &src.data);
}

#[test]
fn rgb24_and_4d_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let rgb = load(&fixture("rgb24.nii"));
    assert_eq!((rgb.channels, rgb.dtype), (3, DType::U8));

    // keep: RGB24 again
    let p = dir.path().join("rgb_keep.nii");
    io::save(&p, &rgb, &KEEP).unwrap();
    let back = load(&p);
    assert_eq!(
        (back.channels, back.shape.clone(), header(&back).datatype),
        (3, vec![2, 3, 4], 128)
    );
    assert_same_data(&back.data, &rgb.data);
    assert_affine(&back.world_from_voxel, &rgb.world_from_voxel, 0.0);

    // float32: a 4th axis of 3
    let p = dir.path().join("rgb_f32.nii.gz");
    io::save(&p, &rgb, &F32).unwrap();
    let back = load(&p);
    let h = header(&back);
    assert_eq!((h.datatype, h.dim), (16, [4, 4, 3, 2, 3, 1, 1, 1]));
    assert_eq!((back.channels, back.shape.clone()), (3, vec![2, 3, 4]));
    assert_same_data(&back.data, &rgb.data);
    // nib.load('rgb_f32.nii.gz'): shape (4, 3, 2, 3) float32, affine diag(1, 1, 2, 1),
    // get_fdata().sum() 9837.0; nib.load('rgb_keep.nii'): RGB24 [R G B] sums 3270 3790 2777.
    assert_eq!(sum(&back.data), 9837.0);
    let n = 24;
    let sums: Vec<f64> = (0..3).map(|c| sum(&rgb.data[c * n..(c + 1) * n])).collect();
    assert_eq!(sums, vec![3270.0, 3790.0, 2777.0]);

    // 4D uint16 with a rotated qform (qfac -1): channels and qform survive.
    let q = load(&fixture("u16_4d_qform.nii.gz"));
    let p = dir.path().join("u16.nii.gz");
    io::save(&p, &q, &F32).unwrap();
    let back = load(&p);
    assert_eq!((back.channels, back.shape.clone()), (2, vec![2, 3, 4]));
    assert_same_data(&back.data, &q.data);
    assert_same_geometry(header(&back), header(&q));
    // nib.load('u16.nii.gz').affine (sform_code 0, qform_code 1):
    // [[1.4488887341712844, 6.917280263118812e-09, -0.6470476454883648, 3.0],
    //  [0.13278199154374634, 1.8793852431025178, 0.8259152178987936, -4.0],
    //  [-0.3648155406684448, 0.684040282445771, -2.2691834208170905, 7.0], [0, 0, 0, 1]]
    let want = [
        [
            1.4488887341712844,
            6.917280263118812e-09,
            -0.6470476454883648,
            3.0,
        ],
        [
            0.13278199154374634,
            1.8793852431025178,
            0.8259152178987936,
            -4.0,
        ],
        [
            -0.3648155406684448,
            0.684040282445771,
            -2.2691834208170905,
            7.0,
        ],
        [0.0, 0.0, 0.0, 1.0],
    ];
    assert_affine(&back.world_from_voxel, &want, 1e-12);

    // A 2D multi-channel image becomes one slice with a 4th axis.
    let mut v = Volume::new((0..12).map(|i| i as f32).collect(), vec![2, 3], 2);
    v.dtype = DType::U8;
    let p = dir.path().join("2d_2ch.nii");
    io::save(&p, &v, &KEEP).unwrap();
    let back = load(&p);
    assert_eq!((back.shape.clone(), back.channels), (vec![1, 2, 3], 2));
    assert_same_data(&back.data, &v.data);
}

#[test]
fn volume_without_header_gets_a_fresh_one() {
    let dir = tempfile::tempdir().unwrap();
    let mut v = Volume::new((0..24).map(|i| i as f32).collect(), vec![2, 3, 4], 1);
    v.spacing_mm = vec![3.0, 2.0, 1.5];
    v.world_from_voxel = [
        [1.5, 0.0, 0.0, -4.0],
        [0.0, 2.0, 0.0, 5.0],
        [0.0, 0.0, 3.0, 6.0],
        [0.0, 0.0, 0.0, 1.0],
    ];
    let p = dir.path().join("fresh.nii");
    io::save(&p, &v, &F32).unwrap();
    let back = load(&p);
    assert_same_data(&back.data, &v.data);
    assert_eq!(back.spacing_mm, v.spacing_mm);
    assert_affine(&back.world_from_voxel, &v.world_from_voxel, 0.0);
    let h = header(&back);
    // nib.load('fresh.nii'): shape (4, 3, 2) float32, sform_code 2, qform_code 0,
    // pixdim [1, 1.5, 2, 3, 1, 1, 1, 1], xyzt_units 10, affine [[1.5,0,0,-4],[0,2,0,5],[0,0,3,6],[0,0,0,1]]
    assert_eq!((h.sform_code, h.qform_code, h.xyzt_units), (2, 0, 10));
    assert_eq!(h.pixdim, [1.0, 1.5, 2.0, 3.0, 1.0, 1.0, 1.0, 1.0]);
    assert_eq!(h.dim, [3, 4, 3, 2, 1, 1, 1, 1]);

    // 2D: nib.load('fresh2d.nii') -> shape (3, 2), affine identity
    let v2 = Volume::new((0..6).map(|i| i as f32).collect(), vec![2, 3], 1);
    let p = dir.path().join("fresh2d.nii");
    io::save(&p, &v2, &F32).unwrap();
    let back = load(&p);
    assert_eq!(back.shape, vec![2, 3]);
    assert_same_data(&back.data, &v2.data);
    assert_affine(
        &back.world_from_voxel,
        &augscope::core::volume::identity4(),
        0.0,
    );
}

#[test]
fn a_changed_affine_is_written_to_the_sform() {
    let dir = tempfile::tempdir().unwrap();
    let mut v = load(&data("anatomical.nii"));
    v.world_from_voxel[0][3] = 40.0;
    let p = dir.path().join("moved.nii");
    io::save(&p, &v, &F32).unwrap();
    let back = load(&p);
    assert_affine(&back.world_from_voxel, &v.world_from_voxel, 0.0);
    let h = header(&back);
    // The stale qform is switched off so that no reader places the volume at the old spot.
    assert_eq!((h.sform_code, h.qform_code), (2, 0));
}

#[test]
fn png_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    // RGB u8. PIL reads the written file as:
    // np.asarray(Image.open('rgb.png')) -> mode RGB [[[0,84,168],[14,98,182],[28,112,196]],
    //                                                [[42,126,210],[56,140,224],[70,154,238]]]
    let mut rgb = Volume::new((0..18).map(|i| (i * 14) as f32).collect(), vec![2, 3], 3);
    rgb.dtype = DType::U8;
    let p = dir.path().join("rgb.png");
    io::save(&p, &rgb, &F32).unwrap();
    let back = load(&p);
    assert_eq!(
        (back.shape.clone(), back.channels, back.dtype),
        (vec![2, 3], 3, DType::U8)
    );
    assert_same_data(&back.data, &rgb.data);

    // 16-bit gray. PIL: mode I;16 [[0, 10000, 20000], [30000, 40000, 50000]]
    let mut g = Volume::new((0..6).map(|i| (i * 10000) as f32).collect(), vec![2, 3], 1);
    g.dtype = DType::U16;
    let p = dir.path().join("g16.png");
    io::save(&p, &g, &F32).unwrap();
    let back = load(&p);
    assert_eq!((back.channels, back.dtype), (1, DType::U16));
    assert_same_data(&back.data, &g.data);

    // u8 volume with out-of-range values: rounded and clamped.
    let mut c = Volume::new(vec![-3.0, 0.4, 0.6, 254.5, 256.0, f32::NAN], vec![2, 3], 1);
    c.dtype = DType::U8;
    io::save(&p, &c, &F32).unwrap();
    assert_eq!(load(&p).data, vec![0.0, 0.0, 1.0, 255.0, 255.0, 0.0]);

    // float32 integers → 16-bit
    let f = Volume::new(vec![0.0, 1.0, 65535.0, 7.0], vec![2, 2], 1);
    io::save(&p, &f, &F32).unwrap();
    let back = load(&p);
    assert_eq!(
        (back.dtype, back.data.clone()),
        (DType::U16, f.data.clone())
    );

    // The JPEG's pixels survive a PNG round trip exactly.
    let j = load(&data("retina.jpg"));
    let p = dir.path().join("retina.png");
    io::save(&p, &j, &F32).unwrap();
    let back = load(&p);
    assert_eq!((back.channels, back.dtype), (3, DType::U8));
    assert_same_data(&back.data, &j.data);
}

#[test]
fn tiff_written_by_the_image_crate_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("g16.tiff");
    let px: Vec<u16> = vec![0, 1, 65535, 1234, 40000, 7];
    image::ImageBuffer::<image::Luma<u16>, _>::from_raw(3, 2, px.clone())
        .unwrap()
        .save(&p)
        .unwrap();
    let v = load(&p);
    assert_eq!(
        (v.shape.clone(), v.channels, v.dtype),
        (vec![2, 3], 1, DType::U16)
    );
    assert_eq!(v.data, px.iter().map(|&x| x as f32).collect::<Vec<_>>());
}

#[test]
fn gray_32_and_64_bit_tiffs_read_in_their_own_type() {
    use tiff::encoder::{TiffEncoder, colortype};
    let dir = tempfile::tempdir().unwrap();
    let f32_px: Vec<f32> = vec![-3.5, 0.0, 1e-7, 2.25, 4095.0, -0.125];
    let p = dir.path().join("g32f.tif");
    let mut enc = TiffEncoder::new(std::fs::File::create(&p).unwrap()).unwrap();
    enc.write_image::<colortype::Gray32Float>(3, 2, &f32_px)
        .unwrap();
    let v = load(&p);
    assert_eq!(
        (v.shape.clone(), v.channels, v.dtype),
        (vec![2, 3], 1, DType::F32)
    );
    assert_eq!(v.data, f32_px);
    let f64_px: Vec<f64> = vec![0.5, -1.25, 3.0, 1e3];
    let p = dir.path().join("g64f.tif");
    let mut enc = TiffEncoder::new(std::fs::File::create(&p).unwrap()).unwrap();
    enc.write_image::<colortype::Gray64Float>(2, 2, &f64_px)
        .unwrap();
    let v = load(&p);
    assert_eq!((v.shape.clone(), v.dtype), (vec![2, 2], DType::F64));
    assert_eq!(v.data, vec![0.5, -1.25, 3.0, 1e3]);
    let u32_px: Vec<u32> = vec![0, 7, 70000, 16_777_216];
    let p = dir.path().join("g32u.tif");
    let mut enc = TiffEncoder::new(std::fs::File::create(&p).unwrap()).unwrap();
    enc.write_image::<colortype::Gray32>(4, 1, &u32_px).unwrap();
    let v = load(&p);
    assert_eq!((v.shape.clone(), v.dtype), (vec![1, 4], DType::U32));
    assert_eq!(v.data, vec![0.0, 7.0, 70000.0, 16_777_216.0]);
}

// ---------------------------------------------------------------------------------------------
// Hostile input: an error naming the path, never a panic or a huge allocation
// ---------------------------------------------------------------------------------------------

/// Asserts an error whose one-line message names `path` and contains `needle`.
fn assert_err<T: std::fmt::Debug>(r: Result<T, IoError>, path: &Path, needle: &str) {
    let e = r.expect_err(&format!("{} should not load", path.display()));
    let msg = e.to_string();
    assert!(
        msg.ends_with(&path.display().to_string()),
        "no path in: {msg}"
    );
    assert!(!msg.contains('\n'), "more than one line: {msg}");
    assert!(
        msg.to_lowercase().contains(&needle.to_lowercase()),
        "expected '{needle}' in: {msg}"
    );
}

/// A little-endian NIfTI-1 header built field by field (not by our writer), plus 4 zero bytes.
fn raw_header(dim: [i16; 8], datatype: i16, bitpix: i16) -> Vec<u8> {
    let mut h = vec![0u8; 352];
    h[0..4].copy_from_slice(&348i32.to_le_bytes());
    for (i, d) in dim.iter().enumerate() {
        put_i16(&mut h, 40 + 2 * i, *d);
    }
    put_i16(&mut h, 70, datatype);
    put_i16(&mut h, 72, bitpix);
    for i in 0..8 {
        put_f32(&mut h, 76 + 4 * i, 1.0);
    }
    put_f32(&mut h, 108, 352.0); // vox_offset
    put_f32(&mut h, 112, 1.0); // scl_slope
    h[344..348].copy_from_slice(b"n+1\0");
    h
}
fn put_i16(b: &mut [u8], off: usize, v: i16) {
    b[off..off + 2].copy_from_slice(&v.to_le_bytes());
}
fn put_f32(b: &mut [u8], off: usize, v: f32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}
fn gz(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).expect("gzip into memory");
    e.finish().expect("gzip into memory")
}

#[test]
fn hostile_nifti_files_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let ok_dim = [3, 4, 3, 2, 1, 1, 1, 1];
    let valid = || {
        let mut b = raw_header(ok_dim, 4, 16);
        b.extend((0..24i16).flat_map(|v| v.to_le_bytes()));
        b
    };
    // The valid file itself loads (so that each case below fails for its own reason).
    let p = dir.path().join("valid.nii");
    std::fs::write(&p, valid()).unwrap();
    assert_eq!(load(&p).data, (0..24).map(|v| v as f32).collect::<Vec<_>>());

    let huge = [4, 32767, 32767, 32767, 32767, 1, 1, 1];
    let with = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut b = valid();
        f(&mut b);
        b
    };
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty.nii", vec![], "truncated header"),
        (
            "short_header.nii",
            valid()[..100].to_vec(),
            "truncated header",
        ),
        (
            "text.nii",
            b"hello, this is not a scan".repeat(20),
            "not a NIfTI-1",
        ),
        (
            "bad_magic.nii",
            with(&|b| b[344..348].copy_from_slice(b"abc\0")),
            "magic",
        ),
        (
            "pair.nii",
            with(&|b| b[344..348].copy_from_slice(b"ni1\0")),
            ".hdr/.img",
        ),
        (
            "nifti2.nii",
            with(&|b| b[0..4].copy_from_slice(&540i32.to_le_bytes())),
            "NIfTI-2",
        ),
        (
            "truncated_data.nii",
            valid()[..352 + 30].to_vec(),
            "truncated data",
        ),
        ("huge_dims.nii", raw_header(huge, 64, 64), "truncated data"),
        ("zero_axis.nii", with(&|b| put_i16(b, 42, 0)), "empty axis"),
        (
            "negative_dim.nii",
            with(&|b| put_i16(b, 44, -3)),
            "negative",
        ),
        ("dim0_zero.nii", with(&|b| put_i16(b, 40, 0)), "dim[0]"),
        ("dim0_eight.nii", with(&|b| put_i16(b, 40, 8)), "dim[0]"),
        ("one_d.nii", with(&|b| put_i16(b, 40, 1)), "1D"),
        (
            "five_d.nii",
            with(&|b| {
                put_i16(b, 40, 5);
                put_i16(b, 50, 2);
            }),
            "5D",
        ),
        ("complex64.nii", with(&|b| put_i16(b, 70, 32)), "complex64"),
        (
            "complex128.nii",
            with(&|b| put_i16(b, 70, 1792)),
            "complex128",
        ),
        ("rgba32.nii", with(&|b| put_i16(b, 70, 2304)), "RGBA32"),
        (
            "datatype_0.nii",
            with(&|b| put_i16(b, 70, 0)),
            "unsupported datatype",
        ),
        (
            "datatype_999.nii",
            with(&|b| put_i16(b, 70, 999)),
            "datatype",
        ),
        (
            "rgb24_4d.nii",
            with(&|b| {
                put_i16(b, 70, 128);
                put_i16(b, 40, 4);
                put_i16(b, 48, 2);
            }),
            "RGB24",
        ),
        (
            "offset_beyond.nii",
            with(&|b| put_f32(b, 108, 1e6)),
            "beyond the end",
        ),
        (
            "offset_inside_header.nii",
            with(&|b| put_f32(b, 108, 100.0)),
            "inside the header",
        ),
        (
            "offset_negative.nii",
            with(&|b| put_f32(b, 108, -16.0)),
            "vox_offset",
        ),
        (
            "offset_nan.nii",
            with(&|b| put_f32(b, 108, f32::NAN)),
            "vox_offset",
        ),
        (
            "bad_quaternion.nii",
            with(&|b| {
                put_i16(b, 252, 1); // qform_code
                for off in [256, 260, 264] {
                    put_f32(b, off, 1.0);
                }
            }),
            "quaternion",
        ),
        (
            "bad_sform.nii",
            with(&|b| {
                put_i16(b, 254, 1);
                put_f32(b, 280, f32::INFINITY);
            }),
            "affine",
        ),
        (
            "bad_intercept.nii",
            with(&|b| {
                put_f32(b, 112, 2.0);
                put_f32(b, 116, f32::NAN);
            }),
            "scl_inter",
        ),
    ];
    for (name, bytes, needle) in &cases {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        assert_err(nifti::read(&p), &p, needle);
        // The same bytes, gzipped (the size checks then happen while streaming).
        let pz = dir.path().join(format!("{name}.gz"));
        std::fs::write(&pz, gz(bytes)).unwrap();
        let needle_gz = match *needle {
            "beyond the end" => "beyond the end of the data",
            n => n,
        };
        assert_err(nifti::read(&pz), &pz, needle_gz);
    }

    let p = dir.path().join("missing.nii");
    assert_err(nifti::read(&p), &p, "no such file");

    // Corrupt and truncated gzip streams.
    let good = gz(&valid());
    let p = dir.path().join("corrupt.nii.gz");
    let mut bad = good.clone();
    for b in &mut bad[12..40] {
        *b ^= 0x5a;
    }
    std::fs::write(&p, &bad).unwrap();
    assert_err(nifti::read(&p), &p, "gzip");
    let p = dir.path().join("gzip_header_only.nii.gz");
    std::fs::write(&p, [0x1f, 0x8b, 0x08, 0x00]).unwrap();
    assert_err(nifti::read(&p), &p, "gzip");
    let p = dir.path().join("cut.nii.gz");
    std::fs::write(&p, &good[..good.len() / 2]).unwrap();
    let e = nifti::read(&p).unwrap_err().to_string();
    assert!(
        e.ends_with(&p.display().to_string()) && (e.contains("gzip") || e.contains("truncated")),
        "{e}"
    );

    // A 4-terabyte claim in a small gzip: refused while streaming, without reserving it.
    let p = dir.path().join("bomb.nii.gz");
    let mut b = raw_header(huge, 64, 64);
    b.extend(vec![0u8; 1 << 20]);
    std::fs::write(&p, gz(&b)).unwrap();
    assert_err(nifti::read(&p), &p, "truncated data");

    // An honest 4-terabyte file (sparse: the data are holes): a clear error, not an abort on
    // the allocation. Skipped where the filesystem cannot hold such a file.
    let p = dir.path().join("honest_huge.nii");
    let b = raw_header([3, 10000, 10000, 10000, 1, 1, 1, 1], 16, 32);
    std::fs::write(&p, &b).unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
    if f.set_len(352 + 4_000_000_000_000).is_ok() {
        assert_err(nifti::read(&p), &p, "more than this machine can allocate");
    }
}

#[test]
fn nifti_fixes_that_nibabel_applies_on_load() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = raw_header([3, 2, 2, 2, 1, 1, 1, 1], 2, 8);
    put_f32(&mut b, 76, 0.0); // qfac 0 → 1
    put_f32(&mut b, 80, -2.0); // negative pixdim → |pixdim|
    put_f32(&mut b, 84, 0.0); // zero pixdim → 1
    put_f32(&mut b, 108, 0.0); // vox_offset 0 → 352
    put_f32(&mut b, 112, 0.0); // slope 0 → no scaling
    put_i16(&mut b, 252, 1); // qform_code 1 with the identity quaternion
    put_i16(&mut b, 254, 9); // unknown sform code → ignored
    b.extend(0u8..8);
    let p = dir.path().join("fixable.nii");
    std::fs::write(&p, &b).unwrap();
    let v = load(&p);
    // nib.load on the same bytes: get_zooms() (2.0, 1.0, 1.0), affine diag(2, 1, 1, 1), warning
    // "setting 0 dims to 1 and setting to abs of pixdim values", "sform_code 9 not valid". For
    // vox_offset 0 nibabel reads from byte 0 (the header itself: [92, 1, 0, ...]); we follow
    // nifti_clib and read after the header, giving the values 0..7 that were written there.
    assert_eq!(v.spacing_mm, vec![1.0, 1.0, 2.0]);
    let want = [
        [2.0, 0.0, 0.0, 0.0],
        [0.0, 1.0, 0.0, 0.0],
        [0.0, 0.0, 1.0, 0.0],
        [0.0, 0.0, 0.0, 1.0],
    ];
    assert_affine(&v.world_from_voxel, &want, 0.0);
    assert_eq!(v.data, (0..8).map(|v| v as f32).collect::<Vec<_>>());
}

#[test]
fn hostile_images_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("missing.png");
    assert_err(io::image2d::read(&p), &p, "no such file");
    let p = dir.path().join("text.png");
    std::fs::write(&p, b"this is not an image at all").unwrap();
    assert_err(io::image2d::read(&p), &p, "");
    let png = std::fs::read(fixture("gray16.png")).unwrap();
    let p = dir.path().join("cut.png");
    std::fs::write(&p, &png[..png.len() / 2]).unwrap();
    assert_err(io::image2d::read(&p), &p, "");
    let jpg = std::fs::read(data("retina.jpg")).unwrap();
    let p = dir.path().join("cut.jpg");
    std::fs::write(&p, &jpg[..600]).unwrap();
    assert_err(io::image2d::read(&p), &p, "");
    // Cut inside the scan: the decoder would fill the rest with grey; refused.
    for frac in [0.5, 0.9, 0.999] {
        let p = dir.path().join(format!("cut{frac}.jpg"));
        std::fs::write(&p, &jpg[..(jpg.len() as f64 * frac) as usize]).unwrap();
        assert_err(io::image2d::read(&p), &p, "cut short");
    }
    // Bytes after the end-of-image marker (some cameras pad) are fine.
    let p = dir.path().join("padded.jpg");
    std::fs::write(&p, [jpg.as_slice(), &[0u8; 64]].concat()).unwrap();
    assert_eq!(load(&p).data, load(&data("retina.jpg")).data);
    // A damaged PNG chunk is named in words, not as a Rust structure.
    let mut bad = png.clone();
    bad[20] ^= 0xff; // inside IHDR: its CRC no longer matches
    let p = dir.path().join("crc.png");
    std::fs::write(&p, &bad).unwrap();
    let msg = io::image2d::read(&p).unwrap_err().to_string();
    assert!(msg.contains("IHDR") && !msg.contains("ChunkType"), "{msg}");
    let p = dir.path().join("empty.tif");
    std::fs::write(&p, b"").unwrap();
    assert_err(io::image2d::read(&p), &p, "");
    // A PNG header claiming 2^31 x 2^31 pixels.
    let mut bomb = png[..33].to_vec();
    bomb[16..20].copy_from_slice(&0x7fff_ffffu32.to_be_bytes());
    bomb[20..24].copy_from_slice(&0x7fff_ffffu32.to_be_bytes());
    let p = dir.path().join("bomb.png");
    std::fs::write(&p, &bomb).unwrap();
    assert_err(io::image2d::read(&p), &p, "");
    // A 158-byte TIFF (found by the in-process fuzzer) whose header claims 352,321,542 x 3
    // pixels of 16 bits: refused from its size, before a 2.1 GB buffer is allocated.
    let mut tif = b"II*\x00\x08\x00\x00\x00".to_vec();
    let tags: [(u16, u16, u32); 9] = [
        (256, 4, 352_321_542),
        (257, 4, 3),
        (258, 3, 16),
        (259, 3, 1),
        (262, 3, 1),
        (273, 4, 122),
        (278, 4, 3),
        (279, 4, 16_776_960),
        (284, 3, 1),
    ];
    tif.extend_from_slice(&(tags.len() as u16).to_le_bytes());
    for (tag, typ, v) in tags {
        tif.extend_from_slice(&tag.to_le_bytes());
        tif.extend_from_slice(&typ.to_le_bytes());
        tif.extend_from_slice(&1u32.to_le_bytes());
        tif.extend_from_slice(&v.to_le_bytes());
    }
    tif.extend_from_slice(&[0u8; 4]);
    tif.resize(158, 7);
    let p = dir.path().join("claims.tif");
    std::fs::write(&p, &tif).unwrap();
    assert_err(
        io::image2d::read(&p),
        &p,
        "more than a file of 158 bytes can hold",
    );
}

#[test]
fn unwritable_volumes_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("frac.png");
    let f = Volume::new(vec![0.5, 1.0, 2.0, 3.0], vec![2, 2], 1);
    assert_err(io::save(&p, &f, &F32), &p, ".nii or .npy");
    assert!(!p.exists());
    let p = dir.path().join("neg.png");
    let f = Volume::new(vec![-1.0, 1.0, 2.0, 3.0], vec![2, 2], 1);
    assert_err(io::save(&p, &f, &F32), &p, "0 to 65535");
    let p = dir.path().join("vol.png");
    let v = Volume::new(vec![0.0; 8], vec![2, 2, 2], 1);
    assert_err(io::save(&p, &v, &F32), &p, "2D");
    let p = dir.path().join("two.png");
    let v = Volume::new(vec![0.0; 8], vec![2, 2], 2);
    assert_err(io::save(&p, &v, &F32), &p, "channels");
    let p = dir.path().join("empty.nii");
    let v = Volume::new(vec![], vec![0, 3], 1);
    assert_err(io::save(&p, &v, &F32), &p, "length 0");
    let p = dir.path().join("no/such/dir/out.nii.gz");
    let v = Volume::new(vec![0.0; 4], vec![2, 2], 1);
    assert_err(io::save(&p, &v, &F32), &p, "");
    // A failed write leaves no temporary file behind.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn error_lines_escape_control_characters_from_a_damaged_header() {
    // A .npy header whose shape holds a record separator (found by tests/fuzz/fuzz.py): the
    // error quotes the shape, and must stay one line for any reader (Python splits on \x1e).
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("ctrl.npy");
    let header = "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 3\x1e 2), }";
    let mut b = b"\x93NUMPY\x01\x00".to_vec();
    let pad = 64 - (10 + header.len() + 1) % 64;
    let text = format!("{header}{}\n", " ".repeat(pad));
    b.extend((text.len() as u16).to_le_bytes());
    b.extend(text.as_bytes());
    b.extend([0u8; 72]);
    std::fs::write(&p, &b).unwrap();
    let msg = io::load(&p, &LoadOptions::default())
        .unwrap_err()
        .to_string();
    assert!(!msg.chars().any(char::is_control), "{msg:?}");
    assert!(msg.contains("\\u{1e}"), "{msg}");
}

/// A 4D NIfTI of one volume, shape (x, y, z, 1), comes back from `augscope apply` (and a plain
/// save) with its 4th axis, not as 3D.
#[test]
fn a_4d_nifti_of_one_volume_keeps_its_fourth_axis() {
    let dir = tempfile::tempdir().unwrap();
    let (x, y, z) = (12i16, 10i16, 6i16);
    let mut b = raw_header([4, x, y, z, 1, 1, 1, 1], 16, 32);
    for i in 0..(x as usize * y as usize * z as usize) {
        b.extend_from_slice(&(i as f32 * 0.5).to_le_bytes());
    }
    let src = dir.path().join("one.nii");
    std::fs::write(&src, &b).unwrap();
    let v = load(&src);
    assert_eq!((v.shape.clone(), v.channels), (vec![6, 10, 12], 1));
    for (name, args) in [
        ("rotated.nii", vec!["--rotate", "0.1,0,0"]),
        ("same.nii.gz", vec![]),
    ] {
        let out = dir.path().join(name);
        let o = common::cli::command()
            .arg("apply")
            .arg(&src)
            .arg(&out)
            .args(&args)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let back = load(&out);
        assert_eq!(&header(&back).dim[..5], &[4, 12, 10, 6, 1], "{name}");
        assert_eq!((back.shape.clone(), back.channels), (vec![6, 10, 12], 1));
    }
    // A 3D source stays 3D.
    let three = dir.path().join("three.nii");
    io::save(
        &three,
        &Volume::new(vec![0.0; 24], vec![2, 3, 4], 1),
        &SaveOptions::default(),
    )
    .unwrap();
    assert_eq!(header(&load(&three)).dim[0], 3);
}
