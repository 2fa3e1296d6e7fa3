//! DICOM input: the pydicom sample slices (values, HU, spacing, affine, window) and a multi-file
//! series written with dicom-rs and read back from a folder, plus hostile files.
//!
//! Expected values come from pydicom 2.x (`d = pydicom.dcmread(path)`;
//! `d.pixel_array * d.RescaleSlope + d.RescaleIntercept`, `d.PixelSpacing`,
//! `d.ImagePositionPatient`, `d.WindowCenter`, `d.WindowWidth`).

#![allow(clippy::unwrap_used)] // test helpers: a failed unwrap is a failed test

use std::path::{Path, PathBuf};

use augscope::DType;
use augscope::io::{self, LoadOptions};
use dicom_core::value::PrimitiveValue;
use dicom_core::{DataElement, VR};
use dicom_dictionary_std::{tags, uids};
use dicom_object::{FileMetaTableBuilder, InMemDicomObject};

mod common;
use common::cli::command;
use common::fixtures::load_volume as load;

fn data(name: &str) -> PathBuf {
    common::fixtures::data("dicom").join(name)
}

#[test]
fn ct_small_loads_in_hounsfield_units() {
    let v = load(&data("CT_small.dcm"));
    assert_eq!(v.shape, vec![128, 128]);
    assert_eq!(v.dtype, DType::I16);
    // pydicom: min -896, max 1167, a[10, 20] = -839, a[64, 64] = 904 (intercept -1024 applied).
    assert_eq!(v.finite_range(), Some((-896.0, 1167.0)));
    assert_eq!(v.data[10 * 128 + 20], -839.0);
    assert_eq!(v.data[64 * 128 + 64], 904.0);
    assert!((v.spacing_mm[0] - 0.661468).abs() < 1e-9 && (v.spacing_mm[1] - 0.661468).abs() < 1e-9);
    // ImagePositionPatient (-158.135803, -179.035797, -75.699997) LPS = (158.1.., 179.0.., -75.7) RAS.
    let m = v.world_from_voxel;
    assert!((m[0][3] - 158.135803).abs() < 1e-6 && (m[1][3] - 179.035797).abs() < 1e-6);
    assert!((m[2][3] + 75.699997).abs() < 1e-6);
    assert!((m[0][0] + 0.661468).abs() < 1e-9 && (m[1][1] + 0.661468).abs() < 1e-9);
    // CT_small.dcm carries no WindowCenter/WindowWidth (pydicom lists none).
    assert_eq!(v.default_window, None);
}

#[test]
fn mr_small_keeps_its_window() {
    let v = load(&data("MR_small.dcm"));
    assert_eq!(v.shape, vec![64, 64]);
    assert_eq!(v.finite_range(), Some((127.0, 2145.0)));
    assert_eq!(v.data[10 * 64 + 20], 316.0);
    assert_eq!(v.spacing_mm, vec![0.3125, 0.3125]);
    let (c, w) = v.default_window.expect("MR_small has a window");
    assert!(w > 0.0 && c.is_finite());
}

