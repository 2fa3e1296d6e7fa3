//! `augscope info`: what is in a scan.

use std::path::{Path, PathBuf};

use super::{LoadOptions, escape_controls, io, write_text};
pub(super) fn info(path: &Path, channels: bool, series: Option<String>) -> anyhow::Result<()> {
    let loaded = io::load(
        path,
        &LoadOptions {
            channels_first: channels,
            series: series.clone(),
            ..LoadOptions::default()
        },
    );
    let v = match loaded {
        Ok(v) => v,
        Err(io::IoError::SeveralSeries { series, .. }) => return series_list(path, &series),
        Err(e) => return Err(e.into()),
    };
    // The chosen series, in words (its headers were read already: this reads them again).
    let chosen = match &series {
        Some(choice) if path.is_dir() => io::dicom::list_series(path)
            .ok()
            .and_then(|list| io::dicom::choose(&list, choice).ok().map(|s| s.label())),
        _ => None,
    };
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
    if let Some(label) = chosen {
        outln!("series:      {label}");
    }
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

/// The series of a DICOM folder that holds several, one line each, and how to choose one.
fn series_list(path: &Path, series: &[io::dicom::SeriesInfo]) -> anyhow::Result<()> {
    let rows: Vec<[String; 6]> = series
        .iter()
        .map(|s| {
            [
                s.number.map_or_else(|| "-".to_string(), |n| n.to_string()),
                cell(&s.modality),
                s.slices.to_string(),
                format!("{}x{}", s.rows, s.cols),
                cell(&s.description),
                cell(&s.uid),
            ]
        })
        .collect();
    let head = ["number", "modality", "slices", "size", "description", "UID"].map(String::from);
    let mut width = [0usize; 6];
    for r in std::iter::once(&head).chain(&rows) {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |r: &[String; 6]| {
        let cells: Vec<String> = r
            .iter()
            .zip(width)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        format!("  {}\n", cells.join("  ").trim_end())
    };
    let mut text = format!(
        "file:        {}\nseries:      {} DICOM series; choose one with --series UID or NUMBER\n",
        path.display(),
        series.len()
    );
    text.push_str(&line(&head));
    for r in &rows {
        text.push_str(&line(r));
    }
    write_text(None, &escape_controls(&text), "series list")
}

/// A header's text as one cell of a line: control characters (a newline among them) escaped.
fn cell(s: &str) -> String {
    escape_controls(s).replace('\n', "\\n")
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
