//! Per-layer breakdown, consecutive-step differencing and the diagnostics with reasons.

mod stats_support;

use copus::stats::{
    AnalyzeReport, DiagnosticKind as K, EstimatorKind, EstimatorSettings, StepStats, Verdict,
    analyze,
};
use rand::SeedableRng;
use rand::rngs::SmallRng;
use rand_distr::{Distribution, StandardNormal};
use stats_support::Model;

fn kinds(r: &AnalyzeReport) -> Vec<K> {
    r.summary.diagnostics.iter().map(|d| d.kind).collect()
}

#[test]
fn layer_shares_and_noise_scales_match_the_truth() {
    let mut m = Model::power_law(300, 1.6, 1000.0, 4.0, 8);
    m.layer_split = Some(10);
    let g2 = m.trace() / 64.0;
    let records = m.run(11, 2000, |_| g2);
    let r = analyze(&records, &EstimatorSettings::default()).expect("analysis");
    let top_trace: f64 = m.lambda[..10].iter().sum();
    let top_share = top_trace / m.trace();
    let top_g2 = g2 * m.g_dir[..10].iter().map(|x| x * x).sum::<f64>();
    let rest_g2 = g2 - top_g2;
    assert!(
        top_share > 0.8,
        "test set-up: top layer should dominate ({top_share})"
    );
    let top = r
        .summary
        .layers
        .iter()
        .find(|l| l.name == "top")
        .expect("top");
    let rest = r
        .summary
        .layers
        .iter()
        .find(|l| l.name == "rest")
        .expect("rest");
    assert!(
        (top.trace_share - top_share).abs() < 0.03,
        "{} vs {top_share}",
        top.trace_share
    );
    assert!((top.trace_share + rest.trace_share - 1.0).abs() < 1e-12);
    let check = |b: Option<f64>, truth: f64| {
        let b = b.expect("bounded");
        assert!(
            (b / truth - 1.0).abs() < 0.15,
            "layer B_simple {b} vs {truth}"
        );
    };
    check(top.b_simple, top_trace / top_g2);
    check(rest.b_simple, (m.trace() - top_trace) / rest_g2);
    assert_eq!(r.summary.layers[0].name, "top", "sorted by share");
    assert!(kinds(&r).contains(&K::DominatingLayer));
    assert!(!kinds(&r).contains(&K::LayersDoNotAddUp));

    // Drop one layer from half the records: the layers no longer add up.
    let mut broken = records.clone();
    for rec in broken.iter_mut().step_by(2) {
        rec.layers.remove("rest");
    }
    let r = analyze(&broken, &EstimatorSettings::default()).expect("analysis");
    assert!(kinds(&r).contains(&K::LayersDoNotAddUp));
}

#[test]
fn run_changes_are_diagnosed() {
    let m = Model::power_law(100, 1.0, 100.0, 2.0, 4);
    let mut records = m.run(3, 400, |_| 1.0);
    assert!(
        !kinds(&analyze(&records, &EstimatorSettings::default()).expect("a"))
            .contains(&K::LossScaleJump)
    );
    // AMP loss scale doubled at step 200 and not divided out: norms x4.
    for r in &mut records[200..] {
        r.sq_small *= 4.0;
        r.sq_big *= 4.0;
    }
    for (i, r) in records.iter_mut().enumerate() {
        r.lr = Some(if i < 300 { 1e-3 } else { 1e-4 });
    }
    records[350].b_big = 16.0;
    let rep = analyze(&records, &EstimatorSettings::default()).expect("analysis");
    let find = |k| {
        rep.summary
            .diagnostics
            .iter()
            .find(|d| d.kind == k)
            .cloned()
    };
    assert_eq!(
        find(K::LossScaleJump).expect("loss scale").steps,
        Some([200, 200])
    );
    assert!(find(K::LrChange).expect("lr").message.contains("x10"));
    assert_eq!(
        find(K::BatchSizeChange).expect("batch").steps,
        Some([350, 351])
    );
}

