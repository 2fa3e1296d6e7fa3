//! Numbers as a person reads them: a few decimals, trailing zeros trimmed (12.000000000000002
//! prints as 12, 734.2918374 as 734.292), with units (°, vox, mm).

use crate::augment::Done;

/// `x` with up to 3 decimals (more below 1, so that three significant digits remain, at most
/// 8), trailing zeros and a trailing point removed; never `-0`.
pub fn num(x: f64) -> String {
    if !x.is_finite() {
        return x.to_string();
    }
    let ax = x.abs();
    let decimals = if ax == 0.0 || ax >= 1.0 {
        3
    } else {
        (2 - ax.log10().floor() as i64).clamp(3, 8) as usize
    };
    let s = format!("{x:.decimals$}");
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    };
    if s == "-0" { "0".into() } else { s }
}

/// Values joined by ", " with their unit: `"°"` after each number, a word once at the end.
pub fn nums(v: &[f64], unit: &str) -> String {
    let each = unit == "°";
    let list = v
        .iter()
        .map(|&x| {
            if each {
                format!("{}°", num(x))
            } else {
                num(x)
            }
        })
        .collect::<Vec<_>>()
        .join(", ");
    if each || unit.is_empty() {
        list
    } else {
        format!("{list} {unit}")
    }
}

fn f64s(v: &serde_json::Value, key: &str) -> Vec<f64> {
    v.get(key).map_or(vec![], values)
}

/// A number or an array of numbers.
fn values(x: &serde_json::Value) -> Vec<f64> {
    match x {
        serde_json::Value::Array(a) => a.iter().filter_map(|x| x.as_f64()).collect(),
        x => x.as_f64().into_iter().collect(),
    }
}

/// One line for a transform of the done list, with units; `spacing_mm` (array-axis order) gives
/// the millimetre equivalents of voxel values.
pub fn done_line(d: &Done, spacing_mm: &[f64]) -> String {
    let v = &d.values;
    let mean_mm = if spacing_mm.is_empty() {
        1.0
    } else {
        spacing_mm.iter().map(|s| s.abs()).sum::<f64>() / spacing_mm.len() as f64
    };
    match d.transform.as_str() {
        "flip" => {
            let axes: Vec<String> = f64s(v, "axes").iter().map(|a| num(*a)).collect();
            format!("axes {}", axes.join(", "))
        }
        "rotate" => nums(&f64s(v, "angles_deg"), "°"),
        "scale" => format!("× {}", nums(&f64s(v, "scale"), "")),
        "translate" => {
            let vox = f64s(v, "voxels");
            let off = spacing_mm.len().saturating_sub(vox.len());
            let mm: Vec<f64> = vox
                .iter()
                .enumerate()
                .map(|(a, t)| t * spacing_mm.get(off + a).map_or(1.0, |s| s.abs()))
                .collect();
            format!("{} ({})", nums(&vox, "vox"), nums(&mm, "mm"))
        }
        "elastic" => {
            let alpha = f64s(v, "alpha").first().copied().unwrap_or(0.0);
            let sigma = f64s(v, "sigma").first().copied().unwrap_or(0.0);
            let seed = v.get("seed").and_then(|s| s.as_u64()).unwrap_or(0);
            format!(
                "alpha {}, sigma {} vox ({} mm), seed {seed}",
                num(alpha),
                num(sigma),
                num(sigma * mean_mm)
            )
        }
        t if t.starts_with("filter") => filter_line(v),
        _ => short(v),
    }
}

/// An intensity step's drawn values (their serde form) as a person reads them: `factors 0.962`,
/// `sigmas 1.2, 0.8 vox`, a channel the step leaves out as `–`, `seed 42`; a list of more than
/// four records (a bias field's terms) as its length.
pub fn short(v: &serde_json::Value) -> String {
    use serde_json::Value;
    match v {
        Value::Object(m) => m
            .iter()
            .map(|(k, x)| match x {
                Value::Array(a) if a.len() > 4 && a.iter().all(Value::is_object) => {
                    format!("{} {k}", a.len())
                }
                _ => format!("{k} {}", short(x)),
            })
            .collect::<Vec<_>>()
            .join(", "),
        Value::Array(a) => a
            .iter()
            .map(|x| match x {
                Value::Array(_) | Value::Object(_) => format!("({})", short(x)),
                _ => short(x),
            })
            .collect::<Vec<_>>()
            .join(", "),
        Value::Null => "–".into(),
        Value::Bool(b) => if *b { "on" } else { "off" }.into(),
        Value::Number(n) => match n.as_u64() {
            Some(i) => i.to_string(),
            None => n.as_f64().map_or_else(|| n.to_string(), num),
        },
        Value::String(s) => s.clone(),
    }
}

