//! The interactive slice path (`CpuBackend::apply_slice`) gives the same plane as the full volume
//! (`Backend::apply`), for every axis, with flips, elastic, rotation, orders 0/1/3 and a label map.
//! Arrays are `[z, y, x]`.

use augscope::augment::{Elastic, Mode, Order, Plan};
use augscope::core::volume::Volume;
use augscope::engine::cpu::CpuBackend;
use augscope::engine::field::ElasticField;
use augscope::engine::{Backend, Job, Outputs, Plane, apply_new};

mod common;

/// xorshift values in [0, 1), the seed used as it is.
fn volume(shape: [usize; 3], channels: usize, seed: u64) -> Volume {
    common::volumes::xorshift_volume_unmixed(&shape, channels, seed)
}

/// The plane `index` normal to `axis` of a channel-major volume.
fn plane_of(v: &Volume, axis: usize, index: usize) -> Vec<f32> {
    let s = &v.shape;
    let mut out = vec![];
    for c in 0..v.channels {
        let ch = v.channel(c);
        for z in 0..s[0] {
            for y in 0..s[1] {
                for x in 0..s[2] {
                    let p = [z, y, x];
                    if p[axis] == index {
                        out.push(ch[(z * s[1] + y) * s[2] + x]);
                    }
                }
            }
        }
    }
    out
}

#[test]
fn field_plane_equals_the_volume_field() {
    let shape = [9, 14, 11];
    let full = ElasticField::compute(&shape, 2.5, 77);
    for axis in 0..3 {
        for index in [0, shape[axis] / 2, shape[axis] - 1] {
            let plane = ElasticField::compute_plane(&shape, 2.5, 77, axis, index);
            let want = full.plane(axis, index);
            for (p, w) in plane.iter().zip(&want) {
                let err = p
                    .iter()
                    .zip(w)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0f32, f32::max);
                assert!(err < 1e-6, "axis {axis} index {index}: {err}");
            }
        }
    }
}

#[test]
fn slices_equal_the_full_volume() {
    let shape = [10, 13, 12];
    let img = volume(shape, 2, 5);
    let mut lab = volume(shape, 1, 9);
    lab.data.iter_mut().for_each(|v| *v = (*v * 4.0).floor());
    for order in [Order::Nearest, Order::Linear, Order::Cubic] {
        let plan = Plan {
            flip: vec![0, 2],
            rotate_rad: vec![0.3, -0.2, 0.1],
            scale: vec![1.1, 0.9, 1.0],
            translate: vec![0.5, -1.0, 0.25],
            elastic: Some(Elastic {
                alpha: 30.0,
                sigma: 2.0,
                seed: 11,
            }),
            order,
            mode: Mode::Reflect,
            ..Plan::default()
        };
        let (full, full_lab, _) = apply_new(&CpuBackend::new(), &plan, &img, Some(&lab)).unwrap();
        // A fresh engine computes field planes on their own; a warm one cuts them from its volume.
        for cpu in [CpuBackend::new(), {
            let c = CpuBackend::new();
            c.field(&plan, &shape);
            c
        }] {
            for (axis, &n_axis) in shape.iter().enumerate() {
                for index in [0, n_axis / 2, n_axis - 1] {
                    let plane_len = img.data.len() / img.channels / n_axis;
                    let mut out = vec![f32::NAN; img.channels * plane_len];
                    let mut lout = vec![f32::NAN; plane_len];
                    let job = Job {
                        plan: &plan,
                        image: &img,
                        label: Some(&lab),
                    };
                    cpu.apply_plane(
                        job,
                        Plane { axis, index },
                        None,
                        Outputs {
                            image: &mut out,
                            label: Some(&mut lout),
                        },
                    )
                    .unwrap();
                    let want = plane_of(&full, axis, index);
                    let err = out
                        .iter()
                        .zip(&want)
                        .map(|(a, b)| (a - b).abs())
                        .fold(0f32, f32::max);
                    assert!(err < 1e-4, "order {order} axis {axis} index {index}: {err}");
                    let lab_want = plane_of(full_lab.as_ref().unwrap(), axis, index);
                    let diff = lout.iter().zip(&lab_want).filter(|(a, b)| a != b).count();
                    // A label can only differ where an order-0 coordinate sits on a .5 tie that
                    // the f32 field rounding tips over.
                    assert!(
                        diff <= 1,
                        "order {order} axis {axis} index {index}: {diff} labels differ"
                    );
                }
            }
        }
    }
}

#[test]
fn a_missing_slice_is_an_error() {
    let img = volume([4, 5, 6], 1, 1);
    let plan = Plan::default();
    let mut out = vec![0f32; 30];
    let job = Job {
        plan: &plan,
        image: &img,
        label: None,
    };
    assert!(
        CpuBackend::new()
            .apply_plane(
                job,
                Plane { axis: 0, index: 4 },
                None,
                Outputs {
                    image: &mut out,
                    label: None
                }
            )
            .is_err()
    );
    assert!(
        CpuBackend::new()
            .apply_plane(
                job,
                Plane { axis: 1, index: 0 },
                None,
                Outputs {
                    image: &mut out,
                    label: None
                }
            )
            .is_err(),
        "wrong buffer size"
    );
}

#[test]
fn cubic_coefficients_are_reused_only_for_the_same_image() {
    let mut img = volume([8, 9, 10], 1, 3);
    let plan = Plan {
        rotate_rad: vec![0.2, 0.0, 0.1],
        order: Order::Cubic,
        mode: Mode::Nearest,
        ..Plan::default()
    };
    let cpu = CpuBackend::new();
    let (a, _, _) = apply_new(&cpu, &plan, &img, None).unwrap();
    let (again, _, _) = apply_new(&cpu, &plan, &img, None).unwrap();
    assert_eq!(
        a.data, again.data,
        "cached coefficients give the same result"
    );
    // Same buffer (same address), new content: the cache must notice.
    img.data[400] += 5.0;
    let (b, _, _) = apply_new(&cpu, &plan, &img, None).unwrap();
    let (fresh, _, _) = apply_new(&CpuBackend::new(), &plan, &img, None).unwrap();
    assert_eq!(b.data, fresh.data);
    assert_ne!(a.data, b.data);
    // Another mode needs other coefficients.
    let mirror = Plan {
        mode: Mode::Mirror,
        ..plan.clone()
    };
    let (m, _, _) = apply_new(&cpu, &mirror, &img, None).unwrap();
    let (m_fresh, _, _) = apply_new(&CpuBackend::new(), &mirror, &img, None).unwrap();
    assert_eq!(m.data, m_fresh.data);
}
