//! Physical space (`--space mm`): properties that hold for any input, the CLI and presets.
//! Arrays are `[z, y, x]`; a spacing `[5, 1, 1]` is 5 mm slices.
//!
//! - rotating an anisotropic volume in mm and back is the identity inside the volume;
//! - a ball rotated in mm stays a ball (isotropic second moments, centroid turned by R), where
//!   the same rotation in voxel space shears it into an ellipsoid;
//! - isotropic spacing: mm mode equals voxel mode exactly for rotation, scale and flip; unit
//!   spacing: exactly for everything, translation and elastic included.

use std::path::Path;

use augscope::augment::DoneList;
use augscope::augment::preset::Preset;
use augscope::augment::{CoordMap, Elastic, Order, Plan, Space};
use augscope::engine::cpu::CpuBackend;
use augscope::engine::{Backend, Outputs, Plane, apply_new};
use augscope::{Mode, Volume};
use proptest::prelude::*;

mod common;
use common::cli::run;
use common::volumes::splitmix_volume;

fn apply(plan: &Plan, v: &Volume) -> Volume {
    apply_new(&CpuBackend::new(), plan, v, None)
        .expect("a valid plan applies")
        .0
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// A volume of `f(z_mm, y_mm, x_mm)` with the millimetre offsets from the grid centre.
fn volume_mm(shape: [usize; 3], spacing: [f64; 3], f: impl Fn([f64; 3]) -> f64) -> Volume {
    let mut data = Vec::with_capacity(shape.iter().product());
    for z in 0..shape[0] {
        for y in 0..shape[1] {
            for x in 0..shape[2] {
                let p = [z, y, x];
                let mm: [f64; 3] = std::array::from_fn(|a| {
                    (p[a] as f64 - (shape[a] as f64 - 1.0) / 2.0) * spacing[a]
                });
                data.push(f(mm) as f32);
            }
        }
    }
    let mut v = Volume::new(data, shape.to_vec(), 1);
    v.spacing_mm = spacing.to_vec();
    v
}

fn mm_plan(rotate: Vec<f64>, spacing: &[f64], order: Order) -> Plan {
    Plan {
        rotate_rad: rotate,
        order,
        mode: Mode::Constant,
        space: Space::Mm,
        spacing_mm: spacing.to_vec(),
        ..Plan::default()
    }
}

/// Intensity-weighted centroid and covariance in millimetres (about the grid centre).
fn moments(v: &Volume, spacing: [f64; 3]) -> ([f64; 3], [[f64; 3]; 3]) {
    let s = &v.shape;
    let mut w = 0.0;
    let mut m1 = [0.0; 3];
    let mut m2 = [[0.0; 3]; 3];
    for z in 0..s[0] {
        for y in 0..s[1] {
            for x in 0..s[2] {
                let val = v.data[(z * s[1] + y) * s[2] + x] as f64;
                let p = [z, y, x];
                let mm: [f64; 3] =
                    std::array::from_fn(|a| (p[a] as f64 - (s[a] as f64 - 1.0) / 2.0) * spacing[a]);
                w += val;
                for i in 0..3 {
                    m1[i] += val * mm[i];
                    for j in 0..3 {
                        m2[i][j] += val * mm[i] * mm[j];
                    }
                }
            }
        }
    }
    let c: [f64; 3] = std::array::from_fn(|i| m1[i] / w);
    let cov = std::array::from_fn(|i| std::array::from_fn(|j| m2[i][j] / w - c[i] * c[j]));
    (c, cov)
}

/// How far a covariance is from a multiple of the identity: the largest entry of
/// `cov / mean(diag) - I`.
fn anisotropy(cov: &[[f64; 3]; 3]) -> f64 {
    let mean = (cov[0][0] + cov[1][1] + cov[2][2]) / 3.0;
    let mut worst = 0f64;
    for (i, row) in cov.iter().enumerate() {
        for (j, &c) in row.iter().enumerate() {
            let want = if i == j { 1.0 } else { 0.0 };
            worst = worst.max((c / mean - want).abs());
        }
    }
    worst
}

/// `R = Rx(a0) Ry(a1) Rz(a2)`, batchgenerators' matrices (docs/design.md §3), written out here again.
fn rotation(a: [f64; 3]) -> [[f64; 3]; 3] {
    let (c0, s0) = (a[0].cos(), a[0].sin());
    let (c1, s1) = (a[1].cos(), a[1].sin());
    let (c2, s2) = (a[2].cos(), a[2].sin());
    let rx = [[1.0, 0.0, 0.0], [0.0, c0, -s0], [0.0, s0, c0]];
    let ry = [[c1, 0.0, s1], [0.0, 1.0, 0.0], [-s1, 0.0, c1]];
    let rz = [[c2, -s2, 0.0], [s2, c2, 0.0], [0.0, 0.0, 1.0]];
    let mul = |a: [[f64; 3]; 3], b: [[f64; 3]; 3]| -> [[f64; 3]; 3] {
        std::array::from_fn(|i| std::array::from_fn(|j| (0..3).map(|k| a[i][k] * b[k][j]).sum()))
    };
    mul(mul(rx, ry), rz)
}

/// A ball of radius 20 mm with a smooth 3 mm edge, centred at `centre` (mm from the grid centre).
fn ball(centre: [f64; 3]) -> impl Fn([f64; 3]) -> f64 {
    move |p| {
        let d = (0..3)
            .map(|a| (p[a] - centre[a]).powi(2))
            .sum::<f64>()
            .sqrt();
        0.5 * (1.0 - ((d - 20.0) / 3.0).tanh())
    }
}

#[test]
fn a_ball_rotated_in_mm_stays_a_ball_and_turns_by_r() {
    // 4 mm slices, 1 mm in-plane: a ball is an ellipsoid of the array.
    let spacing = [4.0, 1.0, 1.0];
    let shape = [23, 81, 81];
    let centre = [4.0, -5.0, 6.0];
    let v = volume_mm(shape, spacing, ball(centre));
    let (c_in, cov_in) = moments(&v, spacing);
    assert!(
        anisotropy(&cov_in) < 0.01,
        "the input is a ball: {cov_in:?}"
    );
    for angles in [[0.0, 0.5, 0.0], [0.3, -0.4, 0.7]] {
        let plan = mm_plan(angles.to_vec(), &spacing, Order::Cubic);
        let out = apply(&plan, &v);
        let (c, cov) = moments(&out, spacing);
        let an = anisotropy(&cov);
        assert!(
            an < 0.01,
            "mm rotation {angles:?} keeps a ball: anisotropy {an}, {cov:?}"
        );
        // Content at input offset y appears at output offset R y.
        let r = rotation(angles);
        for i in 0..3 {
            let want: f64 = (0..3).map(|j| r[i][j] * c_in[j]).sum();
            assert!(
                (c[i] - want).abs() < 0.3,
                "centroid axis {i}: {} mm, R c_in = {want} mm ({angles:?})",
                c[i]
            );
        }
        // The same angles on array indices shear the ball: the property can fail.
        let vox = Plan {
            space: Space::Voxel,
            spacing_mm: vec![],
            ..plan
        };
        let an_vox = anisotropy(&moments(&apply(&vox, &v), spacing).1);
        println!(
            "rotate {angles:?}: anisotropy mm {an:.4}, voxel space {an_vox:.4}; centroid {c:?}"
        );
        assert!(
            an_vox > 0.3,
            "voxel-space rotation {angles:?} should shear the ball (anisotropy {an_vox})"
        );
    }
}

#[test]
fn anisotropic_volume_rotated_in_mm_and_back_is_the_identity_inside() {
    let spacing = [5.0, 1.0, 1.0];
    let shape = [25, 81, 81];
    // Smooth in millimetres, so that order-3 resampling on 5 mm slices is accurate.
    let f = |p: [f64; 3]| {
        0.5 + 0.25 * (p[0] / 25.0).sin() * (p[2] / 9.0).cos() + 0.2 * (-(p[1] * p[1]) / 800.0).exp()
    };
    let v = volume_mm(shape, spacing, f);
    for a in [0.35, -0.6] {
        for angles in [[0.0, a, 0.0], [0.0, 0.0, a], [a, 0.0, 0.0]] {
            let there = apply(&mm_plan(angles.to_vec(), &spacing, Order::Cubic), &v);
            let back_angles: Vec<f64> = angles.iter().map(|x| -x).collect();
            let back = apply(&mm_plan(back_angles, &spacing, Order::Cubic), &there);
            // Inside: 20 mm around the centre, far (in slices) from where the rotated grid reads cval.
            let mut worst = 0f64;
            let mut n = 0;
            for z in 0..shape[0] {
                for y in 0..shape[1] {
                    for x in 0..shape[2] {
                        let p = [z, y, x];
                        let mm: [f64; 3] = std::array::from_fn(|k| {
                            (p[k] as f64 - (shape[k] as f64 - 1.0) / 2.0) * spacing[k]
                        });
                        let r = (mm[0] * mm[0] + mm[1] * mm[1] + mm[2] * mm[2]).sqrt();
                        if r > 20.0 {
                            continue;
                        }
                        let i = (z * shape[1] + y) * shape[2] + x;
                        worst = worst.max((back.data[i] - v.data[i]).abs() as f64);
                        n += 1;
                    }
                }
            }
            assert!(n > 1000);
            println!("rotate {angles:?} and back: worst error {worst:.2e} over {n} voxels");
            assert!(
                worst < 5e-4,
                "rotate {angles:?} and back: worst error {worst} over {n} voxels"
            );
        }
    }
}

#[test]
fn mm_maps_compose_to_the_identity() {
    // The coordinate maps themselves: x_back(x_there(p)) = p to f64 rounding.
    let spacing = [5.0, 0.8, 1.1];
    let shape = [7usize, 9, 11];
    let there = mm_plan(vec![0.3, -0.7, 1.1], &spacing, Order::Linear);
    let a = there.compose(&shape).unwrap();
    // The inverse of R = Rx Ry Rz is Rz(-a2) Ry(-a1) Rx(-a0): three single-axis plans B1, B2,
    // B3 applied to the image in this order.
    let back: Vec<_> = [[-0.3, 0.0, 0.0], [0.0, 0.7, 0.0], [0.0, 0.0, -1.1]]
        .iter()
        .map(|r| {
            mm_plan(r.to_vec(), &spacing, Order::Linear)
                .compose(&shape)
                .unwrap()
        })
        .collect();
    let affine = |m: &CoordMap, x: [f64; 3]| -> [f64; 3] {
        let c: [f64; 3] = std::array::from_fn(|i| x[i] - m.ctr_out[i]);
        std::array::from_fn(|i| {
            m.offset[i] + (0..3).map(|j| m.in_from_centered[i][j] * c[j]).sum::<f64>()
        })
    };
    // Applying `there`, then the three plans, reads the input at A(B1(B2(B3(q)))).
    for q in [[0usize, 0, 0], [3, 4, 5], [6, 8, 10], [1, 7, 2]] {
        let mut x = q.map(|v| v as f64);
        for m in back.iter().rev() {
            x = affine(m, x);
        }
        x = affine(&a, x);
        for i in 0..3 {
            assert!((x[i] - q[i] as f64).abs() < 1e-9, "{q:?} -> {x:?}");
        }
        // And the fused map agrees with its own affine part.
        let fused = a.input_coord(&q, &[0.0; 3]);
        let plain = affine(&a, q.map(|v| v as f64));
        assert!((0..3).all(|i| (fused[i] - plain[i]).abs() < 1e-12));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    /// Isotropic spacing: rotation, scale and flip in mm are the voxel-space ones, bit for bit.
    #[test]
    fn isotropic_spacing_mm_equals_voxel_exactly(
        a in prop::collection::vec(-3.2f64..3.2, 3), s in prop::collection::vec(0.6f64..1.6, 3),
        sp in 0.3f64..4.0, flip in 0usize..3, seed: u64, order in prop::sample::select(vec![Order::Nearest, Order::Linear, Order::Cubic]),
    ) {
        let v = splitmix_volume(&[6, 7, 8], 1, seed);
        let vox = Plan { rotate_rad: a.clone(), scale: s.clone(), flip: vec![flip], order, mode: Mode::Mirror, ..Plan::default() };
        let mm = Plan { space: Space::Mm, spacing_mm: vec![sp; 3], ..vox.clone() };
        prop_assert_eq!(mm.compose(&v.shape).unwrap(), vox.compose(&v.shape).unwrap());
        prop_assert_eq!(bits(&apply(&mm, &v).data), bits(&apply(&vox, &v).data));
    }

    /// Unit spacing: everything in mm, translation and elastic included, is the voxel-space
    /// transform bit for bit (2D and 3D).
    #[test]
    fn unit_spacing_mm_equals_voxel_exactly_with_elastic(
        three in any::<bool>(), a in -3.2f64..3.2, t in -3.0f64..3.0, alpha in 0.5f64..40.0,
        sigma in 0.6f64..4.0, seed: u64,
    ) {
        let shape: Vec<usize> = if three { vec![7, 9, 8] } else { vec![13, 11] };
        let nd = shape.len();
        let v = splitmix_volume(&shape, 1, seed);
        let vox = Plan {
            rotate_rad: if three { vec![a, -0.5 * a, 0.3] } else { vec![a] },
            translate: vec![t; nd],
            scale: vec![1.1],
            elastic: Some(Elastic { alpha, sigma, seed }),
            order: Order::Cubic,
            mode: Mode::Reflect,
            ..Plan::default()
        };
        let mm = Plan { space: Space::Mm, spacing_mm: vec![1.0; nd], ..vox.clone() };
        prop_assert_eq!(mm.field_sigma_vox(nd), vox.field_sigma_vox(nd));
        prop_assert_eq!(mm.compose(&shape).unwrap(), vox.compose(&shape).unwrap());
        prop_assert_eq!(bits(&apply(&mm, &v).data), bits(&apply(&vox, &v).data));
    }
}

#[test]
fn mm_elastic_is_isotropic_in_mm() {
    // sigma and alpha in mm: the field is smoothed with sigma / spacing voxels per axis, and its
    // component a moves alpha G_a / spacing_a voxels.
    let plan = Plan {
        elastic: Some(Elastic {
            alpha: 30.0,
            sigma: 6.0,
            seed: 3,
        }),
        space: Space::Mm,
        spacing_mm: vec![3.0, 1.5, 0.75],
        ..Plan::default()
    };
    assert_eq!(plan.field_sigma_vox(3), Some(vec![2.0, 4.0, 8.0]));
    let m = plan.compose(&[5, 6, 7]).unwrap();
    assert_eq!(m.alpha, [10.0, 20.0, 40.0]);
}

#[test]
fn mm_without_a_valid_spacing_is_a_plan_error() {
    for sp in [
        vec![],
        vec![1.0, 1.0],
        vec![1.0, 0.0, 1.0],
        vec![1.0, f64::NAN, 1.0],
    ] {
        let plan = Plan {
            space: Space::Mm,
            spacing_mm: sp.clone(),
            ..Plan::default()
        };
        let e = plan.validate(3).expect_err("invalid spacing");
        assert!(e.to_string().contains("--space mm"), "{e}");
    }
}

#[test]
fn done_list_names_the_space() {
    let vox = Plan {
        rotate_rad: vec![0.1, 0.0, 0.0],
        translate: vec![2.0, 0.0, 1.0],
        elastic: Some(Elastic {
            alpha: 4.0,
            sigma: 2.0,
            seed: 1,
        }),
        ..Plan::default()
    };
    for d in vox.done_list() {
        assert!(
            d.values.get("space").is_none(),
            "voxel space as before: {d:?}"
        );
    }
    let mm = Plan {
        space: Space::Mm,
        spacing_mm: vec![2.0, 1.0, 0.5],
        ..vox
    };
    let done = mm.done_list();
    for d in &done {
        assert_eq!(d.values["space"], "mm", "{d:?}");
    }
    let t = done.iter().find(|d| d.transform == "translate").unwrap();
    assert_eq!(t.values["voxels"], serde_json::json!([1.0, 0.0, 2.0]));
    let e = done.iter().find(|d| d.transform == "elastic").unwrap();
    assert_eq!(e.values["sigma_vox"], serde_json::json!([1.0, 2.0, 4.0]));
}

// --- presets -------------------------------------------------------------------------------

const MM_PRESET: &str = r#"
version = 1
name = "mm"
space = "mm"
[rotate]
range_deg = [[10, 20]]
[translate]
range = [[2, 2]]
unit = "voxel"
[elastic]
alpha = [10, 10]
sigma = [4, 4]
"#;

#[test]
fn preset_space_reaches_the_plan() {
    let p = Preset::parse(MM_PRESET).unwrap();
    assert_eq!(p.space, Space::Mm);
    let s = p.sample(5, 3, 1, &[3.0, 1.0, 0.5]).unwrap();
    assert_eq!(s.plan.space, Space::Mm);
    assert_eq!(s.plan.spacing_mm, vec![3.0, 1.0, 0.5]);
    // 2 voxels become millimetres in the plan.
    assert_eq!(s.plan.translate, vec![6.0, 2.0, 1.0]);
    assert!(s.done.iter().all(|d| d.values["space"] == "mm"));
    // The TOML round trip keeps it; voxel presets do not grow a `space` line.
    assert_eq!(Preset::parse(&p.to_toml()).unwrap(), p);
    let vox = Preset::parse(&MM_PRESET.replace("space = \"mm\"\n", "")).unwrap();
    assert_eq!(vox.space, Space::Voxel);
    assert!(!vox.to_toml().contains("space"));
    let s = vox.sample(5, 3, 1, &[3.0, 1.0, 0.5]).unwrap();
    assert_eq!((s.plan.space, s.plan.spacing_mm.len()), (Space::Voxel, 0));
    assert_eq!(s.plan.translate, vec![2.0; 3]);
}

#[test]
fn preset_with_an_unknown_space_is_invalid() {
    let e = Preset::parse(&MM_PRESET.replace("\"mm\"", "\"parsec\"")).unwrap_err();
    assert!(e.to_string().contains("parsec"), "{e}");
}

// --- CLI -----------------------------------------------------------------------------------

/// An anisotropic NIfTI (5 x 0.8 x 1.1 mm) of a ball.
fn write_aniso(path: &Path) -> Volume {
    let spacing = [5.0, 0.8, 1.1];
    let mut v = volume_mm([9, 31, 27], spacing, ball([0.0, 2.0, -1.0]));
    for (i, s) in spacing.iter().rev().enumerate() {
        v.world_from_voxel[i][i] = *s;
    }
    augscope::io::save(path, &v, &Default::default()).expect("NIfTI written");
    augscope::io::load(path, &Default::default()).expect("NIfTI read")
}

#[test]
fn cli_apply_space_mm_uses_the_header_spacing_and_reports_it() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("aniso.nii");
    let v = write_aniso(&input);
    assert_eq!(
        v.spacing_mm,
        vec![5.0, 0.800000011920929, 1.100000023841858]
    );
    let out = dir.path().join("out.nii");
    let rep = dir.path().join("r.json");
    let (code, _, err) = run(&[
        "apply",
        input.to_str().unwrap(),
        out.to_str().unwrap(),
        "--rotate",
        "0.1,0.4,-0.2",
        "--translate",
        "5,1,-2",
        "--elastic",
        "20,6",
        "--space",
        "mm",
        "--order",
        "3",
        "--backend",
        "cpu",
        "--report",
        rep.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&rep).unwrap()).unwrap();
    assert_eq!(r["space"], "mm");
    assert_eq!(r["plan"]["space"], "mm");
    assert_eq!(r["plan"]["spacing_mm"], serde_json::json!(v.spacing_mm));
    for d in r["done"].as_array().unwrap() {
        assert_eq!(d["values"]["space"], "mm", "{d}");
    }
    assert!(r["displacement"]["max_mm"].as_f64().unwrap() > 0.0);
    // The file is the library's answer for the same plan.
    let plan = Plan {
        rotate_rad: vec![0.1, 0.4, -0.2],
        translate: vec![5.0, 1.0, -2.0],
        elastic: Some(Elastic {
            alpha: 20.0,
            sigma: 6.0,
            seed: 0,
        }),
        order: Order::Cubic,
        space: Space::Mm,
        spacing_mm: v.spacing_mm.clone(),
        ..Plan::default()
    };
    let want = apply(&plan, &v);
    let got = augscope::io::load(&out, &Default::default()).unwrap();
    assert_eq!(bits(&got.data), bits(&want.data));
    // Voxel space (the default) gives another image on this anisotropic grid.
    let out_vox = dir.path().join("vox.nii");
    let (code, _, err) = run(&[
        "apply",
        input.to_str().unwrap(),
        out_vox.to_str().unwrap(),
        "--rotate",
        "0.1,0.4,-0.2",
        "--backend",
        "cpu",
    ]);
    assert_eq!(code, 0, "{err}");
    let vox = augscope::io::load(&out_vox, &Default::default()).unwrap();
    assert_ne!(bits(&vox.data), bits(&got.data));
}

#[test]
fn cli_bad_space_is_one_line_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("aniso.nii");
    write_aniso(&input);
    let out = dir.path().join("o.nii");
    for args in [
        vec![
            "apply",
            input.to_str().unwrap(),
            out.to_str().unwrap(),
            "--space",
            "parsec",
        ],
        vec![
            "batch",
            "--preset",
            "batchgenerators",
            "--count",
            "1",
            "--out",
            "x",
            "--space",
            "m",
            input.to_str().unwrap(),
        ],
    ] {
        let (code, _, err) = run(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "{err}");
        assert!(lines[0].contains("space"), "{err}");
        assert!(!err.contains("panicked"));
    }
    assert!(!out.exists());
}

