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
