//! GEMM efficiency model: achieved fraction of peak as a function of GEMM size.
//! PLACEHOLDER (skeleton): the performance-model work replaces the curve and may add fields
//! (with serde defaults so existing sessions keep loading).

use serde::{Deserialize, Serialize};

/// Parameters of the efficiency curve and link efficiencies that calibration fits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct EfficiencyParams {
    /// Plateau fraction of peak reached by large GEMMs (compute-bound regime).
    pub max_eff: f64,
    /// Tokens per GPU per micro-batch at which efficiency reaches half the plateau.
    pub half_tokens: f64,
}

impl Default for EfficiencyParams {
    fn default() -> Self {
        Self {
            max_eff: 0.55,
            half_tokens: 512.0,
        }
    }
}
