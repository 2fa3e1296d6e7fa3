//! What a job scheduler and a shell do to augscope: SIGTERM stops a batch as Ctrl-C does (whole
//! files only, then exit 2 with the resume hint), a resumed batch finds its finished samples
//! whatever folder it is started from, and a FIFO given as input is refused at once instead of
//! blocking forever.
#![cfg(unix)]
#![allow(clippy::unwrap_used)] // test helpers: a failed unwrap is a failed test

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use augscope::Volume;
use augscope::io::{self, LoadOptions, SaveOptions};

mod common;
use common::cli::command;

fn volume(dir: &Path, shape: [usize; 3]) -> PathBuf {
    let n: usize = shape.iter().product();
    let data: Vec<f32> = (0..n).map(|i| ((i * 7919) % 211) as f32 / 210.0).collect();
    let p = dir.join("in.npy");
    io::save(
        &p,
        &Volume::new(data, shape.to_vec(), 1),
        &SaveOptions::default(),
    )
    .unwrap();
    p
}

fn preset(dir: &Path) -> PathBuf {
    let p = dir.join("p.toml");
    std::fs::write(
        &p,
        "version = 1\nname = \"p\"\n[elastic]\np = 1.0\nalpha = [200.0, 300.0]\n\
         sigma = [4.0, 5.0]\n[rotate]\np = 1.0\nrange_deg = [[-10, 10]]\n",
    )
    .unwrap();
    p
}

fn manifest_lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn sigterm_stops_a_batch_like_ctrl_c() {
    let dir = tempfile::tempdir().unwrap();
    let img = volume(dir.path(), [56, 60, 52]);
    let p = preset(dir.path());
    let out = dir.path().join("out");
    let mut child = command()
        .args(["batch", "--preset"])
        .arg(&p)
        .args(["--count", "400", "--quiet", "--backend", "cpu", "--out"])
        .arg(&out)
        .arg(&img)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let manifest = out.join("manifest.jsonl");
    let start = Instant::now();
    while manifest_lines(&manifest).len() < 2 {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the batch ended before it was stopped"
        );
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "no sample written"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("--resume"), "{err}");
    let lines = manifest_lines(&manifest);
    assert!(lines.len() < 400, "stopped early");
    for l in &lines {
        let f = PathBuf::from(l["output"].as_str().unwrap());
        assert_eq!(
            io::load(&f, &LoadOptions::default()).unwrap().shape,
            [56, 60, 52]
        );
    }
    let leftovers: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains(".tmp-"))
        .collect();
    assert!(leftovers.is_empty(), "no temporary files: {leftovers:?}");
}

