//! The intensity histogram of the image before the transform (the scan, or the scan filtered
//! before it) and after it (intensity steps and a filter after included), over one shared range,
//! with each side's mean and standard deviation: what the Intensity section of the information
//! panel draws. Made in the worker, beside the whole volume it describes.

use rayon::prelude::*;

use crate::core::volume::Volume;

/// Bins of the histograms.
pub const BINS: usize = 64;

/// Counts of the finite values of every channel in `BINS` equal bins over `[lo, hi]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Histograms {
    pub lo: f32,
    pub hi: f32,
    pub before: Side,
    pub after: Side,
}

/// One image's counts and moments.
#[derive(Clone, Debug, PartialEq)]
pub struct Side {
    pub counts: Vec<u64>,
    pub mean: f64,
    pub std: f64,
}

/// The histograms of `before` and `after`, over the range both span; `None` where neither
/// holds a finite value.
pub fn histograms(before: &Volume, after: &Volume) -> Option<Histograms> {
    let (a, b) = (before.finite_range(), after.finite_range());
    let (lo, hi) = match (a, b) {
        (Some(a), Some(b)) => (a.0.min(b.0), a.1.max(b.1)),
        (Some(r), None) | (None, Some(r)) => r,
        (None, None) => return None,
    };
    Some(Histograms {
        lo,
        hi,
        before: side(&before.data, lo, hi),
        after: side(&after.data, lo, hi),
    })
}

/// The bin of `v` in `BINS` bins over `[lo, hi]` (the top end in the last bin).
pub fn bin(v: f32, lo: f32, hi: f32) -> usize {
    let w = (hi as f64 - lo as f64).max(f64::MIN_POSITIVE);
    (((v as f64 - lo as f64) / w * BINS as f64) as usize).min(BINS - 1)
}

fn side(data: &[f32], lo: f32, hi: f32) -> Side {
    let (counts, n, sum, sq) = data
        .par_chunks(1 << 16)
        .map(|c| {
            let mut h = vec![0u64; BINS];
            let (mut n, mut s, mut q) = (0u64, 0f64, 0f64);
            for &v in c.iter().filter(|v| v.is_finite()) {
                h[bin(v, lo, hi)] += 1;
                n += 1;
                s += v as f64;
                q += v as f64 * v as f64;
            }
            (h, n, s, q)
        })
        .reduce(
            || (vec![0u64; BINS], 0, 0.0, 0.0),
            |mut a, b| {
                a.0.iter_mut().zip(&b.0).for_each(|(x, y)| *x += y);
                (a.0, a.1 + b.1, a.2 + b.2, a.3 + b.3)
            },
        );
    let mean = if n > 0 { sum / n as f64 } else { 0.0 };
    let var = if n > 0 {
        (sq / n as f64 - mean * mean).max(0.0)
    } else {
        0.0
    };
    Side {
        counts,
        mean,
        std: var.sqrt(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_every_finite_value_once_over_the_shared_range() {
        let before = Volume::new(vec![0.0, 1.0, 2.0, 3.0, f32::NAN], vec![1, 5], 1);
        let after = Volume::new(vec![0.0, 2.0, 4.0, 6.0, 8.0], vec![1, 5], 1);
        let h = histograms(&before, &after).unwrap();
        assert_eq!((h.lo, h.hi), (0.0, 8.0));
        assert_eq!(h.before.counts.iter().sum::<u64>(), 4);
        assert_eq!(h.after.counts.iter().sum::<u64>(), 5);
        assert_eq!(
            h.after.counts[BINS - 1],
            1,
            "the top end is in the last bin"
        );
        assert_eq!(h.before.counts[0], 1);
        assert_eq!(h.before.counts[bin(3.0, 0.0, 8.0)], 1);
        assert!((h.before.mean - 1.5).abs() < 1e-12);
        assert!((h.after.mean - 4.0).abs() < 1e-12);
        assert!((h.after.std - 8f64.sqrt()).abs() < 1e-12);
        let empty = Volume::new(vec![f32::NAN], vec![1, 1], 1);
        assert!(histograms(&empty, &empty).is_none());
    }
}
