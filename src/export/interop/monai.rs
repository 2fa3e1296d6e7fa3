//! MONAI dictionary transforms: one model of the pipeline ([`pipeline`]), rendered as a Python
//! snippet here and as a MONAI bundle config in `monai_bundle.rs`.
//!
//! What the model relies on, from MONAI 1.6.1's source (checked by `tests/interop/check_monai.py`):
//! - `AffineGrid` maps output to input coordinates (`monai/transforms/spatial/array.py`,
//!   `affine @= create_rotate(..) ... create_translate(..) ... create_scale(..)`, so one RandAffined
//!   holding rotation, translation and scale samples `R (S c + t)`: translation and a per-axis
//!   scale act before the rotation, where augscope's map is `t + S Rᵀ c`). Each of augscope's parts
//!   is therefore its own RandAffined with its own probability, in the order translate, scale,
//!   rotate, and `Compose(lazy=True)` multiplies their matrices into one resample
//!   (`monai/transforms/lazy/functional.py: apply_pending`), which equals augscope's fused map.
//! - `create_rotate` (`monai/transforms/utils.py`, order "XYZ") is `Rx(rx) Ry(ry) Rz(rz)` on the
//!   x-first axes, which is augscope's `Rᵀ` with `(rx, ry, rz) = (a2, a1, a0)`: same signs.
//! - `apply_pending` takes the interpolation of the last pending operation (a flip carries none), so
//!   the Compose passes the modes per key in `overrides`.
//! - An integer mode resamples with `scipy.ndimage.map_coordinates` (`Resample`, `spatial_resample`),
//!   so orders and boundary modes are scipy's, as augscope's.
//! - `RandAffineGrid._get_rand_param` draws every axis's scale on its own; the isotropic scale ties
//!   them to the first draw after each `randomize`.
//! - `Rand3DElasticd` smooths `R.uniform(-1, 1)` with `GaussianFilter(3, sigma, truncated=3.0)`
//!   (an erf kernel, not the sampled gaussian of scipy truncated at 4 sigma) and multiplies by the
//!   magnitude; it is not lazy, so the pending affine is resampled before it.

use super::{
    Preset, Range, ScaleDistribution, Target, Unit, axis_value, f, header, intensity_left_out,
    notes_block, pair, rad, rot_range, voxel_target_note, x_first,
};
use std::fmt::Write as _;

/// A number in the pipeline: a literal, a millimetre value converted with the data's spacing, or
/// the product of two probabilities.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Num {
    Lit(f64),
    /// `value / SPACING_MM[axis]` (axis x first).
    PerMm(f64, usize),
    /// `a * b` (a transform's probability times an axis's probability).
    Prod(f64, f64),
}

/// A keyword argument of one transform.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Arg {
    /// One `(lo, hi)` range per spatial axis, x first.
    Ranges(Vec<[Num; 2]>),
    /// One `(lo, hi)` range.
    Range([f64; 2]),
    Int(usize),
}

/// The transforms the pipeline is built from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    RandAffined,
    /// RandAffined with one scale factor for every axis (defined in the snippet / the config).
    RandIsotropicScaled,
    Rand3DElasticd,
    RandFlipd,
}

impl Kind {
    pub(super) fn name(self) -> &'static str {
        match self {
            Kind::RandAffined => "RandAffined",
            Kind::RandIsotropicScaled => "RandIsotropicScaled",
            Kind::Rand3DElasticd => "Rand3DElasticd",
            Kind::RandFlipd => "RandFlipd",
        }
    }
    /// Whether the transform resamples (takes `mode` and `padding_mode`).
    pub(super) fn resamples(self) -> bool {
        self != Kind::RandFlipd
    }
}

/// One transform of the pipeline.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Entry {
    pub kind: Kind,
    pub prob: Num,
    pub args: Vec<(&'static str, Arg)>,
    /// A short comment (the augscope axis of a flip).
    pub comment: Option<String>,
}

