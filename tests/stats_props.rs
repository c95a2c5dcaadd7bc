//! Property tests of the estimator identities and invariances.

use crate::stats_support;

use copus::stats::estimate::interval::fieller;
use copus::stats::estimate::per_step::solve_two_sizes;
use copus::stats::{EstimatorSettings, SmootherKind, StepStats, analyze, two_batch};
use proptest::prelude::*;
use stats_support::Model;

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol * (1.0 + a.abs().max(b.abs()))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// With the exact expectations E|G_B|² = |G|² + tr Σ / B plugged in, the estimator returns
    /// |G|² and tr Σ exactly.
    #[test]
    fn exact_expectations_give_the_truth(
        g2 in 0.0f64..1e3, trace in 0.0f64..1e6, b_small in 1u32..512, factor in 2u32..64,
    ) {
        let (bs, bb) = (f64::from(b_small), f64::from(b_small * factor));
        let e = two_batch(bs, bb, g2 + trace / bs, g2 + trace / bb).expect("ordered sizes");
        prop_assert!(close(e.g2, g2, 1e-9), "{} vs {g2}", e.g2);
        prop_assert!(close(e.trace, trace, 1e-9), "{} vs {trace}", e.trace);
    }

    /// Scaling both squared norms by c scales both estimates by c (units follow the norms).
    #[test]
    fn estimates_scale_with_the_norms(
        sq_s in 0.0f64..1e3, sq_b in 0.0f64..1e3, bs in 1.0f64..64.0, extra in 1.0f64..512.0,
        c in 1e-6f64..1e6,
    ) {
        let a = two_batch(bs, bs + extra, sq_s, sq_b).expect("ordered");
        let b = two_batch(bs, bs + extra, c * sq_s, c * sq_b).expect("ordered");
        prop_assert!(close(b.g2, c * a.g2, 1e-9));
        prop_assert!(close(b.trace, c * a.trace, 1e-9));
    }

    /// Swapping the roles of the two batch sizes solves the same equations.
    #[test]
    fn swapping_the_two_sizes_is_consistent(
        sq1 in 0.0f64..1e3, sq2 in 0.0f64..1e3, b1 in 1.0f64..64.0, b2 in 65.0f64..4096.0,
    ) {
        let a = solve_two_sizes(b1, sq1, b2, sq2).expect("distinct");
        let b = solve_two_sizes(b2, sq2, b1, sq1).expect("distinct");
        prop_assert!(close(a.g2, b.g2, 1e-12) && close(a.trace, b.trace, 1e-12));
        prop_assert_eq!(two_batch(b2, b1, sq2, sq1), None);
        prop_assert_eq!(two_batch(b1, b2, sq1, sq2), Some(a));
    }

    /// B_simple, its interval and the trajectory are invariant to a common scaling of both
    /// squared norms (e.g. a loss scale divided out or not, consistently).
    #[test]
    fn b_simple_is_invariant_to_a_common_scale(
        seed in 0u64..1000, c in 1e-8f64..1e8, one_sided in any::<bool>(),
    ) {
        let m = Model::power_law(40, 1.0, 100.0, 2.0, 4);
        let records = m.run(seed, 80, |_| 100.0 / 20.0);
        let scaled: Vec<StepStats> = records.iter().map(|r| {
            let mut r = r.clone();
            r.sq_small *= c;
            r.sq_big *= c;
            r
        }).collect();
        let smoother = if one_sided { SmootherKind::OneSided } else { SmootherKind::TwoSided };
        let s = EstimatorSettings { smoother, ..EstimatorSettings::default() };
        let a = analyze(&records, &s).expect("analysis");
        let b = analyze(&scaled, &s).expect("analysis");
        let same = |x: Option<f64>, y: Option<f64>| match (x, y) {
            (Some(x), Some(y)) => close(x, y, 1e-7),
            (None, None) => true,
            _ => false,
        };
        prop_assert!(same(a.summary.b_simple, b.summary.b_simple));
        for k in 0..2 {
            let (x, y) = (a.summary.ci[k], b.summary.ci[k]);
            prop_assert!(x == y || close(x, y, 1e-7), "ci {:?} vs {:?}", a.summary.ci, b.summary.ci);
        }
        prop_assert!(close(b.summary.g2, c * a.summary.g2, 1e-7));
        for (x, y) in a.steps.iter().zip(&b.steps) {
            prop_assert!(same(x.b_simple, y.b_simple));
            prop_assert!(same(x.ratio_ema, y.ratio_ema));
        }
    }

    /// Constant per-step estimates smooth to themselves, with either smoother.
    #[test]
    fn constant_input_smooths_to_itself(
        g2 in 0.01f64..10.0, trace in 0.0f64..1e4, n in 3usize..200, one_sided in any::<bool>(),
    ) {
        let (bs, bb) = (4.0, 32.0);
        let records: Vec<StepStats> = (0..n as u64)
            .map(|t| StepStats::new(t, bs, bb, g2 + trace / bs, g2 + trace / bb))
            .collect();
        let smoother = if one_sided { SmootherKind::OneSided } else { SmootherKind::TwoSided };
        let s = EstimatorSettings { smoother, ..EstimatorSettings::default() };
        let r = analyze(&records, &s).expect("analysis");
        let truth = trace / g2;
        prop_assert!(close(r.summary.b_simple.expect("bounded"), truth, 1e-9));
        for row in &r.steps {
            prop_assert!(close(row.b_simple.expect("bounded"), truth, 1e-9));
            prop_assert!(close(row.g2, g2, 1e-9) && close(row.trace_sigma, trace, 1e-9));
        }
    }

    /// A bounded Fieller interval contains its point estimate.
    #[test]
    fn fieller_contains_the_estimate(
        num in 0.0f64..100.0, den in 0.1f64..100.0, vn in 0.0f64..10.0, vd in 0.0f64..10.0,
        rho in -0.99f64..0.99,
    ) {
        let cov = rho * (vn * vd).sqrt();
        let ci = fieller(num, den, (vn, cov, vd), 1.96);
        let r = num / den;
        prop_assert!(ci[0] <= r * (1.0 + 1e-9) + 1e-12 && r <= ci[1] * (1.0 + 1e-9) + 1e-12,
            "{r} not in {ci:?}");
    }
}

