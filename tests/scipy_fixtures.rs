//! The CPU engine against scipy: every case of `tests/fixtures/cases.json`, written by
//! `tests/fixtures/gen_fixtures.py` (an independent numpy implementation of docs/design.md §3–§4 resampled
//! by `scipy.ndimage.map_coordinates`, elastic fields by `scipy.ndimage.gaussian_filter`).
//!
//! Bar (docs/design.md §3): ≥ 99.99 % of voxels within 1e-4 of scipy, NaN never, label maps exact; voxels
//! whose coordinate sits on a discontinuity of the reference (order-0 ties at .5, the edges of
//! `constant`, the fold points of `wrap`) are excluded by the fixture's masks.
//! Arrays are `[z, y, x]` (2D `[y, x]`), channels leading.

use augscope::engine::apply_new;
use augscope::engine::cpu::CpuBackend;
use augscope::engine::field::ElasticField;

mod common;
use common::scipy_cases::{Case, FixtureDir, Fixtures};

fn dir() -> FixtureDir {
    FixtureDir::new("fixtures")
}

fn load_fixtures() -> Fixtures {
    dir().fixtures()
}

fn load(name: &str) -> augscope::io::npy::NpyArray {
    dir().load(name)
}

/// One case's outcome.
struct Row {
    name: String,
    voxels: usize,
    masked: usize,
    bad: usize,
    nan: usize,
    max_err: f64,
    label_bad: Option<usize>,
    failure: Option<String>,
}

fn run_case(case: &Case, tol: f64, min_pass: f64) -> Row {
    let plan = case.plan.to_plan();
    let image = dir().volume(&case.input, case.channels);
    let label = case.label.as_ref().map(|l| dir().volume(l, 1));
    let (out, out_label, _) = apply_new(&CpuBackend::new(), &plan, &image, label.as_ref())
        .unwrap_or_else(|e| panic!("{}: {e}", case.name));
    let want = load(&case.expected);
    let out_shape = plan
        .out_shape
        .clone()
        .unwrap_or_else(|| image.shape.clone());
    assert_eq!(out.shape, out_shape, "{}", case.name);
    assert_eq!(
        out.data.len(),
        want.data.len(),
        "{}: output length",
        case.name
    );
    let n: usize = out_shape.iter().product();
    let mask = case.mask.as_ref().map(|m| load(m).data);
    let excluded = |i: usize| mask.as_ref().is_some_and(|m| m[i % n] != 0.0);
    let (mut bad, mut nan, mut masked, mut max_err) = (0, 0, 0, 0f64);
    for (i, (&got, &w)) in out.data.iter().zip(&want.data).enumerate() {
        if got.is_nan() {
            nan += 1;
            continue;
        }
        if excluded(i) {
            masked += 1;
            continue;
        }
        let err = (got as f64 - w as f64).abs();
        max_err = max_err.max(err);
        if err > tol {
            bad += 1;
        }
    }
    let compared = out.data.len() - masked;
    let pass = 1.0 - bad as f64 / compared.max(1) as f64;
    let mut failure = None;
    if nan > 0 {
        failure = Some(format!("{nan} NaN"));
    } else if pass < min_pass {
        let worst = out
            .data
            .iter()
            .zip(&want.data)
            .enumerate()
            .filter(|&(i, _)| !excluded(i))
            .max_by(|a, b| {
                let ea = (a.1.0 - a.1.1).abs();
                let eb = (b.1.0 - b.1.1).abs();
                ea.total_cmp(&eb)
            })
            .map(|(i, (g, w))| format!("worst at flat index {i}: got {g}, scipy {w}"))
            .unwrap_or_default();
        failure = Some(format!("{bad}/{compared} voxels off by > {tol}; {worst}"));
    }
    let mut label_bad = None;
    if let (Some(exp), Some(got)) = (&case.expected_label, &out_label) {
        let want = load(exp);
        let lmask = case.label_mask.as_ref().map(|m| load(m).data);
        let wrong: Vec<usize> = (0..want.data.len())
            .filter(|&i| !lmask.as_ref().is_some_and(|m| m[i] != 0.0))
            .filter(|&i| got.data[i] != want.data[i])
            .collect();
        if let Some(&i) = wrong.first() {
            let msg = format!(
                "label: {} voxels differ, first at flat index {i}: got {}, scipy {}",
                wrong.len(),
                got.data[i],
                want.data[i]
            );
            failure = Some(failure.map_or(msg.clone(), |f| format!("{f}; {msg}")));
        }
        label_bad = Some(wrong.len());
    }
    Row {
        name: case.name.clone(),
        voxels: out.data.len(),
        masked,
        bad,
        nan,
        max_err,
        label_bad,
        failure,
    }
}

