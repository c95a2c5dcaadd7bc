//! Synthetic planning instances (seeded), for property tests, benchmarks and quick what-ifs
//! without a performance model.

use super::costs::SwitchCosts;
use super::problem::{PlanState, Problem, ProblemError};
use super::progress::Phase;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

/// A small random instance of `n` phases and `ns` states: layouts drawn from a few
/// (dp, tp, pp) so that every switch kind occurs, batches from 16–256 samples, step time =
/// per-step overhead + per-sample time (so the best batch moves with B_crit), B_crit wandering
/// up and down by up to 4× a phase, phase times of the order of tens of seconds.
pub fn random_problem(
    seed: u64,
    n: usize,
    ns: usize,
    dwell: usize,
    costs: SwitchCosts,
) -> Result<Problem, ProblemError> {
    let mut rng = StdRng::seed_from_u64(seed);
    let layouts = [(8, 1, 1), (4, 2, 1), (2, 2, 2), (4, 1, 2), (2, 1, 1)];
    let batches = [16u64, 32, 64, 128, 256];
    let states = (0..ns)
        .map(|_| {
            let (dp, tp, pp) = layouts[rng.random_range(0..layouts.len())];
            let batch = batches[rng.random_range(0..batches.len())];
            let overhead: f64 = rng.random_range(0.05..1.0);
            let per_sample: f64 = rng.random_range(0.001..0.01);
            PlanState {
                dp,
                ep: 1,
                zero: 1,
                tp,
                pp,
                cp: 1,
                batch,
                step_time_s: overhead + per_sample * batch as f64,
                cell: None,
            }
        })
        .collect();
    let mut b_crit: f64 = rng.random_range(4.0..64.0);
    let phases = (0..n)
        .map(|i| {
            b_crit *= rng.random_range(0.4..4.0);
            Phase {
                start_tokens: i as f64,
                end_tokens: i as f64 + 1.0,
                b_crit,
                min_samples: rng.random_range(1000.0..20000.0),
            }
        })
        .collect();
    Problem::new(phases, states, costs, dwell)
}

/// Random per-kind costs of 0–10 s (batch), 0–30 s (DP resize), 0–60 s (reshard), not
/// necessarily ordered.
pub fn random_costs(seed: u64) -> SwitchCosts {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x9e37_79b9);
    SwitchCosts {
        batch_s: rng.random_range(0.0..10.0),
        dp_resize_s: rng.random_range(0.0..30.0),
        reshard_s: rng.random_range(0.0..60.0),
    }
}

/// Every (dp, tp, pp) layout of `gpus` GPUs (dp·tp·pp = gpus) times `configs` micro-batch
/// variants times `batches` batch sizes (16 · 2^(k/2) samples), with a roofline-like step time,
/// over `phases` phases of a B_crit growing 100×: a benchmark-sized instance.
pub fn cluster_problem(
    seed: u64,
    gpus: u32,
    configs: usize,
    batches: usize,
    phases: usize,
    costs: SwitchCosts,
    dwell: usize,
) -> Result<Problem, ProblemError> {
    let mut rng = StdRng::seed_from_u64(seed);
    let divisors = crate::perf::enumerate::divisors;
    let mut states = Vec::new();
    for tp in divisors(gpus) {
        for pp in divisors(gpus / tp) {
            let dp = gpus / tp / pp;
            for _ in 0..configs {
                let overhead = 0.05 * (tp as f64).sqrt() * rng.random_range(0.8..1.25);
                let per_sample = 0.002 * (1.0 + 0.1 * pp as f64) * rng.random_range(0.8..1.25);
                for k in 0..batches {
                    let batch = (16.0 * 2f64.powf(k as f64 / 2.0)).round() as u64;
                    states.push(PlanState {
                        dp,
                        ep: 1,
                        zero: 1,
                        tp,
                        pp,
                        cp: 1,
                        batch,
                        step_time_s: overhead + per_sample * batch as f64 / dp as f64,
                        cell: None,
                    });
                }
            }
        }
    }
    let phases = (0..phases)
        .map(|i| {
            let f = i as f64 / phases.max(2) as f64;
            Phase {
                start_tokens: i as f64 * 1e8,
                end_tokens: (i + 1) as f64 * 1e8,
                b_crit: 32.0 * 100f64.powf(f),
                min_samples: 2e4,
            }
        })
        .collect();
    Problem::new(phases, states, costs, dwell)
}
