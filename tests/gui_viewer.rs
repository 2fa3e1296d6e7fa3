//! The viewer's readouts and scan handling, driven through egui_kittest (wgpu on lavapipe): the
//! voxel under the pointer, the volume selector of a 4D scan, voxel/mm units, window presets that
//! suit the scan, and the progress of the whole-volume fill.
#![cfg(feature = "gui")]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use augscope::Volume;
use augscope::app::browse::Purpose;
use augscope::app::{App, BackendChoice, Command, Hover};
use augscope::augment::Space;
use augscope::io::{self, SaveOptions};
use eframe::egui;
use egui::accesskit::Role;
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;

mod common;
use common::gui::{result_image, settle};

const SIZE: [f32; 2] = [1500.0, 940.0];

fn harness(image: PathBuf) -> Harness<'static, App> {
    Harness::builder()
        .with_size(SIZE)
        .wgpu()
        .build_eframe(move |cc| {
            let mut app = App::new(cc, Some((image, None)));
            app.rt.capture.hide_timings = true;
            // The CPU engine: the whole-volume fill reports its progress there.
            app.state.params.backend = BackendChoice::Cpu;
            app
        })
}

/// A NIfTI scan of `shape` (`[z, y, x]`) with `channels` volumes whose voxel at linear index i of
/// volume c holds `1000 c + i`, with anisotropic spacing and an oblique-free LAS affine.
fn scan(dir: &Path, name: &str, shape: [usize; 3], channels: usize) -> (PathBuf, Volume) {
    let n: usize = shape.iter().product();
    let data = (0..channels * n)
        .map(|i| (1000 * (i / n) + i % n) as f32)
        .collect();
    let mut v = Volume::new(data, shape.to_vec(), channels);
    v.spacing_mm = vec![3.0, 1.5, 1.0];
    // (i, j, k) = (x, y, z): x toward L (−1 mm), y toward A, z toward S, with an offset.
    v.world_from_voxel = [
        [-1.0, 0.0, 0.0, 20.0],
        [0.0, 1.5, 0.0, -30.0],
        [0.0, 0.0, 3.0, 5.0],
        [0.0, 0.0, 0.0, 1.0],
    ];
    let p = dir.join(name);
    io::save(&p, &v, &SaveOptions { keep_dtype: false }).expect("write scan");
    let back = io::load(&p, &Default::default()).expect("read back");
    (p, back)
}

/// Moves the pointer over a grid of the window until it rests on a voxel of an original view;
/// returns what the status bar's readout holds there.
fn hover_an_original_voxel(h: &mut Harness<'_, App>) -> Hover {
    for y in (120..900).step_by(37) {
        for x in (360..1200).step_by(41) {
            h.hover_at(egui::pos2(x as f32, y as f32));
            h.step();
            h.step();
            if let Some(hv) = h.state().rt.views.hover.clone()
                && hv.augmented.is_some()
            {
                return hv;
            }
        }
    }
    panic!("no position of the window shows a voxel readout");
}

fn value(v: &Volume, index: &[usize], channel: usize) -> f32 {
    let n = v.len_spatial();
    let lin = index
        .iter()
        .zip(&v.shape)
        .fold(0, |acc, (&i, &s)| acc * s + i);
    v.data[channel * n + lin]
}

