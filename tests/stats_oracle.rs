//! Oracle tests: gradients drawn with known Σ and G (power-law spectrum), so the true B_simple
//! is known and per-step |G|² estimates are often negative, as on real runs.

use crate::stats_support;

use copus::stats::{EstimatorSettings, SmootherKind, analyze};
use rayon::prelude::*;
use stats_support::Model;

const STEPS: u64 = 3000;

fn model() -> Model {
    // tr Σ = 1000, b_small = 4, 8 small batches: b_big = 32 samples.
    Model::power_law(500, 1.0, 1000.0, 4.0, 8)
}

#[test]
fn stationary_summary_is_accurate_and_interval_covers() {
    let m = model();
    let b_true = 128.0; // 4 × b_big: single-step |G|² estimates are often negative.
    let g2 = m.trace() / b_true;
    let settings = EstimatorSettings::default();
    let seeds: Vec<u64> = (0..40).collect();
    let results: Vec<(f64, [f64; 2], f64)> = seeds
        .par_iter()
        .map(|&seed| {
            let records = m.run(seed, STEPS, |_| g2);
            let r = analyze(&records, &settings).expect("analysis");
            let s = r.summary;
            (s.b_simple.expect("bounded"), s.ci, s.negative_g2_fraction)
        })
        .collect();
    let covered = results
        .iter()
        .filter(|(_, ci, _)| ci[0] <= b_true && b_true <= ci[1])
        .count();
    let worst = results
        .iter()
        .map(|r| (r.0 / b_true - 1.0).abs())
        .fold(0.0, f64::max);
    let neg_mean = results.iter().map(|r| r.2).sum::<f64>() / results.len() as f64;
    eprintln!(
        "coverage {covered}/{}, worst relative error {worst:.3}, negative |G|^2 share {neg_mean:.2}",
        results.len()
    );
    for (b, ci, neg) in &results {
        assert!(
            (b / b_true - 1.0).abs() < 0.10,
            "B_simple {b} vs truth {b_true}, ci {ci:?}"
        );
        assert!(
            *neg > 0.15,
            "negative |G|^2 share {neg} too small for a realistic test"
        );
    }
    assert!(
        covered * 10 >= results.len() * 9,
        "coverage {covered}/{}",
        results.len()
    );
}

/// Median over steps of max(est/truth, truth/est), and the share of steps whose interval
/// covers the truth.
fn tracking(smoother: SmootherKind, seed: u64) -> (f64, f64) {
    tracking_growth(smoother, seed, 16.0)
}

/// As [`tracking`] for a true B_simple growing `growth`× from 16 samples over the run.
fn tracking_growth(smoother: SmootherKind, seed: u64, growth: f64) -> (f64, f64) {
    let m = model();
    // True B_simple grows from 16 samples as |G| shrinks.
    let b_start = 16.0;
    let truth = |t: u64| b_start * growth.powf(t as f64 / (STEPS - 1) as f64);
    let records = m.run(seed, STEPS, |t| m.trace() / truth(t));
    let settings = EstimatorSettings {
        smoother,
        ..EstimatorSettings::default()
    };
    let r = analyze(&records, &settings).expect("analysis");
    let mut factors: Vec<f64> = r
        .steps
        .iter()
        .map(|row| match row.b_simple {
            Some(b) => (b / truth(row.step)).max(truth(row.step) / b),
            None => f64::INFINITY,
        })
        .collect();
    let covered = r
        .steps
        .iter()
        .filter(|row| row.ci[0] <= truth(row.step) && truth(row.step) <= row.ci[1])
        .count();
    factors.sort_by(f64::total_cmp);
    (
        factors[factors.len() / 2],
        covered as f64 / r.steps.len() as f64,
    )
}

/// Both smoothers' per-step 95% intervals must cover a 16× growing truth on ≥ 85% of steps
/// with a median deviation of at most ×1.25 (the one-sided one is what the live view shows).
#[test]
fn growing_noise_scale_is_tracked_per_step() {
    let results: Vec<(u64, f64, f64, f64, f64)> = [1u64, 2, 3, 4, 5]
        .par_iter()
        .map(|&seed| {
            let (two, cov_two) = tracking(SmootherKind::TwoSided, seed);
            let (one, cov_one) = tracking(SmootherKind::OneSided, seed);
            (seed, two, cov_two, one, cov_one)
        })
        .collect();
    for (seed, two, cov_two, one, cov_one) in results {
        eprintln!(
            "seed {seed}: median factor two-sided {two:.3} (step CI coverage {cov_two:.2}), \
             one-sided {one:.3} (coverage {cov_one:.2})"
        );
        assert!(two <= 1.25, "two-sided median factor {two}");
        assert!(one <= 1.25, "one-sided median factor {one}");
        assert!(
            cov_two >= 0.85,
            "two-sided per-step interval coverage {cov_two}"
        );
        assert!(
            cov_one >= 0.85,
            "one-sided per-step interval coverage {cov_one}"
        );
    }
}

/// On a steady noise scale the per-step intervals of both smoothers are close to nominal.
#[test]
fn steady_noise_scale_per_step_coverage_is_nominal() {
    for seed in [7, 8] {
        for smoother in [SmootherKind::TwoSided, SmootherKind::OneSided] {
            let (factor, cov) = tracking_growth(smoother, seed, 1.0);
            eprintln!(
                "steady seed {seed} {smoother:?}: median factor {factor:.3}, coverage {cov:.2}"
            );
            assert!(cov >= 0.88, "{smoother:?} coverage {cov}");
            assert!(factor <= 1.15, "{smoother:?} median factor {factor}");
        }
    }
}
