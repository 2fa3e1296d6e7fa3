//! Picking files and folders: the system's dialog where there is one (rfd: the XDG desktop
//! portal or zenity on Linux, the native one elsewhere), else augscope's own browser, a window
//! with a typed path, the folder's entries and the scan formats augscope reads. A system dialog
//! that cannot open says so and hands over to the browser: picking never fails silently.

use std::path::{Path, PathBuf};
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

use eframe::egui;

use super::Command;

/// What a pick is for, and so which entries it offers and what it does with the choice.
#[derive(Clone, Debug, PartialEq)]
pub enum Purpose {
    /// A scan file.
    Scan,
    /// A label map for the scan at this path.
    Label(PathBuf),
    /// A folder of DICOM files (of one series, or several to choose from).
    DicomFolder,
    /// A preset file (TOML).
    Preset,
    /// The export batch's output folder.
    ExportFolder,
    /// Where to save the augmented volume (and its label map beside it).
    SaveVolume,
}

/// File name endings of the scans augscope opens.
pub const SCAN_EXTENSIONS: [&str; 10] = [
    "nii", "gz", "npy", "png", "jpg", "jpeg", "tif", "tiff", "dcm", "ima",
];

impl Purpose {
    fn title(&self) -> &'static str {
        match self {
            Purpose::Scan => "Open scan",
            Purpose::Label(_) => "Open label map",
            Purpose::DicomFolder => "Open DICOM folder",
            Purpose::Preset => "Open preset",
            Purpose::ExportFolder => "Export folder",
            Purpose::SaveVolume => "Save augmented volume",
        }
    }

    fn wants_folder(&self) -> bool {
        matches!(self, Purpose::DicomFolder | Purpose::ExportFolder)
    }

    /// Whether a file named `name` is offered.
    fn offers(&self, name: &str) -> bool {
        let lower = name.to_ascii_lowercase();
        match self {
            Purpose::Scan | Purpose::Label(_) => SCAN_EXTENSIONS
                .iter()
                .any(|e| lower.ends_with(&format!(".{e}"))),
            Purpose::Preset => lower.ends_with(".toml"),
            Purpose::SaveVolume => [".nii", ".nii.gz", ".npy"]
                .iter()
                .any(|e| lower.ends_with(e)),
            Purpose::DicomFolder | Purpose::ExportFolder => false,
        }
    }

    /// The command that acts on the chosen path.
    pub fn command(&self, p: PathBuf) -> Command {
        match self {
            Purpose::Scan | Purpose::DicomFolder => Command::Open(p, None),
            Purpose::Label(img) => Command::Open(img.clone(), Some(p)),
            Purpose::Preset => Command::SetPreset(p.display().to_string()),
            Purpose::ExportFolder => Command::SetExportFolder(p),
            Purpose::SaveVolume => Command::SaveAugmented(p),
        }
    }
}

/// Whether the system can show a file dialog. Linux needs the XDG desktop portal (over the
/// session bus) or zenity; `AUGSCOPE_FILE_DIALOG=builtin` or `native` overrides the guess.
pub fn system_dialog_available() -> bool {
    match std::env::var("AUGSCOPE_FILE_DIALOG").as_deref() {
        Ok("builtin") => return false,
        Ok("native") => return true,
        _ => {}
    }
    if !cfg!(target_os = "linux") {
        return true;
    }
    let on_path = |exe: &str| {
        std::env::var_os("PATH")
            .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(exe).is_file()))
    };
    if on_path("zenity") {
        return true;
    }
    let bus = std::env::var_os("DBUS_SESSION_BUS_ADDRESS").is_some();
    let data_dirs =
        std::env::var("XDG_DATA_DIRS").unwrap_or_else(|_| "/usr/local/share:/usr/share".into());
    let portal = std::env::split_paths(&data_dirs).any(|d| {
        d.join("dbus-1/services/org.freedesktop.portal.Desktop.service")
            .is_file()
    });
    bus && portal
}

/// A system dialog that came back empty within this time was not seen by anyone: it failed.
const TOO_FAST: Duration = Duration::from_millis(250);

/// Shows the system's dialog for `purpose` on its own thread; the choice comes back on `tx`.
/// A dialog that fails (returns at once with nothing) asks for the built-in browser instead.
pub fn system_dialog(purpose: Purpose, tx: Sender<Command>) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("augscope-file-dialog".into())
        .spawn(move || {
            let t = Instant::now();
            let d = rfd::FileDialog::new().set_title(purpose.title());
            let picked = match &purpose {
                Purpose::Scan | Purpose::Label(_) => {
                    d.add_filter("scans", &SCAN_EXTENSIONS).pick_file()
                }
                Purpose::Preset => d.add_filter("preset", &["toml"]).pick_file(),
                Purpose::DicomFolder | Purpose::ExportFolder => d.pick_folder(),
                Purpose::SaveVolume => d
                    .add_filter("NIfTI or NumPy", &["nii", "gz", "npy"])
                    .set_file_name("augmented.nii.gz")
                    .save_file(),
            };
            let cmd = match picked {
                Some(p) => purpose.command(p),
                None if t.elapsed() < TOO_FAST => Command::Browse(purpose, true),
                None => return,
            };
            let _ = tx.send(cmd);
        })
        .map(|_| ())
}