/// The voxel under the pointer: its index, its value in the original and the augmented scan,
/// and its place in mm, all as the scan says.
#[test]
fn the_readout_names_the_voxel_its_values_and_its_place() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (p, vol) = scan(dir.path(), "ramp.nii", [12, 20, 16], 1);
    let mut h = harness(p);
    settle(&mut h);
    let hv = hover_an_original_voxel(&mut h);
    assert_eq!(hv.voxel.len(), 3);
    assert_eq!(hv.original, vec![value(&vol, &hv.voxel, 0)]);
    // The identity plan: the augmented value is the original one.
    assert_eq!(hv.augmented, Some(hv.original.clone()));
    // mm from the affine, by hand: (i, j, k) = (x, y, z).
    let [z, y, x] = [hv.voxel[0], hv.voxel[1], hv.voxel[2]].map(|i| i as f64);
    let want = [20.0 - x, -30.0 + 1.5 * y, 5.0 + 3.0 * z];
    let got = vol.world_mm(&hv.voxel);
    assert_eq!(got, want);
    // The status bar says it: index, mm and the value.
    let idx: Vec<String> = hv.voxel.iter().map(|i| i.to_string()).collect();
    h.get_by_label_contains(&format!(
        "[{}] · ({:.1}, {:.1}, {:.1}) mm RAS · original {}",
        idx.join(", "),
        want[0],
        want[1],
        want[2],
        hv.original[0]
    ));
    // A translation by one voxel along x: the augmented value is the neighbour's.
    h.state_mut().state.params.translate_vox = [0.0, 0.0, 1.0];
    settle(&mut h);
    let hv = hover_an_original_voxel(&mut h);
    let mut next = hv.voxel.clone();
    if next[2] + 1 < vol.shape[2] {
        next[2] += 1;
        assert_eq!(hv.augmented, Some(vec![value(&vol, &next, 0)]));
    }
}

/// A 4D scan of three volumes is three volumes, not a colour image: a selector picks the one the
/// views and the readout show.
#[test]
fn a_4d_scan_has_a_volume_selector() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (p, vol) = scan(dir.path(), "four_d.nii", [6, 10, 8], 3);
    assert_eq!(vol.channels, 3);
    assert!(!vol.is_colour());
    let mut h = harness(p);
    settle(&mut h);
    let hv = hover_an_original_voxel(&mut h);
    assert_eq!(hv.original, vec![value(&vol, &hv.voxel, 0)]);
    h.get_all_by_role_and_label(Role::Slider, "volume")
        .next()
        .expect("a volume slider")
        .set_value_accesskit(2.0);
    settle(&mut h);
    assert_eq!(h.state().rt.scan.as_ref().map(|s| s.frame), Some(2));
    let hv = hover_an_original_voxel(&mut h);
    assert_eq!(hv.original, vec![value(&vol, &hv.voxel, 2)]);
    assert!(hv.original[0] >= 2000.0);
}

/// An RGB image is drawn in colour and has no volume selector.
#[test]
fn an_rgb_image_has_no_volume_selector() {
    let dir = tempfile::tempdir().expect("temp dir");
    let p = dir.path().join("rgb.png");
    image::RgbImage::from_fn(24, 16, |x, y| image::Rgb([x as u8 * 9, y as u8 * 13, 77]))
        .save(&p)
        .expect("write png");
    let mut h = harness(p);
    settle(&mut h);
    assert!(
        h.state()
            .rt
            .scan
            .as_ref()
            .expect("scan")
            .loaded
            .image
            .is_colour()
    );
    assert!(
        h.query_all_by_role_and_label(Role::Slider, "volume")
            .next()
            .is_none()
    );
    // A plain image has no anatomy: no orientation letters.
    let views = &h.state().rt.scan.as_ref().expect("scan").views;
    assert!(views[0].letters.iter().all(String::is_empty));
}

/// Units: switching to mm converts the translation with the scan's spacing (the picture stays),
/// and the plan then acts in millimetres.
#[test]
fn the_units_switch_to_mm_and_back() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (p, _) = scan(dir.path(), "aniso.nii", [8, 12, 10], 1);
    let mut h = harness(p);
    settle(&mut h);
    h.state_mut().state.params.translate_vox = [2.0, -4.0, 1.0];
    h.state_mut().state.params.sigma_vox = 6.0;
    settle(&mut h);
    let before = result_image(&h);
    h.get_by_label("mm").click();
    settle(&mut h);
    let p = &h.state().state.params;
    assert_eq!(p.space, Space::Mm);
    assert_eq!(p.translate_vox, [6.0, -6.0, 1.0]);
    let plan = h.state().plan();
    assert_eq!(plan.space, Space::Mm);
    assert_eq!(plan.spacing_mm, vec![3.0, 1.5, 1.0]);
    // The same translation in mm: the same voxels.
    let after = result_image(&h);
    assert_eq!(before, after);
    h.get_by_label_contains("Translation (mm;");
    h.get_by_label("voxels").click();
    settle(&mut h);
    let p = &h.state().state.params;
    assert_eq!(p.space, Space::Voxel);
    assert_eq!(p.translate_vox, [2.0, -4.0, 1.0]);
}

