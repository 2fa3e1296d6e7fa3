//! The CUDA filters against the CPU filters (which tests/filters.rs checks against scipy):
//! every filter, every mode, 2D, 3D, RGB and batches, f16/bf16 storage, FEBDS, the out-of-memory
//! retry. Without a GPU (CI) the kernels still compile with NVRTC when libnvrtc can be loaded,
//! and a CUDA request falls back to the CPU with a note; tests whose name says `gpu` need a CUDA
//! device and skip with a printed reason where there is none. Arrays are `[z, y, x]`.

mod common;

use augscope::Mode;
use augscope::engine::cuda::nvrtc_version;
use augscope::engine::{BackendSpec, Precision};
use augscope::filter::{Boundary, FebdsMethod, Filter, apply_cpu, cuda, run};
use augscope::gpu::device;
use common::filter_cases::{compare, load_fixtures};
use common::volumes::random_values as random;

/// Why there is no usable device, printed by the caller, or None when there is one.
fn no_gpu() -> Option<String> {
    device::discover().unavailable_reason()
}

macro_rules! need_gpu {
    () => {
        if let Some(why) = no_gpu() {
            common::skipped(&format!("no usable CUDA device ({why})"));
            return;
        }
    };
}

/// Runs on cuda:0 and insists that the GPU, not the CPU fallback, made the result.
fn on_gpu(f: &Filter, b: Boundary, data: &[f32], shape: &[usize], p: Precision) -> Vec<f32> {
    let r = run(f, b, data, shape, &BackendSpec::Cuda(vec![0]), p)
        .unwrap_or_else(|e| panic!("{f:?}: {e}"));
    assert_eq!(r.backend, "cuda:0", "fell back: {:?}", r.note);
    r.out
}

