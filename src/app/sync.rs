//! What the views need from the worker, sent once per frame: the transform of the current
//! parameters, planes cut from the whole volume once it is there, the CPU vs GPU comparison, and
//! the FEBDS masks of the planes on screen.

use std::sync::Arc;
use std::time::Instant;

use super::App;
use super::slices::{self, DisplaySlice};
use super::worker::{Compute, FilterStep, MaskRequest, SliceSet};

/// Generations whose parameters are kept: more than the worker can have in flight.
const APPLIED_KEPT: usize = 16;

impl App {
    /// The FEBDS planes the views want masks of (original and augmented planes on screen), when
    /// the overlay is on.
    pub fn mask_planes(&self) -> Option<(crate::filter::FebdsMethod, Vec<Arc<DisplaySlice>>)> {
        let method = self.state.params.filter.febds()?;
        let rt = &self.rt;
        let shown = rt
            .work
            .shown
            .as_ref()
            .filter(|s| s.generation == rt.work.generation)?;
        let mut planes: Vec<Arc<DisplaySlice>> = shown.image.clone();
        if self.state.display.side_by_side {
            planes.extend(rt.views.original.iter().cloned());
        }
        Some((method, planes))
    }

    /// Whether masks were asked for and have not all arrived.
    pub(super) fn masks_pending(&self) -> bool {
        let Some((method, planes)) = self.mask_planes() else {
            return false;
        };
        let ids: Vec<u64> = planes.iter().map(|p| p.id).collect();
        self.rt.febds.masks.as_ref().is_none_or(|m| {
            m.method != method || ids.iter().any(|id| !m.masks.iter().any(|(i, _)| i == id))
        })
    }

