//! Intensity families: what a plan does to the image's values after the resample (docs/design.md
//! §9). One file per family holds all of it: its preset section with validation and sampling,
//! its plan step with the drawn values, and its formula on the CPU. The families here are
//! batchgeneratorsv2 0.3.6's, which nnU-Net v2 trains with, each exact to the library:
//!
//! | step | file | batchgeneratorsv2 |
//! |---|---|---|
//! | `gaussian_noise` | `noise.rs` | `GaussianNoiseTransform` |
//! | `gaussian_blur` | `blur.rs` | `GaussianBlurTransform` |
//! | `brightness` | `brightness.rs` | `MultiplicativeBrightnessTransform` |
//! | `contrast` | `contrast.rs` | `ContrastTransform` |
//! | `low_resolution` | `lowres.rs` | `SimulateLowResolutionTransform` |
//! | `gamma` | `gamma.rs` | `GammaTransform` |
//!
//! Steps act on the image only, in the order the plan lists them; a label map never receives one
//! (the engines apply them to the image output alone). Each step holds its drawn values per
//! channel: a list with one entry (for every channel) or one per channel, where `null` leaves a
//! channel out, as a library's `p_per_channel` does. Statistics (mean, minimum, maximum, standard
//! deviation) are of the whole channel of the resampled image, summed in f64; the values are f32.

use serde::{Deserialize, Serialize};

use super::draws::SplitMix64;

mod blur;
mod brightness;
mod contrast;
mod gamma;
mod lowres;
mod noise;
mod stats;

pub use blur::{Blur, BlurSpec, blur_kernel};
pub use brightness::{Brightness, BrightnessSpec};
pub use contrast::{Contrast, ContrastSpec};
pub use gamma::{Gamma, GammaSpec, GammaValue};
pub use lowres::{LowResolution, LowResolutionSpec, low_resolution_shape};
pub use noise::{Noise, NoiseSpec};

/// Values per channel: one entry for every channel, or one per channel; `None` leaves a channel
/// out.
pub type PerChannel<T> = Vec<Option<T>>;

/// One step of a plan's intensity part, with its drawn values.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum IntensityStep {
    GaussianNoise(Noise),
    GaussianBlur(Blur),
    Brightness(Brightness),
    Contrast(Contrast),
    LowResolution(LowResolution),
    Gamma(Gamma),
}

/// A family's preset section: when its step fires and how its values are drawn. In a preset
/// file, an entry of the `[[intensity]]` list, named by `step`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "snake_case")]
pub enum IntensitySpec {
    GaussianNoise(NoiseSpec),
    GaussianBlur(BlurSpec),
    Brightness(BrightnessSpec),
    Contrast(ContrastSpec),
    LowResolution(LowResolutionSpec),
    Gamma(GammaSpec),
}

/// What a plan step is to the engines: its values and its formula.
pub trait StepValues {
    /// How many value entries the step holds (1: one for every channel).
    fn count(&self) -> usize;
    /// Whether the values can act on an image of `ndim` spatial axes (any when `None`); the
    /// count is checked by the caller.
    fn check(&self, ndim: Option<usize>) -> Result<(), String>;
    /// Applies entry `entry` to `x`, channel `channel` of the image, of spatial `shape`.
    fn apply_channel(&self, entry: usize, channel: usize, x: &mut [f32], shape: &[usize]);
    /// Whether the step needs more of the channel than the voxel it writes (statistics,
    /// neighbours, the voxel's index in the whole grid), so that a plane alone cannot be
    /// computed.
    fn needs_whole_channel(&self) -> bool;
}

/// What a preset section is to sampling.
pub trait StepSpec {
    /// Whether the section's values are usable.
    fn validate(&self) -> Result<(), String>;
    /// Draws the step for an image of `channels` channels and `ndim` spatial axes from `rng`
    /// (the step's own stream): the step when it fires, and every decision drawn.
    fn sample(
        &self,
        rng: &mut SplitMix64,
        channels: usize,
        ndim: usize,
    ) -> (Option<IntensityStep>, serde_json::Value);
    /// The batchgeneratorsv2 0.3.6 transform that draws the same step (inside its
    /// `RandomTransform`, which the caller adds), as Python source. In nnU-Net's trainer
    /// `ignore_axes` names the axes its dummy-2D mode leaves alone (`None` otherwise).
    fn batchgeneratorsv2(&self) -> String;
}

