//! The one-sided (live) smoothers updated one record at a time: the same recursions as
//! [`one_sided`](crate::smoothing::one_sided) and
//! [`one_sided_lag_corrected`](crate::smoothing::one_sided_lag_corrected), kept as state so a
//! new step costs O(1) instead of a pass over the run, and [`LiveEstimator`], which turns
//! records as they arrive (possibly out of step order) into the smoothed point at each step,
//! equal to what the batch analysis gives on the same records.
//!
//! Out-of-order records are placed by replaying the recursion from the step before them, over
//! a bounded buffer of the newest records ([`LiveEstimator::new`]'s `replay`); a record older
//! than that buffer is left out of the live estimate (counted in [`LiveEstimator::late`]; the
//! periodic full analysis still sees it).

use crate::analysis::settings::EstimatorSettings;
use crate::analysis::summarize::detrend;
use crate::estimate::interval::{fieller, inflation, t_for};
use crate::estimate::per_step::{EstimatorKind, estimate_record};
use crate::ingest::protocol::validate;
use crate::record::step::StepStats;
use crate::report::StepRow;
use crate::smoothing::Moments;
pub use crate::smoothing::{LagCorrectedEma, OneSidedEma, Theta, theta};
use std::collections::VecDeque;

/// The smoothed estimate at one step, before the autocorrelation inflation of its variance.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LivePoint {
    /// Optimizer step.
    pub step: u64,
    /// Samples in the step's big batch.
    pub b_big: f64,
    /// Cumulative tokens of the record, if it carries them.
    pub tokens: Option<f64>,
    /// Loss of the record (nats), if it carries one.
    pub loss: Option<f64>,
    /// Which estimator produced the step's numbers.
    pub kind: EstimatorKind,
    /// Smoothed tr(Σ) (units of the squared norms).
    pub trace: f64,
    /// Smoothed |G|².
    pub g2: f64,
    /// Variances and covariance (v_tt, v_tg, v_gg) of the two smoothed means, not yet
    /// multiplied by the inflation factor φ.
    pub cov: (f64, f64, f64),
    /// Effective number of steps behind the smoothed means ([`Moments::effective_n`]),
    /// before the inflation φ divides it.
    pub effective_n: f64,
}

impl LivePoint {
    fn new(r: &Slim, kind: EstimatorKind, m: &Moments) -> Self {
        Self {
            step: r.step,
            b_big: r.b_big,
            tokens: r.tokens,
            loss: r.loss,
            kind,
            trace: m.mean_t(),
            g2: m.mean_g(),
            cov: m.mean_cov(),
            effective_n: m.effective_n(),
        }
    }

    /// Smoothed B_simple (samples); `None` when the smoothed |G|² is not positive.
    pub fn b_simple(&self) -> Option<f64> {
        (self.g2 > 0.0).then(|| self.trace / self.g2)
    }

    /// Fieller interval of B_simple with the variance inflated by `phi` at `confidence`
    /// (Student's t on the effective steps left after the inflation, as the batch analysis
    /// takes it: [`t_for`]).
    pub fn ci(&self, phi: f64, confidence: f64) -> [f64; 2] {
        let (a, b, c) = self.cov;
        fieller(
            self.trace,
            self.g2,
            (a * phi, b * phi, c * phi),
            t_for(confidence, self.effective_n / phi),
        )
    }
}

/// What [`LiveEstimator::push`] did with a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Newest step: at most one point was produced.
    Appended,
    /// Placed before newer steps: the points from `from_step` on were recomputed (the
    /// caller replaces what it holds from that step on).
    Replayed {
        /// First step whose point changed.
        from_step: u64,
    },
    /// Older than the replay buffer: left out of the live estimate.
    Late,
    /// Flagged skipped by the producer, or not a valid record: not part of the estimate.
    Excluded,
}

/// The fields of a record the live estimate needs.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Slim {
    step: u64,
    b_small: f64,
    b_big: f64,
    sq_small: f64,
    sq_big: f64,
    dot_prev: Option<f64>,
    tokens: Option<f64>,
    loss: Option<f64>,
}

