//! NIfTI-1 and NIfTI-2 single-file `.nii` / `.nii.gz` read and write.
//!
//! Arrays are `[z, y, x]` (NIfTI `(k, j, i)`), 2D images `[y, x]`; the 4th NIfTI axis and RGB24
//! colour are channels (docs/design.md §2). Because NIfTI stores `i` fastest, the file order already is C
//! order for `[z, y, x]` (and channel-major for `[t, z, y, x]`): no transpose is needed.
//!
//! The header (348 bytes for NIfTI-1, 540 for NIfTI-2) is parsed and validated here, by hand, in
//! either byte order, before a single data byte is read: the `nifti` crate allocates whatever a
//! header declares and panics on some hostile headers, so only its [`NiftiHeader`] type is used,
//! to carry every header field from a read to a write. NIfTI-2's 64-bit dims, offsets and floats
//! do not fit that type: a NIfTI-2 volume keeps them in `Volume::nifti2` ([`Nifti2Fields`]) and is
//! written back as NIfTI-2. What the reader returns reproduces nibabel (`nib.load(p)`):
//! `get_fdata()` for the values (scl_slope/scl_inter applied, slope 0 or non-finite meaning no
//! scaling), `img.affine` for `world_from_voxel` and `header.get_zooms()` for the spacing,
//! including the fixes nibabel applies silently on load (qfac not ±1 → 1, pixdim ≤ 0 → |pixdim| or
//! 1, unknown xform codes → 0).

mod affine;
mod header;
mod read;
mod write;

#[cfg(doc)]
use ::nifti::NiftiHeader;

pub use affine::world_from_voxel;
pub use read::{read, read_with};
pub use write::write;

pub use crate::core::volume::Nifti2Fields;

const FORMAT: &str = "NIfTI";
/// Bytes decoded per read while streaming the data.
const CHUNK_BYTES: usize = 1 << 20;
