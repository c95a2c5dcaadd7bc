//! Typed diagnostics: why a noise-scale estimate may be unstable or biased (docs/STATISTICS.md),
//! each with a kind, a severity, a readable message and, where it applies, a step range.

mod lr;
pub(crate) mod run_level;

use crate::record::step::StepStats;
use serde::Serialize;

/// What a diagnostic is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DiagnosticKind {
    /// Share of per-step |G|² estimates that are negative (noisy single steps).
    NegativeG2,
    /// Steps where even the smoothed |G|² is not positive: B_simple unbounded there.
    NonPositiveSmoothedG2,
    /// The run-average tr(Σ) is negative: sq_small < sq_big on average (fields swapped?).
    NegativeTrace,
    /// The summary interval has no upper bound: |G|² not distinguishable from zero.
    UnboundedInterval,
    /// One layer holds more than the threshold share of tr(Σ).
    DominatingLayer,
    /// Per-layer traces do not add up to the whole-model trace (missing or double-counted
    /// shards).
    LayersDoNotAddUp,
    /// Per-layer norms on only some of the usable steps: the layer rows describe those steps,
    /// not the run the whole-model values beside them cover.
    LayersPartial,
    /// Fewer usable steps than the minimum.
    TooFewSteps,
    /// b_small or b_big changes during the run.
    BatchSizeChange,
    /// Squared norms jump together by about a power of 4 (×4, ×16, ×¼: an AMP loss scale
    /// not divided out).
    LossScaleJump,
    /// Squared norms change level together by ≥ 3× at once and stay, by a factor no loss
    /// scale moves them by: the run itself changed (learning rate, data, a restart), or the
    /// fast fall of early training.
    LevelJump,
    /// Lines or records with NaN/±Inf values were skipped.
    NonFiniteSkipped,
    /// The producer flagged steps as skipped.
    ProducerSkipped,
    /// Lines that are not protocol v1 records were skipped.
    MalformedLines,
    /// Records with out-of-domain values (e.g. b_big < b_small) were skipped.
    InvalidRecords,
    /// Single-gradient records that could not be estimated (no `dot_prev` or no predecessor).
    SingleGradientUnusable,
    /// Some steps were estimated by consecutive-step differencing (biased).
    DifferencingBiased,
    /// The learning rate changes: B_simple ∝ 1/temperature (lr/B), so lr decay inflates it.
    LrChange,
    /// Steps are not in increasing order or repeat (sorted before smoothing).
    StepOrder,
    /// B_simple changes between the first and the last window by more than its uncertainty:
    /// the run-wide value averages a moving target.
    Drift,
    /// The run-wide interval is wide (hi/lo > 2 or lo = 0); a verdict reason only.
    WideInterval,
    /// The run was longer than the memory bound: consecutive steps were merged into records
    /// of equal length (issue 15; `summary.coarsened`).
    Coarsened,
    /// The run-average |G|² is not positive, so there is no run-wide B_simple; a verdict reason
    /// only.
    NonPositiveG2,
    /// The autocorrelation window (`--block-length`) is at least half the usable steps: the
    /// interval's variance cannot be estimated and comes out too narrow.
    BlockLengthTooLong,
    /// `sq_small` or `sq_big` is exactly 0 on some steps: a squared gradient norm that is
    /// measured is never exactly zero, so the producer wrote 0 where it had no value.
    ZeroNorms,
    /// `sq_small` and `sq_big` are the same on every usable step: measured norms vary from step
    /// to step, so one measurement was repeated and the interval's zero width means nothing.
    ConstantNorms,
    /// `sq_small` equals `sq_big` on two-batch steps (`b_small < b_big`): the mean small-batch
    /// norm exceeds the big-batch one by the noise, so one norm was written in both fields.
    EqualNorms,
    /// The cumulative `tokens` go down or stay from one step to the next, or are negative: the
    /// token axis (and the tokens per sample inferred from it) read them as written.
    TokensNotIncreasing,
}

