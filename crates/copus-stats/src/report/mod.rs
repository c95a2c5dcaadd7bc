//! The result of a noise-scale analysis, as `copus analyze --json` prints it and the TUI reads
//! it. B_simple and batch sizes are in **samples**; |G|² and tr(Σ) in the units of the squared
//! norms the producer sent. An infinite interval bound serialises as `null` (unbounded).

pub(crate) mod row_json;
pub mod stream;

use crate::diagnostics::{Diagnostic, DiagnosticKind, Severity};
use crate::estimate::per_step::EstimatorKind;
use crate::estimate::window::{Drift, WindowEstimate};
use crate::ingest::coarsen::Coarsening;
use serde::Serialize;
use std::collections::BTreeMap;

/// Whole analysis: run summary plus the smoothed trajectory, one row per usable step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AnalyzeReport {
    /// Run-level estimate, interval, layers and diagnostics.
    pub summary: Summary,
    /// Smoothed per-step trajectory.
    pub steps: Vec<StepRow>,
}

/// Overall trust in the summary estimate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Bounded, reasonably narrow interval and no warnings.
    Stable,
    /// Bounded interval, but wide (hi/lo > 2) or with warnings.
    Noisy,
    /// No upper bound, too few steps, or |G|² not positive.
    Unreliable,
}

impl Verdict {
    /// What the verdict means, in one sentence.
    pub fn meaning(self) -> &'static str {
        match self {
            Verdict::Stable => {
                "stable: the run-wide interval is bounded and narrow (hi/lo <= 2) and no warning \
                 bears on the estimate"
            }
            Verdict::Noisy => {
                "noisy: the run-wide interval is bounded, but it is wide (hi/lo > 2) or a warning \
                 bears on the estimate; read the reasons before trusting one number"
            }
            Verdict::Unreliable => {
                "unreliable: no usable number (the signal |G|^2 or the noise tr(Sigma) is not \
                 resolved, too few steps, or the interval cannot be estimated); the reasons say \
                 which"
            }
        }
    }
}

/// One reason for a verdict below `stable`, with what to do about it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Reason {
    /// The diagnostic behind it (`wide_interval` and `non_positive_g2` have no other entry).
    pub kind: DiagnosticKind,
    /// What is wrong, with numbers.
    pub message: String,
    /// What to do about it.
    pub action: String,
}

/// Run-level summary: where B_simple is now (last window), how it moved (drift), and the
/// run-wide ratio of the run-average tr(Σ) to the run-average |G|².
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// Run-wide B_simple = mean tr(Σ)/mean |G|² over all steps, in samples; `null` when the
    /// average |G|² is not positive; negative when the average tr(Σ) is (no batch-size
    /// estimate: the noise is not resolved, or the norms were written swapped). Dominated by steps where |G|² is large (early training):
    /// on a drifting run read `now`.
    pub b_simple: Option<f64>,
    /// Confidence interval of the run-wide `b_simple` (Fieller, autocorrelation-aware); hi
    /// `null` = unbounded.
    #[serde(serialize_with = "crate::estimate::interval::serialize_ci")]
    pub ci: [f64; 2],
    /// The run-wide estimate as a window covering every step (same numbers as `b_simple`,
    /// `ci`, `g2`, `trace_sigma`, labelled by its step range).
    pub run_wide: WindowEstimate,
    /// Where the estimate is now: the ratio of means over the last window of steps.
    pub now: WindowEstimate,
    /// First window against last window; absent when it was not measured (the reason is
    /// `drift_not_measured`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drift: Option<Drift>,
    /// Why `drift` is absent ([`drift_not_measured`]); absent when drift was measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drift_not_measured: Option<&'static str>,
    /// Run-average |G|² estimate.
    pub g2: f64,
    /// Run-average tr(Σ) estimate (per-sample covariance).
    pub trace_sigma: f64,
    /// Usable steps that entered the estimate.
    pub steps: usize,
    /// Lines of the input that were not protocol v1 records.
    pub malformed_lines: usize,
    /// Per-layer breakdown (empty when the records carry no layers).
    pub layers: Vec<LayerRow>,
    /// Reasons the estimate may be unstable or biased.
    pub diagnostics: Vec<Diagnostic>,
    /// Overall trust in the run-wide estimate.
    pub verdict: Verdict,
    /// What the verdict means (one sentence).
    pub verdict_meaning: String,
    /// Why the verdict is not `stable`, each with what to do (empty when stable).
    pub reasons: Vec<Reason>,
    /// Confidence level of every interval in the report.
    pub confidence: f64,
    /// Fraction of usable steps whose single-step |G|² estimate is negative.
    pub negative_g2_fraction: f64,
    /// Steps skipped because of NaN/±Inf values (lines and records).
    pub non_finite_skipped: usize,
    /// Records read once because they repeat an earlier record exactly (the same step and
    /// values: a line written twice), as `copus watch` counts them.
    pub duplicates_dropped: usize,
    /// Estimator of most steps.
    pub estimator: EstimatorKind,
    /// Smoother of the per-step trajectory, e.g. `two_sided(gaussian sigma=75 steps)`.
    pub smoother: String,
    /// σ of the two-sided Gaussian kernel, in steps (step numbers), as used: it detrends the
    /// per-step estimates for every interval and smooths the trajectory when `smoother` is
    /// two-sided (default: a fortieth of the records, 3 to 200 records, times the usual gap
    /// between logged steps).
    pub bandwidth_steps: f64,
    /// Sequence length in tokens: inferred from `tokens` and `b_big` where the records allow
    /// it; for a gradient dump, the one given with `--seq-len` (default 4096).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seq_len: Option<f64>,
    /// `b_simple × seq_len`: B_simple in tokens, when `seq_len` is known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub b_simple_tokens: Option<f64>,
    /// When the run was longer than the memory bound: how many records were read, how many
    /// were analysed and how many consecutive steps each stands for (each row of `steps` is
    /// then the mean of that many steps); absent when every step was analysed as read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub coarsened: Option<Coarsening>,
}

