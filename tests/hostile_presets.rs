//! Presets, parameter dicts and voxel sizes a hostile user or a broken file can hand augscope:
//! each is refused when it is read, with one line naming what is wrong, exit code 2 and no output
//! file, never coerced into something else, never a panic, a hang or memory that grows with
//! `--count`.

#![allow(clippy::unwrap_used)] // test helpers: a failed unwrap is a failed test

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use augscope::Volume;
use augscope::augment::preset::Preset;
use augscope::augment::{Plan, Space};
use augscope::io::{self, SaveOptions};

mod common;
use common::cli::{BIN, command, listing};

/// Runs augscope with `args` and asserts a refusal: exit 2, one line on stderr that contains
/// `needle`, no panic. A child still running after a minute is killed and fails the test, so a
/// command that blocks can never hang the suite.
fn refused(args: &[&str], needle: &str) -> String {
    let mut child = command()
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = wait_or_kill(&mut child, Duration::from_secs(60))
        .unwrap_or_else(|| panic!("augscope {args:?} did not answer within a minute"));
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(status.code(), Some(2), "{args:?}: {err}");
    assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
    assert!(err.starts_with("augscope: "), "{args:?}: {err}");
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    assert!(
        err.to_lowercase().contains(&needle.to_lowercase()),
        "{args:?}: '{}' does not mention '{needle}'",
        err.trim()
    );
    assert!(out.stdout.is_empty(), "{args:?} wrote to stdout");
    err
}

/// The child's exit status, or `None` (the child killed) when it runs past `limit`.
fn wait_or_kill(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let t = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return Some(s);
        }
        if t.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

/// A small NIfTI volume of `shape` with voxel size `spacing_mm`.
fn nifti(dir: &Path, name: &str, shape: &[usize], spacing_mm: &[f64]) -> String {
    let n: usize = shape.iter().product();
    let mut v = Volume::new(
        (0..n).map(|i| (i % 17) as f32 / 16.0).collect(),
        shape.to_vec(),
        1,
    );
    v.spacing_mm = spacing_mm.to_vec();
    let p = dir.join(name);
    io::save(&p, &v, &SaveOptions::default()).unwrap();
    p.display().to_string()
}

#[test]
fn import_refuses_what_it_used_to_coerce() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("imported.toml");
    let out_s = out.to_str().unwrap();
    let import = |name: &str, json: &str, needle: &str| {
        let p = write(dir.path(), name, json);
        refused(&["preset", "import", "--output", out_s, &p], needle);
        assert!(!out.exists(), "{name}: a refused import wrote its output");
    };
    // Orders are whole numbers 0, 1 or 3: -1 is not 0, 3.9 is not 3.
    for bad in ["-1", "3.9", "2", "true", "\"3\"", "1e30"] {
        let json = format!("{{\"do_rotation\": true, \"order_data\": {bad}}}");
        import("order.json", &json, "order_data");
    }
    import(
        "seg.json",
        "{\"do_rotation\": true, \"order_seg\": 0.5}",
        "order_seg",
    );
    // A flip of an axis the image does not have is refused, not dropped from a preset that
    // says it reproduces the plan exactly.
    import(
        "flip.json",
        r#"{"shape": [5, 6, 7], "seed": 3, "plan": {"flip": [5]}}"#,
        "axis 5",
    );
    import(
        "flip2d.json",
        r#"{"shape": [5, 6], "plan": {"flip": [2], "rotate_rad": [0.1]}}"#,
        "axis 2",
    );
    // Values past the plan limits: the preset could never be sampled.
    import(
        "sigma.json",
        r#"{"do_elastic_deform": true, "alpha": [0, 10], "sigma": [5, 5000]}"#,
        "elastic.sigma",
    );
    import(
        "alpha.json",
        r#"{"do_elastic_deform": true, "alpha": [0, 1e9], "sigma": [5, 6]}"#,
        "elastic.alpha",
    );
    import(
        "scale.json",
        r#"{"do_scale": true, "scale": [1e-5, 1.2]}"#,
        "scale.range",
    );
    import(
        "translate.json",
        r#"{"shape": [5, 6, 7], "plan": {"translate": [2e6, 0, 0]}}"#,
        "translate",
    );
    import(
        "plan_sigma.json",
        r#"{"shape": [5, 6, 7], "plan": {"elastic": {"alpha": 1, "sigma": 1e5, "seed": 1}}}"#,
        "sigma",
    );
    // What the import accepts still reads back.
    let ok = write(
        dir.path(),
        "ok.json",
        r#"{"do_rotation": true, "order_data": 1, "order_seg": 0, "mirror_axes": [0, 2]}"#,
    );
    let text = common::cli::ok(&["preset", "import", &ok]);
    let p = Preset::parse(&text).unwrap();
    assert_eq!(p.sampling.order, 1);
}