impl Slim {
    fn of(r: &StepStats) -> Self {
        Self {
            step: r.step,
            b_small: r.b_small,
            b_big: r.b_big,
            sq_small: r.sq_small,
            sq_big: r.sq_big,
            dot_prev: r.dot_prev,
            tokens: r.tokens,
            loss: r.loss,
        }
    }

    fn record(&self) -> StepStats {
        let mut r = StepStats::new(
            self.step,
            self.b_small,
            self.b_big,
            self.sq_small,
            self.sq_big,
        );
        r.dot_prev = self.dot_prev;
        r
    }
}

#[derive(Debug, Clone)]
struct Entry {
    rec: Slim,
    /// The state after this record (unchanged from the previous one when not estimable).
    state: LagCorrectedEma,
    /// Whether this record gave an estimate.
    estimable: bool,
}

/// Records in, smoothed points out, one record at a time: the one-sided lag-corrected
/// smoother of the live view over the records received so far, in step order.
///
/// Equal to [`crate::analysis`] with [`super::SmootherKind::OneSided`] on the same records
/// (point estimate, smoothed sums and, given the same φ, interval), as long as no record
/// arrives more than `replay` records behind the newest.
#[derive(Debug, Clone)]
pub struct LiveEstimator {
    decay: f64,
    reference_batch: Option<f64>,
    replay: usize,
    b0: Option<f64>,
    /// Step of the record that set `b0` (the first estimable one), when not given.
    b0_step: Option<u64>,
    /// State and record before `entries[0]`.
    base: LagCorrectedEma,
    base_prev: Option<Slim>,
    /// Highest step dropped off the front of `entries` (records at or before it cannot be
    /// placed any more).
    evicted_up_to: Option<u64>,
    entries: VecDeque<Entry>,
    late: u64,
    excluded: u64,
    /// θ of the last batch size, for the reference batch it was computed with.
    theta: Option<Theta>,
}

impl LiveEstimator {
    /// An empty estimator with the live view's settings (`ema_decay`, `reference_batch`),
    /// able to place a record up to `replay` records behind the newest (at least 1).
    pub fn new(settings: &EstimatorSettings, replay: usize) -> Self {
        Self {
            decay: settings.ema_decay,
            reference_batch: settings.reference_batch,
            replay: replay.max(1),
            b0: settings.reference_batch,
            b0_step: None,
            base: LagCorrectedEma::default(),
            base_prev: None,
            evicted_up_to: None,
            entries: VecDeque::new(),
            late: 0,
            excluded: 0,
            theta: None,
        }
    }

    /// Records left out because they arrived more than `replay` records late.
    pub fn late(&self) -> u64 {
        self.late
    }

    /// Records left out as the batch analysis leaves them out (flagged skipped, invalid).
    pub fn excluded(&self) -> u64 {
        self.excluded
    }

    /// Add record `r`; the points it creates or changes are appended to `out` in step order
    /// (one per estimable record from the placement on).
    pub fn push(&mut self, r: &StepStats, out: &mut Vec<LivePoint>) -> Placement {
        if r.skipped.is_some() || validate(r).is_err() {
            self.excluded += 1;
            return Placement::Excluded;
        }
        let rec = Slim::of(r);
        if self.evicted_up_to.is_some_and(|e| rec.step < e) {
            self.late += 1;
            return Placement::Late;
        }
        let pos = self.entries.partition_point(|e| e.rec.step <= rec.step);
        let appended = pos == self.entries.len();
        self.entries.insert(
            pos,
            Entry {
                rec,
                state: LagCorrectedEma::default(),
                estimable: false,
            },
        );
        // Replay from the first record of the same step (stable order: the new one goes
        // after them), so the caller can replace its points from that step on.
        let from = if appended {
            pos
        } else {
            self.entries.partition_point(|e| e.rec.step < rec.step)
        };
        self.replay_from(from, out);
        self.evict();
        if appended {
            Placement::Appended
        } else {
            Placement::Replayed {
                from_step: rec.step,
            }
        }
    }

