//! Switch-point planning: when to change batch size and parallel configuration as B_crit
//! grows, and what each strategy costs (docs/PLANNER.md).
//!
//! # Progress in minimal-sample units
//!
//! McCandlish et al. 2018: reaching a given loss takes E = E_min(1 + B/B_noise) samples at
//! global batch B (and S = S_min(1 + B_noise/B) steps). Per *minimal sample* (a sample at
//! B → 0), training at batch B therefore consumes (1 + B/B_crit) samples. We take the
//! critical batch B_crit (samples) as B_noise. A phase of the trajectory needs a fixed number of
//! minimal samples ΔS_min, whatever batch it runs at ([`progress`] says how ΔS_min is read
//! from the token axis). Running phase i in state s (layout, batch B, step time τ seconds):
//!
//! - samples  = ΔS_min,i · (1 + B/B_crit,i)
//! - steps    = samples / B
//! - time     = steps · τ = ΔS_min,i · (τ/B + τ/B_crit,i)
//!
//! which equals ΔS_min,i · seq_len / goodput with goodput = tokens/s × B_crit/(B + B_crit), the
//! McCandlish statistical efficiency of [`crate::goodput`]. Times are absolute, so the planner
//! uses this form (the `mccandlish` objective), whatever `stat_eff` the session displays, or the
//! learning-rate-aware `lr-sqrt` form of [`objective`] (`docs/PLANNER.md`).
//!
//! # Token axis
//!
//! Scenario token counts are read as tokens consumed by a run at the scenario's
//! `nominal_batch` (the reference batch): a run at that batch takes exactly the scenario's token
//! budget, larger batches take more tokens and fewer steps. Measured trajectories are read the
//! same way, at the batch their step numbering implies. See [`progress::TokenAxis`].
//!
//! # Plans
//!
//! [`dp::optimal`] is exact and O(phases × states); [`strategies`] scores the alternatives (the
//! COPUS paper's baselines among them) with the same accounting;
//! the app's `pipeline::plan_session` runs it all for a session.

use copus_model::{format, goodput, perf, trajectory};

pub mod advice;
pub mod costs;
pub mod dp;
pub mod emit;
pub mod horizon;
pub mod objective;
pub mod paper_table;
pub mod problem;
pub mod progress;
pub mod render;
pub mod report;
pub mod shares;
pub mod strategies;
pub mod synthetic;

pub use costs::{ReconfigCosts, ReshardMode, SwitchCosts, SwitchKind};
pub use horizon::Horizon;
pub use objective::{Efficiency, Objective};
pub use problem::{PlanState, Problem, ProblemError, Schedule, Switch};
pub use progress::{Phase, TokenAxis};
pub use render::render_text;
pub use report::PlanReport;
pub use strategies::{StrategyParams, StrategyResult, compare};
