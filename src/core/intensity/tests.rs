use super::*;
use crate::core::intensity::stats::{mean_min_max, std_about};

fn gamma_step(g: GammaValue) -> IntensityStep {
    IntensityStep::Gamma(Gamma {
        channels: vec![Some(g)],
    })
}

#[test]
fn steps_follow_their_formulas() {
    let mut x = vec![1.0f32, 2.0, 3.0, 6.0, 10.0, 20.0];
    IntensityStep::Brightness(Brightness {
        multipliers: vec![Some(2.0), None],
    })
    .apply(&mut x, &[3], 2);
    assert_eq!(x, vec![2.0, 4.0, 6.0, 6.0, 10.0, 20.0]);

    // Contrast about the mean 4, clipped to [2, 6].
    let contrast = |f: f64, preserve_range: bool, mut y: Vec<f32>| {
        IntensityStep::Contrast(Contrast {
            factors: vec![Some(f)],
            preserve_range,
        })
        .apply(&mut y, &[3], 1);
        y
    };
    assert_eq!(
        contrast(2.0, true, vec![2.0, 4.0, 6.0]),
        vec![2.0, 4.0, 6.0]
    );
    assert_eq!(
        contrast(0.5, false, vec![2.0, 4.0, 6.0]),
        vec![3.0, 4.0, 5.0]
    );

    // Gamma 2 on [0, 4]: ((x / 4)^2) * 4.
    let g = GammaValue {
        gamma: 2.0,
        invert: false,
        retain_stats: false,
    };
    let mut z = vec![0.0f32, 2.0, 4.0];
    gamma_step(g).apply(&mut z, &[3], 1);
    assert_eq!(z, vec![0.0, 1.0, 4.0]);
    // Inverted: the curve bends the other way, the range stays.
    let mut z = vec![0.0f32, 2.0, 4.0];
    gamma_step(GammaValue { invert: true, ..g }).apply(&mut z, &[3], 1);
    assert_eq!(z, vec![0.0, 3.0, 4.0]);
    // Retained statistics: mean and (Bessel) std as before.
    let mut w: Vec<f32> = (0..100)
        .map(|i| (i as f32 * 0.37).sin() * 5.0 + 3.0)
        .collect();
    let (m0, _, _) = mean_min_max(&w);
    let s0 = std_about(&w, m0);
    gamma_step(GammaValue {
        gamma: 1.7,
        invert: false,
        retain_stats: true,
    })
    .apply(&mut w, &[100], 1);
    let (m1, _, _) = mean_min_max(&w);
    assert!((m1 - m0).abs() < 1e-5 && (std_about(&w, m1) - s0).abs() < 1e-5);
}

#[test]
fn noise_adds_the_counter_noise_scaled_by_std() {
    let mut x = vec![1.0f32; 8];
    IntensityStep::GaussianNoise(Noise {
        std: vec![Some(0.5), Some(0.0)],
        seed: 9,
    })
    .apply(&mut x, &[2, 2], 2);
    for (i, v) in x[..4].iter().enumerate() {
        assert_eq!(
            *v,
            1.0 + crate::core::philox::normal_value(9, 0, i as u64) * 0.5
        );
    }
    assert!(x[4..].iter().all(|v| *v == 1.0));
}

