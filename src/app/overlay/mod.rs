//! Overlays that show the deformation itself on the augmented views: the scan's voxel grid
//! carried by the transform, and the Jacobian determinant of the sampling map with the share of
//! folded voxels, on the plane on screen and over the whole volume.
//!
//! - **Deformation grid.** On the augmented plane, the lines where the input coordinate along the
//!   axis that runs across the view, or the one that runs down it, is a multiple of
//!   [`GRID_STEP`] voxels: the lines of a regular grid painted on the original scan, drawn where
//!   the transform puts them, so they bend with the anatomy under them (and cross where the map
//!   folds). Contours of the plane's sampling coordinates by marching squares, joined into
//!   polylines.
//! - **Jacobian.** `det(∂x/∂p)` of the plane by [`jacobian::determinant_plane`] from the
//!   coordinates of the plane and of its two neighbours, times [`jacobian::orientation`] (a flip
//!   mirrors, it does not fold: the rule of [`jacobian::stats_for_map`]), as colours: blue below 1,
//!   red above, yellow where `det <= 0` (folded). Once the worker's whole volume is there, the
//!   folded share of the whole volume too, swept plane by plane along axis 0 with three
//!   coordinate planes in memory (never the volume's coordinates).
//!
//! The coordinates are those of the CPU engine (`augscope apply --backend cpu --save-coords`,
//! bit for bit once the volume's unit field is in use): the plan's [`CoordMap`] and the unit
//! elastic field, on planes. While a slider moves, the field planes come from
//! [`ElasticField::compute_planes_axes`] (a slab of noise, equal to the volume's field to f32
//! rounding); when the worker has finished the volume, from the volume's field, computed once
//! per (seed, sigma, shape) and kept while an overlay is on.
//!
//! Everything runs on a thread of its own: the newest request replaces one that has not
//! started, and a running one stops between views and between planes of the volume sweep.
//!
//! Here: the requests, the results and the state the app keeps, and the per-frame update. The
//! drawing, TorchIO's control grid, the thread, the computation and the contouring have files of
//! their own.
//!
//! [`jacobian::determinant_plane`]: crate::engine::jacobian::determinant_plane
//! [`jacobian::orientation`]: crate::engine::jacobian::orientation
//! [`jacobian::stats_for_map`]: crate::engine::jacobian::stats_for_map
//! [`CoordMap`]: crate::augment::CoordMap
//! [`ElasticField::compute_planes_axes`]: crate::engine::field::ElasticField::compute_planes_axes

mod contours;
mod control_grid;
mod draw;
mod engine;
mod thread;

use eframe::egui;

use super::Runtime;
use super::slices::ViewGeom;
use super::state::State;
use crate::augment::Plan;
use thread::OverlayThread;

pub use contours::contours;
pub use control_grid::paint_control_grid;
pub(crate) use draw::GRID_COLOUR;
pub use draw::{At, FOLDED, det_colour, fraction_text, paint};
pub use engine::{OverlayEngine, plane_coords};

/// Spacing of the deformation grid, in input voxels.
pub const GRID_STEP: f32 = 8.0;

/// One overlay request: what the views show and which overlays are on.
#[derive(Clone, Debug)]
pub struct Request {
    pub generation: u64,
    pub plan: Plan,
    /// The scan's shape and spacing.
    pub shape: Vec<usize>,
    pub spacing_mm: Vec<f64>,
    pub views: Vec<ViewGeom>,
    pub cursor: Vec<usize>,
    pub grid: bool,
    pub jacobian: bool,
    /// The worker's whole volume is there: use the volume's unit field (exact) and count the
    /// folded voxels of the whole volume.
    pub volume: bool,
}

/// The Jacobian of one plane, in display order.
pub struct JacobianPlane {
    /// `rows * cols` oriented determinants, display order (row-major, `width` per row).
    pub det: Vec<f32>,
    /// The colour image, until the UI uploads it.
    pub image: Option<egui::ColorImage>,
    pub folded: usize,
    pub voxels: usize,
    pub min: f64,
    pub max: f64,
}

/// The overlays of one view.
pub struct ViewOverlay {
    pub width: usize,
    pub height: usize,
    pub pixel_mm: [f32; 2],
    /// The array axis normal to the plane and the plane's index (`None` for a 2D image).
    pub plane: Option<(usize, usize)>,
    pub jacobian: Option<JacobianPlane>,
    /// Polylines in display texel coordinates (x across, y down; texel centres at +0.5).
    pub grid: Vec<Vec<[f32; 2]>>,
}

/// The overlays of the planes through one cursor.
pub struct PlaneOverlays {
    pub generation: u64,
    pub cursor: Vec<usize>,
    pub grid: bool,
    pub jacobian: bool,
    /// The field planes came from the volume's unit field (the exact `--save-coords` values).
    pub exact: bool,
    pub views: Vec<ViewOverlay>,
    pub elapsed_ms: f64,
}

/// The folded share of the whole volume.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct VolumeFolds {
    pub generation: u64,
    pub folded: usize,
    pub voxels: usize,
    pub min: f64,
    pub max: f64,
    pub elapsed_ms: f64,
}

