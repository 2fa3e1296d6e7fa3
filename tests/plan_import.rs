//! `augscope preset import` of one batch manifest line or an `apply --report` file: the preset it
//! writes reproduces that plan (p = 1, ranges of one value, its order, mode and cval), voxel for
//! voxel; anything it cannot reproduce is one line and exit 2, never exit 0 with something else.

#![allow(clippy::unwrap_used)] // test helpers: a failed unwrap is a failed test

use std::path::{Path, PathBuf};

use augscope::Volume;
use augscope::augment::preset::Preset;
use augscope::io::{self, SaveOptions};

mod common;
use common::cli::{ok, run};
use common::fixtures::load_values as load;

fn volume(dir: &Path, shape: [usize; 3]) -> PathBuf {
    let n: usize = shape.iter().product();
    let data: Vec<f32> = (0..n)
        .map(|i| ((i * 7919 + 13) % 211) as f32 / 210.0)
        .collect();
    let path = dir.join("in.npy");
    io::save(
        &path,
        &Volume::new(data, shape.to_vec(), 1),
        &SaveOptions::default(),
    )
    .unwrap();
    path
}

const PRESET: &str = r#"
version = 1
name = "wide"
[flip]
p = [0.5]
[rotate]
p = 1.0
range_deg = [[-25, 25], [-10, 30], [5, 40]]
[scale]
p = 1.0
range = [[0.8, 1.2], [0.9, 1.1], [0.7, 1.3]]
per_axis = true
[translate]
p = 1.0
range = [[-3, 3]]
[elastic]
p = 1.0
alpha = [20, 40]
sigma = [3, 4]
[sampling]
order = 1
mode = "reflect"
cval = 0.25
"#;

