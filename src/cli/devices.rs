//! `augscope devices`: the CUDA devices, the kernel cache.

use anyhow::Context;

use super::{usage, write_text};
pub(super) fn devices(json: bool, clear_cache: bool) -> anyhow::Result<()> {
    if clear_cache {
        let Some(dir) = crate::gpu::kernel_cache::dir() else {
            return write_text(None, "kernels: no disk cache to clear\n", "device report");
        };
        let n = crate::gpu::kernel_cache::clear(&dir)
            .map_err(|e| usage(format!("cannot clear {}: {e}", dir.display())))?;
        return write_text(
            None,
            &format!(
                "kernels: removed {n} compiled kernels from {}\n",
                dir.display()
            ),
            "device report",
        );
    }
    let report = crate::gpu::device::discover();
    let text = if json {
        serde_json::to_string_pretty(&report).context("cannot encode the report")?
    } else {
        report.to_string()
    };
    write_text(None, &format!("{text}\n"), "device report")
}
