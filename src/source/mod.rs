//! Sources of `StepStats` and B_crit trajectories: published-law scenarios, stats files,
//! gradient dumps and live runs.

pub mod dump;
pub mod scenario;

use crate::session::{DataSource, Resolved};
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
    /// This kind of source cannot produce a trajectory (yet).
    #[error("{0}")]
    Unsupported(String),
}

/// The B_crit trajectory of a resolved session, before the session's B_crit scale.
pub fn load_trajectory(resolved: &Resolved) -> Result<Trajectory, SourceError> {
    match &resolved.session.source {
        DataSource::Scenario(s) => {
            s.trajectory(resolved.model.seq_len)
                .map_err(|source| SourceError::Scenario {
                    path: resolved.path.clone(),
                    source,
                })
        }
        DataSource::Stats { path } => Err(SourceError::Unsupported(format!(
            "stats-file sources ({path}) are not wired into sessions yet"
        ))),
        DataSource::Dumps { path, .. } => Err(SourceError::Unsupported(format!(
            "dump sources ({path}) are not wired into sessions yet"
        ))),
        DataSource::Live { target } => Err(SourceError::Unsupported(format!(
            "live sources ({target}) are not wired into sessions yet"
        ))),
    }
}
