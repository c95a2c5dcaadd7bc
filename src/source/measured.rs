//! Trajectories from measured runs: a stats protocol v1 file analysed by the noise-scale
//! engine, with the smoothed B_simple and its interval at every step.

use crate::stats::{AnalyzeReport, EstimatorSettings, RecordBound, StepStats};
use crate::trajectory::{Trajectory, TrajectoryPoint};
use std::path::Path;

/// Why a measured run could not be turned into a trajectory.
#[derive(Debug, thiserror::Error)]
pub enum MeasuredError {
    /// The file could not be opened or read.
    #[error("{path}: {source}")]
    Io {
        /// The stats file.
        path: std::path::PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The analysis failed (empty input, no usable step, bad settings).
    #[error("{path}{first_problem}: {source}")]
    Stats {
        /// The stats file.
        path: std::path::PathBuf,
        /// " (first problem, line N: reason)" when the reader skipped lines, as `copus
        /// analyze` says it; empty otherwise.
        first_problem: String,
        /// The engine's error.
        source: crate::stats::StatsError,
    },
}

/// Where a measured run's tokens per sample come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeqLenOrigin {
    /// Given by the user (`--seq-len`, or `seq_len` in the session's source).
    Given,
    /// Inferred from the records' cumulative `tokens` and `b_big`, as `copus analyze` does.
    Inferred,
    /// Neither: the model profile's sequence length is assumed.
    Assumed,
}

/// Tokens per sample of a measured run: `given`, else inferred from the records (rounded, at
/// least 1), else `assumed` (the model's sequence length).
pub fn run_seq_len(
    report: &AnalyzeReport,
    given: Option<u32>,
    assumed: u32,
) -> (u32, SeqLenOrigin) {
    if let Some(g) = given.filter(|&g| g > 0) {
        return (g, SeqLenOrigin::Given);
    }
    match report
        .summary
        .seq_len
        .filter(|s| s.is_finite() && *s >= 0.5 && *s < u32::MAX as f64)
    {
        Some(s) => (s.round() as u32, SeqLenOrigin::Inferred),
        None => (assumed, SeqLenOrigin::Assumed),
    }
}

/// "1 token" or "N tokens": a count of tokens with the noun in the right number.
fn tokens_noun(n: u32) -> String {
    if n == 1 {
        "1 token".to_string()
    } else {
        format!("{n} tokens")
    }
}

/// A note for the user on where the tokens per sample of a run come from.
pub fn seq_len_note(seq_len: u32, origin: SeqLenOrigin) -> String {
    let n = tokens_noun(seq_len);
    match origin {
        SeqLenOrigin::Given => format!("{n} per sample (given)"),
        SeqLenOrigin::Inferred => format!("{n} per sample (inferred from tokens/b_big)"),
        SeqLenOrigin::Assumed => format!(
            "no token counts in the records: assuming the model's {n} per sample (--seq-len sets it)"
        ),
    }
}

/// Factor by which a run's recorded token axis is rescaled when its tokens per sample are
/// given (`given`, tokens) but its records imply another number (`implied`, tokens/b_big):
/// the given value wins for the token axis too, so that B_crit's token equivalent and the
/// axis agree (a session may read each sample of a small run as one of the model's
/// sequences, `docs/PLANNER.md` §8). `None` when they agree or nothing is implied.
pub fn token_rescale(given: u32, implied: Option<f64>) -> Option<f64> {
    let implied = implied.filter(|s| s.is_finite() && *s > 0.0)?;
    let ratio = f64::from(given) / implied;
    ((ratio - 1.0).abs() > 1e-6 && given > 0).then_some(ratio)
}

/// A note on a given tokens-per-sample value that rescales the records' token axis.
pub fn token_rescale_note(given: u32, implied: Option<f64>) -> Option<String> {
    token_rescale(given, implied).map(|r| {
        let implied = f64::from(given) / r;
        // "1 token" only where the rounded number reads 1.
        let noun = if format!("{implied:.0}") == "1" {
            "token"
        } else {
            "tokens"
        };
        format!(
            "the records imply {implied:.0} {noun} per sample: token axis counted at the given {given} (×{r:.4})"
        )
    })
}

/// The interval of a trajectory point from an analysis' `[lo, hi]` (samples): kept when the
/// lower end is finite and positive and the upper end is finite or unbounded (`+∞`, kept as
/// [`f64::INFINITY`] so that the title can show it as such: the estimate is never shown
/// without its uncertainty); `None` when there is no usable interval (a NaN end, a lower end
/// not above zero). Every consumer of [`TrajectoryPoint::ci`] reads an infinite upper end as
/// "unbounded above".
pub fn point_interval(lo: f64, hi: f64) -> Option<(f64, f64)> {
    (lo.is_finite() && lo > 0.0 && (hi.is_finite() || hi == f64::INFINITY) && hi >= lo)
        .then_some((lo, hi))
}

