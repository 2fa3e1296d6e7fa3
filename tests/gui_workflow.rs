//! A user's way through the explorer, driven through egui_kittest (wgpu on lavapipe): typing in
//! the preset editor, what an edited bundled preset says of itself, what Export code exports and
//! where it writes, the views and the done list while the worker computes, and the messages
//! around them. Arrays are `[z, y, x]`.
#![cfg(feature = "gui")]

use std::path::{Path, PathBuf};

use augscope::app::{App, code};
use augscope::augment::preset::{Preset, load_or_bundled};
use augscope::export::interop::Target;
use augscope::export::preview::Model;
use eframe::egui;
use egui::accesskit::Role;
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;

mod common;
use common::gui::{harness, settle, small_scan};

fn scan_harness(dir: &Path) -> Harness<'static, App> {
    let img = small_scan(dir, [10, 12, 14]);
    let mut h = harness(img);
    settle(&mut h);
    h
}

/// Opens the preset editor on the bundled nnunet-v2.
fn edit_nnunet(h: &mut Harness<'_, App>) {
    h.state_mut().state.preset = "nnunet-v2".into();
    h.run_steps(2);
    h.get_by_label("Edit…").click();
    h.run_steps(6);
    assert!(h.state().rt.windows.editor.open, "the editor opens");
}

/// Sets the rotation's lower end of the preset being edited from -30° to `deg`, as a user drags it.
fn edit_rotation(h: &mut Harness<'_, App>, deg: f64) {
    h.get_all_by_role_and_label(Role::SpinButton, "all axes")
        .find(|n| n.value().as_deref() == Some("-30.0°"))
        .expect("the rotation's lower end")
        .set_value_accesskit(deg);
    h.run_steps(3);
}

fn open_from_file_menu(h: &mut Harness<'_, App>, entry: &str) {
    h.get_by_label("File").click();
    h.run_steps(2);
    h.get_by_label(entry).click();
    h.run_steps(4);
}

/// Every text the last frame painted (labels and painted captions alike).
fn painted_texts(h: &Harness<'_, App>) -> Vec<String> {
    fn walk(s: &egui::Shape, out: &mut Vec<String>) {
        match s {
            egui::Shape::Text(t) => out.push(t.galley.text().to_string()),
            egui::Shape::Vec(v) => v.iter().for_each(|s| walk(s, out)),
            _ => {}
        }
    }
    let mut out = vec![];
    for c in &h.output().shapes {
        walk(&c.shape, &mut out);
    }
    out
}

#[test]
fn every_key_typed_into_the_preset_name_arrives() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut h = scan_harness(dir.path());
    edit_nnunet(&mut h);
    assert!(!h.state().rt.windows.editor.unsaved(&h.state().state));
    h.get_all_by_role_and_label(Role::TextInput, "name")
        .next()
        .expect("the name field")
        .focus();
    h.run_steps(2);
    h.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::A);
    h.run_steps(2);
    // One key a frame, as a user types: the first edits the preset.
    for c in "newcomer brain test".chars() {
        h.event(egui::Event::Text(c.to_string()));
        h.run_steps(2);
    }
    let draft = h.state().state.draft.clone().expect("a draft");
    assert_eq!(draft.name, "newcomer brain test");
    assert!(h.state().rt.windows.editor.unsaved(&h.state().state));
}

