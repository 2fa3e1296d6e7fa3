//! The CUDA engine and filters on odd shapes against the CPU engine: axes of length 1 to 3, prime
//! extents, one huge axis, odd output grids, every mode and order, with and without the elastic
//! field and labels, single and batched launches. The cases are a pure function of the seed, so
//! a failure names a case that reruns. The CUDA parts need a device and are recorded as skipped,
//! with the reason, where there is none.
//! Arrays are `[z, y, x]`.

mod common;

use augscope::augment::{Elastic, Mode, Order, Plan};
use augscope::core::volume::Volume;
use augscope::engine::{Backend, BackendSpec, Job, Outputs, Plane, Precision};
use augscope::filter::{Boundary, Filter, apply_cpu, run};
use common::backends::{check_plan, gpu};
// SplitMix64: the cases depend on the seed alone.
use common::volumes::{SplitMix64 as Rng, random_labels, random_volume};

/// Extents the shapes are drawn from: the smallest (where a tile, a pair or a stencil has nothing
/// beside it) and primes (no tile divides them).
const EXTENTS: [usize; 18] = [
    1, 2, 3, 1, 2, 3, 5, 7, 11, 13, 17, 19, 23, 31, 37, 41, 61, 97,
];

/// `plans` over one image (and label map) in batched launches (`apply_many`): each plan's image
/// and label outputs, in plan order (the label output empty without a label map).
fn run_batch(
    g: &dyn Backend,
    plans: &[Plan],
    image: &Volume,
    label: Option<&Volume>,
    what: &str,
) -> Vec<(Vec<f32>, Vec<f32>)> {
    let n: usize = image.shape.iter().product();
    let lab_len = if label.is_some() { n } else { 0 };
    let mut outs: Vec<(Vec<f32>, Vec<f32>)> = plans
        .iter()
        .map(|_| (vec![0f32; n * image.channels], vec![0f32; lab_len]))
        .collect();
    let jobs: Vec<(Job<'_>, Outputs<'_>)> = plans
        .iter()
        .zip(outs.iter_mut())
        .map(|(plan, (img, lab))| {
            (
                Job { plan, image, label },
                Outputs {
                    image: img,
                    label: label.map(|_| lab.as_mut_slice()),
                },
            )
        })
        .collect();
    for (k, r) in g.apply_many(jobs).into_iter().enumerate() {
        r.unwrap_or_else(|e| panic!("{what} job {k}: {e}"));
    }
    outs
}

fn random_plan(rng: &mut Rng, ndim: usize, shape: &[usize]) -> Plan {
    let order = [Order::Nearest, Order::Linear, Order::Cubic][rng.below(3)];
    let mode = Mode::ALL[rng.below(Mode::ALL.len())];
    let mut plan = Plan {
        order,
        mode,
        cval: if rng.below(2) == 0 { 0.0 } else { 0.4 },
        ..Plan::default()
    };
    if rng.below(3) == 0 {
        plan.flip = vec![rng.below(ndim)];
    }
    if rng.below(4) != 0 {
        plan.rotate_rad = (0..if ndim == 3 { 3 } else { 1 })
            .map(|_| (rng.unit() - 0.5) * 1.2)
            .collect();
    }
    if rng.below(2) == 0 {
        plan.scale = (0..ndim).map(|_| 0.7 + 0.6 * rng.unit()).collect();
    }
    if rng.below(2) == 0 {
        plan.translate = (0..ndim).map(|_| (rng.unit() - 0.5) * 6.0).collect();
    }
    if rng.below(2) == 0 {
        plan.elastic = Some(Elastic {
            alpha: 5.0 + 60.0 * rng.unit(),
            sigma: 0.5 + 5.0 * rng.unit(),
            seed: rng.next() % 1000,
        });
    }
    if rng.below(5) == 0 {
        plan.out_shape = Some(shape.iter().map(|&n| (n + rng.below(4)).max(1)).collect());
    }
    plan
}

/// Runs `f` on the CUDA engine of device 0, or records the test as skipped without one.
fn on_gpu(f: impl FnOnce(&dyn Backend)) {
    if let Some(g) = gpu(Precision::F32) {
        f(&g);
    }
}

fn random_shape(rng: &mut Rng, ndim: usize) -> Vec<usize> {
    (0..ndim)
        .map(|_| EXTENTS[rng.below(EXTENTS.len())])
        .collect()
}

