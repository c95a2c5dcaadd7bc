//! Run-level diagnostics (dropped records, noisy steps, unbounded intervals), the stability
//! verdict and the sequence length inferred from token counts.

use crate::analysis::settings::EstimatorSettings;
use crate::analysis::summarize::Point;
use crate::analysis::{Dropped, InputCounts, diag};
use crate::diagnostics::{Diagnostic, DiagnosticKind as K, Severity, runs};
use crate::estimate::per_step::StepEstimate;
use crate::record::step::StepStats;
use crate::report::{Reason, StepRow, Summary, Verdict};
use crate::text::significant;

/// Append the run-level diagnostics to `out`.
#[allow(clippy::too_many_arguments)]
/// What the run-level diagnostics look at.
pub(crate) struct RunFacts<'a> {
    /// Records dropped before estimation, with why.
    pub(crate) dropped: &'a Dropped,
    /// Lines a reader rejected before analysis.
    pub(crate) counts: &'a InputCounts,
    /// The per-step estimates.
    pub(crate) estimates: &'a [StepEstimate],
    /// The report's step rows.
    pub(crate) rows: &'a [StepRow],
    /// The run-wide smoothed point.
    pub(crate) summary: &'a Point,
    /// Share of steps whose |G|² estimate is negative.
    pub(crate) negative_g2_fraction: f64,
    /// The settings the run was analysed with.
    pub(crate) settings: &'a EstimatorSettings,
    /// Records read (before any merging).
    pub(crate) records_read: usize,
}

