//! Intensity families: what a plan does to the image's values after the resample (docs/design.md
//! §9). One file per family holds all of it: its preset section with validation, sampling, the
//! editor's fields and each library's transform, its plan step with the drawn values, and its
//! formula on the CPU. Each family is exact to the library it comes from; where libraries mean
//! different functions by one word ("gamma", "blur", "bias field") they are different families,
//! named after their library:
//!
//! | step | file | library | transform |
//! |---|---|---|---|
//! | `gaussian_noise` | `noise.rs` | batchgeneratorsv2 0.3.6 | `GaussianNoiseTransform` |
//! | `gaussian_blur` | `blur.rs` | batchgeneratorsv2 0.3.6 | `GaussianBlurTransform` |
//! | `brightness` | `brightness.rs` | batchgeneratorsv2 0.3.6 | `MultiplicativeBrightnessTransform` |
//! | `contrast` | `contrast.rs` | batchgeneratorsv2 0.3.6 | `ContrastTransform` |
//! | `low_resolution` | `lowres.rs` | batchgeneratorsv2 0.3.6 | `SimulateLowResolutionTransform` |
//! | `gamma` | `gamma.rs` | batchgeneratorsv2 0.3.6 | `GammaTransform` |
//! | `monai_shift_intensity` | `monai_shift.rs` | MONAI 1.6.1 | `RandShiftIntensity` |
//! | `monai_scale_intensity` | `monai_scale.rs` | MONAI 1.6.1 | `RandScaleIntensity` |
//! | `monai_gaussian_noise` | `monai_noise.rs` | MONAI 1.6.1 | `RandGaussianNoise` |
//! | `monai_gaussian_smooth` | `monai_smooth.rs` | MONAI 1.6.1 | `RandGaussianSmooth` |
//! | `monai_adjust_contrast` | `monai_contrast.rs` | MONAI 1.6.1 | `RandAdjustContrast` |
//! | `monai_bias_field` | `monai_bias.rs` | MONAI 1.6.1 | `RandBiasField` |
//! | `monai_gaussian_sharpen` | `monai_sharpen.rs` | MONAI 1.6.1 | `RandGaussianSharpen` |
//! | `monai_histogram_shift` | `monai_histogram.rs` | MONAI 1.6.1 | `RandHistogramShift` |
//! | `monai_simulate_low_resolution` | `monai_lowres.rs` | MONAI 1.6.1 | `RandSimulateLowResolution` |
//! | `torchio_noise` | `torchio_noise.rs` | TorchIO 1.2.1 | `RandomNoise` |
//! | `torchio_blur` | `torchio_blur.rs` | TorchIO 1.2.1 | `RandomBlur` |
//! | `torchio_gamma` | `torchio_gamma.rs` | TorchIO 1.2.1 | `RandomGamma` |
//! | `torchio_bias_field` | `torchio_bias.rs` | TorchIO 1.2.1 | `RandomBiasField` |
//!
//! Shared arithmetic has one copy: the separable convolution and its paddings (`conv.rs`), the
//! polynomial bias fields (`bias.rs`), the statistics (`stats.rs`) and the noise field
//! (`core::philox`).
//!
//! Steps act on the image only, in the order the plan lists them; a label map never receives one
//! (the engines apply them to the image output alone). Each step holds its drawn values per
//! channel: a list with one entry (for every channel) or one per channel, where `null` leaves a
//! channel out, as a library's `p_per_channel` does. Statistics (mean, minimum, maximum, standard
//! deviation) are of the whole channel of the resampled image (of the whole image where the
//! library takes them so), summed in f64; the values are f32. Axes are augscope's: a family whose
//! library orders axes otherwise (MONAI's spatial axes x first, TorchIO's 2D `(W, H, 1)`) maps
//! them when it draws.

use serde::{Deserialize, Serialize};

use super::draws::{Distribution, Range, SplitMix64};