impl DiagnosticKind {
    /// What to do about it, in one sentence.
    pub fn action(self) -> &'static str {
        use DiagnosticKind as K;
        match self {
            K::NegativeG2 => "collect larger batches per step or smooth over more steps",
            K::NonPositiveSmoothedG2 => {
                "widen the smoother (press > in the explorer; --bandwidth or --decay on the \
                 command line) or record more samples per step"
            }
            K::NegativeTrace => {
                "check that sq_small is the mean over small batches and not swapped with sq_big"
            }
            K::UnboundedInterval => "record more steps or larger batches before trusting a value",
            K::DominatingLayer => {
                "compare that layer's own B_simple with the whole model's (press l in the \
                 explorer; `analyze --json`: steps[].layers)"
            }
            K::LayersDoNotAddUp => {
                "check that every layer is reported once, with sharded gradients gathered"
            }
            K::LayersPartial => {
                "send the per-layer norms at every step, or read the layer rows as the steps \
                 they cover"
            }
            K::TooFewSteps => "record more steps",
            K::BatchSizeChange => "compare estimates within stretches of equal batch size",
            K::LossScaleJump => {
                "divide the squared norms by the loss scale squared before writing them"
            }
            K::LevelJump => {
                "compare estimates within the stretches between the named steps (a change \
                 of learning rate or data, or a restart, moves both norms at once)"
            }
            K::NonFiniteSkipped => "look at the named steps for overflowing gradients or loss",
            K::ProducerSkipped => "nothing, unless many steps are skipped",
            K::MalformedLines => "fix the producer so every line is a protocol v1 record",
            K::InvalidRecords => "fix the producer's batch sizes or norms at the named steps",
            K::SingleGradientUnusable => {
                "send dot_prev and consecutive steps, or two batch sizes per step"
            }
            K::DifferencingBiased => "send two batch sizes per step (b_small < b_big)",
            K::LrChange => "compare estimates at equal learning rate (before/after the change)",
            K::StepOrder => "write steps in increasing order, once each",
            K::Drift => {
                "read the `now` value and the trajectory, not the run-wide value; re-plan the \
                 batch size as B_crit moves"
            }
            K::WideInterval => "record more steps or larger batches, or read the trajectory",
            K::Coarsened => {
                "nothing for the run-wide and windowed estimates of a file in step order (as a \
                 warning: sort the file by step); for a finer trajectory pass --max-records N \
                 (about 2 KB of memory per record) or 0 for every step"
            }
            K::NonPositiveG2 => "record larger batches per step; the gradient signal is lost",
            K::BlockLengthTooLong => {
                "leave --block-length to its default or keep it well below half the run's steps"
            }
            K::ZeroNorms => {
                "check that the producer writes both squared norms at every step: sq_big is \
                 |g|^2 of the whole batch's (all-reduced) gradient, sq_small the mean |g|^2 of \
                 the small batches"
            }
            K::ConstantNorms => {
                "check that the producer measures the norms at every step instead of writing one \
                 value again"
            }
            K::TokensNotIncreasing => {
                "write the cumulative tokens consumed so far (they never go down), or leave \
                 `tokens` out"
            }
            K::EqualNorms => {
                "check that sq_small is the mean |g|^2 of the small batches, measured before they \
                 are averaged, and sq_big |g|^2 of their mean (a gradient dump: one file per \
                 micro-batch or rank, written before the all-reduce)"
            }
        }
    }
}

/// How serious a diagnostic is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Worth knowing; the estimate stands.
    Info,
    /// The estimate may be biased or unstable for this reason.
    Warning,
}

/// One diagnostic with its reason.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Diagnostic {
    /// What it is about.
    pub kind: DiagnosticKind,
    /// How serious.
    pub severity: Severity,
    /// Human-readable reason, with numbers.
    pub message: String,
    /// First and last optimizer step concerned, when it is about a range of steps (for a
    /// single located step, e.g. a learning-rate change point, both are that step).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steps: Option<[u64; 2]>,
    /// Every located step or stretch, `[first, last]` each (a single step is `[s, s]`), in step
    /// order, at most [`MAX_LOCATED`]: change points, jumps, NaN steps, stretches where the
    /// smoothed |G|² is not positive.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub at: Vec<[u64; 2]>,
}