/// Writes slice `k` of a series as its own file, int16 with a rescale to floats.
#[allow(clippy::too_many_arguments)] // a test helper that spells out every attribute it writes
fn write_slice(
    path: &Path,
    k: usize,
    rows: usize,
    cols: usize,
    stored: &[i16],
    position: [f64; 3],
    orientation: [f64; 6],
    series: &str,
) {
    let ds = |v: &[f64]| {
        v.iter()
            .map(|x| format!("{x}"))
            .collect::<Vec<_>>()
            .join("\\")
    };
    let bytes: Vec<u8> = stored.iter().flat_map(|v| v.to_le_bytes()).collect();
    let sop = format!("2.25.1234{k}");
    let obj = InMemDicomObject::from_element_iter([
        DataElement::new(tags::SOP_CLASS_UID, VR::UI, uids::CT_IMAGE_STORAGE),
        DataElement::new(tags::SOP_INSTANCE_UID, VR::UI, sop.as_str()),
        DataElement::new(tags::MODALITY, VR::CS, "CT"),
        DataElement::new(tags::SERIES_INSTANCE_UID, VR::UI, series),
        DataElement::new(
            tags::INSTANCE_NUMBER,
            VR::IS,
            (100 - k).to_string().as_str(),
        ),
        DataElement::new(tags::IMAGE_POSITION_PATIENT, VR::DS, ds(&position).as_str()),
        DataElement::new(
            tags::IMAGE_ORIENTATION_PATIENT,
            VR::DS,
            ds(&orientation).as_str(),
        ),
        DataElement::new(tags::SLICE_THICKNESS, VR::DS, "2.5"),
        DataElement::new(tags::SAMPLES_PER_PIXEL, VR::US, PrimitiveValue::from(1u16)),
        DataElement::new(tags::PHOTOMETRIC_INTERPRETATION, VR::CS, "MONOCHROME2"),
        DataElement::new(tags::ROWS, VR::US, PrimitiveValue::from(rows as u16)),
        DataElement::new(tags::COLUMNS, VR::US, PrimitiveValue::from(cols as u16)),
        DataElement::new(tags::PIXEL_SPACING, VR::DS, "0.8\\0.7"),
        DataElement::new(tags::BITS_ALLOCATED, VR::US, PrimitiveValue::from(16u16)),
        DataElement::new(tags::BITS_STORED, VR::US, PrimitiveValue::from(16u16)),
        DataElement::new(tags::HIGH_BIT, VR::US, PrimitiveValue::from(15u16)),
        DataElement::new(
            tags::PIXEL_REPRESENTATION,
            VR::US,
            PrimitiveValue::from(1u16),
        ),
        DataElement::new(tags::WINDOW_CENTER, VR::DS, "40"),
        DataElement::new(tags::WINDOW_WIDTH, VR::DS, "400"),
        DataElement::new(tags::RESCALE_INTERCEPT, VR::DS, "-1024"),
        DataElement::new(tags::RESCALE_SLOPE, VR::DS, "0.5"),
        DataElement::new(tags::PIXEL_DATA, VR::OW, PrimitiveValue::from(bytes)),
    ]);
    let file = obj
        .with_meta(FileMetaTableBuilder::new().transfer_syntax(uids::EXPLICIT_VR_LITTLE_ENDIAN))
        .unwrap();
    file.write_to_file(path).unwrap();
}

#[test]
fn multi_file_series_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let (depth, rows, cols) = (6, 5, 7);
    // An oblique series: rows along (cos, sin, 0), columns along (0, 0, -1) (a coronal-ish tilt).
    let (c, s) = (0.8f64, 0.6f64);
    let orientation = [c, s, 0.0, 0.0, 0.0, -1.0];
    let normal = [-s, c, 0.0]; // row x col = (c, s, 0) x (0, 0, -1)
    let origin = [-10.0, 20.0, 30.0];
    let step = 2.5;
    let stored: Vec<i16> = (0..depth * rows * cols)
        .map(|i| (i as i16 * 37) % 2000 - 500)
        .collect();
    // Files named so that name order is not slice order.
    let order = [3usize, 0, 5, 1, 4, 2];
    for &k in &order {
        let pos = [
            origin[0] + normal[0] * step * k as f64,
            origin[1] + normal[1] * step * k as f64,
            origin[2] + normal[2] * step * k as f64,
        ];
        let slice = &stored[k * rows * cols..(k + 1) * rows * cols];
        let name = format!("IM{:04}.dcm", (k * 7) % 11);
        write_slice(
            &dir.path().join(name),
            k,
            rows,
            cols,
            slice,
            pos,
            orientation,
            "2.25.42",
        );
    }
    // A non-DICOM file in the folder is ignored.
    std::fs::write(dir.path().join("README.txt"), "notes").unwrap();
    let v = load(dir.path());
    assert_eq!(v.shape, vec![depth, rows, cols]);
    let want: Vec<f32> = stored.iter().map(|&x| x as f32 * 0.5 - 1024.0).collect();
    assert_eq!(v.data, want, "slices sorted by position, rescale applied");
    assert!((v.spacing_mm[0] - 2.5).abs() < 1e-9);
    assert_eq!(&v.spacing_mm[1..], &[0.8, 0.7]);
    assert_eq!(v.default_window, Some((40.0, 400.0)));
    // world_from_voxel (RAS) = diag(-1, -1, 1) * LPS affine; columns i (column index), j (row),
    // k (slice).
    let m = v.world_from_voxel;
    let lps_i = [c * 0.7, s * 0.7, 0.0];
    let lps_j = [0.0, 0.0, -0.8];
    let lps_k = [normal[0] * step, normal[1] * step, normal[2] * step];
    let sign = [-1.0, -1.0, 1.0];
    for r in 0..3 {
        assert!((m[r][0] - sign[r] * lps_i[r]).abs() < 1e-9, "{m:?}");
        assert!((m[r][1] - sign[r] * lps_j[r]).abs() < 1e-9, "{m:?}");
        assert!((m[r][2] - sign[r] * lps_k[r]).abs() < 1e-9, "{m:?}");
        assert!((m[r][3] - sign[r] * origin[r]).abs() < 1e-9, "{m:?}");
    }
    // A DICOM folder goes through batch and apply like any scan.
    let out = tempfile::tempdir().unwrap();
    let o = out.path().join("a.nii.gz");
    let st = command()
        .arg("apply")
        .arg(dir.path())
        .arg(&o)
        .args(["--flip", "0", "--backend", "cpu"])
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let back = load(&o);
    assert_eq!(back.shape, v.shape);
    assert_eq!(
        back.data[..rows * cols],
        v.data[(depth - 1) * rows * cols..]
    );
    // NIfTI keeps the affine in float32.
    for (a, b) in back.world_from_voxel.iter().zip(&v.world_from_voxel) {
        for (x, y) in a.iter().zip(b) {
            assert!(
                (x - y).abs() < 1e-5,
                "{:?} vs {:?}",
                back.world_from_voxel,
                v.world_from_voxel
            );
        }
    }

    // Two series in one folder: refused with a clear line.
    let slice = &stored[..rows * cols];
    write_slice(
        &dir.path().join("other.dcm"),
        9,
        rows,
        cols,
        slice,
        origin,
        orientation,
        "2.25.43",
    );
    let e = io::load(dir.path(), &LoadOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("2 series"), "{e}");
}

