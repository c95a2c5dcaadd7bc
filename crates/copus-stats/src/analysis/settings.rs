//! Estimator settings carried in sessions and set on the CLI (`copus analyze --smoother ...`).
//!
//! Every field has a serde default so older sessions keep loading.

use serde::{Deserialize, Serialize};

/// Which smoother turns per-step estimates of |G|² and tr(Σ) into a trajectory.
///
/// Numerator and denominator are always smoothed separately and divided afterwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum SmootherKind {
    /// Low-lag two-sided Gaussian kernel over steps, for recorded runs (the default).
    #[default]
    TwoSided,
    /// One-sided double EMA (Brown) decayed per sample (θ = decay^(b_big/B0)), normalised by
    /// its weight sum, for live runs where the future is not known yet. Unlike a plain EMA
    /// (which trails a moving noise scale by θ/(1−θ) steps) it has no lag on a linear trend;
    /// see `smoothing::one_sided_lag_corrected`.
    OneSided,
}

/// Which gradient's noise scale is estimated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum GradientKind {
    /// The raw gradient (`sq_small`, `sq_big`): McCandlish's B_simple.
    #[default]
    Raw,
    /// The Adam-preconditioned gradient P ⊙ g (the records' `precond` pair, written by
    /// `copus_hook.GradNoiseMeter(precondition=optimizer)`): the noise scale of the step Adam
    /// takes. Records without the pair are left out.
    AdamPreconditioned,
}

impl GradientKind {
    /// A short name for titles ("raw", "Adam-preconditioned").
    pub fn name(self) -> &'static str {
        match self {
            Self::Raw => "raw",
            Self::AdamPreconditioned => "Adam-preconditioned",
        }
    }
}

/// How the noise scale is estimated, smoothed and given an interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct EstimatorSettings {
    /// Confidence level of the reported intervals (e.g. 0.95), in (0, 1).
    pub confidence: f64,
    /// Smoother of the per-step trajectory.
    pub smoother: SmootherKind,
    /// Standard deviation of the two-sided Gaussian kernel, in **steps** (step numbers);
    /// `None` picks `clamp(records / 40, 3, 200)` records times the usual gap between logged
    /// steps ([`EstimatorSettings::bandwidth_for`]).
    pub bandwidth_steps: Option<f64>,
    /// One-sided EMA decay per reference batch B0 (θ = decay^(b_big/B0)); e.g. 0.99 remembers
    /// about 100 reference batches. Also used by the ratio-EMA teaching comparison.
    pub ema_decay: f64,
    /// Reference batch B0 of the per-sample decay, in **samples**; `None` = first step's b_big.
    pub reference_batch: Option<f64>,
    /// Autocorrelation window (Bartlett lag, in steps) of the interval variance, the length of a
    /// block of dependent steps; `None` picks the Newey–West rule ⌊4·(steps/100)^(2/9)⌋.
    pub block_length: Option<usize>,
    /// Fewer usable steps than this gives a "too few steps" warning.
    pub min_steps: usize,
    /// A layer holding more than this share of tr(Σ) (and more than 1.5× an even split over the
    /// k layers) gives a "dominating layer" warning.
    pub dominating_layer_share: f64,
    /// A larger fraction of negative per-step |G|² estimates than this gives a warning.
    pub negative_g2_warn: f64,
    /// Length in **steps** of the last window ("now") and of the first window the drift
    /// diagnostic compares it with; `None` picks `max(steps/10, min_steps)`, at most all steps.
    pub window_steps: Option<usize>,
    /// The drift diagnostic is reported when the interval of the growth factor between the first
    /// and the last window lies entirely above this factor (or below its inverse), e.g. 1.25.
    pub drift_min_factor: f64,
    /// Skipped steps (malformed, non-finite, invalid, producer-flagged) up to this fraction of
    /// all records are reported as information, above it as a warning.
    pub dropped_warn: f64,
    /// Which gradient's noise scale (raw, or Adam-preconditioned from `precond`).
    pub gradient: GradientKind,
    /// σ in **steps** of the kernel the run-wide and window intervals detrend by, where it is
    /// not the default one ([`EstimatorSettings::window_detrend_for`]): set only by the
    /// bounded-memory coarsening, for its merged records. Never read from or written to a
    /// session.
    #[serde(skip)]
    pub window_detrend_steps: Option<f64>,
}

