//! The explorer's timings on the bundled sample, reported (timing belongs in benchmarks, not in
//! tests):
//! - `slices`: the worker's slice-only computation of the three planes, as `compute_slices` runs
//!   it for each slider step, then end to end through the app (parameter change → planes on
//!   screen, the frame rendered by wgpu);
//! - `overlays`: the deformation-grid and Jacobian overlay computation;
//! - `overlay-frame`: the UI thread's frame cost with the overlays on.
//!
//! `cargo run --release --example explorer_timings [slices|overlays|overlay-frame]` (all three
//! without an argument; wgpu renders on whatever adapter the machine has, lavapipe included).

use std::time::{Duration, Instant};

use augscope::app::{self, App};
use egui_kittest::Harness;

// The GUI tests' helpers (stepping the app until its worker has answered).
#[allow(dead_code)]
#[path = "../tests/common/gui.rs"]
mod gui;
use gui::{harness, settle};

fn main() {
    let which = std::env::args().nth(1).unwrap_or_default();
    let all = which.is_empty();
    if !all && !["slices", "overlays", "overlay-frame"].contains(&which.as_str()) {
        eprintln!("usage: explorer_timings [slices|overlays|overlay-frame]");
        std::process::exit(2);
    }
    if all || which == "slices" {
        slices();
    }
    if all || which == "overlays" {
        overlays();
    }
    if all || which == "overlay-frame" {
        overlay_frame();
    }
}

/// The explorer on the sample and its label map.
fn sample() -> Harness<'static, App> {
    Harness::builder()
        .with_size([1500.0, 940.0])
        .wgpu()
        .build_eframe(|cc| {
            let mut app = App::new(cc, Some((app::sample(), Some(app::sample_label()))));
            app.rt.capture.hide_timings = true;
            app
        })
}