#[test]
fn a_bundle_import_speaks_json_not_debug_output() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = common::cli::ok(&["preset", "export", "--to", "monai-bundle", "nnunet-v2"]);
    let mut v: serde_json::Value = serde_json::from_str(&bundle).unwrap();
    v["modes"] = serde_json::json!([3, 1]);
    let p = write(dir.path(), "modes.json", &v.to_string());
    let err = refused(
        &["preset", "import", &p],
        "modes = [3,1]: expected [ORDER, 0]",
    );
    assert!(!err.contains("Some(") && !err.contains("Number("), "{err}");
    v["modes"] = serde_json::json!([3, 0]);
    v.as_object_mut().unwrap().remove("padding");
    let p = write(dir.path(), "padding.json", &v.to_string());
    let err = refused(&["preset", "import", &p], "padding = missing");
    assert!(!err.contains("None"), "{err}");
}

#[test]
fn preset_ranges_past_the_plan_limits_are_refused_on_loading() {
    let dir = tempfile::tempdir().unwrap();
    let input = nifti(dir.path(), "in.nii", &[6, 7, 8], &[1.0, 1.0, 1.0]);
    let cases = [
        (
            "[translate]\np = 0.01\nrange = [[-2e6, 2e6]]\n",
            "translate.range[0]",
        ),
        ("[scale]\nrange = [[0.5, 2000.0]]\n", "scale.range[0]"),
        (
            "[elastic]\nalpha = [0.0, 1e8]\nsigma = [3.0, 4.0]\n",
            "elastic.alpha",
        ),
        (
            "[elastic]\nalpha = [0.0, 1.0]\nsigma = [3.0, 1001.0]\n",
            "elastic.sigma",
        ),
        (
            "[rotate]\nrange_deg = [[-1.7e308, 1.7e308]]\n",
            "rotate.range_deg[0]",
        ),
    ];
    for (body, needle) in cases {
        let text = format!("version = 1\n{body}");
        let e = Preset::parse(&text).unwrap_err().to_string();
        assert!(e.contains(needle), "{body}: {e}");
        let p = write(dir.path(), "p.toml", &text);
        refused(&["preset", "sample", "--count", "3", &p], needle);
        let out = dir.path().join("batch");
        refused(
            &[
                "batch",
                "--preset",
                &p,
                "--count",
                "100",
                "--quiet",
                "--backend",
                "cpu",
                "--out",
                out.to_str().unwrap(),
                &input,
            ],
            needle,
        );
        assert!(!out.exists(), "{body}: a refused batch left its folder");
    }
    // The limits themselves are allowed, and every draw of them applies.
    let text = "version = 1\n[translate]\nrange = [[-1e6, 1e6]]\n[scale]\nrange = [[0.001, 1000.0]]\n\
                [elastic]\nalpha = [-1e7, 1e7]\nsigma = [0.5, 1000.0]\n";
    let p = Preset::parse(text).unwrap();
    for seed in 0..200 {
        let s = p.sample(seed, 3, 1, &[1.0; 3]).unwrap();
        s.plan.validate(3).unwrap();
    }
}