#[test]
fn cli_batch_space_mm_overrides_the_preset() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("aniso.nii");
    write_aniso(&input);
    let preset = dir.path().join("p.toml");
    std::fs::write(&preset, MM_PRESET.replace("space = \"mm\"\n", "")).unwrap();
    for (flag, want) in [(None, "voxel"), (Some("mm"), "mm")] {
        let out = dir.path().join(format!("out_{want}"));
        let mut args = vec![
            "batch",
            "--preset",
            preset.to_str().unwrap(),
            "--count",
            "2",
            "--seed",
            "4",
            "--out",
            out.to_str().unwrap(),
            "--backend",
            "cpu",
            "--quiet",
        ];
        if let Some(f) = flag {
            args.extend(["--space", f]);
        }
        args.push(input.to_str().unwrap());
        let (code, _, err) = run(&args);
        assert_eq!(code, 0, "{err}");
        let manifest = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.to_string_lossy().ends_with(".jsonl"))
            .expect("a manifest");
        let text = std::fs::read_to_string(manifest).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        for l in &lines {
            assert_eq!(l["plan"]["space"], want, "{l}");
            let rot = l["done"]
                .as_array()
                .unwrap()
                .iter()
                .find(|d| d["transform"] == "rotate");
            let rot = rot.expect("rotate fires with p 1");
            assert_eq!(rot["values"]["space"].as_str().unwrap_or("voxel"), want);
        }
    }
}

