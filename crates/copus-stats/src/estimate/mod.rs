//! Estimators: per-step |G|² and tr(Σ), the live (incremental) smoothers, Fieller intervals,
//! window and drift estimates, the preconditioned stream and the branched-training CBS.

pub mod cbs;
pub mod incremental;
pub mod interval;
pub(crate) mod lagged;
pub mod per_step;
pub mod precond;
pub(crate) mod window;
