//! Label maps keep their exact integer values through every transform, whatever their type:
//! values beyond f32's 2^24 (16777217, 123456789, 64-bit ones) come back as they went in.

#![allow(clippy::unwrap_used)] // test helpers: a failure is the test failing

mod common;

use std::path::Path;

use common::cli::run;

/// `.npy` bytes of a little-endian integer array (`descr` `<i4`, `<i8` or `<u8`).
fn npy_bytes(descr: &str, shape: &[usize], values: &[i128]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let mut h = format!(
        "{{'descr': '{descr}', 'fortran_order': False, 'shape': ({},), }}",
        dims.join(", ")
    );
    let total = 10 + h.len() + 1;
    h.push_str(&" ".repeat((64 - total % 64) % 64));
    h.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(h.len() as u16).to_le_bytes());
    out.extend_from_slice(h.as_bytes());
    for &v in values {
        match descr {
            "<i4" => out.extend_from_slice(&(v as i32).to_le_bytes()),
            "<i8" => out.extend_from_slice(&(v as i64).to_le_bytes()),
            "<u8" => out.extend_from_slice(&(v as u64).to_le_bytes()),
            _ => panic!("{descr}"),
        }
    }
    out
}

/// The integers of an `.npy` written by augscope (`<i4`, `<i8` or `<u8`, as the header says).
fn npy_ints(path: &Path) -> Vec<i128> {
    let b = std::fs::read(path).unwrap();
    let hlen = u16::from_le_bytes([b[8], b[9]]) as usize;
    let header = std::str::from_utf8(&b[10..10 + hlen]).unwrap();
    let body = &b[10 + hlen..];
    if header.contains("<i4") {
        body.chunks_exact(4)
            .map(|c| i32::from_le_bytes(c.try_into().unwrap()) as i128)
            .collect()
    } else if header.contains("<i8") {
        body.chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()) as i128)
            .collect()
    } else if header.contains("<u8") {
        body.chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()) as i128)
            .collect()
    } else {
        panic!("unexpected header {header}")
    }
}

const SHAPE: [usize; 3] = [6, 7, 8];

/// A label map of large values in blobs, and the same map with each value replaced by its rank
/// (small values, exact in f32 before and after this fix).
fn maps(values: &[i128]) -> (Vec<i128>, Vec<i128>) {
    let n: usize = SHAPE.iter().product();
    let big: Vec<i128> = (0..n)
        .map(|i| {
            let (z, y, x) = (i / 56, (i / 8) % 7, i % 8);
            if (z + y) % 3 == 0 && x > 1 {
                0
            } else {
                values[(z * 3 + y + x / 3) % values.len()]
            }
        })
        .collect();
    let mut sorted = values.to_vec();
    sorted.sort();
    let small = big
        .iter()
        .map(|v| {
            if *v == 0 {
                0
            } else {
                sorted.iter().position(|s| s == v).unwrap() as i128 + 1
            }
        })
        .collect();
    (big, small)
}

/// Runs one transform on the image with `label`; the label output's integers.
fn transform(dir: &Path, tag: &str, label: &Path, args: &[&str]) -> Vec<i128> {
    let img = dir.join("img.npy");
    let n: usize = SHAPE.iter().product();
    let vals: Vec<i128> = (0..n as i128).collect();
    std::fs::write(&img, npy_bytes("<i4", &SHAPE, &vals)).unwrap();
    let out = dir.join(format!("{tag}_img.npy"));
    let lab_out = dir.join(format!("{tag}_lab.npy"));
    let mut a = vec![
        "apply",
        img.to_str().unwrap(),
        out.to_str().unwrap(),
        "--label",
        label.to_str().unwrap(),
        "--label-out",
        lab_out.to_str().unwrap(),
    ];
    a.extend_from_slice(args);
    let (code, _, err) = run(&a);
    assert_eq!(code, 0, "{a:?}: {err}");
    npy_ints(&lab_out)
}