/// The MONAI pipeline of a preset: transforms in Compose order, the notes, and the sampling.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Pipeline {
    pub entries: Vec<Entry>,
    pub notes: Vec<String>,
    pub order: u32,
    pub mode: String,
    pub ndim: usize,
}

impl Pipeline {
    pub(super) fn has(&self, kind: Kind) -> bool {
        self.entries.iter().any(|e| e.kind == kind)
    }
}

fn lit_ranges(r: &[Range]) -> Arg {
    Arg::Ranges(r.iter().map(|g| [Num::Lit(g[0]), Num::Lit(g[1])]).collect())
}

/// The pipeline of `p` for `ndim` spatial axes (one model, two renderings).
/// A sentence on its length: the preset's transform families map to the library's in the
/// library's own order, each beside the note that says where the library differs from augscope;
/// read top to bottom, the function is that mapping, and splitting it would scatter the table.
pub(super) fn pipeline(p: &Preset, ndim: usize) -> Pipeline {
    let mut notes: Vec<String> = intensity_left_out(p, "MONAI", |s| s.monai().is_some());
    notes.extend(voxel_target_note(p, "MONAI"));
    let mut entries = vec![];
    let affine = |prob: Num, key: &'static str, arg: Arg| Entry {
        kind: Kind::RandAffined,
        prob,
        args: vec![(key, arg)],
        comment: None,
    };
    // Compose order: translate, scale, rotate, elastic, flip. The first transform's matrix is the
    // outermost, so the lazy product is augscope's t + S Rᵀ (c + elastic) on flipped indices.
    if let Some(t) = &p.translate {
        let r: Vec<Range> = (0..ndim)
            .map(|a| axis_value(&t.range, a).unwrap_or([0.0, 0.0]))
            .collect();
        let arg = if t.unit == Unit::Mm {
            notes.push(
                "MONAI translates in voxels; the preset's millimetre ranges are divided by \
                 SPACING_MM (spacing_mm in a bundle config; set it to your data's voxel size, x \
                 first)"
                    .into(),
            );
            Arg::Ranges(
                x_first(&r)
                    .iter()
                    .enumerate()
                    .map(|(i, g)| [Num::PerMm(g[0], i), Num::PerMm(g[1], i)])
                    .collect(),
            )
        } else {
            lit_ranges(&x_first(&r))
        };
        entries.push(affine(Num::Lit(t.p), "translate_range", arg));
    }
    if let Some(sc) = &p.scale {
        let r: Vec<Range> = (0..ndim)
            .map(|a| {
                let g = axis_value(&sc.range, a).unwrap_or([1.0, 1.0]);
                [g[0] - 1.0, g[1] - 1.0]
            })
            .collect();
        if sc.per_axis {
            entries.push(affine(
                Num::Lit(sc.p),
                "scale_range",
                lit_ranges(&x_first(&r)),
            ));
        } else {
            entries.push(Entry {
                kind: Kind::RandIsotropicScaled,
                prob: Num::Lit(sc.p),
                args: vec![("scale_range", lit_ranges(&r))],
                comment: None,
            });
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
        let rr = if ndim == 3 { x_first(&ranges) } else { ranges };
        if p_axis.iter().all(|&q| q >= 1.0) {
            entries.push(affine(Num::Lit(r.p), "rotate_range", lit_ranges(&rr)));
        } else {
            // One transform per axis, in the order of augscope's Rᵀ = Rz(a2)ᵀ Ry(a1)ᵀ Rx(a0)ᵀ:
            // MONAI's x axis (augscope axis 2) first.
            if r.p < 1.0 {
                notes.push(format!(
                    "each axis rotates with probability rotate.p * p_axis on its own; in the \
                     preset the axes rotate only together, when the transform fires with p {}",
                    f(r.p)
                ));
            }
            for (i, g) in rr.iter().enumerate() {
                let axis = n - 1 - i;
                let pa = p_axis[axis];
                if pa <= 0.0 {
                    continue;
                }
                let one: Vec<[Num; 2]> = (0..rr.len())
                    .map(|j| {
                        if j == i {
                            [Num::Lit(g[0]), Num::Lit(g[1])]
                        } else {
                            [Num::Lit(0.0), Num::Lit(0.0)]
                        }
                    })
                    .collect();
                let prob = if r.p < 1.0 {
                    Num::Prod(r.p, pa)
                } else {
                    Num::Lit(pa)
                };
                entries.push(Entry {
                    kind: Kind::RandAffined,
                    prob,
                    args: vec![("rotate_range", Arg::Ranges(one))],
                    comment: (ndim == 3).then(|| format!("augscope axis {axis}")),
                });
            }
        }
    }
    if let Some(e) = &p.elastic {
        if ndim == 3 {
            notes.push(
                "Rand3DElasticd smooths uniform noise in [-1, 1) and multiplies by the magnitude, \
                 as augscope's alpha * G_sigma(noise), but with an erf kernel truncated at 3 sigma \
                 (augscope: a sampled gaussian truncated at 4 sigma): from the same noise its field \
                 differs from augscope's by about 2 % of the field's RMS at sigma 2 and under 1 % \
                 from sigma 4 (RMS 1.6 % smaller at sigma 2); the noise itself comes from MONAI's \
                 generator"
                    .into(),
            );
            notes.push(
                "Rand3DElasticd cannot join the lazy resample: when it fires together with \
                 translation, scale or rotation the image is interpolated twice (once for those, \
                 once for the deformation), which smooths it more than augscope's single resample \
                 (order 1 on a 4 mm MNI brain: 80 % of voxels within 1 % of the range of augscope's)"
                    .into(),
            );
            entries.push(Entry {
                kind: Kind::Rand3DElasticd,
                prob: Num::Lit(e.p),
                args: vec![
                    ("sigma_range", Arg::Range(e.sigma)),
                    ("magnitude_range", Arg::Range(e.alpha)),
                ],
                comment: None,
            });
        } else {
            notes.push(
                "MONAI has no 2D elastic deformation of smoothed noise (Rand2DElasticd displaces a \
                 control grid with normal noise), so the preset's elastic deformation is left out"
                    .into(),
            );
        }
    }
    if let Some(fl) = &p.flip {
        for a in 0..ndim {
            let pa = axis_value(&fl.p, a).unwrap_or(0.0);
            if pa > 0.0 {
                entries.push(Entry {
                    kind: Kind::RandFlipd,
                    prob: Num::Lit(pa),
                    args: vec![("spatial_axis", Arg::Int(ndim - 1 - a))],
                    comment: Some(format!("augscope axis {a}")),
                });
            }
        }
    }
    if p.sampling.cval != 0.0 {
        notes.push(format!(
            "MONAI pads with 0; the preset's cval {} is not expressible",
            f(p.sampling.cval)
        ));
    }
    Pipeline {
        entries,
        notes,
        order: p.sampling.order,
        mode: p.sampling.mode.clone(),
        ndim,
    }
}