#[test]
fn blur_kernels_have_batchgenerators_sizes_and_sum_to_one() {
    // round_to_odd(6 sigma + 0.5) with Python's rounding, as batchgeneratorsv2 0.3.6 gives:
    // 0.5 -> 3.5 -> 4 (even, value below) -> 3; 1.0 -> 6.5 -> 6 (even, value above) -> 7;
    // 0.25 -> 2.0 -> 2 -> 3 (n - r = 0 counts as above); 0.7 -> 4.7 -> 5.
    assert_eq!(blur_kernel(0.5).len(), 3);
    assert_eq!(blur_kernel(1.0).len(), 7);
    assert_eq!(blur_kernel(0.25).len(), 3);
    assert_eq!(blur_kernel(0.7).len(), 5);
    for s in [0.3, 0.5, 0.77, 1.0, 2.5] {
        let k = blur_kernel(s);
        assert!((k.iter().sum::<f32>() - 1.0).abs() < 1e-6);
        assert_eq!(k.first(), k.last());
    }
    // A constant stays constant; an impulse spreads to the kernel, mirrored at the edges.
    let mut c = vec![3.0f32; 5 * 4];
    let b = IntensityStep::GaussianBlur(Blur {
        sigmas: vec![Some(vec![1.0, 0.5])],
    });
    b.apply(&mut c, &[5, 4], 1);
    assert!(c.iter().all(|v| (v - 3.0).abs() < 1e-5));
    let mut line = vec![0.0f32; 9];
    line[4] = 1.0;
    IntensityStep::GaussianBlur(Blur {
        sigmas: vec![Some(vec![1.0])],
    })
    .apply(&mut line, &[9], 1);
    let k = blur_kernel(1.0);
    for (i, v) in line[1..8].iter().enumerate() {
        assert!((v - k[i]).abs() < 1e-7);
    }
    assert_eq!(Pad::Mirror.index(-1, 5), Some(1));
    assert_eq!(Pad::Mirror.index(5, 5), Some(3));
    assert_eq!(Pad::Mirror.index(-9, 5), Some(1));
}

#[test]
fn low_resolution_follows_torch_interpolate() {
    // Python's round(10 * 0.55) = round(5.5) = 6; round(10 * 0.45) = round(4.5) = 4.
    assert_eq!(low_resolution_shape(&[10, 10], &[0.55, 0.45]), vec![6, 4]);
    assert_eq!(lowres::nearest_exact_index(0, 10, 4), 1);
    assert_eq!(lowres::nearest_exact_index(3, 10, 4), 8);
    // Linear up from 2 to 4 voxels: sources -0.25 (clamped), 0.25, 0.75, 1.25.
    assert_eq!(lowres::linear_taps(0, 2, 4), (0, 1, 1.0, 0.0));
    assert_eq!(lowres::linear_taps(1, 2, 4), (0, 1, 0.75, 0.25));
    assert_eq!(lowres::linear_taps(3, 2, 4), (1, 1, 0.75, 0.25));
    let mut x: Vec<f32> = (0..8).map(|v| v as f32).collect();
    IntensityStep::LowResolution(LowResolution {
        scales: vec![Some(vec![0.5])],
    })
    .apply(&mut x, &[8], 1);
    // Down to 4 (sources 1, 3, 5, 7), up to 8: torch's interpolate gives these values.
    assert_eq!(x, vec![1.0, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.0]);
}

#[test]
fn bad_values_are_refused() {
    let g = |gamma: f64| {
        gamma_step(GammaValue {
            gamma,
            invert: false,
            retain_stats: false,
        })
    };
    assert!(g(0.0).validate(Some(1), None).is_err());
    assert!(g(-1.0).validate(None, None).is_err());
    assert!(g(f64::NAN).validate(Some(1), None).is_err());
    assert!(g(0.5).validate(Some(1), None).is_ok());
    let b = |m: Vec<Option<f64>>| IntensityStep::Brightness(Brightness { multipliers: m });
    assert!(
        b(vec![Some(1.0), Some(f64::INFINITY)])
            .validate(Some(2), None)
            .is_err()
    );
    assert!(
        b(vec![Some(1.0), Some(2.0)])
            .validate(Some(3), None)
            .is_err()
    );
    assert!(
        b(vec![Some(1.0), Some(2.0)])
            .validate(Some(2), None)
            .is_ok()
    );
    let n = |s: f64| {
        IntensityStep::GaussianNoise(Noise {
            std: vec![Some(s)],
            seed: 0,
        })
    };
    assert!(n(-0.1).validate(None, None).is_err());
    assert!(n(0.1).validate(None, None).is_ok());
    let blur = IntensityStep::GaussianBlur(Blur {
        sigmas: vec![Some(vec![1.0, 1.0])],
    });
    assert!(blur.validate(None, Some(3)).is_err());
    assert!(blur.validate(None, Some(2)).is_ok());
}