#[test]
fn every_filter_kernel_compiles_with_nvrtc() {
    if let Err(why) = nvrtc_version() {
        common::skipped(&why);
        return;
    }
    let n = cuda::compile_all(Some("sm_90")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(n, Mode::ALL.len() * 4 + 7);
}

#[test]
fn cuda_filter_request_without_a_device_falls_back_with_a_note() {
    let data = random(6 * 7, 1);
    let f = Filter::Gaussian { sigma: vec![1.0] };
    let b = Boundary::default();
    let r = run(
        &f,
        b,
        &data,
        &[6, 7],
        &BackendSpec::Cuda(vec![0]),
        Precision::F32,
    )
    .expect("never an error");
    match no_gpu() {
        Some(_) => {
            assert_eq!(r.backend, "cpu");
            assert!(
                r.note.as_deref().unwrap_or("").contains("CPU"),
                "{:?}",
                r.note
            );
            assert_eq!(r.out, apply_cpu(&f, b, &data, &[6, 7]).expect("cpu"));
        }
        None => assert_eq!(r.backend, "cuda:0"),
    }
    // A missing ordinal falls back too, with the reason.
    let r = run(
        &f,
        b,
        &data,
        &[6, 7],
        &BackendSpec::Cuda(vec![999]),
        Precision::F32,
    )
    .expect("never an error");
    assert_eq!(r.backend, "cpu");
    assert!(r.note.is_some());
    // Bad parameters stay the user's error.
    let bad = Filter::Median { size: vec![2] };
    assert!(
        run(
            &bad,
            b,
            &data,
            &[6, 7],
            &BackendSpec::Cuda(vec![0]),
            Precision::F32
        )
        .is_err()
    );
}

#[test]
fn gpu_filters_match_cpu_on_every_fixture() {
    need_gpu!();
    let fx = load_fixtures();
    let mut failures = vec![];
    let mut worst = 0f64;
    for case in &fx.cases {
        let (data, shape) = case.input();
        let f = case.filter();
        let cpu = apply_cpu(&f, case.boundary(), &data, &shape).expect("cpu");
        let gpu = on_gpu(&f, case.boundary(), &data, &shape, Precision::F32);
        let tol = if case.op == "median" { 0.0 } else { 1e-5 };
        let (bad, err) = compare(&gpu, &cpu, tol);
        worst = worst.max(err);
        if bad > 0 {
            failures.push(format!("{}: {bad} voxels off, max {err:e}", case.name));
        }
    }
    println!("{} cases, worst |gpu - cpu| {worst:e}", fx.cases.len());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn gpu_filters_match_cpu_on_larger_volumes_every_path() {
    need_gpu!();
    // 3D with small and large radii (shared tiles), a radius too large for a tile (the direct
    // kernel), batches of 2D and 3D arrays (channels) in one launch.
    let cases: Vec<(Vec<usize>, usize, Filter)> = vec![
        (vec![40, 64, 96], 1, Filter::Gaussian { sigma: vec![2.0] }),
        (vec![40, 64, 96], 1, Filter::Gaussian { sigma: vec![12.0] }),
        (
            vec![24, 40, 300],
            1,
            Filter::Gaussian {
                sigma: vec![1.0, 70.0, 70.0],
            },
        ),
        (
            vec![30, 50, 70],
            2,
            Filter::Log {
                sigma: vec![1.5, 2.0, 2.5],
            },
        ),
        (
            vec![30, 50, 70],
            1,
            Filter::Dog {
                sigma1: vec![1.0],
                sigma2: vec![3.0],
            },
        ),
        (vec![33, 47, 61], 1, Filter::Median { size: vec![5] }),
        (
            vec![33, 47, 61],
            2,
            Filter::Median {
                size: vec![3, 5, 7],
            },
        ),
        (vec![120, 200], 3, Filter::Median { size: vec![5] }),
        (
            vec![120, 200],
            8,
            Filter::Gaussian {
                sigma: vec![3.0, 1.0],
            },
        ),
        (
            vec![120, 200],
            3,
            Filter::Gamma {
                gamma: 0.7,
                scale: 1.0,
            },
        ),
        (
            vec![120, 200],
            3,
            Filter::Contrast {
                contrast: 1.3,
                brightness: -0.1,
            },
        ),
    ];
    let mut worst = 0f64;
    for (k, (shape, count, f)) in cases.iter().enumerate() {
        let n: usize = shape.iter().product();
        let data = random(n * count, k as u64 + 10);
        for mode in [
            Mode::Reflect,
            Mode::Constant,
            Mode::Nearest,
            Mode::Mirror,
            Mode::Wrap,
        ] {
            let b = Boundary { mode, cval: 0.3 };
            let cpu = apply_cpu(f, b, &data, shape).expect("cpu");
            let gpu = on_gpu(f, b, &data, shape, Precision::F32);
            let tol = if matches!(f, Filter::Median { .. }) {
                0.0
            } else {
                1e-5
            };
            let (bad, err) = compare(&gpu, &cpu, tol);
            worst = worst.max(err);
            assert_eq!(
                bad, 0,
                "{f:?} {mode} on {count} x {shape:?}: max error {err:e}"
            );
        }
    }
    println!("worst |gpu - cpu| {worst:e}");
}

/// Every path of the median kernel (the register network with pairs along axis 0 and along axis
/// 1, without a pair, and the local-memory kernel of large windows) against the CPU, bit for bit:
/// many ties, -0 and +0, infinities and NaN (ordered as `f32::total_cmp`), odd extents so that
/// the last pair has one output, and batches.
#[test]
fn gpu_median_matches_cpu_bit_for_bit_on_every_path() {
    need_gpu!();
    let cases: Vec<(Vec<usize>, usize, Vec<usize>)> = vec![
        (vec![17, 23, 45], 2, vec![5]),       // pairs along z
        (vec![17, 23, 45], 1, vec![1, 5, 5]), // pairs along y
        (vec![17, 23, 45], 1, vec![3, 5, 7]), // pairs along z, uneven window
        (vec![17, 23, 45], 1, vec![3, 1, 1]), // no pair
        (vec![17, 23, 45], 1, vec![7]),       // local memory
        (vec![51, 67], 3, vec![11]),          // 2D, pairs along y
        (vec![51, 67], 2, vec![3, 9]),        // 2D
        (vec![301], 4, vec![9]),              // 1D
    ];
    for (k, (shape, count, size)) in cases.iter().enumerate() {
        let n: usize = shape.iter().product();
        let specials = [0.0, -0.0, f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -1.0];
        let data: Vec<f32> = random(n * count, k as u64 + 77)
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                if i % 13 == 0 {
                    specials[(i / 13) % specials.len()]
                } else {
                    (v * 12.0).floor() - 6.0
                }
            })
            .collect();
        let f = Filter::Median { size: size.clone() };
        for mode in [Mode::Reflect, Mode::Constant, Mode::Mirror, Mode::Wrap] {
            let b = Boundary { mode, cval: -0.0 };
            let cpu = apply_cpu(&f, b, &data, shape).expect("cpu");
            let gpu = on_gpu(&f, b, &data, shape, Precision::F32);
            let diff = cpu
                .iter()
                .zip(&gpu)
                .filter(|(a, b)| a.to_bits() != b.to_bits())
                .count();
            assert_eq!(
                diff, 0,
                "median {size:?} {mode} on {count} x {shape:?}: {diff} values differ"
            );
        }
    }
}

