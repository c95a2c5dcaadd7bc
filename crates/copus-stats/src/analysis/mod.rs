//! The noise-scale analysis of a run: filter records, estimate per step, smooth, attach
//! intervals, per-layer breakdown and diagnostics. Entry points for the CLI, the TUI and the
//! dump reader.

pub mod compare;
pub mod layers;
pub mod settings;
pub mod summarize;

use crate::analysis::layers::{LayerDetail, breakdown_with};
use crate::analysis::settings::EstimatorSettings;
use crate::analysis::summarize::{Series, smooth};
use crate::diagnostics::run_level::{RunFacts, finish_diagnostics, infer_seq_len, verdict};
use crate::diagnostics::{Diagnostic, DiagnosticKind as K, Severity, record_changes};
use crate::estimate::per_step::{EstimatorKind, NoEstimate, StepEstimate, estimate_record};
use crate::estimate::window::{self, Drift, WindowEstimate};
use crate::ingest::coarsen::Coarsening;
use crate::ingest::protocol::{ProtocolError, validate};
use crate::ingest::reader::ReadOutcome;
use crate::record::step::StepStats;
use crate::report::stream::RowLayers;
use crate::report::{AnalyzeReport, StepRow, Summary};
use rayon::prelude::*;
use std::collections::BTreeMap;

/// Why no analysis could be produced.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StatsError {
    /// The estimator settings are out of range.
    #[error("invalid estimator settings: {0}")]
    Settings(String),
    /// Nothing to analyse: no record at all.
    #[error(
        "no stats records in the input ({malformed} malformed and {non_finite} non-finite line(s) skipped)"
    )]
    Empty {
        /// Malformed lines seen.
        malformed: usize,
        /// Non-finite lines seen.
        non_finite: usize,
    },
    /// Records exist but none gives an estimate.
    #[error("none of the {records} record(s) is usable: {reasons}")]
    NoUsableSteps {
        /// Records given.
        records: usize,
        /// Counts of the reasons.
        reasons: String,
    },
}

/// Counts of lines rejected before analysis (from a [`ReadOutcome`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InputCounts {
    /// Malformed lines.
    pub malformed: usize,
    /// Non-finite lines.
    pub non_finite: usize,
    /// Steps of the non-finite lines, where known.
    pub non_finite_steps: Vec<u64>,
    /// How the reader merged consecutive steps to bound memory, if it did.
    pub coarsening: Option<Coarsening>,
}

/// What an analysis takes besides the records: the estimator settings, the lines a reader
/// rejected before (for the diagnostics) and how much per-layer detail to build.
/// `&EstimatorSettings` converts into the usual options (nothing rejected, full detail).
#[derive(Debug, Clone)]
pub struct AnalyzeOptions<'a> {
    /// Estimator, smoother, windows, confidence.
    pub settings: &'a EstimatorSettings,
    /// Lines rejected before analysis (malformed, non-finite) and the reader's coarsening.
    pub counts: InputCounts,
    /// Per-layer rows and trajectories ([`LayerDetail::Full`]), or only the layer diagnostics.
    pub layers: LayerDetail,
}

impl<'a> AnalyzeOptions<'a> {
    /// The options for records a reader produced: its rejected lines are reported.
    pub fn read(outcome: &ReadOutcome, settings: &'a EstimatorSettings) -> Self {
        AnalyzeOptions {
            counts: counts_of(outcome),
            ..AnalyzeOptions::from(settings)
        }
    }

    /// The same options with `counts` as the lines rejected before analysis.
    pub fn with_counts(self, counts: InputCounts) -> Self {
        AnalyzeOptions { counts, ..self }
    }

    /// The same options with `layers` as the per-layer detail.
    pub fn with_layers(self, layers: LayerDetail) -> Self {
        AnalyzeOptions { layers, ..self }
    }
}

impl<'a> From<&'a EstimatorSettings> for AnalyzeOptions<'a> {
    fn from(settings: &'a EstimatorSettings) -> Self {
        AnalyzeOptions {
            settings,
            counts: InputCounts::default(),
            layers: LayerDetail::Full,
        }
    }
}

/// An analysis in its parts: the report with the rows' per-layer points held apart, flat
/// ([`RowLayers`]; the rows' own `layers` maps are empty), and the autocorrelation inflation
/// φ ≥ 1 applied to the variance of every smoothed point (the value
/// [`crate::estimate::incremental::inflation_of_rows`] recomputes from the rows).
#[derive(Debug)]
pub struct Analysis {
    /// The report, rows without their per-layer points.
    pub report: AnalyzeReport,
    /// The rows' per-layer points ([`RowLayers::attach`] puts them in the rows;
    /// [`crate::report::stream::write_report_pretty`] writes the JSON without attaching).
    pub layers: RowLayers,
    /// The variance inflation φ.
    pub inflation: f64,
}

