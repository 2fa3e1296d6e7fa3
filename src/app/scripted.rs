//! Scripted screenshots (scripts/screenshots.sh): the `AUGSCOPE_SHOT` spec sets the parameters,
//! opens windows and names the PNG to take of the whole window.

use std::path::PathBuf;

use super::state::{self, Params};
use super::{App, AutoPng, BackendChoice, Command};

/// Applies the `AUGSCOPE_SHOT` spec to a new app: the parameters of [`preset_params`], then the
/// windows, preset, zoom and display it names.
pub(super) fn apply_spec(app: &mut App, spec: &str) {
    app.state.params = preset_params(spec, app.state.params.clone());
    // `export=DIR`: the batch export dialog open on that folder.
    if let Some(dir) = spec
        .split(';')
        .find_map(|p| p.trim().strip_prefix("export="))
    {
        app.state.export.out_dir = dir.to_string();
        app.state.export.seed = app.state.params.seed;
        app.rt.windows.export.open = true;
    }
    // `editor`: the preset editor open; `code=K`: the code window on tab K; `grid`:
    // the grid of draws; `preset=NAME`: the preset in use; `overlays`: the deformation
    // grid and Jacobian overlays on; `as=MODEL`: preview as a training library.
    for part in spec.split(';').map(str::trim) {
        if part == "editor" {
            app.apply(Command::OpenEditor);
        } else if part == "grid" {
            app.apply(Command::OpenGrid);
        } else if let Some(name) = part.strip_prefix("preset=") {
            app.state.preset = name.to_string();
        } else if let Some(p) = part.strip_prefix("png=") {
            // A PNG of the whole window once the work is done, then quit.
            app.rt.capture.auto_png = Some(AutoPng {
                path: PathBuf::from(p),
                nudge: spec.split(';').any(|q| q.trim() == "nudge"),
                stage: 0,
                idle_since: None,
            });
        } else if part == "compare" {
            app.state.show_compare = true;
        } else if part == "backend=cuda" {
            app.state.params.backend = BackendChoice::Cuda(0);
        } else if let Some(z) = part.strip_prefix("zoom=") {
            app.rt.capture.initial_zoom = z.parse().ok();
        } else if part == "nearest" {
            app.state.display.nearest = true;
        } else if part == "overlays" {
            app.state.display.deformation_grid = true;
            app.state.display.jacobian = true;
        } else if let Some(m) = part.strip_prefix("as=") {
            if let Ok(m) = m.parse() {
                app.state.params.preview_as = m;
            }
        } else if let Some(tab) = part.strip_prefix("code=") {
            app.rt.windows.code.open = true;
            app.rt.windows.code.from_preset = true;
            app.rt.windows.code.tab = tab.parse().unwrap_or(0);
        }
    }
}

/// Parameters from `rotate=a0,a1,a2;scale=s;translate=t0,t1,t2;elastic=alpha,sigma;seed=n;
/// filter=KIND[,VALUE[,after]];step=JSON;normalize=JSON` (degrees, voxels; see `filter_spec`;
/// `step` adds an intensity step in its plan form, once per part; `normalize` sets the
/// normalisation in its preset form); the rest as in `base`.
/// Unknown or malformed parts are ignored.
pub fn preset_params(spec: &str, base: Params) -> Params {
    let mut p = Params {
        elastic: false,
        ..base
    };
    p.rotate_deg = [0.0; 3];
    p.translate_vox = [0.0; 3];
    p.scale = [1.0; 3];
    for part in spec.split(';') {
        let Some((k, v)) = part.split_once('=') else {
            continue;
        };
        if k.trim() == "filter" {
            filter_spec(v, &mut p.filter);
            continue;
        }
        if k.trim() == "normalize" {
            // A normalisation in its preset form, e.g. `normalize={"method": "nnunet_zscore"}`.
            p.normalize = serde_json::from_str(v).ok();
            continue;
        }
        if k.trim() == "step" {
            // An intensity step in its plan form, e.g. `step={"brightness": {"multipliers": [1.2]}}`.
            if let Ok(step) = serde_json::from_str(v) {
                p.intensity.push(step);
            }
            continue;
        }
        let nums: Vec<f64> = v.split(',').filter_map(|t| t.trim().parse().ok()).collect();
        match (k.trim(), nums.as_slice()) {
            ("rotate", [a, b, c]) => p.rotate_deg = [*a, *b, *c],
            ("translate", [a, b, c]) => p.translate_vox = [*a, *b, *c],
            ("scale", [s]) => p.scale = [*s; 3],
            ("elastic", [a, s]) => {
                p.elastic = true;
                p.alpha = *a;
                p.sigma_vox = *s;
            }
            ("seed", [n]) => p.seed = *n as u64,
            ("order", [n]) => {
                p.order = match *n as u8 {
                    0 => crate::augment::Order::Nearest,
                    3 => crate::augment::Order::Cubic,
                    _ => crate::augment::Order::Linear,
                }
            }
            _ => {}
        }
    }
    p
}

