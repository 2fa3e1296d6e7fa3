//! `augscope batch`: names, manifest, shards, resume, and a run killed mid-way then resumed with
//! no partial or duplicate files.

#![allow(clippy::unwrap_used)] // test helpers: a failed unwrap is a failed test

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use augscope::augment::preset::Preset;
use augscope::export::batch::{BatchOptions, manifest_path, run};
use augscope::io::{self, LoadOptions, SaveOptions};
use augscope::{DType, Volume};

mod common;
use common::cli::command;

const PRESET: &str = r#"
version = 1
name = "test"
[flip]
p = [0.5]
[rotate]
p = 0.8
range_deg = [[-20, 20]]
[scale]
p = 0.5
range = [[0.9, 1.1]]
[elastic]
p = 0.3
alpha = [5, 10]
sigma = [2, 3]
[sampling]
order = 1
"#;

/// A small image with a label map (two classes) on disk.
fn inputs(dir: &Path, shape: [usize; 3]) -> (PathBuf, PathBuf) {
    let n: usize = shape.iter().product();
    let data: Vec<f32> = (0..n).map(|i| ((i * 7919) % 101) as f32 / 100.0).collect();
    let mut img = Volume::new(data.clone(), shape.to_vec(), 1);
    img.spacing_mm = vec![2.0, 1.0, 1.0];
    let lab: Vec<f32> = data
        .iter()
        .map(|v| if *v > 0.5 { 1.0 } else { 0.0 })
        .collect();
    let mut lab = Volume::new(lab, shape.to_vec(), 1);
    lab.dtype = DType::U8;
    let ip = dir.join("case.nii.gz");
    let lp = dir.join("case_seg.nii.gz");
    io::save(&ip, &img, &SaveOptions::default()).unwrap();
    io::save(&lp, &lab, &SaveOptions { keep_dtype: true }).unwrap();
    (ip, lp)
}

fn opts(dir: &Path, img: &Path, lab: &Path, count: usize) -> BatchOptions {
    BatchOptions {
        preset: Preset::parse(PRESET).unwrap(),
        inputs: vec![img.to_path_buf()],
        labels: vec![lab.to_path_buf()],
        count,
        seed: 100,
        out_dir: dir.join("out"),
        backend: augscope::engine::BackendSpec::Cpu,
        precision: Default::default(),
        shard: (0, 1),
        resume: false,
        ext: None,
        keep_dtype: false,
        progress: false,
        stop: Arc::new(AtomicBool::new(false)),
        counter: Default::default(),
        writers: 2,
        filter: None,
        model: Default::default(),
        series: None,
    }
}

/// Equal up to the last bit of a float (serde_json parses decimals to within one ulp).
fn approx(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    use serde_json::Value as V;
    match (a, b) {
        (V::Number(x), V::Number(y)) => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            (x - y).abs() <= 1e-15 * x.abs().max(1.0)
        }
        (V::Array(x), V::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| approx(p, q))
        }
        (V::Object(x), V::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| approx(v, w)))
        }
        _ => a == b,
    }
}

fn manifest_lines(p: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(p)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("whole JSON lines"))
        .collect()
}

/// Output folder entries: (images, labels, anything else).
fn listing(dir: &Path) -> (Vec<String>, Vec<String>, Vec<String>) {
    let (mut imgs, mut labs, mut other) = (vec![], vec![], vec![]);
    for e in std::fs::read_dir(dir).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        if name.starts_with("manifest") {
            continue;
        } else if name.ends_with("_label.nii.gz") {
            labs.push(name);
        } else if name.ends_with(".nii.gz") && !name.starts_with('.') {
            imgs.push(name);
        } else {
            other.push(name);
        }
    }
    imgs.sort();
    labs.sort();
    (imgs, labs, other)
}

