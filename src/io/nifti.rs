//! NIfTI-1 `.nii` / `.nii.gz` (being written by the I/O work; see tests/io_roundtrip.rs).
use std::path::Path;

use super::{IoError, SaveOptions};
use crate::volume::Volume;

pub fn read(path: &Path) -> Result<Volume, IoError> {
    Err(IoError::read("NIfTI", "reader under construction", path))
}

pub fn write(path: &Path, _vol: &Volume, _opts: &SaveOptions) -> Result<(), IoError> {
    Err(IoError::write("NIfTI", "writer under construction", path))
}
