//! Sources of `StepStats` and B_crit trajectories: published-law scenarios, stats files,
//! gradient dumps and live runs.

pub mod dump;
pub mod live;
pub mod measured;
pub mod scenario;

use crate::session::{DataSource, Resolved};
use crate::stats::AnalyzeReport;
use crate::trajectory::Trajectory;

/// Why a session's trajectory could not be produced.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The scenario's parameters are invalid.
    #[error("{path}: {source}")]
    Scenario {
        /// Session file.
        path: std::path::PathBuf,
        /// What is wrong.
        source: scenario::ScenarioError,
    },
    /// A measured run could not be read or analysed.
    #[error(transparent)]
    Measured(#[from] measured::MeasuredError),
    /// This kind of source cannot produce a trajectory (yet).
    #[error("{0}")]
    Unsupported(String),
}

/// What a source yields: the trajectory, and the full analysis when it was measured.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// B_crit over training (before the session's B_crit scale).
    pub trajectory: Trajectory,
    /// The noise-scale analysis of a measured run.
    pub analysis: Option<AnalyzeReport>,
}

/// Load a resolved session's data source.
pub fn load(resolved: &Resolved) -> Result<Loaded, SourceError> {
    let seq_len = resolved.model.seq_len;
    match &resolved.session.source {
        DataSource::Scenario(s) => {
            let trajectory = s
                .trajectory(seq_len)
                .map_err(|source| SourceError::Scenario {
                    path: resolved.path.clone(),
                    source,
                })?;
            Ok(Loaded {
                trajectory,
                analysis: None,
            })
        }
        DataSource::Stats { path } => {
            let (trajectory, report) = measured::load_stats_file(
                &resolved.resolve_path(path),
                &resolved.session.estimator,
                seq_len,
            )?;
            Ok(Loaded {
                trajectory,
                analysis: Some(report),
            })
        }
        DataSource::Dumps { path, .. } => Err(SourceError::Unsupported(format!(
            "dump sources ({path}) are not wired into sessions yet"
        ))),
        DataSource::Live { target } => Err(SourceError::Unsupported(format!(
            "live sources ({target}) are opened with `copus watch`"
        ))),
    }
}

/// The B_crit trajectory of a resolved session, before the session's B_crit scale.
pub fn load_trajectory(resolved: &Resolved) -> Result<Trajectory, SourceError> {
    load(resolved).map(|l| l.trajectory)
}