mod bias;
mod blur;
mod brightness;
mod contrast;
mod conv;
mod gamma;
mod lowres;
mod monai_bias;
mod monai_contrast;
mod monai_histogram;
mod monai_lowres;
mod monai_noise;
mod monai_scale;
mod monai_sharpen;
mod monai_shift;
mod monai_smooth;
mod noise;
mod normalize;
mod stats;
mod torchio_bias;
mod torchio_blur;
mod torchio_gamma;
mod torchio_noise;

pub use bias::{BiasField, Convention, MAX_BIAS_ORDER, Term, axis_coordinates, basis};
pub use blur::{Blur, BlurSpec, blur_kernel};
pub use brightness::{Brightness, BrightnessSpec};
pub use contrast::{Contrast, ContrastSpec};
pub use conv::{Pad, convolve_axis};
pub use gamma::{Gamma, GammaSpec, GammaValue};
pub use lowres::{LowResolution, LowResolutionSpec, low_resolution_shape};
pub use monai_bias::MonaiBiasSpec;
pub use monai_contrast::{MonaiContrast, MonaiContrastSpec};
pub use monai_histogram::{
    MAX_CONTROL_POINTS, MonaiHistogramShift, MonaiHistogramShiftSpec, reference_points,
};
pub use monai_lowres::{MonaiLowResolution, MonaiLowResolutionSpec, monai_low_resolution_shape};
pub use monai_noise::{MonaiNoise, MonaiNoiseSpec};
pub use monai_scale::{MonaiScale, MonaiScaleSpec};
pub use monai_sharpen::{MAX_ALPHA, MonaiSharpen, MonaiSharpenSpec, Sigma2};
pub use monai_shift::{MonaiShift, MonaiShiftSpec};
pub use monai_smooth::{MonaiSmooth, MonaiSmoothSpec, erf_kernel};
pub use noise::{Noise, NoiseSpec};
pub use normalize::{
    CtSettings, NoSettings, Normalize, RangeSettings, RescaleSettings, ZscoreSettings,
};
pub use torchio_bias::TorchioBiasSpec;
pub use torchio_blur::{TorchioBlur, TorchioBlurSpec, scipy_gaussian_kernel};
pub use torchio_gamma::{TorchioGamma, TorchioGammaSpec};
pub use torchio_noise::{TorchioNoise, TorchioNoiseSpec};

/// Values per channel: one entry for every channel, or one per channel; `None` leaves a channel
/// out.
pub type PerChannel<T> = Vec<Option<T>>;

/// The library whose transform a family follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Library {
    /// batchgeneratorsv2 0.3.6, which nnU-Net v2 trains with.
    Batchgeneratorsv2,
    /// MONAI 1.6.1.
    Monai,
    /// TorchIO 1.2.1.
    Torchio,
}

impl Library {
    /// The library and the version its families follow, for messages and notes.
    pub fn label(self) -> &'static str {
        match self {
            Library::Batchgeneratorsv2 => "batchgeneratorsv2 0.3.6",
            Library::Monai => "MONAI 1.6.1",
            Library::Torchio => "TorchIO 1.2.1",
        }
    }

    /// The export target that trains with the library's transforms.
    pub fn target(self) -> &'static str {
        match self {
            Library::Batchgeneratorsv2 => "nnunet",
            Library::Monai => "monai",
            Library::Torchio => "torchio",
        }
    }
}

/// What the image a step is drawn for looks like.
#[derive(Clone, Copy, Debug)]
pub struct DrawFor<'a> {
    /// Channels (at least 1).
    pub channels: usize,
    /// Spatial axes (2 or 3).
    pub ndim: usize,
    /// Voxel size in mm per axis (empty: 1 mm).
    pub spacing_mm: &'a [f64],
}

impl DrawFor<'_> {
    /// The voxel size of `axis` in mm (1 where the image has none).
    pub fn spacing(&self, axis: usize) -> f64 {
        self.spacing_mm.get(axis).copied().unwrap_or(1.0)
    }
}

