//! The "What training will see" grid, driven through egui_kittest: its tiles are the samples
//! `augscope batch` writes for the same preset and seed (plane for plane), a click on a tile puts
//! that draw into the main views, and a new seed while tiles are computing leaves tiles of the
//! new seed only. Arrays are `[z, y, x]`.
#![cfg(feature = "gui")]

use std::path::{Path, PathBuf};

use augscope::app::{App, BackendChoice, Params};
use augscope::augment::preset::{Preset, load_or_bundled};
use augscope::core::volume::Volume;
use augscope::engine::cpu::CpuBackend;
use augscope::engine::{Backend, Job, Outputs, Plane};
use eframe::egui;
use egui::accesskit::Role;
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;

mod common;
use common::gui::{grid_done, harness, small_scan, step_until};

/// Waits for the scan, then for the main views to settle.
fn loaded(h: &mut Harness<'_, App>) {
    step_until(h, "the scan", |a| a.rt.scan.is_some());
    step_until(h, "the views", App::is_idle);
}

/// Opens the grid from View → What training will see….
fn open_grid(h: &mut Harness<'_, App>) {
    h.get_by_label("View").click();
    h.run_steps(2);
    h.get_by_label("What training will see…").click();
    h.run_steps(6);
    assert!(h.state().rt.windows.grid.open, "the grid window opens");
}

/// The plane `index` normal to `axis` of a one-channel volume, C order of the other two axes.
fn plane_of(v: &Volume, axis: usize, index: usize) -> Vec<f32> {
    let s = &v.shape;
    let mut out = vec![];
    for z in 0..s[0] {
        for y in 0..s[1] {
            for x in 0..s[2] {
                if [z, y, x][axis] == index {
                    out.push(v.data[(z * s[1] + y) * s[2] + x]);
                }
            }
        }
    }
    out
}

/// Runs `augscope batch` and returns the samples by seed.
fn batch(preset: &str, count: usize, seed: u64, input: &Path, out: &Path) -> Vec<(u64, Volume)> {
    let st = common::cli::command()
        .args(["batch", "--preset", preset, "--count"])
        .arg(count.to_string())
        .arg("--seed")
        .arg(seed.to_string())
        .args(["--backend", "cpu", "--out"])
        .arg(out)
        .arg(input)
        .output()
        .expect("run augscope batch");
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let mut v: Vec<(u64, Volume)> = std::fs::read_to_string(out.join("manifest.jsonl"))
        .expect("manifest")
        .lines()
        .map(|l| {
            let l: serde_json::Value = serde_json::from_str(l).expect("a JSON line");
            let p = PathBuf::from(l["output"].as_str().expect("output path"));
            let vol = augscope::io::load(&p, &Default::default()).expect("reads back");
            (l["seed"].as_u64().expect("seed"), vol)
        })
        .collect();
    v.sort_by_key(|(s, _)| *s);
    v
}

/// Compares every tile with the batch sample of its seed on the tile's plane; returns the
/// largest difference.
fn tiles_against_batch(app: &App, samples: &[(u64, Volume)]) -> f32 {
    let g = &app.rt.windows.grid;
    let (axis, index) = g.plane.expect("a 3D plane");
    assert_eq!(samples.len(), g.n);
    let mut worst = 0f32;
    for (k, (seed, vol)) in samples.iter().enumerate() {
        let tile = g.tiles[k].as_ref().expect("tile computed");
        assert_eq!(tile.seed, *seed, "tile {k}");
        assert_eq!(g.samples[k].seed, *seed);
        let want = plane_of(vol, axis, index);
        assert_eq!(tile.data.len(), want.len(), "tile {k}");
        for (a, b) in tile.data.iter().zip(&want) {
            worst = worst.max((a - b).abs());
        }
    }
    worst
}

/// Whether the draws hold anything but flips (a rotation or a scaling), so that a comparison of
/// tiles is not a comparison of mirrored copies only.
fn something_beyond_flips(app: &App) -> bool {
    app.rt.windows.grid.samples.iter().any(|s| {
        s.done
            .iter()
            .any(|d| d.transform == "rotate" || d.transform == "scale")
    })
}

