//! Test support: squared gradient norms drawn exactly as a real run produces them from a
//! Gaussian gradient model with known Σ (diagonal, power-law eigenvalues) and G.
//!
//! Per step, the n small-batch means are g_k = G + N(0, Σ/b_small). Instead of drawing every
//! g_k, draw their mean ḡ = G + N(0, Σ/(n·b_small)) and, per dimension, the scatter
//! Σ_k (g_ki − ḡ_i)² = (λ_i/b_small)·χ²(n−1): sq_big = |ḡ|², sq_small = sq_big + scatter/n.
//! Same joint distribution, n times fewer draws.
#![allow(dead_code)]

use copus::stats::{LayerSq, StepStats};
use rand::SeedableRng;
use rand::rngs::SmallRng;
use rand_distr::{ChiSquared, Distribution, StandardNormal};

/// A Gaussian gradient model.
pub struct Model {
    /// Eigenvalues of the per-sample covariance Σ (diagonal).
    pub lambda: Vec<f64>,
    /// Direction of the true gradient, unit norm.
    pub g_dir: Vec<f64>,
    /// Samples per small batch.
    pub b_small: f64,
    /// Small batches per step (b_big = n · b_small).
    pub n_small: u32,
    /// If set, dims below this index form layer "top", the rest layer "rest".
    pub layer_split: Option<usize>,
}

impl Model {
    /// D dims, λ_i ∝ i^(−alpha) scaled so tr Σ = `trace`; G along i^(−1/2), unit norm.
    pub fn power_law(dims: usize, alpha: f64, trace: f64, b_small: f64, n_small: u32) -> Self {
        let raw: Vec<f64> = (1..=dims).map(|i| (i as f64).powf(-alpha)).collect();
        let s: f64 = raw.iter().sum();
        let lambda = raw.iter().map(|x| x * trace / s).collect();
        let dir: Vec<f64> = (1..=dims).map(|i| (i as f64).powf(-0.5)).collect();
        let norm = dir.iter().map(|x| x * x).sum::<f64>().sqrt();
        let g_dir = dir.iter().map(|x| x / norm).collect();
        Self {
            lambda,
            g_dir,
            b_small,
            n_small,
            layer_split: None,
        }
    }

    /// tr Σ.
    pub fn trace(&self) -> f64 {
        self.lambda.iter().sum()
    }

    /// Samples per big batch.
    pub fn b_big(&self) -> f64 {
        self.b_small * f64::from(self.n_small)
    }

    /// One step's record with true |G|² = `g2`.
    pub fn draw(&self, rng: &mut SmallRng, step: u64, g2: f64) -> StepStats {
        let n = f64::from(self.n_small);
        let chi = ChiSquared::new(n - 1.0).expect("n_small >= 2");
        let g_norm = g2.sqrt();
        // Per layer: (|ḡ|², scatter).
        let mut acc = [(0.0, 0.0); 2];
        let split = self.layer_split.unwrap_or(usize::MAX);
        for (i, (l, d)) in self.lambda.iter().zip(&self.g_dir).enumerate() {
            let z: f64 = StandardNormal.sample(rng);
            let m = g_norm * d + (l / (n * self.b_small)).sqrt() * z;
            let a = &mut acc[usize::from(i >= split)];
            a.0 += m * m;
            a.1 += l / self.b_small * chi.sample(rng);
        }
        let sq = |a: (f64, f64)| LayerSq {
            sq_small: a.0 + a.1 / n,
            sq_big: a.0,
        };
        let (top, rest) = (sq(acc[0]), sq(acc[1]));
        let (small, big) = (top.sq_small + rest.sq_small, top.sq_big + rest.sq_big);
        let mut r = StepStats::new(step, self.b_small, self.b_big(), small, big);
        r.n_small = Some(self.n_small);
        if self.layer_split.is_some() {
            r.layers.insert("top", top);
            r.layers.insert("rest", rest);
        }
        r
    }

    /// A run whose noise in the mean gradient is AR(1) across steps with coefficient `rho`
    /// (ḡ_t = G + u_t, u_t = ρ·u_{t−1} + √(1−ρ²)·N(0, Σ/(n·b_small)), stationary from step 0):
    /// each step's norms have exactly the marginal distribution of [`Model::draw`], but
    /// consecutive steps are correlated, as with momentum-correlated data order or overlapping
    /// batches. True |G|² = `g2` at every step.
    pub fn run_ar1(&self, seed: u64, steps: u64, g2: f64, rho: f64) -> Vec<StepStats> {
        let mut rng = SmallRng::seed_from_u64(seed);
        let n = f64::from(self.n_small);
        let chi = ChiSquared::new(n - 1.0).expect("n_small >= 2");
        let sd: Vec<f64> = self
            .lambda
            .iter()
            .map(|l| (l / (n * self.b_small)).sqrt())
            .collect();
        let mut u: Vec<f64> = sd
            .iter()
            .map(|s| {
                let z: f64 = StandardNormal.sample(&mut rng);
                s * z
            })
            .collect();
        let innov = (1.0 - rho * rho).sqrt();
        let g_norm = g2.sqrt();
        (0..steps)
            .map(|t| {
                if t > 0 {
                    for (ui, s) in u.iter_mut().zip(&sd) {
                        let z: f64 = StandardNormal.sample(&mut rng);
                        *ui = rho * *ui + innov * s * z;
                    }
                }
                let (mut big, mut scatter) = (0.0, 0.0);
                for ((l, d), ui) in self.lambda.iter().zip(&self.g_dir).zip(&u) {
                    let m = g_norm * d + ui;
                    big += m * m;
                    scatter += l / self.b_small * chi.sample(&mut rng);
                }
                let mut r = StepStats::new(t, self.b_small, self.b_big(), big + scatter / n, big);
                r.n_small = Some(self.n_small);
                r
            })
            .collect()
    }

    /// A run of `steps` steps whose true |G|² at step t is `g2(t)`.
    pub fn run(&self, seed: u64, steps: u64, g2: impl Fn(u64) -> f64) -> Vec<StepStats> {
        let mut rng = SmallRng::seed_from_u64(seed);
        (0..steps).map(|t| self.draw(&mut rng, t, g2(t))).collect()
    }
}

/// Write records as protocol v1 lines.
pub fn to_ndjson(records: &[StepStats]) -> String {
    records
        .iter()
        .map(|r| serde_json::to_string(r).expect("serialise") + "\n")
        .collect()
}
