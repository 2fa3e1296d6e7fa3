//! The `augscope` command line end to end: exit codes, one-line errors, no partial outputs, inputs
//! never changed (docs/design.md §7). Runs the real binary on real and hostile files.

use std::path::Path;

mod common;
use common::cli::{assert_user_error, listing, run};
use common::fixtures::data;

fn write_npy_f32(path: &Path, shape: &[usize], data: &[f32]) {
    augscope::io::npy::write(path, data, shape, augscope::DType::F32).expect("npy written");
}

#[test]
fn apply_writes_output_report_and_coordinates() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.nii.gz");
    let rep = dir.path().join("report.json");
    let coords = dir.path().join("coords.npy");
    let input = data("anatomical.nii");
    let before = std::fs::read(&input).unwrap();
    let (code, _, err) = run(&[
        "apply",
        input.to_str().unwrap(),
        out.to_str().unwrap(),
        "--rotate=-0.2,0.1,0.05",
        "--scale",
        "1.1",
        "--translate",
        "1,-2,0.5",
        "--flip",
        "2",
        "--elastic",
        "40,3",
        "--seed",
        "7",
        "--order",
        "3",
        "--mode",
        "mirror",
        "--cval=-0.5",
        "--backend",
        "cpu",
        "--report",
        rep.to_str().unwrap(),
        "--save-coords",
        coords.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        std::fs::read(&input).unwrap(),
        before,
        "the input must not change"
    );
    let v = augscope::io::load(&out, &Default::default()).unwrap();
    let src = augscope::io::load(&input, &Default::default()).unwrap();
    assert_eq!(v.shape, src.shape);
    assert_eq!(v.world_from_voxel, src.world_from_voxel, "the grid is kept");
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&rep).unwrap()).unwrap();
    let done: Vec<&str> = r["done"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["transform"].as_str().unwrap())
        .collect();
    assert_eq!(done, ["flip", "elastic", "rotate", "scale", "translate"]);
    assert_eq!(r["backend"], "cpu");
    assert!(r["displacement"]["max_vox"].as_f64().unwrap() > 0.0);
    let c = augscope::io::npy::read(&coords).unwrap();
    let mut want = vec![3];
    want.extend_from_slice(&src.shape);
    assert_eq!(c.shape, want);
}

#[test]
fn info_names_orientation_and_shape() {
    let (code, out, err) = run(&["info", data("anatomical.nii").to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    // nibabel: img.shape == (33, 41, 25), aff2axcodes == ('L', 'A', 'S'), dtype int16.
    assert!(out.contains("25 x 41 x 33"), "{out}");
    assert!(out.contains("orientation: LAS"), "{out}");
    assert!(out.contains("int16"), "{out}");
}

#[test]
fn bad_flags_are_one_line_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let input = data("anatomical.nii");
    let i = input.to_str().unwrap();
    let o = dir.path().join("o.nii");
    let o = o.to_str().unwrap();
    assert_user_error(&["apply", i, o, "--mode", "foo"], "unknown boundary mode");
    assert_user_error(&["apply", i, o, "--order", "2"], "order");
    assert_user_error(&["apply", i, o, "--rotate", "0.1,0.2"], "rotate");
    assert_user_error(&["apply", i, o, "--translate", "1,2"], "translate");
    assert_user_error(&["apply", i, o, "--scale", "1,2"], "scale");
    assert_user_error(&["apply", i, o, "--scale", "0"], "scale");
    assert_user_error(&["apply", i, o, "--flip", "3"], "flip");
    assert_user_error(&["apply", i, o, "--elastic", "100"], "alpha,sigma");
    assert_user_error(&["apply", i, o, "--elastic", "100,0"], "sigma");
    assert_user_error(&["apply", i, o, "--rotate", "nan,0,0"], "finite");
    assert_user_error(&["apply", i, o, "--backend", "tpu"], "backend");
    assert_user_error(&["apply", i, o, "--precision", "f8"], "precision");
    assert_user_error(&["apply", i, o, "--label", i], "label");
    assert_user_error(&["apply", i, o, "--bogus"], "bogus");
    assert_user_error(&["nosuchcommand"], "nosuchcommand");
    assert_eq!(
        listing(dir.path()),
        Vec::<String>::new(),
        "no output on error"
    );
}

#[test]
fn outputs_never_overwrite_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.nii");
    std::fs::copy(data("anatomical.nii"), &input).unwrap();
    let before = std::fs::read(&input).unwrap();
    let i = input.to_str().unwrap();
    assert_user_error(&["apply", i, i], "overwrite");
    // The same file through another spelling of its path.
    let other = format!("{}/./in.nii", dir.path().display());
    assert_user_error(&["apply", i, &other], "overwrite");
    let o = dir.path().join("o.nii");
    assert_user_error(
        &[
            "apply",
            i,
            o.to_str().unwrap(),
            "--report",
            o.to_str().unwrap(),
        ],
        "two outputs",
    );
    assert_eq!(std::fs::read(&input).unwrap(), before);
    assert_eq!(listing(dir.path()), vec!["in.nii".to_string()]);
}