/// The built-in browser's state.
#[derive(Default)]
pub struct BrowseRuntime {
    pub open: Option<Purpose>,
    /// The folder listed.
    pub dir: PathBuf,
    /// The path field (a folder or a file, typed or clicked).
    pub typed: String,
    /// (name, is a folder) of the folder's entries on offer, folders first.
    pub entries: Vec<(String, bool)>,
    /// Why the folder could not be listed or the typed path not used.
    pub error: Option<String>,
    /// Why the browser is shown instead of the system's dialog.
    pub why: Option<String>,
}

impl BrowseRuntime {
    /// Opens the browser for `purpose` in `start` (or the current folder).
    pub fn show(&mut self, purpose: Purpose, start: Option<&Path>, why: Option<String>) {
        let save = purpose == Purpose::SaveVolume;
        let dir = start
            .map(|p| {
                if p.is_dir() {
                    p.to_path_buf()
                } else {
                    p.parent().unwrap_or(p).to_path_buf()
                }
            })
            .filter(|d| d.is_dir())
            .or_else(|| std::env::current_dir().ok())
            .unwrap_or_else(|| PathBuf::from("/"));
        self.open = Some(purpose);
        self.why = why;
        self.enter(dir);
        if save {
            self.typed = self.dir.join("augmented.nii.gz").display().to_string();
        }
    }

    /// Lists `dir`.
    pub fn enter(&mut self, dir: PathBuf) {
        self.error = None;
        let Some(purpose) = self.open.clone() else {
            return;
        };
        match std::fs::read_dir(&dir) {
            Ok(rd) => {
                let mut entries: Vec<(String, bool)> = rd
                    .flatten()
                    .filter_map(|e| {
                        let name = e.file_name().to_string_lossy().into_owned();
                        if name.starts_with('.') {
                            return None;
                        }
                        // Follows links: a link to a folder is a folder.
                        let is_dir = e.path().is_dir();
                        (is_dir || purpose.offers(&name)).then_some((name, is_dir))
                    })
                    .collect();
                entries.sort_by(|a, b| {
                    b.1.cmp(&a.1)
                        .then_with(|| a.0.to_lowercase().cmp(&b.0.to_lowercase()))
                });
                self.entries = entries;
                self.typed = dir.display().to_string();
                self.dir = dir;
            }
            Err(e) => self.error = Some(format!("cannot list {}: {e}", dir.display())),
        }
    }

    /// Uses the typed path: a folder is entered (or chosen, when a folder is wanted and
    /// `choose_folder`), a file is chosen. Returns the command of a choice.
    pub fn use_typed(&mut self, choose_folder: bool) -> Option<Command> {
        let purpose = self.open.clone()?;
        let raw = self.typed.trim();
        let p = match raw.strip_prefix("~/") {
            Some(rest) => std::env::var_os("HOME")
                .map_or_else(|| PathBuf::from(raw), |h| PathBuf::from(h).join(rest)),
            None => PathBuf::from(raw),
        };
        if p.is_dir() {
            if choose_folder && purpose.wants_folder() {
                self.open = None;
                return Some(purpose.command(p));
            }
            self.enter(p);
            return None;
        }
        if purpose == Purpose::SaveVolume {
            // A new file (or one to replace) in an existing folder.
            if p.parent()
                .is_some_and(|d| d.as_os_str().is_empty() || d.is_dir())
            {
                self.open = None;
                return Some(purpose.command(p));
            }
            self.error = Some(format!("no such folder: {}", p.display()));
            return None;
        }
        if p.is_file() && !purpose.wants_folder() {
            self.open = None;
            return Some(purpose.command(p));
        }
        self.error = Some(if p.exists() || purpose.wants_folder() {
            format!("not a folder: {}", p.display())
        } else {
            format!("no such file or folder: {}", p.display())
        });
        None
    }
}

