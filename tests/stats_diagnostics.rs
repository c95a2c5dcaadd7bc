//! Per-layer breakdown, consecutive-step differencing and the diagnostics with reasons.

use crate::stats_support;

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

/// The report's diagnostic of `kind` (the test fails without one).
fn diagnostic(r: &AnalyzeReport, kind: K) -> &copus::stats::Diagnostic {
    r.summary
        .diagnostics
        .iter()
        .find(|d| d.kind == kind)
        .unwrap_or_else(|| panic!("no {kind:?} among {:?}", kinds(r)))
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
    assert!(!kinds(&r).contains(&K::LayersPartial));

    // No layers at all on the second half: the layer rows cover the first half only, and say
    // so with its steps (a run that stopped reporting them).
    let n = records.len();
    let mut partial = records.clone();
    for rec in partial.iter_mut().skip(n / 2) {
        rec.layers = Default::default();
    }
    let r = analyze(&partial, &EstimatorSettings::default()).expect("analysis");
    let d = r
        .summary
        .diagnostics
        .iter()
        .find(|d| d.kind == K::LayersPartial)
        .expect("layers_partial");
    let last = partial[n / 2 - 1].step;
    assert!(
        d.message
            .contains(&format!("only {} of {n} usable steps", n / 2))
            && d.message
                .contains(&format!("steps {}-{last}", partial[0].step)),
        "{}",
        d.message
    );
    assert!(
        !kinds(&analyze(&records, &EstimatorSettings::default()).expect("a"))
            .contains(&K::LayersPartial)
    );
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
    let jump = find(K::LossScaleJump).unwrap_or_else(|| panic!("{:?}", rep.summary.diagnostics));
    assert_eq!(jump.steps, Some([200, 200]));
    assert!(
        jump.message
            .contains("a loss scale that was not divided out"),
        "{}",
        jump.message
    );
    assert!(find(K::LevelJump).is_none());
    assert!(find(K::LrChange).expect("lr").message.contains("x10"));
    assert_eq!(
        find(K::BatchSizeChange).expect("batch").steps,
        Some([350, 351])
    );
}

/// A jump of both norms by a factor that is not a power of 4 (×3, ×6) cannot be a loss
/// scale's own step (powers of 2 on the gradient): the message says so instead of blaming
/// AMP (an FP32 run on CPU was told "an AMP loss scale that was not divided out?").
#[test]
fn a_jump_that_is_not_a_power_of_four_is_not_blamed_on_amp() {
    let m = Model::power_law(100, 1.0, 100.0, 2.0, 4);
    for factor in [6.0, 9.5] {
        let mut records = m.run(3, 400, |_| 1.0);
        for r in &mut records[200..] {
            r.sq_small *= factor;
            r.sq_big *= factor;
        }
        let rep = analyze(&records, &EstimatorSettings::default()).expect("analysis");
        let find = |k| rep.summary.diagnostics.iter().find(|d| d.kind == k);
        // Its own kind, whose advice is not the loss scale's (an SGD run without AMP was told
        // to divide its norms by the loss scale squared), and no verdict reason.
        assert!(find(K::LossScaleJump).is_none(), "x{factor}");
        let jump = find(K::LevelJump).expect("a jump");
        assert!(
            !jump.message.contains("AMP loss scale")
                && jump.message.contains("no loss scale's step"),
            "x{factor}: {}",
            jump.message
        );
        assert_eq!(jump.severity, copus::stats::Severity::Info);
        assert!(
            rep.summary
                .reasons
                .iter()
                .all(|r| !r.action.contains("loss scale")),
            "x{factor}: {:?}",
            rep.summary.reasons
        );
    }
}