#[test]
fn gpu_matches_cpu_on_odd_shapes_every_mode_and_order() {
    let Some(g) = gpu(Precision::F32) else { return };
    let mut rng = Rng(0x5eed_0dd5);
    for case in 0..240 {
        let (ndim, channels) = [(2, 1), (3, 1), (3, 1), (2, 3)][case % 4];
        let shape = random_shape(&mut rng, ndim);
        let plan = random_plan(&mut rng, ndim, &shape);
        let image = random_volume(&shape, channels, case as u64);
        let label =
            (channels == 1 && rng.below(2) == 0).then(|| random_labels(&shape, case as u64));
        check_plan(
            &g,
            &plan,
            &image,
            label.as_ref(),
            &format!("odd case {case}: {channels} x {shape:?}, {plan:?}"),
        );
    }
}

/// One huge axis. Up to 65535 slices (the grid's z limit) the GPU computes; beyond, the
/// engine says so and the CPU engine runs the job, with a note.
#[test]
fn gpu_matches_cpu_with_one_huge_axis() {
    let Some(g) = gpu(Precision::F32) else { return };
    let mut rng = Rng(0x0b16_a815);
    let shapes: [Vec<usize>; 6] = [
        vec![1, 1, 70_001],
        vec![2, 3, 40_009],
        vec![100_003, 2],
        vec![65_535, 1, 2],
        vec![65_537, 1, 2],
        vec![3, 131_071],
    ];
    for (case, shape) in shapes.iter().enumerate() {
        for k in 0..3 {
            let plan = random_plan(&mut rng, shape.len(), shape);
            let image = random_volume(shape, 1, 40 + case as u64);
            let label = random_labels(shape, 50 + case as u64);
            let what = format!("huge axis {shape:?} plan {k}: {plan:?}");
            if shape.len() == 3 && shape[0] > 65_535 {
                let (got, _, _, note) = augscope::engine::select::apply_new_with_fallback(
                    &g,
                    &plan,
                    &image,
                    Some(&label),
                )
                .unwrap_or_else(|e| panic!("{what}: {e}"));
                let note = note.expect("a note says the CPU ran the job");
                assert!(note.contains("launch") && note.contains("CPU"), "{note}");
                let (want, _, _) = augscope::engine::apply_new(
                    &augscope::engine::cpu::CpuBackend::new(),
                    &plan,
                    &image,
                    Some(&label),
                )
                .expect("cpu");
                assert_eq!(got.data, want.data, "{what}");
            } else {
                check_plan(&g, &plan, &image, Some(&label), &what);
            }
        }
    }
}

#[test]
fn gpu_half_storage_on_odd_shapes_stays_close() {
    for precision in [Precision::F16, Precision::Bf16] {
        let Some(g) = gpu(precision) else { return };
        let cpu = augscope::engine::cpu::CpuBackend::new();
        let mut rng = Rng(0x000f_1600 + precision as u64);
        for case in 0..40 {
            let ndim = 2 + case % 2;
            let shape = random_shape(&mut rng, ndim);
            let plan = random_plan(&mut rng, ndim, &shape);
            let image = random_volume(&shape, 1, case as u64);
            let (want, _, _) = augscope::engine::apply_new(&cpu, &plan, &image, None)
                .expect("the CPU engine runs the plan");
            let (got, _, _) = augscope::engine::apply_new(&g, &plan, &image, None)
                .unwrap_or_else(|e| panic!("{precision:?} case {case}: {e}"));
            // The image lies in [0, 1): half storage rounds it by 2^-11 (f16) or 2^-8 (bf16),
            // and a cubic tap sum stays within a few of those.
            let tol = if precision == Precision::F16 {
                2e-3
            } else {
                1.6e-2
            };
            let worst = want
                .data
                .iter()
                .zip(&got.data)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(
                worst <= tol && got.data.iter().all(|v| v.is_finite()),
                "{precision:?} case {case} {shape:?}: max |gpu - cpu| {worst} ({plan:?})"
            );
        }
    }
}