macro_rules! each_step {
    ($s:expr, $v:ident => $e:expr) => {
        match $s {
            IntensityStep::GaussianNoise($v) => $e,
            IntensityStep::GaussianBlur($v) => $e,
            IntensityStep::Brightness($v) => $e,
            IntensityStep::Contrast($v) => $e,
            IntensityStep::LowResolution($v) => $e,
            IntensityStep::Gamma($v) => $e,
        }
    };
}

macro_rules! each_spec {
    ($s:expr, $v:ident => $e:expr) => {
        match $s {
            IntensitySpec::GaussianNoise($v) => $e,
            IntensitySpec::GaussianBlur($v) => $e,
            IntensitySpec::Brightness($v) => $e,
            IntensitySpec::Contrast($v) => $e,
            IntensitySpec::LowResolution($v) => $e,
            IntensitySpec::Gamma($v) => $e,
        }
    };
}

impl IntensityStep {
    /// The step's name in done lists, plans and messages.
    pub fn name(&self) -> &'static str {
        match self {
            IntensityStep::GaussianNoise(_) => "gaussian_noise",
            IntensityStep::GaussianBlur(_) => "gaussian_blur",
            IntensityStep::Brightness(_) => "brightness",
            IntensityStep::Contrast(_) => "contrast",
            IntensityStep::LowResolution(_) => "low_resolution",
            IntensityStep::Gamma(_) => "gamma",
        }
    }

    /// The batchgeneratorsv2 0.3.6 transform whose formula the step follows.
    pub fn batchgenerators_class(&self) -> &'static str {
        match self {
            IntensityStep::GaussianNoise(_) => "GaussianNoiseTransform",
            IntensityStep::GaussianBlur(_) => "GaussianBlurTransform",
            IntensityStep::Brightness(_) => "MultiplicativeBrightnessTransform",
            IntensityStep::Contrast(_) => "ContrastTransform",
            IntensityStep::LowResolution(_) => "SimulateLowResolutionTransform",
            IntensityStep::Gamma(_) => "GammaTransform",
        }
    }

    fn values(&self) -> &dyn StepValues {
        each_step!(self, s => s)
    }

    /// Whether the values can act on an image of `channels` channels (any count when `None`)
    /// and `ndim` spatial axes (any when `None`): one entry, or one per channel; every value
    /// usable.
    pub fn validate(&self, channels: Option<usize>, ndim: Option<usize>) -> Result<(), String> {
        let n = self.values().count();
        if n == 0 {
            return Err(format!("{}: no values", self.name()));
        }
        if let Some(channels) = channels
            && n != 1
            && n != channels
        {
            return Err(format!(
                "{}: {n} values for an image of {channels} channel(s): give one, or one per channel",
                self.name()
            ));
        }
        self.values()
            .check(ndim)
            .map_err(|why| format!("{}: {why}", self.name()))
    }

    /// Applies the step to `data`: `channels` consecutive channels of spatial `shape`.
    pub fn apply(&self, data: &mut [f32], shape: &[usize], channels: usize) {
        let v = self.values();
        let n = data.len() / channels.max(1);
        if n == 0 {
            return;
        }
        for (c, x) in data.chunks_mut(n).enumerate() {
            let entry = if v.count() == 1 { 0 } else { c };
            v.apply_channel(entry, c, x, shape);
        }
    }

    /// Whether the step needs more of a channel than the voxel it writes (see
    /// [`StepValues::needs_whole_channel`]), so that a plane alone cannot be computed.
    pub fn needs_whole_channel(&self) -> bool {
        self.values().needs_whole_channel()
    }
}