/// One field of a preset section, for an editor: its label and the value it edits.
pub enum Field<'a> {
    /// A probability in [0, 1].
    Prob(&'static str, &'a mut f64),
    /// A `[lo, hi]` range, dragged by `speed`, with a unit suffix.
    Range(&'static str, &'a mut Range, f64, &'static str),
    /// One number, dragged by `speed`, with a unit suffix.
    Number(&'static str, &'a mut f64, f64, &'static str),
    /// An on/off choice.
    Flag(&'static str, &'a mut bool),
    /// Uniform or batchgeneratorsv2's split draw.
    Distribution(&'a mut Distribution),
    /// A whole number in `0..=max`.
    Count(&'static str, &'a mut usize, usize),
}

/// A library's transform with its arguments: one description that the Python snippets and the
/// MONAI bundle's JSON both render.
#[derive(Clone, Debug, PartialEq)]
pub struct Call {
    pub class: &'static str,
    pub args: Vec<(&'static str, Arg)>,
}

/// An argument of a [`Call`].
#[derive(Clone, Debug, PartialEq)]
pub enum Arg {
    Float(f64),
    Bool(bool),
    Int(usize),
    IntPair([usize; 2]),
    Range(Range),
}

impl Call {
    /// `class(lead, k=v, …)` as Python source; `lead` (such as `keys=KEYS[0]`) goes first when
    /// not empty.
    pub fn python(&self, prefix: &str, lead: &str) -> String {
        let mut args: Vec<String> = vec![];
        if !lead.is_empty() {
            args.push(lead.to_string());
        }
        for (k, a) in &self.args {
            let v = match a {
                Arg::Float(v) => py_float(*v),
                Arg::Bool(b) => py_bool(*b).to_string(),
                Arg::Int(i) => i.to_string(),
                Arg::IntPair([a, b]) => format!("({a}, {b})"),
                Arg::Range(r) => format!("({}, {})", py_float(r[0]), py_float(r[1])),
            };
            args.push(format!("{k}={v}"));
        }
        format!("{prefix}{}({})", self.class, args.join(", "))
    }

    /// The arguments as JSON values, in order.
    pub fn json_args(&self) -> Vec<(&'static str, serde_json::Value)> {
        self.args
            .iter()
            .map(|(k, a)| {
                let v = match a {
                    Arg::Float(v) => serde_json::json!(v),
                    Arg::Bool(b) => serde_json::json!(b),
                    Arg::Int(i) => serde_json::json!(i),
                    Arg::IntPair(r) => serde_json::json!(r),
                    Arg::Range(r) => serde_json::json!(r),
                };
                (*k, v)
            })
            .collect()
    }
}

/// What a plan step is to the engines: its values and its formula.
pub trait StepValues {
    /// How many value entries the step holds (1: one for every channel).
    fn count(&self) -> usize;
    /// Whether the values can act on an image of `ndim` spatial axes (any when `None`); the
    /// count is checked by the caller.
    fn check(&self, ndim: Option<usize>) -> Result<(), String>;
    /// Applies entry `entry` to `x`, channel `channel` of the image, of spatial `shape`. For a
    /// [`whole_image`](Self::whole_image) step, `x` is every channel at once (entry and channel
    /// 0).
    fn apply_channel(&self, entry: usize, channel: usize, x: &mut [f32], shape: &[usize]);
    /// Whether the step needs more of the channel than the voxel it writes (statistics,
    /// neighbours, the voxel's index in the whole grid), so that a plane alone cannot be
    /// computed.
    fn needs_whole_channel(&self) -> bool;
    /// Whether the step's statistics span every channel (its library takes them over the whole
    /// image): it then acts on all channels at once, as one array.
    fn whole_image(&self) -> bool {
        false
    }
    /// The preset section that always draws these values, where one can (ranges of one value,
    /// p = 1); `None` for values no section draws (per channel, or a noise field's own key).
    fn fixed(&self) -> Option<IntensitySpec> {
        None
    }
}

/// What a preset section is to sampling, the editor and the exports.
pub trait StepSpec {
    /// The section with its library's defaults (where the library has none, a small value that
    /// shows the step).
    fn library_default() -> Self
    where
        Self: Sized;
    /// Whether the section's values are usable.
    fn validate(&self) -> Result<(), String>;
    /// The probability that the step fires.
    fn p(&self) -> f64;
    /// Draws the step for an image like `img` from `rng` (the step's own stream): the step when
    /// it fires, and every decision drawn.
    fn sample(
        &self,
        rng: &mut SplitMix64,
        img: &DrawFor<'_>,
    ) -> (Option<IntensityStep>, serde_json::Value);
    /// The section's fields, in the order an editor shows them.
    fn fields(&mut self) -> Vec<Field<'_>>;
    /// The batchgeneratorsv2 0.3.6 transform that draws the same step (inside its
    /// `RandomTransform`, which the caller adds), as Python source; `None` where the library has
    /// no transform with the family's semantics. In nnU-Net's trainer `ignore_axes` names the
    /// axes its dummy-2D mode leaves alone (`None` otherwise).
    fn batchgeneratorsv2(&self) -> Option<String> {
        None
    }
    /// The MONAI 1.6.1 dictionary transform that draws the same step on the image key (with
    /// its `prob`, without `keys`); `None` where MONAI has none.
    fn monai(&self) -> Option<Call> {
        None
    }
    /// The TorchIO 1.2.1 transform that draws the same step (with its `p`); `None` where TorchIO
    /// has none.
    fn torchio(&self) -> Option<Call> {
        None
    }
}

/// The families, one line each: the plan step's variant and values, the preset section's type,
/// the step's name, its library and the library's transform.
macro_rules! families {
    ($( $variant:ident($values:ty, $spec:ty) = $name:literal, $lib:ident, $class:literal; )*) => {
        /// One step of a plan's intensity part, with its drawn values.
        #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub enum IntensityStep {
            $( #[serde(rename = $name)] $variant($values), )*
        }

        /// A family's preset section: when its step fires and how its values are drawn. In a
        /// preset file, an entry of the `[[intensity]]` list, named by `step`.
        #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
        #[serde(tag = "step")]
        pub enum IntensitySpec {
            $( #[serde(rename = $name)] $variant($spec), )*
        }

        impl IntensityStep {
            fn values(&self) -> &dyn StepValues {
                match self { $( IntensityStep::$variant(v) => v, )* }
            }
            /// The step's name in done lists, plans and messages.
            pub fn name(&self) -> &'static str {
                match self { $( IntensityStep::$variant(_) => $name, )* }
            }
            /// The library whose transform the step follows.
            pub fn library(&self) -> Library {
                match self { $( IntensityStep::$variant(_) => Library::$lib, )* }
            }
            /// The library's transform whose formula the step follows.
            pub fn class(&self) -> &'static str {
                match self { $( IntensityStep::$variant(_) => $class, )* }
            }
        }

        impl IntensitySpec {
            fn spec(&self) -> &dyn StepSpec {
                match self { $( IntensitySpec::$variant(v) => v, )* }
            }
            fn spec_mut(&mut self) -> &mut dyn StepSpec {
                match self { $( IntensitySpec::$variant(v) => v, )* }
            }
            /// The name of the step the section draws.
            pub fn name(&self) -> &'static str {
                match self { $( IntensitySpec::$variant(_) => $name, )* }
            }
            /// The library whose transform the section draws.
            pub fn library(&self) -> Library {
                match self { $( IntensitySpec::$variant(_) => Library::$lib, )* }
            }
            /// The library's transform the section draws.
            pub fn class(&self) -> &'static str {
                match self { $( IntensitySpec::$variant(_) => $class, )* }
            }
            /// Every family, with its library's defaults, in the table's order.
            pub fn families() -> Vec<IntensitySpec> {
                vec![ $( IntensitySpec::$variant(<$spec as StepSpec>::library_default()), )* ]
            }
        }
    };
}