/// `cuda:0,0`: the arrays of a batch split between two device workers (here twice the same
/// device, so that one GPU checks the split and the reassembly), as `cuda:0,1` splits them over
/// two GPUs; the result is the one-launch result.
#[test]
fn gpu_filter_batch_splits_between_listed_devices() {
    need_gpu!();
    let shape = [37usize, 45];
    let n = shape[0] * shape[1];
    let data = random(n * 5, 404);
    let b = Boundary {
        mode: Mode::Reflect,
        cval: 0.0,
    };
    for f in [
        Filter::Gaussian { sigma: vec![2.5] },
        Filter::Median { size: vec![5] },
    ] {
        let one = on_gpu(&f, b, &data, &shape, Precision::F32);
        let r = run(
            &f,
            b,
            &data,
            &shape,
            &BackendSpec::Cuda(vec![0, 0]),
            Precision::F32,
        )
        .unwrap_or_else(|e| panic!("{f:?}: {e}"));
        assert_eq!(r.backend, "cuda:0,0", "fell back: {:?}", r.note);
        assert_eq!(r.out.len(), one.len());
        assert!(
            r.out
                .iter()
                .zip(&one)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{f:?}: the split batch differs from one launch"
        );
    }
}

#[test]
fn gpu_half_precision_storage_stays_close() {
    need_gpu!();
    let shape = [20usize, 48, 64];
    let data = random(shape.iter().product(), 3);
    let f = Filter::Gaussian { sigma: vec![2.0] };
    let b = Boundary::default();
    let cpu = apply_cpu(&f, b, &data, &shape).expect("cpu");
    for (p, tol) in [(Precision::F16, 2e-3), (Precision::Bf16, 1.6e-2)] {
        let gpu = on_gpu(&f, b, &data, &shape, p);
        let (bad, err) = compare(&gpu, &cpu, tol);
        assert_eq!(bad, 0, "{p:?}: max error {err:e}");
    }
}

#[test]
fn gpu_febds_matches_the_cpu_mask() {
    need_gpu!();
    let (a_data, a_shape) = common::fixtures::npy_in("fixtures/febds", "input.npy");
    for m in [FebdsMethod::Dog, FebdsMethod::Log, FebdsMethod::Fft] {
        let f = Filter::Febds(m);
        let b = Boundary::default();
        let cpu = apply_cpu(&f, b, &a_data, &a_shape).expect("cpu");
        let gpu = on_gpu(&f, b, &a_data, &a_shape, Precision::F32);
        let differ = cpu.iter().zip(&gpu).filter(|(x, y)| x != y).count();
        println!(
            "FEBDS {m:?}: {differ} of {} pixels differ (fft on the GPU through cuFFT: {})",
            cpu.len(),
            cuda::cufft_available()
        );
        assert!(differ * 1000 <= cpu.len(), "{m:?}: {differ} pixels differ");
    }
}

#[test]
fn gpu_out_of_memory_retries_on_the_cpu() {
    need_gpu!();
    let tmp = tempfile::tempdir().expect("temp dir");
    let shape = [16usize, 32, 32];
    let data = random(shape.iter().product(), 5);
    let inp = tmp.path().join("in.npy");
    augscope::io::npy::write(&inp, &data, &shape, augscope::DType::F32).expect("write");
    let out = tmp.path().join("out.npy");
    let o = common::cli::command()
        .args([
            "filter",
            inp.to_str().expect("utf-8"),
            out.to_str().expect("utf-8"),
        ])
        .args(["--gaussian", "2", "--backend", "cuda"])
        .env(device::MEM_LIMIT_ENV, "1K")
        .output()
        .expect("augscope runs");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains("out of memory") && err.contains("CPU"),
        "{err}"
    );
    let got = augscope::io::npy::read(&out).expect("output");
    let f = Filter::Gaussian { sigma: vec![2.0] };
    assert_eq!(
        got.data,
        apply_cpu(&f, Boundary::default(), &data, &shape).expect("cpu")
    );
}