impl IntensitySpec {
    /// The name of the step the section draws.
    pub fn name(&self) -> &'static str {
        match self {
            IntensitySpec::GaussianNoise(_) => "gaussian_noise",
            IntensitySpec::GaussianBlur(_) => "gaussian_blur",
            IntensitySpec::Brightness(_) => "brightness",
            IntensitySpec::Contrast(_) => "contrast",
            IntensitySpec::LowResolution(_) => "low_resolution",
            IntensitySpec::Gamma(_) => "gamma",
        }
    }

    fn spec(&self) -> &dyn StepSpec {
        each_spec!(self, s => s)
    }

    /// Whether the section's values are usable; the error names the step.
    pub fn validate(&self) -> Result<(), String> {
        self.spec()
            .validate()
            .map_err(|why| format!("intensity step {}: {why}", self.name()))
    }

    /// Draws the step (see [`StepSpec::sample`]).
    pub fn sample(
        &self,
        rng: &mut SplitMix64,
        channels: usize,
        ndim: usize,
    ) -> (Option<IntensityStep>, serde_json::Value) {
        self.spec().sample(rng, channels, ndim)
    }

    /// The batchgeneratorsv2 0.3.6 transform of the section, with its probability
    /// (`RandomTransform(…, apply_probability=p)`), as Python source.
    pub fn batchgeneratorsv2(&self) -> String {
        format!(
            "RandomTransform({}, apply_probability={})",
            self.spec().batchgeneratorsv2(),
            py_float(self.p())
        )
    }

    /// The `# NOTE:` line of an export to `library`, which has no transform with the step's
    /// semantics: the step is left out of that snippet.
    pub fn left_out_note(&self, library: &str) -> String {
        format!(
            "intensity step {} (batchgeneratorsv2's {}, p {}) is left out: {library} has no \
             transform with its semantics (its namesake differs in formula or sampling); export \
             to nnunet or python to train with it",
            self.name(),
            self.batchgenerators_class(),
            py_float(self.p())
        )
    }

    /// The batchgeneratorsv2 0.3.6 transform the section draws.
    pub fn batchgenerators_class(&self) -> &'static str {
        match self {
            IntensitySpec::GaussianNoise(_) => "GaussianNoiseTransform",
            IntensitySpec::GaussianBlur(_) => "GaussianBlurTransform",
            IntensitySpec::Brightness(_) => "MultiplicativeBrightnessTransform",
            IntensitySpec::Contrast(_) => "ContrastTransform",
            IntensitySpec::LowResolution(_) => "SimulateLowResolutionTransform",
            IntensitySpec::Gamma(_) => "GammaTransform",
        }
    }

    /// The probability that the step fires.
    pub fn p(&self) -> f64 {
        each_spec!(self, s => s.p)
    }

    /// The section that always draws `step`'s values, when they are one entry for every channel
    /// (ranges of one value, p = 1); `None` for values per channel, which no section draws. The
    /// noise keeps its standard deviation; its field is the one of the sample's stream.
    pub fn fixed(step: &IntensityStep) -> Option<IntensitySpec> {
        let one = |v: f64| [v, v];
        Some(match step {
            IntensityStep::GaussianNoise(n) => IntensitySpec::GaussianNoise(NoiseSpec {
                p: 1.0,
                std: one(single(&n.std)?),
                p_per_channel: 1.0,
                synchronize_channels: true,
            }),
            IntensityStep::GaussianBlur(b) => {
                let s = single(&b.sigmas)?;
                let first = *s.first()?;
                if s.iter().any(|v| *v != first) {
                    return None;
                }
                IntensitySpec::GaussianBlur(BlurSpec {
                    p: 1.0,
                    sigma: one(first),
                    p_per_channel: 1.0,
                    synchronize_channels: true,
                    synchronize_axes: true,
                })
            }
            IntensityStep::Brightness(b) => IntensitySpec::Brightness(BrightnessSpec {
                p: 1.0,
                multiplier: one(single(&b.multipliers)?),
                distribution: Default::default(),
                p_per_channel: 1.0,
                synchronize_channels: true,
            }),
            IntensityStep::Contrast(c) => IntensitySpec::Contrast(ContrastSpec {
                p: 1.0,
                factor: one(single(&c.factors)?),
                distribution: Default::default(),
                preserve_range: c.preserve_range,
                p_per_channel: 1.0,
                synchronize_channels: true,
            }),
            IntensityStep::LowResolution(l) => {
                let s = single(&l.scales)?;
                let first = *s.first()?;
                if s.iter().any(|v| *v != first) {
                    return None;
                }
                IntensitySpec::LowResolution(LowResolutionSpec {
                    p: 1.0,
                    scale: one(first),
                    p_per_channel: 1.0,
                    synchronize_channels: true,
                    synchronize_axes: true,
                    ignore_axes: vec![],
                })
            }
            IntensityStep::Gamma(g) => {
                let v = single(&g.channels)?;
                let flag = |b: bool| if b { 1.0 } else { 0.0 };
                IntensitySpec::Gamma(GammaSpec {
                    p: 1.0,
                    gamma: one(v.gamma),
                    distribution: Default::default(),
                    p_invert: flag(v.invert),
                    p_retain_stats: flag(v.retain_stats),
                    p_per_channel: 1.0,
                    synchronize_channels: true,
                })
            }
        })
    }
}

