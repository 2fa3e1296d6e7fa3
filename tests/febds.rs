//! FEBDS against medical-image-std itself: the masks in `tests/fixtures/febds/` were written by
//! `tests/fixtures/gen_febds_fixtures.py`, which runs `FebdsAlgorithm(method, device="cpu")` of
//! PyPI medical-image-std 0.8.2 (torch 2.15, CPU) on a synthetic 12-bit mammography-like image
//! with calcification-like spots. Bar: ≥ 99 % of the pixels agree, per method. The image is
//! `[y, x]`.

use augscope::filter::febds::{self, Method};

mod common;

/// An array of `tests/fixtures/febds/`: values and shape.
fn load(name: &str) -> (Vec<f32>, Vec<usize>) {
    common::fixtures::npy_in("fixtures/febds", name)
}

fn check(method: Method, name: &str) {
    let (img, shape) = load("input.npy");
    let (want, wshape) = load(&format!("mask_{name}.npy"));
    assert_eq!(shape, wshape);
    let got = febds::febds(&img, [shape[0], shape[1]], method);
    assert!(got.iter().all(|&v| v == 0.0 || v == 1.0), "not a 0/1 mask");
    let differ = got.iter().zip(&want).filter(|(a, b)| a != b).count();
    let fg_want = want.iter().filter(|&&v| v == 1.0).count();
    let fg_got = got.iter().filter(|&&v| v == 1.0).count();
    let agree = 1.0 - differ as f64 / got.len() as f64;
    println!(
        "FEBDS {name}: {:.4} % of {} pixels agree ({differ} differ); foreground {fg_got} here, \
         {fg_want} in medical-image-std",
        100.0 * agree,
        got.len()
    );
    // The mask must find something, or agreement would be trivial.
    assert!(fg_want > 50, "the fixture mask is nearly empty");
    // Agreement alone would pass an empty mask where the fixture's foreground is small (the fft
    // mask is 0.19 % of the pixels): the foregrounds must overlap (Dice).
    let both = got
        .iter()
        .zip(&want)
        .filter(|&(&a, &b)| a == 1.0 && b == 1.0)
        .count();
    let dice = 2.0 * both as f64 / (fg_got + fg_want) as f64;
    assert!(
        dice >= 0.95,
        "FEBDS {name}: the foregrounds overlap with Dice {dice:.3} ({fg_got} here, {fg_want} there)"
    );
    assert!(
        agree >= 0.99,
        "FEBDS {name}: only {:.3} % agree",
        100.0 * agree
    );
}

#[test]
fn febds_dog_matches_medical_image_std() {
    check(Method::Dog, "dog");
}

#[test]
fn febds_log_matches_medical_image_std() {
    check(Method::Log, "log");
}

#[test]
fn febds_fft_matches_medical_image_std() {
    check(Method::Fft, "fft");
}
