//! The built-in trainer learns for real, and its gradient noise scale behaves as McCandlish
//! et al. (2018) predict: B_simple grows as the loss falls.

use copus::stats::StepStats;
use copus::trainer::{Trainer, TrainerConfig};

/// B_simple over a span of steps with the two-batch estimator summed over steps:
/// mean tr Σ / mean |G|² (numerator and denominator accumulated separately).
fn summed_b_simple(records: &[StepStats]) -> f64 {
    let (mut trace, mut g2) = (0.0, 0.0);
    for r in records {
        let (bs, bb) = (r.b_small, r.b_big);
        g2 += (bb * r.sq_big - bs * r.sq_small) / (bb - bs);
        trace += (r.sq_small - r.sq_big) / (1.0 / bs - 1.0 / bb);
    }
    trace / g2
}

fn mean_loss(records: &[StepStats]) -> f64 {
    records.iter().map(|r| r.loss.expect("loss")).sum::<f64>() / records.len() as f64
}

#[test]
fn loss_falls_and_noise_scale_grows_over_a_real_run() {
    let mut trainer = Trainer::new(TrainerConfig::default()).expect("trainer");
    let records: Vec<StepStats> = (0..300).map(|_| trainer.step()).collect();
    assert!(records.iter().all(|r| r.skipped.is_none()));
    let third = records.len() / 3;
    let (first, last) = (&records[..third], &records[records.len() - third..]);
    let ln_vocab = (trainer.shape().vocab as f64).ln();
    let (l0, l1) = (mean_loss(first), mean_loss(last));
    let (b0, b1) = (summed_b_simple(first), summed_b_simple(last));
    eprintln!(
        "mean loss {l0:.3} -> {l1:.3} nats (ln V = {ln_vocab:.3}); B_simple {b0:.0} -> {b1:.0} samples"
    );
    let first_loss = records[0].loss.expect("loss");
    assert!(
        (first_loss - ln_vocab).abs() < 0.3,
        "first loss {first_loss} should be near ln V"
    );
    assert!(l1 < l0 - 0.4, "the loss must fall: {l0} -> {l1}");
    assert!(
        b0 > 0.0 && b1 > 1.3 * b0,
        "B_simple must grow as the loss falls: {b0} -> {b1}"
    );
}
