//! Many samples of one shape in batched launches: samples stacked along a leading axis, one field
//! pass per sigma group, one resample launch for the batch. It shares its stages with the single
//! job's path (`single.rs`): the staged copies (`gpu::buffer::Staging`), the prefilter
//! (`prefilter_device`), the field passes and the timing (`finish`); the two differ in what a
//! single job alone has (a plane, f16/bf16 storage, the caller's device arrays, the cached field
//! and the resident image). A sentence on its length: like the single path, the function is the
//! batch's stages in order on one stream, and reads best in order.

use super::*;

impl DeviceEngine {
    pub(super) fn apply_many_locked(
        &self,
        st: &mut State,
        jobs: &mut [(Job<'_>, Outputs<'_>)],
        precision: Precision,
    ) -> Result<Timings, EngineError> {
        let t0 = Instant::now();
        let mut timings = Timings::default();
        let Some(first) = jobs.first() else {
            return Ok(timings);
        };
        let key = many_key(&first.0, precision)
            .ok_or_else(|| EngineError::Cuda("this job cannot be batched".into()))?;
        let img0 = first.0.image;
        let lab0 = first.0.label;
        let (channels, in_shape) = (img0.channels, img0.shape.clone());
        let lab_channels = lab0.map_or(0, |l| l.channels);
        // Checked per job: the same key, valid buffers; identity plans are copied here.
        let mut todo = vec![];
        let mut maps = vec![];
        let mut out_shape = vec![];
        for (i, (job, out)) in jobs.iter_mut().enumerate() {
            if many_key(job, precision).as_ref() != Some(&key) {
                return Err(EngineError::Cuda(
                    "jobs of different kinds in one batch".into(),
                ));
            }
            let shape = check_job_region(job, out, None)?;
            if job.plan.is_identity() && shape == job.image.shape {
                out.image.copy_from_slice(&job.image.data);
                if let (Some(l), Some(o)) = (job.label, out.label.as_deref_mut()) {
                    o.copy_from_slice(&l.data);
                }
                continue;
            }
            maps.push(job.plan.compose(&job.image.shape)?);
            todo.push(i);
            out_shape = shape;
        }
        if todo.is_empty() {
            timings.total_ms = t0.elapsed().as_secs_f64() * 1e3;
            return Ok(timings);
        }
        let b = todo.len();
        let ndim = in_shape.len();
        let n_in: usize = in_shape.iter().product();
        let n_out: usize = out_shape.iter().product();
        // Every module this batch launches compiles at once on other threads (a first batch's
        // cost is then the longest compile, not their sum).
        self.prefetch(
            Family::Resample,
            &resample_defines(key.mode, key.order, ndim, Precision::F32, n_in >= 1 << 31),
            resample_many_entry(channels, lab_channels > 0),
        );
        if key.order == Order::Cubic {
            let pdefs = sampler_defines(key.mode, Order::Cubic, ndim, Precision::F32);
            self.prefetch(Family::Prefilter, &pdefs, "pad_f32");
        }
        // Each sample's field sigmas (none without elastic), used again for the passes below.
        let sigmas: Vec<Option<Vec<f64>>> = todo
            .iter()
            .map(|&i| {
                let plan = jobs[i].0.plan;
                match plan.elastic {
                    Some(e) if e.alpha != 0.0 => plan.field_sigma_vox(ndim),
                    _ => None,
                }
            })
            .collect();
        for &s in sigmas.iter().flatten().flatten() {
            self.prefetch(Family::Field, &field_defines(s), "gauss_mid_f32");
        }
        // One image (and label map) for every sample, or one each.
        let shared = todo.iter().all(|&i| {
            std::ptr::eq(jobs[i].0.image, img0)
                && match (jobs[i].0.label, lab0) {
                    (Some(a), Some(b)) => std::ptr::eq(a, b),
                    (None, None) => true,
                    _ => false,
                }
        });
        let copies = if shared { 1 } else { b };
        let mut grid = grid_out_k(&out_shape, resample_k())?;
        let zblocks = grid.grid_dim.2 as usize;
        if zblocks * b > 65535 {
            return Err(EngineError::Shape(format!(
                "{b} samples of {out_shape:?} are too many for one launch"
            )));
        }
        grid.grid_dim.2 = (zblocks * b) as u32;
        st.resident = None;

        // 1. Upload the image(s) and label map(s).
        let t_up = Instant::now();
        let ws = &mut st.ws;
        let imgs: Vec<&[f32]> = todo[..copies]
            .iter()
            .map(|&i| &jobs[i].0.image.data[..])
            .collect();
        let per = channels * n_in;
        let buf = ensure(&self.dev, &mut ws.img_f32, copies * per, "the images")?;
        ws.pin_f32.upload(
            &self.dev,
            &mut buf.s,
            copies * per,
            |s, c| fill_stacked(&imgs, per, s, c),
            None,
        )?;
        if lab_channels > 0 {
            let labs: Vec<&[f32]> = todo[..copies]
                .iter()
                .filter_map(|&i| jobs[i].0.label.map(|l| &l.data[..]))
                .collect();
            let per = lab_channels * n_in;
            let buf = ensure(&self.dev, &mut ws.lab_in, copies * per, "the label maps")?;
            ws.pin_f32.upload(
                &self.dev,
                &mut buf.s,
                copies * per,
                |s, c| fill_stacked(&labs, per, s, c),
                None,
            )?;
        }
        timings.upload_ms = t_up.elapsed().as_secs_f64() * 1e3;

        // Order 3: every image's coefficients, in one set of launches.
        let cubic = key.order == Order::Cubic;
        let e_pre0 = self.event(&self.dev.stream)?;
        let (coef_shape, pad) = if cubic {
            let cval = jobs[todo[0]].0.plan.cval;
            self.prefilter_device(
                ws,
                key.mode,
                &in_shape,
                copies * channels,
                Precision::F32,
                cval,
            )?
        } else {
            (in_shape.clone(), 0.0)
        };
        let e_pre1 = self.event(&self.dev.stream)?;
        let n_coef: usize = coef_shape.iter().product();

        // 2. The fields: one set of passes per sigma, over all of its samples.
        let (slots, groups) = field_slots(&sigmas);
        let n_slots: usize = groups.iter().map(|g| g.1.len()).sum();
        let field = if n_slots > 0 {
            let mut fbuf =
                DevBuf::<f32>::new(&self.dev, n_slots * ndim * n_out, "the elastic fields")?;
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
            for (k, slot) in slots.iter().enumerate() {
                if let (Some(slot), Some(e)) = (slot, jobs[todo[k]].0.plan.elastic) {
                    seeds[*slot] = e.seed;
                }
            }
            let host_keys = philox_keys(&seeds);
            let mut kernels = vec![];
            for (sigma, _) in &groups {
                kernels.push(self.field_kernels(sigma, &out_shape)?);
            }
            let keys = self.upload_keys(&mut ws.keys, &host_keys)?;
            let e0 = self.event(&self.dev.stream)?;
            let mut slot0 = 0;
            for ((_, members), k) in groups.iter().zip(&kernels) {
                let g = members.len();
                let len = g * ndim * n_out;
                let mut out = fbuf
                    .s
                    .slice_mut(slot0 * ndim * n_out..slot0 * ndim * n_out + len);
                let mut scr = scratch.s.slice_mut(0..len);
                self.field_passes(
                    k,
                    &out_shape,
                    keys,
                    &host_keys,
                    slot0 * ndim,
                    g * ndim,
                    0..ndim,
                    &mut out,
                    &mut scr,
                )?;
                slot0 += g;
            }
            let e1 = self.event(&self.dev.stream)?;
            e1.synchronize()
                .map_err(|e| driver_error("the elastic fields", e))?;
            timings.field_ms = e0.elapsed_ms(&e1).map_err(|e| driver_error("timing", e))? as f64;
            Some(fbuf)
        } else {
            None
        };

        // 3. Every sample's parameters, then one launch.
        let mut params = Vec::with_capacity(b);
        for (k, map) in maps.iter().enumerate() {
            let plan = jobs[todo[k]].0.plan;
            let mut p = resample_params(map, slots[k].is_some(), plan.cval);
            p.channels = channels as i32;
            p.pad = pad;
            p.n_in = n_coef as i64;
            p.in_shape = shape3(&coef_shape);
            p.field_slot = slots[k].unwrap_or(0) as i32;
            if lab_channels > 0 {
                p.has_label = 1;
                p.lab_channels = lab_channels as i32;
                p.n_lab = n_in as i64;
            }
            params.push(p);
        }
        let mut pbuf = DevBuf::<ResampleParams>::new(&self.dev, b, "the sample parameters")?;
        self.dev
            .stream
            .memcpy_htod(&params, &mut pbuf.s)
            .map_err(|e| driver_error("the sample parameters", e))?;
        let name = resample_many_entry(channels, lab_channels > 0);
        let f = self.function(
            Family::Resample,
            &resample_defines(
                key.mode,
                key.order,
                ndim,
                Precision::F32,
                n_coef.max(n_in) >= 1 << 31,
            ),
            name,
        )?;
        ensure(&self.dev, &mut ws.dummy, 1, "a placeholder")?;
        ensure(&self.dev, &mut ws.dummy_out, 1, "a placeholder")?;
        ensure(
            &self.dev,
            &mut ws.out_f32,
            b * channels * n_out,
            "the outputs",
        )?;
        if lab_channels > 0 {
            ensure(
                &self.dev,
                &mut ws.lab_out,
                b * lab_channels * n_out,
                "the label outputs",
            )?;
        }
        let _busy = self
            .dev
            .tracker
            .in_use(ws.device_bytes() + field.as_ref().map_or(0, |f| f.bytes()) + pbuf.bytes());
        let missing = || EngineError::Cuda("workspace buffer missing".into());
        let strides = ManyStrides {
            img: if shared {
                0
            } else {
                (channels * n_coef) as i64
            },
            out: (channels * n_out) as i64,
            lab: if shared {
                0
            } else {
                (lab_channels * n_in) as i64
            },
            lab_out: (lab_channels * n_out) as i64,
            field: (ndim * n_out) as i64,
            zblocks: zblocks as i32,
            samples: b as i32,
        };
        let dummy = &ws.dummy.as_ref().ok_or_else(missing)?.s;
        let field_s = field.as_ref().map_or(dummy, |f| &f.s);
        let lab_in = if lab_channels > 0 {
            &ws.lab_in.as_ref().ok_or_else(missing)?.s
        } else {
            dummy
        };
        let src = if cubic && key.mode.needs_prepad() {
            &ws.img_pad
        } else {
            &ws.img_f32
        };
        let src = &src.as_ref().ok_or_else(missing)?.s;
        let out_buf = &mut ws.out_f32.as_mut().ok_or_else(missing)?.s;
        let lab_out = match ws.lab_out.as_mut() {
            Some(l) if lab_channels > 0 => &mut l.s,
            _ => &mut ws.dummy_out.as_mut().ok_or_else(missing)?.s,
        };
        let stream = self.dev.stream.clone();
        let e_rs0 = self.event(&stream)?;
        let mut lb = stream.launch_builder(&f);
        lb.arg(src)
            .arg(out_buf)
            .arg(lab_in)
            .arg(lab_out)
            .arg(field_s)
            .arg(&pbuf.s)
            .arg(&strides);
        // SAFETY: resample_many_f32 or resample_many_plain_f32, the same arguments (const float*
        // img, float* out, const float* lab, float* lab_out, const float* field,
        // const ResampleParams* ps, ManyStrides st): img holds `copies` images of
        // channels * n_coef (the padded coefficients for order 3; stride 0 when shared), out
        // b * channels * n_out, lab and lab_out likewise for the label channels (or the
        // 1-element placeholders when has_label = 0, never read), field n_slots * ndim * n_out with every field_slot below
        // n_slots (or the placeholder when no sample has a field, has_field = 0), ps b
        // parameter sets; grid.z = zblocks * b and blocks with s >= b return; every voxel is
        // bounds-checked against its sample's box (output_voxel).
        unsafe { lb.launch(grid) }.map_err(|e| driver_error(name, e))?;
        let e_rs1 = self.event(&stream)?;

        // 4. Download into each job's buffers.
        let t_down = Instant::now();
        let outs: Vec<(SendPtr, usize)> = todo
            .iter()
            .map(|&i| {
                let o = &mut jobs[i].1.image;
                (SendPtr(o.as_mut_ptr()), o.len())
            })
            .collect();
        let per = channels * n_out;
        let src = ws.out_f32.as_ref().ok_or_else(missing)?;
        ws.pin_f32.download(&self.dev, &src.s, b * per, |s, c| {
            scatter_stacked(&outs, per, s, c)
        })?;
        if lab_channels > 0 {
            let outs: Vec<(SendPtr, usize)> = todo
                .iter()
                .filter_map(|&i| {
                    jobs[i]
                        .1
                        .label
                        .as_deref_mut()
                        .map(|o| (SendPtr(o.as_mut_ptr()), o.len()))
                })
                .collect();
            let per = lab_channels * n_out;
            let src = ws.lab_out.as_ref().ok_or_else(missing)?;
            ws.pin_f32.download(&self.dev, &src.s, b * per, |s, c| {
                scatter_stacked(&outs, per, s, c)
            })?;
        }
        timings.download_ms = t_down.elapsed().as_secs_f64() * 1e3;
        self.finish(ws, [&e_pre0, &e_pre1, &e_rs0, &e_rs1], &mut timings)?;
        timings.total_ms = t0.elapsed().as_secs_f64() * 1e3;
        Ok(timings)
    }
}

