//! Running the `augscope` binary that cargo built for these tests: a ready `Command`, a run with
//! its exit code and captured output, and the checks the CLI tests make of them (success, a
//! one-line user error with exit code 2), plus small helpers for arguments and output folders.

use std::path::Path;
use std::process::Command;

/// The `augscope` binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_augscope");

/// A command for the binary under test, to add arguments, environment and pipes to.
pub fn command() -> Command {
    Command::new(BIN)
}

/// Runs augscope with `args`; returns (exit code, or -1 when a signal ended it; stdout; stderr).
pub fn run(args: &[&str]) -> (i32, String, String) {
    let out = command().args(args).output().expect("augscope runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs augscope and asserts exit code 0; returns stdout.
pub fn ok(args: &[&str]) -> String {
    let (code, out, err) = run(args);
    assert_eq!(code, 0, "augscope {args:?}: {err}");
    out
}

/// Runs augscope and asserts exit code 0; returns stderr (where progress and notes go).
pub fn ok_stderr(args: &[&str]) -> String {
    let (code, _, err) = run(args);
    assert_eq!(code, 0, "augscope {args:?}: {err}");
    err
}

/// Asserts exit code 2 with exactly one non-empty stderr line that contains `needle` (case
/// ignored), and no panic.
pub fn assert_user_error(args: &[&str], needle: &str) {
    let (code, _, err) = run(args);
    assert_eq!(code, 2, "args {args:?}: expected exit 2, stderr: {err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(
        lines.len(),
        1,
        "args {args:?}: expected one line, got: {err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        lines[0].to_lowercase().contains(&needle.to_lowercase()),
        "args {args:?}: '{}' does not mention '{needle}'",
        lines[0]
    );
}

/// The names in `dir`, sorted (to check that nothing, not even a temporary, was left behind).
pub fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("temporary folder is readable")
        .map(|e| {
            e.expect("folder entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    v.sort();
    v
}

/// A path as an argument (temporary paths are UTF-8).
pub fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

/// Whether `python3` can import `module` (tests that compare with a Python library skip without
/// it).
pub fn python_has(module: &str) -> bool {
    Command::new("python3")
        .args(["-c", &format!("import {module}")])
        .output()
        .is_ok_and(|o| o.status.success())
}
