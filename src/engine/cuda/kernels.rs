//! The engine's kernels as the host sees them: the define sets of each build, the entry names,
//! the parameter structs that mirror `kernels/*.cu`, launch shapes and the tuning knobs.

use cudarc::driver::{DeviceRepr, LaunchConfig};

use crate::core::gaussian::gaussian_kernel1d;
use crate::core::{CoordMap, Mode, Order};
use crate::engine::{EngineError, Precision};
use crate::gpu::nvrtc::store_define;
use crate::gpu::tuning;

use super::{Family, check_entries, compile, device_engine, mode_defines};
/// Defines of a resample or prefilter build.
pub fn sampler_defines(mode: Mode, order: Order, ndim: usize, store: Precision) -> Vec<String> {
    let mut d = mode_defines(mode);
    d.push(format!("-DORDER={}", order.as_u32()));
    d.push(format!("-DNDIM={ndim}"));
    d.push(store_define(store).into());
    d
}

/// The radius a field build serves for `sigma`: `int(4 sigma + 0.5)` rounded up to a multiple of
/// 8 for the tiled kernels (their weights come as a parameter, zero-padded: one build serves 8
/// radii), or the radius itself above `FIELD_TILED_MAX_R` (the direct kernel, weights baked in).
pub fn field_build_radius(sigma: f64) -> usize {
    let r = gaussian_kernel1d(sigma, 0, 4.0).len() / 2;
    if r <= FIELD_TILED_MAX_R {
        r.div_ceil(8) * 8
    } else {
        r
    }
}

/// Defines of a field build (kernels/field.cu): the build radius, and above
/// `FIELD_TILED_MAX_R` the weights `w_0..w_R` of `gaussian_kernel1d(sigma, 0, 4)` as f32 literals.
pub fn field_defines(sigma: f64) -> Vec<String> {
    let r = field_build_radius(sigma);
    let mut d = vec![format!("-DFIELD_R={r}")];
    if r > FIELD_TILED_MAX_R {
        let w = gaussian_kernel1d(sigma, 0, 4.0);
        let lits: Vec<String> = w[r..].iter().map(|&v| format!("{:e}f", v as f32)).collect();
        d.push(format!("-DFIELD_W={}", lits.join(",")));
    }
    d
}

/// Weights of the tiled field kernels: `w_0..w_R` of `gaussian_kernel1d(sigma, 0, 4)` in f32, zero
/// beyond R. Must match `struct FieldWeights` in kernels/field.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct FieldWeights {
    pub w: [f32; 128],
}

// SAFETY: plain old data (#[repr(C)] f32 array) matching the kernel's struct.
unsafe impl DeviceRepr for FieldWeights {}

/// The [`FieldWeights`] of `sigma` (tiled kernels; zeros when the radius exceeds them).
pub fn field_weights(sigma: f64) -> FieldWeights {
    let w = gaussian_kernel1d(sigma, 0, 4.0);
    let r = w.len() / 2;
    let mut out = FieldWeights { w: [0.0; 128] };
    if r <= FIELD_TILED_MAX_R {
        for (o, &v) in out.w.iter_mut().zip(&w[r..]) {
            *o = v as f32;
        }
    }
    out
}

/// The options a module of `family` is built with for entry `name`: a resample or field module
/// holds that entry alone (RS_ONLY in kernels/resample.cu, FD_ONLY in kernels/field.cu), so NVRTC
/// and ptxas build only what is launched, and a field's passes compile in parallel.
pub(super) fn build_defines(family: Family, defines: &[String], name: &str) -> Vec<String> {
    let entry = match family {
        Family::Resample => resample_only(name),
        Family::Field => field_only(name),
        _ => None,
    };
    match (family.entry_selector(), entry) {
        (Some(sel), Some(k)) => [defines, &[format!("{sel}{k}")]].concat(),
        _ => defines.to_vec(),
    }
}

/// FD_ONLY of a field entry (kernels/field.cu).
fn field_only(name: &str) -> Option<u32> {
    Some(match name {
        "gauss_mid_f32" => 1,
        "gauss_last_f32" => 2,
        "gauss_col_noise_f32" => 3,
        "gauss_direct_f32" => 4,
        "field_stats_f32" => 5,
        _ => return None,
    })
}

/// Whether the tiled field pass along `axis` of `shape` is the last-axis kernel's: along an axis
/// whose inner extent is 1 the CPU sums in its contiguous order, which that kernel follows (axis
/// 0 excepted: the noise pass is made by the strided kernels).
pub(super) fn contiguous_pass(axis: usize, shape: &[usize]) -> bool {
    axis > 0 && shape[axis + 1..].iter().product::<usize>() == 1
}

