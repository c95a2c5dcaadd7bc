//! Export of the current view: the goodput grid at the cursor as CSV and JSON, with the
//! context needed to read it later (model, hardware, cluster, B_crit and its units, the
//! efficiency form and the performance model's calibration).

use super::App;
use crate::goodput::{GoodputGrid, StatEffForm, TableCell, ThroughputTable};
use crate::perf::EfficiencyParams;
use crate::session::DataSource;
use crate::trajectory::TrajectoryPoint;
use serde::Serialize;

/// What an exported grid was computed for.
#[derive(Debug, Clone, Serialize)]
pub struct ExportContext {
    /// Session name.
    pub session: String,
    /// Model profile name.
    pub model: String,
    /// Tokens per sequence of the model (the unit of `batch` and of `b_crit`).
    pub model_seq_len: u32,
    /// Hardware profile name.
    pub hardware: String,
    /// Nodes in the cluster.
    pub nodes: u32,
    /// GPUs per node.
    pub gpus_per_node: u32,
    /// Where B_crit comes from: "scenario", "stats_file", "dump" or "live".
    pub b_crit_kind: &'static str,
    /// The trajectory's label (law or run, and smoother).
    pub b_crit_source: String,
    /// Tokens per sample of the source (a measured run's own).
    pub run_seq_len: u32,
    /// Multiplier applied to the estimated B_crit (what-if).
    pub b_crit_scale: f64,
    /// Statistical-efficiency form: "mccandlish" (0–1) or "pollux" (relative to `pollux_b0`).
    pub stat_eff_form: &'static str,
    /// Pollux reference batch B0, samples (model sequences), for the Pollux form.
    pub pollux_b0: Option<f64>,
    /// The training stack the grid was predicted for (preset, one-line label and every
    /// setting), as `grid --json` and `plan --json` give it.
    pub stack: crate::perf::stack::StackJson,
    /// The efficiency parameters in force (session, calibration or hardware profile); the
    /// stack's choices among them named as every JSON output names them (`"cudnn"`, not the
    /// session files' `Cudnn`).
    #[serde(serialize_with = "serialize_calibration")]
    pub calibration: EfficiencyParams,
}

/// `e` as JSON with its stack settings (attention, sharding, precision, …) named as the
/// `stack` object of `grid --json` and `plan --json` names them.
pub fn calibration_json(e: &EfficiencyParams) -> serde_json::Value {
    use crate::perf::stack::{StackSettings, StackSettingsJson};
    let mut v = serde_json::to_value(e).unwrap_or(serde_json::Value::Null);
    let names = serde_json::to_value(StackSettingsJson::from(StackSettings::of(e)));
    if let (serde_json::Value::Object(fields), Ok(serde_json::Value::Object(names))) =
        (&mut v, names)
    {
        for (key, name) in names {
            // Only the enum choices (strings); the booleans are already plain.
            if fields.get(&key).is_some_and(serde_json::Value::is_string) {
                fields.insert(key, name);
            }
        }
    }
    v
}

fn serialize_calibration<S: serde::Serializer>(
    e: &EfficiencyParams,
    s: S,
) -> Result<S::Ok, S::Error> {
    calibration_json(e).serialize(s)
}

/// The export context of `app` as it stands.
pub fn context(app: &App) -> ExportContext {
    let r = &app.resolved;
    let s = &r.session;
    let b_crit_kind = match &s.source {
        DataSource::Scenario(_) => "scenario",
        DataSource::Stats { .. } => "stats_file",
        DataSource::Dumps { .. } => "dump",
        DataSource::Live { .. } => "live",
    };
    let (stat_eff_form, pollux_b0) = match s.stat_eff {
        StatEffForm::McCandlish => ("mccandlish", None),
        StatEffForm::Pollux { b0 } => ("pollux", Some(b0)),
    };
    ExportContext {
        session: s.name.clone(),
        model: r.model.name.clone(),
        model_seq_len: r.model.seq_len,
        hardware: r.hardware.name.clone(),
        nodes: s.cluster.nodes,
        gpus_per_node: s.cluster.gpus_per_node,
        b_crit_kind,
        b_crit_source: app.trajectory.label.clone(),
        run_seq_len: app.run_seq_len(),
        b_crit_scale: s.b_crit_scale,
        stat_eff_form,
        pollux_b0,
        stack: r.stack().to_json(),
        calibration: r.efficiency(),
    }
}

