//! Per-layer breakdown: each layer's share of tr(Σ) and its own B_simple, from run-averaged
//! per-layer estimates (ratio of averages, never average of ratios).

use super::diagnostics::{Diagnostic, DiagnosticKind, Severity};
use super::estimate::two_batch;
use super::interval::{fieller, hac_mean_cov};
use super::report::LayerRow;
use super::step::StepStats;
use std::collections::BTreeMap;

/// Per-layer rows (sorted by descending trace share) and the layer diagnostics.
pub fn breakdown(
    records: &[&StepStats],
    z: f64,
    lag: usize,
    dominating_share: f64,
) -> (Vec<LayerRow>, Vec<Diagnostic>) {
    let mut series: BTreeMap<&str, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
    let mut mismatch = (0usize, 0usize, u64::MAX, 0u64);
    for r in records {
        if r.layers.is_empty() {
            continue;
        }
        let mut sum_small = 0.0;
        for (name, l) in &r.layers {
            sum_small += l.sq_small;
            if let Some(tb) = two_batch(r.b_small, r.b_big, l.sq_small, l.sq_big) {
                let e = series.entry(name.as_str()).or_default();
                e.0.push(tb.trace);
                e.1.push(tb.g2);
            }
        }
        mismatch.1 += 1;
        if (sum_small - r.sq_small).abs() > 0.01 * r.sq_small.abs().max(f64::MIN_POSITIVE) {
            mismatch.0 += 1;
            mismatch.2 = mismatch.2.min(r.step);
            mismatch.3 = mismatch.3.max(r.step);
        }
    }
    let mut rows: Vec<LayerRow> = series
        .into_iter()
        .map(|(name, (t, g))| layer_row(name, &t, &g, z, lag))
        .collect();
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
    (rows, diags)
}

fn layer_row(name: &str, t: &[f64], g: &[f64], z: f64, lag: usize) -> LayerRow {
    let n = t.len() as f64;
    let mt = t.iter().sum::<f64>() / n;
    let mg = g.iter().sum::<f64>() / n;
    let dt: Vec<f64> = t.iter().map(|x| x - mt).collect();
    let dg: Vec<f64> = g.iter().map(|x| x - mg).collect();
    let ci = fieller(mt, mg, hac_mean_cov(&dt, &dg, None, lag), z);
    LayerRow {
        name: name.to_string(),
        trace_share: 0.0,
        b_simple: (mg > 0.0).then(|| mt / mg),
        ci,
        trace_sigma: mt,
        g2: mg,
        steps: t.len(),
    }
}
