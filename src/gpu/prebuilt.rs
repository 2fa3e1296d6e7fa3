//! Prebuilt kernels: CUBINs compiled ahead (at release time, with the pinned NVRTC, for a list of
//! architectures), so that a fresh host's first use loads its modules instead of compiling them.
//!
//! - **Recording** what a workload compiles: with `AUGSCOPE_KERNEL_RECORD=FILE`, every module the
//!   process builds (its family and defines, as the engine and the filters ask for them) is
//!   appended to FILE, one JSON line each ([`record`]); `sort -u` makes it a manifest.
//! - **Building** a store from a manifest: [`super::nvrtc::build_prebuilt`] (`cargo run
//!   --release --example prebuild_kernels`) compiles every line for every architecture into a
//!   folder of kernel-cache entries plus `prebuilt.json` (the NVRTC version and the
//!   architectures). A store holds whole modules ([`whole_modules`]): where the engine builds one
//!   entry of a file per module (a resample path chosen by the shape), the store's module of the
//!   same defines holds them all, so that every shape finds its entry.
//! - **Using** a store: `AUGSCOPE_PREBUILT_KERNELS=DIR` names it ([`dir`]); a module of the
//!   defaults whose key is there loads from it, on a driver at least as new as the store's
//!   NVRTC. A device of an architecture newer than the store's CUBINs loads the store's PTX of
//!   its newest architecture (the driver compiles it on load). NVRTC is then not needed at all
//!   ([`serves`]). A tuning define (`AUGSCOPE_NVRTC_DEFINES`), an architecture the store does
//!   not serve or a module the manifest did not hold compiles with NVRTC as before, and a CUBIN
//!   the driver refuses is compiled again ([`super::device::load_module`]).
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
    /// The virtual architecture (`compute_XY`) of the store's PTX, for devices of a newer
    /// architecture than its CUBINs; `None` in a store without PTX.
    #[serde(default)]
    pub ptx: Option<String>,
}

impl Index {
    /// Whether a device of `arch` (NVRTC's `sm_XY`, `None` where augscope knows no target for
    /// it) and compute capability `cc`, on a driver of CUDA version `driver`, loads every module
    /// of this store without NVRTC: CUBINs of its architecture, or the PTX of an architecture it
    /// is at least.
    pub fn serves(&self, arch: Option<&str>, cc: (i32, i32), driver: i32) -> bool {
        if !driver_can_load(driver, self.nvrtc) {
            return false;
        }
        if arch.is_some_and(|a| self.archs.iter().any(|x| x == a)) {
            return true;
        }
        self.ptx_for(cc).is_some()
    }

    /// The store's PTX architecture where a device of compute capability `cc` can run it and has
    /// no CUBIN here.
    pub fn ptx_for(&self, cc: (i32, i32)) -> Option<&str> {
        let p = self.ptx.as_deref()?;
        let have = cc_of(p)?;
        let cubin = self.archs.iter().any(|a| cc_of(a).is_some_and(|x| x == cc));
        (cc >= have && !cubin).then_some(p)
    }
}

/// The compute capability of `sm_XY` or `compute_XY` (`sm_120` is (12, 0)).
pub fn cc_of(arch: &str) -> Option<(i32, i32)> {
    let n = arch
        .strip_prefix("sm_")
        .or_else(|| arch.strip_prefix("compute_"))?;
    let n: i32 = n.trim_end_matches(['a', 'f']).parse().ok()?;
    (n >= 10).then_some((n / 10, n % 10))
}

