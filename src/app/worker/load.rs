//! Reading a scan and its label map for the explorer, with the window presets that suit it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use super::{LoadOptions, Volume, io, slices};
use crate::io::dicom::SeriesInfo;

/// A DICOM folder of several series, and the request that opened it: the explorer offers its
/// series in a picker.
#[derive(Clone, Debug, PartialEq)]
pub struct SeriesChoice {
    pub path: PathBuf,
    pub label: Option<PathBuf>,
    pub series: Vec<SeriesInfo>,
}

/// Why a scan did not load: an error to show, or a folder whose series the user chooses among.
#[derive(Debug)]
pub enum NotLoaded {
    Error(String),
    Choose(SeriesChoice),
}

/// A scan and its label map, as loaded.
pub struct Loaded {
    pub image: Arc<Volume>,
    pub label: Option<Arc<Volume>>,
    pub path: PathBuf,
    /// The series read of a DICOM folder of several, where one was chosen.
    pub series: Option<SeriesInfo>,
    pub label_path: Option<PathBuf>,
    /// 0.5 and 99.5 percentiles of the image (the "auto" window).
    pub auto_window: (f32, f32),
    /// A note about the label map (e.g. why it was not used).
    pub note: Option<String>,
    pub load_ms: f64,
    /// The smallest and largest finite value of the image (gamma's scale, FEBDS's 12-bit map).
    pub range: (f32, f32),
    /// The window presets that suit the scan: the CT windows in Hounsfield units for a CT,
    /// percentile windows for every other scan. (name, width, level).
    pub windows: Vec<(String, f32, f32)>,
    /// The image's histogram over `range`.
    pub histogram: crate::app::legend::Histogram,
    /// The labels of the label map, with their names where the data set gives them.
    pub labels: Vec<crate::app::legend::LabelEntry>,
}

/// The CT window presets (name, width, level) in HU.
pub const CT_WINDOWS: [(&str, f32, f32); 4] = [
    ("CT-Brain", 100.0, 50.0),
    ("Abdomen", 350.0, 40.0),
    ("Lung", 1400.0, -500.0),
    ("Bone", 1000.0, 400.0),
];

/// Whether a scan's values are Hounsfield units: air (about −1000 HU) is in it, which no MR,
/// PET or photograph holds.
pub fn looks_like_ct(range: (f32, f32)) -> bool {
    range.0 <= -900.0 && range.0 >= -3100.0 && range.1 > 0.0
}

/// The window presets of a scan with value range `range` (see [`Loaded::windows`]).
pub fn window_presets(data: &[f32], range: (f32, f32)) -> Vec<(String, f32, f32)> {
    if looks_like_ct(range) {
        return CT_WINDOWS
            .iter()
            .map(|(n, w, l)| (n.to_string(), *w, *l))
            .collect();
    }
    let q = slices::percentiles(data, &[0.01, 0.02, 0.05, 0.95, 0.98, 0.99]);
    let w = |name: &str, lo: f32, hi: f32| (name.to_string(), (hi - lo).max(1e-6), 0.5 * (lo + hi));
    vec![
        w("1–99 %", q[0], q[5]),
        w("2–98 %", q[1], q[4]),
        w("5–95 %", q[2], q[3]),
        w("min–max", range.0, range.1),
    ]
}

/// Reads a scan (the series `series` of a DICOM folder of several) and its label map, with what
/// the views need of them; a DICOM folder of several series and no choice is
/// [`NotLoaded::Choose`].
pub(super) fn load_scan(
    path: PathBuf,
    label_path: Option<PathBuf>,
    series: Option<String>,
) -> Result<Loaded, NotLoaded> {
    let t = Instant::now();
    let opts = LoadOptions {
        series: series.clone(),
        ..LoadOptions::default()
    };
    let image = match io::load(&path, &opts) {
        Ok(v) => v,
        Err(io::IoError::SeveralSeries { series, .. }) => {
            return Err(NotLoaded::Choose(SeriesChoice {
                path,
                label: label_path,
                series,
            }));
        }
        Err(e) => return Err(NotLoaded::Error(e.to_string())),
    };
    if image.data.is_empty() {
        return Err(NotLoaded::Error(format!(
            "the scan holds no voxels: {}",
            path.display()
        )));
    }
    if !(2..=3).contains(&image.ndim()) {
        return Err(NotLoaded::Error(format!(
            "only 2D and 3D scans can be shown, this one has {} axes: {}",
            image.ndim(),
            path.display()
        )));
    }
    // The chosen series in words (for the title and the Scan facts): its folder's headers once
    // more, which costs little beside the pixel data just read.
    let series = series.filter(|_| path.is_dir()).and_then(|choice| {
        let list = io::dicom::list_series(&path).ok()?;
        io::dicom::choose(&list, &choice).ok().cloned()
    });
    let mut note = None;
    let label = match &label_path {
        None => None,
        Some(lp) => match io::load(
            lp,
            &LoadOptions {
                label: true,
                ..LoadOptions::default()
            },
        ) {
            Ok(l) if l.shape == image.shape && l.channels == 1 => Some(Arc::new(l)),
            Ok(l) => {
                note = Some(format!(
                    "label map ignored: shape {:?} differs from the scan's {:?}: {}",
                    l.shape,
                    image.shape,
                    lp.display()
                ));
                None
            }
            Err(e) => {
                note = Some(format!("label map not loaded: {e}"));
                None
            }
        },
    };
    let p = slices::percentiles(&image.data, &[0.005, 0.995]);
    let auto_window = (p[0], p[1].max(p[0]));
    let range = image
        .data
        .iter()
        .filter(|v| v.is_finite())
        .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), &v| {
            (lo.min(v), hi.max(v))
        });
    let range = if range.0 <= range.1 {
        range
    } else {
        (0.0, 0.0)
    };
    let windows = window_presets(&image.data, range);
    let histogram = crate::app::legend::Histogram::of(&image.data, range);
    let labels = match (&label, &label_path) {
        (Some(l), Some(lp)) => {
            crate::app::legend::label_entries(&l.data, &crate::app::legend::label_names(lp))
        }
        _ => vec![],
    };
    Ok(Loaded {
        image: Arc::new(image),
        label,
        path,
        series,
        label_path,
        auto_window,
        note,
        load_ms: t.elapsed().as_secs_f64() * 1e3,
        range,
        windows,
        histogram,
        labels,
    })
}
