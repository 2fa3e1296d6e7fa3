//! `augscope filter` end to end: results equal to the library's (hence scipy's), batches over
//! many inputs, exit code 2 with one clear line on bad input, and no partial or stray files.
//! Arrays are `[z, y, x]` (2D `[y, x]`).

use std::path::{Path, PathBuf};

use augscope::filter::{Boundary, Filter, apply_cpu};
use augscope::io::npy;
use augscope::{DType, Mode};

mod common;
use common::cli::{assert_user_error, listing, run, s};

/// A small 3D test volume on disk.
fn volume(dir: &Path, name: &str, shape: &[usize], seed: usize) -> (PathBuf, Vec<f32>) {
    let n: usize = shape.iter().product();
    let data: Vec<f32> = (0..n)
        .map(|i| (((i + seed) * 2654435761) % 1000) as f32 / 1000.0)
        .collect();
    let p = dir.join(name);
    npy::write(&p, &data, shape, DType::F32).expect("write the input");
    (p, data)
}

#[test]
fn filter_writes_what_the_library_computes() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let shape = [6usize, 9, 11];
    let (inp, data) = volume(tmp.path(), "in.npy", &shape, 1);
    let out = tmp.path().join("out.npy");
    let (code, _, err) = run(&[
        "filter",
        s(&inp),
        s(&out),
        "--gaussian",
        "1.5,1,2",
        "--mode",
        "mirror",
        "--backend",
        "cpu",
    ]);
    assert_eq!(code, 0, "{err}");
    let got = npy::read(&out).expect("output");
    assert_eq!(got.shape, shape);
    let want = apply_cpu(
        &Filter::Gaussian {
            sigma: vec![1.5, 1.0, 2.0],
        },
        Boundary {
            mode: Mode::Mirror,
            cval: 0.0,
        },
        &data,
        &shape,
    )
    .expect("filter");
    assert_eq!(got.data, want);
}

#[test]
fn batch_over_many_inputs_writes_each_into_the_folder() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let out_dir = tmp.path().join("out");
    std::fs::create_dir(&out_dir).expect("mkdir");
    // Two of one shape (one launch together) and one of another.
    let (a, da) = volume(tmp.path(), "a.npy", &[5, 7, 8], 1);
    let (b, db) = volume(tmp.path(), "b.npy", &[5, 7, 8], 2);
    let (c, dc) = volume(tmp.path(), "c.npy", &[4, 6, 9], 3);
    let (code, _, err) = run(&[
        "filter",
        "--out-dir",
        s(&out_dir),
        s(&a),
        s(&b),
        s(&c),
        "--median",
        "3",
        "--mode",
        "wrap",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(listing(&out_dir), ["a.npy", "b.npy", "c.npy"]);
    let bd = Boundary {
        mode: Mode::Wrap,
        cval: 0.0,
    };
    let med = Filter::Median { size: vec![3] };
    for (name, data, shape) in [
        ("a.npy", &da, [5usize, 7, 8]),
        ("b.npy", &db, [5, 7, 8]),
        ("c.npy", &dc, [4, 6, 9]),
    ] {
        let got = npy::read(&out_dir.join(name)).expect("output");
        assert_eq!(
            got.data,
            apply_cpu(&med, bd, data, &shape).expect("median"),
            "{name}"
        );
    }
}

#[test]
fn bad_input_is_one_line_exit_2_and_no_file() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let (inp, _) = volume(tmp.path(), "in.npy", &[4, 5, 6], 0);
    let out = tmp.path().join("out.npy");
    let (i, o) = (s(&inp), s(&out));
    assert_user_error(&["filter", i, o], "required");
    assert_user_error(
        &["filter", i, o, "--gaussian", "1", "--median", "3"],
        "cannot be used",
    );
    assert_user_error(&["filter", i, o, "--median", "4"], "odd");
    assert_user_error(&["filter", i, o, "--gaussian", "1,2"], "one per axis");
    assert_user_error(&["filter", i, o, "--gaussian", "-1"], "sigma");
    assert_user_error(
        &["filter", i, o, "--gaussian", "abc"],
        "not a finite number",
    );
    assert_user_error(&["filter", i, o, "--dog", "1"], "two numbers");
    assert_user_error(&["filter", i, o, "--gamma", "0"], "gamma");
    assert_user_error(&["filter", i, o, "--febds", "dog"], "2D grayscale");
    assert_user_error(&["filter", i, o, "--febds", "xyz"], "unknown FEBDS method");
    assert_user_error(
        &["filter", i, o, "--gaussian", "1", "--mode", "foo"],
        "boundary mode",
    );
    assert_user_error(
        &["filter", i, o, "--gaussian", "1", "--backend", "tpu"],
        "backend",
    );
    assert_user_error(&["filter", i, i, "--gaussian", "1"], "overwrite an input");
    assert_user_error(&["filter", i, "--gaussian", "1"], "IN OUT");
    let missing = tmp.path().join("missing.npy");
    assert_user_error(
        &["filter", s(&missing), o, "--gaussian", "1"],
        "does not exist",
    );
    let bad_ext = tmp.path().join("out.xyz");
    assert_user_error(
        &["filter", i, s(&bad_ext), "--gaussian", "1"],
        "unknown file type",
    );
    // A file that is not an array.
    let junk = tmp.path().join("junk.npy");
    std::fs::write(&junk, b"not numpy").expect("write");
    assert_user_error(&["filter", s(&junk), o, "--gaussian", "1"], "junk.npy");
    let nodir = tmp.path().join("nodir");
    assert_user_error(
        &["filter", "--out-dir", s(&nodir), i, "--gaussian", "1"],
        "not a folder",
    );
    // A median window that would gather 255^3 values for each of 8000 voxels (minutes on any
    // engine): refused at once.
    let (big, _) = volume(tmp.path(), "big.npy", &[20, 20, 20], 1);
    assert_user_error(&["filter", s(&big), o, "--median", "255"], "limit");
    // Nothing was written, not even a temporary file.
    assert_eq!(listing(tmp.path()), ["big.npy", "in.npy", "junk.npy"]);
}
