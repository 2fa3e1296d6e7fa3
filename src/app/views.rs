//! The slice views: the planes of the original and augmented scan with the physical aspect of
//! the voxel spacing, orientation letters, a crosshair linking the views, zoom (Ctrl+wheel), pan
//! (middle drag), slice stepping (wheel, slider, keys) and window/level (right drag).

use std::sync::Arc;

use eframe::egui::{self, Color32, Pos2, Rect, Sense, Stroke, Vec2};
use eframe::egui_wgpu;

use super::render::{Look, SliceCallback};
use super::slices::{DisplaySlice, ViewGeom};
use super::state::{Colormap, State};
use super::{Command, Nav, Runtime};
use crate::export::preview::Model;

const BACKGROUND: [f32; 4] = [0.0, 0.0, 0.0, 1.0];
const CROSSHAIR: Color32 = Color32::from_rgba_premultiplied(230, 200, 40, 160);

/// Where an image of `size_mm` lies in `rect` at zoom/pan `nav`.
pub fn image_rect(rect: Rect, size_mm: Vec2, nav: Nav) -> Rect {
    let fit = (rect.width() / size_mm.x.max(1e-6)).min(rect.height() / size_mm.y.max(1e-6));
    let size = size_mm * fit * nav.zoom;
    let centre = rect.center() + nav.pan * rect.size();
    Rect::from_center_size(centre, size)
}

/// A stable key per view: group (0 original, 1 augmented, 2 comparison) and index.
fn view_key(group: u64, index: usize) -> u64 {
    group * 1000 + index as u64
}

/// What one view draws.
struct ViewInput<'a> {
    key: u64,
    title: String,
    geom: &'a ViewGeom,
    image: Arc<DisplaySlice>,
    other: Option<Arc<DisplaySlice>>,
    label: Option<Arc<DisplaySlice>>,
    /// The FEBDS mask of this plane (drawn with `look.mask_opacity`).
    mask: Option<Arc<DisplaySlice>>,
    look: Look,
    cursor: &'a [usize],
    crosshair: bool,
    /// The view's index among the scan's views.
    index: usize,
}