impl Analysis {
    /// The report with its rows' per-layer points attached (what [`analyze`] returns).
    pub fn into_report(self) -> AnalyzeReport {
        let Analysis {
            mut report, layers, ..
        } = self;
        layers.attach(&mut report.steps);
        report
    }
}

/// Analyse records (any source). Non-finite, invalid and producer-skipped records are excluded
/// with a diagnostic; an error only when nothing is usable. `options`: the settings
/// (`&EstimatorSettings`) or [`AnalyzeOptions`].
pub fn analyze<'a>(
    records: &[StepStats],
    options: impl Into<AnalyzeOptions<'a>>,
) -> Result<AnalyzeReport, StatsError> {
    analyze_parts(records, options).map(Analysis::into_report)
}

/// [`analyze`] in its parts ([`Analysis`]): the per-layer points held apart and the
/// variance inflation, for writers and live views that need them.
pub fn analyze_parts<'a>(
    records: &[StepStats],
    options: impl Into<AnalyzeOptions<'a>>,
) -> Result<Analysis, StatsError> {
    let options = options.into();
    let (report, layers, inflation) =
        analyze_impl(records, &options.counts, options.settings, options.layers)?;
    Ok(Analysis {
        report,
        layers,
        inflation,
    })
}

fn counts_of(outcome: &ReadOutcome) -> InputCounts {
    InputCounts {
        malformed: outcome.malformed,
        non_finite: outcome.non_finite,
        non_finite_steps: outcome.non_finite_steps.clone(),
        coarsening: outcome.coarsening,
    }
}

/// Tallies of records dropped before estimation, for diagnostics.
#[derive(Debug, Default)]
pub(crate) struct Dropped {
    pub(crate) skipped: Vec<(u64, String)>,
    pub(crate) non_finite: Vec<u64>,
    /// The first producer's reason among the non-finite steps (the dump reader's names the
    /// tensor and the file).
    pub(crate) non_finite_reason: Option<(u64, String)>,
    pub(crate) invalid: Vec<(u64, String)>,
    pub(crate) no_dot: Vec<u64>,
    pub(crate) no_pred: Vec<u64>,
    /// Places where the step number goes down from one kept record to the next.
    pub(crate) backward: usize,
    /// Steps held by more than one kept record (ascending, once each), and how many records
    /// repeat a step already held.
    pub(crate) repeated_steps: Vec<u64>,
    pub(crate) repeats: usize,
    /// Records identical to one already kept (the same step and values: a line written
    /// twice), read once.
    pub(crate) duplicates: usize,
}

/// Each record screened on its own (in parallel), then sorted out in input order: the records
/// kept, sorted by step, and those dropped with why (the reader's non-finite lines included).
fn screen_records<'r>(
    records: &'r [StepStats],
    counts: &InputCounts,
) -> (Vec<&'r StepStats>, Dropped) {
    let mut dropped = Dropped::default();
    dropped.non_finite.extend(&counts.non_finite_steps);
    let screened: Vec<Screen> = records
        .par_iter()
        .with_min_len(PAR_MIN_RECORDS)
        .map(screen)
        .collect();
    let mut kept: Vec<&StepStats> = Vec::with_capacity(records.len());
    for (r, verdict) in records.iter().zip(screened) {
        match verdict {
            Screen::Keep => kept.push(r),
            Screen::NonFinite(reason) => {
                dropped.non_finite.push(r.step);
                if dropped.non_finite_reason.is_none() {
                    dropped.non_finite_reason = reason.map(|why| (r.step, why));
                }
            }
            Screen::Skipped(reason) => dropped.skipped.push((r.step, reason)),
            Screen::Invalid(reason) => dropped.invalid.push((r.step, reason)),
        }
    }
    dropped.backward = kept.windows(2).filter(|w| w[1].step < w[0].step).count();
    kept.sort_by_key(|r| r.step);
    dropped.duplicates = drop_duplicates(&mut kept);
    for w in kept.windows(2) {
        if w[1].step == w[0].step {
            dropped.repeats += 1;
            if dropped.repeated_steps.last() != Some(&w[1].step) {
                dropped.repeated_steps.push(w[1].step);
            }
        }
    }
    (kept, dropped)
}