#[test]
fn hostile_dicom_exits_2_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let ct = std::fs::read(data("CT_small.dcm")).unwrap();
    let trunc = dir.path().join("trunc.dcm");
    std::fs::write(&trunc, &ct[..ct.len() / 2]).unwrap();
    let junk = dir.path().join("junk.dcm");
    std::fs::write(&junk, b"not a dicom file at all").unwrap();
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    for p in [&trunc, &junk, &empty] {
        let out = command().arg("info").arg(p).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{}: {err}", p.display());
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.contains("DICOM"), "{err}");
    }
}

/// A series of `n` axial 3×4 slices at `z[k]` mm in `dir`.
fn axial_series(dir: &Path, z: &[f64]) {
    let (rows, cols) = (3, 4);
    for (k, &zk) in z.iter().enumerate() {
        let slice: Vec<i16> = (0..rows * cols).map(|i| (i + 10 * k) as i16).collect();
        write_slice(
            &dir.join(format!("s{k:02}.dcm")),
            k,
            rows,
            cols,
            &slice,
            [0.0, 0.0, zk],
            [1.0, 0.0, 0.0, 0.0, 1.0, 0.0],
            "2.25.77",
        );
    }
}

fn load_err(p: &Path) -> String {
    io::load(p, &LoadOptions::default())
        .expect_err("should not load")
        .to_string()
}

