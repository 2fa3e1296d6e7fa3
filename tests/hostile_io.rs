//! Hostile inputs to the loaders, each a class a fuzzer or a probe found: DICOM geometry that
//! would make an affine augscope itself refuses, DICOM file meta groups whose group length ends
//! early (the structure check must walk the bytes as dicom-rs parses them), `.npy` files with
//! gigabytes of trailing bytes, TIFF colour types named in words, and the orientation of a volume
//! that is in no patient's space. Every file is written by the test, in a temporary folder.

#![allow(clippy::unwrap_used)] // test helpers: a failed unwrap is a failed test

use std::path::Path;

use augscope::io::{self, LoadOptions};
use dicom_core::value::PrimitiveValue;
use dicom_core::{DataElement, Tag, VR};
use dicom_dictionary_std::{tags, uids};
use dicom_object::{FileMetaTableBuilder, InMemDicomObject};

mod common;
use common::cli::{assert_user_error, ok, s};

/// A 2 x 2 int16 axial slice, with `overrides` (tag, DS text) put over its geometry.
fn dicom_slice(path: &Path, overrides: &[(Tag, &str)]) {
    let mut obj = InMemDicomObject::from_element_iter([
        DataElement::new(tags::SOP_CLASS_UID, VR::UI, uids::CT_IMAGE_STORAGE),
        DataElement::new(tags::SOP_INSTANCE_UID, VR::UI, "2.25.4242"),
        DataElement::new(tags::MODALITY, VR::CS, "CT"),
        DataElement::new(tags::SERIES_INSTANCE_UID, VR::UI, "2.25.77"),
        DataElement::new(tags::IMAGE_POSITION_PATIENT, VR::DS, "-10\\-20\\30"),
        DataElement::new(tags::IMAGE_ORIENTATION_PATIENT, VR::DS, "1\\0\\0\\0\\1\\0"),
        DataElement::new(tags::SLICE_THICKNESS, VR::DS, "2.5"),
        DataElement::new(tags::SPACING_BETWEEN_SLICES, VR::DS, "2.5"),
        DataElement::new(tags::PIXEL_SPACING, VR::DS, "0.8\\0.7"),
        DataElement::new(tags::SAMPLES_PER_PIXEL, VR::US, PrimitiveValue::from(1u16)),
        DataElement::new(tags::PHOTOMETRIC_INTERPRETATION, VR::CS, "MONOCHROME2"),
        DataElement::new(tags::ROWS, VR::US, PrimitiveValue::from(2u16)),
        DataElement::new(tags::COLUMNS, VR::US, PrimitiveValue::from(2u16)),
        DataElement::new(tags::BITS_ALLOCATED, VR::US, PrimitiveValue::from(16u16)),
        DataElement::new(tags::BITS_STORED, VR::US, PrimitiveValue::from(16u16)),
        DataElement::new(tags::HIGH_BIT, VR::US, PrimitiveValue::from(15u16)),
        DataElement::new(
            tags::PIXEL_REPRESENTATION,
            VR::US,
            PrimitiveValue::from(1u16),
        ),
        DataElement::new(
            tags::PIXEL_DATA,
            VR::OW,
            PrimitiveValue::from(vec![1u8, 0, 2, 0, 3, 0, 4, 0]),
        ),
    ]);
    for &(tag, text) in overrides {
        obj.put(DataElement::new(tag, VR::DS, text));
    }
    obj.with_meta(FileMetaTableBuilder::new().transfer_syntax(uids::EXPLICIT_VR_LITTLE_ENDIAN))
        .unwrap()
        .write_to_file(path)
        .unwrap();
}