/// The built-in browser window; returns the command of a choice.
pub fn window(ctx: &egui::Context, b: &mut BrowseRuntime) -> Vec<Command> {
    let mut out = vec![];
    let Some(purpose) = b.open.clone() else {
        return out;
    };
    let mut open = true;
    egui::Window::new(purpose.title())
        .open(&mut open)
        .collapsible(false)
        .default_size([520.0, 420.0])
        .show(ctx, |ui| {
            if let Some(why) = &b.why {
                ui.weak(why);
            }
            ui.horizontal(|ui| {
                if ui.button("Up").on_hover_text("the parent folder").clicked()
                    && let Some(parent) = b.dir.parent()
                {
                    let parent = parent.to_path_buf();
                    b.enter(parent);
                }
                let r = ui.add(
                    egui::TextEdit::singleline(&mut b.typed)
                        .desired_width(f32::INFINITY)
                        .hint_text("a path: type it and press Enter"),
                );
                if r.lost_focus() && ui.input(|i| i.key_pressed(egui::Key::Enter)) {
                    out.extend(b.use_typed(true));
                }
            });
            if let Some(e) = &b.error {
                ui.colored_label(ui.visuals().error_fg_color, e);
            }
            ui.separator();
            let mut enter = None;
            let mut choose = None;
            egui::ScrollArea::vertical()
                .max_height(300.0)
                .auto_shrink([false, false])
                .show(ui, |ui| {
                    if b.entries.is_empty() {
                        ui.weak(if purpose.wants_folder() {
                            "no sub-folders"
                        } else {
                            "no scans or folders here"
                        });
                    }
                    for (name, is_dir) in &b.entries {
                        let text = if *is_dir { format!("{name}/") } else { name.clone() };
                        let r = ui.selectable_label(false, text);
                        if r.clicked() {
                            if *is_dir {
                                enter = Some(b.dir.join(name));
                            } else if purpose == Purpose::SaveVolume {
                                // A file to replace: its name goes to the path field.
                                b.typed = b.dir.join(name).display().to_string();
                            } else {
                                choose = Some(b.dir.join(name));
                            }
                        }
                    }
                });
            if let Some(d) = enter {
                let name = Path::new(&b.typed).file_name().map(|n| n.to_os_string());
                b.enter(d);
                if purpose == Purpose::SaveVolume
                    && let Some(n) = name
                {
                    b.typed = b.dir.join(n).display().to_string();
                }
            }
            if let Some(f) = choose {
                b.open = None;
                out.push(purpose.command(f));
            }
            ui.separator();
            ui.horizontal(|ui| {
                if purpose == Purpose::SaveVolume && ui.button("Save").clicked() {
                    out.extend(b.use_typed(false));
                }
                if purpose.wants_folder() && ui.button("Use this folder").clicked() {
                    b.open = None;
                    out.push(purpose.command(b.dir.clone()));
                }
                if ui.button("Cancel").clicked() {
                    b.open = None;
                }
                ui.weak(match purpose {
                    Purpose::Scan | Purpose::Label(_) => {
                        "NIfTI, NumPy, PNG, JPEG, TIFF, DICOM; a DICOM series: File, Open DICOM folder"
                    }
                    Purpose::Preset => "augscope presets (.toml)",
                    Purpose::DicomFolder => "the folder of a series' files (of several: a picker follows)",
                    Purpose::ExportFolder => "where the batch is written",
                    Purpose::SaveVolume => ".nii, .nii.gz or .npy; the label map goes beside it",
                });
            });
        });
    if !open {
        b.open = None;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_folders_first_and_scans_only() {
        let d = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir(d.path().join("series")).expect("dir");
        for f in ["b.nii.gz", "a.dcm", "notes.txt", ".hidden.nii"] {
            std::fs::write(d.path().join(f), b"x").expect("file");
        }
        let mut b = BrowseRuntime::default();
        b.show(Purpose::Scan, Some(d.path()), None);
        let names: Vec<&str> = b.entries.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["series", "a.dcm", "b.nii.gz"]);
    }

    #[test]
    fn a_typed_path_opens_a_file_enters_a_folder_and_names_what_is_missing() {
        let d = tempfile::tempdir().expect("temp dir");
        let f = d.path().join("x.npy");
        std::fs::write(&f, b"x").expect("file");
        let mut b = BrowseRuntime::default();
        b.show(Purpose::Scan, None, None);
        b.typed = d.path().display().to_string();
        assert_eq!(b.use_typed(true), None);
        assert_eq!(b.dir, d.path());
        b.typed = d.path().join("nope.nii").display().to_string();
        assert_eq!(b.use_typed(true), None);
        assert!(
            b.error
                .as_deref()
                .is_some_and(|e| e.contains("no such file"))
        );
        b.typed = f.display().to_string();
        assert_eq!(b.use_typed(true), Some(Command::Open(f, None)));
        assert!(b.open.is_none());
    }

    #[test]
    fn a_folder_purpose_takes_the_typed_folder() {
        let d = tempfile::tempdir().expect("temp dir");
        let mut b = BrowseRuntime::default();
        b.show(Purpose::DicomFolder, None, None);
        b.typed = d.path().display().to_string();
        assert_eq!(
            b.use_typed(true),
            Some(Command::Open(d.path().to_path_buf(), None))
        );
    }
}
