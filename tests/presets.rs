//! Presets: parsing and validation, seeded sampling, export to training pipelines (golden text
//! and a real batchgenerators run), import round trips, and the CLI's exit codes.
//!
//! Regenerate the golden snippets with `UPDATE_GOLDEN=1 cargo test --test presets`.

#![allow(clippy::unwrap_used)] // test helpers: a failed unwrap is a failed test

use std::path::PathBuf;
use std::process::Command;

use augscope::augment::preset::{BUNDLED, Preset, ScaleDistribution};
use augscope::export::{Target, export, import};

fn bundled(name: &str) -> Preset {
    let (_, text) = BUNDLED
        .iter()
        .find(|(n, _)| *n == name)
        .expect("bundled preset");
    Preset::parse(text).expect("bundled preset parses")
}

mod common;
use common::cli::{command, python_has};

const FULL: &str = r#"
version = 1
name = "everything"
[flip]
p = [1.0, 0.0, 1.0]
[rotate]
p = 1.0
range_deg = [[-10, 10], [20, 30], [0, 0]]
[scale]
p = 1.0
range = [[0.8, 1.2]]
[translate]
p = 1.0
range = [[-2, 2]]
unit = "mm"
[elastic]
p = 1.0
alpha = [100, 200]
sigma = [5, 6]
[sampling]
order = 3
mode = "mirror"
cval = 0.5
"#;

#[test]
fn hostile_presets_name_the_field() {
    let cases: &[(&str, &str)] = &[
        ("name = 'x'", "missing `version = 1`"),
        ("version = 2", "version 2 is not supported"),
        (
            "version = 1\n[rotate]\nrange_deg = [[30, -30]]",
            "rotate.range_deg[0]",
        ),
        (
            "version = 1\n[flip]\np = [1.5]",
            "flip.p[0] = 1.5 is not a probability",
        ),
        (
            "version = 1\n[scale]\nrange = [[0, 2]]",
            "scale factors must be > 0",
        ),
        (
            "version = 1\n[elastic]\nalpha = [0, 1]\nsigma = [0, 1]",
            "sigma must be > 0",
        ),
        (
            "version = 1\n[sampling]\nmode = 'bogus'",
            "unknown boundary mode 'bogus'",
        ),
        (
            "version = 1\n[sampling]\norder = 2",
            "unsupported interpolation order 2",
        ),
        (
            "version = 1\n[rotate]\nrange_deg = [[-1, 1]]\nspeed = 3",
            "line 4",
        ),
        ("version = 1\n[rotate\n", "cannot"),
        (
            "version = 1\n[flip]\np = [0.5, 0.5, 0.5, 0.5]",
            "flip.p holds 4 entries",
        ),
        (
            "version = 1\n[scale]\nrange = [[0.9, 1.1], [1, 1], [1, 1]]",
            "per_axis is false",
        ),
    ];
    for (text, want) in cases {
        match Preset::parse(text) {
            Ok(_) if *want == "cannot" => panic!("garbage parsed: {text}"),
            Ok(_) => panic!("accepted a bad preset: {text}"),
            Err(e) => {
                let msg = e.to_string();
                assert!(!msg.contains('\n'), "one line: {msg}");
                if *want != "cannot" {
                    assert!(msg.contains(want), "{text:?}: {msg:?} lacks {want:?}");
                }
            }
        }
    }
}

#[test]
fn sampling_is_reproducible_and_fires_as_asked() {
    let p = Preset::parse(FULL).unwrap();
    let a = p.sample(7, 3, 1, &[2.0, 1.0, 0.5]).unwrap();
    let b = p.sample(7, 3, 1, &[2.0, 1.0, 0.5]).unwrap();
    assert_eq!(a, b);
    let c = p.sample(8, 3, 1, &[2.0, 1.0, 0.5]).unwrap();
    assert_ne!(a.plan, c.plan);
    // Everything at p 1 fires, in docs/design.md §3 order.
    let names: Vec<&str> = a.done.iter().map(|d| d.transform.as_str()).collect();
    assert_eq!(names, ["flip", "elastic", "rotate", "scale", "translate"]);
    assert_eq!(a.plan.flip, vec![0, 2]);
    let deg: Vec<f64> = a.plan.rotate_rad.iter().map(|r| r.to_degrees()).collect();
    assert!((-10.0..=10.0).contains(&deg[0]) && (20.0..=30.0).contains(&deg[1]));
    assert_eq!(deg[2], 0.0);
    let e = a.plan.elastic.unwrap();
    assert_eq!(e.seed, 7);
    assert!((100.0..=200.0).contains(&e.alpha) && (5.0..=6.0).contains(&e.sigma));
    // Millimetres become voxels through the spacing.
    let mm = a.drawn["translate"]["values"].as_array().unwrap();
    for (ax, sp) in [2.0, 1.0, 0.5].iter().enumerate() {
        let v = mm[ax].as_f64().unwrap();
        assert!((a.plan.translate[ax] - v / sp).abs() < 1e-12);
    }
    assert_eq!(a.plan.order.as_u32(), 3);
    assert_eq!(a.plan.cval, 0.5);
}