/// `KIND[,VALUE[,after]]` of [`preset_params`]: gaussian or log (VALUE sigma), median (VALUE
/// the window), febds (VALUE 0 dog, 1 log, 2 fft); the filter is enabled, before the transform
/// unless `after`.
fn filter_spec(v: &str, f: &mut state::FilterParams) {
    let parts: Vec<&str> = v.split(',').map(str::trim).collect();
    let val: Option<f64> = parts.get(1).and_then(|t| t.parse().ok());
    let kind = match parts.first().copied() {
        Some("gaussian") => state::FilterKind::Gaussian,
        Some("log") => state::FilterKind::Log,
        Some("median") => state::FilterKind::Median,
        Some("febds") => state::FilterKind::Febds,
        _ => return,
    };
    f.enabled = true;
    f.kind = kind;
    match (kind, val) {
        (state::FilterKind::Gaussian | state::FilterKind::Log, Some(s)) => f.sigma_vox = s,
        (state::FilterKind::Median, Some(k)) => f.median_size = k as usize,
        (state::FilterKind::Febds, Some(m)) => {
            f.febds_method = match m as i64 {
                1 => crate::filter::FebdsMethod::Log,
                2 => crate::filter::FebdsMethod::Fft,
                _ => crate::filter::FebdsMethod::Dog,
            }
        }
        _ => {}
    }
    if parts.get(2) == Some(&"after") {
        f.stage = state::FilterStage::After;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn screenshot_spec_sets_the_filter() {
        let p = preset_params("rotate=1,2,3;filter=log,1.5,after", Params::default());
        assert_eq!(p.rotate_deg, [1.0, 2.0, 3.0]);
        assert!(p.filter.enabled);
        assert_eq!(p.filter.kind, state::FilterKind::Log);
        assert_eq!(p.filter.sigma_vox, 1.5);
        assert_eq!(p.filter.stage, state::FilterStage::After);
        let p = preset_params("filter=febds,2", Params::default());
        assert_eq!(p.filter.kind, state::FilterKind::Febds);
        assert_eq!(p.filter.febds_method, crate::filter::FebdsMethod::Fft);
        assert_eq!(p.filter.stage, state::FilterStage::Before);
        let p = preset_params("filter=nonsense,3", Params::default());
        assert!(!p.filter.enabled);
        let p = preset_params(
            r#"step={"brightness": {"multipliers": [1.5]}};step={"nonsense": 1}"#,
            Params::default(),
        );
        assert_eq!(p.intensity.len(), 1);
        assert_eq!(p.intensity[0].name(), "brightness");
        let p = preset_params(
            r#"normalize={"method": "nnunet_zscore"}"#,
            Params::default(),
        );
        assert_eq!(p.normalize.map(|n| n.name()), Some("nnunet_zscore"));
    }
}