/// What jobs must share to run in one batched launch ([`DeviceEngine::apply_many`]).
#[derive(Clone, Debug, PartialEq)]
pub struct ManyKey {
    pub(super) in_shape: Vec<usize>,
    pub(super) channels: usize,
    pub(super) out_shape: Vec<usize>,
    pub(super) mode: Mode,
    pub(super) order: Order,
    pub(super) lab_channels: Option<usize>,
    /// The cval the order-3 grid-constant prepad writes (bits).
    pub(super) pad_cval: Option<u32>,
}

/// The batch a job can join, or `None` when it runs alone: half-precision storage takes the
/// single-volume path. Order 3 prefilters once per batch (every image of the batch, padded with
/// one cval in grid-constant mode).
pub fn many_key(job: &Job<'_>, precision: Precision) -> Option<ManyKey> {
    let plan = job.plan;
    if precision != Precision::F32 {
        return None;
    }
    if !matches!(job.image.ndim(), 2 | 3) {
        return None;
    }
    Some(ManyKey {
        in_shape: job.image.shape.clone(),
        channels: job.image.channels,
        out_shape: plan
            .out_shape
            .clone()
            .unwrap_or_else(|| job.image.shape.clone()),
        mode: plan.mode,
        order: plan.order,
        lab_channels: job.label.map(|l| l.channels),
        pad_cval: (plan.order == Order::Cubic && plan.mode == Mode::GridConstant)
            .then(|| plan.cval.to_bits()),
    })
}