pub(crate) fn finish_diagnostics(out: &mut Vec<Diagnostic>, run: &RunFacts) {
    let RunFacts {
        dropped,
        counts,
        estimates: est,
        rows,
        summary,
        negative_g2_fraction: negative,
        settings,
        records_read: records,
    } = *run;
    let n = est.len();
    if let Some(why) = block_length_problem(settings, n) {
        out.push(Diagnostic::new(
            K::BlockLengthTooLong,
            Severity::Warning,
            why,
        ));
    }
    // Lost steps (lines and records) are a warning only above a share of the input: one bad
    // line in a long run does not change the estimate.
    // The input: the records read and the lines the reader skipped (malformed or non-finite),
    // so that one bad line of a hundred is 1 % whatever made it bad.
    let total = records
        .saturating_add(counts.malformed)
        .saturating_add(counts.non_finite)
        .max(1) as f64;
    let lost = |count: usize| {
        if count as f64 > settings.dropped_warn * total {
            Severity::Warning
        } else {
            Severity::Info
        }
    };
    let sev = if negative > settings.negative_g2_warn {
        Severity::Warning
    } else {
        Severity::Info
    };
    // None negative: nothing to say (`negative_g2_fraction` still reports the 0).
    if negative > 0.0 {
        out.push(Diagnostic::new(
            K::NegativeG2,
            sev,
            format!(
                "{}% of single-step |G|^2 estimates are negative (noise dominates one step; \
                 only the smoothed sums are meaningful)",
                // Under 1 %, one decimal: "0%" read as none.
                if negative < 0.01 {
                    format!("{:.1}", 100.0 * negative)
                } else {
                    format!("{:.0}", 100.0 * negative)
                }
            ),
        ));
    }
    let steps: Vec<u64> = rows.iter().map(|r| r.step).collect();
    let flags: Vec<bool> = rows.iter().map(|r| r.b_simple.is_none()).collect();
    let bad_runs = runs(&steps, &flags);
    if !bad_runs.is_empty() {
        let count = flags.iter().filter(|f| **f).count();
        // What to do is the kind's `action` (said beside the message: it was said twice).
        let msg = format!(
            "the smoothed |G|^2 is not positive on {count} step(s) in {} stretch(es): B_simple is \
             unbounded there",
            bad_runs.len()
        );
        let at: Vec<[u64; 2]> = bad_runs.iter().map(|r| [r.0, r.1]).collect();
        out.push(Diagnostic::new(K::NonPositiveSmoothedG2, Severity::Warning, msg).located(&at));
    }
    out.extend(zero_norms(rows));
    out.extend(constant_norms(rows));
    out.extend(equal_norms(rows));
    if summary.trace < 0.0 {
        let msg =
            "the run-average tr(Sigma) is negative: sq_small < sq_big on average, impossible \
                   for a mean over small batches (fields swapped, or sq_small summed rather than \
                   averaged over the small batches?)"
                .to_string();
        out.push(Diagnostic::new(K::NegativeTrace, Severity::Warning, msg));
    }
    if !summary.ci[1].is_finite() {
        let msg = "the summary interval has no upper bound: the run-average |G|^2 is not \
                   distinguishable from zero at this confidence"
            .to_string();
        out.push(Diagnostic::new(
            K::UnboundedInterval,
            Severity::Warning,
            msg,
        ));
    }
    if n < settings.min_steps {
        let msg = format!(
            "only {n} usable step(s) (fewer than {}): the interval is unreliable",
            settings.min_steps
        );
        out.push(Diagnostic::new(K::TooFewSteps, Severity::Warning, msg));
    }
    let non_finite = counts.non_finite + dropped.non_finite.len() - counts.non_finite_steps.len();
    if non_finite > 0 {
        let first = dropped
            .non_finite_reason
            .as_ref()
            .map(|(step, why)| format!("; step {step}: {why}"))
            .unwrap_or_default();
        let msg = format!(
            "{non_finite} step(s) with NaN/Inf values skipped (non-finite gradients or loss{first})"
        );
        out.push(diag(
            K::NonFiniteSkipped,
            lost(non_finite),
            msg,
            &dropped.non_finite,
        ));
    }
    if let Some((_, reason)) = dropped.skipped.first() {
        let steps: Vec<u64> = dropped.skipped.iter().map(|s| s.0).collect();
        let msg = format!(
            "{} step(s) flagged skipped by the producer (first reason: {reason})",
            steps.len()
        );
        out.push(diag(K::ProducerSkipped, lost(steps.len()), msg, &steps));
    }
    if counts.malformed > 0 {
        let msg = format!("{} malformed line(s) skipped", counts.malformed);
        out.push(Diagnostic::new(
            K::MalformedLines,
            lost(counts.malformed),
            msg,
        ));
    }
    if let Some((_, reason)) = dropped.invalid.first() {
        let steps: Vec<u64> = dropped.invalid.iter().map(|s| s.0).collect();
        let msg = format!(
            "{} invalid record(s) skipped (first: {reason})",
            steps.len()
        );
        out.push(diag(K::InvalidRecords, lost(steps.len()), msg, &steps));
    }
    let single: Vec<u64> = dropped
        .no_dot
        .iter()
        .chain(&dropped.no_pred)
        .copied()
        .collect();
    if !single.is_empty() {
        let msg = format!(
            "{} single-gradient record(s) (b_small == b_big) unusable: {} without dot_prev, {} \
             without the previous step as a single-gradient record of the same batch size",
            single.len(),
            dropped.no_dot.len(),
            dropped.no_pred.len()
        );
        out.push(diag(
            K::SingleGradientUnusable,
            Severity::Warning,
            msg,
            &single,
        ));
    }
    let diff: Vec<u64> = est
        .iter()
        .filter(|e| e.kind.is_biased())
        .map(|e| e.step)
        .collect();
    if !diff.is_empty() {
        let msg = format!(
            "{} step(s) estimated by consecutive-step differencing: biased (parameters move between \
             the two gradients, inflating tr(Sigma))",
            diff.len()
        );
        out.push(diag(K::DifferencingBiased, Severity::Warning, msg, &diff));
    }
    if let Some(d) = step_order(dropped) {
        out.push(d);
    }
}

