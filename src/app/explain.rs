//! The explanation of a heatmap cell in the explorer's context (its statistical efficiency and
//! goodput at the cursor), and two cells side by side: the numbers the explanation popup
//! draws, from [`crate::perf::explain`].

use super::App;
use crate::goodput::{TableCell, moe_floor_problem};
use crate::perf::enumerate::Choices;
use crate::perf::explain::{Explanation, NearestChange, closest_miss, explain, nearest_change};

/// What is known about one cell.
#[derive(Debug, Clone, PartialEq)]
pub enum CellKind {
    /// The cell runs: its chosen configuration explained.
    Runs(Box<Explanation>),
    /// No configuration of the layout runs at this batch.
    Infeasible {
        /// Why, as the table says.
        reason: String,
        /// The searched configuration that comes closest (least memory), if one splits the batch.
        closest: Option<Box<Explanation>>,
        /// The smallest change that makes it run, if a neighbour runs.
        nearest: Option<Box<NearestChange>>,
        /// The smallest batch above the MoE floor, when the floor is the reason.
        batch_floor: Option<u64>,
    },
}

/// One heatmap cell explained at the cursor.
#[derive(Debug, Clone, PartialEq)]
pub struct CellView {
    /// (layout row, batch column).
    pub cell: (usize, usize),
    /// "DP8·TP1·PP1".
    pub layout: String,
    /// Global batch, samples.
    pub batch: u64,
    /// Statistical efficiency of the batch at the cursor's B_crit.
    pub stat_eff: f64,
    /// Goodput at the cursor, tokens/s (× efficiency); `None` when infeasible.
    pub goodput: Option<f64>,
    /// The explanation.
    pub kind: CellKind,
}

impl CellView {
    /// The explanation of what runs (the cell's configuration), if it runs.
    pub fn runs(&self) -> Option<&Explanation> {
        match &self.kind {
            CellKind::Runs(e) => Some(e),
            CellKind::Infeasible { .. } => None,
        }
    }
}

/// Explain cell `(row, col)` of the explorer's table at the cursor; `None` before the table
/// and grid exist or outside them.
pub fn cell_view(app: &App, (row, col): (usize, usize)) -> Option<CellView> {
    let (table, grid) = (app.table.as_ref()?, app.grid.as_ref()?);
    let layout = *table.layouts.get(row)?;
    let batch = *table.batches.get(col)?;
    let r = &app.resolved;
    let eff = r.efficiency();
    let ctx = r.perf_context(&eff);
    let search = &r.session.search;
    let choices = Choices {
        micro_batches: &search.micro_batches,
        zero: &search.zero,
        recompute: &search.recompute,
        interleave: &search.interleave,
        expert_parallel: &search.expert_parallel,
    };
    let dims = layout;
    let kind = match table.cell(row, col) {
        TableCell::Feasible { config, .. } => match explain(&ctx, config, batch) {
            Ok(e) => CellKind::Runs(Box::new(e)),
            Err(e) => CellKind::Infeasible {
                reason: e.to_string(),
                closest: None,
                nearest: None,
                batch_floor: None,
            },
        },
        TableCell::Infeasible(reason) => {
            let floor = moe_floor_problem(&ctx, batch).and_then(|_| {
                let spec = r.model.moe.as_ref()?;
                crate::perf::moe::batch_floor(
                    spec,
                    r.model.seq_len,
                    crate::perf::moe::DEFAULT_MAX_DROP,
                    1 << 24,
                )
            });
            let nearest = if floor.is_some() {
                None
            } else {
                nearest_change(&ctx, dims, batch, &choices, search.allow_cross_node_tp)
                    .map(Box::new)
            };
            CellKind::Infeasible {
                reason: reason.clone(),
                closest: closest_miss(&ctx, dims, batch, &choices).map(Box::new),
                nearest,
                batch_floor: floor,
            }
        }
    };
    let i = row * table.batches.len() + col;
    Some(CellView {
        cell: (row, col),
        layout: layout.label(),
        batch,
        stat_eff: grid.stat_eff.get(col).copied().unwrap_or(f64::NAN),
        goodput: grid.goodput.get(i).copied().flatten(),
        kind,
    })
}

