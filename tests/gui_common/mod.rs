//! What the GUI tests share: stepping the app until its worker has answered everything.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use augscope::app::App;
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
        .full
        .as_ref()
        .expect("a result")
        .image
        .data
        .clone()
}
