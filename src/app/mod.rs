//! The desktop explorer (egui/eframe). For now a small viewer: the three middle slices of the
//! scan with slice sliders; the full augmentation explorer is the GUI issue's work.

use std::path::PathBuf;

use anyhow::Context;
use eframe::egui;

use crate::io::{self, LoadOptions};
use crate::volume::Volume;

/// The bundled sample scan, relative to the crate root.
pub const SAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/assets/mni152_t1.nii.gz");

/// Opens the window on the given file (or the bundled sample) and runs until it is closed.
pub fn run(files: Vec<PathBuf>, _label: Option<PathBuf>) -> anyhow::Result<()> {
    let path = files
        .into_iter()
        .next()
        .unwrap_or_else(|| PathBuf::from(SAMPLE));
    let vol = io::load(&path, &LoadOptions::default())?;
    let title = format!("augscope — {}", path.display());
    let opts = eframe::NativeOptions::default();
    eframe::run_native(
        &title,
        opts,
        Box::new(move |_cc| Ok(Box::new(Viewer::new(vol)))),
    )
    .map_err(|e| anyhow::anyhow!("{e}"))
    .context("cannot open the window")
}

struct Viewer {
    vol: Volume,
    slice: Vec<usize>,
    range: (f32, f32),
    /// Textures of the planes and the slice indices they show; rebuilt only when a slider moves.
    textures: Option<(Vec<usize>, Vec<egui::TextureHandle>)>,
}

impl Viewer {
    fn new(vol: Volume) -> Self {
        let slice = vol.shape.iter().map(|n| n / 2).collect();
        let range = vol.finite_range().unwrap_or((0.0, 1.0));
        Viewer {
            vol,
            slice,
            range,
            textures: None,
        }
    }

    /// A gray image of the plane normal to `axis` at the current slice (channel 0).
    fn plane(&self, axis: usize) -> egui::ColorImage {
        let v = &self.vol;
        let (lo, hi) = self.range;
        let scale = if hi > lo { 255.0 / (hi - lo) } else { 0.0 };
        let to_u8 = |x: f32| ((x - lo) * scale).clamp(0.0, 255.0) as u8;
        let ch = v.channel(0);
        if v.ndim() == 2 {
            let (h, w) = (v.shape[0], v.shape[1]);
            let px: Vec<u8> = (0..h)
                .rev()
                .flat_map(|y| (0..w).map(move |x| (y, x)))
                .map(|(y, x)| to_u8(ch[y * w + x]))
                .collect();
            return egui::ColorImage::from_gray([w, h], &px);
        }
        let [d, h, w] = [v.shape[0], v.shape[1], v.shape[2]];
        let at = |z: usize, y: usize, x: usize| to_u8(ch[(z * h + y) * w + x]);
        let s = self.slice[axis];
        // Rows go up the screen with increasing index, as radiological viewers draw RAS data.
        let (cols, rows, px): (usize, usize, Vec<u8>) = match axis {
            0 => (
                w,
                h,
                (0..h)
                    .rev()
                    .flat_map(|y| (0..w).map(move |x| at(s, y, x)))
                    .collect(),
            ),
            1 => (
                w,
                d,
                (0..d)
                    .rev()
                    .flat_map(|z| (0..w).map(move |x| at(z, s, x)))
                    .collect(),
            ),
            _ => (
                h,
                d,
                (0..d)
                    .rev()
                    .flat_map(|z| (0..h).map(move |y| at(z, y, s)))
                    .collect(),
            ),
        };
        egui::ColorImage::from_gray([cols, rows], &px)
    }
}

impl eframe::App for Viewer {
    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        egui::CentralPanel::default().show(ui, |ui| {
            let nd = self.vol.ndim();
            ui.horizontal(|ui| {
                for axis in 0..nd.min(3) {
                    if nd == 3 {
                        let max = self.vol.shape[axis] - 1;
                        ui.add(
                            egui::Slider::new(&mut self.slice[axis], 0..=max)
                                .text(format!("axis {axis}")),
                        );
                    }
                }
            });
            let planes = if nd == 3 { 3 } else { 1 };
            if self.textures.as_ref().is_none_or(|(s, _)| *s != self.slice) {
                let tex = (0..planes)
                    .map(|axis| {
                        ui.ctx().load_texture(
                            format!("plane{axis}"),
                            self.plane(axis),
                            egui::TextureOptions::LINEAR,
                        )
                    })
                    .collect();
                self.textures = Some((self.slice.clone(), tex));
            }
            ui.horizontal(|ui| {
                for tex in self.textures.iter().flat_map(|(_, t)| t) {
                    let size = tex.size_vec2();
                    let s = (300.0 / size.x.max(size.y)).max(0.1);
                    ui.image((tex.id(), size * s));
                }
            });
        });
    }
}
