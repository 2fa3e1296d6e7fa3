//! FEBDS on the GPU: the enhancement (`dog`, `log`, or `fft` through cuFFT, with the plans cached
//! per device and shape), `|·|`, the 5×5 median and the gamma, then the threshold, the closing and
//! the hole filling (`super::febds_segment`); only the mask comes back.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use super::{
    Arrays, Borrowed, CudaFft, CudaSlice, EngineError, FilterTimings, Gpu, Method, Mode, Precision,
    PushKernelArg, between, cufftType, driver_error, event, febds, filter_defines, float2, grid_1d,
};
/// Whether FEBDS `fft` runs its FFT on the GPU (libcufft loadable) rather than on the host.
pub fn cufft_available() -> bool {
    // Probed once: each probe tries every candidate name of the library.
    static PRESENT: OnceLock<bool> = OnceLock::new();
    // SAFETY: a probe of the dynamic library only.
    *PRESENT.get_or_init(|| unsafe { cudarc::cufft::sys::is_culib_present() })
}

/// cuFFT plans (forward R2C, inverse C2R) per (device, h, w), made once.
type FftPlans = (Arc<CudaFft>, Arc<CudaFft>);
type PlanCache = Mutex<HashMap<(usize, usize, usize), FftPlans>>;
fn fft_plans() -> &'static PlanCache {
    static P: OnceLock<PlanCache> = OnceLock::new();
    P.get_or_init(Mutex::default)
}

fn cufft_error(what: &str, e: cudarc::cufft::result::CufftError) -> EngineError {
    let text = format!("{e:?}");
    if text.contains("ALLOC_FAILED") {
        EngineError::OutOfMemory(format!("{what}: {text}"))
    } else {
        EngineError::Cuda(format!("{what}: {text}"))
    }
}

/// FEBDS `fft` step 1 on the GPU: `C2R(R2C(x) · H) / (h w)` with cuFFT (f32), which is the real
/// part of `ifft2(fft2(x) · H)` because H is even (see `butterworth_mul_f32`).
fn bandpass_cufft(
    g: &mut Gpu,
    x: &CudaSlice<f32>,
    [h, w]: [usize; 2],
) -> Result<CudaSlice<f32>, EngineError> {
    // cudarc panics on first use of a missing library: probe it first.
    if !cufft_available() {
        return Err(EngineError::CudaUnavailable(
            "libcufft is not loadable".into(),
        ));
    }
    if h > i32::MAX as usize || w > i32::MAX as usize {
        return Err(EngineError::Shape("image too large for cuFFT".into()));
    }
    let plans = {
        let mut p = fft_plans().lock().unwrap_or_else(|e| e.into_inner());
        match p.get(&(g.ordinal, h, w)) {
            Some(pl) => pl.clone(),
            None => {
                g.eng.dev.tracker.attempt("cuFFT plans")?;
                let stream = g.stream().clone();
                let fwd =
                    CudaFft::plan_2d(h as i32, w as i32, cufftType::CUFFT_R2C, stream.clone())
                        .map_err(|e| cufft_error("cuFFT R2C plan", e))?;
                let inv = CudaFft::plan_2d(h as i32, w as i32, cufftType::CUFFT_C2R, stream)
                    .map_err(|e| cufft_error("cuFFT C2R plan", e))?;
                let pl = (Arc::new(fwd), Arc::new(inv));
                p.insert((g.ordinal, h, w), pl.clone());
                pl
            }
        }
    };
    let wc = w / 2 + 1;
    g.held.push(
        g.eng
            .dev
            .tracker
            .reserve(h * wc * 8, "the FEBDS spectrum")?,
    );
    let mut spec = g
        .stream()
        .alloc_zeros::<float2>(h * wc)
        .map_err(|e| driver_error("the FEBDS spectrum", e))?;
    plans
        .0
        .exec_r2c(x, &mut spec)
        .map_err(|e| cufft_error("cuFFT R2C", e))?;
    let f = g.function(
        &filter_defines(Mode::Mirror, Precision::F32, None),
        "butterworth_mul_f32",
    )?;
    let (hl, wl, wcl) = (h as i64, w as i64, wc as i64);
    let scale = (1.0 / (h as f64 * w as f64)) as f32;
    let mut lb = g.stream().launch_builder(&f);
    lb.arg(&mut spec).arg(&hl).arg(&wl).arg(&wcl).arg(&scale);
    // SAFETY: butterworth_mul_f32(float2* X, long long h, w, wc, float scale): X holds h * wc
    // float2 (cuFFT's R2C layout of an h x w image); k >= h * wc returns.
    unsafe { lb.launch(grid_1d(h * wc)?) }.map_err(|e| driver_error("butterworth_mul_f32", e))?;
    let mut out = g.alloc(h * w, "the FEBDS band-pass")?;
    plans
        .1
        .exec_c2r(&mut spec, &mut out)
        .map_err(|e| cufft_error("cuFFT C2R", e))?;
    Ok(out)
}

