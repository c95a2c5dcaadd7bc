//! Oracle tests of the headline: where B_simple is now (last window), the drift diagnostic
//! between the first and the last window, and located causes (a learning-rate change point).

use crate::stats_support;

use copus::stats::{AnalyzeReport, DiagnosticKind as K, EstimatorSettings, analyze};
use rayon::prelude::*;
use stats_support::Model;

const STEPS: u64 = 3000;

fn model() -> Model {
    // tr Σ = 1000, b_small = 4, 8 small batches: b_big = 32 samples.
    Model::power_law(500, 1.0, 1000.0, 4.0, 8)
}

fn has(r: &AnalyzeReport, k: K) -> bool {
    r.summary.diagnostics.iter().any(|d| d.kind == k)
}

/// The exact ratio of window means of a run whose true B_simple is `b(t)` and tr Σ constant:
/// mean tr / mean(tr/b) = 1 / mean(1/b).
fn window_truth(b: impl Fn(u64) -> f64, first: u64, last: u64) -> f64 {
    let n = (last - first + 1) as f64;
    n / (first..=last).map(|t| 1.0 / b(t)).sum::<f64>()
}

/// The report's `lr_change` diagnostic (it must have one).
fn lr_of(r: &copus::stats::AnalyzeReport) -> copus::stats::Diagnostic {
    r.summary
        .diagnostics
        .iter()
        .find(|d| d.kind == K::LrChange)
        .cloned()
        .expect("lr change")
}

#[test]
fn a_sixteenfold_growth_drifts_and_now_is_near_the_end() {
    let m = model();
    let truth = |t: u64| 16.0 * 16.0f64.powf(t as f64 / (STEPS - 1) as f64);
    for seed in [1, 2, 3] {
        let records = m.run(seed, STEPS, |t| m.trace() / truth(t));
        let r = analyze(&records, &EstimatorSettings::default()).expect("analysis");
        let s = &r.summary;
        let now = s.now.b_simple.expect("bounded now");
        let end = truth(STEPS - 1);
        eprintln!(
            "seed {seed}: now {now:.1} (truth at the end {end:.1}), run-wide {:.1}, drift {:?}",
            s.b_simple.unwrap_or(f64::NAN),
            s.drift.as_ref().map(|d| (d.factor, d.ci))
        );
        assert!((now / end - 1.0).abs() <= 0.25, "now {now} vs {end}");
        assert_eq!(s.now.last_step, STEPS - 1);
        assert_eq!(s.now.steps, 300, "default window: steps / 10");
        let d = s.drift.as_ref().expect("two windows fit");
        assert!(d.significant, "{d:?}");
        let exact = window_truth(truth, s.now.first_step, s.now.last_step)
            / window_truth(truth, d.from.first_step, d.from.last_step);
        assert!(
            d.ci[0] <= exact && exact <= d.ci[1],
            "factor {} ci {:?} vs exact {exact}",
            d.factor,
            d.ci
        );
        assert!(has(&r, K::Drift));
        // The run-wide ratio sits near the early values, far below the end.
        assert!(s.b_simple.expect("bounded") < 0.5 * end);
        // A drifting run's verdict names the drift.
        assert!(s.reasons.iter().any(|x| x.kind == K::Drift));
    }
}

#[test]
fn a_steady_run_has_no_drift() {
    let m = model();
    let g2 = m.trace() / 128.0;
    let seeds: Vec<u64> = (0..40).collect();
    let out: Vec<(bool, f64, [f64; 2])> = seeds
        .par_iter()
        .map(|&seed| {
            let records = m.run(seed, STEPS, |_| g2);
            let r = analyze(&records, &EstimatorSettings::default()).expect("analysis");
            let d = r.summary.drift.clone().expect("two windows fit");
            assert_eq!(has(&r, K::Drift), d.significant);
            (d.significant, d.factor, d.ci)
        })
        .collect();
    let flagged = out.iter().filter(|o| o.0).count();
    let covered = out
        .iter()
        .filter(|o| o.2[0] <= 1.0 && 1.0 <= o.2[1])
        .count();
    eprintln!("steady: drift flagged on {flagged}/40, factor interval covers 1 on {covered}/40");
    assert_eq!(flagged, 0, "drift flagged on {flagged} of 40 steady runs");
    assert!(covered >= 36, "growth interval covers 1 on {covered}/40");
}