/// Norms that swing ×10 from step to step around a steady level (plain SGD at a high
/// learning rate) cross ×3 between five-step medians by chance: no jump is reported, of either
/// kind (a 2-process SGD run read 14, one of them blamed on a loss scale it did not have).
/// The same series with a steady ×4 step in it is still a loss-scale jump.
#[test]
fn norms_that_swing_from_step_to_step_are_no_level_jumps() {
    let mut rng = SmallRng::seed_from_u64(58);
    let swing: Vec<f64> = (0..300)
        .map(|_| {
            let z: f64 = StandardNormal.sample(&mut rng);
            (1.2 * z).exp()
        })
        .collect();
    let records: Vec<StepStats> = swing
        .iter()
        .enumerate()
        .map(|(i, f)| StepStats::new(i as u64, 2.0, 8.0, 0.5 * f, 0.2 * f))
        .collect();
    let r = analyze(&records, &EstimatorSettings::default()).expect("analysis");
    assert!(
        !kinds(&r).contains(&K::LossScaleJump) && !kinds(&r).contains(&K::LevelJump),
        "{:?}",
        r.summary.diagnostics
    );
    // A steady level (±10 %) that a loss scale moves ×4 at step 150.
    let steady: Vec<StepStats> = swing
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let level = if i < 150 { 1.0 } else { 4.0 } * f.powf(0.08);
            StepStats::new(i as u64, 2.0, 8.0, 0.5 * level, 0.2 * level)
        })
        .collect();
    let r = analyze(&steady, &EstimatorSettings::default()).expect("analysis");
    assert_eq!(diagnostic(&r, K::LossScaleJump).steps, Some([150, 150]));
    // A loss scale leaves the loss where it was: with the loss flat the ×4 stays a loss
    // scale's; with the loss jumping ×1.5 at the same step (a training spike, ×16 on a run
    // without AMP was told to divide by the loss scale) it is the run's own level jump.
    let with_loss = |spike: f64| -> Vec<StepStats> {
        steady
            .iter()
            .map(|r| StepStats {
                loss: Some(if r.step < 150 { 3.0 } else { 3.0 * spike }),
                ..r.clone()
            })
            .collect()
    };
    let r = analyze(&with_loss(1.0), &EstimatorSettings::default()).expect("analysis");
    assert_eq!(diagnostic(&r, K::LossScaleJump).steps, Some([150, 150]));
    let r = analyze(&with_loss(1.5), &EstimatorSettings::default()).expect("analysis");
    assert!(!kinds(&r).contains(&K::LossScaleJump), "{:?}", kinds(&r));
    let jump = diagnostic(&r, K::LevelJump);
    assert!(
        jump.message.contains("the loss moved x1.50"),
        "{}",
        jump.message
    );
    // A spike of one step whose loss is back the next (the five-step median moved 9 %, inside
    // a loose bound) is a move of the loss all the same.
    let spike: Vec<StepStats> = with_loss(1.0)
        .into_iter()
        .map(|r| StepStats {
            loss: Some(if r.step == 151 { 4.5 } else { 3.0 }),
            ..r
        })
        .collect();
    let r = analyze(&spike, &EstimatorSettings::default()).expect("analysis");
    assert!(!kinds(&r).contains(&K::LossScaleJump), "{:?}", kinds(&r));
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

/// A big-batch norm written as 0 (a producer with no value for it) is named as such, located,
/// and given as the reason for the lost signal, not "record larger batches"; one zero in a
/// healthy run is a warning at that step.
#[test]
fn zero_norms_are_named_as_a_producer_fault() {
    let m = Model::power_law(100, 1.0, 100.0, 2.0, 4);
    let zeroed: Vec<StepStats> = m
        .run(9, 200, |_| 1.0)
        .into_iter()
        .map(|mut r| {
            r.sq_big = 0.0;
            r
        })
        .collect();
    let r = analyze(&zeroed, &EstimatorSettings::default()).expect("analysis");
    let d = diagnostic(&r, K::ZeroNorms);
    assert!(
        d.message.contains("sq_big is exactly 0 on 200 of 200"),
        "{}",
        d.message
    );
    assert_eq!(d.steps, Some([0, 199]));
    assert_eq!(r.summary.verdict, Verdict::Unreliable);
    assert_eq!(r.summary.reasons[0].kind, K::ZeroNorms);
    assert!(!r.summary.reasons.iter().any(|x| x.kind == K::NonPositiveG2));

    let mut one = m.run(9, 200, |_| 1.0);
    one[57].sq_small = 0.0;
    let r = analyze(&one, &EstimatorSettings::default()).expect("analysis");
    let d = diagnostic(&r, K::ZeroNorms);
    assert!(
        d.message.contains("sq_small is exactly 0 on 1 of 200"),
        "{}",
        d.message
    );
    assert_eq!(d.at, vec![[57, 57]]);
    assert_ne!(r.summary.verdict, Verdict::Stable);
    // None in the run it was made from.
    let clean = analyze(&m.run(9, 200, |_| 1.0), &EstimatorSettings::default()).expect("analysis");
    assert!(!kinds(&clean).contains(&K::ZeroNorms));
    assert!(!kinds(&clean).contains(&K::ConstantNorms));
}

