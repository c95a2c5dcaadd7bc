//! Where the best cell's step goes along training: for every phase, the heatmap's best cell
//! (★, the highest goodput at the phase's B_crit, weighted as the heatmap weights it) and the
//! shares of its step spent in exposed communication and in the pipeline bubble, so the
//! moment the best layout changes can be read off the chart.

use super::objective::Efficiency;
use super::progress::Phase;
use crate::goodput::{GoodputGrid, StatEffForm, TableCell, ThroughputTable};
use crate::perf::ParallelConfig;
use crate::perf::explain::{bubble_share, comm_share};
use serde::Serialize;

/// The best cell at one phase and the shares of its step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BestShares {
    /// Phase index (between trajectory points `phase` and `phase + 1`).
    pub phase: usize,
    /// Trajectory-axis tokens at the phase start.
    pub start_tokens: f64,
    /// B_crit of the phase (scaled, in the table's samples).
    pub b_crit: f64,
    /// Layout of the best cell, "DP32·TP2·PP1".
    pub layout: String,
    /// Global batch of the best cell, samples.
    pub batch: u64,
    /// The best cell's configuration (written as [`crate::perf::config::ConfigJson`]: numbers and snake_case words).
    #[serde(serialize_with = "crate::perf::config::serialize_as_json")]
    pub config: ParallelConfig,
    /// Its step time, seconds.
    pub step_time_s: f64,
    /// Its goodput at the phase's B_crit, tokens/s × efficiency.
    pub goodput: f64,
    /// Compute as a share of the step, 0–1.
    pub compute_share: f64,
    /// Exposed TP, PP and DP communication as a share of the step, 0–1.
    pub exposed_comm_share: f64,
    /// The pipeline bubble as a share of the step, 0–1.
    pub bubble_share: f64,
}

/// The best cell of `table` and its step shares at every phase of `phases`; phases where no
/// cell runs are left out. Cells are weighted as the heatmap weights them: by `heat` when the
/// objective is not McCandlish's (see `pipeline::heatmap_efficiency`), else by `form`.
pub fn best_along(
    heat: Option<Efficiency>,
    form: StatEffForm,
    table: &ThroughputTable,
    phases: &[Phase],
) -> Vec<BestShares> {
    phases
        .iter()
        .enumerate()
        .filter_map(|(i, ph)| {
            let b = ph.b_crit;
            let grid = match &heat {
                Some(e) => GoodputGrid::with_efficiency(table, b, &|x| e.stat_eff(x, b)),
                None => GoodputGrid::at(table, b, form),
            };
            let (l, c) = grid.best?;
            let TableCell::Feasible { config, prediction } = table.cell(l, c) else {
                return None;
            };
            let step = prediction.step_time_s;
            Some(BestShares {
                phase: i,
                start_tokens: ph.start_tokens,
                b_crit: b,
                layout: table.layouts[l].label(),
                batch: table.batches[c],
                config: *config,
                step_time_s: step,
                goodput: grid.goodput[l * table.batches.len() + c].unwrap_or(0.0),
                compute_share: if step > 0.0 {
                    prediction.breakdown.compute_s / step
                } else {
                    0.0
                },
                exposed_comm_share: comm_share(prediction),
                bubble_share: bubble_share(prediction),
            })
        })
        .collect()
}
