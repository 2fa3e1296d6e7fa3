//! Opening and saving files from the window: a scan and its label map handed to the worker, the
//! system's file dialog or the built-in browser, and the augmented volume written in the
//! background.

use std::path::{Path, PathBuf};

use super::{Command, Runtime, browse};

/// Writes the augmented volume to `path` (float32) and its label map, in its own type, beside it
/// (`NAME_label.EXT`); each file appears whole or not at all.
fn save_augmented(
    path: &Path,
    image: &crate::core::volume::Volume,
    label: Option<&crate::core::volume::Volume>,
) -> Result<String, String> {
    use crate::io::{self, SaveOptions};
    io::save(path, image, &SaveOptions { keep_dtype: false }).map_err(|e| e.to_string())?;
    let mut note = format!("saved {}", path.display());
    if let Some(l) = label {
        let lp = label_path_beside(path);
        io::save(&lp, l, &SaveOptions { keep_dtype: true }).map_err(|e| e.to_string())?;
        note.push_str(&format!(" and {}", lp.display()));
    }
    Ok(note)
}

/// `dir/NAME_label.EXT` beside `dir/NAME.EXT` (`.nii.gz` counts as one extension).
pub fn label_path_beside(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let (stem, ext) = match name.strip_suffix(".nii.gz") {
        Some(s) => (s.to_string(), "nii.gz".to_string()),
        None => match name.rsplit_once('.') {
            Some((s, e)) => (s.to_string(), e.to_string()),
            None => (name.clone(), "nii.gz".to_string()),
        },
    };
    path.with_file_name(format!("{stem}_label.{ext}"))
}

/// Asks the worker to load `image` and `label` (the sample's label map with the sample), and the
/// series `series` of a DICOM folder of several (without, the worker answers with its series for
/// the picker).
pub(super) fn open(
    rt: &mut Runtime,
    image: PathBuf,
    label: Option<PathBuf>,
    series: Option<String>,
) {
    let label = label.or_else(|| (image == sample()).then(sample_label));
    rt.windows.series_picker = None;
    match &rt.worker {
        Some(w) => {
            w.load_series(image.clone(), label, series);
            rt.loading = Some(image);
        }
        None => rt.error = Some("the worker thread is not running".into()),
    }
}

/// Shows the system's file dialog for `purpose`, else (there is none, or it cannot start) the
/// built-in browser.
pub(super) fn pick(rt: &mut Runtime, purpose: browse::Purpose) {
    let start = rt.scan.as_ref().map(|s| s.loaded.path.clone());
    if browse::system_dialog_available() {
        if let Err(e) = browse::system_dialog(purpose.clone(), rt.dialogs.0.clone()) {
            rt.windows.browse.show(
                purpose,
                start.as_deref(),
                Some(format!("the system file dialog cannot start ({e})")),
            );
        }
    } else {
        rt.windows.browse.show(
            purpose,
            start.as_deref(),
            Some(
                "no system file dialog (install xdg-desktop-portal-gtk or zenity): \
                 augscope's own browser"
                    .into(),
            ),
        );
    }
}

/// Writes the current augmented volume and its label map to `path` on a thread of its own; what
/// it comes to arrives as [`Command::Saved`].
pub(super) fn save_in_background(rt: &mut Runtime, path: PathBuf) {
    let full = rt
        .work
        .full
        .as_ref()
        .filter(|f| f.generation == rt.work.generation);
    match full {
        None => rt.error = Some("nothing to save yet: the transform is still running".into()),
        Some(f) => {
            let (image, label) = (f.image.clone(), f.label.clone());
            let tx = rt.dialogs.0.clone();
            let ctx = rt.egui_ctx.clone();
            let spawned = std::thread::Builder::new()
                .name("augscope-save".into())
                .spawn(move || {
                    let _ = tx.send(Command::Saved(save_augmented(
                        &path,
                        &image,
                        label.as_deref(),
                    )));
                    ctx.request_repaint();
                });
            if let Err(e) = spawned {
                rt.error = Some(format!("cannot start saving: {e}"));
            }
        }
    }
}

const SAMPLE_FILE: &str = "mni152_t1.nii.gz";

/// The folder of the bundled sample: `AUGSCOPE_ASSETS` where set; else an `assets/` folder beside
/// the binary or one folder above it (the Python wheel's and the release tarball's layout), or
/// `../share/augscope/assets` (the Debian package's); else the source tree's `assets/`.
pub fn assets_dir() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let exe_dir = std::env::current_exe()
            .ok()
            .and_then(|e| e.canonicalize().ok())
            .and_then(|e| e.parent().map(Path::to_path_buf));
        find_assets(std::env::var_os("AUGSCOPE_ASSETS"), exe_dir.as_deref())
    })
    .clone()
}

/// [`assets_dir`] for a given `AUGSCOPE_ASSETS` and folder of the binary.
fn find_assets(env: Option<std::ffi::OsString>, exe_dir: Option<&Path>) -> PathBuf {
    if let Some(d) = env.filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    let beside = exe_dir.into_iter().flat_map(|bin| {
        [
            bin.join("assets"),
            bin.join("../assets"),
            bin.join("../share/augscope/assets"),
        ]
    });
    for d in beside {
        if d.join(SAMPLE_FILE).is_file() {
            return d;
        }
    }
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/assets"))
}

/// The bundled sample scan (MNI152 T1), in [`assets_dir`].
pub fn sample() -> PathBuf {
    assets_dir().join(SAMPLE_FILE)
}

/// The sample's label map (1 grey matter, 2 white matter).
pub fn sample_label() -> PathBuf {
    assets_dir().join("mni152_tissue_labels.nii.gz")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sample_is_found_in_each_packaged_layout() {
        let source = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/assets"));
        let root = tempfile::tempdir().expect("tempdir");
        let r = root.path();
        let put = |dir: &Path| {
            std::fs::create_dir_all(dir).unwrap();
            std::fs::write(dir.join(SAMPLE_FILE), b"nii").unwrap();
        };
        // No sample anywhere near the binary: the source tree's.
        std::fs::create_dir_all(r.join("empty/bin")).unwrap();
        assert_eq!(find_assets(None, Some(&r.join("empty/bin"))), source);
        assert_eq!(find_assets(None, None), source);
        // The wheel (augscope/bin/augscope, augscope/assets/).
        put(&r.join("wheel/augscope/assets"));
        let bin = r.join("wheel/augscope/bin");
        std::fs::create_dir_all(&bin).unwrap();
        assert_eq!(find_assets(None, Some(&bin)), bin.join("../assets"));
        // The tarball (augscope and assets/ side by side).
        put(&r.join("tar/assets"));
        assert_eq!(
            find_assets(None, Some(&r.join("tar"))),
            r.join("tar/assets")
        );
        // The Debian package (/usr/bin, /usr/share/augscope/assets).
        put(&r.join("usr/share/augscope/assets"));
        std::fs::create_dir_all(r.join("usr/bin")).unwrap();
        assert_eq!(
            find_assets(None, Some(&r.join("usr/bin"))),
            r.join("usr/bin/../share/augscope/assets")
        );
        // The variable wins; an empty one is unset.
        assert_eq!(
            find_assets(Some("/x".into()), Some(&bin)),
            PathBuf::from("/x")
        );
        assert_eq!(
            find_assets(Some("".into()), Some(&bin)),
            bin.join("../assets")
        );
    }
}