/// The same norms at every step (one value written again) give a zero-width interval that
/// means nothing: unreliable, not "stable"; one step apart is enough to lift it.
#[test]
fn constant_norms_are_not_called_stable() {
    let records: Vec<StepStats> = (0..300u64)
        .map(|s| StepStats::new(s, 8.0, 64.0, 2.0, 0.5))
        .collect();
    let r = analyze(&records, &EstimatorSettings::default()).expect("analysis");
    assert!(kinds(&r).contains(&K::ConstantNorms));
    assert_eq!(r.summary.verdict, Verdict::Unreliable);
    assert!(r.summary.reasons.iter().any(|x| x.kind == K::ConstantNorms));
    let mut varied = records.clone();
    varied[150].sq_small = 2.1;
    let r = analyze(&varied, &EstimatorSettings::default()).expect("analysis");
    assert!(!kinds(&r).contains(&K::ConstantNorms));
}

/// One norm written in both fields (sq_small == sq_big on two-batch steps) measures no noise:
/// B_simple 0 is not an estimate. Named, and unreliable when it holds everywhere; a few such
/// steps are a warning at them.
#[test]
fn equal_norms_are_named_as_one_norm_written_twice() {
    let records: Vec<StepStats> = (0..100u64)
        .map(|s| {
            let x = 1.0 + s as f64 * 0.01;
            StepStats::new(s, 8.0, 64.0, x, x)
        })
        .collect();
    let r = analyze(&records, &EstimatorSettings::default()).expect("analysis");
    assert!(kinds(&r).contains(&K::EqualNorms), "{:?}", kinds(&r));
    assert_eq!(r.summary.verdict, Verdict::Unreliable);
    assert!(r.summary.reasons.iter().any(|x| x.kind == K::EqualNorms));
    let m = Model::power_law(100, 1.0, 100.0, 2.0, 4);
    let mut some = m.run(9, 200, |_| 1.0);
    some[10].sq_small = some[10].sq_big;
    let r = analyze(&some, &EstimatorSettings::default()).expect("analysis");
    let d = diagnostic(&r, K::EqualNorms);
    assert!(d.message.contains("on 1 of 200"), "{}", d.message);
    assert_eq!(d.at, vec![[10, 10]]);
    // A warning (noisy), not a run without noise (unreliable).
    assert_eq!(r.summary.verdict, Verdict::Noisy);
}

/// Small-batch gradients that are one gradient summed in another order (a dump whose files
/// are copies, or were written after the all-reduce) give sq_small and sq_big equal to
/// rounding, and a run-average tr(Sigma) a hair below zero: named as one gradient, not as
/// swapped fields; a genuine noise a millionth of |G|^2 is far below any real run's.
#[test]
fn norms_equal_to_rounding_are_named_as_one_gradient_not_a_swap() {
    let records: Vec<StepStats> = (0..100u64)
        .map(|s| {
            let x = 1.0 + s as f64 * 0.01;
            let wobble = if s % 2 == 0 { 1.0 - 4e-16 } else { 1.0 - 2e-16 };
            StepStats::new(s, 8.0, 64.0, x * wobble, x)
        })
        .collect();
    let r = analyze(&records, &EstimatorSettings::default()).expect("analysis");
    assert!(r.summary.trace_sigma < 0.0, "{}", r.summary.trace_sigma);
    assert!(kinds(&r).contains(&K::EqualNorms), "{:?}", kinds(&r));
    let d = diagnostic(&r, K::EqualNorms);
    assert!(
        d.message.contains("on 100 of 100") && d.message.contains("gradient dump"),
        "{}",
        d.message
    );
    assert_eq!(r.summary.verdict, Verdict::Unreliable);
    let reasons: Vec<K> = r.summary.reasons.iter().map(|x| x.kind).collect();
    assert!(reasons.contains(&K::EqualNorms), "{reasons:?}");
    assert!(!reasons.contains(&K::NegativeTrace), "{reasons:?}");
    // A real (if small) noise is not one gradient.
    let noisy: Vec<StepStats> = (0..100u64)
        .map(|s| {
            let x = 1.0 + s as f64 * 0.01;
            StepStats::new(s, 8.0, 64.0, x * (1.0 + 1e-4), x)
        })
        .collect();
    let r = analyze(&noisy, &EstimatorSettings::default()).expect("analysis");
    assert!(!kinds(&r).contains(&K::EqualNorms), "{:?}", kinds(&r));
}

