use super::*;
use crate::core::plan::Elastic;
use crate::engine::apply_new;

fn volume(shape: &[usize], channels: usize, seed: u32) -> Volume {
    let n: usize = channels * shape.iter().product::<usize>();
    let data = (0..n as u32)
        .map(|i| ((i.wrapping_mul(2_654_435_761) ^ seed) % 1000) as f32 / 7.0)
        .collect();
    Volume::new(data, shape.to_vec(), channels)
}

#[test]
fn an_image_handed_over_gives_the_same_outputs_as_one_lent() {
    // Every order and mode, 2D and 3D, several channels, a label map, flips, the elastic
    // field, and a plan where nothing moves: bit for bit, timings aside.
    for (shape, channels) in [
        (vec![9usize, 11, 7], 1),
        (vec![13, 10], 3),
        (vec![6, 5, 8], 2),
    ] {
        let nd = shape.len();
        let image = volume(&shape, channels, 5);
        let label = volume(&shape, 1, 9);
        for order in [Order::Nearest, Order::Linear, Order::Cubic] {
            for mode in Mode::ALL {
                for moves in [true, false] {
                    let plan = if moves {
                        Plan {
                            rotate_rad: if nd == 3 {
                                vec![0.2, -0.1, 0.3]
                            } else {
                                vec![0.3]
                            },
                            flip: vec![0],
                            elastic: Some(Elastic {
                                alpha: 30.0,
                                sigma: 2.0,
                                seed: 3,
                            }),
                            order,
                            mode,
                            cval: 2.5,
                            ..Plan::default()
                        }
                    } else {
                        Plan {
                            order,
                            mode,
                            ..Plan::default()
                        }
                    };
                    let what = format!("{shape:?} x{channels}, {order:?}, {mode}, {moves}");
                    let (want, want_lab, _) =
                        apply_new(&CpuBackend::new(), &plan, &image, Some(&label)).expect(&what);
                    let cpu = CpuBackend::new();
                    let (got, got_lab, _) = cpu
                        .apply_owned(&plan, image.clone(), Some(&label))
                        .unwrap_or_else(|n| panic!("{what}: {}", n.error));
                    assert_eq!(got.data, want.data, "{what}");
                    assert_eq!(got.shape, want.shape, "{what}");
                    assert_eq!(got_lab.map(|l| l.data), want_lab.map(|l| l.data), "{what}");
                    // The field stays for the readouts that follow.
                    assert_eq!(cpu.holds_field(&plan, &shape), moves, "{what}");
                }
            }
        }
    }
}

#[test]
fn row_coordinates_equal_the_scalar_map_bit_for_bit() {
    // The vector rows (AVX-512 where the CPU has it) against CoordMap::input_coord point by
    // point: 2D and 3D, rows of 8k, 8k + 3 and fewer than 8 points, flips of every axis,
    // with and without the field.
    for shape in [
        vec![5usize, 4, 19],
        vec![3, 6, 16],
        vec![7, 5],
        vec![4, 3, 6],
    ] {
        let nd = shape.len();
        for flip in [vec![], vec![nd - 1], vec![0, nd - 1]] {
            for elastic in [false, true] {
                let plan = Plan {
                    rotate_rad: if nd == 3 {
                        vec![0.2, -0.1, 0.3]
                    } else {
                        vec![0.3]
                    },
                    scale: vec![1.1],
                    flip: flip.clone(),
                    elastic: elastic.then_some(Elastic {
                        alpha: 30.0,
                        sigma: 2.0,
                        seed: 3,
                    }),
                    ..Plan::default()
                };
                let map = plan.compose(&shape).expect("a valid plan");
                let field = elastic.then(|| ElasticField::compute(&shape, 2.0, 3));
                let rows: usize = shape[..nd - 1].iter().product();
                for r in 0..rows {
                    let mut p = vec![0usize; nd];
                    let mut rem = r;
                    for a in (0..nd - 1).rev() {
                        p[a] = rem % shape[a];
                        rem /= shape[a];
                    }
                    let what = format!("{shape:?} flip {flip:?} elastic {elastic} row {r}");
                    let check = |px: usize, got: &[f64]| {
                        let q: Vec<usize> = (0..nd)
                            .map(|a| map.flip_index(a, if a == nd - 1 { px } else { p[a] }))
                            .collect();
                        let lin = q.iter().zip(&shape).fold(0, |l, (&qa, &n)| l * n + qa);
                        let d: Vec<f32> = (0..nd)
                            .map(|a| field.as_ref().map_or(0.0, |f| f.components[a][lin]))
                            .collect();
                        let want: Vec<f64> = if nd == 3 {
                            map.input_coord::<3>(&[q[0], q[1], q[2]], &[d[0], d[1], d[2]])
                                .to_vec()
                        } else {
                            map.input_coord::<2>(&[q[0], q[1]], &[d[0], d[1]]).to_vec()
                        };
                        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                        assert_eq!(bits(got), bits(&want), "{what} point {px}");
                    };
                    if nd == 3 {
                        let mut out = Vec::new();
                        row_coords::<3>(&map, field.as_ref(), r, &mut out);
                        assert_eq!(out.len(), shape[2], "{what}");
                        for (px, x) in out.iter().enumerate() {
                            check(px, x);
                        }
                    } else {
                        let mut out = Vec::new();
                        row_coords::<2>(&map, field.as_ref(), r, &mut out);
                        assert_eq!(out.len(), shape[1], "{what}");
                        for (px, x) in out.iter().enumerate() {
                            check(px, x);
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn an_image_handed_over_comes_back_untouched_when_the_job_is_refused() {
    let image = volume(&[6, 7, 8], 1, 1);
    let wrong = volume(&[6, 7, 9], 1, 2);
    for order in [Order::Linear, Order::Cubic] {
        let plan = Plan {
            rotate_rad: vec![0.1, 0.2, 0.3],
            order,
            ..Plan::default()
        };
        let n = CpuBackend::new()
            .apply_owned(&plan, image.clone(), Some(&wrong))
            .expect_err("a label map on another grid");
        assert!(matches!(n.error, EngineError::Shape(_)), "{}", n.error);
        assert_eq!(n.image.data, image.data);
        assert_eq!(n.image.shape, image.shape);
    }
}
