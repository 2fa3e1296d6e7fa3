//! What the colours mean: the scan's histogram with the window drawn on it over the colour bar of
//! the colormap (so that one sees which values go to black, to white, or in between), and the
//! label legend (each label's colour, name and voxel count). The colours are those of
//! `shaders/slice.wgsl`.

use std::path::Path;

use eframe::egui::{self, Color32, Pos2, Rect, Sense, Stroke, Vec2};

use super::state::Colormap;

/// A histogram of the scan's finite values over `[lo, hi]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Histogram {
    pub lo: f32,
    pub hi: f32,
    pub counts: Vec<u64>,
}

impl Histogram {
    pub const BINS: usize = 128;

    /// The histogram of `data`'s finite values over `range`.
    pub fn of(data: &[f32], range: (f32, f32)) -> Histogram {
        let (lo, hi) = range;
        let mut counts = vec![0u64; Self::BINS];
        let span = (hi - lo).max(f32::MIN_POSITIVE);
        for &v in data {
            if v.is_finite() {
                let b = (((v - lo) / span) * Self::BINS as f32) as usize;
                counts[b.min(Self::BINS - 1)] += 1;
            }
        }
        Histogram { lo, hi, counts }
    }
}

/// One label of a label map: its value, how many voxels hold it, and its name where the data set
/// says (`dataset.json` of nnU-Net beside the label map or one folder up).
#[derive(Clone, Debug, PartialEq)]
pub struct LabelEntry {
    pub value: u32,
    pub voxels: u64,
    pub name: Option<String>,
}

/// At most this many labels are listed (a map with more is not a segmentation).
const MAX_LABELS: usize = 64;

/// The labels (> 0) present in `data`, with names from `names`.
pub fn label_entries(data: &[f32], names: &[(u32, String)]) -> Vec<LabelEntry> {
    // Label values are small integers: one counter each, in one pass.
    const MAX_VALUE: usize = 4096;
    let mut counts = vec![0u64; MAX_VALUE];
    for &v in data {
        if v >= 0.5 && v < MAX_VALUE as f32 - 0.5 {
            counts[(v + 0.5) as usize] += 1;
        }
    }
    counts
        .into_iter()
        .enumerate()
        .filter(|&(_, n)| n > 0)
        .take(MAX_LABELS)
        .map(|(value, voxels)| LabelEntry {
            value: value as u32,
            voxels,
            name: names
                .iter()
                .find(|(v, _)| *v as usize == value)
                .map(|(_, n)| n.clone()),
        })
        .collect()
}

/// Label names from an nnU-Net `dataset.json` (`"labels": {"liver": 1, ...}`) in the label map's
/// folder or the one above it; the bundled sample's own names otherwise.
pub fn label_names(label_path: &Path) -> Vec<(u32, String)> {
    if label_path == super::sample_label() {
        return vec![(1, "grey matter".into()), (2, "white matter".into())];
    }
    let dirs = label_path
        .parent()
        .into_iter()
        .flat_map(|d| [Some(d), d.parent()])
        .flatten();
    for d in dirs {
        let Ok(text) = std::fs::read_to_string(d.join("dataset.json")) else {
            continue;
        };
        let Ok(json) = serde_json::from_str::<serde_json::Value>(&text) else {
            continue;
        };
        let Some(map) = json.get("labels").and_then(|l| l.as_object()) else {
            continue;
        };
        // nnU-Net v2: name → value (or a list of values for a region); v1: "value" → name.
        let mut out = vec![];
        for (k, v) in map {
            match (k.parse::<u32>(), v) {
                (Ok(n), serde_json::Value::String(name)) => out.push((n, name.clone())),
                (_, serde_json::Value::Number(n)) => {
                    if let Some(n) = n.as_u64() {
                        out.push((n as u32, k.clone()));
                    }
                }
                _ => {}
            }
        }
        return out;
    }
    vec![]
}

/// The colour of label `id` over the image, as the shader draws it.
pub fn label_colour(id: u32) -> Color32 {
    let rgb = match id {
        1 => [0.95, 0.35, 0.20],
        2 => [0.20, 0.65, 0.95],
        3 => [0.35, 0.85, 0.30],
        _ => {
            let h = (id as f32 * 0.618034).fract();
            let k = [0.0, 2.0 / 3.0, 1.0 / 3.0];
            k.map(|k| (((h + k).fract() * 6.0 - 3.0).abs() - 1.0).clamp(0.0, 1.0))
        }
    };
    Color32::from_rgb(
        (rgb[0] * 255.0) as u8,
        (rgb[1] * 255.0) as u8,
        (rgb[2] * 255.0) as u8,
    )
}

