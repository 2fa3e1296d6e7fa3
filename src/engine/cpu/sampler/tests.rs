use super::*;

/// Order 1 over a row (the AVX-512 lanes where the CPU has them) equals the scalar taps point
/// by point, bit for bit: points inside, on the last cell, outside, NaN, 2D and 3D, two
/// channels, every mode.
#[test]
fn a_linear_row_equals_the_scalar_taps() {
    fn check<const D: usize>(shape: [usize; D]) {
        let n: usize = shape.iter().product();
        let data: Vec<f32> = (0..2 * n)
            .map(|i| ((i * 2_654_435_761) % 977) as f32 / 31.0 - 9.0)
            .collect();
        let coords: Vec<[f64; D]> = (0..203)
            .map(|i| {
                std::array::from_fn(|a| match (i + a) % 29 {
                    0 => f64::NAN,
                    1 => shape[a] as f64 - 1.0,
                    2 => shape[a] as f64 - 1.5,
                    _ => ((i * 37 + a * 11) % 101) as f64 / 100.0 * (shape[a] as f64 + 2.0) - 1.0,
                })
            })
            .collect();
        let mut strides = [0usize; D];
        let mut st = 1;
        for a in (0..D).rev() {
            strides[a] = st;
            st *= shape[a];
        }
        for mode in [Mode::Constant, Mode::Nearest, Mode::Reflect, Mode::Wrap] {
            let s = Sampler {
                data: &data,
                shape: shape.to_vec(),
                channels: 2,
                order: Order::Linear,
                mode,
                cval: 2.5,
                pad: 0.0,
            };
            let (mut a, mut b) = (vec![0f32; coords.len()], vec![0f32; coords.len()]);
            s.sample_row::<D>(&coords, &mut [&mut a[..], &mut b[..]]);
            for (i, x) in coords.iter().enumerate() {
                let (mut wa, mut wb) = ([0f32], [0f32]);
                s.sample_into::<D, 2>(&shape, &strides, x, &mut [&mut wa[..], &mut wb[..]], 0);
                assert_eq!(a[i].to_bits(), wa[0].to_bits(), "{mode:?} point {i} {x:?}");
                assert_eq!(b[i].to_bits(), wb[0].to_bits(), "{mode:?} point {i} {x:?}");
            }
        }
    }
    check([5usize, 7, 9]);
    check([6usize, 11]);
}

/// Any coordinate, however far off the grid, reads the boundary or cval and never indexes
/// past the data: every order and mode, 2D and 3D, axes of one and several voxels.
#[test]
fn far_coordinates_read_the_boundary_not_past_the_data() {
    let far = [
        0.0,
        -0.0,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::MAX,
        f64::MIN,
        1e300,
        -1e300,
        9.2e18,
        -9.2e18,
        1e19,
        -1e19,
        (1u64 << 40) as f64 + 0.5,
        -((1u64 << 40) as f64) - 0.5,
        (1u64 << 53) as f64,
        -7.97e307,
        3.5,
        -2.5,
    ];
    fn check<const D: usize>(shape: [usize; D], far: &[f64]) {
        let n: usize = shape.iter().product();
        let data: Vec<f32> = (0..n).map(|i| (i % 7) as f32).collect();
        let coords: Vec<[f64; D]> = (0..far.len() * far.len())
            .map(|i| std::array::from_fn(|a| far[(i / far.len().pow(a as u32)) % far.len()]))
            .collect();
        for order in [Order::Nearest, Order::Linear, Order::Cubic] {
            for mode in Mode::ALL {
                let s = Sampler {
                    data: &data,
                    shape: shape.to_vec(),
                    channels: 1,
                    order,
                    mode,
                    cval: 0.5,
                    pad: 0.0,
                };
                let mut out = vec![0f32; coords.len()];
                s.sample_row::<D>(&coords, &mut [&mut out[..]]);
                for (i, v) in out.iter().enumerate() {
                    assert!(
                        v.is_finite() || coords[i].iter().any(|c| !c.is_finite()),
                        "{order:?} {mode:?} {:?} read {v}",
                        coords[i]
                    );
                }
            }
        }
    }
    check([4usize, 5, 6], &far);
    check([1usize, 3], &far);
    check([7usize, 1], &far);
}
