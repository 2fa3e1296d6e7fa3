//! The one host path of a transform on one device, for one job or a batch of B jobs of one kind
//! ([`many_key`]), stage after stage on the compute stream: the checks (identity plans copied),
//! the upload targets, the elastic fields (queued, so that the upload overlaps them), the upload,
//! the order-3 prefilter, the fused resample, the download. One job reads the cached unit field and
//! launches its single-volume entry with the parameters by value; a batch makes its fields in a
//! buffer of its own (one set of passes per sigma) and launches `resample_many_*`, every sample's
//! parameters in device memory. The two entries give the same values bit for bit. What only one
//! job can have (a plane, a resident image) is its [`Region`]; the caller's device arrays
//! ([`Region::device`]) hold one job or a batch, its samples one after another.

use std::time::Instant;

use cudarc::driver::{CudaSlice, PushKernelArg};

use crate::core::{CoordMap, FieldSpec, Mode, Order, Plan};
use crate::engine::{EngineError, Job, Outputs, Precision, Timings, check_job_region};
use crate::gpu::buffer::{Borrowed, DevBuf, SendPtr, ensure};
use crate::gpu::nvrtc::store_define;

use super::device::{State, Workspace};
use super::field::{FieldTime, philox_keys};
use super::kernels::{grid_out_k, resample_entry, resample_k, resample_many_entry};
use super::many::{
    ManyStrides, fill_stacked, fill_stacked_map, scatter_stacked, scatter_stacked_map,
};
use super::prefetch::Launches;
use super::{
    DeviceEngine, Family, Region, ResampleParams, check_device_job, driver_error, field_slots,
    grid_1d, many_key, mode_defines, resample_defines, sampler_defines,
};

use cudarc::driver::CudaEvent;

mod launch;

use launch::{copy_identity, copy_on_device, launch_resample, sample_params};

/// The jobs of a call that move, after the checks.
struct Work {
    /// Their indices in the call's slice, in order.
    todo: Vec<usize>,
    maps: Vec<CoordMap>,
    /// Each one's unit field (`None`: no elastic deformation).
    fields: Vec<Option<FieldSpec>>,
    in_shape: Vec<usize>,
    out_shape: Vec<usize>,
    /// The computed box: the whole output grid, or one plane of it.
    box_lo: [usize; 3],
    box_shape: Vec<usize>,
    channels: usize,
    lab_channels: usize,
    /// Every job reads one image (and label map), uploaded once.
    shared: bool,
    mode: Mode,
    order: Order,
    /// The first job's cval: the order-3 grid-constant prepad's ([`ManyKey`] makes it the batch's).
    cval: f32,
}

impl Work {
    fn b(&self) -> usize {
        self.todo.len()
    }
    /// Images (and label maps) on the device.
    fn copies(&self) -> usize {
        if self.shared { 1 } else { self.b() }
    }
    fn ndim(&self) -> usize {
        self.in_shape.len()
    }
    fn n_in(&self) -> usize {
        self.in_shape.iter().product()
    }
    fn n_box(&self) -> usize {
        self.box_shape.iter().product()
    }
    fn cubic(&self) -> bool {
        self.order == Order::Cubic
    }
}

/// The caller's device arrays of one job ([`CudaBackend::apply_device`]), borrowed for the call.
struct Caller {
    img: Borrowed<f32>,
    lab: Option<Borrowed<f32>>,
    out: Borrowed<f32>,
    lab_out: Option<Borrowed<f32>>,
}

/// The arguments of a resample entry after the image and the output (RESAMPLE_PARAMS and
/// RESAMPLE_MANY_PARAMS in kernels/resample.cu).
struct ResampleArgs<'a> {
    lab: &'a CudaSlice<f32>,
    lab_out: &'a mut CudaSlice<f32>,
    field: &'a CudaSlice<f32>,
    params: SampleParams<'a>,
}

