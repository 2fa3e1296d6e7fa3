//! Batches: what jobs must share to run in one batched launch ([`many_key`]), the grouping of
//! their fields by sigma, the stacking of their arrays for the copies, and how a device works
//! through its share of a batch (as many jobs per launch as its memory allows). The launches
//! themselves take the one host path of `transform.rs`.

use cudarc::driver::DeviceRepr;

use crate::core::{Mode, Order};
use crate::engine::{EngineError, Job, Outputs, Precision, Timings};
use crate::gpu::buffer::SendPtr;

use super::DeviceEngine;
use super::kernels::{grid_out_k, resample_k};
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
    fill_stacked_map(parts, per, s, c, |d, v| d.copy_from_slice(v));
}

/// As [`fill_stacked`], each piece written by `put(destination, source)` (a conversion to the
/// storage type, say).
pub(super) fn fill_stacked_map<T>(
    parts: &[&[f32]],
    per: usize,
    s: usize,
    c: &mut [T],
    put: impl Fn(&mut [T], &[f32]),
) {
    let mut done = 0;
    while done < c.len() {
        let at = s + done;
        let (j, off) = (at / per, at % per);
        let take = (per - off).min(c.len() - done);
        put(&mut c[done..done + take], &parts[j][off..off + take]);
        done += take;
    }
}

/// Writes `c` (elements `s..` of the concatenation of the outputs, `per` elements each) into
/// the outputs; concurrent callers write disjoint ranges (see [`SendPtr`]).
pub(super) fn scatter_stacked(outs: &[(SendPtr, usize)], per: usize, s: usize, c: &[f32]) {
    scatter_stacked_map(outs, per, s, c, |o, v| o.copy_from_slice(v));
}

/// As [`scatter_stacked`], each piece written by `put(output, source)` (a conversion from the
/// storage type, say).
pub(super) fn scatter_stacked_map<T>(
    outs: &[(SendPtr, usize)],
    per: usize,
    s: usize,
    c: &[T],
    put: impl Fn(&mut [f32], &[T]),
) {
    let mut done = 0;
    while done < c.len() {
        let at = s + done;
        let (j, off) = (at / per, at % per);
        let take = (per - off).min(c.len() - done);
        put(outs[j].0.slice(off, take, outs[j].1), &c[done..done + take]);
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
