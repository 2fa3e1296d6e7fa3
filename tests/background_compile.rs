//! A process that started compiling kernels on other threads and then ends (a run that fell back
//! to the CPU engine before it needed them) exits cleanly: the compiles are waited for, never
//! torn down under NVRTC. Runs `examples/compile_exit.rs`; needs NVRTC, not a GPU.

mod common;

use std::process::Command;

fn example() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    let deps = exe.parent().expect("target/<profile>/deps");
    deps.parent()
        .expect("target/<profile>")
        .join("examples")
        .join(format!("compile_exit{}", std::env::consts::EXE_SUFFIX))
}

#[test]
fn exiting_while_kernels_compile_is_clean() {
    if let Err(why) = augscope::gpu::nvrtc::nvrtc_version() {
        common::skipped(&format!("NVRTC is not loadable ({why})"));
        return;
    }
    let cache = tempfile::tempdir().unwrap();
    for _ in 0..2 {
        let out = Command::new(example())
            .env("AUGSCOPE_CACHE_DIR", cache.path())
            .output()
            .expect("the example runs");
        assert!(
            out.status.success(),
            "{:?}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        // A fresh cache each time, so that every run compiles.
        for e in std::fs::read_dir(cache.path()).unwrap() {
            let p = e.unwrap().path();
            let _ = std::fs::remove_dir_all(&p).or_else(|_| std::fs::remove_file(&p));
        }
    }
}

/// The wait every front end makes before it returns leaves no compile running.
#[test]
fn finishing_joins_every_compile_started_ahead() {
    use augscope::gpu::nvrtc::{
        Family, background_compiles_running, compile_ahead, finish_background_compiles,
    };
    if let Err(why) = augscope::gpu::nvrtc::nvrtc_version() {
        common::skipped(&format!("NVRTC is not loadable ({why})"));
        return;
    }
    for sigma in [2.5, 4.5] {
        compile_ahead(
            Family::Field,
            augscope::engine::cuda::field_defines(sigma),
            None,
        );
    }
    assert!(
        background_compiles_running() > 0,
        "the compiles run on threads"
    );
    finish_background_compiles();
    assert_eq!(background_compiles_running(), 0);
}
