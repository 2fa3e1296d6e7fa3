//! The explorer driven through egui_kittest (wgpu on lavapipe, no display needed): load the
//! sample, move sliders, switch mode and backend, open the comparison view, with snapshot images
//! of the main states in `tests/snapshots/` (regenerate with `UPDATE_SNAPSHOTS=1 cargo test --test gui`).
//!
//! CI needs a Vulkan driver for the software renderer: `mesa-vulkan-drivers libvulkan1`.
#![cfg(feature = "gui")]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use augscope::app::{self, App, BackendChoice};
use augscope::augment::Mode;
use eframe::egui;
use egui::accesskit::Role;
use egui_kittest::kittest::Queryable;
use egui_kittest::{Harness, SnapshotOptions};

const SIZE: [f32; 2] = [1500.0, 940.0];

/// One place for the snapshot tolerance: lavapipe builds differ by a few pixels in text edges.
fn snapshot_options() -> SnapshotOptions {
    SnapshotOptions::new()
        .threshold(2.0)
        .max_failed_pixels(2000)
}

fn harness(image: PathBuf, label: Option<PathBuf>) -> Harness<'static, App> {
    Harness::builder()
        .with_size(SIZE)
        .wgpu()
        .build_eframe(move |cc| {
            let mut app = App::new(cc, Some((image, label)));
            app.rt.hide_timings = true;
            app
        })
}

fn sample() -> Harness<'static, App> {
    harness(app::SAMPLE.into(), Some(app::SAMPLE_LABEL.into()))
}

/// Steps frames until the worker has answered everything and the views show the parameters.
fn settle(h: &mut Harness<'_, App>) {
    let start = Instant::now();
    let mut idle_frames = 0;
    while idle_frames < 3 {
        h.step();
        if h.state().is_idle() {
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

/// The slider with this label (egui's slider exposes the bar and its value box).
fn slider<'t>(h: &'t Harness<'_, App>, label: &'t str) -> egui_kittest::Node<'t> {
    h.get_all_by_role_and_label(Role::Slider, label)
        .next()
        .expect("slider exists")
}

#[test]
fn sample_loads_with_three_named_planes() {
    let mut h = sample();
    settle(&mut h);
    let app = h.state();
    let scan = app.rt.scan.as_ref().expect("sample loaded");
    assert_eq!(scan.loaded.image.shape, vec![189, 233, 197]);
    let names: Vec<&str> = scan.views.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names, ["Axial", "Coronal", "Sagittal"]);
    assert!(scan.loaded.label.is_some());
    assert!(app.rt.error.is_none());
    h.snapshot_options("sample_loaded", &snapshot_options());
}

#[test]
fn sliders_mode_and_backend_drive_the_transform() {
    let mut h = sample();
    settle(&mut h);
    let g0 = h.state().rt.generation;
    // A rotation slider, through accesskit as a screen reader would.
    slider(&h, "about axis 0 (I–S)").set_value_accesskit(20.0);
    settle(&mut h);
    assert_eq!(h.state().state.params.rotate_deg[0], 20.0);
    assert!(h.state().rt.generation > g0);
    // Elastic on, with a moved alpha.
    h.get_by_label("enabled").click();
    h.step();
    slider(&h, "alpha").set_value_accesskit(1200.0);
    settle(&mut h);
    let app = h.state();
    assert!(app.state.params.elastic);
    assert_eq!(app.state.params.alpha, 1200.0);
    let (max, rms) = app
        .rt
        .full
        .as_ref()
        .and_then(|f| f.displacement_vox)
        .expect("displacement readout");
    assert!(max > rms && rms > 0.0);
    h.snapshot_options("rotated_elastic", &snapshot_options());
    // Boundary mode and backend: the combo boxes, then a pick.
    h.state_mut().state.params.mode = Mode::Mirror;
    h.state_mut().state.params.backend = BackendChoice::Cuda(0);
    settle(&mut h);
    let app = h.state();
    let full = app.rt.full.as_ref().expect("result");
    // No GPU here: the CUDA choice falls back to the CPU engine with a note, never a crash.
    if app
        .rt
        .devices
        .as_ref()
        .is_some_and(|d| d.devices.is_empty())
    {
        assert_eq!(full.backend, "cpu");
        assert!(app.rt.note.as_deref().is_some_and(|n| n.contains("CPU")));
    }
    h.snapshot_options("mirror_cuda_choice", &snapshot_options());
    // Undo brings the previous parameters back.
    h.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::Z);
    settle(&mut h);
    assert_eq!(h.state().state.params.mode, Mode::Constant);
}