#[test]
fn a_manifest_line_imports_to_a_preset_that_redraws_the_same_sample() {
    let dir = tempfile::tempdir().unwrap();
    let input = volume(dir.path(), [10, 12, 14]);
    let preset = dir.path().join("p.toml");
    std::fs::write(&preset, PRESET).unwrap();
    let first = dir.path().join("first");
    ok(&[
        "batch",
        "--preset",
        preset.to_str().unwrap(),
        "--count",
        "3",
        "--seed",
        "40",
        "--backend",
        "cpu",
        "--out",
        first.to_str().unwrap(),
        input.to_str().unwrap(),
    ]);
    let manifest = std::fs::read_to_string(first.join("manifest.jsonl")).unwrap();
    let line = manifest.lines().nth(2).unwrap();
    let record: serde_json::Value = serde_json::from_str(line).unwrap();
    let seed = record["seed"].as_u64().unwrap();
    let line_path = dir.path().join("line.json");
    std::fs::write(&line_path, line).unwrap();
    let imported = dir.path().join("imported.toml");
    ok(&[
        "preset",
        "import",
        "-o",
        imported.to_str().unwrap(),
        line_path.to_str().unwrap(),
    ]);
    let p = Preset::load(&imported).unwrap();
    assert_eq!(p.sampling.order, 1);
    assert_eq!(p.sampling.mode, "reflect");
    assert_eq!(p.sampling.cval, 0.25);
    assert!(p.description.contains(&format!("--seed {seed}")), "{p:?}");

    // The imported preset, drawn with the line's seed, is the same plan and the same voxels.
    let plan: augscope::augment::Plan = serde_json::from_value(record["plan"].clone()).unwrap();
    let redrawn = p.sample(seed, 3, 1, &[1.0; 3]).unwrap();
    assert_eq!(redrawn.plan, plan);
    let again = dir.path().join("again");
    ok(&[
        "batch",
        "--preset",
        imported.to_str().unwrap(),
        "--count",
        "1",
        "--seed",
        &seed.to_string(),
        "--backend",
        "cpu",
        "--out",
        again.to_str().unwrap(),
        input.to_str().unwrap(),
    ]);
    let out_a = first.join(record["output"].as_str().unwrap());
    let out_a = if out_a.exists() {
        out_a
    } else {
        PathBuf::from(record["output"].as_str().unwrap())
    };
    let again_line: serde_json::Value = serde_json::from_str(
        std::fs::read_to_string(again.join("manifest.jsonl"))
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    let out_b = again.join(again_line["output"].as_str().unwrap());
    let out_b = if out_b.exists() {
        out_b
    } else {
        PathBuf::from(again_line["output"].as_str().unwrap())
    };
    assert_eq!(load(&out_a), load(&out_b));
}

#[test]
fn an_apply_report_imports_to_its_plan() {
    let dir = tempfile::tempdir().unwrap();
    let input = volume(dir.path(), [8, 9, 10]);
    let report = dir.path().join("r.json");
    ok(&[
        "apply",
        input.to_str().unwrap(),
        dir.path().join("o.npy").to_str().unwrap(),
        "--rotate=0.3,-0.2,0.1",
        "--scale",
        "1.1",
        "--flip",
        "1",
        "--order",
        "3",
        "--mode",
        "mirror",
        "--backend",
        "cpu",
        "--report",
        report.to_str().unwrap(),
    ]);
    let toml = ok(&["preset", "import", report.to_str().unwrap()]);
    let p = Preset::parse(&toml).unwrap();
    assert_eq!(p.sampling.order, 3);
    assert_eq!(p.sampling.mode, "mirror");
    let want: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let want: augscope::augment::Plan = serde_json::from_value(want["plan"].clone()).unwrap();
    for seed in [0, 7, 12345] {
        assert_eq!(p.sample(seed, 3, 1, &[1.0; 3]).unwrap().plan, want);
    }
}

#[test]
fn what_cannot_be_reproduced_is_one_line_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "manifest.jsonl",
            "{\"plan\": {}}\n{\"plan\": {}}\n",
            "JSON lines",
        ),
        (
            "unknown.json",
            "{\"input\": \"a.nii\", \"seed\": 3}",
            "none of the keys",
        ),
        (
            "bad_plan.json",
            "{\"plan\": {\"order\": 2}}",
            "not an augscope plan",
        ),
        (
            "shape.json",
            "{\"plan\": {\"scale\": [1.1], \"out_shape\": [4, 4, 4]}}",
            "output shape",
        ),
    ];
    for (name, text, needle) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let (code, out, err) = run(&["preset", "import", path.to_str().unwrap()]);
        assert_eq!(code, 2, "{name}: {err}");
        assert!(out.is_empty(), "{name}: {out}");
        assert_eq!(err.trim().lines().count(), 1, "{name}: {err}");
        assert!(err.contains(needle), "{name}: {err}");
    }
}

#[test]
fn a_flip_without_the_number_of_axes_is_refused() {
    // One flip entry means every axis, so a plan that flips axis 0 needs its shape beside it.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flip.json");
    std::fs::write(&path, "{\"plan\": {\"flip\": [0]}}").unwrap();
    let (code, _, err) = run(&["preset", "import", path.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("how many axes"), "{err}");
    std::fs::write(&path, "{\"plan\": {\"flip\": [0]}, \"shape\": [4, 5, 6]}").unwrap();
    let p = Preset::parse(&ok(&["preset", "import", path.to_str().unwrap()])).unwrap();
    assert_eq!(p.flip.unwrap().p, vec![1.0, 0.0, 0.0]);
}

#[test]
fn a_damaged_snippet_block_is_one_line() {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in [
        (
            "one_quote.py",
            "# augscope-params-begin\nPARAMS = r\"\"\"\n# augscope-params-end\n",
        ),
        (
            "none.py",
            "# augscope-params-begin\nPARAMS = {}\n# augscope-params-end\n",
        ),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let (code, out, err) = run(&["preset", "import", path.to_str().unwrap()]);
        assert_eq!(code, 2, "{name}: {err}");
        assert!(out.is_empty() && err.contains("damaged"), "{name}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{name}: {err}");
    }
}
