//! The intensity families as presets draw them and engines apply them: the bundled nnunet-v2
//! preset draws nnU-Net v2's seven steps with batchgeneratorsv2's probabilities; a batch leaves
//! the label map as the spatial plan alone makes it; a preset sample's steps give the same image
//! through `apply` on every engine (the CUDA engine where a device opens); bad preset values are
//! one line and exit 2. The formulas themselves are checked against batchgeneratorsv2 by
//! tests/interop/check_intensity.py. Arrays are `[z, y, x]`.

#![allow(clippy::unwrap_used)] // test helpers: a failed unwrap is a failed test

mod common;

use augscope::augment::preset::{self, Preset};
use augscope::core::IntensityStep;
use augscope::engine::apply_new;
use augscope::{Plan, Volume};
use common::backends::for_each_backend;
use common::cli::{assert_user_error, run, s};

fn nnunet() -> Preset {
    preset::load_or_bundled(std::path::Path::new("nnunet-v2")).unwrap()
}

#[test]
fn nnunet_v2_draws_the_seven_steps_at_their_rates() {
    let p = nnunet();
    let names: Vec<&str> = p.intensity.iter().map(|s| s.name()).collect();
    assert_eq!(
        names,
        [
            "gaussian_noise",
            "gaussian_blur",
            "brightness",
            "contrast",
            "low_resolution",
            "gamma",
            "gamma"
        ]
    );
    // Per step, the share of samples where it acts on a channel: p, times (for blur and low
    // resolution) the chance that at least one of two channels takes part (1 - 0.5^2).
    let want = [0.1, 0.2 * 0.75, 0.15, 0.15, 0.25 * 0.75, 0.1, 0.3];
    let n = 4000;
    let mut count = [0usize; 7];
    for seed in 0..n {
        let sample = p.sample(seed, 3, 2, &[1.0; 3]).unwrap();
        let drawn = sample.drawn["intensity"].as_array().unwrap();
        for (k, d) in drawn.iter().enumerate() {
            let took = d["channels"].as_array().unwrap().iter().any(|c| c == true);
            if d["fired"] == true && took {
                count[k] += 1;
            }
        }
        // The plan lists exactly the steps that acted, in the preset's order.
        assert_eq!(
            sample.plan.intensity.len(),
            drawn
                .iter()
                .filter(|d| d["fired"] == true
                    && d["channels"].as_array().unwrap().iter().any(|c| c == true))
                .count()
        );
    }
    for (k, (&c, &w)) in count.iter().zip(&want).enumerate() {
        let rate = c as f64 / n as f64;
        // 5 standard errors of a binomial rate.
        let se = (w * (1.0 - w) / n as f64).sqrt();
        assert!(
            (rate - w).abs() < 5.0 * se,
            "step {k}: rate {rate}, want {w}"
        );
    }
}

#[test]
fn draws_do_not_depend_on_other_steps() {
    // Changing one step's probability leaves what the others draw unchanged (own streams).
    let p = nnunet();
    let mut q = p.clone();
    if let Some(augscope::core::IntensitySpec::Brightness(b)) = q.intensity.get_mut(2) {
        b.p = 1.0;
    }
    for seed in 0..50 {
        let a = p.sample(seed, 3, 1, &[1.0; 3]).unwrap();
        let b = q.sample(seed, 3, 1, &[1.0; 3]).unwrap();
        let gammas = |s: &preset::Sample| -> Vec<IntensityStep> {
            s.plan
                .intensity
                .iter()
                .filter(|st| st.name() == "gamma")
                .cloned()
                .collect()
        };
        assert_eq!(gammas(&a), gammas(&b));
        assert_eq!(a.plan.rotate_rad, b.plan.rotate_rad);
    }
}

fn volume(channels: usize) -> Volume {
    let shape = vec![12, 14, 13];
    let n: usize = shape.iter().product();
    let data: Vec<f32> = (0..n * channels)
        .map(|i| ((i * 37) % 101) as f32 / 25.0 - 2.0 + (i % n) as f32 * 1e-3)
        .collect();
    Volume::new(data, shape, channels)
}

