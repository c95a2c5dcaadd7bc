//! Reconfiguration costs by kind of switch, set per session.

use serde::{Deserialize, Serialize};

/// What a switch between two (batch, configuration) points costs, seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ReconfigCosts {
    /// Changing only the global batch size (data loader, lr rescale), seconds.
    pub batch_only_s: f64,
    /// Resizing data parallelism (regrouping processes), seconds.
    pub dp_resize_s: f64,
    /// Storage bandwidth for the checkpoint written and read on a TP/PP change, bytes/s.
    pub checkpoint_bw_bytes_per_s: f64,
    /// Process-group restart on a TP/PP change, seconds.
    pub restart_s: f64,
    /// Warm-up after a TP/PP change (compilation, allocator, data pipeline), seconds.
    pub warmup_s: f64,
    /// Minimum time between two switches, in phases.
    pub min_dwell_phases: u32,
}

impl Default for ReconfigCosts {
    fn default() -> Self {
        Self {
            batch_only_s: 1.0,
            dp_resize_s: 30.0,
            checkpoint_bw_bytes_per_s: 5e9,
            restart_s: 60.0,
            warmup_s: 60.0,
            min_dwell_phases: 1,
        }
    }
}