/// Most located steps or stretches a diagnostic lists in `at`.
pub const MAX_LOCATED: usize = 100;

impl Diagnostic {
    /// A diagnostic without a step range.
    pub fn new(kind: DiagnosticKind, severity: Severity, message: impl Into<String>) -> Self {
        Self {
            kind,
            severity,
            message: message.into(),
            steps: None,
            at: Vec::new(),
        }
    }

    /// Attach a step range.
    pub fn at(mut self, first: u64, last: u64) -> Self {
        self.steps = Some([first, last]);
        self
    }

    /// Attach located stretches (`[first, last]` each, in step order; at most
    /// [`MAX_LOCATED`] kept); `steps` becomes their hull unless already set.
    pub fn located(mut self, stretches: &[[u64; 2]]) -> Self {
        if let (Some(a), Some(b)) = (stretches.first(), stretches.last())
            && self.steps.is_none()
        {
            self.steps = Some([a[0], b[1]]);
        }
        self.at = stretches.iter().take(MAX_LOCATED).copied().collect();
        self
    }
}

/// Contiguous stretches of the sorted steps `steps` (consecutive integers merge), as
/// `[first, last]` pairs.
pub fn stretches_of(steps: &[u64]) -> Vec<[u64; 2]> {
    let mut v: Vec<u64> = steps.to_vec();
    v.sort_unstable();
    v.dedup();
    let mut out: Vec<[u64; 2]> = Vec::new();
    for s in v {
        match out.last_mut() {
            Some(last) if last[1].checked_add(1) == Some(s) => last[1] = s,
            _ => out.push([s, s]),
        }
    }
    out
}

/// Batch-size changes, loss-scale jumps and lr changes along the (sorted, usable) records.
pub fn record_changes(records: &[&StepStats]) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    let mut batch_changes = Vec::new();
    let jumps = level_jumps(records);
    for w in records.windows(2) {
        let (p, c) = (w[0], w[1]);
        if p.b_small != c.b_small || p.b_big != c.b_big {
            batch_changes.push((c.step, p.b_small, p.b_big, c.b_small, c.b_big));
        }
    }
    if let (Some(first), Some(last)) = (batch_changes.first(), batch_changes.last()) {
        let (s, ps, pb, cs, cb) = *first;
        let msg = format!(
            "batch sizes change {} time(s), first at step {s}: b_small {ps} -> {cs}, b_big {pb} -> {cb} samples; \
             per-step estimates stay unbiased but B_simple depends on the temperature lr/B",
            batch_changes.len()
        );
        out.push(
            Diagnostic::new(DiagnosticKind::BatchSizeChange, Severity::Info, msg).at(s, last.0),
        );
    }
    // A loss scale moves squared norms by powers of 4 and leaves the loss where it was; any
    // other factor, or a loss that moves with the norms (a training spike), is the run itself,
    // and its advice is not the loss scale's (a plain SGD run was told to divide by one).
    let (scaled, other): (Vec<_>, Vec<_>) = jumps
        .iter()
        .partition(|j| near_power_of_four(j.factor) && !j.loss_moved());
    let jump_diagnostic = |jumps: &[&Jump], kind, severity, why: &str| {
        let (first, last) = (jumps.first()?, jumps.last()?);
        let loss = match first.loss {
            Some((r, true)) => {
                format!(" (the loss moved x{r:.2} with it, which no loss scale does)")
            }
            _ => String::new(),
        };
        let msg = format!(
            "{} sudden level jump(s) of both squared norms, first at step {} by x{:.2}{loss}: \
             {why}",
            jumps.len(),
            first.step,
            first.factor
        );
        let at: Vec<[u64; 2]> = jumps.iter().map(|j| [j.step, j.step]).collect();
        Some(
            Diagnostic::new(kind, severity, msg)
                .at(first.step, last.step)
                .located(&at),
        )
    };
    out.extend(jump_diagnostic(
        &scaled,
        DiagnosticKind::LossScaleJump,
        Severity::Warning,
        "by a power of 4, the step an AMP loss scale moves squared norms by: a loss scale \
         that was not divided out (norms need /scale^2)?",
    ));
    out.extend(jump_diagnostic(
        &other,
        DiagnosticKind::LevelJump,
        Severity::Info,
        "no loss scale's step (a power of 4 with the loss unmoved): a change in the run \
         itself (learning rate, data, a restart from another state, a loss spike) or the fast \
         fall of early training",
    ));
    out.extend(lr::lr_change(records));
    out.extend(tokens_not_increasing(records));
    out
}

