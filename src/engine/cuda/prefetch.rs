//! Compiling ahead: the modules a transform launches start compiling on other threads before it
//! needs them, so that a first run waits for its longest compile, not for each in turn. A batch
//! asks for its whole run at the start ([`Prepare::Modules`]), since its first samples may run
//! one at a time and later ones together, with other entries and other field radii.

use crate::core::{FieldSpec, Mode, Order, Plan};
use crate::engine::Precision;

use super::kernels::{field_pass_entry, resample_entry, resample_many_entry};
use super::{DeviceEngine, Family, field_defines, resample_defines, sampler_defines};
use std::collections::HashSet;

/// What decides the modules of transforms of one kind.
pub(super) struct Launches<'a> {
    pub(super) in_shape: &'a [usize],
    pub(super) channels: usize,
    pub(super) label: bool,
    pub(super) mode: Mode,
    pub(super) order: Order,
}

impl DeviceEngine {
    /// Starts compiling the modules of transforms of kind `l`: one job's resample entry
    /// (`single`: `Some(whether it has a field)`), a batch's (`many`), the prefilter at order 3
    /// and the passes of each field of `fields`. `seen` skips what this caller asked for
    /// already.
    pub(super) fn prefetch_launches<'f>(
        &self,
        l: &Launches<'_>,
        (single, many): (Option<bool>, bool),
        fields: impl IntoIterator<Item = &'f FieldSpec>,
        precision: Precision,
        seen: &mut HashSet<String>,
    ) {
        let mut ask = |family: Family, defines: Vec<String>, name: &str| {
            if seen.insert(format!("{family:?}|{}|{name}", defines.join(" "))) {
                self.prefetch(family, &defines, name);
            }
        };
        let idx64 = l.in_shape.iter().product::<usize>() >= 1 << 31;
        let ndim = l.in_shape.len();
        let rdefs = resample_defines(l.mode, l.order, ndim, precision, idx64);
        if let Some(field) = single {
            let entry = resample_entry(precision, l.channels, l.label, field);
            ask(Family::Resample, rdefs.clone(), entry);
        }
        if many {
            ask(
                Family::Resample,
                rdefs,
                resample_many_entry(l.channels, l.label),
            );
        }
        if l.order == Order::Cubic {
            let pdefs = sampler_defines(l.mode, Order::Cubic, ndim, precision);
            ask(Family::Prefilter, pdefs, "pad_f32");
        }
        for spec in fields {
            for (axis, &s) in spec.sigma_vox.iter().enumerate() {
                let (_, _, entry) = field_pass_entry(s, axis, &spec.shape);
                ask(Family::Field, field_defines(s), entry);
            }
        }
    }

    /// [`Prepare::Modules`]: what a run of `plans` on images of `in_shape` with `(channels,
    /// label channels)` launches, one job at a time and, for f32 runs of several plans, in
    /// batches.
    pub(super) fn prefetch_plans(
        &self,
        plans: &[Plan],
        in_shape: &[usize],
        (channels, label_channels): (usize, usize),
        precision: Precision,
    ) {
        let mut seen = HashSet::new();
        let many = plans.len() > 1 && precision == Precision::F32;
        for plan in plans {
            let out_shape = plan.out_shape.clone().unwrap_or_else(|| in_shape.to_vec());
            if plan.is_spatial_identity() && out_shape == in_shape {
                continue;
            }
            let field = plan.field_spec(&out_shape);
            let l = Launches {
                in_shape,
                channels,
                label: label_channels > 0,
                mode: plan.mode,
                order: plan.order,
            };
            let single = Some(field.is_some());
            self.prefetch_launches(&l, (single, many), field.iter(), precision, &mut seen);
        }
    }
}
