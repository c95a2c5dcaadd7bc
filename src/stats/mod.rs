//! Gradient statistics: the per-step record, the stats protocol, and the noise-scale
//! estimators with smoothing, intervals and diagnostics (DESIGN.md §3).

pub mod settings;
pub mod step;

pub use settings::EstimatorSettings;
pub use step::{LayerSq, StepConfig, StepStats};
