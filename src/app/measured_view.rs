//! What the explorer shows of a measured run beyond its trajectory: the headline (where
//! B_crit is now and how it moved, the run-wide value labelled as such), the causes the
//! diagnostics locate (placed on the timeline), per-layer B_simple over time, and a second run
//! laid over the first (`open A --compare B`). Pure functions of the analysis; every number
//! here is also in `copus analyze --json` (`summary.now`, `summary.drift`,
//! `summary.run_wide`, `diagnostics[].at`, `steps[].layers`, `--compare`'s `comparison`).

use crate::format::si;
use crate::stats::analysis::compare::{SharedEnd, WindowRatio};
use crate::stats::{AnalyzeReport, Comparison, DiagnosticKind, LayerPoint};
use crate::trajectory::{Trajectory, TrajectoryPoint};

/// An interval as "[lo – hi]" (compact numbers; an unbounded hi as ∞).
pub fn interval_words(ci: [f64; 2]) -> String {
    let hi = if ci[1].is_finite() {
        si(ci[1])
    } else {
        "∞".into()
    };
    format!("[{}–{hi}]", si(ci[0]))
}

/// A factor as "×6.74" (two decimals below 10, one below 100, else compact: "×13.9", "×106").
pub fn factor_words(x: f64) -> String {
    // About three significant digits at every size: "×27 [6.68–106]" mixed precisions
    // inside one interval.
    if x.abs() < 10.0 {
        format!("×{x:.2}")
    } else if x.abs() < 100.0 {
        format!("×{x:.1}")
    } else {
        format!("×{}", si(x))
    }
}

/// The headline of a measured run as short segments, most important first: where B_simple is
/// now (last window, samples, with its interval), how it moved (drift factor with interval, or
/// "steady"), and the run-wide value labelled "run-wide". The view drops segments from the end
/// when they do not fit.
pub fn headline_segments(report: &AnalyzeReport) -> Vec<String> {
    headline_segments_in(report, "samples")
}

pub use crate::format::sample_word;

/// [`headline_segments`] with B_simple counted in `unit` ([`sample_word`]), as the timeline's
/// title above it counts B_crit.
pub fn headline_segments_in(report: &AnalyzeReport, unit: &str) -> Vec<String> {
    let s = &report.summary;
    let mut out = Vec::new();
    // "last N steps", not "now": the title above shows the smoothed value at the cursor,
    // another estimator, and two different numbers must not both be called "now".
    // A window that covers the whole run (a run shorter than two windows, a live run early
    // on) is the run-wide value again: said so, not "last N steps" beside the same number.
    let window = if s.now.steps >= s.steps {
        format!("all {} steps", s.now.steps)
    } else {
        format!("last {} steps", s.now.steps)
    };
    out.push(match s.now.b_simple {
        Some(b) => format!("{window} {} {unit} {}", si(b), interval_words(s.now.ci)),
        None => format!("{window} n/a (|G|² ≤ 0 there)"),
    });
    out.extend(smoother_behind(report));
    out.push(match &s.drift {
        Some(d) if d.significant => {
            let verb = if d.factor >= 1.0 { "grew" } else { "shrank" };
            format!(
                "{verb} {} [{}–{}]",
                factor_words(d.factor),
                factor_words(d.ci[0]).trim_start_matches('×'),
                factor_words(d.ci[1]).trim_start_matches('×')
            )
        }
        Some(d) if d.ci[0] > 1.0 || d.ci[1] < 1.0 => format!(
            "moved a little ({} [{}–{}], below the drift threshold)",
            factor_words(d.factor),
            factor_words(d.ci[0]).trim_start_matches('×'),
            factor_words(d.ci[1]).trim_start_matches('×')
        ),
        Some(d) => format!("steady ({} within its interval)", factor_words(d.factor)),
        None => format!("drift not measured ({})", s.why_no_drift()),
    });
    out.push(match s.b_simple {
        Some(b) => format!("run-wide {} {}", si(b), interval_words(s.ci)),
        None => "run-wide n/a".into(),
    });
    out
}