/// Drop from `kept` (sorted by step) each record identical to an earlier one of its step: the
/// same line written twice is one measurement, as `copus watch` reads it (it was counted
/// twice, narrowing every interval). Records of one step with other values all stay. Returns
/// how many were dropped.
fn drop_duplicates(kept: &mut Vec<&StepStats>) -> usize {
    let before = kept.len();
    let mut start = 0;
    let mut out: Vec<&StepStats> = Vec::with_capacity(kept.len());
    for (i, r) in kept.iter().enumerate() {
        if i > 0 && r.step != kept[i - 1].step {
            start = out.len();
        }
        if !out[start..].contains(r) {
            out.push(r);
        }
    }
    *kept = out;
    before - kept.len()
}

/// Each kept record's estimate (in parallel); records that give none are counted in `dropped`.
fn estimate_steps(kept: &[&StepStats], dropped: &mut Dropped) -> Vec<StepEstimate> {
    let estimates: Vec<Result<StepEstimate, NoEstimate>> = kept
        .par_iter()
        .enumerate()
        .with_min_len(PAR_MIN_RECORDS)
        .map(|(i, r)| estimate_record(i, r, i.checked_sub(1).map(|p| kept[p])))
        .collect();
    let mut est: Vec<StepEstimate> = Vec::with_capacity(kept.len());
    for (r, e) in kept.iter().zip(estimates) {
        match e {
            Ok(e) => est.push(e),
            Err(NoEstimate::NoDotPrev) => dropped.no_dot.push(r.step),
            Err(NoEstimate::NoPredecessor) => dropped.no_pred.push(r.step),
        }
    }
    est
}

/// The report's step rows: each estimate with its smoothed point, its EMA ratio and its
/// record's fields (per-layer points are attached later).
fn step_rows(
    est: &[StepEstimate],
    kept: &[&StepStats],
    points: &[crate::analysis::summarize::Point],
    ratio: Vec<Option<f64>>,
) -> Vec<StepRow> {
    est.par_iter()
        .zip(points.par_iter())
        .zip(ratio.into_par_iter())
        .with_min_len(PAR_MIN_RECORDS)
        .map(|((e, p), ratio_ema)| {
            let r = kept[e.index];
            StepRow {
                step: e.step,
                b_simple: p.b_simple,
                ci: p.ci,
                sq_small: r.sq_small,
                sq_big: r.sq_big,
                b_small: r.b_small,
                b_big: r.b_big,
                g2: p.g2,
                trace_sigma: p.trace,
                g2_step: e.g2,
                trace_step: e.trace,
                ratio_ema,
                estimator: e.kind,
                tokens: r.tokens,
                loss: r.loss,
                lr: r.lr,
                layers: BTreeMap::new(),
            }
        })
        .collect()
}

/// Why a bandwidth the user set is too narrow for records at `steps`: below the usual gap
/// between them a kernel gives each record all of its own weight, smooths nothing, and every
/// interval collapses to its point (it read "95% CI [172.36, 172.36]" on a run logged every
/// 100 steps at `--bandwidth 15`, and the verdict still called it bounded).
fn narrow_kernel_problem(settings: &EstimatorSettings, steps: &[u64]) -> Result<(), String> {
    let Some(h) = settings.bandwidth_steps else {
        return Ok(());
    };
    let spacing = crate::analysis::settings::typical_spacing(steps);
    if h < spacing * crate::analysis::settings::MIN_BANDWIDTH_STEPS {
        return Err(format!(
            "bandwidth_steps {h} is narrower than the usual gap between the logged steps \
             ({spacing}): the kernel would smooth nothing and every interval collapse to zero \
             width; give at least {spacing} (the default, a fortieth of the records times \
             that gap, is {})",
            EstimatorSettings {
                bandwidth_steps: None,
                ..settings.clone()
            }
            .bandwidth_for(steps.len(), spacing)
        ));
    }
    Ok(())
}

