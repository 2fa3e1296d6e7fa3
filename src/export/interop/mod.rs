//! Presets as runnable Python for training pipelines: MONAI, TorchIO, batchgenerators and an
//! nnU-Net v2 trainer subclass (docs/design.md §5).
//!
//! augscope vectors are `[z, y, x]` (array axes). batchgenerators and nnU-Net index the same
//! array axes; MONAI and TorchIO index spatial axes x first, so axis `a` becomes `ndim - 1 - a`.
//! Conversions: degrees → radians (MONAI, batchgenerators, nnU-Net; TorchIO takes degrees);
//! augscope's scale `s` samples a larger region when `s > 1` (content smaller), as
//! batchgenerators' `scale` and nnU-Net's `scaling`; MONAI's `scale_range` holds `s - 1`, TorchIO's
//! `scales` the zoom `1 / s`. Whatever a target cannot express is said in a `# NOTE:` comment in
//! the snippet, next to the closest documented equivalent that is used instead.
//!
//! Space (`space = "mm"`, see [`crate::augment::Space`]): TorchIO works in millimetres natively
//! (rotation, scale and translation about the centre in world space), so an mm preset maps onto
//! it directly, and its elastic displacement is computed in mm from `SPACING_MM`.
//! batchgenerators, nnU-Net and MONAI transform array indices (voxel space) and take one sigma
//! for all axes; an mm preset's values are passed as voxels there, with a note (exact for 1 mm
//! isotropic data: resample to it first).

use std::fmt::Write as _;

use serde_json::Value;

mod batchgenerators;
mod monai;
mod monai_bundle;
mod nnunet;
mod torchio;

use batchgenerators::batchgenerators;
pub use batchgenerators::batchgenerators_params;
use monai::monai;
pub use monai_bundle::import_bundle;
use monai_bundle::monai_bundle;
use nnunet::nnunet;
use torchio::torchio;

use crate::augment::Space;
use crate::augment::preset::{Preset, PresetError, Range, ScaleDistribution, Unit};
use crate::core::intensity::IntensitySpec;

/// A training pipeline that a preset can be exported to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    Monai,
    TorchIo,
    Batchgenerators,
    /// The batchgenerators parameter dict alone, as JSON (what `preset import` reads).
    BatchgeneratorsJson,
    Nnunet,
    /// The MONAI pipeline as the transforms of a MONAI bundle config (JSON).
    MonaiBundle,
    /// augscope's own Python package (`python/`): exact by construction.
    Python,
}

impl std::str::FromStr for Target {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "monai" => Ok(Target::Monai),
            "torchio" => Ok(Target::TorchIo),
            "batchgenerators" | "bg" => Ok(Target::Batchgenerators),
            "batchgenerators-json" | "json" => Ok(Target::BatchgeneratorsJson),
            "nnunet" | "nnu-net" | "nnunetv2" => Ok(Target::Nnunet),
            "monai-bundle" | "bundle" => Ok(Target::MonaiBundle),
            "python" | "augscope" => Ok(Target::Python),
            _ => Err(format!(
                "unknown export target '{s}' (expected monai, torchio, batchgenerators, \
                 batchgenerators-json, nnunet, monai-bundle or python)"
            )),
        }
    }
}

/// Translates a preset for a `ndim`-dimensional pipeline (2 or 3) into Python source (or JSON
/// for [`Target::BatchgeneratorsJson`]).
pub fn export(preset: &Preset, target: Target, ndim: usize) -> Result<String, PresetError> {
    preset.validate()?;
    preset.check_ndim(ndim)?;
    Ok(match target {
        Target::Batchgenerators => batchgenerators(preset, ndim),
        Target::BatchgeneratorsJson => {
            let (params, _) = batchgenerators_params(preset, ndim);
            let mut s = serde_json::to_string_pretty(&Value::Object(params)).unwrap_or_default();
            s.push('\n');
            s
        }
        Target::Monai => monai(preset, ndim),
        Target::TorchIo => torchio(preset, ndim),
        Target::Nnunet => nnunet(preset, ndim),
        Target::MonaiBundle => monai_bundle(preset, ndim),
        Target::Python => python(preset, ndim),
    })
}

