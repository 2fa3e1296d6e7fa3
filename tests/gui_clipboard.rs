//! The Copy button of Export code reaches the system clipboard: the real window under Xvfb,
//! driven by `scripts/clipboard_xvfb.sh` (xdotool clicks Copy, xsel reads the clipboard). Skipped,
//! with a line saying so, where Xvfb, xsel or xdotool is not installed.
#![cfg(feature = "gui")]

use std::path::Path;
use std::process::Command;

fn installed(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn copy_puts_the_code_on_the_system_clipboard() {
    for tool in ["Xvfb", "xsel", "xdotool"] {
        if !installed(tool) {
            println!("SKIPPED: {tool} is not installed (apt-get install xvfb xsel xdotool)");
            return;
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(root.join("scripts/clipboard_xvfb.sh"))
        .arg(env!("CARGO_BIN_EXE_augscope"))
        .current_dir(root)
        .output()
        .expect("the script runs");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
