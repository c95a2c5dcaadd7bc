//! Two runs side by side: their smoothed B_simple trajectories aligned by tokens (or by steps
//! when either run records no tokens), the stretches where their intervals do not overlap, and
//! the ratio of their "now" and run-wide estimates with an interval. The debugging question it
//! answers: "what did this change do to B_crit?".
//!
//! Two intervals at the same point that do not overlap is a conservative test of a difference
//! (for two 95% intervals of similar width it is about a 99.5% test); smoothed neighbouring
//! steps are strongly correlated, so differences come in stretches, reported as such.

use crate::EstimatorSettings;
use crate::analysis::summarize::{Series, window_over};
use crate::diagnostics::MAX_LOCATED;
use crate::estimate::interval::z_for;
use crate::estimate::window::WindowEstimate;
use crate::report::{AnalyzeReport, StepRow};
use serde::Serialize;

/// What the two trajectories are aligned by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AlignedBy {
    /// Cumulative tokens (both runs record `tokens` on every step).
    Tokens,
    /// Optimizer steps (either run lacks tokens).
    Steps,
}

/// One aligned point: a step of run A and the nearest step of run B at the same position.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ComparePoint {
    /// Position on the alignment axis (tokens, or steps as a number).
    pub at: f64,
    /// Step of run A.
    pub step_a: u64,
    /// Nearest step of run B at the same position.
    pub step_b: u64,
    /// Smoothed B_simple of run A (samples).
    pub b_simple_a: Option<f64>,
    /// Interval of run A's B_simple; hi `null` = unbounded.
    pub ci_a: [f64; 2],
    /// Smoothed B_simple of run B (samples).
    pub b_simple_b: Option<f64>,
    /// Interval of run B's B_simple.
    pub ci_b: [f64; 2],
    /// B over A, when both are positive.
    pub ratio: Option<f64>,
    /// True when the two intervals do not overlap.
    pub differs: bool,
}

/// A contiguous stretch of aligned points whose intervals do not overlap.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DiffStretch {
    /// First and last position on the alignment axis.
    pub at: [f64; 2],
    /// First and last step of run A in the stretch.
    pub steps_a: [u64; 2],
    /// First and last step of run B in the stretch.
    pub steps_b: [u64; 2],
    /// True when run B is higher than run A there.
    pub b_higher: bool,
    /// Median ratio B/A over the stretch.
    pub median_ratio: f64,
}

/// Ratio of two window estimates (B over A) with an approximate interval.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WindowRatio {
    /// B_simple of run B over that of run A.
    pub ratio: f64,
    /// Interval of the ratio (log-normal; each run's ln-scale standard error read off its
    /// interval as (ln hi − ln lo)/(2z); the runs are independent); `null` when an interval is
    /// unbounded or touches 0.
    pub ci: Option<[f64; 2]>,
    /// True when the interval excludes 1.
    pub differs: bool,
}

/// B over A over one stretch of training at the end of the shorter run: that run's last
/// window and the longer run's window over the same span, both estimated as each run's
/// windows are ([`crate::analysis::summarize::window_over`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SharedEnd {
    /// The span on the alignment axis (tokens, or steps as numbers): the shorter run's last
    /// window.
    pub at: [f64; 2],
    /// First and last step of run A's window over the span.
    pub steps_a: [u64; 2],
    /// First and last step of run B's window over the span.
    pub steps_b: [u64; 2],
    /// B's window estimate over A's, with its interval.
    #[serde(flatten)]
    pub ratio: WindowRatio,
}

/// The comparison of run B with run A.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// Axis of the alignment.
    pub aligned_by: AlignedBy,
    /// Aligned points: every step of A within B's range on the axis.
    pub points: Vec<ComparePoint>,
    /// Stretches where the intervals do not overlap (at most 100).
    pub differs: Vec<DiffStretch>,
    /// Share of aligned points whose intervals do not overlap.
    pub differs_share: f64,
    /// B's "now" (last window) over A's: each run's own last window, which are not the
    /// same point in training when the runs end apart (see `now_windows`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub now: Option<WindowRatio>,
    /// Where the two "now" windows lie on the alignment axis: `[[A first, A last], [B first,
    /// B last]]` (tokens, or steps as numbers); `null` where a run's window has no position.
    pub now_windows: Option<[[f64; 2]; 2]>,
    /// True when the two "now" windows overlap on the axis (the same stretch of training), so
    /// `now` compares like with like.
    pub now_windows_overlap: bool,
    /// Where the "now" windows do not overlap: B over A over the shorter run's last window,
    /// the latest stretch of training both runs reach (what to read instead of `now`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shared_end: Option<SharedEnd>,
    /// B's run-wide estimate over A's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_wide: Option<WindowRatio>,
}