/// Draws one view into `rect`; returns the commands its interactions ask for.
fn view_ui(
    ui: &mut egui::Ui,
    rect: Rect,
    v: ViewInput<'_>,
    nav: &mut Nav,
    active: &mut usize,
    has_wgpu: bool,
    hovered: &mut Option<(usize, usize, usize)>,
) -> Vec<Command> {
    let mut out = vec![];
    let view_index = v.index;
    let header = title_strip(ui, rect, v.key, &v.title);
    let rect = Rect::from_min_max(Pos2::new(rect.min.x, header.max.y), rect.max);
    let resp = ui.interact(
        rect,
        ui.scope_id().with(("view", v.key)),
        Sense::click_and_drag(),
    );
    let img = &v.image;
    let size_mm = Vec2::new(
        img.width as f32 * img.pixel_mm[0],
        img.height as f32 * img.pixel_mm[1],
    );
    let ir = image_rect(rect, size_mm, *nav);
    let to_texel = |p: Pos2| {
        Vec2::new(
            (p.x - ir.min.x) / ir.width() * img.width as f32,
            (p.y - ir.min.y) / ir.height() * img.height as f32,
        )
    };
    // Interactions.
    if let Some(p) = resp.hover_pos() {
        let t = to_texel(p);
        if t.x >= 0.0 && t.y >= 0.0 && t.x < img.width as f32 && t.y < img.height as f32 {
            *hovered = Some((view_index, t.y as usize, t.x as usize));
        }
    }
    if resp.hovered() {
        *active = view_index;
        let (scroll, zoom) = ui.input(|i| {
            let wheel: f32 = i
                .raw
                .events
                .iter()
                .filter_map(|e| match e {
                    egui::Event::MouseWheel {
                        delta, modifiers, ..
                    } if !modifiers.command => Some(delta.y),
                    _ => None,
                })
                .sum();
            (wheel, i.zoom_delta())
        });
        if zoom != 1.0 {
            nav.zoom = (nav.zoom * zoom).clamp(0.25, 20.0);
        } else if scroll != 0.0 {
            out.push(Command::Step {
                view: view_index,
                delta: if scroll > 0.0 { 1 } else { -1 },
            });
        }
    }
    if resp.double_clicked() {
        *nav = Nav::default();
    }
    if resp.dragged_by(egui::PointerButton::Middle) {
        nav.pan += resp.drag_delta() / rect.size();
    }
    if resp.dragged_by(egui::PointerButton::Secondary) {
        let d = resp.drag_delta();
        let w = v.look.width * (1.0 + d.x * 0.005).max(0.05);
        let l = v.look.level - d.y * v.look.width * 0.003;
        out.push(Command::SetWindow { level: l, width: w });
    }
    if (resp.clicked_by(egui::PointerButton::Primary)
        || resp.dragged_by(egui::PointerButton::Primary))
        && let Some(p) = resp.interact_pointer_pos()
    {
        let t = to_texel(p);
        let col = (t.x.floor() as i64).clamp(0, img.width as i64 - 1) as usize;
        let row = (t.y.floor() as i64).clamp(0, img.height as i64 - 1) as usize;
        if v.geom.across < v.cursor.len() && v.geom.down < v.cursor.len() {
            out.push(Command::SetCursor(voxel_of(
                v.geom, v.cursor, row, col, img,
            )));
        }
    }
    // The image, through the shader.
    if has_wgpu {
        let s = Vec2::new(img.width as f32, img.height as f32);
        let origin = (rect.min - ir.min) / ir.size() * s;
        let cb = SliceCallback {
            key: v.key,
            image: v.image.clone(),
            other: v.other,
            label: v.label,
            mask: v.mask,
            look: v.look,
            origin: [origin.x, origin.y],
            axis_u: [rect.width() / ir.width() * s.x, 0.0],
            axis_v: [0.0, rect.height() / ir.height() * s.y],
            background: BACKGROUND,
        };
        ui.painter()
            .add(egui_wgpu::Callback::new_paint_callback(rect, cb));
    } else {
        ui.painter().rect_filled(rect, 0.0, Color32::BLACK);
        ui.painter().text(
            rect.center(),
            egui::Align2::CENTER_CENTER,
            "needs the wgpu renderer",
            egui::FontId::proportional(14.0),
            Color32::GRAY,
        );
    }
    let painter = ui.painter_at(rect);
    if v.crosshair {
        crosshair(&painter, rect, ir, v.geom, v.cursor, img);
    }
    orientation_letters(&painter, rect, &v.geom.letters);
    out
}

fn look(state: &State, scan: &super::Scan, difference: bool) -> Look {
    let d = &state.display;
    let colour = scan.loaded.image.is_colour();
    Look {
        colour,
        channel: if colour { 0 } else { scan.frame as u32 },
        level: d.level.unwrap_or(0.5),
        width: d.width.unwrap_or(1.0),
        colormap: match d.colormap {
            Colormap::Gray => 0,
            Colormap::Viridis => 1,
        },
        difference,
        // A difference map is read on its own colour scale: no overlay on it.
        label_opacity: if d.show_label && !difference {
            d.label_opacity
        } else {
            0.0
        },
        mask_opacity: if state.params.filter.febds().is_some() && !difference {
            d.mask_opacity
        } else {
            0.0
        },
        nearest: if d.follow_order {
            state.params.order == crate::augment::Order::Nearest
        } else {
            d.nearest
        },
    }
}

/// The window of the augmented views: LoG and DoG values (second derivatives, band-passes)
/// have nothing in common with the scan's, so those views are windowed on the filtered values'
/// 0.5–99.5 percentiles; every other filter keeps the scan's window.
fn filtered_window(report: Option<&super::worker::FilterReport>) -> Option<(f32, f32)> {
    report
        .filter(|r| matches!(r.name, "log" | "dog"))
        .map(|r| r.window)
}