/// Turn an analysis into a trajectory: one point per step with a finite, positive smoothed
/// B_simple; tokens from the records, or accumulated as b_big × `seq_len` per step: a record
/// N steps after the one before it (a dump or a log written every N steps) stands for N steps
/// of b_big samples each, so the batch the trajectory implies is b_big, not b_big / N.
pub fn trajectory_from_report(report: &AnalyzeReport, seq_len: u32, label: String) -> Trajectory {
    let mut tokens = 0.0;
    let mut points = Vec::with_capacity(report.steps.len());
    let mut previous: Option<u64> = None;
    for row in &report.steps {
        let steps = previous.map_or(1, |p| row.step.saturating_sub(p).max(1));
        previous = Some(row.step);
        tokens = row
            .tokens
            .unwrap_or(tokens + row.b_big * seq_len as f64 * steps as f64);
        let Some(b) = row.b_simple.filter(|b| b.is_finite() && *b > 0.0) else {
            continue;
        };
        let [lo, hi] = row.ci;
        points.push(TrajectoryPoint {
            step: row.step,
            tokens,
            b_crit: b,
            ci: point_interval(lo, hi),
            loss: row.loss,
        });
    }
    Trajectory {
        label,
        seq_len,
        points,
    }
}

/// Read and analyse a stats file; return its trajectory, the full analysis, where its
/// sequence length came from, and the records that carry a step time and a configuration.
/// `given` tokens per sample override the inferred ones (and rescale the records' token axis,
/// [`token_rescale`]); `assumed` is the fallback (see
/// [`run_seq_len`]); the trajectory's `seq_len` is the run's.
pub fn load_stats_file(
    path: &Path,
    settings: &EstimatorSettings,
    given: Option<u32>,
    assumed: u32,
) -> Result<(Trajectory, AnalyzeReport, SeqLenOrigin, Vec<StepStats>), MeasuredError> {
    let io = |source| MeasuredError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = crate::fsutil::open_readable_stream(path).map_err(io)?;
    // A long run is merged into a bounded number of records (stats::ingest::coarsen); the timed
    // records below are then means over their steps.
    let (outcome, _left_out) =
        crate::stats::estimate::precond::read_for(file, settings.gradient, RecordBound::Default)
            .map_err(io)?;
    let report = crate::stats::analyze(
        &outcome.records,
        crate::stats::AnalyzeOptions::read(&outcome, settings),
    )
    .map_err(|source| MeasuredError::Stats {
        path: path.to_path_buf(),
        first_problem: outcome
            .errors
            .first()
            .map(|e| format!(" (first problem, line {}: {})", e.line, e.reason))
            .unwrap_or_default(),
        source,
    })?;
    let name = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let gradient = match settings.gradient {
        crate::stats::analysis::settings::GradientKind::Raw => String::new(),
        g => format!(", {} gradient", g.name()),
    };
    let label = format!(
        "measured: {}{gradient} ({})",
        crate::format::escape_controls(&name),
        report.summary.smoother
    );
    let (seq_len, origin) = run_seq_len(&report, given, assumed);
    // The records that carry a step time and a configuration, for calibrating the performance
    // model without reading the file again.
    let timed = outcome
        .records
        .iter()
        .filter(|r| r.step_time_s.is_some() && r.config.is_some())
        .cloned()
        .collect();
    let mut trajectory = trajectory_from_report(&report, seq_len, label);
    if origin == SeqLenOrigin::Given
        && let Some(ratio) = token_rescale(seq_len, report.summary.seq_len)
    {
        for p in &mut trajectory.points {
            p.tokens *= ratio;
        }
    }
    Ok((trajectory, report, origin, timed))
}

/// A gradient dump reduced and analysed.
#[derive(Debug, Clone)]
pub struct DumpAnalysis {
    /// Trajectory of the smoothed B_simple.
    pub trajectory: Trajectory,
    /// The noise-scale analysis of the reduced steps.
    pub report: AnalyzeReport,
    /// The seed's temporal EMA estimate per step (labelled biased; a comparison only).
    pub seed_ema: Vec<crate::source::dump::EmaPoint>,
    /// The reduced per-step statistics.
    pub steps: Vec<crate::stats::StepStats>,
    /// The newest step, when it could not be read (still being written?): left out.
    pub left_out: Vec<crate::source::dump::LeftOutStep>,
    /// Directories named `step_…` that are no step number: passed over.
    pub skipped_dirs: Vec<std::path::PathBuf>,
}

