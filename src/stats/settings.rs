//! Estimator settings carried in sessions and set on the CLI.
//! SKELETON: the noise-scale engine extends this (fields with serde defaults).

use serde::{Deserialize, Serialize};

/// How the noise scale is estimated and smoothed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct EstimatorSettings {
    /// Confidence level of the reported intervals (e.g. 0.95).
    pub confidence: f64,
}

impl Default for EstimatorSettings {
    fn default() -> Self {
        Self { confidence: 0.95 }
    }
}