#[test]
fn dicom_geometry_that_feeds_the_affine_is_checked() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&str, Tag, &str, &str); 13] = [
        (
            "between",
            tags::SPACING_BETWEEN_SLICES,
            "1e308",
            "SpacingBetweenSlices",
        ),
        (
            "between_inf",
            tags::SPACING_BETWEEN_SLICES,
            "inf",
            "SpacingBetweenSlices",
        ),
        (
            "thickness",
            tags::SLICE_THICKNESS,
            "1e308",
            "SliceThickness",
        ),
        (
            "row_cos",
            tags::IMAGE_ORIENTATION_PATIENT,
            "1e308\\0\\0\\0\\1\\0",
            "ImageOrientationPatient",
        ),
        (
            "col_cos",
            tags::IMAGE_ORIENTATION_PATIENT,
            "1\\0\\0\\0\\1e308\\0",
            "ImageOrientationPatient",
        ),
        (
            "nan_cos",
            tags::IMAGE_ORIENTATION_PATIENT,
            "nan\\0\\0\\0\\1\\0",
            "ImageOrientationPatient",
        ),
        (
            "inf_dot",
            tags::IMAGE_ORIENTATION_PATIENT,
            "1e308\\1e308\\0\\1e308\\-1e308\\0",
            "ImageOrientationPatient",
        ),
        (
            "long_cos",
            tags::IMAGE_ORIENTATION_PATIENT,
            "2\\0\\0\\0\\1\\0",
            "ImageOrientationPatient",
        ),
        (
            "skew_cos",
            tags::IMAGE_ORIENTATION_PATIENT,
            "1\\0\\0\\0.6\\0.8\\0",
            "ImageOrientationPatient",
        ),
        (
            "short_cos",
            tags::IMAGE_ORIENTATION_PATIENT,
            "1\\0\\0\\0\\1",
            "ImageOrientationPatient",
        ),
        (
            "position",
            tags::IMAGE_POSITION_PATIENT,
            "1e308\\0\\0",
            "ImagePositionPatient",
        ),
        (
            "position_inf",
            tags::IMAGE_POSITION_PATIENT,
            "0\\-inf\\0",
            "ImagePositionPatient",
        ),
        ("pixel_nan", tags::PIXEL_SPACING, "nan\\0.7", "PixelSpacing"),
    ];
    for (name, tag, text, needle) in cases {
        let input = dir.path().join(format!("{name}.dcm"));
        dicom_slice(&input, &[(tag, text)]);
        let before = std::fs::read(&input).unwrap();
        let out = dir.path().join(format!("{name}.nii"));
        assert_user_error(&["apply", s(&input), s(&out)], needle);
        assert_user_error(&["info", s(&input)], needle);
        assert!(
            !out.exists(),
            "{name}: a refused input left {}",
            out.display()
        );
        assert_eq!(
            std::fs::read(&input).unwrap(),
            before,
            "{name}: the input changed"
        );
    }
    // Plausible geometry still loads: an oblique slice, cosines written to 7 decimals.
    let fine = dir.path().join("oblique.dcm");
    dicom_slice(
        &fine,
        &[(
            tags::IMAGE_ORIENTATION_PATIENT,
            "0.8660254\\0.5\\0\\-0.5\\0.8660254\\0",
        )],
    );
    let v = io::load(&fine, &LoadOptions::default()).unwrap();
    assert!(v.world_from_voxel.iter().flatten().all(|x| x.is_finite()));
    assert!((v.world_from_voxel[0][0] + 0.8660254 * 0.7).abs() < 1e-9);
    let out = dir.path().join("oblique.nii");
    ok(&["apply", s(&fine), s(&out)]);
    assert!(out.exists());
}

/// The start of a DICOM file whose meta group declares only its transfer syntax, implicit VR
/// little endian: with the 128-byte preamble, or with `DICM` at the very start (which dicom-rs
/// reads too).
fn meta_implicit_vr(preamble: bool) -> Vec<u8> {
    let mut b = if preamble { vec![0u8; 128] } else { vec![] };
    b.extend(b"DICM");
    let ts = b"1.2.840.10008.1.2\0";
    let mut ts_element = vec![0x02, 0x00, 0x10, 0x00, b'U', b'I'];
    ts_element.extend((ts.len() as u16).to_le_bytes());
    ts_element.extend(ts);
    b.extend([0x02, 0x00, 0x00, 0x00, b'U', b'L', 4, 0]);
    b.extend((ts_element.len() as u32).to_le_bytes());
    b.extend(ts_element);
    b
}

/// A file whose group length ends the meta group before a group-0002 element that hides
/// `payload`: read as a meta element (explicit VR, VR bytes naming no VR: UN with a 4-byte
/// length) it spans the payload; read as dicom-rs reads it, a data set element in implicit VR,
/// it is 4 bytes long, and the payload is parsed as elements.
fn hidden_behind_meta(preamble: bool, payload: &[u8]) -> Vec<u8> {
    let mut b = meta_implicit_vr(preamble);
    b.extend([0x02, 0x00, 0x99, 0x00, 0x04, 0x00, 0x00, 0x00]);
    b.extend((payload.len() as u32).to_le_bytes());
    b.extend(payload);
    b
}