/// The mask of plane `id`, when the FEBDS overlay is on.
fn mask_of(state: &State, rt: &Runtime, id: u64) -> Option<Arc<DisplaySlice>> {
    state.params.filter.febds()?;
    rt.febds.masks.as_ref()?.mask_for(id)
}

/// The view's title in a strip above the image (one line, cut with "…" where the view is too
/// narrow, the whole title on hover); returns the strip.
fn title_strip(ui: &mut egui::Ui, rect: Rect, key: u64, title: &str) -> Rect {
    // The title sits in a strip above the image, clear of the orientation letters.
    let header = Rect::from_min_max(rect.min, Pos2::new(rect.max.x, rect.min.y + 18.0));
    // One line, cut with "…" where the view is too narrow (the whole title on hover).
    let font = egui::FontId::proportional(13.0);
    let mut job =
        egui::text::LayoutJob::simple_singleline(title.to_string(), font, Color32::from_gray(220));
    job.wrap = egui::text::TextWrapping::truncate_at_width((header.width() - 8.0).max(10.0));
    let galley = ui.fonts_mut(|f| f.layout_job(job));
    let elided = galley.elided;
    ui.painter().galley(
        header.left_top() + Vec2::new(4.0, (header.height() - galley.size().y) * 0.5),
        galley,
        Color32::from_gray(220),
    );
    if elided {
        ui.interact(header, ui.scope_id().with(("title", key)), Sense::hover())
            .on_hover_text(title);
    }
    header
}

/// The crosshair through the cursor, over the image drawn in `ir`.
fn crosshair(
    painter: &egui::Painter,
    rect: Rect,
    ir: Rect,
    g: &ViewGeom,
    cursor: &[usize],
    img: &DisplaySlice,
) {
    if g.across < cursor.len() && g.down < cursor.len() {
        let ca = cursor[g.across];
        let cd = cursor[g.down];
        let col = if g.across_flip {
            img.width - 1 - ca.min(img.width - 1)
        } else {
            ca
        };
        let row = if g.down_flip {
            img.height - 1 - cd.min(img.height - 1)
        } else {
            cd
        };
        let x = ir.min.x + (col as f32 + 0.5) / img.width as f32 * ir.width();
        let y = ir.min.y + (row as f32 + 0.5) / img.height as f32 * ir.height();
        let stroke = Stroke::new(1.0, CROSSHAIR);
        painter.line_segment(
            [Pos2::new(x, rect.top()), Pos2::new(x, rect.bottom())],
            stroke,
        );
        painter.line_segment(
            [Pos2::new(rect.left(), y), Pos2::new(rect.right(), y)],
            stroke,
        );
    }
}

/// The orientation letters (left, right, top, bottom) at the edges of `rect`.
fn orientation_letters(painter: &egui::Painter, rect: Rect, letters: &[String; 4]) {
    let font = egui::FontId::proportional(15.0);
    let col = Color32::from_rgb(255, 170, 60);
    let [l, r, t, b] = letters;
    let m = 6.0;
    for (text, pos, align) in [
        (
            l,
            Pos2::new(rect.left() + m, rect.center().y),
            egui::Align2::LEFT_CENTER,
        ),
        (
            r,
            Pos2::new(rect.right() - m, rect.center().y),
            egui::Align2::RIGHT_CENTER,
        ),
        (
            t,
            Pos2::new(rect.center().x, rect.top() + m),
            egui::Align2::CENTER_TOP,
        ),
        (
            b,
            Pos2::new(rect.center().x, rect.bottom() - m),
            egui::Align2::CENTER_BOTTOM,
        ),
    ] {
        if !text.is_empty() {
            // A dark outline keeps the letter legible on bright tissue.
            for d in [(-1.0, 0.0), (1.0, 0.0), (0.0, -1.0), (0.0, 1.0), (1.0, 1.0)] {
                let o = pos + Vec2::new(d.0, d.1) * 1.5;
                painter.text(o, align, text, font.clone(), Color32::from_black_alpha(220));
            }
            painter.text(pos, align, text, font.clone(), col);
        }
    }
}

