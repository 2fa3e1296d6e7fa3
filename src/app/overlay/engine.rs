//! The overlay computation with its caches (public for tests and measurements; no egui context
//! needed): the sampling coordinates of the planes on screen, their Jacobian and grid lines, and
//! the folded share of the whole volume.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use eframe::egui;

use super::contours::contours;
use super::draw::det_colour;
use super::{GRID_STEP, JacobianPlane, PlaneOverlays, Request, ViewOverlay, VolumeFolds};
use crate::app::slices::{self, ViewGeom};
use crate::augment::{CoordMap, Plan};
use crate::core::FieldSpec;
use crate::engine::cpu::coordinates;
use crate::engine::field::ElasticField;
use crate::engine::jacobian::{self, JacobianStats};

/// Per-component planes of the unit field.
type FieldPlane = Arc<Vec<Vec<f32>>>;

/// Field planes by (axis, flipped index).
type FieldPlanes = HashMap<(usize, usize), FieldPlane>;

/// The overlay computation with its caches: the volume's unit field (once the worker's volume is
/// there) and field planes of the slice path, both for one (seed, sigma, shape).
#[derive(Default)]
pub struct OverlayEngine {
    volume_field: Option<Arc<ElasticField>>,
    /// The field the cached planes belong to.
    plane_key: Option<FieldSpec>,
    planes: HashMap<(usize, usize), FieldPlane>,
}

/// The two axes of a plane normal to `axis`, in increasing order (rows, columns).
fn others(axis: usize) -> (usize, usize) {
    match axis {
        0 => (1, 2),
        1 => (0, 2),
        _ => (0, 1),
    }
}

/// The unit field a spec names, computed whole.
fn compute_field(spec: &FieldSpec) -> ElasticField {
    ElasticField::compute_axes(&spec.shape, &spec.sigma_vox, spec.seed)
}

/// The input coordinates of the output plane `index` normal to `axis` of a 3D map, `(3, rows,
/// cols)` f32 (component-major, the other two axes in increasing order), from the unit field's
/// plane at the flipped index (`None` without elastic): the values `coordinates` gives there.
pub fn plane_coords(
    map: &CoordMap,
    field: Option<&[Vec<f32>]>,
    axis: usize,
    index: usize,
) -> Vec<f32> {
    let (ra, ca) = others(axis);
    let (rows, cols) = (map.out_shape[ra], map.out_shape[ca]);
    let m = rows * cols;
    let mut out = vec![0f32; 3 * m];
    let qa = map.flip_index(axis, index);
    for r in 0..rows {
        for c in 0..cols {
            let mut q = [0usize; 3];
            q[axis] = qa;
            q[ra] = map.flip_index(ra, r);
            q[ca] = map.flip_index(ca, c);
            let mut d = [0f32; 3];
            if let Some(f) = field {
                let u = q[ra] * cols + q[ca];
                for (a, da) in d.iter_mut().enumerate() {
                    *da = f[a][u];
                }
            }
            let x = map.input_coord(&q, &d);
            let u = r * cols + c;
            for (k, xk) in x.iter().enumerate() {
                out[k * m + u] = *xk as f32;
            }
        }
    }
    out
}

/// Folded count and range of oriented determinants.
fn folds(det: &[f32], map: &CoordMap) -> (usize, JacobianStats) {
    let s = jacobian::stats_for_map(det, map);
    let n = (s.folded_fraction * det.len() as f64).round() as usize;
    (n, s)
}

impl OverlayEngine {
    /// Whether the volume's unit field of `req`'s plan is at hand (or none is needed).
    pub fn has_volume_field(&self, req: &Request) -> bool {
        let Ok(map) = req.plan.compose(&req.shape) else {
            return true;
        };
        let Some(spec) = req.plan.field_spec(&map.out_shape) else {
            return true;
        };
        map.ndim != 3
            || self
                .volume_field
                .as_ref()
                .is_some_and(|f| f.matches(&spec.shape, &spec.sigma_vox, spec.seed))
    }

