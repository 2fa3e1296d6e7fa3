//! The explorer driven through egui_kittest (wgpu on lavapipe, no display needed): load the
//! sample, move sliders, switch mode and backend, open the comparison view, with snapshot images
//! of the main states in `tests/snapshots/` (regenerate with `UPDATE_SNAPSHOTS=1 cargo test --test gui`).
//!
//! CI needs a Vulkan driver for the software renderer: `mesa-vulkan-drivers libvulkan1`.
#![cfg(feature = "gui")]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use augscope::app::{self, App, BackendChoice};
use augscope::augment::DoneList;
use augscope::augment::Mode;
use eframe::egui;
use egui::accesskit::Role;
use egui_kittest::kittest::Queryable;
use egui_kittest::{Harness, SnapshotOptions};

mod common;
use common::gui::{result_image, settle};

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
            app.rt.capture.hide_timings = true;
            app
        })
}

fn sample() -> Harness<'static, App> {
    harness(app::sample(), Some(app::sample_label()))
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
    let g0 = h.state().rt.work.generation;
    // A rotation slider, through accesskit as a screen reader would.
    slider(&h, "about axis 0 (I–S)").set_value_accesskit(20.0);
    settle(&mut h);
    assert_eq!(h.state().state.params.rotate_deg[0], 20.0);
    assert!(h.state().rt.work.generation > g0);
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
        .work
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
    let full = app.rt.work.full.as_ref().expect("result");
    // No GPU here: the CUDA choice falls back to the CPU engine with a note, never a crash.
    if app
        .rt
        .gpu
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
    // The Display section sits low in the scrolling controls panel.
    h.get_by_label("viridis").scroll_to_me();
    h.run_steps(3);
    h.get_by_label("viridis").click();
    // An MR: percentile windows, no CT windows in HU.
    assert!(h.query_by_label("Bone").is_none());
    h.get_by_label("2–98 %").click();
    settle(&mut h);
    let (_, w, l) = h.state().rt.scan.as_ref().expect("scan").loaded.windows[1].clone();
    let d = &h.state().state.display;
    assert_eq!((d.level, d.width), (Some(l), Some(w)));
    h.get_by_label("Auto").click();
    h.get_by_label("difference map |aug − orig|").click();
    h.state_mut().state.params.translate_vox = [0.0, 10.0, -8.0];
    settle(&mut h);
    h.snapshot_options("difference_viridis", &snapshot_options());
}

/// A DICOM image opens at its own window (MR_small: centre 600, width 1600), not at the
/// percentiles; "Auto" then takes the percentiles.
#[test]
fn a_dicom_scan_opens_at_its_own_window() {
    let mr = common::fixtures::data("dicom/MR_small.dcm");
    let mut h = harness(mr, None);
    settle(&mut h);
    let d = &h.state().state.display;
    assert_eq!((d.level, d.width), (Some(600.0), Some(1600.0)));
    h.get_by_label("Auto").click();
    settle(&mut h);
    let d = &h.state().state.display;
    assert_ne!((d.level, d.width), (Some(600.0), Some(1600.0)));
}

