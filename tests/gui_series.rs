//! The explorer's series picker, driven through egui_kittest (wgpu on lavapipe): a DICOM folder
//! of several series, opened as File → Open, a drop or Recent open it, offers its series; the one
//! picked loads (its voxels, its name in the title), and Cancel leaves the scan on screen. The
//! series are written with dicom-rs (`common::dicom`). Arrays are `[z, y, x]`.
#![cfg(feature = "gui")]
#![allow(clippy::unwrap_used)] // test helpers: a failed unwrap is a failed test

use std::path::{Path, PathBuf};

use augscope::app::{App, Command};
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;

mod common;
use common::dicom::two_series;
use common::gui::{harness, settle, small_scan, step_until};

/// Steps until the picker is up and drawn.
fn picker_shown(h: &mut Harness<'_, App>) {
    step_until(h, "the series picker", |a| {
        a.rt.windows.series_picker.is_some()
    });
    h.run_steps(3);
}

fn scan_path(h: &Harness<'_, App>) -> Option<PathBuf> {
    h.state().rt.scan.as_ref().map(|s| s.loaded.path.clone())
}

fn study(dir: &Path) -> PathBuf {
    let folder = dir.join("study");
    std::fs::create_dir(&folder).unwrap();
    folder
}

#[test]
fn opening_a_folder_of_several_series_shows_the_picker_and_the_pick_loads() {
    let dir = tempfile::tempdir().unwrap();
    let folder = study(dir.path());
    let [t1, t2] = two_series(&folder);
    let scan = small_scan(dir.path(), [6, 7, 8]);
    let mut h = harness(scan.clone());
    settle(&mut h);

    h.state_mut().apply(Command::Open(folder.clone(), None));
    picker_shown(&mut h);
    let listed: Vec<String> = h
        .state()
        .rt
        .windows
        .series_picker
        .as_ref()
        .unwrap()
        .choice
        .series
        .iter()
        .map(|s| s.uid.clone())
        .collect();
    assert_eq!(listed, vec![t1.uid, t2.uid]);
    // The window lists number, description, modality, slices and size of each series.
    h.get_by_label("Choose a DICOM series");
    for text in ["3", "7", "T1 axial", "T2 axial", "4", "5 × 6"] {
        assert!(
            h.query_all_by_label(text).next().is_some(),
            "'{text}' is not in the picker"
        );
    }
    assert_eq!(h.query_all_by_label("MR").count(), 2);

    // Cancel: the scan on screen stays, and its views are computed as before.
    h.get_by_label("Cancel").click();
    h.run_steps(2);
    assert!(h.state().rt.windows.series_picker.is_none());
    settle(&mut h);
    assert_eq!(scan_path(&h), Some(scan.clone()));
    assert!(h.state().rt.error.is_none(), "{:?}", h.state().rt.error);

    // Again, and pick the second series.
    h.state_mut().apply(Command::Open(folder.clone(), None));
    picker_shown(&mut h);
    h.get_by_label("T2 axial").click();
    h.run_steps(2);
    assert_eq!(
        h.state()
            .rt
            .windows
            .series_picker
            .as_ref()
            .unwrap()
            .selected,
        1
    );
    h.get_by_label("Open series").click();
    h.run_steps(1);
    assert!(h.state().rt.windows.series_picker.is_none());
    step_until(&mut h, "the series to load", |a| {
        a.rt.scan.as_ref().is_some_and(|s| s.loaded.path == folder)
    });
    settle(&mut h);
    let loaded = &h.state().rt.scan.as_ref().unwrap().loaded;
    assert_eq!(loaded.image.shape, t2.shape.to_vec());
    assert_eq!(loaded.image.data, t2.values());
    assert_eq!(loaded.series.as_ref().map(|s| s.uid.as_str()), Some(t2.uid));
    let title = h.state().title();
    assert!(title.contains("study (#7 T2 axial)"), "{title}");
    assert!(h.state().rt.error.is_none(), "{:?}", h.state().rt.error);
}

#[test]
fn a_folder_given_at_start_offers_its_series_and_a_chosen_one_opens_directly() {
    let dir = tempfile::tempdir().unwrap();
    let folder = study(dir.path());
    let [t1, _] = two_series(&folder);
    // As `augscope view FOLDER`: no scan yet, the picker offers the series.
    let mut h = harness(folder.clone());
    picker_shown(&mut h);
    assert!(h.state().rt.scan.is_none());
    assert!(h.state().rt.error.is_none(), "{:?}", h.state().rt.error);
    // As `augscope view FOLDER --series 3`: that series, without the picker.
    h.get_by_label("Cancel").click();
    h.run_steps(2);
    h.state_mut().apply(Command::OpenSeries {
        image: folder.clone(),
        label: None,
        series: "3".into(),
    });
    step_until(&mut h, "the series to load", |a| a.rt.scan.is_some());
    settle(&mut h);
    assert!(h.state().rt.windows.series_picker.is_none());
    let loaded = &h.state().rt.scan.as_ref().unwrap().loaded;
    assert_eq!(loaded.image.data, t1.values());
    assert_eq!(loaded.series.as_ref().map(|s| s.number), Some(Some(3)));
}