#[test]
fn probabilities_match_their_frequencies() {
    let p = bundled("nnunet-v2");
    let n = 4000;
    let (mut rot, mut sc, mut fl0) = (0, 0, 0);
    for seed in 0..n {
        let s = p.sample(seed, 3, 1, &[1.0; 3]).unwrap();
        rot += s.done.iter().any(|d| d.transform == "rotate") as usize;
        sc += s.done.iter().any(|d| d.transform == "scale") as usize;
        fl0 += s.plan.flip.contains(&0) as usize;
        if let Some(&f) = s.plan.scale.first() {
            assert!((0.7..=1.4).contains(&f));
        }
        for r in &s.plan.rotate_rad {
            assert!(r.to_degrees().abs() <= 30.0 + 1e-9);
        }
        assert!(s.plan.elastic.is_none());
    }
    let frac = |k: usize| k as f64 / n as f64;
    assert!((frac(rot) - 0.2).abs() < 0.03, "rotate {}", frac(rot));
    assert!((frac(sc) - 0.2).abs() < 0.03, "scale {}", frac(sc));
    assert!((frac(fl0) - 0.5).abs() < 0.03, "flip {}", frac(fl0));
    // 2D images take the ±180° range.
    let big = (0..500)
        .filter_map(|s| {
            p.sample(s, 2, 1, &[1.0; 2])
                .unwrap()
                .plan
                .rotate_rad
                .first()
                .copied()
        })
        .any(|r| r.to_degrees().abs() > 90.0);
    assert!(big);
}

#[test]
fn split_scale_draws_both_sides_equally() {
    let p = bundled("nnunet-v1-3d");
    assert_eq!(
        p.scale.as_ref().unwrap().distribution,
        ScaleDistribution::Split
    );
    let mut p1 = p.clone();
    p1.scale.as_mut().unwrap().p = 1.0;
    let below = (0..2000)
        .filter(|&s| p1.sample(s, 3, 1, &[1.0; 3]).unwrap().plan.scale[0] < 1.0)
        .count();
    assert!((below as f64 / 2000.0 - 0.5).abs() < 0.04, "{below}");
}

#[test]
fn bundled_presets_match_their_sources() {
    let v2 = bundled("nnunet-v2");
    let r = v2.rotate.as_ref().unwrap();
    assert_eq!(
        (r.p, r.range_deg[0], r.range_deg_2d),
        (0.2, [-30.0, 30.0], Some([-180.0, 180.0]))
    );
    assert_eq!(v2.scale.as_ref().unwrap().range[0], [0.7, 1.4]);
    assert_eq!(v2.flip.as_ref().unwrap().p, vec![0.5]);
    assert!(v2.elastic.is_none());
    let v1 = bundled("nnunet-v1-3d");
    let e = v1.elastic.as_ref().unwrap();
    assert_eq!((e.p, e.alpha, e.sigma), (0.2, [0.0, 900.0], [9.0, 13.0]));
    assert_eq!(v1.rotate.as_ref().unwrap().range_deg[0], [-15.0, 15.0]);
    assert_eq!(v1.scale.as_ref().unwrap().range[0], [0.85, 1.25]);
    let bg = bundled("batchgenerators");
    assert_eq!(bg.elastic.as_ref().unwrap().alpha, [0.0, 1000.0]);
    assert_eq!(bg.sampling.mode, "nearest");
}

/// The transform part of a preset (what a parameter dict can hold).
fn transforms(p: &Preset) -> Preset {
    Preset {
        name: String::new(),
        source: String::new(),
        description: String::new(),
        ..p.clone()
    }
}