/// A label map of another shape is not used, and says so for as long as the scan is open: the
/// note stays after the transform has run, and the Scan panel marks the map as ignored.
#[test]
fn a_label_map_of_another_shape_stays_reported() {
    let other = common::fixtures::data("io/i32.nii");
    let mut h = harness(app::sample(), Some(other));
    settle(&mut h);
    h.state_mut().state.params.rotate_deg = [5.0, 0.0, 0.0];
    settle(&mut h);
    let note = h.state().rt.note.clone().unwrap_or_default();
    assert!(note.contains("label map ignored"), "{note:?}");
    assert!(
        h.state()
            .rt
            .scan
            .as_ref()
            .is_some_and(|s| s.loaded.label.is_none())
    );
    h.get_by_label("i32.nii (ignored)");
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
    let c = app.rt.gpu.comparison.as_ref().expect("comparison computed");
    assert_eq!(c.generation, app.rt.work.generation);
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

#[test]
fn sample_from_a_bundled_preset() {
    let mut h = sample();
    settle(&mut h);
    h.state_mut().state.preset = "nnunet-v1-3d".into();
    h.get_by_label("Sample from preset").click();
    settle(&mut h);
    let app = h.state();
    let (params, done, _) = app.rt.sampled.as_ref().expect("a sample");
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

/// A small scan with a label map, written as NIfTI into `dir`: values vary along every axis, so
/// a wrong plane or a shifted sample shows.
fn small_scan(dir: &std::path::Path, shape: [usize; 3]) -> (PathBuf, PathBuf) {
    use augscope::io::{SaveOptions, save};
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
    let labels: Vec<f32> = (0..n)
        .map(|i| {
            ((i / shape[2]) % shape[1] > shape[1] / 2) as u8 as f32 + (i % 5 == 0) as u8 as f32
        })
        .collect();
    let img = dir.join("small.nii.gz");
    let lab = dir.join("small_labels.nii.gz");
    save(
        &img,
        &augscope::Volume::new(data, shape.to_vec(), 1),
        &SaveOptions::default(),
    )
    .expect("write image");
    save(
        &lab,
        &augscope::Volume::new(labels, shape.to_vec(), 1),
        &SaveOptions { keep_dtype: true },
    )
    .expect("write labels");
    (img, lab)
}

fn manifest(dir: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("manifest.jsonl"))
        .expect("manifest")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a whole JSON line"))
        .collect()
}

/// Opens File → Export batch… and returns with the dialog shown.
fn open_export_dialog(h: &mut Harness<'_, App>) {
    h.get_by_label("File").click();
    h.run_steps(2);
    h.get_by_label("Export batch…").click();
    // Command applied, then the window's sizing pass, then drawn.
    h.run_steps(4);
    assert!(h.state().rt.windows.export.open, "the dialog opens");
}

#[test]
fn export_dialog_writes_a_batch_like_the_cli() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (img, lab) = small_scan(dir.path(), [10, 12, 14]);
    let mut h = harness(img, Some(lab));
    settle(&mut h);
    {
        let p = &mut h.state_mut().state.params;
        p.rotate_deg = [10.0, 0.0, -5.0];
        p.translate_vox = [0.0, 1.5, 0.0];
        p.elastic = true;
        p.alpha = 40.0;
        p.sigma_vox = 2.0;
        p.seed = 7;
    }
    settle(&mut h);
    open_export_dialog(&mut h);
    let out = dir.path().join("batch");
    // The dialog's own fields, as a user fills them.
    h.get_all_by_role_and_label(Role::SpinButton, "samples")
        .next()
        .expect("samples field")
        .set_value_accesskit(3.0);
    h.run_steps(2);
    h.get_by_label("view's seed").click();
    h.run_steps(2);
    let folder = h
        .get_all_by_role_and_label(Role::TextInput, "output folder")
        .next()
        .expect("folder field");
    folder.focus();
    folder.type_text(&out.display().to_string());
    h.run_steps(2);
    let s = &h.state().state.export;
    assert_eq!((s.count, s.seed, s.from_preset), (3, 7, false));
    assert_eq!(s.out_dir, out.display().to_string());
    h.get_by_label("Export").click();
    h.run_steps(1);
    assert!(h.state().rt.windows.export.running() || h.state().rt.windows.export.last.is_some());
    settle(&mut h);

    let app = h.state();
    let summary = match &app.rt.windows.export.last {
        Some(Ok(s)) => s.clone(),
        other => panic!(
            "the export did not finish: {:?}",
            other.as_ref().map(|_| ())
        ),
    };
    assert_eq!((summary.written, summary.total), (3, 3));
    assert!(!summary.interrupted);
    // Parallel writers append in the order they finish.
    let mut lines = manifest(&out);
    lines.sort_by_key(|l| l["seed"].as_u64());
    let seeds: Vec<u64> = lines
        .iter()
        .map(|l| l["seed"].as_u64().unwrap_or(0))
        .collect();
    assert_eq!(seeds, [7, 8, 9]);
    for l in &lines {
        assert_eq!(l["preset"], "current parameters");
        for key in ["output", "label_output"] {
            let p = PathBuf::from(l[key].as_str().expect("a path"));
            assert!(p.is_file(), "{}", p.display());
        }
    }
    // The first sample uses the view's seed: it is the volume on screen, voxel for voxel.
    let load = |p: &str| {
        augscope::io::load(std::path::Path::new(p), &Default::default()).expect("reads back")
    };
    let first = load(lines[0]["output"].as_str().unwrap_or_default());
    let first_label = load(lines[0]["label_output"].as_str().unwrap_or_default());
    let full = app.rt.work.full.as_ref().expect("the view's volume");
    assert_eq!(first.shape, full.image.shape);
    assert!(
        first.data == full.image.data,
        "sample 0 differs from the view"
    );
    assert!(
        Some(&first_label.data) == full.label.as_ref().map(|l| &l.data),
        "label 0 differs from the view"
    );
    // Other seeds draw other elastic noise.
    let second = load(lines[1]["output"].as_str().unwrap_or_default());
    assert!(second.data != first.data);
}

