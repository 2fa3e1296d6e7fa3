//! The separable convolution every blur family runs: one axis at a time, odd taps centred on the
//! voxel, summed in f32 tap by tap (`out = Σ_t w[t] · x[i + t − r]`), the same order on the CPU
//! and on CUDA (kernels/intensity.cu `int_blur_axis`). The libraries differ only in their taps
//! and in what lies beyond the edge, which [`Pad`] names.

use rayon::prelude::*;

/// What a tap beyond the edge of an axis reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pad {
    /// Reflection without the edge repeated (`d c b | a b c d | c b a`): torch's `reflect`,
    /// scipy's `mirror` (batchgeneratorsv2's blur).
    Mirror,
    /// Reflection with the edge repeated (`c b a | a b c d | d c b`): scipy's `reflect`
    /// (TorchIO's blur, through `scipy.ndimage.gaussian_filter`).
    Reflect,
    /// Zeros: the tap adds nothing (MONAI's `separable_filtering`).
    Zero,
}

impl Pad {
    /// The code `int_blur_axis` takes.
    pub fn code(self) -> i32 {
        match self {
            Pad::Mirror => 0,
            Pad::Reflect => 1,
            Pad::Zero => 2,
        }
    }

    /// The index `i` (which may lie outside `0..n`) folded into the axis, as often as it takes;
    /// `None` for a zero tap.
    pub fn index(self, i: isize, n: usize) -> Option<usize> {
        let ni = n as isize;
        if (0..ni).contains(&i) {
            return Some(i as usize);
        }
        match self {
            Pad::Zero => None,
            Pad::Mirror => {
                if n == 1 {
                    return Some(0);
                }
                let period = 2 * (ni - 1);
                let m = i.rem_euclid(period);
                Some((if m < ni { m } else { period - m }) as usize)
            }
            Pad::Reflect => {
                let m = i.rem_euclid(2 * ni);
                Some((if m < ni { m } else { 2 * ni - 1 - m }) as usize)
            }
        }
    }
}

/// `x` (C order, `shape`) convolved along `axis` with the odd taps `w`, padded by `pad`.
pub fn convolve_axis(x: &mut [f32], shape: &[usize], axis: usize, w: &[f32], pad: Pad) {
    let n = shape[axis];
    let inner: usize = shape[axis + 1..].iter().product();
    if n == 0 || inner == 0 || w.is_empty() || w == [1.0] {
        return;
    }
    let r = (w.len() / 2) as isize;
    let src = x.to_vec();
    // One output voxel: the taps in order, each product added to the sum (the CUDA kernel's
    // order), over a row of `inner` voxels at once.
    let row_at = |src: &[f32], i: usize, out: &mut [f32]| {
        out.fill(0.0);
        for (t, &wt) in w.iter().enumerate() {
            let Some(j) = pad.index(i as isize + t as isize - r, n) else {
                continue;
            };
            for (v, s) in out.iter_mut().zip(&src[j * inner..(j + 1) * inner]) {
                *v += wt * *s;
            }
        }
    };
    if inner >= 64 {
        // Long rows: one task per row (fixed outer index and position i along the axis).
        x.par_chunks_mut(inner).enumerate().for_each(|(row, out)| {
            let (o, i) = (row / n, row % n);
            row_at(&src[o * n * inner..(o + 1) * n * inner], i, out);
        });
    } else {
        // Short rows (the last axes): one task per block of the whole axis, so that a task is
        // never a voxel or two.
        x.par_chunks_mut(n * inner)
            .enumerate()
            .for_each(|(o, block)| {
                let from = &src[o * n * inner..(o + 1) * n * inner];
                for (i, out) in block.chunks_mut(inner).enumerate() {
                    row_at(from, i, out);
                }
            });
    }
}

#[cfg(test)]
mod tests {
    use super::Pad;

    #[test]
    fn paddings_fold_as_scipy_names_them() {
        // n = 4: indices -3..7.
        let mirror: Vec<_> = (-3..7).map(|i| Pad::Mirror.index(i, 4).unwrap()).collect();
        assert_eq!(mirror, [3, 2, 1, 0, 1, 2, 3, 2, 1, 0]);
        let reflect: Vec<_> = (-3..7).map(|i| Pad::Reflect.index(i, 4).unwrap()).collect();
        assert_eq!(reflect, [2, 1, 0, 0, 1, 2, 3, 3, 2, 1]);
        assert_eq!(Pad::Zero.index(-1, 4), None);
        assert_eq!(Pad::Zero.index(4, 4), None);
        assert_eq!(Pad::Zero.index(2, 4), Some(2));
        assert_eq!(Pad::Mirror.index(-5, 1), Some(0));
        assert_eq!(Pad::Reflect.index(-5, 1), Some(0));
    }
}