/// One step or memory part of two cells and its change.
#[derive(Debug, Clone, PartialEq)]
pub struct PartDelta {
    /// The part's stable name.
    pub key: &'static str,
    /// The part in words.
    pub label: &'static str,
    /// Its glyph.
    pub glyph: char,
    /// In the marked cell (A), seconds or bytes.
    pub a: f64,
    /// In the selected cell (B), seconds or bytes.
    pub b: f64,
}

/// Two runnable cells side by side: A (marked) and B (selected).
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    /// Step parts, seconds.
    pub step: Vec<PartDelta>,
    /// Memory parts, bytes.
    pub memory: Vec<PartDelta>,
    /// Step time B / A.
    pub step_ratio: f64,
    /// Tokens/s B / A.
    pub throughput_ratio: f64,
    /// Statistical efficiency B / A.
    pub stat_eff_ratio: f64,
    /// Goodput B / A (= throughput ratio × efficiency ratio).
    pub goodput_ratio: f64,
    /// One sentence on what moving from A to B costs and buys here.
    pub summary: String,
}

fn deltas(a: &[crate::perf::explain::Part], b: &[crate::perf::explain::Part]) -> Vec<PartDelta> {
    a.iter()
        .zip(b)
        .map(|(x, y)| PartDelta {
            key: x.key,
            label: x.label,
            glyph: x.glyph,
            a: x.value,
            b: y.value,
        })
        .collect()
}

fn pct(r: f64) -> String {
    format!("{:+.1}%", (r - 1.0) * 100.0)
}

/// Compare marked cell `a` with selected cell `b`; `None` unless both run.
pub fn compare(a: &CellView, b: &CellView) -> Option<Comparison> {
    let (ea, eb) = (a.runs()?, b.runs()?);
    let (pa, pb) = (&ea.prediction, &eb.prediction);
    let step = deltas(&ea.step, &eb.step);
    let throughput_ratio = pb.tokens_per_s / pa.tokens_per_s;
    let stat_eff_ratio = b.stat_eff / a.stat_eff;
    let goodput_ratio = match (a.goodput, b.goodput) {
        (Some(x), Some(y)) if x > 0.0 => y / x,
        _ => throughput_ratio * stat_eff_ratio,
    };
    // The part that moved most, for the sentence.
    let biggest = step
        .iter()
        .max_by(|x, y| (x.b - x.a).abs().total_cmp(&(y.b - y.a).abs()));
    let (ca, cb) = (&ea.config, &eb.config);
    let layouts = if (ca.tp, ca.pp) == (cb.tp, cb.pp) {
        format!("DP {} → {}", ca.dp, cb.dp)
    } else {
        format!("{} → {}", ca.layout_label(), cb.layout_label())
    };
    let what = match (
        ca.dp == cb.dp && (ca.tp, ca.pp) == (cb.tp, cb.pp),
        a.batch == b.batch,
    ) {
        (true, _) => format!("batch {} → {}", a.batch, b.batch),
        (false, true) => format!("{layouts} at batch {}", a.batch),
        (false, false) => format!("{layouts}, batch {} → {}", a.batch, b.batch),
    };
    let moved = biggest.map_or(String::new(), |d| {
        format!(" ({} {:+.3} s/step)", d.label, d.b - d.a)
    });
    let summary = format!(
        "{what}: throughput {}{moved}, stat. eff. {} → goodput {}",
        pct(throughput_ratio),
        pct(stat_eff_ratio),
        pct(goodput_ratio)
    );
    Some(Comparison {
        step,
        memory: deltas(&ea.memory, &eb.memory),
        step_ratio: pb.step_time_s / pa.step_time_s,
        throughput_ratio,
        stat_eff_ratio,
        goodput_ratio,
        summary,
    })
}
