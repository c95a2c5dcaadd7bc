//! Two runs side by side: oracle runs with a known change of B_simple, aligned by tokens.

use crate::stats_support;

use copus::stats::analysis::compare::AlignedBy;
use copus::stats::{EstimatorSettings, StepStats, analyze, compare};
use stats_support::Model;

const STEPS: u64 = 3000;
const SEQ: f64 = 1024.0;

fn with_tokens(mut records: Vec<StepStats>, step_offset: u64) -> Vec<StepStats> {
    for r in &mut records {
        r.tokens = Some((r.step + 1) as f64 * r.b_big * SEQ);
        r.step += step_offset;
    }
    records
}

#[test]
fn a_change_that_doubles_b_crit_is_found_where_it_happens() {
    let m = Model::power_law(500, 1.0, 1000.0, 4.0, 8);
    let s = EstimatorSettings::default();
    let a = with_tokens(m.run(1, STEPS, |_| m.trace() / 64.0), 0);
    // Run B restarts its step count at 10000 but sees the same tokens; from step 1500 of
    // training its noise scale doubles.
    let b = with_tokens(
        m.run(2, STEPS, |t| {
            m.trace() / if t < 1500 { 64.0 } else { 128.0 }
        }),
        10_000,
    );
    let (ra, rb) = (analyze(&a, &s).expect("a"), analyze(&b, &s).expect("b"));
    let c = compare(&ra, &rb, &s);
    assert_eq!(c.aligned_by, AlignedBy::Tokens);
    assert_eq!(c.points.len(), STEPS as usize);
    assert!(c.points.iter().all(|p| p.step_b == p.step_a + 10_000));
    assert!(!c.differs.is_empty(), "the doubling is found");
    for d in &c.differs {
        assert!(d.b_higher, "{d:?}");
        assert!(d.steps_a[0] >= 1450, "differs before the change: {d:?}");
        assert!((1.6..2.5).contains(&d.median_ratio), "{d:?}");
    }
    let first = c.differs[0].steps_a[0];
    assert!(first <= 1800, "found late: {first}");
    let now = c.now.as_ref().expect("now ratio");
    let ci = now.ci.expect("bounded");
    assert!(now.differs && ci[0] <= 2.0 && 2.0 <= ci[1], "{now:?}");
    eprintln!(
        "differs on {:.0}% of points, first at step {first}; now ratio {:.2} {ci:?}",
        100.0 * c.differs_share,
        now.ratio
    );

    // Two runs of the same process: no stretch apart.
    let b2 = with_tokens(m.run(3, STEPS, |_| m.trace() / 64.0), 0);
    let c = compare(&ra, &analyze(&b2, &s).expect("b2"), &s);
    assert!(c.differs_share < 0.05, "{}", c.differs_share);
    assert!(!c.now.expect("now").differs);
}

#[test]
fn runs_without_tokens_align_by_steps() {
    let m = Model::power_law(100, 1.0, 100.0, 2.0, 4);
    let s = EstimatorSettings::default();
    let a = analyze(&m.run(1, 400, |_| 2.0), &s).expect("a");
    let b = analyze(&m.run(2, 200, |_| 2.0), &s).expect("b");
    let c = compare(&a, &b, &s);
    assert_eq!(c.aligned_by, AlignedBy::Steps);
    // Only A's steps within B's range are compared.
    assert_eq!(c.points.len(), 200);
    assert!(c.points.iter().all(|p| p.step_a == p.step_b));
}

/// Two runs of one process whose B_simple grows, B stopped halfway: their own last windows
/// are at different points in training, so their ratio is the growth, not a difference; at
/// the latest point both reach the ratio is 1 within its interval.
#[test]
fn runs_that_end_apart_compare_at_their_shared_end() {
    let m = Model::power_law(500, 1.0, 1000.0, 4.0, 8);
    let s = EstimatorSettings::default();
    // |G|² falls 4× over the run: B_simple grows 4×.
    let g2 = |t: u64| m.trace() / (32.0 * (1.0 + 3.0 * t as f64 / STEPS as f64));
    let a = with_tokens(m.run(1, STEPS, g2), 0);
    let b = with_tokens(m.run(2, STEPS / 2, g2), 0);
    let (ra, rb) = (analyze(&a, &s).expect("a"), analyze(&b, &s).expect("b"));
    let c = compare(&ra, &rb, &s);
    assert!(!c.now_windows_overlap, "{:?}", c.now_windows);
    let now = c.now.as_ref().expect("now ratio");
    assert!(
        now.ratio < 0.75,
        "the last windows differ by the growth: {now:?}"
    );
    let end = c.shared_end.as_ref().expect("shared end");
    // B's own last window, and A's over the same steps.
    let w = &rb.summary.now;
    assert_eq!(end.steps_b, [w.first_step, w.last_step]);
    assert_eq!(end.steps_a, end.steps_b);
    let ci = end.ratio.ci.expect("bounded");
    assert!(
        ci[0] <= 1.0 && 1.0 <= ci[1] && !end.ratio.differs,
        "{end:?}"
    );
    assert!(
        (end.ratio.ratio.ln()).abs() < (now.ratio.ln()).abs() / 2.0,
        "{end:?} vs {now:?}"
    );
    // Runs that end together: their last windows overlap.
    let b_full = with_tokens(m.run(3, STEPS, g2), 0);
    let c = compare(&ra, &analyze(&b_full, &s).expect("b full"), &s);
    assert!(c.now_windows_overlap);
}
