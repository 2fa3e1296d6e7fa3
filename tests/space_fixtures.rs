//! `--space mm` against scipy: every case of `tests/fixtures/space/cases.json`, written by
//! `tests/fixtures/gen_space_fixtures.py`, which transforms in physical coordinates (never
//! forming augscope's voxel matrix `diag(s) S⁻¹ Rᵀ S`), smooths the elastic noise with
//! `scipy.ndimage.gaussian_filter(sigma=sigma_mm / spacing)` and resamples with
//! `scipy.ndimage.map_coordinates` (rigid cases also cross-checked by `affine_transform`).
//!
//! Bar (DESIGN §3): ≥ 99.99 % of voxels within 1e-4 of scipy, NaN never, label maps exact away
//! from the fixture's discontinuity masks. Arrays are `[z, y, x]` (2D `[y, x]`).

use std::path::{Path, PathBuf};

use augscope::augment::{Elastic, Order, Plan, Space};
use augscope::engine::apply_new;
use augscope::engine::cpu::CpuBackend;
use augscope::engine::field::ElasticField;
use augscope::io::npy;
use augscope::{Mode, Volume};
use serde::Deserialize;

#[derive(Deserialize)]
struct Fixtures {
    scipy: String,
    tolerance: f64,
    min_pass_fraction: f64,
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    family: String,
    name: String,
    input: String,
    plan: CasePlan,
    expected: String,
    mask: Option<String>,
    label: String,
    expected_label: String,
    label_mask: Option<String>,
    field: Option<String>,
}

/// The plan as the generator writes it, built into a [`Plan`] field by field.
#[derive(Deserialize)]
struct CasePlan {
    flip: Vec<usize>,
    rotate_rad: Vec<f64>,
    scale: Vec<f64>,
    translate: Vec<f64>,
    elastic: Option<CaseElastic>,
    order: u32,
    mode: String,
    cval: f32,
    out_shape: Option<Vec<usize>>,
    space: String,
    spacing_mm: Vec<f64>,
}

#[derive(Deserialize)]
struct CaseElastic {
    alpha: f64,
    sigma: f64,
    seed: u64,
}

impl CasePlan {
    fn to_plan(&self) -> Plan {
        Plan {
            flip: self.flip.clone(),
            rotate_rad: self.rotate_rad.clone(),
            scale: self.scale.clone(),
            translate: self.translate.clone(),
            elastic: self.elastic.as_ref().map(|e| Elastic {
                alpha: e.alpha,
                sigma: e.sigma,
                seed: e.seed,
            }),
            order: Order::try_from(self.order).expect("fixture order is 0, 1 or 3"),
            mode: self.mode.parse::<Mode>().expect("a scipy mode"),
            cval: self.cval,
            out_shape: self.out_shape.clone(),
            space: self.space.parse::<Space>().expect("voxel or mm"),
            spacing_mm: self.spacing_mm.clone(),
        }
    }
}

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/space")
}

fn load_fixtures() -> Fixtures {
    let path = dir().join("cases.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).expect("cases.json matches the generator's schema")
}

fn load(name: &str) -> npy::NpyArray {
    npy::read(&dir().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn volume(name: &str) -> Volume {
    let a = load(name);
    let shape = a.shape.clone();
    Volume::new(a.data, shape, 1)
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
    let image = volume(&case.input);
    let label = volume(&case.label);
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
    let want_l = load(&case.expected_label);
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
    let total: u64 = std::fs::read_dir(dir())
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    assert!(
        total < 1_500_000,
        "tests/fixtures/space holds {total} bytes"
    );
}