/// The entry of the field pass along `axis` of `shape` with `sigma` (voxels): (tiled, whole-column
/// noise pass, name). The noise pass (axis 0) holds whole columns when they fit the shared tile
/// (COL_ROWS in kernels/field.cu); AUGSCOPE_FIELD_COL=0 turns that off, for measurements.
pub(super) fn field_pass_entry(
    sigma: f64,
    axis: usize,
    shape: &[usize],
) -> (bool, bool, &'static str) {
    let radius = field_build_radius(sigma);
    let tiled = radius <= FIELD_TILED_MAX_R;
    let col = axis == 0 && tiled && shape[0] + 2 * radius <= FIELD_COL_ROWS && tuning().field_col;
    let name = match (tiled, col, contiguous_pass(axis, shape)) {
        (false, _, _) => "gauss_direct_f32",
        (true, true, _) => "gauss_col_noise_f32",
        (true, false, false) => "gauss_mid_f32",
        (true, false, true) => "gauss_last_f32",
    };
    (tiled, col, name)
}

/// Every resample entry the host may launch for `precision` is in the compiled module.
pub(super) fn check_resample_entries(ptx: &str, precision: Precision) -> Result<(), EngineError> {
    let mut want = vec![];
    for (channels, label, field) in [(1, false, false), (1, false, true), (2, true, true)] {
        want.push(resample_entry(precision, channels, label, field));
        if precision == Precision::F32 {
            want.push(resample_many_entry(channels, label));
        }
    }
    check_entries(ptx, "kernels/resample.cu", &want)
}

/// Every define set the engine can ask for, per family (the CI compile check): all modes × orders
/// × 2D/3D in f32, the two half types, the prefilter per mode, and the field at small, tiled,
/// shared-window and direct radii. Returns the number of programs compiled.
pub fn compile_all(arch: Option<&'static str>) -> Result<usize, EngineError> {
    let mut n = 0;
    for mode in Mode::ALL {
        for ndim in [2, 3] {
            for order in [Order::Nearest, Order::Linear, Order::Cubic] {
                let ptx = compile(
                    Family::Resample,
                    &resample_defines(mode, order, ndim, Precision::F32, false),
                    arch,
                )?;
                check_resample_entries(&ptx.to_src(), Precision::F32)?;
                n += 1;
            }
            let ptx = compile(
                Family::Prefilter,
                &sampler_defines(mode, Order::Cubic, ndim, Precision::F32),
                arch,
            )?;
            check_entries(
                &ptx.to_src(),
                "kernels/prefilter.cu",
                &[
                    "pad_f32",
                    "prefilter_axis_f32",
                    "prefilter_rows_f32",
                    "to_store_f32",
                ],
            )?;
            n += 1;
        }
    }
    let mut big = sampler_defines(Mode::Mirror, Order::Cubic, 3, Precision::F32);
    big.push("-DIDX64".into());
    compile(Family::Resample, &big, arch)?;
    n += 1;
    for p in [Precision::F16, Precision::Bf16] {
        let ptx = compile(
            Family::Resample,
            &resample_defines(Mode::Reflect, Order::Cubic, 3, p, false),
            arch,
        )?;
        check_resample_entries(&ptx.to_src(), p)?;
        compile(
            Family::Prefilter,
            &sampler_defines(Mode::Nearest, Order::Cubic, 3, p),
            arch,
        )?;
        n += 2;
    }
    for sigma in [0.1, 2.0, 12.0, 20.0, 45.0] {
        compile(Family::Field, &field_defines(sigma), arch)?;
        n += 1;
    }
    // The entries as the engine builds them, one module each.
    for (sigma, entries) in [
        (
            12.0,
            &["gauss_mid_f32", "gauss_last_f32", "gauss_col_noise_f32"][..],
        ),
        (45.0, &["gauss_direct_f32"][..]),
        (0.0, &["field_stats_f32"][..]),
    ] {
        for &e in entries {
            let defines = build_defines(Family::Field, &field_defines(sigma), e);
            let image = compile(Family::Field, &defines, arch)?;
            check_entries(&image.to_src(), "kernels/field.cu", &[e])?;
            n += 1;
        }
    }
    let image = compile(Family::Intensity, &[], arch)?;
    check_entries(
        &image.to_src(),
        "kernels/intensity.cu",
        &[
            "int_noise",
            "int_mul",
            "int_partials",
            "int_sq_partials",
            "int_finish",
            "int_contrast",
            "int_gamma",
            "int_retain",
            "int_blur_axis",
            "int_down",
            "int_up",
            "int_flip",
        ],
    )?;
    n += 1;
    Ok(n)
}