pub enum Reply {
    Planes(PlaneOverlays),
    Volume(VolumeFolds),
    Failed { generation: u64, message: String },
}

/// What identifies a sent request: (generation, cursor, grid, jacobian, volume).
type SentKey = (u64, Vec<usize>, bool, bool, bool);

/// The overlay state of the running app (not persisted; the toggles are in `Display`).
#[derive(Default)]
pub struct OverlayRuntime {
    thread: Option<OverlayThread>,
    sent: Option<SentKey>,
    pub planes: Option<PlaneOverlays>,
    pub volume: Option<VolumeFolds>,
    /// The uploaded Jacobian textures, per view.
    pub textures: Vec<Option<egui::TextureHandle>>,
    pub error: Option<String>,
}

/// Whether the overlays on screen are those the toggles ask for, of the parameters and planes
/// on screen: with the volume's exact field and its folded count once the worker's whole volume
/// is there (Jacobian on). True when both overlays are off or no scan is open.
pub fn is_current(state: &State, rt: &Runtime) -> bool {
    let d = &state.display;
    if !(d.deformation_grid || d.jacobian) {
        return true;
    }
    let Some(scan) = &rt.scan else {
        return true;
    };
    let Some(p) = &rt.overlay.planes else {
        return false;
    };
    let g = rt.work.generation;
    let volume = rt.work.full.as_ref().is_some_and(|f| f.generation == g);
    let planes = p.generation == g
        && p.cursor == scan.cursor
        && p.grid == d.deformation_grid
        && p.jacobian == d.jacobian;
    let whole =
        !volume || !d.jacobian || (p.exact && rt.overlay.volume.is_some_and(|v| v.generation == g));
    planes && whole
}

impl OverlayRuntime {
    /// Whether any overlay result or texture is held.
    pub fn holds_anything(&self) -> bool {
        self.planes.is_some() || self.volume.is_some() || self.textures.iter().any(Option::is_some)
    }

    fn clear(&mut self) {
        self.planes = None;
        self.volume = None;
        self.textures.clear();
        self.error = None;
    }
}

/// Once per frame, before the views: takes the thread's replies (uploading each Jacobian image
/// once), and posts a request when what the views show or the toggles changed.
pub fn update(ctx: &egui::Context, state: &State, rt: &mut Runtime) {
    let d = &state.display;
    let on = d.deformation_grid || d.jacobian;
    let ov = &mut rt.overlay;
    if let Some(t) = &ov.thread {
        while let Ok(r) = t.replies.try_recv() {
            match r {
                Reply::Planes(mut p) => {
                    if ov
                        .planes
                        .as_ref()
                        .is_some_and(|o| o.generation > p.generation)
                    {
                        continue;
                    }
                    ov.textures = p
                        .views
                        .iter_mut()
                        .enumerate()
                        .map(|(vi, v)| {
                            let image = v.jacobian.as_mut()?.image.take()?;
                            Some(ctx.load_texture(
                                format!("jacobian-{vi}"),
                                image,
                                egui::TextureOptions::NEAREST,
                            ))
                        })
                        .collect();
                    ov.planes = Some(p);
                    ov.error = None;
                }
                Reply::Volume(v) => ov.volume = Some(v),
                Reply::Failed {
                    generation,
                    message,
                } => {
                    if generation == rt.work.generation {
                        ov.error = Some(message);
                    }
                }
            }
        }
    }
    if !on {
        if ov.holds_anything() || ov.sent.is_some() {
            ov.clear();
            ov.sent = None;
            // Lets the thread drop the fields it keeps.
            if let Some(t) = &ov.thread {
                t.post(None);
            }
        }
        return;
    }
    let Some(scan) = &rt.scan else {
        return;
    };
    let volume = rt
        .work
        .full
        .as_ref()
        .is_some_and(|f| f.generation == rt.work.generation);
    let key: SentKey = (
        rt.work.generation,
        scan.cursor.clone(),
        d.deformation_grid,
        d.jacobian,
        volume,
    );
    if ov.sent.as_ref() == Some(&key) {
        return;
    }
    if ov.thread.is_none() {
        let c = ctx.clone();
        match OverlayThread::spawn(move || c.request_repaint()) {
            Ok(t) => ov.thread = Some(t),
            Err(e) => {
                ov.error = Some(format!("cannot start the overlay thread: {e}"));
                return;
            }
        }
    }
    let img = &scan.loaded.image;
    let params = rt.work.applied.as_ref().unwrap_or(&state.params);
    let req = Request {
        generation: rt.work.generation,
        plan: params.to_plan(img.ndim(), &img.spacing_mm),
        shape: img.shape.clone(),
        spacing_mm: img.spacing_mm.clone(),
        views: scan.views.clone(),
        cursor: scan.cursor.clone(),
        grid: d.deformation_grid,
        jacobian: d.jacobian,
        volume,
    };
    if let Some(t) = &ov.thread {
        t.post(Some(req));
        ov.sent = Some(key);
    }
}
