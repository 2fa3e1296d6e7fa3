//! FEBDS steps 4–5 on the GPU: the threshold (Otsu's histogram for `dog` and `log`, the local
//! variance test for `fft`), the 7×7 closing and the hole filling, the same mask as
//! [`febds::segment`] on the CPU. The kernels are `kernels/filter.cu`'s FEBDS section; the host
//! reads back only the image's minimum and maximum, the histogram, two f64 sums and one flag per
//! round of the hole filling, and takes Otsu's threshold and the global variance with the CPU's
//! own functions ([`febds::Histc`], [`febds::squared_variance`]).

use super::{
    CudaFunction, CudaSlice, DeviceRepr, EngineError, Gpu, LaunchConfig, Method, Mode, Precision,
    PushKernelArg, device_engine, driver_error, febds, filter_defines, grid_1d,
};
/// Blocks of a grid-stride reduction over `n` values (256 threads each).
fn reduce_grid(n: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (n.div_ceil(256).clamp(1, 1024) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// The f32 of a key of `f32_key` (`kernels/filter.cu`): the inverse of the order-preserving map.
fn key_value(k: u32) -> f32 {
    if k & 0x8000_0000 != 0 {
        f32::from_bits(k & 0x7fff_ffff)
    } else {
        f32::from_bits(!k)
    }
}

impl Gpu {
    /// A kernel of the FEBDS section (the build every filter call has).
    fn febds_fn(&self, name: &str) -> Result<CudaFunction, EngineError> {
        self.function(&filter_defines(Mode::Reflect, Precision::F32, None), name)
    }

    /// Reads a small device buffer back (the stream's work before it included).
    fn read_back<T: DeviceRepr + Default + Clone>(
        &self,
        x: &CudaSlice<T>,
        what: &str,
    ) -> Result<Vec<T>, EngineError> {
        let v = self
            .stream()
            .clone_dtoh(x)
            .map_err(|e| driver_error(what, e))?;
        self.stream()
            .synchronize()
            .map_err(|e| driver_error(what, e))?;
        Ok(v)
    }

    /// Steps 4–5 of FEBDS on `x`, the `h × w` denoised image: the 0/1 mask in f32.
    pub(super) fn febds_segment(
        &mut self,
        x: &CudaSlice<f32>,
        [h, w]: [usize; 2],
        m: Method,
    ) -> Result<CudaSlice<f32>, EngineError> {
        let n = h * w;
        let mut bin = self.alloc_zeroed::<u8>(n, "the FEBDS mask")?;
        match m {
            Method::Fft => self.binarize(x, &mut bin, [h, w])?,
            Method::Dog | Method::Log => self.otsu(x, &mut bin, n)?,
        }
        // The 7×7 closing: the dilation, then the erosion, each along x and then y.
        let mut tmp = self.alloc_zeroed::<u8>(n, "the FEBDS mask")?;
        for (axis, max) in [(1, true), (0, true), (1, false), (0, false)] {
            self.box_pass(&bin, &mut tmp, [h, w], axis, max)?;
            std::mem::swap(&mut bin, &mut tmp);
        }
        self.fill_holes_u8(&bin, &mut tmp, [h, w])
    }

    /// Otsu's mask `x > t` of the first `n` values of `x` into `bin`.
    fn otsu(
        &mut self,
        x: &CudaSlice<f32>,
        bin: &mut CudaSlice<u8>,
        n: usize,
    ) -> Result<(), EngineError> {
        let what = "Otsu's threshold";
        let nl = n as i64;
        let mut mm = self.alloc_zeroed::<u32>(2, what)?;
        self.stream()
            .memcpy_htod(&[u32::MAX, 0u32], &mut mm)
            .map_err(|e| driver_error(what, e))?;
        let f = self.febds_fn("minmax_f32")?;
        let mut lb = self.stream().launch_builder(&f);
        lb.arg(x).arg(&nl).arg(&mut mm);
        // SAFETY: minmax_f32(const float* x, long long n, unsigned int* mm): x holds >= n floats,
        // mm 2 values; grid-stride over n.
        unsafe { lb.launch(reduce_grid(n)) }.map_err(|e| driver_error("minmax_f32", e))?;
        let k = self.read_back(&mm, what)?;
        // No value that is not NaN: the CPU's fold leaves (inf, -inf).
        let (lo, hi) = if k[0] == u32::MAX {
            (f32::INFINITY, f32::NEG_INFINITY)
        } else {
            (key_value(k[0]), key_value(k[1]))
        };
        let hc = febds::Histc::new(lo, hi);
        let mut hist = self.alloc_zeroed::<u32>(hc.bins, what)?;
        let f = self.febds_fn("histc_f32")?;
        let bins = hc.bins as i32;
        let mut lb = self.stream().launch_builder(&f);
        lb.arg(x)
            .arg(&nl)
            .arg(&hc.left)
            .arg(&hc.right)
            .arg(&bins)
            .arg(&mut hist);
        // SAFETY: histc_f32(const float* x, long long n, float left, float right, int bins,
        // unsigned int* hist): x holds >= n floats, hist `bins` <= 4096 (HIST_MAX) zeroed counts;
        // grid-stride over n.
        unsafe { lb.launch(reduce_grid(n)) }.map_err(|e| driver_error("histc_f32", e))?;
        let counts: Vec<f64> = self
            .read_back(&hist, what)?
            .into_iter()
            .map(f64::from)
            .collect();
        let t = hc.otsu_threshold(&counts);
        let f = self.febds_fn("above_u8")?;
        let mut lb = self.stream().launch_builder(&f);
        lb.arg(x).arg(bin).arg(&t).arg(&nl);
        // SAFETY: above_u8(const float* x, unsigned char* m, float t, long long n): x holds >= n
        // floats, m >= n bytes; i >= n returns.
        unsafe { lb.launch(grid_1d(n)?) }.map_err(|e| driver_error("above_u8", e))?;
        Ok(())
    }

    /// One f64 sum over the first `n` values of `x`: of the values, or of their squared
    /// deviations from `mean`.
    fn sum_f64(
        &mut self,
        x: &CudaSlice<f32>,
        n: usize,
        mean: Option<f64>,
    ) -> Result<f64, EngineError> {
        let what = "the FEBDS variance";
        let mut acc = self.alloc_zeroed::<f64>(1, what)?;
        let f = self.febds_fn("sum_f64")?;
        let (nl, mu, squares) = (n as i64, mean.unwrap_or(0.0), i32::from(mean.is_some()));
        let mut lb = self.stream().launch_builder(&f);
        lb.arg(x).arg(&nl).arg(&mu).arg(&squares).arg(&mut acc);
        // SAFETY: sum_f64(const float* x, long long n, double mean, int squares, double* acc): x
        // holds >= n floats, acc one zeroed double; grid-stride over n.
        unsafe { lb.launch(reduce_grid(n)) }.map_err(|e| driver_error("sum_f64", e))?;
        Ok(self.read_back(&acc, what)?[0])
    }

    /// The `binarize` mask of `x` (`h × w`) into `bin`.
    fn binarize(
        &mut self,
        x: &CudaSlice<f32>,
        bin: &mut CudaSlice<u8>,
        [h, w]: [usize; 2],
    ) -> Result<(), EngineError> {
        let n = h * w;
        let mean = self.sum_f64(x, n, None)? / n as f64;
        let g2 = febds::squared_variance(self.sum_f64(x, n, Some(mean))?, n);
        let f = self.febds_fn("local_var_u8")?;
        let (hl, wl) = (h as i64, w as i64);
        let mut lb = self.stream().launch_builder(&f);
        lb.arg(x).arg(bin).arg(&hl).arg(&wl).arg(&g2);
        // SAFETY: local_var_u8(const float* x, unsigned char* m, long long h, long long w, float
        // g2): x holds >= h * w floats, m >= h * w bytes; k >= h * w returns.
        unsafe { lb.launch(grid_1d(n)?) }.map_err(|e| driver_error("local_var_u8", e))?;
        Ok(())
    }

    /// One pass of the 7-wide box max (`max`) or min along `axis` (0 = y, 1 = x), `src` into
    /// `dst`, zero outside the image.
    fn box_pass(
        &mut self,
        src: &CudaSlice<u8>,
        dst: &mut CudaSlice<u8>,
        [h, w]: [usize; 2],
        axis: i32,
        max: bool,
    ) -> Result<(), EngineError> {
        let f = self.febds_fn("box_u8")?;
        let (hl, wl, r, mx) = (h as i64, w as i64, 3i32, i32::from(max));
        let mut lb = self.stream().launch_builder(&f);
        lb.arg(src)
            .arg(dst)
            .arg(&hl)
            .arg(&wl)
            .arg(&axis)
            .arg(&r)
            .arg(&mx);
        // SAFETY: box_u8(const unsigned char* src, unsigned char* dst, long long h, long long w,
        // int axis, int r, int mx): both hold >= h * w bytes; k >= h * w returns; taps outside
        // [0, n) along the axis are not read.
        unsafe { lb.launch(grid_1d(h * w)?) }.map_err(|e| driver_error("box_u8", e))?;
        Ok(())
    }

    /// `binary_fill_holes` of the `h × w` mask `mask` (0/1 bytes) as the f32 mask; `spare` is a
    /// work buffer of `h × w` bytes. Rounds of row sweeps on the state and on its transpose until
    /// a round reaches no new pixel.
    fn fill_holes_u8(
        &mut self,
        mask: &CudaSlice<u8>,
        spare: &mut CudaSlice<u8>,
        [h, w]: [usize; 2],
    ) -> Result<CudaSlice<f32>, EngineError> {
        let what = "the FEBDS hole filling";
        let n = h * w;
        if h.div_ceil(32) > 65535 || w.div_ceil(32) > 65535 {
            return Err(EngineError::Shape(format!(
                "a {h}×{w} image is too large for the hole filling's transpose"
            )));
        }
        let (hl, wl) = (h as i64, w as i64);
        let mut st = self.alloc_zeroed::<u8>(n, what)?;
        let f = self.febds_fn("holes_init_u8")?;
        let mut lb = self.stream().launch_builder(&f);
        lb.arg(mask).arg(&mut st).arg(&hl).arg(&wl);
        // SAFETY: holes_init_u8(const unsigned char* mask, unsigned char* st, long long h,
        // long long w): both hold >= h * w bytes; k >= h * w returns.
        unsafe { lb.launch(grid_1d(n)?) }.map_err(|e| driver_error("holes_init_u8", e))?;
        let mut changed = self.alloc_zeroed::<u32>(1, what)?;
        // Each round that changes something reaches at least one more pixel.
        for _ in 0..=n {
            self.stream()
                .memset_zeros(&mut changed)
                .map_err(|e| driver_error(what, e))?;
            self.sweep_rows(&mut st, [h, w], &mut changed)?;
            self.transpose_u8(&st, spare, [h, w])?;
            self.sweep_rows(spare, [w, h], &mut changed)?;
            self.transpose_u8(spare, &mut st, [w, h])?;
            if self.read_back(&changed, what)?[0] == 0 {
                let mut out = self.alloc(n, "the FEBDS mask")?;
                let f = self.febds_fn("holes_out_f32")?;
                let nl = n as i64;
                let mut lb = self.stream().launch_builder(&f);
                lb.arg(&st).arg(&mut out).arg(&nl);
                // SAFETY: holes_out_f32(const unsigned char* st, float* out, long long n): st
                // holds n bytes, out n floats; i >= n returns.
                unsafe { lb.launch(grid_1d(n)?) }.map_err(|e| driver_error("holes_out_f32", e))?;
                return Ok(out);
            }
        }
        Err(EngineError::Cuda(format!("{what} did not settle")))
    }

    /// Spreads "reached" along the rows of the `h × w` state `st` (`holes_rows_u8`).
    fn sweep_rows(
        &self,
        st: &mut CudaSlice<u8>,
        [h, w]: [usize; 2],
        changed: &mut CudaSlice<u32>,
    ) -> Result<(), EngineError> {
        let f = self.febds_fn("holes_rows_u8")?;
        let (hl, wl) = (h as i64, w as i64);
        let cfg = LaunchConfig {
            grid_dim: (h.div_ceil(8) as u32, 1, 1),
            block_dim: (32, 8, 1),
            shared_mem_bytes: 0,
        };
        let mut lb = self.stream().launch_builder(&f);
        lb.arg(st).arg(&hl).arg(&wl).arg(changed);
        // SAFETY: holes_rows_u8(unsigned char* st, long long h, long long w, unsigned int*
        // changed): st holds h * w bytes, changed one value; block (32, 8), one warp per row,
        // grid ceil(h / 8) (rows >= h return, whole warps).
        unsafe { lb.launch(cfg) }.map_err(|e| driver_error("holes_rows_u8", e))?;
        Ok(())
    }

    /// `dst` (`w × h`) = the transpose of `src` (`h × w`), bytes.
    fn transpose_u8(
        &self,
        src: &CudaSlice<u8>,
        dst: &mut CudaSlice<u8>,
        [h, w]: [usize; 2],
    ) -> Result<(), EngineError> {
        let f = self.febds_fn("transpose_u8")?;
        let (hl, wl) = (h as i64, w as i64);
        let cfg = LaunchConfig {
            grid_dim: (w.div_ceil(32) as u32, h.div_ceil(32) as u32, 1),
            block_dim: (32, 8, 1),
            shared_mem_bytes: 0,
        };
        let mut lb = self.stream().launch_builder(&f);
        lb.arg(src).arg(dst).arg(&hl).arg(&wl);
        // SAFETY: transpose_u8(const unsigned char* src, unsigned char* dst, long long h,
        // long long w): both hold h * w bytes; block (32, 8), grid (ceil(w / 32), ceil(h / 32))
        // (checked <= 65535 by the caller); reads and writes are bounds-checked.
        unsafe { lb.launch(cfg) }.map_err(|e| driver_error("transpose_u8", e))?;
        Ok(())
    }
}

/// A device's view for one segmentation call from the host.
fn gpu(ordinal: usize) -> Result<Gpu, EngineError> {
    Ok(Gpu {
        eng: device_engine(ordinal)?,
        ordinal,
        precision: Precision::F32,
        held: vec![],
    })
}

/// FEBDS steps 4–5 ([`febds::segment`]: the threshold, the closing and the hole filling) of the
/// `h × w` denoised image `m` on device `ordinal`: the same 0/1 mask as the CPU.
pub fn febds_segment(
    m: &[f32],
    shape: [usize; 2],
    method: Method,
    ordinal: usize,
) -> Result<Vec<f32>, EngineError> {
    check_image(m.len(), shape)?;
    let mut g = gpu(ordinal)?;
    let x = g.upload(m, Mode::Reflect)?;
    let mask = g.febds_segment(&x, shape, method)?;
    g.download(&mask, m.len(), Mode::Reflect)
}

/// [`febds::fill_holes`] of the `h × w` 0/1 mask `mask` (0 background, 1 foreground) on device
/// `ordinal`.
pub fn fill_holes(
    mask: &[f32],
    shape: [usize; 2],
    ordinal: usize,
) -> Result<Vec<f32>, EngineError> {
    check_image(mask.len(), shape)?;
    let n = mask.len();
    let mut g = gpu(ordinal)?;
    let x = g.upload(mask, Mode::Reflect)?;
    let mut bin = g.alloc_zeroed::<u8>(n, "the mask")?;
    let f = g.febds_fn("above_u8")?;
    let (t, nl) = (0f32, n as i64);
    let mut lb = g.stream().launch_builder(&f);
    lb.arg(&x).arg(&mut bin).arg(&t).arg(&nl);
    // SAFETY: above_u8(const float* x, unsigned char* m, float t, long long n): x holds n floats,
    // m n bytes; i >= n returns.
    unsafe { lb.launch(grid_1d(n)?) }.map_err(|e| driver_error("above_u8", e))?;
    let mut spare = g.alloc_zeroed::<u8>(n, "the mask")?;
    let out = g.fill_holes_u8(&bin, &mut spare, shape)?;
    g.download(&out, n, Mode::Reflect)
}

fn check_image(len: usize, [h, w]: [usize; 2]) -> Result<(), EngineError> {
    if len != h * w || len == 0 {
        return Err(EngineError::Shape(format!(
            "{len} values are not one non-empty {h}×{w} image"
        )));
    }
    Ok(())
}