#[test]
fn a_second_run_into_the_same_folder_is_refused_while_the_first_writes() {
    let dir = tempfile::tempdir().unwrap();
    let img = volume(dir.path(), [8, 9, 10]);
    let p = preset(dir.path());
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let batch = |extra: &[&str]| {
        command()
            .args(["batch", "--preset"])
            .arg(&p)
            .args(["--count", "2", "--quiet", "--out"])
            .arg(&out)
            .args(extra)
            .arg(&img)
            .output()
            .unwrap()
    };
    // A run in progress holds the folder's lock (taken here as that run would hold it).
    let held = std::fs::File::create(out.join(".augscope-batch.lock")).unwrap();
    held.try_lock().unwrap();
    for extra in [&[][..], &["--resume"][..]] {
        let o = batch(extra);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(
            err.contains("another augscope batch") && err.lines().count() == 1,
            "{err}"
        );
    }
    // Another shard locks its own file and may write beside it.
    let o = batch(&["--shard", "1/2"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    drop(held);
    let o = batch(&["--shard", "0/2"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn a_batch_that_failed_before_its_first_sample_does_not_block_the_next_run() {
    let dir = tempfile::tempdir().unwrap();
    let img = volume(dir.path(), [8, 9, 10]);
    let p = preset(dir.path());
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    // What a failed run leaves: an empty manifest.
    std::fs::write(out.join("manifest.jsonl"), "").unwrap();
    let o = command()
        .args(["batch", "--preset"])
        .arg(&p)
        .args(["--count", "2", "--quiet", "--out"])
        .arg(&out)
        .arg(&img)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(manifest_lines(&out.join("manifest.jsonl")).len(), 2);
}

#[test]
fn resume_finds_the_samples_from_another_folder() {
    let dir = tempfile::tempdir().unwrap();
    let img = volume(dir.path(), [10, 12, 11]);
    let p = preset(dir.path());
    let a = dir.path().join("a");
    std::fs::create_dir(&a).unwrap();
    let run = |cwd: &Path, out: &str, resume: bool| {
        let mut c = command();
        c.current_dir(cwd)
            .args(["batch", "--preset"])
            .arg(&p)
            .args(["--count", "3", "--quiet", "--out", out])
            .arg(&img);
        if resume {
            c.arg("--resume");
        }
        let o = c.output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    run(&a, "out", false);
    let err = run(dir.path(), "a/out", true);
    assert!(
        err.contains("0 samples written, 3 already done"),
        "the relative paths of the first run still count: {err}"
    );
}

#[test]
fn a_fifo_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("scan.nii");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    for args in [
        vec!["info".to_string(), fifo.display().to_string()],
        vec![
            "apply".to_string(),
            fifo.display().to_string(),
            dir.path().join("o.npy").display().to_string(),
        ],
    ] {
        let mut child = command()
            .args(&args)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let start = Instant::now();
        while child.try_wait().unwrap().is_none() {
            if start.elapsed() > Duration::from_secs(20) {
                let _ = child.kill();
                panic!("augscope {args:?} blocked on a FIFO");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let o = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.contains("not a regular file"), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
}

#[test]
fn apply_writes_all_its_outputs_or_none() {
    let dir = tempfile::tempdir().unwrap();
    let img = volume(dir.path(), [8, 9, 10]);
    let out = dir.path().join("out.npy");
    let coords = dir.path().join("c.npy");
    let report = dir.path().join("missing").join("r.json");
    // The last output cannot be written (its folder does not exist): no output appears.
    let o = command()
        .arg("apply")
        .arg(&img)
        .arg(&out)
        .args(["--rotate", "0.1,0,0", "--save-coords"])
        .arg(&coords)
        .arg("--report")
        .arg(&report)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("r.json") && !err.contains(".augscope-"),
        "{err}"
    );
    assert!(!out.exists() && !coords.exists(), "no output on failure");
    // An existing output stays as it was.
    std::fs::write(&out, b"keep me").unwrap();
    let o = command()
        .arg("apply")
        .arg(&img)
        .arg(&out)
        .arg("--report")
        .arg(&report)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(std::fs::read(&out).unwrap(), b"keep me");
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(left.is_empty(), "no staged files left: {left:?}");
    // With every path writable, all appear.
    let report = dir.path().join("r.json");
    let o = command()
        .arg("apply")
        .arg(&img)
        .arg(&out)
        .args(["--rotate", "0.1,0,0", "--save-coords"])
        .arg(&coords)
        .arg("--report")
        .arg(&report)
        .output()
        .unwrap();
    assert!(o.status.success());
    assert!(out.exists() && coords.exists() && report.exists());
    assert_eq!(
        io::load(&out, &LoadOptions::default()).unwrap().shape,
        [8, 9, 10]
    );
}

#[test]
fn a_full_disk_on_stdout_is_one_line_and_a_closed_pipe_ends_quietly() {
    let full = Path::new("/dev/full");
    if !full.exists() {
        return;
    }
    let cmds: [&[&str]; 5] = [
        &["devices"],
        &["devices", "--json"],
        &["info", "assets/mni152_t1.nii.gz"],
        &["preset", "export", "--to", "monai", "nnunet-v2"],
        &["preset", "sample", "nnunet-v2", "--count", "3"],
    ];
    let root = env!("CARGO_MANIFEST_DIR");
    for args in cmds {
        let o = command()
            .current_dir(root)
            .args(args)
            .stdout(std::fs::File::create(full).unwrap())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains("standard output"), "{args:?}: {err}");
        // A reader that closes its end at once: no panic, no error line.
        let mut child = command()
            .current_dir(root)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let o = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            o.status.success() && !err.contains("panicked"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn a_huge_count_starts_at_once_and_resumes_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let img = volume(dir.path(), [6, 7, 8]);
    let p = preset(dir.path());
    let out = dir.path().join("out");
    let start_run = |resume: bool| {
        let mut c = command();
        c.args(["batch", "--preset"])
            .arg(&p)
            .args(["--count", "100000000", "--backend", "cpu", "--out"])
            .arg(&out)
            .arg(&img)
            .stderr(Stdio::piped());
        if resume {
            c.arg("--resume");
        }
        c.spawn().unwrap()
    };
    let stop_after = |mut child: std::process::Child, lines: usize| {
        let manifest = out.join("manifest.jsonl");
        let start = Instant::now();
        while manifest_lines(&manifest).len() < lines {
            assert!(child.try_wait().unwrap().is_none(), "the batch ended");
            // A work list of 10^8 samples built up front took minutes and gigabytes.
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "no sample written yet"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let pid = child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        let o = child.wait_with_output().unwrap();
        assert_eq!(o.status.code(), Some(2));
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    stop_after(start_run(false), 3);
    let done = manifest_lines(&out.join("manifest.jsonl")).len();
    let err = stop_after(start_run(true), done + 2);
    assert!(
        err.contains(&format!("{done} already done")) && err.contains("of 100000000 in this shard"),
        "{err}"
    );
}

/// `devices` names the compiled-kernel cache (AUGSCOPE_CACHE_DIR) and `devices --clear-cache`
/// removes augscope's entries only, leaving other files.
#[test]
fn devices_reports_and_clears_the_kernel_cache() {
    let dir = tempfile::tempdir().unwrap();
    let kernels = dir.path().join("kernels");
    std::fs::create_dir_all(&kernels).unwrap();
    let entry = augscope::gpu::kernel_cache::Compiled {
        image: vec![1, 2, 3, 4],
        entries: vec!["k".into()],
    };
    for i in 0..2 {
        let key =
            augscope::gpu::kernel_cache::key("f.cu", &format!("{i}"), &[], "sm_90", (13, 0), 13000);
        augscope::gpu::kernel_cache::write(&kernels, &key, &entry);
    }
    std::fs::write(kernels.join("README"), "not a kernel").unwrap();
    let run = |args: &[&str]| {
        let o = command()
            .args(args)
            .env("AUGSCOPE_CACHE_DIR", dir.path())
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let report = run(&["devices"]);
    assert!(
        report.contains("kernels: 2 compiled") && report.contains(&kernels.display().to_string()),
        "{report}"
    );
    let cleared = run(&["devices", "--clear-cache"]);
    assert!(cleared.contains("removed 2 compiled kernels"), "{cleared}");
    assert!(kernels.join("README").exists());
    assert!(run(&["devices"]).contains("kernels: 0 compiled"));
    let off = command()
        .args(["devices", "--json"])
        .env("AUGSCOPE_KERNEL_CACHE", "0")
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&off.stdout).unwrap();
    assert!(json["kernel_cache"].is_null(), "{json}");
}

/// An error line quotes what the user gave (a preset's text, a file name) with its control
/// characters escaped, so that a terminal never acts on an escape sequence in it (found by the
/// in-process fuzzer: a tab, a carriage return and ESC quoted raw from presets).
#[test]
fn error_lines_escape_control_characters_from_presets_and_arguments() {
    let dir = tempfile::tempdir().unwrap();
    let preset = dir.path().join("p.toml");
    std::fs::write(
        &preset,
        "version = 1\n[sampling]\nmode = \"near\\u001b[31mst\\r\"\n",
    )
    .unwrap();
    let runs: [Vec<std::ffi::OsString>; 3] = [
        vec!["preset".into(), "sample".into(), preset.clone().into()],
        vec![
            "preset".into(),
            "export".into(),
            "--to".into(),
            "monai".into(),
            preset.into(),
        ],
        vec![
            "apply".into(),
            dir.path().join("in\u{1b}[31m\t.nii").into(),
            dir.path().join("out.npy").into(),
        ],
    ];
    for args in runs {
        let o = command().args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        let line = err.strip_suffix('\n').unwrap_or(&err);
        assert!(
            !line.chars().any(char::is_control),
            "{args:?}: a raw control character in {line:?}"
        );
        assert!(line.contains("\\u{1b}"), "{args:?}: {line}");
    }
}