#[test]
fn mm_values_are_checked_in_voxels_and_spacing_must_be_a_scans() {
    let mm = |spacing: Vec<f64>| Plan {
        space: Space::Mm,
        spacing_mm: spacing,
        ..Plan::default()
    };
    for sp in [
        1e-30,
        1e-6,
        1e-4,
        2e4,
        1e30,
        f64::NAN,
        f64::INFINITY,
        0.0,
        -1.0,
    ] {
        let e = mm(vec![1.0, sp, 1.0]).validate(3).unwrap_err().to_string();
        assert!(e.contains("spacing") && e.contains("0.001"), "{sp}: {e}");
    }
    mm(vec![1e-3, 1.0, 1e4]).validate(3).unwrap();
    // Within the limits in mm, beyond them in voxels.
    let p = Plan {
        translate: vec![0.0, 5000.0, 0.0],
        ..mm(vec![1.0, 1e-3, 1.0])
    };
    let e = p.validate(3).unwrap_err().to_string();
    assert!(e.contains("5e6 voxels") && e.contains("0.001 mm"), "{e}");
    let p = Plan {
        elastic: Some(augscope::augment::Elastic {
            alpha: 10.0,
            sigma: 2.0,
            seed: 1,
        }),
        ..mm(vec![1.0, 1e-3, 1.0])
    };
    let e = p.validate(3).unwrap_err().to_string();
    assert!(e.contains("2000 voxels"), "{e}");
    // A preset in mm says so before drawing, naming the spacing.
    let preset = Preset::parse(
        "version = 1\nspace = \"mm\"\n[elastic]\nalpha = [1.0, 2.0]\nsigma = [1.5, 2.0]\n",
    )
    .unwrap();
    let e = preset.sample(1, 3, 1, &[1e-30, 1.0, 1.0]).unwrap_err();
    assert!(e.to_string().contains("1e-30"), "{e}");
    let e = preset.sample(1, 3, 1, &[1e-3, 1.0, 1.0]).unwrap_err();
    assert!(e.to_string().contains("voxels"), "{e}");
    preset.sample(1, 3, 1, &[1.0, 1.0, 1.0]).unwrap();
    // A translation in mm of a voxel-space preset converts too.
    let preset =
        Preset::parse("version = 1\n[translate]\nunit = \"mm\"\nrange = [[-3.0, 3.0]]\n").unwrap();
    assert!(preset.sample(1, 2, 1, &[1e-6, 1.0]).is_err());
    assert!(preset.sample(1, 2, 1, &[1.0, 1.0]).is_ok());
}

#[test]
fn tiny_voxel_sizes_are_refused_by_apply_and_batch() {
    let dir = tempfile::tempdir().unwrap();
    let preset = write(
        dir.path(),
        "mm.toml",
        "version = 1\nspace = \"mm\"\n[rotate]\nrange_deg = [[-10.0, 10.0]]\n\
         [translate]\nunit = \"mm\"\nrange = [[-2.0, 2.0]]\n[elastic]\nalpha = [1.0, 3.0]\n\
         sigma = [2.0, 3.0]\n",
    );
    for sp in [1e-30, 1e-12, 1e-6] {
        let input = nifti(dir.path(), "tiny.nii", &[6, 7, 8], &[sp, sp, sp]);
        let out = dir.path().join("out.nii");
        let o = out.to_str().unwrap();
        for t in [
            &["--elastic", "5,2"][..],
            &["--translate=1,0,0"],
            &["--rotate", "0.1,0.2,0.3"],
        ] {
            let mut args = vec!["apply", &input, o, "--space", "mm", "--backend", "cpu"];
            args.extend_from_slice(t);
            refused(&args, "spacing");
            assert!(!out.exists());
        }
        let b = dir.path().join("b");
        refused(
            &[
                "batch",
                "--preset",
                &preset,
                "--count",
                "4",
                "--quiet",
                "--backend",
                "cpu",
                "--out",
                b.to_str().unwrap(),
                &input,
            ],
            "spacing",
        );
        assert!(!b.exists(), "{:?}", b.exists().then(|| listing(&b)));
    }
}

