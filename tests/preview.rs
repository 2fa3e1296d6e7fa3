//! `apply --as` and `batch --as`: a training library's model of the transform ("Preview as").
//! The models are checked voxel by voxel against the libraries themselves in
//! `tests/interop/check_preview.py`; these tests hold what needs no library: the CLI contract,
//! the report and manifest naming the model, determinism, and the models agreeing with augscope
//! exactly where the library does what augscope does.

#![allow(clippy::unwrap_used)] // test helpers: a failed unwrap is a failed test

use std::path::{Path, PathBuf};

use augscope::Volume;
use augscope::io::{self, SaveOptions};

mod common;
use common::cli::{ok_stderr, run, s};
use common::fixtures::load_values as load;

/// A smooth volume with a bright off-centre block, and a label map of the block.
fn inputs(dir: &Path, shape: [usize; 3]) -> (PathBuf, PathBuf) {
    let n: usize = shape.iter().product();
    let mut data = vec![0f32; n];
    let mut lab = vec![0f32; n];
    for z in 0..shape[0] {
        for y in 0..shape[1] {
            for x in 0..shape[2] {
                let i = (z * shape[1] + y) * shape[2] + x;
                data[i] = ((z as f32 * 0.3).sin() + (y as f32 * 0.2).cos() + x as f32 * 0.05) * 0.3;
                if z > shape[0] / 2 && y > shape[1] / 2 && x > shape[2] / 3 {
                    data[i] += 1.0;
                    lab[i] = 1.0;
                }
            }
        }
    }
    let img = dir.join("in.npy");
    let l = dir.join("lab.npy");
    io::save(
        &img,
        &Volume::new(data, shape.to_vec(), 1),
        &SaveOptions::default(),
    )
    .unwrap();
    io::save(
        &l,
        &Volume::new(lab, shape.to_vec(), 1),
        &SaveOptions::default(),
    )
    .unwrap();
    (img, l)
}

const PLAN: [&str; 8] = [
    "--rotate",
    "0.2,-0.1,0.3",
    "--scale",
    "0.9",
    "--elastic",
    "200,4",
    "--seed",
    "5",
];

#[test]
fn each_library_model_runs_and_the_report_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let (img, lab) = inputs(dir.path(), [20, 24, 22]);
    let own = dir.path().join("own.npy");
    ok_stderr(&[
        "apply",
        s(&img),
        s(&own),
        PLAN[0],
        PLAN[1],
        PLAN[2],
        PLAN[3],
        PLAN[4],
        PLAN[5],
        PLAN[6],
        PLAN[7],
        "--backend",
        "cpu",
    ]);
    let own = load(&own);
    for (model, id) in [
        ("monai", "monai-1.6.1"),
        ("torchio", "torchio-1.2.1"),
        ("nnunet", "nnunetv2-2.8.1"),
    ] {
        let out = dir.path().join(format!("{model}.npy"));
        let lab_out = dir.path().join(format!("{model}_lab.npy"));
        let rep = dir.path().join(format!("{model}.json"));
        let mut args = vec!["apply", s(&img), s(&out)];
        args.extend_from_slice(&PLAN);
        args.extend_from_slice(&[
            "--label",
            s(&lab),
            "--label-out",
            s(&lab_out),
            "--as",
            model,
            "--report",
            s(&rep),
        ]);
        let err = ok_stderr(&args);
        assert!(err.contains("as "), "the steps are said on stderr: {err}");
        let r: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&rep).unwrap()).unwrap();
        assert_eq!(r["model"], id);
        let steps = r["model_steps"].as_array().unwrap();
        assert!(
            steps
                .iter()
                .any(|l| l.as_str().unwrap().contains("elastic")),
            "{model}: {steps:?}"
        );
        assert!(r["displacement"]["rms_vox"].as_f64().unwrap() > 0.1);
        assert_eq!(r["control_grid"].is_null(), model != "torchio");
        let a = load(&out);
        assert_eq!(a.len(), own.len());
        assert!(a.iter().all(|v| v.is_finite()));
        let differ = a
            .iter()
            .zip(&own)
            .filter(|(x, y)| (*x - *y).abs() > 1e-3)
            .count();
        assert!(
            differ > a.len() / 20,
            "{model} is its own model: {differ} voxels differ"
        );
        // Labels stay labels.
        assert!(load(&lab_out).iter().all(|&v| v == 0.0 || v == 1.0));
        // The same plan and seed give the same bits.
        let again = dir.path().join(format!("{model}_again.npy"));
        let mut args2 = vec!["apply", s(&img), s(&again)];
        args2.extend_from_slice(&PLAN);
        args2.extend_from_slice(&["--as", model]);
        ok_stderr(&args2);
        assert_eq!(load(&again), a, "{model} is deterministic");
    }
}