/// The warning for steps whose `sq_small` or `sq_big` is exactly 0 (none: `None`).
fn zero_norms(rows: &[StepRow]) -> Option<Diagnostic> {
    let small: Vec<u64> = rows
        .iter()
        .filter(|r| r.sq_small == 0.0)
        .map(|r| r.step)
        .collect();
    let big: Vec<u64> = rows
        .iter()
        .filter(|r| r.sq_big == 0.0)
        .map(|r| r.step)
        .collect();
    if small.is_empty() && big.is_empty() {
        return None;
    }
    let n = rows.len();
    let which = match (small.len(), big.len()) {
        (0, b) => format!("sq_big is exactly 0 on {b} of {n} steps"),
        (s, 0) => format!("sq_small is exactly 0 on {s} of {n} steps"),
        (s, b) => format!("sq_small is exactly 0 on {s} and sq_big on {b} of {n} steps"),
    };
    let msg = format!(
        "{which}: a measured squared gradient norm is never exactly zero, so the producer wrote \
         0 where it had no value, and |G|^2 and tr(Sigma) are wrong there"
    );
    let mut steps = small;
    steps.extend(big);
    Some(diag(K::ZeroNorms, Severity::Warning, msg, &steps))
}

/// Relative difference of `sq_small` and `sq_big` below which the two are one norm: the
/// noise term tr(Σ)·(1/b_small − 1/b_big) is then below a millionth of |G|², i.e. a B_simple
/// below 10⁻⁶ of a small batch, which no real run has; identical gradients summed in another
/// order (gradient dumps whose files hold one gradient, f32 writers) differ by rounding only.
pub(crate) const EQUAL_NORMS_RELATIVE: f64 = 1e-6;

/// Whether `sq_small` and `sq_big` of a two-batch step are one norm (equal to rounding).
fn one_norm(r: &StepRow) -> bool {
    r.b_small < r.b_big
        && r.sq_big != 0.0
        && (r.sq_small - r.sq_big).abs()
            <= EQUAL_NORMS_RELATIVE * r.sq_small.abs().max(r.sq_big.abs())
}

/// The warning for two-batch steps (`b_small < b_big`) whose `sq_small` equals `sq_big` (to
/// rounding: tr(Σ) is 0 there), if there are any.
fn equal_norms(rows: &[StepRow]) -> Option<Diagnostic> {
    let two_batch = rows.iter().filter(|r| r.b_small < r.b_big).count();
    let steps: Vec<u64> = rows
        .iter()
        .filter(|r| one_norm(r))
        .map(|r| r.step)
        .collect();
    if steps.is_empty() {
        return None;
    }
    let msg = format!(
        "sq_small equals sq_big (to rounding) on {} of {two_batch} two-batch steps: the mean \
         |g|^2 of small batches exceeds |g|^2 of their mean by the gradient noise, so equal \
         values mean the small batches hold one gradient (one norm written in both fields, or \
         a gradient dump whose files are copies or were written after the data-parallel \
         all-reduce), and tr(Sigma) is 0 there",
        steps.len()
    );
    Some(diag(K::EqualNorms, Severity::Warning, msg, &steps))
}

/// Fewest usable steps on which identical norms are called a repeated value.
const CONSTANT_NORMS_MIN_STEPS: usize = 3;

/// The warning for a run whose `sq_small` and `sq_big` are the same on every usable step (and
/// not zero, which [`zero_norms`] names), if it is one.
fn constant_norms(rows: &[StepRow]) -> Option<Diagnostic> {
    let first = rows.first()?;
    let same = rows.iter().all(|r| {
        r.sq_small.to_bits() == first.sq_small.to_bits()
            && r.sq_big.to_bits() == first.sq_big.to_bits()
    });
    if !same || rows.len() < CONSTANT_NORMS_MIN_STEPS || first.sq_big == 0.0 {
        return None;
    }
    let msg = format!(
        "sq_small and sq_big are the same on all {} usable steps ({:e} and {:e}): measured \
         gradient norms vary from step to step with the sampled batch, so one value was written \
         again, and the interval's width (zero) says nothing about the estimate",
        rows.len(),
        first.sq_small,
        first.sq_big
    );
    let last = rows.last().map_or(first.step, |r| r.step);
    Some(Diagnostic::new(K::ConstantNorms, Severity::Warning, msg).at(first.step, last))
}

