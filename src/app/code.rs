//! Export → Code… and File → Save preset…: the preset in use (the parameters on screen, or the
//! preset chosen in the controls) as the code of each training library — exactly the text of
//! `augscope preset export` — with its NOTE lines and the library versions it was verified
//! against, a Copy and a Save button; and the preset itself as a TOML file (`version = 1`, with its
//! name, description and source).

use std::io::Write as _;
use std::path::{Path, PathBuf};

use eframe::egui;
use egui::text::LayoutJob;
use egui::{Color32, FontId, TextFormat};

use super::export::chosen_preset;
use super::{Runtime, State};
use crate::augment::preset::Preset;
use crate::export::interop::{Target, verified_against};

/// The tabs of the code window, in order, with the file name each suggests.
pub const TARGETS: &[(Target, &str, &str)] = &[
    (Target::Monai, "MONAI", "monai_aug.py"),
    (Target::TorchIo, "TorchIO", "torchio_aug.py"),
    (
        Target::Batchgenerators,
        "batchgenerators",
        "batchgenerators_aug.py",
    ),
    (Target::Nnunet, "nnU-Net v2 trainer", "nnunet_trainer.py"),
    (
        Target::MonaiBundle,
        "MONAI bundle config",
        "monai_bundle.json",
    ),
    (Target::Python, "augscope (Python)", "augscope_aug.py"),
];

/// The code window and the save-preset window (not persisted).
#[derive(Debug)]
pub struct CodeRuntime {
    pub open: bool,
    /// Index into [`TARGETS`].
    pub tab: usize,
    /// The preset in use (being edited, or chosen in the controls) rather than the parameters on
    /// screen: what training draws from, so it is the default.
    pub from_preset: bool,
    /// Where Save writes the code, one path per tab.
    pub paths: [String; TARGETS.len()],
    /// An existing file that Save would replace, shown with Overwrite and Cancel.
    pub confirm: Option<PathBuf>,
    pub status: Option<Result<String, String>>,
    pub save: SavePreset,
}

impl Default for CodeRuntime {
    fn default() -> Self {
        CodeRuntime {
            open: false,
            tab: 0,
            from_preset: true,
            paths: Default::default(),
            confirm: None,
            status: None,
            save: SavePreset::default(),
        }
    }
}

/// File → Save preset….
#[derive(Debug, Default)]
pub struct SavePreset {
    pub open: bool,
    pub from_preset: bool,
    pub name: String,
    pub description: String,
    pub path: String,
    /// An existing file that Save would replace, shown with Overwrite and Cancel.
    pub confirm: Option<PathBuf>,
    pub status: Option<Result<String, String>>,
}

/// The number of spatial axes of the open scan (3 without one).
fn scan_ndim(rt: &Runtime) -> usize {
    rt.scan
        .as_ref()
        .map_or(3, |s| s.loaded.image.ndim().clamp(2, 3))
}

/// The text of `target` for the chosen preset on a grid of `ndim` axes: what
/// `augscope preset export --to TARGET --ndim NDIM` prints for that preset.
pub fn code_text(
    state: &State,
    ndim: usize,
    from_preset: bool,
    target: Target,
) -> Result<String, String> {
    let p = chosen_preset(state, ndim, from_preset)?;
    crate::export::export(&p, target, ndim).map_err(|e| e.to_string())
}

/// The preset that Save preset writes: the chosen one, with the name and description typed.
pub fn preset_to_save(state: &State, rt: &Runtime) -> Result<Preset, String> {
    let s = &rt.windows.code.save;
    let mut p = chosen_preset(state, scan_ndim(rt), s.from_preset)?;
    if !s.name.trim().is_empty() {
        p.name = s.name.trim().to_string();
    }
    p.description = s.description.trim().to_string();
    if p.source.is_empty() {
        p.source = "augscope explorer".into();
    }
    p.validate().map_err(|e| e.to_string())?;
    Ok(p)
}

/// What Save comes to: written, or held until the user agrees to replace an existing file.
#[derive(Debug, PartialEq)]
pub enum Written {
    Saved(PathBuf),
    Exists(PathBuf),
}

/// Writes `text` to `path`, unless the file exists and `replace` is not that file.
pub fn write_text(
    path: &str,
    what: &'static str,
    text: &str,
    replace: Option<&Path>,
) -> Result<Written, String> {
    let path = PathBuf::from(path.trim());
    if path.as_os_str().is_empty() {
        return Err("type a file name first".into());
    }
    if path.exists() && replace != Some(path.as_path()) {
        return Ok(Written::Exists(path));
    }
    write_file(path, what, text).map(Written::Saved)
}