/// The central area: a row of planes (augmented), with the original above when side by side.
pub fn central(ui: &mut egui::Ui, state: &mut State, rt: &mut Runtime) -> Vec<Command> {
    let mut out = vec![];
    egui::CentralPanel::default()
        .frame(egui::Frame::NONE.fill(Color32::from_gray(18)))
        .show(ui, |ui| {
            error_banner(ui, rt);
            let Some(scan) = &rt.scan else {
                empty_area(ui, rt.loading.is_some());
                return;
            };
            let views = scan.views.clone();
            let cursor = scan.cursor.clone();
            let shape = scan.loaded.image.shape.clone();
            let rows = if state.display.side_by_side { 2 } else { 1 };
            // 2D: original and augmented side by side in one row.
            let (n_rows, n_cols) = if views.len() == 1 {
                (1, rows)
            } else {
                (rows, views.len())
            };
            let full = ui.available_rect_before_wrap();
            rt.capture.views_rect = Some(full);
            let slider_h = 26.0;
            let cell = Vec2::new(
                full.width() / n_cols as f32,
                (full.height() - slider_h) / n_rows as f32,
            );
            let aug = rt.work.shown.as_ref();
            let own_window = filtered_window(aug.and_then(|s| s.filter.as_ref()));
            let normalized = aug.and_then(|s| s.normalized.clone());
            let unfiltered = aug.is_some_and(|s| s.unfiltered);
            // (original, augmented) mask of each view.
            type Masks = (Option<Arc<DisplaySlice>>, Option<Arc<DisplaySlice>>);
            let masks: Vec<Masks> = views
                .iter()
                .enumerate()
                .map(|(vi, _)| {
                    (
                        rt.views
                            .original
                            .get(vi)
                            .and_then(|p| mask_of(state, rt, p.id)),
                        aug.and_then(|s| s.image.get(vi))
                            .and_then(|p| mask_of(state, rt, p.id)),
                    )
                })
                .collect();
            let active = &mut rt.views.active_view;
            let mut hovered = None;
            for (vi, geom) in views.iter().enumerate() {
                let mut nav = rt.views.nav.get(vi).copied().unwrap_or_default();
                for r in 0..rows {
                    let original = state.display.side_by_side && r == 0;
                    let (row, colm) = if views.len() == 1 { (0, r) } else { (r, vi) };
                    let rect = Rect::from_min_size(
                        full.min + Vec2::new(colm as f32 * cell.x, row as f32 * cell.y),
                        cell,
                    )
                    .shrink(2.0);
                    let idx = geom.normal.map(|a| (cursor[a], shape[a]));
                    let pos = idx.map_or(String::new(), |(i, n)| format!("  {i}/{}", n - 1));
                    let input = if original {
                        rt.views.original.get(vi).cloned().map(|image| ViewInput {
                            key: view_key(0, vi),
                            title: format!("{} · original{pos}", geom.name),
                            geom,
                            image,
                            other: None,
                            label: rt.views.original_label.get(vi).cloned().flatten(),
                            mask: masks.get(vi).and_then(|m| m.0.clone()),
                            look: look(state, scan, false),
                            cursor: &cursor,
                            crosshair: state.display.crosshair,
                            index: vi,
                        })
                    } else {
                        aug.and_then(|s| s.image.get(vi).cloned()).map(|image| {
                            let diff = state.display.difference;
                            let (what, look) = augmented_look(
                                state,
                                scan,
                                own_window,
                                unfiltered,
                                normalized.as_deref(),
                            );
                            ViewInput {
                                key: view_key(1, vi),
                                title: format!("{} · {what}{pos}", geom.name),
                                geom,
                                image,
                                other: if diff {
                                    rt.views.original.get(vi).cloned()
                                } else {
                                    None
                                },
                                label: aug.and_then(|s| s.label.get(vi).cloned().flatten()),
                                mask: masks.get(vi).and_then(|m| m.1.clone()),
                                look,
                                cursor: &cursor,
                                crosshair: state.display.crosshair,
                                index: vi,
                            }
                        })
                    };
                    match input {
                        Some(input) => {
                            out.extend(view_ui(
                                ui,
                                rect,
                                input,
                                &mut nav,
                                active,
                                rt.has_wgpu,
                                &mut hovered,
                            ));
                            if !original {
                                let at = super::overlay::At {
                                    rect,
                                    nav,
                                    view: vi,
                                    generation: rt.work.generation,
                                    scan,
                                };
                                paint_overlays(ui, state, &rt.overlay, rt.work.full.as_ref(), at);
                            }
                        }
                        None => {
                            ui.painter().rect_filled(rect, 0.0, Color32::BLACK);
                            ui.put(rect, egui::Spinner::new());
                        }
                    }
                }
                if let Some(n) = rt.views.nav.get_mut(vi) {
                    *n = nav;
                }
                // The slice slider under each column.
                if let Some(axis) = geom.normal {
                    let srect = Rect::from_min_size(
                        Pos2::new(
                            full.min.x + vi as f32 * cell.x + 8.0,
                            full.max.y - slider_h + 3.0,
                        ),
                        Vec2::new(cell.x - 16.0, slider_h - 6.0),
                    );
                    out.extend(slice_slider(ui, srect, geom, axis, &cursor, shape[axis]));
                }
            }
            ui.allocate_rect(full, Sense::hover());
            rt.views.hover = hovered.and_then(|(vi, row, col)| {
                let geom = views.get(vi)?;
                // A colour image reads all three channels; a 4D scan the volume shown.
                let only = (!scan.loaded.image.is_colour()).then_some(scan.frame);
                hover_at(rt, geom, &cursor, vi, (row, col), only)
            });
        });
    out
}