    /// The unit field's planes `(axis, q)` (q: flipped indices), from the volume's field when
    /// `exact` (computing it once per key), else from the slice path's planes.
    fn field_planes(
        &mut self,
        plan: &Plan,
        map: &CoordMap,
        needs: &[(usize, usize)],
        exact: bool,
    ) -> Option<(FieldPlanes, bool)> {
        let key = plan.field_spec(&map.out_shape)?;
        let FieldSpec {
            seed,
            sigma_vox: ref sigma,
            ref shape,
        } = key;
        let have_volume = self
            .volume_field
            .as_ref()
            .is_some_and(|f| f.matches(shape, sigma, seed));
        if exact && !have_volume {
            self.volume_field = Some(Arc::new(compute_field(&key)));
        }
        if let Some(f) = self
            .volume_field
            .as_ref()
            .filter(|f| f.matches(shape, sigma, seed))
        {
            return Some((
                needs
                    .iter()
                    .map(|&(a, q)| ((a, q), Arc::new(f.plane(a, q))))
                    .collect(),
                true,
            ));
        }
        if self.plane_key.as_ref() != Some(&key) {
            self.planes.clear();
            self.plane_key = Some(key.clone());
        }
        let missing: Vec<(usize, usize)> = needs
            .iter()
            .copied()
            .filter(|k| !self.planes.contains_key(k))
            .collect();
        // Per axis, the q's still missing; computed three orthogonal planes at a time (the
        // noise their slabs share is made once).
        let mut per_axis: [Vec<usize>; 3] = Default::default();
        for &(a, q) in &missing {
            per_axis[a].push(q);
        }
        let rounds = per_axis.iter().map(Vec::len).max().unwrap_or(0);
        for t in 0..rounds {
            let axes: Vec<usize> = (0..3).filter(|&a| per_axis[a].get(t).is_some()).collect();
            if axes.len() == 1 {
                let a = axes[0];
                let q = per_axis[a][t];
                let p = ElasticField::compute_plane_axes(shape, sigma, seed, a, q);
                self.planes.insert((a, q), Arc::new(p));
                continue;
            }
            let q3: [usize; 3] = std::array::from_fn(|a| {
                per_axis[a]
                    .get(t)
                    .copied()
                    .unwrap_or(shape[a].saturating_sub(1) / 2)
            });
            let planes = ElasticField::compute_planes_axes(shape, sigma, seed, q3);
            for (a, p) in planes.into_iter().enumerate() {
                if per_axis[a].get(t).is_some() {
                    self.planes.insert((a, q3[a]), Arc::new(p));
                }
            }
        }
        Some((
            needs
                .iter()
                .filter_map(|k| self.planes.get(k).map(|p| (*k, p.clone())))
                .collect(),
            false,
        ))
    }

    /// The overlays of the planes through `req.cursor`; `Ok(None)` when `stop` said a newer
    /// request waits.
    pub fn planes(
        &mut self,
        req: &Request,
        stop: &dyn Fn() -> bool,
    ) -> Result<Option<PlaneOverlays>, String> {
        let t = Instant::now();
        req.plan
            .validate(req.shape.len())
            .map_err(|e| e.to_string())?;
        let map = req.plan.compose(&req.shape).map_err(|e| e.to_string())?;
        let shape = map.out_shape.clone();
        let sign = jacobian::orientation(&map) as f32;
        let mut views = Vec::with_capacity(req.views.len());
        let exact;
        if map.ndim == 2 {
            let field = req.plan.field_spec(&shape).map(|s| compute_field(&s));
            let coords = coordinates(&map, field.as_ref());
            let n: usize = shape.iter().product();
            let det = req
                .jacobian
                .then(|| jacobian::determinant(&coords, 2, &shape));
            for g in &req.views {
                views.push(view_overlay(
                    req,
                    g,
                    &shape,
                    None,
                    &coords,
                    n,
                    det.as_deref(),
                    &map,
                    sign,
                ));
            }
            exact = true;
        } else {
            // The field planes of each view and, for the Jacobian, of its neighbours.
            let mut needs = vec![];
            for g in &req.views {
                let Some(axis) = g.normal else { continue };
                let i = req
                    .cursor
                    .get(axis)
                    .copied()
                    .unwrap_or(0)
                    .min(shape[axis] - 1);
                let lo = if req.jacobian { i.saturating_sub(1) } else { i };
                let hi = if req.jacobian {
                    (i + 1).min(shape[axis] - 1)
                } else {
                    i
                };
                for j in lo..=hi {
                    needs.push((axis, map.flip_index(axis, j)));
                }
            }
            needs.sort_unstable();
            needs.dedup();
            let exact_wanted = req.volume && req.jacobian;
            let fields = self.field_planes(&req.plan, &map, &needs, exact_wanted);
            exact = fields.as_ref().is_none_or(|(_, e)| *e);
            let fields = fields.map(|(f, _)| f);
            if stop() {
                return Ok(None);
            }
            let coords_of = |axis: usize, j: usize| {
                let f = fields
                    .as_ref()
                    .and_then(|f| f.get(&(axis, map.flip_index(axis, j))));
                plane_coords(&map, f.map(|p| p.as_slice()), axis, j)
            };
            for g in &req.views {
                if stop() {
                    return Ok(None);
                }
                let Some(axis) = g.normal else {
                    return Err("a 3D view without a normal axis".into());
                };
                let i = req
                    .cursor
                    .get(axis)
                    .copied()
                    .unwrap_or(0)
                    .min(shape[axis] - 1);
                let at = coords_of(axis, i);
                let (ra, ca) = others(axis);
                let m = shape[ra] * shape[ca];
                let det = if req.jacobian {
                    let prev = (i > 0).then(|| coords_of(axis, i - 1));
                    let next = (i + 1 < shape[axis]).then(|| coords_of(axis, i + 1));
                    Some(
                        jacobian::determinant_plane(
                            &shape,
                            axis,
                            i,
                            prev.as_deref(),
                            &at,
                            next.as_deref(),
                        )
                        .map_err(|e| e.to_string())?,
                    )
                } else {
                    None
                };
                views.push(view_overlay(
                    req,
                    g,
                    &shape,
                    Some((axis, i)),
                    &at,
                    m,
                    det.as_deref(),
                    &map,
                    sign,
                ));
            }
        }
        Ok(Some(PlaneOverlays {
            generation: req.generation,
            cursor: req.cursor.clone(),
            grid: req.grid,
            jacobian: req.jacobian,
            exact,
            views,
            elapsed_ms: t.elapsed().as_secs_f64() * 1e3,
        }))
    }