/// Compare run `b` with run `a`, both analysed with `settings` (its confidence is the window
/// ratios'; its windows, the shared end's).
pub fn compare(a: &AnalyzeReport, b: &AnalyzeReport, settings: &EstimatorSettings) -> Comparison {
    let confidence = settings.confidence;
    let has_tokens = |r: &AnalyzeReport| {
        !r.steps.is_empty()
            && r.steps
                .iter()
                .all(|s| s.tokens.is_some_and(|t| t.is_finite()))
    };
    let aligned_by = if has_tokens(a) && has_tokens(b) {
        AlignedBy::Tokens
    } else {
        AlignedBy::Steps
    };
    let pos = |s: &StepRow| match aligned_by {
        AlignedBy::Tokens => s.tokens.unwrap_or(0.0),
        AlignedBy::Steps => s.step as f64,
    };
    let mut b_rows: Vec<&StepRow> = b.steps.iter().collect();
    b_rows.sort_by(|x, y| pos(x).total_cmp(&pos(y)));
    let mut points = Vec::new();
    if let (Some(lo), Some(hi)) = (b_rows.first(), b_rows.last()) {
        let (lo, hi) = (pos(lo), pos(hi));
        for ra in a.steps.iter().filter(|r| (lo..=hi).contains(&pos(r))) {
            let x = pos(ra);
            let i = b_rows.partition_point(|r| pos(r) < x);
            let rb = [i.checked_sub(1), Some(i)]
                .into_iter()
                .flatten()
                .filter_map(|j| b_rows.get(j))
                .min_by(|p, q| (pos(p) - x).abs().total_cmp(&(pos(q) - x).abs()));
            let Some(rb) = rb else { continue };
            // Only where both runs have an estimate: a non-positive smoothed |G|² gives no
            // B_simple, whatever its interval says.
            let differs = ra.b_simple.is_some()
                && rb.b_simple.is_some()
                && (ra.ci[1] < rb.ci[0] || rb.ci[1] < ra.ci[0]);
            points.push(ComparePoint {
                at: x,
                step_a: ra.step,
                step_b: rb.step,
                b_simple_a: ra.b_simple,
                ci_a: ra.ci,
                b_simple_b: rb.b_simple,
                ci_b: rb.ci,
                ratio: ra
                    .b_simple
                    .zip(rb.b_simple)
                    .filter(|(x, y)| *x > 0.0 && *y > 0.0)
                    .map(|(x, y)| y / x),
                differs,
            });
        }
    }
    let differs = stretches(&points);
    let share = if points.is_empty() {
        0.0
    } else {
        points.iter().filter(|p| p.differs).count() as f64 / points.len() as f64
    };
    let window_at = |r: &AnalyzeReport, w: &WindowEstimate| -> Option<[f64; 2]> {
        // The row at the step, or the nearest (a coarsened report keeps merged steps).
        let at = |step: u64| {
            r.steps
                .iter()
                .min_by_key(|s| s.step.abs_diff(step))
                .map(pos)
        };
        Some([at(w.first_step)?, at(w.last_step)?])
    };
    let now_windows = window_at(a, &a.summary.now).zip(window_at(b, &b.summary.now));
    let now_windows_overlap = now_windows.is_some_and(|([a0, a1], [b0, b1])| a0 <= b1 && b0 <= a1);
    let shared_end = now_windows
        .filter(|_| !now_windows_overlap)
        .and_then(|(wa, wb)| {
            // The run that ends first keeps its own last window; the other is estimated
            // over the same span.
            if wa[1] <= wb[1] {
                let other = window_at_span(b, wa, &pos, settings)?;
                shared(wa, &a.summary.now, &other, settings.confidence)
            } else {
                let other = window_at_span(a, wb, &pos, settings)?;
                shared(wb, &other, &b.summary.now, settings.confidence)
            }
        });
    Comparison {
        aligned_by,
        differs,
        differs_share: share,
        points,
        now: window_ratio(&a.summary.now, &b.summary.now, confidence),
        now_windows: now_windows.map(|(x, y)| [x, y]),
        now_windows_overlap,
        shared_end,
        run_wide: window_ratio(&a.summary.run_wide, &b.summary.run_wide, confidence),
    }
}