fn analyze_impl(
    records: &[StepStats],
    counts: &InputCounts,
    settings: &EstimatorSettings,
    detail: LayerDetail,
) -> Result<(AnalyzeReport, RowLayers, f64), StatsError> {
    settings.validate().map_err(StatsError::Settings)?;
    let coarse = counts.coarsening.map(|c| {
        let kept_steps: Vec<u64> = records.iter().map(|r| r.step).collect();
        c.settings_for(settings, &kept_steps)
    });
    let settings = coarse.as_ref().unwrap_or(settings);
    if records.is_empty() {
        return Err(StatsError::Empty {
            malformed: counts.malformed,
            non_finite: counts.non_finite,
        });
    }
    let (kept, mut dropped) = screen_records(records, counts);
    let est = estimate_steps(&kept, &mut dropped);
    let non_finite_total =
        counts.non_finite + dropped.non_finite.len() - counts.non_finite_steps.len();
    if est.is_empty() {
        return Err(StatsError::NoUsableSteps {
            records: records.len(),
            reasons: format!(
                "{} skipped by the producer, {} non-finite, {} invalid, {} single-gradient without dot_prev, \
                 {} single-gradient without a predecessor",
                dropped.skipped.len(),
                non_finite_total,
                dropped.invalid.len(),
                dropped.no_dot.len(),
                dropped.no_pred.len()
            ),
        });
    }

    let steps: Vec<u64> = est.iter().map(|e| e.step).collect();
    narrow_kernel_problem(settings, &steps).map_err(StatsError::Settings)?;
    let trace: Vec<f64> = est.iter().map(|e| e.trace).collect();
    let g2: Vec<f64> = est.iter().map(|e| e.g2).collect();
    let b_big: Vec<f64> = est.iter().map(|e| kept[e.index].b_big).collect();
    let series = Series {
        steps: &steps,
        trace: &trace,
        g2: &g2,
        b_big: &b_big,
    };
    let two_batch: Vec<&StepStats> = est
        .iter()
        .filter(|e| !e.kind.is_biased())
        .map(|e| kept[e.index])
        .collect();
    let used: Vec<&StepStats> = est.iter().map(|e| kept[e.index]).collect();
    // The whole model's smoothing, the layers' and the record-level diagnostics are
    // independent: side by side.
    let (mut sm, ((per_layer, row_layers), (changes, seq_len))) = rayon::join(
        || smooth(&series, settings),
        || {
            rayon::join(
                || {
                    // The layers' points go to the rows of their steps (the rows are built
                    // from `est` in order, so row i is at `steps[i]`).
                    let mut b = breakdown_with(&two_batch, settings, detail);
                    let points = std::mem::take(&mut b.trajectories);
                    let rows = match detail {
                        LayerDetail::Full => RowLayers::assign(&steps, points),
                        LayerDetail::DiagnosticsOnly => RowLayers::default(),
                    };
                    (b, rows)
                },
                || (record_changes(&used), infer_seq_len(&used)),
            )
        },
    );
    // A merged record is labelled with its first step: the windows ending at the last one end
    // at the last step read ("steps 896-992" on a run that ended at 999), the drift's text too.
    let end = steps[steps.len() - 1];
    let last = counts.coarsening.map_or(end, |c| c.last_step_read.max(end));
    if sm.now.last_step == end {
        sm.now.last_step = last;
    }
    let run_wide = WindowEstimate {
        first_step: steps[0],
        last_step: last,
        steps: steps.len(),
        b_simple: sm.summary.b_simple,
        ci: sm.summary.ci,
        g2: sm.summary.g2,
        trace_sigma: sm.summary.trace,
    };
    let drift = sm
        .first
        .as_ref()
        .and_then(|f| window::drift(f, &sm.now, settings.confidence, settings.drift_min_factor));
    let b0 = settings.reference_batch.unwrap_or(b_big[0]);
    let ratio = crate::smoothing::ratio_ema(&trace, &g2, &b_big, settings.ema_decay, b0);

    let rows = step_rows(&est, &kept, &sm.points, ratio);

    let mut diagnostics = changes;
    diagnostics.extend(per_layer.diagnostics);
    if let Some(d) = drift.as_ref().filter(|d| d.significant) {
        diagnostics.push(drift_diagnostic(d, settings.confidence));
    }
    let negative = g2.iter().filter(|x| **x < 0.0).count() as f64 / g2.len() as f64;
    let run = RunFacts {
        dropped: &dropped,
        counts,
        estimates: &est,
        rows: &rows,
        summary: &sm.summary,
        negative_g2_fraction: negative,
        settings,
        records_read: counts.coarsening.map_or(records.len(), |c| {
            usize::try_from(c.records_read).unwrap_or(usize::MAX)
        }),
    };
    finish_diagnostics(&mut diagnostics, &run);
    diagnostics.extend(counts.coarsening.map(|c| c.diagnostic()));
    diagnostics.sort_by_key(|d| std::cmp::Reverse(d.severity));

    let estimator = majority_kind(&est);
    let inflation = sm.inflation;
    let now: crate::estimate::window::WindowEstimate = (&sm.now).into();
    // A window has an estimate to compare when its B_simple is positive with a variance.
    let estimated = |w: &summarize::WindowPoint| {
        w.point.b_simple.is_some_and(|b| b > 0.0) && w.var_ln.is_some()
    };
    let drift_not_measured = drift.is_none().then(|| {
        let which = sm
            .first
            .as_ref()
            .map(|f| (estimated(f), estimated(&sm.now)));
        crate::report::drift_not_measured_in(est.len(), now.steps, which)
    });
    let mut summary = Summary {
        b_simple: sm.summary.b_simple,
        ci: sm.summary.ci,
        run_wide,
        now,
        drift,
        drift_not_measured,
        g2: sm.summary.g2,
        trace_sigma: sm.summary.trace,
        steps: est.len(),
        malformed_lines: counts.malformed,
        layers: per_layer.rows,
        diagnostics,
        verdict: crate::report::Verdict::Stable,
        verdict_meaning: String::new(),
        reasons: Vec::new(),
        confidence: settings.confidence,
        negative_g2_fraction: negative,
        non_finite_skipped: non_finite_total,
        duplicates_dropped: dropped.duplicates,
        estimator,
        smoother: sm.description,
        bandwidth_steps: sm.bandwidth_steps,
        seq_len,
        b_simple_tokens: seq_len.zip(sm.summary.b_simple).map(|(s, b)| s * b),
        coarsened: counts.coarsening,
    };
    let (v, reasons) = verdict(&summary, settings);
    summary.verdict = v;
    summary.verdict_meaning = v.meaning().to_string();
    summary.reasons = reasons;
    Ok((
        AnalyzeReport {
            summary,
            steps: rows,
        },
        row_layers,
        inflation,
    ))
}