/// Samples that share a sigma: the per-axis sigmas and the samples' indices.
pub type SigmaGroup = (Vec<f64>, Vec<usize>);

/// The field slot of each sample (`None`: no elastic field) and the groups of samples that share
/// a sigma (the per-axis sigmas, compared bit for bit), in slot order: group g's samples take
/// consecutive slots, so that one set of passes makes all of their fields.
pub fn field_slots(sigmas: &[Option<Vec<f64>>]) -> (Vec<Option<usize>>, Vec<SigmaGroup>) {
    let mut groups: Vec<SigmaGroup> = vec![];
    for (i, s) in sigmas.iter().enumerate() {
        let Some(s) = s else { continue };
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        match groups.iter_mut().find(|g| bits(&g.0) == bits(s)) {
            Some(g) => g.1.push(i),
            None => groups.push((s.clone(), vec![i])),
        }
    }
    let mut slots = vec![None; sigmas.len()];
    let mut next = 0;
    for (_, members) in &groups {
        for &i in members {
            slots[i] = Some(next);
            next += 1;
        }
    }
    (slots, groups)
}

/// Fills `c` (elements `s..s + c.len()` of the concatenation of `parts`, `per` elements each).
pub(super) fn fill_stacked(parts: &[&[f32]], per: usize, s: usize, c: &mut [f32]) {
    let mut done = 0;
    while done < c.len() {
        let at = s + done;
        let (j, off) = (at / per, at % per);
        let take = (per - off).min(c.len() - done);
        c[done..done + take].copy_from_slice(&parts[j][off..off + take]);
        done += take;
    }
}