/// The augmented view's caption and look: the difference map or the image, in the filter's own
/// window when it has one, and whether the filter waits for the slider to rest.
fn augmented_look(
    state: &State,
    scan: &super::Scan,
    own_window: Option<(f32, f32)>,
    unfiltered: bool,
    normalized: Option<&super::worker::Normalized>,
) -> (String, Look) {
    let diff = state.display.difference;
    let mut lk = look(state, scan, diff);
    let mut what = if diff {
        "|augmented − original|".to_string()
    } else {
        "augmented".to_string()
    };
    // A normalised scan: the scan's window mapped into its units, so that the picture compares
    // with the original's.
    if let Some(n) = normalized {
        let ch = (scan.frame).min(n.maps.len().saturating_sub(1));
        let (a, b) = n.maps.get(ch).copied().unwrap_or((1.0, 0.0));
        lk.level = (a * lk.level as f64 + b) as f32;
        lk.width = (a.abs() * lk.width as f64).max(1e-12) as f32;
        what.push_str(if diff {
            " (normalised, against the raw original: units differ)"
        } else {
            " (normalised)"
        });
    }
    if let (Some((lo, hi)), false) = (own_window, diff) {
        lk.level = 0.5 * (lo + hi);
        lk.width = (hi - lo).max(1e-6);
        what.push_str(" (filter's own window)");
    }
    if unfiltered {
        what.push_str(" · unfiltered until the slider rests");
    }
    (what, lk)
}

/// The overlays of an augmented view: the displacement and Jacobian layers, and TorchIO's
/// control grid when it is previewed.
fn paint_overlays(
    ui: &mut egui::Ui,
    state: &State,
    overlay: &super::overlay::OverlayRuntime,
    full: Option<&super::worker::FullResult>,
    at: super::overlay::At<'_>,
) {
    super::overlay::paint(ui, state, overlay, at);
    if state.display.control_grid
        && state.params.preview_as == Model::TorchIo
        && let Some(f) = full
        && f.model == Model::TorchIo
        && let Some(g) = &f.control_grid
    {
        super::overlay::paint_control_grid(ui, g, &state.params.flip, at);
    }
}

