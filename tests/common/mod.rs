//! What the integration tests share: deterministic test volumes (`volumes`), running the
//! `augscope` binary (`cli`), DICOM series written for a test (`dicom`), paths and loaders of the
//! stored fixtures (`fixtures`, with the case schemas of the scipy resampling fixtures in
//! `scipy_cases` and of the filter fixtures in `filter_cases`), the CPU and CUDA engines
//! (`backends`), and, with the `gui` feature, stepping the explorer (`gui`). Each test binary
//! compiles this module on its own and uses part of it.
#![allow(dead_code)]

pub mod backends;
pub mod cli;
pub mod dicom;
pub mod filter_cases;
pub mod fixtures;
pub mod scipy_cases;
pub mod volumes;

#[cfg(feature = "gui")]
pub mod gui;

/// Records that the running test skipped its work (no GPU, no NVRTC, a missing Python module),
/// so that a skip never reads as a pass: the reason goes to stderr, and, where
/// `AUGSCOPE_SKIP_LOG` names a file, one line `test name<TAB>reason` is appended to it (CI counts
/// them in its summary).
pub fn skipped(why: &str) {
    let test = std::thread::current()
        .name()
        .unwrap_or("unnamed test")
        .to_string();
    eprintln!("SKIPPED {test}: {why}");
    if let Some(path) = std::env::var_os("AUGSCOPE_SKIP_LOG") {
        use std::io::Write as _;
        let line = format!("{test}\t{}\n", why.replace(['\n', '\t'], " "));
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = f.write_all(line.as_bytes());
        }
    }
}
