//! What a caller asks of the engines: the storage precision on a GPU and which engine to use.

use serde::{Deserialize, Serialize};

/// Storage precision of the image on a GPU (compute is always f32).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    #[default]
    F32,
    F16,
    Bf16,
}

impl std::str::FromStr for Precision {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "f32" | "full" => Ok(Precision::F32),
            "f16" | "half" => Ok(Precision::F16),
            "bf16" | "bfloat16" => Ok(Precision::Bf16),
            _ => Err(format!(
                "unknown precision '{s}' (expected f32, f16 or bf16)"
            )),
        }
    }
}

/// Which engine the user asked for: `auto`, `cpu`, `cuda` or `cuda:N[,M…]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum BackendSpec {
    Auto,
    Cpu,
    /// Device ordinals; empty means "the first device".
    Cuda(Vec<usize>),
}

impl std::str::FromStr for BackendSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || format!("unknown backend '{s}' (expected auto, cpu, cuda or cuda:N[,M…])");
        match s {
            "auto" => Ok(BackendSpec::Auto),
            "cpu" => Ok(BackendSpec::Cpu),
            "cuda" | "gpu" => Ok(BackendSpec::Cuda(vec![])),
            _ => {
                let rest = s.strip_prefix("cuda:").ok_or_else(bad)?;
                let ids = rest
                    .split(',')
                    .map(|t| t.trim().parse::<usize>().map_err(|_| bad()))
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(BackendSpec::Cuda(ids))
            }
        }
    }
}