#[test]
fn plans_read_steps_as_json() {
    let s: Vec<IntensityStep> = serde_json::from_str(
        r#"[{"brightness": {"multipliers": [1.1]}},
            {"contrast": {"factors": [0.8, null]}},
            {"gamma": {"channels": [{"gamma": 1.3, "invert": true, "retain_stats": true}]}},
            {"gaussian_noise": {"std": [0.05], "seed": 3}},
            {"gaussian_blur": {"sigmas": [[0.5, 0.7, 1.0]]}},
            {"low_resolution": {"scales": [null, [0.5, 0.5, 0.5]]}}]"#,
    )
    .unwrap();
    assert_eq!(s.len(), 6);
    assert!(matches!(
        &s[1],
        IntensityStep::Contrast(Contrast {
            preserve_range: true,
            ..
        })
    ));
    assert!(serde_json::from_str::<Vec<IntensityStep>>(r#"[{"gama": {}}]"#).is_err());
    assert!(
        serde_json::from_str::<Vec<IntensityStep>>(
            r#"[{"brightness": {"multipliers": [1], "x": 1}}]"#
        )
        .is_err()
    );
}

#[test]
fn specs_read_from_toml_with_their_step_named() {
    #[derive(serde::Deserialize)]
    struct P {
        intensity: Vec<IntensitySpec>,
    }
    let p: P = toml::from_str(
        r#"
[[intensity]]
step = "gaussian_noise"
p = 0.1
std = [0.0, 0.1]
synchronize_channels = true

[[intensity]]
step = "gamma"
p = 0.3
gamma = [0.7, 1.5]
distribution = "split"
p_retain_stats = 1.0
"#,
    )
    .unwrap();
    assert_eq!(p.intensity.len(), 2);
    assert_eq!(p.intensity[1].name(), "gamma");
    assert!(p.intensity.iter().all(|s| s.validate().is_ok()));
    let bad = toml::from_str::<P>(
        "[[intensity]]\nstep = \"gamma\"\np = 0.3\ngamma = [0.7, 1.5]\ngama = 1\n",
    );
    assert!(bad.is_err(), "an unknown key is refused");
}

#[test]
fn sampling_draws_batchgenerators_choices() {
    let spec = IntensitySpec::Gamma(GammaSpec {
        p: 1.0,
        gamma: [0.7, 1.5],
        distribution: crate::core::draws::Distribution::Split,
        p_invert: 0.0,
        p_retain_stats: 1.0,
        p_per_channel: 1.0,
        synchronize_channels: false,
    });
    let (mut below, mut n) = (0, 0);
    for seed in 0..2000 {
        let mut rng = SplitMix64::new(seed, 77);
        let (step, _) = spec.sample(
            &mut rng,
            &DrawFor {
                channels: 2,
                ndim: 3,
                spacing_mm: &[],
            },
        );
        let Some(IntensityStep::Gamma(g)) = step else {
            panic!("p = 1 always fires")
        };
        for v in g.channels.iter().flatten() {
            assert!((0.7..=1.5).contains(&v.gamma) && v.retain_stats && !v.invert);
            below += usize::from(v.gamma < 1.0);
            n += 1;
        }
    }
    // The split draw: half below 1, half above (not 3/8 below as a uniform draw would give).
    let frac = below as f64 / n as f64;
    assert!((frac - 0.5).abs() < 0.03, "{frac}");
    let never = IntensitySpec::Brightness(BrightnessSpec {
        p: 0.0,
        multiplier: [0.5, 2.0],
        distribution: Default::default(),
        p_per_channel: 1.0,
        synchronize_channels: false,
    });
    assert!(
        never
            .sample(
                &mut SplitMix64::new(1, 2),
                &DrawFor {
                    channels: 1,
                    ndim: 3,
                    spacing_mm: &[]
                }
            )
            .0
            .is_none()
    );
}
