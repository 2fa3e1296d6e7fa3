//! The series picker: a DICOM folder of several series, opened in any way (File → Open, a drop,
//! the command line, Recent), lists its series (number, description, modality, slices, size);
//! the one chosen is loaded, and Cancel leaves the scan on screen as it was.

use eframe::egui;

use super::Command;
use super::worker::SeriesChoice;

/// The picker while it is open: the folder's series and the row selected.
pub struct SeriesPicker {
    pub choice: SeriesChoice,
    pub selected: usize,
}

impl SeriesPicker {
    pub fn new(choice: SeriesChoice) -> Self {
        SeriesPicker {
            choice,
            selected: 0,
        }
    }

    /// The command that loads the selected series.
    fn open_selected(&self) -> Option<Command> {
        let s = self.choice.series.get(self.selected)?;
        Some(Command::OpenSeries {
            image: self.choice.path.clone(),
            label: self.choice.label.clone(),
            series: s.uid.clone(),
        })
    }
}

/// The picker window, while `picker` holds one: a row per series, Open series and Cancel.
/// Returns the command that loads the chosen series; the picker closes on a choice or a cancel.
pub fn window(ctx: &egui::Context, picker: &mut Option<SeriesPicker>) -> Option<Command> {
    let p = picker.as_mut()?;
    let mut open = true;
    let (mut chosen, mut cancel) = (false, false);
    let folder = p.choice.path.file_name().map_or_else(
        || p.choice.path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    egui::Window::new("Choose a DICOM series")
        .open(&mut open)
        .collapsible(false)
        .resizable(false)
        .anchor(egui::Align2::CENTER_CENTER, [0.0, 0.0])
        .show(ctx, |ui| {
            ui.label(format!(
                "{folder} holds {} series; choose the one to open.",
                p.choice.series.len()
            ));
            ui.add_space(4.0);
            egui::ScrollArea::vertical()
                .max_height(360.0)
                .show(ui, |ui| chosen |= series_grid_ui(ui, p));
            ui.add_space(4.0);
            ui.horizontal(|ui| {
                chosen |= ui.button("Open series").clicked();
                cancel |= ui.button("Cancel").clicked();
            });
            cancel |= ui.input(|i| i.key_pressed(egui::Key::Escape));
        });
    let command = if chosen { p.open_selected() } else { None };
    if chosen || cancel || !open {
        *picker = None;
    }
    command
}

/// The series, a row each (number, description, modality, slices, size): a click selects a row,
/// a double click chooses it (returns `true`).
fn series_grid_ui(ui: &mut egui::Ui, p: &mut SeriesPicker) -> bool {
    let mut chosen = false;
    egui::Grid::new("series picker")
        .striped(true)
        .num_columns(5)
        .show(ui, |ui| {
            for h in ["number", "description", "modality", "slices", "size"] {
                ui.strong(h);
            }
            ui.end_row();
            for (i, s) in p.choice.series.iter().enumerate() {
                let number = s.number.map_or_else(|| "—".into(), |n| n.to_string());
                // Files without a description are told apart by their UID.
                let description = match (&s.description, &s.uid) {
                    (d, _) if !d.is_empty() => d.clone(),
                    (_, u) if !u.is_empty() => u.clone(),
                    _ => "(no description)".into(),
                };
                let selected = p.selected == i;
                let a = ui.selectable_label(selected, number);
                let b = ui.selectable_label(selected, description);
                ui.label(&s.modality);
                ui.label(s.slices.to_string());
                ui.label(format!("{} × {}", s.rows, s.cols));
                ui.end_row();
                if a.clicked() || b.clicked() {
                    p.selected = i;
                }
                if a.double_clicked() || b.double_clicked() {
                    p.selected = i;
                    chosen = true;
                }
            }
        });
    chosen
}
