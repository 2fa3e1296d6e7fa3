//! Checking a preset: its ranges, probabilities and names on their own, and against the grid it
//! is sampled for (the number of axes, and the voxel size its millimetres are converted with).
//! Every range's ends are values a plan may hold (`limits`), so that every draw can be applied.

use super::{PRESET_VERSION, Preset, PresetError, Range, Space, Unit, invalid, per_axis};
use crate::augment::{Mode, Order, limits};
use crate::core::plan::{brief, brief_list};

/// The most intensity steps a preset may list (a pipeline has a handful).
pub const MAX_INTENSITY_STEPS: usize = 32;

impl Preset {
    /// Checks ranges, probabilities and names; the message names the field.
    pub fn validate(&self) -> Result<(), PresetError> {
        if self.version != PRESET_VERSION {
            return Err(invalid(format!(
                "version {} is not supported (this augscope reads version {PRESET_VERSION})",
                self.version
            )));
        }
        let prob = |field: &str, p: f64| {
            if (0.0..=1.0).contains(&p) {
                Ok(())
            } else {
                Err(invalid(format!(
                    "{field} = {p} is not a probability in [0, 1]"
                )))
            }
        };
        let range = |field: &str, r: Range| {
            if !r[0].is_finite() || !r[1].is_finite() {
                Err(invalid(format!("{field} = {r:?} must be finite")))
            } else if r[0] > r[1] {
                Err(invalid(format!(
                    "{field} = {r:?}: lower bound {} is above upper bound {}",
                    r[0], r[1]
                )))
            } else if !(r[1] - r[0]).is_finite() {
                Err(invalid(format!(
                    "{field} = {r:?} is wider than a draw can span"
                )))
            } else {
                Ok(())
            }
        };
        // Both ends of a range must be values a plan may hold (`limits`), so that every draw
        // can be applied.
        let within = |field: &str, r: Range, why: fn(f64) -> Option<&'static str>| match r
            .iter()
            .find_map(|&v| why(v).map(|w| (v, w)))
        {
            None => Ok(()),
            Some((v, w)) => Err(invalid(format!(
                "{field} = {r:?}: {v} is beyond what a plan holds: {w}"
            ))),
        };
        let axes_len = |field: &str, n: usize| {
            if n == 1 || n == 2 || n == 3 {
                Ok(())
            } else {
                Err(invalid(format!(
                    "{field} holds {n} entries (expected 1 for all axes, or one per axis: 2 or 3)"
                )))
            }
        };
        if let Some(f) = &self.flip {
            axes_len("flip.p", f.p.len())?;
            for (i, &p) in f.p.iter().enumerate() {
                prob(&format!("flip.p[{i}]"), p)?;
            }
        }
        if let Some(r) = &self.rotate {
            prob("rotate.p", r.p)?;
            axes_len("rotate.p_axis", r.p_axis.len())?;
            for (i, &p) in r.p_axis.iter().enumerate() {
                prob(&format!("rotate.p_axis[{i}]"), p)?;
            }
            axes_len("rotate.range_deg", r.range_deg.len())?;
            for (i, &g) in r.range_deg.iter().enumerate() {
                range(&format!("rotate.range_deg[{i}]"), g)?;
            }
            if let Some(g) = r.range_deg_2d {
                range("rotate.range_deg_2d", g)?;
            }
        }
        if let Some(s) = &self.scale {
            prob("scale.p", s.p)?;
            axes_len("scale.range", s.range.len())?;
            if s.range.len() > 1 && !s.per_axis {
                return Err(invalid(
                    "scale.range holds one range per axis but scale.per_axis is false \
                     (an isotropic scale takes one range)",
                ));
            }
            for (i, &g) in s.range.iter().enumerate() {
                range(&format!("scale.range[{i}]"), g)?;
                if g[0] <= 0.0 {
                    return Err(invalid(format!(
                        "scale.range[{i}] = {g:?}: scale factors must be > 0"
                    )));
                }
                within(&format!("scale.range[{i}]"), g, limits::scale)?;
            }
        }
        if let Some(t) = &self.translate {
            prob("translate.p", t.p)?;
            axes_len("translate.range", t.range.len())?;
            for (i, &g) in t.range.iter().enumerate() {
                range(&format!("translate.range[{i}]"), g)?;
                within(&format!("translate.range[{i}]"), g, limits::translate)?;
            }
        }
        if let Some(e) = &self.elastic {
            prob("elastic.p", e.p)?;
            range("elastic.alpha", e.alpha)?;
            range("elastic.sigma", e.sigma)?;
            if e.sigma[0] <= 0.0 {
                return Err(invalid(format!(
                    "elastic.sigma = {:?}: sigma must be > 0",
                    e.sigma
                )));
            }
            within("elastic.alpha", e.alpha, limits::alpha)?;
            within("elastic.sigma", e.sigma, limits::sigma)?;
        }
        let s = &self.sampling;
        Order::try_from(s.order).map_err(|e| invalid(format!("sampling.order: {e}")))?;
        if s.label_order > 5 {
            return Err(invalid(format!(
                "sampling.label_order = {} is not a spline order 0..5",
                s.label_order
            )));
        }
        s.mode
            .parse::<Mode>()
            .map_err(|e| invalid(format!("sampling.mode: {e}")))?;
        if !s.cval.is_finite() {
            return Err(invalid("sampling.cval must be finite"));
        }
        if self.intensity.len() > MAX_INTENSITY_STEPS {
            return Err(invalid(format!(
                "{} intensity steps: at most {MAX_INTENSITY_STEPS}",
                self.intensity.len()
            )));
        }
        for (i, step) in self.intensity.iter().enumerate() {
            step.validate()
                .map_err(|why| invalid(format!("intensity[{i}]: {why}")))?;
        }
        if let Some(n) = &self.normalize {
            n.validate().map_err(invalid)?;
        }
        Ok(())
    }