/// A segment when the smoothed B_simple at the last analysed step (what the title, the heatmap
/// and the recommendation use there) and the last window's disagree beyond both intervals: a
/// smoother lags a fast change (a live run's one-sided one most, early in the run), and the
/// two numbers must not stand side by side unexplained. `None` when they agree.
fn smoother_behind(report: &AnalyzeReport) -> Option<String> {
    let s = &report.summary;
    let last = report.steps.last()?;
    let (now, smoothed) = (s.now.b_simple?, last.b_simple?);
    let disjoint = s.now.ci[0] > last.ci[1] || last.ci[0] > s.now.ci[1];
    (disjoint && last.step >= s.now.first_step).then(|| {
        let how = if smoothed < now { "behind" } else { "ahead of" };
        format!(
            "the smoothed value at step {}, {} {}, is {how} this window beyond both intervals: \
             the smoother lags a fast change, read this window",
            last.step,
            si(smoothed),
            interval_words(last.ci)
        )
    })
}

/// [`headline_segments`] of a live run's latest full analysis, which runs every few seconds
/// while records arrive every step: the first segment says the step it reaches, so that it
/// does not read as the step in the title above it.
pub fn live_headline_segments(report: &AnalyzeReport) -> Vec<String> {
    live_headline_segments_in(report, "samples")
}

/// [`live_headline_segments`] in `unit` ([`headline_segments_in`]).
pub fn live_headline_segments_in(report: &AnalyzeReport, unit: &str) -> Vec<String> {
    let mut out = headline_segments_in(report, unit);
    if let Some(first) = out.first_mut() {
        *first = format!("to step {}: {first}", report.summary.now.last_step);
    }
    out
}

/// Join `segments` with " · " in order, leaving out each one that would overflow `width`
/// columns (the first always stays, cut with "…" if even that is too wide).
pub fn fit_segments(segments: &[String], width: usize) -> String {
    let mut out = String::new();
    for seg in segments {
        let candidate = if out.is_empty() {
            seg.clone()
        } else {
            format!("{out} · {seg}")
        };
        if candidate.chars().count() <= width {
            out = candidate;
        } else if out.is_empty() {
            let cut: String = seg.chars().take(width.saturating_sub(1)).collect();
            return format!("{cut}…");
        }
        // A segment that does not fit is left out; a shorter later one may still fit.
    }
    out
}

/// A cause the diagnostics locate at steps, marked on the timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum CauseKind {
    /// A learning-rate change point (`lr_change`).
    LrChange,
    /// A sudden level jump of the squared norms by a power of 4 (`loss_scale_jump`).
    LossScaleJump,
    /// A sudden level jump by another factor (`level_jump`).
    LevelJump,
    /// A stretch where the smoothed |G|² is not positive (`non_positive_smoothed_g2`).
    NonPositiveG2,
    /// Steps skipped for NaN/Inf values (`non_finite_skipped`).
    NonFinite,
}

impl CauseKind {
    /// The glyph marking it on the timeline's axis (reads without colour).
    pub fn glyph(self) -> char {
        match self {
            CauseKind::LrChange => '◆',
            CauseKind::LossScaleJump => '↯',
            CauseKind::LevelJump => '↕',
            CauseKind::NonPositiveG2 => '░',
            CauseKind::NonFinite => '✕',
        }
    }

    /// Its legend entry (short).
    pub fn label(self) -> &'static str {
        match self {
            CauseKind::LrChange => "lr change",
            CauseKind::LossScaleJump => "loss-scale jump",
            CauseKind::LevelJump => "level jump",
            CauseKind::NonPositiveG2 => "|G|²≤0",
            CauseKind::NonFinite => "NaN step",
        }
    }

    /// The diagnostic it comes from.
    pub fn diagnostic(self) -> DiagnosticKind {
        match self {
            CauseKind::LrChange => DiagnosticKind::LrChange,
            CauseKind::LossScaleJump => DiagnosticKind::LossScaleJump,
            CauseKind::LevelJump => DiagnosticKind::LevelJump,
            CauseKind::NonPositiveG2 => DiagnosticKind::NonPositiveSmoothedG2,
            CauseKind::NonFinite => DiagnosticKind::NonFiniteSkipped,
        }
    }

    /// The cause a diagnostic kind is marked as, if it is one.
    pub fn of(kind: DiagnosticKind) -> Option<Self> {
        [
            CauseKind::LrChange,
            CauseKind::LossScaleJump,
            CauseKind::LevelJump,
            CauseKind::NonPositiveG2,
            CauseKind::NonFinite,
        ]
        .into_iter()
        .find(|c| c.diagnostic() == kind)
    }
}

