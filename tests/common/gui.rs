//! What the GUI tests share (with the `gui` feature): the explorer in an egui_kittest harness,
//! stepping it until its worker has answered everything (or a condition holds), the result it
//! shows, and a small scan to open in it. Arrays are `[z, y, x]`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use augscope::Volume;
use augscope::app::App;
use eframe::egui;
use egui_kittest::Harness;

/// Steps frames until the worker has answered everything and the views show the parameters, for
/// three frames in a row and within `limit`.
pub fn settle_within(h: &mut Harness<'_, App>, limit: Duration) {
    let start = Instant::now();
    let mut idle_frames = 0;
    while idle_frames < 3 {
        h.step();
        if h.state().is_idle() {
            idle_frames += 1;
        } else {
            idle_frames = 0;
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(start.elapsed() < limit, "the app did not settle");
    }
}

/// [`settle_within`] five minutes.
pub fn settle(h: &mut Harness<'_, App>) {
    settle_within(h, Duration::from_secs(300));
}

/// The voxels of the whole transformed volume on screen.
pub fn result_image(h: &Harness<'_, App>) -> Vec<f32> {
    h.state()
        .rt
        .work
        .full
        .as_ref()
        .expect("a result")
        .image
        .data
        .clone()
}

/// The explorer on `image` in a 1500 × 940 harness (wgpu), timings hidden and missing glyphs
/// drawn as boxes, so that screenshots do not depend on the machine.
pub fn harness(image: PathBuf) -> Harness<'static, App> {
    Harness::builder()
        .with_size([1500.0, 940.0])
        .wgpu()
        .build_eframe(move |cc| {
            let mut app = App::new(cc, Some((image, None)));
            app.rt.capture.hide_timings = true;
            cc.egui_ctx
                .set_missing_glyph_policy(egui::MissingGlyphPolicy::Tofu);
            app
        })
}

/// Steps frames until `done` holds (300 s at most).
pub fn step_until(h: &mut Harness<'_, App>, what: &str, done: impl Fn(&App) -> bool) {
    let start = Instant::now();
    while !done(h.state()) {
        h.step();
        std::thread::sleep(Duration::from_millis(5));
        assert!(
            start.elapsed() < Duration::from_secs(300),
            "timed out waiting for {what}"
        );
    }
}

/// Steps until the grid of draws is complete, then asserts that it shows no error.
pub fn grid_done(h: &mut Harness<'_, App>) {
    step_until(h, "the grid", |a| a.rt.windows.grid.complete());
    h.run_steps(4);
    assert!(
        h.state().rt.windows.grid.error.is_none(),
        "{:?}",
        h.state().rt.windows.grid.error
    );
}

/// A scan whose values vary along every axis (a wrong plane or a shifted sample shows), written
/// as NIfTI into `dir`.
pub fn small_scan(dir: &Path, shape: [usize; 3]) -> PathBuf {
    use augscope::io::{SaveOptions, save};
    let n: usize = shape.iter().product();
    let data: Vec<f32> = (0..n)
        .map(|i| {
            let (z, y, x) = (
                i / (shape[1] * shape[2]),
                (i / shape[2]) % shape[1],
                i % shape[2],
            );
            ((z * 31 + y * 7 + x * 3) % 23) as f32 / 23.0 + 0.01 * x as f32
        })
        .collect();
    let img = dir.join("small.nii.gz");
    save(
        &img,
        &Volume::new(data, shape.to_vec(), 1),
        &SaveOptions::default(),
    )
    .expect("write image");
    img
}