fn py_num(n: Num) -> String {
    match n {
        Num::Lit(v) => f(v),
        Num::PerMm(v, i) => format!("{} / SPACING_MM[{i}]", f(v)),
        Num::Prod(a, b) => format!("{} * {}", f(a), f(b)),
    }
}

fn py_arg(a: &Arg) -> String {
    match a {
        Arg::Ranges(r) => {
            let inner: Vec<String> = r
                .iter()
                .map(|g| format!("({}, {})", py_num(g[0]), py_num(g[1])))
                .collect();
            format!("({},)", inner.join(", "))
        }
        Arg::Range(g) => pair(*g),
        Arg::Int(i) => i.to_string(),
    }
}

/// The isotropic scale as Python (the snippet defines it; the bundle has the same as one
/// expression).
const ISOTROPIC_PY: &str = r#"class RandIsotropicScaled(RandAffined):
    """RandAffined with one scale factor for every axis: MONAI draws each axis's factor on its own,
    so every draw is replaced by the first axis's (uniform on scale_range[0])."""

    def __init__(self, keys, prob, scale_range, **kwargs):
        super().__init__(keys, prob=prob, scale_range=scale_range, **kwargs)
        grid = self.rand_affine.rand_affine_grid
        draw = grid.randomize

        def randomize(data=None):
            draw(data)
            grid.scale_params = [grid.scale_params[0]] * len(grid.scale_params)

        grid.randomize = randomize