#[test]
fn normal_quantiles_match_tables() {
    use copus::stats::estimate::interval::{normal_quantile, z_for};
    assert!((z_for(0.95) - 1.959_963_985).abs() < 1e-8);
    assert!((z_for(0.90) - 1.644_853_627).abs() < 1e-8);
    assert!((z_for(0.99) - 2.575_829_304).abs() < 1e-8);
    assert!((normal_quantile(0.001) + 3.090_232_306).abs() < 1e-8);
}

#[test]
fn settings_round_trip_through_a_session_block_and_default_missing_fields() {
    let s = EstimatorSettings {
        smoother: SmootherKind::OneSided,
        bandwidth_steps: Some(40.0),
        ..EstimatorSettings::default()
    };
    let text = ron::to_string(&s).expect("ron");
    let back: EstimatorSettings = ron::from_str(&text).expect("parse");
    assert_eq!(back, s);
    let old: EstimatorSettings = ron::from_str("(confidence: 0.9)").expect("old session block");
    assert_eq!(old.confidence, 0.9);
    assert_eq!(old.smoother, SmootherKind::TwoSided);
}

#[test]
fn a_huge_bandwidth_is_the_run_mean() {
    let m = Model::power_law(40, 1.0, 100.0, 2.0, 4);
    let records = m.run(3, 50, |_| 5.0);
    let s = EstimatorSettings {
        bandwidth_steps: Some(1e15),
        ..EstimatorSettings::default()
    };
    let r = analyze(&records, &s).expect("analysis");
    let b = r.summary.b_simple.expect("bounded");
    for row in &r.steps {
        assert!(close(row.b_simple.expect("bounded"), b, 1e-9));
    }
}