fn write_file(path: PathBuf, what: &'static str, text: &str) -> Result<PathBuf, String> {
    crate::io::atomic_write(&path, what, |w| w.write_all(text.as_bytes()))
        .map_err(|e| e.to_string())?;
    Ok(path)
}

/// Writes the save-preset window's preset (an existing file only once the user agreed to
/// replace it); on success it becomes the preset of the controls and the first of the recent
/// presets.
pub fn save_preset(state: &mut State, rt: &mut Runtime) -> Result<Written, String> {
    let p = preset_to_save(state, rt)?;
    let s = &rt.windows.code.save;
    let path = match write_text(&s.path, "preset", &p.to_toml(), s.confirm.as_deref())? {
        Written::Saved(path) => path,
        exists @ Written::Exists(_) => return Ok(exists),
    };
    let shown = path.display().to_string();
    state.push_recent_preset(shown.clone());
    state.preset = shown;
    if rt.windows.code.save.from_preset && state.draft.is_some() {
        // The edited preset is now this file: no unsaved edits.
        rt.windows.editor.baseline = Some(p.clone());
        state.draft = Some(p);
    }
    Ok(Written::Saved(path))
}

/// Colours Python (or JSON) for display: comments, strings, numbers and keywords. A tokenizer of
/// lines, enough for the exported snippets; the text itself is unchanged.
pub fn highlight(text: &str, dark: bool) -> LayoutJob {
    const KEYWORDS: &[&str] = &[
        "and", "as", "class", "def", "else", "for", "from", "if", "import", "in", "is", "lambda",
        "not", "or", "return", "with", "True", "False", "None", "self",
    ];
    let (plain, comment, string, number, keyword) = if dark {
        (
            Color32::from_gray(220),
            Color32::from_gray(140),
            Color32::from_rgb(152, 195, 121),
            Color32::from_rgb(209, 154, 102),
            Color32::from_rgb(198, 120, 221),
        )
    } else {
        (
            Color32::from_gray(30),
            Color32::from_gray(110),
            Color32::from_rgb(30, 120, 30),
            Color32::from_rgb(160, 80, 0),
            Color32::from_rgb(120, 30, 160),
        )
    };
    let font = FontId::monospace(12.0);
    let mut job = LayoutJob::default();
    let push = |job: &mut LayoutJob, s: &str, color: Color32, italics: bool| {
        job.append(
            s,
            0.0,
            TextFormat {
                font_id: font.clone(),
                color,
                italics,
                ..Default::default()
            },
        );
    };
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let end_of = |k: usize| chars.get(k).map_or(text.len(), |&(b, _)| b);
    let mut i = 0;
    while i < chars.len() {
        let (start, c) = chars[i];
        let mut j = i + 1;
        let (color, italics) = if c == '#' {
            while j < chars.len() && chars[j].1 != '\n' {
                j += 1;
            }
            (comment, true)
        } else if c == '"' || c == '\'' {
            let triple = text[start..].starts_with(&c.to_string().repeat(3));
            let close = if triple { 3 } else { 1 };
            j = i + close;
            loop {
                if j >= chars.len() {
                    break;
                }
                if chars[j].1 == '\\' {
                    j += 2;
                    continue;
                }
                if !triple && chars[j].1 == '\n' {
                    break;
                }
                if chars[j].1 == c && text[chars[j].0..].starts_with(&c.to_string().repeat(close)) {
                    j += close;
                    break;
                }
                j += 1;
            }
            j = j.min(chars.len());
            (string, false)
        } else if c.is_ascii_digit() {
            while j < chars.len() && (chars[j].1.is_ascii_alphanumeric() || chars[j].1 == '.') {
                j += 1;
            }
            (number, false)
        } else if c.is_alphabetic() || c == '_' {
            while j < chars.len() && (chars[j].1.is_alphanumeric() || chars[j].1 == '_') {
                j += 1;
            }
            let word = &text[start..end_of(j)];
            (
                if KEYWORDS.contains(&word) {
                    keyword
                } else {
                    plain
                },
                false,
            )
        } else {
            while j < chars.len()
                && !matches!(chars[j].1, '#' | '"' | '\'')
                && !chars[j].1.is_alphanumeric()
                && chars[j].1 != '_'
            {
                j += 1;
            }
            (plain, false)
        };
        push(&mut job, &text[start..end_of(j)], color, italics);
        i = j;
    }
    job
}

/// The NOTE lines of a snippet, without the `# NOTE: ` prefix.
pub fn notes(text: &str) -> Vec<&str> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# NOTE: "))
        .collect()
}