families! {
    GaussianNoise(Noise, NoiseSpec) = "gaussian_noise", Batchgeneratorsv2, "GaussianNoiseTransform";
    GaussianBlur(Blur, BlurSpec) = "gaussian_blur", Batchgeneratorsv2, "GaussianBlurTransform";
    Brightness(Brightness, BrightnessSpec) = "brightness", Batchgeneratorsv2,
        "MultiplicativeBrightnessTransform";
    Contrast(Contrast, ContrastSpec) = "contrast", Batchgeneratorsv2, "ContrastTransform";
    LowResolution(LowResolution, LowResolutionSpec) = "low_resolution", Batchgeneratorsv2,
        "SimulateLowResolutionTransform";
    Gamma(Gamma, GammaSpec) = "gamma", Batchgeneratorsv2, "GammaTransform";
    MonaiShiftIntensity(MonaiShift, MonaiShiftSpec) = "monai_shift_intensity", Monai,
        "RandShiftIntensity";
    MonaiScaleIntensity(MonaiScale, MonaiScaleSpec) = "monai_scale_intensity", Monai,
        "RandScaleIntensity";
    MonaiGaussianNoise(MonaiNoise, MonaiNoiseSpec) = "monai_gaussian_noise", Monai,
        "RandGaussianNoise";
    MonaiGaussianSmooth(MonaiSmooth, MonaiSmoothSpec) = "monai_gaussian_smooth", Monai,
        "RandGaussianSmooth";
    MonaiAdjustContrast(MonaiContrast, MonaiContrastSpec) = "monai_adjust_contrast", Monai,
        "RandAdjustContrast";
    MonaiBiasField(BiasField, MonaiBiasSpec) = "monai_bias_field", Monai, "RandBiasField";
    MonaiGaussianSharpen(MonaiSharpen, MonaiSharpenSpec) = "monai_gaussian_sharpen", Monai,
        "RandGaussianSharpen";
    MonaiHistogramShift(MonaiHistogramShift, MonaiHistogramShiftSpec) = "monai_histogram_shift",
        Monai, "RandHistogramShift";
    MonaiSimulateLowResolution(MonaiLowResolution, MonaiLowResolutionSpec) =
        "monai_simulate_low_resolution", Monai, "RandSimulateLowResolution";
    TorchioNoise(TorchioNoise, TorchioNoiseSpec) = "torchio_noise", Torchio, "RandomNoise";
    TorchioBlur(TorchioBlur, TorchioBlurSpec) = "torchio_blur", Torchio, "RandomBlur";
    TorchioGamma(TorchioGamma, TorchioGammaSpec) = "torchio_gamma", Torchio, "RandomGamma";
    TorchioBiasField(BiasField, TorchioBiasSpec) = "torchio_bias_field", Torchio,
        "RandomBiasField";
}