#[test]
fn hostile_files_are_one_line_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = d.join("out.nii");
    let o = out.to_str().unwrap();
    let good = std::fs::read(data("anatomical.nii")).unwrap();

    assert_user_error(
        &["apply", d.join("missing.nii").to_str().unwrap(), o],
        "missing.nii",
    );

    let magic = d.join("magic.nii");
    std::fs::write(
        &magic,
        b"this is not a nifti file at all, not even close......",
    )
    .unwrap();
    assert_user_error(&["apply", magic.to_str().unwrap(), o], "magic.nii");

    let trunc = d.join("trunc.nii");
    std::fs::write(&trunc, &good[..good.len() / 2]).unwrap();
    assert_user_error(&["apply", trunc.to_str().unwrap(), o], "trunc.nii");

    let short_header = d.join("hdr.nii");
    std::fs::write(&short_header, &good[..100]).unwrap();
    assert_user_error(&["apply", short_header.to_str().unwrap(), o], "hdr.nii");

    let gz = d.join("corrupt.nii.gz");
    let mut bytes = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3];
    bytes.extend_from_slice(&[0xde; 64]);
    std::fs::write(&gz, bytes).unwrap();
    assert_user_error(&["apply", gz.to_str().unwrap(), o], "corrupt.nii.gz");

    // Header dims whose product overflows (anatomical.nii is big-endian: dim[1..4] at 42..48).
    let mut huge = good.clone();
    for k in 0..3 {
        huge[42 + 2 * k..44 + 2 * k].copy_from_slice(&i16::MAX.to_be_bytes());
    }
    let huge_p = d.join("huge.nii");
    std::fs::write(&huge_p, huge).unwrap();
    assert_user_error(&["apply", huge_p.to_str().unwrap(), o], "huge.nii");

    // A zero-size axis.
    let mut zero = good.clone();
    zero[44..46].copy_from_slice(&0i16.to_be_bytes());
    let zero_p = d.join("zero.nii");
    std::fs::write(&zero_p, zero).unwrap();
    assert_user_error(&["apply", zero_p.to_str().unwrap(), o], "zero.nii");

    // An unsupported datatype (complex64 = 32) at byte 70.
    let mut cplx = good.clone();
    cplx[70..72].copy_from_slice(&32i16.to_be_bytes());
    let cplx_p = d.join("complex.nii");
    std::fs::write(&cplx_p, cplx).unwrap();
    assert_user_error(&["apply", cplx_p.to_str().unwrap(), o], "complex.nii");

    // 5D (dim[0] = 5 with a real fifth axis).
    let mut five = good.clone();
    five[40..42].copy_from_slice(&5i16.to_be_bytes());
    five[48..50].copy_from_slice(&2i16.to_be_bytes());
    five[50..52].copy_from_slice(&2i16.to_be_bytes());
    let five_p = d.join("five.nii");
    std::fs::write(&five_p, five).unwrap();
    assert_user_error(&["apply", five_p.to_str().unwrap(), o], "five.nii");

    // A 4D .npy without --channels, and a 1D one.
    let npy4 = d.join("four.npy");
    write_npy_f32(&npy4, &[2, 3, 4, 5], &vec![0.5; 120]);
    assert_user_error(&["apply", npy4.to_str().unwrap(), o], "--channels");
    let npy1 = d.join("one.npy");
    write_npy_f32(&npy1, &[7], &[0.0; 7]);
    assert_user_error(&["apply", npy1.to_str().unwrap(), o], "one.npy");

    // Unknown extensions, in and out.
    let txt = d.join("scan.txt");
    std::fs::write(&txt, b"hello").unwrap();
    assert_user_error(&["apply", txt.to_str().unwrap(), o], "unknown file type");
    assert_user_error(
        &[
            "apply",
            data("anatomical.nii").to_str().unwrap(),
            d.join("x.xyz").to_str().unwrap(),
        ],
        "unknown file type",
    );

    assert!(!out.exists(), "no output may appear for a failed run");
    assert!(
        listing(d).iter().all(|n| !n.contains(".tmp")),
        "no temporary files left: {:?}",
        listing(d)
    );
}