/// `r`'s window over the rows whose position (`pos`) lies in `span`, estimated as its own
/// windows are; `None` where no row lies there.
fn window_at_span(
    r: &AnalyzeReport,
    span: [f64; 2],
    pos: &dyn Fn(&StepRow) -> f64,
    settings: &EstimatorSettings,
) -> Option<WindowEstimate> {
    let inside = |s: &StepRow| (span[0]..=span[1]).contains(&pos(s));
    let first = r.steps.iter().position(inside)?;
    let last = r.steps.iter().rposition(inside)?;
    let steps: Vec<u64> = r.steps.iter().map(|s| s.step).collect();
    let trace: Vec<f64> = r.steps.iter().map(|s| s.trace_step).collect();
    let g2: Vec<f64> = r.steps.iter().map(|s| s.g2_step).collect();
    let b_big: Vec<f64> = r.steps.iter().map(|s| s.b_big).collect();
    let series = Series {
        steps: &steps,
        trace: &trace,
        g2: &g2,
        b_big: &b_big,
    };
    window_over(&series, settings, first..last + 1).map(|w| (&w).into())
}

/// The shared end over `span` from A's and B's windows there.
fn shared(
    span: [f64; 2],
    a: &WindowEstimate,
    b: &WindowEstimate,
    confidence: f64,
) -> Option<SharedEnd> {
    Some(SharedEnd {
        at: span,
        steps_a: [a.first_step, a.last_step],
        steps_b: [b.first_step, b.last_step],
        ratio: window_ratio(a, b, confidence)?,
    })
}

impl Comparison {
    /// Multiply every position on a token axis by `factor` (a user's `--seq-len` read against
    /// the records' own tokens per sample); positions on a step axis stay.
    pub fn scale_tokens(&mut self, factor: f64) {
        if self.aligned_by != AlignedBy::Tokens || !(factor.is_finite() && factor > 0.0) {
            return;
        }
        for p in &mut self.points {
            p.at *= factor;
        }
        for d in &mut self.differs {
            d.at = d.at.map(|x| x * factor);
        }
        if let Some(w) = &mut self.now_windows {
            *w = w.map(|span| span.map(|x| x * factor));
        }
        if let Some(end) = &mut self.shared_end {
            end.at = end.at.map(|x| x * factor);
        }
    }
}

fn stretches(points: &[ComparePoint]) -> Vec<DiffStretch> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < points.len() && out.len() < MAX_LOCATED {
        let p = &points[i];
        let higher = p.ci_b[0] > p.ci_a[1];
        if !p.differs {
            i += 1;
            continue;
        }
        let mut j = i;
        while j + 1 < points.len()
            && points[j + 1].differs
            && (points[j + 1].ci_b[0] > points[j + 1].ci_a[1]) == higher
        {
            j += 1;
        }
        let mut ratios: Vec<f64> = points[i..=j].iter().filter_map(|p| p.ratio).collect();
        ratios.sort_by(f64::total_cmp);
        out.push(DiffStretch {
            at: [points[i].at, points[j].at],
            steps_a: [points[i].step_a, points[j].step_a],
            steps_b: [points[i].step_b, points[j].step_b],
            b_higher: higher,
            median_ratio: ratios.get(ratios.len() / 2).copied().unwrap_or(f64::NAN),
        });
        i = j + 1;
    }
    out
}

/// Ratio of window estimates with an approximate log-normal interval.
pub fn window_ratio(
    a: &WindowEstimate,
    b: &WindowEstimate,
    confidence: f64,
) -> Option<WindowRatio> {
    ratio_of((a.b_simple?, a.ci), (b.b_simple?, b.ci), confidence)
}

/// B over A from two estimates with their intervals (`confidence`), with an approximate
/// log-normal interval; `None` unless both estimates are positive.
fn ratio_of(
    (ba, ci_a): (f64, [f64; 2]),
    (bb, ci_b): (f64, [f64; 2]),
    confidence: f64,
) -> Option<WindowRatio> {
    if !(ba > 0.0 && bb > 0.0) {
        return None;
    }
    let z = z_for(confidence);
    let se =
        |[lo, hi]: [f64; 2]| (lo > 0.0 && hi.is_finite()).then(|| (hi.ln() - lo.ln()) / (2.0 * z));
    let ratio = bb / ba;
    let ci = se(ci_a).zip(se(ci_b)).map(|(sa, sb)| {
        let half = z * (sa * sa + sb * sb).sqrt();
        [ratio * (-half).exp(), ratio * half.exp()]
    });
    Some(WindowRatio {
        ratio,
        ci,
        differs: ci.is_some_and(|c| c[0] > 1.0 || c[1] < 1.0),
    })
}