/// `depth` nested undefined-length sequences (ReferencedSeriesSequence, implicit VR little
/// endian), each holding one undefined-length item, all closed.
fn nested_implicit(depth: usize) -> Vec<u8> {
    let mut b = vec![];
    for _ in 0..depth {
        b.extend([0x08, 0x00, 0x15, 0x11, 0xFF, 0xFF, 0xFF, 0xFF]);
        b.extend([0xFE, 0xFF, 0x00, 0xE0, 0xFF, 0xFF, 0xFF, 0xFF]);
    }
    for _ in 0..depth {
        b.extend([0xFE, 0xFF, 0x0D, 0xE0, 0, 0, 0, 0]);
        b.extend([0xFE, 0xFF, 0xDD, 0xE0, 0, 0, 0, 0]);
    }
    b
}

#[test]
fn dicom_group_length_that_ends_early_hides_nothing_from_the_check() {
    let dir = tempfile::tempdir().unwrap();
    // Pixel data declaring 4 GB in a file of a few hundred bytes (implicit VR).
    let mut huge = vec![0xE0, 0x7F, 0x10, 0x00];
    huge.extend(0xFFFF_FFF0u32.to_le_bytes());
    huge.extend([0u8; 64]);
    for preamble in [true, false] {
        for (what, payload, needle) in [
            ("nested", nested_implicit(10_000), "nested more than"),
            ("huge", huge.clone(), "declares 4294967280 bytes"),
        ] {
            let p = dir.path().join(format!("{what}_{preamble}.dcm"));
            std::fs::write(&p, hidden_behind_meta(preamble, &payload)).unwrap();
            let out = dir.path().join("out.nii");
            assert_user_error(&["info", s(&p)], needle);
            assert_user_error(&["apply", s(&p), s(&out)], needle);
            assert!(!out.exists());
        }
    }
    // A group length that runs past the end of the file: one line, exit 2.
    let mut late = meta_implicit_vr(true);
    late[132 + 8..132 + 12].copy_from_slice(&0xFFFF_FFF0u32.to_le_bytes());
    let p = dir.path().join("late.dcm");
    std::fs::write(&p, late).unwrap();
    assert_user_error(&["info", s(&p)], "DICOM");
    // A meta group without its group length first is refused, as dicom-rs refuses it.
    let mut no_length = vec![0u8; 128];
    no_length.extend(b"DICM");
    no_length.extend(&meta_implicit_vr(false)[4 + 12..]);
    let p = dir.path().join("no_length.dcm");
    std::fs::write(&p, no_length).unwrap();
    assert_user_error(&["info", s(&p)], "DICOM");
}

#[test]
fn dicom_group_length_that_ends_early_on_a_real_file_still_loads() {
    // CT_small.dcm's group length, shortened to end after its transfer syntax: the
    // implementation UID, version name and AE title become data set elements (explicit VR, as
    // the meta group), which dicom-rs reads, and so must the check.
    let ct = std::fs::read(common::fixtures::data("dicom").join("CT_small.dcm")).unwrap();
    assert_eq!(&ct[132..140], &[0x02, 0x00, 0x00, 0x00, b'U', b'L', 4, 0]);
    let mut short = ct.clone();
    short[140..144].copy_from_slice(&132u32.to_le_bytes());
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("ct.dcm"), dir.path().join("short.dcm"));
    std::fs::write(&a, &ct).unwrap();
    std::fs::write(&b, &short).unwrap();
    let load = |p: &Path| io::load(p, &LoadOptions::default()).unwrap().data;
    assert_eq!(load(&b), load(&a));
}

/// A small `.npy` array followed by `trailing` bytes; returns the array's values.
fn npy_with_trailing(path: &Path, trailing: &[u8]) -> Vec<f32> {
    let data: Vec<f32> = (0..24).map(|i| i as f32 - 3.5).collect();
    io::npy::write(path, &data, &[2, 3, 4], augscope::DType::F32).unwrap();
    let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    std::io::Write::write_all(&mut f, trailing).unwrap();
    data
}