/// One located cause: its kind, the steps (first, last) and where they fall in tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cause {
    /// What it is.
    pub kind: CauseKind,
    /// First and last optimizer step.
    pub steps: [u64; 2],
    /// First and last position in tokens (of the nearest trajectory points).
    pub tokens: [f64; 2],
}

/// Tokens at optimizer step `step` on `traj`: the point with that step, else the nearest one
/// by step (a skipped NaN step has no point of its own); `None` on an empty trajectory.
pub fn tokens_at_step(traj: &Trajectory, step: u64) -> Option<f64> {
    let pts = &traj.points;
    let i = pts.partition_point(|p| p.step < step);
    [i.checked_sub(1), Some(i)]
        .into_iter()
        .flatten()
        .filter_map(|j| pts.get(j))
        .min_by_key(|p| p.step.abs_diff(step))
        .map(|p| p.tokens)
}

/// Every located cause of `report`'s diagnostics, placed on `traj` (ordered by kind, then
/// step). Diagnostics located only by a step range (`steps`, no `at`) are marked at that range.
pub fn causes(report: &AnalyzeReport, traj: &Trajectory) -> Vec<Cause> {
    let mut out = Vec::new();
    for d in &report.summary.diagnostics {
        let Some(kind) = CauseKind::of(d.kind) else {
            continue;
        };
        let at: Vec<[u64; 2]> = if d.at.is_empty() {
            d.steps.into_iter().collect()
        } else {
            d.at.clone()
        };
        for [a, b] in at {
            if let (Some(ta), Some(tb)) = (tokens_at_step(traj, a), tokens_at_step(traj, b)) {
                out.push(Cause {
                    kind,
                    steps: [a, b],
                    tokens: [ta, tb],
                });
            }
        }
    }
    out.sort_by(|x, y| x.kind.cmp(&y.kind).then(x.steps.cmp(&y.steps)));
    out
}

/// The layers of `report`, largest share of tr(Σ) first (the order the panels list them).
pub fn layer_names(report: &AnalyzeReport) -> Vec<String> {
    let mut layers: Vec<_> = report.summary.layers.iter().collect();
    layers.sort_by(|a, b| b.trace_share.total_cmp(&a.trace_share));
    layers.into_iter().map(|l| l.name.clone()).collect()
}

/// Layer `name`'s smoothed B_simple over training, at the points of `traj` (same steps and
/// tokens, samples; points where the layer has no positive estimate are left out).
pub fn layer_trajectory(report: &AnalyzeReport, name: &str, traj: &Trajectory) -> Trajectory {
    let points = traj
        .points
        .iter()
        .filter_map(|p| {
            let lp = layer_at(report, p.step, name)?;
            let b = lp.b_simple.filter(|b| b.is_finite() && *b > 0.0)?;
            let [lo, hi] = lp.ci;
            Some(TrajectoryPoint {
                b_crit: b,
                ci: (lo.is_finite() && hi.is_finite() && lo > 0.0).then_some((lo, hi)),
                loss: None,
                ..*p
            })
        })
        .collect();
    Trajectory {
        label: format!("layer {name}"),
        seq_len: traj.seq_len,
        points,
    }
}

/// Layer `name` at optimizer step `step`, if the analysis has that step and layer.
pub fn layer_at(report: &AnalyzeReport, step: u64, name: &str) -> Option<LayerPoint> {
    let i = report.steps.binary_search_by_key(&step, |r| r.step).ok()?;
    report.steps[i].layers.get(name).copied()
}

/// A second run laid over the explorer's (`copus open A --compare B`).
#[derive(Debug, Clone, PartialEq)]
pub struct CompareRun {
    /// What B is (its file name).
    pub label: String,
    /// B's trajectory, counted in A's samples (equal tokens) so both share the axis.
    pub trajectory: Trajectory,
    /// The comparison of B with A (`stats::analysis::compare`).
    pub comparison: Comparison,
}

