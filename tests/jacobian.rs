//! `apply --report`'s Jacobian readout against numpy: the determinant of the sampling map from the
//! coordinates that `--save-coords` writes, with `numpy.gradient`'s finite differences.

use std::path::Path;
use std::process::Command;

use augscope::Volume;
use augscope::io::{self, SaveOptions};

mod common;
use common::cli::{command, python_has};

/// numpy's determinant of `c.npy` (argv 1) times the orientation (argv 2): `numpy.gradient` of
/// each coordinate component along each axis in float64, the determinant by cofactors along the
/// first row, rounded to float32 as augscope stores it. Also the fraction with float32 gradients
/// (numpy's default on a float32 array) and `numpy.linalg.det`, for the record.
const NUMPY_DET: &str = r#"
import json, sys
import numpy as np
c = np.load(sys.argv[1])
sign = np.float32(sys.argv[2])
nd = c.shape[0]
def det(dtype):
    g = [[np.gradient(c[k].astype(dtype), axis=a) for a in range(nd)] for k in range(nd)]
    if nd == 2:
        return g[0][0] * g[1][1] - g[0][1] * g[1][0]
    return (g[0][0] * (g[1][1] * g[2][2] - g[1][2] * g[2][1])
            - g[0][1] * (g[1][0] * g[2][2] - g[1][2] * g[2][0])
            + g[0][2] * (g[1][0] * g[2][1] - g[1][1] * g[2][0]))
d = det(np.float64).astype(np.float32) * sign
d32 = det(np.float32).astype(np.float32) * sign
g = np.stack([np.stack([np.gradient(c[k].astype(np.float64), axis=a) for a in range(nd)], -1)
              for k in range(nd)], -2)
lin = np.linalg.det(g) * float(sign)
print(json.dumps({
    "min": float(d.min()), "max": float(d.max()), "n": int(d.size),
    "folded": int((d <= 0).sum()), "zeros": int((d == 0).sum()),
    "folded_f32_gradient": int((d32 <= 0).sum()), "folded_linalg": int((lin <= 0).sum()),
}))
"#;

/// A smooth synthetic scan of `shape`, written as `.npy`.
fn write_scan(path: &Path, shape: &[usize]) {
    let n: usize = shape.iter().product();
    let data = (0..n)
        .map(|i| {
            let t = i as f32;
            0.5 + 0.25 * (t * 0.37).sin() + 0.25 * (t * 0.011).cos()
        })
        .collect();
    io::save(
        path,
        &Volume::new(data, shape.to_vec(), 1),
        &SaveOptions::default(),
    )
    .expect("the synthetic scan is written");
}