/// The preset in use, in words: the one being edited (with its name, and whether it holds
/// unsaved edits), else the one chosen in the controls.
pub fn preset_in_use(state: &State, rt: &Runtime) -> String {
    match &state.draft {
        Some(d) => format!(
            "the edited preset \u{201c}{}\u{201d}{}",
            d.name,
            if rt.windows.editor.unsaved(state) {
                " (unsaved edits)"
            } else {
                ""
            }
        ),
        None => {
            let preset = if state.preset.is_empty() {
                "nnunet-v2"
            } else {
                state.preset.as_str()
            };
            let name = Path::new(preset)
                .file_name()
                .map_or_else(|| preset.to_string(), |n| n.to_string_lossy().into_owned());
            format!("preset {name}")
        }
    }
}

/// The choice between the preset in use and the parameters on screen, and a line that says
/// which one is used.
fn source_choice(ui: &mut egui::Ui, from_preset: &mut bool, in_use: &str, verb: &str) {
    ui.horizontal(|ui| {
        ui.label("from");
        ui.radio_value(from_preset, true, in_use).on_hover_text(
            "the preset in use (being edited, else chosen in the controls), with its ranges and \
             probabilities: what training draws from",
        );
        ui.radio_value(from_preset, false, "current parameters")
            .on_hover_text("one fixed transform: every transform as on screen, p = 1");
    });
    let what = if *from_preset {
        format!("{verb} {in_use}, with its ranges and probabilities")
    } else {
        format!(
            "{verb} the parameters on screen as one fixed transform: every transform p = 1, \
             ranges of one value"
        )
    };
    ui.label(egui::RichText::new(what).strong());
}

fn status_line(ui: &mut egui::Ui, status: &Option<Result<String, String>>) {
    match status {
        Some(Ok(s)) => {
            ui.label(s);
        }
        Some(Err(e)) => {
            ui.colored_label(ui.visuals().error_fg_color, e);
        }
        None => {}
    }
}

/// Export → Code… (while `rt.windows.code.open`).
pub fn code_window(ui: &mut egui::Ui, state: &mut State, rt: &mut Runtime) {
    let mut open = rt.windows.code.open;
    let ndim = scan_ndim(rt);
    egui::Window::new("Export code")
        .open(&mut open)
        .default_size([760.0, 620.0])
        .default_pos([300.0, 80.0])
        .show(ui.ctx(), |ui| {
            let in_use = preset_in_use(state, rt);
            let c = &mut rt.windows.code;
            source_choice(ui, &mut c.from_preset, &in_use, "Exporting");
            ui.horizontal(|ui| {
                for (k, (_, name, _)) in TARGETS.iter().enumerate() {
                    if ui.selectable_label(c.tab == k, *name).clicked() {
                        c.tab = k;
                        c.status = None;
                        c.confirm = None;
                    }
                }
            });
            ui.separator();
            c.tab = c.tab.min(TARGETS.len() - 1);
            let (target, _, suggested) = TARGETS[c.tab];
            let text = match code_text(state, ndim, c.from_preset, target) {
                Ok(t) => t,
                Err(e) => {
                    ui.colored_label(ui.visuals().error_fg_color, e);
                    return;
                }
            };
            // The buttons first: their place does not move with the number of NOTE lines.
            ui.horizontal(|ui| {
                if ui
                    .button("Copy")
                    .on_hover_text("put the whole text on the clipboard")
                    .clicked()
                {
                    ui.ctx().copy_text(text.clone());
                    c.status = Some(Ok("copied to the clipboard".into()));
                }
                let l = ui.label("file");
                if ui
                    .add(
                        egui::TextEdit::singleline(&mut c.paths[c.tab])
                            .id_salt(("code-path", c.tab))
                            .hint_text(suggested)
                            .desired_width(280.0),
                    )
                    .labelled_by(l.id)
                    .changed()
                {
                    c.confirm = None;
                }
                if ui.button("Save").clicked() {
                    // Save asks again; only Overwrite replaces a file.
                    c.confirm = None;
                    c.status = save_code(&c.paths[c.tab], &text, &mut c.confirm);
                }
            });
            if let Some(path) = c.confirm.clone() {
                match confirm_ui(ui, &path) {
                    Some(true) => c.status = save_code(&c.paths[c.tab], &text, &mut c.confirm),
                    Some(false) => c.confirm = None,
                    None => {}
                }
            }
            status_line(ui, &c.status);
            ui.label(format!(
                "{ndim}D · verified against {} · the text of `augscope preset export --to {} \
                 --ndim {ndim}`",
                verified_against(target),
                target_flag(target)
            ));
            let notes = notes(&text);
            if !notes.is_empty() {
                egui::CollapsingHeader::new(format!("NOTE lines ({})", notes.len()))
                    .default_open(true)
                    .show(ui, |ui| {
                        for n in notes {
                            ui.label(format!("• {n}"));
                        }
                    });
            }
            ui.separator();
            let job = highlight(&text, ui.visuals().dark_mode);
            egui::ScrollArea::both()
                .auto_shrink([false, false])
                .show(ui, |ui| {
                    ui.add(egui::Label::new(job).selectable(true).extend());
                });
        });
    if !open {
        rt.windows.code.open = false;
    }
}