/// One line for the steps a dump scan left out ("newest step 300 left out (still being
/// written?): …"), or `None` when none was.
pub fn left_out_note(left_out: &[crate::source::dump::LeftOutStep]) -> Option<String> {
    let s = left_out.first()?;
    Some(format!(
        "the newest step, {}, was left out (still being written?): {}",
        s.step, s.reason
    ))
}

/// Why a dump could not be analysed.
#[derive(Debug, thiserror::Error)]
pub enum DumpAnalysisError {
    /// Reading or reducing the dump failed (names the file and tensor).
    #[error(transparent)]
    Dump(#[from] crate::source::dump::DumpError),
    /// The analysis of the reduced steps failed.
    #[error("{path}: {source}")]
    Stats {
        /// The dump directory.
        path: std::path::PathBuf,
        /// The engine's error.
        source: crate::stats::StatsError,
    },
}

/// Decay per step of the seed's temporal EMA estimator when it runs beside the two-batch one.
pub const SEED_EMA_DECAY: f64 = 0.95;

/// Reduce every step of the dump in `dir` on `backend` (one streaming pass) and analyse the
/// steps; with `seed_ema_decay`, also run the seed's temporal EMA estimator beside them for
/// comparison (its state costs 8 bytes per parameter).
pub fn load_dump_dir(
    dir: &Path,
    samples: Option<f64>,
    seed_ema_decay: Option<f64>,
    backend: &dyn crate::compute::Backend,
    settings: &EstimatorSettings,
    seq_len: u32,
    progress: &dyn Fn(crate::source::dump::Progress),
) -> Result<DumpAnalysis, DumpAnalysisError> {
    use crate::source::dump::{DumpOptions, reduce_dump, scan};
    let index = scan(dir)?;
    let opts = DumpOptions {
        samples,
        ema_decay: seed_ema_decay,
        segment_elems: None,
    };
    let reduction = reduce_dump(&index, &opts, backend, progress)?;
    let report = crate::stats::analyze(&reduction.steps, settings).map_err(|source| {
        DumpAnalysisError::Stats {
            path: dir.to_path_buf(),
            source,
        }
    })?;
    let name = dir.file_name().map_or_else(
        || dir.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let label = format!("dump: {name} ({})", report.summary.smoother);
    Ok(DumpAnalysis {
        trajectory: trajectory_from_report(&report, seq_len, label),
        report,
        seed_ema: reduction.ema,
        steps: reduction.steps,
        left_out: index.left_out,
        skipped_dirs: index.skipped_dirs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_given_seq_len_rescales_the_axis_only_when_the_records_disagree() {
        assert_eq!(token_rescale(4096, Some(1.0)), Some(4096.0));
        assert_eq!(token_rescale(4096, Some(2048.0)), Some(2.0));
        assert_eq!(token_rescale(2048, Some(2048.0)), None);
        assert_eq!(token_rescale(2048, None), None);
        assert_eq!(token_rescale(2048, Some(f64::NAN)), None);
        let note = token_rescale_note(4096, Some(1.0)).expect("a note");
        assert!(
            note.contains("imply 1 token per sample") && note.contains("×4096"),
            "{note}"
        );
        let note = token_rescale_note(4096, Some(2048.0)).expect("a note");
        assert!(note.contains("imply 2048 tokens per sample"), "{note}");
    }

    #[test]
    fn one_token_per_sample_reads_in_the_singular() {
        assert_eq!(
            seq_len_note(1, SeqLenOrigin::Given),
            "1 token per sample (given)"
        );
        assert!(seq_len_note(1, SeqLenOrigin::Inferred).starts_with("1 token per sample"));
        assert!(seq_len_note(1, SeqLenOrigin::Assumed).contains("model's 1 token per sample"));
        assert!(seq_len_note(4096, SeqLenOrigin::Given).starts_with("4096 tokens per sample"));
    }

    #[test]
    fn an_interval_unbounded_above_is_kept_as_infinite() {
        assert_eq!(point_interval(2.0, 5.0), Some((2.0, 5.0)));
        assert_eq!(
            point_interval(1200.0, f64::INFINITY),
            Some((1200.0, f64::INFINITY))
        );
        assert_eq!(point_interval(0.0, 5.0), None);
        assert_eq!(point_interval(2.0, f64::NAN), None);
        assert_eq!(point_interval(f64::NAN, 5.0), None);
        assert_eq!(point_interval(2.0, f64::NEG_INFINITY), None);
    }
}