#[test]
fn an_edited_bundled_preset_says_it_is_derived_and_the_user_can_reword_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut h = scan_harness(dir.path());
    edit_nnunet(&mut h);
    let bundled = load_or_bundled("nnunet-v2".as_ref()).expect("bundled");
    // A name edit changes no transform: nothing is derived yet.
    h.state_mut().state.draft.as_mut().expect("draft").name = "mine".into();
    h.run_steps(2);
    let d = h.state().state.draft.clone().expect("draft");
    assert_eq!(
        (&d.description, &d.source),
        (&bundled.description, &bundled.source)
    );
    edit_rotation(&mut h, -12.5);
    let d = h.state().state.draft.clone().expect("draft");
    assert_eq!(
        d.description,
        format!("Derived from nnunet-v2: {}", bundled.description)
    );
    assert_eq!(
        d.source,
        format!("edited in augscope from {}", bundled.source)
    );
    // Both are fields of the editor, and what is typed there is kept.
    let source = h
        .get_all_by_role_and_label(Role::MultilineTextInput, "source")
        .next()
        .expect("a source field");
    source.focus();
    h.run_steps(2);
    h.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::A);
    h.run_steps(1);
    h.event(egui::Event::Text("my own lab's tuning".into()));
    h.run_steps(3);
    let d = h.state().state.draft.clone().expect("draft");
    assert_eq!(d.source, "my own lab's tuning");
    assert!(d.description.starts_with("Derived from nnunet-v2: "));
    // The exported header says it.
    let text = code::code_text(&h.state().state, 3, true, Target::TorchIo).expect("code");
    assert!(
        text.contains("# Preset source: my own lab's tuning"),
        "{}",
        text.lines().take(4).collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn export_code_exports_the_preset_in_use_and_says_which() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut h = scan_harness(dir.path());
    h.state_mut().state.preset = "nnunet-v2".into();
    h.run_steps(2);
    open_from_file_menu(&mut h, "Export code…");
    assert!(
        h.state().rt.windows.code.from_preset,
        "the preset is the default"
    );
    h.get_by_label_contains("Exporting preset nnunet-v2, with its ranges and probabilities");
    h.state_mut().rt.windows.code.open = false;
    h.run_steps(2);
    edit_nnunet(&mut h);
    edit_rotation(&mut h, -12.5);
    open_from_file_menu(&mut h, "Export code…");
    let name = h.state().state.draft.as_ref().expect("draft").name.clone();
    h.get_by_label_contains(&format!(
        "Exporting the edited preset \u{201c}{name}\u{201d} (unsaved edits)"
    ));
    let draft = h.state().state.draft.clone().expect("draft");
    let want = augscope::export::export(&draft, Target::Monai, 3).expect("export");
    let app = h.state();
    let shown = code::code_text(
        &app.state,
        3,
        app.rt.windows.code.from_preset,
        Target::Monai,
    )
    .expect("code");
    assert_eq!(shown, want);
    // The Save preset window names the edited preset, not the bundled one.
    h.state_mut().rt.windows.code.open = false;
    h.run_steps(2);
    h.get_by_label("Save preset…").click();
    h.run_steps(4);
    h.get_by_label_contains(&format!("Saving the edited preset \u{201c}{name}\u{201d}"));
    assert!(h.query_by_label("preset nnunet-v2").is_none());
}

fn tab_path_field<'t>(h: &'t Harness<'_, App>) -> egui_kittest::Node<'t> {
    h.get_all_by_role_and_label(Role::TextInput, "file")
        .next()
        .expect("the file field")
}

fn save_code_as(h: &mut Harness<'_, App>, tab: &str, path: &Path) {
    h.get_by_label(tab).click();
    h.run_steps(2);
    let field = tab_path_field(h);
    field.focus();
    h.run_steps(1);
    h.event(egui::Event::Text(path.display().to_string()));
    h.run_steps(2);
    h.get_all_by_label("Save")
        .last()
        .expect("Save button")
        .click();
    h.run_steps(3);
}

#[test]
fn each_code_tab_has_its_own_file_and_save_asks_before_replacing_one() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut h = scan_harness(dir.path());
    open_from_file_menu(&mut h, "Export code…");
    let torchio = dir.path().join("torchio_aug.py");
    save_code_as(&mut h, "TorchIO", &torchio);
    let torchio_text = std::fs::read_to_string(&torchio).expect("written");
    assert!(torchio_text.contains("import torchio"), "{torchio_text}");
    // The nnU-Net tab starts with a file of its own, not TorchIO's.
    h.get_by_label("nnU-Net v2 trainer").click();
    h.run_steps(2);
    assert_eq!(tab_path_field(&h).value().as_deref(), Some(""));
    let paths = &h.state().rt.windows.code.paths;
    assert_eq!(paths[1], torchio.display().to_string());
    assert!(paths[3].is_empty());
    // Saving it onto TorchIO's file asks first; Cancel leaves the file as it was.
    save_code_as(&mut h, "nnU-Net v2 trainer", &torchio);
    assert_eq!(
        h.state().rt.windows.code.confirm.as_deref(),
        Some(torchio.as_path())
    );
    h.get_by_label_contains("exists: replace it?");
    assert_eq!(
        std::fs::read_to_string(&torchio).expect("file"),
        torchio_text
    );
    h.get_by_label("Cancel").click();
    h.run_steps(2);
    assert!(h.state().rt.windows.code.confirm.is_none());
    assert_eq!(
        std::fs::read_to_string(&torchio).expect("file"),
        torchio_text
    );
    // Overwrite replaces it.
    h.get_all_by_label("Save")
        .last()
        .expect("Save button")
        .click();
    h.run_steps(3);
    h.get_by_label("Overwrite").click();
    h.run_steps(3);
    let now = std::fs::read_to_string(&torchio).expect("file");
    assert_ne!(now, torchio_text);
    assert!(now.contains("nnU-Net"), "{now}");
}