/// The GUI's slice path in mm space: a plane of the per-axis-sigma field computed on its own, and
/// a slice of the transform, equal the full volume's (to f32 rounding).
#[test]
fn mm_slices_equal_the_full_volume() {
    use augscope::engine::Job;
    use augscope::engine::field::ElasticField;
    let shape = [9usize, 14, 11];
    let sigma = [0.9, 3.1, 2.2];
    let full = ElasticField::compute_axes(&shape, &sigma, 77);
    for axis in 0..3 {
        for index in [0, shape[axis] / 2, shape[axis] - 1] {
            let plane = ElasticField::compute_plane_axes(&shape, &sigma, 77, axis, index);
            for (p, w) in plane.iter().zip(&full.plane(axis, index)) {
                let err = p
                    .iter()
                    .zip(w)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0f32, f32::max);
                assert!(err < 1e-6, "field axis {axis} index {index}: {err}");
            }
        }
    }
    let img = splitmix_volume(&shape, 1, 21);
    let plan = Plan {
        rotate_rad: vec![0.2, -0.3, 0.4],
        translate: vec![2.0, -1.0, 0.5],
        elastic: Some(Elastic {
            alpha: 25.0,
            sigma: 4.5,
            seed: 77,
        }),
        order: Order::Cubic,
        mode: Mode::Reflect,
        space: Space::Mm,
        spacing_mm: vec![5.0, 1.0, 1.5],
        ..Plan::default()
    };
    let want = apply(&plan, &img);
    for axis in 0..3 {
        for index in [1, shape[axis] - 2] {
            let cpu = CpuBackend::new();
            let plane_len: usize = (0..3).filter(|&a| a != axis).map(|a| shape[a]).product();
            let mut out = vec![f32::NAN; plane_len];
            let job = Job {
                plan: &plan,
                image: &img,
                label: None,
            };
            cpu.apply_plane(
                job,
                Plane { axis, index },
                None,
                Outputs {
                    image: &mut out,
                    label: None,
                },
            )
            .unwrap();
            let mut k = 0;
            for z in 0..shape[0] {
                for y in 0..shape[1] {
                    for x in 0..shape[2] {
                        if [z, y, x][axis] != index {
                            continue;
                        }
                        let w = want.data[(z * shape[1] + y) * shape[2] + x];
                        assert!(
                            (out[k] - w).abs() < 1e-4,
                            "axis {axis} index {index}: {} vs {w}",
                            out[k]
                        );
                        k += 1;
                    }
                }
            }
        }
    }
}