#[test]
fn where_the_library_does_what_augscope_does_the_models_agree() {
    let dir = tempfile::tempdir().unwrap();
    let (img, _) = inputs(dir.path(), [18, 20, 16]);
    let own = dir.path().join("own.npy");
    let bg = dir.path().join("bg.npy");
    let rep = dir.path().join("bg.json");
    let args = [
        "--rotate",
        "0.3,0.1,-0.2",
        "--elastic",
        "100,3",
        "--seed",
        "2",
    ];
    let mut a = vec!["apply", s(&img), s(&own)];
    a.extend_from_slice(&args);
    ok_stderr(&a);
    let mut b = vec!["apply", s(&img), s(&bg), "--as", "batchgenerators"];
    b.extend_from_slice(&args);
    b.extend_from_slice(&["--report", s(&rep)]);
    ok_stderr(&b);
    assert_eq!(
        load(&own),
        load(&bg),
        "batchgenerators is augscope's own model"
    );
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&rep).unwrap()).unwrap();
    assert_eq!(r["model"], "batchgenerators-0.25.5");
    // MONAI without elastic is one resample of augscope's map with scipy's sampler.
    for order in ["0", "1", "3"] {
        let own = dir.path().join(format!("affine_{order}.npy"));
        let monai = dir.path().join(format!("monai_{order}.npy"));
        let t = [
            "--rotate",
            "0.3,0.1,-0.2",
            "--scale",
            "1.1",
            "--translate",
            "1,-2,0.5",
            "--mode",
            "reflect",
            "--order",
            order,
        ];
        let mut a = vec!["apply", s(&img), s(&own)];
        a.extend_from_slice(&t);
        ok_stderr(&a);
        let mut b = vec!["apply", s(&img), s(&monai), "--as", "monai"];
        b.extend_from_slice(&t);
        ok_stderr(&b);
        assert_eq!(load(&own), load(&monai), "order {order}");
    }
    // A flip alone: every library mirrors exactly.
    let own = dir.path().join("flip.npy");
    ok_stderr(&["apply", s(&img), s(&own), "--flip", "0,2"]);
    for model in ["monai", "torchio", "nnunet"] {
        let out = dir.path().join(format!("flip_{model}.npy"));
        ok_stderr(&["apply", s(&img), s(&out), "--flip", "0,2", "--as", model]);
        assert_eq!(load(&out), load(&own), "{model}");
    }
}

#[test]
fn bad_requests_are_one_line_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let (img, _) = inputs(dir.path(), [8, 8, 8]);
    let out = dir.path().join("out.npy");
    let coords = dir.path().join("c.npy");
    let (code, _, err) = run(&["apply", s(&img), s(&out), "--as", "keras"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("unknown model"), "{err}");
    let (code, _, err) = run(&[
        "apply",
        s(&img),
        s(&out),
        "--as",
        "torchio",
        "--save-coords",
        s(&coords),
    ]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("--save-coords"), "{err}");
    assert!(!out.exists() && !coords.exists(), "nothing written");
}

#[test]
fn a_batch_as_a_library_names_the_model_in_every_manifest_line() {
    let dir = tempfile::tempdir().unwrap();
    let (img, lab) = inputs(dir.path(), [12, 14, 12]);
    let out = dir.path().join("out");
    let preset = dir.path().join("p.toml");
    std::fs::write(
        &preset,
        "version = 1\nname = \"p\"\n[elastic]\np = 1.0\nalpha = [50.0, 80.0]\nsigma = [3.0, 4.0]\n\
         [rotate]\np = 0.5\nrange_deg = [[-10, 10]]\n",
    )
    .unwrap();
    ok_stderr(&[
        "batch",
        "--preset",
        s(&preset),
        "--count",
        "3",
        "--out",
        s(&out),
        "--label",
        s(&lab),
        "--as",
        "nnunet",
        "--quiet",
        s(&img),
    ]);
    let manifest = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(".jsonl"))
        .unwrap();
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&manifest)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    for l in &lines {
        assert_eq!(l["model"], "nnunetv2-2.8.1");
        assert!(!l["model_steps"].as_array().unwrap().is_empty());
        assert_eq!(l["backend"], "cpu");
    }
}

/// A library's model on an output grid other than the input's: the elastic field is made on the
/// output grid (the patch), as the library makes it, for every model.
#[test]
fn models_with_an_elastic_field_run_on_a_larger_output_grid() {
    use augscope::export::preview::{Model, preview};
    let shape = vec![9, 8, 10];
    let n: usize = shape.iter().product();
    let image = Volume::new((0..n).map(|i| (i % 17) as f32).collect(), shape.clone(), 1);
    let label = Volume::new((0..n).map(|i| (i % 3) as f32).collect(), shape, 1);
    let plan = augscope::Plan {
        elastic: Some(augscope::Elastic {
            alpha: 3.0,
            sigma: 2.0,
            seed: 5,
        }),
        out_shape: Some(vec![13, 11, 14]),
        ..augscope::Plan::default()
    };
    for model in [Model::Nnunet, Model::Monai, Model::TorchIo] {
        let p = preview(model, &image, Some(&label), &plan)
            .unwrap_or_else(|e| panic!("{model:?}: {e}"));
        assert_eq!(p.image.shape, vec![13, 11, 14], "{model:?}");
        assert_eq!(p.label.expect("a label map").shape, vec![13, 11, 14]);
        assert!(p.image.data.iter().all(|v| v.is_finite()), "{model:?}");
    }
}
