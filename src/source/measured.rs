//! Trajectories from measured runs: a stats protocol v1 file analysed by the noise-scale
//! engine, with the smoothed B_simple and its interval at every step.

use crate::stats::{AnalyzeReport, EstimatorSettings, analyze_outcome, read_ndjson};
use crate::trajectory::{Trajectory, TrajectoryPoint};
use std::io::BufReader;
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
    #[error("{path}: {source}")]
    Stats {
        /// The stats file.
        path: std::path::PathBuf,
        /// The engine's error.
        source: crate::stats::StatsError,
    },
}

/// Turn an analysis into a trajectory: one point per step with a finite, positive smoothed
/// B_simple; tokens from the records, or accumulated as b_big × `seq_len` per step.
pub fn trajectory_from_report(report: &AnalyzeReport, seq_len: u32, label: String) -> Trajectory {
    let mut tokens = 0.0;
    let mut points = Vec::with_capacity(report.steps.len());
    for row in &report.steps {
        tokens = row.tokens.unwrap_or(tokens + row.b_big * seq_len as f64);
        let Some(b) = row.b_simple.filter(|b| b.is_finite() && *b > 0.0) else {
            continue;
        };
        let [lo, hi] = row.ci;
        points.push(TrajectoryPoint {
            step: row.step,
            tokens,
            b_crit: b,
            ci: (lo.is_finite() && hi.is_finite() && lo > 0.0).then_some((lo, hi)),
            loss: row.loss,
        });
    }
    Trajectory {
        label,
        seq_len,
        points,
    }
}

/// Read and analyse a stats file; return its trajectory and the full analysis.
pub fn load_stats_file(
    path: &Path,
    settings: &EstimatorSettings,
    seq_len: u32,
) -> Result<(Trajectory, AnalyzeReport), MeasuredError> {
    let io = |source| MeasuredError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let outcome = read_ndjson(BufReader::new(file)).map_err(io)?;
    let report = analyze_outcome(&outcome, settings).map_err(|source| MeasuredError::Stats {
        path: path.to_path_buf(),
        source,
    })?;
    let name = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let label = format!("measured: {name} ({})", report.summary.smoother);
    Ok((trajectory_from_report(&report, seq_len, label), report))
}