/// Records per parallel task of the per-record passes.
const PAR_MIN_RECORDS: usize = 4096;

/// What becomes of one record before estimation.
enum Screen {
    Keep,
    /// With the producer's reason, when a producer flagged it.
    NonFinite(Option<String>),
    Skipped(String),
    Invalid(String),
}

fn screen(r: &StepStats) -> Screen {
    if let Some(reason) = &r.skipped {
        // Producers (the dump reader, the trainer, the Python hook) flag NaN/Inf steps with
        // a reason starting "non-finite": the same event as a NaN in a stats line.
        return if is_non_finite_reason(reason) {
            Screen::NonFinite(Some(reason.clone()))
        } else {
            Screen::Skipped(reason.clone())
        };
    }
    match validate(r) {
        Ok(()) => Screen::Keep,
        Err(ProtocolError::NonFinite { .. }) => Screen::NonFinite(None),
        Err(e) => Screen::Invalid(e.to_string()),
    }
}

/// True for a producer's skip reason that reports NaN/±Inf values: it mentions `non-finite`
/// (any case), as the dump reader, the built-in trainer and the Python hook write it (the hook
/// may append it to another reason: `"...; non-finite: loss"`).
pub fn is_non_finite_reason(reason: &str) -> bool {
    reason.to_ascii_lowercase().contains("non-finite")
}

fn drift_diagnostic(d: &Drift, confidence: f64) -> Diagnostic {
    let fmt = |x: Option<f64>| x.map_or_else(|| "-".into(), |v| format!("{v:.1}"));
    let dir = if d.factor >= 1.0 { "grows" } else { "shrinks" };
    let msg = format!(
        "B_simple {dir} x{:.2} ({:.0}% CI x{:.2}-x{:.2}) from {} samples over steps {}-{} to {} \
         samples over steps {}-{}: the run-wide value averages a moving target",
        d.factor,
        100.0 * confidence,
        d.ci[0],
        d.ci[1],
        fmt(d.from.b_simple),
        d.from.first_step,
        d.from.last_step,
        fmt(d.to.b_simple),
        d.to.first_step,
        d.to.last_step,
    );
    Diagnostic::new(K::Drift, Severity::Warning, msg)
        .at(d.from.first_step, d.to.last_step)
        .located(&[
            [d.from.first_step, d.from.last_step],
            [d.to.first_step, d.to.last_step],
        ])
}

fn majority_kind(est: &[StepEstimate]) -> EstimatorKind {
    let count = |k| est.iter().filter(|e| e.kind == k).count();
    [
        EstimatorKind::TwoBatch,
        EstimatorKind::PerExample,
        EstimatorKind::Differencing,
    ]
    .into_iter()
    .max_by_key(|k| count(*k))
    .unwrap_or(EstimatorKind::TwoBatch)
}

/// Shorthand used by the diagnostics assembly: located at the stretches of `steps`.
pub(crate) fn diag(kind: K, severity: Severity, msg: String, steps: &[u64]) -> Diagnostic {
    Diagnostic::new(kind, severity, msg).located(&crate::diagnostics::stretches_of(steps))
}