impl Default for EstimatorSettings {
    fn default() -> Self {
        Self {
            confidence: 0.95,
            smoother: SmootherKind::TwoSided,
            bandwidth_steps: None,
            ema_decay: 0.99,
            reference_batch: None,
            block_length: None,
            min_steps: 50,
            dominating_layer_share: 0.5,
            negative_g2_warn: 0.3,
            window_steps: None,
            drift_min_factor: 1.25,
            dropped_warn: 0.01,
            gradient: GradientKind::Raw,
            window_detrend_steps: None,
        }
    }
}

impl EstimatorSettings {
    /// Check the settings; the message names the offending field.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.confidence > 0.0 && self.confidence < 1.0) {
            return Err(format!(
                "confidence must lie in (0, 1), got {}",
                self.confidence
            ));
        }
        if let Some(h) = self.bandwidth_steps
            && !(h.is_finite() && h >= MIN_BANDWIDTH_STEPS)
        {
            return Err(format!(
                "bandwidth_steps must be at least {MIN_BANDWIDTH_STEPS} step (a narrower kernel \
                 smooths nothing and the intervals collapse to zero width), got {h}"
            ));
        }
        if !(self.ema_decay > 0.0 && self.ema_decay < 1.0) {
            return Err(format!(
                "ema_decay must lie in (0, 1), got {}",
                self.ema_decay
            ));
        }
        if let Some(b0) = self.reference_batch
            && !(b0.is_finite() && b0 > 0.0)
        {
            return Err(format!(
                "reference_batch must be positive samples, got {b0}"
            ));
        }
        if self.window_steps == Some(0) {
            return Err("window_steps must be at least 1".into());
        }
        if !(self.drift_min_factor.is_finite() && self.drift_min_factor >= 1.0) {
            return Err(format!(
                "drift_min_factor must be a factor >= 1, got {}",
                self.drift_min_factor
            ));
        }
        if !(self.dropped_warn >= 0.0 && self.dropped_warn <= 1.0) {
            return Err(format!(
                "dropped_warn must lie in [0, 1], got {}",
                self.dropped_warn
            ));
        }
        Ok(())
    }

    /// Steps in the "now" window (and the first window) for a run of `steps` usable steps:
    /// at least 1, at most `steps`.
    pub fn window_for(&self, steps: usize) -> usize {
        self.window_steps
            .unwrap_or_else(|| (steps / 10).max(self.min_steps))
            .clamp(1, steps.max(1))
    }

    /// Kernel bandwidth in step numbers for a run of `records` usable records logged
    /// `spacing` steps apart ([`typical_spacing`]; 1 where every step is logged):
    /// `bandwidth_steps` when set, else a fortieth of the records, at least 3 and at most 200
    /// records, times the spacing. Counted in step numbers alone, a run logged every 100 steps
    /// had a kernel narrower than the gap between its records: nothing was smoothed and every
    /// interval collapsed to its point.
    pub fn bandwidth_for(&self, records: usize, spacing: f64) -> f64 {
        self.bandwidth_steps.unwrap_or_else(|| {
            let spacing = if spacing.is_finite() && spacing >= 1.0 {
                spacing
            } else {
                1.0
            };
            (records as f64 / 40.0).clamp(3.0, 200.0) * spacing
        })
    }

    /// σ in steps of the kernel the run-wide and window intervals (`summary`, `now`, the
    /// first window, hence drift) detrend by: the default bandwidth for `records` at `spacing`
    /// whatever `bandwidth_steps` is, so that narrowing the display smoother (`--bandwidth`,
    /// the explorer's `<`) does not narrow them. A narrow kernel reads the run's slow wandering
    /// as trend and takes it out of the residuals their variances come from: `--bandwidth 5`
    /// on a 1,500-step run made the drift interval [2.13, 3.47] of the default's [1.83, 4.04].
    pub fn window_detrend_for(&self, records: usize, spacing: f64) -> f64 {
        self.window_detrend_steps.unwrap_or_else(|| {
            Self {
                bandwidth_steps: None,
                ..self.clone()
            }
            .bandwidth_for(records, spacing)
        })
    }

    /// Autocorrelation window (steps) for a run of `steps` usable steps.
    pub fn block_length_for(&self, steps: usize) -> usize {
        self.block_length
            .unwrap_or_else(|| (4.0 * (steps as f64 / 100.0).powf(2.0 / 9.0)).floor() as usize)
    }
}