/// Kernel parameters of `resample_*` and `coords_f32`; must match `struct ResampleParams` in
/// `kernels/resample.cu` field for field.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ResampleParams {
    pub m: [f64; 9],
    pub offset: [f64; 3],
    pub ctr_out: [f64; 3],
    /// Elastic strength per axis (voxels per unit field value).
    pub alpha: [f64; 3],
    pub pad: f64,
    pub n_out: i64,
    pub n_in: i64,
    pub n_lab: i64,
    pub out_shape: [i32; 3],
    pub in_shape: [i32; 3],
    pub lab_shape: [i32; 3],
    pub flip: [i32; 3],
    pub channels: i32,
    pub lab_channels: i32,
    pub cval: f32,
    pub has_field: i32,
    pub has_label: i32,
    /// The sample's field in a batched launch (`resample_many_*`): field + field_slot * stride.
    pub field_slot: i32,
    /// The computed box of the output grid (voxels `box_lo + [0, box_shape)`), written compactly:
    /// the whole grid, or one plane for the viewer.
    pub box_lo: [i32; 3],
    pub box_shape: [i32; 3],
    /// Voxels of the box: the channel stride of the outputs.
    pub n_box: i64,
}

// SAFETY: #[repr(C)], plain old data (f64, i64, i32, f32 only; no pointers), laid out exactly as
// the C struct in kernels/resample.cu (248 bytes, 8-byte aligned; checked by a test).
unsafe impl DeviceRepr for ResampleParams {}

/// Kernel parameters of `pad_f32`; must match `struct PadParams` in `kernels/prefilter.cu`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct PadParams {
    pub n_out: i64,
    pub in_shape: [i32; 3],
    pub out_shape: [i32; 3],
    pub pad: i32,
    pub cval: f32,
}

// SAFETY: #[repr(C)], plain old data, laid out as `struct PadParams` in kernels/prefilter.cu
// (40 bytes, 8-byte aligned).
unsafe impl DeviceRepr for PadParams {}

pub(super) fn shape3(s: &[usize]) -> [i32; 3] {
    let mut o = [1i32; 3];
    for (a, &n) in s.iter().enumerate().take(3) {
        o[a] = n as i32;
    }
    o
}

/// The kernel parameters of a coordinate map (with or without the field).
pub fn resample_params(map: &CoordMap, has_field: bool, cval: f32) -> ResampleParams {
    let mut m = [0f64; 9];
    for i in 0..3 {
        for j in 0..3 {
            m[i * 3 + j] = map.in_from_centered[i][j];
        }
    }
    ResampleParams {
        m,
        offset: map.offset,
        ctr_out: map.ctr_out,
        alpha: map.alpha,
        pad: 0.0,
        n_out: map.out_shape.iter().product::<usize>() as i64,
        n_in: map.in_shape.iter().product::<usize>() as i64,
        n_lab: map.in_shape.iter().product::<usize>() as i64,
        out_shape: shape3(&map.out_shape),
        in_shape: shape3(&map.in_shape),
        lab_shape: shape3(&map.in_shape),
        flip: [map.flip[0] as i32, map.flip[1] as i32, map.flip[2] as i32],
        channels: 1,
        lab_channels: 0,
        cval,
        has_field: has_field as i32,
        has_label: 0,
        field_slot: 0,
        box_lo: [0; 3],
        box_shape: shape3(&map.out_shape),
        n_box: map.out_shape.iter().product::<usize>() as i64,
    }
}

pub(super) const BLOCK: u32 = 256;

/// Output voxels per thread of the resample kernels (see [`resample_k`]). Measured on the H200,
/// also software-pipelined (docs/performance.md, Decisions): 2 and 4 gain at most 3 % on the
/// large rotate, lose on small volumes and compile several times slower.
pub(super) const RESAMPLE_K: usize = 1;

/// Blocks per SM of the order-0/1 resample kernels: 5 caps them at 48 registers (62.5 %
/// occupancy instead of 50 % at 64); rotate 256×512×512 0.80 → 0.59 ms on the H200.
pub(super) const RESAMPLE_MINB: usize = 5;

