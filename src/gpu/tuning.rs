//! The launch-tuning knobs, read from the environment once per process. They exist for A/B
//! measurements of kernel variants (docs/performance.md names the measurements); left unset,
//! every kernel runs with the measured defaults, and a value out of range is ignored (the default
//! stands).

use std::sync::OnceLock;

/// Every `AUGSCOPE_*` variable that changes how a kernel is built or launched (never its values).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tuning {
    /// `AUGSCOPE_CUDA_BLOCK=x,y,z`: the block of the resample and coordinate kernels (256
    /// threads, x a multiple of 8). Default (32, 8, 1).
    pub block: Option<(u32, u32, u32)>,
    /// `AUGSCOPE_RS_K` (1 to 8): output voxels per thread of the resample kernels.
    pub rs_k: Option<usize>,
    /// `AUGSCOPE_RS_MINB` (1 to 8): blocks per SM the order-0/1 resample kernels are built for.
    pub rs_minb: Option<usize>,
    /// `AUGSCOPE_RS_PLAIN_MINB` (1 to 8): the same for the `resample_plain*` entries.
    pub rs_plain_minb: Option<usize>,
    /// `AUGSCOPE_PF_ROWS=0`: the prefilter's one-thread-per-line kernel for the last axis.
    pub pf_rows: bool,
    /// `AUGSCOPE_RS_PLAIN=0`: the general resample entry for one-channel, label-free jobs.
    pub rs_plain: bool,
    /// `AUGSCOPE_FIELD_COL=0`: no whole-column noise pass in the field.
    pub field_col: bool,
    /// `AUGSCOPE_NVRTC_DEFINES="-DX -DY=1"`: extra defines for every NVRTC build (a build with
    /// them is never a prebuilt or cached module of the defaults).
    pub nvrtc_defines: Vec<String>,
}

impl Tuning {
    /// The knobs as `var` reads them (`std::env::var` in [`tuning`]).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Self {
        let small = |k: &str| {
            var(k)
                .and_then(|s| s.trim().parse::<usize>().ok())
                .filter(|v| (1..=8).contains(v))
        };
        let on = |k: &str| var(k).is_none_or(|v| v.trim() != "0");
        let block = var("AUGSCOPE_CUDA_BLOCK").and_then(|s| {
            let v: Vec<u32> = s.split(',').filter_map(|t| t.trim().parse().ok()).collect();
            match v[..] {
                [x, y, z] if x * y * z == 256 && x % 8 == 0 => Some((x, y, z)),
                _ => None,
            }
        });
        let nvrtc_defines = var("AUGSCOPE_NVRTC_DEFINES")
            .map(|s| {
                s.split_whitespace()
                    .filter(|d| d.starts_with("-D"))
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default();
        Tuning {
            block,
            rs_k: small("AUGSCOPE_RS_K"),
            rs_minb: small("AUGSCOPE_RS_MINB"),
            rs_plain_minb: small("AUGSCOPE_RS_PLAIN_MINB"),
            pf_rows: on("AUGSCOPE_PF_ROWS"),
            rs_plain: on("AUGSCOPE_RS_PLAIN"),
            field_col: on("AUGSCOPE_FIELD_COL"),
            nvrtc_defines,
        }
    }
}

/// This process's knobs, read once.
pub fn tuning() -> &'static Tuning {
    static T: OnceLock<Tuning> = OnceLock::new();
    T.get_or_init(|| Tuning::from_vars(|k| std::env::var(k).ok()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(vars: &[(&str, &str)]) -> Tuning {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Tuning::from_vars(|k| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()))
    }

    #[test]
    fn unset_knobs_leave_the_defaults() {
        let t = with(&[]);
        assert_eq!(
            t,
            Tuning {
                block: None,
                rs_k: None,
                rs_minb: None,
                rs_plain_minb: None,
                pf_rows: true,
                rs_plain: true,
                field_col: true,
                nvrtc_defines: vec![],
            }
        );
    }

    #[test]
    fn knobs_parse_and_values_out_of_range_are_ignored() {
        let t = with(&[
            ("AUGSCOPE_CUDA_BLOCK", "64, 4, 1"),
            ("AUGSCOPE_RS_K", "4"),
            ("AUGSCOPE_RS_MINB", "9"),
            ("AUGSCOPE_RS_PLAIN_MINB", "zero"),
            ("AUGSCOPE_PF_ROWS", " 0"),
            ("AUGSCOPE_RS_PLAIN", "1"),
            ("AUGSCOPE_FIELD_COL", "0"),
            ("AUGSCOPE_NVRTC_DEFINES", "-DA=1 junk -DB"),
        ]);
        assert_eq!(t.block, Some((64, 4, 1)));
        assert_eq!(t.rs_k, Some(4));
        assert_eq!((t.rs_minb, t.rs_plain_minb), (None, None));
        assert!(!t.pf_rows && t.rs_plain && !t.field_col);
        assert_eq!(t.nvrtc_defines, ["-DA=1", "-DB"]);
        // A block that is not 256 threads, or whose x is not a multiple of 8, is ignored.
        assert_eq!(with(&[("AUGSCOPE_CUDA_BLOCK", "32,8,2")]).block, None);
        assert_eq!(with(&[("AUGSCOPE_CUDA_BLOCK", "4,64,1")]).block, None);
    }
}
