use super::*;
use crate::export::interop::export;

fn round_trip(text: &str, ndim: usize) {
    let p = Preset::parse(text).unwrap();
    let json = export(&p, Target::MonaiBundle, ndim).unwrap();
    let back = import_bundle(&json, "").unwrap_or_else(|e| panic!("{e}\n{json}"));
    assert_eq!(back, p, "{json}");
    // What the import reads exports the same config again.
    assert_eq!(export(&back, Target::MonaiBundle, ndim).unwrap(), json);
}

#[test]
fn bundle_round_trip() {
    round_trip(
        r#"version = 1
name = "all"
[flip]
p = [0.5, 0.0, 0.25]
[rotate]
p = 0.7
range_deg = [[-10.0, 25.0], [5.0, 40.0], [-30.0, -5.0]]
[scale]
p = 0.6
range = [[0.8, 1.3]]
distribution = "split"
[translate]
p = 0.4
range = [[-4.0, 2.0], [0.0, 6.0], [-3.0, 3.0]]
unit = "mm"
[elastic]
p = 0.35
alpha = [20.0, 80.0]
sigma = [3.0, 5.0]
[sampling]
order = 3
mode = "mirror"
cval = 0.5
label_order = 1
"#,
        3,
    );
    round_trip(
        r#"version = 1
name = "per axis"
space = "mm"
[rotate]
p = 0.5
p_axis = [0.5, 1.0, 0.25]
range_deg = [[-15.0, 15.0]]
[scale]
p = 1.0
per_axis = true
range = [[0.9, 1.1], [0.8, 1.2], [1.0, 1.3]]
[translate]
p = 1.0
range = [[-2.0, 2.0]]
"#,
        3,
    );
    // The normalisation (MONAI's first, another library's in `_augscope_` alone) and the
    // intensity families.
    for normalize in [
        "method = \"monai_scale_intensity_range\"\na_min = -57.0\na_max = 164.0\nb_min = 0.0\n\
         b_max = 1.0\nclip = true",
        "method = \"nnunet_zscore\"",
        "method = \"torchio_rescale_intensity\"\npercentiles = [0.5, 99.5]",
    ] {
        round_trip(
            &format!(
                "version = 1\nname = \"normalised\"\n[flip]\np = [0.5]\n[normalize]\n{normalize}\n\
                 [[intensity]]\nstep = \"monai_histogram_shift\"\np = 0.3\n\
                 num_control_points = [5, 9]\n[[intensity]]\nstep = \"gamma\"\np = 0.3\n\
                 gamma = [0.7, 1.5]\n"
            ),
            3,
        );
    }
    for b in crate::augment::preset::BUNDLED {
        let p = Preset::parse(b.1).unwrap();
        let json = export(&p, Target::MonaiBundle, 3).unwrap();
        let back = import_bundle(&json, &p.name).unwrap();
        let mut want = p.clone();
        want.source.clear();
        want.description.clear();
        assert_eq!(back, want, "{}", b.0);
    }
}

#[test]
fn bundle_2d_round_trip() {
    round_trip(
        r#"version = 1
name = "2d"
[flip]
p = [0.5, 0.3]
[rotate]
p = 0.2
range_deg = [[-30.0, 30.0]]
[scale]
p = 0.2
range = [[0.7, 1.4]]
"#,
        2,
    );
}

#[test]
fn foreign_entries_are_named() {
    let p = Preset::parse("version = 1\n[rotate]\nrange_deg = [[-5.0, 5.0]]\n").unwrap();
    let json = export(&p, Target::MonaiBundle, 3).unwrap();
    let foreign = json.replace("\"rotate_range\"", "\"shear_range\"");
    let e = import_bundle(&foreign, "").unwrap_err().to_string();
    assert!(e.contains("transforms[0] (RandAffined)"), "{e}");
    let e = import_bundle("{\"train\": 1}", "").unwrap_err().to_string();
    assert!(e.contains("train#preprocessing#transforms"), "{e}");
}
