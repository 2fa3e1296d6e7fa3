//! Properties of the CPU engine that hold for any input (imageproc-style proptests): identity,
//! flip twice, rotation and its inverse, reproducibility across runs and thread counts, and
//! composition of plans. Arrays are `[z, y, x]` (2D `[y, x]`).

use augscope::augment::{Elastic, Order, Plan};
use augscope::engine::apply_new;
use augscope::engine::cpu::{CpuBackend, coordinates};
use augscope::engine::field::ElasticField;
use augscope::{Mode, Volume};
use proptest::prelude::*;

mod common;
// Deterministic values in [0, 1) (splitmix64), so a failing case is reproducible from its seed.
use common::volumes::{splitmix_values as random_values, splitmix_volume as random_volume};

fn apply(plan: &Plan, v: &Volume) -> Volume {
    apply_new(&CpuBackend::new(), plan, v, None)
        .expect("a valid plan applies")
        .0
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn shape_strategy() -> impl Strategy<Value = Vec<usize>> {
    prop_oneof![
        prop::collection::vec(1usize..9, 3),
        prop::collection::vec(1usize..14, 2)
    ]
}

fn mode_strategy() -> impl Strategy<Value = Mode> {
    prop::sample::select(Mode::ALL.to_vec())
}

fn order_strategy() -> impl Strategy<Value = Order> {
    prop::sample::select(vec![Order::Nearest, Order::Linear, Order::Cubic])
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// The identity plan returns the input bit for bit, for every order, mode and channel count.
    #[test]
    fn identity_returns_the_input(
        shape in shape_strategy(), channels in 1usize..4, seed: u64,
        order in order_strategy(), mode in mode_strategy(), cval in -1f32..1.0,
    ) {
        let v = random_volume(&shape, channels, seed);
        let plan = Plan { order, mode, cval, ..Plan::identity() };
        let out = apply(&plan, &v);
        prop_assert_eq!(&out.shape, &v.shape);
        prop_assert_eq!(bits(&out.data), bits(&v.data));
        // Spelled-out zeros are the identity too.
        let zeros = Plan {
            rotate_rad: vec![0.0; if shape.len() == 3 { 3 } else { 1 }],
            scale: vec![1.0],
            translate: vec![0.0; shape.len()],
            out_shape: Some(shape.clone()),
            ..plan
        };
        prop_assert_eq!(bits(&apply(&zeros, &v).data), bits(&v.data));
    }

    /// Flipping the same axes twice gives the input back: exactly for orders 0 and 1 (integer
    /// coordinates), to prefilter rounding for order 3.
    #[test]
    fn flip_twice_is_identity(
        shape in shape_strategy(), seed: u64, axes in prop::collection::vec(0usize..3, 1..4),
        order in order_strategy(), mode in mode_strategy(),
    ) {
        let mut flip: Vec<usize> = axes.into_iter().filter(|&a| a < shape.len()).collect();
        flip.dedup();
        prop_assume!(!flip.is_empty());
        let v = random_volume(&shape, 1, seed);
        let plan = Plan { flip, order, mode, ..Plan::identity() };
        let once = apply(&plan, &v);
        let twice = apply(&plan, &once);
        if order == Order::Cubic {
            for (a, b) in twice.data.iter().zip(&v.data) {
                prop_assert!((a - b).abs() < 1e-5, "{a} vs {b}");
            }
        } else {
            prop_assert_eq!(bits(&twice.data), bits(&v.data));
        }
    }

    /// Rotation by θ, then by −θ, gives back a smooth input inside the volume, to the error of
    /// two linear interpolations. 3D rotates about one axis, where −θ is the inverse.
    #[test]
    fn rotation_then_inverse_is_identity_inside(
        is_3d: bool, axis in 0usize..3, angle in -1.5f64..1.5, mode in mode_strategy(),
    ) {
        let shape: Vec<usize> = if is_3d { vec![17, 19, 21] } else { vec![29, 31] };
        let k = [0.23f64, 0.17, 0.29];
        let d = shape.len();
        let n: usize = shape.iter().product();
        let data: Vec<f32> = (0..n)
            .map(|i| {
                let mut rem = i;
                let mut phase = 0.4;
                for a in (0..d).rev() {
                    phase += k[a] * (rem % shape[a]) as f64;
                    rem /= shape[a];
                }
                phase.sin() as f32
            })
            .collect();
        let v = Volume::new(data, shape.clone(), 1);
        let rot = |a: f64| {
            if is_3d {
                let mut r = vec![0.0; 3];
                r[axis] = a;
                r
            } else {
                vec![a]
            }
        };
        let p1 = Plan { rotate_rad: rot(angle), order: Order::Linear, mode, ..Plan::identity() };
        let p2 = Plan { rotate_rad: rot(-angle), ..p1.clone() };
        let back = apply(&p2, &apply(&p1, &v));
        // Multilinear interpolation errs by at most (1/8) Σ_a max|∂²f/∂x_a²| = (1/8) Σ_a k_a²
        // per pass (unit spacing); two passes, and a little slack for f32.
        let tol = 2.0 * 0.125 * k[..d].iter().map(|x| x * x).sum::<f64>() + 1e-4;
        let ctr: Vec<f64> = shape.iter().map(|&s| (s as f64 - 1.0) / 2.0).collect();
        // Inside: every point the two passes touch stays two voxels from the edges.
        let radius = ctr.iter().cloned().fold(f64::INFINITY, f64::min) - 2.0;
        let mut checked = 0;
        for i in 0..n {
            let mut rem = i;
            let mut r2 = 0.0;
            for a in (0..d).rev() {
                r2 += ((rem % shape[a]) as f64 - ctr[a]).powi(2);
                rem /= shape[a];
            }
            if r2.sqrt() <= radius {
                let err = (back.data[i] - v.data[i]).abs() as f64;
                prop_assert!(err <= tol, "voxel {i}: {} vs {} (tol {tol})", back.data[i], v.data[i]);
                checked += 1;
            }
        }
        prop_assert!(checked > 100);
    }

    /// One plan whose transforms are applied one after another by separate plans gives the same
    /// voxels: translate (any order), then flip (integer coordinates, exact) equals one plan with
    /// both; and a plan followed by the identity plan is that plan.
    #[test]
    fn plans_compose(
        shape in shape_strategy(), seed: u64, order in order_strategy(), mode in mode_strategy(),
        t in prop::collection::vec(-3f64..3.0, 3), s in 0.6f64..1.6, flip_axis in 0usize..3,
    ) {
        let d = shape.len();
        let v = random_volume(&shape, 2, seed);
        let translate = Plan { translate: t[..d].to_vec(), order, mode, ..Plan::identity() };
        let flip = Plan { flip: vec![flip_axis % d], order: Order::Linear, mode, ..Plan::identity() };
        let both = Plan { flip: flip.flip.clone(), ..translate.clone() };
        let seq = apply(&flip, &apply(&translate, &v));
        prop_assert_eq!(bits(&seq.data), bits(&apply(&both, &v).data));

        let scale = Plan { scale: vec![s], order, mode, ..Plan::identity() };
        let one = apply(&scale, &v);
        let then_nothing = apply(&Plan { order, mode, ..Plan::identity() }, &one);
        prop_assert_eq!(bits(&then_nothing.data), bits(&one.data));
    }

    /// The fused coordinate map (`Plan::compose` + elastic field) equals docs/design.md §3 evaluated step
    /// by step in f64.
    #[test]
    fn coordinate_map_follows_design_steps(
        shape in shape_strategy(), out_delta in prop::collection::vec(-2i64..3, 3),
        flip_mask in 0u8..8, angles in prop::collection::vec(-3.2f64..3.2, 3),
        scale in prop::collection::vec(0.5f64..2.0, 3), t in prop::collection::vec(-4f64..4.0, 3),
        alpha in 0f64..6.0, sigma in 0.7f64..2.5, seed: u64,
    ) {
        let d = shape.len();
        let out_shape: Vec<usize> =
            (0..d).map(|a| (shape[a] as i64 + out_delta[a]).max(1) as usize).collect();
        let plan = Plan {
            flip: (0..d).filter(|a| flip_mask & (1 << a) != 0).collect(),
            rotate_rad: if d == 3 { angles.clone() } else { vec![angles[0]] },
            scale: scale[..d].to_vec(),
            translate: t[..d].to_vec(),
            elastic: Some(Elastic { alpha, sigma, seed }),
            out_shape: Some(out_shape.clone()),
            ..Plan::identity()
        };
        let map = plan.compose(&shape).unwrap();
        let field = ElasticField::compute(&out_shape, sigma, seed);
        let got = coordinates(&map, Some(&field));
        let n: usize = out_shape.iter().product();
        prop_assert_eq!(got.len(), d * n);
        let rot = rotation(&plan.rotate_rad);
        for i in 0..n {
            let mut p = [0usize; 3];
            let mut rem = i;
            for a in (0..d).rev() {
                p[a] = rem % out_shape[a];
                rem /= out_shape[a];
            }
            let mut q = p;
            for &a in &plan.flip {
                q[a] = out_shape[a] - 1 - p[a];
            }
            let mut lin = 0;
            for a in 0..d {
                lin = lin * out_shape[a] + q[a];
            }
            let mut c = [0f64; 3];
            for a in 0..d {
                c[a] = q[a] as f64 - (out_shape[a] as f64 - 1.0) / 2.0
                    + alpha * field.components[a][lin] as f64;
            }
            for a in 0..d {
                // Rᵀ c, then scale, translate and the input centre.
                let rc: f64 = (0..d).map(|j| rot[j][a] * c[j]).sum();
                let want = rc * scale[a] + t[a] + (shape[a] as f64 - 1.0) / 2.0;
                let g = got[a * n + i] as f64;
                prop_assert!((g - want).abs() <= 1e-5 * want.abs().max(1.0), "axis {a} voxel {i}: {g} vs {want}");
            }
        }
    }
}

/// batchgenerators' `R = Rx(a0) Ry(a1) Rz(a2)` (3D) or the 2D rotation, written out here so the
/// test does not trust `Plan::compose`.
fn rotation(a: &[f64]) -> Vec<Vec<f64>> {
    if a.len() == 1 {
        let (s, c) = a[0].sin_cos();
        return vec![vec![c, -s], vec![s, c]];
    }
    let (s0, c0) = a[0].sin_cos();
    let (s1, c1) = a[1].sin_cos();
    let (s2, c2) = a[2].sin_cos();
    let rx = [[1.0, 0.0, 0.0], [0.0, c0, -s0], [0.0, s0, c0]];
    let ry = [[c1, 0.0, s1], [0.0, 1.0, 0.0], [-s1, 0.0, c1]];
    let rz = [[c2, -s2, 0.0], [s2, c2, 0.0], [0.0, 0.0, 1.0]];
    let mul = |x: &[[f64; 3]; 3], y: &[[f64; 3]; 3]| {
        let mut m = [[0.0; 3]; 3];
        for i in 0..3 {
            for j in 0..3 {
                m[i][j] = (0..3).map(|k| x[i][k] * y[k][j]).sum();
            }
        }
        m
    };
    mul(&mul(&rx, &ry), &rz)
        .iter()
        .map(|r| r.to_vec())
        .collect()
}

/// Same seed ⇒ the same bytes, run after run and whatever the number of rayon threads (elastic
/// field, prefilter and resampling all run in parallel).
#[test]
fn same_seed_gives_identical_bytes_across_runs_and_thread_counts() {
    for (shape, channels) in [(vec![20usize, 37, 41], 1usize), (vec![67, 73], 3)] {
        let v = random_volume(&shape, channels, 11);
        let label = Volume::new(
            random_values(shape.iter().product(), 12)
                .iter()
                .map(|x| (x * 5.0).floor())
                .collect(),
            shape.clone(),
            1,
        );
        for order in [Order::Linear, Order::Cubic] {
            let plan = Plan {
                flip: vec![0],
                rotate_rad: if shape.len() == 3 {
                    vec![0.3, -0.2, 0.6]
                } else {
                    vec![0.4]
                },
                scale: vec![1.1],
                translate: vec![1.5; shape.len()],
                elastic: Some(Elastic {
                    alpha: 40.0,
                    sigma: 3.0,
                    seed: 0xDEAD_BEEF_1234,
                }),
                order,
                mode: Mode::Reflect,
                ..Plan::identity()
            };
            let run = |threads: usize| {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .unwrap();
                pool.install(|| {
                    let (img, lab, _) =
                        apply_new(&CpuBackend::new(), &plan, &v, Some(&label)).unwrap();
                    (bits(&img.data), bits(&lab.unwrap().data))
                })
            };
            let reference = run(1);
            for threads in [1, 2, 3, 8] {
                assert!(
                    run(threads) == reference,
                    "{shape:?} order {order}: {threads} threads differ"
                );
            }
            // A cached field gives the same bytes as a fresh one.
            let backend = CpuBackend::new();
            let first = apply_new(&backend, &plan, &v, None).unwrap().0;
            let second = apply_new(&backend, &plan, &v, None).unwrap().0;
            assert_eq!(bits(&first.data), reference.0);
            assert_eq!(bits(&second.data), reference.0);
        }
    }
}

/// ElasticField: same (shape, sigma, seed) ⇒ identical components; another seed ⇒ another field.
#[test]
fn elastic_field_depends_on_the_seed_only_through_philox() {
    for shape in [vec![9usize, 10, 11], vec![33, 35]] {
        let a = ElasticField::compute(&shape, 2.0, 5);
        let b = ElasticField::compute(&shape, 2.0, 5);
        assert_eq!(a, b);
        let single = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        assert_eq!(single.install(|| ElasticField::compute(&shape, 2.0, 5)), a);
        for other in [6u64, 5 + (1 << 32)] {
            let c = ElasticField::compute(&shape, 2.0, other);
            for (k, (ca, cc)) in a.components.iter().zip(&c.components).enumerate() {
                let differ = ca.iter().zip(cc).filter(|(x, y)| x != y).count();
                assert!(
                    differ > ca.len() / 2,
                    "seed {other}, component {k}: only {differ} values differ"
                );
            }
        }
        // Components are distinct noise, not copies of each other.
        assert_ne!(a.components[0], a.components[1]);
    }
}