    /// Forget the records from `step` on (a restarted run supersedes them). Returns false
    /// when some of them had already left the replay buffer: the estimator was reset and the
    /// caller should treat what follows as a new run.
    pub fn truncate_from(&mut self, step: u64) -> bool {
        if self.evicted_up_to.is_some_and(|e| e >= step) {
            *self = Self::new(
                &EstimatorSettings {
                    ema_decay: self.decay,
                    reference_batch: self.reference_batch,
                    ..EstimatorSettings::default()
                },
                self.replay,
            );
            return false;
        }
        let keep = self.entries.partition_point(|e| e.rec.step < step);
        self.entries.truncate(keep);
        if self.b0_step.is_some_and(|s| s >= step) {
            self.b0 = self.reference_batch;
            self.b0_step = None;
        }
        true
    }

    /// Recompute estimates and states from `entries[from]` on, emitting the estimable points.
    fn replay_from(&mut self, from: usize, out: &mut Vec<LivePoint>) {
        // Every record before `from` keeps its estimate; when none of them was estimable the
        // reference batch (the first estimable record's b_big) is decided again.
        if self.reference_batch.is_none()
            && let Some(first) = self.entries.get(from)
            && self.b0_step.is_some_and(|s| s >= first.rec.step)
        {
            self.b0 = None;
            self.b0_step = None;
        }
        let (mut state, mut prev) = match from.checked_sub(1) {
            Some(p) => (self.entries[p].state, Some(self.entries[p].rec)),
            None => (self.base, self.base_prev),
        };
        for i in from..self.entries.len() {
            let rec = self.entries[i].rec;
            let prev_rec = prev.map(|p| p.record());
            let est = estimate_record(0, &rec.record(), prev_rec.as_ref()).ok();
            if let Some(e) = &est {
                let b0 = match self.b0 {
                    Some(b0) => b0,
                    None => {
                        self.b0_step = Some(rec.step);
                        *self.b0.insert(rec.b_big)
                    }
                };
                let memo = match &mut self.theta {
                    Some(memo) if memo.b0().to_bits() == b0.to_bits() => memo,
                    slot => slot.insert(Theta::new(self.decay, b0)),
                };
                let m = state.push(e.trace, e.g2, memo.of(rec.b_big));
                out.push(LivePoint::new(&rec, e.kind, &m));
            }
            let entry = &mut self.entries[i];
            entry.state = state;
            entry.estimable = est.is_some();
            prev = Some(rec);
        }
    }

    fn evict(&mut self) {
        while self.entries.len() > self.replay {
            if let Some(front) = self.entries.pop_front() {
                self.base = front.state;
                self.base_prev = Some(front.rec);
                self.evicted_up_to = Some(front.rec.step);
            }
        }
    }
}

