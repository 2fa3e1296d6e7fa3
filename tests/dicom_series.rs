//! A DICOM folder of several series: listing them from the headers, reading the one chosen (by
//! SeriesInstanceUID, or by a SeriesNumber that one series has), the error that lists them when
//! none is chosen, wrong choices, and `--series` on the command line. The series are written
//! with dicom-rs (`common::dicom`); their values are known voxel for voxel. Arrays are `[z, y, x]`.

#![allow(clippy::unwrap_used)] // test helpers: a failed unwrap is a failed test

use std::path::Path;

use augscope::io::dicom::{self, SeriesInfo};
use augscope::io::{self, IoError, LoadOptions};

mod common;
use common::cli::{assert_user_error, ok, run, s};
use common::dicom::{Series, two_series, write_series};

fn load(path: &Path, series: Option<&str>) -> Result<augscope::Volume, IoError> {
    io::load(
        path,
        &LoadOptions {
            series: series.map(String::from),
            ..LoadOptions::default()
        },
    )
}

/// What augscope should list of a series written by `common::dicom`.
fn info_of(s: &Series) -> SeriesInfo {
    SeriesInfo {
        uid: s.uid.into(),
        number: Some(s.number as i64),
        description: s.description.into(),
        modality: s.modality.into(),
        files: s.shape[0],
        slices: s.shape[0],
        rows: s.shape[1],
        cols: s.shape[2],
    }
}

#[test]
fn list_series_gives_each_series_of_a_folder_from_the_headers() {
    let dir = tempfile::tempdir().unwrap();
    let [t1, t2] = two_series(dir.path());
    // A third series whose pixel data augscope cannot decode (12 bits allocated): listing reads
    // headers only, so it is listed all the same.
    let odd = Series {
        uid: "2.25.3003",
        number: 11,
        description: "packed",
        modality: "CT",
        shape: [2, 5, 6],
        base: 0,
        bits: 12,
    };
    write_series(dir.path(), "c", &odd);
    let list = dicom::list_series(dir.path()).unwrap();
    assert_eq!(list, vec![info_of(&t1), info_of(&t2), info_of(&odd)]);
    assert_eq!(list[0].label(), "#3 T1 axial (MR, 4 slices, 5×6)");
    // The undecodable series does not stand in the way of the others.
    let v = load(dir.path(), Some(t2.uid)).unwrap();
    assert_eq!(v.data, t2.values());
    let e = load(dir.path(), Some(odd.uid)).unwrap_err().to_string();
    assert!(e.contains("12 bits allocated"), "{e}");
    // A file's own series.
    let one = dir.path().join("IM000_a.dcm");
    assert_eq!(
        dicom::list_series(&one).unwrap(),
        vec![SeriesInfo {
            files: 1,
            slices: 1,
            ..info_of(&t1)
        }]
    );
}

#[test]
fn each_series_loads_by_uid_or_by_its_unique_number() {
    let dir = tempfile::tempdir().unwrap();
    let [t1, t2] = two_series(dir.path());
    for (s, by_number) in [(&t1, "3"), (&t2, "7")] {
        for choice in [s.uid, by_number] {
            let v = load(dir.path(), Some(choice)).unwrap();
            assert_eq!(v.shape, s.shape.to_vec(), "series {choice}");
            assert_eq!(v.data, s.values(), "series {choice}");
            // The geometry of the chosen series: 2.5 mm slices, 0.8 x 0.7 mm pixels.
            assert_eq!(v.spacing_mm, vec![2.5, 0.8, 0.7], "series {choice}");
        }
    }
    // A single file accepts its own series and refuses another.
    let one = dir.path().join("IM001_b.dcm");
    assert_eq!(load(&one, Some("7")).unwrap().data.len(), 5 * 6);
    let e = load(&one, Some(t1.uid)).unwrap_err().to_string();
    assert!(
        e.contains("no series 2.25.1001") && e.contains("2.25.2002"),
        "{e}"
    );
}

#[test]
fn a_folder_of_several_series_without_a_choice_lists_them() {
    let dir = tempfile::tempdir().unwrap();
    let [t1, t2] = two_series(dir.path());
    let e = load(dir.path(), None).unwrap_err();
    let IoError::SeveralSeries { series, .. } = &e else {
        panic!("expected the series to choose from, got {e}");
    };
    assert_eq!(series, &vec![info_of(&t1), info_of(&t2)]);
    let msg = e.to_string();
    for part in [
        "the folder holds 2 series",
        "--series",
        "2.25.1001 (number 3, \"T1 axial\", 4 slices)",
        "2.25.2002 (number 7, \"T2 axial\", 3 slices)",
    ] {
        assert!(msg.contains(part), "'{part}' missing from: {msg}");
    }
    assert!(msg.ends_with(&dir.path().display().to_string()), "{msg}");
}

