//! The transform's free helpers: the copy of a job that moves nothing, every job's kernel
//! parameters, and the launch of a resample entry.

use std::sync::Arc;

use cudarc::driver::{
    CudaFunction, CudaSlice, CudaStream, DeviceRepr, LaunchConfig, PushKernelArg,
};

use super::super::device::copy_plane;
use super::super::kernels::shape3;
use super::super::{ResampleParams, driver_error, resample_params};
use super::{Caller, ResampleArgs, SampleParams, Work};
use crate::engine::{EngineError, Job, Outputs};

/// A job whose plan moves nothing: its input (or the plane of it) is the answer.
pub(super) fn copy_identity(job: &Job<'_>, out: &mut Outputs<'_>, plane: Option<(usize, usize)>) {
    match plane {
        None => out.image.copy_from_slice(&job.image.data),
        Some((axis, index)) => copy_plane(job.image, axis, index, out.image),
    }
    if let (Some(l), Some(o)) = (job.label, out.label.as_deref_mut()) {
        match plane {
            None => o.copy_from_slice(&l.data),
            Some((axis, index)) => copy_plane(l, axis, index, o),
        }
    }
}

/// Nothing moves and the arrays are the caller's: the input copied on the device.
pub(super) fn copy_on_device(stream: &Arc<CudaStream>, c: &mut Caller) -> Result<(), EngineError> {
    let copy = |e| driver_error("copy", e);
    stream.memcpy_dtod(&*c.img, &mut *c.out).map_err(copy)?;
    if let (Some(src), Some(dst)) = (c.lab.as_ref(), c.lab_out.as_mut()) {
        stream.memcpy_dtod(&**src, &mut **dst).map_err(copy)?;
    }
    stream.synchronize().map_err(copy)
}

/// Every moving job's kernel parameters: its coordinate map, field slot, box and coefficients.
pub(super) fn sample_params(
    work: &Work,
    jobs: &[(Job<'_>, Outputs<'_>)],
    slots: &[Option<usize>],
    coef_shape: &[usize],
    pad: f64,
) -> Vec<ResampleParams> {
    let n_coef = coef_shape.iter().product::<usize>() as i64;
    let lo = work.box_lo;
    work.maps
        .iter()
        .zip(slots)
        .zip(&work.todo)
        .map(|((map, slot), &i)| {
            let mut p = resample_params(map, slot.is_some(), jobs[i].0.plan.cval);
            p.box_lo = [lo[0] as i32, lo[1] as i32, lo[2] as i32];
            p.box_shape = shape3(&work.box_shape);
            p.n_box = work.n_box() as i64;
            p.pad = pad;
            p.n_in = n_coef;
            p.in_shape = shape3(coef_shape);
            p.channels = work.channels as i32;
            p.field_slot = slot.unwrap_or(0) as i32;
            if work.lab_channels > 0 {
                p.has_label = 1;
                p.lab_channels = work.lab_channels as i32;
                p.n_lab = work.n_in() as i64;
            }
            p
        })
        .collect()
}

/// Launches a resample entry over `img` (f32 or the storage type) into `out`.
pub(super) fn launch_resample<T: DeviceRepr>(
    stream: &Arc<CudaStream>,
    f: &CudaFunction,
    name: &str,
    grid: LaunchConfig,
    img: &CudaSlice<T>,
    out: &mut CudaSlice<T>,
    a: ResampleArgs<'_>,
) -> Result<(), EngineError> {
    let mut b = stream.launch_builder(f);
    b.arg(img).arg(out).arg(a.lab).arg(a.lab_out).arg(a.field);
    match &a.params {
        SampleParams::One(p) => {
            b.arg(*p);
        }
        SampleParams::Many(ps, strides) => {
            b.arg(*ps).arg(strides);
        }
    }
    // SAFETY: the entries of kernels/resample.cu, whose arguments are (const store_t* img,
    // store_t* out, const float* lab, float* lab_out, const float* field) followed by one job's
    // ResampleParams, or for `resample_many_*` the samples' parameters and ManyStrides: `resample`
    // ensured img with channels * n_coef coefficients per image copy (the padded ones for order
    // 3), out b * channels * n_box values, lab and lab_out the label channels likewise (or the
    // 1-element placeholders when has_label = 0, never read), field ndim * n_out per field slot
    // (or the placeholder when no sample has a field, has_field = 0); a batch's grid.z is zblocks
    // * b and blocks with s >= b return; every voxel is bounds-checked against its box
    // (output_voxel).
    unsafe { b.launch(grid) }.map_err(|e| driver_error(name, e))?;
    Ok(())
}