enum SampleParams<'a> {
    /// One job: its parameters by value.
    One(&'a ResampleParams),
    /// A batch: every sample's parameters on the device, and the strides between samples.
    Many(&'a CudaSlice<ResampleParams>, ManyStrides),
}

/// The elastic fields of a call ([`DeviceEngine::fields`]).
struct Fields {
    /// Their device time, read once the stream is done.
    time: FieldTime,
    /// A batch's fields, in slots; one job reads the cached unit field.
    batch: Option<DevBuf<f32>>,
    /// Each moving job's slot (`None`: no field).
    slots: Vec<Option<usize>>,
}

impl DeviceEngine {
    /// Transforms one job (over its region) or a batch of jobs of one [`ManyKey`] (whole grids in
    /// host memory). The stages are the functions below, in this order.
    pub(super) fn transform(
        &self,
        st: &mut State,
        jobs: &mut [(Job<'_>, Outputs<'_>)],
        precision: Precision,
        region: Region,
    ) -> Result<Timings, EngineError> {
        let t0 = Instant::now();
        let mut timings = Timings::default();
        let mut caller = self.borrow_caller(jobs, region)?;
        let Some(work) = self.check(jobs, precision, region, caller.as_mut())? else {
            timings.total_ms = t0.elapsed().as_secs_f64() * 1e3;
            return Ok(timings);
        };
        self.prefetch_modules(&work, precision);
        // The upload targets are allocated first: buffers come from the stream-ordered pool of
        // the compute stream, and the copy stream, which waits only for `before_field`, must not
        // write one before its allocation (nor into memory that a freed, smaller buffer held
        // while earlier kernels still read it).
        let up_key = region
            .resident
            .map(|k| (k, precision, work.lab_channels > 0));
        let reuse = !work.cubic() && up_key.is_some() && st.resident == up_key && caller.is_none();
        if caller.is_none() && !reuse {
            self.alloc_inputs(&mut st.ws, &work, precision)?;
        }
        // Everything queued before the fields: what the uploads must wait for.
        let before_field = self.event(&self.dev.stream)?;
        let fields = self.fields(st, &work)?;

        let t_up = Instant::now();
        st.resident = None;
        if !reuse {
            self.upload(
                &mut st.ws,
                &work,
                jobs,
                precision,
                caller.as_ref(),
                &before_field,
            )?;
        }
        timings.upload_ms = t_up.elapsed().as_secs_f64() * 1e3;

        let e_pre0 = self.event(&self.dev.stream)?;
        let (coef_shape, pad) = if work.cubic() {
            let channels = work.copies() * work.channels;
            let (mode, cval) = (work.mode, work.cval);
            self.prefilter_device(&mut st.ws, mode, &work.in_shape, channels, precision, cval)?
        } else {
            (work.in_shape.clone(), 0.0)
        };
        let e_pre1 = self.event(&self.dev.stream)?;

        let params = sample_params(&work, jobs, &fields.slots, &coef_shape, pad);
        let batch = fields.batch.as_ref();
        let (e_rs0, e_rs1) = self.resample(st, &work, params, batch, precision, caller.as_mut())?;

        let mut intensity_events = None;
        if Self::intensity_here(precision, region)
            && work
                .todo
                .iter()
                .any(|&i| !jobs[i].0.plan.intensity.is_empty())
        {
            let e0 = self.event(&self.dev.stream)?;
            let plans: Vec<&Plan> = work.todo.iter().map(|&i| jobs[i].0.plan).collect();
            let out = match caller.as_mut() {
                Some(c) => &mut *c.out,
                None => {
                    let buf = st.ws.out_f32.as_mut();
                    &mut buf
                        .ok_or_else(|| EngineError::Cuda("workspace buffer missing".into()))?
                        .s
                }
            };
            self.intensity_device(out, &plans, &work.box_shape, work.channels)?;
            intensity_events = Some((e0, self.event(&self.dev.stream)?));
        }
        let t_down = Instant::now();
        self.download(&mut st.ws, &work, jobs, precision, caller.as_mut())?;
        timings.download_ms = t_down.elapsed().as_secs_f64() * 1e3;
        self.finish(&st.ws, [&e_pre0, &e_pre1, &e_rs0, &e_rs1], &mut timings)?;
        timings.field_ms = fields.time.ms()?;
        if let Some((e0, e1)) = intensity_events {
            timings.intensity_ms =
                f64::from(e0.elapsed_ms(&e1).map_err(|e| driver_error("timing", e))?);
        }
        if caller.is_none() {
            st.resident = if work.cubic() { None } else { up_key };
        }
        timings.total_ms = t0.elapsed().as_secs_f64() * 1e3;
        Ok(timings)
    }

    /// Whether a transform runs the plans' intensity steps on the device: on whole grids stored in
    /// f32 (a plane is done by the caller's host path for the pointwise steps, and a half-precision
    /// output goes through the host).
    pub(super) fn intensity_here(precision: Precision, region: Region) -> bool {
        precision == Precision::F32 && region.plane.is_none()
    }

    /// The caller's device arrays of the call's jobs (one job, or a batch whose samples follow
    /// one another in each array), seen as buffers for this call.
    fn borrow_caller(
        &self,
        jobs: &mut [(Job<'_>, Outputs<'_>)],
        region: Region,
    ) -> Result<Option<Caller>, EngineError> {
        let Some(d) = region.device else {
            return Ok(None);
        };
        let Some((job, _)) = jobs.first() else {
            return Err(EngineError::Cuda("device arrays without a job".into()));
        };
        let out_shape = check_device_job(job, &d, region)?;
        for (other, _) in &jobs[1..] {
            if check_device_job(other, &d, region)? != out_shape
                || other.image.shape != job.image.shape
                || other.image.channels != job.image.channels
                || other.label.map(|l| l.channels) != job.label.map(|l| l.channels)
            {
                return Err(EngineError::Shape(
                    "the samples of a batch on the device share their grids and channels".into(),
                ));
            }
        }
        let b = jobs.len();
        let stream = &self.dev.stream;
        let (n_in, n_out) = (job.image.len_spatial(), out_shape.iter().product::<usize>());
        let (ch, lab_ch) = (job.image.channels, job.label.map_or(0, |l| l.channels));
        // SAFETY: apply_device's (apply_device_batch's) contract: each address holds the values
        // named here for the b samples on this device, alive and untouched by other work until
        // the call returns (check_device_job matched them to the jobs' grids).
        Ok(Some(unsafe {
            Caller {
                img: Borrowed::new(stream, d.image, b * ch * n_in),
                lab: d.label.map(|a| Borrowed::new(stream, a, b * lab_ch * n_in)),
                out: Borrowed::new(stream, d.out, b * ch * n_out),
                lab_out: d
                    .label_out
                    .map(|a| Borrowed::new(stream, a, b * lab_ch * n_out)),
            }
        }))
    }

    /// Checks every job, copies those whose plan moves nothing (the input is the exact answer, as
    /// on the CPU engine) and returns the others, or `None` when none is left. A batch must share
    /// one [`ManyKey`] and transform whole grids.
    fn check(
        &self,
        jobs: &mut [(Job<'_>, Outputs<'_>)],
        precision: Precision,
        region: Region,
        mut caller: Option<&mut Caller>,
    ) -> Result<Option<Work>, EngineError> {
        let key = if jobs.len() > 1 {
            if region.plane.is_some() || region.resident.is_some() {
                return Err(EngineError::Cuda("a batch transforms whole grids".into()));
            }
            let key = many_key(&jobs[0].0, precision);
            if key.is_none() {
                return Err(EngineError::Cuda("this job cannot be batched".into()));
            }
            key
        } else {
            None
        };
        let (mut todo, mut maps, mut fields, mut out_shape) = (vec![], vec![], vec![], vec![]);
        for (i, (job, out)) in jobs.iter_mut().enumerate() {
            if key.is_some() && many_key(job, precision) != key {
                return Err(EngineError::Cuda(
                    "jobs of different kinds in one batch".into(),
                ));
            }
            let shape = match region.device {
                None => check_job_region(job, out, region.plane)?,
                Some(d) => check_device_job(job, &d, region)?,
            };
            if job.plan.is_spatial_identity() && shape == job.image.shape {
                if key.is_some() && caller.is_some() {
                    // A batch on the device is read and written in place, sample after sample:
                    // each one moves (apply_device_batch runs one with a copy job by job).
                    return Err(EngineError::Cuda(
                        "a batch on the device has a sample that moves nothing".into(),
                    ));
                }
                let steps = Self::intensity_here(precision, region);
                match caller.as_deref_mut() {
                    Some(c) => {
                        copy_on_device(&self.dev.stream, c)?;
                        if steps && !job.plan.intensity.is_empty() {
                            self.intensity_device(
                                &mut c.out,
                                &[job.plan],
                                &shape,
                                job.image.channels,
                            )?;
                            // The caller reads its arrays when the call returns.
                            self.dev
                                .stream
                                .synchronize()
                                .map_err(|e| driver_error("the intensity steps", e))?;
                        }
                    }
                    None => {
                        copy_identity(job, out, region.plane);
                        if steps {
                            crate::engine::intensity_after(
                                job.plan,
                                out.image,
                                &shape,
                                job.image.channels,
                            );
                        }
                    }
                }
                continue;
            }
            maps.push(job.plan.compose(&job.image.shape)?);
            fields.push(job.plan.field_spec(&shape));
            todo.push(i);
            out_shape = shape;
        }
        let Some(&first) = todo.first() else {
            return Ok(None);
        };
        let (img0, lab0) = (jobs[first].0.image, jobs[first].0.label);
        // The caller's arrays hold one image per sample (their grid volumes carry no data).
        let shared = caller.is_none()
            && todo.iter().all(|&i| {
                std::ptr::eq(jobs[i].0.image, img0)
                    && match (jobs[i].0.label, lab0) {
                        (Some(a), Some(b)) => std::ptr::eq(a, b),
                        (None, None) => true,
                        _ => false,
                    }
            });
        let mut box_lo = [0usize; 3];
        let mut box_shape = out_shape.clone();
        if let Some((axis, index)) = region.plane {
            box_lo[axis] = index;
            box_shape[axis] = 1;
        }
        if todo.len() > 1 {
            let zblocks = grid_out_k(&box_shape, resample_k())?.grid_dim.2 as usize;
            if zblocks * todo.len() > 65535 {
                return Err(EngineError::Shape(format!(
                    "{} samples of {out_shape:?} are too many for one launch",
                    todo.len()
                )));
            }
        }
        let plan = jobs[first].0.plan;
        Ok(Some(Work {
            in_shape: img0.shape.clone(),
            channels: img0.channels,
            lab_channels: lab0.map_or(0, |l| l.channels),
            todo,
            maps,
            fields,
            out_shape,
            box_lo,
            box_shape,
            shared,
            mode: plan.mode,
            order: plan.order,
            cval: plan.cval,
        }))
    }

    /// Starts compiling every module the work launches, on other threads (a first run's cost is
    /// then the longest compile, not their sum).
    fn prefetch_modules(&self, work: &Work, precision: Precision) {
        let l = Launches {
            in_shape: &work.in_shape,
            channels: work.channels,
            label: work.lab_channels > 0,
            mode: work.mode,
            order: work.order,
        };
        let single = (work.b() == 1).then(|| work.fields[0].is_some());
        let fields = work.fields.iter().flatten();
        self.prefetch_launches(
            &l,
            (single, work.b() > 1),
            fields,
            precision,
            &mut Default::default(),
        );
    }

    /// The device buffers the upload writes: the images in f32 (or in the storage type when no
    /// prefilter is needed) and the label maps.
    fn alloc_inputs(
        &self,
        ws: &mut Workspace,
        work: &Work,
        precision: Precision,
    ) -> Result<(), EngineError> {
        let len = work.copies() * work.channels * work.n_in();
        if precision != Precision::F32 && !work.cubic() {
            ensure(&self.dev, &mut ws.img_u16, len, "the image")?;
        } else {
            ensure(&self.dev, &mut ws.img_f32, len, "the image")?;
        }
        if work.lab_channels > 0 {
            let len = work.copies() * work.lab_channels * work.n_in();
            ensure(&self.dev, &mut ws.lab_in, len, "the label map")?;
        }
        Ok(())
    }

    /// The elastic fields, queued on the compute stream: one job's is the cached unit field (made
    /// when its spec changed); a batch's are made in a buffer of their own, one set of passes per
    /// sigma over all of its samples. Returns their device time, the batch's buffer and each job's
    /// slot in it.
    fn fields(&self, st: &mut State, work: &Work) -> Result<Fields, EngineError> {
        if work.b() == 1 {
            let (time, slot) = match &work.fields[0] {
                Some(spec) => (self.ensure_field(st, spec)?, Some(0)),
                None => (FieldTime::Cached, None),
            };
            let slots = vec![slot];
            return Ok(Fields {
                time,
                batch: None,
                slots,
            });
        }
        let sigmas: Vec<Option<Vec<f64>>> = work
            .fields
            .iter()
            .map(|f| f.as_ref().map(|s| s.sigma_vox.clone()))
            .collect();
        let (slots, groups) = field_slots(&sigmas);
        let n_slots: usize = groups.iter().map(|g| g.1.len()).sum();
        if n_slots == 0 {
            let time = FieldTime::Cached;
            return Ok(Fields {
                time,
                batch: None,
                slots,
            });
        }
        let (ndim, n_out) = (work.ndim(), work.out_shape.iter().product::<usize>());
        let ws = &mut st.ws;
        let mut fbuf = DevBuf::<f32>::new(&self.dev, n_slots * ndim * n_out, "the elastic fields")?;
        let largest = groups.iter().map(|g| g.1.len()).max().unwrap_or(0);
        let scratch = ensure(
            &self.dev,
            &mut ws.field_scratch,
            largest * ndim * n_out,
            "the elastic field scratch",
        )?;
        let _busy = self.dev.tracker.in_use(fbuf.bytes() + scratch.bytes());
        // Keys in slot order.
        let mut seeds = vec![0u64; n_slots];
        for (slot, spec) in slots.iter().zip(&work.fields) {
            if let (Some(slot), Some(spec)) = (slot, spec) {
                seeds[*slot] = spec.seed;
            }
        }
        let host_keys = philox_keys(&seeds);
        let mut kernels = vec![];
        for (sigma, _) in &groups {
            kernels.push(self.field_kernels(sigma, &work.out_shape)?);
        }
        let keys = self.upload_keys(&mut ws.keys, &host_keys)?;
        let e0 = self.event(&self.dev.stream)?;
        let mut slot0 = 0;
        for ((_, members), k) in groups.iter().zip(&kernels) {
            let span = slot0 * ndim * n_out..(slot0 + members.len()) * ndim * n_out;
            let mut out = fbuf.s.slice_mut(span.clone());
            let mut scr = scratch.s.slice_mut(0..span.len());
            let (first, count) = (slot0 * ndim, members.len() * ndim);
            let shape = &work.out_shape;
            self.field_passes(
                k,
                shape,
                keys,
                &host_keys,
                first,
                count,
                0..ndim,
                &mut out,
                &mut scr,
            )?;
            slot0 += members.len();
        }
        let e1 = self.event(&self.dev.stream)?;
        let time = FieldTime::Queued(e0, e1);
        Ok(Fields {
            time,
            batch: Some(fbuf),
            slots,
        })
    }

    /// The images and label maps of the moving jobs onto the device, stacked (one copy when every
    /// job reads the same ones): f32, or the storage type directly when no prefilter is needed. The
    /// caller's device arrays are read in place, except where the storage type or the prefilter
    /// (which works in its buffer) needs a copy of its own.
    fn upload(
        &self,
        ws: &mut Workspace,
        work: &Work,
        jobs: &[(Job<'_>, Outputs<'_>)],
        precision: Precision,
        caller: Option<&Caller>,
        after: &CudaEvent,
    ) -> Result<(), EngineError> {
        let half = precision != Precision::F32;
        let per = work.channels * work.n_in();
        let len = work.copies() * per;
        if let Some(c) = caller {
            if work.cubic() {
                let buf = ensure(&self.dev, &mut ws.img_f32, len, "the image")?;
                self.dev
                    .stream
                    .memcpy_dtod(&*c.img, &mut buf.s.slice_mut(0..len))
                    .map_err(|e| driver_error("copy", e))?;
            } else if half {
                let buf = ensure(&self.dev, &mut ws.img_u16, len, "the image")?;
                let pdefs = sampler_defines(work.mode, Order::Cubic, work.ndim(), precision);
                let f = self.function(Family::Prefilter, &pdefs, "to_store_f32")?;
                let total = len as i64;
                let mut b = self.dev.stream.launch_builder(&f);
                b.arg(&*c.img).arg(&mut buf.s).arg(&total);
                // SAFETY: to_store_f32(const float* src, u16* dst, i64 n): the caller's image
                // holds len floats, buf >= len u16 (ensured); bounds-checked per thread.
                unsafe { b.launch(grid_1d(len)?) }.map_err(|e| driver_error("to_store_f32", e))?;
            }
            return Ok(());
        }
        let copies = &work.todo[..work.copies()];
        let imgs: Vec<&[f32]> = copies.iter().map(|&i| &jobs[i].0.image.data[..]).collect();
        if half && !work.cubic() {
            let buf = ensure(&self.dev, &mut ws.img_u16, len, "the image")?;
            let conv: fn(f32) -> u16 = if precision == Precision::F16 {
                |v| half::f16::from_f32(v).to_bits()
            } else {
                |v| half::bf16::from_f32(v).to_bits()
            };
            let put = |d: &mut [u16], s: &[f32]| {
                for (o, &v) in d.iter_mut().zip(s) {
                    *o = conv(v);
                }
            };
            let fill = |s, c: &mut [u16]| fill_stacked_map(&imgs, per, s, c, put);
            ws.pin_u16
                .upload(&self.dev, &mut buf.s, len, fill, Some(after))?;
        } else {
            let buf = ensure(&self.dev, &mut ws.img_f32, len, "the image")?;
            let fill = |s, c: &mut [f32]| fill_stacked(&imgs, per, s, c);
            ws.pin_f32
                .upload(&self.dev, &mut buf.s, len, fill, Some(after))?;
        }
        if work.lab_channels > 0 {
            let labs: Vec<&[f32]> = copies
                .iter()
                .filter_map(|&i| jobs[i].0.label.map(|l| &l.data[..]))
                .collect();
            let per = work.lab_channels * work.n_in();
            let len = work.copies() * per;
            let buf = ensure(&self.dev, &mut ws.lab_in, len, "the label map")?;
            let fill = |s, c: &mut [f32]| fill_stacked(&labs, per, s, c);
            ws.pin_f32
                .upload(&self.dev, &mut buf.s, len, fill, Some(after))?;
        }
        Ok(())
    }

    /// The fused resample of every moving job in one launch; returns the events around it.
    fn resample(
        &self,
        st: &mut State,
        work: &Work,
        params: Vec<ResampleParams>,
        batch_fields: Option<&DevBuf<f32>>,
        precision: Precision,
        caller: Option<&mut Caller>,
    ) -> Result<(CudaEvent, CudaEvent), EngineError> {
        let (b, ch, lab_ch) = (work.b(), work.channels, work.lab_channels);
        let n_box = work.n_box();
        let n_coef = params[0].n_in as usize;
        let has_field = params[0].has_field != 0;
        let name = if b == 1 {
            resample_entry(precision, ch, lab_ch > 0, has_field)
        } else {
            resample_many_entry(ch, lab_ch > 0)
        };
        // Channels of 2^31 elements or more need 64-bit tap offsets.
        let idx64 = n_coef.max(work.n_in()) >= 1 << 31;
        let rdefs = resample_defines(work.mode, work.order, work.ndim(), precision, idx64);
        let f = self.function(Family::Resample, &rdefs, name)?;
        let mut grid = grid_out_k(&work.box_shape, resample_k())?;
        let zblocks = grid.grid_dim.2 as usize;
        let pbuf = if b > 1 {
            grid.grid_dim.2 = (zblocks * b) as u32;
            let mut pbuf = DevBuf::<ResampleParams>::new(&self.dev, b, "the sample parameters")?;
            self.dev
                .stream
                .memcpy_htod(&params, &mut pbuf.s)
                .map_err(|e| driver_error("the sample parameters", e))?;
            Some(pbuf)
        } else {
            None
        };
        let State { field, ws, .. } = st;
        let half = precision != Precision::F32;
        ensure(&self.dev, &mut ws.dummy, 1, "a placeholder")?;
        ensure(&self.dev, &mut ws.dummy_out, 1, "a placeholder")?;
        if lab_ch > 0 && caller.is_none() {
            ensure(
                &self.dev,
                &mut ws.lab_out,
                b * lab_ch * n_box,
                "the label output",
            )?;
        }
        if half {
            ensure(&self.dev, &mut ws.out_u16, b * ch * n_box, "the output")?;
        } else if caller.is_none() {
            ensure(&self.dev, &mut ws.out_f32, b * ch * n_box, "the output")?;
        }
        let field_buf = match batch_fields {
            Some(f) => Some((&f.s, f.bytes())),
            None if b == 1 => field.as_ref().map(|f| (&f.buf.s, f.buf.bytes())),
            None => None,
        };
        let held = field_buf.map_or(0, |f| f.1) + pbuf.as_ref().map_or(0, |p| p.bytes());
        let _busy = self.dev.tracker.in_use(ws.device_bytes() + held);
        let missing = || EngineError::Cuda("workspace buffer missing".into());
        let dummy = &ws.dummy.as_ref().ok_or_else(missing)?.s;
        let (c_img, c_lab, c_out, c_lab_out) = match caller {
            Some(c) => (
                Some(&*c.img),
                c.lab.as_deref(),
                Some(&mut *c.out),
                c.lab_out.as_deref_mut(),
            ),
            None => (None, None, None, None),
        };
        let args = ResampleArgs {
            lab: match c_lab {
                Some(l) => l,
                None if lab_ch > 0 => &ws.lab_in.as_ref().ok_or_else(missing)?.s,
                None => dummy,
            },
            lab_out: match (c_lab_out, ws.lab_out.as_mut()) {
                (Some(d), _) => d,
                (None, Some(l)) if lab_ch > 0 => &mut l.s,
                _ => &mut ws.dummy_out.as_mut().ok_or_else(missing)?.s,
            },
            field: match field_buf {
                Some((f, _)) if has_field || b > 1 => f,
                _ => dummy,
            },
            params: match &pbuf {
                None => SampleParams::One(&params[0]),
                Some(p) => SampleParams::Many(
                    &p.s,
                    ManyStrides {
                        img: if work.shared { 0 } else { (ch * n_coef) as i64 },
                        out: (ch * n_box) as i64,
                        lab: if work.shared {
                            0
                        } else {
                            (lab_ch * work.n_in()) as i64
                        },
                        lab_out: (lab_ch * n_box) as i64,
                        field: (work.ndim() * n_box) as i64,
                        zblocks: zblocks as i32,
                        samples: b as i32,
                    },
                ),
            },
        };
        let stream = &self.dev.stream;
        let e0 = self.event(stream)?;
        if half {
            let src = &ws.img_u16.as_ref().ok_or_else(missing)?.s;
            let out = &mut ws.out_u16.as_mut().ok_or_else(missing)?.s;
            launch_resample(stream, &f, name, grid, src, out, args)?;
        } else {
            let coef = if work.cubic() && work.mode.needs_prepad() {
                &ws.img_pad
            } else {
                &ws.img_f32
            };
            let src = match (c_img, work.cubic()) {
                (Some(d), false) => d,
                _ => &coef.as_ref().ok_or_else(missing)?.s,
            };
            let out = match c_out {
                Some(d) => d,
                None => &mut ws.out_f32.as_mut().ok_or_else(missing)?.s,
            };
            launch_resample(stream, &f, name, grid, src, out, args)?;
        }
        Ok((e0, self.event(stream)?))
    }

    /// The outputs back to the host (converted from the storage type), scattered into each job's
    /// buffers; the caller's device arrays stay on the device (converted there).
    fn download(
        &self,
        ws: &mut Workspace,
        work: &Work,
        jobs: &mut [(Job<'_>, Outputs<'_>)],
        precision: Precision,
        caller: Option<&mut Caller>,
    ) -> Result<(), EngineError> {
        let half = precision != Precision::F32;
        let missing = || EngineError::Cuda("workspace buffer missing".into());
        let per = work.channels * work.n_box();
        let len = work.b() * per;
        if let Some(c) = caller {
            if half {
                let src = ws.out_u16.as_ref().ok_or_else(missing)?;
                let mut defs = mode_defines(work.mode);
                defs.push(store_define(precision).into());
                let f = self.function(Family::Filter, &defs, "from_store_f32")?;
                let total = len as i64;
                let mut b = self.dev.stream.launch_builder(&f);
                b.arg(&src.s).arg(&mut *c.out).arg(&total);
                // SAFETY: from_store_f32(const store_t* src, float* dst, i64 n): out_u16 holds
                // len values of the build's store_t (ensured by the resample), the caller's
                // output len floats; bounds-checked per thread.
                unsafe { b.launch(grid_1d(len)?) }
                    .map_err(|e| driver_error("from_store_f32", e))?;
            }
            return Ok(());
        }
        let outs: Vec<(SendPtr, usize)> = work
            .todo
            .iter()
            .map(|&i| {
                let o = &mut jobs[i].1.image;
                (SendPtr(o.as_mut_ptr()), o.len())
            })
            .collect();
        if half {
            let src = ws.out_u16.as_ref().ok_or_else(missing)?;
            let conv: fn(u16) -> f32 = if precision == Precision::F16 {
                |b| half::f16::from_bits(b).to_f32()
            } else {
                |b| half::bf16::from_bits(b).to_f32()
            };
            let put = |o: &mut [f32], c: &[u16]| {
                for (o, &b) in o.iter_mut().zip(c) {
                    *o = conv(b);
                }
            };
            let take = |s, c: &[u16]| scatter_stacked_map(&outs, per, s, c, put);
            ws.pin_u16.download(&self.dev, &src.s, len, take)?;
        } else {
            let src = ws.out_f32.as_ref().ok_or_else(missing)?;
            let take = |s, c: &[f32]| scatter_stacked(&outs, per, s, c);
            ws.pin_f32.download(&self.dev, &src.s, len, take)?;
        }
        if work.lab_channels > 0 {
            let outs: Vec<(SendPtr, usize)> = work
                .todo
                .iter()
                .filter_map(|&i| {
                    let o = jobs[i].1.label.as_deref_mut()?;
                    Some((SendPtr(o.as_mut_ptr()), o.len()))
                })
                .collect();
            let per = work.lab_channels * work.n_box();
            let src = ws.lab_out.as_ref().ok_or_else(missing)?;
            let take = |s, c: &[f32]| scatter_stacked(&outs, per, s, c);
            ws.pin_f32
                .download(&self.dev, &src.s, work.b() * per, take)?;
        }
        Ok(())
    }
}
