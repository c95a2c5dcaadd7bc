//! The recommendation at the cursor: the best (batch, configuration) cell, what it gains over
//! the batch the user runs now, and why — derived from the goodput grid, never typed in.

use crate::goodput::{GoodputGrid, TableCell, ThroughputTable};
use crate::perf::ParallelConfig;
use serde::Serialize;

/// One cell of the grid, described.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CellSummary {
    /// Global batch, samples.
    pub batch: u64,
    /// Full configuration (layout, micro-batch, ZeRO, recompute).
    pub config: ParallelConfig,
    /// Tokens per second (whole job).
    pub tokens_per_s: f64,
    /// Statistical efficiency at this batch, 0–1.
    pub stat_eff: f64,
    /// Goodput: tokens/s × efficiency.
    pub goodput: f64,
    /// Model FLOPs utilisation, 0–1.
    pub mfu: f64,
}

/// Best cell, the current cell, the gain and the reasons.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Recommendation {
    /// B_crit at the cursor, samples.
    pub b_crit: f64,
    /// The best cell.
    pub best: CellSummary,
    /// The best configuration at the session's current batch, if that batch is on the grid
    /// and runs.
    pub current: Option<CellSummary>,
    /// Goodput gain of the best cell over the current one (0.12 = 12 %).
    pub gain: Option<f64>,
    /// Plain-language reasons.
    pub reasons: Vec<String>,
}

fn summary(
    table: &ThroughputTable,
    grid: &GoodputGrid,
    row: usize,
    col: usize,
) -> Option<CellSummary> {
    match table.cell(row, col) {
        TableCell::Feasible { config, prediction } => Some(CellSummary {
            batch: table.batches[col],
            config: *config,
            tokens_per_s: prediction.tokens_per_s,
            stat_eff: grid.stat_eff[col],
            goodput: prediction.tokens_per_s * grid.stat_eff[col],
            mfu: prediction.mfu,
        }),
        TableCell::Infeasible(_) => None,
    }
}

/// Best cell of column `col` (the fastest layout at that batch), by goodput.
pub fn best_in_column(grid: &GoodputGrid, n_batches: usize, col: usize) -> Option<usize> {
    grid.goodput
        .iter()
        .enumerate()
        .filter(|(i, _)| i % n_batches == col)
        .filter_map(|(i, g)| g.map(|g| (i / n_batches, g)))
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(row, _)| row)
}

/// The recommendation for `grid` (goodput at one B_crit) over `table`, against the user's
/// current batch column `current_col`.
pub fn recommend(
    table: &ThroughputTable,
    grid: &GoodputGrid,
    current_col: Option<usize>,
) -> Option<Recommendation> {
    let (row, col) = grid.best?;
    let best = summary(table, grid, row, col)?;
    let nb = table.batches.len();
    let current = current_col
        .and_then(|c| best_in_column(grid, nb, c).and_then(|r| summary(table, grid, r, c)));
    let gain = current.as_ref().map(|c| best.goodput / c.goodput - 1.0);
    let mut reasons = vec![format!(
        "B_crit ≈ {:.0} samples: batch {} keeps {:.0}% statistical efficiency",
        grid.b_crit,
        best.batch,
        best.stat_eff * 100.0
    )];
    reasons.push(format!(
        "{} is the fastest layout at batch {} ({:.0}% MFU, mbs {})",
        best.config.layout_label(),
        best.batch,
        best.mfu * 100.0,
        best.config.mbs
    ));
    if let Some(c) = &current {
        if c.batch > best.batch {
            reasons.push(format!(
                "batch {} is past B_crit: only {:.0}% of its samples count",
                c.batch,
                c.stat_eff * 100.0
            ));
        } else if c.batch < best.batch {
            reasons.push(format!(
                "batch {} under-fills the GPUs: {:.0}% MFU",
                c.batch,
                c.mfu * 100.0
            ));
        }
    }
    Some(Recommendation {
        b_crit: grid.b_crit,
        best,
        current,
        gain,
        reasons,
    })
}