/// Whether a factor is within about 23 % of a power of 4 (4, 16, ¼, …): what a loss scale
/// that moves by powers of 2 does to squared norms it was not divided out of. The margin is
/// the noise of [`level_factor`] on noisy norms (a ×4 read ×4.4); ×3 and ×6 stay outside it.
fn near_power_of_four(factor: f64) -> bool {
    let k = factor.abs().log(4.0);
    k.is_finite() && k.round() != 0.0 && (k - k.round()).abs() < 0.15
}

/// The info diagnostic for steps (in step order) whose cumulative `tokens` are negative or
/// not above the previous step's, if there are any.
fn tokens_not_increasing(records: &[&StepStats]) -> Option<Diagnostic> {
    // Every step trains on some tokens, so the total grows from one step to the next: one
    // that stays put is a per-step count (2048 on every step) written where the total was
    // meant, which gave a sequence length off by the batch's change without a word.
    let mut previous: Option<(u64, f64)> = None;
    let mut steps = Vec::new();
    for r in records {
        let Some(t) = r.tokens else { continue };
        let stays_or_falls = previous.is_some_and(|(step, p)| r.step != step && t <= p);
        if t < 0.0 || stays_or_falls {
            steps.push(r.step);
        }
        previous = Some((r.step, t));
    }
    let first = *steps.first()?;
    let msg = format!(
        "the cumulative tokens are negative, or do not grow from the step before, on {} \
         step(s), first at step {first}: the token axis and the tokens per sample inferred \
         from it read them as written (a counter reset at a restart, or tokens per step \
         written where the total so far was meant?)",
        steps.len()
    );
    Some(crate::analysis::diag(
        DiagnosticKind::TokensNotIncreasing,
        Severity::Info,
        msg,
        &steps,
    ))
}

/// Window (steps) of the level-jump detector.
const JUMP_WINDOW: usize = 5;

/// The least move (in log, about 10 %) of a loss across a jump that counts as the loss
/// moving, whatever its own scatter.
const LOSS_MOVE_FLOOR_LOG: f64 = 0.1;
/// How many of the loss's own robust spreads before a jump a loss after it must stray by to
/// count as moving with the norms.
const LOSS_MOVE_SPREADS: f64 = 5.0;

/// One level jump of both squared norms.
#[derive(Debug, Clone, Copy)]
struct Jump {
    /// The first step at the new level.
    step: u64,
    /// Its factor ([`level_factor`]).
    factor: f64,
    /// The loss's farthest factor over the [`JUMP_WINDOW`] steps from the jump against its
    /// median before it, and whether that is a move ([`loss_change`]); `None` without losses.
    loss: Option<(f64, bool)>,
}

impl Jump {
    /// Whether the loss moved with the norms: a loss scale never moves it.
    fn loss_moved(&self) -> bool {
        self.loss.is_some_and(|(_, moved)| moved)
    }
}

