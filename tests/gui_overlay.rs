//! The deformation grid and Jacobian overlays of the explorer, driven through egui_kittest: the
//! folded share the views state against numpy's Jacobian of `augscope apply --save-coords` on
//! the same plan, and the toggles changing what is drawn and persisting in the saved state.
#![cfg(feature = "gui")]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use augscope::app::{App, State};
use augscope::engine::jacobian;
use eframe::egui;
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;

mod common;

const SIZE: [f32; 2] = [1500.0, 940.0];

/// numpy's Jacobian of `c.npy` (argv 1) times the orientation (argv 2), as tests/jacobian.rs
/// computes it (`numpy.gradient` in float64, cofactors, rounded to float32); prints the folded
/// count of the whole grid and of each plane `axis:index` named in argv 3.., with the sizes.
const NUMPY_FOLDS: &str = r#"
import json, sys
import numpy as np
c = np.load(sys.argv[1])
sign = np.float32(sys.argv[2])
g = [[np.gradient(c[k].astype(np.float64), axis=a) for a in range(3)] for k in range(3)]
d = (g[0][0] * (g[1][1] * g[2][2] - g[1][2] * g[2][1])
     - g[0][1] * (g[1][0] * g[2][2] - g[1][2] * g[2][0])
     + g[0][2] * (g[1][0] * g[2][1] - g[1][1] * g[2][0])).astype(np.float32) * sign
out = {"folded": int((d <= 0).sum()), "n": int(d.size), "planes": {}}
for spec in sys.argv[3:]:
    axis, index = map(int, spec.split(":"))
    p = np.take(d, index, axis=axis)
    out["planes"][spec] = [int((p <= 0).sum()), int(p.size)]
print(json.dumps(out))
"#;

fn numpy_missing() -> Option<String> {
    match Command::new("python3")
        .args(["-c", "import numpy"])
        .output()
    {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(String::from_utf8_lossy(&o.stderr).trim().to_string()),
        Err(e) => Some(format!("python3: {e}")),
    }
}

/// A 16×20×24 scan with some structure, as NIfTI.
fn small_scan(dir: &Path) -> PathBuf {
    use augscope::io::{SaveOptions, save};
    let shape = [16usize, 20, 24];
    let n: usize = shape.iter().product();
    let data: Vec<f32> = (0..n)
        .map(|i| {
            let (z, y, x) = (
                i / (shape[1] * shape[2]),
                (i / shape[2]) % shape[1],
                i % shape[2],
            );
            ((z * 31 + y * 7 + x * 3) % 23) as f32 / 23.0 + 0.01 * x as f32
        })
        .collect();
    let img = dir.join("small.nii.gz");
    save(
        &img,
        &augscope::Volume::new(data, shape.to_vec(), 1),
        &SaveOptions::default(),
    )
    .expect("write image");
    img
}

fn harness(image: PathBuf) -> Harness<'static, App> {
    let h = Harness::builder()
        .with_size(SIZE)
        .wgpu()
        .build_eframe(move |cc| {
            let mut app = App::new(cc, Some((image, None)));
            app.rt.capture.hide_timings = true;
            app
        });
    h.ctx
        .set_missing_glyph_policy(egui::MissingGlyphPolicy::Tofu);
    h
}