#[test]
fn export_cancel_leaves_whole_files_only() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (img, lab) = small_scan(dir.path(), [10, 12, 14]);
    let mut h = harness(img, Some(lab));
    settle(&mut h);
    h.state_mut().state.params.rotate_deg = [5.0, 0.0, 0.0];
    settle(&mut h);
    let out = dir.path().join("batch");
    {
        let e = &mut h.state_mut().state.export;
        e.count = 100_000;
        e.out_dir = out.display().to_string();
        e.from_preset = true;
    }
    h.state_mut().state.preset = "nnunet-v2".into();
    open_export_dialog(&mut h);
    h.get_by_label("Export").click();
    // Wait for some samples, then cancel through the dialog.
    let start = Instant::now();
    loop {
        h.step();
        let written = h
            .state()
            .rt
            .windows
            .export
            .job
            .as_ref()
            .map_or(0, |j| j.counter.get().0);
        if written >= 2 {
            break;
        }
        assert!(
            h.state().rt.windows.export.running(),
            "{:?}",
            h.state()
                .rt
                .windows
                .export
                .last
                .as_ref()
                .map(|r| r.as_ref().err())
        );
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "no sample written"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    h.get_by_label("Cancel").click();
    settle(&mut h);
    let summary = match &h.state().rt.windows.export.last {
        Some(Ok(s)) => s.clone(),
        _ => panic!("the export did not end cleanly"),
    };
    assert!(summary.interrupted);
    assert!(summary.written >= 2 && summary.written < 100_000);
    // The manifest lists exactly the files in the folder, and each reads back whole.
    let lines = manifest(&out);
    assert_eq!(lines.len(), summary.written);
    let mut listed: Vec<String> = vec!["manifest.jsonl".into()];
    for l in &lines {
        assert_eq!(l["preset"], "nnU-Net v2 default");
        for key in ["output", "label_output"] {
            let p = PathBuf::from(l[key].as_str().expect("a path"));
            augscope::io::load(&p, &Default::default()).expect("a whole file");
            listed.push(p.file_name().unwrap().to_string_lossy().into_owned());
        }
    }
    let mut present: Vec<String> = std::fs::read_dir(&out)
        .expect("folder")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    listed.sort();
    present.sort();
    assert_eq!(present, listed, "only whole, listed files (no temporaries)");
}

/// The worker's whole-volume fill (one plane at a time, for cancellation) gives the values of
/// the engine's whole-volume transform, bit for bit.
#[test]
fn fill_volume_equals_the_whole_transform() {
    use augscope::app::worker::fill_volume;
    use augscope::augment::{Elastic, Order, Plan};
    use augscope::engine::{apply_new, cpu::CpuBackend};
    let dir = tempfile::tempdir().expect("temp dir");
    let (img, lab) = small_scan(dir.path(), [9, 11, 13]);
    let image = augscope::io::load(&img, &Default::default()).expect("image");
    let label = augscope::io::load(&lab, &Default::default()).expect("label");
    let plans = [
        Plan {
            rotate_rad: vec![0.2, -0.1, 0.3],
            elastic: Some(Elastic {
                alpha: 30.0,
                sigma: 2.0,
                seed: 5,
            }),
            ..Default::default()
        },
        Plan {
            flip: vec![0, 2],
            scale: vec![1.1, 0.9, 1.0],
            translate: vec![1.0, -2.0, 0.5],
            order: Order::Cubic,
            mode: Mode::Mirror,
            ..Default::default()
        },
    ];
    for plan in plans {
        let cpu = CpuBackend::new();
        let (want, want_lab, _) = apply_new(&cpu, &plan, &image, Some(&label)).expect("apply");
        let (got, got_lab, _) =
            fill_volume(&CpuBackend::new(), &plan, &image, Some(&label), &|_, _| {
                false
            })
            .expect("fill")
            .expect("not superseded");
        assert!(got.data == want.data, "{plan:?}");
        assert!(
            got_lab.map(|l| l.data) == want_lab.map(|l| l.data),
            "{plan:?}"
        );
    }
}

/// A fill that is superseded stops within a plane and gives nothing.
#[test]
fn fill_volume_stops_between_planes() {
    use augscope::app::worker::fill_volume;
    use augscope::engine::cpu::CpuBackend;
    use std::cell::Cell;
    let dir = tempfile::tempdir().expect("temp dir");
    let (img, _) = small_scan(dir.path(), [20, 11, 13]);
    let image = augscope::io::load(&img, &Default::default()).expect("image");
    let plan = augscope::Plan {
        rotate_rad: vec![0.2, 0.0, 0.0],
        ..Default::default()
    };
    let asked = Cell::new(0);
    let r = fill_volume(&CpuBackend::new(), &plan, &image, None, &|_, _| {
        asked.set(asked.get() + 1);
        asked.get() > 3
    })
    .expect("no error");
    assert!(r.is_none());
    assert_eq!(asked.get(), 4, "asked before every plane, stopped at once");
}