/// The loss across a jump at `t`: its farthest factor over `records[t..t + w]` against its
/// median over the steps before (from `level_start`, at most [`FACTOR_SPAN`]), and whether
/// that strays past [`LOSS_MOVE_SPREADS`] robust spreads of the loss before (at least
/// [`LOSS_MOVE_FLOOR_LOG`]). A spike's loss jumps with its norms (×1.5 at a ×16 jump of a run
/// without AMP); a loss scale's leaves it in its own scatter. `None` where a step lacks a
/// positive loss.
fn loss_change(
    records: &[&StepStats],
    level_start: usize,
    t: usize,
    w: usize,
) -> Option<(f64, bool)> {
    let losses = |range: std::ops::Range<usize>| -> Option<Vec<f64>> {
        records
            .get(range)?
            .iter()
            .map(|r| r.loss.filter(|l| *l > 0.0 && l.is_finite()))
            .collect()
    };
    let before = losses(span_before(level_start, t))?;
    let after = losses(t..t + w)?;
    let spread = log_spread(&before);
    let mid = median_in_place(&mut before.clone());
    let farthest = after
        .iter()
        .map(|l| l / mid)
        .max_by(|a, b| a.ln().abs().total_cmp(&b.ln().abs()))?;
    let limit = (LOSS_MOVE_SPREADS * spread).max(LOSS_MOVE_FLOOR_LOG);
    Some((farthest, farthest.ln().abs() > limit))
}

/// Steps where both squared norms change level by ≥ 3× at once and stay there: the medians of
/// the `JUMP_WINDOW` steps before and from the step differ by ≥ 3× (sq_big: ≥ 2×, same
/// direction) and the step itself already sits at the new level.
fn level_jumps(records: &[&StepStats]) -> Vec<Jump> {
    let w = JUMP_WINDOW;
    // Median of every window of JUMP_WINDOW consecutive values, in one pass each.
    let small: Vec<f64> = records.iter().map(|r| r.sq_small).collect();
    let big: Vec<f64> = records.iter().map(|r| r.sq_big).collect();
    let (med_small, med_big) = (window_medians(&small), window_medians(&big));
    let mut out = Vec::new();
    // Where the current level starts: the last jump (the factor's "before" stays after it).
    let mut level_start = 0;
    let mut t = w;
    while t + w <= records.len() {
        let before = med_small[t - w];
        let ratio = med_small[t] / before;
        let here = small[t] / before;
        let ratio_big = med_big[t] / med_big[t - w];
        let up = ratio >= 3.0 && here >= 3.0 && ratio_big >= 2.0;
        let down = ratio <= 1.0 / 3.0 && here <= 1.0 / 3.0 && ratio_big <= 0.5;
        let factor = (before > 0.0 && (up || down))
            .then(|| level_factor(&small, &big, level_start, t))
            .filter(|f| stands_out(&small, level_start, t, *f));
        if let Some(factor) = factor {
            out.push(Jump {
                step: records[t].step,
                factor,
                loss: loss_change(records, level_start, t, w),
            });
            level_start = t;
            t += w;
        } else {
            t += 1;
        }
    }
    out
}

/// Steps on each side of a detected jump whose means measure its factor.
const FACTOR_SPAN: usize = 10 * JUMP_WINDOW;

/// The indices before a jump at `t` its factor and scatter are read over: up to
/// [`FACTOR_SPAN`], from `level_start` (the previous jump) at the earliest.
fn span_before(level_start: usize, t: usize) -> std::ops::Range<usize> {
    t.saturating_sub(FACTOR_SPAN).max(level_start)..t
}

/// The indices from a jump at `t` on (up to [`FACTOR_SPAN`]) of a series of `len` values.
fn span_after(t: usize, len: usize) -> std::ops::Range<usize> {
    t..t.saturating_add(FACTOR_SPAN).min(len)
}

/// The factor of the level jump at `t`: the geometric mean of both norms' ratios of the mean
/// over up to [`FACTOR_SPAN`] steps from `t` to the mean over as many before it (from
/// `level_start`, the previous jump, at the earliest). Five steps
/// a side (the detection's medians) read a ×4 as ×4.6 on noisy norms, no power of 4.
fn level_factor(small: &[f64], big: &[f64], level_start: usize, t: usize) -> f64 {
    let ratio = |x: &[f64]| {
        let before = mean(&x[span_before(level_start, t)]);
        let after = mean(&x[span_after(t, x.len())]);
        after / before
    };
    let (rs, rb) = (ratio(small), ratio(big));
    if rs > 0.0 && rb > 0.0 {
        (rs * rb).sqrt()
    } else {
        rs
    }
}