/// Runs `augscope apply` with `extra` arguments on a scan of `shape` in `dir` (coordinates to
/// `dir/c.npy` when `save_coords`); returns the report's `jacobian` object.
fn apply(dir: &Path, shape: &[usize], extra: &[&str], save_coords: bool) -> serde_json::Value {
    let input = dir.join("in.npy");
    write_scan(&input, shape);
    let (out, coords, report) = (dir.join("out.npy"), dir.join("c.npy"), dir.join("r.json"));
    for p in [&out, &coords, &report] {
        let _ = std::fs::remove_file(p);
    }
    let mut cmd = command();
    cmd.arg("apply").arg(&input).arg(&out).args(extra);
    if save_coords {
        cmd.arg("--save-coords").arg(&coords);
    }
    let o = cmd
        .arg("--report")
        .arg(&report)
        .args(["--backend", "cpu"])
        .output()
        .expect("augscope runs");
    assert!(
        o.status.success(),
        "augscope apply {extra:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(save_coords, coords.exists());
    let text = std::fs::read_to_string(&report).expect("the report is written");
    let r: serde_json::Value = serde_json::from_str(&text).expect("the report is JSON");
    r["jacobian"].clone()
}

/// numpy's readout of `dir/c.npy` with orientation `sign`.
fn numpy_readout(dir: &Path, sign: f64) -> serde_json::Value {
    let o = Command::new("python3")
        .args(["-c", NUMPY_DET])
        .arg(dir.join("c.npy"))
        .arg(sign.to_string())
        .output()
        .expect("python3 runs");
    assert!(
        o.status.success(),
        "numpy failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).expect("numpy prints JSON")
}

/// Checks one case against numpy and returns augscope's folded fraction.
fn check(name: &str, shape: &[usize], extra: &[&str], want_sign: f64) -> f64 {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let jac = apply(dir.path(), shape, extra, true);
    let f = |k: &str| {
        jac[k]
            .as_f64()
            .unwrap_or_else(|| panic!("{name}: report has no jacobian.{k}: {jac}"))
    };
    let (min, max, frac, sign) = (f("min"), f("max"), f("folded_fraction"), f("orientation"));
    assert_eq!(sign, want_sign, "{name}: orientation");
    let np = numpy_readout(dir.path(), sign);
    let g = |k: &str| {
        np[k]
            .as_f64()
            .unwrap_or_else(|| panic!("{name}: numpy gave no {k}: {np}"))
    };
    let n = g("n");
    let np_frac = g("folded") / n;
    eprintln!(
        "{name}: augscope folded {frac:.6} min {min:.6} max {max:.6} | numpy folded {np_frac:.6} \
         min {:.6} max {:.6} (float32 gradients: {:.6}, linalg.det: {:.6}, exact zeros: {})",
        g("min"),
        g("max"),
        g("folded_f32_gradient") / n,
        g("folded_linalg") / n,
        g("zeros"),
    );
    // Same differences, same cofactor order, both in f64 rounded once to f32: the same bits, so
    // the same count of det <= 0.
    assert_eq!(
        (frac * n).round(),
        g("folded"),
        "{name}: folded voxels, augscope {frac} vs numpy {np_frac}"
    );
    for (k, ours) in [("min", min), ("max", max)] {
        let theirs = g(k);
        assert!(
            (ours - theirs).abs() <= 1e-4 * theirs.abs().max(1.0),
            "{name}: {k} augscope {ours} vs numpy {theirs}"
        );
    }
    frac
}

fn skip_without_numpy(_test: &str) -> bool {
    if python_has("numpy") {
        return false;
    }
    common::skipped("python3 cannot import numpy (pip install numpy)");
    true
}

#[test]
fn strong_elastic_folds_as_numpy_says() {
    if skip_without_numpy("strong_elastic_folds_as_numpy_says") {
        return;
    }
    let frac = check(
        "3D alpha 400 sigma 2",
        &[24, 28, 32],
        &["--elastic", "400,2", "--seed", "11"],
        1.0,
    );
    assert!(frac > 0.001, "alpha 400, sigma 2 must fold: {frac}");
    // Near the onset of folding, where the sign of small determinants decides the count.
    let onset = check(
        "3D alpha 80 sigma 3",
        &[24, 28, 32],
        &["--elastic", "80,3", "--seed", "11"],
        1.0,
    );
    assert!(onset > 0.0 && onset < frac, "{onset} vs {frac}");
}

#[test]
fn gentle_elastic_does_not_fold() {
    if skip_without_numpy("gentle_elastic_does_not_fold") {
        return;
    }
    let frac = check(
        "3D alpha 20 sigma 6",
        &[24, 28, 32],
        &[
            "--elastic",
            "20,6",
            "--seed",
            "11",
            "--rotate",
            "0.3,0,-0.2",
        ],
        1.0,
    );
    assert_eq!(frac, 0.0);
}

#[test]
fn images_fold_and_mirroring_is_not_folding() {
    if skip_without_numpy("images_fold_and_mirroring_is_not_folding") {
        return;
    }
    let folded = check(
        "2D alpha 400 sigma 2, flipped",
        &[40, 48],
        &["--elastic", "400,2", "--seed", "3", "--flip", "1"],
        -1.0,
    );
    assert!(
        folded > 0.001,
        "alpha 400, sigma 2 must fold in 2D: {folded}"
    );
    let smooth = check(
        "2D alpha 20 sigma 6, flipped",
        &[40, 48],
        &["--elastic", "20,6", "--seed", "3", "--flip", "0"],
        -1.0,
    );
    assert_eq!(smooth, 0.0, "a mirrored smooth map is not folded");
    let both = check(
        "3D flip 0,2 scale 0.8",
        &[10, 12, 14],
        &["--flip", "0,2", "--scale", "0.8"],
        1.0,
    );
    assert_eq!(both, 0.0);
}

#[test]
fn report_alone_gives_the_same_readout() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["--elastic", "300,2", "--seed", "5"];
    let with = apply(dir.path(), &[12, 14, 16], &args, true);
    let without = apply(dir.path(), &[12, 14, 16], &args, false);
    assert!(with["folded_fraction"].as_f64().unwrap() > 0.0, "{with}");
    assert_eq!(with, without);
    // Without elastic the map is affine: det is the scale's power everywhere.
    let affine = apply(dir.path(), &[9, 10], &["--scale", "1.5"], false);
    assert_eq!(affine["folded_fraction"].as_f64(), Some(0.0));
    for k in ["min", "max"] {
        assert!(
            (affine[k].as_f64().unwrap() - 2.25).abs() < 1e-5,
            "{affine}"
        );
    }
}