/// The stretches where B's and A's intervals do not overlap, as token ranges.
pub fn differ_stretches(c: &CompareRun, a: &Trajectory) -> Vec<[f64; 2]> {
    c.comparison
        .differs
        .iter()
        .filter_map(|d| {
            Some([
                tokens_at_step(a, d.steps_a[0])?,
                tokens_at_step(a, d.steps_a[1])?,
            ])
        })
        .collect()
}

/// A ratio with its interval in words: "×1.02 [0.81–1.29]", "differs" where the interval
/// excludes 1, "(CI unbounded)" where there is none (an estimate's interval is unbounded).
fn ratio_words(r: &WindowRatio) -> String {
    let ci = match r.ci {
        Some(ci) => format!(
            " [{}–{}]",
            factor_words(ci[0]).trim_start_matches('×'),
            factor_words(ci[1]).trim_start_matches('×')
        ),
        None => " (CI unbounded)".into(),
    };
    format!(
        "{}{ci}{}",
        factor_words(r.ratio),
        if r.differs { " differs" } else { "" }
    )
}

/// The latest stretch both runs reach in words, on the explorer's own axis (A's steps and
/// tokens as the trajectory counts them; a comparison's own positions are in the records'
/// tokens, which `--seq-len` may rescale): "A steps 1350–1499, to 786.4M tok".
fn shared_end_words(end: &SharedEnd, a: &Trajectory) -> String {
    let [first, last] = end.steps_a;
    match tokens_at_step(a, last) {
        Some(t) => format!(
            "A steps {first}–{last}, to {} tok",
            crate::format::tokens(t)
        ),
        None => format!("A steps {first}–{last}"),
    }
}

/// B over A where the two runs are compared "now": each run's last window where those overlap
/// in training, else over the shorter run's last window (the runs end apart: A's last window
/// over B's compared two points in training), in words with its interval, positions on A's
/// trajectory `a`.
fn now_words(c: &Comparison, a: &Trajectory) -> String {
    match read_now(c) {
        Some((r, Some(end))) => format!(
            "B/A {} at {} (latest shared)",
            ratio_words(r),
            shared_end_words(end, a)
        ),
        Some((r, None)) => format!("B/A now {}", ratio_words(r)),
        None => "B/A now n/a".into(),
    }
}

/// The ratio a comparison is read by "now": the shared end's (with it) where the runs' last
/// windows do not overlap, else the last windows'; `None` without either.
fn read_now(c: &Comparison) -> Option<(&WindowRatio, Option<&SharedEnd>)> {
    match (&c.now, &c.shared_end) {
        (_, Some(end)) if !c.now_windows_overlap => Some((&end.ratio, Some(end))),
        (Some(r), _) => Some((r, None)),
        _ => None,
    }
}

/// The one-line summary of a comparison: B over A now (with interval; at the latest shared
/// point where the runs end apart), and the share of the aligned points where the intervals
/// are apart.
pub fn compare_summary(c: &Comparison, a: &Trajectory) -> String {
    format!(
        "{} · apart on {:.0}% of {} points ({} stretch{})",
        now_words(c, a),
        100.0 * c.differs_share,
        c.points.len(),
        c.differs.len(),
        if c.differs.len() == 1 { "" } else { "es" }
    )
}

/// The comparison in a few words for the timeline's headline, as two segments (each left
/// out alone where it does not fit): B over A with its interval, "now" or at the shared end
/// where the runs end apart ("(CI unbounded)" where there is no interval, never a bare
/// factor), then the share of the points where the intervals are apart.
pub fn compare_headline(c: &Comparison) -> Vec<String> {
    let ratio = match read_now(c) {
        Some((r, Some(_))) => format!("B/A {} at shared end", ratio_words(r)),
        Some((r, None)) => format!("B/A now {}", ratio_words(r)),
        None => "B/A now n/a".into(),
    };
    vec![ratio, format!("B≠A on {:.0}%", 100.0 * c.differs_share)]
}

#[cfg(test)]
mod tests {
    /// About three significant digits at every size, so one interval does not mix precisions
    /// ("×27 [6.68–106]").
    #[test]
    fn factors_keep_three_digits() {
        let f = super::factor_words;
        assert_eq!(f(6.744), "×6.74");
        assert_eq!(f(13.91), "×13.9");
        assert_eq!(f(26.64), "×26.6");
        assert_eq!(f(106.29), "×106");
    }
}
