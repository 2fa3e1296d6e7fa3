//! "Preview as" in the explorer: the control beside the preset picks a training library's model,
//! the views show exactly what that model computes (the CLI's `apply --as`), the done list
//! names the model and its steps, and TorchIO's control grid comes with the result.
#![cfg(feature = "gui")]

use std::path::PathBuf;

use augscope::app::App;
use augscope::export::preview::{self, Model};
use augscope::io::{LoadOptions, SaveOptions, load, save};
use eframe::egui::accesskit::Role;
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;

mod common;
use common::gui::settle;

fn scan(dir: &std::path::Path, shape: [usize; 3]) -> (PathBuf, PathBuf) {
    let n: usize = shape.iter().product();
    let data: Vec<f32> = (0..n)
        .map(|i| {
            let (z, y, x) = (
                i / (shape[1] * shape[2]),
                (i / shape[2]) % shape[1],
                i % shape[2],
            );
            ((z * 31 + y * 7 + x * 3) % 23) as f32 / 23.0 + 0.02 * x as f32
        })
        .collect();
    let labels: Vec<f32> = (0..n)
        .map(|i| ((i / shape[2]) % shape[1] > shape[1] / 2) as u8 as f32)
        .collect();
    let img = dir.join("scan.nii.gz");
    let lab = dir.join("scan_labels.nii.gz");
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

#[test]
fn preview_as_torchio_shows_the_models_volume_its_steps_and_control_grid() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (img, lab) = scan(dir.path(), [16, 24, 20]);
    let (img2, lab2) = (img.clone(), lab.clone());
    let mut h = Harness::builder()
        .with_size([1500.0, 940.0])
        .wgpu()
        .build_eframe(move |cc| {
            let mut app = App::new(cc, Some((img2, Some(lab2))));
            app.rt.capture.hide_timings = true;
            app
        });
    settle(&mut h);
    {
        let p = &mut h.state_mut().state.params;
        p.elastic = true;
        p.alpha = 400.0;
        p.sigma_vox = 4.0;
        p.rotate_deg = [8.0, 0.0, -5.0];
    }
    settle(&mut h);
    // The control beside the preset, as a user picks it.
    h.get_all_by_role_and_label(Role::ComboBox, "preview as")
        .next()
        .expect("the preview-as control")
        .click();
    h.run_steps(2);
    h.get_by_label("TorchIO 1.2.1").click();
    settle(&mut h);
    let app = h.state();
    assert_eq!(app.state.params.preview_as, Model::TorchIo);
    let full = app.rt.work.full.as_ref().expect("a result");
    assert_eq!(full.model, Model::TorchIo);
    let grid = full.control_grid.as_ref().expect("TorchIO's control grid");
    assert!(grid.shape.iter().all(|&n| n >= 5));
    assert!(
        full.model_steps.iter().any(|s| s.contains("B-spline")),
        "{:?}",
        full.model_steps
    );
    // Exactly what the library model computes for the plan on screen.
    let image = load(&img, &LoadOptions::default()).expect("image");
    let label = load(&lab, &LoadOptions::default()).expect("labels");
    let plan = app.state.params.to_plan(3, &[1.0; 3]);
    let want = preview::preview(Model::TorchIo, &image, Some(&label), &plan).expect("preview");
    assert_eq!(full.image.data, want.image.data);
    assert_eq!(
        full.label.as_ref().expect("label").data,
        want.label.expect("label").data
    );
    // The done list names the model.
    let _ = h.get_by_label("model: torchio-1.2.1");
    // Back to augscope's own model: the engine's result again, no control grid.
    h.get_all_by_role_and_label(Role::ComboBox, "preview as")
        .next()
        .expect("the preview-as control")
        .click();
    h.run_steps(2);
    h.get_by_label("augscope").click();
    settle(&mut h);
    let full = h.state().rt.work.full.as_ref().expect("a result");
    assert_eq!(full.model, Model::Augscope);
    assert!(full.control_grid.is_none() && full.model_steps.is_empty());
    assert_ne!(full.image.data, want.image.data);
}
