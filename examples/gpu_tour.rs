//! The explorer on a CUDA machine, rendered by wgpu on that machine's GPU (egui_kittest, no
//! display needed): a 256×512×512 volume resident on the device, the GPU memory panel, slider
//! steps with their latency, and "Compare CPU vs GPU" with both results, the |Δ| map and both
//! times. Screenshots and figures go to `$AUGSCOPE_TOUR_DIR` (default: a temporary folder).
//!
//! `cargo run --release --example gpu_tour` (a CUDA device is needed; `scripts/gpu_tour.sh`).

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use augscope::app::{self, App, BackendChoice, Command};
use augscope::augment::{Order, Plan};
use augscope::engine::{self, cpu::CpuBackend};
use augscope::io::{self, LoadOptions, SaveOptions};
use egui_kittest::Harness;

// The GUI tests' helpers (stepping the app until its worker has answered).
#[allow(dead_code)]
#[path = "../tests/common/gui.rs"]
mod gui;
use gui::settle_within as settle;

fn shot(h: &mut Harness<'_, App>, dir: &std::path::Path, name: &str) {
    h.run_steps(2);
    let img = h.render().expect("render");
    img.save(dir.join(name)).expect("save png");
}

fn main() {
    let dir = std::env::var_os("AUGSCOPE_TOUR_DIR")
        .map_or_else(|| std::env::temp_dir().join("augscope-tour"), PathBuf::from);
    std::fs::create_dir_all(&dir).expect("tour folder");
    let mut report = String::new();

    // The MNI sample resampled to 256×512×512 (real anatomy at the benchmark's size).
    let mni = io::load(&app::sample(), &LoadOptions::default()).expect("mni");
    let shape = vec![256, 512, 512];
    let plan = Plan {
        scale: mni
            .shape
            .iter()
            .zip(&shape)
            .map(|(&a, &b)| a as f64 / b as f64)
            .collect(),
        out_shape: Some(shape.clone()),
        order: Order::Linear,
        ..Plan::default()
    };
    let (big, _, _) =
        engine::apply_new(&CpuBackend::new(), &plan, &mni, None).expect("resample the sample");
    // The volume itself stays out of the tour folder (it is 512 MB).
    let tmp = tempfile::tempdir().expect("temp dir");
    let path = tmp.path().join("mni_256x512x512.npy");
    io::save(&path, &big, &SaveOptions { keep_dtype: false }).expect("write the volume");

    let mut h = Harness::builder()
        .with_size([1920.0, 1080.0])
        .wgpu()
        .build_eframe(move |cc| {
            let mut a = App::new(cc, Some((path, None)));
            a.state.params.backend = BackendChoice::Cuda(0);
            a.state.display.side_by_side = true;
            a
        });
    settle(&mut h, Duration::from_secs(600));
    let adapter = h
        .state()
        .rt
        .work
        .full
        .as_ref()
        .map_or("none".into(), |f| f.backend.clone());
    writeln!(report, "engine of the first result: {adapter}").ok();
    shot(&mut h, &dir, "gpu_memory.png");
    for m in &h.state().rt.gpu.memory {
        writeln!(report, "GPU memory: {m:?}").ok();
    }

    // Slider steps: a rotation on, then elastic; the time from the change to the planes shown
    // and to the whole volume.
    h.state_mut().state.params.elastic = true;
    h.state_mut().state.params.alpha = 900.0;
    h.state_mut().state.params.sigma_vox = 12.0;
    settle(&mut h, Duration::from_secs(600));
    let mut planes = vec![];
    let mut whole = vec![];
    for step in 1..=12 {
        h.state_mut().state.params.rotate_deg[0] = step as f64 * 1.5;
        let t = Instant::now();
        let mut shown = None;
        loop {
            h.step();
            let rt = &h.state().rt;
            let g = rt.work.generation;
            if shown.is_none()
                && (rt.work.shown.as_ref().is_some_and(|s| s.generation == g)
                    || rt.work.full.as_ref().is_some_and(|f| f.generation == g))
            {
                shown = Some(t.elapsed().as_secs_f64() * 1e3);
            }
            if rt.work.full.as_ref().is_some_and(|f| f.generation == g) && h.state().is_idle() {
                break;
            }
            assert!(t.elapsed() < Duration::from_secs(120), "no result");
        }
        h.render().expect("frame");
        planes.push(shown.unwrap_or(f64::NAN));
        whole.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let med = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        (v[v.len() / 2], v[v.len() - 1])
    };
    let (pm, px) = med(&mut planes);
    let (wm, wx) = med(&mut whole);
    writeln!(
        report,
        "slider step (rotation, elastic on) to planes shown: median {pm:.1} ms, max {px:.1} ms; \
         to the whole volume and a frame: median {wm:.1} ms, max {wx:.1} ms"
    )
    .ok();
    if let Some(f) = &h.state().rt.work.full {
        writeln!(report, "last run: {} {:?}", f.backend, f.timings).ok();
    }
    shot(&mut h, &dir, "slider_elastic.png");
    for m in &h.state().rt.gpu.memory {
        writeln!(report, "GPU memory while resident: {m:?}").ok();
    }

    // CPU vs GPU on the same plan.
    h.state_mut().apply(Command::Compare(true));
    let t = Instant::now();
    loop {
        h.step();
        let rt = &h.state().rt;
        if rt
            .gpu
            .comparison
            .as_ref()
            .is_some_and(|c| c.generation == rt.work.generation)
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
        assert!(t.elapsed() < Duration::from_secs(900), "no comparison");
    }
    settle(&mut h, Duration::from_secs(60));
    shot(&mut h, &dir, "compare.png");
    if let Some(c) = &h.state().rt.gpu.comparison {
        let gpu = match &c.gpu {
            Ok((_, ms, name)) => format!("{name} {ms:.1} ms"),
            Err(e) => format!("no GPU result: {e}"),
        };
        writeln!(
            report,
            "compare: CPU {:.1} ms, GPU {gpu}; max |Δ| {:.3e}, mean |Δ| {:.3e}",
            c.cpu_ms, c.max_abs, c.mean_abs
        )
        .ok();
    }
    std::fs::write(dir.join("tour.txt"), &report).expect("report");
    println!("{report}");
}
