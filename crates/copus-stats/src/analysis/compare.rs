//! Two runs side by side: their smoothed B_simple trajectories aligned by tokens (or by steps
//! when either run records no tokens), the stretches where their intervals do not overlap, and
//! the ratio of their "now" and run-wide estimates with an interval. The debugging question it
//! answers: "what did this change do to B_crit?".
//!
//! Two intervals at the same point that do not overlap is a conservative test of a difference
//! (for two 95% intervals of similar width it is about a 99.5% test); smoothed neighbouring
//! steps are strongly correlated, so differences come in stretches, reported as such.

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
    /// B's "now" (last window) over A's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub now: Option<WindowRatio>,
    /// B's run-wide estimate over A's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_wide: Option<WindowRatio>,
}

/// Compare run `b` with run `a` (both analysed at the same confidence for meaningful
/// intervals; `confidence` is used for the window ratios).
pub fn compare(a: &AnalyzeReport, b: &AnalyzeReport, confidence: f64) -> Comparison {
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
    Comparison {
        aligned_by,
        differs,
        differs_share: share,
        points,
        now: window_ratio(&a.summary.now, &b.summary.now, confidence),
        run_wide: window_ratio(&a.summary.run_wide, &b.summary.run_wide, confidence),
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
    let (ba, bb) = (a.b_simple?, b.b_simple?);
    if !(ba > 0.0 && bb > 0.0) {
        return None;
    }
    let z = z_for(confidence);
    let se = |w: &WindowEstimate| {
        let [lo, hi] = w.ci;
        (lo > 0.0 && hi.is_finite()).then(|| (hi.ln() - lo.ln()) / (2.0 * z))
    };
    let ratio = bb / ba;
    let ci = se(a).zip(se(b)).map(|(sa, sb)| {
        let half = z * (sa * sa + sb * sb).sqrt();
        [ratio * (-half).exp(), ratio * half.exp()]
    });
    Some(WindowRatio {
        ratio,
        ci,
        differs: ci.is_some_and(|c| c[0] > 1.0 || c[1] < 1.0),
    })
}
