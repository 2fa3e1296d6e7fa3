//! A small complex FFT for the FEBDS `fft` method: iterative radix-2 for powers of two and
//! Bluestein's chirp-z for every other length (e.g. 3328 = 2^8 · 13 columns of a mammogram), in
//! f64. 2D transforms run the rows in parallel, transpose, run the rows again.

use rayon::prelude::*;

/// A complex number in f64 (re, im).
pub type C64 = [f64; 2];

#[inline]
fn mul(a: C64, b: C64) -> C64 {
    [a[0] * b[0] - a[1] * b[1], a[0] * b[1] + a[1] * b[0]]
}

/// A forward DFT plan of one length: `X_k = sum_j x_j exp(-2 pi i j k / n)`.
pub struct Plan {
    n: usize,
    kind: Kind,
}

enum Kind {
    /// Twiddles `exp(-2 pi i k / n)` for `k < n / 2`.
    Radix2(Vec<C64>),
    /// Chirp `exp(-pi i k^2 / n)`, the padded power-of-two plan and the transformed filter.
    Bluestein {
        chirp: Vec<C64>,
        inner: Box<Plan>,
        filter: Vec<C64>,
    },
}

impl Plan {
    pub fn new(n: usize) -> Plan {
        assert!(n > 0);
        if n.is_power_of_two() {
            let tw = (0..n / 2)
                .map(|k| {
                    let a = -2.0 * std::f64::consts::PI * k as f64 / n as f64;
                    [a.cos(), a.sin()]
                })
                .collect();
            return Plan {
                n,
                kind: Kind::Radix2(tw),
            };
        }
        let m = (2 * n - 1).next_power_of_two();
        // k^2 mod 2n keeps the chirp's angle small and exact for large k.
        let chirp: Vec<C64> = (0..n)
            .map(|k| {
                let k2 = (k as u128 * k as u128 % (2 * n as u128)) as f64;
                let a = -std::f64::consts::PI * k2 / n as f64;
                [a.cos(), a.sin()]
            })
            .collect();
        let inner = Box::new(Plan::new(m));
        let mut filter = vec![[0.0; 2]; m];
        filter[0] = [chirp[0][0], -chirp[0][1]];
        for k in 1..n {
            let c = [chirp[k][0], -chirp[k][1]];
            filter[k] = c;
            filter[m - k] = c;
        }
        inner.forward(&mut filter, &mut Vec::new());
        Plan {
            n,
            kind: Kind::Bluestein {
                chirp,
                inner,
                filter,
            },
        }
    }

    pub fn len(&self) -> usize {
        self.n
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// In-place forward transform of `x` (length `n`); `work` is scratch for Bluestein.
    pub fn forward(&self, x: &mut [C64], work: &mut Vec<C64>) {
        assert_eq!(x.len(), self.n);
        match &self.kind {
            Kind::Radix2(tw) => radix2(x, tw),
            Kind::Bluestein {
                chirp,
                inner,
                filter,
            } => {
                let m = inner.n;
                work.clear();
                work.resize(m, [0.0; 2]);
                for ((w, &v), &c) in work.iter_mut().zip(x.iter()).zip(chirp) {
                    *w = mul(v, c);
                }
                inner.forward(work, &mut Vec::new());
                for (w, &f) in work.iter_mut().zip(filter) {
                    // Conjugate so that the forward plan computes the inverse below.
                    let p = mul(*w, f);
                    *w = [p[0], -p[1]];
                }
                inner.forward(work, &mut Vec::new());
                let s = 1.0 / m as f64;
                for ((o, w), &c) in x.iter_mut().zip(work.iter()).zip(chirp) {
                    *o = mul([w[0] * s, -w[1] * s], c);
                }
            }
        }
    }

    /// In-place inverse transform with the `1/n` factor (numpy's and torch's `ifft`).
    pub fn inverse(&self, x: &mut [C64], work: &mut Vec<C64>) {
        for v in x.iter_mut() {
            v[1] = -v[1];
        }
        self.forward(x, work);
        let s = 1.0 / self.n as f64;
        for v in x.iter_mut() {
            *v = [v[0] * s, -v[1] * s];
        }
    }
}

fn radix2(x: &mut [C64], tw: &[C64]) {
    let n = x.len();
    if n <= 1 {
        return;
    }
    let bits = n.trailing_zeros();
    for i in 0..n {
        let j = i.reverse_bits() >> (usize::BITS - bits);
        if j > i {
            x.swap(i, j);
        }
    }
    let mut len = 2;
    while len <= n {
        let half = len / 2;
        let step = n / len;
        for chunk in x.chunks_mut(len) {
            let (a, b) = chunk.split_at_mut(half);
            for k in 0..half {
                let t = mul(b[k], tw[k * step]);
                let u = a[k];
                a[k] = [u[0] + t[0], u[1] + t[1]];
                b[k] = [u[0] - t[0], u[1] - t[1]];
            }
        }
        len *= 2;
    }
}

/// Transposes an `h × w` row-major array into `w × h`, in blocks.
pub fn transpose(src: &[C64], h: usize, w: usize) -> Vec<C64> {
    let mut dst = vec![[0.0; 2]; src.len()];
    const B: usize = 32;
    dst.par_chunks_mut(B * h).enumerate().for_each(|(bi, blk)| {
        let x0 = bi * B;
        let bw = blk.len() / h;
        for y0 in (0..h).step_by(B) {
            for y in y0..(y0 + B).min(h) {
                for dx in 0..bw {
                    blk[dx * h + y] = src[y * w + x0 + dx];
                }
            }
        }
    });
    dst
}

/// Forward (or inverse) transform of every row of an `h × w` array.
pub fn rows(data: &mut [C64], w: usize, inverse: bool) {
    let plan = Plan::new(w);
    data.par_chunks_mut(w).for_each_init(Vec::new, |work, row| {
        if inverse {
            plan.inverse(row, work)
        } else {
            plan.forward(row, work)
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dft(x: &[C64]) -> Vec<C64> {
        let n = x.len();
        (0..n)
            .map(|k| {
                let mut s = [0.0; 2];
                for (j, v) in x.iter().enumerate() {
                    let a = -2.0 * std::f64::consts::PI * ((j * k) % n) as f64 / n as f64;
                    let p = mul(*v, [a.cos(), a.sin()]);
                    s[0] += p[0];
                    s[1] += p[1];
                }
                s
            })
            .collect()
    }

    #[test]
    fn matches_a_direct_dft_and_inverts() {
        for n in [1usize, 2, 8, 13, 26, 52, 100] {
            let x: Vec<C64> = (0..n)
                .map(|i| [((i * 7) % 5) as f64 - 2.0, ((i * 3) % 4) as f64 * 0.5])
                .collect();
            let mut y = x.clone();
            let plan = Plan::new(n);
            plan.forward(&mut y, &mut Vec::new());
            for (a, b) in y.iter().zip(dft(&x)) {
                assert!(
                    (a[0] - b[0]).abs() < 1e-9 && (a[1] - b[1]).abs() < 1e-9,
                    "n {n}"
                );
            }
            plan.inverse(&mut y, &mut Vec::new());
            for (a, b) in y.iter().zip(&x) {
                assert!(
                    (a[0] - b[0]).abs() < 1e-9 && (a[1] - b[1]).abs() < 1e-9,
                    "n {n}"
                );
            }
        }
    }
}