/// Cumulative tokens that go down (a counter reset) or are negative are named where they
/// happen (info: the estimate stands, the token axis reads them as written); increasing ones
/// are not.
#[test]
fn tokens_that_go_down_are_named() {
    let m = Model::power_law(100, 1.0, 100.0, 2.0, 4);
    let mut records = m.run(9, 200, |_| 1.0);
    for (i, r) in records.iter_mut().enumerate() {
        r.tokens = Some(((i % 100) as f64 + 1.0) * 512.0);
    }
    let r = analyze(&records, &EstimatorSettings::default()).expect("analysis");
    let d = diagnostic(&r, K::TokensNotIncreasing);
    assert_eq!(d.at, vec![[100, 100]], "{}", d.message);
    for (i, r) in records.iter_mut().enumerate() {
        r.tokens = Some((i as f64 + 1.0) * 512.0);
    }
    let r = analyze(&records, &EstimatorSettings::default()).expect("analysis");
    assert!(!kinds(&r).contains(&K::TokensNotIncreasing));
    // A per-step count written for the total (2048 a step, 4096 once the batch doubles)
    // never goes down, but it does not grow either: every step but the first and the change.
    for (i, r) in records.iter_mut().enumerate() {
        r.tokens = Some(if i < 64 { 2048.0 } else { 4096.0 });
    }
    let r = analyze(&records, &EstimatorSettings::default()).expect("analysis");
    let d = diagnostic(&r, K::TokensNotIncreasing);
    assert!(
        d.message.contains("do not grow") && d.message.contains("198 step(s), first at step 1"),
        "{}",
        d.message
    );
}

/// A producer's `skipped: "non-finite ..."` (what the dump reader and the trainer write for a
/// NaN gradient) is the same event as a NaN in a stats line: counted as non-finite, located,
/// and rated by how many steps it costs.
#[test]
fn producer_flagged_nan_counts_as_non_finite() {
    let m = Model::power_law(100, 1.0, 100.0, 2.0, 4);
    let mut records = m.run(12, 1000, |_| 1.0);
    records[417].skipped = Some("non-finite: 3 NaN/Inf values in tensor w of step_417".into());
    records[600].skipped = Some("loss-scale overflow".into());
    records[800].skipped = Some("comm hook ran 2 times in one step; non-finite: loss".into());
    let r = analyze(&records, &EstimatorSettings::default()).expect("analysis");
    assert_eq!(r.summary.non_finite_skipped, 2);
    let nf = r
        .summary
        .diagnostics
        .iter()
        .find(|d| d.kind == K::NonFiniteSkipped)
        .expect("non-finite diagnostic");
    assert_eq!(nf.steps, Some([417, 800]));
    assert_eq!(nf.at, vec![[417, 417], [800, 800]]);
    assert_eq!(
        nf.severity,
        copus::stats::Severity::Info,
        "two steps in 1000"
    );
    let skipped = r
        .summary
        .diagnostics
        .iter()
        .find(|d| d.kind == K::ProducerSkipped)
        .expect("producer skipped");
    assert_eq!(skipped.steps, Some([600, 600]));

    // Many NaN steps: a warning, and the verdict says so.
    for r in records.iter_mut().skip(100).step_by(50) {
        r.skipped = Some("non-finite gradient or loss: update skipped".into());
    }
    let r = analyze(&records, &EstimatorSettings::default()).expect("analysis");
    let nf = r
        .summary
        .diagnostics
        .iter()
        .find(|d| d.kind == K::NonFiniteSkipped)
        .expect("non-finite");
    assert_eq!(nf.severity, copus::stats::Severity::Warning);
    // Steps 100, 150, …, 950 and 417.
    assert_eq!(nf.at.len(), 19, "each NaN step located: {:?}", nf.at);
    assert!(
        r.summary
            .reasons
            .iter()
            .any(|x| x.kind == K::NonFiniteSkipped)
    );
}