/// The step-order warning: records out of order, steps written more than once, and the case
/// of both, a restarted run that wrote its steps again.
fn step_order(dropped: &Dropped) -> Option<Diagnostic> {
    let steps = &dropped.repeated_steps;
    let span = match (steps.first(), steps.last()) {
        (Some(a), Some(b)) if a == b => format!("step {a}"),
        (Some(a), Some(b)) => format!("{} step(s) between {a} and {b}", steps.len()),
        _ => String::new(),
    };
    let twice = (dropped.duplicates > 0).then(|| {
        format!(
            "{} record(s) repeat an earlier record exactly (the same step and values: lines \
             written twice) and were read once, as `copus watch` reads them",
            dropped.duplicates
        )
    });
    let msg = match (dropped.backward, dropped.repeats) {
        (0, 0) => {
            let msg = twice?;
            return Some(crate::analysis::diag(
                K::StepOrder,
                Severity::Info,
                msg,
                &[],
            ));
        }
        (back, 0) => format!(
            "the step number goes back {back} time(s): records out of order, sorted by step \
             before smoothing"
        ),
        (0, n) => format!(
            "{n} record(s) repeat a step already written ({span}): each is kept as a record of \
             its own (a row apiece, each weighing as much as a step in the averages and windows; \
             the smoother gives a step's records one value)"
        ),
        (back, n) => format!(
            "{n} record(s) repeat {span} after the step number went back {back} time(s) (a \
             restarted run writing its steps again?): each record is kept, so both attempts \
             count there; `copus watch` keeps only the later ones. Keep one \
             attempt (cut the file at the restart) for one trajectory"
        ),
    };
    let msg = match twice {
        Some(t) => format!("{msg}; {t}"),
        None => msg,
    };
    Some(crate::analysis::diag(
        K::StepOrder,
        Severity::Warning,
        msg,
        steps,
    ))
}

/// Whether the run-average tr(Σ) is 0 to rounding against |G|² (see [`EQUAL_NORMS_RELATIVE`]).
fn no_noise(s: &Summary) -> bool {
    s.trace_sigma.abs() <= EQUAL_NORMS_RELATIVE * s.g2.abs()
}

/// Why the chosen autocorrelation window makes the interval meaningless on `steps` usable
/// steps (a window of at least half of them leaves no independent blocks to estimate the
/// variance from), if it does.
fn block_length_problem(settings: &EstimatorSettings, steps: usize) -> Option<String> {
    let l = settings.block_length?;
    (l.saturating_mul(2) > steps).then(|| {
        format!(
            "the block length {l} is more than half of the {steps} usable steps: the interval's \
             variance cannot be estimated (it comes out too narrow)"
        )
    })
}