/// Images for FEBDS's segmentation: the fixture's denoised image, the synthetic mammogram, 8-bit
/// and constant images, and odd shapes down to one row and one column.
fn segmentation_inputs() -> Vec<(String, Vec<f32>, [usize; 2])> {
    use augscope::filter::febds;
    let (a, s) = common::fixtures::npy_in("fixtures/febds", "input.npy");
    let shape = [s[0], s[1]];
    let mut v = vec![];
    for m in [FebdsMethod::Dog, FebdsMethod::Log, FebdsMethod::Fft] {
        let den = febds::denoise(febds::enhance(&a, shape, m), shape);
        v.push((format!("fixture denoised by {m:?}"), den, shape));
    }
    let mammo = augscope::bench::filters::synthetic_mammogram([256, 208]);
    v.push(("mammogram".into(), mammo, [256, 208]));
    for (i, sh) in [[37usize, 53], [1, 64], [64, 1], [3, 3], [300, 257]]
        .into_iter()
        .enumerate()
    {
        let r = random(sh[0] * sh[1], 40 + i as u64);
        let twelve: Vec<f32> = r.iter().map(|x| (x * 4095.0).round()).collect();
        let eight: Vec<f32> = r.iter().map(|x| (x * 200.0).round()).collect();
        v.push((format!("12-bit {sh:?}"), twelve, sh));
        v.push((format!("8-bit {sh:?}"), eight, sh));
    }
    v.push(("constant".into(), vec![7.0; 40 * 30], [40, 30]));
    v
}

#[test]
fn gpu_febds_segmentation_equals_the_cpu_bit_for_bit() {
    need_gpu!();
    use augscope::filter::febds;
    for (name, img, shape) in segmentation_inputs() {
        for m in [FebdsMethod::Dog, FebdsMethod::Fft] {
            let cpu = febds::segment(&img, shape, m);
            let gpu = cuda::febds_segment(&img, shape, m, 0).unwrap_or_else(|e| panic!("{e}"));
            let differ = cpu.iter().zip(&gpu).filter(|(x, y)| x != y).count();
            assert_eq!(differ, 0, "{name}, {m:?}: {differ} pixels differ");
        }
    }
}

/// A square spiral of foreground walls one pixel wide with a gap at the outside: the background
/// corridor inside is one long path, reached from the border only around every turn.
fn spiral(n: usize) -> Vec<f32> {
    let mut m = vec![0f32; n * n];
    let (mut lo, mut hi) = (1usize, n - 2);
    while lo + 2 <= hi {
        for i in lo..=hi {
            m[lo * n + i] = 1.0;
            m[hi * n + i] = 1.0;
            m[i * n + lo] = 1.0;
            m[i * n + hi] = 1.0;
        }
        // The ring's gap, on alternating sides, and the next ring two pixels in.
        let gap = if (lo / 2) % 2 == 0 {
            lo * n + lo + 1
        } else {
            hi * n + hi - 1
        };
        m[gap] = 0.0;
        lo += 2;
        hi -= 2;
    }
    m
}

#[test]
fn gpu_hole_filling_equals_the_cpu_on_random_masks_and_mazes() {
    need_gpu!();
    use augscope::filter::febds;
    let mut cases: Vec<(String, Vec<f32>, [usize; 2])> = vec![];
    for (i, sh) in [
        [97usize, 131],
        [1, 50],
        [50, 1],
        [2, 2],
        [300, 257],
        [64, 33],
    ]
    .into_iter()
    .enumerate()
    {
        for density in [0.3f32, 0.45, 0.6] {
            let r = random(sh[0] * sh[1], 70 + i as u64);
            let m = r.iter().map(|&x| f32::from(x < density)).collect();
            cases.push((format!("random {sh:?} at {density}"), m, sh));
        }
    }
    cases.push(("spiral 101".into(), spiral(101), [101, 101]));
    cases.push(("spiral 64".into(), spiral(64), [64, 64]));
    cases.push(("all background".into(), vec![0.0; 20 * 20], [20, 20]));
    cases.push(("all foreground".into(), vec![1.0; 20 * 20], [20, 20]));
    for (name, mask, shape) in cases {
        let cpu = febds::fill_holes(&mask, shape);
        let gpu = cuda::fill_holes(&mask, shape, 0).unwrap_or_else(|e| panic!("{name}: {e}"));
        let differ = cpu.iter().zip(&gpu).filter(|(x, y)| x != y).count();
        assert_eq!(differ, 0, "{name}: {differ} pixels differ");
    }
}
