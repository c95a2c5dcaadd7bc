//! The recommendation at the cursor: the best (batch, configuration) cell, what it gains over
//! the batch the user runs now, and why — derived from the goodput grid, never typed in.

use crate::goodput::{GoodputGrid, StatEffForm, TableCell, ThroughputTable};
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
    /// Statistical efficiency at this batch: 0–1 (McCandlish), or relative to B0 (Pollux).
    pub stat_eff: f64,
    /// Goodput: tokens/s × efficiency.
    pub goodput: f64,
    /// Model FLOPs utilisation, 0–1.
    pub mfu: f64,
}

/// Best cell, the current cell, the gain and the reasons.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Recommendation {
    /// B_crit at the cursor, in the model's sequences.
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

/// How the efficiency column is read: the fraction of a sample's value kept (McCandlish, 0–1),
/// or the progress per sample relative to the reference batch B0 (Pollux, above 1 below B0).
pub fn eff_words(form: StatEffForm, eff: f64) -> String {
    match form {
        StatEffForm::McCandlish => format!("{:.0}% statistical efficiency", eff * 100.0),
        StatEffForm::Pollux { b0 } => {
            format!("{eff:.2}× the progress per sample of batch B0 = {b0:.0}")
        }
    }
}

/// Short label of the efficiency row of the heatmap.
pub fn eff_label(form: StatEffForm) -> &'static str {
    match form {
        StatEffForm::McCandlish => "stat. eff.",
        StatEffForm::Pollux { .. } => "eff. vs B0",
    }
}

/// What the recommendation is computed in: the efficiency form and the model's sequence length.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Units {
    /// How the efficiency in force reads: the session's form, or a fraction (McCandlish's
    /// reading) under the lr-sqrt objective, whose efficiency replaces the form on the heatmap.
    pub form: StatEffForm,
    /// Tokens per sequence of the model (the unit of the grid's batch axis and of `b_crit`).
    pub seq_len: u32,
}

impl Units {
    /// The units of `r`'s heatmap (see [`crate::pipeline::session_grid`]).
    pub fn of(r: &crate::session::Resolved) -> Self {
        let form = match crate::pipeline::heatmap_efficiency(r) {
            Some(_) => StatEffForm::McCandlish,
            None => r.session.stat_eff,
        };
        Self {
            form,
            seq_len: r.model.seq_len,
        }
    }
}

/// The recommendation for `grid` (goodput at one B_crit, in the model's sequences) over
/// `table`, against the user's current batch column `current_col`.
pub fn recommend(
    table: &ThroughputTable,
    grid: &GoodputGrid,
    current_col: Option<usize>,
    units: Units,
) -> Option<Recommendation> {
    let (row, col) = grid.best?;
    let best = summary(table, grid, row, col)?;
    let nb = table.batches.len();
    let current = current_col
        .and_then(|c| best_in_column(grid, nb, c).and_then(|r| summary(table, grid, r, c)));
    let gain = current.as_ref().map(|c| best.goodput / c.goodput - 1.0);
    let b_crit_tokens = grid.b_crit * units.seq_len as f64;
    let mut reasons = vec![format!(
        "B_crit ≈ {} sequences of {} token{} ({} tokens): batch {} keeps {}",
        crate::format::count(grid.b_crit),
        units.seq_len,
        if units.seq_len == 1 { "" } else { "s" },
        crate::format::tokens(b_crit_tokens),
        best.batch,
        eff_words(units.form, best.stat_eff)
    )];
    reasons.push(format!(
        "{} is the fastest layout at batch {} ({} MFU, mbs {})",
        best.config.layout_label(),
        best.batch,
        crate::format::percent(best.mfu),
        best.config.mbs
    ));
    if let Some(c) = &current {
        reasons.extend(current_reason(c, &best, grid.b_crit, units.form));
    }
    Some(Recommendation {
        b_crit: grid.b_crit,
        best,
        current,
        gain,
        reasons,
    })
}

