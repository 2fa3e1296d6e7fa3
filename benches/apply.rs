//! CPU engine benchmarks on the README's benchmark workload (48x240x240 float32): the full
//! elastic + rotate + scale pipeline at order 1, its parts, rotation alone, and the intensity
//! steps beside a copy of the volume.
//! `cargo bench --bench apply`. The scipy comparison on the same workload is
//! `benches/scipy_compare.py`.

#![allow(clippy::unwrap_used)] // a benchmark on fixed, valid inputs

use criterion::{Criterion, criterion_group, criterion_main};

use augscope::augment::{Elastic, Mode, Order, Plan};
use augscope::core::volume::Volume;
use augscope::engine::cpu::CpuBackend;
use augscope::engine::field::ElasticField;
use augscope::engine::{Backend, Job, Outputs, Plane};

const SHAPE: [usize; 3] = [48, 240, 240];

fn volume() -> Volume {
    let n: usize = SHAPE.iter().product();
    let mut s = 0x2545_f491_4f6c_dd1du64;
    let data = (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 24) as f32
        })
        .collect();
    Volume::new(data, SHAPE.to_vec(), 1)
}

fn full_plan(seed: u64) -> Plan {
    Plan {
        rotate_rad: vec![0.2, -0.1, 0.3],
        scale: vec![1.1],
        elastic: Some(Elastic {
            alpha: 800.0,
            sigma: 12.0,
            seed,
        }),
        order: Order::Linear,
        mode: Mode::Constant,
        ..Plan::default()
    }
}

fn bench(c: &mut Criterion) {
    let vol = volume();
    let mut out = vec![0f32; vol.data.len()];
    let mut g = c.benchmark_group("cpu_48x240x240");
    g.sample_size(10);
    g.bench_function("full_elastic_rotate_scale_order1", |b| {
        let mut seed = 0;
        b.iter(|| {
            // A fresh engine and seed each time: the elastic field is computed, not cached.
            seed += 1;
            let plan = full_plan(seed);
            let job = Job {
                plan: &plan,
                image: &vol,
                label: None,
            };
            CpuBackend::new()
                .apply(
                    job,
                    Outputs {
                        image: &mut out,
                        label: None,
                    },
                )
                .unwrap();
        })
    });
    g.bench_function("elastic_field_sigma12", |b| {
        b.iter(|| ElasticField::compute(&SHAPE, 12.0, 3))
    });
    let cpu = CpuBackend::new();
    g.bench_function("resample_cached_field_order1", |b| {
        let plan = full_plan(1);
        b.iter(|| {
            let job = Job {
                plan: &plan,
                image: &vol,
                label: None,
            };
            cpu.apply(
                job,
                Outputs {
                    image: &mut out,
                    label: None,
                },
            )
            .unwrap();
        })
    });
    g.bench_function("rotate_only_order1", |b| {
        let plan = Plan {
            rotate_rad: vec![0.2, -0.1, 0.3],
            ..Plan::default()
        };
        b.iter(|| {
            let job = Job {
                plan: &plan,
                image: &vol,
                label: None,
            };
            cpu.apply(
                job,
                Outputs {
                    image: &mut out,
                    label: None,
                },
            )
            .unwrap();
        })
    });
    g.bench_function("rotate_only_order3", |b| {
        let plan = Plan {
            rotate_rad: vec![0.2, -0.1, 0.3],
            order: Order::Cubic,
            ..Plan::default()
        };
        b.iter(|| {
            let job = Job {
                plan: &plan,
                image: &vol,
                label: None,
            };
            cpu.apply(
                job,
                Outputs {
                    image: &mut out,
                    label: None,
                },
            )
            .unwrap();
        })
    });
    g.finish();
}

/// The GUI's interactive path on the bundled 197x233x189 sample: the three slices on screen
/// (axial, coronal, sagittal) after a parameter change, each computed on its own.
fn slices(c: &mut Criterion) {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/assets/mni152_t1.nii.gz");
    let vol = augscope::io::load(std::path::Path::new(path), &Default::default()).unwrap();
    let mut g = c.benchmark_group("cpu_slices_mni152");
    g.sample_size(10);
    let three = |cpu: &CpuBackend, plan: &Plan| {
        for axis in 0..3 {
            let len = vol.data.len() / vol.shape[axis];
            let mut out = vec![0f32; len];
            let job = Job {
                plan,
                image: &vol,
                label: None,
            };
            cpu.apply_plane(
                job,
                Plane {
                    axis,
                    index: vol.shape[axis] / 2,
                },
                None,
                Outputs {
                    image: &mut out,
                    label: None,
                },
            )
            .unwrap();
        }
    };
    g.bench_function("three_slices_new_elastic_seed", |b| {
        let mut seed = 0;
        b.iter(|| {
            seed += 1;
            three(&CpuBackend::new(), &full_plan(seed));
        })
    });
    let cpu = CpuBackend::new();
    g.bench_function("three_slices_alpha_or_angle_change", |b| {
        let mut k = 0.0;
        b.iter(|| {
            k += 0.01;
            let mut plan = full_plan(1);
            plan.rotate_rad[0] += k;
            three(&cpu, &plan);
        })
    });
    g.finish();
}

/// The intensity steps on the workload's volume (11 MB of f32), beside a copy of it: the floor of
/// a pointwise step is one read and one write of the volume.
fn intensity(c: &mut Criterion) {
    use augscope::core::IntensityStep;
    let vol = volume();
    let mut g = c.benchmark_group("intensity_48x240x240");
    g.sample_size(20);
    let mut out = vec![0f32; vol.data.len()];
    g.bench_function("copy (the floor)", |b| {
        b.iter(|| out.copy_from_slice(&vol.data))
    });
    let step = |json: &str| -> IntensityStep {
        serde_json::from_str(json).expect("a step the bench spells right")
    };
    let steps = [
        (
            "gaussian_noise",
            step(r#"{"gaussian_noise": {"std": [0.1], "seed": 1}}"#),
        ),
        (
            "gaussian_blur (sigma 1)",
            step(r#"{"gaussian_blur": {"sigmas": [[1, 1, 1]]}}"#),
        ),
        (
            "brightness",
            step(r#"{"brightness": {"multipliers": [1.2]}}"#),
        ),
        (
            "contrast (preserve_range)",
            step(r#"{"contrast": {"factors": [0.8], "preserve_range": true}}"#),
        ),
        (
            "low_resolution (0.5)",
            step(r#"{"low_resolution": {"scales": [[0.5, 0.5, 0.5]]}}"#),
        ),
        (
            "gamma",
            step(r#"{"gamma": {"channels": [{"gamma": 1.3}]}}"#),
        ),
        (
            "gamma (invert, retain_stats)",
            step(
                r#"{"gamma": {"channels": [{"gamma": 1.3, "invert": true, "retain_stats": true}]}}"#,
            ),
        ),
    ];
    for (name, step) in steps {
        g.bench_function(name, |b| {
            b.iter(|| {
                out.copy_from_slice(&vol.data);
                step.apply(&mut out, &vol.shape, 1);
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench, slices, intensity);
criterion_main!(benches);
