//! A small radix-2 complex FFT (power-of-two sizes, split real/imaginary arrays) for the
//! block convolutions of the two-sided smoother ([`super::kernel_sums`]).
//!
//! Twiddle factors are computed one by one with `sin`/`cos` (no recurrence), so the rounding
//! error of a transform of size n stays near ε·log₂ n relative to the input's norm.

/// A plan for transforms of one power-of-two size.
pub(crate) struct Fft {
    n: usize,
    /// Twiddles stage by stage: entries `half - 1 .. 2·half - 1` hold cos(2πk/(2·half)) and
    /// sin(2πk/(2·half)) for k < half (each computed as cos/sin(2π·k·stride/n)).
    tw_cos: Vec<f64>,
    tw_sin: Vec<f64>,
    /// Bit-reversal permutation.
    rev: Vec<usize>,
}

impl Fft {
    /// A plan for size `n` (a power of two, at least 1).
    pub(crate) fn new(n: usize) -> Self {
        assert!(n.is_power_of_two(), "FFT size must be a power of two");
        let bits = n.trailing_zeros();
        let rev = (0..n)
            .map(|i| {
                if bits == 0 {
                    0
                } else {
                    i.reverse_bits() >> (usize::BITS - bits)
                }
            })
            .collect();
        let angle = |k: usize| 2.0 * std::f64::consts::PI * k as f64 / n as f64;
        let cos: Vec<f64> = (0..n / 2).map(|k| angle(k).cos()).collect();
        let sin: Vec<f64> = (0..n / 2).map(|k| angle(k).sin()).collect();
        let (mut tw_cos, mut tw_sin) = (Vec::with_capacity(n), Vec::with_capacity(n));
        let mut half = 1;
        while half < n {
            let stride = n / (2 * half);
            tw_cos.extend((0..half).map(|k| cos[k * stride]));
            tw_sin.extend((0..half).map(|k| sin[k * stride]));
            half *= 2;
        }
        Self {
            n,
            tw_cos,
            tw_sin,
            rev,
        }
    }

    /// In-place forward transform X_k = Σ x_j·e^(−2πijk/n).
    pub(crate) fn forward(&self, re: &mut [f64], im: &mut [f64]) {
        self.run(re, im, -1.0);
    }

    /// In-place inverse transform, scaled by 1/n (so `inverse(forward(x)) = x`).
    pub(crate) fn inverse(&self, re: &mut [f64], im: &mut [f64]) {
        self.run(re, im, 1.0);
        let s = 1.0 / self.n as f64;
        re.iter_mut().chain(im.iter_mut()).for_each(|x| *x *= s);
    }

    fn run(&self, re: &mut [f64], im: &mut [f64], sign: f64) {
        let n = self.n;
        debug_assert!(re.len() == n && im.len() == n);
        for i in 0..n {
            let j = self.rev[i];
            if j > i {
                re.swap(i, j);
                im.swap(i, j);
            }
        }
        // Stage by stage: the twiddles of a stage are contiguous (`tw_*[half - 1..2 * half - 1]`
        // holds cos/sin(2πk/n · n/(2·half)) for k < half, the same numbers as the strided
        // table), and each block splits into its two halves, so the loop runs without index
        // checks; the arithmetic and its order are those of the plain loop.
        let mut half = 1;
        while half < n {
            let len = 2 * half;
            let tc = &self.tw_cos[half - 1..len - 1];
            let ts = &self.tw_sin[half - 1..len - 1];
            for (cr, ci) in re.chunks_exact_mut(len).zip(im.chunks_exact_mut(len)) {
                let (ar, br) = cr.split_at_mut(half);
                let (ai, bi) = ci.split_at_mut(half);
                for (((((ar, ai), br), bi), &c), &s) in ar
                    .iter_mut()
                    .zip(ai.iter_mut())
                    .zip(br.iter_mut())
                    .zip(bi.iter_mut())
                    .zip(tc)
                    .zip(ts)
                {
                    let s = sign * s;
                    let (xr, xi) = (*br * c - *bi * s, *br * s + *bi * c);
                    *br = *ar - xr;
                    *bi = *ai - xi;
                    *ar += xr;
                    *ai += xi;
                }
            }
            half = len;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Fft;

    /// The transform agrees with the O(n²) definition and inverts back.
    #[test]
    fn matches_the_definition_and_inverts() {
        for n in [1usize, 2, 8, 64] {
            let fft = Fft::new(n);
            let x: Vec<f64> = (0..n).map(|i| ((i * 7 + 3) % 11) as f64 - 4.5).collect();
            let y: Vec<f64> = (0..n).map(|i| ((i * 5 + 1) % 13) as f64 * 0.25).collect();
            let (mut re, mut im) = (x.clone(), y.clone());
            fft.forward(&mut re, &mut im);
            for k in 0..n {
                let (mut sr, mut si) = (0.0, 0.0);
                for j in 0..n {
                    let a = -2.0 * std::f64::consts::PI * (j * k) as f64 / n as f64;
                    sr += x[j] * a.cos() - y[j] * a.sin();
                    si += x[j] * a.sin() + y[j] * a.cos();
                }
                assert!(
                    (re[k] - sr).abs() < 1e-9 && (im[k] - si).abs() < 1e-9,
                    "n={n} k={k}"
                );
            }
            fft.inverse(&mut re, &mut im);
            for j in 0..n {
                assert!((re[j] - x[j]).abs() < 1e-12 && (im[j] - y[j]).abs() < 1e-12);
            }
        }
    }
}