/// Through the worker thread: a newer request while the whole volume is being filled abandons
/// that fill (its volume never arrives) and is served at once.
#[test]
fn worker_abandons_a_superseded_fill() {
    use augscope::app::worker::{Compute, Reply, Worker};
    use augscope::engine::BackendSpec;
    let dir = tempfile::tempdir().expect("temp dir");
    // Large enough that the fill (field, then 96 planes) outlasts posting the next request.
    let (img, _) = small_scan(dir.path(), [96, 120, 120]);
    let w = Worker::spawn(|| {}).expect("worker");
    w.load(img, None);
    let wait = |what: &str, pick: &dyn Fn(&Reply) -> bool| -> Vec<Reply> {
        let start = Instant::now();
        let mut seen = vec![];
        loop {
            let r = w
                .recv_timeout(Duration::from_secs(120))
                .unwrap_or_else(|| panic!("no {what}"));
            let done = pick(&r);
            seen.push(r);
            if done {
                return seen;
            }
            assert!(start.elapsed() < Duration::from_secs(300), "no {what}");
        }
    };
    let loaded = wait("load", &|r| matches!(r, Reply::Loaded(_)));
    let Some(Reply::Loaded(Ok(l))) = loaded.last() else {
        panic!("not loaded")
    };
    let views = augscope::app::slices::views(&l.image);
    let cursor: Vec<usize> = l.image.shape.iter().map(|n| n / 2).collect();
    let mut params = app::Params {
        elastic: true,
        alpha: 200.0,
        sigma_vox: 6.0,
        ..Default::default()
    };
    let request = |generation: u64, params: &app::Params| Compute {
        generation,
        plan: params.to_plan(3, &[1.0; 3]),
        backend: BackendSpec::Cpu,
        precision: Default::default(),
        cursor: cursor.clone(),
        views: views.clone(),
        slices_first: true,
        filter: None,
        normalize: None,
        model: Default::default(),
    };
    w.compute(request(1, &params));
    wait(
        "slices of 1",
        &|r| matches!(r, Reply::Slices(s) if s.generation == 1),
    );
    wait("fill of 1", &|r| matches!(r, Reply::Filling(1)));
    params.seed += 1;
    let posted = Instant::now();
    w.compute(request(2, &params));
    let seen = wait(
        "volume of 2",
        &|r| matches!(r, Reply::Full(f) if f.generation == 2),
    );
    assert!(
        !seen
            .iter()
            .any(|r| matches!(r, Reply::Full(f) if f.generation == 1)),
        "the superseded fill delivered its volume"
    );
    let slices_2 = seen
        .iter()
        .position(|r| matches!(r, Reply::Slices(s) if s.generation == 2))
        .expect("slices of 2");
    let full_2 = seen.len() - 1;
    assert!(slices_2 < full_2);
    println!("request 2 served: volume after {:?}", posted.elapsed());
}

/// The slice-only path (views on their own engines at once, or all on the main engine when it
/// holds the volume field) shows the planes of the whole transform.
#[test]
fn slice_path_planes_match_the_whole_volume() {
    use augscope::app::worker::{Compute, SliceEngines, compute_slices};
    use augscope::augment::{Elastic, Plan};
    use augscope::engine::cpu::CpuBackend;
    use augscope::engine::{BackendSpec, Prepare, apply_new};
    let dir = tempfile::tempdir().expect("temp dir");
    let (img, lab) = small_scan(dir.path(), [13, 11, 15]);
    let image = augscope::io::load(&img, &Default::default()).expect("image");
    let label = augscope::io::load(&lab, &Default::default()).expect("label");
    let plan = Plan {
        rotate_rad: vec![0.3, 0.0, -0.2],
        elastic: Some(Elastic {
            alpha: 40.0,
            sigma: 2.5,
            seed: 3,
        }),
        ..Default::default()
    };
    let views = augscope::app::slices::views(&image);
    let cursor = vec![4, 7, 9];
    let c = Compute {
        generation: 1,
        plan: plan.clone(),
        backend: BackendSpec::Cpu,
        precision: Default::default(),
        cursor: cursor.clone(),
        views: views.clone(),
        slices_first: true,
        filter: None,
        normalize: None,
        model: Default::default(),
    };
    let main = std::sync::Arc::new(CpuBackend::new());
    let (want, want_lab, _) = apply_new(main.as_ref(), &plan, &image, Some(&label)).expect("apply");
    let engines = SliceEngines::new(main);
    let out_shape = image.shape.clone();
    for main_has_field in [false, true] {
        if main_has_field {
            let field = Prepare::Field {
                plan: &plan,
                out_shape: &out_shape,
            };
            engines.main.prepare(field).expect("the field");
        } else {
            engines.main.clear_cache();
        }
        assert_eq!(engines.main.holds_field(&plan, &out_shape), main_has_field);
        let got = compute_slices(&engines, &c, (&image, Some(&label), 7)).expect("slices");
        for (i, v) in views.iter().enumerate() {
            let idx = cursor[v.normal.expect("3D")];
            let sp = &image.spacing_mm;
            let w = augscope::app::slices::extract(&want.data, &want.shape, 1, sp, v, idx);
            let g = &got.image[i];
            assert_eq!((g.width, g.height), (w.width, w.height));
            let worst = g
                .data
                .iter()
                .zip(&w.data)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            // The plane's own field equals the volume field to f32 rounding.
            assert!(worst < 1e-4, "{} view {i}: {worst}", main_has_field);
            let wl = want_lab.as_ref().expect("label");
            let wl = augscope::app::slices::extract(&wl.data, &wl.shape, 1, sp, v, idx);
            let gl = got.label[i].as_ref().expect("label plane");
            let differ = gl.data.iter().zip(&wl.data).filter(|(a, b)| a != b).count();
            assert!(differ <= 2, "{differ} label voxels differ in view {i}");
        }
    }
}