/// A FIFO with no writer: reading it would block for ever.
fn fifo(dir: &Path, name: &str) -> String {
    let p = dir.join(name);
    let ok = Command::new("mkfifo").arg(&p).status().unwrap().success();
    assert!(ok, "mkfifo");
    p.display().to_string()
}

#[test]
fn a_fifo_or_a_folder_is_not_a_preset() {
    let dir = tempfile::tempdir().unwrap();
    let input = nifti(dir.path(), "in.nii", &[6, 7, 8], &[1.0, 1.0, 1.0]);
    let folder = dir.path().join("folder.toml");
    std::fs::create_dir(&folder).unwrap();
    let folder = folder.display().to_string();
    let out = dir.path().join("b");
    for bad in [fifo(dir.path(), "p.toml"), folder] {
        refused(&["preset", "sample", &bad], "not a regular file");
        refused(
            &["preset", "export", "--to", "monai", &bad],
            "not a regular file",
        );
        refused(&["preset", "import", &bad], "not a regular file");
        refused(
            &[
                "batch",
                "--preset",
                &bad,
                "--count",
                "1",
                "--quiet",
                "--out",
                out.to_str().unwrap(),
                &input,
            ],
            "not a regular file",
        );
        let e = Preset::load(Path::new(&bad)).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
    }
}

/// `sh -c 'ulimit -v KB; exec augscope ARGS'`: augscope under a limit on its address space.
fn limited(kb: u64, args: &[&str]) -> Command {
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg(format!("ulimit -v {kb} && exec \"$0\" \"$@\""))
        .arg(BIN)
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::piped());
    c
}

#[test]
fn preset_sample_streams_its_samples() {
    // Ten million samples are gigabytes of text: under a 2 GB limit they must come out one by
    // one, the first long before the last is drawn.
    let mut child = limited(
        2 << 20,
        &["preset", "sample", "--count", "10000000", "nnunet-v2"],
    )
    .stdout(Stdio::piped())
    .spawn()
    .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    for _ in 0..3 {
        let line = lines.next().map(Result::unwrap);
        let line = line.unwrap_or_else(|| {
            let _ = child.wait();
            let mut err = String::new();
            let _ = std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err);
            panic!("no sample came out: {err}")
        });
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert!(v.get("plan").is_some(), "{line}");
    }
    assert!(
        child.try_wait().unwrap().is_none(),
        "it stopped after 3 samples"
    );
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn batch_memory_does_not_grow_with_count() {
    // 10^12 samples: nothing may be sized by the count. Under a 4 GB limit the first samples
    // are written and the run goes on; the test stops it then.
    let dir = tempfile::tempdir().unwrap();
    let input = nifti(dir.path(), "in.nii", &[4, 5, 6], &[1.0, 1.0, 1.0]);
    let out: PathBuf = dir.path().join("b");
    let mut child = limited(
        4 << 20,
        &[
            "batch",
            "--preset",
            "nnunet-v2",
            "--count",
            "1000000000000",
            "--quiet",
            "--backend",
            "cpu",
            "--ext",
            "npy",
            "--out",
            out.to_str().unwrap(),
            &input,
        ],
    )
    .stdout(Stdio::null())
    .spawn()
    .unwrap();
    let manifest = out.join("manifest.jsonl");
    let t = Instant::now();
    let written = loop {
        let lines = std::fs::read_to_string(&manifest)
            .map(|t| t.lines().count())
            .unwrap_or(0);
        if lines >= 2 {
            break true;
        }
        if child.try_wait().unwrap().is_some() || t.elapsed() > Duration::from_secs(120) {
            break false;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let running = child.try_wait().unwrap().is_none();
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    assert!(
        written && running,
        "the batch wrote no sample or ended: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