/// FEBDS on the GPU, the `fft` enhancement on the host where cuFFT is missing.
pub(super) fn febds_gpu(
    g: &mut Gpu,
    io: Arrays<'_>,
    shape: [usize; 2],
    m: Method,
) -> Result<(Vec<f32>, FilterTimings), EngineError> {
    let near = febds::NEAREST;
    let e0 = event(g.stream())?;
    let n = io.len();
    // The fft method reads the image on the host where cuFFT is missing: a device input comes
    // down once for it.
    let host_img = |g: &Gpu| -> Result<Vec<f32>, EngineError> {
        match io {
            Arrays::Host(d) => Ok(d.to_vec()),
            Arrays::Device { image, len, .. } => {
                let stream = g.stream().clone();
                // SAFETY: apply_device's contract (see upload_from).
                let input = unsafe { Borrowed::<f32>::new(&stream, image, len) };
                stream
                    .clone_dtoh(&*input)
                    .map_err(|e| driver_error("the FEBDS input", e))
            }
        }
    };
    let mut e = match m {
        Method::Dog => {
            let x = g.upload_from(io, near.mode)?;
            let mut a = g.gaussian(&x, &shape, 1, &[1.7, 1.7], &[0, 0], near)?;
            let c = g.gaussian(&x, &shape, 1, &[2.0, 2.0], &[0, 0], near)?;
            g.axpy(&mut a, &c, -1.0)?;
            a
        }
        Method::Log => {
            let x = g.upload_from(io, near.mode)?;
            let s = g.gaussian(&x, &shape, 1, &[2.0, 2.0], &[0, 0], near)?;
            g.laplace3x3(&s, shape)?
        }
        Method::Fft => {
            let on_device = if cufft_available() {
                let x = g.upload_from(io, near.mode)?;
                match bandpass_cufft(g, &x, shape) {
                    Ok(e) => Some(e),
                    Err(EngineError::OutOfMemory(why)) => {
                        return Err(EngineError::OutOfMemory(why));
                    }
                    Err(_) => None,
                }
            } else {
                None
            };
            match on_device {
                Some(e) => e,
                // No libcufft (or a cuFFT failure other than memory): the same band-pass on the
                // host.
                None => {
                    let e = febds::butterworth_bandpass(&host_img(g)?, shape);
                    g.upload(&e, near.mode)?
                }
            }
        }
    };
    g.pointwise(&mut e, "abs_f32", None)?;
    let mut md = g.median(&e, &shape, 1, &[5, 5], febds::MIRROR)?;
    g.pointwise(
        &mut md,
        "gamma_f32",
        Some((febds::GAMMA, febds::SCALE_12BIT)),
    )?;
    let mask = g.febds_segment(&md, shape, m)?;
    let e1 = event(g.stream())?;
    let out = g.download_to(&mask, n, Mode::Reflect, io)?;
    let e2 = event(g.stream())?;
    e2.synchronize().map_err(|e| driver_error("filter", e))?;
    // The upload is inside the first phase here (the fft method computes on the host first).
    let t = FilterTimings {
        upload_ms: 0.0,
        compute_ms: between(&e0, &e1)?,
        download_ms: between(&e1, &e2)?,
    };
    Ok((out, t))
}