/// The filter panel, as a user drives it: open the section, enable the (default) gaussian before
/// the transform, move its sigma. The view is the scan filtered by `filter::apply_cpu`, then
/// transformed, voxel for voxel; the label map is transformed only; a transform change reuses
/// the filtered scan.
#[test]
fn filter_panel_gaussian_before_the_transform() {
    use augscope::augment::Mode;
    use augscope::engine::{apply_new, cpu::CpuBackend};
    use augscope::filter::{Boundary, Filter, apply_cpu};
    let dir = tempfile::tempdir().expect("temp dir");
    let (img, lab) = small_scan(dir.path(), [10, 12, 14]);
    let mut h = harness(img.clone(), Some(lab.clone()));
    settle(&mut h);
    h.state_mut().state.params.rotate_deg = [15.0, 0.0, -5.0];
    settle(&mut h);
    let unfiltered = result_image(&h);
    h.get_by_label("Filter (off)").click();
    h.run_steps(2);
    h.get_by_label("filter enabled").click();
    h.run_steps(2);
    slider(&h, "filter sigma").set_value_accesskit(2.0);
    settle(&mut h);
    let app = h.state();
    let f = &app.state.params.filter;
    assert!(f.enabled);
    assert_eq!(f.kind, app::state::FilterKind::Gaussian);
    assert_eq!(f.stage, app::state::FilterStage::Before);
    assert_eq!(f.sigma_vox, 2.0);
    let full = app.rt.work.full.as_ref().expect("result");
    assert!(full.image.data != unfiltered, "the filter changed the view");
    let image = augscope::io::load(&img, &Default::default()).expect("image");
    let label = augscope::io::load(&lab, &Default::default()).expect("label");
    let boundary = Boundary {
        mode: Mode::Reflect,
        cval: 0.0,
    };
    let filtered = apply_cpu(
        &Filter::Gaussian { sigma: vec![2.0] },
        boundary,
        &image.data,
        &image.shape,
    )
    .expect("filter");
    let mut fv = image.clone();
    fv.data = filtered;
    let (want, want_lab, _) =
        apply_new(&CpuBackend::new(), &app.plan(), &fv, Some(&label)).expect("transform");
    assert!(full.image.data == want.data, "filtered, then transformed");
    assert!(
        full.label.as_ref().map(|l| &l.data) == want_lab.as_ref().map(|l| &l.data),
        "the label map is never filtered"
    );
    let report = full.filter.as_ref().expect("filter report");
    assert_eq!((report.name, report.backend.as_str()), ("gaussian", "cpu"));
    // Shown in the timings and first in the done list.
    h.get_by_label("filter gaussian");
    h.get_by_label("filter: gaussian");
    // Moving a transform reads the kept filtered scan.
    h.state_mut().state.params.rotate_deg = [25.0, 0.0, -5.0];
    settle(&mut h);
    let full = h.state().rt.work.full.as_ref().expect("result");
    assert!(full.filter.as_ref().expect("report").cached);
}