/// The realised displacement is read out in the plan's own unit: in mm space the engine's figure
/// is millimetres and says so, with voxels beside it, never millimetres labelled as voxels.
#[test]
fn the_displacement_readout_names_the_plans_unit() {
    use augscope::engine::Backend;
    use egui_kittest::kittest::NodeT;
    let dir = tempfile::tempdir().expect("temp dir");
    let (p, _) = scan(dir.path(), "aniso.nii", [8, 12, 10], 1);
    let mut h = harness(p);
    settle(&mut h);
    {
        let params = &mut h.state_mut().state.params;
        params.elastic = true;
        params.alpha = 40.0;
        params.sigma_vox = 3.0;
    }
    settle(&mut h);
    for (space, unit, other) in [(Space::Voxel, "vox", "mm"), (Space::Mm, "mm", "vox")] {
        if h.state().state.params.space != space {
            h.get_by_label(if space == Space::Mm { "mm" } else { "voxels" })
                .click();
        }
        settle(&mut h);
        let plan = h.state().plan();
        assert_eq!(plan.space, space);
        let (max, _) = augscope::engine::cpu::CpuBackend::new()
            .displacement_stats(&plan, &[8, 12, 10])
            .expect("stats")
            .expect("a field");
        let node = h
            .query_all_by_label_contains("realised displacement")
            .next()
            .expect("a readout");
        let line = node
            .accesskit_node()
            .label()
            .or_else(|| node.value())
            .unwrap_or_default();
        assert!(
            line.contains(&format!(" {unit} (≈ ")) && line.contains(&format!(" {other})")),
            "{space:?}: {line}"
        );
        let shown: f64 = line
            .split("max ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|v| v.parse().ok())
            .expect("a number after max");
        assert!(
            (shown - max).abs() <= 0.006 * max.max(1.0),
            "{space:?}: {line} vs {max}"
        );
    }
}

/// The whole-volume fill on the CPU reports how far it is (after its first plane, then a few
/// times a second), and the status bar draws the progress with the share done.
#[test]
fn the_whole_volume_fill_reports_its_progress() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (p, _) = scan(dir.path(), "big.nii", [48, 64, 64], 1);
    let mut h = harness(p);
    settle(&mut h);
    {
        let params = &mut h.state_mut().state.params;
        params.rotate_deg = [7.0, 3.0, 0.0];
        params.order = augscope::augment::Order::Cubic;
    }
    let start = Instant::now();
    let mut seen: Vec<(usize, usize)> = vec![];
    loop {
        h.step();
        let app = h.state();
        if let Some(p) = app
            .rt
            .work
            .progress
            .filter(|p| p.generation == app.rt.work.generation)
            && seen.last() != Some(&(p.done, p.total))
        {
            seen.push((p.done, p.total));
        }
        if app.is_idle()
            && app
                .rt
                .work
                .full
                .as_ref()
                .is_some_and(|f| f.generation == app.rt.work.generation)
        {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(300), "no result");
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(!seen.is_empty(), "no progress was reported");
    assert!(
        seen.iter().all(|&(d, t)| t == 48 && d > 0 && d <= t),
        "{seen:?}"
    );
    assert!(seen.windows(2).all(|w| w[0].0 < w[1].0), "{seen:?}");
    // The bar, as it reads halfway through a fill.
    let g = h.state().rt.work.generation;
    {
        let rt = &mut h.state_mut().rt;
        rt.work.full = None;
        rt.work.filling = Some(g);
        rt.work.progress = Some(augscope::app::Progress {
            generation: g,
            done: 24,
            total: 48,
            first: (Instant::now(), 0),
        });
    }
    h.step();
    h.get_by_label_contains("whole volume 50 %");
}

/// Each scan keeps its own translation; the augmentation itself carries over.
#[test]
fn another_scan_starts_from_its_own_translation() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (a, _) = scan(dir.path(), "a.nii", [8, 12, 10], 1);
    let (b, _) = scan(dir.path(), "b.nii", [8, 12, 10], 1);
    let mut h = harness(a.clone());
    settle(&mut h);
    h.state_mut().state.params.translate_vox = [0.0, 3.0, 0.0];
    h.state_mut().state.params.rotate_deg = [0.0, 0.0, 12.0];
    settle(&mut h);
    h.state_mut().apply(Command::Open(b, None));
    settle(&mut h);
    assert_eq!(h.state().state.params.translate_vox, [0.0; 3]);
    assert_eq!(h.state().state.params.rotate_deg, [0.0, 0.0, 12.0]);
    h.state_mut().apply(Command::Open(a, None));
    settle(&mut h);
    assert_eq!(h.state().state.params.translate_vox, [0.0, 3.0, 0.0]);
}