/// Runs every case of a family, prints a table, and fails with every failing case listed.
fn check_family(family: &str) {
    let fx = load_fixtures();
    let cases: Vec<&Case> = fx.cases.iter().filter(|c| c.family == family).collect();
    assert!(!cases.is_empty(), "no fixture cases in family {family}");
    println!(
        "family {family}: {} cases against scipy {}",
        cases.len(),
        fx.scipy
    );
    println!(
        "{:<40} {:>7} {:>6} {:>5} {:>4} {:>10} {:>6}",
        "case", "voxels", "masked", "bad", "nan", "max_err", "label"
    );
    let mut failures = vec![];
    let (mut total, mut total_bad, mut worst) = (0usize, 0usize, 0f64);
    for case in cases {
        let r = run_case(case, fx.tolerance, fx.min_pass_fraction);
        println!(
            "{:<40} {:>7} {:>6} {:>5} {:>4} {:>10.2e} {:>6}",
            r.name,
            r.voxels,
            r.masked,
            r.bad,
            r.nan,
            r.max_err,
            r.label_bad.map_or("-".to_string(), |b| if b == 0 {
                "exact".into()
            } else {
                b.to_string()
            })
        );
        total += r.voxels - r.masked;
        total_bad += r.bad + r.nan;
        worst = worst.max(r.max_err);
        if let Some(f) = r.failure {
            failures.push(format!("{}: {f}", r.name));
        }
    }
    println!(
        "family {family}: worst error {worst:.2e}, {:.4} % of {total} compared voxels within {}",
        100.0 * (1.0 - total_bad as f64 / total.max(1) as f64),
        fx.tolerance
    );
    assert!(
        failures.is_empty(),
        "{} case(s) differ from scipy:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn every_mode_and_order_matches_scipy() {
    check_family("modes");
}

#[test]
fn identity_and_each_transform_alone_match_scipy() {
    check_family("single");
}

#[test]
fn everything_together_matches_scipy() {
    check_family("everything");
}

#[test]
fn elastic_with_fixed_seeds_matches_scipy() {
    check_family("elastic");
}

#[test]
fn non_default_cval_matches_scipy() {
    check_family("cval");
}

#[test]
fn other_output_shape_matches_scipy() {
    check_family("out_shape");
}

#[test]
fn tiny_grids_match_scipy() {
    check_family("tiny");
}

/// The smoothed unit field against numpy Philox + `scipy.ndimage.gaussian_filter`.
#[test]
fn elastic_field_matches_numpy_philox_and_scipy_gaussian() {
    let fx = load_fixtures();
    let mut checked = 0;
    for case in fx.cases.iter().filter(|c| c.field.is_some()) {
        let want = load(case.field.as_deref().unwrap());
        let e = case.plan.elastic.as_ref().unwrap();
        let shape = want.shape[1..].to_vec();
        let f = ElasticField::compute(&shape, e.sigma, e.seed);
        let n: usize = shape.iter().product();
        assert_eq!(f.components.len(), shape.len());
        let mut max_err = 0f64;
        for (k, comp) in f.components.iter().enumerate() {
            for (i, &v) in comp.iter().enumerate() {
                max_err = max_err.max((v as f64 - want.data[k * n + i] as f64).abs());
            }
        }
        println!(
            "{}: field {:?} seed {} sigma {}: max error {max_err:.2e}",
            case.name, shape, e.seed, e.sigma
        );
        assert!(max_err <= 1e-5, "{}: field differs by {max_err}", case.name);
        checked += 1;
    }
    assert!(
        checked >= 2,
        "the fixtures should hold at least a 2D and a 3D field"
    );
}

/// The fixtures stay small enough to live in the repository.
#[test]
fn fixtures_are_small() {
    let total: u64 = std::fs::read_dir(&dir().0)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    assert!(total < 4_000_000, "tests/fixtures holds {total} bytes");
}
