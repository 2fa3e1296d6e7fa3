//! The engines the tests run plans on: the CPU backend always, the CUDA backend on device 0
//! where one opens (tests skip the CUDA part with a printed reason where none does), and the
//! check of a plan on the GPU against the CPU engine (values within 1e-4 on 99.99 % of voxels,
//! labels equal away from order-0 ties). Arrays are `[z, y, x]`.

use augscope::engine::cpu::{CpuBackend, coordinates};
use augscope::engine::cuda::CudaBackend;
use augscope::engine::{Backend, Precision, apply_new};
use augscope::{Plan, Volume};

/// A CUDA backend on device 0, or None with the reason printed (the caller's test skips).
pub fn gpu(precision: Precision) -> Option<CudaBackend> {
    match CudaBackend::new(&[0], precision) {
        Ok(b) => Some(b),
        Err(e) => {
            super::skipped(&format!("no usable CUDA device ({e})"));
            None
        }
    }
}

/// Runs `f` on the CPU backend, then on the CUDA backend of device 0 (f32 storage) where one
/// opens; without a usable device the CUDA run is skipped with a printed reason.
pub fn for_each_backend(mut f: impl FnMut(&dyn Backend)) {
    f(&CpuBackend::new());
    if let Some(g) = gpu(Precision::F32) {
        f(&g);
    }
}

/// Fraction of values within `tol`, the largest difference, and NaN count.
pub fn agreement(a: &[f32], b: &[f32], tol: f32) -> (f64, f32, usize) {
    assert_eq!(a.len(), b.len());
    let mut ok = 0usize;
    let mut worst = 0f32;
    let mut nan = 0usize;
    for (&x, &y) in a.iter().zip(b) {
        if x.is_nan() || y.is_nan() {
            nan += 1;
            continue;
        }
        let d = (x - y).abs();
        worst = worst.max(d);
        if d <= tol {
            ok += 1;
        }
    }
    (ok as f64 / a.len().max(1) as f64, worst, nan)
}

/// The plan on the GPU against the CPU engine; panics with `what` where they differ.
pub fn check_plan(
    gpu: &CudaBackend,
    plan: &Plan,
    image: &Volume,
    label: Option<&Volume>,
    what: &str,
) {
    let cpu = CpuBackend::new();
    let (want, want_lab, _) =
        apply_new(&cpu, plan, image, label).expect("the CPU engine runs the plan");
    let (got, got_lab, _) =
        apply_new(gpu, plan, image, label).unwrap_or_else(|e| panic!("{what}: {e}"));
    let (frac, worst, nan) = agreement(&want.data, &got.data, 1e-4);
    assert_eq!(nan, 0, "{what}: NaN");
    assert!(
        frac >= 0.9999,
        "{what}: only {:.5} % within 1e-4 (worst {worst})",
        frac * 100.0
    );
    if let (Some(a), Some(b)) = (want_lab, got_lab) {
        let map = plan.compose(&image.shape).expect("the plan fits the image");
        let field = cpu.field(plan, &map.out_shape).map(|(f, _)| f);
        let coords = coordinates(&map, field.as_deref());
        let n: usize = map.out_shape.iter().product();
        let tie = |i: usize| {
            (0..map.ndim).any(|ax| {
                let x = coords[ax * n + i % n] as f64;
                ((x - x.floor()) - 0.5).abs() < 1e-4
            })
        };
        let diff: Vec<usize> = (0..a.data.len())
            .filter(|&i| a.data[i] != b.data[i])
            .collect();
        let real = diff.iter().filter(|&&i| !tie(i)).count();
        if !diff.is_empty() {
            eprintln!(
                "{what}: {} label voxels differ, all but {real} at order-0 ties",
                diff.len()
            );
        }
        assert_eq!(real, 0, "{what}: {real} label voxels differ away from ties");
    }
}

/// The image outputs of `plans` on `image`, run as one batch of `backend` (`Backend::apply_many`:
/// on CUDA, batched launches); a job that fails fails the test.
pub fn apply_many_images(backend: &dyn Backend, plans: &[&Plan], image: &Volume) -> Vec<Vec<f32>> {
    let mut outs: Vec<Vec<f32>> = plans.iter().map(|_| vec![0f32; image.data.len()]).collect();
    let jobs: Vec<_> = plans
        .iter()
        .zip(outs.iter_mut())
        .map(|(plan, o)| {
            (
                augscope::engine::Job {
                    plan,
                    image,
                    label: None,
                },
                augscope::engine::Outputs {
                    image: o.as_mut_slice(),
                    label: None,
                },
            )
        })
        .collect();
    for r in backend.apply_many(jobs) {
        if let Err(e) = r {
            panic!("{}: a job of the batch failed: {e}", backend.name());
        }
    }
    outs
}