/// Steps frames until the worker is idle and the overlays (when on) are those of the views,
/// the whole volume's count included.
fn settle(h: &mut Harness<'_, App>) {
    let start = Instant::now();
    let mut idle_frames = 0;
    while idle_frames < 3 {
        h.step();
        let app = h.state();
        if app.is_idle() && augscope::app::overlay::is_current(&app.state, &app.rt) {
            idle_frames += 1;
        } else {
            idle_frames = 0;
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(
            start.elapsed() < Duration::from_secs(300),
            "the app did not settle"
        );
    }
}

/// The labels whose text contains `part`.
fn labels(h: &Harness<'_, App>, part: &str) -> Vec<String> {
    h.query_all_by_label_contains(part)
        .filter_map(|n| n.value())
        .collect()
}

/// `augscope apply` of the app's plan with `--save-coords`, then numpy's folded counts of the
/// whole grid and of the planes `(axis, index)`.
fn numpy_folds(
    dir: &Path,
    scan: &Path,
    plan: &augscope::augment::Plan,
    shape: &[usize],
    planes: &[(usize, usize)],
) -> serde_json::Value {
    let join = |v: &[f64]| {
        v.iter()
            .map(|x| format!("{x}"))
            .collect::<Vec<_>>()
            .join(",")
    };
    let (out, coords) = (dir.join("out.npy"), dir.join("c.npy"));
    let _ = std::fs::remove_file(&coords);
    let mut cmd = common::cli::command();
    cmd.arg("apply").arg(scan).arg(&out);
    cmd.args(["--backend", "cpu"]);
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
    let sign = jacobian::orientation(&plan.compose(shape).expect("plan composes"));
    let specs: Vec<String> = planes.iter().map(|(a, i)| format!("{a}:{i}")).collect();
    let o = Command::new("python3")
        .args(["-c", NUMPY_FOLDS])
        .arg(&coords)
        .arg(sign.to_string())
        .args(&specs)
        .output()
        .expect("python3 runs");
    assert!(
        o.status.success(),
        "numpy: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).expect("numpy prints JSON")
}

/// The app's stated counts (plane per view, whole volume) against numpy's, at the cursor.
fn check_against_numpy(h: &mut Harness<'_, App>, dir: &Path, scan: &Path) -> usize {
    let app = h.state();
    let s = app.rt.scan.as_ref().expect("scan");
    let shape = s.loaded.image.shape.clone();
    let plan = app.plan();
    let planes: Vec<(usize, usize)> = s
        .views
        .iter()
        .map(|v| {
            let a = v.normal.expect("3D view");
            (a, s.cursor[a])
        })
        .collect();
    let names: Vec<String> = s.views.iter().map(|v| v.name.clone()).collect();
    let np = numpy_folds(dir, scan, &plan, &shape, &planes);
    let ov = &app.rt.overlay;
    let p = ov.planes.as_ref().expect("plane overlays");
    assert!(
        p.exact,
        "the volume's field is in use once the volume is there"
    );
    let vol = ov.volume.expect("volume count");
    assert_eq!(vol.generation, app.rt.work.generation);
    let want_total = np["folded"].as_u64().expect("numpy count") as usize;
    assert_eq!(vol.voxels, np["n"].as_u64().expect("numpy size") as usize);
    assert_eq!(
        vol.folded, want_total,
        "whole volume: app {} vs numpy {want_total}",
        vol.folded
    );
    let stated = labels(h, "volume folded");
    let vol_text = format!(
        "volume folded {}",
        augscope::app::overlay::fraction_text(vol.folded, vol.voxels)
    );
    assert_eq!(stated.len(), planes.len(), "{stated:?}");
    assert!(stated.iter().all(|t| *t == vol_text), "{stated:?}");
    let plane_texts = labels(h, "plane folded");
    for (vi, (axis, index)) in planes.iter().enumerate() {
        let j = p.views[vi].jacobian.as_ref().expect("jacobian of the view");
        let want = &np["planes"][format!("{axis}:{index}")];
        let (nf, nn) = (
            want[0].as_u64().expect("numpy plane count") as usize,
            want[1].as_u64().expect("numpy plane size") as usize,
        );
        assert_eq!(
            (j.folded, j.voxels),
            (nf, nn),
            "plane {index} along axis {axis}"
        );
        let text = format!(
            "{} plane folded {}",
            names[vi],
            augscope::app::overlay::fraction_text(j.folded, j.voxels)
        );
        assert!(plane_texts.contains(&text), "{text} in {plane_texts:?}");
    }
    want_total
}

fn set_cursor(h: &mut Harness<'_, App>, c: [usize; 3]) {
    if let Some(s) = h.state_mut().rt.scan.as_mut() {
        s.cursor = c.to_vec();
    }
}

#[test]
fn folded_share_matches_numpy_of_the_saved_coordinates() {
    if let Some(why) = numpy_missing() {
        common::skipped(&format!("numpy is not available ({why})"));
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let scan = small_scan(dir.path());
    let mut h = harness(scan.clone());
    settle(&mut h);
    assert_eq!(
        h.state()
            .rt
            .scan
            .as_ref()
            .map(|s| s.loaded.image.shape.clone()),
        Some(vec![16, 20, 24])
    );
    h.get_by_label("Jacobian").click_accesskit();
    // A strong field with a small sigma folds; a flip on top must not count as folding.
    {
        let p = &mut h.state_mut().state.params;
        p.elastic = true;
        p.alpha = 400.0;
        p.sigma_vox = 2.0;
        p.seed = 11;
        p.rotate_deg = [12.0, 0.0, -7.0];
        p.flip = [false, true, false];
    }
    settle(&mut h);
    assert!(h.state().state.display.jacobian);
    let t = Instant::now();
    let folded = check_against_numpy(&mut h, dir.path(), &scan);
    println!(
        "fold case: {folded} folded voxels (numpy check {:?})",
        t.elapsed()
    );
    assert!(folded > 0, "alpha 400, sigma 2 folds");
    // Planes at the grid's edges (one-sided differences).
    set_cursor(&mut h, [0, 19, 23]);
    settle(&mut h);
    check_against_numpy(&mut h, dir.path(), &scan);
    // A gentle field does not fold.
    {
        let p = &mut h.state_mut().state.params;
        p.alpha = 20.0;
        p.sigma_vox = 6.0;
        p.flip = [false; 3];
    }
    set_cursor(&mut h, [7, 9, 13]);
    settle(&mut h);
    assert_eq!(check_against_numpy(&mut h, dir.path(), &scan), 0);
    let ov = &h.state().rt.overlay;
    assert_eq!(ov.volume.map(|v| v.folded), Some(0));
    assert!(ov.planes.as_ref().is_some_and(|p| {
        p.views
            .iter()
            .all(|v| v.jacobian.as_ref().is_some_and(|j| j.min > 0.0))
    }));
}

/// Pixels that differ between two renders inside `[x0, x1) × [y0, y1)`.
fn differing(a: &image::RgbaImage, b: &image::RgbaImage, area: [u32; 4]) -> usize {
    let [x0, y0, x1, y1] = area;
    let mut n = 0;
    for y in y0..y1.min(a.height()) {
        for x in x0..x1.min(a.width()) {
            let (p, q) = (a.get_pixel(x, y).0, b.get_pixel(x, y).0);
            if p.iter().zip(q).any(|(u, v)| u.abs_diff(v) > 8) {
                n += 1;
            }
        }
    }
    n
}

#[derive(Default)]
struct Memory(HashMap<String, String>);

impl eframe::Storage for Memory {
    fn get_string(&self, key: &str) -> Option<String> {
        self.0.get(key).cloned()
    }
    fn set_string(&mut self, key: &str, value: String) {
        self.0.insert(key.to_string(), value);
    }
    fn remove_string(&mut self, key: &str) {
        self.0.remove(key);
    }
    fn flush(&mut self) {}
}

/// The state as eframe saves it.
fn saved(h: &mut Harness<'_, App>) -> State {
    let mut m = Memory::default();
    eframe::App::save(h.state_mut(), &mut m);
    eframe::get_value(&m, eframe::APP_KEY).expect("state saved")
}

#[test]
fn toggles_change_what_is_drawn_and_persist() {
    let dir = tempfile::tempdir().expect("temp dir");
    let scan = small_scan(dir.path());
    let mut h = harness(scan);
    {
        let p = &mut h.state_mut().state.params;
        p.elastic = true;
        p.alpha = 150.0;
        p.sigma_vox = 3.0;
        p.rotate_deg = [0.0, 0.0, 15.0];
    }
    settle(&mut h);
    let off = h.render().expect("render");
    assert!(!saved(&mut h).display.deformation_grid);
    // The augmented row is the lower half of the central area; the original row the upper half.
    let (w, hgt) = (off.width(), off.height());
    let central = [w * 30 / 100, w * 75 / 100];
    let original_row = [central[0], hgt * 15 / 100, central[1], hgt * 40 / 100];
    let augmented_row = [central[0], hgt * 58 / 100, central[1], hgt * 88 / 100];

    h.get_by_label("deformation grid").click_accesskit();
    settle(&mut h);
    {
        let app = h.state();
        assert!(app.state.display.deformation_grid);
        let p = app.rt.overlay.planes.as_ref().expect("grid computed");
        assert!(p.grid && !p.jacobian);
        assert!(
            p.views.iter().all(|v| !v.grid.is_empty()),
            "grid lines in every view"
        );
        assert!(app.rt.overlay.textures.iter().all(Option::is_none));
    }
    let grid = h.render().expect("render");
    let changed = differing(&off, &grid, augmented_row);
    assert!(
        changed > 200,
        "the grid draws over the augmented views ({changed} pixels)"
    );
    assert_eq!(
        differing(&off, &grid, original_row),
        0,
        "not over the original"
    );
    assert!(saved(&mut h).display.deformation_grid);

    h.get_by_label("Jacobian").click_accesskit();
    settle(&mut h);
    {
        let app = h.state();
        let ov = &app.rt.overlay;
        assert!(ov.textures.len() == 3 && ov.textures.iter().all(Option::is_some));
        assert!(ov.volume.is_some());
    }
    assert!(!labels(&h, "plane folded").is_empty());
    let both = h.render().expect("render");
    assert!(
        differing(&grid, &both, augmented_row) > 200,
        "the Jacobian colours the views"
    );
    let s = saved(&mut h);
    assert!(s.display.deformation_grid && s.display.jacobian);

    h.get_by_label("deformation grid").click_accesskit();
    h.get_by_label("Jacobian").click_accesskit();
    settle(&mut h);
    assert!(!h.state().rt.overlay.holds_anything());
    assert!(labels(&h, "plane folded").is_empty());
    let again = h.render().expect("render");
    assert!(
        differing(&off, &again, augmented_row) < 20,
        "off again draws what it drew before"
    );
    let s = saved(&mut h);
    assert!(!s.display.deformation_grid && !s.display.jacobian);
    // A state saved before the toggles existed loads with both off.
    let mut old = serde_json::to_value(State::default()).expect("state to JSON");
    let display = old["display"].as_object_mut().expect("display object");
    display.remove("deformation_grid");
    display.remove("jacobian");
    let back: State = serde_json::from_value(old).expect("old state loads");
    assert!(!back.display.deformation_grid && !back.display.jacobian);
}

#[test]
fn a_2d_image_gets_both_overlays() {
    let dir = tempfile::tempdir().expect("temp dir");
    let p = dir.path().join("rgb.png");
    let img = image::RgbImage::from_fn(64, 48, |x, y| {
        image::Rgb([(x * 4) as u8, (y * 5) as u8, ((x * y) % 251) as u8])
    });
    img.save(&p).expect("write png");
    let mut h = harness(p);
    {
        let s = &mut h.state_mut().state;
        s.params.rotate_deg[2] = 30.0;
        s.params.elastic = true;
        s.params.alpha = 300.0;
        s.params.sigma_vox = 2.0;
        s.display.deformation_grid = true;
        s.display.jacobian = true;
    }
    settle(&mut h);
    let app = h.state();
    assert!(app.rt.error.is_none());
    let ov = &app.rt.overlay;
    let p = ov.planes.as_ref().expect("overlays");
    assert_eq!(p.views.len(), 1);
    let v = &p.views[0];
    assert_eq!((v.width, v.height), (64, 48));
    assert!(!v.grid.is_empty());
    let j = v.jacobian.as_ref().expect("jacobian");
    // The image is its own plane: the plane's count is the whole count.
    let vol = ov.volume.expect("whole count");
    assert_eq!((j.folded, j.voxels), (vol.folded, vol.voxels));
    assert_eq!(vol.voxels, 64 * 48);
    assert!(j.folded > 0, "alpha 300, sigma 2 folds a 64×48 image");
    assert!(ov.textures.first().is_some_and(Option::is_some));
}

/// "voxels as they are (nearest)" draws each voxel as a flat square: the 16×20×24 scan, zoomed
/// by the views to many pixels per voxel, looks different from its bilinear display, in every
/// view, without recomputing anything; off again draws what it drew before; the choice persists.
#[test]
fn nearest_display_draws_voxels_as_they_are() {
    let dir = tempfile::tempdir().expect("temp dir");
    let scan = small_scan(dir.path());
    let mut h = harness(scan);
    settle(&mut h);
    let generation = h.state().rt.work.generation;
    let smooth = h.render().expect("render");
    let (w, hgt) = (smooth.width(), smooth.height());
    let central = [w * 30 / 100, hgt * 15 / 100, w * 75 / 100, hgt * 88 / 100];
    h.get_by_label("voxels as they are (nearest)")
        .click_accesskit();
    settle(&mut h);
    assert!(h.state().state.display.nearest);
    assert_eq!(
        h.state().rt.work.generation,
        generation,
        "a display change recomputed"
    );
    let blocky = h.render().expect("render");
    let changed = differing(&smooth, &blocky, central);
    assert!(
        changed > 2000,
        "nearest changes the views ({changed} pixels)"
    );
    assert!(saved(&mut h).display.nearest);
    h.get_by_label("voxels as they are (nearest)")
        .click_accesskit();
    settle(&mut h);
    let again = h.render().expect("render");
    assert!(differing(&smooth, &again, central) < 20);
}