#[test]
fn the_views_never_go_blank_and_the_done_list_describes_what_they_show() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut h = scan_harness(dir.path());
    assert!(h.query_by_label("identity (nothing fires)").is_some());
    h.state_mut().state.params.translate_vox = [0.0, 0.0, 3.0];
    // The frame that takes the new parameters: the views still show the identity, and so does
    // the done list, saying that the new parameters are being computed.
    h.step();
    assert!(h.query_by_label("identity (nothing fires)").is_some());
    h.get_by_label_contains("the views show the previous parameters");
    // Every frame until the whole volume is shown draws the augmented views.
    let mut frames = 0;
    while !h.state().is_idle() || frames < 3 {
        h.step();
        let texts = painted_texts(&h);
        assert!(
            texts.iter().any(|t| t.contains("· augmented")),
            "a frame without the augmented views: {texts:?}"
        );
        frames += 1;
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert!(frames < 20_000, "the app did not settle");
    }
    h.run_steps(2);
    assert!(h.query_by_label("translate").is_some());
    assert!(h.query_by_label("identity (nothing fires)").is_none());
    assert!(
        h.query_by_label_contains("the views show the previous parameters")
            .is_none()
    );
}

#[test]
fn previewing_as_nnunet_marks_the_translation_it_leaves_out() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut h = scan_harness(dir.path());
    h.state_mut().state.params.translate_vox = [0.0, 0.0, 3.0];
    h.state_mut().state.params.rotate_deg = [10.0, 0.0, 0.0];
    settle(&mut h);
    assert!(
        h.query_by_label_contains("left out: nnU-Net").is_none(),
        "augscope's own model translates"
    );
    h.state_mut().state.params.preview_as = Model::Nnunet;
    settle(&mut h);
    h.get_by_label_contains("left out: nnU-Net's SpatialTransform has no translation");
}

#[test]
fn a_long_error_keeps_its_dismiss_button_in_the_window() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut h = scan_harness(dir.path());
    h.state_mut().rt.error = Some(format!(
        "cannot read the file: {}",
        "a very long reason that goes on ".repeat(30)
    ));
    h.run_steps(3);
    let r = h.get_by_label("Dismiss").rect();
    assert!(r.max.x <= 1500.0 && r.min.x >= 0.0, "{r:?}");
    h.get_by_label("Dismiss").click();
    h.run_steps(2);
    assert!(h.state().rt.error.is_none());
}

#[test]
fn a_saved_preset_being_edited_has_no_unsaved_edits_after_a_restart() {
    let dir = tempfile::tempdir().expect("temp dir");
    let img = small_scan(dir.path(), [10, 12, 14]);
    let mut p = load_or_bundled("nnunet-v2".as_ref()).expect("bundled");
    p.name = "saved before".into();
    let path: PathBuf = dir.path().join("saved.toml");
    std::fs::write(&path, p.to_toml()).expect("write preset");
    let restart = |draft: Preset| {
        let img = img.clone();
        let path = path.clone();
        Harness::builder()
            .with_size([1500.0, 940.0])
            .wgpu()
            .build_eframe(move |cc| {
                // What the storage holds after a session that saved the preset and quit.
                let state = augscope::app::State {
                    preset: path.display().to_string(),
                    draft: Some(draft),
                    ..Default::default()
                };
                let mut app = App::with_state(cc, state, Some((img, None)));
                app.rt.capture.hide_timings = true;
                app
            })
    };
    let mut h = restart(Preset::parse(&p.to_toml()).expect("parses"));
    h.run_steps(3);
    assert!(!h.state().title().ends_with('*'), "{}", h.state().title());
    assert!(!h.state().rt.windows.editor.unsaved(&h.state().state));
    // A draft that differs from its file still has unsaved edits.
    let mut edited = p.clone();
    edited.rotate.as_mut().expect("rotate").range_deg = vec![[-5.0, 5.0]];
    let mut h = restart(edited);
    h.run_steps(3);
    assert!(h.state().title().ends_with('*'), "{}", h.state().title());
}

