//! MONAI dictionary transforms.

use std::fmt::Write as _;

use super::*;

pub(super) fn monai(p: &Preset, ndim: usize) -> String {
    let mut notes: Vec<String> = voxel_target_note(p, "MONAI").into_iter().collect();
    let s = &p.sampling;
    let mut body = vec![];
    // Image order of augscope's map x = t + S R^T elastic(flip(p)): translate, scale, rotate,
    // elastic, flip.
    if let Some(t) = &p.translate {
        let r: Vec<Range> = (0..ndim)
            .map(|a| axis_value(&t.range, a).unwrap_or([0.0, 0.0]))
            .collect();
        if t.unit == Unit::Mm {
            notes.push(
                "MONAI translates in voxels; the preset's millimetre ranges are divided by \
                 SPACING_MM (set it to your data's voxel size, x first)"
                    .into(),
            );
        }
        let ranges = if t.unit == Unit::Mm {
            let v: Vec<String> = x_first(&r)
                .iter()
                .enumerate()
                .map(|(i, g)| {
                    format!(
                        "({} / SPACING_MM[{i}], {} / SPACING_MM[{i}])",
                        f(g[0]),
                        f(g[1])
                    )
                })
                .collect();
            format!("({},)", v.join(", "))
        } else {
            tuple_of_pairs(&x_first(&r))
        };
        body.push(format!(
            "        RandAffined(keys=KEYS, prob={}, translate_range={ranges}, mode=MODES, padding_mode=PADDING),",
            f(t.p)
        ));
    }
    if let Some(sc) = &p.scale {
        if sc.per_axis {
            let r: Vec<Range> = (0..ndim)
                .map(|a| {
                    let g = axis_value(&sc.range, a).unwrap_or([1.0, 1.0]);
                    [g[0] - 1.0, g[1] - 1.0]
                })
                .collect();
            body.push(format!(
                "        RandAffined(keys=KEYS, prob={}, scale_range={}, mode=MODES, padding_mode=PADDING),",
                f(sc.p),
                tuple_of_pairs(&x_first(&r))
            ));
        } else {
            let g = axis_value(&sc.range, 0).unwrap_or([1.0, 1.0]);
            notes.push(
                "RandAffined draws every axis's scale independently; the preset's isotropic scale \
                 becomes RandZoomd (zoom = 1 / scale), which draws the zoom, not the scale, \
                 uniformly and interpolates linearly"
                    .into(),
            );
            body.push(format!(
                "        RandZoomd(keys=KEYS, prob={}, min_zoom={}, max_zoom={}, mode=(\"{}\", \"nearest\"), padding_mode=\"constant\", keep_size=True),",
                f(sc.p),
                f(1.0 / g[1]),
                f(1.0 / g[0]),
                if ndim == 3 { "trilinear" } else { "bilinear" }
            ));
        }
        if sc.distribution == ScaleDistribution::Split {
            notes.push(
                "MONAI draws scales uniformly; the preset draws below and above 1 with equal \
                 chance (batchgenerators style)"
                    .into(),
            );
        }
    }
    if let Some(r) = &p.rotate {
        let n = if ndim == 3 { 3 } else { 1 };
        let ranges: Vec<Range> = (0..n).map(|a| rad(rot_range(p, ndim, a))).collect();
        let p_axis: Vec<f64> = (0..n)
            .map(|a| axis_value(&r.p_axis, a).unwrap_or(1.0))
            .collect();
        if p_axis.iter().any(|&q| q < 1.0) {
            notes.push(format!(
                "MONAI rotates every axis when the transform fires; the preset's per-axis \
                 probabilities {p_axis:?} are not expressible"
            ));
        }
        if ranges.iter().any(|g| g[0] != -g[1]) {
            notes.push(
                "MONAI's and augscope's rotation matrices may turn in opposite directions; a \
                 symmetric range is unaffected, this asymmetric one was not checked"
                    .into(),
            );
        }
        let rr = if ndim == 3 { x_first(&ranges) } else { ranges };
        body.push(format!(
            "        RandAffined(keys=KEYS, prob={}, rotate_range={}, mode=MODES, padding_mode=PADDING),",
            f(r.p),
            tuple_of_pairs(&rr)
        ));
    }
    if let Some(e) = &p.elastic {
        notes.push(
            "Rand{2,3}DElasticd smooths uniform noise with a gaussian and multiplies by the \
             magnitude, as augscope's alpha * G_sigma(U(-1, 1)); the noise itself differs"
                .into(),
        );
        body.push(format!(
            "        Rand{ndim}DElasticd(keys=KEYS, prob={}, sigma_range={}, magnitude_range={}, mode=MODES, padding_mode=PADDING),",
            f(e.p),
            pair(e.sigma),
            pair(e.alpha)
        ));
    }
    if let Some(fl) = &p.flip {
        for a in 0..ndim {
            let pa = axis_value(&fl.p, a).unwrap_or(0.0);
            if pa > 0.0 {
                body.push(format!(
                    "        RandFlipd(keys=KEYS, prob={}, spatial_axis={}),  # augscope axis {a}",
                    f(pa),
                    ndim - 1 - a
                ));
            }
        }
    }
    if [
        &p.translate.is_some(),
        &p.scale.is_some(),
        &p.rotate.is_some(),
    ]
    .iter()
    .filter(|b| ***b)
    .count()
        > 1
    {
        notes.push(
            "augscope fuses translation, scale and rotation into one resampling with their own \
             probabilities; here each is a separate transform and resamples once"
                .into(),
        );
    }
    let mut imports = vec!["Compose"];
    for name in ["RandAffined", "RandZoomd", "RandFlipd"] {
        if body.iter().any(|l| l.contains(&format!("{name}("))) {
            imports.push(name);
        }
    }
    let elastic_name = format!("Rand{ndim}DElasticd");
    if body.iter().any(|l| l.contains(&elastic_name)) {
        imports.push(if ndim == 3 {
            "Rand3DElasticd"
        } else {
            "Rand2DElasticd"
        });
    }
    imports.sort_unstable();
    let mut out = header(p, Target::Monai, "MONAI (dictionary transforms)", ndim);
    out.push_str(
        "# MONAI indexes spatial axes x first: augscope axis a is MONAI spatial axis ndim-1-a.\n\
         # Angles in radians; scale_range holds s - 1 (s > 1 samples a larger region, as augscope);\n\
         # an integer mode is the spline order, with scipy's boundary names (the numpy backend).\n",
    );
    out.push_str(&notes_block(&notes));
    let _ = write!(
        out,
        r#"from monai.transforms import {imports}

KEYS = ("image", "label")
# Spline order {order} for the image, nearest for the label (augscope resamples labels with order 0).
MODES = ({order}, 0)
PADDING = ("{mode}", "constant")
SPACING_MM = {spacing}


def get_transforms():
    return Compose([
{body}
    ])
"#,
        imports = imports.join(", "),
        order = s.order,
        mode = s.mode,
        spacing = if ndim == 3 {
            "(1.0, 1.0, 1.0)"
        } else {
            "(1.0, 1.0)"
        },
        body = body.join("\n"),
    );
    if s.cval != 0.0 {
        out.push_str(&format!(
            "# NOTE: MONAI pads with 0; the preset's cval {} is not expressible.\n",
            f(s.cval)
        ));
    }
    out
}
