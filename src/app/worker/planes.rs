//! The planes on screen, each computed on its own while a slider moves, and the whole volume
//! filled plane by plane once it rests.

use std::sync::Arc;
use std::time::Instant;

use super::{
    Backend, Compute, DisplaySlice, EngineError, Job, Outputs, Plan, Plane, Prepare, SliceEngines,
    SliceSet, Timings, ViewGeom, Volume, engine, slices,
};
/// The display slices of one 3D view through `c.cursor`: `compute(plane, outputs)` fills the
/// output plane (the engine's plane path), then it is cut for display.
pub(super) fn view_plane(
    c: &Compute,
    image: &Volume,
    label: Option<&Volume>,
    v: &ViewGeom,
    compute: impl FnOnce(Plane, Outputs<'_>) -> Result<Timings, EngineError>,
) -> Result<(Arc<DisplaySlice>, Option<Arc<DisplaySlice>>), String> {
    let Some(axis) = v.normal else {
        return Err("a 3D view without a normal axis".into());
    };
    let index = c.cursor.get(axis).copied().unwrap_or(0);
    let plane: usize = (0..3)
        .filter(|&a| a != axis)
        .map(|a| image.shape[a])
        .product();
    let mut out = vec![0f32; plane * image.channels];
    let mut lab = label.map(|l| vec![0f32; plane * l.channels]);
    let outputs = Outputs {
        image: &mut out,
        label: lab.as_deref_mut(),
    };
    compute(Plane { axis, index }, outputs).map_err(|e| e.to_string())?;
    let sp = &image.spacing_mm;
    let l = lab.map(|l| slices::extract_from_plane(&l, &image.shape, 1, sp, v));
    Ok((
        slices::extract_from_plane(&out, &image.shape, image.channels, sp, v),
        l,
    ))
}

/// The planes through `c.cursor` of the transformed image and label, each computed on its own
/// with [`Backend::apply_plane`] (3D; `scan` is the image, its label map and their content key,
/// which lets a GPU keep them on the device); a 2D image is computed whole. With engines per view
/// the views run at once, unless the main engine serves them better: it holds the volume field
/// already (planes are then copies of it), or the interpolation is cubic (one set of
/// coefficients, not one per view).
pub fn compute_slices(
    engines: &SliceEngines,
    c: &Compute,
    scan: (&Volume, Option<&Volume>, u64),
) -> Result<SliceSet, String> {
    use rayon::prelude::*;
    type Planes = (Vec<Arc<DisplaySlice>>, Vec<Option<Arc<DisplaySlice>>>);
    let (image, label, key) = scan;
    let t = Instant::now();
    let job = Job {
        plan: &c.plan,
        image,
        label,
    };
    let sp = &image.spacing_mm;
    let (imgs, labs): Planes = if image.ndim() != 3 {
        let (img, lab, _) = engine::apply_new(engines.main.as_ref(), &c.plan, image, label)
            .map_err(|e| e.to_string())?;
        c.views
            .iter()
            .map(|v| {
                let l = lab
                    .as_ref()
                    .map(|l| slices::extract(&l.data, &l.shape, 1, sp, v, 0));
                (
                    slices::extract(&img.data, &img.shape, img.channels, sp, v, 0),
                    l,
                )
            })
            .unzip()
    } else {
        let one = |engine: &dyn Backend, v: &ViewGeom| {
            view_plane(c, image, label, v, |plane, out| {
                engine.apply_plane(job, plane, Some(key), out)
            })
        };
        let out_shape = c
            .plan
            .out_shape
            .clone()
            .unwrap_or_else(|| image.shape.clone());
        let needs_field = c.plan.field_spec(&out_shape).is_some();
        let held = engines.main.holds_field(&c.plan, &out_shape);
        let per_view = engines.per_view.len() >= c.views.len();
        // The three orthogonal views through the cursor: their field planes are made together
        // on the main engine (the noise their slabs share is generated once), then every view
        // runs there from its cache.
        let orthogonal = {
            let mut normals: Vec<usize> = c.views.iter().filter_map(|v| v.normal).collect();
            normals.sort_unstable();
            normals == [0, 1, 2]
        };
        let shared = per_view && needs_field && !held && orthogonal;
        if shared {
            engines
                .main
                .prepare(Prepare::Planes {
                    plan: &c.plan,
                    out_shape: &out_shape,
                    cursor: &c.cursor,
                })
                .map_err(|e| e.to_string())?;
        }
        let cubic = c.plan.order == crate::augment::Order::Cubic;
        let on_main = !per_view || shared || cubic || !needs_field || held;
        let planes: Vec<Result<_, String>> = if shared && !cubic {
            // Field planes cached on the main engine: the views read them at once.
            c.views
                .par_iter()
                .map(|v| one(engines.main.as_ref(), v))
                .collect()
        } else if on_main {
            c.views
                .iter()
                .map(|v| one(engines.main.as_ref(), v))
                .collect()
        } else {
            c.views
                .par_iter()
                .zip(&engines.per_view)
                .map(|(v, e)| one(e.as_ref(), v))
                .collect()
        };
        planes
            .into_iter()
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .unzip()
    };
    Ok(SliceSet {
        generation: c.generation,
        cursor: c.cursor.clone(),
        image: imgs,
        label: labs,
        elapsed_ms: t.elapsed().as_secs_f64() * 1e3,
        filter: None,
        unfiltered: false,
        normalized: None,
    })
}

/// The whole transformed volume on `engine`, one axis-0 plane at a time with
/// [`Backend::apply_plane`], calling `superseded(planes done, planes in all)` before each plane
/// (a progress report): `Ok(None)` when it said yes, so a stale fill stops within one plane. The
/// planes read the engine's volume field (prepared first), so the values are those of
/// [`Backend::apply`]; the plan's intensity steps then act on the whole image. 2D images, plans
/// that move no voxel and other output shapes are computed whole.
pub fn fill_volume(
    engine: &dyn Backend,
    plan: &Plan,
    image: &Volume,
    label: Option<&Volume>,
    superseded: &dyn Fn(usize, usize) -> bool,
) -> Result<Option<(Volume, Option<Volume>, Timings)>, EngineError> {
    if image.ndim() != 3 || plan.is_spatial_identity() || plan.out_shape.is_some() {
        return engine::apply_new(engine, plan, image, label).map(Some);
    }
    engine::check_intensity(plan, image.channels, image.ndim())?;
    let t0 = Instant::now();
    // The planes take the spatial part; the intensity steps act on the whole image at the end
    // (a step that reads statistics or neighbours cannot act on a plane).
    let whole = plan;
    let spatial = Plan {
        intensity: vec![],
        ..plan.clone()
    };
    let plan = &spatial;
    let shape = &image.shape;
    let mut timings = Timings {
        field_ms: engine.prepare(Prepare::Field {
            plan,
            out_shape: shape,
        })?,
        ..Timings::default()
    };
    let n: usize = shape.iter().product();
    let plane = shape[1] * shape[2];
    let mut img = vec![0f32; image.channels * n];
    let mut lab = label.map(|l| vec![0f32; l.channels * n]);
    let mut img_plane = vec![0f32; image.channels * plane];
    let mut lab_plane = label.map(|l| vec![0f32; l.channels * plane]);
    let job = Job { plan, image, label };
    // Channel c of plane z goes to [c][z] of the volume.
    let scatter = |src: &[f32], dst: &mut [f32], z: usize| {
        for (c, p) in src.chunks_exact(plane).enumerate() {
            dst[c * n + z * plane..c * n + (z + 1) * plane].copy_from_slice(p);
        }
    };
    for z in 0..shape[0] {
        if superseded(z, shape[0]) {
            return Ok(None);
        }
        let out = Outputs {
            image: &mut img_plane,
            label: lab_plane.as_deref_mut(),
        };
        let t = engine.apply_plane(job, Plane { axis: 0, index: z }, None, out)?;
        timings.prefilter_ms += t.prefilter_ms;
        timings.resample_ms += t.resample_ms;
        scatter(&img_plane, &mut img, z);
        if let (Some(src), Some(dst)) = (&lab_plane, lab.as_deref_mut()) {
            scatter(src, dst, z);
        }
    }
    let t1 = Instant::now();
    engine::intensity_after(whole, &mut img, shape, image.channels);
    timings.intensity_ms = t1.elapsed().as_secs_f64() * 1e3;
    timings.total_ms = t0.elapsed().as_secs_f64() * 1e3;
    let mk = |src: &Volume, data: Vec<f32>| {
        let mut v = src.clone_meta();
        v.shape = shape.clone();
        v.data = data;
        v
    };
    let out_label = match (label, lab) {
        (Some(l), Some(d)) => Some(mk(l, d)),
        _ => None,
    };
    Ok(Some((mk(image, img), out_label, timings)))
}