/// Blocks per SM of the one-channel, label-free resample entries (`resample_plain*`, RS_PLAIN_MINB
/// in kernels/resample.cu) for orders 0 and 1: 8 caps them at 32 registers (full occupancy); their
/// edge path is a separate function, so only it spills. Rotate 256×512×512 0.61 → 0.46 ms on the
/// H200.
pub(super) const RESAMPLE_PLAIN_MINB: usize = 8;

/// The same for order 3: 4 blocks (64 registers) instead of the 255 registers and one block per
/// SM of the uncapped cubic kernel.
pub(super) const RESAMPLE_PLAIN_MINB_CUBIC: usize = 4;

/// Outputs per block along the axis of the tiled field kernels (TY * FIELD_K in kernels/field.cu).
pub(super) const FIELD_TL: usize = 128;

/// The largest radius of the tiled field kernels (TILED_MAX_R in kernels/field.cu).
pub(super) const FIELD_TILED_MAX_R: usize = 120;

/// Rows of the shared tile of the whole-column noise pass (COL_ROWS in kernels/field.cu).
pub(super) const FIELD_COL_ROWS: usize = 352;

/// Block shape of the resample and coordinate kernels: (32, 8, 1) unless
/// `AUGSCOPE_CUDA_BLOCK=x,y,z` (256 threads, x a multiple of 8) asks for another, for tuning.
pub(super) fn resample_block() -> (u32, u32, u32) {
    tuning().block.unwrap_or((32, 8, 1))
}

/// Builds the tiled field kernels of every radius (three entries each, NVRTC builds run in
/// parallel) on device `ordinal`, so that moving sigma later never waits for a compile (about a
/// second per new radius bucket otherwise). Blocking: for benchmarks and long-lived callers that
/// can afford it.
pub fn warm_field_kernels(ordinal: usize) -> Result<(), EngineError> {
    use rayon::prelude::*;
    let eng = device_engine(ordinal)?;
    let entries = ["gauss_mid_f32", "gauss_last_f32", "gauss_col_noise_f32"];
    (0..=FIELD_TILED_MAX_R / 8)
        .flat_map(|b| entries.map(|e| (b, e)))
        .collect::<Vec<_>>()
        .into_par_iter()
        .try_for_each(|(b, entry)| {
            let defines = vec![format!("-DFIELD_R={}", b * 8)];
            eng.function(Family::Field, &defines, entry).map(|_| ())
        })
}

/// Launch shape of the resample and coordinate kernels: a 3D grid over (x, y, z), so that a thread
/// finds its voxel without integer division.
pub(super) fn grid_out(out_shape: &[usize]) -> Result<LaunchConfig, EngineError> {
    grid_out_k(out_shape, 1)
}

/// Output voxels per thread of the resample kernels along the last axis (RS_K in
/// kernels/resample.cu): 1 unless `AUGSCOPE_RS_K` (1 to 8) says otherwise, for measurements.
pub(super) fn resample_k() -> usize {
    tuning().rs_k.unwrap_or(RESAMPLE_K)
}

/// Blocks per SM the order-0/1 resample kernels are built for (RS_MINB in kernels/resample.cu):
/// `RESAMPLE_MINB` unless `AUGSCOPE_RS_MINB` (1 to 8) says otherwise, for measurements.
pub(super) fn resample_minb() -> usize {
    tuning().rs_minb.unwrap_or(RESAMPLE_MINB)
}

/// Blocks per SM of the `resample_plain*` entries for `order` (RS_PLAIN_MINB): the constants
/// above unless `AUGSCOPE_RS_PLAIN_MINB` (1 to 8) says otherwise, for measurements.
pub(super) fn resample_plain_minb(order: Order) -> usize {
    tuning().rs_plain_minb.unwrap_or(if order == Order::Cubic {
        RESAMPLE_PLAIN_MINB_CUBIC
    } else {
        RESAMPLE_PLAIN_MINB
    })
}

/// Warps per block of `prefilter_rows_f32` (PF_WARPS in kernels/prefilter.cu).
pub(super) const PF_WARPS: usize = 2;

/// Whether the prefilter runs the last axis through `prefilter_rows_f32` (coalesced through
/// shared tiles): yes unless `AUGSCOPE_PF_ROWS=0` (the one-thread-per-line kernel, for A/B
/// measurements; the values are the same).
pub(super) fn prefilter_rows_enabled() -> bool {
    tuning().pf_rows
}

