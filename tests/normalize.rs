//! The normalisation a preset trains in (`[normalize]`): bad settings are one line and exit 2;
//! `batch` and `apply --normalize` give the transform the normalised scan (a mirror of it, here);
//! every export writes it as its library's transform or says in a NOTE where it is left out (the
//! explorer's worker: `src/app/worker/tests.rs`).
//! The arithmetic itself is checked against nnU-Net, MONAI and TorchIO by
//! tests/interop/check_normalize.py. Arrays are `[z, y, x]`.

#![allow(clippy::unwrap_used)] // test helpers: a failed unwrap is a failed test

mod common;

use augscope::Volume;
use common::cli::{assert_user_error, ok, run, s};

fn scan() -> Vec<f32> {
    (0..6 * 7 * 8)
        .map(|i| 100.0 + ((i * 37) % 29) as f32 * 7.0)
        .collect()
}

fn write_npy(path: &std::path::Path, data: &[f32], shape: &[usize]) {
    let v = Volume::new(data.to_vec(), shape.to_vec(), 1);
    augscope::io::save(path, &v, &Default::default()).unwrap();
}

#[test]
fn bad_normalisations_are_one_line_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.npy");
    write_npy(&input, &scan(), &[6, 7, 8]);
    let out = dir.path().join("out.npy");
    for (json, needle) in [
        (r#"{"method": "zscore"}"#, "not a normalisation"),
        (
            r#"{"method": "nnunet_zscore", "use_mask": true}"#,
            "use_mask",
        ),
        (
            r#"{"method": "monai_scale_intensity_range", "a_min": 0, "a_max": 1, "b_min": 0}"#,
            "together",
        ),
        (
            r#"{"method": "torchio_rescale_intensity", "percentiles": [99, 1]}"#,
            "percentiles",
        ),
        (
            r#"{"method": "nnunet_ct", "mean": 0, "std": -1, "percentile_00_5": 0, "percentile_99_5": 1}"#,
            "negative",
        ),
    ] {
        assert_user_error(&["apply", s(&input), s(&out), "--normalize", json], needle);
    }
    assert!(!out.exists(), "no output for a refused command");
    let preset = dir.path().join("p.toml");
    std::fs::write(
        &preset,
        "version = 1\n[normalize]\nmethod = \"monai_scale_intensity_range\"\na_min = 0.0\n\
         a_max = nan\n",
    )
    .unwrap();
    assert_user_error(&["preset", "sample", s(&preset)], "a_max");
    // TorchIO refuses an image of one value; so does augscope, in one line.
    let flat = dir.path().join("flat.npy");
    write_npy(&flat, &[5.0; 6 * 7 * 8], &[6, 7, 8]);
    assert_user_error(
        &[
            "apply",
            s(&flat),
            s(&out),
            "--normalize",
            r#"{"method": "torchio_z_normalization"}"#,
        ],
        "standard deviation is 0",
    );
}

/// Mean and population standard deviation.
fn moments(x: &[f32]) -> (f64, f64) {
    let n = x.len() as f64;
    let m = x.iter().map(|&v| v as f64).sum::<f64>() / n;
    let v = x.iter().map(|&v| (v as f64 - m).powi(2)).sum::<f64>() / n;
    (m, v.sqrt())
}

#[test]
fn batch_and_apply_transform_the_normalised_scan() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.npy");
    write_npy(&input, &scan(), &[6, 7, 8]);
    let preset = dir.path().join("p.toml");
    std::fs::write(
        &preset,
        "version = 1\nname = \"z\"\n[flip]\np = [1.0]\n[normalize]\nmethod = \"nnunet_zscore\"\n",
    )
    .unwrap();
    let out = dir.path().join("b");
    let (code, _, err) = run(&[
        "batch",
        "--preset",
        s(&preset),
        "--count",
        "2",
        "--out",
        s(&out),
        "--ext",
        "npy",
        "--backend",
        "cpu",
        s(&input),
    ]);
    assert_eq!(code, 0, "{err}");
    // The manifest says what the inputs went through.
    let manifest = std::fs::read_to_string(out.join("manifest.jsonl")).unwrap();
    for line in manifest.lines() {
        let r: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(r["normalize"]["method"], "nnunet_zscore", "{line}");
    }
    let apply_out = dir.path().join("a.npy");
    ok(&[
        "apply",
        s(&input),
        s(&apply_out),
        "--backend",
        "cpu",
        "--flip",
        "0,1,2",
        "--normalize",
        r#"{"method": "nnunet_zscore"}"#,
    ]);
    let want = augscope::io::load(&apply_out, &Default::default()).unwrap();
    let (m, sd) = moments(&want.data);
    assert!(m.abs() < 1e-5 && (sd - 1.0).abs() < 1e-5, "{m} {sd}");
    let mut names: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "npy"))
        .collect();
    names.sort();
    assert_eq!(names.len(), 2);
    for p in names {
        let got = augscope::io::load(&p, &Default::default()).unwrap();
        assert_eq!(got.dtype, augscope::DType::F32);
        assert!(got.data == want.data, "{}", p.display());
    }
}

