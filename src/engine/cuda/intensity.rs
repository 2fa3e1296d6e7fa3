//! The plan's intensity steps on the device (docs/design.md §9; kernels/intensity.cu): after the
//! resample, on each sample's image output where it lies, before the download. The noise is made
//! on the device from its counters, the statistics stay there (no host sync between steps), and
//! every step runs the CPU engine's arithmetic (`core::intensity`), so the result equals the CPU
//! engine's to f32 rounding (bit for bit for brightness, noise, blur and low resolution, where the
//! operations are the same; the statistics sum in another order, `powf` may differ by an ulp).

use cudarc::driver::{CudaFunction, CudaSlice, LaunchConfig, PushKernelArg};

use crate::core::Plan;
use crate::engine::EngineError;
use crate::gpu::buffer::DevBuf;

use super::{DeviceEngine, Family, driver_error, grid_1d};
use crate::core::intensity::{
    BiasField, IntensityStep, MonaiSharpen, Pad, axis_coordinates, erf_kernel,
    low_resolution_shape, monai_low_resolution_shape, reference_points,
};
use cudarc::driver::CudaViewMut;

/// Blocks of the statistics' first pass (partials summed by one thread in order).
const STATS_BLOCKS: usize = 256;
/// Threads per block of the statistics' passes: `STATS_THREADS` in kernels/intensity.cu.
const STATS_THREADS: u32 = 256;

/// The device buffers the steps of one call use.
struct Scratch {
    /// Per-block partial sums, minima and maxima.
    psum: DevBuf<f64>,
    plo: DevBuf<f32>,
    phi: DevBuf<f32>,
    /// Two sets of [sum, min, max, sum of squares]: before and after gamma's power.
    stats: DevBuf<f64>,
    /// A channel's worth: the blur's other buffer, the low-resolution image.
    tmp: DevBuf<f32>,
    /// The blur's taps and the histogram shift's points (grown on demand).
    taps: DevBuf<f32>,
    /// A second channel's worth, made on first use: the sharpening's second blur.
    second: Option<DevBuf<f32>>,
}

impl Scratch {
    /// The small-table buffer holding `values`, grown when it is too short.
    fn table(
        &mut self,
        engine: &DeviceEngine,
        values: &[f32],
    ) -> Result<cudarc::driver::CudaView<'_, f32>, EngineError> {
        if self.taps.s.len() < values.len() {
            self.taps = DevBuf::new(&engine.dev, values.len(), "the intensity step's table")?;
        }
        let mut t = self.taps.s.slice_mut(0..values.len());
        engine
            .dev
            .stream
            .memcpy_htod(values, &mut t)
            .map_err(|e| driver_error("the intensity step's table", e))?;
        Ok(self.taps.s.slice(0..values.len()))
    }
}