#[test]
fn npy_trailing_bytes_are_ignored_as_numpy_does_and_never_read() {
    let dir = tempfile::tempdir().unwrap();
    // np.load ignores bytes after the array's data.
    let garbage = dir.path().join("garbage.npy");
    let data = npy_with_trailing(&garbage, b"trailing garbage \x00\xff");
    let a = io::npy::read(&garbage).unwrap();
    assert_eq!((a.shape, a.data), (vec![2, 3, 4], data.clone()));
    // A terabyte of (sparse) trailing bytes: reading them all would be refused as more memory
    // than the machine has, or take minutes; the loader reads only the header and the data.
    let sparse = dir.path().join("sparse.npy");
    npy_with_trailing(&sparse, b"");
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&sparse)
        .unwrap();
    let len = f.metadata().unwrap().len() + (1u64 << 40);
    f.set_len(len).unwrap();
    drop(f);
    let a = io::npy::read(&sparse).unwrap();
    assert_eq!((a.shape, a.data), (vec![2, 3, 4], data));
    let info = ok(&["info", s(&sparse)]);
    assert!(info.contains("2 x 3 x 4"), "{info}");
    assert_eq!(std::fs::metadata(&sparse).unwrap().len(), len);
    // A header that declares gigabytes (format 2: a 32-bit header length) is refused before it
    // is read, as np.load refuses a header over its max_header_size.
    let long = dir.path().join("long_header.npy");
    let mut b = b"\x93NUMPY\x02\x00".to_vec();
    b.extend(0xFFFF_FFF0u32.to_le_bytes());
    std::fs::write(&long, b).unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(&long).unwrap();
    f.set_len(1u64 << 40).unwrap();
    drop(f);
    assert_user_error(&["info", s(&long)], "header of 4294967280 bytes");
}

/// A 1 x 1 uncompressed little-endian TIFF of `samples` samples per pixel of 8 bits, min-is-black
/// (the tiff crate's "multiband"), with a SampleFormat of unsigned integers.
fn multiband_tiff(samples: u16) -> Vec<u8> {
    let entries: [(u16, u16, u32, u32); 10] = [
        (256, 3, 1, 1),              // ImageWidth
        (257, 3, 1, 1),              // ImageLength
        (258, 3, samples as u32, 0), // BitsPerSample, at BITS below
        (259, 3, 1, 1),              // Compression: none
        (262, 3, 1, 1),              // PhotometricInterpretation: min-is-black
        (273, 4, 1, 0),              // StripOffsets, at DATA below
        (277, 3, 1, samples as u32), // SamplesPerPixel
        (278, 3, 1, 1),              // RowsPerStrip
        (279, 4, 1, samples as u32), // StripByteCounts
        (339, 3, 1, 1),              // SampleFormat: unsigned integer
    ];
    let ifd_len = 2 + 12 * entries.len() + 4;
    let bits_at = 8 + ifd_len;
    let data_at = bits_at + 2 * samples as usize;
    let mut b = b"II*\x00".to_vec();
    b.extend(8u32.to_le_bytes());
    b.extend((entries.len() as u16).to_le_bytes());
    for (tag, typ, count, value) in entries {
        b.extend(tag.to_le_bytes());
        b.extend(typ.to_le_bytes());
        b.extend(count.to_le_bytes());
        let value = match tag {
            258 => bits_at as u32,
            273 => data_at as u32,
            _ => value,
        };
        if typ == 3 && count == 1 {
            b.extend((value as u16).to_le_bytes());
            b.extend([0, 0]);
        } else {
            b.extend(value.to_le_bytes());
        }
    }
    b.extend(0u32.to_le_bytes());
    for _ in 0..samples {
        b.extend(8u16.to_le_bytes());
    }
    b.extend(vec![7u8; samples as usize]);
    b
}

#[test]
fn unsupported_tiff_colour_types_are_named_in_words() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("multiband.tif");
    std::fs::write(&p, multiband_tiff(257)).unwrap();
    assert_user_error(&["info", s(&p)], "257 samples per pixel of 8 bits");
    let (_, _, err) = common::cli::run(&["info", s(&p)]);
    assert!(
        !err.contains('{') && !err.contains("Multiband"),
        "Rust debug output reached the user: {err}"
    );
}

#[test]
fn plain_images_and_arrays_have_no_orientation() {
    let data = common::fixtures::data("io");
    for name in ["gray8.png", "rgb8.tif"] {
        let out = ok(&["info", s(&data.join(name))]);
        assert!(out.contains("orientation: none"), "{name}: {out}");
    }
    let dir = tempfile::tempdir().unwrap();
    let npy = dir.path().join("a.npy");
    npy_with_trailing(&npy, b"");
    let out = ok(&["info", s(&npy)]);
    assert!(out.contains("orientation: none"), "{out}");
    // A NIfTI file is in a patient's space.
    let out = ok(&["info", s(&data.join("u8_sform.nii"))]);
    let line = out.lines().find(|l| l.starts_with("orientation:")).unwrap();
    assert!(!line.contains("none"), "{out}");
}