/// One layer's share of the noise and its own noise scale, from run-averaged sums.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LayerRow {
    /// Layer (tensor group) name as the producer sent it.
    pub name: String,
    /// Share of the summed per-layer tr(Σ) (can be < 0 for a noise-dominated layer).
    pub trace_share: f64,
    /// The layer's own B_simple in samples; `null` when its average |G|² is not positive.
    pub b_simple: Option<f64>,
    /// Interval of the layer's B_simple.
    #[serde(serialize_with = "crate::estimate::interval::serialize_ci")]
    pub ci: [f64; 2],
    /// Run-average tr(Σ) of the layer.
    pub trace_sigma: f64,
    /// Run-average |G|² of the layer.
    pub g2: f64,
    /// Steps that carried this layer.
    pub steps: usize,
}

/// One usable step of the smoothed trajectory.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepRow {
    /// Optimizer step.
    pub step: u64,
    /// Smoothed B_simple at this step (samples); `null` where the smoothed |G|² is not positive.
    pub b_simple: Option<f64>,
    /// Interval of the smoothed B_simple; hi `null` = unbounded.
    #[serde(serialize_with = "crate::estimate::interval::serialize_ci")]
    pub ci: [f64; 2],
    /// Mean over small batches of |g_small|² as recorded.
    pub sq_small: f64,
    /// |g_big|² as recorded.
    pub sq_big: f64,
    /// Samples per small batch.
    pub b_small: f64,
    /// Samples per big batch.
    pub b_big: f64,
    /// Smoothed |G|².
    pub g2: f64,
    /// Smoothed tr(Σ).
    pub trace_sigma: f64,
    /// This step's own (unsmoothed) |G|² estimate.
    pub g2_step: f64,
    /// This step's own (unsmoothed) tr(Σ) estimate.
    pub trace_step: f64,
    /// Teaching comparison: EMA of the per-step ratio (biased; never the estimate).
    pub ratio_ema: Option<f64>,
    /// Estimator of this step.
    pub estimator: EstimatorKind,
    /// Cumulative tokens, if recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens: Option<f64>,
    /// Loss (nats), if recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loss: Option<f64>,
    /// Learning rate, if recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lr: Option<f64>,
    /// Per-layer smoothed B_simple at this step (same smoother and interval construction as
    /// the whole model), by layer name; absent when the records carry no layers.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub layers: BTreeMap<String, LayerPoint>,
}

/// One layer's smoothed noise scale at one step.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LayerPoint {
    /// Smoothed B_simple of the layer (samples); `null` where its smoothed |G|² is not positive.
    pub b_simple: Option<f64>,
    /// Interval of the layer's smoothed B_simple; hi `null` = unbounded.
    #[serde(serialize_with = "crate::estimate::interval::serialize_ci")]
    pub ci: [f64; 2],
}

/// Why a run of `steps` usable steps, whose windows hold `window_steps` steps, has no drift
/// measurement: too short for two windows, or the first or the last window has no positive
/// estimate to compare.
pub fn drift_not_measured(steps: usize, window_steps: usize) -> &'static str {
    drift_not_measured_in(steps, window_steps, None)
}

/// [`drift_not_measured`] naming the window without a positive estimate where it is known:
/// `estimated` says whether the first and the last window have one.
pub fn drift_not_measured_in(
    steps: usize,
    window_steps: usize,
    estimated: Option<(bool, bool)>,
) -> &'static str {
    if steps < window_steps.saturating_mul(2) {
        return "fewer steps than two windows";
    }
    match estimated {
        Some((false, true)) => "no positive estimate in the first window",
        Some((true, false)) => "no positive estimate in the last window",
        Some((false, false)) => "no positive estimate in the first window nor in the last",
        _ => "no positive estimate in the first or the last window",
    }
}

impl Summary {
    /// Why drift was not measured (`drift_not_measured`, or the same reason derived from the
    /// step counts for a summary built without it).
    pub fn why_no_drift(&self) -> &'static str {
        self.drift_not_measured
            .unwrap_or_else(|| drift_not_measured(self.steps, self.now.steps))
    }

    /// True when any diagnostic is a warning.
    pub fn has_warnings(&self) -> bool {
        self.diagnostics
            .iter()
            .any(|d| d.severity == Severity::Warning)
    }
}
