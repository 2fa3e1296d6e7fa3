//! One engine call per batch on a CUDA device: `(B, C, *grid)` arrays (DLPack capsules) with one
//! plan per sample, transformed in batched launches with no wait for the device per sample
//! ([`CudaBackend::apply_device_batch`]).

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use augscope::Volume;
use augscope::augment::DoneList;
use augscope::engine::Job;
use augscope::engine::cuda::DeviceArrays;

use crate::checks::guard;
use crate::dlpack::{device_array, same_device};
use crate::{cuda_backend, engine_err, grid_of, plan_for};

/// Applies `plans[i]` (JSON) to sample i of arrays on a CUDA device: `image` `(B, C, *grid)`,
/// `out` `(B, C, *out_grid)` (every plan writes the same output grid); `label` and `label_out`
/// `(B, K, *grid)` and `(B, K, *out_grid)`, the label maps resampled with each sample's plan
/// (order 0, cval 0, no intensity steps) in the same launches. Returns the info JSON: `done` is
/// one list per sample, `timings_ms` covers the batch. The same bits as `apply` on that device,
/// sample by sample, with no copy through the host (a batch of one is the one-plan call).
#[pyfunction]
#[pyo3(signature = (image, out, plans, label=None, label_out=None, spacing=None, device=0, precision="f32"))]
#[allow(clippy::too_many_arguments)]
pub fn apply_cuda_batch(
    py: Python<'_>,
    image: &Bound<'_, PyAny>,
    out: &Bound<'_, PyAny>,
    plans: Vec<String>,
    label: Option<&Bound<'_, PyAny>>,
    label_out: Option<&Bound<'_, PyAny>>,
    spacing: Option<Vec<f64>>,
    device: usize,
    precision: &str,
) -> PyResult<String> {
    guard(|| {
        let img = device_array(image, "image")?;
        let out = device_array(out, "out")?;
        let lab = label.map(|l| device_array(l, "label")).transpose()?;
        let lab_out = label_out
            .map(|l| device_array(l, "label_out"))
            .transpose()?;
        if lab.is_some() != lab_out.is_some() {
            return Err(PyValueError::new_err("label and label_out come together"));
        }
        let mut all = vec![&img, &out];
        all.extend(lab.iter());
        all.extend(lab_out.iter());
        same_device(&all, device)?;
        let Some((&b, item)) = img.shape.split_first() else {
            return Err(PyValueError::new_err("image: a (B, C, *grid) array"));
        };
        if b != plans.len() || b == 0 {
            return Err(PyValueError::new_err(format!(
                "{} plans for a batch of {b} samples: one plan per sample",
                plans.len()
            )));
        }
        let (c, grid) = grid_of(item, true)?;
        let mut ready = Vec::with_capacity(b);
        let mut out_grid = None;
        for (i, text) in plans.iter().enumerate() {
            let (plan, g) = plan_for(text, c, &grid, false, spacing.as_deref(), false)?;
            match &out_grid {
                Some(first) if *first != g => {
                    return Err(PyValueError::new_err(format!(
                        "plan {i} writes {g:?}, plan 0 {first:?}: the samples of a batch share \
                         their output grid"
                    )));
                }
                Some(_) => {}
                None => out_grid = Some(g),
            }
            ready.push(plan);
        }
        let out_grid = out_grid.unwrap_or_default();
        let with_lead = |k: usize, g: &[usize]| {
            let mut s = vec![b, k];
            s.extend_from_slice(g);
            s
        };
        if out.shape != with_lead(c, &out_grid) {
            return Err(PyValueError::new_err(format!(
                "out has shape {:?}; these plans write {:?}",
                out.shape,
                with_lead(c, &out_grid)
            )));
        }
        let mut grid_vol = Volume::grid(grid.clone(), c);
        if let Some(s) = &spacing {
            grid_vol.spacing_mm = s.clone();
        }
        let lab_vol = match (&lab, &lab_out) {
            (Some(l), Some(lo)) => {
                let k = l.shape.get(1).copied().unwrap_or(0);
                if k == 0 || l.shape != with_lead(k, &grid) || lo.shape != with_lead(k, &out_grid) {
                    return Err(PyValueError::new_err(format!(
                        "label {:?} and label_out {:?} must be (B, K, *grid) and (B, K, \
                         *out_grid) with B {b}, grid {grid:?} and out_grid {out_grid:?}",
                        l.shape, lo.shape
                    )));
                }
                let mut v = Volume::grid(grid.clone(), k);
                v.spacing_mm = grid_vol.spacing_mm.clone();
                Some(v)
            }
            _ => None,
        };
        let backend = cuda_backend(device, precision)?;
        let arrays = DeviceArrays {
            image: img.ptr,
            label: lab.as_ref().map(|l| l.ptr),
            out: out.ptr,
            label_out: lab_out.as_ref().map(|l| l.ptr),
        };
        let timings = py
            .detach(|| {
                let jobs: Vec<Job<'_>> = ready
                    .iter()
                    .map(|plan| Job {
                        plan,
                        image: &grid_vol,
                        label: lab_vol.as_ref(),
                    })
                    .collect();
                // SAFETY: the four arrays were read from DLPack capsules the caller holds for
                // this call, checked above to be dense float32 on this device with the shapes
                // of B samples of the jobs' grids, one after another; the producer ordered its
                // stream before augscope's (cuda_stream), and the call returns only when the
                // engine's stream is done with them.
                unsafe { backend.apply_device_batch(&jobs, arrays) }
            })
            .map_err(engine_err)?;
        let done: Vec<_> = ready.iter().map(|p| p.done_list()).collect();
        let info = serde_json::json!({
            "backend": format!("cuda:{device}"), "note": null, "done": done,
            "timings_ms": timings, "model": "augscope", "model_steps": [],
            "host_bytes_copied": 0, "samples": b,
        });
        Ok(info.to_string())
    })
}