#[test]
fn every_step_gives_the_cpu_image_on_every_engine() {
    // A plan holding every family with per-channel values, after a rotation.
    let plan: Plan = serde_json::from_str(
        r#"{"flip": [], "rotate_rad": [0.2, 0.0, -0.1], "scale": [], "translate": [],
            "elastic": null, "order": 1, "mode": "reflect", "cval": 0.0, "out_shape": null,
            "space": "voxel", "spacing_mm": [],
            "intensity": [
              {"gaussian_noise": {"std": [0.1, null], "seed": 5}},
              {"gaussian_blur": {"sigmas": [[0.5, 0.8, 1.0], null]}},
              {"brightness": {"multipliers": [1.1, 0.9]}},
              {"contrast": {"factors": [0.8, 1.2], "preserve_range": true}},
              {"low_resolution": {"scales": [null, [0.55, 0.5, 0.75]]}},
              {"gamma": {"channels": [{"gamma": 1.3, "invert": true, "retain_stats": true},
                                      {"gamma": 0.8, "retain_stats": true}]}},
              {"monai_shift_intensity": {"offsets": [0.5, -0.5]}},
              {"monai_scale_intensity": {"factors": [0.1]}},
              {"monai_gaussian_noise": {"mean": 0.0, "std": 0.2, "seed": 8}},
              {"monai_gaussian_smooth": {"sigmas": [0.6, 0.9, 1.2]}},
              {"monai_adjust_contrast": {"gamma": 1.2, "retain_stats": true}},
              {"monai_bias_field": {"convention": "monai",
                                    "terms": [{"powers": [1, 2, 0], "c": 0.2}]}},
              {"torchio_noise": {"mean": 0.1, "std": 0.3, "seed": 2}},
              {"torchio_blur": {"sigmas": [0.8, 0.0, 1.1]}},
              {"torchio_gamma": {"gammas": [1.1, 0.9]}},
              {"torchio_bias_field": {"convention": "torchio",
                                      "terms": [{"powers": [0, 1, 1], "c": -0.3}]}},
              {"monai_gaussian_sharpen": {"sigma1": [0.9, 0.7, 1.1], "sigma2": [0.5, 0.5, 0.6],
                                          "alpha": 12.0}},
              {"monai_histogram_shift": {"points": [0.0, 0.3, 0.45, 0.8, 1.0]}},
              {"monai_simulate_low_resolution": {"zoom": 0.6}}]}"#,
    )
    .unwrap();
    let image = volume(2);
    let mut label = Volume::new(
        (0..image.shape.iter().product::<usize>())
            .map(|i| (i % 5) as f32)
            .collect(),
        image.shape.clone(),
        1,
    );
    label.dtype = augscope::DType::U8;
    let spatial = Plan {
        intensity: vec![],
        ..plan.clone()
    };
    let mut want: Option<Vec<f32>> = None;
    for_each_backend(|b| {
        let (img, lab, _) = apply_new(b, &plan, &image, Some(&label)).unwrap();
        let (_, lab_spatial, _) = apply_new(b, &spatial, &image, Some(&label)).unwrap();
        // The label map comes out as the spatial plan alone makes it.
        assert_eq!(lab.unwrap().data, lab_spatial.unwrap().data, "{}", b.name());
        match &want {
            None => want = Some(img.data),
            Some(w) => {
                let worst = w
                    .iter()
                    .zip(&img.data)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0f32, f32::max);
                assert!(worst < 1e-4, "{}: worst {worst}", b.name());
            }
        }
    });
}