#[test]
fn the_editor_lists_the_intensity_steps_and_edits_them() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut h = scan_harness(dir.path());
    edit_nnunet(&mut h);
    for step in [
        "Intensity",
        "1. gaussian_noise",
        "5. low_resolution",
        "7. gamma",
    ] {
        // "Intensity" names the main window's section too.
        assert!(
            h.query_all_by_label(step).next().is_some(),
            "{step} is listed"
        );
    }
    let steps = |h: &Harness<'_, App>| {
        h.state()
            .state
            .draft
            .as_ref()
            .map(|d| d.intensity.iter().map(|s| s.name()).collect::<Vec<_>>())
            .unwrap_or_default()
    };
    assert_eq!(steps(&h).len(), 7);
    // Remove the noise: the draft loses it, and the preset in use now differs.
    h.get_all_by_label("remove")
        .next()
        .expect("a remove button")
        .scroll_to_me();
    h.run_steps(3);
    h.get_all_by_label("remove")
        .next()
        .expect("a remove button")
        .click_accesskit();
    h.run_steps(4);
    assert_eq!(steps(&h)[0], "gaussian_blur");
    assert!(h.state().rt.windows.editor.unsaved(&h.state().state));
    // Add it back from the families' list, at the end.
    h.get_all_by_role_and_label(Role::ComboBox, "add a step")
        .next()
        .expect("the add-a-step control")
        .scroll_to_me();
    h.run_steps(3);
    h.get_all_by_role_and_label(Role::ComboBox, "add a step")
        .next()
        .expect("the add-a-step control")
        .click();
    h.run_steps(3);
    h.get_by_label("gaussian_noise").click();
    h.run_steps(4);
    assert_eq!(steps(&h).last().copied(), Some("gaussian_noise"));
    // A family of another library, with its own fields (drawn from the family's list of them).
    h.get_all_by_role_and_label(Role::ComboBox, "add a step")
        .next()
        .expect("the add-a-step control")
        .scroll_to_me();
    h.run_steps(3);
    h.get_all_by_role_and_label(Role::ComboBox, "add a step")
        .next()
        .expect("the add-a-step control")
        .click();
    h.run_steps(3);
    // The families' list is longer than its popup: scroll to the entry first.
    h.get_by_label("torchio_bias_field").scroll_to_me();
    h.run_steps(3);
    h.get_by_label("torchio_bias_field").click();
    h.run_steps(4);
    assert_eq!(steps(&h).last().copied(), Some("torchio_bias_field"));
    assert!(h.query_by_label("8. torchio_bias_field").is_some());
    for field in ["order", "coefficients"] {
        assert!(
            h.query_all_by_label(field).next().is_some(),
            "the {field} field is shown"
        );
    }
    let draft = h.state().state.draft.clone().expect("a draft");
    draft
        .validate()
        .expect("the draft with TorchIO's bias field is valid");
}

#[test]
fn the_intensity_section_adds_a_step_with_one_value_and_the_views_take_it() {
    use augscope::core::IntensityStep;
    let dir = tempfile::tempdir().expect("temp dir");
    let mut h = scan_harness(dir.path());
    let open = |h: &mut Harness<'_, App>| {
        h.get_all_by_label("Intensity")
            .next()
            .expect("the Intensity section")
            .scroll_to_me();
        h.run_steps(3);
        h.get_all_by_label("Intensity")
            .next()
            .expect("the Intensity section")
            .click();
        h.run_steps(4);
    };
    open(&mut h);
    let add = |h: &mut Harness<'_, App>, family: &str| {
        for _ in 0..2 {
            h.get_all_by_role_and_label(Role::ComboBox, "add a step")
                .next()
                .expect("the add-a-step control")
                .scroll_to_me();
            h.run_steps(3);
        }
        h.get_all_by_role_and_label(Role::ComboBox, "add a step")
            .next()
            .expect("the add-a-step control")
            .click();
        h.run_steps(3);
        h.get_by_label(family).scroll_to_me();
        h.run_steps(3);
        h.get_by_label(family).click();
        h.run_steps(4);
    };
    add(&mut h, "monai_scale_intensity");
    let factors = |h: &Harness<'_, App>| match h.state().state.params.intensity.as_slice() {
        [IntensityStep::MonaiScaleIntensity(s)] => s.factors.clone(),
        other => panic!("one MONAI scale step, got {other:?}"),
    };
    // A draw of MONAI's defaults, [-0.1, 0.1].
    let drawn = factors(&h);
    assert!(
        matches!(drawn.as_slice(), [Some(f)] if (-0.1..=0.1).contains(f)),
        "{drawn:?}"
    );
    // The direct mode: one value, which the step then holds.
    h.get_all_by_role_and_label(Role::SpinButton, "factors")
        .next()
        .expect("the factors' value")
        .set_value_accesskit(0.5);
    h.run_steps(4);
    assert_eq!(factors(&h), vec![Some(0.5)]);
    // The views take it: the whole volume on screen is the engine's for the plan with the step.
    settle(&mut h);
    let app = h.state();
    let scan = &app.rt.scan.as_ref().expect("a scan").loaded.image;
    let plan = app.plan();
    assert_eq!(plan.intensity.len(), 1);
    let cpu = augscope::engine::cpu::CpuBackend::new();
    let (want, _, _) = augscope::engine::apply_new(&cpu, &plan, scan, None).expect("apply");
    let full = app.rt.work.full.as_ref().expect("the whole volume");
    assert!(full.image.data == want.data, "the views show the step");
    let scaled: f32 = want.data.iter().sum();
    let raw: f32 = scan.data.iter().sum();
    assert!(
        (scaled - 1.5 * raw).abs() <= 1e-3 * raw.abs(),
        "{scaled} vs 1.5 × {raw}"
    );
}