// --- preset export -------------------------------------------------------------------------

#[test]
fn exports_say_where_mm_space_is_not_expressible() {
    use augscope::export::{Target, export, import};
    let mm = Preset::parse(MM_PRESET).unwrap();
    let vox = Preset::parse(&MM_PRESET.replace("space = \"mm\"\n", "")).unwrap();
    for (t, name) in [
        (Target::Batchgenerators, "batchgenerators"),
        (Target::Monai, "MONAI"),
        (Target::Nnunet, "nnU-Net"),
    ] {
        let text = export(&mm, t, 3).unwrap();
        let note = text
            .lines()
            .find(|l| l.starts_with("# NOTE: ") && l.contains("space = \"mm\""))
            .unwrap_or_else(|| panic!("{name}: no mm note in\n{text}"));
        assert!(
            note.contains(name) && note.contains("voxel space"),
            "{note}"
        );
        assert!(!export(&vox, t, 3).unwrap().contains("space = \"mm\""));
    }
    // The batchgenerators dict cannot hold the space: it comes back as voxel, the rest intact.
    let json = export(&mm, Target::BatchgeneratorsJson, 3).unwrap();
    let back = import::import(&json, "mm").unwrap();
    assert_eq!(back.space, Space::Voxel);
    assert_eq!(back.rotate, mm.rotate);
    assert_eq!(back.elastic, mm.elastic);
}

#[test]
fn torchio_export_works_in_mm_natively() {
    // TorchIO's snippet carries the space itself and maps augscope's array-axis (or physical)
    // transform through each image's affine; tests/interop/check_torchio.py runs it for real on
    // anisotropic scans in both spaces.
    use augscope::export::{Target, export};
    let mm = Preset::parse(MM_PRESET).unwrap();
    let text = export(&mm, Target::TorchIo, 3).unwrap();
    assert!(text.contains("\nSPACE = \"mm\""), "{text}");
    assert!(text.contains("(mm) and sets the grid to match"), "{text}");
    assert!(!text.contains("is not expressible"), "{text}");
    let vox = Preset::parse(&MM_PRESET.replace("space = \"mm\"\n", "")).unwrap();
    let text = export(&vox, Target::TorchIo, 3).unwrap();
    assert!(text.contains("\nSPACE = \"voxel\""), "{text}");
    assert!(
        text.contains("(voxels) and sets the grid to match"),
        "{text}"
    );
}