/// One malformed line and one NaN do not lower the verdict of a long steady run; the verdict
/// carries its meaning and no reasons.
#[test]
fn a_single_bad_line_does_not_make_a_run_noisy() {
    use copus::stats::InputCounts;
    let m = Model::power_law(100, 1.0, 100.0, 2.0, 8);
    let mut records = m.run(13, 2000, |_| 4.0);
    records[700].sq_small = f64::NAN;
    let counts = InputCounts {
        malformed: 1,
        ..InputCounts::default()
    };
    let r = analyze_counted(&records, &counts);
    assert_eq!(r.summary.non_finite_skipped, 1);
    assert_eq!(r.summary.malformed_lines, 1);
    assert!(kinds(&r).contains(&K::MalformedLines) && kinds(&r).contains(&K::NonFiniteSkipped));
    assert_eq!(
        r.summary.verdict,
        Verdict::Stable,
        "{:?}",
        r.summary.reasons
    );
    assert!(r.summary.reasons.is_empty());
    assert!(r.summary.verdict_meaning.starts_with("stable"));

    // 30 malformed lines in 2000 (1.5%): a warning and a reason.
    let counts = InputCounts {
        malformed: 30,
        ..InputCounts::default()
    };
    let r = analyze_counted(&records, &counts);
    assert_eq!(r.summary.verdict, Verdict::Noisy);
    let reason = r
        .summary
        .reasons
        .iter()
        .find(|x| x.kind == K::MalformedLines)
        .expect("reason");
    assert!(reason.action.contains("protocol v1"));
}

/// Per-layer trajectories use the whole model's smoother and interval construction: a layer
/// holding every dimension gives exactly the whole-model numbers, per step and run-wide, on a
/// growing run (where an interval that is not detrended would be far wider).
#[test]
fn per_layer_intervals_are_built_like_the_whole_model() {
    use copus::stats::SmootherKind;
    let mut m = Model::power_law(200, 1.0, 1000.0, 4.0, 8);
    m.layer_split = Some(200);
    let records = m.run(14, 1500, |t| {
        m.trace() / (16.0 * 8.0f64.powf(t as f64 / 1499.0))
    });
    for smoother in [SmootherKind::TwoSided, SmootherKind::OneSided] {
        let s = EstimatorSettings {
            smoother,
            ..EstimatorSettings::default()
        };
        let r = analyze(&records, &s).expect("analysis");
        let top = r
            .summary
            .layers
            .iter()
            .find(|l| l.name == "top")
            .expect("top");
        let same = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(1.0);
        assert!(same(
            top.b_simple.expect("b"),
            r.summary.b_simple.expect("b")
        ));
        assert!(same(top.ci[0], r.summary.ci[0]) && same(top.ci[1], r.summary.ci[1]));
        for row in &r.steps {
            let p = row.layers.get("top").expect("layer point");
            match (p.b_simple, row.b_simple) {
                (Some(a), Some(b)) => assert!(same(a, b), "step {}: {a} vs {b}", row.step),
                (a, b) => assert_eq!(a.is_some(), b.is_some()),
            }
            assert!(same(p.ci[0], row.ci[0]), "step {}", row.step);
            // The empty layer has no noise scale.
            assert_eq!(row.layers.get("rest").and_then(|p| p.b_simple), None);
        }
    }
}

/// Records of a two-layer model: each layer's tr(Σ) and |G|², with multiplicative noise.
fn two_layer_records(top: (f64, f64), rest: (f64, f64), n: u64) -> Vec<StepStats> {
    let mut rng = SmallRng::seed_from_u64(5);
    let (bs, bb) = (8.0, 64.0);
    (0..n)
        .map(|s| {
            let mut noisy = |t: f64, g: f64| {
                let e: f64 = StandardNormal.sample(&mut rng);
                let f: f64 = StandardNormal.sample(&mut rng);
                (
                    (g + t / bs) * (1.0 + 0.05 * e),
                    (g + t / bb) * (1.0 + 0.05 * f),
                )
            };
            let (ts, tb) = noisy(top.0, top.1);
            let (rs, rb) = noisy(rest.0, rest.1);
            let line = format!(
                r#"{{"v":1,"step":{s},"b_small":{bs},"b_big":{bb},"sq_small":{},"sq_big":{},"layers":{{"top":{{"sq_small":{ts},"sq_big":{tb}}},"rest":{{"sq_small":{rs},"sq_big":{rb}}}}}}}"#,
                ts + rs,
                tb + rb
            );
            copus::stats::parse_line(&line).expect("record")
        })
        .collect()
}

