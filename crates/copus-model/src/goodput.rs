//! Goodput = throughput × statistical efficiency over a grid of batch sizes × 3D layouts.
//!
//! Throughput does not depend on B_crit, so it is tabulated once per what-if change
//! ([`ThroughputTable`]); scrubbing the timeline only re-weights it ([`GoodputGrid::at`]).
//! Each cell holds the fastest fitting configuration of its layout (micro-batch, ZeRO stage,
//! recompute, interleave) or the reason none runs (memory, divisibility, the MoE batch floor).

use crate::perf::enumerate::{self, Choices};
use crate::perf::{ConfigCost, ParallelConfig, PerfContext, Prediction, Recompute, moe};
use serde::{Deserialize, Serialize};

/// Statistical efficiency per sample as a function of batch size.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub enum StatEffForm {
    /// McCandlish et al.: B_crit/(B + B_crit) (1 at B → 0).
    #[default]
    McCandlish,
    /// Pollux/AdaptDL: (B_crit + B0)/(B_crit + B), normalised to 1 at B = B0 (the batch the
    /// learning rate was tuned for); above 1 below B0.
    Pollux {
        /// Reference batch size B0, samples.
        b0: f64,
    },
}

/// Statistical efficiency of batch `batch` (samples) when the critical batch is `b_crit` (samples).
pub fn stat_eff(form: StatEffForm, batch: f64, b_crit: f64) -> f64 {
    match form {
        StatEffForm::McCandlish => b_crit / (batch + b_crit),
        StatEffForm::Pollux { b0 } => (b_crit + b0) / (b_crit + batch),
    }
}

/// The cluster a grid is computed for.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Cluster {
    /// Nodes.
    pub nodes: u32,
    /// GPUs per node.
    pub gpus_per_node: u32,
}

impl Cluster {
    /// Total GPUs.
    pub fn gpus(&self) -> u32 {
        self.nodes * self.gpus_per_node
    }
}

/// What the search may choose from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SearchSpace {
    /// Global batch sizes (samples) on the grid's batch axis.
    pub batch_sizes: Vec<u64>,
    /// Micro-batch sizes to try (samples).
    pub micro_batches: Vec<u32>,
    /// ZeRO stages to try. Left out of a session file, empty: the session resolves it to its
    /// stack's own stage (`StackPreset::default_zero`).
    #[serde(default)]
    pub zero: Vec<u8>,
    /// Recompute policies to try. Left out of a session file, empty: the session resolves it
    /// to the policies its stack's framework has (`StackPreset::recompute_policies`).
    #[serde(default)]
    pub recompute: Vec<Recompute>,
    /// Virtual pipeline stages to try when pp > 1.
    pub interleave: Vec<u32>,
    /// Allow TP groups to span nodes.
    pub allow_cross_node_tp: bool,
    /// Context-parallel degrees to lay out (1: none; long sequences: `[1, 2, 4, 8]`).
    pub context_parallel: Vec<u32>,
    /// Expert-parallel degrees a mixture-of-experts model may use (each layout keeps those it
    /// allows); empty, the default: every degree that divides the experts and dp·cp.
    pub expert_parallel: Vec<u32>,
}

impl Default for SearchSpace {
    fn default() -> Self {
        Self {
            batch_sizes: (0..12).map(|i| 16u64 << i).collect(),
            micro_batches: vec![1, 2, 4, 8],
            zero: vec![1],
            recompute: vec![Recompute::None, Recompute::Selective, Recompute::Full],
            interleave: vec![1],
            allow_cross_node_tp: false,
            context_parallel: vec![1],
            expert_parallel: Vec::new(),
        }
    }
}

/// A layout (one heatmap row): `crate::perf::config::Layout`.
pub use crate::perf::config::Layout;

/// The fastest full configuration of a layout at a batch size, or why none runs.
#[derive(Debug, Clone, PartialEq)]
pub enum TableCell {
    /// The fastest feasible configuration and its prediction.
    Feasible {
        /// Chosen micro-batch, ZeRO stage, recompute, interleave.
        config: ParallelConfig,
        /// Its predicted performance.
        prediction: Prediction,
    },
    /// No configuration of this layout runs at this batch; the reason of the closest one.
    Infeasible(String),
}

/// Throughput of every layout at every batch size (independent of B_crit).
#[derive(Debug, Clone)]
pub struct ThroughputTable {
    /// Batch axis, samples.
    pub batches: Vec<u64>,
    /// Layout axis.
    pub layouts: Vec<Layout>,
    /// Row-major: `cells[layout * batches.len() + batch]`.
    pub cells: Vec<TableCell>,
}

impl ThroughputTable {
    /// The cell for layout row `l` and batch column `b`.
    pub fn cell(&self, l: usize, b: usize) -> &TableCell {
        &self.cells[l * self.batches.len() + b]
    }
}