#[test]
fn series_with_a_missing_or_damaged_slice_is_an_error_not_a_stretched_volume() {
    // Evenly spaced: loads, 2 mm apart.
    let ok = tempfile::tempdir().unwrap();
    axial_series(ok.path(), &[0.0, 2.0, 4.0, 6.0, 8.0]);
    std::fs::write(ok.path().join("notes.txt"), "not DICOM").unwrap();
    let v = load(ok.path());
    assert_eq!((v.shape[0], v.spacing_mm[0]), (5, 2.0));

    // One slice cut short: an error naming that slice (it was skipped, and five slices at 2 mm
    // loaded as four at 2.667 mm).
    let cut = tempfile::tempdir().unwrap();
    axial_series(cut.path(), &[0.0, 2.0, 4.0, 6.0, 8.0]);
    let victim = cut.path().join("s02.dcm");
    let bytes = std::fs::read(&victim).unwrap();
    std::fs::write(&victim, &bytes[..bytes.len() - 10]).unwrap();
    let e = load_err(cut.path());
    assert!(
        e.contains("slice of the series cannot be read") && e.contains("s02.dcm"),
        "{e}"
    );

    // Uneven gaps (a missing slice, or variable spacing): an error with the gaps.
    let gaps = tempfile::tempdir().unwrap();
    axial_series(gaps.path(), &[0.0, 1.0, 2.0, 10.0]);
    let e = load_err(gaps.path());
    assert!(e.contains("unevenly spaced") && e.contains("8.0000"), "{e}");

    // A slice step of 1e308 mm would be an infinite voxel in the NIfTI written from it (the
    // position itself is implausible, too).
    let huge = tempfile::tempdir().unwrap();
    axial_series(huge.path(), &[0.0, 1e308]);
    let e = load_err(huge.path());
    assert!(e.contains("implausible ImagePositionPatient"), "{e}");
    // A step of 2 km between plausible positions is still no voxel size.
    let far = tempfile::tempdir().unwrap();
    axial_series(far.path(), &[-1000.0, 1000.0]);
    let e = load_err(far.path());
    assert!(e.contains("implausible slice spacing"), "{e}");
    let out = command()
        .arg("apply")
        .arg(huge.path())
        .arg(huge.path().join("out.nii"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(!huge.path().join("out.nii").exists());
}

/// CT_small.dcm with `insert` placed before its pixel data, and `patch` applied after.
fn ct_with(insert: &[u8], patch: impl Fn(&mut Vec<u8>, usize)) -> Vec<u8> {
    let ct = std::fs::read(data("CT_small.dcm")).unwrap();
    let at = ct
        .windows(4)
        .position(|w| w == [0xE0, 0x7F, 0x10, 0x00])
        .unwrap();
    let mut b = [&ct[..at], insert, &ct[at..]].concat();
    patch(&mut b, at + insert.len());
    b
}

/// `depth` nested undefined-length sequences (ReferencedSeriesSequence, explicit VR little
/// endian), each holding one undefined-length item, all closed.
fn nested_sequences(depth: usize) -> Vec<u8> {
    let mut b = vec![];
    for _ in 0..depth {
        b.extend([0x08, 0x00, 0x15, 0x11, b'S', b'Q', 0, 0]);
        b.extend([
            0xFF, 0xFF, 0xFF, 0xFF, 0xFE, 0xFF, 0x00, 0xE0, 0xFF, 0xFF, 0xFF, 0xFF,
        ]);
    }
    for _ in 0..depth {
        b.extend([0xFE, 0xFF, 0x0D, 0xE0, 0, 0, 0, 0]);
        b.extend([0xFE, 0xFF, 0xDD, 0xE0, 0, 0, 0, 0]);
    }
    b
}

#[test]
fn structurally_hostile_dicom_is_one_line_without_overflow_or_huge_allocation() {
    let dir = tempfile::tempdir().unwrap();
    // Thousands of nested undefined-length sequences (dicom-rs would recurse until the stack
    // overflows).
    let nested = dir.path().join("nested.dcm");
    std::fs::write(&nested, ct_with(&nested_sequences(5000), |_, _| {})).unwrap();
    // Pixel data that declares 4 GB in a 40 KB file (dicom-rs would allocate it first).
    let huge = dir.path().join("huge.dcm");
    std::fs::write(
        &huge,
        ct_with(&[], |b, px| {
            b[px + 8..px + 12].copy_from_slice(&0xFFFF_FFF0u32.to_le_bytes())
        }),
    )
    .unwrap();
    // An element whose VR bytes name no VR: dicom-rs reads it as UN, with a 4-byte length (here
    // 3.4 GB in a 40 KB file), so the check must too (found by the in-process fuzzer: the file
    // took 4 s and 3.4 GB of zeroed memory to refuse).
    let unknown_vr = dir.path().join("unknown_vr.dcm");
    let mut element = vec![0x29, 0x00, 0x00, 0x10, 0x01, 0xCA, 0x00, 0x00];
    element.extend(0xCC00_0001u32.to_le_bytes());
    std::fs::write(&unknown_vr, ct_with(&element, |_, _| {})).unwrap();
    // Three levels of real nesting still load.
    let fine = dir.path().join("fine.dcm");
    std::fs::write(&fine, ct_with(&nested_sequences(3), |_, _| {})).unwrap();
    assert_eq!(load(&fine).data, load(&data("CT_small.dcm")).data);
    for (p, needle) in [
        (&nested, "nested more than"),
        (&huge, "declares 4294967280 bytes"),
        (&unknown_vr, "declares 3422552065 bytes"),
    ] {
        for cmd in ["info", "apply"] {
            let mut c = command();
            c.arg(cmd).arg(p);
            if cmd == "apply" {
                c.arg(dir.path().join("out.nii"));
            }
            let out = c.output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{cmd} {}: {err}", p.display());
            assert_eq!(err.trim_end().lines().count(), 1, "{err}");
            assert!(err.contains(needle), "{err}");
        }
    }
    assert!(!dir.path().join("out.nii").exists());
}