#[test]
fn bad_preset_values_are_one_line_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let base = "version = 1\n[[intensity]]\n";
    for (body, needle) in [
        (
            "step = \"gaussian_noise\"\np = 0.1\nstd = [-0.1, 0.1]\n",
            "negative",
        ),
        ("step = \"gamma\"\np = 0.3\ngamma = [0.0, 1.5]\n", "above 0"),
        (
            "step = \"gamma\"\np = 1.3\ngamma = [0.7, 1.5]\n",
            "probability",
        ),
        (
            "step = \"brightness\"\np = 0.1\nmultiplier = [nan, 1.2]\n",
            "finite",
        ),
        (
            "step = \"contrast\"\np = 0.1\nfactor = [1.2, 0.8]\n",
            "wrong way",
        ),
        (
            "step = \"low_resolution\"\np = 0.1\nscale = [0.5, 2.0]\n",
            "above 1",
        ),
        (
            "step = \"gaussian_blur\"\np = 0.1\nsigma = [0.5, 1.0]\nsigma_x = 1\n",
            "sigma_x",
        ),
        ("step = \"sharpen\"\np = 0.1\n", "sharpen"),
        (
            "step = \"monai_gaussian_noise\"\np = 0.1\nstd = -1.0\n",
            "std -1",
        ),
        (
            "step = \"monai_adjust_contrast\"\np = 0.1\ngamma = [-0.5, 2.0]\n",
            "above 0",
        ),
        (
            "step = \"torchio_noise\"\np = 0.5\nstd = [nan, 0.25]\n",
            "finite",
        ),
        (
            "step = \"torchio_bias_field\"\np = 1.0\norder = 3\ncoefficients = [-5.0, 5.0]\n",
            "overflow",
        ),
        (
            "step = \"monai_bias_field\"\np = 1.0\ndegree = 0\ncoeff_range = [0.0, 0.1]\n",
            "degree",
        ),
        (
            "step = \"torchio_blur\"\np = 1.1\nstd = [0.0, 2.0]\n",
            "probability",
        ),
        (
            "step = \"gamma\"\np = 0.1\ngamma = [0.7, 1.5]\np_per_channel = -0.5\n",
            "p_per_channel",
        ),
        (
            "step = \"monai_histogram_shift\"\np = 0.1\nnum_control_points = 2\n",
            "num_control_points",
        ),
        (
            "step = \"monai_gaussian_sharpen\"\np = 0.1\nsigma1_x = [0.5, 1.0]\n\
             sigma1_y = [0.5, 1.0]\nsigma1_z = [0.5, 1.0]\nsigma2_x = 0.7\nsigma2_y = 0.5\n\
             sigma2_z = 0.5\nalpha = [10.0, 30.0]\n",
            "sigma2_x 0.7",
        ),
        (
            "step = \"monai_simulate_low_resolution\"\np = 0.1\nzoom_range = [0.5, 1.5]\n",
            "above 1",
        ),
    ] {
        let path = dir.path().join("p.toml");
        std::fs::write(&path, format!("{base}{body}")).unwrap();
        assert_user_error(&["preset", "sample", s(&path)], needle);
    }
    let (code, out, _) = run(&[
        "preset",
        "sample",
        "nnunet-v2",
        "--channels",
        "3",
        "--seed",
        "4",
    ]);
    assert_eq!(code, 0);
    assert!(out.contains("\"intensity\""), "{out}");
}