/// Save of the code window: writes `text`, or asks first when the file exists (`confirm` holds
/// it until the user answers; an agreed replacement is written).
fn save_code(
    path: &str,
    text: &str,
    confirm: &mut Option<PathBuf>,
) -> Option<Result<String, String>> {
    match write_text(path, "code", text, confirm.as_deref()) {
        Ok(Written::Saved(p)) => {
            *confirm = None;
            Some(Ok(format!("saved {}", p.display())))
        }
        Ok(Written::Exists(p)) => {
            *confirm = Some(p);
            None
        }
        Err(e) => {
            *confirm = None;
            Some(Err(e))
        }
    }
}

/// "FILE exists: Overwrite / Cancel"; `Some(true)` once Overwrite is clicked.
fn confirm_ui(ui: &mut egui::Ui, path: &Path) -> Option<bool> {
    let mut answer = None;
    ui.horizontal_wrapped(|ui| {
        ui.colored_label(
            ui.visuals().warn_fg_color,
            format!("{} exists: replace it?", path.display()),
        );
        if ui.button("Overwrite").clicked() {
            answer = Some(true);
        }
        if ui.button("Cancel").clicked() {
            answer = Some(false);
        }
    });
    answer
}

/// The `--to` name of a target.
pub fn target_flag(t: Target) -> &'static str {
    match t {
        Target::Monai => "monai",
        Target::TorchIo => "torchio",
        Target::Batchgenerators => "batchgenerators",
        Target::BatchgeneratorsJson => "batchgenerators-json",
        Target::Nnunet => "nnunet",
        Target::MonaiBundle => "monai-bundle",
        Target::Python => "python",
    }
}

/// File → Save preset… (while `rt.windows.code.save.open`).
pub fn save_preset_window(ui: &mut egui::Ui, state: &mut State, rt: &mut Runtime) {
    let mut open = rt.windows.code.save.open;
    let mut save = false;
    let in_use = preset_in_use(state, rt);
    egui::Window::new("Save preset")
        .open(&mut open)
        .resizable(false)
        .default_pos([420.0, 140.0])
        .show(ui.ctx(), |ui| {
            let s = &mut rt.windows.code.save;
            source_choice(ui, &mut s.from_preset, &in_use, "Saving");
            egui::Grid::new("save-preset")
                .num_columns(2)
                .show(ui, |ui| {
                    let l = ui.label("name");
                    ui.add(egui::TextEdit::singleline(&mut s.name).desired_width(300.0))
                        .labelled_by(l.id);
                    ui.end_row();
                    let l = ui.label("description");
                    ui.add(
                        egui::TextEdit::multiline(&mut s.description)
                            .desired_rows(2)
                            .desired_width(300.0),
                    )
                    .labelled_by(l.id);
                    ui.end_row();
                    let l = ui.label("file");
                    if ui
                        .add(
                            egui::TextEdit::singleline(&mut s.path)
                                .hint_text("my_preset.toml")
                                .desired_width(300.0),
                        )
                        .labelled_by(l.id)
                        .changed()
                    {
                        s.confirm = None;
                    }
                    ui.end_row();
                });
            if ui.button("Save").clicked() {
                // Save asks again; only Overwrite replaces a file.
                s.confirm = None;
                save = true;
            }
            if let Some(path) = s.confirm.clone() {
                match confirm_ui(ui, &path) {
                    Some(true) => save = true,
                    Some(false) => s.confirm = None,
                    None => {}
                }
            }
            status_line(ui, &s.status);
        });
    if save {
        match save_preset(state, rt) {
            Ok(Written::Saved(p)) => {
                rt.windows.code.save.confirm = None;
                rt.windows.code.save.status = Some(Ok(format!("saved {}", p.display())));
            }
            Ok(Written::Exists(p)) => {
                rt.windows.code.save.confirm = Some(p);
                rt.windows.code.save.status = None;
            }
            Err(e) => {
                rt.windows.code.save.confirm = None;
                rt.windows.code.save.status = Some(Err(e));
            }
        }
    }
    if !open {
        rt.windows.code.save.open = false;
    }
}