    /// The folded share of the whole output grid, from the volume's unit field, one plane along
    /// axis 0 at a time (the same determinants as `determinant` of the whole grid); `Ok(None)`
    /// when `stop` said a newer request waits.
    pub fn volume(
        &mut self,
        req: &Request,
        stop: &dyn Fn() -> bool,
    ) -> Result<Option<VolumeFolds>, String> {
        let t = Instant::now();
        let map = req.plan.compose(&req.shape).map_err(|e| e.to_string())?;
        let shape = map.out_shape.clone();
        if map.ndim != 3 {
            // 2D: the plane is the whole image.
            let field = req.plan.field_spec(&shape).map(|s| compute_field(&s));
            let det = jacobian::determinant(&coordinates(&map, field.as_ref()), 2, &shape);
            let (folded, s) = folds(&det, &map);
            return Ok(Some(VolumeFolds {
                generation: req.generation,
                folded,
                voxels: det.len(),
                min: s.min,
                max: s.max,
                elapsed_ms: t.elapsed().as_secs_f64() * 1e3,
            }));
        }
        let field = match req.plan.field_spec(&shape) {
            Some(spec) => {
                let ok = self
                    .volume_field
                    .as_ref()
                    .is_some_and(|f| f.matches(&spec.shape, &spec.sigma_vox, spec.seed));
                if !ok {
                    self.volume_field = Some(Arc::new(compute_field(&spec)));
                }
                self.volume_field.clone()
            }
            None => None,
        };
        let n0 = shape[0];
        let coords = |z: usize| {
            let f = field.as_ref().map(|f| f.plane(0, map.flip_index(0, z)));
            plane_coords(&map, f.as_deref(), 0, z)
        };
        let (mut folded, mut voxels) = (0usize, 0usize);
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        let mut prev: Option<Vec<f32>> = None;
        let mut at = coords(0);
        let mut next = (n0 > 1).then(|| coords(1));
        for z in 0..n0 {
            if stop() {
                return Ok(None);
            }
            let det =
                jacobian::determinant_plane(&shape, 0, z, prev.as_deref(), &at, next.as_deref())
                    .map_err(|e| e.to_string())?;
            let (f, s) = folds(&det, &map);
            folded += f;
            voxels += det.len();
            if s.min.is_finite() {
                lo = lo.min(s.min);
                hi = hi.max(s.max);
            }
            let Some(n) = next.take() else { break };
            prev = Some(std::mem::replace(&mut at, n));
            next = (z + 2 < n0).then(|| coords(z + 2));
        }
        Ok(Some(VolumeFolds {
            generation: req.generation,
            folded,
            voxels,
            min: if lo <= hi { lo } else { f64::NAN },
            max: if lo <= hi { hi } else { f64::NAN },
            elapsed_ms: t.elapsed().as_secs_f64() * 1e3,
        }))
    }
}

/// The overlays of one view from its plane's coordinates (`(ndim, plane)`, component-major,
/// `m` values per component, array order) and determinants (array order).
#[allow(clippy::too_many_arguments)]
fn view_overlay(
    req: &Request,
    g: &ViewGeom,
    shape: &[usize],
    plane: Option<(usize, usize)>,
    coords: &[f32],
    m: usize,
    det: Option<&[f32]>,
    map: &CoordMap,
    sign: f32,
) -> ViewOverlay {
    let sp = &req.spacing_mm;
    let display = |values: &[f32]| match plane {
        Some(_) => slices::extract_from_plane(values, shape, 1, sp, g),
        None => slices::extract(values, shape, 1, sp, g, 0),
    };
    let geom = display(&coords[..m]);
    let (w, h) = (geom.width, geom.height);
    let jacobian = det.map(|det| {
        let (folded, s) = folds(det, map);
        let oriented: Vec<f32> = display(det).data.iter().map(|&d| sign * d).collect();
        let pixels = oriented.iter().map(|&d| det_colour(d)).collect();
        JacobianPlane {
            image: Some(egui::ColorImage::new([w, h], pixels)),
            det: oriented,
            folded,
            voxels: det.len(),
            min: s.min,
            max: s.max,
        }
    });
    let grid = if req.grid {
        let mut lines = vec![];
        for axis in [g.across, g.down] {
            if axis < map.ndim {
                let comp = display(&coords[axis * m..(axis + 1) * m]);
                // The scan's grid lines exist inside the scan only.
                let inside = (0.0, map.in_shape[axis].saturating_sub(1) as f32);
                lines.extend(contours(&comp.data, w, h, GRID_STEP, inside));
            }
        }
        lines
    } else {
        vec![]
    };
    ViewOverlay {
        width: w,
        height: h,
        pixel_mm: geom.pixel_mm,
        plane,
        jacobian,
        grid,
    }
}