#[test]
fn nan_and_inf_are_values_not_crashes() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("nan.npy");
    let mut v = vec![0.25f32; 5 * 6 * 7];
    v[10] = f32::NAN;
    v[20] = f32::INFINITY;
    write_npy_f32(&input, &[5, 6, 7], &v);
    let out = dir.path().join("out.npy");
    let i = input.to_str().unwrap();
    let o = out.to_str().unwrap();
    let (code, _, err) = run(&["apply", i, o, "--flip", "0", "--order", "0"]);
    assert_eq!(code, 0, "{err}");
    let a = augscope::io::npy::read(&out).unwrap();
    assert_eq!(a.data.iter().filter(|x| x.is_nan()).count(), 1);
    assert_eq!(a.data.iter().filter(|x| x.is_infinite()).count(), 1);
    // Linear and cubic interpolation spread a NaN to its neighbours (a zero weight times NaN is
    // NaN, as in scipy.ndimage.map_coordinates), but never crash.
    for order in ["1", "3"] {
        let (code, _, err) = run(&["apply", i, o, "--rotate", "0.1,0,0", "--order", order]);
        assert_eq!(code, 0, "{err}");
        assert!(
            augscope::io::npy::read(&out)
                .unwrap()
                .data
                .iter()
                .any(|x| x.is_nan())
        );
    }
}

#[test]
fn rgb_images_and_labels_round_trip_through_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("retina.png");
    let (code, _, err) = run(&[
        "apply",
        data("retina.jpg").to_str().unwrap(),
        out.to_str().unwrap(),
        "--rotate",
        "0.3",
        "--order",
        "1",
        "--dtype",
        "keep",
    ]);
    assert_eq!(code, 0, "{err}");
    let v = augscope::io::load(&out, &Default::default()).unwrap();
    assert_eq!((v.channels, v.shape.clone()), (3, vec![1411, 1411]));

    let img = dir.path().join("img.npy");
    let lab = dir.path().join("lab.npy");
    let data: Vec<f32> = (0..9 * 10 * 11).map(|i| (i % 7) as f32 / 7.0).collect();
    let labels: Vec<f32> = (0..9 * 10 * 11).map(|i| (i % 3) as f32).collect();
    write_npy_f32(&img, &[9, 10, 11], &data);
    augscope::io::npy::write(&lab, &labels, &[9, 10, 11], augscope::DType::U8).unwrap();
    let lab_out = dir.path().join("lab_out.npy");
    let (code, _, err) = run(&[
        "apply",
        img.to_str().unwrap(),
        dir.path().join("img_out.npy").to_str().unwrap(),
        "--label",
        lab.to_str().unwrap(),
        "--label-out",
        lab_out.to_str().unwrap(),
        "--rotate",
        "0.4,0,0",
        "--order",
        "3",
    ]);
    assert_eq!(code, 0, "{err}");
    let l = augscope::io::npy::read(&lab_out).unwrap();
    assert_eq!(
        l.dtype,
        augscope::DType::U8,
        "labels keep their integer type"
    );
    assert!(
        l.data.iter().all(|&v| v == 0.0 || v == 1.0 || v == 2.0),
        "labels stay labels"
    );
}

