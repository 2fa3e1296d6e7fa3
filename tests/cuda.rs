//! The CUDA engine against the CPU reference (docs/design.md §3, §4, §6).
//!
//! Without a GPU (CI): every kernel compiles with NVRTC when libnvrtc can be loaded, and the
//! selection falls back to the CPU with a note, never a panic. Tests whose name says `gpu` need a
//! CUDA device and skip with a printed reason where there is none (the field-cache test also runs
//! on the CPU engine, device or not). Arrays are `[z, y, x]`.

mod common;

use augscope::augment::{Elastic, Mode, Order, Plan, Space};
use augscope::core::volume::Volume;
use augscope::engine::cpu::{CpuBackend, coordinates};
use augscope::engine::cuda::{self, CudaBackend};
use augscope::engine::{
    Backend, BackendSpec, EngineError, Outputs, Plane, Precision, apply_new, select_backend,
};
use augscope::gpu::device;
use common::backends::{agreement, check_plan, for_each_backend, gpu};
use common::volumes::{random_labels, random_volume};

/// Whether `second` reuses the field that `first` made (`field_ms == 0`). The tests of this file
/// run in parallel on one device engine, whose single cached field another test may replace
/// between the two calls: the pair is tried up to 20 times; a broken cache fails all.
fn cached_on_second_run(g: &dyn Backend, first: &Plan, second: &Plan, image: &Volume) -> bool {
    (0..20).any(|_| {
        apply_new(g, first, image, None).unwrap_or_else(|e| panic!("{e}"));
        let (_, _, t) = apply_new(g, second, image, None).unwrap_or_else(|e| panic!("{e}"));
        t.field_ms == 0.0
    })
}

#[test]
fn every_kernel_compiles_with_nvrtc() {
    if let Err(why) = cuda::nvrtc_version() {
        common::skipped(&why);
        return;
    }
    // The H200's arch, as the engine passes it there; PTX needs no device.
    let n = cuda::compile_all(Some("sm_90")).unwrap_or_else(|e| panic!("{e}"));
    assert!(n >= 50, "compiled {n} programs");
}

/// mm space builds the field family once per distinct per-axis sigma (`sigma_mm / spacing`),
/// including radii 0 and past the tiled kernels'; each of those builds compiles.
#[test]
fn mm_space_field_kernels_compile_with_nvrtc() {
    if let Err(why) = cuda::nvrtc_version() {
        common::skipped(&why);
        return;
    }
    let plan = Plan {
        elastic: Some(Elastic {
            alpha: 10.0,
            sigma: 1.8,
            seed: 1,
        }),
        space: Space::Mm,
        spacing_mm: vec![20.0, 0.8, 0.05],
        ..Plan::default()
    };
    let sigma_vox = plan.field_sigma_vox(3).unwrap();
    assert_eq!(sigma_vox.len(), 3);
    for s in sigma_vox {
        cuda::compile(cuda::Family::Field, &cuda::field_defines(s), Some("sm_90"))
            .unwrap_or_else(|e| panic!("sigma_vox {s}: {e}"));
    }
}