fn stats_launch() -> LaunchConfig {
    LaunchConfig {
        grid_dim: (STATS_BLOCKS as u32, 1, 1),
        block_dim: (STATS_THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

impl DeviceEngine {
    /// Runs the intensity steps of `plans[k]` on sample `k` of `out`: `plans.len()` samples
    /// stacked, each `channels` channels of the spatial `shape` (f32).
    pub(super) fn intensity_device(
        &self,
        out: &mut CudaSlice<f32>,
        plans: &[&Plan],
        shape: &[usize],
        channels: usize,
    ) -> Result<(), EngineError> {
        if plans.iter().all(|p| p.intensity.is_empty()) {
            return Ok(());
        }
        let n: usize = shape.iter().product();
        let per = n * channels;
        if out.len() < per * plans.len() {
            return Err(EngineError::Cuda(
                "the output buffer is shorter than its samples".into(),
            ));
        }
        let mut sc = Scratch {
            psum: DevBuf::new(&self.dev, STATS_BLOCKS, "the intensity statistics")?,
            plo: DevBuf::new(&self.dev, STATS_BLOCKS, "the intensity statistics")?,
            phi: DevBuf::new(&self.dev, STATS_BLOCKS, "the intensity statistics")?,
            stats: DevBuf::new(&self.dev, 8, "the intensity statistics")?,
            tmp: DevBuf::new(&self.dev, n, "a channel of the intensity steps")?,
            taps: DevBuf::new(&self.dev, 64, "the intensity step's table")?,
            second: None,
        };
        for (k, plan) in plans.iter().enumerate() {
            // The mirror after the steps: they act on the unmirrored image
            // (`Plan::flip_around_steps`).
            let around = plan.flip_around_steps();
            if let Some(axes) = around {
                self.flip(
                    &mut out.slice_mut(k * per..(k + 1) * per),
                    shape,
                    channels,
                    axes,
                )?;
            }
            for step in &plan.intensity {
                if step.whole_image() {
                    // Statistics over every channel: the sample's image as one array.
                    let mut x = out.slice_mut(k * per..(k + 1) * per);
                    self.step_on_channel(step, 0, &mut x, shape, &mut sc)?;
                    continue;
                }
                for c in 0..channels {
                    let off = k * per + c * n;
                    let mut x = out.slice_mut(off..off + n);
                    self.step_on_channel(step, c, &mut x, shape, &mut sc)?;
                }
            }
            if let Some(axes) = around {
                self.flip(
                    &mut out.slice_mut(k * per..(k + 1) * per),
                    shape,
                    channels,
                    axes,
                )?;
            }
        }
        Ok(())
    }

    /// Mirrors the `channels` channels of `shape` in `x` along `axes`, in place.
    fn flip(
        &self,
        x: &mut CudaViewMut<'_, f32>,
        shape: &[usize],
        channels: usize,
        axes: &[usize],
    ) -> Result<(), EngineError> {
        // As 3D: a 2D image is one slice.
        let off = 3 - shape.len().min(3);
        let mut dims = [1i32; 3];
        let mut flags = [0i32; 3];
        for (a, &d) in shape.iter().enumerate() {
            dims[off + a] = i32::try_from(d)
                .map_err(|_| EngineError::GpuLimit(format!("an axis of {d} voxels")))?;
        }
        for &a in axes {
            flags[off + a] = 1;
        }
        let f = self.int_fn("int_flip")?;
        let ch = channels as i64;
        let cfg = grid_1d(x.len())?;
        let mut b = self.dev.stream.launch_builder(&f);
        b.arg(&mut *x)
            .arg(&ch)
            .arg(&dims[0])
            .arg(&dims[1])
            .arg(&dims[2])
            .arg(&flags[0])
            .arg(&flags[1])
            .arg(&flags[2]);
        // SAFETY: int_flip(float* x, i64 channels, int n0, int n1, int n2, int f0, int f1,
        // int f2): x holds channels * n0 * n1 * n2 floats (one sample's image); each thread
        // swaps two of them, both below that length.
        unsafe { b.launch(cfg) }.map_err(|e| driver_error("int_flip", e))?;
        Ok(())
    }

    /// One step on channel `c`, `x` (`shape`).
    fn step_on_channel(
        &self,
        step: &IntensityStep,
        c: usize,
        x: &mut CudaViewMut<'_, f32>,
        shape: &[usize],
        sc: &mut Scratch,
    ) -> Result<(), EngineError> {
        fn entry<T>(v: &[Option<T>], c: usize) -> Option<&T> {
            let i = if v.len() == 1 { 0 } else { c };
            v.get(i).and_then(Option::as_ref)
        }
        let n = x.len() as i64;
        match step {
            IntensityStep::GaussianNoise(s) => {
                if let Some(&sd) = entry(&s.std, c) {
                    let f = self.int_fn("int_noise")?;
                    let (sd, key0, key1, k) =
                        (sd as f32, s.seed as u32, (s.seed >> 32) as u32, c as u32);
                    let cfg = grid_1d(x.len())?;
                    let mut b = self.dev.stream.launch_builder(&f);
                    b.arg(&mut *x)
                        .arg(&n)
                        .arg(&sd)
                        .arg(&key0)
                        .arg(&key1)
                        .arg(&k);
                    // SAFETY: int_noise(float* x, i64 n, float s, u32 key0, u32 key1, u32 k):
                    // x is a view of n floats; the grid-stride loop stays below n.
                    unsafe { b.launch(cfg) }.map_err(|e| driver_error("int_noise", e))?;
                }
            }
            IntensityStep::Brightness(s) => {
                if let Some(&m) = entry(&s.multipliers, c) {
                    self.mul(x, m as f32)?;
                }
            }
            IntensityStep::Contrast(s) => {
                if let Some(&f) = entry(&s.factors, c) {
                    self.stats(x, sc, 0, false)?;
                    let func = self.int_fn("int_contrast")?;
                    let (f, preserve) = (f as f32, i32::from(s.preserve_range));
                    let st = sc.stats.s.slice(0..4);
                    let cfg = grid_1d(x.len())?;
                    let mut b = self.dev.stream.launch_builder(&func);
                    b.arg(&mut *x).arg(&n).arg(&f).arg(&st).arg(&preserve);
                    // SAFETY: int_contrast(float* x, i64 n, float f, const double* st, int):
                    // x holds n floats, st 4 doubles written by the statistics before.
                    unsafe { b.launch(cfg) }.map_err(|e| driver_error("int_contrast", e))?;
                }
            }
            IntensityStep::Gamma(s) => {
                if let Some(g) = entry(&s.channels, c) {
                    self.gamma(x, *g, sc)?;
                }
            }
            IntensityStep::GaussianBlur(_)
            | IntensityStep::MonaiGaussianSmooth(_)
            | IntensityStep::TorchioBlur(_) => {
                if let Some((taps, pad)) = step.separable(c) {
                    for (axis, w) in taps.iter().enumerate().take(shape.len()) {
                        self.blur_axis(x, shape, axis, w, pad, sc)?;
                    }
                }
            }
            IntensityStep::MonaiShiftIntensity(s) => {
                if let Some(&o) = entry(&s.offsets, c) {
                    let f = self.int_fn("int_add")?;
                    let o = o as f32;
                    let cfg = grid_1d(x.len())?;
                    let mut b = self.dev.stream.launch_builder(&f);
                    b.arg(&mut *x).arg(&n).arg(&o);
                    // SAFETY: int_add(float* x, i64 n, float o): x holds n floats.
                    unsafe { b.launch(cfg) }.map_err(|e| driver_error("int_add", e))?;
                }
            }
            IntensityStep::MonaiScaleIntensity(s) => {
                if let Some(&f) = entry(&s.factors, c) {
                    self.mul(x, (1.0 + f) as f32)?;
                }
            }
            IntensityStep::MonaiGaussianNoise(s) => {
                self.noise_mean(x, s.mean, s.std, s.seed, c, 0)?;
            }
            IntensityStep::TorchioNoise(s) => {
                self.noise_mean(x, s.mean, s.std, s.seed, c, 1)?;
            }
            IntensityStep::TorchioGamma(s) => {
                if let Some(&g) = entry(&s.gammas, c) {
                    let f = self.int_fn("int_signpow")?;
                    let g = g as f32;
                    let cfg = grid_1d(x.len())?;
                    let mut b = self.dev.stream.launch_builder(&f);
                    b.arg(&mut *x).arg(&n).arg(&g);
                    // SAFETY: int_signpow(float* x, i64 n, float g): x holds n floats.
                    unsafe { b.launch(cfg) }.map_err(|e| driver_error("int_signpow", e))?;
                }
            }
            IntensityStep::MonaiAdjustContrast(s) => self.monai_contrast(x, s, sc)?,
            IntensityStep::MonaiBiasField(s) | IntensityStep::TorchioBiasField(s) => {
                self.bias(x, shape, s)?;
            }
            IntensityStep::LowResolution(s) => {
                if let Some(scales) = entry(&s.scales, c) {
                    let small = low_resolution_shape(shape, scales);
                    self.low_resolution(x, shape, &small, true, sc)?;
                }
            }
            IntensityStep::MonaiSimulateLowResolution(s) => {
                let small = monai_low_resolution_shape(shape, s.zoom);
                self.low_resolution(x, shape, &small, false, sc)?;
            }
            IntensityStep::MonaiGaussianSharpen(s) => self.sharpen(x, shape, s, sc)?,
            IntensityStep::MonaiHistogramShift(s) => self.histogram_shift(x, &s.points, sc)?,
        }
        Ok(())
    }

    fn int_fn(&self, name: &str) -> Result<CudaFunction, EngineError> {
        self.function(Family::Intensity, &[], name)
    }

    fn mul(&self, x: &mut CudaViewMut<'_, f32>, m: f32) -> Result<(), EngineError> {
        let f = self.int_fn("int_mul")?;
        let n = x.len() as i64;
        let cfg = grid_1d(x.len())?;
        let mut b = self.dev.stream.launch_builder(&f);
        b.arg(&mut *x).arg(&n).arg(&m);
        // SAFETY: int_mul(float* x, i64 n, float m): x holds n floats; grid-stride below n.
        unsafe { b.launch(cfg) }.map_err(|e| driver_error("int_mul", e))?;
        Ok(())
    }

    /// Sum, minimum and maximum of `x` into stats set `set` (0 or 1), and with `squares` the
    /// sum of squares about its mean.
    fn stats(
        &self,
        x: &CudaViewMut<'_, f32>,
        sc: &mut Scratch,
        set: usize,
        squares: bool,
    ) -> Result<(), EngineError> {
        let n = x.len() as i64;
        let first = self.int_fn("int_partials")?;
        let mut b = self.dev.stream.launch_builder(&first);
        let xv = x.as_view();
        b.arg(&xv)
            .arg(&n)
            .arg(&mut sc.psum.s)
            .arg(&mut sc.plo.s)
            .arg(&mut sc.phi.s);
        // SAFETY: int_partials(const float* x, i64 n, double* psum, float* plo, float* phi):
        // STATS_BLOCKS blocks of STATS_THREADS threads, each block writes its own partial (the
        // buffers hold STATS_BLOCKS values); the grid-stride loop stays below n.
        unsafe { b.launch(stats_launch()) }.map_err(|e| driver_error("int_partials", e))?;
        self.stats_finish(sc, set, false)?;
        if squares {
            let sq = self.int_fn("int_sq_partials")?;
            let st = sc.stats.s.slice(4 * set..4 * set + 4);
            let mut b = self.dev.stream.launch_builder(&sq);
            let xv = x.as_view();
            b.arg(&xv).arg(&n).arg(&st).arg(&mut sc.psum.s);
            // SAFETY: int_sq_partials(const float* x, i64 n, const double* out, double* pss):
            // as int_partials; out is this set's 4 doubles (its sum written above).
            unsafe { b.launch(stats_launch()) }.map_err(|e| driver_error("int_sq_partials", e))?;
            self.stats_finish(sc, set, true)?;
        }
        Ok(())
    }

    /// The partials summed in order into stats set `set`.
    fn stats_finish(&self, sc: &mut Scratch, set: usize, squares: bool) -> Result<(), EngineError> {
        let f = self.int_fn("int_finish")?;
        let (nb, sq) = (STATS_BLOCKS as i32, i32::from(squares));
        let mut st = sc.stats.s.slice_mut(4 * set..4 * set + 4);
        let mut b = self.dev.stream.launch_builder(&f);
        b.arg(&sc.psum.s)
            .arg(&sc.plo.s)
            .arg(&sc.phi.s)
            .arg(&nb)
            .arg(&sq)
            .arg(&mut st);
        // SAFETY: int_finish(const double*, const float*, const float*, int nb, int squares,
        // double* out): the partial buffers hold nb = STATS_BLOCKS values, out 4 doubles; one
        // thread works.
        unsafe { b.launch(LaunchConfig::for_num_elems(1)) }
            .map_err(|e| driver_error("int_finish", e))?;
        Ok(())
    }

    /// gamma: inverted, powered on the range, statistics restored, inverted back.
    fn gamma(
        &self,
        x: &mut CudaViewMut<'_, f32>,
        g: crate::core::intensity::GammaValue,
        sc: &mut Scratch,
    ) -> Result<(), EngineError> {
        let n = x.len() as i64;
        if g.invert {
            self.mul(x, -1.0)?;
        }
        self.stats(x, sc, 0, g.retain_stats)?;
        let f = self.int_fn("int_gamma")?;
        let gamma = g.gamma as f32;
        {
            let st = sc.stats.s.slice(0..4);
            let cfg = grid_1d(x.len())?;
            let mut b = self.dev.stream.launch_builder(&f);
            b.arg(&mut *x).arg(&n).arg(&gamma).arg(&st);
            // SAFETY: int_gamma(float* x, i64 n, float g, const double* st): x holds n floats,
            // st the 4 doubles of set 0.
            unsafe { b.launch(cfg) }.map_err(|e| driver_error("int_gamma", e))?;
        }
        if g.retain_stats {
            self.stats(x, sc, 1, true)?;
            let f = self.int_fn("int_retain")?;
            let (before, after) = (sc.stats.s.slice(0..4), sc.stats.s.slice(4..8));
            let cfg = grid_1d(x.len())?;
            let mut b = self.dev.stream.launch_builder(&f);
            b.arg(&mut *x).arg(&n).arg(&before).arg(&after);
            // SAFETY: int_retain(float* x, i64 n, const double* before, const double* after):
            // x holds n floats, before and after the two sets of 4 doubles written above.
            unsafe { b.launch(cfg) }.map_err(|e| driver_error("int_retain", e))?;
        }
        if g.invert {
            self.mul(x, -1.0)?;
        }
        Ok(())
    }

    /// `x` convolved along `axis` with the odd taps `w`, through the scratch channel.
    fn blur_axis(
        &self,
        x: &mut CudaViewMut<'_, f32>,
        shape: &[usize],
        axis: usize,
        w: &[f32],
        pad: Pad,
        sc: &mut Scratch,
    ) -> Result<(), EngineError> {
        if w.is_empty() || w == [1.0] || x.is_empty() {
            return Ok(());
        }
        sc.table(self, w)?;
        let [n0, n1, n2] = dims3(shape)?;
        let a = (axis + 3 - shape.len()) as i32;
        let (nt, pad) = (w.len() as i32, pad.code());
        let f = self.int_fn("int_blur_axis")?;
        let mut tmp = sc.tmp.s.slice_mut(0..x.len());
        let taps = sc.taps.s.slice(0..w.len());
        let cfg = grid_1d(x.len())?;
        let mut b = self.dev.stream.launch_builder(&f);
        let xv = x.as_view();
        b.arg(&xv)
            .arg(&mut tmp)
            .arg(&n0)
            .arg(&n1)
            .arg(&n2)
            .arg(&a)
            .arg(&taps)
            .arg(&nt)
            .arg(&pad);
        // SAFETY: int_blur_axis(const float* src, float* dst, int n0, int n1, int n2, int axis,
        // const float* w, int taps, int pad): src and dst hold n0·n1·n2 floats (the channel; tmp
        // holds a channel), w holds taps floats; every index read is folded into its axis or
        // skipped.
        unsafe { b.launch(cfg) }.map_err(|e| driver_error("int_blur_axis", e))?;
        self.dev
            .stream
            .memcpy_dtod(&tmp, x)
            .map_err(|e| driver_error("the blurred channel", e))?;
        Ok(())
    }

    /// The noise field of `seed` added with a mean (`mode` 0: MONAI's f64 arithmetic, 1:
    /// TorchIO's f32).
    fn noise_mean(
        &self,
        x: &mut CudaViewMut<'_, f32>,
        mean: f64,
        sd: f64,
        seed: u64,
        c: usize,
        mode: i32,
    ) -> Result<(), EngineError> {
        let f = self.int_fn("int_noise_mean")?;
        let n = x.len() as i64;
        let (key0, key1, k) = (seed as u32, (seed >> 32) as u32, c as u32);
        let cfg = grid_1d(x.len())?;
        let mut b = self.dev.stream.launch_builder(&f);
        b.arg(&mut *x)
            .arg(&n)
            .arg(&mean)
            .arg(&sd)
            .arg(&key0)
            .arg(&key1)
            .arg(&k)
            .arg(&mode);
        // SAFETY: int_noise_mean(float* x, i64 n, double mean, double sd, u32 key0, u32 key1,
        // u32 k, int mode): x holds n floats; the grid-stride loop stays below n.
        unsafe { b.launch(cfg) }.map_err(|e| driver_error("int_noise_mean", e))?;
        Ok(())
    }

    /// MONAI's adjust contrast on `x` (the whole image): inverted, powered on the range,
    /// statistics restored, inverted back.
    fn monai_contrast(
        &self,
        x: &mut CudaViewMut<'_, f32>,
        s: &crate::core::intensity::MonaiContrast,
        sc: &mut Scratch,
    ) -> Result<(), EngineError> {
        let n = x.len() as i64;
        if s.invert {
            self.mul(x, -1.0)?;
        }
        self.stats(x, sc, 0, s.retain_stats)?;
        let g = s.gamma as f32;
        {
            let f = self.int_fn("int_monai_contrast")?;
            let st = sc.stats.s.slice(0..4);
            let cfg = grid_1d(x.len())?;
            let mut b = self.dev.stream.launch_builder(&f);
            b.arg(&mut *x).arg(&n).arg(&g).arg(&st);
            // SAFETY: int_monai_contrast(float* x, i64 n, float g, const double* st): x holds n
            // floats, st the 4 doubles of set 0.
            unsafe { b.launch(cfg) }.map_err(|e| driver_error("int_monai_contrast", e))?;
        }
        if s.retain_stats {
            self.stats(x, sc, 1, true)?;
            let f = self.int_fn("int_monai_retain")?;
            let (before, after) = (sc.stats.s.slice(0..4), sc.stats.s.slice(4..8));
            let cfg = grid_1d(x.len())?;
            let mut b = self.dev.stream.launch_builder(&f);
            b.arg(&mut *x).arg(&n).arg(&before).arg(&after);
            // SAFETY: int_monai_retain(float* x, i64 n, const double* before, const double*
            // after): x holds n floats, before and after the two sets of 4 doubles above.
            unsafe { b.launch(cfg) }.map_err(|e| driver_error("int_monai_retain", e))?;
        }
        if s.invert {
            self.mul(x, -1.0)?;
        }
        Ok(())
    }

    /// A polynomial bias field on the channel `x` (`shape`).
    fn bias(
        &self,
        x: &mut CudaViewMut<'_, f32>,
        shape: &[usize],
        field: &BiasField,
    ) -> Result<(), EngineError> {
        let [n0, n1, n2] = dims3(shape)?;
        if x.is_empty() || field.terms.is_empty() {
            return Ok(());
        }
        // Kernel axes: a 2D image is (1, n1, n2), its axis 0 of one voxel at power 0.
        let lead = 3 - shape.len();
        let mut coords = vec![0.0f64; lead];
        for &len in shape {
            coords.extend(axis_coordinates(field.convention, len));
        }
        let mut terms = Vec::with_capacity(4 * field.terms.len());
        for t in &field.terms {
            let mut p = [0.0f64; 3];
            for (a, &v) in t.powers.iter().enumerate().take(shape.len()) {
                p[lead + a] = v as f64;
            }
            terms.extend(p);
            terms.push(t.c);
        }
        let mut dc = DevBuf::<f64>::new(&self.dev, coords.len(), "the bias field's coordinates")?;
        let mut dt = DevBuf::<f64>::new(&self.dev, terms.len(), "the bias field's terms")?;
        self.dev
            .stream
            .memcpy_htod(&coords, &mut dc.s)
            .map_err(|e| driver_error("the bias field's coordinates", e))?;
        self.dev
            .stream
            .memcpy_htod(&terms, &mut dt.s)
            .map_err(|e| driver_error("the bias field's terms", e))?;
        let f = self.int_fn("int_bias")?;
        let nterms = field.terms.len() as i32;
        let order = field.order() as i32;
        let conv = field.convention.code();
        let cfg = grid_1d(x.len())?;
        let mut b = self.dev.stream.launch_builder(&f);
        b.arg(&mut *x)
            .arg(&n0)
            .arg(&n1)
            .arg(&n2)
            .arg(&dc.s)
            .arg(&dt.s)
            .arg(&nterms)
            .arg(&order)
            .arg(&conv);
        // SAFETY: int_bias(float* x, int n0, int n1, int n2, const double* coords, const double*
        // terms, int nterms, int order, int convention): x holds n0·n1·n2 floats, coords
        // n0 + n1 + n2 doubles, terms 4·nterms; every power is at most order <= MAX_BIAS_ORDER
        // (the plan's validation), the kernel's table size.
        unsafe { b.launch(cfg) }.map_err(|e| driver_error("int_bias", e))?;
        Ok(())
    }

    /// Down to `small` by nearest-exact (`exact`) or torch's legacy nearest, back up to `shape`
    /// linearly.
    fn low_resolution(
        &self,
        x: &mut CudaViewMut<'_, f32>,
        shape: &[usize],
        small: &[usize],
        exact: bool,
        sc: &mut Scratch,
    ) -> Result<(), EngineError> {
        let exact = i32::from(exact);
        let [n0, n1, n2] = dims3(shape)?;
        let [m0, m1, m2] = dims3(small)?;
        let m: usize = small.iter().product();
        if x.is_empty() || m == 0 {
            return Ok(());
        }
        let mut tmp = sc.tmp.s.slice_mut(0..m);
        let down = self.int_fn("int_down")?;
        let mut b = self.dev.stream.launch_builder(&down);
        let xv = x.as_view();
        b.arg(&xv)
            .arg(&mut tmp)
            .arg(&n0)
            .arg(&n1)
            .arg(&n2)
            .arg(&m0)
            .arg(&m1)
            .arg(&m2)
            .arg(&exact);
        // SAFETY: int_down(const float* src, float* dst, int n0..n2, int m0..m2, int exact): src
        // holds the channel's n0·n1·n2 floats, dst m0·m1·m2 <= that (each factor is at most 1);
        // source indices are clamped into each axis.
        unsafe { b.launch(grid_1d(m)?) }.map_err(|e| driver_error("int_down", e))?;
        let up = self.int_fn("int_up")?;
        let nd = shape.len() as i32;
        let tmp = sc.tmp.s.slice(0..m);
        let cfg = grid_1d(x.len())?;
        let mut b = self.dev.stream.launch_builder(&up);
        b.arg(&tmp)
            .arg(&mut *x)
            .arg(&m0)
            .arg(&m1)
            .arg(&m2)
            .arg(&n0)
            .arg(&n1)
            .arg(&n2)
            .arg(&nd);
        // SAFETY: int_up(const float* small, float* dst, int m0..m2, int n0..n2, int ndim):
        // small holds m0·m1·m2 floats, dst the channel's n0·n1·n2; taps are clamped into each
        // axis of the small grid.
        unsafe { b.launch(cfg) }.map_err(|e| driver_error("int_up", e))?;
        Ok(())
    }
}

impl DeviceEngine {
    /// MONAI's sharpening on the channel `x`: the first blur in place, the second on a copy,
    /// then `x + α (x − second)`.
    fn sharpen(
        &self,
        x: &mut CudaViewMut<'_, f32>,
        shape: &[usize],
        s: &MonaiSharpen,
        sc: &mut Scratch,
    ) -> Result<(), EngineError> {
        if x.is_empty() {
            return Ok(());
        }
        for (axis, sigma) in s.sigma1.iter().enumerate().take(shape.len()) {
            self.blur_axis(x, shape, axis, &erf_kernel(*sigma), Pad::Zero, sc)?;
        }
        let mut second = match sc.second.take() {
            Some(b) if b.s.len() >= x.len() => b,
            _ => DevBuf::new(&self.dev, x.len(), "the sharpening's second blur")?,
        };
        let done = (|| {
            let mut b2 = second.s.slice_mut(0..x.len());
            self.dev
                .stream
                .memcpy_dtod(&*x, &mut b2)
                .map_err(|e| driver_error("the sharpening's copy", e))?;
            for (axis, sigma) in s.sigma2.iter().enumerate().take(shape.len()) {
                self.blur_axis(&mut b2, shape, axis, &erf_kernel(*sigma), Pad::Zero, sc)?;
            }
            let f = self.int_fn("int_sharpen")?;
            let (n, alpha) = (x.len() as i64, s.alpha as f32);
            let b2 = second.s.slice(0..x.len());
            let cfg = grid_1d(x.len())?;
            let mut b = self.dev.stream.launch_builder(&f);
            b.arg(&mut *x).arg(&b2).arg(&n).arg(&alpha);
            // SAFETY: int_sharpen(float* x, const float* b2, i64 n, float alpha): x and b2 hold
            // n floats each (b2 is a slice of n of the second buffer).
            unsafe { b.launch(cfg) }.map_err(|e| driver_error("int_sharpen", e))?;
            Ok(())
        })();
        sc.second = Some(second);
        done
    }

    /// MONAI's histogram shift on `x` (the whole image) through the moved `points`.
    fn histogram_shift(
        &self,
        x: &mut CudaViewMut<'_, f32>,
        points: &[f64],
        sc: &mut Scratch,
    ) -> Result<(), EngineError> {
        if x.is_empty() || points.len() < 2 {
            return Ok(());
        }
        self.stats(x, sc, 0, false)?;
        let np = points.len();
        let table: Vec<f32> = reference_points(np)
            .iter()
            .chain(points)
            .map(|&p| p as f32)
            .collect();
        sc.table(self, &table)?;
        let f = self.int_fn("int_hist_shift")?;
        let (n, np) = (x.len() as i64, np as i32);
        let st = sc.stats.s.slice(0..4);
        let pts = sc.taps.s.slice(0..table.len());
        let cfg = grid_1d(x.len())?;
        let mut b = self.dev.stream.launch_builder(&f);
        b.arg(&mut *x).arg(&n).arg(&st).arg(&pts).arg(&np);
        // SAFETY: int_hist_shift(float* x, i64 n, const double* st, const float* pts, int np):
        // x holds n floats, st the 4 doubles of set 0 written by the statistics above, pts 2·np
        // floats (np >= 2, checked above).
        unsafe { b.launch(cfg) }.map_err(|e| driver_error("int_hist_shift", e))?;
        Ok(())
    }
}

/// A 2D or 3D shape as three i32 sizes, axis 0 of size 1 for 2D.
fn dims3(shape: &[usize]) -> Result<[i32; 3], EngineError> {
    let d = |v: usize| {
        i32::try_from(v).map_err(|_| EngineError::Shape(format!("axis of {v} voxels is too long")))
    };
    match shape {
        [a, b] => Ok([1, d(*a)?, d(*b)?]),
        [a, b, c] => Ok([d(*a)?, d(*b)?, d(*c)?]),
        _ => Err(EngineError::Shape(format!(
            "intensity steps on {} axes",
            shape.len()
        ))),
    }
}