/// Batched launches (`apply_many`) equal one launch per plan, bit for bit, on the CUDA engine
/// (one launch for the batch). The CPU engine's `apply_many` runs the jobs one after another, so
/// there the comparison would hold by construction: the test needs a GPU.
#[test]
fn gpu_batched_launch_on_odd_shapes_equals_single_launches() {
    on_gpu(|g| {
        let mut rng = Rng(0xba7c_4ed0);
        for round in 0..12 {
            // One shape per batch (a batch shares its grid), several plans over it.
            let ndim = 2 + round % 2;
            let shape = random_shape(&mut rng, ndim);
            let image = random_volume(&shape, 1, round as u64);
            let label = random_labels(&shape, round as u64 + 7);
            let plans: Vec<Plan> = (0..3 + rng.below(4))
                .map(|_| {
                    let mut p = random_plan(&mut rng, ndim, &shape);
                    p.out_shape = None;
                    p
                })
                .collect();
            let outs = run_batch(g, &plans, &image, Some(&label), &format!("round {round}"));
            for (k, plan) in plans.iter().enumerate() {
                let (one, one_lab, _) = augscope::engine::apply_new(g, plan, &image, Some(&label))
                    .unwrap_or_else(|e| panic!("round {round} job {k}: {e}"));
                assert!(
                    one.data
                        .iter()
                        .zip(&outs[k].0)
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "round {round} job {k} {shape:?}: batched image differs ({plan:?})"
                );
                let one_lab = one_lab.expect("a label map");
                assert_eq!(
                    one_lab.data, outs[k].1,
                    "round {round} job {k} {shape:?}: batched labels differ"
                );
            }
        }
    });
}

#[test]
fn gpu_filters_match_cpu_on_odd_shapes() {
    if gpu(Precision::F32).is_none() {
        return;
    }
    let mut rng = Rng(0xf117_e450);
    for case in 0..90 {
        let ndim = 2 + case % 2;
        let shape = random_shape(&mut rng, ndim);
        let n: usize = shape.iter().product();
        let data = random_volume(&[n], 1, case as u64).data;
        let s = 0.4 + 4.0 * rng.unit();
        let f = match case % 5 {
            0 => Filter::Gaussian { sigma: vec![s] },
            1 => Filter::Log { sigma: vec![s] },
            2 => Filter::Dog {
                sigma1: vec![s],
                sigma2: vec![s * 1.6],
            },
            3 => Filter::Median {
                size: (0..ndim).map(|_| 1 + 2 * rng.below(4)).collect(),
            },
            _ => Filter::Gaussian {
                sigma: (0..ndim).map(|_| 0.3 + 3.0 * rng.unit()).collect(),
            },
        };
        let mode = Mode::ALL[rng.below(Mode::ALL.len())];
        let b = Boundary { mode, cval: 0.3 };
        let what = format!("filter case {case}: {f:?} {mode} on {shape:?}");
        let want = match apply_cpu(&f, b, &data, &shape) {
            Ok(w) => w,
            // A filter the CPU refuses for this shape must be refused on the GPU too.
            Err(e) => {
                let r = run(
                    &f,
                    b,
                    &data,
                    &shape,
                    &BackendSpec::Cuda(vec![0]),
                    Precision::F32,
                );
                assert!(r.is_err(), "{what}: the CPU refuses ({e}) but the GPU runs");
                continue;
            }
        };
        let got = run(
            &f,
            b,
            &data,
            &shape,
            &BackendSpec::Cuda(vec![0]),
            Precision::F32,
        )
        .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(got.backend, "cuda:0", "{what}: fell back ({:?})", got.note);
        let tol = if matches!(f, Filter::Median { .. }) {
            0.0
        } else {
            1e-5
        };
        let worst = want
            .iter()
            .zip(&got.out)
            .map(|(a, b)| {
                if a.is_nan() != b.is_nan() {
                    f32::INFINITY
                } else {
                    (a - b).abs()
                }
            })
            .fold(0f32, f32::max);
        assert!(worst <= tol, "{what}: max |gpu - cpu| {worst}");
    }
}