"#;

pub(super) fn monai(p: &Preset, ndim: usize) -> String {
    let pl = pipeline(p, ndim);
    let mut body = vec![];
    for e in &pl.entries {
        let mut args = vec!["keys=KEYS".to_string(), format!("prob={}", py_num(e.prob))];
        for (k, a) in &e.args {
            args.push(format!("{k}={}", py_arg(a)));
        }
        if e.kind.resamples() {
            args.push("mode=MODES".into());
            args.push("padding_mode=PADDING".into());
        }
        let mut line = format!("        {}({}),", e.kind.name(), args.join(", "));
        if let Some(c) = &e.comment {
            let _ = write!(line, "  # {c}");
        }
        body.push(line);
    }
    // The normalisation first, then the MONAI intensity families, on the image key, after the
    // resample.
    let norm = p.normalize.as_ref().and_then(|n| n.monai());
    if let Some(c) = &norm {
        body.insert(0, format!("        {},", c.python("", "keys=KEYS[0]")));
    }
    let steps: Vec<_> = p.intensity.iter().filter_map(|s| s.monai()).collect();
    for c in &steps {
        body.push(format!("        {},", c.python("", "keys=KEYS[0]")));
    }
    let steps: Vec<_> = norm.into_iter().chain(steps).collect();
    let mut imports = vec!["Compose"];
    for c in &steps {
        if !imports.contains(&c.class) {
            imports.push(c.class);
        }
    }
    for k in [Kind::RandAffined, Kind::RandFlipd, Kind::Rand3DElasticd] {
        if pl.has(k) || (k == Kind::RandAffined && pl.has(Kind::RandIsotropicScaled)) {
            imports.push(k.name());
        }
    }
    imports.sort_unstable();
    let mut out = header(p, Target::Monai, "MONAI (dictionary transforms)", ndim);
    out.push_str(
        "# MONAI indexes spatial axes x first: augscope axis a is MONAI spatial axis ndim-1-a, and\n\
         # the angles keep their signs. Angles in radians; scale_range holds s - 1 (s > 1 samples a\n\
         # larger region, as augscope); an integer mode is the spline order, resampled by scipy's\n\
         # map_coordinates with scipy's boundary names. Compose(lazy=True) multiplies the affine\n\
         # transforms (and flips) into one resample, as augscope does.\n",
    );
    out.push_str(&notes_block(&pl.notes));
    let _ = write!(
        out,
        r#"from monai.transforms import {imports}

KEYS = ("image", "label")
# Spline order {order} for the image, nearest for the label (augscope resamples labels with order 0).
MODES = ({order}, 0)
PADDING = ("{mode}", "constant")
SPACING_MM = {spacing}


{iso}def get_transforms():
    return Compose([
{body}
    ], lazy=True, overrides={{
        KEYS[0]: {{"mode": MODES[0], "padding_mode": PADDING[0]}},
        KEYS[1]: {{"mode": MODES[1], "padding_mode": PADDING[1]}},
    }})
"#,
        imports = imports.join(", "),
        order = pl.order,
        mode = pl.mode,
        spacing = if ndim == 3 {
            "(1.0, 1.0, 1.0)"
        } else {
            "(1.0, 1.0)"
        },
        iso = if pl.has(Kind::RandIsotropicScaled) {
            ISOTROPIC_PY
        } else {
            ""
        },
        body = body.join("\n"),
    );
    out
}