/// How many of the norm's own step-to-step spreads (in logarithm) a level jump must span.
const JUMP_SPREADS: f64 = 3.0;

/// Whether a jump by `factor` at `t` stands out of the squared norm's own scatter: its
/// logarithm is at least [`JUMP_SPREADS`] times the robust spread of `ln sq_small` over the
/// spans either side. A run whose norms swing ×10 from step to step (plain SGD at a high
/// learning rate) crosses ×3 between five-step medians by chance, and was called a jump 14
/// times in 300 steps; a loss scale moves a steady level.
fn stands_out(small: &[f64], level_start: usize, t: usize, factor: f64) -> bool {
    let before = &small[span_before(level_start, t)];
    let after = &small[span_after(t, small.len())];
    let spread = 0.5 * (log_spread(before) + log_spread(after));
    factor.ln().abs() >= JUMP_SPREADS * spread
}

/// The robust standard deviation of `ln x` over the positive values of `x`: 1.4826 × the
/// median absolute deviation (0 with fewer than two).
fn log_spread(x: &[f64]) -> f64 {
    let mut logs: Vec<f64> = x.iter().filter(|v| **v > 0.0).map(|v| v.ln()).collect();
    if logs.len() < 2 {
        return 0.0;
    }
    let mid = median_in_place(&mut logs);
    let mut dev: Vec<f64> = logs.iter().map(|l| (l - mid).abs()).collect();
    1.4826 * median_in_place(&mut dev)
}

/// The median of `v` (the upper middle of an even count), sorting it.
fn median_in_place(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// The mean of `x` (NaN when empty).
fn mean(x: &[f64]) -> f64 {
    x.iter().sum::<f64>() / x.len() as f64
}

/// `m[i]` = the median of `x[i..i + JUMP_WINDOW]` in `f64::total_cmp` order (the middle of
/// the sorted window), for every full window.
fn window_medians(x: &[f64]) -> Vec<f64> {
    x.windows(JUMP_WINDOW).map(median5).collect()
}

/// The median of five values by a sorting network of `total_cmp` exchanges: the value a
/// sort by `total_cmp` puts in the middle.
fn median5(v: &[f64]) -> f64 {
    let mut a = [v[0], v[1], v[2], v[3], v[4]];
    let mut swap = |i: usize, j: usize| {
        if a[j].total_cmp(&a[i]).is_lt() {
            a.swap(i, j);
        }
    };
    // An optimal five-input sorting network (9 exchanges).
    for (i, j) in [
        (0, 1),
        (3, 4),
        (2, 4),
        (2, 3),
        (0, 3),
        (0, 2),
        (1, 4),
        (1, 3),
        (1, 2),
    ] {
        swap(i, j);
    }
    a[2]
}

/// Contiguous runs of `true` in `flags`, as (first, last) step pairs.
pub fn runs(steps: &[u64], flags: &[bool]) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    let mut open = false;
    for (i, &f) in flags.iter().enumerate() {
        match (f, open) {
            (true, false) => out.push((steps[i], steps[i])),
            (true, true) => {
                if let Some(last) = out.last_mut() {
                    last.1 = steps[i];
                }
            }
            _ => {}
        }
        open = f;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sorting network's median is the sorted window's middle value, bit for bit
    /// (signed zeros included), on random windows drawn from a pool with repeats.
    #[test]
    fn median5_is_the_middle_of_the_sorted_window() {
        let pool = [0.0, -0.0, 1.0, 1.0, 2.5, 1e-300, 7.0, 3.0];
        let mut state = 12345u64;
        for _ in 0..20_000 {
            let mut v = [0.0f64; JUMP_WINDOW];
            for x in v.iter_mut() {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                *x = pool[(state >> 33) as usize % pool.len()];
            }
            let mut sorted = v;
            sorted.sort_by(f64::total_cmp);
            assert_eq!(median5(&v).to_bits(), sorted[2].to_bits(), "{v:?}");
        }
    }
}