/// The last error, in a red band with a button that dismisses it.
fn error_banner(ui: &mut egui::Ui, rt: &mut Runtime) {
    let Some(e) = rt.error.clone() else {
        return;
    };
    egui::Frame::NONE
        .fill(Color32::from_rgb(90, 20, 20))
        .inner_margin(8.0)
        .show(ui, |ui| {
            // The button first and the message wrapped: a long message keeps the button on
            // screen.
            ui.horizontal_top(|ui| {
                if ui.button("Dismiss").clicked() {
                    rt.error = None;
                }
                ui.add(
                    egui::Label::new(
                        egui::RichText::new(format!("Error: {e}")).color(Color32::WHITE),
                    )
                    .wrap(),
                );
            });
        });
}

/// The central area before a scan is shown: a spinner while one loads, else how to open one.
fn empty_area(ui: &mut egui::Ui, loading: bool) {
    ui.centered_and_justified(|ui| {
        if loading {
            ui.spinner();
        } else {
            ui.label("Open a scan (File menu: Open scan, or drop a file on the window)");
        }
    });
}

/// The slice slider of a view along `axis` (of length `len`) in `rect`: a new cursor when moved.
fn slice_slider(
    ui: &mut egui::Ui,
    rect: Rect,
    geom: &ViewGeom,
    axis: usize,
    cursor: &[usize],
    len: usize,
) -> Option<Command> {
    let mut i = cursor[axis];
    let max = len.saturating_sub(1);
    let mut child = ui.new_child(egui::UiBuilder::new().max_rect(rect));
    child.spacing_mut().slider_width = (rect.width() - 90.0).max(40.0);
    let r = child.add(egui::Slider::new(&mut i, 0..=max).text(geom.name.to_lowercase()));
    r.changed().then(|| {
        let mut c = cursor.to_vec();
        c[axis] = i;
        Command::SetCursor(c)
    })
}

/// What the status bar reads under the pointer in view `vi` at `(row, col)`: the voxel, the
/// original and augmented values (channels `only`, or all) and the labels.
fn hover_at(
    rt: &Runtime,
    geom: &ViewGeom,
    cursor: &[usize],
    vi: usize,
    (row, col): (usize, usize),
    only: Option<usize>,
) -> Option<super::Hover> {
    let at = |p: &DisplaySlice| value_at(p, row, col, only);
    let aug = rt.work.shown.as_ref();
    Some(super::Hover {
        voxel: voxel_of(geom, cursor, row, col, rt.views.original.get(vi)?),
        original: at(rt.views.original.get(vi)?),
        augmented: aug.and_then(|s| s.image.get(vi)).map(|p| at(p)),
        label: rt.views.original_label.get(vi).cloned().flatten().map(|l| {
            let a = aug
                .and_then(|s| s.label.get(vi).cloned().flatten())
                .map(|p| value_at(&p, row, col, Some(0))[0]);
            (value_at(&l, row, col, Some(0))[0], a)
        }),
    })
}

/// The values (one per channel) of a display slice at `row`, `col`.
fn value_at(p: &DisplaySlice, row: usize, col: usize, only: Option<usize>) -> Vec<f32> {
    let (r, c) = (row.min(p.height - 1), col.min(p.width - 1));
    let at = |ch: usize| p.data[(ch * p.height + r) * p.width + c];
    match only {
        Some(ch) => vec![at(ch.min(p.channels - 1))],
        None => (0..p.channels).map(at).collect(),
    }
}

/// The array index shown at `row`, `col` of a view whose plane holds `cursor`.
fn voxel_of(
    geom: &ViewGeom,
    cursor: &[usize],
    row: usize,
    col: usize,
    p: &DisplaySlice,
) -> Vec<usize> {
    let mut c = cursor.to_vec();
    if geom.across < c.len() && geom.down < c.len() {
        c[geom.across] = if geom.across_flip {
            p.width - 1 - col
        } else {
            col
        };
        c[geom.down] = if geom.down_flip {
            p.height - 1 - row
        } else {
            row
        };
    }
    c
}

/// A comparison pane: title, image, second image for a difference, look.
type Pane<'a> = (
    &'a str,
    Option<Arc<DisplaySlice>>,
    Option<Arc<DisplaySlice>>,
    Look,
);

