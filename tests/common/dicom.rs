//! DICOM series written with dicom-rs for the tests: axial int16 slices, one file per slice, each
//! series with its own SeriesInstanceUID, SeriesNumber, SeriesDescription and Modality, so that
//! several series can share one folder. Arrays are `[z, y, x]`.

use std::path::Path;

use dicom_core::value::PrimitiveValue;
use dicom_core::{DataElement, VR};
use dicom_dictionary_std::{tags, uids};
use dicom_object::{FileMetaTableBuilder, InMemDicomObject};

/// A series to write.
pub struct Series<'a> {
    pub uid: &'a str,
    pub number: i32,
    pub description: &'a str,
    pub modality: &'a str,
    /// `[slices, rows, columns]`.
    pub shape: [usize; 3],
    /// The first stored value; voxel `i` (C order) holds `base + i`.
    pub base: i16,
    /// BitsAllocated (16 for a series augscope decodes; 12 for one it refuses to decode).
    pub bits: u16,
}

impl Series<'_> {
    /// The series' voxel values, `[z, y, x]` in C order, as augscope reads them (no rescale).
    pub fn values(&self) -> Vec<f32> {
        let n: usize = self.shape.iter().product();
        (0..n)
            .map(|i| (self.base as i32 + i as i32) as f32)
            .collect()
    }
}

/// Writes `s` into `dir`, slice `k` as `IM{k:03}_{tag}.dcm` at z = 2.5·k mm (the files of two
/// series with other tags interleave in name order).
pub fn write_series(dir: &Path, tag: &str, s: &Series) {
    let [depth, rows, cols] = s.shape;
    let values = s.values();
    for k in 0..depth {
        let slice = &values[k * rows * cols..(k + 1) * rows * cols];
        let bytes: Vec<u8> = slice
            .iter()
            .flat_map(|&v| (v as i16).to_le_bytes())
            .collect();
        let sop = format!("{}.{}", s.uid, k + 1);
        let position = format!("0\\0\\{}", 2.5 * k as f64);
        let obj = InMemDicomObject::from_element_iter([
            DataElement::new(tags::SOP_CLASS_UID, VR::UI, uids::MR_IMAGE_STORAGE),
            DataElement::new(tags::SOP_INSTANCE_UID, VR::UI, sop.as_str()),
            DataElement::new(tags::MODALITY, VR::CS, s.modality),
            DataElement::new(tags::SERIES_DESCRIPTION, VR::LO, s.description),
            DataElement::new(tags::SERIES_INSTANCE_UID, VR::UI, s.uid),
            DataElement::new(tags::SERIES_NUMBER, VR::IS, s.number.to_string().as_str()),
            DataElement::new(tags::INSTANCE_NUMBER, VR::IS, (k + 1).to_string().as_str()),
            DataElement::new(tags::IMAGE_POSITION_PATIENT, VR::DS, position.as_str()),
            DataElement::new(tags::IMAGE_ORIENTATION_PATIENT, VR::DS, "1\\0\\0\\0\\1\\0"),
            DataElement::new(tags::SLICE_THICKNESS, VR::DS, "2.5"),
            DataElement::new(tags::SAMPLES_PER_PIXEL, VR::US, PrimitiveValue::from(1u16)),
            DataElement::new(tags::PHOTOMETRIC_INTERPRETATION, VR::CS, "MONOCHROME2"),
            DataElement::new(tags::ROWS, VR::US, PrimitiveValue::from(rows as u16)),
            DataElement::new(tags::COLUMNS, VR::US, PrimitiveValue::from(cols as u16)),
            DataElement::new(tags::PIXEL_SPACING, VR::DS, "0.8\\0.7"),
            DataElement::new(tags::BITS_ALLOCATED, VR::US, PrimitiveValue::from(s.bits)),
            DataElement::new(tags::BITS_STORED, VR::US, PrimitiveValue::from(s.bits)),
            DataElement::new(tags::HIGH_BIT, VR::US, PrimitiveValue::from(s.bits - 1)),
            DataElement::new(
                tags::PIXEL_REPRESENTATION,
                VR::US,
                PrimitiveValue::from(1u16),
            ),
            DataElement::new(tags::PIXEL_DATA, VR::OW, PrimitiveValue::from(bytes)),
        ]);
        let file = obj
            .with_meta(FileMetaTableBuilder::new().transfer_syntax(uids::EXPLICIT_VR_LITTLE_ENDIAN))
            .expect("a file meta group");
        file.write_to_file(dir.join(format!("IM{k:03}_{tag}.dcm")))
            .expect("write a DICOM slice");
    }
}

/// Two MR series in `dir`: #3 "T1 axial" (4 × 5 × 6) and #7 "T2 axial" (3 × 5 × 6), their files
/// interleaved in name order, and a text file that is no DICOM. Returns them in that order.
pub fn two_series(dir: &Path) -> [Series<'static>; 2] {
    let t1 = Series {
        uid: "2.25.1001",
        number: 3,
        description: "T1 axial",
        modality: "MR",
        shape: [4, 5, 6],
        base: 100,
        bits: 16,
    };
    let t2 = Series {
        uid: "2.25.2002",
        number: 7,
        description: "T2 axial",
        modality: "MR",
        shape: [3, 5, 6],
        base: -300,
        bits: 16,
    };
    write_series(dir, "a", &t1);
    write_series(dir, "b", &t2);
    std::fs::write(dir.join("README.txt"), "notes beside the series").expect("write notes");
    [t1, t2]
}