/// The autocorrelation inflation φ ≥ 1 the analysis applies to the variance of every smoothed
/// point, recomputed from a report's rows (their per-step estimates), as the batch analysis
/// computes it: Bartlett long-run variance of the residuals around the two-sided kernel,
/// relative to their plain variance. 1 when there are too few rows.
pub fn inflation_of_rows(rows: &[StepRow], settings: &EstimatorSettings) -> f64 {
    let n = rows.len();
    if n == 0 {
        return 1.0;
    }
    let scale = rows
        .iter()
        .flat_map(|r| [r.trace_step.abs(), r.g2_step.abs()])
        .fold(0.0, f64::max);
    let scale = if scale > 0.0 && scale.is_finite() {
        scale
    } else {
        1.0
    };
    let t: Vec<f64> = rows.iter().map(|r| r.trace_step / scale).collect();
    let g: Vec<f64> = rows.iter().map(|r| r.g2_step / scale).collect();
    let steps: Vec<u64> = rows.iter().map(|r| r.step).collect();
    let h = settings.bandwidth_for(n, crate::analysis::settings::typical_spacing(&steps));
    let d = detrend(&t, &g, &steps, h);
    let (mt, mg) = (
        t.iter().sum::<f64>() / n as f64,
        g.iter().sum::<f64>() / n as f64,
    );
    let r = if mg > 0.0 { mt / mg } else { 0.0 };
    inflation(&d.dt, &d.dg, r, settings.block_length_for(n))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::smoothing::{one_sided, one_sided_lag_corrected};
    use crate::{SmootherKind, analyze};
    use rand::rngs::StdRng;
    use rand::{RngExt, SeedableRng};

    fn close(a: f64, b: f64) -> bool {
        a == b || (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
    }

    fn moments_close(a: &Moments, b: &Moments) -> bool {
        a.fields().iter().zip(b.fields()).all(|(x, y)| close(*x, y))
    }

    #[test]
    fn the_recursions_equal_the_batch_smoothers_at_every_step() {
        let mut rng = StdRng::seed_from_u64(7);
        for _ in 0..20 {
            let n = rng.random_range(1..400);
            let t: Vec<f64> = (0..n).map(|_| rng.random_range(-5.0..50.0)).collect();
            let g: Vec<f64> = (0..n).map(|_| rng.random_range(-1.0..3.0)).collect();
            let b: Vec<f64> = (0..n).map(|_| rng.random_range(8.0..512.0)).collect();
            let (decay, b0) = (rng.random_range(0.5..0.999), b[0]);
            let lag = one_sided_lag_corrected(&t, &g, &b, decay, b0);
            let plain = one_sided(&t, &g, &b, decay, b0);
            let (mut s, mut p) = (LagCorrectedEma::default(), OneSidedEma::default());
            for i in 0..n {
                let th = theta(decay, b[i], b0);
                assert!(moments_close(&s.push(t[i], g[i], th), &lag[i]), "step {i}");
                assert!(
                    moments_close(&p.push(t[i], g[i], th), &plain[i]),
                    "step {i}"
                );
            }
        }
    }

    /// A random stream: mostly increasing steps, some out of order (a few places back), some
    /// repeated steps, producer-skipped and single-gradient records, varying batch sizes.
    fn stream(rng: &mut StdRng, n: usize) -> Vec<StepStats> {
        let mut out = Vec::new();
        let mut next = 0u64;
        for _ in 0..n {
            let step = if rng.random_bool(0.1) && next > 5 {
                next - rng.random_range(1..5)
            } else {
                next += rng.random_range(1..3);
                next
            };
            let b_small = *[1.0, 4.0, 8.0].get(rng.random_range(0..3)).unwrap_or(&4.0);
            let b_big = b_small * rng.random_range(2..16) as f64;
            let g2 = rng.random_range(0.1..2.0);
            let tr = rng.random_range(10.0..400.0);
            let noise = |b: f64, rng: &mut StdRng| g2 + tr / b * rng.random_range(0.5..1.5);
            let mut r =
                StepStats::new(step, b_small, b_big, noise(b_small, rng), noise(b_big, rng));
            r.tokens = Some(step as f64 * 1000.0);
            r.loss = Some(rng.random_range(1.0..4.0));
            if rng.random_bool(0.05) {
                r.skipped = Some("loss-scale change".into());
            }
            if rng.random_bool(0.05) {
                r.b_small = r.b_big;
                r.dot_prev = rng.random_bool(0.5).then(|| rng.random_range(0.0..1.0));
            }
            out.push(r);
        }
        out
    }

    /// The inflation the analysis hands out is the one recomputed from its rows, to the bit,
    /// with both smoothers and both layer details; the report is `analyze`'s.
    #[test]
    fn the_analysis_inflation_equals_the_one_recomputed_from_rows() {
        use crate::analysis::layers::LayerDetail;
        use crate::{AnalyzeOptions, analyze_parts};
        let mut rng = StdRng::seed_from_u64(5);
        let mut inflated = 0;
        // The random stream, and one whose noise is autocorrelated (AR(1), ρ = 0.9), where the
        // inflation is above 1.
        let correlated = |rng: &mut StdRng, n: usize| -> Vec<StepStats> {
            let mut e = 0.0;
            (0..n as u64)
                .map(|step| {
                    e = 0.9 * e + rng.random_range(-0.3..0.3);
                    let (g2, tr) = (1.0, 200.0);
                    let mut r = StepStats::new(step, 8.0, 64.0, g2 + tr / 8.0 * (1.0 + e), 0.0);
                    r.sq_big = g2 + tr / 64.0 * (1.0 - 0.5 * e);
                    r
                })
                .collect()
        };
        for (n, records) in [3usize, 40, 900, 2000]
            .into_iter()
            .flat_map(|n| [(n, stream(&mut rng, n)), (n, correlated(&mut rng, n))])
        {
            for smoother in [SmootherKind::TwoSided, SmootherKind::OneSided] {
                let settings = EstimatorSettings {
                    smoother,
                    ..EstimatorSettings::default()
                };
                let Ok(full) = analyze(&records, &settings) else {
                    continue;
                };
                let want = inflation_of_rows(&full.steps, &settings);
                for detail in [LayerDetail::Full, LayerDetail::DiagnosticsOnly] {
                    let parts = analyze_parts(
                        &records,
                        AnalyzeOptions::from(&settings).with_layers(detail),
                    )
                    .expect("analysed");
                    let phi = parts.inflation;
                    let report = parts.into_report();
                    assert_eq!(phi.to_bits(), want.to_bits(), "n={n} {smoother:?}");
                    inflated += usize::from(phi > 1.0);
                    assert_eq!(report.steps.len(), full.steps.len());
                    if detail == LayerDetail::Full {
                        assert_eq!(report, full);
                    }
                }
            }
        }
        assert!(inflated > 0, "no case with an inflation above 1");
    }

    #[test]
    fn the_live_estimate_equals_the_batch_analysis_after_every_record() {
        let mut rng = StdRng::seed_from_u64(11);
        let settings = EstimatorSettings {
            smoother: SmootherKind::OneSided,
            ema_decay: 0.9,
            ..EstimatorSettings::default()
        };
        let mut compared = 0;
        for _ in 0..6 {
            let records = stream(&mut rng, 160);
            let mut live = LiveEstimator::new(&settings, 64);
            let mut points: Vec<LivePoint> = Vec::new();
            for k in 0..records.len() {
                let mut out = Vec::new();
                match live.push(&records[k], &mut out) {
                    Placement::Replayed { from_step } => {
                        points.retain(|p| p.step < from_step);
                    }
                    Placement::Late => panic!("a record a few places back is never late"),
                    Placement::Appended | Placement::Excluded => {}
                }
                points.extend(out);
                let Ok(report) = analyze(&records[..=k], &settings) else {
                    assert!(points.is_empty());
                    continue;
                };
                assert_eq!(points.len(), report.steps.len(), "after record {k}");
                let phi = inflation_of_rows(&report.steps, &settings);
                for (p, row) in points.iter().zip(&report.steps) {
                    assert_eq!(p.step, row.step);
                    assert!(
                        close(p.trace, row.trace_sigma),
                        "{} {}",
                        p.trace,
                        row.trace_sigma
                    );
                    assert!(close(p.g2, row.g2));
                    match (p.b_simple(), row.b_simple) {
                        (Some(a), Some(b)) => assert!(close(a, b), "{a} vs {b}"),
                        (a, b) => assert_eq!(a, b),
                    }
                    let ci = p.ci(phi, settings.confidence);
                    for (a, b) in ci.iter().zip(&row.ci) {
                        assert!(
                            close(*a, *b) || (a - b).abs() < 1e-9,
                            "ci {ci:?} vs {:?}",
                            row.ci
                        );
                    }
                    compared += 1;
                }
            }
        }
        assert!(compared > 10_000, "compared {compared} points");
    }

    #[test]
    fn a_record_older_than_the_replay_buffer_is_late_and_counted() {
        let settings = EstimatorSettings::default();
        let mut live = LiveEstimator::new(&settings, 8);
        let mut out = Vec::new();
        for s in 10..40 {
            live.push(&StepStats::new(s, 4.0, 32.0, 3.0, 1.0), &mut out);
        }
        let placed = live.push(&StepStats::new(5, 4.0, 32.0, 3.0, 1.0), &mut out);
        assert_eq!(placed, Placement::Late);
        assert_eq!(live.late(), 1);
        let placed = live.push(&StepStats::new(35, 4.0, 32.0, 9.0, 1.0), &mut out);
        assert!(matches!(placed, Placement::Replayed { from_step: 35 }));
    }
}