#[test]
fn batch_writes_named_samples_and_a_complete_manifest() {
    let dir = tempfile::tempdir().unwrap();
    let (img, lab) = inputs(dir.path(), [6, 9, 11]);
    let o = opts(dir.path(), &img, &lab, 12);
    let s = run(&o).unwrap();
    assert_eq!(
        (s.written, s.skipped, s.total, s.interrupted),
        (12, 0, 12, false)
    );
    let out = dir.path().join("out");
    let (imgs, labs, other) = listing(&out);
    assert!(other.is_empty(), "{other:?}");
    assert_eq!(imgs.len(), 12);
    assert_eq!(labs.len(), 12);
    assert!(imgs.contains(&"case_s100.nii.gz".to_string()));
    assert!(labs.contains(&"case_s111_label.nii.gz".to_string()));
    let lines = manifest_lines(&manifest_path(&out, (0, 1)));
    assert_eq!(lines.len(), 12);
    let seeds: HashSet<u64> = lines.iter().map(|l| l["seed"].as_u64().unwrap()).collect();
    assert_eq!(seeds, (100..112).collect());
    for l in &lines {
        for key in [
            "input",
            "output",
            "label_output",
            "done",
            "drawn",
            "plan",
            "backend",
            "timings_ms",
        ] {
            assert!(!l[key].is_null(), "{key} in {l}");
        }
        assert_eq!(l["backend"], "cpu");
        // The recorded plan reproduces the output exactly.
        let seed = l["seed"].as_u64().unwrap();
        let sample = o.preset.sample(seed, 3, 1, &[2.0, 1.0, 1.0]).unwrap();
        assert!(
            approx(&serde_json::to_value(&sample.plan).unwrap(), &l["plan"]),
            "{l}"
        );
        assert!(
            approx(&serde_json::to_value(&sample.done).unwrap(), &l["done"]),
            "{l}"
        );
    }
    let first = &lines[0];
    let image = io::load(&img, &LoadOptions::default()).unwrap();
    let label = io::load(&lab, &LoadOptions::default()).unwrap();
    let plan = o
        .preset
        .sample(first["seed"].as_u64().unwrap(), 3, 1, &[2.0, 1.0, 1.0])
        .unwrap()
        .plan;
    let cpu = augscope::engine::cpu::CpuBackend::new();
    let (want, want_lab, _) =
        augscope::engine::apply_new(&cpu, &plan, &image, Some(&label)).unwrap();
    let got = io::load(
        Path::new(first["output"].as_str().unwrap()),
        &LoadOptions::default(),
    )
    .unwrap();
    let got_lab = io::load(
        Path::new(first["label_output"].as_str().unwrap()),
        &LoadOptions::default(),
    )
    .unwrap();
    assert_eq!(got.data, want.data);
    assert_eq!(got_lab.data, want_lab.unwrap().data);
    assert_eq!(got_lab.dtype, DType::U8, "labels keep their integer type");
    assert_eq!(got.spacing_mm, vec![2.0, 1.0, 1.0], "the header survives");

    // A second run without --resume refuses; with --resume it has nothing to do.
    let e = run(&o).unwrap_err();
    assert!(e.is_user() && e.to_string().contains("--resume"), "{e}");
    let s = run(&BatchOptions {
        resume: true,
        ..o.clone()
    })
    .unwrap();
    assert_eq!((s.written, s.skipped), (0, 12));
    assert_eq!(manifest_lines(&manifest_path(&out, (0, 1))).len(), 12);
}

#[test]
fn shards_split_the_work_without_overlap() {
    let dir = tempfile::tempdir().unwrap();
    let (img, lab) = inputs(dir.path(), [5, 6, 7]);
    let mut all = vec![];
    for k in 0..3 {
        let o = BatchOptions {
            shard: (k, 3),
            ..opts(dir.path(), &img, &lab, 10)
        };
        let s = run(&o).unwrap();
        assert_eq!(s.written, s.total);
        for l in manifest_lines(&manifest_path(&o.out_dir, (k, 3))) {
            all.push(l["seed"].as_u64().unwrap());
        }
    }
    all.sort_unstable();
    assert_eq!(all, (100..110).collect::<Vec<_>>());
    let (imgs, labs, other) = listing(&dir.path().join("out"));
    assert_eq!((imgs.len(), labs.len(), other.len()), (10, 10, 0));
}

#[test]
fn interrupted_batch_leaves_whole_files_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let (img, lab) = inputs(dir.path(), [6, 8, 8]);
    let mut o = opts(dir.path(), &img, &lab, 30);
    // Stop at once: nothing partial, the run says it was interrupted.
    o.stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let s = run(&o).unwrap();
    assert!(s.interrupted && s.written == 0);
    let (_, _, other) = listing(&o.out_dir);
    assert!(other.is_empty(), "{other:?}");
    // A stale temporary file of a killed run is removed on resume.
    std::fs::write(o.out_dir.join(".case_s105.nii.gz.tmp-999999"), b"partial").unwrap();
    o.stop.store(false, std::sync::atomic::Ordering::SeqCst);
    o.resume = true;
    let s = run(&o).unwrap();
    assert_eq!((s.written, s.interrupted), (30, false));
    let (imgs, labs, other) = listing(&o.out_dir);
    assert_eq!((imgs.len(), labs.len()), (30, 30));
    assert!(other.is_empty(), "{other:?}");
}