/// `augscope batch --filter`: a bad filter is one line and exit 2 before anything is written;
/// a good one runs before (default) or after the transform, and the manifest says which.
#[test]
fn batch_filter_flag_is_checked_and_recorded() {
    let dir = tempfile::tempdir().expect("temporary folder");
    let input = dir.path().join("vol.npy");
    let data: Vec<f32> = (0..6 * 7 * 8).map(|i| ((i * 37) % 19) as f32).collect();
    write_npy_f32(&input, &[6, 7, 8], &data);
    let inp = input.to_str().expect("utf-8 path");
    let out = dir.path().join("out");
    let outs = out.to_str().expect("utf-8 path");
    let base = [
        "batch",
        "--preset",
        "nnunet-v2",
        "--count",
        "2",
        "--seed",
        "3",
        "--backend",
        "cpu",
        "--quiet",
        "--out",
        outs,
    ];
    for (bad, needle) in [
        ("median:4", "odd"),
        ("blur:1", "unknown filter"),
        ("febds:dog", "mask"),
    ] {
        let mut args = base.to_vec();
        args.extend(["--filter", bad, inp]);
        assert_user_error(&args, needle);
        assert!(!out.exists(), "{bad}: nothing may be written");
    }
    let mut stage_outputs = vec![];
    for (sub, extra) in [
        ("plain", vec![]),
        ("before", vec!["--filter", "gaussian:1"]),
        ("after", vec!["--filter", "gaussian:1", "--filter-after"]),
    ] {
        let o = dir.path().join(sub);
        let os = o.to_str().expect("utf-8 path");
        let mut args = base.to_vec();
        let last = args.len() - 1;
        args[last] = os;
        args.extend(extra.iter().copied());
        args.push(inp);
        let (code, _, err) = run(&args);
        assert_eq!(code, 0, "{sub}: {err}");
        let manifest = std::fs::read_to_string(o.join("manifest.jsonl")).expect("manifest");
        let first: serde_json::Value =
            serde_json::from_str(manifest.lines().next().expect("a line")).expect("JSON");
        match sub {
            "plain" => assert!(first.get("intensity_filter").is_none()),
            stage => assert_eq!(first["intensity_filter"]["stage"], stage, "{first}"),
        }
        let img = augscope::io::load(
            Path::new(first["output"].as_str().expect("output path")),
            &augscope::io::LoadOptions::default(),
        )
        .expect("output loads");
        stage_outputs.push(img.data);
    }
    assert_ne!(
        stage_outputs[0], stage_outputs[1],
        "the filter changed nothing"
    );
    assert_ne!(
        stage_outputs[1], stage_outputs[2],
        "before and after are the same"
    );
}

/// `augscope bench --order`: the CPU rows of the three pipelines at the order asked for, named
/// with it in the table and the JSON; a bad order is one line and exit 2, with no JSON written.
#[test]
fn bench_runs_the_pipelines_at_the_order_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("bench.json");
    let j = json.to_str().unwrap();
    let args = [
        "bench",
        "--backend",
        "cpu",
        "--shape",
        "6,10,12",
        "--rows",
        "spatial",
    ];
    let (code, out, err) = run(&[&args[..], &["--order", "3", "--json", j]].concat());
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("| full order 3 |"), "{out}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let variants: Vec<&str> = report["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| r["variant"].as_str().expect("variant"))
        .collect();
    assert_eq!(
        variants,
        ["rotate order 3", "elastic order 3", "full order 3"]
    );
    // Order 1 (the default) keeps the plain names.
    let (code, out, err) = run(&args);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("| full |"), "{out}");
    std::fs::remove_file(&json).unwrap();
    assert_user_error(
        &[&args[..], &["--order", "2", "--json", j]].concat(),
        "order",
    );
    assert_eq!(
        listing(dir.path()),
        Vec::<String>::new(),
        "no JSON on error"
    );
}
