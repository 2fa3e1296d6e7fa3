//! The worker's replies, taken once per frame: a loaded scan, the slices and the whole volume of
//! a generation, progress, comparisons, FEBDS masks, devices and memory.

use std::time::Instant;

use super::series_picker::SeriesPicker;
use super::state::State;
use super::worker::{Loaded, Reply};
use super::{App, Nav, Progress, Runtime, Scan, slices};

impl App {
    /// Takes the worker's replies and the commands the dialogs and background threads sent.
    pub(super) fn receive(&mut self) {
        let mut replies = vec![];
        if let Some(w) = &self.rt.worker {
            while let Some(r) = w.try_recv() {
                replies.push(r);
            }
        }
        while let Ok(cmd) = self.rt.dialogs.1.try_recv() {
            self.apply(cmd);
        }
        let App { state, rt } = self;
        rt.windows.export.poll();
        for r in replies {
            match r {
                Reply::Loaded(Ok(l)) => loaded(state, rt, l),
                Reply::Loaded(Err(e)) => {
                    keep_scan(rt);
                    rt.error = Some(e);
                }
                Reply::ChooseSeries(c) => {
                    keep_scan(rt);
                    rt.windows.series_picker = Some(SeriesPicker::new(c));
                }
                Reply::Slices(s) => {
                    if s.generation == rt.work.generation {
                        if let Some((g, _, t)) = &rt.work.sent
                            && *g == s.generation
                        {
                            rt.work.latency.last_ms = Some(t.elapsed().as_secs_f64() * 1e3);
                        }
                        rt.work.latency.slice_compute_ms = Some(s.elapsed_ms);
                        rt.work.shown = Some(s);
                        rt.work.shown_full = false;
                    }
                }
                Reply::Filling(g) => rt.work.filling = Some(g),
                Reply::Progress {
                    generation,
                    done,
                    total,
                } => {
                    if generation == rt.work.generation {
                        let first = match rt.work.progress {
                            Some(p) if p.generation == generation => p.first,
                            _ => (Instant::now(), done),
                        };
                        rt.work.progress = Some(Progress {
                            generation,
                            done,
                            total,
                            first,
                        });
                    }
                }
                Reply::Full(f) => {
                    if f.generation == rt.work.generation {
                        if let Some((g, _, t)) = &rt.work.sent
                            && *g == f.generation
                            && rt.work.shown.as_ref().is_none_or(|s| s.generation != *g)
                        {
                            rt.work.latency.last_ms = Some(t.elapsed().as_secs_f64() * 1e3);
                        }
                        // A run's note, else the scan's own (e.g. why its label map was not
                        // used), which stays as long as the scan is open.
                        rt.note = f
                            .note
                            .clone()
                            .or_else(|| rt.scan.as_ref().and_then(|s| s.loaded.note.clone()));
                        rt.work.full = Some(f);
                        // The planes on screen stay until this frame's sync cuts the new ones
                        // from the whole volume: no blank frame between the two.
                        rt.work.shown_full = false;
                    }
                }
                Reply::Compared(c) => rt.gpu.comparison = Some(c),
                Reply::Masks(m) => rt.febds.masks = Some(m),
                Reply::Failed {
                    generation,
                    message,
                } => {
                    if generation == rt.work.generation {
                        rt.error = Some(message);
                    }
                }
                Reply::Devices(d) => rt.gpu.devices = Some(d),
                Reply::Memory(m) => rt.gpu.memory = m,
            }
        }
    }
}

/// A load brought no scan (an error, or a folder whose series is to be chosen): the scan on
/// screen stays, and what the worker dropped when the load was posted (a transform, a comparison
/// or masks not yet started) is asked for again.
fn keep_scan(rt: &mut Runtime) {
    rt.loading = None;
    rt.work.sent = None;
    rt.gpu.compare_sent = None;
    rt.febds.mask_sent = None;
}

/// A scan has loaded: its window, views and cursor; everything computed for the last one is
/// dropped.
fn loaded(state: &mut State, rt: &mut Runtime, l: Loaded) {
    rt.loading = None;
    rt.error = None;
    rt.note = l.note.clone();
    state.push_recent(l.path.clone(), l.label_path.clone());
    let before = rt.scan.as_ref().map(|s| s.loaded.path.clone());
    // Another series of the same folder is another scan for the display window.
    let other_series = rt.scan.as_ref().is_some_and(|s| {
        s.loaded.series.as_ref().map(|x| &x.uid) != l.series.as_ref().map(|x| &x.uid)
    });
    state.switch_scan(before.as_deref(), &l.path);
    let views = slices::views(&l.image);
    let cursor = l.image.shape.iter().map(|n| n / 2).collect();
    if state.display.wl_path.as_deref() != Some(l.path.as_path())
        || state.display.level.is_none()
        || other_series
    {
        // The file's own window (DICOM window centre and width) where it has
        // one, else the percentiles; "Auto" always takes the percentiles.
        match l.image.default_window {
            Some((c, w)) if c.is_finite() && w.is_finite() && w > 0.0 => {
                state.display.level = Some(c as f32);
                state.display.width = Some(w as f32);
            }
            _ => {
                let (lo, hi) = l.auto_window;
                state.display.level = Some(0.5 * (lo + hi));
                state.display.width = Some((hi - lo).max(1e-6));
            }
        }
        state.display.wl_path = Some(l.path.clone());
    }
    let nav = Nav {
        zoom: rt.capture.initial_zoom.unwrap_or(1.0),
        ..Nav::default()
    };
    rt.views.nav = vec![nav; views.len()];
    rt.views.active_view = 0;
    rt.scan = Some(Scan {
        loaded: l,
        views,
        cursor,
        frame: 0,
    });
    rt.work.full = None;
    rt.work.shown = None;
    rt.views.original_cursor.clear();
    rt.gpu.comparison = None;
    rt.gpu.compare_sent = None;
    rt.work.sent = None;
    rt.febds.masks = None;
    rt.febds.mask_sent = None;
    rt.work.generation += 1;
}