    /// Sends what the views need and extracts planes that are at hand.
    pub(super) fn sync(&mut self) {
        let App { state, rt } = self;
        let Some(scan) = &rt.scan else {
            return;
        };
        if rt.work.applied.as_ref() != Some(&state.params) {
            if rt.work.applied.is_some() {
                rt.work.generation += 1;
            }
            rt.work.applied = Some(state.params.clone());
        }
        // A new generation (new parameters, or a scan loaded): what it is computed with.
        if rt.work.applied_log.last().map(|(g, _)| *g) != Some(rt.work.generation) {
            rt.work
                .applied_log
                .push((rt.work.generation, state.params.clone()));
            let extra = rt.work.applied_log.len().saturating_sub(APPLIED_KEPT);
            rt.work.applied_log.drain(..extra);
        }
        if rt
            .work
            .work_started
            .is_none_or(|(g, _)| g != rt.work.generation)
        {
            rt.work.work_started = Some((rt.work.generation, Instant::now()));
        }
        let img = &scan.loaded.image;
        if rt.views.original_cursor != scan.cursor || rt.views.original.len() != scan.views.len() {
            rt.views.original = scan
                .views
                .iter()
                .map(|v| {
                    let idx = v.normal.map_or(0, |a| scan.cursor[a]);
                    slices::extract(&img.data, &img.shape, img.channels, &img.spacing_mm, v, idx)
                })
                .collect();
            rt.views.original_label = scan
                .views
                .iter()
                .map(|v| {
                    let idx = v.normal.map_or(0, |a| scan.cursor[a]);
                    scan.loaded
                        .label
                        .as_ref()
                        .map(|l| slices::extract(&l.data, &l.shape, 1, &img.spacing_mm, v, idx))
                })
                .collect();
            rt.views.original_cursor = scan.cursor.clone();
        }
        let have_cuda = rt
            .gpu
            .devices
            .as_ref()
            .is_some_and(|d| !d.devices.is_empty());
        let spec = state.params.backend.spec(have_cuda);
        let nd = img.ndim();
        let plan = state.params.to_plan(nd, &img.spacing_mm);
        let fp = &state.params.filter;
        let filter = fp
            .intensity_filter(scan.loaded.range.1)
            .map(|filter| FilterStep {
                filter,
                boundary: fp.boundary(),
                stage: fp.stage,
            });
        match &rt.work.full {
            Some(f) if f.generation == rt.work.generation => {
                let fresh =
                    rt.work.shown_full
                        && rt.work.shown.as_ref().is_some_and(|s| {
                            s.generation == f.generation && s.cursor == scan.cursor
                        });
                if !fresh {
                    let image = scan
                        .views
                        .iter()
                        .map(|v| {
                            let idx = v.normal.map_or(0, |a| scan.cursor[a]);
                            slices::extract(
                                &f.image.data,
                                &f.image.shape,
                                f.image.channels,
                                &img.spacing_mm,
                                v,
                                idx,
                            )
                        })
                        .collect();
                    let label = scan
                        .views
                        .iter()
                        .map(|v| {
                            let idx = v.normal.map_or(0, |a| scan.cursor[a]);
                            f.label.as_ref().map(|l| {
                                slices::extract(&l.data, &l.shape, 1, &img.spacing_mm, v, idx)
                            })
                        })
                        .collect();
                    rt.work.shown = Some(SliceSet {
                        generation: f.generation,
                        cursor: scan.cursor.clone(),
                        image,
                        label,
                        elapsed_ms: 0.0,
                        filter: f.filter.clone(),
                        unfiltered: false,
                        normalized: f.normalized.clone(),
                    });
                    rt.work.shown_full = true;
                    // They are drawn in the next frame.
                    rt.egui_ctx.request_repaint();
                }
            }
            _ => {
                let sent = rt
                    .work
                    .sent
                    .as_ref()
                    .is_some_and(|(g, c, _)| *g == rt.work.generation && *c == scan.cursor);
                if !sent && let Some(w) = &rt.worker {
                    w.compute(Compute {
                        generation: rt.work.generation,
                        plan: plan.clone(),
                        backend: spec.clone(),
                        precision: state.params.precision,
                        cursor: scan.cursor.clone(),
                        views: scan.views.clone(),
                        slices_first: nd == 3,
                        filter: filter.clone(),
                        normalize: state.params.normalize.clone(),
                        model: state.params.preview_as,
                    });
                    rt.work.sent = Some((rt.work.generation, scan.cursor.clone(), Instant::now()));
                }
            }
        }
        if state.show_compare
            && rt.gpu.compare_sent != Some(rt.work.generation)
            && let Some(w) = &rt.worker
        {
            w.compare(Compute {
                generation: rt.work.generation,
                plan,
                backend: spec,
                precision: state.params.precision,
                cursor: scan.cursor.clone(),
                views: scan.views.clone(),
                slices_first: false,
                filter: None,
                normalize: None,
                model: Default::default(),
            });
            rt.gpu.compare_sent = Some(rt.work.generation);
        }
        self.request_masks();
    }

    /// Asks the worker for the FEBDS masks of the planes on screen when they changed.
    fn request_masks(&mut self) {
        let Some((method, planes)) = self.mask_planes() else {
            return;
        };
        let ids: Vec<u64> = planes.iter().map(|p| p.id).collect();
        if self.rt.febds.mask_sent.as_ref() == Some(&(method, ids.clone())) {
            return;
        }
        let (offset, factor) = febds_map(self.scan_range());
        let have_cuda = self
            .rt
            .gpu
            .devices
            .as_ref()
            .is_some_and(|d| !d.devices.is_empty());
        if let Some(w) = &self.rt.worker {
            w.masks(MaskRequest {
                method,
                planes,
                offset,
                factor,
                backend: self.state.params.backend.spec(have_cuda),
                precision: self.state.params.precision,
            });
            self.rt.febds.mask_sent = Some((method, ids));
        }
    }
}

/// FEBDS reads 12-bit intensities (0..4095: its gamma and Otsu histogram assume them). A scan
/// whose values lie in [0, 4095] with a maximum above 255 is taken as 12-bit data and passed
/// unchanged (`x ↦ x`); any other (8-bit images, floats, CT in HU) is mapped linearly from its
/// [min, max] onto [0, 4095]. Returns `(offset, factor)` of `x ↦ (x − offset) · factor`.
pub fn febds_map((lo, hi): (f32, f32)) -> (f32, f32) {
    if lo >= 0.0 && hi <= 4095.0 && hi > 255.0 {
        (0.0, 1.0)
    } else if hi > lo {
        (lo, 4095.0 / (hi - lo))
    } else {
        (lo, 1.0)
    }
}
