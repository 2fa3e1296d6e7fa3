//! Where the stored test inputs live (`tests/data/`, `tests/fixtures/`) and how the tests read
//! them: paths under the checkout, `.npy` arrays as values and shape, and scans as volumes.

use std::path::{Path, PathBuf};

use augscope::Volume;
use augscope::io::{self, LoadOptions, npy};

/// The checkout's root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A path under `tests/`, e.g. `fixtures/febds`.
pub fn tests_dir(rel: &str) -> PathBuf {
    root().join("tests").join(rel)
}

/// A file of `tests/data/`, e.g. `retina.jpg` or `dicom/CT_small.dcm`.
pub fn data(name: &str) -> PathBuf {
    tests_dir("data").join(name)
}

/// An `.npy` array of `dir`: values and shape; panics naming the file where it cannot be read.
pub fn npy_at(dir: &Path, name: &str) -> (Vec<f32>, Vec<usize>) {
    let a = npy::read(&dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    (a.data, a.shape)
}

/// An `.npy` array of the folder `tests/<rel>`: values and shape.
pub fn npy_in(rel: &str, name: &str) -> (Vec<f32>, Vec<usize>) {
    npy_at(&tests_dir(rel), name)
}

/// A scan (any format augscope reads) with the default options; panics with the error.
pub fn load_volume(p: &Path) -> Volume {
    io::load(p, &LoadOptions::default()).unwrap_or_else(|e| panic!("{e}"))
}

/// The voxel values of [`load_volume`].
pub fn load_values(p: &Path) -> Vec<f32> {
    load_volume(p).data
}
