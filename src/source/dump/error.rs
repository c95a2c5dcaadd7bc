//! Errors of the dump reader. Every variant names the file (or step directory) and, where
//! one is at fault, the tensor.

use std::path::PathBuf;

/// Why a gradient dump could not be read or reduced.
#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    /// The file or directory could not be read.
    #[error("{path}: {source}")]
    Io {
        /// File or directory.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The header is not valid safetensors / .npy.
    #[error("{path}: invalid header: {message}")]
    Header {
        /// File.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A step directory whose number is not a step (`step_-1`, one past 2^64 − 1).
    #[error(
        "{path}: not a step number: a step directory is step_<N>, N a whole number from 0 to {}",
        u64::MAX
    )]
    StepNumber {
        /// The directory.
        path: PathBuf,
    },
    /// The file is shorter than its header says (truncated, or offsets past the end).
    #[error("{path}: {}needs {need} bytes but the file has {have} (truncated file or header offsets past the end)", tensor.as_ref().map(|t| format!("tensor {t} ")).unwrap_or_default())]
    Truncated {
        /// File.
        path: PathBuf,
        /// The first tensor whose data lies past the end, if the header could be read.
        tensor: Option<String>,
        /// Bytes the header requires.
        need: u64,
        /// Bytes present.
        have: u64,
    },
    /// A tensor's dtype is not F32, F16 or BF16.
    #[error("{path}: tensor {tensor}: unsupported dtype {dtype} (expected F32, F16 or BF16)")]
    UnknownDtype {
        /// File.
        path: PathBuf,
        /// Tensor name.
        tensor: String,
        /// The dtype as written in the file.
        dtype: String,
    },
    /// Files of one step (or steps of one EMA run) disagree on a tensor.
    #[error("{path}: tensor {tensor}: {what}")]
    Mismatch {
        /// The file (or step directory) that differs from the first one.
        path: PathBuf,
        /// Tensor name.
        tensor: String,
        /// How it differs.
        what: String,
    },
    /// A step directory holds fewer than two gradient files.
    #[error(
        "{path}: a step needs at least 2 gradient files (one per micro-batch or rank), found {found}"
    )]
    TooFewFiles {
        /// Step directory.
        path: PathBuf,
        /// How many were found.
        found: usize,
    },
    /// The number of samples behind a file is missing or invalid.
    #[error("{path}: {message}")]
    Samples {
        /// File.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// Two step directories name the same step (`step_10` and `step_010`).
    #[error("{path}: step {step} again: {other} is the same step number (rename one of them)")]
    DuplicateStep {
        /// The second directory.
        path: PathBuf,
        /// The step number both name.
        step: u64,
        /// The first directory.
        other: String,
    },
    /// The directory holds no step.
    #[error(
        "{path}: no gradient dump found (expected step_<N>/ directories holding *.safetensors files or per-file directories of *.npy)"
    )]
    Empty {
        /// Directory.
        path: PathBuf,
    },
    /// A step directory's gradient files changed between the scan and the reduction.
    #[error("{path}: {what}")]
    Changed {
        /// Step directory.
        path: PathBuf,
        /// What changed.
        what: String,
    },
    /// The backend failed.
    #[error("{0}")]
    Compute(#[from] crate::compute::ComputeError),
}

impl DumpError {
    /// Whether a step that fails this way may simply not be written whole yet (a file still
    /// short, a set or a tensor still to come, a file renamed into place): only the newest
    /// step of a run is given that benefit. A header that is not valid, an unsupported dtype,
    /// a shape, dtype or memory order that differs, an invalid sample count, a file that is
    /// not a regular one or cannot be opened for another reason are faults that no further
    /// writing mends.
    pub fn may_be_unfinished(&self) -> bool {
        match self {
            Self::Truncated { .. } | Self::TooFewFiles { .. } => true,
            Self::Io { source, .. } => source.kind() == std::io::ErrorKind::NotFound,
            Self::Mismatch { what, .. } => {
                what.starts_with("missing") || what.starts_with("not present in")
            }
            _ => false,
        }
    }
}

pub(crate) fn io(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> DumpError + '_ {
    move |source| DumpError::Io {
        path: path.to_path_buf(),
        source,
    }
}