/// The CPU vs GPU comparison of the active plane: both results, |Δ| and both timings.
pub fn compare_window(ui: &mut egui::Ui, state: &mut State, rt: &mut Runtime) -> Vec<Command> {
    let mut out = vec![];
    let mut open = state.show_compare;
    egui::Window::new("CPU vs GPU")
        .open(&mut open)
        .default_size([900.0, 420.0])
        .default_pos([360.0, 430.0])
        .show(ui.ctx(), |ui| {
            let Some(scan) = &rt.scan else {
                ui.label("no scan");
                return;
            };
            let Some(c) = rt
                .gpu
                .comparison
                .as_ref()
                .filter(|c| c.generation == rt.work.generation)
            else {
                ui.horizontal(|ui| {
                    ui.spinner();
                    ui.label("computing on both engines…");
                });
                return;
            };
            let vi = rt.views.active_view.min(scan.views.len().saturating_sub(1));
            let geom = &scan.views[vi];
            let idx = geom.normal.map_or(0, |a| scan.cursor[a]);
            let sp = &scan.loaded.image.spacing_mm;
            let cut = |v: &crate::core::volume::Volume| {
                super::slices::extract(&v.data, &v.shape, v.channels, sp, geom, idx)
            };
            let cpu = cut(&c.cpu);
            match &c.gpu {
                Ok((_, ms, name)) => {
                    ui.label(format!(
                        "CPU {} · {name} {} (host to host) · max |Δ| {:.3e} · mean |Δ| {:.3e}",
                        super::panels::fmt_ms(rt, c.cpu_ms),
                        super::panels::fmt_ms(rt, *ms),
                        c.max_abs,
                        c.mean_abs
                    ));
                }
                Err(why) => {
                    ui.label(format!(
                        "CPU {} · GPU: {why}",
                        super::panels::fmt_ms(rt, c.cpu_ms)
                    ));
                }
            }
            let gpu = c.gpu.as_ref().ok().map(|(g, _, _)| cut(g));
            let avail = ui.available_size();
            let w = (avail.x / 3.0).max(100.0);
            let h = (avail.y - 8.0).max(120.0);
            let (rect, _) = ui.allocate_exact_size(Vec2::new(w * 3.0, h), Sense::hover());
            let base = look(state, scan, false);
            let mut nav = Nav::default();
            let mut active = rt.views.active_view;
            let panes: [Pane<'_>; 3] = [
                ("CPU", Some(cpu.clone()), None, base),
                ("GPU", gpu.clone(), None, base),
                (
                    "|CPU − GPU|",
                    gpu.as_ref().map(|_| cpu.clone()),
                    gpu.clone(),
                    Look {
                        level: 0.0,
                        width: (c.max_abs as f32).max(1e-6),
                        difference: true,
                        label_opacity: 0.0,
                        mask_opacity: 0.0,
                        ..base
                    },
                ),
            ];
            for (k, (title, image, other, lk)) in panes.into_iter().enumerate() {
                let r =
                    Rect::from_min_size(rect.min + Vec2::new(k as f32 * w, 0.0), Vec2::new(w, h))
                        .shrink(2.0);
                match image {
                    Some(image) => out.extend(view_ui(
                        ui,
                        r,
                        ViewInput {
                            key: view_key(2, k),
                            title: format!("{} · {title}", geom.name),
                            geom,
                            image,
                            other,
                            label: None,
                            mask: None,
                            look: lk,
                            cursor: &scan.cursor,
                            crosshair: false,
                            index: vi,
                        },
                        &mut nav,
                        &mut active,
                        rt.has_wgpu,
                        &mut None,
                    )),
                    None => {
                        ui.painter().rect_filled(r, 0.0, Color32::from_gray(30));
                        ui.painter().text(
                            r.center(),
                            egui::Align2::CENTER_CENTER,
                            format!("{title}: no GPU result"),
                            egui::FontId::proportional(14.0),
                            Color32::GRAY,
                        );
                    }
                }
            }
        });
    if !open {
        out.push(Command::Compare(false));
    }
    out
}
