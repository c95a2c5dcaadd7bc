//! Sources of `StepStats` and B_crit trajectories: published-law scenarios, stats files,
//! gradient dumps and live runs.

pub mod dump;
pub mod live;
pub mod measured;
pub mod scenario;

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
    /// A run's samples are far from the model's: its B_crit in samples would be laid on the
    /// wrong scale. Not guessed: the user says what a sample is.
    #[error(
        "{path}: the records count {run} {} per sample (tokens/b_big), but the model {model} \
         trains on {model_seq}-token samples: its B_crit would be read at the wrong scale. Pass \
         --seq-len {model_seq} to read each of the run's samples as one of the model's \
         sequences (as `copus lesson measured-run` does), or --seq-len {run} with a --model \
         (and --hardware) that match the run; in a session, `Stats(path: …, seq_len: Some(N))`",
        if *run == 1 { "token" } else { "tokens" }
    )]
    SeqLenMismatch {
        /// The stats file.
        path: std::path::PathBuf,
        /// Tokens per sample the records imply.
        run: u32,
        /// The model's name.
        model: String,
        /// The model's tokens per sample.
        model_seq: u32,
    },
}

/// Largest factor between a run's implied tokens per sample and the model's that is read
/// without asking (padding, packing and a different context length stay within it).
pub const MAX_SEQ_LEN_MISMATCH: f64 = 2.0;

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
    /// Something the user must know about the numbers shown (kept on the status line), e.g. a
    /// live run whose tokens per sample are far from the model's.
    pub warning: Option<String>,
}