/// The colour of the windowed value `t` (0..1) in `map`, as the shader draws it.
pub fn colormap(map: Colormap, t: f32) -> Color32 {
    let x = t.clamp(0.0, 1.0);
    let rgb = match map {
        Colormap::Gray => [x; 3],
        Colormap::Viridis => {
            const C: [[f32; 3]; 7] = [
                [0.277_727_33, 0.005_407_344_5, 0.334_099_8],
                [0.105_093_04, 1.404_613_5, 1.384_590_2],
                [-0.330_861_83, 0.214_847_56, 0.095_095_16],
                [-4.634_230_6, -5.799_101, -19.332_441],
                [6.228_27, 14.179_933, 56.690_55],
                [4.776_385, -13.745_145, -65.353_03],
                [-5.435_456, 4.645_852_6, 26.312_435],
            ];
            std::array::from_fn(|c| {
                C.iter()
                    .rev()
                    .fold(0.0, |acc, k| acc * x + k[c])
                    .clamp(0.0, 1.0)
            })
        }
    };
    Color32::from_rgb(
        (rgb[0] * 255.0 + 0.5) as u8,
        (rgb[1] * 255.0 + 0.5) as u8,
        (rgb[2] * 255.0 + 0.5) as u8,
    )
}

/// The histogram (log counts) with the window shaded on it, over the colour bar of the values
/// shown; a drag on it moves the level. Returns the new level when dragged.
pub fn histogram_ui(
    ui: &mut egui::Ui,
    h: &Histogram,
    level: f32,
    width: f32,
    map: Colormap,
) -> Option<f32> {
    let size = Vec2::new(ui.available_width().min(300.0), 64.0);
    let (rect, resp) = ui.allocate_exact_size(size, Sense::click_and_drag());
    let bar_h = 10.0;
    let plot = Rect::from_min_max(rect.min, Pos2::new(rect.max.x, rect.max.y - bar_h - 2.0));
    let bar = Rect::from_min_max(Pos2::new(rect.min.x, rect.max.y - bar_h), rect.max);
    let p = ui.painter_at(rect);
    p.rect_filled(plot, 2.0, Color32::from_gray(28));
    let span = (h.hi - h.lo).max(f32::MIN_POSITIVE);
    let x_of = |v: f32| plot.min.x + (v - h.lo) / span * plot.width();
    let v_of = |x: f32| h.lo + (x - plot.min.x) / plot.width() * span;
    let max = h
        .counts
        .iter()
        .map(|&c| ((c + 1) as f32).ln())
        .fold(0.0f32, f32::max)
        .max(1e-6);
    let bw = plot.width() / h.counts.len() as f32;
    for (i, &c) in h.counts.iter().enumerate() {
        if c == 0 {
            continue;
        }
        let t = ((c + 1) as f32).ln() / max;
        let x = plot.min.x + i as f32 * bw;
        p.rect_filled(
            Rect::from_min_max(
                Pos2::new(x, plot.max.y - t * plot.height()),
                Pos2::new(x + bw.max(1.0), plot.max.y),
            ),
            0.0,
            Color32::from_gray(150),
        );
    }
    // The window: values below go to the colormap's start, above to its end.
    let (lo, hi) = (level - 0.5 * width, level + 0.5 * width);
    let (xl, xh) = (x_of(lo).max(plot.min.x), x_of(hi).min(plot.max.x));
    if xh > xl {
        p.rect_filled(
            Rect::from_min_max(Pos2::new(xl, plot.min.y), Pos2::new(xh, plot.max.y)),
            0.0,
            Color32::from_rgba_unmultiplied(230, 200, 40, 40),
        );
    }
    let stroke = Stroke::new(1.0, Color32::from_rgb(230, 200, 40));
    for x in [x_of(lo), x_of(hi)] {
        if (plot.min.x..=plot.max.x).contains(&x) {
            p.line_segment([Pos2::new(x, plot.min.y), Pos2::new(x, plot.max.y)], stroke);
        }
    }
    // The colour bar: the colour each value on the axis above is drawn with.
    let steps = bar.width().max(1.0) as usize;
    for s in 0..steps {
        let x = bar.min.x + s as f32;
        let t = (v_of(x) - lo) / width.max(1e-20);
        p.rect_filled(
            Rect::from_min_max(Pos2::new(x, bar.min.y), Pos2::new(x + 1.0, bar.max.y)),
            0.0,
            colormap(map, t),
        );
    }
    let resp = resp.on_hover_text(format!(
        "values {} to {} (log counts); the window {} to {} shaded; drag to move the level",
        short(h.lo),
        short(h.hi),
        short(lo),
        short(hi)
    ));
    // The axis' ends, under the ends of the bar.
    let font = egui::TextStyle::Small.resolve(ui.style());
    let (axis, _) = ui.allocate_exact_size(Vec2::new(size.x, font.size + 2.0), Sense::hover());
    let weak = ui.visuals().weak_text_color();
    let p = ui.painter_at(axis);
    p.text(
        axis.left_top(),
        egui::Align2::LEFT_TOP,
        short(h.lo),
        font.clone(),
        weak,
    );
    p.text(
        axis.right_top(),
        egui::Align2::RIGHT_TOP,
        short(h.hi),
        font,
        weak,
    );
    (resp.dragged() || resp.clicked())
        .then(|| resp.interact_pointer_pos())
        .flatten()
        .map(|pos| v_of(pos.x.clamp(plot.min.x, plot.max.x)))
}

