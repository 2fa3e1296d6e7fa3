//! `augscope info`: what is in a scan.

use super::*;

pub(super) fn info(path: &Path, channels: bool) -> anyhow::Result<()> {
    let v = io::load(
        path,
        &LoadOptions {
            channels_first: channels,
            ..LoadOptions::default()
        },
    )?;
    use std::fmt::Write as _;
    let mut text = String::new();
    // Lines go to a String first, then to stdout at once: a closed pipe (`augscope info f | head`)
    // is then an ordinary write error, not a panic.
    macro_rules! outln {
        ($($arg:tt)*) => {{
            let _ = writeln!(text, $($arg)*);
        }};
    }
    let names: Vec<String> = v.shape.iter().map(|n| n.to_string()).collect();
    outln!("file:        {}", path.display());
    outln!(
        "shape:       {} ({} axes, array order {})",
        names.join(" x "),
        v.ndim(),
        if v.ndim() == 3 { "[z, y, x]" } else { "[y, x]" }
    );
    outln!("channels:    {}", v.channels);
    outln!("dtype:       {}", v.dtype);
    let sp: Vec<String> = v.spacing_mm.iter().map(|s| format!("{s:.4}")).collect();
    outln!("spacing mm:  {}", sp.join(" x "));
    match v.orientation() {
        Some(codes) => outln!(
            "orientation: {codes} (NIfTI i, j, k = array axes {})",
            if v.ndim() == 3 { "2, 1, 0" } else { "1, 0" }
        ),
        None => outln!("orientation: none (not in a patient's space)"),
    }
    match v.finite_range() {
        Some((lo, hi)) => outln!("range:       {lo} .. {hi}"),
        None => outln!("range:       no finite values"),
    }
    let nonfinite = v.data.iter().filter(|x| !x.is_finite()).count();
    if nonfinite > 0 {
        outln!("non-finite:  {nonfinite} voxels (NaN or Inf)");
    }
    outln!("affine (world_from_voxel, NIfTI index order):");
    for row in &v.world_from_voxel {
        outln!(
            "  [{:>10.4} {:>10.4} {:>10.4} {:>10.4}]",
            row[0],
            row[1],
            row[2],
            row[3]
        );
    }
    write_text(None, &text, "scan summary")
}

/// The path as it will be on disk (the parent canonicalised), for comparing inputs and outputs.
pub(super) fn resolved(p: &Path) -> PathBuf {
    if let Ok(c) = p.canonicalize() {
        return c;
    }
    let parent = p
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    match (parent.canonicalize(), p.file_name()) {
        (Ok(d), Some(n)) => d.join(n),
        _ => p.to_path_buf(),
    }
}