/// One exported cell.
#[derive(Debug, Clone, Serialize)]
pub struct ExportCell {
    /// Layout label, e.g. "DP4·TP8·PP1".
    pub layout: String,
    /// Data-parallel degree.
    pub dp: u32,
    /// Tensor-parallel degree.
    pub tp: u32,
    /// Pipeline-parallel degree.
    pub pp: u32,
    /// Context-parallel degree.
    pub cp: u32,
    /// Global batch, sequences of the model.
    pub batch: u64,
    /// Whether some configuration of this layout runs at this batch.
    pub feasible: bool,
    /// Why not, when infeasible.
    pub reason: Option<String>,
    /// Tokens per second.
    pub tokens_per_s: Option<f64>,
    /// Statistical efficiency: 0–1 (McCandlish) or relative to B0 (Pollux).
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
    /// The configuration that runs, in the shape of `grid --json`'s cells (with the expert
    /// parallelism and interleave the fields above leave out); `None` when infeasible.
    pub config: Option<crate::perf::config::ConfigJson>,
}

/// The exported view.
#[derive(Debug, Clone, Serialize)]
pub struct ExportView {
    /// What the grid was computed for.
    pub context: ExportContext,
    /// Step at the cursor.
    pub step: u64,
    /// Tokens at the cursor.
    pub tokens: f64,
    /// B_crit at the cursor (after the session's scale), sequences of the model.
    pub b_crit: f64,
    /// B_crit at the cursor (after the session's scale), samples of the source.
    pub b_crit_run_samples: f64,
    /// The interval of `b_crit` (sequences of the model), as the timeline's title shows it;
    /// `null` where the source gives none (a scenario), an unbounded end `null`.
    pub b_crit_interval: Option<[Option<f64>; 2]>,
    /// A second run compared with this one (`open A --compare B`), as the explorer shows it;
    /// absent without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub comparison: Option<ExportComparison>,
    /// Every cell, row-major (layout × batch).
    pub cells: Vec<ExportCell>,
}

/// The comparison with a second run in an export: what the explorer's headline and
/// estimators panel say, with the figures behind them (the per-step aligned points are in
/// `analyze A --compare B --json`).
#[derive(Debug, Clone, Serialize)]
pub struct ExportComparison {
    /// Run B (its file name).
    pub b: String,
    /// The explorer's one-line summary.
    pub summary: String,
    /// Share of aligned points whose intervals do not overlap (0–1).
    pub differs_share: f64,
    /// B's last-window estimate over A's (see `now_windows_overlap`).
    pub now: Option<crate::stats::analysis::compare::WindowRatio>,
    /// Whether the two last windows overlap in training.
    pub now_windows_overlap: bool,
    /// Where the last windows do not overlap: B over A over the shorter run's last window.
    pub shared_end: Option<crate::stats::analysis::compare::SharedEnd>,
    /// The stretches where the intervals do not overlap.
    pub differs: Vec<crate::stats::analysis::compare::DiffStretch>,
}

/// The comparison of `app` (with its second run) for an export.
pub fn comparison(app: &App) -> Option<ExportComparison> {
    let c = app.compare.as_ref()?;
    let k = &c.comparison;
    Some(ExportComparison {
        b: c.label.clone(),
        summary: super::measured_view::compare_summary(k, &app.trajectory),
        differs_share: k.differs_share,
        now: k.now.clone(),
        now_windows_overlap: k.now_windows_overlap,
        shared_end: k.shared_end.clone(),
        differs: k.differs.clone(),
    })
}

