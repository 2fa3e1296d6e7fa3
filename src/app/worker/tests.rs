//! The worker loop driven by hand: filter stages, caches and FEBDS masks.

use super::*;
use crate::engine::boundary::Mode;

/// A worker loop driven by hand (no thread): requests go straight to `compute`.
fn worker(image: Volume, label: Option<Volume>) -> (WorkerLoop, Receiver<Reply>) {
    let shared = Arc::new(Shared {
        slots: Mutex::new(Slots::default()),
        wake: Condvar::new(),
    });
    let (tx, rx) = channel();
    let mut w = WorkerLoop::new(shared, tx, Box::new(|| {}));
    w.image = Some(Arc::new(image));
    w.label = label.map(Arc::new);
    w.image_key = WorkerLoop::new_key(&mut w.keys);
    (w, rx)
}

fn volume(shape: [usize; 3], seed: usize) -> Volume {
    let n: usize = shape.iter().product();
    let data = (0..n)
        .map(|i| ((i * 37 + seed * 11) % 29) as f32 / 29.0 + (i % 7) as f32 * 0.1)
        .collect();
    Volume::new(data, shape.to_vec(), 1)
}

fn request(plan: Plan, filter: Option<FilterStep>) -> Compute {
    Compute {
        generation: 1,
        plan,
        backend: BackendSpec::Cpu,
        precision: Precision::F32,
        cursor: vec![2, 3, 4],
        views: vec![],
        slices_first: false,
        filter,
        normalize: None,
        model: Model::Augscope,
    }
}

fn gaussian(sigma: f64, stage: FilterStage) -> FilterStep {
    FilterStep {
        filter: Filter::Gaussian { sigma: vec![sigma] },
        boundary: Boundary {
            mode: Mode::Mirror,
            cval: 0.0,
        },
        stage,
    }
}

fn full(rx: &Receiver<Reply>) -> FullResult {
    let mut got = None;
    for r in rx.try_iter() {
        match r {
            Reply::Full(f) => got = Some(f),
            Reply::Failed { message, .. } => panic!("failed: {message}"),
            _ => {}
        }
    }
    got.expect("a whole volume")
}

fn rotation(a: f64) -> Plan {
    Plan {
        rotate_rad: vec![a, 0.0, -0.1],
        ..Plan::default()
    }
}

#[test]
fn before_filters_the_scan_once_and_transforms_the_filtered_scan() {
    let img = volume([6, 7, 8], 0);
    let lab = Volume::new(
        (0..img.data.len()).map(|i| (i % 3) as f32).collect(),
        img.shape.clone(),
        1,
    );
    let (mut w, rx) = worker(img.clone(), Some(lab.clone()));
    let step = gaussian(1.2, FilterStage::Before);
    let filtered = crate::filter::apply_cpu(&step.filter, step.boundary, &img.data, &img.shape)
        .expect("filter");
    let mut fv = img.clone_meta();
    fv.data = filtered;
    for (i, angle) in [0.2, 0.3].into_iter().enumerate() {
        let plan = rotation(angle);
        w.compute(request(plan.clone(), Some(step.clone())));
        let f = full(&rx);
        let r = f.filter.as_ref().expect("report");
        // The second rotation reads the kept filtered scan.
        assert_eq!(r.cached, i == 1, "rotation {angle}");
        assert_eq!(
            (r.name, r.stage, r.backend.as_str()),
            ("gaussian", FilterStage::Before, "cpu")
        );
        let cpu = CpuBackend::new();
        let (want, want_lab, _) =
            engine::apply_new(&cpu, &plan, &fv, Some(&lab)).expect("transform");
        assert!(f.image.data == want.data, "filtered, then transformed");
        // The label map is transformed, never filtered.
        let lab_out = f.label.as_ref().expect("label");
        assert!(Some(&lab_out.data) == want_lab.as_ref().map(|l| &l.data));
        let (unfiltered, _, _) = engine::apply_new(&cpu, &plan, &img, None).expect("transform");
        assert!(
            f.image.data != unfiltered.data,
            "the filter changed the result"
        );
    }
    // Another sigma, then another scan: filtered again.
    w.compute(request(
        rotation(0.3),
        Some(gaussian(2.0, FilterStage::Before)),
    ));
    assert!(!full(&rx).filter.expect("report").cached);
    w.image = Some(Arc::new(volume([6, 7, 8], 1)));
    w.image_key = WorkerLoop::new_key(&mut w.keys);
    w.compute(request(
        rotation(0.3),
        Some(gaussian(2.0, FilterStage::Before)),
    ));
    assert!(!full(&rx).filter.expect("report").cached);
    // Filter off: the scan itself, and the filtered copy is let go.
    w.compute(request(rotation(0.3), None));
    assert!(full(&rx).filter.is_none());
    assert!(w.prefiltered.entry.is_none());
}

