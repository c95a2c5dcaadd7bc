//! Gradient dumps: `<dir>/step_<N>/` directories of K ≥ 2 gradient sets (one per micro-batch
//! or rank) as `.safetensors` files or directories of `.npy` files, reduced to
//! [`StepStats`] in one memory-mapped streaming pass per step. Layout, conventions and the
//! layer-grouping rule are documented in `docs/DUMPS.md`.
//!
//! ```no_run
//! use copus::compute::{select, Device};
//! use copus::source::dump::{scan, reduce_steps, DumpOptions};
//! let index = scan("dumps/".as_ref())?;
//! let sel = select(Device::Auto)?;
//! if let Some(note) = &sel.note { eprintln!("note: {note}"); }
//! let steps = reduce_steps(&index, &DumpOptions::default(), sel.backend.as_ref(), &|_| {})?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod error;
mod index;
mod layers;
pub mod npy;
mod reduce;
mod scan;
pub mod st_file;
pub mod synth;

pub use crate::compute::ema::ema_estimate;
pub use error::DumpError;
pub use index::{DumpIndex, GradFile, LeftOutStep, StepEntry, TensorEntry, skipped_note};
pub use layers::layer_key;
pub use scan::scan;

use crate::compute::Backend;
use crate::stats::StepStats;

/// Options of the reduction.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DumpOptions {
    /// Samples (sequences) per gradient file, overriding the files' own metadata.
    pub samples: Option<f64>,
    /// Also run the seed's temporal EMA estimator with this decay per step (e.g. 0.95).
    pub ema_decay: Option<f64>,
    /// Elements per segment (default: the backend's preference). Mostly for tests.
    pub segment_elems: Option<usize>,
}

/// Progress of a reduction, reported after each wave of work (tens of MB).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Step being reduced.
    pub step: u64,
    /// Tensor bytes reduced so far, all steps and files.
    pub bytes_done: u64,
    /// Tensor bytes of the whole dump.
    pub bytes_total: u64,
}

/// The seed's temporal EMA estimate at one step. **Biased**: it measures the variance of the
/// gradient across steps (a moving target), not the within-batch noise (docs/STATISTICS.md).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EmaPoint {
    /// Optimizer step.
    pub step: u64,
    /// Label shown beside the number.
    pub label: String,
    /// Batch size B (samples) the seed multiplies by: the step's b_big.
    pub b: f64,
    /// Σ (EMA[g²] − EMA[g]²) over all elements.
    pub noise: f64,
    /// Σ EMA[g]² over all elements.
    pub signal: f64,
    /// B · noise / signal (samples); `None` when the signal is below 1e-12 or the step held
    /// non-finite values (noise and signal are then 0).
    pub b_estimate: Option<f64>,
}

/// Label of the temporal EMA estimator.
pub const EMA_LABEL: &str = "temporal EMA (seed; biased: variance across steps)";

impl EmaPoint {
    fn new(step: u64, b: f64, noise: f64, signal: f64) -> Self {
        // A non-finite step gives NaN sums; JSON has no NaN, so report zeros and no estimate.
        let finite = noise.is_finite() && signal.is_finite();
        let (noise, signal) = if finite { (noise, signal) } else { (0.0, 0.0) };
        let est = ema_estimate(noise, signal, b).filter(|x| finite && x.is_finite());
        EmaPoint {
            step,
            label: EMA_LABEL.into(),
            b,
            noise,
            signal,
            b_estimate: est,
        }
    }
}

/// Everything one pass over a dump produces.
#[derive(Debug, Clone, PartialEq)]
pub struct DumpReduction {
    /// One record per step (non-finite steps carry `skipped = Some("non-finite ...")` and zero
    /// norms).
    pub steps: Vec<StepStats>,
    /// The temporal EMA estimator per step, when `DumpOptions::ema_decay` was set.
    pub ema: Vec<EmaPoint>,
}

/// Reduce every step of a scanned dump to [`StepStats`].
pub fn reduce_steps(
    index: &DumpIndex,
    opts: &DumpOptions,
    backend: &dyn Backend,
    progress: &dyn Fn(Progress),
) -> Result<Vec<StepStats>, DumpError> {
    let opts = DumpOptions {
        ema_decay: None,
        ..opts.clone()
    };
    Ok(reduce_dump(index, &opts, backend, progress)?.steps)
}

/// Reduce every step, also running the temporal EMA estimator when `opts.ema_decay` is set
/// (its state, two f32 vectors of the model's size, lives on the backend's device). After a
/// non-finite step the EMA restarts from the next step.
pub fn reduce_dump(
    index: &DumpIndex,
    opts: &DumpOptions,
    backend: &dyn Backend,
    progress: &dyn Fn(Progress),
) -> Result<DumpReduction, DumpError> {
    let total = index.total_bytes();
    let mut done = 0u64;
    let mut out = DumpReduction {
        steps: Vec::new(),
        ema: Vec::new(),
    };
    let mut state = None;
    let mut first = true;
    for step in &index.steps {
        let step = &*scan::with_tensors(&index.steps[0], step)?;
        if let (Some(_), None) = (opts.ema_decay, &state) {
            let n: usize = step.files[0].tensors.iter().map(|t| t.elems()).sum();
            state = Some(backend.new_ema_state(n)?);
        }
        if opts.ema_decay.is_some() {
            reduce::same_model(&index.steps[0], step)?;
        }
        let ema = match (&mut state, opts.ema_decay) {
            (Some(s), Some(d)) => Some((s, d, first)),
            _ => None,
        };
        let mut report = |bytes: u64| {
            done += bytes;
            progress(Progress {
                step: step.step,
                bytes_done: done,
                bytes_total: total,
            });
        };
        let (stats, point) = reduce::reduce_step(step, opts, backend, ema, &mut report)?;
        first = stats.skipped.is_some();
        out.steps.push(stats);
        out.ema.extend(point);
    }
    Ok(out)
}