/// On the device: each step alone after a flip (which both engines compute exactly, so both
/// steps start from the same values) against the CPU engine: bit for bit where the arithmetic is
/// the same (brightness, blur, low resolution), within f32 rounding where the statistics' sums or
/// `powf` and the f64 `log`/`cos` of the noise may differ in their last bit; then a batch of
/// nnunet-v2 draws through the batched launches against the CPU. Skipped without a device.
#[test]
fn device_steps_equal_the_cpu_engine() {
    use augscope::engine::Precision;
    use augscope::engine::cpu::CpuBackend;
    let Some(gpu) = common::backends::gpu(Precision::F32) else {
        return;
    };
    let image = volume(2);
    let cases: [(&str, f32); 22] = [
        (r#"{"brightness": {"multipliers": [1.3, 0.7]}}"#, 0.0),
        (
            r#"{"monai_shift_intensity": {"offsets": [0.3, -1.5]}}"#,
            0.0,
        ),
        (r#"{"monai_scale_intensity": {"factors": [0.2]}}"#, 0.0),
        (
            r#"{"monai_gaussian_noise": {"mean": 0.1, "std": 0.4, "seed": 9}}"#,
            0.0,
        ),
        (
            r#"{"torchio_noise": {"mean": -0.2, "std": 0.7, "seed": 4}}"#,
            0.0,
        ),
        (
            r#"{"monai_gaussian_smooth": {"sigmas": [0.7, 1.3, 2.1]}}"#,
            0.0,
        ),
        (r#"{"torchio_blur": {"sigmas": [0.0, 0.9, 1.6]}}"#, 0.0),
        (r#"{"torchio_gamma": {"gammas": [1.3, 0.6]}}"#, 1e-5),
        (
            r#"{"monai_adjust_contrast": {"gamma": 1.7, "invert": true, "retain_stats": true}}"#,
            1e-4,
        ),
        (r#"{"monai_adjust_contrast": {"gamma": 0.6}}"#, 1e-4),
        (
            r#"{"monai_bias_field": {"convention": "monai", "terms": [
                {"powers": [0, 0, 0], "c": 0.1}, {"powers": [1, 0, 2], "c": -0.3},
                {"powers": [0, 3, 0], "c": 0.25}]}}"#,
            1e-5,
        ),
        (
            r#"{"torchio_bias_field": {"convention": "torchio", "terms": [
                {"powers": [2, 1, 0], "c": 0.4}, {"powers": [0, 0, 3], "c": -0.2}]}}"#,
            1e-5,
        ),
        (
            r#"{"gaussian_blur": {"sigmas": [[0.6, 1.0, 2.5], [0.5, 0.5, 0.5]]}}"#,
            0.0,
        ),
        (
            r#"{"low_resolution": {"scales": [[0.5, 0.575, 0.75], [1.0, 0.5, 0.5]]}}"#,
            0.0,
        ),
        (r#"{"gaussian_noise": {"std": [0.3], "seed": 77}}"#, 1e-6),
        (r#"{"contrast": {"factors": [1.4, 0.6]}}"#, 1e-5),
        (
            r#"{"gamma": {"channels": [{"gamma": 1.4, "invert": true, "retain_stats": true}]}}"#,
            1e-4,
        ),
        (r#"{"gamma": {"channels": [{"gamma": 0.7}, null]}}"#, 1e-4),
        (
            r#"{"monai_gaussian_sharpen": {"sigma1": [1.1, 0.8, 1.4], "sigma2": [0.5, 0.6, 0.7],
                "alpha": 21.5}}"#,
            0.0,
        ),
        (
            r#"{"monai_histogram_shift": {"points": [0.0, 0.2, 0.35, 0.5, 0.9, 1.0]}}"#,
            0.0,
        ),
        (r#"{"monai_simulate_low_resolution": {"zoom": 0.55}}"#, 0.0),
        (r#"{"monai_simulate_low_resolution": {"zoom": 0.5}}"#, 0.0),
    ];
    for (json, tol) in cases {
        let plan = Plan {
            flip: vec![0],
            intensity: vec![serde_json::from_str(json).unwrap()],
            ..Plan::default()
        };
        let (want, _, _) = apply_new(&CpuBackend::new(), &plan, &image, None).unwrap();
        let (got, _, _) = apply_new(&gpu, &plan, &image, None).unwrap();
        let worst = want
            .data
            .iter()
            .zip(&got.data)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        if tol == 0.0 {
            assert!(
                want.data == got.data,
                "{json}: not bit for bit (worst {worst})"
            );
        } else {
            assert!(worst <= tol, "{json}: worst {worst}");
        }
    }
    // Batched launches: 6 draws of nnunet-v2 (some with steps) against the CPU, one by one.
    let p = nnunet();
    let plans: Vec<Plan> = (0..6)
        .map(|s| {
            let mut plan = p.sample(900 + s, 3, 2, &[1.0; 3]).unwrap().plan;
            // Every sample gets at least one step, so the batch exercises them.
            plan.intensity.push(
                serde_json::from_str(r#"{"gaussian_noise": {"std": [0.2], "seed": 3}}"#).unwrap(),
            );
            plan
        })
        .collect();
    let refs: Vec<&Plan> = plans.iter().collect();
    let outs = common::backends::apply_many_images(&gpu, &refs, &image);
    for (plan, got) in plans.iter().zip(&outs) {
        let (want, _, _) = apply_new(&CpuBackend::new(), plan, &image, None).unwrap();
        let (frac, worst, nan) = common::backends::agreement(&want.data, got, 1e-4);
        assert!(
            frac > 0.9999 && nan == 0,
            "batched: {frac} within 1e-4, worst {worst}"
        );
    }
}

#[test]
fn library_families_draw_on_augscope_axes_in_their_library_order() {
    use augscope::core::draws::SplitMix64;
    use augscope::core::intensity::{DrawFor, IntensitySpec, IntensityStep};
    let draw = |toml: &str, ndim: usize, spacing: &[f64]| -> IntensityStep {
        let spec: IntensitySpec = toml::from_str(toml).unwrap();
        spec.validate().unwrap();
        let img = DrawFor {
            channels: 2,
            ndim,
            spacing_mm: spacing,
        };
        spec.sample(&mut SplitMix64::new(3, 64), &img).0.unwrap()
    };
    // MONAI's sigma_x is augscope's last axis.
    let s = r#"step = "monai_gaussian_smooth"
p = 1.0
sigma_x = [3.0, 3.0]
sigma_y = [2.0, 2.0]
sigma_z = [1.0, 1.0]"#;
    match draw(s, 3, &[]) {
        IntensityStep::MonaiGaussianSmooth(m) => assert_eq!(m.sigmas, [1.0, 2.0, 3.0]),
        other => panic!("{other:?}"),
    }
    match draw(s, 2, &[]) {
        IntensityStep::MonaiGaussianSmooth(m) => assert_eq!(m.sigmas, [2.0, 3.0]),
        other => panic!("{other:?}"),
    }
    // The same for both of the sharpening's filters; sigma2 as one number draws up to sigma1.
    let sh = r#"step = "monai_gaussian_sharpen"
p = 1.0
sigma1_x = [3.0, 3.0]
sigma1_y = [2.0, 2.0]
sigma1_z = [1.0, 1.0]
sigma2_x = [0.75, 0.75]
sigma2_y = 0.5
sigma2_z = [0.25, 0.25]
alpha = [7.0, 7.0]"#;
    match draw(sh, 3, &[]) {
        IntensityStep::MonaiGaussianSharpen(m) => {
            assert_eq!(m.sigma1, [1.0, 2.0, 3.0]);
            assert_eq!((m.sigma2[0], m.sigma2[2], m.alpha), (0.25, 0.75, 7.0));
            assert!((0.5..=2.0).contains(&m.sigma2[1]), "{:?}", m.sigma2);
        }
        other => panic!("{other:?}"),
    }
    // The histogram shift's moved points rise from 0 to 1, each below the next reference point.
    let hs = "step = \"monai_histogram_shift\"\np = 1.0\nnum_control_points = [4, 12]";
    for seed in 0..20 {
        let spec: IntensitySpec = toml::from_str(hs).unwrap();
        let img = DrawFor {
            channels: 1,
            ndim: 3,
            spacing_mm: &[],
        };
        match spec.sample(&mut SplitMix64::new(seed, 64), &img).0.unwrap() {
            IntensityStep::MonaiHistogramShift(h) => {
                let n = h.points.len();
                assert!((4..=12).contains(&n), "{n}");
                assert_eq!((h.points[0], h.points[n - 1]), (0.0, 1.0));
                for i in 1..n - 1 {
                    assert!(h.points[i] >= h.points[i - 1], "{:?}", h.points);
                    assert!(h.points[i] <= i as f64 / (n - 1) as f64 + 1.0 / (n - 1) as f64);
                }
            }
            other => panic!("{other:?}"),
        }
    }
    // TorchIO's std is in mm: divided by each axis's voxel size.
    let b = "step = \"torchio_blur\"\np = 1.0\nstd = [2.0, 2.0]";
    match draw(b, 3, &[1.0, 2.0, 4.0]) {
        IntensityStep::TorchioBlur(t) => assert_eq!(t.sigmas, [2.0, 1.0, 0.5]),
        other => panic!("{other:?}"),
    }
    // MONAI's coefficient count is (degree + ndim choose ndim); TorchIO draws (order + 3 choose
    // 3) and keeps, in 2D, the terms without a z power.
    let mb = "step = \"monai_bias_field\"\np = 1.0\ndegree = 3\ncoeff_range = [0.0, 0.1]";
    for (ndim, n) in [(3, 20), (2, 10)] {
        match draw(mb, ndim, &[]) {
            IntensityStep::MonaiBiasField(f) => {
                assert_eq!(f.terms.len(), n);
                assert!(f.terms.iter().all(|t| t.powers.len() == ndim));
            }
            other => panic!("{other:?}"),
        }
    }
    let tb = "step = \"torchio_bias_field\"\np = 1.0\norder = 3\ncoefficients = [-0.5, 0.5]";
    for (ndim, n) in [(3, 20), (2, 10)] {
        match draw(tb, ndim, &[]) {
            IntensityStep::TorchioBiasField(f) => {
                assert_eq!(f.terms.len(), n);
                assert!(f.terms.iter().all(|t| t.powers.iter().sum::<usize>() <= 3));
            }
            other => panic!("{other:?}"),
        }
    }
    // Every family's library defaults validate and draw; the table names each one's library.
    for f in IntensitySpec::families() {
        f.validate().unwrap();
        let (step, _) = f.sample(
            &mut SplitMix64::new(1, 64),
            &DrawFor {
                channels: 2,
                ndim: 3,
                spacing_mm: &[],
            },
        );
        if let Some(step) = step {
            assert_eq!(step.name(), f.name());
            step.validate(Some(2), Some(3)).unwrap();
        }
        assert!(f.name().starts_with(match f.library() {
            augscope::core::intensity::Library::Monai => "monai_",
            augscope::core::intensity::Library::Torchio => "torchio_",
            augscope::core::intensity::Library::Batchgeneratorsv2 => "",
        }));
    }
}

/// nnU-Net's order: the mirror after the intensity steps (`flip_after_intensity`). The result
/// is the steps on the unmirrored resample, mirrored, on every engine and in a batch; it differs
/// from the mirror before the steps where a step depends on the position (the noise, the low
/// resolution, a bias field), and the label map is the same either way.
#[test]
fn a_mirror_after_the_steps_is_the_steps_on_the_unmirrored_image_mirrored() {
    let steps: Vec<IntensityStep> = serde_json::from_str(
        r#"[{"gaussian_noise": {"std": [0.3], "seed": 11}},
            {"low_resolution": {"scales": [[0.5, 0.6, 0.75], null]}},
            {"monai_bias_field": {"convention": "monai",
                                  "terms": [{"powers": [1, 0, 2], "c": 0.3}]}},
            {"gamma": {"channels": [{"gamma": 1.3, "retain_stats": true}]}}]"#,
    )
    .unwrap();
    let last = Plan {
        flip: vec![0, 2],
        rotate_rad: vec![0.1, 0.0, -0.05],
        intensity: steps,
        flip_after_intensity: true,
        ..Plan::default()
    };
    let first = Plan {
        flip_after_intensity: false,
        ..last.clone()
    };
    let unmirrored = Plan {
        flip: vec![],
        ..last.clone()
    };
    let image = volume(2);
    let mut label = Volume::new(
        (0..image.shape.iter().product::<usize>())
            .map(|i| (i % 7) as f32)
            .collect(),
        image.shape.clone(),
        1,
    );
    label.dtype = augscope::DType::U8;
    let cpu = augscope::engine::cpu::CpuBackend::new();
    let (got, lab_last, _) = apply_new(&cpu, &last, &image, Some(&label)).unwrap();
    let (mut want, _, _) = apply_new(&cpu, &unmirrored, &image, None).unwrap();
    augscope::core::volume::flip_in_place(&mut want.data, &image.shape, 2, &[0, 2]);
    assert!(
        got.data == want.data,
        "not the steps on the unmirrored image, mirrored"
    );
    let (before, lab_first, _) = apply_new(&cpu, &first, &image, Some(&label)).unwrap();
    assert!(
        before.data != got.data,
        "the order of the mirror changed nothing"
    );
    assert_eq!(lab_last.unwrap().data, lab_first.unwrap().data);
    // The done list says the mirror acts last.
    use augscope::augment::DoneList;
    let done: Vec<String> = last.done_list().into_iter().map(|d| d.transform).collect();
    assert_eq!(done.first().map(String::as_str), Some("rotate"));
    assert_eq!(done.last().map(String::as_str), Some("flip"));
    // Every engine, one plan at a time and in a batch.
    for_each_backend(|b| {
        let (img, _, _) = apply_new(b, &last, &image, None).unwrap();
        let (frac, worst, nan) = common::backends::agreement(&got.data, &img.data, 1e-4);
        assert!(frac == 1.0 && nan == 0, "{}: worst {worst}", b.name());
        let outs = common::backends::apply_many_images(b, &[&last, &first, &last], &image);
        for (want, got_b) in [&got.data, &before.data, &got.data].into_iter().zip(&outs) {
            let (frac, worst, nan) = common::backends::agreement(want, got_b, 1e-4);
            assert!(
                frac == 1.0 && nan == 0,
                "{} batched: worst {worst}",
                b.name()
            );
        }
    });
}

/// The bundled nnunet-v2 preset mirrors after its steps, and its samples say so; an export whose
/// pipeline mirrors before the steps it writes says that in a NOTE line.
#[test]
fn the_nnunet_preset_mirrors_after_its_steps_and_the_exports_say_where_they_cannot() {
    use augscope::export::{Target, export};
    let p = nnunet();
    assert!(p.flip.as_ref().unwrap().after_intensity);
    let plan = (0..50)
        .map(|s| p.sample(s, 3, 1, &[1.0; 3]).unwrap().plan)
        .find(|plan| !plan.flip.is_empty() && !plan.intensity.is_empty())
        .expect("a sample with a mirror and a step");
    assert!(plan.flip_around_steps().is_some());
    let text = r#"
version = 1
name = "mirror last"
[flip]
p = [0.5]
after_intensity = true
[[intensity]]
step = "monai_gaussian_noise"
p = 0.5
std = 0.1
[[intensity]]
step = "torchio_noise"
p = 0.5
std = [0.0, 0.2]
"#;
    let p: Preset = toml::from_str(text).unwrap();
    p.validate().unwrap();
    for target in [Target::Monai, Target::TorchIo] {
        let code = export(&p, target, 3).unwrap();
        assert!(
            code.contains("# NOTE: the preset mirrors after the intensity steps"),
            "{target:?}:\n{code}"
        );
    }
    // Mirroring before the steps needs no note.
    let before: Preset = toml::from_str(&text.replace("after_intensity = true", "")).unwrap();
    let code = export(&before, Target::Monai, 3).unwrap();
    assert!(
        !code.contains("mirrors after the intensity steps"),
        "{code}"
    );
}