#[test]
fn after_filters_the_transformed_volume_and_keeps_the_transform() {
    let img = volume([6, 7, 8], 2);
    let (mut w, rx) = worker(img.clone(), None);
    let plan = rotation(0.4);
    let cpu = CpuBackend::new();
    let (moved, _, _) = engine::apply_new(&cpu, &plan, &img, None).expect("transform");
    let step = gaussian(1.0, FilterStage::After);
    w.compute(request(plan.clone(), Some(step.clone())));
    let f = full(&rx);
    let want = crate::filter::apply_cpu(&step.filter, step.boundary, &moved.data, &moved.shape)
        .expect("filter");
    assert!(f.image.data == want, "transformed, then filtered");
    assert_eq!(f.filter.expect("report").stage, FilterStage::After);
    // A new sigma reuses the transformed volume: swap the scan behind the worker's back
    // (same content key) and the result still comes from the kept transform.
    w.image = Some(Arc::new(volume([6, 7, 8], 3)));
    let step2 = gaussian(2.0, FilterStage::After);
    w.compute(request(plan.clone(), Some(step2.clone())));
    let want2 = crate::filter::apply_cpu(&step2.filter, step2.boundary, &moved.data, &moved.shape)
        .expect("filter");
    assert!(full(&rx).image.data == want2);
    // Another plan transforms again (now the swapped scan).
    w.compute(request(rotation(0.1), Some(step2.clone())));
    let (moved3, _, _) =
        engine::apply_new(&cpu, &rotation(0.1), &volume([6, 7, 8], 3), None).expect("t");
    let want3 =
        crate::filter::apply_cpu(&step2.filter, step2.boundary, &moved3.data, &moved3.shape)
            .expect("filter");
    assert!(full(&rx).image.data == want3);
}

#[test]
fn an_invalid_filter_is_one_failure_line() {
    let (mut w, rx) = worker(volume([4, 5, 6], 0), None);
    let step = FilterStep {
        filter: Filter::Median { size: vec![4] },
        boundary: Boundary::default(),
        stage: FilterStage::Before,
    };
    w.compute(request(Plan::default(), Some(step)));
    let msg = rx
        .try_iter()
        .find_map(|r| match r {
            Reply::Failed { message, .. } => Some(message),
            _ => None,
        })
        .expect("a failure");
    assert!(msg.contains("median") && !msg.contains('\n'), "{msg}");
}

#[test]
fn febds_input_map_keeps_12_bit_data_and_stretches_the_rest() {
    use crate::app::febds_map;
    // 12-bit mammogram: unchanged.
    assert_eq!(febds_map((0.0, 3500.0)), (0.0, 1.0));
    // 8-bit image, floats in [0, 1], CT in HU: [min, max] onto [0, 4095].
    for (lo, hi) in [(0.0f32, 255.0f32), (0.0, 1.0), (-1024.0, 3071.0)] {
        let (o, f) = febds_map((lo, hi));
        let (a, b) = ((lo - o) * f, (hi - o) * f);
        assert!(
            a == 0.0 && (b - 4095.0).abs() < 1e-3,
            "{lo}..{hi}: {a}..{b}"
        );
    }
    // A constant scan: no division by zero.
    let (_, f) = febds_map((7.0, 7.0));
    assert!(f.is_finite());
}

#[test]
fn filter_cache_runs_once_per_key() {
    let mut cache = FilterCache::default();
    let v = volume([2, 3, 4], 0);
    let key = |sigma: f64| FilterKey {
        source: 1,
        filter: Filter::Gaussian { sigma: vec![sigma] },
        boundary: Boundary::default(),
        backend: BackendSpec::Cpu,
        precision: Precision::F32,
    };
    let step = gaussian(1.0, FilterStage::Before);
    let mut runs = 0;
    let mut next = 10;
    let mut seen = vec![];
    for sigma in [1.0, 1.0, 2.0, 2.0, 1.0] {
        let (_, report, content) = cache
            .get_or_run(
                key(sigma),
                || {
                    next += 1;
                    next
                },
                || {
                    runs += 1;
                    filter_volume(&step, &v, &BackendSpec::Cpu, Precision::F32)
                },
            )
            .expect("filtered");
        seen.push((report.cached, content));
    }
    assert_eq!(runs, 3, "1.0, then 2.0, then 1.0 again (one entry kept)");
    // A cached answer keeps its content key (the GPU keeps that upload); a run gets a new one.
    assert_eq!(
        seen,
        [
            (false, 11),
            (true, 11),
            (false, 12),
            (true, 12),
            (false, 13)
        ]
    );
    // An error is not kept: the next request tries again.
    let r = cache.get_or_run(key(3.0), || 0, || Err("no".into()));
    assert!(r.is_err());
    assert!(cache.entry.is_none());
}