/// Every kernel family once on small volumes, each result against the CPU: the run that
/// `compute-sanitizer` watches (scripts/gpu_sanitize.sh). Resample at orders 0/1/3 in every mode
/// with labels, RGB, f16 and bf16 storage, the elastic field at small, tiled, whole-column and
/// direct radii, its statistics and coordinates, the prefilter, batched launches, the slice
/// path, and every filter (separable tiles and the direct pass, median paths, intensity
/// filters, batches, FEBDS with each method).
#[test]
fn gpu_every_kernel_family_on_small_volumes() {
    use augscope::filter::FebdsMethod;
    let Some(g) = gpu(Precision::F32) else { return };
    let image = random_volume(&[9, 10, 11], 1, 1);
    let label = random_labels(&[9, 10, 11], 2);
    let rgb = random_volume(&[12, 13], 3, 3);
    let mut k = 0u64;
    for mode in Mode::ALL {
        for order in [Order::Nearest, Order::Linear, Order::Cubic] {
            k += 1;
            let mut plan = Plan {
                order,
                mode,
                rotate_rad: vec![0.2, -0.1, 0.3],
                scale: vec![0.9],
                translate: vec![0.5, -1.0, 0.25],
                flip: vec![1],
                cval: 0.3,
                ..Plan::default()
            };
            if k.is_multiple_of(2) {
                plan.elastic = Some(Elastic {
                    alpha: 8.0,
                    sigma: 1.5,
                    seed: k,
                });
            }
            check_plan(
                &g,
                &plan,
                &image,
                Some(&label),
                &format!("{mode} order {order}"),
            );
            check_plan(
                &g,
                &plan,
                &image,
                None,
                &format!("{mode} order {order}, no label"),
            );
            let mut p2 = plan.clone();
            p2.rotate_rad = vec![0.4];
            p2.scale = vec![1.1];
            p2.translate = vec![0.5, 1.5];
            p2.flip = vec![0];
            check_plan(&g, &p2, &rgb, None, &format!("rgb {mode} order {order}"));
        }
    }
    // The field at every radius class: small, tiled, the whole-column noise pass, and the direct
    // pass past the tile (radius > 120), with statistics and coordinates.
    for sigma in [0.4, 2.5, 12.0, 35.0] {
        let plan = Plan {
            elastic: Some(Elastic {
                alpha: 30.0,
                sigma,
                seed: 5,
            }),
            order: Order::Linear,
            ..Plan::default()
        };
        check_plan(
            &g,
            &plan,
            &image,
            Some(&label),
            &format!("field sigma {sigma}"),
        );
        let cpu = augscope::engine::cpu::CpuBackend::new();
        let (want, _) = cpu.field(&plan, &image.shape).expect("a field");
        let (got_max, got_rms) = g
            .displacement_stats(&plan, &image.shape)
            .unwrap_or_else(|e| panic!("{e}"))
            .expect("statistics of a field");
        let (max, rms) = want.displacement_stats(30.0);
        assert!(
            (got_max - max).abs() <= 1e-3 * max.max(1e-9)
                && (got_rms - rms).abs() <= 1e-3 * rms.max(1e-9),
            "sigma {sigma}: stats ({got_max}, {got_rms}) against ({max}, {rms})"
        );
        let coords = g
            .coordinates(&plan, &image.shape)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(coords.len(), 3 * image.shape.iter().product::<usize>());
        assert!(coords.iter().all(|c| c.is_finite()));
    }
    // Half storage, with the prefilter's conversion.
    for precision in [Precision::F16, Precision::Bf16] {
        let Some(h) = gpu(precision) else { return };
        for order in [Order::Linear, Order::Cubic] {
            let plan = Plan {
                order,
                rotate_rad: vec![0.3, 0.1, -0.2],
                elastic: Some(Elastic {
                    alpha: 10.0,
                    sigma: 2.0,
                    seed: 9,
                }),
                ..Plan::default()
            };
            let (a, _, _) = augscope::engine::apply_new(
                &augscope::engine::cpu::CpuBackend::new(),
                &plan,
                &image,
                None,
            )
            .expect("cpu");
            let (b, _, _) = augscope::engine::apply_new(&h, &plan, &image, Some(&label))
                .unwrap_or_else(|e| panic!("{precision:?}: {e}"));
            let worst = a
                .data
                .iter()
                .zip(&b.data)
                .map(|(x, y)| (x - y).abs())
                .fold(0f32, f32::max);
            assert!(worst < 2e-2, "{precision:?} order {order}: {worst}");
        }
    }
    // Batched launches and the slice path.
    let plans: Vec<Plan> = (0..4)
        .map(|s| Plan {
            order: [Order::Nearest, Order::Linear, Order::Cubic, Order::Linear][s],
            rotate_rad: vec![0.1 * s as f64, 0.2, 0.0],
            elastic: (s % 2 == 1).then_some(Elastic {
                alpha: 5.0,
                sigma: 1.0 + s as f64,
                seed: s as u64,
            }),
            ..Plan::default()
        })
        .collect();
    let outs = run_batch(&g, &plans, &image, Some(&label), "batch");
    for (plan, (i, _)) in plans.iter().zip(&outs) {
        let (one, _, _) = augscope::engine::apply_new(&g, plan, &image, Some(&label)).expect("gpu");
        assert!(
            one.data
                .iter()
                .zip(i)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "batched {plan:?}"
        );
        let plane = 4;
        let mut got = vec![0f32; 10 * 11];
        let mut got_lab = vec![0f32; 10 * 11];
        g.apply_plane(
            Job {
                plan,
                image: &image,
                label: Some(&label),
            },
            Plane {
                axis: 0,
                index: plane,
            },
            Some(77),
            Outputs {
                image: &mut got,
                label: Some(&mut got_lab),
            },
        )
        .unwrap_or_else(|e| panic!("slice: {e}"));
        assert_eq!(
            &one.data[plane * 110..(plane + 1) * 110],
            &got[..],
            "slice of {plan:?}"
        );
    }
    // Every filter: tiles and the direct pass, median paths, intensity, batches, FEBDS.
    let vol = random_volume(&[9, 10, 11], 1, 8).data;
    let img2 = random_volume(&[3 * 21, 23], 1, 9).data;
    let filters = [
        Filter::Gaussian { sigma: vec![1.5] },
        Filter::Gaussian {
            sigma: vec![0.5, 9.0, 40.0],
        },
        Filter::Log { sigma: vec![1.2] },
        Filter::Dog {
            sigma1: vec![1.0],
            sigma2: vec![2.0],
        },
        Filter::Median { size: vec![3] },
        Filter::Median {
            size: vec![3, 5, 1],
        },
        Filter::Median { size: vec![9] },
        Filter::Gamma {
            gamma: 0.8,
            scale: 1.0,
        },
        Filter::Contrast {
            contrast: 1.2,
            brightness: 0.1,
        },
    ];
    for f in &filters {
        for mode in [Mode::Reflect, Mode::Constant, Mode::Wrap] {
            let b = Boundary { mode, cval: 0.2 };
            for (data, shape) in [(&vol, vec![9, 10, 11]), (&img2, vec![21, 23])] {
                if matches!(f, Filter::Gaussian { sigma } | Filter::Log { sigma } if sigma.len() == 3 && shape.len() == 2)
                    || matches!(f, Filter::Median { size } if size.len() == 3 && shape.len() == 2)
                {
                    continue;
                }
                let want = apply_cpu(f, b, data, &shape).expect("cpu");
                let got = run(
                    f,
                    b,
                    data,
                    &shape,
                    &BackendSpec::Cuda(vec![0]),
                    Precision::F32,
                )
                .unwrap_or_else(|e| panic!("{f:?}: {e}"));
                assert_eq!(got.backend, "cuda:0");
                let tol = if matches!(f, Filter::Median { .. }) {
                    0.0
                } else {
                    1e-5
                };
                let worst = want
                    .iter()
                    .zip(&got.out)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0f32, f32::max);
                assert!(worst <= tol, "{f:?} {mode} {shape:?}: {worst}");
            }
        }
    }
    let (a_data, a_shape) = common::fixtures::npy_in("fixtures/febds", "input.npy");
    for m in [FebdsMethod::Dog, FebdsMethod::Log, FebdsMethod::Fft] {
        let f = Filter::Febds(m);
        let b = Boundary::default();
        let want = apply_cpu(&f, b, &a_data, &a_shape).expect("cpu");
        let got = run(
            &f,
            b,
            &a_data,
            &a_shape,
            &BackendSpec::Cuda(vec![0]),
            Precision::F32,
        )
        .unwrap_or_else(|e| panic!("{m:?}: {e}"));
        let differ = want.iter().zip(&got.out).filter(|(x, y)| x != y).count();
        assert!(
            differ * 1000 <= want.len(),
            "FEBDS {m:?}: {differ} pixels differ"
        );
    }
    // The engine's cached buffers go back, so that a leak check sees only what was lost.
    augscope::engine::cuda::free_caches();
}

/// A batch whose fields span more than 65535 slabs of rows in one pass (32 samples x 3
/// components x 700 rows), launched in parts: every sample equals its own launch bit for bit
/// (on a GPU; see above).
#[test]
fn gpu_batched_fields_past_the_grid_limit_equal_single_launches() {
    on_gpu(|g| {
        let shape = vec![700, 5, 4];
        let image = random_volume(&shape, 1, 70);
        let plans: Vec<Plan> = (0..32)
            .map(|s| Plan {
                order: Order::Linear,
                elastic: Some(Elastic {
                    alpha: 4.0,
                    sigma: 1.5,
                    seed: 1000 + s,
                }),
                ..Plan::default()
            })
            .collect();
        let outs = run_batch(g, &plans, &image, None, "grid limit");
        for (k, plan) in plans.iter().enumerate() {
            let (one, _, _) = augscope::engine::apply_new(g, plan, &image, None)
                .unwrap_or_else(|e| panic!("job {k}: {e}"));
            assert!(
                one.data
                    .iter()
                    .zip(&outs[k].0)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "job {k}: the batched field differs from its own launch"
            );
        }
    });
}