/// Writes `c` (elements `s..` of the concatenation of the outputs, `per` elements each) into
/// the outputs; concurrent callers write disjoint ranges (see [`SendPtr`]).
pub(super) fn scatter_stacked(outs: &[(SendPtr, usize)], per: usize, s: usize, c: &[f32]) {
    let mut done = 0;
    while done < c.len() {
        let at = s + done;
        let (j, off) = (at / per, at % per);
        let take = (per - off).min(c.len() - done);
        outs[j]
            .0
            .slice(off, take, outs[j].1)
            .copy_from_slice(&c[done..done + take]);
        done += take;
    }
}

/// Element strides between the samples of `resample_many_*`; must match `struct ManyStrides` in
/// kernels/resample.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct ManyStrides {
    pub(super) img: i64,
    pub(super) out: i64,
    pub(super) lab: i64,
    pub(super) lab_out: i64,
    pub(super) field: i64,
    pub(super) zblocks: i32,
    pub(super) samples: i32,
}

// SAFETY: #[repr(C)], plain old data (i64 and i32 only), laid out as `struct ManyStrides` in
// kernels/resample.cu (48 bytes, 8-byte aligned).
unsafe impl DeviceRepr for ManyStrides {}

impl DeviceEngine {
    /// How many jobs like `job` one batched launch takes: what fits a quarter of the driver's
    /// free memory (and half of an `AUGSCOPE_GPU_MEM_LIMIT`), at most 8 GiB and 256 samples,
    /// and the grid's z limit.
    pub(super) fn many_capacity(&self, job: &Job<'_>) -> usize {
        let out_shape = job
            .plan
            .out_shape
            .clone()
            .unwrap_or_else(|| job.image.shape.clone());
        let n_out: usize = out_shape.iter().product();
        let n_in: usize = job.image.shape.iter().product();
        let ndim = out_shape.len();
        let lab = job.label.map_or(0, |l| l.channels);
        // Field and its scratch, outputs, and an image and label map each (when not shared).
        let per_sample =
            4 * (2 * ndim * n_out + (job.image.channels + lab) * (n_out + n_in)) + 1024;
        let stats = self.dev.mem_stats();
        let mut budget = (stats.driver_free_bytes / 4).min(8 << 30);
        if let Some(l) = stats.limit_bytes {
            budget = budget.min(l / 2);
        }
        let zblocks = grid_out_k(&out_shape, resample_k())
            .map_or(1, |g| g.grid_dim.2 as usize)
            .max(1);
        (budget / per_sample).clamp(1, 256).min(65535 / zblocks)
    }

