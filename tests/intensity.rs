//! The intensity steps of a plan through the command line: they act after the resample, on the
//! image only (the label map comes out as the spatial plan alone makes it), in their order, with
//! the formulas of batchgeneratorsv2 (checked against the library itself by
//! tests/interop/check_intensity.py); bad values are one line and exit 2. Arrays are `[z, y, x]`.

#![allow(clippy::unwrap_used)] // test helpers: a failed unwrap is a failed test

mod common;

use std::path::Path;

use augscope::Volume;
use augscope::io::{self, SaveOptions};
use common::cli::{assert_user_error, run, s};

const SHAPE: [usize; 3] = [7, 9, 8];

fn inputs(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let n: usize = SHAPE.iter().product();
    let img: Vec<f32> = (0..n)
        .map(|i| ((i * 37) % 101) as f32 / 10.0 - 2.0)
        .collect();
    let lab: Vec<f32> = (0..n).map(|i| ((i / 11) % 4) as f32).collect();
    let (ip, lp) = (dir.join("img.npy"), dir.join("lab.npy"));
    io::save(
        &ip,
        &Volume::new(img, SHAPE.to_vec(), 1),
        &SaveOptions::default(),
    )
    .unwrap();
    let mut l = Volume::new(lab, SHAPE.to_vec(), 1);
    l.dtype = augscope::DType::U8;
    io::save(&lp, &l, &SaveOptions { keep_dtype: true }).unwrap();
    (ip, lp)
}

/// Runs `apply` with `extra`; (image, label) outputs.
fn apply(dir: &Path, tag: &str, extra: &[&str]) -> (Vec<f32>, Vec<f32>) {
    let (img, lab) = inputs(dir);
    let (o, lo) = (
        dir.join(format!("{tag}.npy")),
        dir.join(format!("{tag}_l.npy")),
    );
    let mut a = vec![
        "apply",
        s(&img),
        s(&o),
        "--label",
        s(&lab),
        "--label-out",
        s(&lo),
    ];
    a.extend_from_slice(extra);
    let (code, _, err) = run(&a);
    assert_eq!(code, 0, "{a:?}: {err}");
    (
        augscope::io::npy::read(&o).unwrap().data,
        augscope::io::npy::read(&lo).unwrap().data,
    )
}

fn stats(x: &[f32]) -> (f64, f32, f32) {
    let mean = x.iter().map(|&v| v as f64).sum::<f64>() / x.len() as f64;
    let lo = x.iter().copied().fold(f32::INFINITY, f32::min);
    let hi = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    (mean, lo, hi)
}

#[test]
fn steps_act_after_the_resample_on_the_image_only() {
    let dir = tempfile::tempdir().unwrap();
    let spatial = ["--rotate", "0.3,0,0.2", "--order", "1"];
    let (base, base_lab) = apply(dir.path(), "base", &spatial);
    let mut args = spatial.to_vec();
    args.extend(["--brightness", "1.5", "--contrast", "0.5", "--gamma", "1.3"]);
    let (got, got_lab) = apply(dir.path(), "steps", &args);
    assert_eq!(
        got_lab, base_lab,
        "the label map receives no intensity step"
    );
    // The steps by hand, in their order, on the resampled image.
    let mut want: Vec<f32> = base.iter().map(|v| v * 1.5).collect();
    let (mean, lo, hi) = stats(&want);
    let mean = mean as f32;
    for v in want.iter_mut() {
        *v = ((*v - mean) * 0.5 + mean).clamp(lo, hi);
    }
    let (_, lo, hi) = stats(&want);
    for v in want.iter_mut() {
        *v = ((*v - lo) / (hi - lo)).powf(1.3) * (hi - lo) + lo;
    }
    let worst = got
        .iter()
        .zip(&want)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(worst <= 1e-5 * (hi - lo), "worst {worst}");
}

#[test]
fn a_plan_that_moves_nothing_still_changes_values() {
    let dir = tempfile::tempdir().unwrap();
    let (img, _) = inputs(dir.path());
    let input = augscope::io::npy::read(&img).unwrap().data;
    let (got, _) = apply(dir.path(), "b", &["--brightness", "2"]);
    let want: Vec<f32> = input.iter().map(|v| v * 2.0).collect();
    assert_eq!(got, want);
}

#[test]
fn the_report_lists_the_steps_with_their_values() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("r.json");
    apply(
        dir.path(),
        "r",
        &["--gamma", "0.8", "--gamma-invert", "--report", s(&report)],
    );
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let done = r["done"].as_array().expect("a done list");
    let g = done
        .iter()
        .find(|d| d["transform"] == "gamma")
        .expect("a gamma line");
    assert_eq!(g["values"]["channels"][0]["invert"], true);
    assert_eq!(
        r["plan"]["intensity"][0]["gamma"]["channels"][0]["gamma"],
        0.8
    );
}

#[test]
fn bad_values_are_one_line_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let (img, _) = inputs(dir.path());
    let out = dir.path().join("o.npy");
    for (flags, needle) in [
        (vec!["--gamma", "0"], "gamma"),
        (vec!["--gamma", "-1"], "gamma"),
        (vec!["--gamma", "nan"], "gamma"),
        (vec!["--brightness", "nan"], "brightness"),
        (vec!["--contrast", "inf"], "contrast"),
        (vec!["--brightness", "1,2"], "channel"),
        (vec!["--gamma", "1.2", "--as", "monai"], "intensity"),
        (vec!["--contrast", "1.2", "--as", "torchio"], "intensity"),
    ] {
        let mut a = vec!["apply", s(&img), s(&out)];
        a.extend(flags);
        assert_user_error(&a, needle);
        assert!(!out.exists(), "{a:?} left an output");
    }
}

#[test]
fn preview_as_nnunet_applies_the_steps_of_batchgeneratorsv2() {
    let dir = tempfile::tempdir().unwrap();
    let (plain, _) = apply(dir.path(), "p", &["--as", "nnunet", "--rotate", "0.2,0,0"]);
    let (got, _) = apply(
        dir.path(),
        "q",
        &[
            "--as",
            "nnunet",
            "--rotate",
            "0.2,0,0",
            "--brightness",
            "0.5",
        ],
    );
    let want: Vec<f32> = plain.iter().map(|v| v * 0.5).collect();
    assert_eq!(got, want);
}