/// All layouts of the cluster that the model's shape allows (heatmap rows): every (dp, tp,
/// pp) factorisation for each searched context-parallel degree that divides the GPUs, CP 1
/// first.
pub fn layouts(ctx: &PerfContext, cluster: &Cluster, search: &SearchSpace) -> Vec<Layout> {
    let gpus = cluster.gpus();
    let mut cps: Vec<u32> = search.context_parallel.clone();
    cps.sort_unstable();
    cps.dedup();
    cps.into_iter()
        .filter(|&cp| cp >= 1 && gpus.is_multiple_of(cp))
        .flat_map(|cp| {
            enumerate::factorisations(gpus / cp)
                .into_iter()
                .map(move |(dp, tp, pp)| Layout { dp, tp, pp, cp })
        })
        .filter(|&l| enumerate::layout_problem(ctx, l, search.allow_cross_node_tp).is_none())
        .collect()
}

/// Why `batch` is below the model's MoE batch floor (too many tokens dropped), if it is.
pub fn moe_floor_problem(ctx: &PerfContext, batch: u64) -> Option<String> {
    let spec = ctx.model.moe.as_ref()?;
    let share = moe::dropped_share(spec, batch, ctx.model.seq_len);
    (share > moe::DEFAULT_MAX_DROP).then(|| {
        let floor = moe::batch_floor(spec, ctx.model.seq_len, moe::DEFAULT_MAX_DROP, 1 << 24)
            .map_or_else(|| "none".to_string(), |f| f.to_string());
        format!(
            "MoE: {:.1}% of tokens dropped at batch {batch} ({:.0} tokens per expert; floor {floor})",
            share * 100.0,
            moe::tokens_per_expert(spec, batch, ctx.model.seq_len)
        )
    })
}

/// The grid's batch axis: the searched batch sizes and, for each, the nearest multiple of
/// the cluster's GPU count at or above it (when the GPU count does not divide it), sorted and
/// without repeats. On a power-of-two cluster this is the searched list itself; on 56 GPUs
/// (7 nodes of 8) the powers of two gain 56, 112, 224, … so that the layouts with DP 7, 14,
/// 28 or 56 have batches they can run.
pub fn batch_axis(search: &SearchSpace, cluster: &Cluster) -> Vec<u64> {
    let gpus = u64::from(cluster.gpus().max(1));
    let mut axis: Vec<u64> = search
        .batch_sizes
        .iter()
        .flat_map(|&b| {
            let multiple = b.div_ceil(gpus).checked_mul(gpus);
            std::iter::once(b).chain(multiple.filter(|&m| m != b))
        })
        .collect();
    axis.sort_unstable();
    axis.dedup();
    axis
}

/// Tabulate the fastest configuration of every layout at every batch size. Each layout's
/// configurations are costed once; every batch only re-assembles the step.
pub fn throughput_table(
    ctx: &PerfContext,
    cluster: &Cluster,
    search: &SearchSpace,
) -> ThroughputTable {
    throughput_table_where(ctx, cluster, search, &|_| None)
}

/// [`throughput_table`] over only the configurations `refuse` accepts (returns `None` for):
/// one it refuses is not costed, and its reason is what a cell says where nothing else runs.
/// `plan --emit` tabulates under the framework's limits this way, so that its plan is one the
/// framework can run.
pub fn throughput_table_where(
    ctx: &PerfContext,
    cluster: &Cluster,
    search: &SearchSpace,
    refuse: &dyn Fn(&ParallelConfig) -> Option<String>,
) -> ThroughputTable {
    let layouts = layouts(ctx, cluster, search);
    let choices = Choices {
        micro_batches: &search.micro_batches,
        zero: &search.zero,
        recompute: &search.recompute,
        interleave: &search.interleave,
        expert_parallel: &search.expert_parallel,
    };
    let batches = batch_axis(search, cluster);
    let floors: Vec<Option<String>> = batches.iter().map(|&b| moe_floor_problem(ctx, b)).collect();
    let mut cells = Vec::with_capacity(layouts.len() * batches.len());
    for layout in &layouts {
        let configs = enumerate::stack_layout_configs(ctx, *layout, &choices);
        let mut problems: Vec<String> = Vec::new();
        let costs: Vec<ConfigCost> = configs
            .iter()
            .filter_map(|c| {
                if let Some(why) = refuse(c) {
                    problems.push(why);
                    return None;
                }
                ConfigCost::new(ctx, c)
                    .map_err(|e| problems.push(e.to_string()))
                    .ok()
            })
            .collect();
        for (&batch, floor) in batches.iter().zip(&floors) {
            let cell = match floor {
                Some(why) => TableCell::Infeasible(why.clone()),
                None if costs.is_empty() => TableCell::Infeasible(
                    problems
                        .last()
                        .cloned()
                        .unwrap_or_else(|| "no configuration in the search space".to_string()),
                ),
                None => match enumerate::fastest(ctx, &costs, batch) {
                    Ok((config, prediction)) => TableCell::Feasible { config, prediction },
                    Err(e) => TableCell::Infeasible(e.to_string()),
                },
            };
            cells.push(cell);
        }
    }
    ThroughputTable {
        batches,
        layouts,
        cells,
    }
}