/// File → Open path…: augscope's own browser, a typed path and Enter open the scan; a wrong
/// path says so in the browser.
#[test]
fn the_built_in_browser_opens_a_typed_path() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (a, _) = scan(dir.path(), "a.nii", [8, 12, 10], 1);
    let (b, _) = scan(dir.path(), "typed.nii", [6, 9, 7], 1);
    let mut h = harness(a);
    settle(&mut h);
    h.state_mut().apply(Command::Browse(Purpose::Scan, false));
    h.run_steps(3);
    // The folder of the open scan is listed, with both scans.
    h.get_by_label("typed.nii");
    let typed = dir.path().join("missing.nii").display().to_string();
    h.state_mut().rt.windows.browse.typed = typed;
    h.step();
    h.get_by_role(Role::TextInput).focus();
    h.key_press(egui::Key::Enter);
    h.step();
    h.get_by_label_contains("no such file or folder");
    h.state_mut().rt.windows.browse.typed = b.display().to_string();
    h.step();
    h.get_by_role(Role::TextInput).focus();
    h.key_press(egui::Key::Enter);
    settle(&mut h);
    let s = h.state().rt.scan.as_ref().expect("scan");
    assert_eq!(s.loaded.path, b);
    assert!(h.state().rt.windows.browse.open.is_none());
}

/// File → Save augmented volume…: the transformed scan and its label map, beside each other,
/// equal to what is on screen.
#[test]
fn the_augmented_volume_and_its_labels_are_saved() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (img, vol) = scan(dir.path(), "img.nii", [8, 12, 10], 1);
    let labels = Volume::new(
        vol.data.iter().map(|v| (*v as i32 % 3) as f32).collect(),
        vol.shape.clone(),
        1,
    );
    let lp = dir.path().join("lab.nii");
    io::save(&lp, &labels, &SaveOptions { keep_dtype: false }).expect("labels");
    let mut h = Harness::builder()
        .with_size(SIZE)
        .wgpu()
        .build_eframe(move |cc| App::new(cc, Some((img, Some(lp)))));
    settle(&mut h);
    h.state_mut().state.params.rotate_deg = [9.0, 0.0, 0.0];
    settle(&mut h);
    h.state_mut()
        .apply(Command::Browse(Purpose::SaveVolume, false));
    h.run_steps(3);
    let out = dir.path().join("out").join("aug.nii.gz");
    std::fs::create_dir(out.parent().expect("parent")).expect("dir");
    h.state_mut().rt.windows.browse.typed = out.display().to_string();
    h.step();
    h.get_by_label("Save").click();
    let start = Instant::now();
    while !h
        .state()
        .rt
        .note
        .as_deref()
        .is_some_and(|n| n.starts_with("saved"))
    {
        h.step();
        std::thread::sleep(Duration::from_millis(10));
        assert!(start.elapsed() < Duration::from_secs(60), "not saved");
    }
    let full = h.state().rt.work.full.as_ref().expect("result");
    let saved = io::load(&out, &Default::default()).expect("saved image");
    assert_eq!(saved.data, full.image.data);
    let saved_label = io::load(
        &dir.path().join("out/aug_label.nii.gz"),
        &Default::default(),
    )
    .expect("label");
    assert_eq!(
        saved_label.data,
        full.label.as_ref().expect("label result").data
    );
}