#[test]
fn a_dominating_layer_is_a_warning_only_when_it_misdescribes_the_rest() {
    let severity = |top, rest| {
        let r = analyze(
            &two_layer_records(top, rest, 400),
            &EstimatorSettings::default(),
        )
        .expect("analysis");
        r.summary
            .diagnostics
            .iter()
            .find(|d| d.kind == K::DominatingLayer)
            .map(|d| d.severity)
    };
    use copus::stats::Severity;
    // The B_simple values are written as the layer table writes them, not as "8.374e2".
    let r = analyze(
        &two_layer_records((80.0, 1.333), (20.0, 0.4), 400),
        &EstimatorSettings::default(),
    )
    .expect("analysis");
    let d = r
        .summary
        .diagnostics
        .iter()
        .find(|d| d.kind == K::DominatingLayer)
        .expect("a dominating layer");
    assert!(
        !d.message.contains("e1") && !d.message.contains("e2"),
        "{}",
        d.message
    );
    // (Two layers: "dominating" needs more than 75 % of tr(Σ).)
    // 80 % of tr(Σ), B_simple 60 vs the rest's 50: the whole-model value describes both.
    assert_eq!(severity((80.0, 1.333), (20.0, 0.4)), Some(Severity::Info));
    // 80 % of tr(Σ), B_simple 400 vs the rest's 50: the whole-model value is this layer's.
    assert_eq!(severity((80.0, 0.2), (20.0, 0.4)), Some(Severity::Warning));
    // An even split dominates nothing.
    assert_eq!(severity((50.0, 1.0), (50.0, 1.0)), None);
}

/// The analysis of `records` with `counts` lines rejected before.
fn analyze_counted(
    records: &[copus::stats::StepStats],
    counts: &copus::stats::InputCounts,
) -> copus::stats::AnalyzeReport {
    let settings = EstimatorSettings::default();
    let options = copus::stats::AnalyzeOptions::from(&settings).with_counts(counts.clone());
    copus::stats::analyze(records, options).expect("a")
}

/// A run logged every 100 steps is analysed as the same run logged every step: the default
/// kernel spans as many records (its σ in steps scales with the spacing), so every interval,
/// the drift and the smoothed trajectory are the same. Before, the kernel stayed at
/// records/40 *steps*, narrower than the gap between records: nothing was smoothed and every
/// interval collapsed to its point.
#[test]
fn the_default_kernel_follows_the_spacing_of_the_logged_steps() {
    let m = Model::power_law(100, 1.0, 100.0, 2.0, 4);
    let dense = m.run(11, 600, |t| 40.0 / (1.0 + t as f64 / 100.0));
    for stride in [7u64, 100] {
        let sparse: Vec<StepStats> = dense
            .iter()
            .map(|r| StepStats {
                step: r.step * stride,
                ..r.clone()
            })
            .collect();
        let a = analyze(&dense, &EstimatorSettings::default()).expect("dense");
        let b = analyze(&sparse, &EstimatorSettings::default()).expect("sparse");
        let close = |x: f64, y: f64| x == y || (x - y).abs() <= 1e-9 * x.abs().max(1.0);
        assert!(
            (b.summary.bandwidth_steps / a.summary.bandwidth_steps - stride as f64).abs() < 1e-9
        );
        for (x, y) in [
            (a.summary.ci, b.summary.ci),
            (a.summary.now.ci, b.summary.now.ci),
        ] {
            assert!(
                close(x[0], y[0]) && close(x[1], y[1]),
                "{x:?} vs {y:?} at stride {stride}"
            );
        }
        assert!(a.summary.ci[1] > a.summary.ci[0] * 1.01, "a real interval");
        let (da, db) = (
            a.summary.drift.expect("drift"),
            b.summary.drift.expect("drift"),
        );
        assert!(close(da.ci[0], db.ci[0]) && close(da.ci[1], db.ci[1]));
        // A kernel set narrower than the gap between records is refused, not run into
        // zero-width intervals.
        let narrow = EstimatorSettings {
            bandwidth_steps: Some(stride as f64 / 2.0),
            ..EstimatorSettings::default()
        };
        let e = analyze(&sparse, &narrow).expect_err("narrower than the spacing");
        assert!(e.to_string().contains("narrower than the usual gap"), "{e}");
        for (ra, rb) in a.steps.iter().zip(&b.steps) {
            assert_eq!(rb.step, ra.step * stride);
            let (pa, pb) = (ra.b_simple.unwrap_or(0.0), rb.b_simple.unwrap_or(0.0));
            assert!(close(pa, pb), "step {}: {pa} vs {pb}", ra.step);
            assert!(close(ra.ci[0], rb.ci[0]), "step {}", ra.step);
        }
    }
}

