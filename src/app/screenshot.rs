//! Screenshots: F12 writes a PNG of the views to the screenshot folder, and a scripted
//! screenshot ([`AutoPng`]) writes the whole window once the work is done, then closes the app.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use eframe::egui;

use super::{App, Command, Runtime};

/// Where screenshots go: `~/Pictures` if it exists, else the home folder, else the current one.
fn screenshot_dir() -> PathBuf {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    home.as_ref()
        .map(|h| h.join("Pictures"))
        .filter(|p| p.is_dir())
        .or(home)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// A new screenshot's path in [`screenshot_dir`]: `augscope-<scan>-<unix seconds>.png`.
fn screenshot_path(scan: Option<&Path>) -> PathBuf {
    let stem = scan.and_then(|p| p.file_name()).map_or_else(
        || "views".to_string(),
        |n| {
            let n = n.to_string_lossy();
            n.trim_end_matches(".gz")
                .trim_end_matches(".nii")
                .to_string()
        },
    );
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    screenshot_dir().join(format!("augscope-{stem}-{secs}.png"))
}

/// Writes `crop` (in pixels; the whole image when `None`) of the window's screenshot to `path`
/// as a PNG, whole or not at all.
fn write_png(shot: &egui::ColorImage, crop: Option<egui::Rect>, path: &Path) -> Result<(), String> {
    let [w, h] = shot.size;
    let r = crop.unwrap_or(egui::Rect::from_min_size(
        egui::Pos2::ZERO,
        egui::vec2(w as f32, h as f32),
    ));
    let x0 = (r.min.x.max(0.0) as usize).min(w);
    let y0 = (r.min.y.max(0.0) as usize).min(h);
    let x1 = (r.max.x.max(0.0) as usize).clamp(x0, w);
    let y1 = (r.max.y.max(0.0) as usize).clamp(y0, h);
    if x1 == x0 || y1 == y0 {
        return Err("the screenshot holds no views".into());
    }
    let mut rgba = Vec::with_capacity((x1 - x0) * (y1 - y0) * 4);
    for y in y0..y1 {
        for p in &shot.pixels[y * w + x0..y * w + x1] {
            rgba.extend_from_slice(&p.to_array());
        }
    }
    let (cw, ch) = ((x1 - x0) as u32, (y1 - y0) as u32);
    crate::io::atomic_write(path, "PNG", |f| {
        use image::ImageEncoder as _;
        image::codecs::png::PngEncoder::new(f)
            .write_image(&rgba, cw, ch, image::ExtendedColorType::Rgba8)
            .map_err(std::io::Error::other)
    })
    .map_err(|e| e.to_string())
}

/// A scripted screenshot: once the app has been idle for a second (and, with `nudge`, after one
/// more rotation step of 1.5° has been computed, so that the timings show a slider step), the
/// whole window goes to `path` and the app closes.
#[derive(Clone, Debug)]
pub struct AutoPng {
    pub path: PathBuf,
    pub nudge: bool,
    /// 0 waiting, 1 nudged and waiting, 2 screenshot asked for.
    pub stage: u8,
    pub idle_since: Option<Instant>,
}

impl App {
    /// Advances a scripted screenshot ([`AutoPng`]).
    pub(super) fn auto_png(&mut self, ctx: &egui::Context) {
        let idle = self.is_idle()
            && self.rt.scan.is_some()
            && (!self.state.show_compare
                || self
                    .rt
                    .gpu
                    .comparison
                    .as_ref()
                    .is_some_and(|c| c.generation == self.rt.work.generation));
        let Some(a) = self.rt.capture.auto_png.as_mut() else {
            return;
        };
        if !idle || a.stage == 2 {
            a.idle_since = None;
            ctx.request_repaint_after(std::time::Duration::from_millis(100));
            return;
        }
        let since = *a.idle_since.get_or_insert_with(Instant::now);
        ctx.request_repaint_after(std::time::Duration::from_millis(100));
        if since.elapsed().as_secs_f64() < 1.0 {
            return;
        }
        a.idle_since = None;
        if a.nudge && a.stage == 0 {
            a.stage = 1;
            self.state.params.rotate_deg[0] += 1.5;
        } else {
            a.stage = 2;
            self.rt.capture.screenshot_pending = true;
        }
    }
}

/// Writes the window's pixels as a PNG on a thread of its own: the views (F12) to the
/// screenshot folder, or the whole window of a scripted screenshot, after which the app quits.
pub(super) fn save_in_background(rt: &mut Runtime, img: Arc<egui::ColorImage>) {
    // A scripted screenshot is the whole window and ends the app; F12's is the views.
    let scripted = rt.capture.auto_png.as_ref().is_some_and(|a| a.stage == 2);
    let (path, crop) = match rt.capture.auto_png.take().filter(|_| scripted) {
        Some(a) => (a.path, None),
        None => {
            let ppp = rt.capture.pixels_per_point;
            let scan = rt.scan.as_ref().map(|s| s.loaded.path.clone());
            let crop = rt
                .capture
                .views_rect
                .map(|r| egui::Rect::from_min_max(r.min * ppp, r.max * ppp));
            (screenshot_path(scan.as_deref()), crop)
        }
    };
    // Encoding a PNG takes tens of milliseconds: not on the UI thread.
    let tx = rt.dialogs.0.clone();
    let ctx = rt.egui_ctx.clone();
    let spawned = std::thread::Builder::new()
        .name("augscope-screenshot".into())
        .spawn(move || {
            let r = write_png(&img, crop, &path)
                .map(|()| format!("screenshot saved: {}", path.display()))
                .map_err(|e| format!("screenshot not saved: {e}"));
            if scripted {
                if let Err(e) = &r {
                    eprintln!("augscope: error: {e}");
                }
                let _ = tx.send(Command::Quit);
            } else {
                let _ = tx.send(Command::Saved(r));
            }
            ctx.request_repaint();
        });
    if let Err(e) = spawned {
        rt.error = Some(format!("cannot start saving the screenshot: {e}"));
    }
}