impl IntensityStep {
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
        if v.whole_image() {
            v.apply_channel(0, 0, data, shape);
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

    /// The separable kernel of a blur family for value entry `entry`: the taps per spatial axis
    /// (augscope's order) and the padding; `None` for a step that is not a blur or leaves the
    /// entry out.
    pub fn separable(&self, entry: usize) -> Option<(Vec<Vec<f32>>, Pad)> {
        let pick = |n: usize| if n == 1 { 0 } else { entry };
        match self {
            IntensityStep::GaussianBlur(b) => {
                let s = b.sigmas.get(pick(b.sigmas.len()))?.as_ref()?;
                Some((s.iter().map(|&v| blur_kernel(v)).collect(), Pad::Mirror))
            }
            IntensityStep::MonaiGaussianSmooth(m) => {
                Some((m.sigmas.iter().map(|&v| erf_kernel(v)).collect(), Pad::Zero))
            }
            IntensityStep::TorchioBlur(t) => Some((
                t.sigmas.iter().map(|&v| scipy_gaussian_kernel(v)).collect(),
                Pad::Reflect,
            )),
            _ => None,
        }
    }

    /// Whether the step acts on every channel at once (see [`StepValues::whole_image`]).
    pub fn whole_image(&self) -> bool {
        self.values().whole_image()
    }
}

impl IntensitySpec {
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
        img: &DrawFor<'_>,
    ) -> (Option<IntensityStep>, serde_json::Value) {
        self.spec().sample(rng, img)
    }