#[test]
fn every_export_writes_the_normalisation_or_says_why_not() {
    let dir = tempfile::tempdir().unwrap();
    let preset = |normalize: &str| {
        let p = dir.path().join(format!("{}.toml", normalize.len()));
        std::fs::write(
            &p,
            format!("version = 1\nname = \"n\"\n[flip]\np = [0.5]\n[normalize]\n{normalize}\n"),
        )
        .unwrap();
        p
    };
    let monai = preset(
        "method = \"monai_scale_intensity_range\"\na_min = -1000.0\na_max = 1000.0\nb_min = 0.0\n\
         b_max = 1.0\nclip = true",
    );
    let text = ok(&["preset", "export", "--to", "monai", s(&monai)]);
    assert!(
        text.contains(
            "ScaleIntensityRanged(keys=KEYS[0], a_min=-1000.0, a_max=1000.0, b_min=0.0, \
             b_max=1.0, clip=True)"
        ),
        "{text}"
    );
    let tio = ok(&["preset", "export", "--to", "torchio", s(&monai)]);
    assert!(
        tio.contains("# NOTE: normalize monai_scale_intensity_range"),
        "{tio}"
    );
    let torchio = preset("method = \"torchio_rescale_intensity\"\npercentiles = [0.5, 99.5]");
    let tio = ok(&["preset", "export", "--to", "torchio", s(&torchio)]);
    assert!(
        tio.contains("tio.RescaleIntensity(out_min_max=(0.0, 1.0), percentiles=(0.5, 99.5))"),
        "{tio}"
    );
    let nnunet = preset("method = \"nnunet_zscore\"");
    let nn = ok(&["preset", "export", "--to", "nnunet", s(&nnunet)]);
    assert!(nn.contains("# NOTE: the images are normalised by nnU-Net's ZScoreNormalization"));
    let mo = ok(&["preset", "export", "--to", "monai", s(&nnunet)]);
    assert!(mo.contains("# NOTE: the images are normalised by nnU-Net's ZScoreNormalization"));
}

#[test]
fn the_masked_zscore_keeps_the_background_at_zero() {
    // A head of nonzero values in a zero background, with a zero hole inside it.
    let dir = tempfile::tempdir().unwrap();
    let (input, out) = (dir.path().join("head.npy"), dir.path().join("out.npy"));
    let n = 16usize;
    let c = (n as f32 - 1.0) / 2.0;
    let mut data = vec![0f32; n * n * n];
    for (i, v) in data.iter_mut().enumerate() {
        let (z, y, x) = ((i / (n * n)) as f32, ((i / n) % n) as f32, (i % n) as f32);
        let r = ((z - c).powi(2) + (y - c).powi(2) + (x - c).powi(2)).sqrt();
        if r < 6.0 && r > 2.0 {
            *v = 100.0 + (i % 7) as f32 * 10.0;
        }
    }
    write_npy(&input, &data, &[n, n, n]);
    ok(&[
        "apply",
        s(&input),
        s(&out),
        "--backend",
        "cpu",
        "--normalize",
        r#"{"method": "nnunet_zscore", "use_mask_for_norm": true}"#,
    ]);
    let got = augscope::io::load(&out, &Default::default()).unwrap();
    let centre = (n / 2) * n * n + (n / 2) * n + n / 2;
    assert_eq!(got.data[0], 0.0, "the background stays 0");
    assert!(
        got.data[centre] < -1.0,
        "the hole is inside the mask: {}",
        got.data[centre]
    );
    // the z-scores inside the mask (the shell and its hole) have mean 0 and std 1
    let mask: Vec<bool> = (0..n * n * n)
        .map(|i| {
            let (z, y, x) = ((i / (n * n)) as f32, ((i / n) % n) as f32, (i % n) as f32);
            ((z - c).powi(2) + (y - c).powi(2) + (x - c).powi(2)).sqrt() < 6.0
        })
        .collect();
    let inside: Vec<f32> = got
        .data
        .iter()
        .zip(&mask)
        .filter_map(|(&v, &m)| m.then_some(v))
        .collect();
    let (m, sd) = moments(&inside);
    assert!(m.abs() < 1e-5 && (sd - 1.0).abs() < 1e-5, "{m} {sd}");
    let outside = got.data.iter().zip(&mask).filter(|&(_, &m)| !m);
    assert!(outside.into_iter().all(|(&v, _)| v == 0.0));
}