/// The preset for augscope's own Python package: the preset as data (a JSON string decoded at
/// import, so no text of it is code) and an `augscope.Augment` over it. Nothing is translated,
/// so nothing differs from `augscope batch` and the explorer.
fn python(p: &Preset, ndim: usize) -> String {
    let json = serde_json::to_string(p).unwrap_or_default();
    // A JSON string literal is a valid Python string literal: quotes, backslashes and control
    // characters escaped, so the text stays inside it.
    let literal = serde_json::to_string(&json).unwrap_or_default();
    let mut out = header(p, Target::Python, "augscope's Python package", ndim);
    out.push_str(
        "# augscope's own transform in the training loop: the same engine, plans and seeds as\n\
         # `augscope batch` and the explorer, so the samples are the ones you tuned, bit for bit.\n\
         # Install: pip install ./python (from an augscope checkout).\n\n\
         import json\n\nimport augscope\n\n",
    );
    let _ = write!(
        out,
        "PRESET = json.loads({literal})\nNDIM = {ndim}\n\n\n\
         def get_transform(seed=0, **kwargs):\n\
         \x20   \"\"\"augscope.Augment over the preset: call it as t(image, label=seg, index=j, \
         epoch=e); keyword\n\
         \x20   arguments (backend, patch_size, patch_center, spacing, model) go to Augment.\"\"\"\n\
         \x20   return augscope.Augment(PRESET, seed=seed, ndim=NDIM, **kwargs)\n"
    );
    out
}

/// A Python float literal (Rust's shortest round-trip form is Python's `repr`).
fn f(v: f64) -> String {
    if v.is_finite() {
        format!("{v:?}")
    } else {
        "float('nan')".into()
    }
}

fn pair(r: Range) -> String {
    format!("({}, {})", f(r[0]), f(r[1]))
}

fn rad(r: Range) -> Range {
    [r[0].to_radians(), r[1].to_radians()]
}

fn axis_value<T: Copy>(v: &[T], axis: usize) -> Option<T> {
    if v.len() == 1 {
        v.first().copied()
    } else {
        v.get(axis).copied()
    }
}

/// The range of the rotation about array axis `axis` (2D: the single angle), degrees.
fn rot_range(p: &Preset, ndim: usize, axis: usize) -> Range {
    let Some(r) = &p.rotate else {
        return [0.0, 0.0];
    };
    if ndim == 2
        && let Some(g) = r.range_deg_2d
    {
        return g;
    }
    axis_value(&r.range_deg, axis).unwrap_or([0.0, 0.0])
}

fn all_equal(v: &[f64]) -> bool {
    v.windows(2).all(|w| w[0] == w[1])
}

/// The library versions that CI runs each target's snippet under (`tests/interop/`, whose checks
/// fail if the installed versions differ from these).
pub fn verified_against(target: Target) -> &'static str {
    match target {
        Target::Monai | Target::MonaiBundle => "monai 1.6.1, torch 2.11.0",
        Target::TorchIo => "torchio 1.2.1, torch 2.11.0, SimpleITK 2.5.7",
        Target::Batchgenerators | Target::BatchgeneratorsJson => "batchgenerators 0.25.5",
        Target::Nnunet => "nnunetv2 2.8.1, batchgeneratorsv2 0.3.6, torch 2.11.0",
        Target::Python => "augscope's Python package, the CLI's engine",
    }
}

/// Preset text made safe for one line of a Python comment: control characters (a newline would
/// end the comment and start live code), the line and paragraph separators and backslashes are
/// escaped as `\n`, `\u2028`, `\\`, so nothing of the preset can leave the comment.
pub fn comment_text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}' | '\u{85}' | '\u{feff}') => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