#[test]
fn tiles_are_the_batch_samples_voxel_for_voxel() {
    let dir = tempfile::tempdir().expect("temp dir");
    let img = small_scan(dir.path(), [11, 13, 12]);
    let mut h = harness(img.clone());
    loaded(&mut h);
    // nnU-Net v2: flips, rotation and scaling with cubic interpolation, no elastic field.
    h.state_mut().state.preset = "nnunet-v2".into();
    open_grid(&mut h);
    h.get_by_label("4×4").click();
    let seed = h
        .get_all_by_role_and_label(Role::SpinButton, "first seed")
        .next()
        .expect("first seed field");
    seed.set_value_accesskit(40.0);
    h.run_steps(2);
    grid_done(&mut h);
    assert_eq!(
        (
            h.state().rt.windows.grid.n,
            h.state().rt.windows.grid.first_seed
        ),
        (16, 40)
    );
    assert!(
        something_beyond_flips(h.state()),
        "seeds 40..56 draw only flips"
    );
    let samples = batch("nnunet-v2", 16, 40, &img, &dir.path().join("b1"));
    // Axial, then the other planes through the picker.
    for plane in ["Axial", "Coronal", "Sagittal"] {
        if plane != "Axial" {
            h.get_by_label(plane).click();
            h.run_steps(2);
            grid_done(&mut h);
        }
        let worst = tiles_against_batch(h.state(), &samples);
        assert_eq!(
            worst, 0.0,
            "{plane}: tiles differ from the batch by {worst}"
        );
    }
    let views = &h.state().rt.scan.as_ref().expect("scan").views;
    assert_eq!(
        h.state().rt.windows.grid.plane.map(|p| p.0),
        views[2].normal
    );
    // The CUDA engine chosen: without a device the grid says so and the CPU computes the same
    // tiles; with one, its slice path gives the batch's values to f32 rounding.
    h.state_mut().state.params.backend = BackendChoice::Cuda(0);
    step_until(&mut h, "the devices report", |a| a.rt.gpu.devices.is_some());
    h.run_steps(2);
    grid_done(&mut h);
    let app = h.state();
    let worst = tiles_against_batch(app, &samples);
    if app
        .rt
        .gpu
        .devices
        .as_ref()
        .is_some_and(|d| d.devices.is_empty())
    {
        let note = app.rt.windows.grid.note.as_deref().unwrap_or_default();
        assert!(note.contains("CPU engine"), "{note:?}");
        assert_eq!(worst, 0.0, "CPU fallback tiles differ by {worst}");
    } else {
        assert!(worst < 1e-4, "CUDA tiles differ by {worst}");
    }
}

/// A preset whose elastic field is fine next to the grid (sigma 1.5-3 voxels on a 20-voxel
/// scan), with rotation and linear interpolation in reflect mode.
const FINE_ELASTIC: &str = r#"
version = 1
name = "fine elastic"

[rotate]
p = 1.0
p_axis = [1.0]
range_deg = [[-20.0, 20.0]]

[elastic]
p = 0.75
alpha = [20.0, 80.0]
sigma = [1.5, 3.0]

[sampling]
order = 1
mode = "reflect"
cval = 0.0
label_order = 0
"#;

#[test]
fn elastic_tiles_match_the_batch_within_field_rounding() {
    // The slice path smooths the field of one plane (docs/design.md §4: across slices, then within),
    // the batch the whole volume's; they agree to f32 rounding of the field.
    let dir = tempfile::tempdir().expect("temp dir");
    let img = small_scan(dir.path(), [20, 24, 22]);
    let fine = dir.path().join("fine.toml");
    std::fs::write(&fine, FINE_ELASTIC).expect("write preset");
    let mut h = harness(img.clone());
    loaded(&mut h);
    open_grid(&mut h);
    for (i, (preset, size, n)) in [
        ("batchgenerators".to_string(), "2×2", 4),
        (fine.display().to_string(), "4×4", 16),
    ]
    .into_iter()
    .enumerate()
    {
        h.state_mut().state.preset = preset.clone();
        h.get_by_label(size).click();
        h.run_steps(2);
        grid_done(&mut h);
        let app = h.state();
        let g = &app.rt.windows.grid;
        assert_eq!(g.n, n);
        let elastic = g
            .samples
            .iter()
            .filter(|s| s.plan.elastic.is_some_and(|e| e.alpha != 0.0))
            .count();
        assert!(elastic > 0, "{preset}: no draw deforms elastically");
        // The histogram holds what the thread reported: one RMS per elastic draw, below the max.
        for (k, s) in g.samples.iter().enumerate() {
            let has = s.plan.elastic.is_some_and(|e| e.alpha != 0.0);
            match g.displacement[k] {
                Some((max, rms)) => assert!(has && max >= rms && rms > 0.0, "draw {k}"),
                None => assert!(!has, "draw {k} has no displacement"),
            }
        }
        let hist = augscope::app::grid::histogram_values(g);
        let rms = hist
            .iter()
            .find(|(t, _, _)| t.starts_with("elastic"))
            .expect("elastic histogram");
        assert_eq!(rms.2.len(), elastic);
        let samples = batch(&preset, n, 0, &img, &dir.path().join(format!("b{i}")));
        let worst = tiles_against_batch(app, &samples);
        let range = samples
            .iter()
            .flat_map(|(_, v)| v.data.iter().copied())
            .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), x| {
                (lo.min(x), hi.max(x))
            });
        let tol = 1e-5 * (range.1 - range.0);
        assert!(
            worst <= tol,
            "{preset}: elastic tiles differ by {worst} (tolerance {tol})"
        );
    }
}