/// Goodput of every cell at one B_crit.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GoodputGrid {
    /// B_crit used, samples.
    pub b_crit: f64,
    /// Row-major goodput (tokens/s × efficiency); `None` where infeasible.
    pub goodput: Vec<Option<f64>>,
    /// Statistical efficiency per batch column.
    pub stat_eff: Vec<f64>,
    /// (layout row, batch column) of the best cell: the highest positive finite goodput, if
    /// any cell has one.
    pub best: Option<(usize, usize)>,
}

impl GoodputGrid {
    /// [`GoodputGrid::at`] with the estimated B_crit multiplied by `scale` (GNS can
    /// underestimate the critical batch size measured by branched training; sessions carry
    /// the factor as `b_crit_scale`).
    pub fn at_scaled(table: &ThroughputTable, b_crit: f64, scale: f64, form: StatEffForm) -> Self {
        Self::at(table, b_crit * scale, form)
    }

    /// Weight `table`'s throughput by the statistical efficiency at `b_crit` samples.
    pub fn at(table: &ThroughputTable, b_crit: f64, form: StatEffForm) -> Self {
        Self::with_efficiency(table, b_crit, &|b| stat_eff(form, b, b_crit))
    }

    /// Weight `table`'s throughput by `efficiency(batch)` (batch in samples, efficiency 0–1 per
    /// sample): for a planner objective other than the session's form (e.g. `lr-sqrt`).
    pub fn with_efficiency(
        table: &ThroughputTable,
        b_crit: f64,
        efficiency: &dyn Fn(f64) -> f64,
    ) -> Self {
        let stat_eff: Vec<f64> = table
            .batches
            .iter()
            .map(|&b| efficiency(b as f64))
            .collect();
        let nb = table.batches.len();
        let mut best: Option<(usize, usize, f64)> = None;
        let goodput = table
            .cells
            .iter()
            .enumerate()
            .map(|(i, c)| match c {
                TableCell::Feasible { prediction, .. } => {
                    let g = prediction.tokens_per_s * stat_eff[i % nb];
                    // Only a positive finite goodput can be the best (a B_crit that overflowed
                    // or a throughput of NaN names no cell).
                    if g.is_finite() && g > 0.0 && best.is_none_or(|(_, _, bg)| g > bg) {
                        best = Some((i / nb, i % nb, g));
                    }
                    Some(g)
                }
                TableCell::Infeasible(_) => None,
            })
            .collect();
        Self {
            b_crit,
            goodput,
            stat_eff,
            best: best.map(|(l, b, _)| (l, b)),
        }
    }

    /// (layout row, batch column) of the best cell among layout `rows`: the highest positive
    /// finite goodput there, if any of their cells has one (`best` restricted to a filter).
    pub fn best_among(&self, rows: &[usize]) -> Option<(usize, usize)> {
        let nb = self.stat_eff.len();
        rows.iter()
            .flat_map(|&r| (0..nb).map(move |c| (r, c)))
            .filter_map(|(r, c)| {
                let g = self
                    .goodput
                    .get(r.checked_mul(nb)?.checked_add(c)?)
                    .copied()
                    .flatten()?;
                (g.is_finite() && g > 0.0).then_some((g, r, c))
            })
            .max_by(|a, b| a.0.total_cmp(&b.0))
            .map(|(_, r, c)| (r, c))
    }
}

#[cfg(test)]
mod best_tests {
    use super::*;

    #[test]
    fn best_among_rows_takes_the_highest_positive_finite_goodput_there() {
        // Two layouts × three batches; row 1 holds the overall best, row 0 a NaN.
        let grid = GoodputGrid {
            b_crit: 100.0,
            goodput: vec![
                Some(5.0),
                Some(f64::NAN),
                Some(7.0),
                Some(9.0),
                None,
                Some(1.0),
            ],
            stat_eff: vec![1.0, 0.5, 0.25],
            best: Some((1, 0)),
        };
        assert_eq!(grid.best_among(&[0]), Some((0, 2)));
        assert_eq!(grid.best_among(&[0, 1]), Some((1, 0)));
        assert_eq!(grid.best_among(&[]), None);
        assert_eq!(
            grid.best_among(&[5]),
            None,
            "a row beyond the grid names no cell"
        );
    }
}