#[test]
fn a_learning_rate_change_is_located() {
    let m = model();
    // B_simple ∝ 1/temperature: halving the lr at step 1700 doubles the noise scale.
    let change = 1700;
    let b = |t: u64| if t < change { 64.0 } else { 128.0 };
    let mut records = m.run(5, STEPS, |t| m.trace() / b(t));
    for r in &mut records {
        r.lr = Some(if r.step < change { 3e-4 } else { 1.5e-4 });
    }
    let r = analyze(&records, &EstimatorSettings::default()).expect("analysis");
    let d = lr_of(&r);
    assert_eq!(d.at.len(), 1, "{d:?}");
    let at = d.at[0][0];
    assert!(
        at.abs_diff(change) <= 50,
        "located at {at}, changed at {change}"
    );
    assert_eq!(d.steps, Some([at, at]));
    // And the estimate moves with it: the last window reads the new value.
    let now = r.summary.now.b_simple.expect("bounded");
    assert!((now / 128.0 - 1.0).abs() < 0.25, "now {now}");
}

#[test]
fn a_warm_up_in_jumps_then_a_cosine_decay_is_located_at_both() {
    // The built-in trainer's default: a linear warm-up of 20 steps (each step more than 5 %
    // above the last: a ramp, one rising stretch, where it read as 19 changes and a smooth
    // rise) and a cosine decay to a tenth, a smooth stretch from where it falls 10 % below
    // its peak.
    let m = model();
    let mut records = m.run(7, 1000, |_| m.trace() / 64.0);
    let peak = 1e-3;
    for r in &mut records {
        let t = r.step as f64;
        r.lr = Some(if r.step < 20 {
            peak * (t + 1.0) / 20.0
        } else {
            let x = (t - 20.0) / 979.0;
            peak * (0.1 + 0.45 * (1.0 + (std::f64::consts::PI * x).cos()))
        });
    }
    let d = lr_of(&analyze(&records, &EstimatorSettings::default()).expect("analysis"));
    let jumps: Vec<_> = d.at.iter().filter(|a| a[0] == a[1]).collect();
    assert!(jumps.is_empty(), "{d:?}");
    let warm_up = d.at[0];
    assert_eq!(warm_up, [1, 19], "{d:?}");
    assert!(
        d.message
            .contains("rises smoothly from 5.000e-5 to 1.000e-3 over steps 1-19"),
        "{}",
        d.message
    );
    let stretch =
        d.at.iter()
            .skip(1)
            .find(|a| a[0] < a[1])
            .expect("a smooth stretch");
    // 0.1 + 0.45 (1 + cos πx) = 0.9 at x ≈ 0.205: step 20 + 0.205 · 979 ≈ 221.
    assert!((210..=232).contains(&stretch[0]), "{stretch:?}");
    assert_eq!(stretch[1], 999);
    assert_eq!(d.steps, Some([1, 999]));
    assert!(
        d.message
            .contains("decays smoothly from 1.000e-3 to 1.000e-4"),
        "{}",
        d.message
    );
}

#[test]
fn a_smooth_lr_schedule_is_located_where_it_departs() {
    let m = model();
    let mut records = m.run(6, 1000, |_| m.trace() / 64.0);
    for r in &mut records {
        // Constant for 400 steps, then a linear decay to a tenth.
        let x = (r.step.saturating_sub(400)) as f64 / 600.0;
        r.lr = Some(1e-3 * (1.0 - 0.9 * x));
    }
    let d = lr_of(&analyze(&records, &EstimatorSettings::default()).expect("analysis"));
    let [a, b] = d.steps.expect("range");
    // 10% below 1e-3 after 0.1/0.9·600 ≈ 67 steps of decay.
    assert!((460..=475).contains(&a), "{a}");
    assert_eq!(b, 999);
}