#[test]
fn slice_keys_and_window_presets() {
    let mut h = sample();
    settle(&mut h);
    let before = h.state().rt.scan.as_ref().map(|s| s.cursor.clone());
    h.key_press(egui::Key::PageUp);
    settle(&mut h);
    let after = h.state().rt.scan.as_ref().map(|s| s.cursor.clone());
    assert_ne!(before, after);
    h.get_by_label("viridis").click();
    h.get_by_label("Bone").click();
    settle(&mut h);
    let d = &h.state().state.display;
    assert_eq!((d.level, d.width), (Some(400.0), Some(1000.0)));
    h.get_by_label("Auto").click();
    h.get_by_label("difference map |aug − orig|").click();
    h.state_mut().state.params.translate_vox = [0.0, 10.0, -8.0];
    settle(&mut h);
    h.snapshot_options("difference_viridis", &snapshot_options());
}

#[test]
fn comparison_view_opens() {
    let mut h = sample();
    settle(&mut h);
    h.state_mut().state.params.rotate_deg = [10.0, 0.0, 0.0];
    h.get_by_label("Compare CPU vs GPU").click();
    settle(&mut h);
    let app = h.state();
    assert!(app.state.show_compare);
    let c = app.rt.comparison.as_ref().expect("comparison computed");
    assert_eq!(c.generation, app.rt.generation);
    h.snapshot_options("comparison", &snapshot_options());
}

#[test]
fn a_broken_file_is_reported_in_the_window() {
    let dir = tempfile::tempdir().expect("temp dir");
    let bad = dir.path().join("broken.nii.gz");
    std::fs::write(&bad, b"not a nifti file").expect("write");
    let mut h = harness(bad, None);
    settle(&mut h);
    let app = h.state();
    assert!(app.rt.scan.is_none());
    let err = app.rt.error.as_deref().expect("error shown");
    assert!(err.contains("broken.nii.gz"), "{err}");
    h.get_by_label_contains("broken.nii.gz");
}

#[test]
fn a_2d_rgb_image_shows_one_plane() {
    let dir = tempfile::tempdir().expect("temp dir");
    let p = dir.path().join("rgb.png");
    let img = image::RgbImage::from_fn(64, 48, |x, y| {
        image::Rgb([(x * 4) as u8, (y * 5) as u8, 128])
    });
    img.save(&p).expect("write png");
    let mut h = harness(p, None);
    settle(&mut h);
    let scan = h.state().rt.scan.as_ref().expect("loaded");
    assert_eq!(scan.views.len(), 1);
    assert_eq!(scan.loaded.image.channels, 3);
    h.state_mut().state.params.rotate_deg[2] = 30.0;
    settle(&mut h);
    assert!(h.state().rt.error.is_none());
}