#[test]
fn clicking_a_tile_puts_its_draw_into_the_views() {
    let dir = tempfile::tempdir().expect("temp dir");
    let img = small_scan(dir.path(), [9, 11, 10]);
    let mut h = harness(img);
    loaded(&mut h);
    h.state_mut().state.preset = "nnunet-v1-3d".into();
    // Opened from the Preset section's button this time.
    h.get_by_label("Grid…").click();
    h.run_steps(6);
    assert!(h.state().rt.windows.grid.open);
    h.get_by_label("2×2").click();
    h.run_steps(2);
    grid_done(&mut h);
    let before = h.state().state.params.clone();
    let (k, sample) = {
        let g = &h.state().rt.windows.grid;
        (2, g.samples[2].clone())
    };
    assert_eq!(sample.seed, h.state().rt.windows.grid.first_seed + k as u64);
    h.get_by_label(&format!("draw {k}, seed {}", sample.seed))
        .click();
    // The frame that takes the click applies it.
    h.step();
    let app = h.state();
    let want = Params::from_plan(&sample.plan, 3, &before);
    assert_eq!(app.state.params, want);
    assert_ne!(app.state.params, before, "the draw changed the parameters");
    let (params, done, _) = app.rt.sampled.as_ref().expect("recorded as a sample");
    assert_eq!(*params, want);
    assert_eq!(*done, sample.done);
}

/// The tile of `seed` computed directly: the preset's draw, then the CPU slice path.
fn direct_tile(preset: &Preset, image: &Volume, seed: u64, plane: (usize, usize)) -> Vec<f32> {
    let s = preset
        .sample(seed, 3, 1, &image.spacing_mm)
        .expect("a draw");
    let (axis, index) = plane;
    let len = image.data.len() / image.shape[axis];
    let mut out = vec![0f32; len];
    CpuBackend::new()
        .apply_plane(
            Job {
                plan: &s.plan,
                image,
                label: None,
            },
            Plane { axis, index },
            None,
            Outputs {
                image: &mut out,
                label: None,
            },
        )
        .expect("slice");
    out
}

#[test]
fn a_new_seed_while_computing_leaves_tiles_of_that_seed_only() {
    let dir = tempfile::tempdir().expect("temp dir");
    // Large enough that 16 elastic tiles take a while.
    let img = small_scan(dir.path(), [40, 72, 64]);
    let mut h = harness(img);
    loaded(&mut h);
    h.state_mut().state.preset = "batchgenerators".into();
    h.state_mut().rt.windows.grid.n = 16;
    open_grid(&mut h);
    // The first request is out; its tiles are not all there yet.
    assert!(h.state().rt.windows.grid.tiles.iter().any(Option::is_none));
    let first = h.state().rt.windows.grid.first_seed;
    h.get_by_label("Reseed").click();
    h.run_steps(1);
    assert_eq!(h.state().rt.windows.grid.first_seed, first + 16);
    grid_done(&mut h);
    let app = h.state();
    let g = &app.rt.windows.grid;
    let new_first = first + 16;
    let image = app.rt.scan.as_ref().expect("scan").loaded.image.clone();
    let preset = load_or_bundled(Path::new("batchgenerators")).expect("preset");
    let plane = g.plane.expect("3D plane");
    for (k, t) in g.tiles.iter().enumerate() {
        let t = t.as_ref().expect("tile");
        assert_eq!(t.seed, new_first + k as u64, "tile {k}");
        assert_eq!(g.samples[k].seed, new_first + k as u64);
        assert!(
            t.data == direct_tile(&preset, &image, t.seed, plane),
            "tile {k} is not the draw of seed {}",
            t.seed
        );
    }
    // The first request was abandoned between tiles, not finished.
    assert!(
        g.tiles_computed() < 32,
        "{} tiles computed for two requests of 16",
        g.tiles_computed()
    );
}
