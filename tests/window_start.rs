//! The window on a machine that cannot show it: no display, or a windowing library missing. Each
//! gives one line naming what to do, and exit status 1, never a panic.
//!
//! What is missing is made missing for real, in a private mount namespace (`unshare -m`, or
//! `unshare -rm` without root): `/dev/null` bound over `libxkbcommon-x11.so.0`, the library a
//! fresh Debian container lacks, or an empty folder over the keyboard descriptions
//! (`/usr/share/X11/xkb`, package xkb-data), without which winit panicked on a bare GPU host.
#![cfg(feature = "gui")]

use std::path::PathBuf;
use std::process::Command;

mod common;
use common::cli::command;

fn one_line(stderr: &[u8]) -> String {
    let s = String::from_utf8_lossy(stderr).into_owned();
    let lines: Vec<&str> = s.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line expected, got: {s}");
    assert!(!s.contains("panicked"), "{s}");
    lines[0].to_string()
}

/// Runs `augscope view` in a private mount namespace after `setup` (shell commands); returns
/// its one line of stderr and its exit status.
fn view_in_namespace(setup: &str) -> (String, Option<i32>) {
    let script = format!("{setup} && exec '{}' view", common::cli::BIN);
    let run = |args: &[&str]| {
        let mut c = Command::new("unshare");
        c.args(args)
            .args(["sh", "-c", &script])
            .env("DISPLAY", ":97")
            .env_remove("WAYLAND_DISPLAY")
            .env_remove("XKB_CONFIG_ROOT");
        c.output()
    };
    // Root needs only a mount namespace; anyone else maps themselves to root in a user one.
    let out = run(&["-m"])
        .ok()
        .filter(|o| !String::from_utf8_lossy(&o.stderr).contains("unshare:"))
        .or_else(|| run(&["-r", "-m"]).ok())
        .expect("unshare runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !stderr.contains("unshare:") && !stderr.contains("mount:"),
        "this machine allows no private mount namespace: {stderr}"
    );
    (one_line(&out.stderr), out.status.code())
}

/// Without the keyboard descriptions (xkb-data), winit would panic inside libxkbcommon.
#[test]
fn missing_keyboard_descriptions_are_one_line_naming_the_package() {
    let empty = tempfile::tempdir().expect("temp dir");
    let xkb = std::path::Path::new("/usr/share/X11/xkb");
    let setup = if xkb.is_dir() {
        format!(
            "mount --bind '{}' {}",
            empty.path().display(),
            xkb.display()
        )
    } else {
        "true".to_string()
    };
    let (line, code) = view_in_namespace(&setup);
    assert_eq!(code, Some(1), "{line}");
    assert!(
        line.contains("xkb-data") && line.contains("XKB_CONFIG_ROOT"),
        "{line}"
    );
}

#[test]
fn no_display_is_one_line_and_exit_1() {
    let out = command()
        .arg("view")
        .env_remove("DISPLAY")
        .env_remove("WAYLAND_DISPLAY")
        .output()
        .expect("run augscope");
    let line = one_line(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{line}");
    assert!(line.starts_with("augscope: error: "), "{line}");
    assert!(
        line.contains("no display") && line.contains("Xvfb"),
        "{line}"
    );
}

/// Where the dynamic loader finds a library (the first `ldconfig -p` entry, links resolved).
fn library_file(soname: &str) -> Option<PathBuf> {
    let out = ["ldconfig", "/sbin/ldconfig", "/usr/sbin/ldconfig"]
        .iter()
        .find_map(|c| Command::new(c).arg("-p").output().ok())?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let path = text
        .lines()
        .filter(|l| l.trim_start().starts_with(soname))
        .find_map(|l| l.split("=>").nth(1))?
        .trim()
        .to_string();
    std::fs::canonicalize(path).ok()
}

#[test]
fn a_missing_windowing_library_is_one_line_naming_the_package() {
    let soname = "libxkbcommon-x11.so.0";
    let setup = match library_file(soname) {
        // Installed: hide it in a private mount namespace.
        Some(f) => format!("mount --bind /dev/null '{}'", f.display()),
        // Not installed at all: the machine already lacks it.
        None => "true".to_string(),
    };
    let (line, code) = view_in_namespace(&setup);
    assert_eq!(code, Some(1), "{line}");
    assert!(line.starts_with("augscope: error: "), "{line}");
    assert!(
        line.contains(soname) && line.contains("libxkbcommon-x11-0"),
        "{line}"
    );
}