/// Latency of the interactive path on the sample, reported rather than asserted (timing belongs
/// in benchmarks): `cargo test --release --test gui latency -- --ignored --nocapture`.
/// (1) the worker's slice-only computation of the three planes, as `compute_slices` runs it for
/// each slider step; (2) end to end through the app: parameter change → planes on screen, the
/// frame rendered by wgpu.
#[test]
#[ignore = "a measurement; run with --release --ignored --nocapture"]
fn latency_slice_path() {
    use augscope::app::slices;
    use augscope::app::worker::{Compute, compute_slices};
    use augscope::engine::BackendSpec;
    use augscope::engine::cpu::CpuBackend;
    use augscope::io::{LoadOptions, load};

    let image = load(std::path::Path::new(app::SAMPLE), &LoadOptions::default()).expect("sample");
    let label = load(
        std::path::Path::new(app::SAMPLE_LABEL),
        &LoadOptions::default(),
    )
    .expect("labels");
    let views = slices::views(&image);
    let cursor: Vec<usize> = image.shape.iter().map(|n| n / 2).collect();
    let cpu = CpuBackend::new();
    let mut params = app::Params::default();
    let mut run = |name: &str, change: &dyn Fn(&mut app::Params, usize)| {
        let mut ms = vec![];
        for step in 0..12 {
            change(&mut params, step);
            let c = Compute {
                generation: step as u64,
                plan: params.to_plan(3),
                backend: BackendSpec::Cpu,
                precision: Default::default(),
                cursor: cursor.clone(),
                views: views.clone(),
                slices_first: true,
            };
            let t = Instant::now();
            compute_slices(&cpu, &c, &image, Some(&label)).expect("slices");
            ms.push(t.elapsed().as_secs_f64() * 1e3);
        }
        let first = ms[0];
        let mut rest = ms[1..].to_vec();
        rest.sort_by(f64::total_cmp);
        println!(
            "slice-only {name:<34} first {first:7.1} ms  median {:6.1} ms  max {:6.1} ms",
            rest[rest.len() / 2],
            rest[rest.len() - 1]
        );
    };
    run("rotate (order 1)", &|p, s| p.rotate_deg[0] = s as f64 * 2.0);
    run("scale + translate", &|p, s| {
        p.scale[0] = 1.0 + s as f64 * 0.02;
        p.translate_vox[2] = s as f64;
    });
    run("elastic alpha (field cached)", &|p, s| {
        p.elastic = true;
        p.alpha = 300.0 + 50.0 * s as f64;
    });
    run("elastic sigma (new field planes)", &|p, s| {
        p.sigma_vox = 8.0 + s as f64
    });
    run("rotate, order 3 (cubic)", &|p, s| {
        p.order = augscope::augment::Order::Cubic;
        p.rotate_deg[1] = s as f64;
    });

    // End to end through the app (worker, texture upload, wgpu frame).
    let mut h = sample();
    settle(&mut h);
    let mut e2e = vec![];
    for step in 1..=10 {
        h.state_mut().state.params.rotate_deg[0] = step as f64 * 3.0;
        let t = Instant::now();
        loop {
            h.step();
            let rt = &h.state().rt;
            if rt
                .shown
                .as_ref()
                .is_some_and(|s| s.generation == rt.generation)
            {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        h.render().expect("frame");
        e2e.push(t.elapsed().as_secs_f64() * 1e3);
        settle(&mut h);
    }
    e2e.sort_by(f64::total_cmp);
    println!(
        "end to end: change → planes drawn (lavapipe)  median {:6.1} ms  max {:6.1} ms",
        e2e[e2e.len() / 2],
        e2e[e2e.len() - 1]
    );
}

#[test]
fn sample_from_a_bundled_preset() {
    let mut h = sample();
    settle(&mut h);
    h.state_mut().state.preset = "nnunet-v1-3d".into();
    h.get_by_label("Sample from preset").click();
    settle(&mut h);
    let app = h.state();
    let (params, done) = app.rt.sampled.as_ref().expect("a sample");
    assert_eq!(*params, app.state.params);
    // The done list names only transforms the plan holds.
    let plan = app.plan();
    for d in done {
        assert!(
            plan.done_list().iter().any(|p| p.transform == d.transform),
            "{d:?}"
        );
    }
    assert!(app.rt.error.is_none());
}
