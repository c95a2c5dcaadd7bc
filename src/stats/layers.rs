//! Per-layer breakdown: each layer's share of tr(Σ) and its own B_simple, from run-averaged
//! per-layer estimates (ratio of averages, never average of ratios), and each layer's smoothed
//! B_simple over time. Intervals are built exactly as the whole model's: Fieller's with the
//! Newey–West variance of residuals detrended by the two-sided kernel.

use super::diagnostics::{Diagnostic, DiagnosticKind, Severity};
use super::estimate::two_batch;
use super::report::{LayerPoint, LayerRow};
use super::settings::EstimatorSettings;
use super::smoothed::{Series, run_means, smooth};
use super::step::StepStats;
use rayon::prelude::*;
use std::collections::BTreeMap;

/// One layer's per-step estimates, in step order.
#[derive(Default)]
struct LayerSeries {
    steps: Vec<u64>,
    trace: Vec<f64>,
    g2: Vec<f64>,
    b_big: Vec<f64>,
}

/// Per-layer results: rows, diagnostics and trajectories.
pub struct Breakdown {
    /// Run-level rows, sorted by descending trace share.
    pub rows: Vec<LayerRow>,
    /// Dominating-layer and layers-do-not-add-up diagnostics.
    pub diagnostics: Vec<Diagnostic>,
    /// Each layer's smoothed B_simple per step: name → (step, point), in step order.
    pub trajectories: BTreeMap<String, Vec<(u64, LayerPoint)>>,
}

/// Per-layer rows (sorted by descending trace share), the layer diagnostics and the per-layer
/// trajectories, from two-batch `records` sorted by step.
pub fn breakdown(records: &[&StepStats], settings: &EstimatorSettings) -> Breakdown {
    breakdown_with(records, settings, LayerDetail::Full)
}

/// How much of the per-layer analysis to compute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerDetail {
    /// Rows with their intervals and the per-step trajectories (one smoothing per layer).
    Full,
    /// Only what the layer diagnostics need (each layer's share of tr(Σ), from run-wide
    /// means, the same numbers as the full rows' `trace_sigma`): no rows, no trajectories.
    DiagnosticsOnly,
}

/// [`breakdown`] at the given detail; with [`LayerDetail::DiagnosticsOnly`] `rows` and
/// `trajectories` are empty and the diagnostics are those of the full breakdown.
pub fn breakdown_with(
    records: &[&StepStats],
    settings: &EstimatorSettings,
    detail: LayerDetail,
) -> Breakdown {
    let dominating_share = settings.dominating_layer_share;
    let mut series: BTreeMap<&str, LayerSeries> = BTreeMap::new();
    let mut mismatch = (0usize, 0usize, u64::MAX, 0u64);
    for r in records {
        if r.layers.is_empty() {
            continue;
        }
        let mut sum_small = 0.0;
        for (name, l) in &r.layers {
            sum_small += l.sq_small;
            if let Some(tb) = two_batch(r.b_small, r.b_big, l.sq_small, l.sq_big)
                && tb.trace.is_finite()
                && tb.g2.is_finite()
            {
                let e = series.entry(name).or_default();
                e.steps.push(r.step);
                e.trace.push(tb.trace);
                e.g2.push(tb.g2);
                e.b_big.push(r.b_big);
            }
        }
        mismatch.1 += 1;
        if (sum_small - r.sq_small).abs() > 0.01 * r.sq_small.abs().max(f64::MIN_POSITIVE) {
            mismatch.0 += 1;
            mismatch.2 = mismatch.2.min(r.step);
            mismatch.3 = mismatch.3.max(r.step);
        }
    }
    // One smoothing pass per layer: independent, so in parallel (a live run with many layers
    // is re-analysed several times a second).
    let series: Vec<(&str, LayerSeries)> = series.into_iter().collect();
    let done: Vec<(LayerRow, Vec<(u64, LayerPoint)>)> = match detail {
        LayerDetail::Full => series
            .par_iter()
            .map(|(name, s)| layer(name, s, settings))
            .collect(),
        LayerDetail::DiagnosticsOnly => series
            .iter()
            .map(|(name, s)| (share_row(name, s), Vec::new()))
            .collect(),
    };
    let mut rows: Vec<LayerRow> = Vec::with_capacity(done.len());
    let mut trajectories = BTreeMap::new();
    for (row, traj) in done {
        if detail == LayerDetail::Full {
            trajectories.insert(row.name.clone(), traj);
        }
        rows.push(row);
    }
    let total: f64 = rows.iter().map(|r| r.trace_sigma).sum();
    for row in &mut rows {
        row.trace_share = if total != 0.0 {
            row.trace_sigma / total
        } else {
            0.0
        };
    }
    rows.sort_by(|a, b| b.trace_share.total_cmp(&a.trace_share));
    let mut diags = Vec::new();
    // With k layers an even split gives 1/k each: "dominating" needs more than the threshold
    // and more than 1.5× an even share (so two layers need > 75%).
    let k = rows.len() as f64;
    if let Some(top) = rows
        .first()
        .filter(|r| k > 1.0 && r.trace_share > dominating_share.max(1.5 / k))
    {
        let msg = format!(
            "layer {} holds {:.0}% of tr(Sigma): the whole-model B_simple mostly reflects this one \
             layer (check for clipping or an exploding layer there)",
            top.name,
            100.0 * top.trace_share
        );
        diags.push(Diagnostic::new(
            DiagnosticKind::DominatingLayer,
            Severity::Warning,
            msg,
        ));
    }
    if mismatch.0 > 0 {
        let msg = format!(
            "on {} of {} steps the per-layer sq_small do not add up to the whole-model sq_small \
             (> 1% apart): layers missing, or sharded gradients (ZeRO/TP/PP) summed twice or not at all",
            mismatch.0, mismatch.1
        );
        diags.push(
            Diagnostic::new(DiagnosticKind::LayersDoNotAddUp, Severity::Warning, msg)
                .at(mismatch.2, mismatch.3),
        );
    }
    if detail == LayerDetail::DiagnosticsOnly {
        rows.clear();
    }
    Breakdown {
        rows,
        diagnostics: diags,
        trajectories,
    }
}

/// A layer's row with only its run-wide means (no interval): enough for its share.
fn share_row(name: &str, s: &LayerSeries) -> LayerRow {
    let (trace, g2) = run_means(&s.trace, &s.g2);
    LayerRow {
        name: name.to_string(),
        trace_share: 0.0,
        b_simple: (g2 > 0.0).then(|| trace / g2),
        ci: [f64::NAN, f64::NAN],
        trace_sigma: trace,
        g2,
        steps: s.steps.len(),
    }
}

fn layer(
    name: &str,
    s: &LayerSeries,
    settings: &EstimatorSettings,
) -> (LayerRow, Vec<(u64, LayerPoint)>) {
    let sm = smooth(
        &Series {
            steps: &s.steps,
            trace: &s.trace,
            g2: &s.g2,
            b_big: &s.b_big,
        },
        settings,
    );
    let row = LayerRow {
        name: name.to_string(),
        trace_share: 0.0,
        b_simple: sm.summary.b_simple,
        ci: sm.summary.ci,
        trace_sigma: sm.summary.trace,
        g2: sm.summary.g2,
        steps: s.steps.len(),
    };
    let traj = s
        .steps
        .iter()
        .zip(&sm.points)
        .map(|(&step, p)| {
            (
                step,
                LayerPoint {
                    b_simple: p.b_simple,
                    ci: p.ci,
                },
            )
        })
        .collect();
    (row, traj)
}