#[test]
fn batchgenerators_round_trip() {
    // Presets the batchgenerators dict can hold come back identical.
    for name in ["nnunet-v1-3d", "batchgenerators"] {
        let p = bundled(name);
        let json = export(&p, Target::BatchgeneratorsJson, 3).unwrap();
        let back = import::import(&json, name).unwrap();
        assert_eq!(transforms(&back), transforms(&p), "{name}");
        // The .py snippet carries the same dict.
        let py = export(&p, Target::Batchgenerators, 3).unwrap();
        let back = import::import(&py, name).unwrap();
        assert_eq!(transforms(&back), transforms(&p), "{name} via the snippet");
    }
    // nnU-Net v2 differs exactly where batchgenerators cannot follow: the uniform scale draw,
    // the separate 2D rotation range and the intensity steps (batchgeneratorsv2's, which the
    // batchgenerators dict does not hold; without steps, a mirror after them is the mirror).
    let p = bundled("nnunet-v2");
    let back = import::import(&export(&p, Target::BatchgeneratorsJson, 3).unwrap(), "x").unwrap();
    let mut want = transforms(&p);
    want.scale.as_mut().unwrap().distribution = ScaleDistribution::Split;
    want.rotate.as_mut().unwrap().range_deg_2d = None;
    want.intensity.clear();
    want.flip.as_mut().unwrap().after_intensity = false;
    assert_eq!(transforms(&back), want);
    let py = export(&p, Target::Batchgenerators, 3).unwrap();
    assert!(py.contains("# NOTE: batchgenerators draws scales below and above 1"));
}

#[test]
fn nnunet_v1_params_import() {
    // default_3D_augmentation_params of nnunet 1.7.1 as json.dumps writes it (radians).
    let json = r#"{"selected_data_channels": null, "selected_seg_channels": null,
      "do_elastic": true, "elastic_deform_alpha": [0.0, 900.0], "elastic_deform_sigma": [9.0, 13.0],
      "p_eldef": 0.2, "do_scaling": true, "scale_range": [0.85, 1.25],
      "independent_scale_factor_for_each_axis": false, "p_independent_scale_per_axis": 1,
      "p_scale": 0.2, "do_rotation": true,
      "rotation_x": [-0.2617993877991494, 0.2617993877991494],
      "rotation_y": [-0.2617993877991494, 0.2617993877991494],
      "rotation_z": [-0.2617993877991494, 0.2617993877991494],
      "rotation_p_per_axis": 1, "p_rot": 0.2, "random_crop": false,
      "random_crop_dist_to_border": null, "do_gamma": true, "gamma_retain_stats": true,
      "gamma_range": [0.7, 1.5], "p_gamma": 0.3, "do_mirror": true, "mirror_axes": [0, 1, 2],
      "dummy_2D": false, "border_mode_data": "constant"}"#;
    let p = import::import(json, "v1").unwrap();
    let mut want = transforms(&bundled("nnunet-v1-3d"));
    // The dict does not say how segmentations are resampled.
    want.sampling.label_order = 0;
    let mut got = transforms(&p);
    assert!(
        p.description.contains("do_gamma"),
        "ignored keys are listed"
    );
    got.description.clear();
    assert_eq!(got, want);
    // Hostile dicts give one clear line.
    for (bad, want) in [
        ("[1, 2]", "one JSON object"),
        ("{\"do_rotation\": true, \"angle_x\": \"wide\"}", "angle_x"),
        ("{\"mirror_axes\": [7]}", "mirror_axes holds 7"),
        ("{\"do_scale\": true, \"scale\": [2, 1]}", "scale.range[0]"),
        ("not json", "line 1"),
    ] {
        let e = import::import(bad, "x").unwrap_err().to_string();
        assert!(e.contains(want) && !e.contains('\n'), "{bad}: {e}");
    }
}

fn golden_dir() -> PathBuf {
    common::fixtures::tests_dir("interop/golden")
}

#[test]
fn snippets_match_golden_text() {
    // MONAI and TorchIO need torch (a large wheel), so their snippets are checked as text; the
    // batchgenerators snippet also runs for real (below).
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    let full = Preset::parse(FULL).unwrap();
    let mut cases = vec![];
    for (name, _) in BUNDLED {
        cases.push((name.to_string(), bundled(name)));
    }
    cases.push(("everything".into(), full));
    let targets = [
        (Target::Monai, "monai"),
        (Target::TorchIo, "torchio"),
        (Target::Batchgenerators, "batchgenerators"),
        (Target::Nnunet, "nnunet"),
    ];
    let version = env!("CARGO_PKG_VERSION");
    for (name, p) in &cases {
        for (t, tname) in targets {
            let text = export(p, t, 3).unwrap().replace(version, "VERSION");
            let path = golden_dir().join(format!("{name}.{tname}.py"));
            if update {
                std::fs::create_dir_all(golden_dir()).unwrap();
                std::fs::write(&path, &text).unwrap();
                continue;
            }
            let want = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e} (UPDATE_GOLDEN=1 writes it)", path.display()));
            assert_eq!(
                text,
                want,
                "{} changed (UPDATE_GOLDEN=1 rewrites it)",
                path.display()
            );
        }
    }
}