/// Whether one-channel, label-free jobs use the `resample_plain*` entries: yes unless
/// `AUGSCOPE_RS_PLAIN=0` (the general entry, for A/B measurements; the values are the same).
pub(super) fn resample_plain_enabled() -> bool {
    tuning().rs_plain
}

/// Whether a job of `channels` image channels, with or without a label map, takes the plain
/// entries: one channel, no label map, one voxel per thread, unless `AUGSCOPE_RS_PLAIN=0`.
pub(super) fn plain_job(channels: usize, label: bool) -> bool {
    channels == 1 && !label && resample_k() == 1 && resample_plain_enabled()
}

/// The resample entry for one job: the plain entries (one channel, no label map, one voxel per
/// thread; `plainf` reads the displacement field) or the general one.
pub(super) fn resample_entry(
    precision: Precision,
    channels: usize,
    label: bool,
    field: bool,
) -> &'static str {
    match (precision, plain_job(channels, label), field) {
        (Precision::F32, false, _) => "resample_f32",
        (Precision::F16, false, _) => "resample_f16",
        (Precision::Bf16, false, _) => "resample_bf16",
        (Precision::F32, true, false) => "resample_plain_f32",
        (Precision::F16, true, false) => "resample_plain_f16",
        (Precision::Bf16, true, false) => "resample_plain_bf16",
        (Precision::F32, true, true) => "resample_plainf_f32",
        (Precision::F16, true, true) => "resample_plainf_f16",
        (Precision::Bf16, true, true) => "resample_plainf_bf16",
    }
}

/// RS_ONLY's number for a resample entry name (kernels/resample.cu), None for another name.
pub(super) fn resample_only(name: &str) -> Option<u32> {
    let base = ["_f32", "_f16", "_bf16"]
        .iter()
        .find_map(|s| name.strip_suffix(s))
        .unwrap_or(name);
    Some(match base {
        "resample" => 1,
        "resample_plain" => 2,
        "resample_plainf" => 3,
        "resample_many" => 4,
        "resample_many_plain" => 5,
        "coords" => 6,
        _ => return None,
    })
}

/// The batched resample entry (f32 storage): the plain one for one-channel, label-free samples.
pub(super) fn resample_many_entry(channels: usize, label: bool) -> &'static str {
    if plain_job(channels, label) {
        "resample_many_plain_f32"
    } else {
        "resample_many_f32"
    }
}

/// The resample kernels' defines: the sampler's, 64-bit tap offsets when a channel has 2^31
/// elements or more, the voxels per thread, and for orders 0 and 1 the register cap (order 3
/// would spill under it).
pub fn resample_defines(
    mode: Mode,
    order: Order,
    ndim: usize,
    store: Precision,
    idx64: bool,
) -> Vec<String> {
    let mut d = sampler_defines(mode, order, ndim, store);
    if idx64 {
        d.push("-DIDX64".into());
    }
    let k = resample_k();
    if k > 1 {
        d.push(format!("-DRS_K={k}"));
    }
    let b = resample_minb();
    if order != Order::Cubic && b > 1 {
        d.push(format!("-DRS_MINB={b}"));
    }
    d.push(format!("-DRS_PLAIN_MINB={}", resample_plain_minb(order)));
    d
}

/// The launch of the resample kernels over `out_shape`, `k` voxels per thread along the last
/// axis.
pub(super) fn grid_out_k(out_shape: &[usize], k: usize) -> Result<LaunchConfig, EngineError> {
    let (bx, by, bz) = resample_block();
    // 2D: the z threads of the block become more rows.
    let (d, h, w, by, bz) = match *out_shape {
        [h, w] => (1, h, w, by * bz, 1),
        [d, h, w] => (d, h, w, by, bz),
        _ => {
            return Err(EngineError::Shape(format!(
                "cannot launch over {out_shape:?}"
            )));
        }
    };
    let (gx, gy, gz) = (
        w.div_ceil(bx as usize * k.max(1)),
        h.div_ceil(by as usize),
        d.div_ceil(bz as usize),
    );
    if gy > 65535 || gz > 65535 || gx > i32::MAX as usize {
        return Err(EngineError::GpuLimit(format!(
            "grid {out_shape:?} is too large for one launch"
        )));
    }
    Ok(LaunchConfig {
        grid_dim: (gx as u32, gy as u32, gz as u32),
        block_dim: (bx, by, bz),
        shared_mem_bytes: 0,
    })
}

/// `[outer, n, inner]` of axis `axis` in `shape`.
pub(super) fn axis_split(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    (outer, shape[axis], inner)
}
