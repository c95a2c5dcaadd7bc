//! The scanned layout of a dump: steps, their K gradient files, and where each tensor's bytes
//! lie. Built by [`super::scan`]; no tensor data is read.

use crate::compute::DType;
use std::path::PathBuf;

/// All steps of a dump directory, in increasing step order.
#[derive(Debug, Clone)]
pub struct DumpIndex {
    /// The directory that was scanned.
    pub root: PathBuf,
    /// Steps, sorted by step number.
    pub steps: Vec<StepEntry>,
    /// The newest step when it could not be read (still being written?) while earlier steps
    /// could: left out of `steps`, with why. Empty otherwise.
    pub left_out: Vec<LeftOutStep>,
    /// Directories named `step_…` whose name is no step number (`step_abc`, `step_5.tmp`):
    /// passed over, and said so ([`skipped_note`]). Empty otherwise.
    pub skipped_dirs: Vec<PathBuf>,
}

/// One line for the directories a scan passed over because their name is no `step_<N>`, or
/// `None` when there were none.
pub fn skipped_note(skipped: &[PathBuf]) -> Option<String> {
    let first = skipped.first()?;
    let name = first.file_name().map_or_else(
        || first.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let more = match skipped.len() {
        1 => String::new(),
        n => format!(" and {} more", n - 1),
    };
    Some(format!(
        "directory {name}{more} passed over: not named step_<N> with N a step number"
    ))
}

/// A step the scan left out, and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LeftOutStep {
    /// Optimizer step (the N of `step_<N>`).
    pub step: u64,
    /// The step directory.
    pub dir: PathBuf,
    /// What made it unreadable (the error it would have stopped the analysis with).
    pub reason: String,
}

/// One optimizer step: K ≥ 2 gradient files of the same tensors.
#[derive(Debug, Clone)]
pub struct StepEntry {
    /// Optimizer step (the N of `step_<N>`).
    pub step: u64,
    /// The step directory.
    pub dir: PathBuf,
    /// The gradient files (sorted by name); `files[k].tensors[i]` is the same tensor for all k.
    /// Only the first step keeps its tensors after the scan (the reference every other step
    /// is checked against); the others' are read again when the step is reduced
    /// ([`super::scan::with_tensors`]), so that the index does not grow with steps × tensors.
    pub files: Vec<GradFile>,
    /// Total tensor bytes of the step's files, as scanned.
    pub bytes: u64,
}

/// One gradient set (a micro-batch's or rank's mean gradient).
#[derive(Debug, Clone)]
pub struct GradFile {
    /// The .safetensors file, or the directory of .npy files.
    pub path: PathBuf,
    /// Samples (sequences) this gradient averages over, from the file's metadata, if given.
    pub samples: Option<f64>,
    /// Tensors in processing order (the same order in every file of the step).
    pub tensors: Vec<TensorEntry>,
}

/// Where one tensor's bytes are.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorEntry {
    /// Tensor name (e.g. `model.layers.3.mlp.up_proj.weight`).
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Shape (row-major for safetensors; .npy may be Fortran-ordered, see `fortran`).
    pub shape: Vec<usize>,
    /// .npy only: the data is in Fortran (column-major) order.
    pub fortran: bool,
    /// File holding the bytes.
    pub file: PathBuf,
    /// Byte offset of the data in `file`.
    pub offset: u64,
    /// Bytes of data (elements × dtype size).
    pub nbytes: u64,
}

impl TensorEntry {
    /// Number of elements.
    pub fn elems(&self) -> usize {
        self.shape.iter().product()
    }
}

impl DumpIndex {
    /// Total tensor bytes of all files of all steps (the progress denominator).
    pub fn total_bytes(&self) -> u64 {
        self.steps.iter().map(StepEntry::bytes).sum()
    }
}

impl StepEntry {
    /// Total tensor bytes of this step's files.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}
