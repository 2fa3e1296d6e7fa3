//! TorchIO transforms.

use std::fmt::Write as _;

use super::*;

pub(super) fn torchio(p: &Preset, ndim: usize) -> String {
    let mut notes = vec![];
    let s = &p.sampling;
    let interp = match s.order {
        0 => "nearest",
        1 => "linear",
        _ => "bspline",
    };
    if ndim == 2 {
        notes.push("TorchIO works on 3D images; a 2D image is a volume with one slice".into());
    }
    if s.mode != "constant" {
        notes.push(format!(
            "TorchIO pads with a constant (default_pad_value); the preset's mode {:?} is not \
             expressible",
            s.mode
        ));
    }
    let mm = p.space == Space::Mm;
    if !mm {
        notes.push(
            "TorchIO rotates and scales in world (mm) space about the image centre; for \
             anisotropic voxels this differs from augscope's voxel space"
                .into(),
        );
    }
    let common = format!(
        "image_interpolation=\"{interp}\", label_interpolation=\"nearest\", default_pad_value={}",
        f(s.cval)
    );
    let mut body = vec![];
    if let Some(t) = &p.translate {
        let r: Vec<Range> = (0..3)
            .map(|a| {
                if a < ndim {
                    axis_value(&t.range, a).unwrap_or([0.0, 0.0])
                } else {
                    [0.0, 0.0]
                }
            })
            .collect();
        let xr = x_first(&r[..ndim]);
        let mut parts = vec![];
        for (i, g) in xr.iter().enumerate() {
            // TorchIO translates in mm; voxel ranges scale by the spacing.
            if t.unit == Unit::Voxel {
                parts.push(format!(
                    "{} * SPACING_MM[{i}], {} * SPACING_MM[{i}]",
                    f(g[0]),
                    f(g[1])
                ));
            } else {
                parts.push(format!("{}, {}", f(g[0]), f(g[1])));
            }
        }
        if ndim == 2 {
            parts.push("0.0, 0.0".into());
        }
        notes.push(
            "TorchIO's translation direction was not checked against augscope's (content moves \
             by -t); symmetric ranges are unaffected"
                .into(),
        );
        body.push(format!(
            "        tio.RandomAffine(scales=0, degrees=0, translation=({}), {common}, p={}),",
            parts.join(", "),
            f(t.p)
        ));
    }
    if let Some(sc) = &p.scale {
        let mut parts = vec![];
        let n = if sc.per_axis { ndim } else { 1 };
        let zr: Vec<Range> = (0..n)
            .map(|a| {
                let g = axis_value(&sc.range, a).unwrap_or([1.0, 1.0]);
                [1.0 / g[1], 1.0 / g[0]]
            })
            .collect();
        for g in x_first(&zr) {
            parts.push(format!("{}, {}", f(g[0]), f(g[1])));
        }
        if ndim == 2 && sc.per_axis {
            parts.push("1.0, 1.0".into());
        }
        notes.push(
            "TorchIO's scales are zooms (1 / augscope's scale), drawn uniformly in the zoom".into(),
        );
        body.push(format!(
            "        tio.RandomAffine(scales=({}), degrees=0, isotropic={}, {common}, p={}),",
            parts.join(", "),
            if sc.per_axis { "False" } else { "True" },
            f(sc.p)
        ));
    }
    if let Some(r) = &p.rotate {
        let n = if ndim == 3 { 3 } else { 1 };
        let ranges: Vec<Range> = (0..n).map(|a| rot_range(p, ndim, a)).collect();
        let parts: Vec<String> = if ndim == 3 {
            x_first(&ranges)
                .iter()
                .map(|g| format!("{}, {}", f(g[0]), f(g[1])))
                .collect()
        } else {
            // The in-plane angle of a 2D image turns about TorchIO's third axis.
            vec![
                "0.0, 0.0".into(),
                "0.0, 0.0".into(),
                format!("{}, {}", f(ranges[0][0]), f(ranges[0][1])),
            ]
        };
        if r.p_axis.iter().any(|&q| q < 1.0) {
            notes.push(
                "TorchIO rotates every axis when the transform fires; per-axis probabilities are \
                 not expressible"
                    .into(),
            );
        }
        body.push(format!(
            "        tio.RandomAffine(scales=0, degrees=({}), {common}, p={}),",
            parts.join(", "),
            f(r.p)
        ));
    }
    if let Some(e) = &p.elastic
        && mm
    {
        // alpha G mm with G smoothed by sigma / spacing voxels per axis: the RMS of
        // elastic_rms_vox with one sigma per axis, evaluated in Python from SPACING_MM.
        notes.push(format!(
            "TorchIO has no alpha/sigma elastic deformation: RandomElasticDeformation moves a \
             B-spline control grid by up to max_displacement (mm). The closest equivalent used \
             here: control points about 2 sigma apart (sigma {} mm, so num_control_points \
             depends on the image size; 7 is TorchIO's default) and max_displacement = 3x the \
             RMS displacement in mm of the strongest preset setting, from SPACING_MM",
            pair(e.sigma)
        ));
        body.push(format!(
            "        tio.RandomElasticDeformation(num_control_points=7, max_displacement=(3 * {} / math.sqrt(3) * math.prod((2 * math.sqrt(math.pi) * {} / s) ** -0.5 for s in SPACING_MM[:{ndim}]),) * 3, locked_borders=2, image_interpolation=\"{interp}\", label_interpolation=\"nearest\", p={}),",
            f(e.alpha[1]),
            f(e.sigma[0]),
            f(e.p)
        ));
    } else if let Some(e) = &p.elastic {
        let rms = elastic_rms_vox(e.alpha[1], e.sigma[0], ndim);
        notes.push(format!(
            "TorchIO has no alpha/sigma elastic deformation: RandomElasticDeformation moves a \
             B-spline control grid by up to max_displacement (mm). The closest equivalent used \
             here: control points about 2 sigma apart (sigma {} voxels, so num_control_points \
             depends on the image size; 7 is TorchIO's default) and max_displacement = 3x the RMS \
             displacement of the strongest preset setting ({rms:.3} voxels RMS), times the spacing",
            pair(e.sigma)
        ));
        body.push(format!(
            "        tio.RandomElasticDeformation(num_control_points=7, max_displacement=tuple(3 * {} * s for s in SPACING_MM), locked_borders=2, image_interpolation=\"{interp}\", label_interpolation=\"nearest\", p={}),",
            f(rms),
            f(e.p)
        ));
    }
    if let Some(fl) = &p.flip {
        for a in 0..ndim {
            let pa = axis_value(&fl.p, a).unwrap_or(0.0);
            if pa > 0.0 {
                body.push(format!(
                    "        tio.RandomFlip(axes=({},), flip_probability={}),  # augscope axis {a}",
                    ndim - 1 - a,
                    f(pa)
                ));
            }
        }
    }
    let mut out = header(p, Target::TorchIo, "TorchIO", ndim);
    out.push_str(
        "# TorchIO indexes spatial axes x first (W, H, D): augscope axis a is TorchIO axis\n\
         # ndim-1-a. Angles in degrees; translations and displacements in mm (SPACING_MM, x first).\n",
    );
    if mm {
        out.push_str(
            "# The preset's space = \"mm\" is TorchIO's own: rotation and scale about the centre in\n\
             # world space, translation in mm, so anisotropic voxels rotate without shearing.\n",
        );
    }
    out.push_str(&notes_block(&notes));
    if mm && p.elastic.is_some() {
        out.push_str("import math\n\n");
    }
    let _ = write!(
        out,
        r#"import torchio as tio

SPACING_MM = (1.0, 1.0, 1.0)  # your data's voxel size, x first


def get_transforms():
    return tio.Compose([
{body}
    ])
"#,
        body = body.join("\n"),
    );
    out
}
