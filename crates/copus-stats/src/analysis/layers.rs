//! Per-layer breakdown: each layer's share of tr(Σ) and its own B_simple, from run-averaged
//! per-layer estimates (ratio of averages, never average of ratios), and each layer's smoothed
//! B_simple over time. Intervals are built exactly as the whole model's: Fieller's with the
//! Newey–West variance of residuals detrended by the two-sided kernel.

use crate::analysis::settings::EstimatorSettings;
use crate::analysis::summarize::{Series, run_means, smooth};
use crate::diagnostics::{Diagnostic, DiagnosticKind, Severity};
use crate::estimate::per_step::two_batch;
use crate::record::step::StepStats;
use crate::report::{LayerPoint, LayerRow};
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

/// Layers whose series get room for every record up front.
const PRESIZED_LAYERS: usize = 16;

impl LayerSeries {
    fn with_capacity(n: usize) -> Self {
        Self {
            steps: Vec::with_capacity(n),
            trace: Vec::with_capacity(n),
            g2: Vec::with_capacity(n),
            b_big: Vec::with_capacity(n),
        }
    }
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
    // Layers in name order with their series; `slots` maps each index to its series, and
    // the previous record's names are remembered (a run reports the same layers at every
    // step, so a record's names are usually checked, not looked up).
    let mut series: BTreeMap<&str, usize> = BTreeMap::new();
    let mut slots: Vec<LayerSeries> = Vec::new();
    let mut previous: Vec<(&str, usize)> = Vec::new();
    let mut mismatch = (0usize, 0usize, u64::MAX, 0u64);
    // Records with per-layer norms, and the first and last step among them.
    let mut covered = (0usize, u64::MAX, 0u64);
    for r in records {
        if r.layers.is_empty() {
            continue;
        }
        covered = (covered.0 + 1, covered.1.min(r.step), covered.2.max(r.step));
        let same = previous.len() == r.layers.len()
            && previous
                .iter()
                .zip(r.layers.keys())
                .all(|((a, _), b)| *a == b);
        if !same {
            previous.clear();
            for name in r.layers.keys() {
                let next = slots.len();
                let slot = *series.entry(name).or_insert(next);
                if slot == next {
                    // At most one point per record: room for it up front for the first
                    // layers (a run with many layers grows its series as they fill).
                    let room = if next < PRESIZED_LAYERS {
                        records.len()
                    } else {
                        0
                    };
                    slots.push(LayerSeries::with_capacity(room));
                }
                previous.push((name, slot));
            }
        }
        let mut sum_small = 0.0;
        for ((_, l), &(_, slot)) in r.layers.iter().zip(&previous) {
            sum_small += l.sq_small;
            if let Some(tb) = two_batch(r.b_small, r.b_big, l.sq_small, l.sq_big)
                && tb.trace.is_finite()
                && tb.g2.is_finite()
            {
                let e = &mut slots[slot];
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
    // In name order, as the map iterates.
    let series: Vec<(&str, LayerSeries)> = series
        .into_iter()
        .map(|(name, slot)| (name, std::mem::take(&mut slots[slot])))
        // A layer without one usable estimate has no series (and no row).
        .filter(|(_, s)| !s.steps.is_empty())
        .collect();
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
    // Noise measured only to rounding (the small batches hold one gradient): the layers'
    // shares of it are rounding too, and no layer dominates anything.
    let g2_total: f64 = rows.iter().map(|r| r.g2.abs()).sum();
    let resolved = total.abs() > crate::diagnostics::run_level::EQUAL_NORMS_RELATIVE * g2_total;
    for row in &mut rows {
        row.trace_share = if total != 0.0 && resolved {
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
        .filter(|r| resolved && k > 1.0 && r.trace_share > dominating_share.max(1.5 / k))
    {
        diags.push(dominating_layer(top, &rows));
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
    if covered.0 > 0 && covered.0 < records.len() {
        let msg = format!(
            "per-layer norms on only {} of {} usable steps (steps {}-{}): the layer rows and \
             shares describe those steps, not the whole run beside them",
            covered.0,
            records.len(),
            covered.1,
            covered.2
        );
        diags.push(
            Diagnostic::new(DiagnosticKind::LayersPartial, Severity::Warning, msg)
                .at(covered.1, covered.2),
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

/// Largest factor between the dominating layer's own B_simple and the rest of the model's for
/// which the whole-model value still describes both (a warning beyond it).
pub const DOMINATING_LAYER_DISAGREEMENT: f64 = 2.0;

/// The diagnostic of a layer holding most of tr(Σ). A large share alone is normal (a small
/// model's output layer often holds most of the noise) and is reported as information; it is
/// a warning only when the layer's own B_simple and the rest of the model's disagree by more
/// than [`DOMINATING_LAYER_DISAGREEMENT`]×, so that the whole-model value, mostly the layer's,
/// misdescribes the rest.
fn dominating_layer(top: &LayerRow, rows: &[LayerRow]) -> Diagnostic {
    let (trace, g2) = rows
        .iter()
        .filter(|r| r.name != top.name)
        .fold((0.0, 0.0), |(t, g), r| (t + r.trace_sigma, g + r.g2));
    let own = top.b_simple.filter(|b| b.is_finite() && *b > 0.0);
    let rest = (g2 > 0.0 && trace > 0.0).then(|| trace / g2);
    let share = 100.0 * top.trace_share;
    match (own, rest) {
        (Some(own), Some(rest))
            if (1.0 / DOMINATING_LAYER_DISAGREEMENT..=DOMINATING_LAYER_DISAGREEMENT)
                .contains(&(own / rest)) =>
        {
            Diagnostic::new(
                DiagnosticKind::DominatingLayer,
                Severity::Info,
                format!(
                    "layer {} holds {share:.0}% of tr(Sigma); its own B_simple ({}) and \
                     the rest of the model's ({}) agree within x{DOMINATING_LAYER_DISAGREEMENT}, \
                     so the whole-model value describes both",
                    top.name,
                    crate::text::significant(own, 4),
                    crate::text::significant(rest, 4)
                ),
            )
        }
        (Some(own), Some(rest)) => Diagnostic::new(
            DiagnosticKind::DominatingLayer,
            Severity::Warning,
            format!(
                "layer {} holds {share:.0}% of tr(Sigma) and its own B_simple ({}) is x{:.1} \
                 the rest of the model's ({}): the whole-model B_simple mostly reflects this \
                 one layer (check for clipping or an exploding layer there)",
                top.name,
                crate::text::significant(own, 4),
                own / rest,
                crate::text::significant(rest, 4)
            ),
        ),
        _ => Diagnostic::new(
            DiagnosticKind::DominatingLayer,
            Severity::Warning,
            format!(
                "layer {} holds {share:.0}% of tr(Sigma) and the rest of the model has no positive \
                 B_simple of its own: the whole-model value is this layer's",
                top.name
            ),
        ),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::step::LayerSq;

    /// The per-layer series as gathered before the names were remembered: one map look-up
    /// per layer and record, a series only for layers with a usable estimate.
    fn series_by_lookup(records: &[&StepStats]) -> BTreeMap<String, Vec<(u64, f64, f64)>> {
        let mut out: BTreeMap<String, Vec<(u64, f64, f64)>> = BTreeMap::new();
        for r in records {
            for (name, l) in &r.layers {
                if let Some(tb) = two_batch(r.b_small, r.b_big, l.sq_small, l.sq_big)
                    && tb.trace.is_finite()
                    && tb.g2.is_finite()
                {
                    out.entry(name.to_string())
                        .or_default()
                        .push((r.step, tb.trace, tb.g2));
                }
            }
        }
        out
    }

    /// Layer sets that change between records, a layer that comes and goes, and one that
    /// never gives a usable estimate: the same rows and trajectories as gathering by look-up.
    #[test]
    fn remembered_names_gather_what_lookups_gather() {
        let sets: [&[&str]; 6] = [
            &["a", "b", "c"],
            &["a", "b", "c"],
            &["a", "c"],
            &["b"],
            &[],
            &["a", "b", "c", "overflow"],
        ];
        let records: Vec<StepStats> = (0..600u64)
            .map(|i| {
                let x = 1.0 + (i % 11) as f64 * 0.05;
                let mut r = StepStats::new(i, 8.0, 64.0, 9.0 * x, 2.0 * x);
                let set = sets[(i as usize * 7 / 5) % sets.len()];
                for (k, name) in set.iter().enumerate() {
                    let l = if *name == "overflow" {
                        // (sq_small − sq_big)·b·B overflows: never a usable estimate.
                        LayerSq {
                            sq_small: 1.7e308,
                            sq_big: -1.7e308,
                        }
                    } else {
                        LayerSq {
                            sq_small: 3.0 * x + k as f64,
                            sq_big: 0.7 * x + 0.1 * k as f64,
                        }
                    };
                    r.layers.insert(intern_name(name), l);
                }
                r
            })
            .collect();
        let refs: Vec<&StepStats> = records.iter().collect();
        let settings = EstimatorSettings::default();
        let b = breakdown(&refs, &settings);
        let want = series_by_lookup(&refs);
        assert!(!want.contains_key("overflow"));
        let names: Vec<&str> = b.trajectories.keys().map(String::as_str).collect();
        assert_eq!(names, ["a", "b", "c"]);
        for (name, points) in &want {
            let traj = &b.trajectories[name];
            let steps: Vec<u64> = traj.iter().map(|p| p.0).collect();
            let want_steps: Vec<u64> = points.iter().map(|p| p.0).collect();
            assert_eq!(steps, want_steps, "{name}");
            let row = b.rows.iter().find(|r| r.name == *name).expect("a row");
            assert_eq!(row.steps, points.len());
            let s = LayerSeries {
                steps: want_steps,
                trace: points.iter().map(|p| p.1).collect(),
                g2: points.iter().map(|p| p.2).collect(),
                b_big: vec![64.0; points.len()],
            };
            let (own, own_traj) = layer(name, &s, &settings);
            assert_eq!(row.b_simple, own.b_simple, "{name}");
            assert_eq!(traj, &own_traj, "{name}");
        }
    }

    fn intern_name(name: &str) -> crate::LayerName {
        crate::intern(name)
    }
}
