//! Sources of `StepStats` and B_crit trajectories: published-law scenarios, stats files,
//! gradient dumps and live runs.

pub mod dump;
pub mod live;
pub mod measured;
pub mod scenario;

use crate::session::{DataSource, Resolved};
use crate::stats::AnalyzeReport;
use crate::trajectory::Trajectory;

/// A live target that looks like a URL of a scheme copus cannot follow (`http://…`,
/// `udp://…`): an error saying what is accepted, rather than a file of that name waited for.
pub fn reject_url_scheme(target: &str) -> Result<(), live::LiveError> {
    let Some((scheme, _)) = target.split_once("://") else {
        return Ok(());
    };
    if scheme.is_empty()
        || !scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
    {
        return Ok(());
    }
    Err(live::LiveError::Target {
        target: target.to_owned(),
        reason: format!(
            "the {scheme}:// scheme is not supported: give a stats file path or tcp://HOST:PORT"
        ),
    })
}

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
    /// A gradient dump could not be read, reduced or analysed.
    #[error(transparent)]
    Dump(#[from] measured::DumpAnalysisError),
    /// The compute backend could not start.
    #[error(transparent)]
    Compute(#[from] crate::compute::ComputeError),
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
    /// The seed's temporal EMA estimate per step (gradient dumps only; labelled biased).
    pub seed_ema: Vec<dump::EmaPoint>,
    /// A note for the user: for a dump, the backend that reduced it and, when `auto` fell
    /// back to the CPU, why ("reduced on cpu (2 threads) · CPU (no CUDA driver found)").
    pub note: Option<String>,
    /// The performance model calibrated on the run's own step times, when it carries them.
    pub calibration: Option<crate::perf::run_calibration::RunCalibration>,
}

/// Load a resolved session's data source on the CPU, without progress reports.
pub fn load(resolved: &Resolved) -> Result<Loaded, SourceError> {
    load_with(resolved, crate::compute::Device::Cpu, &|_| {})
}

/// Load a resolved session's data source; gradient dumps are reduced on `device` (auto falls
/// back to the CPU with a note) and report their progress.
pub fn load_with(
    resolved: &Resolved,
    device: crate::compute::Device,
    progress: &dyn Fn(dump::Progress),
) -> Result<Loaded, SourceError> {
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
                seed_ema: Vec::new(),
                note: None,
                calibration: None,
            })
        }
        DataSource::Stats {
            path,
            seq_len: given,
        } => {
            let file = resolved.resolve_path(path);
            let (trajectory, report, origin, timed) =
                measured::load_stats_file(&file, &resolved.session.estimator, *given, seq_len)?;
            let mut note = measured::seq_len_note(trajectory.seq_len, origin);
            if origin == measured::SeqLenOrigin::Given
                && let Some(n) =
                    measured::token_rescale_note(trajectory.seq_len, report.summary.seq_len)
            {
                note = format!("{note} · {n}");
            }
            Ok(Loaded {
                trajectory,
                analysis: Some(report),
                seed_ema: Vec::new(),
                note: Some(note),
                calibration: calibrate_run(resolved, &timed),
            })
        }
        DataSource::Dumps {
            path,
            samples,
            seed_ema,
            seq_len: given,
        } => {
            let selected = crate::compute::select(device)?;
            let d = measured::load_dump_dir(
                &resolved.resolve_path(path),
                *samples,
                seed_ema.then_some(measured::SEED_EMA_DECAY),
                selected.backend.as_ref(),
                &resolved.session.estimator,
                given.unwrap_or(seq_len),
                progress,
            )?;
            let origin = if given.is_some() {
                measured::SeqLenOrigin::Given
            } else {
                measured::SeqLenOrigin::Assumed
            };
            let seq_note = measured::seq_len_note(d.trajectory.seq_len, origin);
            Ok(Loaded {
                trajectory: d.trajectory,
                analysis: Some(d.report),
                seed_ema: d.seed_ema,
                note: Some(match selected.note {
                    Some(why) => format!(
                        "{seq_note} · reduced on {} · {why}",
                        selected.backend.name()
                    ),
                    None => format!("{seq_note} · reduced on {}", selected.backend.name()),
                }),
                calibration: None,
            })
        }
        DataSource::Live { target } => Err(SourceError::Unsupported(format!(
            "live sources ({target}) are opened with `copus watch`"
        ))),
    }
}

/// The performance model calibrated on a run's timed records (`step_time_s` with `config`),
/// for the session's hardware and model; `None` when there are too few.
fn calibrate_run(
    resolved: &Resolved,
    timed: &[crate::stats::StepStats],
) -> Option<crate::perf::run_calibration::RunCalibration> {
    let target = crate::perf::calibrate::Target {
        hw: &resolved.hardware,
        model: &resolved.model,
        gpus_per_node: resolved.session.cluster.gpus_per_node,
    };
    let search = &resolved.session.search;
    crate::perf::run_calibration::calibrate_run(
        timed,
        &target,
        &resolved.hardware.efficiency,
        search.zero.first().copied().unwrap_or(1),
        search
            .recompute
            .first()
            .copied()
            .unwrap_or(crate::perf::Recompute::Selective),
    )
}

/// The B_crit trajectory of a resolved session, before the session's B_crit scale, counted in
/// the model's sequences (what the goodput grid and the planner compare batches with; a
/// measured run's own samples may hold another number of tokens, see
/// [`Trajectory::in_sequences_of`]).
pub fn load_trajectory(resolved: &Resolved) -> Result<Trajectory, SourceError> {
    load(resolved).map(|l| l.trajectory.in_sequences_of(resolved.model.seq_len))
}