    /// This device's share of [`CudaBackend::apply_batch`].
    pub(super) fn run_jobs(
        &self,
        work: Vec<(usize, Job<'_>, Outputs<'_>)>,
        precision: Precision,
    ) -> Vec<(usize, Result<Timings, EngineError>)> {
        let mut results = Vec::with_capacity(work.len());
        let mut it = work.into_iter().peekable();
        while let Some((i, job, out)) = it.next() {
            let Some(key) = many_key(&job, precision) else {
                results.push((i, self.apply(job, out, precision)));
                continue;
            };
            let cap = self.many_capacity(&job);
            let mut ids = vec![i];
            let mut chunk = vec![(job, out)];
            while chunk.len() < cap {
                match it.next_if(|(_, j, _)| many_key(j, precision).as_ref() == Some(&key)) {
                    Some((i, j, o)) => {
                        ids.push(i);
                        chunk.push((j, o));
                    }
                    None => break,
                }
            }
            if chunk.len() == 1 {
                for (i, (j, o)) in ids.into_iter().zip(chunk) {
                    results.push((i, self.apply(j, o, precision)));
                }
                continue;
            }
            match self.apply_many(&mut chunk, precision) {
                Ok(t) => {
                    let t = Timings {
                        batched: Some(chunk.len()),
                        ..t
                    };
                    results.extend(ids.into_iter().map(|i| (i, Ok(t.clone()))));
                }
                Err(_) => {
                    // One by one: each job gets its own result (or error).
                    for (i, (j, o)) in ids.into_iter().zip(chunk) {
                        results.push((i, self.apply(j, o, precision)));
                    }
                }
            }
        }
        results
    }
}
