//! Where the noise scale is now and how it moved: the ratio of means over the last window of
//! steps, and the drift between the first and the last window with the interval of the growth
//! factor.
//!
//! The run-wide ratio of means weights every step by its |G|², which is largest early in
//! training, so on a run whose B_simple grows it sits near the early values. The last window
//! says where the run is now; the drift factor says how far it moved, and is reported only when
//! its whole interval lies beyond `drift_min_factor` (×1.25 by default) or below its inverse:
//! the change exceeds the uncertainty by a margin that matters. (A bare "interval excludes 1"
//! rule would flag one steady run in twenty.)

use crate::analysis::summarize::WindowPoint;
use crate::estimate::interval::z_for;
use serde::Serialize;

/// B_simple over a contiguous window of steps (ratio of the window means of tr(Σ) and |G|²).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WindowEstimate {
    /// First optimizer step of the window.
    pub first_step: u64,
    /// Last optimizer step of the window.
    pub last_step: u64,
    /// Usable steps in the window.
    pub steps: usize,
    /// B_simple in samples; `null` when the window's mean |G|² is not positive.
    pub b_simple: Option<f64>,
    /// Interval of `b_simple` (Fieller, detrended HAC variance); hi `null` = unbounded.
    #[serde(serialize_with = "crate::estimate::interval::serialize_ci")]
    pub ci: [f64; 2],
    /// Window-mean |G|².
    pub g2: f64,
    /// Window-mean tr(Σ).
    pub trace_sigma: f64,
}

impl From<&WindowPoint> for WindowEstimate {
    fn from(w: &WindowPoint) -> Self {
        Self {
            first_step: w.first_step,
            last_step: w.last_step,
            steps: w.steps,
            b_simple: w.point.b_simple,
            ci: w.point.ci,
            g2: w.point.g2,
            trace_sigma: w.point.trace,
        }
    }
}

/// How B_simple moved from the first to the last window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Drift {
    /// The first window.
    pub from: WindowEstimate,
    /// The last window (the same as the summary's `now`).
    pub to: WindowEstimate,
    /// Growth factor B_simple(last window) / B_simple(first window); < 1 when it shrank.
    pub factor: f64,
    /// Interval of the factor at the report's confidence (log-normal, delta method on
    /// ln T̄ − ln Ḡ of each window; the windows are disjoint and treated as independent).
    pub ci: [f64; 2],
    /// True when the whole interval lies above `drift_min_factor` (or below its inverse): the
    /// estimate changes by more than its uncertainty, and by a factor that matters.
    pub significant: bool,
    /// The smallest factor that counts as drift (`drift_min_factor`).
    pub min_factor: f64,
}

/// The drift between two disjoint windows; `None` when either window has no positive estimate
/// or no finite variance.
pub fn drift(
    first: &WindowPoint,
    last: &WindowPoint,
    confidence: f64,
    min_factor: f64,
) -> Option<Drift> {
    let (b0, b1) = (first.point.b_simple?, last.point.b_simple?);
    let v = first.var_ln? + last.var_ln?;
    if !(b0 > 0.0 && b1 > 0.0) {
        return None;
    }
    let ln = (b1 / b0).ln();
    let half = z_for(confidence) * v.sqrt();
    let ci = [(ln - half).exp(), (ln + half).exp()];
    let factor = b1 / b0;
    Some(Drift {
        from: first.into(),
        to: last.into(),
        factor,
        ci,
        significant: ci[0] > min_factor || ci[1] < 1.0 / min_factor,
        min_factor,
    })
}
