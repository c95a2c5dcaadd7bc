//! Sources of `StepStats` and B_crit trajectories: published-law scenarios, stats files,
//! gradient dumps and live runs.

pub mod scenario;
