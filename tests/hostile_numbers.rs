//! Numbers a user or a preset can give that no augmentation needs: each is one line naming the
//! flag or the preset key, exit 2, and no output file, never a panic or an allocation abort.

#![allow(clippy::unwrap_used)] // test helpers: a failed unwrap is a failed test

use std::path::Path;

use augscope::Volume;
use augscope::io::{self, SaveOptions};

mod common;
use common::cli::command;

fn refused(args: &[&str], needle: &str) {
    let o = command().args(args).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
    assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
    assert!(err.contains(needle), "{args:?}: {err}");
    assert!(!err.contains("panicked"), "{args:?}: {err}");
}

fn volume(dir: &Path, shape: &[usize]) -> String {
    let n: usize = shape.iter().product();
    let data: Vec<f32> = (0..n).map(|i| (i % 17) as f32 / 16.0).collect();
    let path = dir.join(format!("in{}d.npy", shape.len()));
    io::save(
        &path,
        &Volume::new(data, shape.to_vec(), 1),
        &SaveOptions::default(),
    )
    .unwrap();
    path.display().to_string()
}

#[test]
fn huge_transform_values_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    for shape in [vec![6, 7, 8], vec![9, 10]] {
        let input = volume(dir.path(), &shape);
        let out = dir.path().join("out.npy");
        let out = out.to_str().unwrap();
        let zeros = vec!["0"; shape.len() - 1].join(",");
        let far = format!("--translate=1e19,{zeros}");
        let neg = format!("--translate=-7.97e307,{zeros}");
        refused(
            &["apply", &input, out, &far, "--mode", "nearest"],
            "translate",
        );
        for mode in ["reflect", "mirror", "wrap", "grid-wrap"] {
            refused(&["apply", &input, out, &neg, "--mode", mode], "translate");
        }
        refused(&["apply", &input, out, "--scale", "1e30"], "scale");
        refused(&["apply", &input, out, "--scale", "1e-30"], "scale");
        refused(&["apply", &input, out, "--elastic", "100,1e300"], "sigma");
        refused(&["apply", &input, out, "--elastic", "100,1e12"], "sigma");
        refused(&["apply", &input, out, "--elastic", "1e300,4"], "alpha");
        assert!(!Path::new(out).exists());
    }
}

#[test]
fn huge_filter_sigmas_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let input = volume(dir.path(), &[6, 7, 8]);
    let out = dir.path().join("f.npy");
    let out = out.to_str().unwrap();
    refused(&["filter", &input, out, "--gaussian", "1e30"], "sigma");
    refused(&["filter", &input, out, "--log", "1e30"], "sigma");
    refused(&["filter", &input, out, "--dog", "1e300,1"], "sigma");
    assert!(!Path::new(out).exists());
}

#[test]
fn a_preset_with_a_huge_scale_is_refused_by_batch() {
    let dir = tempfile::tempdir().unwrap();
    let input = volume(dir.path(), &[6, 7, 8]);
    let preset = dir.path().join("p.toml");
    std::fs::write(
        &preset,
        "version = 1\n[scale]\nrange = [[1e30, 1e30]]\n[sampling]\norder = 1\n",
    )
    .unwrap();
    let out = dir.path().join("batch");
    refused(
        &[
            "batch",
            "--preset",
            preset.to_str().unwrap(),
            "--count",
            "2",
            "--out",
            out.to_str().unwrap(),
            &input,
        ],
        "scale",
    );
}

#[test]
fn an_absurd_number_of_axes_is_a_usage_error() {
    refused(
        &[
            "preset",
            "sample",
            "--ndim",
            "18446744073709551615",
            "nnunet-v2",
        ],
        "ndim",
    );
    refused(
        &[
            "preset",
            "export",
            "--to",
            "monai",
            "--ndim",
            "4",
            "nnunet-v2",
        ],
        "ndim",
    );
}
