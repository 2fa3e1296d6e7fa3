//! The boundary mode of a plan (scipy's `mode`): the data type and its names. The rules it names
//! are the engine's (`engine::boundary`, and `kernels/boundary.cuh` on the GPU).

use std::fmt;
use std::str::FromStr;

/// Boundary mode. The discriminants are the `-DMODE_…` values handed to the CUDA kernels.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Mode {
    #[serde(rename = "constant")]
    Constant = 0,
    #[serde(rename = "grid-constant")]
    GridConstant = 1,
    #[serde(rename = "nearest")]
    Nearest = 2,
    #[serde(rename = "reflect", alias = "grid-mirror")]
    Reflect = 3,
    #[serde(rename = "mirror")]
    Mirror = 4,
    #[serde(rename = "grid-wrap")]
    GridWrap = 5,
    #[serde(rename = "wrap")]
    Wrap = 6,
}

impl Mode {
    pub const ALL: [Mode; 7] = [
        Mode::Constant,
        Mode::GridConstant,
        Mode::Nearest,
        Mode::Reflect,
        Mode::Mirror,
        Mode::GridWrap,
        Mode::Wrap,
    ];

    /// scipy's name for the mode.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Constant => "constant",
            Mode::GridConstant => "grid-constant",
            Mode::Nearest => "nearest",
            Mode::Reflect => "reflect",
            Mode::Mirror => "mirror",
            Mode::GridWrap => "grid-wrap",
            Mode::Wrap => "wrap",
        }
    }

    /// The mode the interpolation taps are folded with (scipy's `_get_spline_boundary_mode`).
    pub fn spline_mode(self) -> Mode {
        match self {
            Mode::Constant | Mode::Wrap => Mode::Mirror,
            m => m,
        }
    }

    /// Whether scipy pads the input (by the engine's `SPLINE_PREPAD`) before the spline prefilter
    /// (`_prepad_for_spline_filter`): these modes have no exact analytic boundary.
    pub fn needs_prepad(self) -> bool {
        matches!(self, Mode::Nearest | Mode::GridConstant)
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "constant" => Ok(Mode::Constant),
            "grid-constant" => Ok(Mode::GridConstant),
            "nearest" => Ok(Mode::Nearest),
            "reflect" | "grid-mirror" => Ok(Mode::Reflect),
            "mirror" => Ok(Mode::Mirror),
            "grid-wrap" => Ok(Mode::GridWrap),
            "wrap" => Ok(Mode::Wrap),
            _ => Err(format!(
                "unknown boundary mode '{s}' (expected one of constant, grid-constant, nearest, \
                 reflect, grid-mirror, mirror, grid-wrap, wrap)"
            )),
        }
    }
}
