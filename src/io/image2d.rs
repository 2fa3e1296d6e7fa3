//! PNG / JPEG / TIFF (being written by the I/O work).
use std::path::Path;

use super::IoError;
use crate::volume::Volume;

pub fn read(path: &Path) -> Result<Volume, IoError> {
    Err(IoError::read("image", "reader under construction", path))
}

pub fn write_png(path: &Path, _vol: &Volume) -> Result<(), IoError> {
    Err(IoError::write("PNG", "writer under construction", path))
}