#[test]
fn febds_masks_of_planes_are_the_pipeline_on_the_mapped_plane() {
    let (h, w) = (40, 48);
    let mut data = vec![0.1f32; h * w];
    for (y, x) in [(10, 12), (25, 30), (30, 10)] {
        for dy in 0..3 {
            for dx in 0..3 {
                data[(y + dy) * w + x + dx] = 0.9;
            }
        }
    }
    let plane = Arc::new(DisplaySlice {
        width: w,
        height: h,
        channels: 1,
        data: data.clone(),
        pixel_mm: [1.0, 1.0],
        id: 7,
    });
    let req = MaskRequest {
        method: FebdsMethod::Dog,
        planes: vec![plane],
        offset: 0.0,
        factor: 4095.0,
        backend: BackendSpec::Cpu,
        precision: Precision::F32,
    };
    let set = febds_masks(&req);
    let mask = set.mask_for(7).expect("a mask");
    let mapped: Vec<f32> = data.iter().map(|v| v * 4095.0).collect();
    let want = crate::filter::febds::febds(&mapped, [h, w], FebdsMethod::Dog);
    assert!(mask.data == want);
    assert!(mask.data[11 * w + 13] == 1.0, "a spot is in the mask");
    assert!(set.mask_for(8).is_none());
    assert_eq!(set.backend, "cpu");
}

#[test]
fn the_histograms_show_what_the_intensity_steps_did() {
    let img = volume([6, 7, 8], 0);
    let (mut w, rx) = worker(img, None);
    // A mirror moves voxels but keeps every value: the same counts on both sides.
    let flip = Plan {
        flip: vec![0, 2],
        ..Plan::default()
    };
    w.compute(request(flip.clone(), None));
    let h = full(&rx).histograms.expect("histograms");
    assert_eq!(h.before.counts, h.after.counts);
    // The same values summed in another order.
    assert!((h.before.mean - h.after.mean).abs() < 1e-12);
    assert!((h.before.std - h.after.std).abs() < 1e-12);
    // A brightness of ×2 after it: the after side spreads over twice the range.
    let bright = Plan {
        intensity: vec![serde_json::from_str(r#"{"brightness": {"multipliers": [2.0]}}"#).unwrap()],
        ..flip
    };
    w.compute(request(bright, None));
    let h = full(&rx).histograms.expect("histograms");
    assert_ne!(h.before.counts, h.after.counts);
    assert!((h.after.mean - 2.0 * h.before.mean).abs() < 1e-5 * h.before.mean.abs().max(1.0));
    assert!((h.after.std - 2.0 * h.before.std).abs() < 1e-5);
    assert_eq!(
        h.before.counts.iter().sum::<u64>(),
        h.after.counts.iter().sum::<u64>()
    );
}

#[test]
fn a_step_that_needs_the_whole_volume_skips_the_planes() {
    let img = volume([6, 7, 8], 0);
    let (mut w, rx) = worker(img.clone(), None);
    let plan = Plan {
        rotate_rad: vec![0.1, 0.0, 0.0],
        intensity: vec![
            serde_json::from_str(r#"{"contrast": {"factors": [1.5], "preserve_range": true}}"#)
                .unwrap(),
        ],
        ..Plan::default()
    };
    let mut req = request(plan.clone(), None);
    req.slices_first = true;
    w.compute(req);
    // No plane reply (a plane cannot compute the contrast), no failure: the whole volume, as
    // the engine makes it.
    let replies: Vec<Reply> = rx.try_iter().collect();
    assert!(!replies.iter().any(|r| matches!(r, Reply::Slices(_))));
    let f = replies
        .into_iter()
        .find_map(|r| match r {
            Reply::Full(f) => Some(f),
            Reply::Failed { message, .. } => panic!("failed: {message}"),
            _ => None,
        })
        .expect("a whole volume");
    let (want, _, _) = engine::apply_new(&CpuBackend::new(), &plan, &img, None).unwrap();
    assert!(f.image.data == want.data);
}

#[test]
fn the_normalised_scan_is_transformed_and_its_window_map_reported() {
    use crate::core::intensity::{Normalize, ZscoreSettings};
    let img = volume([6, 7, 8], 0);
    let (mut w, rx) = worker(img.clone(), None);
    let plan = rotation(0.2);
    let mut req = request(plan.clone(), None);
    let method = Normalize::NnunetZscore(ZscoreSettings::default());
    req.normalize = Some(method.clone());
    w.compute(req);
    let f = full(&rx);
    let mut normed = img.clone();
    let maps = method.apply_volume(&mut normed).unwrap();
    let (want, _, _) = engine::apply_new(&CpuBackend::new(), &plan, &normed, None).unwrap();
    assert!(
        f.image.data == want.data,
        "the transform of the normalised scan"
    );
    let n = f.normalized.expect("the normalisation's report");
    assert_eq!(n.maps, maps);
    assert!(n.units.contains("ZScoreNormalization"), "{}", n.units);
    // The map takes a raw value to its normalised one (the window of the views).
    let (a, b) = n.maps[0];
    assert!(((a * img.data[5] as f64 + b) - normed.data[5] as f64).abs() < 1e-5);
    // Served again from the cache; without the normalisation, the raw scan again.
    let mut req = request(plan.clone(), None);
    req.normalize = Some(method);
    w.compute(req);
    assert!(full(&rx).image.data == want.data);
    w.compute(request(plan.clone(), None));
    let f = full(&rx);
    let (raw, _, _) = engine::apply_new(&CpuBackend::new(), &plan, &img, None).unwrap();
    assert!(f.image.data == raw.data && f.normalized.is_none());
}
