//! `StepStats`: the one record every source (dumps, live runs, hooks, scenarios) produces per
//! optimizer step, and the stats protocol v1 (one JSON object per line) that carries it.
//!
//! Units: `b_small` and `b_big` count **samples** (sequences for language models); tokens are
//! `samples × seq_len` and travel separately in `tokens`.

use crate::record::layer_map::LayerMap;
use serde::{Deserialize, Serialize};

/// Protocol version written into every record (`"v": 1`).
pub const PROTOCOL_VERSION: u32 = 1;

/// Squared gradient norms of one layer (or tensor group) at the two batch sizes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LayerSq {
    /// Mean over the small batches of |g_small|² for this layer.
    pub sq_small: f64,
    /// |g_big|² for this layer.
    pub sq_big: f64,
}

/// The parallel configuration a measured step ran with (for calibration).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepConfig {
    /// Data-parallel degree.
    pub dp: u32,
    /// Tensor-parallel degree.
    pub tp: u32,
    /// Pipeline-parallel degree.
    pub pp: u32,
    /// Micro-batch size in samples.
    pub mbs: u32,
}

/// Gradient statistics of one optimizer step (protocol v1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepStats {
    /// Protocol version; always [`PROTOCOL_VERSION`].
    pub v: u32,
    /// Optimizer step index.
    pub step: u64,
    /// Samples per small batch (micro-batch, rank, or 1 for per-example norms).
    pub b_small: f64,
    /// Samples in the big (global) batch.
    pub b_big: f64,
    /// Mean over the small batches of |g_small|².
    pub sq_small: f64,
    /// |g_big|², the squared norm of the full-batch gradient.
    pub sq_big: f64,
    /// How many small batches were averaged into `sq_small`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n_small: Option<u32>,
    /// Tokens processed so far in the run (cumulative), if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<f64>,
    /// Training loss at this step (nats).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss: Option<f64>,
    /// Learning rate at this step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lr: Option<f64>,
    /// Measured wall-clock time of the step in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_time_s: Option<f64>,
    /// Parallel configuration the step ran with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<StepConfig>,
    /// Per-layer squared norms, keyed by layer name.
    #[serde(default, skip_serializing_if = "LayerMap::is_empty")]
    pub layers: LayerMap,
    /// Why the producer flagged this step as unusable (e.g. "non-finite", "loss-scale change").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// Inner product ⟨g_t, g_{t−1}⟩ of this step's gradient with the previous step's, for
    /// single-gradient records (`b_small == b_big`) analysed by consecutive-step differencing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dot_prev: Option<f64>,
}

impl StepStats {
    /// A minimal record with the four required statistics and nothing optional.
    pub fn new(step: u64, b_small: f64, b_big: f64, sq_small: f64, sq_big: f64) -> Self {
        Self {
            v: PROTOCOL_VERSION,
            step,
            b_small,
            b_big,
            sq_small,
            sq_big,
            n_small: None,
            tokens: None,
            loss: None,
            lr: None,
            step_time_s: None,
            config: None,
            layers: LayerMap::new(),
            skipped: None,
            dot_prev: None,
        }
    }

    /// True when the record holds one gradient only (`b_small == b_big`): the two-batch
    /// estimator cannot run on it alone; consecutive-step differencing needs `dot_prev`.
    pub fn is_single_gradient(&self) -> bool {
        self.b_small == self.b_big
    }
}
