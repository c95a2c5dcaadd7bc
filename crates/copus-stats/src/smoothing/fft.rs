//! Complex FFTs of one power-of-two size for the block convolutions of the two-sided
//! smoother ([`crate::smoothing::kernel_sums`]), by the `rustfft` crate (SIMD where the CPU has it):
//! a forward transform and an inverse one scaled by 1/n, so `inverse(forward(x)) = x`.

use rustfft::num_complex::Complex64;
use std::sync::Arc;

/// Forward and inverse plans of one size, with their scratch space (a clone shares the
/// plans and has its own scratch).
#[derive(Clone)]
pub(crate) struct Fft {
    n: usize,
    forward: Arc<dyn rustfft::Fft<f64>>,
    inverse: Arc<dyn rustfft::Fft<f64>>,
    scratch: Vec<Complex64>,
}

impl Fft {
    /// Plans for transforms of `n` points (`n` a power of two).
    pub(crate) fn new(n: usize) -> Self {
        let mut planner = rustfft::FftPlanner::new();
        let forward = planner.plan_fft_forward(n);
        let inverse = planner.plan_fft_inverse(n);
        let scratch_len = forward
            .get_inplace_scratch_len()
            .max(inverse.get_inplace_scratch_len());
        Self {
            n,
            forward,
            inverse,
            scratch: vec![Complex64::new(0.0, 0.0); scratch_len],
        }
    }

    /// In place: X_k = Σ_j x_j e^(−2πi jk/n).
    pub(crate) fn forward(&mut self, x: &mut [Complex64]) {
        debug_assert_eq!(x.len(), self.n);
        self.forward.process_with_scratch(x, &mut self.scratch);
    }

    /// In place: x_j = (1/n) Σ_k X_k e^(2πi jk/n).
    pub(crate) fn inverse(&mut self, x: &mut [Complex64]) {
        debug_assert_eq!(x.len(), self.n);
        self.inverse.process_with_scratch(x, &mut self.scratch);
        let s = 1.0 / self.n as f64;
        x.iter_mut().for_each(|v| *v *= s);
    }
}

#[cfg(test)]
mod tests {
    use super::{Complex64, Fft};

    /// The transform agrees with the O(n²) definition and inverts back.
    #[test]
    fn matches_the_definition_and_inverts() {
        for n in [1usize, 2, 8, 64, 4096] {
            let mut fft = Fft::new(n);
            let x: Vec<Complex64> = (0..n)
                .map(|i| {
                    Complex64::new(
                        ((i * 7 + 3) % 11) as f64 - 4.5,
                        ((i * 5 + 1) % 13) as f64 * 0.25,
                    )
                })
                .collect();
            let mut y = x.clone();
            fft.forward(&mut y);
            for k in (0..n).step_by((n / 64).max(1)) {
                let mut s = Complex64::new(0.0, 0.0);
                for (j, v) in x.iter().enumerate() {
                    let a = -2.0 * std::f64::consts::PI * ((j * k) % n) as f64 / n as f64;
                    s += v * Complex64::new(a.cos(), a.sin());
                }
                assert!((y[k] - s).norm() < 1e-9 * n as f64, "n={n} k={k}");
            }
            fft.inverse(&mut y);
            for (a, b) in x.iter().zip(&y) {
                assert!((a - b).norm() < 1e-12, "n={n}");
            }
        }
    }
}