    /// The section's fields, for an editor.
    pub fn fields(&mut self) -> Vec<Field<'_>> {
        self.spec_mut().fields()
    }

    /// The batchgeneratorsv2 0.3.6 transform of the section with its probability
    /// (`RandomTransform(…, apply_probability=p)`), as Python source; `None` for a family of
    /// another library.
    pub fn batchgeneratorsv2(&self) -> Option<String> {
        self.spec().batchgeneratorsv2().map(|t| {
            format!(
                "RandomTransform({t}, apply_probability={})",
                py_float(self.p())
            )
        })
    }

    /// The MONAI 1.6.1 dictionary transform of the section (see [`StepSpec::monai`]).
    pub fn monai(&self) -> Option<Call> {
        self.spec().monai()
    }

    /// The TorchIO 1.2.1 transform of the section (see [`StepSpec::torchio`]).
    pub fn torchio(&self) -> Option<Call> {
        self.spec().torchio()
    }

    /// The `# NOTE:` line of an export to `library`, which has no transform with the step's
    /// semantics: the step is left out of that snippet.
    pub fn left_out_note(&self, library: &str) -> String {
        let own = self.library();
        format!(
            "intensity step {} ({}'s {}, p {}) is left out: {library} has no transform with its \
             semantics (its namesake differs in formula or sampling); export to {} or python to \
             train with it",
            self.name(),
            own.label(),
            self.class(),
            py_float(self.p()),
            own.target()
        )
    }

    /// The probability that the step fires.
    pub fn p(&self) -> f64 {
        self.spec().p()
    }

    /// The section that always draws `step`'s values (see [`StepValues::fixed`]).
    pub fn fixed(step: &IntensityStep) -> Option<IntensitySpec> {
        step.values().fixed()
    }
}

/// The one value of a list that holds one entry for every channel.
pub(crate) fn single<T: Clone>(v: &PerChannel<T>) -> Option<T> {
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

/// The default of a flag that is on unless said otherwise.
pub(crate) fn yes() -> bool {
    true
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

/// MONAI's draw of a `channel_wise` value: the step fires with `p`; one value from `range` for
/// the image, or one per channel. Both are drawn whatever the choice, so the stream of one step
/// never depends on it. Returns whether it fires and the values.
pub(crate) fn draw_channel_wise(
    rng: &mut SplitMix64,
    p: f64,
    range: Range,
    channel_wise: bool,
    channels: usize,
) -> (bool, PerChannel<f64>) {
    let fire = rng.chance(p);
    let shared = rng.range(range);
    let own: Vec<f64> = (0..channels).map(|_| rng.range(range)).collect();
    let values = if channel_wise {
        own.into_iter().map(Some).collect()
    } else {
        vec![Some(shared)]
    };
    (fire, values)
}

/// Every value finite, or why not (`what` names one).
pub(crate) fn check_finite(values: &PerChannel<f64>, what: &str) -> Result<(), String> {
    match values.iter().flatten().find(|m| !m.is_finite()) {
        Some(m) => Err(format!("{what} {m} is not a finite number")),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests;

/// A range of one value.
pub(crate) fn one_value(v: f64) -> Range {
    [v, v]
}