#[test]
fn a_wrong_or_ambiguous_choice_is_an_error_that_lists_the_series() {
    let dir = tempfile::tempdir().unwrap();
    two_series(dir.path());
    let e = load(dir.path(), Some("9.9.9")).unwrap_err().to_string();
    assert!(
        e.contains("no series 9.9.9") && e.contains("2.25.1001") && e.contains("2.25.2002"),
        "{e}"
    );
    // Two series numbered 7: the number no longer chooses, the UID does.
    let again = Series {
        uid: "2.25.4004",
        number: 7,
        description: "T2 repeat",
        modality: "MR",
        shape: [2, 5, 6],
        base: 7,
        bits: 16,
    };
    write_series(dir.path(), "d", &again);
    let e = load(dir.path(), Some("7")).unwrap_err().to_string();
    assert!(
        e.contains("2 series have the SeriesNumber 7")
            && e.contains("2.25.2002")
            && e.contains("2.25.4004"),
        "{e}"
    );
    assert_eq!(
        load(dir.path(), Some(again.uid)).unwrap().data,
        again.values()
    );
    // A series chosen for a scan that is no DICOM.
    let npy = dir.path().join("a.npy");
    io::save(
        &npy,
        &augscope::Volume::new(vec![0.0; 4], vec![2, 2], 1),
        &Default::default(),
    )
    .unwrap();
    let e = load(&npy, Some("7")).unwrap_err().to_string();
    assert!(e.contains("no DICOM"), "{e}");
}

#[test]
fn cli_series_option_reads_the_chosen_series_and_info_lists_them() {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("study");
    std::fs::create_dir(&folder).unwrap();
    let [t1, t2] = two_series(&folder);
    let f = s(&folder);

    // info lists the series of the folder, and how to choose.
    let out = ok(&["info", f]);
    assert!(
        out.contains("2 DICOM series; choose one with --series"),
        "{out}"
    );
    let rows: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    for row in [
        ["number", "modality", "slices", "size", "description", "UID"].as_slice(),
        &["3", "MR", "4", "5x6", "T1", "axial", "2.25.1001"],
        &["7", "MR", "3", "5x6", "T2", "axial", "2.25.2002"],
    ] {
        assert!(
            rows.iter().any(|r| r == row),
            "{row:?} missing from:\n{out}"
        );
    }
    // info of one series.
    let out = ok(&["info", f, "--series", "7"]);
    assert!(
        out.contains("series:      #7 T2 axial (MR, 3 slices, 5×6)"),
        "{out}"
    );
    assert!(out.contains("shape:       3 x 5 x 6"), "{out}");

    // apply: the chosen series, by UID and by number.
    for (series, choice) in [(&t1, t1.uid), (&t2, "7")] {
        let o = dir.path().join(format!("out_{}.nii", series.number));
        ok(&["apply", f, s(&o), "--series", choice, "--backend", "cpu"]);
        let v = common::fixtures::load_volume(&o);
        assert_eq!(v.shape, series.shape.to_vec());
        assert_eq!(v.data, series.values());
    }
    // batch and filter take it too.
    let out_dir = dir.path().join("batch");
    ok(&[
        "batch",
        "--preset",
        "nnunet-v2",
        "--count",
        "1",
        "--out",
        s(&out_dir),
        "--backend",
        "cpu",
        "--quiet",
        "--series",
        "3",
        f,
    ]);
    let manifest = std::fs::read_to_string(out_dir.join("manifest.jsonl")).unwrap();
    assert!(manifest.contains("\"series\":\"3\""), "{manifest}");
    let filtered = dir.path().join("filtered.npy");
    ok(&[
        "filter",
        f,
        s(&filtered),
        "--contrast",
        "1,0",
        "--series",
        t2.uid,
    ]);
    assert_eq!(common::fixtures::load_values(&filtered), t2.values());

    // Without a choice, or with a wrong one: one line, exit code 2, no output.
    let o = dir.path().join("none.nii");
    assert_user_error(
        &["apply", f, s(&o), "--flip", "0"],
        "choose one with --series",
    );
    assert_user_error(
        &["apply", f, s(&o), "--flip", "0", "--series", "1.2.3.4"],
        "no series 1.2.3.4",
    );
    assert_user_error(&["info", f, "--series", "5"], "no series 5");
    assert_user_error(
        &[
            "batch",
            "--preset",
            "nnunet-v2",
            "--count",
            "1",
            "--out",
            s(&dir.path().join("batch2")),
            "--series",
            "2.25.9",
            f,
        ],
        "no series 2.25.9",
    );
    assert!(!o.exists());
    let (code, _, err) = run(&["apply", f, s(&o), "--series", "1.2.3.4"]);
    assert_eq!((code, err.lines().count()), (2, 1), "{err}");
}
