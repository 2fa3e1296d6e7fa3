//! One job on one device: upload, the field, the prefilter, the fused resample of image and
//! label, download. A sentence on its length: the function is the one host path a single job
//! takes, stage after stage on one stream, and reads best in order.

use super::*;

impl DeviceEngine {
    pub(super) fn apply_locked(
        &self,
        st: &mut State,
        job: &Job<'_>,
        out: Outputs<'_>,
        precision: Precision,
        region: Region,
    ) -> Result<Timings, EngineError> {
        let t0 = Instant::now();
        let dio = region.device;
        let out_shape = match dio {
            None => check_job_region(job, &out, region.plane)?,
            Some(d) => check_device_job(job, &d, region)?,
        };
        let img = job.image;
        let plan = job.plan;
        let map = plan.compose(&img.shape)?;
        let mut timings = Timings::default();
        let n_in: usize = img.shape.iter().product();
        let n_all: usize = out_shape.iter().product();
        let channels = img.channels;
        let lab_channels = job.label.map_or(0, |l| l.channels);
        let stream = self.dev.stream.clone();
        // The caller's device arrays, borrowed for this call (check_device_job matched them to
        // the job's grids).
        // SAFETY: apply_device's contract: each address holds the values named here on this
        // device, alive and untouched by other work until the call returns.
        let (d_img, d_lab, mut d_out, mut d_lab_out) = match dio {
            Some(d) => unsafe {
                (
                    Some(Borrowed::<f32>::new(&stream, d.image, channels * n_in)),
                    d.label
                        .map(|a| Borrowed::<f32>::new(&stream, a, lab_channels * n_in)),
                    Some(Borrowed::<f32>::new(&stream, d.out, channels * n_all)),
                    d.label_out
                        .map(|a| Borrowed::<f32>::new(&stream, a, lab_channels * n_all)),
                )
            },
            None => (None, None, None, None),
        };
        if let (true, Some(src), Some(dst)) = (
            plan.is_identity() && out_shape == img.shape,
            d_img.as_ref(),
            d_out.as_mut(),
        ) {
            // Nothing moves: the input is the answer, copied on the device.
            stream
                .memcpy_dtod(&**src, &mut **dst)
                .map_err(|e| driver_error("copy", e))?;
            if let (Some(src), Some(dst)) = (d_lab.as_ref(), d_lab_out.as_mut()) {
                stream
                    .memcpy_dtod(&**src, &mut **dst)
                    .map_err(|e| driver_error("copy", e))?;
            }
            stream.synchronize().map_err(|e| driver_error("copy", e))?;
            timings.total_ms = t0.elapsed().as_secs_f64() * 1e3;
            return Ok(timings);
        }
        if plan.is_identity() && out_shape == img.shape {
            // Nothing moves: the input is the exact answer, as on the CPU engine.
            match region.plane {
                None => out.image.copy_from_slice(&img.data),
                Some((axis, index)) => copy_plane(img, axis, index, out.image),
            }
            if let (Some(l), Some(o)) = (job.label, out.label) {
                match region.plane {
                    None => o.copy_from_slice(&l.data),
                    Some((axis, index)) => copy_plane(l, axis, index, o),
                }
            }
            timings.total_ms = t0.elapsed().as_secs_f64() * 1e3;
            return Ok(timings);
        }
        let ndim = map.ndim;
        // The computed box: the whole grid, or one plane.
        let mut box_lo = [0usize; 3];
        let mut box_shape = out_shape.clone();
        if let Some((axis, index)) = region.plane {
            box_lo[axis] = index;
            box_shape[axis] = 1;
        }
        let n_out: usize = box_shape.iter().product();
        let cubic = plan.order == Order::Cubic;
        let half = precision != Precision::F32;
        // The resample and prefilter modules compile on other threads while this one builds the
        // field's (a first run's cost is then the longest compile, not their sum).
        let elastic = plan.elastic.filter(|e| e.alpha != 0.0);
        self.prefetch(
            Family::Resample,
            &resample_defines(
                plan.mode,
                plan.order,
                ndim,
                precision,
                n_in.max(job.label.map_or(0, |l| l.shape.iter().product())) >= 1 << 31,
            ),
            resample_entry(precision, channels, job.label.is_some(), elastic.is_some()),
        );
        if cubic {
            let pdefs = sampler_defines(plan.mode, Order::Cubic, ndim, precision);
            self.prefetch(Family::Prefilter, &pdefs, "pad_f32");
        }

        // 1. The unit elastic field, cached on the device. Queued, not waited for: the upload
        // below overlaps it (the host stages the image while the device computes the field).
        let mut field_time = FieldTime::Cached;
        // The upload targets are allocated first: buffers come from the stream-ordered pool of
        // the compute stream, and the copy stream, which waits only for `before_field`, must not
        // write one before its allocation (nor into memory that a freed, smaller buffer held
        // while earlier kernels still read it).
        let up_key = region.resident.map(|k| (k, precision, job.label.is_some()));
        let will_reuse = !cubic && up_key.is_some() && st.resident == up_key && dio.is_none();
        if dio.is_none() && !will_reuse {
            if half && !cubic {
                ensure(&self.dev, &mut st.ws.img_u16, channels * n_in, "the image")?;
            } else {
                ensure(&self.dev, &mut st.ws.img_f32, channels * n_in, "the image")?;
            }
            if let Some(l) = job.label {
                ensure(&self.dev, &mut st.ws.lab_in, l.data.len(), "the label map")?;
            }
        }
        // Everything queued before the field: what the image and label uploads must wait for.
        let before_field = self.event(&stream)?;
        let has_field = match plan.field_spec(&out_shape) {
            Some(spec) => {
                field_time = self.ensure_field(st, &spec)?;
                true
            }
            None => false,
        };

        // 2. Upload (f32, or the storage type directly when no prefilter is needed), unless the
        // caller's key says the same image (and label) is already on the device.
        let t_up = Instant::now();
        let (key, reuse) = (up_key, will_reuse);
        st.resident = None;
        let ws = &mut st.ws;
        let img_len = channels * n_in;
        if let Some(src) = d_img.as_ref() {
            // The caller's array on the device: read in place, except where the storage type or
            // the prefilter (which works in its buffer) needs a copy of its own.
            if cubic {
                let buf = ensure(&self.dev, &mut ws.img_f32, img_len, "the image")?;
                stream
                    .memcpy_dtod(&**src, &mut buf.s.slice_mut(0..img_len))
                    .map_err(|e| driver_error("copy", e))?;
            } else if half {
                let buf = ensure(&self.dev, &mut ws.img_u16, img_len, "the image")?;
                let pdefs = sampler_defines(plan.mode, Order::Cubic, ndim, precision);
                let f = self.function(Family::Prefilter, &pdefs, "to_store_f32")?;
                let total = img_len as i64;
                let mut b = stream.launch_builder(&f);
                b.arg(&**src).arg(&mut buf.s).arg(&total);
                // SAFETY: to_store_f32(const float* src, u16* dst, i64 n): the caller's image
                // holds img_len floats, buf >= img_len u16 (ensured); bounds-checked per thread.
                unsafe { b.launch(grid_1d(img_len)?) }
                    .map_err(|e| driver_error("to_store_f32", e))?;
            }
        } else if reuse {
            // The device copy of the last call with this key is still there.
        } else if half && !cubic {
            let buf = ensure(&self.dev, &mut ws.img_u16, img_len, "the image")?;
            let data = &img.data;
            let conv: fn(f32) -> u16 = if precision == Precision::F16 {
                |v| half::f16::from_f32(v).to_bits()
            } else {
                |v| half::bf16::from_f32(v).to_bits()
            };
            ws.pin_u16.upload(
                &self.dev,
                &mut buf.s,
                img_len,
                |s, c| {
                    let len = c.len();
                    for (o, &v) in c.iter_mut().zip(&data[s..s + len]) {
                        *o = conv(v);
                    }
                },
                Some(&before_field),
            )?;
        } else {
            let buf = ensure(&self.dev, &mut ws.img_f32, img_len, "the image")?;
            let data = &img.data;
            ws.pin_f32.upload(
                &self.dev,
                &mut buf.s,
                img_len,
                |s, c| c.copy_from_slice(&data[s..s + c.len()]),
                Some(&before_field),
            )?;
        }
        if let (Some(l), false, None) = (job.label, reuse, dio) {
            let buf = ensure(&self.dev, &mut ws.lab_in, l.data.len(), "the label map")?;
            let data = &l.data;
            ws.pin_f32.upload(
                &self.dev,
                &mut buf.s,
                data.len(),
                |s, c| c.copy_from_slice(&data[s..s + c.len()]),
                Some(&before_field),
            )?;
        }
        timings.upload_ms = t_up.elapsed().as_secs_f64() * 1e3;
        let now_resident = if cubic { None } else { key };

        // 3. Cubic: pad (nearest, grid-constant) and prefilter on the device, then store type.
        let e_pre0 = self.event(&stream)?;
        let (coef_shape, pad) = if cubic {
            self.prefilter_device(ws, plan.mode, &img.shape, channels, precision, plan.cval)?
        } else {
            (img.shape.clone(), 0.0)
        };
        let e_pre1 = self.event(&stream)?;

        // 4. The fused resample.
        let mut p = resample_params(&map, has_field, plan.cval);
        p.box_lo = [box_lo[0] as i32, box_lo[1] as i32, box_lo[2] as i32];
        p.box_shape = shape3(&box_shape);
        p.n_box = n_out as i64;
        p.pad = pad;
        p.n_in = coef_shape.iter().product::<usize>() as i64;
        p.in_shape = shape3(&coef_shape);
        p.channels = channels as i32;
        if let Some(l) = job.label {
            p.has_label = 1;
            p.lab_channels = l.channels as i32;
            p.n_lab = n_in as i64;
        }
        let name = resample_entry(precision, channels, job.label.is_some(), has_field);
        // Channels of 2^31 elements or more need 64-bit tap offsets.
        let idx64 = p.n_in.max(p.n_lab) >= 1 << 31;
        let rdefs = resample_defines(plan.mode, plan.order, ndim, precision, idx64);
        let f = self.function(Family::Resample, &rdefs, name)?;
        ensure(&self.dev, &mut ws.dummy, 1, "a placeholder")?;
        ensure(&self.dev, &mut ws.dummy_out, 1, "a placeholder")?;
        if job.label.is_some() && dio.is_none() {
            ensure(
                &self.dev,
                &mut ws.lab_out,
                lab_channels * n_out,
                "the label output",
            )?;
        }
        if half {
            ensure(&self.dev, &mut ws.out_u16, channels * n_out, "the output")?;
        } else if dio.is_none() {
            ensure(&self.dev, &mut ws.out_f32, channels * n_out, "the output")?;
        }
        let _busy = self
            .dev
            .tracker
            .in_use(ws.device_bytes() + st.field.as_ref().map_or(0, |f| f.buf.bytes()));
        let missing = || EngineError::Cuda("workspace buffer missing".into());
        let dummy = ws.dummy.as_ref().ok_or_else(missing)?;
        let field = match &st.field {
            Some(f) if has_field => &f.buf.s,
            _ => &dummy.s,
        };
        let lab_in = match (&d_lab, job.label) {
            (Some(l), _) => &**l,
            (None, Some(_)) => &ws.lab_in.as_ref().ok_or_else(missing)?.s,
            (None, None) => &dummy.s,
        };
        let e_rs0 = self.event(&stream)?;
        if half {
            let src = &ws.img_u16.as_ref().ok_or_else(missing)?.s;
            let out_buf = &mut ws.out_u16.as_mut().ok_or_else(missing)?.s;
            let lab_out = match (d_lab_out.as_mut(), ws.lab_out.as_mut()) {
                (Some(d), _) => &mut **d,
                (None, Some(b)) if job.label.is_some() => &mut b.s,
                _ => &mut ws.dummy_out.as_mut().ok_or_else(missing)?.s,
            };
            let mut b = stream.launch_builder(&f);
            b.arg(src)
                .arg(out_buf)
                .arg(lab_in)
                .arg(lab_out)
                .arg(field)
                .arg(&p);
            // SAFETY: resample_{f16,bf16} or resample_plain[f]_{f16,bf16}, the same arguments
            // (const u16* img, u16* out, const float* lab,
            // float* lab_out, const float* field, ResampleParams): img holds channels * n_in
            // coefficients, out channels * n_out, lab/lab_out lab_channels * n_in / n_out (or the
            // 1-element placeholder when has_label = 0, never read), field ndim * n_out (or the
            // placeholder when has_field = 0); all ensured above; one thread per output voxel,
            // bounds-checked against out_shape (output_voxel).
            unsafe { b.launch(grid_out_k(&box_shape, resample_k())?) }
                .map_err(|e| driver_error(name, e))?;
        } else {
            let src = if cubic && plan.mode.needs_prepad() {
                &ws.img_pad
            } else {
                &ws.img_f32
            };
            let src = match (&d_img, cubic) {
                (Some(d), false) => &**d,
                _ => &src.as_ref().ok_or_else(missing)?.s,
            };
            let out_buf = match d_out.as_mut() {
                Some(d) => &mut **d,
                None => &mut ws.out_f32.as_mut().ok_or_else(missing)?.s,
            };
            let lab_out = match (d_lab_out.as_mut(), ws.lab_out.as_mut()) {
                (Some(d), _) => &mut **d,
                (None, Some(b)) if job.label.is_some() => &mut b.s,
                _ => &mut ws.dummy_out.as_mut().ok_or_else(missing)?.s,
            };
            let mut b = stream.launch_builder(&f);
            b.arg(src)
                .arg(out_buf)
                .arg(lab_in)
                .arg(lab_out)
                .arg(field)
                .arg(&p);
            // SAFETY: resample_f32 or resample_plain[f]_f32, the same arguments (const float* img,
            // float* out, const float* lab, float* lab_out,
            // const float* field, ResampleParams): the same lengths as above, in f32; all
            // ensured above; bounds-checked against out_shape (output_voxel).
            unsafe { b.launch(grid_out_k(&box_shape, resample_k())?) }
                .map_err(|e| driver_error(name, e))?;
        }
        let e_rs1 = self.event(&stream)?;

        // 5. Download (and convert from the storage type); device outputs stay on the device.
        let t_down = Instant::now();
        if let Some(dst) = d_out.as_mut() {
            if half {
                let src = ws.out_u16.as_ref().ok_or_else(missing)?;
                let mut defs = mode_defines(plan.mode);
                defs.push(store_define(precision).into());
                let f = self.function(Family::Filter, &defs, "from_store_f32")?;
                let total = (channels * n_out) as i64;
                let mut b = stream.launch_builder(&f);
                b.arg(&src.s).arg(&mut **dst).arg(&total);
                // SAFETY: from_store_f32(const store_t* src, float* dst, i64 n): out_u16 holds
                // channels * n_out values of the build's store_t (ensured above), the caller's
                // output channels * n_out floats; bounds-checked per thread.
                unsafe { b.launch(grid_1d(channels * n_out)?) }
                    .map_err(|e| driver_error("from_store_f32", e))?;
            }
            timings.download_ms = t_down.elapsed().as_secs_f64() * 1e3;
            self.finish(ws, [&e_pre0, &e_pre1, &e_rs0, &e_rs1], &mut timings)?;
            timings.field_ms = field_time.ms()?;
            timings.total_ms = t0.elapsed().as_secs_f64() * 1e3;
            return Ok(timings);
        }
        let out_ptr = SendPtr(out.image.as_mut_ptr());
        let out_len = out.image.len();
        if half {
            let src = ws.out_u16.as_ref().ok_or_else(missing)?;
            let conv: fn(u16) -> f32 = if precision == Precision::F16 {
                |b| half::f16::from_bits(b).to_f32()
            } else {
                |b| half::bf16::from_bits(b).to_f32()
            };
            ws.pin_u16
                .download(&self.dev, &src.s, channels * n_out, |s, c| {
                    // SAFETY-free: disjoint ranges of `out.image` per chunk (see SendPtr::slice).
                    let o = out_ptr.slice(s, c.len(), out_len);
                    for (o, &b) in o.iter_mut().zip(c) {
                        *o = conv(b);
                    }
                })?;
        } else {
            let src = ws.out_f32.as_ref().ok_or_else(missing)?;
            ws.pin_f32
                .download(&self.dev, &src.s, channels * n_out, |s, c| {
                    out_ptr.slice(s, c.len(), out_len).copy_from_slice(c);
                })?;
        }
        if let (Some(l), Some(lo)) = (job.label, out.label) {
            let src = ws.lab_out.as_ref().ok_or_else(missing)?;
            let ptr = SendPtr(lo.as_mut_ptr());
            let len = lo.len();
            ws.pin_f32
                .download(&self.dev, &src.s, l.channels * n_out, |s, c| {
                    ptr.slice(s, c.len(), len).copy_from_slice(c);
                })?;
        }
        timings.download_ms = t_down.elapsed().as_secs_f64() * 1e3;
        self.finish(ws, [&e_pre0, &e_pre1, &e_rs0, &e_rs1], &mut timings)?;
        timings.field_ms = field_time.ms()?;
        st.resident = now_resident;
        timings.total_ms = t0.elapsed().as_secs_f64() * 1e3;
        Ok(timings)
    }
}