/// The one value of a list that holds one entry for every channel.
fn single<T: Clone>(v: &PerChannel<T>) -> Option<T> {
    match &v[..] {
        [Some(x)] => Some(x.clone()),
        _ => None,
    }
}

/// `v` as a Python float literal (shortest round trip, with a decimal point).
pub(crate) fn py_float(v: f64) -> String {
    let s = format!("{v:?}");
    if s.contains(['.', 'e', 'n', 'N']) {
        s
    } else {
        format!("{s}.0")
    }
}

/// A Python range argument: `BGContrast((lo, hi))` for the split draw, else `(lo, hi)`.
pub(crate) fn py_range(r: [f64; 2], dist: crate::core::draws::Distribution) -> String {
    let t = format!("({}, {})", py_float(r[0]), py_float(r[1]));
    match dist {
        crate::core::draws::Distribution::Split => format!("BGContrast({t})"),
        crate::core::draws::Distribution::Uniform => t,
    }
}

/// Python's `True` or `False`.
pub(crate) fn py_bool(b: bool) -> &'static str {
    if b { "True" } else { "False" }
}

/// The default of `p_per_channel`: every channel takes part.
pub(crate) fn one() -> f64 {
    1.0
}

/// A probability in [0, 1], or why not.
pub(crate) fn check_p(name: &str, p: f64) -> Result<(), String> {
    if (0.0..=1.0).contains(&p) {
        Ok(())
    } else {
        Err(format!("{name} = {p} is not a probability in [0, 1]"))
    }
}

/// A finite `[lo, hi]` range with `lo <= hi` (and both above `min` when given), or why not.
pub(crate) fn check_range(name: &str, r: [f64; 2], above: Option<f64>) -> Result<(), String> {
    if !r.iter().all(|v| v.is_finite()) {
        return Err(format!("{name} [{}, {}] is not a finite range", r[0], r[1]));
    }
    if r.iter().any(|v| v.abs() > 1e6) {
        return Err(format!("{name} [{}, {}] reaches beyond ±1e6", r[0], r[1]));
    }
    if r[0] > r[1] {
        return Err(format!(
            "{name} [{}, {}] has its ends the wrong way round",
            r[0], r[1]
        ));
    }
    if let Some(m) = above
        && r[0] <= m
    {
        return Err(format!("{name} [{}, {}] must lie above {m}", r[0], r[1]));
    }
    Ok(())
}

/// batchgeneratorsv2's choice of channels and values: the step fires with `p` (its
/// `RandomTransform`); each channel then takes part with `p_per_channel`; with `synchronize` one
/// value (drawn by `draw`) serves every channel that takes part, else each draws its own, in
/// channel order. Every decision is drawn whether or not it matters, so the stream of one step
/// never depends on its probabilities. Returns the values per channel when the step fires and at
/// least one channel takes part, and the decisions.
pub(crate) fn draw_channels<T: Clone + Serialize>(
    rng: &mut SplitMix64,
    p: f64,
    p_per_channel: f64,
    synchronize: bool,
    channels: usize,
    mut draw: impl FnMut(&mut SplitMix64) -> T,
) -> (Option<PerChannel<T>>, serde_json::Value) {
    let fire = rng.chance(p);
    let taking: Vec<bool> = (0..channels).map(|_| rng.chance(p_per_channel)).collect();
    let shared = draw(rng);
    let own: Vec<T> = (0..channels).map(|_| draw(rng)).collect();
    let values: PerChannel<T> = taking
        .iter()
        .zip(own)
        .map(|(&t, v)| t.then(|| if synchronize { shared.clone() } else { v }))
        .collect();
    let drawn = serde_json::json!({ "fired": fire, "channels": taking });
    if fire && taking.iter().any(|&t| t) {
        (Some(values), drawn)
    } else {
        (None, drawn)
    }
}

#[cfg(test)]
mod tests;
