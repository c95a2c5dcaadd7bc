//! The estimator flags shared by `copus analyze` and `copus open` (stats files and dumps):
//! smoother, bandwidth, decay, reference batch, confidence and block length, defined once.

use crate::stats::{EstimatorSettings, SmootherKind};
use clap::{Args, ValueEnum};

/// Smoother choice on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SmootherArg {
    /// Two-sided Gaussian kernel over steps (recorded runs).
    TwoSided,
    /// One-sided double EMA decayed per sample, lag-corrected (live runs).
    OneSided,
}

impl From<SmootherArg> for SmootherKind {
    fn from(k: SmootherArg) -> Self {
        match k {
            SmootherArg::TwoSided => SmootherKind::TwoSided,
            SmootherArg::OneSided => SmootherKind::OneSided,
        }
    }
}

/// Estimator settings on the command line (each overrides the default or the session's).
#[derive(Debug, Default, Clone, Args)]
pub struct EstimatorArgs {
    /// Smoother of the per-step B_crit trajectory [default: two-sided].
    #[arg(long, value_enum)]
    pub smoother: Option<SmootherArg>,
    /// Two-sided kernel standard deviation in steps (default: records/40, clamped to 3..200
    /// records, times the usual gap between logged steps).
    #[arg(long, value_name = "STEPS")]
    pub bandwidth: Option<f64>,
    /// One-sided EMA decay per reference batch (θ = decay^(b_big/B0)).
    #[arg(long)]
    pub decay: Option<f64>,
    /// Reference batch B0 of the per-sample decay, in samples (default: first b_big).
    #[arg(long, value_name = "SAMPLES")]
    pub reference_batch: Option<f64>,
    /// Confidence level of the intervals, in (0, 1).
    #[arg(long)]
    pub confidence: Option<f64>,
    /// Autocorrelation window of the interval variance, in steps.
    #[arg(long, value_name = "STEPS")]
    pub block_length: Option<usize>,
}

impl EstimatorArgs {
    /// Override `s` with the flags given.
    pub fn apply(&self, s: &mut EstimatorSettings) {
        if let Some(k) = self.smoother {
            s.smoother = k.into();
        }
        s.bandwidth_steps = self.bandwidth.or(s.bandwidth_steps);
        s.ema_decay = self.decay.unwrap_or(s.ema_decay);
        s.reference_batch = self.reference_batch.or(s.reference_batch);
        s.confidence = self.confidence.unwrap_or(s.confidence);
        s.block_length = self.block_length.or(s.block_length);
    }

    /// Each flag given checked on its own, the error naming it (before any file is read: a
    /// bad `--bandwidth` was reported as a problem of the stats file, under the setting's
    /// internal name).
    pub fn check(&self) -> anyhow::Result<()> {
        if let Some(h) = self.bandwidth
            && !(h.is_finite() && h >= crate::stats::analysis::settings::MIN_BANDWIDTH_STEPS)
        {
            super::flag_bail!(
                "--bandwidth {h}: the kernel's standard deviation must be at least {} step; \
                 below that each step is left alone, nothing is smoothed, and the intervals, \
                 computed from what the kernel leaves over, collapse to zero width",
                crate::stats::analysis::settings::MIN_BANDWIDTH_STEPS
            );
        }
        if let Some(d) = self.decay
            && !(d > 0.0 && d < 1.0)
        {
            super::flag_bail!("--decay {d}: must lie in (0, 1), e.g. 0.99");
        }
        if let Some(b) = self.reference_batch
            && !(b.is_finite() && b > 0.0)
        {
            super::flag_bail!("--reference-batch {b}: must be a positive number of samples");
        }
        if let Some(c) = self.confidence
            && !(c > 0.0 && c < 1.0)
        {
            super::flag_bail!("--confidence {c}: must lie in (0, 1), e.g. 0.95");
        }
        if self.block_length == Some(0) {
            super::flag_bail!("--block-length 0: must be at least 1 step");
        }
        Ok(())
    }

    /// Notes on flags given that the smoother in use reads only in part: `--decay` and
    /// `--reference-batch` set the one-sided EMA; with the two-sided kernel they change only
    /// the ratio-EMA comparison column, which looked like being ignored. (`--bandwidth` is read
    /// by both: the kernel detrends the residuals of every interval.)
    pub fn unused_by(&self, smoother: SmootherKind) -> Vec<String> {
        if smoother != SmootherKind::TwoSided {
            return Vec::new();
        }
        [
            ("--decay", self.decay.is_some()),
            ("--reference-batch", self.reference_batch.is_some()),
        ]
        .into_iter()
        .filter_map(|(n, set)| set.then_some(n))
        .map(|flag| {
            format!(
                "{flag} sets the one-sided smoother's EMA (--one-sided); with the two-sided \
                 smoother in use it changes only the ratio-EMA comparison column"
            )
        })
        .collect()
    }

    /// The flags given, by name (to refuse them where they do nothing).
    pub fn given(&self) -> Vec<&'static str> {
        [
            ("--smoother", self.smoother.is_some()),
            ("--bandwidth", self.bandwidth.is_some()),
            ("--decay", self.decay.is_some()),
            ("--reference-batch", self.reference_batch.is_some()),
            ("--confidence", self.confidence.is_some()),
            ("--block-length", self.block_length.is_some()),
        ]
        .into_iter()
        .filter_map(|(name, set)| set.then_some(name))
        .collect()
    }
}
