//! Median filter, same result as `scipy.ndimage.median_filter(x, size, mode=mode, cval=cval)`
//! (a box footprint of odd size per axis), for 1D, 2D and 3D arrays, channel-wise.
//!
//! Arrays are C order, axis 0 slowest (`[z, y, x]` or `[y, x]`). The input is padded once with
//! scipy's filter boundary rule ([`filter_tap`]); then each output line gathers its windows into a
//! per-thread buffer and selects the middle element with quickselect (`select_nth_unstable`,
//! expected linear time), never a full sort. A median is one of the inputs, so the result is
//! exact.

use rayon::prelude::*;

use super::separable::{Boundary, filter_tap};

/// The shape padded to three axes (leading ones), with the window sizes likewise.
fn as3(shape: &[usize], size: &[usize]) -> ([usize; 3], [usize; 3]) {
    let mut s = [1usize; 3];
    let mut k = [1usize; 3];
    let off = 3 - shape.len();
    s[off..].copy_from_slice(shape);
    k[off..].copy_from_slice(size);
    (s, k)
}

/// Copies one channel into a `(s + k - 1)`-shaped buffer extended by the boundary rule.
fn pad(src: &[f32], s: [usize; 3], k: [usize; 3], b: Boundary) -> (Vec<f32>, [usize; 3]) {
    let r = k.map(|v| v / 2);
    let p = [s[0] + 2 * r[0], s[1] + 2 * r[1], s[2] + 2 * r[2]];
    let mut out = vec![0f32; p[0] * p[1] * p[2]];
    let xs: Vec<Option<usize>> = (0..p[2])
        .map(|x| filter_tap(x as i64 - r[2] as i64, s[2], b.mode))
        .collect();
    out.par_chunks_mut(p[1] * p[2])
        .enumerate()
        .for_each(|(z, plane)| {
            let sz = filter_tap(z as i64 - r[0] as i64, s[0], b.mode);
            for (y, row) in plane.chunks_mut(p[2]).enumerate() {
                let sy = filter_tap(y as i64 - r[1] as i64, s[1], b.mode);
                match (sz, sy) {
                    (Some(sz), Some(sy)) => {
                        let line = &src[(sz * s[1] + sy) * s[2]..(sz * s[1] + sy + 1) * s[2]];
                        for (o, t) in row.iter_mut().zip(&xs) {
                            *o = t.map_or(b.cval, |j| line[j]);
                        }
                    }
                    _ => row.fill(b.cval),
                }
            }
        });
    (out, p)
}

/// Median over a box of `size[a]` voxels (odd) on each axis, for each channel (or batch item) of
/// `data`. Same result as `scipy.ndimage.median_filter(x, size=size, mode=mode, cval=cval)`.
pub fn median(data: &[f32], shape: &[usize], size: &[usize], b: Boundary) -> Vec<f32> {
    assert!((1..=3).contains(&shape.len()), "median: 1 to 3 axes");
    assert_eq!(size.len(), shape.len());
    assert!(size.iter().all(|&k| k % 2 == 1), "median sizes are odd");
    let n: usize = shape.iter().product();
    let mut out = vec![0f32; data.len()];
    if n == 0 {
        return out;
    }
    let (s, k) = as3(shape, size);
    let taps = k[0] * k[1] * k[2];
    let mid = taps / 2;
    for (src, dst) in data.chunks(n).zip(out.chunks_mut(n)) {
        let (padded, p) = pad(src, s, k, b);
        dst.par_chunks_mut(s[2]).enumerate().for_each_init(
            || vec![0f32; taps],
            |win, (line, row)| {
                let (z, y) = (line / s[1], line % s[1]);
                for (x, o) in row.iter_mut().enumerate() {
                    let mut t = 0;
                    for dz in 0..k[0] {
                        for dy in 0..k[1] {
                            let at = ((z + dz) * p[1] + y + dy) * p[2] + x;
                            win[t..t + k[2]].copy_from_slice(&padded[at..at + k[2]]);
                            t += k[2];
                        }
                    }
                    let (_, m, _) = win.select_nth_unstable_by(mid, |a, b| a.total_cmp(b));
                    *o = *m;
                }
            },
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::boundary::Mode;

    #[test]
    fn median_of_a_box_against_a_sorted_window() {
        let shape = [4usize, 5, 6];
        let n: usize = shape.iter().product();
        let src: Vec<f32> = (0..n).map(|i| ((i * 53) % 17) as f32).collect();
        for mode in Mode::ALL {
            let b = Boundary { mode, cval: 3.5 };
            let got = median(&src, &shape, &[3, 3, 3], b);
            for z in 0..4i64 {
                for y in 0..5i64 {
                    for x in 0..6i64 {
                        let mut w = vec![];
                        for dz in -1..=1 {
                            for dy in -1..=1 {
                                for dx in -1..=1 {
                                    let t = (
                                        filter_tap(z + dz, 4, mode),
                                        filter_tap(y + dy, 5, mode),
                                        filter_tap(x + dx, 6, mode),
                                    );
                                    w.push(match t {
                                        (Some(a), Some(b), Some(c)) => src[(a * 5 + b) * 6 + c],
                                        _ => 3.5,
                                    });
                                }
                            }
                        }
                        w.sort_by(f32::total_cmp);
                        let i = ((z * 5 + y) * 6 + x) as usize;
                        assert_eq!(got[i], w[13], "{mode} at {z},{y},{x}");
                    }
                }
            }
        }
    }
}
