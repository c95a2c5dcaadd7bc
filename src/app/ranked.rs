//! The ranked list of layouts at one batch (`R` in the explorer, `copus grid --rank BATCH`):
//! every layout that runs, best goodput first, then those that cannot run with the reason.

use crate::goodput::{GoodputGrid, Layout, TableCell, ThroughputTable};
use serde::Serialize;

/// One layout that runs at the batch.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RankedRow {
    /// 1 for the highest goodput.
    pub rank: usize,
    /// The layout.
    pub layout: Layout,
    /// Goodput, tokens/s × statistical efficiency.
    pub goodput: f64,
    /// Predicted throughput, tokens/s.
    pub tokens_per_s: f64,
    /// Model FLOPs utilisation, 0–1.
    pub mfu: f64,
    /// Predicted step time, seconds.
    pub step_time_s: f64,
    /// Micro-batch chosen, samples.
    pub micro_batch: u32,
    /// ZeRO stage chosen.
    pub zero: u8,
    /// Recompute policy chosen.
    pub recompute: String,
    /// Share of the best goodput at this batch, 0–1.
    pub share_of_best: f64,
    /// The whole configuration, in the shape of `grid --json`'s cells and `plan --json`'s
    /// states (`micro_batch`, `zero` and `recompute` above repeat three of its fields).
    pub config: crate::perf::config::ConfigJson,
}

/// A layout that cannot run at the batch, and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Refused {
    /// The layout.
    pub layout: Layout,
    /// Why none of its configurations runs.
    pub reason: String,
}

/// The ranked list at one batch.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Ranked {
    /// The batch, samples.
    pub batch: u64,
    /// Statistical efficiency at this batch (the same for every layout).
    pub stat_eff: f64,
    /// The layouts that run, best goodput first.
    pub runs: Vec<RankedRow>,
    /// The layouts that cannot run, in table order.
    pub cannot_run: Vec<Refused>,
}

/// Rank the layouts of `rows` (table rows; every row when `None`) at batch column `col`.
pub fn ranked_at(
    table: &ThroughputTable,
    grid: &GoodputGrid,
    col: usize,
    rows: Option<&[usize]>,
) -> Option<Ranked> {
    let nb = table.batches.len();
    let batch = *table.batches.get(col)?;
    let all: Vec<usize> = (0..table.layouts.len()).collect();
    let rows = rows.unwrap_or(&all);
    let mut runs = Vec::new();
    let mut cannot_run = Vec::new();
    for &r in rows {
        let layout = *table.layouts.get(r)?;
        match (
            table.cell(r, col),
            grid.goodput.get(r * nb + col).copied().flatten(),
        ) {
            (TableCell::Feasible { config, prediction }, Some(goodput)) => runs.push(RankedRow {
                rank: 0,
                layout,
                goodput,
                tokens_per_s: prediction.tokens_per_s,
                mfu: prediction.mfu,
                step_time_s: prediction.step_time_s,
                micro_batch: config.mbs,
                zero: config.zero,
                recompute: config.recompute.to_string(),
                share_of_best: 0.0,
                config: config.into(),
            }),
            (TableCell::Infeasible(why), _) => cannot_run.push(Refused {
                layout,
                reason: why.clone(),
            }),
            (TableCell::Feasible { .. }, None) => cannot_run.push(Refused {
                layout,
                reason: "no goodput at this B_crit".into(),
            }),
        }
    }
    runs.sort_by(|a, b| b.goodput.total_cmp(&a.goodput));
    let best = runs.first().map_or(0.0, |r| r.goodput);
    for (i, r) in runs.iter_mut().enumerate() {
        r.rank = i + 1;
        r.share_of_best = if best > 0.0 { r.goodput / best } else { 0.0 };
    }
    Some(Ranked {
        batch,
        stat_eff: grid.stat_eff.get(col).copied().unwrap_or(f64::NAN),
        runs,
        cannot_run,
    })
}

/// What a line of [`text_lines`] is, for styling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineKind {
    /// The summary sentence or a blank line.
    Plain,
    /// A heading (the column header, "cannot run:").
    Heading,
    /// A layout that runs.
    Runs,
    /// A layout that cannot run.
    CannotRun,
}

/// The row's recompute policy, then its virtual pipeline stages and expert-parallel degree
/// where above 1 (`full v5 EP4`), as the grid's configuration labels write them: a ranked
/// row can then be run again as written (`predict --vpp 5`).
fn recompute_and_stages(row: &RankedRow) -> String {
    let mut text = row.recompute.clone();
    if row.config.vpp > 1 {
        text.push_str(&format!(" v{}", row.config.vpp));
    }
    if row.config.ep > 1 {
        text.push_str(&format!(" EP{}", row.config.ep));
    }
    text
}

/// Columns below which [`text_lines`] leaves out throughput and step time.
pub const WIDE_COLUMNS: usize = 100;

/// The ranked list as text lines of at most about `width` columns (the explorer's popup and
/// `copus grid --rank`): below [`WIDE_COLUMNS`] without throughput and step time.
pub fn text_lines(r: &Ranked, width: usize) -> Vec<(LineKind, String)> {
    let wide = width >= WIDE_COLUMNS;
    let si = crate::format::si;
    let mut out = vec![
        (
            LineKind::Plain,
            format!(
                "{} {} at batch {} (statistical efficiency {:.2}), {} cannot",
                r.runs.len(),
                if r.runs.len() == 1 {
                    "layout runs"
                } else {
                    "layouts run"
                },
                r.batch,
                r.stat_eff,
                r.cannot_run.len()
            ),
        ),
        (
            LineKind::Heading,
            if wide {
                format!(
                    "{:>4}  {:<20} {:>9} {:>7} {:>9} {:>5} {:>9} {:>4} {:>5}  {}",
                    "rank",
                    "layout",
                    "goodput",
                    "of best",
                    "tok/s",
                    "MFU",
                    "step",
                    "mbs",
                    "ZeRO",
                    "recompute"
                )
            } else {
                format!(
                    "{:>4} {:<16} {:>7} {:>7} {:>4} {:>4} {:>4}  {}",
                    "rank", "layout", "goodput", "of best", "MFU", "mbs", "ZeRO", "recompute"
                )
            },
        ),
    ];
    for row in &r.runs {
        let text = if wide {
            format!(
                "{:>4}  {:<20} {:>9} {:>6.1}% {:>9} {:>4.0}% {:>8.3}s {:>4} {:>5}  {}",
                row.rank,
                row.layout.label(),
                si(row.goodput),
                100.0 * row.share_of_best,
                si(row.tokens_per_s),
                100.0 * row.mfu,
                row.step_time_s,
                row.micro_batch,
                row.zero,
                recompute_and_stages(row)
            )
        } else {
            format!(
                "{:>4} {:<16} {:>7} {:>6.1}% {:>3.0}% {:>4} {:>4}  {}",
                row.rank,
                row.layout.label(),
                si(row.goodput),
                100.0 * row.share_of_best,
                100.0 * row.mfu,
                row.micro_batch,
                row.zero,
                recompute_and_stages(row)
            )
        };
        out.push((LineKind::Runs, text));
    }
    if !r.cannot_run.is_empty() {
        out.push((LineKind::Plain, String::new()));
        out.push((LineKind::Heading, "cannot run:".into()));
        for c in &r.cannot_run {
            out.push((
                LineKind::CannotRun,
                format!("  {:<20} {}", c.layout.label(), c.reason),
            ));
        }
    }
    out
}