#[test]
fn large_integer_labels_come_back_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&str, Vec<i128>); 3] = [
        ("<i4", vec![16_777_217, 123_456_789, -2_147_483_648, 5]),
        ("<i8", vec![(1 << 40) + 1, 16_777_217, -(1 << 50) - 3, 2]),
        ("<u8", vec![u64::MAX as i128, (1 << 63) + 7, 16_777_219, 1]),
    ];
    let transforms: [&[&str]; 4] = [
        &[],
        &["--flip", "0,2"],
        &["--rotate", "0.3,0.2,-0.1", "--scale", "1.1", "--order", "3"],
        &[
            "--elastic",
            "3,2",
            "--translate",
            "1.3,-0.4,2",
            "--mode",
            "reflect",
        ],
    ];
    for (descr, values) in &cases {
        let (big, small) = maps(values);
        let big_p = dir.path().join("big.npy");
        let small_p = dir.path().join("small.npy");
        std::fs::write(&big_p, npy_bytes(descr, &SHAPE, &big)).unwrap();
        std::fs::write(&small_p, npy_bytes(descr, &SHAPE, &small)).unwrap();
        let mut sorted = values.clone();
        sorted.sort();
        for (k, t) in transforms.iter().enumerate() {
            let got = transform(dir.path(), &format!("b{k}"), &big_p, t);
            let want: Vec<i128> = transform(dir.path(), &format!("s{k}"), &small_p, t)
                .iter()
                .map(|&r| if r == 0 { 0 } else { sorted[r as usize - 1] })
                .collect();
            assert_eq!(got, want, "{descr} {t:?}");
            if t.is_empty() {
                assert_eq!(got, big, "{descr}: the identity copies every value");
            }
        }
    }
}

#[test]
fn large_integer_labels_survive_nifti() {
    use augscope::io::{self, LoadOptions, SaveOptions};
    let dir = tempfile::tempdir().unwrap();
    let values = vec![16_777_217i128, 123_456_789, -16_777_219, 3];
    let (big, _) = maps(&values);
    // A NIfTI label map written through augscope's own table of exact values.
    let (table, codes) = augscope::core::LabelValues::encode(&big).unwrap().unwrap();
    let mut v = augscope::Volume::new(codes, SHAPE.to_vec(), 1);
    v.dtype = augscope::DType::I32;
    v.label_values = Some(std::sync::Arc::new(table));
    let p = dir.path().join("lab.nii.gz");
    io::save(&p, &v, &SaveOptions { keep_dtype: true }).unwrap();
    let back = io::load(
        &p,
        &LoadOptions {
            label: true,
            ..LoadOptions::default()
        },
    )
    .unwrap();
    let t = back.label_values.as_ref().expect("a table of exact values");
    assert_eq!(t.decode(&back.data), big);
    // Read as an image, the same file gives f32's rounding, as before.
    let img = io::load(&p, &LoadOptions::default()).unwrap();
    assert!(img.label_values.is_none());
    assert_eq!(
        img.data[big.iter().position(|&x| x == 16_777_217).unwrap()],
        16_777_216.0
    );
    // Through the command line: a flip keeps every value.
    let out = dir.path().join("lab_out.nii");
    let img_p = dir.path().join("img.nii");
    io::save(
        &img_p,
        &augscope::Volume::new(vec![0.0; big.len()], SHAPE.to_vec(), 1),
        &SaveOptions::default(),
    )
    .unwrap();
    let (code, _, err) = run(&[
        "apply",
        img_p.to_str().unwrap(),
        dir.path().join("o.nii").to_str().unwrap(),
        "--label",
        p.to_str().unwrap(),
        "--label-out",
        out.to_str().unwrap(),
        "--flip",
        "1",
    ]);
    assert_eq!(code, 0, "{err}");
    let l = io::load(
        &out,
        &LoadOptions {
            label: true,
            ..LoadOptions::default()
        },
    )
    .unwrap();
    let got = l.label_values.as_ref().unwrap().decode(&l.data);
    let n: usize = SHAPE.iter().product();
    let flipped: Vec<i128> = (0..n)
        .map(|i| {
            let (z, y, x) = (i / 56, (i / 8) % 7, i % 8);
            big[z * 56 + (6 - y) * 8 + x]
        })
        .collect();
    assert_eq!(got, flipped);
}