/// 100 samples through the CLI, killed (SIGKILL) mid-run, then resumed: every sample exactly
/// once, in files and manifest, and nothing partial.
#[test]
fn cli_batch_of_100_killed_and_resumed() {
    let dir = tempfile::tempdir().unwrap();
    let (img, lab) = inputs(dir.path(), [24, 32, 32]);
    let out = dir.path().join("out");
    let args = |resume: bool| {
        let mut a = vec![
            "batch".to_string(),
            "--preset".into(),
            dir.path().join("p.toml").display().to_string(),
            "--count".into(),
            "100".into(),
            "--seed".into(),
            "0".into(),
            "--out".into(),
            out.display().to_string(),
            "--label".into(),
            lab.display().to_string(),
            "--backend".into(),
            "cpu".into(),
            "--quiet".into(),
            img.display().to_string(),
        ];
        if resume {
            a.push("--resume".into());
        }
        a
    };
    std::fs::write(
        dir.path().join("p.toml"),
        PRESET.replace("order = 1", "order = 3"),
    )
    .unwrap();
    let manifest = manifest_path(&out, (0, 1));
    let mut child = command()
        .args(args(false))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    let mut killed = false;
    loop {
        let done = std::fs::read_to_string(&manifest)
            .map(|t| t.lines().count())
            .unwrap_or(0);
        if done >= 10 {
            child.kill().unwrap();
            killed = true;
            break;
        }
        if child.try_wait().unwrap().is_some() || t0.elapsed() > Duration::from_secs(300) {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = child.wait();
    let before = std::fs::read_to_string(&manifest)
        .map(|t| t.lines().count())
        .unwrap_or(0);
    eprintln!("killed: {killed}, {before} samples listed before the kill");
    let st = command().args(args(true)).output().unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let err = String::from_utf8_lossy(&st.stderr);
    assert!(err.contains("100 of 100"), "{err}");

    let lines = manifest_lines(&manifest);
    assert_eq!(lines.len(), 100, "one manifest line per sample");
    let outs: HashSet<&str> = lines
        .iter()
        .map(|l| l["output"].as_str().unwrap())
        .collect();
    assert_eq!(outs.len(), 100, "no duplicates");
    let (imgs, labs, other) = listing(&out);
    assert_eq!((imgs.len(), labs.len()), (100, 100));
    assert!(other.is_empty(), "no partial or temporary files: {other:?}");
    for name in &imgs {
        // Every file is whole: it decodes.
        io::load(&out.join(name), &LoadOptions::default()).unwrap();
    }
}

/// The explorer's filter panel in a batch: before the transform (the input is filtered, then
/// resampled) and after it (the output is filtered); label maps are never filtered; the manifest
/// records the filter. Each output equals the CPU engine's filter and transform in that order.
#[test]
fn batch_applies_an_intensity_filter_before_or_after_the_transform() {
    use augscope::export::batch::BatchFilter;
    use augscope::filter::{Boundary, Filter, apply_cpu};
    let dir = tempfile::tempdir().unwrap();
    let (img, lab) = inputs(dir.path(), [8, 10, 12]);
    let image = io::load(&img, &LoadOptions::default()).unwrap();
    let label = io::load(&lab, &LoadOptions::default()).unwrap();
    let b = Boundary {
        mode: augscope::Mode::Mirror,
        cval: 0.0,
    };
    let filter = Filter::Gaussian { sigma: vec![1.5] };
    let cpu = augscope::engine::cpu::CpuBackend::new();
    let mut outputs = vec![];
    for after in [false, true] {
        let mut o = opts(dir.path(), &img, &lab, 3);
        o.out_dir = dir.path().join(if after { "after" } else { "before" });
        o.filter = Some(BatchFilter {
            filter: filter.clone(),
            boundary: b,
            after,
        });
        run(&o).unwrap();
        let lines = manifest_lines(&manifest_path(&o.out_dir, (0, 1)));
        assert_eq!(lines.len(), 3);
        for l in &lines {
            let f = &l["intensity_filter"];
            assert_eq!(f["stage"], if after { "after" } else { "before" });
            assert_eq!(f["mode"], "mirror");
            assert!(f["filter"]["gaussian"].is_object(), "{f}");
            let plan = o
                .preset
                .sample(l["seed"].as_u64().unwrap(), 3, 1, &[2.0, 1.0, 1.0])
                .unwrap()
                .plan;
            let want = if after {
                let (t, _, _) = augscope::engine::apply_new(&cpu, &plan, &image, None).unwrap();
                apply_cpu(&filter, b, &t.data, &t.shape).unwrap()
            } else {
                let mut filtered = image.clone();
                filtered.data = apply_cpu(&filter, b, &image.data, &image.shape).unwrap();
                let (t, _, _) = augscope::engine::apply_new(&cpu, &plan, &filtered, None).unwrap();
                t.data
            };
            let got = io::load(
                Path::new(l["output"].as_str().unwrap()),
                &LoadOptions::default(),
            )
            .unwrap();
            assert_eq!(got.data, want, "after = {after}, seed {}", l["seed"]);
            let (_, want_lab, _) =
                augscope::engine::apply_new(&cpu, &plan, &image, Some(&label)).unwrap();
            let got_lab = io::load(
                Path::new(l["label_output"].as_str().unwrap()),
                &LoadOptions::default(),
            )
            .unwrap();
            assert_eq!(
                got_lab.data,
                want_lab.unwrap().data,
                "labels are not filtered"
            );
            outputs.push(got.data);
        }
    }
    // Before and after differ (the filter does not commute with the resampling).
    assert_ne!(outputs[0], outputs[3]);
}