/// A 2D 12-bit image with three bright 3×3 spots on a smooth background: FEBDS through the
/// panel draws a mask over the spots, computed on the plane on screen, and leaves the image as
/// it is.
#[test]
fn filter_panel_febds_overlay_marks_the_spots() {
    use augscope::filter::febds;
    let dir = tempfile::tempdir().expect("temp dir");
    let (hgt, wid) = (96usize, 112usize);
    let spots = [(20usize, 30usize), (50, 70), (72, 25)];
    let mut data: Vec<f32> = (0..hgt * wid)
        .map(|i| {
            let (y, x) = ((i / wid) as f32, (i % wid) as f32);
            800.0 + 3.0 * x + 2.0 * y + ((i * 7919) % 13) as f32
        })
        .collect();
    for &(y, x) in &spots {
        for dy in 0..3 {
            for dx in 0..3 {
                data[(y + dy) * wid + x + dx] = 3000.0;
            }
        }
    }
    let path = dir.path().join("spots.npy");
    augscope::io::save(
        &path,
        &augscope::Volume::new(data.clone(), vec![hgt, wid], 1),
        &Default::default(),
    )
    .expect("write npy");
    let mut h = harness(path, None);
    settle(&mut h);
    h.get_by_label("Filter (off)").click();
    h.run_steps(2);
    h.get_by_label("filter enabled").click();
    h.run_steps(2);
    h.get_all_by_role_and_label(Role::ComboBox, "filter")
        .next()
        .expect("filter kind")
        .click();
    h.run_steps(2);
    h.get_by_label("FEBDS mask (overlay)").click();
    settle(&mut h);
    let app = h.state();
    assert_eq!(
        app.state.params.filter.febds(),
        Some(augscope::filter::FebdsMethod::Dog)
    );
    // The image itself is not filtered (identity transform: the scan).
    let full = app.rt.work.full.as_ref().expect("result");
    assert!(full.image.data == data);
    assert!(full.filter.is_none());
    // Values within 256..4095 are 12-bit data and reach FEBDS unchanged.
    let want = febds::febds(&data, [hgt, wid], febds::Method::Dog);
    let shown = app.rt.work.shown.as_ref().expect("planes");
    let masks = app.rt.febds.masks.as_ref().expect("masks");
    let aug = masks
        .mask_for(shown.image[0].id)
        .expect("mask of the augmented plane");
    let orig = masks
        .mask_for(app.rt.views.original[0].id)
        .expect("mask of the original");
    assert!(aug.data == want && orig.data == want);
    for &(y, x) in &spots {
        assert_eq!(aug.data[(y + 1) * wid + x + 1], 1.0, "spot at {y}, {x}");
    }
    let on = aug.data.iter().filter(|&&v| v == 1.0).count();
    assert!(on >= 27 && on < hgt * wid / 10, "{on} mask pixels");
    assert!(app.rt.error.is_none());
    h.snapshot_options("febds_overlay", &snapshot_options());
}

/// Opens a File menu entry and returns with its window shown.
fn open_from_file_menu(h: &mut Harness<'_, App>, entry: &str) {
    h.get_by_label("File").click();
    h.run_steps(2);
    h.get_by_label(entry).click();
    h.run_steps(4);
}

fn type_into(h: &mut Harness<'_, App>, label: &str, text: &str) {
    let field = h
        .get_all_by_role_and_label(Role::TextInput, label)
        .next()
        .unwrap_or_else(|| panic!("a text field {label:?}"));
    field.focus();
    field.type_text(text);
    h.run_steps(2);
}

fn tuned(h: &mut Harness<'_, App>) {
    let p = &mut h.state_mut().state.params;
    p.rotate_deg = [12.0, -4.0, 30.0];
    p.scale = [1.15; 3];
    p.translate_vox = [0.0, 2.0, -1.0];
    p.elastic = true;
    p.alpha = 30.0;
    p.sigma_vox = 3.0;
}

#[test]
fn save_preset_writes_the_tuned_parameters_as_toml() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (img, lab) = small_scan(dir.path(), [10, 12, 14]);
    let mut h = harness(img, Some(lab));
    settle(&mut h);
    tuned(&mut h);
    settle(&mut h);
    open_from_file_menu(&mut h, "Save preset…");
    assert!(h.state().rt.windows.code.save.open, "the window opens");
    let path = dir.path().join("tuned.toml");
    assert_eq!(h.state().rt.windows.code.save.name, "my preset");
    h.state_mut().rt.windows.code.save.name.clear();
    h.run_steps(1);
    type_into(&mut h, "name", "my tuned brain");
    let field = h
        .get_all_by_role_and_label(Role::MultilineTextInput, "description")
        .next()
        .expect("description field");
    field.focus();
    field.type_text("rotation, scale and a mild elastic");
    h.run_steps(2);
    type_into(&mut h, "file", &path.display().to_string());
    h.get_all_by_label("Save")
        .last()
        .expect("Save button")
        .click();
    h.run_steps(3);
    let app = h.state();
    let status = app.rt.windows.code.save.status.clone().expect("a status");
    assert!(status.is_ok(), "{status:?}");
    let mut want = augscope::app::export::preset_from_params(&app.state.params, 3);
    want.name = "my tuned brain".into();
    want.description = "rotation, scale and a mild elastic".into();
    let text = std::fs::read_to_string(&path).expect("the preset file");
    assert_eq!(text, want.to_toml());
    assert!(text.starts_with("version = 1\n"), "{text}");
    let back = augscope::augment::preset::Preset::parse(&text).expect("reads back");
    assert_eq!(back, want);
    // The saved file becomes the preset of the controls and the first recent preset.
    assert_eq!(app.state.preset, path.display().to_string());
    assert_eq!(app.state.recent_presets[0], path.display().to_string());
}

