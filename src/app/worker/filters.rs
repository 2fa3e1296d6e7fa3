//! The filter stages of the explorer: the filtered scan kept per filter setting, filters after
//! the transform, and FEBDS masks of the planes on screen.

use std::sync::Arc;
use std::time::Instant;

use super::{
    BackendSpec, Boundary, DisplaySlice, FebdsMethod, Filter, FilterStage, Precision, Volume,
    slices,
};
/// The intensity filter of a request and where it acts.
#[derive(Clone, Debug, PartialEq)]
pub struct FilterStep {
    pub filter: Filter,
    pub boundary: Boundary,
    pub stage: FilterStage,
}

/// What a filter run did, for the timings panel.
#[derive(Clone, Debug, PartialEq)]
pub struct FilterReport {
    pub name: &'static str,
    pub stage: FilterStage,
    /// `cpu` or `cuda:N`.
    pub backend: String,
    pub elapsed_ms: f64,
    /// Why the engine is not the one asked for (CUDA unavailable, out of memory).
    pub note: Option<String>,
    /// Served from the cache: the scan was filtered so for an earlier request.
    pub cached: bool,
    /// 0.5 and 99.5 percentiles of the filtered values (a window for LoG and DoG, whose values
    /// have nothing in common with the scan's).
    pub window: (f32, f32),
}

/// FEBDS masks of planes on screen.
#[derive(Clone)]
pub struct MaskRequest {
    pub method: FebdsMethod,
    pub planes: Vec<Arc<DisplaySlice>>,
    /// `x ↦ (x − offset) · factor` takes the scan's values to FEBDS's 12-bit range.
    pub offset: f32,
    pub factor: f32,
    pub backend: BackendSpec,
    pub precision: Precision,
}

/// The answer to a [`MaskRequest`]: per plane, its id and its 0/1 mask (`None`: no mask, the
/// note says why).
pub struct MaskSet {
    pub method: FebdsMethod,
    pub masks: Vec<(u64, Option<Arc<DisplaySlice>>)>,
    pub backend: String,
    pub note: Option<String>,
    pub elapsed_ms: f64,
}

impl MaskSet {
    /// The mask of the plane with content id `id`.
    pub fn mask_for(&self, id: u64) -> Option<Arc<DisplaySlice>> {
        self.masks
            .iter()
            .find(|(i, _)| *i == id)
            .and_then(|(_, m)| m.clone())
    }
}

/// What a filtered volume depends on: the source's content key, the filter, its boundary and
/// the engine asked for.
#[derive(Clone, Debug, PartialEq)]
pub struct FilterKey {
    pub source: u64,
    pub filter: Filter,
    pub boundary: Boundary,
    pub backend: BackendSpec,
    pub precision: Precision,
}

/// One filtered volume, kept while requests ask for the same filter of the same source: moving
/// a transform slider never filters again.
#[derive(Default)]
pub struct FilterCache {
    pub(super) entry: Option<(FilterKey, Arc<Volume>, FilterReport, u64)>,
}

impl FilterCache {
    /// The filtered volume of `key` with its report and content key: from the cache, or made by
    /// `run` (then given the content key `new_key()`). An error is not kept.
    pub fn get_or_run(
        &mut self,
        key: FilterKey,
        new_key: impl FnOnce() -> u64,
        run: impl FnOnce() -> Result<(Volume, FilterReport), String>,
    ) -> Result<(Arc<Volume>, FilterReport, u64), String> {
        if let Some((k, v, r, content)) = &self.entry
            && *k == key
        {
            let report = FilterReport {
                cached: true,
                ..r.clone()
            };
            return Ok((v.clone(), report, *content));
        }
        // Drop the old volume before making the new one: one filtered scan in memory at a time.
        self.entry = None;
        let (v, report) = run()?;
        let v = Arc::new(v);
        let content = new_key();
        self.entry = Some((key, v.clone(), report.clone(), content));
        Ok((v, report, content))
    }

    pub fn clear(&mut self) {
        self.entry = None;
    }
}

/// Runs `step`'s filter over the whole of `src` (channels filtered one by one) on the engine
/// `spec` asks for, falling back to the CPU with a note as [`crate::filter::run`] does.
pub fn filter_volume(
    step: &FilterStep,
    src: &Volume,
    spec: &BackendSpec,
    precision: Precision,
) -> Result<(Volume, FilterReport), String> {
    let t = Instant::now();
    let r = crate::filter::run(
        &step.filter,
        step.boundary,
        &src.data,
        &src.shape,
        spec,
        precision,
    )
    .map_err(|e| format!("filter {}: {e}", step.filter.name()))?;
    let elapsed_ms = t.elapsed().as_secs_f64() * 1e3;
    let p = slices::percentiles(&r.out, &[0.005, 0.995]);
    let mut v = src.clone_meta();
    v.shape = src.shape.clone();
    v.data = r.out;
    Ok((
        v,
        FilterReport {
            name: step.filter.name(),
            stage: step.stage,
            backend: r.backend,
            elapsed_ms,
            note: r.note,
            cached: false,
            window: (p[0], p[1].max(p[0])),
        },
    ))
}

/// `plane` through a point-wise filter (gamma, contrast): the plane of the filtered volume.
pub(super) fn filter_plane(
    step: &FilterStep,
    plane: &Arc<DisplaySlice>,
) -> Result<Arc<DisplaySlice>, String> {
    let out = crate::filter::apply_cpu(
        &step.filter,
        step.boundary,
        &plane.data,
        &[plane.height, plane.width],
    )
    .map_err(|e| format!("filter {}: {e}", step.filter.name()))?;
    Ok(slices::with_data(plane, out))
}

/// The FEBDS masks of `req`'s planes (see [`MaskRequest`]).
pub fn febds_masks(req: &MaskRequest) -> MaskSet {
    let t = Instant::now();
    let mut note = None;
    let mut backend = "cpu".to_string();
    let masks = req
        .planes
        .iter()
        .map(|p| {
            if p.channels != 1 {
                note = Some("FEBDS needs a grayscale image; this one has colour channels".into());
                return (p.id, None);
            }
            if p.width == 0 || p.height == 0 {
                return (p.id, None);
            }
            let mapped: Vec<f32> = p
                .data
                .iter()
                .map(|&v| (v - req.offset) * req.factor)
                .collect();
            match crate::filter::run(
                &Filter::Febds(req.method),
                Boundary::default(),
                &mapped,
                &[p.height, p.width],
                &req.backend,
                req.precision,
            ) {
                Ok(r) => {
                    backend = r.backend;
                    if r.note.is_some() {
                        note = r.note;
                    }
                    (p.id, Some(slices::with_data(p, r.out)))
                }
                Err(e) => {
                    note = Some(format!("FEBDS: {e}"));
                    (p.id, None)
                }
            }
        })
        .collect();
    MaskSet {
        method: req.method,
        masks,
        backend,
        note,
        elapsed_ms: t.elapsed().as_secs_f64() * 1e3,
    }
}

/// Whether `f` changes each value on its own (a plane of the filtered volume is the filtered
/// plane).
pub(super) fn is_pointwise(f: &Filter) -> bool {
    matches!(f, Filter::Gamma { .. } | Filter::Contrast { .. })
}