fn short(v: f32) -> String {
    if v.abs() >= 100.0 || v == v.trunc() {
        format!("{v:.0}")
    } else {
        format!("{v:.3}")
    }
}

/// The label legend: colour, value, name and share of the voxels of each label.
pub fn legend_ui(ui: &mut egui::Ui, labels: &[LabelEntry]) {
    let total: u64 = labels.iter().map(|l| l.voxels).sum::<u64>().max(1);
    egui::Grid::new("label legend")
        .num_columns(3)
        .show(ui, |ui| {
            for l in labels {
                let (r, _) = ui.allocate_exact_size(Vec2::splat(12.0), Sense::hover());
                ui.painter().rect_filled(r, 2.0, label_colour(l.value));
                ui.label(match &l.name {
                    Some(n) => format!("{} {n}", l.value),
                    None => format!("{}", l.value),
                });
                ui.weak(format!(
                    "{:.1} % of labelled voxels",
                    100.0 * l.voxels as f64 / total as f64
                ));
                ui.end_row();
            }
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_counts_every_finite_value_once() {
        let h = Histogram::of(&[0.0, 0.5, 1.0, f32::NAN, 1.0], (0.0, 1.0));
        assert_eq!(h.counts.iter().sum::<u64>(), 4);
        assert_eq!(h.counts[0], 1);
        assert_eq!(h.counts[Histogram::BINS - 1], 2);
    }

    #[test]
    fn labels_are_counted_and_named() {
        let e = label_entries(&[0.0, 1.0, 2.0, 2.0, 7.0], &[(2, "liver".into())]);
        let got: Vec<(u32, u64, Option<&str>)> = e
            .iter()
            .map(|l| (l.value, l.voxels, l.name.as_deref()))
            .collect();
        assert_eq!(got, [(1, 1, None), (2, 2, Some("liver")), (7, 1, None)]);
    }

    #[test]
    fn nnunet_dataset_json_names_the_labels() {
        let d = tempfile::tempdir().expect("dir");
        std::fs::create_dir(d.path().join("labelsTr")).expect("dir");
        std::fs::write(
            d.path().join("dataset.json"),
            r#"{"labels": {"background": 0, "liver": 1, "tumour": 2}}"#,
        )
        .expect("json");
        let mut n = label_names(&d.path().join("labelsTr/case_000.nii.gz"));
        n.sort();
        assert_eq!(
            n,
            [
                (0, "background".into()),
                (1, "liver".into()),
                (2, "tumour".into())
            ]
        );
    }

    #[test]
    fn the_first_colours_are_the_shaders() {
        assert_eq!(label_colour(1), Color32::from_rgb(242, 89, 51));
        assert_eq!(colormap(Colormap::Gray, 0.5), Color32::from_gray(128));
        // viridis runs from dark purple to yellow.
        let (a, b) = (
            colormap(Colormap::Viridis, 0.0),
            colormap(Colormap::Viridis, 1.0),
        );
        assert!(a.b() > a.g() && b.r() > 200 && b.g() > 200);
    }
}
