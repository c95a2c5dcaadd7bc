//! Goodput = throughput × statistical efficiency over a grid of batch sizes × 3D layouts.
//!
//! Throughput does not depend on B_crit, so it is tabulated once per what-if change
//! ([`ThroughputTable`]); scrubbing the timeline only re-weights it ([`GoodputGrid::at`]).
//! SKELETON: the enumeration is complete in shape; the performance-model issue refines it.

use crate::perf::{self, Invalid, ParallelConfig, PerfContext, Prediction, Recompute};
use serde::{Deserialize, Serialize};

/// Statistical efficiency per sample as a function of batch size.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub enum StatEffForm {
    /// McCandlish et al.: B_crit/(B + B_crit) (1 at B → 0).
    #[default]
    McCandlish,
    /// Pollux/AdaptDL: (B_crit + B0)/(B_crit + B), 1 at B = B0.
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
    /// ZeRO stages to try.
    pub zero: Vec<u8>,
    /// Recompute policies to try.
    pub recompute: Vec<Recompute>,
    /// Virtual pipeline stages to try when pp > 1.
    pub interleave: Vec<u32>,
    /// Allow TP groups to span nodes.
    pub allow_cross_node_tp: bool,
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
        }
    }
}

/// A 3D layout (one heatmap row).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Layout {
    /// Data-parallel degree.
    pub dp: u32,
    /// Tensor-parallel degree.
    pub tp: u32,
    /// Pipeline-parallel degree.
    pub pp: u32,
}

impl Layout {
    /// "DP4·TP8·PP1".
    pub fn label(&self) -> String {
        format!("DP{}·TP{}·PP{}", self.dp, self.tp, self.pp)
    }
}

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

fn divisors(n: u32) -> impl Iterator<Item = u32> {
    (1..=n).filter(move |d| n.is_multiple_of(*d))
}

/// All (dp, tp, pp) layouts of the cluster that the model's shape allows.
pub fn layouts(ctx: &PerfContext, cluster: &Cluster, search: &SearchSpace) -> Vec<Layout> {
    let gpus = cluster.gpus();
    let mut out = Vec::new();
    for tp in divisors(gpus) {
        if !ctx.model.heads.is_multiple_of(tp)
            || (!search.allow_cross_node_tp && tp > cluster.gpus_per_node)
        {
            continue;
        }
        for pp in divisors(gpus / tp) {
            if !ctx.model.layers.is_multiple_of(pp) {
                continue;
            }
            out.push(Layout {
                dp: gpus / tp / pp,
                tp,
                pp,
            });
        }
    }
    out
}

/// Tabulate the fastest configuration of every layout at every batch size.
pub fn throughput_table(
    ctx: &PerfContext,
    cluster: &Cluster,
    search: &SearchSpace,
) -> ThroughputTable {
    let layouts = layouts(ctx, cluster, search);
    let mut cells = Vec::with_capacity(layouts.len() * search.batch_sizes.len());
    for layout in &layouts {
        for &batch in &search.batch_sizes {
            let mut best: Option<(ParallelConfig, Prediction)> = None;
            let mut reason = String::from("no micro-batch size divides the batch");
            for &mbs in &search.micro_batches {
                for &zero in &search.zero {
                    for &recompute in &search.recompute {
                        let cfg = ParallelConfig {
                            dp: layout.dp,
                            tp: layout.tp,
                            pp: layout.pp,
                            mbs,
                            zero,
                            recompute,
                            vpp: 1,
                        };
                        match perf::predict(ctx, &cfg, batch) {
                            Ok(p) if p.fits => {
                                if best.is_none_or(|(_, b)| p.step_time_s < b.step_time_s) {
                                    best = Some((cfg, p));
                                }
                            }
                            Ok(p) => {
                                reason = Invalid::OutOfMemory {
                                    need_gb: p.memory_per_gpu_bytes / 1e9,
                                    have_gb: ctx.hw.hbm_bytes / 1e9,
                                }
                                .to_string()
                            }
                            Err(e) => reason = e.to_string(),
                        }
                    }
                }
            }
            cells.push(match best {
                Some((config, prediction)) => TableCell::Feasible { config, prediction },
                None => TableCell::Infeasible(reason),
            });
        }
    }
    ThroughputTable {
        batches: search.batch_sizes.clone(),
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
    /// (layout row, batch column) of the best cell, if any is feasible.
    pub best: Option<(usize, usize)>,
}

impl GoodputGrid {
    /// Weight `table`'s throughput by the statistical efficiency at `b_crit` samples.
    pub fn at(table: &ThroughputTable, b_crit: f64, form: StatEffForm) -> Self {
        let stat_eff: Vec<f64> = table
            .batches
            .iter()
            .map(|&b| stat_eff(form, b as f64, b_crit))
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
                    if best.is_none_or(|(_, _, bg)| g > bg) {
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
}
