use super::*;

#[test]
fn a_sampled_plan_keeps_its_intensity_steps_on_screen() {
    let plan = Plan {
        flip: vec![1],
        intensity: vec![
            serde_json::from_str(r#"{"monai_scale_intensity": {"factors": [0.1]}}"#).unwrap(),
        ],
        ..Plan::default()
    };
    let p = Params::from_plan(&plan, 3, &Params::default());
    let back = p.to_plan(3, &[1.0; 3]);
    assert_eq!(back.intensity, plan.intensity);
    let done = p.done_list(3, &[1.0; 3], 1.0);
    assert!(done.iter().any(|d| d.transform == "monai_scale_intensity"));
}

#[test]
fn default_params_are_the_identity() {
    assert!(Params::default().to_plan(3, &[1.0; 3]).does_nothing());
    assert!(Params::default().to_plan(2, &[1.0; 2]).does_nothing());
}

#[test]
fn plan_units_and_axes() {
    let p = Params {
        rotate_deg: [90.0, 0.0, 0.0],
        flip: [false, true, false],
        scale_isotropic: false,
        scale: [1.0, 1.2, 0.8],
        translate_vox: [0.0, 2.0, 3.0],
        ..Params::default()
    };
    let plan = p.to_plan(3, &[1.0; 3]);
    assert_eq!(plan.flip, vec![1]);
    assert!((plan.rotate_rad[0] - std::f64::consts::FRAC_PI_2).abs() < 1e-12);
    assert_eq!(plan.scale, vec![1.0, 1.2, 0.8]);
    let plan2 = p.to_plan(2, &[1.0; 2]);
    assert_eq!(plan2.scale, vec![1.2, 0.8]);
    assert_eq!(plan2.translate, vec![2.0, 3.0]);
    assert!(plan2.validate(2).is_ok());
    assert!(plan.validate(3).is_ok());
}

#[test]
fn from_plan_round_trips() {
    let p = Params {
        rotate_deg: [10.0, -5.0, 3.0],
        flip: [true, false, true],
        translate_vox: [1.0, 2.0, 3.0],
        scale: [1.1; 3],
        elastic: true,
        ..Params::default()
    };
    let back = Params::from_plan(&p.to_plan(3, &[1.0; 3]), 3, &p);
    let (mut got, want) = (back.to_plan(3, &[1.0; 3]), p.to_plan(3, &[1.0; 3]));
    // Degrees to radians and back may move the last bit of an angle.
    for (g, w) in got.rotate_rad.iter().zip(&want.rotate_rad) {
        assert!((g - w).abs() < 1e-12, "{g} vs {w}");
    }
    got.rotate_rad = want.rotate_rad.clone();
    assert_eq!(got, want);
}

#[test]
fn the_filter_sits_before_or_after_the_spatial_steps() {
    let mut p = Params {
        rotate_deg: [10.0, 0.0, 0.0],
        translate_vox: [0.0, 1.0, 0.0],
        ..Params::default()
    };
    let names = |p: &Params| -> Vec<String> {
        p.done_list(3, &[1.0; 3], 255.0)
            .into_iter()
            .map(|d| d.transform)
            .collect()
    };
    assert_eq!(names(&p), ["rotate", "translate"]);
    p.filter.enabled = true;
    p.filter.kind = FilterKind::Median;
    assert_eq!(names(&p), ["filter: median", "rotate", "translate"]);
    p.filter.stage = FilterStage::After;
    assert_eq!(names(&p), ["rotate", "translate", "filter: median"]);
    // FEBDS draws a mask and changes no value: not a step of the done list.
    p.filter.kind = FilterKind::Febds;
    assert_eq!(names(&p), ["rotate", "translate"]);
    assert!(p.filter.intensity_filter(255.0).is_none());
    assert_eq!(p.filter.febds(), Some(crate::filter::FebdsMethod::Dog));
    // Gamma's scale is the scan's maximum (1 when it has none).
    p.filter.kind = FilterKind::Gamma;
    assert_eq!(
        p.filter.intensity_filter(0.0),
        Some(crate::filter::Filter::Gamma {
            gamma: 1.0,
            scale: 1.0
        })
    );
}

#[test]
fn state_saved_before_the_filter_panel_still_loads() {
    let mut old = serde_json::to_value(State::default()).expect("serialise");
    old["params"]
        .as_object_mut()
        .expect("params")
        .remove("filter");
    old["params"]["alpha"] = 5.0.into();
    old["display"]
        .as_object_mut()
        .expect("display")
        .remove("mask_opacity");
    let back: State = serde_json::from_value(old).expect("loads");
    assert_eq!(back.params.alpha, 5.0);
    assert_eq!(back.params.filter, FilterParams::default());
    // A partial filter section keeps its values and fills the rest.
    let part: FilterParams =
        serde_json::from_str(r#"{"enabled": true, "sigma_vox": 3.0}"#).expect("loads");
    assert!(part.enabled && part.sigma_vox == 3.0 && part.median_size == 3);
}

#[test]
fn each_scan_keeps_its_own_translation() {
    let (a, b) = (
        std::path::Path::new("/a.nii"),
        std::path::Path::new("/b.nii"),
    );
    let mut s = State::default();
    s.params.translate_vox = [1.0, 2.0, 3.0];
    s.params.alpha = 321.0;
    s.switch_scan(None, a);
    assert_eq!(s.params.translate_vox, [1.0, 2.0, 3.0]);
    s.switch_scan(Some(a), b);
    assert_eq!(s.params.translate_vox, [0.0; 3]);
    assert_eq!(s.params.alpha, 321.0, "the augmentation carries over");
    s.params.translate_vox = [0.0, -5.0, 0.0];
    s.switch_scan(Some(b), a);
    assert_eq!(s.params.translate_vox, [1.0, 2.0, 3.0]);
    s.switch_scan(Some(a), b);
    assert_eq!(s.params.translate_vox, [0.0, -5.0, 0.0]);
}

#[test]
fn history_undo_redo() {
    let mut h = History::default();
    let a = State::default();
    let mut b = a.clone();
    b.params.alpha = 1.0;
    let mut c = b.clone();
    c.draft = Some(crate::augment::preset::load_or_bundled("nnunet-v2".as_ref()).unwrap());
    h.settle(&a);
    h.settle(&b);
    h.settle(&c);
    assert_eq!(h.undo(&c), Some(Snapshot::of(&b)));
    assert_eq!(h.undo(&b), Some(Snapshot::of(&a)));
    assert_eq!(h.redo(&a), Some(Snapshot::of(&b)));
    assert_eq!(h.redo(&b), Some(Snapshot::of(&c)));
    assert!(!h.can_redo());
}