/// Whether the process's store ([`dir`]) serves a device (see [`Index::serves`]).
pub fn serves(arch: Option<&str>, cc: (i32, i32), driver: i32) -> bool {
    dir().is_some_and(|(_, index)| index.serves(arch, cc, driver))
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

/// The PTX of the module of `family` with `options` (compiled for the store's PTX architecture)
/// for a device of compute capability `cc`, where the process's store serves it that way.
pub(crate) fn lookup_ptx(
    family: Family,
    options: impl FnOnce(&str) -> Vec<String>,
    cc: (i32, i32),
    driver: impl FnOnce() -> Option<i32>,
) -> Option<(String, Vec<String>)> {
    let (d, index) = dir()?;
    let p = index.ptx_for(cc)?;
    if !driver_can_load(driver()?, index.nvrtc) {
        return None;
    }
    let hit = find(d, family, &options(p), p)?;
    Some((String::from_utf8(hit.image).ok()?, hit.entries))
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
    // One write of the whole line, so that the lines of processes recording into one file at
    // once do not interleave (appends of one write each are not split).
    if let Ok(line) = serde_json::to_string(&spec)
        && let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
    {
        let _ = f.write_all(format!("{line}\n").as_bytes());
    }
}

/// The modules a store of `manifest` holds: each with every entry of its file
/// ([`Family::whole_module`]), once.
pub fn whole_modules(manifest: &[ModuleSpec]) -> Result<Vec<ModuleSpec>, String> {
    let mut out: Vec<ModuleSpec> = vec![];
    for spec in manifest {
        let whole = ModuleSpec {
            family: spec.family.clone(),
            defines: spec.family()?.whole_module(&spec.defines),
        };
        if !out.contains(&whole) {
            out.push(whole);
        }
    }
    Ok(out)
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
    fn a_store_holds_each_module_whole_once() {
        let text = "{\"family\":\"resample\",\"defines\":[\"-DORDER=1\",\"-DRS_ONLY=2\"]}\n\
                    {\"family\":\"resample\",\"defines\":[\"-DORDER=1\",\"-DRS_ONLY=4\"]}\n\
                    {\"family\":\"field\",\"defines\":[\"-DFIELD_R=16\",\"-DFD_ONLY=1\"]}\n\
                    {\"family\":\"filter\",\"defines\":[\"-DMODE=3\"]}\n";
        let whole = whole_modules(&read_manifest(text).unwrap()).unwrap();
        let defines: Vec<&[String]> = whole.iter().map(|m| m.defines.as_slice()).collect();
        assert_eq!(
            defines,
            [&["-DORDER=1"][..], &["-DFIELD_R=16"], &["-DMODE=3"]]
                .map(|d| d.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        );
    }

    #[test]
    fn a_driver_loads_cubins_of_its_cuda_version_or_older() {
        assert!(driver_can_load(13000, (13, 0)));
        assert!(driver_can_load(13010, (13, 0)));
        assert!(!driver_can_load(12080, (13, 0)));
        assert!(!driver_can_load(13000, (13, 1)));
    }

    #[test]
    fn a_store_serves_its_architectures_and_newer_ones_through_its_ptx() {
        let index = Index {
            nvrtc: (13, 0),
            archs: vec!["sm_80".into(), "sm_90".into(), "sm_120".into()],
            modules: 3,
            ptx: Some("compute_120".into()),
        };
        assert!(index.serves(Some("sm_90"), (9, 0), 13000));
        // A CUBIN the store holds is preferred to its PTX.
        assert_eq!(index.ptx_for((12, 0)), None);
        // A newer device than the CUBINs: the PTX, which its driver compiles.
        assert!(index.serves(None, (12, 1), 13000));
        assert_eq!(index.ptx_for((12, 1)), Some("compute_120"));
        assert_eq!(index.ptx_for((13, 0)), Some("compute_120"));
        // An older one the store has no CUBIN for cannot run the newest PTX: NVRTC is needed.
        assert!(!index.serves(Some("sm_86"), (8, 6), 13000));
        assert_eq!(index.ptx_for((8, 6)), None);
        // Nor does a driver older than the store's NVRTC load anything of it.
        assert!(!index.serves(Some("sm_90"), (9, 0), 12080));
        let no_ptx = Index { ptx: None, ..index };
        assert!(!no_ptx.serves(None, (12, 1), 13000));
        assert_eq!(cc_of("sm_100"), Some((10, 0)));
        assert_eq!(cc_of("compute_75"), Some((7, 5)));
        assert_eq!(cc_of("sm_90a"), Some((9, 0)));
        assert_eq!(cc_of("gfx90"), None);
        // An index written before stores carried PTX still reads.
        let old: Index =
            serde_json::from_str(r#"{"nvrtc":[13,0],"archs":["sm_90"],"modules":2}"#).unwrap();
        assert_eq!(old.ptx, None);
    }
}