/// The usual gap between consecutive logged step numbers: the median of the positive
/// differences between consecutive distinct steps in step order, in steps; 1 with fewer than
/// two distinct steps. The median, so that a resumed run's one long gap does not widen the
/// kernel of every step.
pub fn typical_spacing(steps: &[u64]) -> f64 {
    let gaps_of = |sorted: &[u64]| -> Vec<u64> {
        sorted
            .windows(2)
            .filter(|w| w[1] > w[0])
            .map(|w| w[1] - w[0])
            .collect()
    };
    let mut gaps = if steps.windows(2).all(|w| w[0] <= w[1]) {
        gaps_of(steps)
    } else {
        let mut sorted = steps.to_vec();
        sorted.sort_unstable();
        gaps_of(&sorted)
    };
    if gaps.is_empty() {
        return 1.0;
    }
    let mid = gaps.len() / 2;
    let (_, median, _) = gaps.select_nth_unstable(mid);
    *median as f64
}

/// Smallest two-sided kernel standard deviation, steps: a Gaussian narrower than one step
/// gives each step almost all of its own weight, so nothing is smoothed and the interval
/// variance, estimated from the detrended residuals, collapses towards zero (at σ = 0.1
/// every interval of a run came out zero-width).
pub const MIN_BANDWIDTH_STEPS: f64 = 1.0;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spacing_is_the_median_gap_between_distinct_steps() {
        assert_eq!(typical_spacing(&[]), 1.0);
        assert_eq!(typical_spacing(&[5]), 1.0);
        assert_eq!(typical_spacing(&[5, 5, 5]), 1.0);
        assert_eq!(typical_spacing(&[0, 1, 2, 3]), 1.0);
        assert_eq!(typical_spacing(&[0, 100, 200, 300]), 100.0);
        // Repeated and unsorted steps: the gaps between the distinct ones, in step order.
        assert_eq!(typical_spacing(&[300, 0, 100, 100, 200]), 100.0);
        // A resumed run's one long gap does not set the spacing.
        assert_eq!(typical_spacing(&[0, 10, 20, 30, 40, 90_000]), 10.0);
    }

    #[test]
    fn the_default_bandwidth_counts_records_and_a_set_one_is_kept() {
        let s = EstimatorSettings::default();
        assert_eq!(s.bandwidth_for(400, 1.0), 10.0);
        assert_eq!(s.bandwidth_for(400, 50.0), 500.0);
        assert_eq!(s.bandwidth_for(10, 1.0), 3.0);
        assert_eq!(s.bandwidth_for(100_000, 2.0), 400.0);
        // A spacing below one step (not a real spacing) counts as one.
        assert_eq!(s.bandwidth_for(400, 0.0), 10.0);
        let set = EstimatorSettings {
            bandwidth_steps: Some(7.5),
            ..EstimatorSettings::default()
        };
        assert_eq!(set.bandwidth_for(400, 50.0), 7.5);
    }
}