/// The worker's slice-only path, then end to end through the app.
fn slices() {
    use augscope::app::slices;
    use augscope::app::worker::{Compute, SliceEngines, compute_slices};
    use augscope::engine::BackendSpec;
    use augscope::engine::cpu::CpuBackend;
    use augscope::io::{LoadOptions, load};

    let image = load(&app::sample(), &LoadOptions::default()).expect("sample");
    let label = load(&app::sample_label(), &LoadOptions::default()).expect("labels");
    let views = slices::views(&image);
    let cursor: Vec<usize> = image.shape.iter().map(|n| n / 2).collect();
    let cpu = SliceEngines::new(std::sync::Arc::new(CpuBackend::new()));
    let mut params = app::Params::default();
    let mut run = |name: &str, change: &dyn Fn(&mut app::Params, usize)| {
        let mut ms = vec![];
        for step in 0..12 {
            change(&mut params, step);
            let c = Compute {
                generation: step as u64,
                plan: params.to_plan(3, &[1.0; 3]),
                backend: BackendSpec::Cpu,
                precision: Default::default(),
                cursor: cursor.clone(),
                views: views.clone(),
                slices_first: true,
                filter: None,
                normalize: None,
                model: Default::default(),
            };
            let t = Instant::now();
            compute_slices(&cpu, &c, (&image, Some(&label), 7)).expect("slices");
            ms.push(t.elapsed().as_secs_f64() * 1e3);
        }
        let first = ms[0];
        let mut rest = ms[1..].to_vec();
        rest.sort_by(f64::total_cmp);
        println!(
            "slice-only {name:<34} first {first:7.1} ms  median {:6.1} ms  max {:6.1} ms",
            rest[rest.len() / 2],
            rest[rest.len() - 1]
        );
    };
    run("rotate (order 1)", &|p, s| p.rotate_deg[0] = s as f64 * 2.0);
    run("scale + translate", &|p, s| {
        p.scale[0] = 1.0 + s as f64 * 0.02;
        p.translate_vox[2] = s as f64;
    });
    run("elastic alpha (field cached)", &|p, s| {
        p.elastic = true;
        p.alpha = 300.0 + 50.0 * s as f64;
    });
    run("elastic sigma (new field planes)", &|p, s| {
        p.sigma_vox = 8.0 + s as f64
    });
    run("rotate, order 3 (cubic)", &|p, s| {
        p.order = augscope::augment::Order::Cubic;
        p.rotate_deg[1] = s as f64;
    });

    // End to end through the app (worker, texture upload, wgpu frame).
    let mut h = sample();
    settle(&mut h);
    let mut e2e = vec![];
    for step in 1..=10 {
        h.state_mut().state.params.rotate_deg[0] = step as f64 * 3.0;
        let t = Instant::now();
        loop {
            h.step();
            let rt = &h.state().rt;
            if rt
                .work
                .shown
                .as_ref()
                .is_some_and(|s| s.generation == rt.work.generation)
            {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        h.render().expect("frame");
        e2e.push(t.elapsed().as_secs_f64() * 1e3);
        settle(&mut h);
    }
    e2e.sort_by(f64::total_cmp);
    println!(
        "end to end: change → planes drawn (lavapipe)  median {:6.1} ms  max {:6.1} ms",
        e2e[e2e.len() / 2],
        e2e[e2e.len() - 1]
    );
}

/// The overlay computation on the sample (197×233×189).
fn overlays() {
    use augscope::app::overlay::{OverlayEngine, Request};
    let vol = augscope::io::load(
        &augscope::app::sample(),
        &augscope::io::LoadOptions::default(),
    )
    .expect("sample loads");
    let views = augscope::app::slices::views(&vol);
    let mut params = augscope::app::Params {
        elastic: true,
        alpha: 400.0,
        sigma_vox: 6.0,
        ..Default::default()
    };
    params.rotate_deg = [10.0, 0.0, 0.0];
    let cursor: Vec<usize> = vol.shape.iter().map(|n| n / 2).collect();
    let req = |grid: bool, jacobian: bool, volume: bool, plan: augscope::augment::Plan| Request {
        generation: 1,
        plan,
        shape: vol.shape.clone(),
        spacing_mm: vol.spacing_mm.clone(),
        views: views.clone(),
        cursor: cursor.clone(),
        grid,
        jacobian,
        volume,
    };
    let never = || false;
    let mut e = OverlayEngine::default();
    let plan = params.to_plan(3, &[1.0; 3]);
    for (what, r) in [
        (
            "grid, new sigma (field planes)",
            req(true, false, false, plan.clone()),
        ),
        ("grid + Jacobian, new sigma", {
            let mut p = plan.clone();
            p.elastic.as_mut().expect("elastic plan").sigma = 7.0;
            req(true, true, false, p)
        }),
        ("grid + Jacobian, cached planes (alpha moved)", {
            let mut p = plan.clone();
            p.elastic.as_mut().expect("elastic plan").sigma = 7.0;
            p.elastic.as_mut().expect("elastic plan").alpha = 300.0;
            req(true, true, false, p)
        }),
    ] {
        let t = Instant::now();
        let p = e.planes(&r, &never).expect("planes").expect("not stopped");
        let segs: usize = p
            .views
            .iter()
            .map(|v| v.grid.iter().map(Vec::len).sum::<usize>())
            .sum();
        println!(
            "{what}: {:.0} ms ({segs} grid points)",
            t.elapsed().as_secs_f64() * 1e3
        );
    }
    let r = req(true, true, true, plan);
    let t = Instant::now();
    e.planes(&r, &never).expect("planes").expect("not stopped");
    println!(
        "at rest, volume field + exact planes: {:.0} ms",
        t.elapsed().as_secs_f64() * 1e3
    );
    let t = Instant::now();
    let v = e.volume(&r, &never).expect("volume").expect("not stopped");
    println!(
        "whole-volume sweep: {:.0} ms, folded {}/{}",
        t.elapsed().as_secs_f64() * 1e3,
        v.folded,
        v.voxels
    );
}

/// Frame cost of the overlays on the sample (UI thread: the grid's polylines and the Jacobian
/// texture).
fn overlay_frame() {
    let mut h = harness(augscope::app::sample());
    {
        let p = &mut h.state_mut().state.params;
        p.elastic = true;
        p.alpha = 400.0;
        p.sigma_vox = 6.0;
    }
    settle(&mut h);
    let frame = |h: &mut Harness<'_, App>| {
        let t = Instant::now();
        for _ in 0..10 {
            h.step();
        }
        let step = t.elapsed().as_secs_f64() * 100.0;
        let t = Instant::now();
        h.render().expect("render");
        (step, t.elapsed().as_secs_f64() * 1e3)
    };
    let off = frame(&mut h);
    {
        let d = &mut h.state_mut().state.display;
        d.deformation_grid = true;
        d.jacobian = true;
    }
    let t = Instant::now();
    settle(&mut h);
    let ready = t.elapsed();
    let on = frame(&mut h);
    println!(
        "overlays ready {ready:?} after the toggle; frame (ui pass) off {:.1} ms, on {:.1} ms; \
         render off {:.0} ms, on {:.0} ms",
        off.0, on.0, off.1, on.1
    );
}
