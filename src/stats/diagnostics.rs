//! Typed diagnostics: why a noise-scale estimate may be unstable or biased (DESIGN.md §3 traps),
//! each with a kind, a severity, a readable message and, where it applies, a step range.

use super::step::StepStats;
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
    /// Fewer usable steps than the minimum.
    TooFewSteps,
    /// b_small or b_big changes during the run.
    BatchSizeChange,
    /// Squared norms jump together by a factor ≥ 3.5 (AMP loss scale not divided out?).
    LossScaleJump,
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
    /// First and last optimizer step concerned, when it is about a range of steps.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steps: Option<[u64; 2]>,
}

impl Diagnostic {
    /// A diagnostic without a step range.
    pub fn new(kind: DiagnosticKind, severity: Severity, message: impl Into<String>) -> Self {
        Self {
            kind,
            severity,
            message: message.into(),
            steps: None,
        }
    }

    /// Attach a step range.
    pub fn at(mut self, first: u64, last: u64) -> Self {
        self.steps = Some([first, last]);
        self
    }
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
    if let (Some(first), Some(last)) = (jumps.first(), jumps.last()) {
        let msg = format!(
            "{} sudden level jump(s) of both squared norms, first at step {} by x{:.2}: an AMP loss \
             scale that was not divided out (norms need /scale^2)?",
            jumps.len(),
            first.0,
            first.1
        );
        out.push(
            Diagnostic::new(DiagnosticKind::LossScaleJump, Severity::Warning, msg)
                .at(first.0, last.0),
        );
    }
    out.extend(lr_change(records));
    out
}

/// Window (steps) of the level-jump detector.
const JUMP_WINDOW: usize = 5;

/// Steps where both squared norms change level by ≥ 3× at once and stay there: the medians of
/// the `JUMP_WINDOW` steps before and from the step differ by ≥ 3× (sq_big: ≥ 2×, same
/// direction) and the step itself already sits at the new level.
fn level_jumps(records: &[&StepStats]) -> Vec<(u64, f64)> {
    let w = JUMP_WINDOW;
    let mut out = Vec::new();
    let mut t = w;
    while t + w <= records.len() {
        let med = |f: fn(&StepStats) -> f64, a: usize, b: usize| {
            let mut v: Vec<f64> = records[a..b].iter().map(|r| f(r)).collect();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let small = |r: &StepStats| r.sq_small;
        let big = |r: &StepStats| r.sq_big;
        let before = med(small, t - w, t);
        let ratio = med(small, t, t + w) / before;
        let here = records[t].sq_small / before;
        let ratio_big = med(big, t, t + w) / med(big, t - w, t);
        let up = ratio >= 3.0 && here >= 3.0 && ratio_big >= 2.0;
        let down = ratio <= 1.0 / 3.0 && here <= 1.0 / 3.0 && ratio_big <= 0.5;
        if before > 0.0 && (up || down) {
            out.push((records[t].step, ratio));
            t += w;
        } else {
            t += 1;
        }
    }
    out
}

fn lr_change(records: &[&StepStats]) -> Option<Diagnostic> {
    let lrs: Vec<(u64, f64)> = records
        .iter()
        .filter_map(|r| r.lr.filter(|l| *l > 0.0).map(|l| (r.step, l)))
        .collect();
    let (lo, hi) = lrs
        .iter()
        .fold((f64::INFINITY, 0.0f64), |(lo, hi), &(_, l)| {
            (lo.min(l), hi.max(l))
        });
    if lrs.len() < 2 || hi <= lo * 1.1 {
        return None;
    }
    let msg = format!(
        "learning rate varies from {lo:.3e} to {hi:.3e} (x{:.1}); B_simple scales as 1/temperature \
         (lr/B), so lr decay inflates it: compare steps at equal lr",
        hi / lo
    );
    let (first, last) = (lrs[0].0, lrs[lrs.len() - 1].0);
    Some(Diagnostic::new(DiagnosticKind::LrChange, Severity::Info, msg).at(first, last))
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
