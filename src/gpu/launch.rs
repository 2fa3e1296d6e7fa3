//! Launch shapes shared by every family.

use cudarc::driver::LaunchConfig;

use super::GpuError;

/// Threads per block of the one-dimensional launches.
pub const BLOCK: u32 = 256;

pub(crate) fn grid_1d(n: usize) -> Result<LaunchConfig, GpuError> {
    let blocks = n.div_ceil(BLOCK as usize).max(1);
    if blocks > i32::MAX as usize {
        return Err(GpuError::Shape(format!(
            "{n} voxels are too many for one launch"
        )));
    }
    Ok(LaunchConfig {
        grid_dim: (blocks as u32, 1, 1),
        block_dim: (BLOCK, 1, 1),
        shared_mem_bytes: 0,
    })
}
