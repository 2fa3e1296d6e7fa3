//! The kernel families: one `.cu` file each, compiled by NVRTC ([`super::nvrtc`]) and kept in
//! stores of kernels compiled ahead ([`super::prebuilt`]).

/// The shared header with the boundary rules and samplers.
pub const BOUNDARY_CUH: &str = include_str!("../../kernels/boundary.cuh");

/// One `.cu` file per kernel family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    /// `resample_{f32,f16,bf16}`, `coords_f32`.
    Resample,
    /// `gauss_mid_f32`, `gauss_last_f32`, `gauss_direct_f32`, `field_stats_f32`.
    Field,
    /// `pad_f32`, `prefilter_axis_f32`, `to_store_f32`.
    Prefilter,
    /// The filters (`sep_line_f32`, `median_f32`, …); their host code is `src/filter/cuda/`.
    Filter,
    /// The intensity steps (`int_noise`, `int_partials`, `int_blur_axis`, …); their host code is
    /// `src/engine/cuda/intensity.rs`.
    Intensity,
}

impl Family {
    pub const ALL: [Family; 5] = [
        Family::Resample,
        Family::Field,
        Family::Prefilter,
        Family::Filter,
        Family::Intensity,
    ];

    /// The family's name in a manifest of prebuilt kernels (`super::prebuilt`).
    pub fn name(self) -> &'static str {
        match self {
            Family::Resample => "resample",
            Family::Field => "field",
            Family::Prefilter => "prefilter",
            Family::Filter => "filter",
            Family::Intensity => "intensity",
        }
    }

    /// The define that keeps one entry of the family's file (`RS_ONLY=k` in resample.cu,
    /// `FD_ONLY=k` in field.cu), as the engine builds a module per launched entry; without it the
    /// module holds every entry.
    pub fn entry_selector(self) -> Option<&'static str> {
        match self {
            Family::Resample => Some("-DRS_ONLY="),
            Family::Field => Some("-DFD_ONLY="),
            _ => None,
        }
    }

    /// `defines` without the entry selector: those of the module that holds every entry.
    pub fn whole_module(self, defines: &[String]) -> Vec<String> {
        match self.entry_selector() {
            Some(sel) => defines
                .iter()
                .filter(|d| !d.starts_with(sel))
                .cloned()
                .collect(),
            None => defines.to_vec(),
        }
    }

    pub fn file(self) -> &'static str {
        match self {
            Family::Resample => "kernels/resample.cu",
            Family::Field => "kernels/field.cu",
            Family::Prefilter => "kernels/prefilter.cu",
            Family::Filter => "kernels/filter.cu",
            Family::Intensity => "kernels/intensity.cu",
        }
    }

    pub(crate) fn source(self) -> &'static str {
        match self {
            Family::Resample => include_str!("../../kernels/resample.cu"),
            Family::Field => include_str!("../../kernels/field.cu"),
            Family::Prefilter => include_str!("../../kernels/prefilter.cu"),
            Family::Filter => include_str!("../../kernels/filter.cu"),
            Family::Intensity => include_str!("../../kernels/intensity.cu"),
        }
    }

    /// The program NVRTC compiles: the shared header (which defines its include guard, so the
    /// `.cu` file's `#include "boundary.cuh"` is skipped) followed by the family's file.
    pub fn program(self) -> String {
        match self {
            Family::Field | Family::Filter | Family::Intensity => self.source().to_string(),
            _ => format!(
                "{BOUNDARY_CUH}\n#line 1 \"{}\"\n{}",
                self.file(),
                self.source()
            ),
        }
    }
}