/// Stable / noisy / unreliable from the run-wide interval and the warnings, with the reasons
/// (each with what to do) when it is not stable.
pub(crate) fn verdict(s: &Summary, settings: &EstimatorSettings) -> (Verdict, Vec<Reason>) {
    let reason = |kind: K, message: String| Reason {
        kind,
        message,
        action: kind.action().to_string(),
    };
    let mut hard = Vec::new();
    if s.b_simple.is_none_or(|b| b < 0.0) {
        let message = if s.g2 > 0.0 && s.trace_sigma < 0.0 {
            format!(
                "the run-average tr(Sigma) is {:.3e} (below zero): no positive B_simple",
                s.trace_sigma
            )
        } else {
            format!(
                "the run-average |G|^2 is {:.3e}: no positive B_simple",
                s.g2
            )
        };
        let kind = if s.g2 > 0.0 && s.trace_sigma < 0.0 {
            K::NegativeTrace
        } else {
            K::NonPositiveG2
        };
        // Zeros written for a norm explain a lost signal better than "record larger batches",
        // and one norm in both fields a tr(Sigma) of rounding noise better than a swap.
        let find = |k: K| s.diagnostics.iter().find(|d| d.kind == k);
        match (find(K::ZeroNorms), find(K::EqualNorms)) {
            (Some(zeros), _) => hard.push(reason(
                K::ZeroNorms,
                format!("{message}; {}", zeros.message),
            )),
            (None, Some(equal)) if kind == K::NegativeTrace && no_noise(s) => {
                hard.push(reason(K::EqualNorms, equal.message.clone()));
            }
            _ => hard.push(reason(kind, message)),
        }
    }
    if let Some(d) = s.diagnostics.iter().find(|d| d.kind == K::ConstantNorms) {
        hard.push(reason(K::ConstantNorms, d.message.clone()));
    }
    // No noise measured anywhere: B_simple is 0 by construction, not an estimate.
    if s.trace_sigma >= 0.0
        && no_noise(s)
        && let Some(d) = s.diagnostics.iter().find(|d| d.kind == K::EqualNorms)
    {
        hard.push(reason(K::EqualNorms, d.message.clone()));
    }
    if let Some(why) = block_length_problem(settings, s.steps) {
        hard.push(reason(K::BlockLengthTooLong, why));
    }
    if !s.ci[1].is_finite() {
        hard.push(reason(
            K::UnboundedInterval,
            "the run-wide interval has no upper bound".into(),
        ));
    }
    if s.steps < settings.min_steps {
        hard.push(reason(
            K::TooFewSteps,
            format!(
                "{} usable step(s), fewer than {}",
                s.steps, settings.min_steps
            ),
        ));
    }
    if !hard.is_empty() {
        return (Verdict::Unreliable, hard);
    }
    let mut soft = Vec::new();
    // The headline leads with `now` (the last window): the verdict must not call the run
    // stable while that number has no upper bound or no positive value.
    let now_bounded = s.now.b_simple.is_some_and(|b| b > 0.0) && s.now.ci[1].is_finite();
    if !now_bounded {
        // Say which: a value that is no batch size (tr(Σ) estimated below zero) can carry a
        // bounded interval, and "no bounded estimate" then contradicted the numbers shown.
        let what = match s.now.b_simple {
            Some(b) if b <= 0.0 && s.now.ci[1].is_finite() => format!(
                "reads {b:.4}, no batch size (tr(Σ) estimated below zero: the noise is too small \
                 to measure there; its interval reaches up to {:.4})",
                s.now.ci[1]
            ),
            Some(b) if b <= 0.0 => format!(
                "reads {b:.4}, no batch size (tr(Σ) estimated below zero), and its interval has \
                 no upper bound"
            ),
            Some(_) => "has an interval with no upper bound".to_string(),
            None => "has no estimate (|G|² not positive there)".to_string(),
        };
        // Where B_simple drifts, the run-wide value averages a moving target (the drift
        // reason says not to read it): only the trajectory is left to read.
        // A learning-rate change moves B_simple too (the drift test may not have run: no
        // bounded last window), and the run-wide value then averages the two regimes.
        // A jump is named at its step; a schedule that moves smoothly (a warm-up, a cosine
        // decay) over the stretch it moves (a cosine run read "the change at step 1").
        let lr_change = s
            .diagnostics
            .iter()
            .find(|d| d.kind == K::LrChange)
            .map(|d| match (d.at.first(), d.steps) {
                (Some([a, b]), _) if a == b => {
                    format!("the steps before and after the learning-rate change at step {a}")
                }
                (_, Some([a, b])) => format!(
                    "steps at the different learning rates of its schedule, which moves over \
                     steps {a}-{b}"
                ),
                _ => "the steps before and after the learning-rate change".to_string(),
            });
        let read = if s.drift.as_ref().is_some_and(|d| d.significant) {
            "read the trajectory until more steps arrive (not the run-wide value: B_simple \
             drifts over the run)"
                .to_string()
        } else if let Some(what) = lr_change {
            format!(
                "read the trajectory until more steps arrive (not the run-wide value: it \
                 averages {what})"
            )
        } else {
            "read the run-wide value or the trajectory until more steps arrive".to_string()
        };
        soft.push(reason(
            K::UnboundedInterval,
            format!(
                "the last window (steps {}-{}, the `now` value) {what}: {read}",
                s.now.first_step, s.now.last_step
            ),
        ));
    }
    // Too few steps for two windows: the drift test cannot run, but a `now` interval apart
    // from the run-wide one is the same evidence of a moving B_crit.
    if s.drift.is_none() && now_bounded && (s.now.ci[0] > s.ci[1] || s.now.ci[1] < s.ci[0]) {
        soft.push(reason(
            K::Drift,
            format!(
                "the last window (steps {}-{}) reads {} [{}, {}] against the run-wide {} [{}, \
                 {}]: the intervals do not overlap, so B_simple moves over the run (too few \
                 steps for the drift test of two windows)",
                s.now.first_step,
                s.now.last_step,
                significant(s.now.b_simple.unwrap_or(f64::NAN), 4),
                significant(s.now.ci[0], 4),
                significant(s.now.ci[1], 4),
                significant(s.b_simple.unwrap_or(f64::NAN), 4),
                significant(s.ci[0], 4),
                significant(s.ci[1], 4)
            ),
        ));
    }
    // A window chosen so long that two no longer fit, where the default's would: the drift
    // test was not skipped for lack of steps but by the choice, and cannot say "stable".
    let default_window = EstimatorSettings {
        window_steps: None,
        ..settings.clone()
    }
    .window_for(s.steps);
    if s.drift.is_none()
        && settings.window_steps.is_some()
        && s.steps >= default_window.saturating_mul(2)
    {
        soft.push(reason(
            K::Drift,
            format!(
                "drift not measured: a window of {} steps leaves no room for two in {} usable \
                 steps (with the default window, {default_window} steps, the first and the last \
                 would be compared): choose a window under half the run",
                settings.window_for(s.steps),
                s.steps
            ),
        ));
    }
    if s.ci[0] <= 0.0 || s.ci[1] / s.ci[0] > 2.0 {
        soft.push(reason(
            K::WideInterval,
            format!(
                "the run-wide interval [{}, {}] spans more than x2",
                significant(s.ci[0], 4),
                significant(s.ci[1], 4)
            ),
        ));
    }
    for d in s
        .diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Warning)
    {
        let mut r = reason(d.kind, d.message.clone());
        if d.kind == K::Drift && !now_bounded {
            // The drift's usual advice reads the `now` value, which has no bound here (the
            // reason above says so): the trajectory is what is left to read.
            r.action = "read the trajectory, not the run-wide value (the `now` value has no \
                        bound yet); re-plan the batch size as B_crit moves"
                .to_string();
        }
        soft.push(r);
    }
    if soft.is_empty() {
        (Verdict::Stable, soft)
    } else {
        (Verdict::Noisy, soft)
    }
}

/// Sequence length in tokens: median of Δtokens / b_big over consecutive steps that both record
/// cumulative `tokens`.
pub(crate) fn infer_seq_len(records: &[&StepStats]) -> Option<f64> {
    let mut ratios: Vec<f64> = records
        .windows(2)
        .filter(|w| w[0].step.checked_add(1) == Some(w[1].step))
        .filter_map(|w| Some((w[1].tokens? - w[0].tokens?) / w[1].b_big))
        .filter(|x| x.is_finite() && *x > 0.0)
        .collect();
    if ratios.is_empty() {
        return None;
    }
    let mid = ratios.len() / 2;
    // The element a full sort would put in the middle, without sorting the rest.
    Some(*ratios.select_nth_unstable_by(mid, f64::total_cmp).1)
}