#[test]
fn few_steps_and_unordered_steps_are_flagged() {
    let m = Model::power_law(100, 1.0, 100.0, 2.0, 4);
    let mut records = m.run(4, 20, |_| 1.0);
    records.swap(3, 4);
    let r = analyze(&records, &EstimatorSettings::default()).expect("analysis");
    assert!(kinds(&r).contains(&K::TooFewSteps));
    assert!(kinds(&r).contains(&K::StepOrder));
    assert_eq!(r.summary.verdict, Verdict::Unreliable);
    assert!(r.steps.windows(2).all(|w| w[0].step < w[1].step));
}

#[test]
fn pure_noise_gives_an_unbounded_interval_not_a_number() {
    let m = Model::power_law(100, 1.0, 100.0, 2.0, 4);
    let records = m.run(8, 300, |_| 0.0);
    let r = analyze(&records, &EstimatorSettings::default()).expect("analysis");
    assert!(r.summary.ci[1].is_infinite());
    assert_eq!(r.summary.verdict, Verdict::Unreliable);
    assert!(kinds(&r).contains(&K::UnboundedInterval));
    let json = serde_json::to_value(&r).expect("json");
    assert!(json["summary"]["ci"][1].is_null());
}

/// Single-gradient records: g_t = G + N(0, Σ/b) drawn in full so ⟨g_t, g_{t−1}⟩ is known.
fn single_gradient_run(seed: u64, steps: u64, b: f64, lambda: &[f64], g: &[f64]) -> Vec<StepStats> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut prev: Option<Vec<f64>> = None;
    (0..steps)
        .map(|t| {
            let cur: Vec<f64> = lambda
                .iter()
                .zip(g)
                .map(|(l, gi)| {
                    let z: f64 = StandardNormal.sample(&mut rng);
                    gi + (l / b).sqrt() * z
                })
                .collect();
            let sq: f64 = cur.iter().map(|x| x * x).sum();
            let mut r = StepStats::new(t, b, b, sq, sq);
            r.dot_prev = prev
                .as_ref()
                .map(|p| p.iter().zip(&cur).map(|(a, c)| a * c).sum());
            prev = Some(cur);
            r
        })
        .collect()
}

#[test]
fn differencing_recovers_a_fixed_gradient_and_is_labelled_biased() {
    let dims = 200;
    let lambda: Vec<f64> = (1..=dims).map(|i| 10.0 / i as f64).collect();
    let trace: f64 = lambda.iter().sum();
    let b_true = 64.0;
    let g: Vec<f64> = vec![(trace / b_true / dims as f64).sqrt(); dims];
    let records = single_gradient_run(21, 3000, 16.0, &lambda, &g);
    let r = analyze(&records, &EstimatorSettings::default()).expect("analysis");
    assert_eq!(r.summary.steps, 2999, "the first step has no predecessor");
    assert_eq!(r.summary.estimator, EstimatorKind::Differencing);
    assert!(kinds(&r).contains(&K::DifferencingBiased));
    assert!(kinds(&r).contains(&K::SingleGradientUnusable));
    let b = r.summary.b_simple.expect("bounded");
    // G does not move here, so the pairing is unbiased in this set-up.
    assert!((b / b_true - 1.0).abs() < 0.15, "{b} vs {b_true}");
}

#[test]
fn swapped_norms_give_a_negative_trace_diagnostic() {
    let m = Model::power_law(100, 1.0, 100.0, 2.0, 4);
    let records: Vec<StepStats> = m
        .run(9, 200, |_| 1.0)
        .into_iter()
        .map(|mut r| {
            std::mem::swap(&mut r.sq_small, &mut r.sq_big);
            r
        })
        .collect();
    let r = analyze(&records, &EstimatorSettings::default()).expect("analysis");
    assert!(kinds(&r).contains(&K::NegativeTrace));
    assert_eq!(r.summary.verdict, Verdict::Unreliable);
}