#[test]
fn conversions_in_snippets() {
    let p = Preset::parse(FULL).unwrap();
    let monai = export(&p, Target::Monai, 3).unwrap();
    // Axis order x first: augscope axis 1's [20, 30] degrees is MONAI's middle range.
    let a = 20f64.to_radians();
    assert!(
        monai.contains(&format!("({:?}, {:?})", a, 30f64.to_radians())),
        "{monai}"
    );
    assert!(monai.contains("RandFlipd(keys=KEYS, prob=1.0, spatial_axis=2),  # augscope axis 0"));
    assert!(monai.contains(
        "RandIsotropicScaled(keys=KEYS, prob=1.0, scale_range=((-0.19999999999999996, 0.19999999999999996),"
    ));
    assert!(monai.contains("lazy=True, overrides="));
    assert!(monai.contains("MODES = (3, 0)") && monai.contains("PADDING = (\"mirror\""));
    let tio = export(&p, Target::TorchIo, 3).unwrap();
    // TorchIO takes augscope's array-axis ranges as they are (ArrayAxisAffine maps them
    // through each image's affine), in degrees, and augscope's scale (not the zoom).
    assert!(
        tio.contains("degrees=((-10.0, 10.0), (20.0, 30.0), (0.0, 0.0),)"),
        "{tio}"
    );
    assert!(tio.contains("no alpha/sigma elastic"));
    assert!(tio.contains("scales=((0.8, 1.2),)"));
    assert!(tio.contains("translation_mm=True") && tio.contains("mode \"mirror\" is not"));
    let bg = export(&p, Target::Batchgenerators, 3).unwrap();
    assert!(bg.contains("has no translation"));
    assert!(bg.contains("\"angle_x\": [\n    -0.17453292519943295"));
    let nn = export(&p, Target::Nnunet, 3).unwrap();
    assert!(nn.contains("class nnUNetTrainerAugscope(nnUNetTrainer)"));
    assert!(nn.contains("SCALING = ((0.8, 1.2),)"), "{nn}");
    // batchgeneratorsv2's angles turn the other way: the snippet negates augscope's.
    assert!(nn.contains("return -_uniform(ROTATION[axis])"), "{nn}");
    assert!(nn.contains("P_MIRROR = (1.0, 0.0, 1.0,)"), "{nn}");
}

#[test]
fn batchgenerators_snippet_matches_apply() {
    if !python_has("batchgenerators") {
        common::skipped(
            "python3 cannot import batchgenerators (pip install batchgenerators==0.25.5)",
        );
        return;
    }
    let script = common::fixtures::tests_dir("interop/check_batchgenerators.py");
    let out = Command::new("python3")
        .arg(script)
        .arg(common::cli::BIN)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(text.contains("all 5 cases pass"), "{text}");
}

#[test]
fn cli_preset_errors_exit_2_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "version = 1\n[rotate]\nrange_deg = [[30, -30]]\n").unwrap();
    let img = dir.path().join("img.npy");
    augscope::io::npy::write(&img, &[0.0; 64], &[4, 4, 4], augscope::DType::F32).unwrap();
    let out_dir = dir.path().join("o");
    let runs: Vec<Vec<&str>> = vec![
        vec!["preset", "export", "--to", "monai", bad.to_str().unwrap()],
        vec!["preset", "export", "--to", "keras", "nnunet-v2"],
        vec!["preset", "export", "--to", "monai", "/no/such/preset.toml"],
        vec!["preset", "import", bad.to_str().unwrap()],
        vec![
            "batch",
            "--preset",
            bad.to_str().unwrap(),
            "--count",
            "2",
            "--out",
            out_dir.to_str().unwrap(),
            img.to_str().unwrap(),
        ],
    ];
    for args in runs {
        let out = command().args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
    }
    assert!(
        !dir.path().join("o").exists()
            || std::fs::read_dir(dir.path().join("o")).unwrap().count() == 0
    );
    // A good export prints Python.
    let out = command()
        .args([
            "preset",
            "export",
            "--to",
            "batchgenerators",
            "nnunet-v1-3d",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("SpatialTransform("));
}