/// With a known architecture a module is a CUBIN (an ELF image the driver loads without JIT),
/// kept on disk after the first compile and read back, identical, by the next.
#[test]
fn modules_compile_to_cubin_and_are_cached_on_disk() {
    if cuda::nvrtc_version().is_err() {
        common::skipped("NVRTC not loadable");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let defines = cuda::resample_defines(Mode::Reflect, Order::Cubic, 3, Precision::F32, false);
    let before = augscope::gpu::kernel_cache::stats();
    let first = cuda::compile_module_in(
        cuda::Family::Resample,
        &defines,
        Some("sm_90"),
        Some(dir.path().to_path_buf()),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(first.is_cubin);
    assert!(
        first.entries.iter().any(|e| e == "resample_f32"),
        "{:?}",
        first.entries
    );
    assert_eq!(augscope::gpu::kernel_cache::usage(dir.path()).0, 1);
    let second = cuda::compile_module_in(
        cuda::Family::Resample,
        &defines,
        Some("sm_90"),
        Some(dir.path().to_path_buf()),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let after = augscope::gpu::kernel_cache::stats();
    assert!(
        after.hits > before.hits,
        "the second compile was not read from disk"
    );
    assert_eq!(first.entries, second.entries);
    assert_eq!(augscope::gpu::kernel_cache::usage(dir.path()).0, 1);
    // Another define set is another entry; no architecture means PTX, not cached.
    let other = cuda::resample_defines(Mode::Wrap, Order::Linear, 2, Precision::F32, false);
    cuda::compile_module_in(
        cuda::Family::Resample,
        &other,
        Some("sm_90"),
        Some(dir.path().to_path_buf()),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(augscope::gpu::kernel_cache::usage(dir.path()).0, 2);
    let ptx = cuda::compile_module_in(
        cuda::Family::Resample,
        &other,
        None,
        Some(dir.path().to_path_buf()),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(!ptx.is_cubin);
    assert_eq!(augscope::gpu::kernel_cache::usage(dir.path()).0, 2);
}

/// A store of prebuilt kernels built from a manifest holds each module for each architecture,
/// keyed as the engine asks for it (its family, defines and architecture): another define set or
/// architecture is not in it, and a store's index says which NVRTC built it.
#[test]
fn prebuilt_stores_hold_the_manifests_modules_for_each_architecture() {
    use augscope::gpu::{nvrtc, prebuilt};
    if cuda::nvrtc_version().is_err() {
        common::skipped("NVRTC not loadable");
        return;
    }
    let resample = cuda::resample_defines(Mode::Reflect, Order::Linear, 3, Precision::F32, false);
    let manifest = prebuilt::read_manifest(&format!(
        "{}\n{}\n",
        serde_json::json!({"family": "resample", "defines": resample}),
        serde_json::json!({"family": "intensity", "defines": []})
    ))
    .expect("manifest");
    let dir = tempfile::tempdir().expect("tempdir");
    let archs = vec!["sm_80".to_string(), "sm_90".to_string()];
    let index =
        nvrtc::build_prebuilt(&manifest, &archs, dir.path()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(index.modules, 2);
    assert_eq!(prebuilt::read_index(dir.path()).unwrap(), index);
    assert_eq!(Some(index.nvrtc), cuda::nvrtc_version().ok());
    // Two CUBINs per architecture and the PTX of the newest (compute_90) for newer devices.
    assert_eq!(index.ptx.as_deref(), Some("compute_90"));
    assert_eq!(augscope::gpu::kernel_cache::usage(dir.path()).0, 6);
    let options = nvrtc::nvrtc_options_for;
    let hit = prebuilt::find(
        dir.path(),
        cuda::Family::Resample,
        &options(cuda::Family::Resample, &resample, "sm_90"),
        "sm_90",
    )
    .expect("the resample module for sm_90");
    assert!(hit.image.starts_with(b"\x7fELF"), "a CUBIN is an ELF image");
    assert!(
        hit.entries.iter().any(|e| e == "resample_f32"),
        "{:?}",
        hit.entries
    );
    // The CUBIN is the one the engine would compile now for that device.
    let fresh = cuda::compile_module_in(cuda::Family::Resample, &resample, Some("sm_90"), None)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(hit.entries, fresh.entries);
    let other = cuda::resample_defines(Mode::Wrap, Order::Linear, 3, Precision::F32, false);
    for (defines, arch) in [(&other, "sm_90"), (&resample, "sm_86")] {
        let missing = prebuilt::find(
            dir.path(),
            cuda::Family::Resample,
            &options(cuda::Family::Resample, defines, arch),
            arch,
        );
        assert!(missing.is_none(), "{arch} {defines:?}");
    }
    let ptx = prebuilt::find(
        dir.path(),
        cuda::Family::Intensity,
        &options(cuda::Family::Intensity, &[], "compute_90"),
        "compute_90",
    )
    .expect("the intensity module's PTX");
    let text = String::from_utf8(ptx.image).expect("PTX is text");
    assert!(text.contains(".target sm_90"), "PTX for compute_90");
    assert!(!ptx.entries.is_empty());
    // A virtual architecture makes no CUBIN: refused, with its name.
    let e = nvrtc::build_prebuilt(&manifest, &["compute_90".into()], dir.path()).unwrap_err();
    assert!(e.to_string().contains("compute_90"), "{e}");
}

/// The wheel's store (packaging/kernels.jsonl, built by scripts/build_wheels.sh --kernels) holds
/// the modules of the defaults in float32 storage, written as the engine asks for them now: every
/// boundary mode, order and dimension of the resample and the order-3 prefilter, every radius
/// bucket of the elastic field, the intensity steps and the filters' default mode. A change of
/// the engine's defines that left the manifest behind would make fresh hosts compile again.
#[test]
fn the_wheels_kernel_manifest_holds_the_engines_default_modules() {
    use augscope::gpu::prebuilt::{self, ModuleSpec};
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/packaging/kernels.jsonl"
    ))
    .expect("packaging/kernels.jsonl");
    let manifest = prebuilt::read_manifest(&text).expect("manifest");
    let has = |family: &str, defines: Vec<String>| {
        let spec = ModuleSpec {
            family: family.into(),
            defines,
        };
        assert!(manifest.contains(&spec), "missing {spec:?}");
    };
    for mode in Mode::ALL {
        for ndim in [2, 3] {
            for order in [Order::Nearest, Order::Linear, Order::Cubic] {
                has(
                    "resample",
                    cuda::resample_defines(mode, order, ndim, Precision::F32, false),
                );
            }
            has(
                "prefilter",
                cuda::sampler_defines(mode, Order::Cubic, ndim, Precision::F32),
            );
        }
    }
    for bucket in 0..=15 {
        has("field", vec![format!("-DFIELD_R={}", bucket * 8)]);
    }
    has("intensity", vec![]);
    has(
        "filter",
        augscope::filter::cuda::filter_defines(Mode::Reflect, Precision::F32, None),
    );
    // Whole modules only: the store gives every entry of a file with one module.
    assert_eq!(prebuilt::whole_modules(&manifest).unwrap(), manifest);
}

/// A process builds each resample entry alone (RS_ONLY): every one compiles by itself, with the
/// one entry the host launches under that number.
#[test]
fn each_resample_entry_compiles_alone() {
    if cuda::nvrtc_version().is_err() {
        common::skipped("NVRTC not loadable");
        return;
    }
    let want = [
        "resample_f32",
        "resample_plain_f32",
        "resample_plainf_f32",
        "resample_many_f32",
        "resample_many_plain_f32",
        "coords_f32",
    ];
    for (k, name) in want.iter().enumerate() {
        let mut d = cuda::resample_defines(Mode::Mirror, Order::Cubic, 3, Precision::F32, false);
        d.push(format!("-DRS_ONLY={}", k + 1));
        let m = cuda::compile_module_in(cuda::Family::Resample, &d, Some("sm_90"), None)
            .unwrap_or_else(|e| panic!("RS_ONLY={}: {e}", k + 1));
        assert_eq!(m.entries, vec![name.to_string()], "RS_ONLY={}", k + 1);
    }
}

#[test]
fn a_broken_kernel_returns_the_compiler_log() {
    if cuda::nvrtc_version().is_err() {
        common::skipped("NVRTC not loadable");
        return;
    }
    // A resample build without the mode defines must fail with the header's #error, not panic.
    let err = cuda::compile(cuda::Family::Resample, &["-DORDER=1".into()], None).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("MODE_"), "{msg}");
}

#[test]
fn cuda_request_without_a_device_falls_back_to_the_cpu_with_a_note() {
    let sel = select_backend(&BackendSpec::Cuda(vec![]));
    if device::discover().unavailable_reason().is_none() {
        eprintln!("a CUDA device is present: the request is met");
        assert!(sel.backend.name().starts_with("cuda"));
        return;
    }
    assert_eq!(sel.backend.name(), "cpu");
    let note = sel.note.expect("a note says why the CPU runs");
    assert!(note.contains("CPU engine"), "{note}");
    assert_eq!(note.lines().count(), 1);
    // The fallback engine works.
    let v = random_volume(&[6, 7], 1, 1);
    let plan = Plan {
        rotate_rad: vec![0.3],
        ..Plan::default()
    };
    assert!(apply_new(sel.backend.as_ref(), &plan, &v, None).is_ok());
}

#[test]
fn a_missing_device_ordinal_is_a_clear_error() {
    match CudaBackend::new(&[97], Precision::F32) {
        Ok(_) => panic!("device 97 does not exist"),
        Err(EngineError::CudaUnavailable(m)) | Err(EngineError::Cuda(m)) => {
            assert!(!m.is_empty());
        }
        Err(e) => panic!("unexpected error {e}"),
    }
    let sel = select_backend(&BackendSpec::Cuda(vec![97]));
    assert_eq!(sel.backend.name(), "cpu");
    assert!(sel.note.is_some());
}

#[test]
fn auto_and_cpu_select_the_cpu_for_host_data() {
    assert_eq!(select_backend(&BackendSpec::Auto).backend.name(), "cpu");
    assert_eq!(select_backend(&BackendSpec::Cpu).backend.name(), "cpu");
}

#[test]
fn devices_report_never_panics_and_says_why() {
    let r = device::discover();
    let text = r.to_string();
    assert!(text.contains("CUDA engine:"), "{text}");
    if let Some(why) = r.unavailable_reason() {
        assert!(!why.is_empty());
    }
}

/// Compares the CUDA engine with the CPU engine on one plan. Labels must be identical except at
/// order-0 ties: voxels whose input coordinate lies within 1e-4 (f32 coordinates) of a half-integer on some axis,
/// where the two engines' coordinates (the same field, but the resample's own arithmetic) may round
/// differently (docs/design.md §3: "order-0 ties at exactly .5 excepted").
fn random_plan(ndim: usize, k: u64, order: Order, mode: Mode) -> Plan {
    let f = |i: u64| ((k * 7919 + i * 104_729) % 1000) as f64 / 1000.0;
    Plan {
        flip: if k.is_multiple_of(2) {
            vec![0]
        } else {
            vec![ndim - 1]
        },
        rotate_rad: if ndim == 3 {
            vec![f(1) - 0.5, 0.8 * (f(2) - 0.5), f(3) - 0.5]
        } else {
            vec![2.0 * (f(1) - 0.5)]
        },
        scale: (0..ndim).map(|i| 0.8 + 0.5 * f(10 + i as u64)).collect(),
        translate: (0..ndim).map(|i| 6.0 * (f(20 + i as u64) - 0.5)).collect(),
        elastic: if k % 3 != 2 {
            Some(Elastic {
                alpha: 20.0 + 40.0 * f(30),
                sigma: 2.0 + 2.0 * f(31),
                seed: k * 31 + 5,
            })
        } else {
            None
        },
        order,
        mode,
        cval: if k.is_multiple_of(2) { 0.0 } else { 0.25 },
        out_shape: None,
        ..Plan::default()
    }
}

#[test]
fn gpu_matches_cpu_every_mode_order_and_layout() {
    let Some(g) = gpu(Precision::F32) else { return };
    let layouts: [(&str, Vec<usize>, usize); 3] = [
        ("2d", vec![37, 41], 1),
        ("3d", vec![13, 17, 19], 1),
        ("rgb", vec![29, 31], 3),
    ];
    let mut k = 0;
    for (name, shape, ch) in &layouts {
        let image = random_volume(shape, *ch, 11 + k);
        let label = random_labels(shape, 3 + k);
        for mode in Mode::ALL {
            for order in [Order::Nearest, Order::Linear, Order::Cubic] {
                k += 1;
                let plan = random_plan(shape.len(), k, order, mode);
                check_plan(
                    &g,
                    &plan,
                    &image,
                    Some(&label),
                    &format!("{name} {mode} order {order} plan {k}"),
                );
            }
        }
    }
}

#[test]
fn gpu_matches_cpu_on_larger_random_plans_and_output_shapes() {
    let Some(g) = gpu(Precision::F32) else { return };
    let image = random_volume(&[40, 64, 72], 1, 5);
    let label = random_labels(&[40, 64, 72], 6);
    for k in 0..6u64 {
        let order = [Order::Nearest, Order::Linear, Order::Cubic][k as usize % 3];
        let mode = Mode::ALL[(k as usize * 3) % 7];
        let mut plan = random_plan(3, k + 100, order, mode);
        if k == 4 {
            plan.out_shape = Some(vec![33, 50, 81]);
        }
        plan.elastic = Some(Elastic {
            alpha: 300.0,
            sigma: 6.0 + k as f64,
            seed: k,
        });
        check_plan(&g, &plan, &image, Some(&label), &format!("large plan {k}"));
    }
}

#[test]
fn gpu_elastic_field_and_coordinates_match_the_cpu() {
    let Some(g) = gpu(Precision::F32) else { return };
    for (shape, sigma, seed) in [
        (vec![24usize, 40, 36], 4.0, 42u64),
        (vec![50, 70], 3.0, 1 << 40),
        (vec![20, 30, 20], 45.0, 7),
    ] {
        let plan = Plan {
            rotate_rad: if shape.len() == 3 {
                vec![0.1, 0.2, 0.3]
            } else {
                vec![0.4]
            },
            elastic: Some(Elastic {
                alpha: 500.0,
                sigma,
                seed,
            }),
            ..Plan::default()
        };
        let map = plan.compose(&shape).unwrap();
        let cpu = CpuBackend::new();
        let field = cpu.field(&plan, &map.out_shape).map(|(f, _)| f);
        let want = coordinates(&map, field.as_deref());
        let got = g.coordinates(&plan, &shape).unwrap();
        let (frac, worst, _) = agreement(&want, &got, 1e-4);
        assert!(
            frac == 1.0,
            "coordinates {shape:?} sigma {sigma}: {frac} within 1e-4, worst {worst}"
        );
        let (cmax, crms) = field.as_ref().unwrap().displacement_stats(500.0);
        let (gmax, grms) = g
            .displacement_stats(&plan, &map.out_shape)
            .unwrap()
            .unwrap();
        assert!(
            (cmax - gmax).abs() <= 1e-6 * cmax.max(1.0),
            "max {cmax} vs {gmax}"
        );
        assert!(
            (crms - grms).abs() <= 1e-6 * crms.max(1.0),
            "rms {crms} vs {grms}"
        );
    }
}

/// The device's unit field is the CPU engine's bit for bit: every pass sums in the CPU's order
/// (kernels/field.cu) on every kernel path: the whole-column noise pass and the tiled noise pass
/// (axis 0 too long for a block), register and shared-memory windows, the direct kernel past the
/// tiled radius, per-axis sigma in mm space, 2D, and trailing axes of length 1.
#[test]
fn gpu_unit_field_equals_the_cpu_field_bit_for_bit() {
    let Some(g) = gpu(Precision::F32) else { return };
    let iso = |shape: Vec<usize>, sigma: f64, seed: u64| {
        let plan = Plan {
            elastic: Some(Elastic {
                alpha: 100.0,
                sigma,
                seed,
            }),
            ..Plan::default()
        };
        (shape, plan)
    };
    let mut cases = vec![
        iso(vec![24, 40, 36], 1.0, 1),
        iso(vec![24, 40, 36], 4.0, 2),
        iso(vec![40, 64, 72], 12.0, 1 << 40),
        iso(vec![300, 20, 24], 12.0, 3),
        iso(vec![30, 50, 44], 20.0, 4),
        iso(vec![20, 30, 20], 45.0, 5),
        iso(vec![50, 70], 3.0, 6),
        iso(vec![17, 29, 1], 3.0, 7),
        iso(vec![9, 1, 31], 2.0, 8),
    ];
    // sigma_vox [2.5, 9.4, 6.25] and [36, 6, 6] (the direct kernel on a middle pass).
    for (shape, spacing, sigma_mm) in [
        (vec![20, 48, 40], vec![3.0, 0.8, 1.2], 7.5),
        (vec![16, 30, 28], vec![0.5, 3.0, 3.0], 18.0),
    ] {
        let plan = Plan {
            elastic: Some(Elastic {
                alpha: 40.0,
                sigma: sigma_mm,
                seed: 9,
            }),
            space: Space::Mm,
            spacing_mm: spacing,
            ..Plan::default()
        };
        cases.push((shape, plan));
    }
    for (shape, plan) in cases {
        let cpu = CpuBackend::new();
        let want: Vec<f32> = cpu
            .field(&plan, &shape)
            .expect("a field")
            .0
            .components
            .concat();
        let got = g.unit_field(&plan, &shape).unwrap().expect("a field");
        assert_eq!(got.len(), want.len());
        let differ = got
            .iter()
            .zip(&want)
            .filter(|(a, b)| a.to_bits() != b.to_bits())
            .count();
        let worst = got
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert_eq!(
            differ,
            0,
            "{shape:?} sigma_vox {:?}: {differ} of {} values differ, worst {worst}",
            plan.field_sigma_vox(shape.len()),
            want.len()
        );
    }
}

/// The elastic field is kept across plans that differ only in alpha, angles or mode, and made
/// anew for a new seed: on the CUDA engine and on the CPU engine alike.
#[test]
fn gpu_field_is_cached_across_alpha_and_angles() {
    for_each_backend(|g| {
        let image = random_volume(&[20, 24, 28], 1, 9);
        let mut plan = Plan {
            elastic: Some(Elastic {
                alpha: 100.0,
                sigma: 3.0,
                seed: 77,
            }),
            ..Plan::default()
        };
        let first = plan.clone();
        plan.elastic = Some(Elastic {
            alpha: 250.0,
            sigma: 3.0,
            seed: 77,
        });
        plan.rotate_rad = vec![0.2, 0.0, 0.1];
        plan.mode = Mode::Reflect;
        assert!(
            cached_on_second_run(g, &first, &plan, &image),
            "the field was recomputed"
        );
        plan.elastic = Some(Elastic {
            alpha: 250.0,
            sigma: 3.0,
            seed: 78,
        });
        let (_, _, t) = apply_new(g, &plan, &image, None).unwrap();
        assert!(t.field_ms > 0.0, "a new seed needs a new field");
    });
}

#[test]
fn gpu_half_precision_storage_stays_close() {
    for (p, tol) in [(Precision::F16, 2e-3f32), (Precision::Bf16, 1.6e-2)] {
        let Some(g) = gpu(p) else { return };
        let image = random_volume(&[16, 20, 24], 1, 4);
        for order in [Order::Linear, Order::Cubic] {
            let plan = random_plan(3, 8, order, Mode::Reflect);
            let (want, _, _) = apply_new(&CpuBackend::new(), &plan, &image, None).unwrap();
            let (got, _, _) = apply_new(&g, &plan, &image, None).unwrap();
            let (frac, worst, nan) = agreement(&want.data, &got.data, tol);
            assert_eq!(nan, 0);
            eprintln!(
                "{p:?} order {order}: {:.4} % within {tol}, worst {worst}",
                frac * 100.0
            );
            assert!(
                frac >= 0.999,
                "{p:?} order {order}: {frac} within {tol}, worst {worst}"
            );
        }
    }
}

#[test]
fn gpu_out_of_memory_falls_back_to_the_cpu() {
    // A separate process would be cleaner; the limit is read when a device is first opened, so
    // this test opens its own engine only if none was opened before with another limit.
    if device::discover().unavailable_reason().is_some() {
        common::skipped("no usable CUDA device");
        return;
    }
    let tracker = std::sync::Arc::new(device::MemTracker::new(Some(1024)));
    assert!(matches!(
        tracker.reserve(4096, "a volume"),
        Err(augscope::gpu::GpuError::OutOfMemory(_))
    ));
    // End to end through the env limit: see scripts/gpu_check.sh, which runs `augscope apply`
    // with AUGSCOPE_GPU_MEM_LIMIT=1M and checks the report's note.
}

#[test]
fn gpu_batch_runs_on_every_listed_device() {
    let Some(g) = gpu(Precision::F32) else { return };
    let images: Vec<Volume> = (0..5)
        .map(|i| random_volume(&[12, 14, 16], 1, 50 + i))
        .collect();
    let plan = random_plan(3, 3, Order::Linear, Mode::Constant);
    let n = images[0].data.len();
    let mut outs: Vec<Vec<f32>> = (0..5).map(|_| vec![0f32; n]).collect();
    let jobs = images
        .iter()
        .zip(outs.iter_mut())
        .map(|(im, o)| {
            (
                augscope::engine::Job {
                    plan: &plan,
                    image: im,
                    label: None,
                },
                augscope::engine::Outputs {
                    image: o.as_mut_slice(),
                    label: None,
                },
            )
        })
        .collect();
    for r in g.apply_batch(jobs) {
        r.unwrap();
    }
    for (im, o) in images.iter().zip(&outs) {
        let (want, _, _) = apply_new(&CpuBackend::new(), &plan, im, None).unwrap();
        let (frac, _, _) = agreement(&want.data, o, 1e-4);
        assert!(frac >= 0.9999);
    }
    let _ = g.name();
}

/// The scipy fixtures of `tests/fixtures/cases.json` (written by `gen_fixtures.py`, the same
/// cases `tests/scipy_fixtures.rs` checks the CPU engine on), run on the GPU: the same bar,
/// ≥ 99.99 % of the unmasked voxels within the fixture tolerance of scipy, labels identical.
#[test]
fn gpu_matches_scipy_fixtures() {
    let Some(g) = gpu(Precision::F32) else { return };
    check_fixture_dir(&g, "tests/fixtures");
}

/// The mm-space fixtures of `tests/fixtures/space/` (written by `gen_space_fixtures.py`, checked
/// on the CPU by `tests/space_fixtures.rs`) on the GPU: anisotropic spacing, per-axis sigma.
#[test]
fn gpu_matches_mm_space_scipy_fixtures() {
    let Some(g) = gpu(Precision::F32) else { return };
    check_fixture_dir(&g, "tests/fixtures/space");
}

/// Every case of `<dir>/cases.json` on the GPU against its scipy reference.
#[allow(clippy::unwrap_used)] // a test helper: a malformed fixture fails the test loudly
fn check_fixture_dir(g: &dyn Backend, dir: &str) {
    use augscope::io::npy;
    let dir = common::fixtures::root().join(dir);
    let text = std::fs::read_to_string(dir.join("cases.json")).unwrap();
    let fx: serde_json::Value = serde_json::from_str(&text).unwrap();
    let tol = fx["tolerance"].as_f64().unwrap();
    let min_pass = fx["min_pass_fraction"].as_f64().unwrap();
    let load = |name: &str| npy::read(&dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    let (mut cases, mut failures, mut voxels) = (0, vec![], 0usize);
    for case in fx["cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let plan: Plan =
            serde_json::from_value(case["plan"].clone()).unwrap_or_else(|e| panic!("{name}: {e}"));
        let channels = case["channels"].as_u64().unwrap_or(1) as usize;
        let a = load(case["input"].as_str().unwrap());
        let shape = if channels > 1 {
            a.shape[1..].to_vec()
        } else {
            a.shape.clone()
        };
        let image = Volume::new(a.data, shape, channels);
        let label = case["label"].as_str().map(|l| {
            let a = load(l);
            Volume::new(a.data, a.shape.clone(), 1)
        });
        let (out, out_label, _) =
            apply_new(g, &plan, &image, label.as_ref()).unwrap_or_else(|e| panic!("{name}: {e}"));
        let want = load(case["expected"].as_str().unwrap());
        let n: usize = out.shape.iter().product();
        let mask = case["mask"].as_str().map(|m| load(m).data);
        let (mut bad, mut compared) = (0usize, 0usize);
        for (i, (&x, &w)) in out.data.iter().zip(&want.data).enumerate() {
            assert!(!x.is_nan(), "{name}: NaN");
            if mask.as_ref().is_some_and(|m| m[i % n] != 0.0) {
                continue;
            }
            compared += 1;
            if (x as f64 - w as f64).abs() > tol {
                bad += 1;
            }
        }
        voxels += compared;
        if 1.0 - (bad as f64 / compared.max(1) as f64) < min_pass {
            failures.push(format!("{name}: {bad}/{compared} voxels off by > {tol}"));
        }
        if let (Some(exp), Some(got)) = (case["expected_label"].as_str(), &out_label) {
            let want = load(exp);
            let lmask = case["label_mask"].as_str().map(|m| load(m).data);
            let wrong = (0..want.data.len())
                .filter(|&i| !lmask.as_ref().is_some_and(|m| m[i] != 0.0))
                .filter(|&i| got.data[i] != want.data[i])
                .count();
            if wrong > 0 {
                failures.push(format!("{name}: {wrong} label voxels differ"));
            }
        }
        cases += 1;
    }
    eprintln!(
        "GPU vs scipy: {cases} fixture cases, {voxels} voxels compared, {} failures",
        failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// mm space on the GPU: the voxel matrix `diag(s) S⁻¹ Rᵀ S`, per-axis alpha, and a field smoothed
/// with a different sigma on every axis (one axis past the tiled kernels' radius, so the direct
/// and tiled passes mix), against the CPU engine; coordinates, displacement and the field cache.
#[test]
fn gpu_matches_cpu_in_mm_space_with_anisotropic_sigma() {
    let Some(g) = gpu(Precision::F32) else { return };
    let cases: [(Vec<usize>, Vec<f64>, f64); 4] = [
        // sigma_vox [2.5, 9.4, 6.25]
        (vec![20, 48, 40], vec![3.0, 0.8, 1.2], 7.5),
        // sigma_vox [3.2, 40] (x past the tiled radius: direct kernel on the last pass)
        (vec![44, 38], vec![2.5, 0.2], 8.0),
        // sigma_vox [0.36, 2.2, 1.8]: radius 1 along the thick slices
        (vec![9, 33, 35], vec![5.0, 0.8, 1.0], 1.8),
        // sigma_vox [36, 6, 6]: the direct kernel on a middle pass
        (vec![16, 30, 28], vec![0.5, 3.0, 3.0], 18.0),
    ];
    for (k, (shape, spacing, sigma_mm)) in cases.into_iter().enumerate() {
        let nd = shape.len();
        let image = random_volume(&shape, 1, 40 + k as u64);
        let label = random_labels(&shape, 50 + k as u64);
        for (order, mode) in [
            (Order::Linear, Mode::Constant),
            (Order::Cubic, Mode::Reflect),
            (Order::Nearest, Mode::Mirror),
        ] {
            let plan = Plan {
                rotate_rad: if nd == 3 {
                    vec![0.3, -0.45, 0.6]
                } else {
                    vec![0.7]
                },
                scale: vec![1.1],
                translate: (0..nd).map(|a| 2.0 - a as f64).collect(),
                flip: vec![nd - 1],
                elastic: Some(Elastic {
                    alpha: 40.0,
                    sigma: sigma_mm,
                    seed: 9 + k as u64,
                }),
                order,
                mode,
                space: Space::Mm,
                spacing_mm: spacing.clone(),
                ..Plan::default()
            };
            let sigma_vox = plan.field_sigma_vox(nd).unwrap();
            let what =
                format!("mm {shape:?} spacing {spacing:?} sigma_vox {sigma_vox:?} {mode} o{order}");
            check_plan(&g, &plan, &image, Some(&label), &what);
            let map = plan.compose(&shape).unwrap();
            let cpu = CpuBackend::new();
            let field = cpu.field(&plan, &map.out_shape).map(|(f, _)| f).unwrap();
            assert_eq!(field.sigma_vox, sigma_vox);
            let want = coordinates(&map, Some(&field));
            let got = g.coordinates(&plan, &shape).unwrap();
            let (frac, worst, _) = agreement(&want, &got, 1e-4);
            assert!(
                frac == 1.0,
                "{what}: coordinates {frac} within 1e-4, worst {worst}"
            );
            let (cmax, crms) = field.displacement_stats(40.0);
            let (gmax, grms) = g
                .displacement_stats(&plan, &map.out_shape)
                .unwrap()
                .unwrap();
            assert!(
                (cmax - gmax).abs() <= 1e-6 * cmax.max(1.0),
                "{what}: max {cmax} vs {gmax}"
            );
            assert!(
                (crms - grms).abs() <= 1e-6 * crms.max(1.0),
                "{what}: rms {crms} vs {grms}"
            );
        }
    }
    // The device field is keyed by the per-axis sigma: another spacing is another field, the
    // same one is cached.
    let image = random_volume(&[12, 20, 22], 1, 3);
    let mut plan = Plan {
        elastic: Some(Elastic {
            alpha: 30.0,
            sigma: 6.0,
            seed: 5,
        }),
        space: Space::Mm,
        spacing_mm: vec![3.0, 1.0, 1.0],
        ..Plan::default()
    };
    let first = plan.clone();
    plan.rotate_rad = vec![0.1, 0.2, 0.3];
    assert!(
        cached_on_second_run(&g, &first, &plan, &image),
        "same spacing: the field is cached"
    );
    plan.spacing_mm = vec![2.0, 1.0, 1.0];
    let (_, _, t) = apply_new(&g, &plan, &image, None).unwrap();
    assert!(t.field_ms > 0.0, "another spacing needs another field");
}

#[test]
fn gpu_slice_path_equals_the_planes_of_the_full_volume() {
    // The viewer's path: one plane per call, the image kept on the device between calls (same
    // key), planes equal to those of the full transform (and of the CPU's slice path).
    let Some(g) = gpu(Precision::F32) else { return };
    let image = random_volume(&[18, 26, 30], 2, 21);
    let label = random_labels(&[18, 26, 30], 22);
    let cpu = CpuBackend::new();
    for (k, order) in [Order::Nearest, Order::Linear, Order::Cubic]
        .into_iter()
        .enumerate()
    {
        let mut plan = random_plan(3, 40 + k as u64, order, Mode::Mirror);
        plan.elastic = Some(Elastic {
            alpha: 60.0,
            sigma: 3.0,
            seed: 5 + k as u64,
        });
        let (full, full_lab, _) = apply_new(&g, &plan, &image, Some(&label)).unwrap();
        let full_lab = full_lab.unwrap();
        let [d, h, w] = [18usize, 26, 30];
        for (axis, index) in [(0usize, 7usize), (1, 0), (2, 29), (1, 13)] {
            let plane_n = d * h * w / [d, h, w][axis];
            let mut got = vec![0f32; 2 * plane_n];
            let mut got_lab = vec![0f32; plane_n];
            // Twice with the same key: the second call reuses the device copy of the image.
            for _ in 0..2 {
                let job = augscope::engine::Job {
                    plan: &plan,
                    image: &image,
                    label: Some(&label),
                };
                g.apply_plane(
                    job,
                    Plane { axis, index },
                    Some(1234),
                    Outputs {
                        image: &mut got,
                        label: Some(&mut got_lab),
                    },
                )
                .unwrap();
                let mut want = vec![0f32; 2 * plane_n];
                let mut want_lab = vec![0f32; plane_n];
                let full_v = Volume::new(full.data.clone(), full.shape.clone(), 2);
                let full_l = Volume::new(full_lab.data.clone(), full_lab.shape.clone(), 1);
                plane_of(&full_v, axis, index, &mut want);
                plane_of(&full_l, axis, index, &mut want_lab);
                assert_eq!(got, want, "order {order:?} axis {axis} index {index}");
                assert_eq!(got_lab, want_lab, "labels, axis {axis} index {index}");
            }
            // And the CPU's slice path agrees to f32 rounding of the field.
            let mut cpu_img = vec![0f32; 2 * plane_n];
            let job = augscope::engine::Job {
                plan: &plan,
                image: &image,
                label: None,
            };
            cpu.apply_plane(
                job,
                Plane { axis, index },
                None,
                Outputs {
                    image: &mut cpu_img,
                    label: None,
                },
            )
            .unwrap();
            let (frac, worst, nan) = agreement(&got, &cpu_img, 1e-4);
            assert!(
                frac >= 0.9999 && nan == 0,
                "CPU vs GPU slice, axis {axis}: {frac} within 1e-4, worst {worst}"
            );
        }
    }
    // A new image under a new key is uploaded again.
    let other = random_volume(&[18, 26, 30], 2, 99);
    let plan = random_plan(3, 3, Order::Linear, Mode::Constant);
    let (full, _, _) = apply_new(&g, &plan, &other, None).unwrap();
    let mut got = vec![0f32; 2 * 26 * 30];
    let job = augscope::engine::Job {
        plan: &plan,
        image: &other,
        label: None,
    };
    g.apply_plane(
        job,
        Plane { axis: 0, index: 4 },
        Some(1235),
        Outputs {
            image: &mut got,
            label: None,
        },
    )
    .unwrap();
    let mut want = vec![0f32; 2 * 26 * 30];
    plane_of(&full, 0, 4, &mut want);
    assert_eq!(got, want);
}

/// The plane `index` normal to `axis` of a 3D volume, every channel.
fn plane_of(v: &Volume, axis: usize, index: usize, dst: &mut [f32]) {
    let [d, h, w] = [v.shape[0], v.shape[1], v.shape[2]];
    let mut k = 0;
    for ch in 0..v.channels {
        for z in 0..d {
            for y in 0..h {
                for x in 0..w {
                    if [z, y, x][axis] == index {
                        dst[k] = v.data[ch * d * h * w + (z * h + y) * w + x];
                        k += 1;
                    }
                }
            }
        }
    }
}

/// Many volumes in one set of launches (`CudaBackend::apply_batch` → `DeviceEngine::apply_many`)
/// against one launch per volume: bit for bit, for a shared image and for one image per sample,
/// with labels, RGB channels, 2D and 3D, samples with and without a field, sigmas shared by
/// several samples and sigmas of their own, an identity plan, an output grid of another shape,
/// and order 3 (prefiltered once per batch, with and without scipy's prepad). `Timings::batched` proves the batched path ran (a failed batch is retried job by job).
#[test]
fn gpu_batched_launch_equals_single_launches_bit_for_bit() {
    let Some(g) = gpu(Precision::F32) else { return };
    struct Case {
        shape: Vec<usize>,
        channels: usize,
        label: bool,
        shared: bool,
        out_shape: Option<Vec<usize>>,
        order: Order,
        mode: Mode,
        /// One cval for every sample (order 3 grid-constant pads with it: one batch per cval).
        fixed_cval: bool,
    }
    let cases = [
        Case {
            shape: vec![20, 33, 47],
            channels: 1,
            label: true,
            shared: true,
            out_shape: None,
            order: Order::Linear,
            mode: Mode::Constant,
            fixed_cval: false,
        },
        Case {
            shape: vec![20, 33, 47],
            channels: 1,
            label: true,
            shared: false,
            out_shape: None,
            order: Order::Nearest,
            mode: Mode::Reflect,
            fixed_cval: false,
        },
        Case {
            shape: vec![17, 26, 31],
            channels: 2,
            label: false,
            shared: false,
            out_shape: Some(vec![15, 29, 24]),
            order: Order::Linear,
            mode: Mode::Mirror,
            fixed_cval: false,
        },
        Case {
            shape: vec![40, 52],
            channels: 3,
            label: false,
            shared: true,
            out_shape: None,
            order: Order::Linear,
            mode: Mode::Wrap,
            fixed_cval: false,
        },
        Case {
            shape: vec![40, 52],
            channels: 1,
            label: true,
            shared: false,
            out_shape: Some(vec![33, 61]),
            order: Order::Linear,
            mode: Mode::Nearest,
            fixed_cval: false,
        },
        Case {
            shape: vec![20, 33, 47],
            channels: 1,
            label: true,
            shared: true,
            out_shape: None,
            order: Order::Cubic,
            mode: Mode::GridConstant,
            fixed_cval: true,
        },
        Case {
            shape: vec![17, 26, 31],
            channels: 2,
            label: false,
            shared: false,
            out_shape: None,
            order: Order::Cubic,
            mode: Mode::Reflect,
            fixed_cval: false,
        },
        Case {
            shape: vec![40, 52],
            channels: 1,
            label: false,
            shared: false,
            out_shape: Some(vec![33, 61]),
            order: Order::Cubic,
            mode: Mode::Nearest,
            fixed_cval: false,
        },
    ];
    for (ci, c) in cases.iter().enumerate() {
        let ndim = c.shape.len();
        let count = 9;
        let images: Vec<Volume> = (0..if c.shared { 1 } else { count })
            .map(|i| random_volume(&c.shape, c.channels, 900 + 10 * ci as u64 + i as u64))
            .collect();
        let labels: Vec<Volume> = (0..images.len())
            .map(|i| random_labels(&c.shape, 700 + i as u64))
            .collect();
        let plans: Vec<Plan> = (0..count)
            .map(|k| {
                let mut p = random_plan(ndim, k as u64 + 3 * ci as u64, c.order, c.mode);
                p.out_shape = c.out_shape.clone();
                if let Some(e) = p.elastic.as_mut() {
                    // Samples 0..4 share one sigma (one set of field passes for them all).
                    if k < 4 {
                        e.sigma = 3.0;
                    }
                }
                if k == 5 {
                    // An identity plan (copied, not launched) unless the grid changes.
                    p = Plan {
                        order: c.order,
                        mode: c.mode,
                        out_shape: c.out_shape.clone(),
                        ..Plan::default()
                    };
                }
                if c.fixed_cval {
                    p.cval = 0.125;
                }
                p
            })
            .collect();
        let pick = |k: usize| if c.shared { 0 } else { k };
        let out_shape = c.out_shape.clone().unwrap_or_else(|| c.shape.clone());
        let n_out: usize = out_shape.iter().product();
        let mut outs: Vec<Vec<f32>> = (0..count)
            .map(|_| vec![f32::NAN; c.channels * n_out])
            .collect();
        let mut lab_outs: Vec<Vec<f32>> = (0..count).map(|_| vec![f32::NAN; n_out]).collect();
        let jobs = outs
            .iter_mut()
            .zip(lab_outs.iter_mut())
            .enumerate()
            .map(|(k, (o, l))| {
                (
                    augscope::engine::Job {
                        plan: &plans[k],
                        image: &images[pick(k)],
                        label: c.label.then(|| &labels[pick(k)]),
                    },
                    augscope::engine::Outputs {
                        image: o.as_mut_slice(),
                        label: if c.label {
                            Some(l.as_mut_slice())
                        } else {
                            None
                        },
                    },
                )
            })
            .collect();
        let results = g.apply_batch(jobs);
        for (k, r) in results.into_iter().enumerate() {
            let t = r.unwrap_or_else(|e| panic!("case {ci} job {k}: {e}"));
            assert_eq!(
                t.batched,
                Some(count),
                "case {ci} job {k} did not run batched"
            );
            let (want, want_lab, _) = apply_new(
                &g,
                &plans[k],
                &images[pick(k)],
                c.label.then(|| &labels[pick(k)]),
            )
            .unwrap_or_else(|e| panic!("case {ci} job {k} alone: {e}"));
            let same = want
                .data
                .iter()
                .zip(&outs[k])
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(
                same,
                "case {ci} job {k}: batched image differs from the single launch"
            );
            if let Some(wl) = want_lab {
                assert_eq!(wl.data, lab_outs[k], "case {ci} job {k}: labels differ");
            }
            // And the single launch is the CPU's result (the engine's own bar).
            if k % 4 == 0 {
                let (cpu, _, _) = apply_new(&CpuBackend::new(), &plans[k], &images[pick(k)], None)
                    .unwrap_or_else(|e| panic!("{e}"));
                let (frac, worst, _) = agreement(&cpu.data, &outs[k], 1e-4);
                assert!(
                    frac >= 0.9999,
                    "case {ci} job {k}: {frac} within 1e-4 of the CPU, worst {worst}"
                );
            }
        }
    }
}

/// `cuda:0,0`: a batch split between two device workers (here both on device 0, the split a
/// machine with one GPU can run) gives the same outputs bit for bit as one worker, for batches
/// with labels and elastic fields of several seeds and sigmas, in both workers' shares.
#[test]
fn gpu_batch_split_between_two_workers_equals_one_bit_for_bit() {
    let Some(one) = gpu(Precision::F32) else {
        return;
    };
    let two = CudaBackend::new(&[0, 0], Precision::F32).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(two.name(), "cuda:0,0");
    let shape = [18usize, 26, 30];
    let images: Vec<Volume> = (0..7).map(|i| random_volume(&shape, 1, 90 + i)).collect();
    let labels: Vec<Volume> = (0..7).map(|i| random_labels(&shape, 190 + i)).collect();
    let plans: Vec<Plan> = (0..7u64)
        .map(|k| {
            let mut p = random_plan(3, k, Order::Linear, Mode::Reflect);
            p.elastic = Some(Elastic {
                alpha: 40.0 + 10.0 * k as f64,
                sigma: if k % 2 == 0 { 3.0 } else { 4.5 },
                seed: 1000 + k,
            });
            p
        })
        .collect();
    let run = |b: &CudaBackend| -> Vec<(Vec<f32>, Vec<f32>)> {
        let n = images[0].data.len();
        let mut outs: Vec<(Vec<f32>, Vec<f32>)> =
            (0..7).map(|_| (vec![0f32; n], vec![0f32; n])).collect();
        let jobs = outs
            .iter_mut()
            .enumerate()
            .map(|(i, (o, l))| {
                (
                    augscope::engine::Job {
                        plan: &plans[i],
                        image: &images[i],
                        label: Some(&labels[i]),
                    },
                    Outputs {
                        image: o.as_mut_slice(),
                        label: Some(l.as_mut_slice()),
                    },
                )
            })
            .collect();
        for r in b.apply_batch(jobs) {
            r.unwrap_or_else(|e| panic!("{e}"));
        }
        outs
    };
    let a = run(&one);
    let b = run(&two);
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!(
            x.0.iter()
                .zip(&y.0)
                .all(|(p, q)| p.to_bits() == q.to_bits()),
            "sample {i}: image differs between cuda:0 and cuda:0,0"
        );
        assert_eq!(x.1, y.1, "sample {i}: label map differs");
    }
    // The batch moved something: not every output is its input.
    assert!(a.iter().zip(&images).any(|(o, im)| o.0 != im.data));
}