/// Help → Keyboard and mouse (F1) lists the shortcuts.
#[test]
fn help_lists_the_shortcuts() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (a, _) = scan(dir.path(), "a.nii", [8, 12, 10], 1);
    let mut h = harness(a);
    settle(&mut h);
    h.key_press(egui::Key::F1);
    h.step();
    h.step();
    for (keys, _) in augscope::app::panels::SHORTCUTS {
        assert!(h.query_all_by_label(keys).next().is_some(), "{keys}");
    }
}

/// Export batch: the format and type chosen in the dialog are what is written.
#[test]
fn export_writes_the_chosen_format_and_type() {
    let dir = tempfile::tempdir().expect("temp dir");
    let n = 6 * 8 * 7;
    let mut v = Volume::new((0..n).map(|i| (i % 251) as f32).collect(), vec![6, 8, 7], 1);
    v.dtype = augscope::DType::U8;
    let img = dir.path().join("u8.nii.gz");
    io::save(&img, &v, &SaveOptions { keep_dtype: true }).expect("scan");
    let mut h = harness(img);
    settle(&mut h);
    h.state_mut().state.params.rotate_deg = [0.0, 0.0, 20.0];
    settle(&mut h);
    h.state_mut().apply(Command::OpenExport);
    h.run_steps(3);
    h.get_by_label("float32").click();
    h.run_steps(1);
    h.get_by_label("scan's type").click();
    h.run_steps(1);
    let out = dir.path().join("batch");
    {
        let s = &mut h.state_mut().state.export;
        s.count = 2;
        s.out_dir = out.display().to_string();
        s.ext = "npy".into();
    }
    assert!(h.state().state.export.keep_dtype);
    h.state_mut().apply(Command::StartExport);
    settle(&mut h);
    assert!(matches!(h.state().rt.windows.export.last, Some(Ok(_))));
    let files: Vec<PathBuf> = std::fs::read_dir(&out)
        .expect("out")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "npy"))
        .collect();
    assert_eq!(files.len(), 2, "{files:?}");
    for f in files {
        // NumPy's header names the type: |u1 is uint8.
        let head = std::fs::read(&f).expect("npy");
        let text = String::from_utf8_lossy(&head[..128.min(head.len())]).into_owned();
        assert!(text.contains("'descr': '|u1'"), "{text}");
    }
}

/// "display as the sampling order": order 0 is drawn as "voxels as they are", order 1 as the
/// bilinear display, pixel for pixel.
#[test]
fn display_follows_the_sampling_order() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (p, _) = scan(dir.path(), "small.nii", [6, 10, 8], 1);
    let mut h = harness(p);
    settle(&mut h);
    let shot = |h: &mut Harness<'_, App>| {
        h.run_steps(2);
        h.render().expect("render")
    };
    let linear = shot(&mut h);
    h.state_mut().state.display.nearest = true;
    let nearest = shot(&mut h);
    assert_ne!(
        linear, nearest,
        "nearest and bilinear display differ on a small scan"
    );
    h.state_mut().state.display.nearest = false;
    h.state_mut().state.display.follow_order = true;
    h.state_mut().state.params.order = augscope::augment::Order::Linear;
    settle(&mut h);
    let follow_linear = shot(&mut h);
    h.state_mut().state.params.order = augscope::augment::Order::Nearest;
    settle(&mut h);
    let follow_nearest = shot(&mut h);
    // The views alone (the controls differ: the order buttons and this checkbox).
    let views = |img: &image::RgbaImage| {
        let r = h.state().rt.capture.views_rect.expect("views");
        image::imageops::crop_imm(
            img,
            r.min.x as u32,
            r.min.y as u32,
            r.width() as u32,
            r.height() as u32,
        )
        .to_image()
    };
    assert_eq!(views(&follow_linear), views(&linear));
    assert_eq!(views(&follow_nearest), views(&nearest));
}