fn header(p: &Preset, target: Target, what: &str, ndim: usize) -> String {
    let mut s = String::new();
    let name = if p.name.is_empty() {
        "unnamed"
    } else {
        &p.name
    };
    let _ = writeln!(
        s,
        "# Generated by augscope {} from the preset \"{}\" for {what} ({ndim}D).",
        env!("CARGO_PKG_VERSION"),
        comment_text(name)
    );
    if target == Target::Python {
        let _ = writeln!(
            s,
            "# Verified against: {} (its pytest suite runs every plan against the CLI).",
            verified_against(target)
        );
    } else {
        let _ = writeln!(
            s,
            "# Verified against: {} (the fixed-value cases of augscope's interop checks).",
            verified_against(target)
        );
    }
    if !p.source.is_empty() {
        let _ = writeln!(s, "# Preset source: {}", comment_text(&p.source));
    }
    s
}

fn notes_block(notes: &[String]) -> String {
    notes.iter().map(|n| format!("# NOTE: {n}\n")).collect()
}

/// The notes of a target on the preset's intensity steps it has no transform for (`has` says
/// which it has): one per step left out, said by the step's family; first the normalisation's,
/// where the target (`library`: "MONAI", "TorchIO" or "batchgeneratorsv2") does not write it.
fn intensity_left_out(
    p: &Preset,
    library: &str,
    has: impl Fn(&IntensitySpec) -> bool,
) -> Vec<String> {
    let normalize = p.normalize.as_ref().filter(|n| match library {
        "MONAI" => n.monai().is_none(),
        "TorchIO" => n.torchio().is_none(),
        _ => true,
    });
    // A mirror after steps the target writes: MONAI's and TorchIO's pipelines here mirror with
    // their spatial transforms, before them.
    let flips = p
        .flip
        .as_ref()
        .is_some_and(|f| f.after_intensity && f.p.iter().any(|&q| q > 0.0));
    let mirror_note = (flips
        && matches!(library, "MONAI" | "TorchIO")
        && p.intensity.iter().any(&has))
    .then(|| {
        format!(
            "the preset mirrors after the intensity steps (nnU-Net's order); this {library} \
                 pipeline mirrors with its spatial transforms, before them: the same where no \
                 step depends on the position (noise, low resolution and bias fields do)"
        )
    });
    normalize
        .map(|n| n.note(library))
        .into_iter()
        .chain(mirror_note)
        .chain(
            p.intensity
                .iter()
                .filter(|s| !has(s))
                .map(|s| s.left_out_note(library)),
        )
        .collect()
}

/// The note of a target that transforms array indices, for a preset in mm space (none for a
/// voxel preset, or one with nothing that depends on the space).
fn voxel_target_note(p: &Preset, target: &str) -> Option<String> {
    let spatial = p.rotate.is_some() || p.elastic.is_some();
    (p.space == Space::Mm && spatial).then(|| {
        format!(
            "{target} rotates and deforms array indices (voxel space); the preset's space = \"mm\" \
             (rotation in physical space, elastic sigma and alpha in mm) is not expressible, so \
             its angles, sigma and alpha are used as voxels: the same only on 1 mm isotropic \
             data (resample to it first), otherwise a rotation shears anisotropic voxels"
        )
    })
}

/// The root-mean-square displacement in voxels of `alpha * G_sigma(U(-1, 1))` far from the
/// border: `alpha / sqrt(3) * (2 sqrt(pi) sigma)^(-ndim / 2)` (the variance of uniform noise times
/// the sum of the squared normalised gaussian weights).
pub fn elastic_rms_vox(alpha: f64, sigma: f64, ndim: usize) -> f64 {
    alpha / 3f64.sqrt() * (2.0 * std::f64::consts::PI.sqrt() * sigma).powf(-(ndim as f64) / 2.0)
}

/// Spatial axes of MONAI/TorchIO (x first) for the augscope axes `[z, y, x]`.
fn x_first<T: Clone>(v: &[T]) -> Vec<T> {
    v.iter().rev().cloned().collect()
}

fn tuple_of_pairs(v: &[Range]) -> String {
    let inner: Vec<String> = v.iter().map(|r| pair(*r)).collect();
    format!("({},)", inner.join(", "))
}