    /// Checks that the preset fits a grid of `ndim` dimensions.
    pub fn check_ndim(&self, ndim: usize) -> Result<(), PresetError> {
        if !(2..=3).contains(&ndim) {
            return Err(invalid(format!(
                "presets apply to 2D and 3D grids, not {ndim}D"
            )));
        }
        let fits = |field: &str, n: usize| {
            if n == 1 || n == ndim {
                Ok(())
            } else {
                Err(invalid(format!(
                    "{field} holds {n} entries but the image has {ndim} axes"
                )))
            }
        };
        if let Some(f) = &self.flip {
            fits("flip.p", f.p.len())?;
        }
        if let Some(r) = &self.rotate
            && ndim == 3
        {
            fits("rotate.range_deg", r.range_deg.len())?;
            fits("rotate.p_axis", r.p_axis.len())?;
        }
        if let Some(s) = &self.scale {
            fits("scale.range", s.range.len())?;
        }
        if let Some(t) = &self.translate {
            fits("translate.range", t.range.len())?;
        }
        Ok(())
    }

    /// Whether millimetre values of the preset (mm space, or a translation in mm) fit a grid of
    /// voxel size `spacing_mm`: the spacing is a scan's (`limits::spacing_ok`), and every
    /// range's ends stay within the plan limits once converted to voxels, where the engines
    /// apply them. A preset without millimetre values fits any spacing.
    pub fn check_spacing(&self, spacing_mm: &[f64]) -> Result<(), PresetError> {
        let mm_translate = self.translate.as_ref().is_some_and(|t| t.unit == Unit::Mm);
        if self.space != Space::Mm && !mm_translate {
            return Ok(());
        }
        if let Some((axis, sp)) = spacing_mm
            .iter()
            .enumerate()
            .find(|(_, s)| !limits::spacing_ok(**s))
        {
            return Err(invalid(format!(
                "the image's voxel spacing [{}] mm is {} mm on axis {axis}, outside the 0.001 to \
                 10000 mm of any scan, so the preset's millimetres cannot become voxels",
                brief_list(spacing_mm),
                brief(*sp)
            )));
        }
        // A conversion of the plan (`v`, `sp` → value), its units from and to.
        type Conversion = (fn(f64, f64) -> f64, &'static str, &'static str);
        const MM_TO_VOX: Conversion = (|v, sp| v / sp, "mm", "voxels");
        const VOX_TO_MM: Conversion = (|v, sp| v * sp, "voxels", "mm");
        let over = |field: &str, r: Range, axis: usize, (f, from, to): Conversion, limit: f64| {
            let Some(&sp) = spacing_mm.get(axis) else {
                return Ok(());
            };
            // A value that converts to NaN is past every limit too.
            match r
                .iter()
                .find(|&&v| f(v, sp).abs() > limit || f(v, sp).is_nan())
            {
                None => Ok(()),
                Some(&v) => Err(invalid(format!(
                    "{field} = {r:?}: {v} {from} is {} {to} on axis {axis} at this image's \
                     spacing of {} mm, beyond the limit of {limit:e} {to}",
                    brief(f(v, sp)),
                    brief(sp)
                ))),
            }
        };
        if let Some(t) = &self.translate {
            for axis in 0..spacing_mm.len() {
                let r = per_axis(&t.range, axis).unwrap_or([0.0, 0.0]);
                let field = format!(
                    "translate.range[{}]",
                    axis.min(t.range.len().saturating_sub(1))
                );
                match (self.space, t.unit) {
                    (_, Unit::Mm) => over(&field, r, axis, MM_TO_VOX, limits::TRANSLATE)?,
                    // The plan holds it in millimetres.
                    (Space::Mm, Unit::Voxel) => {
                        over(&field, r, axis, VOX_TO_MM, limits::TRANSLATE)?
                    }
                    (Space::Voxel, Unit::Voxel) => {}
                }
            }
        }
        if let Some(e) = &self.elastic
            && self.space == Space::Mm
        {
            for axis in 0..spacing_mm.len() {
                over("elastic.sigma", e.sigma, axis, MM_TO_VOX, limits::SIGMA)?;
                over("elastic.alpha", e.alpha, axis, MM_TO_VOX, limits::ALPHA)?;
            }
        }
        Ok(())
    }
}