/// `sigma 1.5 vox, reflect, before the transform` from a filter's done-list values (see
/// `Params::done_list`).
fn filter_line(v: &serde_json::Value) -> String {
    let mut parts = vec![];
    // The filter serialises as `{"gaussian": {"sigma": [1.5]}}` (FEBDS: `{"febds": "dog"}`).
    if let Some(serde_json::Value::Object(f)) = v.get("filter") {
        for params in f.values() {
            match params {
                serde_json::Value::Object(p) => {
                    for (k, x) in p {
                        let vals = values(x);
                        let unit = if k.starts_with("sigma") || k == "size" {
                            "vox"
                        } else {
                            ""
                        };
                        parts.push(format!("{k} {}", nums(&vals, unit)));
                    }
                }
                other => parts.push(other.to_string().trim_matches('"').to_string()),
            }
        }
    }
    if let Some(m) = v.get("mode").and_then(|m| m.as_str()) {
        parts.push(m.to_string());
    }
    if let Some(s) = v.get("stage").and_then(|s| s.as_str()) {
        parts.push(s.to_string());
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::augment::DoneList;

    #[test]
    fn intensity_values_are_short() {
        let v = serde_json::json!({"factors": [-0.018_974_077_246_433_94]});
        assert_eq!(short(&v), "factors -0.019");
        let v = serde_json::json!({"channels": [{"gamma": 1.30000001, "invert": true}, null]});
        assert_eq!(short(&v), "channels (gamma 1.3, invert on), –");
        let v = serde_json::json!({"std": [0.2], "seed": 18446744073709551615u64});
        assert_eq!(short(&v), "seed 18446744073709551615, std 0.2");
        let terms: Vec<_> = (0..6).map(|i| serde_json::json!({"c": i})).collect();
        let v = serde_json::json!({"convention": "monai", "terms": terms});
        assert_eq!(short(&v), "convention monai, 6 terms");
        let v = serde_json::json!({"scales": [[0.5, 0.75], null]});
        assert_eq!(short(&v), "scales (0.5, 0.75), –");
    }

    #[test]
    fn numbers_are_short() {
        assert_eq!(num(12.000000000000002), "12");
        assert_eq!(num(0.1 + 0.2), "0.3");
        assert_eq!(num(734.2918374), "734.292");
        assert_eq!(num(-7.5), "-7.5");
        assert_eq!(num(-0.0000001), "-0.0000001");
        assert_eq!(num(0.000123456), "0.000123");
        assert_eq!(num(-1e-12), "0");
        assert_eq!(num(1.1), "1.1");
        assert_eq!(num(0.0), "0");
    }

    #[test]
    fn done_lines_carry_units() {
        let plan = crate::augment::Plan {
            rotate_rad: vec![12f64.to_radians(), 0.0, -8f64.to_radians()],
            translate: vec![0.0, 6.0, -4.0],
            scale: vec![1.1],
            elastic: Some(crate::augment::Elastic {
                alpha: 800.0,
                sigma: 12.0,
                seed: 7,
            }),
            flip: vec![0, 2],
            ..Default::default()
        };
        let sp = [2.0, 1.0, 0.5];
        let lines: Vec<(String, String)> = plan
            .done_list()
            .iter()
            .map(|d| (d.transform.clone(), done_line(d, &sp)))
            .collect();
        let get = |t: &str| {
            lines
                .iter()
                .find(|(n, _)| n == t)
                .map(|(_, l)| l.clone())
                .unwrap_or_default()
        };
        assert_eq!(get("rotate"), "12°, 0°, -8°");
        assert_eq!(get("translate"), "0, 6, -4 vox (0, 6, -2 mm)");
        assert_eq!(get("scale"), "× 1.1");
        assert_eq!(get("flip"), "axes 0, 2");
        assert_eq!(get("elastic"), "alpha 800, sigma 12 vox (14 mm), seed 7");
    }

    #[test]
    fn filter_lines_name_values_mode_and_stage() {
        use crate::app::state::{FilterKind, FilterParams, FilterStage, Params};
        let mut p = Params {
            filter: FilterParams {
                enabled: true,
                sigma_vox: 1.5,
                ..FilterParams::default()
            },
            ..Params::default()
        };
        let d = p.done_list(3, &[1.0; 3], 100.0);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].transform, "filter: gaussian");
        assert_eq!(
            done_line(&d[0], &[1.0; 3]),
            "sigma 1.5 vox, reflect, before the transform"
        );
        p.filter.kind = FilterKind::Contrast;
        p.filter.contrast = 2.0;
        p.filter.stage = FilterStage::After;
        let d = p.done_list(3, &[1.0; 3], 100.0);
        assert_eq!(
            done_line(&d[0], &[1.0; 3]),
            "brightness 0, contrast 2, after the transform"
        );
    }
}