#[test]
fn copy_puts_exactly_the_preset_export_text_on_the_clipboard() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (img, lab) = small_scan(dir.path(), [10, 12, 14]);
    let mut h = harness(img, Some(lab));
    settle(&mut h);
    tuned(&mut h);
    settle(&mut h);
    // The same preset as a file, for the CLI.
    let preset = augscope::app::export::preset_from_params(&h.state().state.params, 3);
    let preset_path = dir.path().join("current.toml");
    std::fs::write(&preset_path, preset.to_toml()).expect("write preset");
    // A preset's text may hold characters the bundled fonts lack: the app draws a box for them.
    h.ctx
        .set_missing_glyph_policy(egui::MissingGlyphPolicy::Tofu);
    open_from_file_menu(&mut h, "Export code…");
    assert!(h.state().rt.windows.code.open, "the window opens");
    // The preset in use is the default; these are the parameters on screen.
    h.get_by_label("current parameters").click();
    h.run_steps(2);
    assert!(!h.state().rt.windows.code.from_preset);
    for (tab, flag) in [
        ("TorchIO", "torchio"),
        ("MONAI", "monai"),
        ("nnU-Net v2 trainer", "nnunet"),
        ("batchgenerators", "batchgenerators"),
    ] {
        h.get_by_label(tab).click();
        h.run_steps(2);
        h.get_by_label("Copy").click();
        // The frame that handles the click carries the clipboard command in its output.
        let mut copied: Vec<String> = vec![];
        for _ in 0..4 {
            h.step();
            copied.extend(
                h.output()
                    .platform_output
                    .commands
                    .iter()
                    .filter_map(|c| match c {
                        egui::OutputCommand::CopyText(t) => Some(t.clone()),
                        _ => None,
                    }),
            );
        }
        let cli = common::cli::command()
            .args(["preset", "export", "--to", flag, "--ndim", "3"])
            .arg(&preset_path)
            .output()
            .expect("augscope runs");
        assert!(cli.status.success());
        let want = String::from_utf8(cli.stdout).expect("utf-8");
        assert_eq!(copied.last(), Some(&want), "{tab}");
    }
}

#[test]
fn editing_a_range_and_saving_writes_the_expected_toml() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (img, lab) = small_scan(dir.path(), [10, 12, 14]);
    let mut h = harness(img, Some(lab));
    settle(&mut h);
    h.state_mut().state.preset = "nnunet-v2".into();
    h.run_steps(2);
    h.get_by_label("Edit…").click();
    h.run_steps(8);
    assert!(h.state().rt.windows.editor.open, "the editor opens");
    let bundled = augscope::augment::preset::load_or_bundled("nnunet-v2".as_ref()).expect("preset");
    assert_eq!(h.state().state.draft.as_ref(), Some(&bundled));
    assert!(!h.state().rt.windows.editor.unsaved(&h.state().state));
    // The rotation's lower end, as a user drags or types it: -30 becomes -12.5 degrees.
    h.get_all_by_role_and_label(Role::SpinButton, "all axes")
        .find(|n| n.value().as_deref() == Some("-30.0°"))
        .expect("the rotation's lower end")
        .set_value_accesskit(-12.5);
    h.run_steps(3);
    let edited = h.state().state.draft.clone().expect("a draft");
    assert_eq!(
        edited.rotate.as_ref().expect("rotate").range_deg,
        vec![[-12.5, 30.0]]
    );
    assert!(h.state().rt.windows.editor.unsaved(&h.state().state));
    assert!(h.state().title().ends_with('*'), "{}", h.state().title());
    // An invalid edit is reported with the TOML loader's message.
    let set_lower = |h: &mut Harness<'_, App>, from: &str, to: f64| {
        h.get_all_by_role_and_label(Role::SpinButton, "all axes")
            .find(|n| n.value().as_deref() == Some(from))
            .expect("the rotation's lower end")
            .set_value_accesskit(to);
        h.run_steps(3);
    };
    set_lower(&mut h, "-12.5°", 45.0);
    let mut bad = edited.clone();
    bad.rotate.as_mut().expect("rotate").range_deg = vec![[45.0, 30.0]];
    let want = bad
        .validate()
        .expect_err("an empty range is invalid")
        .to_string();
    h.get_by_label(&want);
    set_lower(&mut h, "45.0°", -12.5);
    assert_eq!(h.state().state.draft.as_ref(), Some(&edited));
    // Every settled edit is an undo step: back through 45° and -12.5° to the bundled range, and
    // forward again.
    settle(&mut h);
    let range_of = |h: &Harness<'_, App>| {
        h.state()
            .state
            .draft
            .as_ref()
            .and_then(|d| d.rotate.as_ref())
            .map(|r| r.range_deg.clone())
    };
    for want in [[45.0, 30.0], [-12.5, 30.0], [-30.0, 30.0]] {
        h.get_by_label("Undo").click();
        h.run_steps(3);
        assert_eq!(range_of(&h), Some(vec![want]));
    }
    assert_eq!(h.state().state.draft.as_ref(), Some(&bundled));
    for _ in 0..3 {
        h.get_by_label("Redo").click();
        h.run_steps(3);
    }
    assert_eq!(h.state().state.draft.as_ref(), Some(&edited));
    // Save preset… from the editor writes exactly the edited preset.
    h.get_by_label("Save preset…").click();
    h.run_steps(4);
    let path = dir.path().join("edited.toml");
    type_into(&mut h, "file", &path.display().to_string());
    h.get_all_by_label("Save")
        .last()
        .expect("Save button")
        .click();
    h.run_steps(3);
    let text = std::fs::read_to_string(&path).expect("saved");
    assert_eq!(text, edited.to_toml());
    assert!(!h.state().rt.windows.editor.unsaved(&h.state().state));
    assert!(!h.state().title().ends_with('*'), "{}", h.state().title());
    // The edited preset is the one sampled and exported.
    let app = h.state();
    let used = augscope::app::export::chosen_preset(&app.state, 3, true).expect("preset");
    assert_eq!(used, edited);
}