/// Drift not measured names the window without an estimate: only the last window's |G|² is
/// lost here (it said "the first or the last window" whichever it was).
#[test]
fn drift_not_measured_names_the_window_without_an_estimate() {
    let m = Model::power_law(100, 1.0, 10.0, 16.0, 4);
    let mut records = m.run(3, 2000, |_| 1.0);
    let n = records.len();
    let s0 = EstimatorSettings {
        window_steps: Some(n / 10),
        ..EstimatorSettings::default()
    };
    // Measured on the run as it is.
    assert!(analyze(&records, &s0).expect("a").summary.drift.is_some());
    for r in records.iter_mut().skip(n - n / 10) {
        // b_big·sq_big < b_small·sq_small: |G|² negative, tr(Σ) still positive.
        r.sq_big = 0.5 * r.sq_small * r.b_small / r.b_big;
        r.layers = Default::default();
    }
    let r = analyze(&records, &s0).expect("analysis");
    assert!(r.summary.drift.is_none());
    assert_eq!(
        r.summary.drift_not_measured,
        Some("no positive estimate in the last window")
    );
}

/// A run whose B_simple drifts up and whose last window has no upper bound (the built-in
/// trainer's cosine-schedule run of 1,500 steps): the verdict's reasons agree on what to read
/// (the `now` reason said "read the run-wide value" beside the drift reason's "not the
/// run-wide value").
#[test]
fn an_unbounded_now_in_a_drifting_run_does_not_point_at_the_run_wide_value() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = dir.path().join("run.ndjson");
    let copus = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_copus"))
            .args(args)
            .output()
            .expect("runs copus");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    };
    let path = run.to_str().expect("utf-8");
    copus(&[
        "demo-train",
        "--steps",
        "1500",
        "--lr-schedule",
        "cosine",
        "--out",
        path,
    ]);
    let v: serde_json::Value =
        serde_json::from_slice(&copus(&["analyze", path, "--json", "--summary-only"]))
            .expect("json");
    let s = &v["summary"];
    assert_eq!(s["drift"]["significant"], true, "{s}");
    assert!(
        s["now"]["ci"][1].is_null(),
        "the last window is bounded: {s}"
    );
    let reasons: Vec<&str> = s["reasons"]
        .as_array()
        .expect("reasons")
        .iter()
        .filter_map(|r| r["message"].as_str())
        .collect();
    let now = reasons
        .iter()
        .find(|m| m.contains("the `now` value"))
        .unwrap_or_else(|| panic!("no unbounded `now` among {reasons:?}"));
    assert!(!now.contains("read the run-wide value"), "{now}");
    assert!(now.contains("read the trajectory"), "{now}");
    // Nor does the drift's action send the reader to that unbounded `now`.
    let drift = s["reasons"]
        .as_array()
        .expect("reasons")
        .iter()
        .find(|r| r["kind"] == "drift")
        .unwrap_or_else(|| panic!("no drift reason: {s}"));
    let action = drift["action"].as_str().expect("action");
    assert!(!action.contains("read the `now` value"), "{action}");
    assert!(action.contains("read the trajectory"), "{action}");
}

/// A short noisy run's wide interval is said with the digits the interval supports (it read
/// "[68.9015, 308.4454]" beside "[68.90, 308.4]" elsewhere).
#[test]
fn a_wide_interval_reason_writes_four_significant_digits() {
    let m = Model::power_law(100, 1.0, 100.0, 2.0, 4);
    let records = m.run(3, 200, |_| 2.0);
    let r = analyze(&records, &EstimatorSettings::default()).expect("analysis");
    let wide = r
        .summary
        .reasons
        .iter()
        .find(|x| x.kind == K::WideInterval)
        .unwrap_or_else(|| panic!("no wide interval among {:?}", r.summary.reasons));
    let [lo, hi] = r.summary.ci;
    let four = |x: f64| copus::format::significant(x, 4);
    assert!(
        wide.message
            .contains(&format!("[{}, {}]", four(lo), four(hi))),
        "{}",
        wide.message
    );
}