/// Why the current cell loses to the best one, in words that hold: "past B_crit" only when the
/// current batch is above B_crit. B_crit is written as the first reason writes it ("4.1k",
/// where "4096" beside "4.1k sequences" read as two values).
fn current_reason(
    c: &CellSummary,
    best: &CellSummary,
    b_crit: f64,
    form: StatEffForm,
) -> Option<String> {
    if c.batch == best.batch {
        return None;
    }
    let eff = eff_words(form, c.stat_eff);
    Some(if c.batch as f64 > b_crit {
        format!(
            "batch {} is past B_crit ≈ {}: {eff}",
            c.batch,
            crate::format::count(b_crit)
        )
    } else if c.batch > best.batch && c.tokens_per_s <= best.tokens_per_s {
        // A larger batch is usually faster; on a smaller cluster it can run slower (fewer
        // layouts divide it).
        format!(
            "batch {} is below B_crit ≈ {} and keeps {eff}, but runs slower than batch {} \
             ({} against {} tok/s)",
            c.batch,
            crate::format::count(b_crit),
            best.batch,
            crate::format::si(c.tokens_per_s),
            crate::format::si(best.tokens_per_s)
        )
    } else if c.batch > best.batch {
        format!(
            "batch {} is below B_crit ≈ {} and keeps {eff}, but its extra speed ({} against {} tok/s) does not make up for the efficiency it gives up",
            c.batch,
            crate::format::count(b_crit),
            crate::format::si(c.tokens_per_s),
            crate::format::si(best.tokens_per_s)
        )
    } else {
        format!(
            "batch {} runs at {:.0}% MFU against {:.0}% at batch {}",
            c.batch,
            c.mfu * 100.0,
            best.mfu * 100.0,
            best.batch
        )
    })
}

/// Why no cell of `table` runs, with the change to try; `None` when some cell runs.
pub fn nothing_runs(table: &ThroughputTable, gpus: u32) -> Option<String> {
    if table.layouts.is_empty() {
        return Some(format!(
            "no 3D layout of {gpus} GPUs fits the model's shape: try another number of nodes or \
             GPUs per node (what-if, 2)"
        ));
    }
    let mut reasons: Vec<(&str, usize)> = Vec::new();
    for cell in &table.cells {
        match cell {
            TableCell::Feasible { .. } => return None,
            TableCell::Infeasible(why) => match reasons.iter_mut().find(|(r, _)| *r == why) {
                Some((_, n)) => *n += 1,
                None => reasons.push((why, 1)),
            },
        }
    }
    let (why, _) = reasons.iter().max_by_key(|(_, n)| *n)?;
    let fix = if why.contains("memory") {
        "more nodes, ZeRO stage 3 or full recompute"
    } else if why.contains("MoE") {
        "larger batch sizes"
    } else if why.contains("divisible") {
        "other batch sizes or another number of GPUs"
    } else {
        "another cluster or model"
    };
    Some(format!(
        "no configuration runs at any batch size; most cells: {why}. Try {fix} (what-if, 2)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(batch: u64, tokens_per_s: f64, stat_eff: f64) -> CellSummary {
        CellSummary {
            batch,
            config: ParallelConfig {
                dp: 8,
                tp: 1,
                pp: 1,
                mbs: 1,
                zero: 1,
                recompute: crate::perf::Recompute::None,
                vpp: 1,
                cp: 1,
                ep: 1,
            },
            tokens_per_s,
            stat_eff,
            goodput: tokens_per_s * stat_eff,
            mfu: tokens_per_s / 1e6,
        }
    }

    /// The reason a larger current batch loses says what holds: "extra speed" only when it is
    /// faster (the what-if lesson on 7 nodes said "its extra speed (555k against 634k tok/s)").
    #[test]
    fn a_larger_batch_is_called_faster_only_when_it_is() {
        let best = cell(256, 634e3, 0.95);
        let slower = current_reason(
            &cell(512, 555e3, 0.85),
            &best,
            2973.0,
            StatEffForm::default(),
        )
        .expect("a reason");
        assert!(slower.contains("runs slower than batch 256"), "{slower}");
        assert!(!slower.contains("extra speed"), "{slower}");
        let faster = current_reason(
            &cell(512, 700e3, 0.85),
            &best,
            2973.0,
            StatEffForm::default(),
        )
        .expect("a reason");
        assert!(
            faster.contains("extra speed (700k against 634k"),
            "{faster}"
        );
    }
}
