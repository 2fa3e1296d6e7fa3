//! Prebuilt kernels: CUBINs compiled ahead (at release time, with the pinned NVRTC, for a list of
//! architectures), so that a fresh host's first use loads its modules instead of compiling them.
//!
//! - **Recording** what a workload compiles: with `AUGSCOPE_KERNEL_RECORD=FILE`, every module the
//!   process builds (its family and defines, as the engine and the filters ask for them) is
//!   appended to FILE, one JSON line each ([`record`]); `sort -u` makes it a manifest.
//! - **Building** a store from a manifest: [`super::nvrtc::build_prebuilt`] (`cargo run
//!   --release --example prebuild_kernels`) compiles every line for every architecture into a
//!   folder of kernel-cache entries plus `prebuilt.json` (the NVRTC version and the
//!   architectures).
//! - **Using** a store: `AUGSCOPE_PREBUILT_KERNELS=DIR` names it ([`dir`]); a module of the
//!   defaults whose key is there loads from it, on a driver at least as new as the store's
//!   NVRTC. A tuning define (`AUGSCOPE_NVRTC_DEFINES`), another architecture or a module the
//!   manifest did not hold compiles with NVRTC as before, and a CUBIN the driver refuses is
//!   compiled again ([`super::device::load_module`]).
//!
//! An entry's key is the kernel cache's ([`kernel_cache::key`]) with the NVRTC and driver
//! versions left out (the store's NVRTC is recorded once), so a store serves any host.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use super::family::Family;
use super::{kernel_cache, lock};

/// The file of a store that says what it holds.
pub const INDEX: &str = "prebuilt.json";

/// What a store holds: the NVRTC that built it and the architectures.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Index {
    /// NVRTC's (major, minor): a driver older than this CUDA version cannot load the CUBINs.
    pub nvrtc: (i32, i32),
    pub archs: Vec<String>,
    /// Modules per architecture.
    pub modules: usize,
}

/// One module as the engine asks for it: a kernel family and its defines (without the
/// architecture and NVRTC's own options, which [`nvrtc_options`] adds).
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct ModuleSpec {
    pub family: String,
    pub defines: Vec<String>,
}

impl ModuleSpec {
    pub fn family(&self) -> Result<Family, String> {
        Family::ALL
            .into_iter()
            .find(|f| f.name() == self.family)
            .ok_or_else(|| format!("unknown kernel family '{}'", self.family))
    }
}

/// The key of a prebuilt entry.
pub(crate) fn key(family: Family, options: &[String], arch: &str) -> String {
    kernel_cache::key(family.file(), &family.program(), options, arch, (0, 0), 0)
}

/// The store `AUGSCOPE_PREBUILT_KERNELS` names and its index, when it is a readable store; read
/// once.
pub fn dir() -> Option<&'static (PathBuf, Index)> {
    static D: OnceLock<Option<(PathBuf, Index)>> = OnceLock::new();
    D.get_or_init(|| {
        let d = std::env::var_os("AUGSCOPE_PREBUILT_KERNELS").filter(|d| !d.is_empty())?;
        let d = PathBuf::from(d);
        let index = read_index(&d).ok()?;
        Some((d, index))
    })
    .as_ref()
}

/// The index of the store in `dir`.
pub fn read_index(dir: &Path) -> Result<Index, String> {
    let path = dir.join(INDEX);
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Whether a driver of CUDA version `driver` (as `cuDriverGetVersion` gives it, 13000 for 13.0)
/// can load the CUBINs of a store built by NVRTC `nvrtc`.
pub fn driver_can_load(driver: i32, nvrtc: (i32, i32)) -> bool {
    driver >= nvrtc.0 * 1000 + nvrtc.1 * 10
}

/// The module of `family` with `options` for `arch` in the store `dir`, if it holds it.
pub fn find(
    dir: &Path,
    family: Family,
    options: &[String],
    arch: &str,
) -> Option<kernel_cache::Compiled> {
    kernel_cache::read(dir, &key(family, options, arch))
}

/// The module in the process's store ([`dir`]) where a driver of CUDA version `driver` can load
/// it (`driver` is asked only when the store holds the architecture).
pub(crate) fn lookup(
    family: Family,
    options: &[String],
    arch: &str,
    driver: impl FnOnce() -> Option<i32>,
) -> Option<kernel_cache::Compiled> {
    let (d, index) = dir()?;
    if !index.archs.iter().any(|a| a == arch) || !driver_can_load(driver()?, index.nvrtc) {
        return None;
    }
    find(d, family, options, arch)
}

/// Appends the module of `family` with `defines` to the file `AUGSCOPE_KERNEL_RECORD` names,
/// once per process and module.
pub(crate) fn record(family: Family, defines: &[String]) {
    static FILE: OnceLock<Option<PathBuf>> = OnceLock::new();
    static SEEN: OnceLock<Mutex<std::collections::HashSet<ModuleSpec>>> = OnceLock::new();
    let Some(path) = FILE
        .get_or_init(|| std::env::var_os("AUGSCOPE_KERNEL_RECORD").map(PathBuf::from))
        .as_ref()
    else {
        return;
    };
    let spec = ModuleSpec {
        family: family.name().to_string(),
        defines: defines.to_vec(),
    };
    if !lock(SEEN.get_or_init(Mutex::default)).insert(spec.clone()) {
        return;
    }
    if let Ok(line) = serde_json::to_string(&spec)
        && let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
    {
        let _ = writeln!(f, "{line}");
    }
}

/// Reads a manifest: one [`ModuleSpec`] JSON per line (blank lines and repeats are skipped).
pub fn read_manifest(text: &str) -> Result<Vec<ModuleSpec>, String> {
    let mut out: Vec<ModuleSpec> = vec![];
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let spec: ModuleSpec =
            serde_json::from_str(line).map_err(|e| format!("manifest line {}: {e}", i + 1))?;
        spec.family()
            .map_err(|e| format!("manifest line {}: {e}", i + 1))?;
        if !out.contains(&spec) {
            out.push(spec);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifests_parse_and_repeat_lines_count_once() {
        let text = "{\"family\":\"intensity\",\"defines\":[]}\n\n\
                    {\"family\":\"resample\",\"defines\":[\"-DORDER=1\"]}\n\
                    {\"family\":\"intensity\",\"defines\":[]}\n";
        let m = read_manifest(text).unwrap();
        assert_eq!(m.len(), 2);
        assert_eq!(m[1].family().unwrap(), Family::Resample);
        let bad = read_manifest("{\"family\":\"warp\",\"defines\":[]}").unwrap_err();
        assert!(bad.contains("line 1") && bad.contains("warp"), "{bad}");
        assert!(read_manifest("not json").unwrap_err().contains("line 1"));
    }

    #[test]
    fn a_driver_loads_cubins_of_its_cuda_version_or_older() {
        assert!(driver_can_load(13000, (13, 0)));
        assert!(driver_can_load(13010, (13, 0)));
        assert!(!driver_can_load(12080, (13, 0)));
        assert!(!driver_can_load(13000, (13, 1)));
    }
}
