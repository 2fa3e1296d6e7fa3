//! Boundary modes, exactly as `scipy.ndimage.map_coordinates` (scipy 1.6+,
//! `scipy/ndimage/src/ni_interpolation.c`). All of the CPU engine's boundary rules live here; the
//! CUDA twin is `kernels/boundary.cuh`.
//!
//! scipy applies two steps: the continuous coordinate is first folded into range with
//! `map_coordinate` (mirror, reflect, wrap and grid-wrap fold; constant marks it outside;
//! nearest and grid-constant leave it alone), then each interpolation tap is folded again with the
//! spline boundary mode (`_get_spline_boundary_mode`: constant and wrap taps fold as mirror,
//! grid-constant taps outside the grid read cval).

pub use crate::core::mode::Mode;

/// Padding scipy adds on each side before prefiltering for `nearest` and `grid-constant`.
pub const SPLINE_PREPAD: usize = 12;

/// scipy's `map_coordinate`: folds a continuous coordinate into `[0, len - 1]`.
/// Returns `None` where `constant` marks the point as outside (the output is cval).
/// `nearest` and `grid-constant` are passed through unchanged: their taps do the work.
#[inline]
pub fn map_coordinate(x: f64, len: usize, mode: Mode) -> Option<f64> {
    let lenf = len as f64;
    if x < 0.0 {
        Some(match mode {
            Mode::Nearest | Mode::GridConstant => x,
            Mode::Constant => return None,
            _ if len <= 1 => 0.0,
            Mode::Mirror => {
                let sz2 = 2.0 * lenf - 2.0;
                let v = sz2 * (-x / sz2).trunc() + x;
                if v <= 1.0 - lenf { v + sz2 } else { -v }
            }
            Mode::Reflect => {
                let sz2 = 2.0 * lenf;
                let mut v = x;
                if v < -sz2 {
                    v += sz2 * (-v / sz2).trunc();
                }
                if v < -lenf { v + sz2 } else { -v - 1.0 }
            }
            Mode::Wrap => {
                let sz = lenf - 1.0;
                x + sz * ((-x / sz).trunc() + 1.0)
            }
            Mode::GridWrap => x + lenf * ((-1.0 - x) / lenf).trunc() + lenf,
        })
    } else if x > lenf - 1.0 {
        Some(match mode {
            Mode::Nearest | Mode::GridConstant => x,
            Mode::Constant => return None,
            _ if len <= 1 => 0.0,
            Mode::Mirror => {
                let sz2 = 2.0 * lenf - 2.0;
                let v = x - sz2 * (x / sz2).trunc();
                if v >= lenf { sz2 - v } else { v }
            }
            Mode::Reflect => {
                let sz2 = 2.0 * lenf;
                let v = x - sz2 * (x / sz2).trunc();
                if v >= lenf { sz2 - v - 1.0 } else { v }
            }
            Mode::Wrap => {
                let sz = lenf - 1.0;
                x - sz * (x / sz).trunc()
            }
            Mode::GridWrap => x - lenf * (x / lenf).trunc(),
        })
    } else {
        Some(x)
    }
}

/// Folds an integer tap index with a spline boundary mode (see [`Mode::spline_mode`]).
/// Returns `None` for a `grid-constant` tap outside the grid (it reads cval).
#[inline]
pub fn fold_tap(i: i64, len: usize, spline_mode: Mode) -> Option<usize> {
    let n = len as i64;
    if (0..n).contains(&i) {
        return Some(i as usize);
    }
    if n <= 1 {
        return match spline_mode {
            Mode::GridConstant => None,
            _ => Some(0),
        };
    }
    let j = match spline_mode {
        Mode::GridConstant => return None,
        Mode::Nearest => i.clamp(0, n - 1),
        Mode::Mirror | Mode::Constant | Mode::Wrap => {
            let p = 2 * n - 2;
            let j = i.rem_euclid(p);
            if j < n { j } else { p - j }
        }
        Mode::Reflect => {
            let p = 2 * n;
            let j = i.rem_euclid(p);
            if j < n { j } else { p - 1 - j }
        }
        Mode::GridWrap => i.rem_euclid(n),
    };
    Some(j as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mode_names_round_trip() {
        for m in Mode::ALL {
            assert_eq!(m.name().parse::<Mode>().unwrap(), m);
        }
        assert_eq!("grid-mirror".parse::<Mode>().unwrap(), Mode::Reflect);
        assert!("foo".parse::<Mode>().is_err());
    }

    #[test]
    fn taps_follow_the_design_table() {
        // n = 4, values a b c d at 0..4: the patterns of docs/design.md §3.
        let fold = |m, i| fold_tap(i, 4, m);
        assert_eq!(
            (-3..0)
                .map(|i| fold(Mode::Reflect, i).unwrap())
                .collect::<Vec<_>>(),
            [2, 1, 0]
        );
        assert_eq!(
            (-3..0)
                .map(|i| fold(Mode::Mirror, i).unwrap())
                .collect::<Vec<_>>(),
            [3, 2, 1]
        );
        assert_eq!(
            (4..7)
                .map(|i| fold(Mode::GridWrap, i).unwrap())
                .collect::<Vec<_>>(),
            [0, 1, 2]
        );
        assert_eq!(fold(Mode::Nearest, -5), Some(0));
        assert_eq!(fold(Mode::GridConstant, 4), None);
        assert_eq!(fold_tap(-3, 1, Mode::Mirror), Some(0));
    }

    #[test]
    fn continuous_coordinates_fold_like_scipy() {
        assert_eq!(map_coordinate(-0.5, 4, Mode::Constant), None);
        assert_eq!(map_coordinate(3.0, 4, Mode::Constant), Some(3.0));
        assert_eq!(map_coordinate(-0.5, 4, Mode::Mirror), Some(0.5));
        assert_eq!(map_coordinate(-0.5, 4, Mode::Reflect), Some(-0.5));
        assert_eq!(map_coordinate(3.5, 4, Mode::GridWrap), Some(3.5));
        assert_eq!(map_coordinate(4.5, 4, Mode::GridWrap), Some(0.5));
        assert_eq!(map_coordinate(3.5, 4, Mode::Wrap), Some(0.5));
        assert_eq!(map_coordinate(-7.0, 4, Mode::Nearest), Some(-7.0));
    }
}
