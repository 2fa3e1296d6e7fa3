//! `--space mm` against scipy: every case of `tests/fixtures/space/cases.json`, written by
//! `tests/fixtures/gen_space_fixtures.py`, which transforms in physical coordinates (never
//! forming augscope's voxel matrix `diag(s) S⁻¹ Rᵀ S`), smooths the elastic noise with
//! `scipy.ndimage.gaussian_filter(sigma=sigma_mm / spacing)` and resamples with
//! `scipy.ndimage.map_coordinates` (rigid cases also cross-checked by `affine_transform`).
//!
//! Bar (docs/design.md §3): ≥ 99.99 % of voxels within 1e-4 of scipy, NaN never, label maps exact away
//! from the fixture's discontinuity masks. Arrays are `[z, y, x]` (2D `[y, x]`).

use augscope::augment::Space;
use augscope::engine::apply_new;
use augscope::engine::cpu::CpuBackend;
use augscope::engine::field::ElasticField;

mod common;
use common::scipy_cases::{Case, FixtureDir, Fixtures};

fn dir() -> FixtureDir {
    FixtureDir::new("fixtures/space")
}

fn load_fixtures() -> Fixtures {
    dir().fixtures()
}

fn load(name: &str) -> augscope::io::npy::NpyArray {
    dir().load(name)
}

/// Runs one case; returns (compared voxels, voxels off by more than the tolerance, max error)
/// or a failure message.
fn run_case(case: &Case, tol: f64, min_pass: f64) -> Result<(usize, usize, f64), String> {
    let plan = case.plan.to_plan();
    assert_eq!(
        plan.space,
        Space::Mm,
        "{}: the fixtures are mm space",
        case.name
    );
    let image = dir().volume(&case.input, 1);
    let label = dir().volume(case.label.as_deref().expect("mm cases have a label map"), 1);
    let (out, out_label, _) =
        apply_new(&CpuBackend::new(), &plan, &image, Some(&label)).map_err(|e| format!("{e}"))?;
    let want = load(&case.expected);
    assert_eq!(out.shape, want.shape, "{}", case.name);
    let mask = case.mask.as_ref().map(|m| load(m).data);
    let (mut bad, mut compared, mut max_err) = (0, 0, 0f64);
    for (i, (&got, &w)) in out.data.iter().zip(&want.data).enumerate() {
        if got.is_nan() {
            return Err(format!("NaN at flat index {i}"));
        }
        if mask.as_ref().is_some_and(|m| m[i] != 0.0) {
            continue;
        }
        compared += 1;
        let err = (got as f64 - w as f64).abs();
        max_err = max_err.max(err);
        if err > tol {
            bad += 1;
        }
    }
    if 1.0 - (bad as f64) / (compared.max(1) as f64) < min_pass {
        return Err(format!(
            "{bad}/{compared} voxels off by > {tol} (max {max_err:.2e})"
        ));
    }
    let want_l = load(
        case.expected_label
            .as_deref()
            .expect("mm cases have an expected label map"),
    );
    let lmask = case.label_mask.as_ref().map(|m| load(m).data);
    let got_l = out_label.expect("a label output");
    let wrong = (0..want_l.data.len())
        .filter(|&i| !lmask.as_ref().is_some_and(|m| m[i] != 0.0))
        .filter(|&i| got_l.data[i] != want_l.data[i])
        .count();
    if wrong > 0 {
        return Err(format!("{wrong} label voxels differ"));
    }
    Ok((compared, bad, max_err))
}

fn check_family(family: &str) {
    let fx = load_fixtures();
    let cases: Vec<&Case> = fx.cases.iter().filter(|c| c.family == family).collect();
    assert!(!cases.is_empty(), "no fixture cases in family {family}");
    println!(
        "family {family}: {} mm-space cases against scipy {}",
        cases.len(),
        fx.scipy
    );
    let mut failures = vec![];
    let (mut total, mut total_bad, mut worst) = (0, 0, 0f64);
    for case in cases {
        match run_case(case, fx.tolerance, fx.min_pass_fraction) {
            Ok((n, bad, err)) => {
                println!(
                    "{:<28} {n:>6} voxels, {bad} off, max error {err:.2e}",
                    case.name
                );
                total += n;
                total_bad += bad;
                worst = worst.max(err);
            }
            Err(e) => failures.push(format!("{}: {e}", case.name)),
        }
    }
    println!(
        "family {family}: worst error {worst:.2e}, {:.4} % of {total} voxels within {}",
        100.0 * (1.0 - total_bad as f64 / total.max(1) as f64),
        fx.tolerance
    );
    assert!(
        failures.is_empty(),
        "{} mm-space case(s) differ from scipy:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn mm_rotation_matches_scipy_in_physical_space() {
    check_family("rotate");
}

#[test]
fn mm_everything_together_matches_scipy_every_mode_and_order() {
    check_family("everything");
}

#[test]
fn mm_elastic_matches_scipy() {
    check_family("elastic");
}

#[test]
fn mm_rigid_with_flip_and_cval_matches_scipy() {
    check_family("rigid");
}

#[test]
fn mm_other_output_shape_matches_scipy() {
    check_family("out_shape");
}

/// The per-axis unit field (`sigma_mm / spacing` voxels) against numpy Philox +
/// `scipy.ndimage.gaussian_filter` with a sigma tuple.
#[test]
fn mm_field_matches_scipy_gaussian_with_per_axis_sigma() {
    let fx = load_fixtures();
    let mut checked = 0;
    for case in fx.cases.iter().filter(|c| c.field.is_some()) {
        let want = load(case.field.as_deref().unwrap());
        let plan = case.plan.to_plan();
        let shape = want.shape[1..].to_vec();
        let sigma = plan.field_sigma_vox(shape.len()).unwrap();
        assert!(
            sigma.windows(2).any(|w| w[0] != w[1]),
            "{}: anisotropic spacing gives per-axis sigmas {sigma:?}",
            case.name
        );
        let f = ElasticField::compute_axes(&shape, &sigma, plan.elastic.unwrap().seed);
        let n: usize = shape.iter().product();
        let mut max_err = 0f64;
        for (k, comp) in f.components.iter().enumerate() {
            for (i, &v) in comp.iter().enumerate() {
                max_err = max_err.max((v as f64 - want.data[k * n + i] as f64).abs());
            }
        }
        println!(
            "{}: sigma_vox {sigma:?}: max error {max_err:.2e}",
            case.name
        );
        assert!(max_err <= 1e-5, "{}: field differs by {max_err}", case.name);
        checked += 1;
    }
    assert_eq!(checked, 2, "a 2D and a 3D field");
}

/// The mm fixtures stay small enough to live in the repository.
#[test]
fn mm_fixtures_are_small() {
    let total: u64 = std::fs::read_dir(&dir().0)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    assert!(
        total < 1_500_000,
        "tests/fixtures/space holds {total} bytes"
    );
}
