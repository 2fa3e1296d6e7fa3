//! The overlays of the grid of draws ("What training will see"): with the Display toggles on,
//! each tile's Jacobian folded count is that of the same plane of `augscope apply --backend cpu
//! --save-coords` of the tile's plan; with them off, no overlay is computed. Arrays are
//! `[z, y, x]`.
#![cfg(feature = "gui")]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use augscope::app::App;
use augscope::augment::Plan;
use augscope::engine::jacobian;
use egui_kittest::kittest::Queryable;

mod common;
use common::gui::{grid_done, harness, small_scan, step_until};

/// A file preset of strong elastic only: alpha 400, sigma 2 voxels, always.
fn strong_elastic_preset(dir: &Path) -> PathBuf {
    let p = dir.join("strong.toml");
    std::fs::write(
        &p,
        "version = 1\nname = \"strong elastic\"\n\n[elastic]\np = 1.0\n\
         alpha = [400.0, 400.0]\nsigma = [2.0, 2.0]\n",
    )
    .expect("write preset");
    p
}

/// The folded count of plane `(axis, index)` of `augscope apply --backend cpu --save-coords` of
/// `plan`: `det(∂x/∂p)` of the saved coordinates by `jacobian::determinant`, oriented by the
/// map (a flip is no fold).
fn cli_folded(
    dir: &Path,
    scan: &Path,
    plan: &Plan,
    shape: &[usize],
    plane: (usize, usize),
) -> usize {
    let join = |v: &[f64]| {
        v.iter()
            .map(|x| format!("{x}"))
            .collect::<Vec<_>>()
            .join(",")
    };
    let (out, coords) = (dir.join("out.npy"), dir.join("c.npy"));
    let _ = std::fs::remove_file(&coords);
    let mut cmd = common::cli::command();
    cmd.arg("apply")
        .arg(scan)
        .arg(&out)
        .args(["--backend", "cpu"]);
    if !plan.flip.is_empty() {
        let f: Vec<String> = plan.flip.iter().map(|a| a.to_string()).collect();
        cmd.arg("--flip").arg(f.join(","));
    }
    if !plan.rotate_rad.is_empty() {
        cmd.arg(format!("--rotate={}", join(&plan.rotate_rad)));
    }
    if !plan.scale.is_empty() {
        cmd.arg(format!("--scale={}", join(&plan.scale)));
    }
    if !plan.translate.is_empty() {
        cmd.arg(format!("--translate={}", join(&plan.translate)));
    }
    if let Some(e) = plan.elastic {
        cmd.arg(format!("--elastic={},{}", e.alpha, e.sigma));
        cmd.arg("--seed").arg(e.seed.to_string());
    }
    let o = cmd
        .arg("--save-coords")
        .arg(&coords)
        .output()
        .expect("augscope runs");
    assert!(
        o.status.success(),
        "augscope apply failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let c = augscope::io::npy::read(&coords).expect("coordinates read back");
    assert_eq!(c.shape[0], 3);
    assert_eq!(&c.shape[1..], shape);
    let det = jacobian::determinant(&c.data, 3, shape);
    let sign = jacobian::orientation(&plan.compose(shape).expect("plan composes")) as f32;
    let (axis, index) = plane;
    let mut folded = 0;
    for z in 0..shape[0] {
        for y in 0..shape[1] {
            for x in 0..shape[2] {
                if [z, y, x][axis] == index && sign * det[(z * shape[1] + y) * shape[2] + x] <= 0.0
                {
                    folded += 1;
                }
            }
        }
    }
    folded
}

#[test]
fn tile_overlays_match_the_cli_and_are_not_computed_when_off() {
    let dir = tempfile::tempdir().expect("temp dir");
    let shape = [16, 20, 24];
    let img = small_scan(dir.path(), shape);
    let preset = strong_elastic_preset(dir.path());
    let mut h = harness(img.clone());
    step_until(&mut h, "the scan", |a| a.rt.scan.is_some());
    step_until(&mut h, "the views", App::is_idle);
    {
        let app = h.state_mut();
        app.state.preset = preset.to_string_lossy().into_owned();
        app.state.display.jacobian = true;
        app.state.display.deformation_grid = true;
        app.rt.windows.grid.n = 4;
    }
    h.get_by_label("View").click();
    h.run_steps(2);
    h.get_by_label("What training will see…").click();
    h.run_steps(6);
    assert!(h.state().rt.windows.grid.open, "the grid window opens");
    grid_done(&mut h);

    let app = h.state();
    let g = &app.rt.windows.grid;
    let plane = g.plane.expect("3D plane");
    assert_eq!(g.overlays_computed(), 4);
    for k in 0..4 {
        let o = g.overlays[k].as_ref().expect("tile overlay");
        let j = o.view.jacobian.as_ref().expect("Jacobian of the tile");
        let plan = &g.samples[k].plan;
        let e = plan.elastic.expect("elastic drawn");
        assert_eq!((e.alpha, e.sigma), (400.0, 2.0));
        assert_eq!(j.voxels, shape.iter().product::<usize>() / shape[plane.0]);
        let want = cli_folded(dir.path(), &img, plan, &shape, plane);
        assert!(want > 0, "strong elastic folds the plane of draw {k}");
        assert_eq!(j.folded, want, "folded count of tile {k}");
        assert!(
            !o.view.grid.is_empty(),
            "deformation-grid lines of tile {k}"
        );
    }
    // Draws differ: their overlays do too.
    let folded: Vec<usize> = g
        .overlays
        .iter()
        .map(|o| o.as_ref().unwrap().view.jacobian.as_ref().unwrap().folded)
        .collect();
    assert!(folded.windows(2).any(|w| w[0] != w[1]), "{folded:?}");

    // The folded fraction is in the tile's tooltip.
    let alt = format!("draw 0, seed {}", g.first_seed);
    let want = format!(
        "plane folded {}",
        augscope::app::overlay::fraction_text(
            folded[0],
            g.overlays[0]
                .as_ref()
                .unwrap()
                .view
                .jacobian
                .as_ref()
                .unwrap()
                .voxels
        )
    );
    h.get_by_label(&alt).hover();
    h.run_steps(4);
    assert!(
        h.query_by_label_contains(&want).is_some(),
        "the tooltip states {want}"
    );

    // Toggles off: a new request, tiles without overlays.
    {
        let app = h.state_mut();
        app.state.display.jacobian = false;
        app.state.display.deformation_grid = false;
    }
    h.run_steps(2);
    grid_done(&mut h);
    let g = &h.state().rt.windows.grid;
    assert!(g.tiles.iter().all(Option::is_some));
    assert!(g.overlays.iter().all(Option::is_none));
    assert_eq!(
        g.overlays_computed(),
        4,
        "no overlay computed with the toggles off"
    );

    // One toggle on again: recomputed.
    h.state_mut().state.display.jacobian = true;
    h.run_steps(2);
    grid_done(&mut h);
    let g = &h.state().rt.windows.grid;
    assert_eq!(g.overlays_computed(), 8);
    for (k, o) in g.overlays.iter().enumerate() {
        let o = o.as_ref().expect("tile overlay");
        assert_eq!(
            o.view.jacobian.as_ref().expect("Jacobian").folded,
            folded[k]
        );
        assert!(o.view.grid.is_empty(), "grid lines only with their toggle");
    }
}

#[test]
fn the_preset_editor_states_the_realised_displacement_of_its_elastic_extremes() {
    use augscope::app::format::num;
    use augscope::augment::{Elastic, preset::Preset};
    use augscope::engine::cpu::CpuBackend;
    let dir = tempfile::tempdir().expect("temp dir");
    let shape = [16, 20, 24];
    let img = small_scan(dir.path(), shape);
    let mut h = harness(img);
    step_until(&mut h, "the scan", |a| a.rt.scan.is_some());
    step_until(&mut h, "the views", App::is_idle);
    let preset = Preset::parse(
        "version = 1\nname = \"two extremes\"\n\n[elastic]\np = 1.0\n\
         alpha = [50.0, 400.0]\nsigma = [2.0, 6.0]\n",
    )
    .expect("preset parses");
    {
        let app = h.state_mut();
        app.state.params.seed = 7;
        app.state.draft = Some(preset);
        app.rt.windows.editor.open = true;
    }
    h.run_steps(6);
    // The CPU engine's figures of the two settings, with the views' seed.
    let cpu = CpuBackend::default();
    let stats = |alpha: f64, sigma: f64| {
        let plan = Plan {
            elastic: Some(Elastic {
                alpha,
                sigma,
                seed: 7,
            }),
            ..Plan::default()
        };
        let (f, _) = cpu.field(&plan, &shape).expect("a field");
        f.displacement_stats(alpha)
    };
    let weakest = stats(50.0, 6.0);
    let strongest = stats(400.0, 2.0);
    assert!(strongest.0 > weakest.0 && strongest.1 > weakest.1);
    let line = |which: &str, (max, rms): (f64, f64)| {
        format!(
            "realised length ({which}): max {} RMS {} vox",
            num(max),
            num(rms)
        )
    };
    let (w, s) = (line("weakest", weakest), line("strongest", strongest));
    let start = Instant::now();
    while h.query_by_label(&w).is_none() || h.query_by_label(&s).is_none() {
        h.step();
        std::thread::sleep(Duration::from_millis(5));
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the editor shows neither {w:?} nor {s:?}; it shows {:?}",
            h.query_all_by_label_contains("realised")
                .map(|n| format!("{n:?}"))
                .collect::<Vec<_>>()
        );
    }
    // A new seed: measured again, for that seed.
    h.state_mut().state.params.seed = 8;
    h.run_steps(2);
    assert!(h.query_by_label(&s).is_none(), "the seed 7 figure is gone");
}