#[test]
fn a_preset_centred_on_the_plan_samples_near_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (img, lab) = small_scan(dir.path(), [10, 12, 14]);
    let mut h = harness(img, Some(lab));
    settle(&mut h);
    tuned(&mut h);
    settle(&mut h);
    h.get_by_label("Edit…").click();
    h.run_steps(4);
    h.get_by_label("From current plan").click();
    h.run_steps(3);
    let p = h.state().state.draft.clone().expect("a draft");
    let r = &p.rotate.as_ref().expect("rotate").range_deg;
    assert_eq!(r, &vec![[2.0, 22.0], [-14.0, 6.0], [20.0, 40.0]]);
    let s = &p.scale.as_ref().expect("scale").range;
    assert!(
        (s[0][0] - 1.05).abs() < 1e-12 && (s[0][1] - 1.25).abs() < 1e-12,
        "{s:?}"
    );
    // Sample draws a plan inside the ranges into the sliders.
    h.get_by_label("Sample").click();
    h.run_steps(3);
    let deg = h.state().state.params.rotate_deg;
    for (d, g) in deg.iter().zip(r) {
        assert!(*d >= g[0] && *d <= g[1], "{deg:?} outside {r:?}");
    }
}

#[test]
fn a_sampled_plan_keeps_its_exact_values_in_the_sliders() {
    // Values a slider's step and decimals would round, and some beyond its range.
    let dir = tempfile::tempdir().expect("temp dir");
    let (img, lab) = small_scan(dir.path(), [10, 12, 14]);
    let mut h = harness(img, Some(lab));
    settle(&mut h);
    let preset = augscope::augment::preset::Preset::parse(
        r#"
version = 1
[rotate]
range_deg = [[12.3456, 12.3456], [-7.77, -7.77], [200.0, 200.0]]
[scale]
range = [[0.98597, 0.98597], [2.5, 2.5], [1.0001, 1.0001]]
per_axis = true
[translate]
range = [[0.123, 0.123], [-40.0, -40.0], [3.3333, 3.3333]]
[elastic]
alpha = [1234.567, 1234.567]
sigma = [0.77, 0.77]
"#,
    )
    .expect("preset");
    let want = preset.sample(5, 3, 1, &[1.0; 3]).expect("sample").plan;
    h.state_mut().state.draft = Some(preset);
    h.state_mut().state.preset_seed = 5;
    h.run_steps(2);
    h.get_by_label("Sample from preset").click();
    settle(&mut h);
    settle(&mut h);
    let plan = h.state().plan();
    assert_eq!(plan.rotate_rad, want.rotate_rad);
    assert_eq!(plan.scale, want.scale);
    assert_eq!(plan.translate, want.translate);
    assert_eq!(
        plan.elastic.map(|e| (e.alpha, e.sigma)),
        want.elastic.map(|e| (e.alpha, e.sigma))
    );
}