/// Build the export of `grid` over `table` at trajectory point `at` (B_crit in the source's
/// samples, after the session's scale) in `context`.
pub fn export_view(
    table: &ThroughputTable,
    grid: &GoodputGrid,
    at: &TrajectoryPoint,
    context: &ExportContext,
) -> ExportView {
    let nb = table.batches.len();
    let cells = table
        .cells
        .iter()
        .enumerate()
        .map(|(i, cell)| {
            let (l, b) = (i / nb, i % nb);
            let layout = table.layouts[l];
            let base = ExportCell {
                layout: layout.label(),
                dp: layout.dp,
                tp: layout.tp,
                pp: layout.pp,
                cp: layout.cp,
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
                config: None,
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
                    config: Some(config.into()),
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
        context: context.clone(),
        step: at.step,
        tokens: at.tokens,
        b_crit: grid.b_crit,
        b_crit_run_samples: at.b_crit,
        // The run's interval in the model's sequences: the factor that converts the value.
        b_crit_interval: at.ci.filter(|_| at.b_crit > 0.0).map(|(lo, hi)| {
            let f = grid.b_crit / at.b_crit;
            [lo * f, hi * f].map(|x| x.is_finite().then_some(x))
        }),
        comparison: None,
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

/// The view as CSV: `# key: value` comment lines with the context (read with `comment='#'`),
/// then a header row and one row per cell.
pub fn to_csv(view: &ExportView) -> String {
    let c = &view.context;
    let mut out = String::new();
    let context = [
        ("session", c.session.clone()),
        (
            "model",
            format!("{} ({} tokens per sequence)", c.model, c.model_seq_len),
        ),
        ("hardware", c.hardware.clone()),
        (
            "cluster",
            format!(
                "{} node{} x {} GPUs",
                c.nodes,
                if c.nodes == 1 { "" } else { "s" },
                c.gpus_per_node
            ),
        ),
        ("step", view.step.to_string()),
        ("tokens", view.tokens.to_string()),
        ("b_crit_kind", c.b_crit_kind.to_string()),
        ("b_crit_source", c.b_crit_source.clone()),
        ("b_crit_sequences", view.b_crit.to_string()),
        (
            "b_crit_interval_sequences",
            view.b_crit_interval
                .map(|[lo, hi]| {
                    let end =
                        |x: Option<f64>| x.map_or_else(|| "unbounded".into(), |v| v.to_string());
                    format!("{} - {}", end(lo), end(hi))
                })
                .unwrap_or_else(|| "none (the source gives no interval)".into()),
        ),
        (
            "b_crit_run_samples",
            format!("{} (x {} tokens)", view.b_crit_run_samples, c.run_seq_len),
        ),
        ("b_crit_scale", c.b_crit_scale.to_string()),
        (
            "stat_eff_form",
            match c.pollux_b0 {
                Some(b0) => format!("{} (relative to B0 = {b0})", c.stat_eff_form),
                None => c.stat_eff_form.to_string(),
            },
        ),
        ("stack", c.stack.label.clone()),
        ("calibration", calibration_json(&c.calibration).to_string()),
    ];
    for (k, v) in context {
        out.push_str(&format!("# {k}: {}\n", v.replace('\n', " ")));
    }
    if let Some(k) = &view.comparison {
        out.push_str(&format!("# compared_with: {}\n", k.b.replace('\n', " ")));
        out.push_str(&format!("# comparison: {}\n", k.summary.replace('\n', " ")));
    }
    out.push_str(
        "layout,dp,tp,pp,batch,feasible,reason,tokens_per_s,stat_eff,goodput,mbs,zero,recompute,mfu,step_time_s,best,cp,ep,vpp\n",
    );
    for c in &view.cells {
        let row = [
            csv_field(&c.layout),
            c.dp.to_string(),
            c.tp.to_string(),
            c.pp.to_string(),
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
            // Added last, so that readers by position keep their columns.
            c.cp.to_string(),
            opt(&c.config.as_ref().map(|x| x.ep)),
            opt(&c.config.as_ref().map(|x| x.vpp)),
        ];
        out.push_str(&row.join(","));
        out.push('\n');
    }
    out
}
