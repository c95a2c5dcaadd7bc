//! Export of the current view: the goodput grid at the cursor as CSV and JSON.

use crate::goodput::{GoodputGrid, TableCell, ThroughputTable};
use crate::trajectory::TrajectoryPoint;
use serde::Serialize;

/// One exported cell.
#[derive(Debug, Clone, Serialize)]
pub struct ExportCell {
    /// Layout label, e.g. "DP4·TP8·PP1".
    pub layout: String,
    /// Global batch, samples.
    pub batch: u64,
    /// Whether some configuration of this layout runs at this batch.
    pub feasible: bool,
    /// Why not, when infeasible.
    pub reason: Option<String>,
    /// Tokens per second.
    pub tokens_per_s: Option<f64>,
    /// Statistical efficiency, 0–1.
    pub stat_eff: f64,
    /// Goodput, tokens/s × efficiency.
    pub goodput: Option<f64>,
    /// Chosen micro-batch size.
    pub mbs: Option<u32>,
    /// Chosen ZeRO stage.
    pub zero: Option<u8>,
    /// Chosen recompute policy.
    pub recompute: Option<String>,
    /// Model FLOPs utilisation.
    pub mfu: Option<f64>,
    /// Seconds per step.
    pub step_time_s: Option<f64>,
    /// Whether this is the best cell.
    pub best: bool,
}

/// The exported view.
#[derive(Debug, Clone, Serialize)]
pub struct ExportView {
    /// Step at the cursor.
    pub step: u64,
    /// Tokens at the cursor.
    pub tokens: f64,
    /// B_crit at the cursor (after the session's scale), samples.
    pub b_crit: f64,
    /// Every cell, row-major (layout × batch).
    pub cells: Vec<ExportCell>,
}

/// Build the export of `grid` over `table` at trajectory point `at`.
pub fn export_view(
    table: &ThroughputTable,
    grid: &GoodputGrid,
    at: &TrajectoryPoint,
) -> ExportView {
    let nb = table.batches.len();
    let cells = table
        .cells
        .iter()
        .enumerate()
        .map(|(i, cell)| {
            let (l, b) = (i / nb, i % nb);
            let base = ExportCell {
                layout: table.layouts[l].label(),
                batch: table.batches[b],
                feasible: false,
                reason: None,
                tokens_per_s: None,
                stat_eff: grid.stat_eff[b],
                goodput: grid.goodput[i],
                mbs: None,
                zero: None,
                recompute: None,
                mfu: None,
                step_time_s: None,
                best: grid.best == Some((l, b)),
            };
            match cell {
                TableCell::Feasible { config, prediction } => ExportCell {
                    feasible: true,
                    tokens_per_s: Some(prediction.tokens_per_s),
                    mbs: Some(config.mbs),
                    zero: Some(config.zero),
                    recompute: Some(config.recompute.to_string()),
                    mfu: Some(prediction.mfu),
                    step_time_s: Some(prediction.step_time_s),
                    ..base
                },
                TableCell::Infeasible(why) => ExportCell {
                    reason: Some(why.clone()),
                    ..base
                },
            }
        })
        .collect();
    ExportView {
        step: at.step,
        tokens: at.tokens,
        b_crit: grid.b_crit,
        cells,
    }
}

fn opt<T: ToString>(v: &Option<T>) -> String {
    v.as_ref().map(ToString::to_string).unwrap_or_default()
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// The view as CSV with a header row.
pub fn to_csv(view: &ExportView) -> String {
    let mut out = String::from(
        "layout,batch,feasible,reason,tokens_per_s,stat_eff,goodput,mbs,zero,recompute,mfu,step_time_s,best\n",
    );
    for c in &view.cells {
        let row = [
            csv_field(&c.layout),
            c.batch.to_string(),
            c.feasible.to_string(),
            csv_field(&opt(&c.reason)),
            opt(&c.tokens_per_s),
            c.stat_eff.to_string(),
            opt(&c.goodput),
            opt(&c.mbs),
            opt(&c.zero),
            opt(&c.recompute),
            opt(&c.mfu),
            opt(&c.step_time_s),
            c.best.to_string(),
        ];
        out.push_str(&row.join(","));
        out.push('\n');
    }
    out
}
