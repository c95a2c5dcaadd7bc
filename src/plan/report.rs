//! `copus plan` end to end: a resolved session → phases, throughput table, strategies, and the
//! report (JSON and text).

use super::costs::{ReconfigCosts, SwitchCosts};
use super::objective::{Efficiency, Objective};
use super::problem::{Problem, ProblemError};
use super::progress::{self, ProgressError, TokenAxis};
use super::strategies::{self, StrategyParams, StrategyResult};
use crate::goodput::{self, TableCell, ThroughputTable};
use crate::perf::{self, PerfContext};
use crate::session::{DataSource, Resolved};
use crate::source::scenario::BCritKind;
use crate::source::{self, SourceError};
use crate::trajectory::Trajectory;
use serde::Serialize;
use std::path::PathBuf;

/// Why a session could not be planned.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The trajectory could not be produced.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// The trajectory could not be cut into phases.
    #[error("{path}: {source}")]
    Progress {
        /// Session file.
        path: PathBuf,
        /// What is wrong.
        source: ProgressError,
    },
    /// The planning instance is empty or malformed.
    #[error("{path}: {source}")]
    Problem {
        /// Session file.
        path: PathBuf,
        /// What is wrong.
        source: ProblemError,
    },
    /// The short horizon (`planner.target_loss`) cannot be applied.
    #[error("{path}: {source}")]
    Horizon {
        /// Session file.
        path: PathBuf,
        /// What is wrong.
        source: super::horizon::HorizonError,
    },
    /// A session value is out of range.
    #[error("{path}: {msg}")]
    Invalid {
        /// Session file.
        path: PathBuf,
        /// What is wrong.
        msg: String,
    },
}

/// One strategy in the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StrategyRow {
    /// Strategy name.
    pub name: String,
    /// How it decides.
    pub how: String,
    /// Predicted time to the target, seconds, switch costs included.
    pub time_s: f64,
    /// Static time / this time (> 1 is faster than the best static plan).
    pub speedup_vs_static: f64,
    /// Number of switches.
    pub switches: usize,
    /// State of the first phase.
    pub start: String,
    /// The same state, structured.
    pub start_state: StateJson,
}

/// A planner state (layout, batch and the configuration it runs with) as JSON writes it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StateJson {
    /// Data-parallel degree.
    pub dp: u32,
    /// Tensor-parallel degree.
    pub tp: u32,
    /// Pipeline-parallel degree.
    pub pp: u32,
    /// Global batch, samples.
    pub batch: u64,
    /// The full configuration (micro-batch, ZeRO, recompute), when the cell runs.
    pub config: Option<crate::perf::config::ConfigJson>,
}

/// One switch of the optimal-joint plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SwitchRow {
    /// Trajectory-axis tokens at the switch (where it sits on the timeline).
    pub at_tokens: f64,
    /// Optimizer steps the optimal plan has run before the switch.
    pub at_step: u64,
    /// Tokens the optimal plan has consumed before the switch.
    pub consumed_tokens: f64,
    /// Phase index the new state starts at.
    pub phase: usize,
    /// B_noise of that phase (the source's B_crit times the session's `b_crit_scale`), samples.
    pub b_crit: f64,
    /// State before.
    pub from: String,
    /// State after.
    pub to: String,
    /// State before, structured.
    pub from_state: StateJson,
    /// State after, structured.
    pub to_state: StateJson,
    /// Cost, seconds.
    pub cost_s: f64,
    /// "batch", "dp-resize" or "reshard".
    pub kind: String,
    /// Predicted net gain until the next switch, seconds (saved time minus cost).
    pub gain_s: f64,
}

/// What the B_crit source measures and how it is converted to the noise scale B_noise.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BCritConversion {
    /// "noise-scale", "threshold-cbs", "scaling-law" or "given".
    pub kind: String,
    /// What the source measures, in words.
    pub measures: String,
    /// Factor applied: B_noise = factor × source B_crit (the session's `b_crit_scale`).
    pub factor: f64,
    /// Where the factor comes from.
    pub factor_source: String,
    /// The factor the source's own definition implies, where it implies one.
    pub implied_factor: Option<f64>,
    /// Why it implies that factor.
    pub implied_because: Option<String>,
}

/// The report of `copus plan`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanReport {
    /// Session name.
    pub session: String,
    /// Objective the times are computed under: "mccandlish" or "lr-sqrt".
    pub objective: String,
    /// Reference batch of `lr-sqrt` (learning rate tuned there), samples; `None` under
    /// mccandlish.
    pub lr_reference_batch: Option<f64>,
    /// Where the B_crit trajectory comes from.
    pub trajectory: String,
    /// What the trajectory measures and its conversion to B_noise.
    pub b_crit: BCritConversion,
    /// "checkpoint-restart" or "in-place".
    pub reshard_mode: String,
    /// Goodput gain a greedy switch must predict (fraction).
    pub switch_threshold: f64,
    /// Fastest of the paper's baselines (static-gbs, cbs-fixed-small, cbs-fixed-large).
    pub fastest_baseline: String,
    /// Its time / optimal-joint's time (> 1: optimal-joint is faster).
    pub speedup_vs_fastest_baseline: f64,
    /// Hindsight static's time / optimal-joint's time.
    pub speedup_vs_hindsight_static: f64,
    /// How its token axis was read.
    pub token_axis: TokenAxis,
    /// Where the short horizon ends (`planner.target_loss`); `None`: the whole trajectory.
    pub horizon: Option<super::horizon::Horizon>,
    /// Phases planned.
    pub phases: usize,
    /// Candidate (layout, batch) states.
    pub states: usize,
    /// Effective per-kind switch costs, seconds.
    pub costs: SwitchCosts,
    /// Minimum dwell, phases.
    pub min_dwell_phases: usize,
    /// Strategies in report order.
    pub strategies: Vec<StrategyRow>,
    /// Switch points of the optimal-joint plan.
    pub switches: Vec<SwitchRow>,
    /// The best layout held at the session's `current_batch` for the whole run (what a user who
    /// keeps today's batch would get), when that batch is on the grid and feasible.
    pub current_batch_static: Option<StrategyRow>,
    /// Per phase: the heatmap's best cell (★) at the phase's B_crit and the shares of its step
    /// in exposed communication and the pipeline bubble.
    pub best_along: Vec<super::shares::BestShares>,
}

/// Label of a planner state: layout, batch and the table's chosen options.
pub fn state_label(table: &ThroughputTable, p: &Problem, s: usize) -> String {
    let st = &p.states[s];
    let base = format!(
        "{} B={}",
        crate::perf::config::layout_label(st.dp, st.tp, st.pp),
        st.batch
    );
    match st.cell.map(|(l, b)| table.cell(l, b)) {
        Some(TableCell::Feasible { config, .. }) => {
            format!(
                "{base} (mbs{} Z{} rc:{})",
                config.mbs, config.zero, config.recompute
            )
        }
        _ => base,
    }
}

/// State `s` of `p`, structured for JSON.
pub fn state_json(table: &ThroughputTable, p: &Problem, s: usize) -> StateJson {
    let st = &p.states[s];
    let config = match st.cell.map(|(l, b)| table.cell(l, b)) {
        Some(TableCell::Feasible { config, .. }) => Some(config.into()),
        _ => None,
    };
    StateJson {
        dp: st.dp,
        tp: st.tp,
        pp: st.pp,
        batch: st.batch,
        config,
    }
}

/// The per-sample efficiency the heatmap should weight by when the session's objective is not
/// McCandlish's: `lr-sqrt` at its reference batch (`planner.lr_reference_batch`, else
/// `current_batch`, else the scenario's `nominal_batch`); `None` for McCandlish (the session's
/// `stat_eff` form applies) or when no reference batch is known.
pub fn heatmap_efficiency(r: &Resolved) -> Option<Efficiency> {
    let planner = &r.session.planner;
    if planner.objective != Objective::LrSqrt {
        return None;
    }
    let nominal = match &r.session.source {
        DataSource::Scenario(s) => Some(s.nominal_batch),
        _ => None,
    };
    let b_ref = planner
        .lr_reference_batch
        .or(r.session.current_batch)
        .or(nominal)?;
    Some(Efficiency {
        objective: Objective::LrSqrt,
        reference_batch: b_ref as f64,
    })
}

/// The goodput grid of `table` at B_noise `b_noise` (the model's sequences), weighted as the
/// session asks: by [`heatmap_efficiency`] when the objective is not McCandlish's, else by the
/// session's `stat_eff` form. The one place the explorer and `copus grid` make this choice.
pub fn session_grid(r: &Resolved, table: &ThroughputTable, b_noise: f64) -> goodput::GoodputGrid {
    match heatmap_efficiency(r) {
        Some(e) => {
            goodput::GoodputGrid::with_efficiency(table, b_noise, &|x| e.stat_eff(x, b_noise))
        }
        None => goodput::GoodputGrid::at(table, b_noise, r.session.stat_eff),
    }
}

/// Plan a resolved session: every strategy and the optimal switch points.
pub fn plan_session(r: &Resolved) -> Result<PlanReport, PlanError> {
    let traj = source::load_trajectory(r)?;
    let eff = r.efficiency();
    let ctx = PerfContext {
        hw: &r.hardware,
        model: &r.model,
        eff: &eff,
        gpus_per_node: r.session.cluster.gpus_per_node,
    };
    let table = goodput::throughput_table(&ctx, &r.cluster(), &r.session.search);
    plan_with(r, &traj, &table)
}

/// Plan over an already loaded trajectory (before the session's B_crit scale) and throughput
/// table — what the explorer calls, so that nothing is loaded or tabulated twice.
pub fn plan_with(
    r: &Resolved,
    traj: &Trajectory,
    table: &ThroughputTable,
) -> Result<PlanReport, PlanError> {
    let path = r.path.clone();
    let costs: &ReconfigCosts = &r.session.costs;
    costs.validate().map_err(|msg| PlanError::Invalid {
        path: path.clone(),
        msg,
    })?;
    let axis = match &r.session.source {
        DataSource::Scenario(s) => TokenAxis::ReferenceBatch(s.nominal_batch as f64),
        _ => TokenAxis::FromSteps,
    };
    let planner = &r.session.planner;
    let cut = match planner.target_loss {
        Some(target) => {
            let window = planner
                .loss_window
                .unwrap_or(super::horizon::DEFAULT_LOSS_WINDOW);
            let (t, h) = super::horizon::cut_at_loss(traj, target, window).map_err(|source| {
                PlanError::Horizon {
                    path: path.clone(),
                    source,
                }
            })?;
            Some((t, h))
        }
        None => None,
    };
    let (traj, horizon) = match &cut {
        Some((t, h)) => (t, Some(h.clone())),
        None => (traj, None),
    };
    let phases = progress::phases(traj, axis, r.session.b_crit_scale).map_err(|source| {
        PlanError::Progress {
            path: path.clone(),
            source,
        }
    })?;
    let best_along = super::shares::best_along(r, table, &phases);
    let switch_costs = costs.switch_costs_on(perf::parameter_count(&r.model), fast_network_bw(r));
    let dwell = costs.min_dwell_phases as usize;
    let nominal = match &r.session.source {
        DataSource::Scenario(s) => Some(s.nominal_batch),
        _ => None,
    };
    let gbs = r.session.current_batch.or(nominal);
    let efficiency = match planner.objective {
        Objective::McCandlish => Efficiency::MCCANDLISH,
        Objective::LrSqrt => {
            let b_ref = planner
                .lr_reference_batch
                .or(gbs)
                .ok_or_else(|| PlanError::Invalid {
                    path: path.clone(),
                    msg: "objective lr-sqrt needs planner.lr_reference_batch, current_batch or a \
                      scenario's nominal_batch"
                        .into(),
                })?;
            Efficiency {
                objective: Objective::LrSqrt,
                reference_batch: b_ref as f64,
            }
        }
    };
    let mut problem =
        Problem::from_table(table, phases, switch_costs, dwell).map_err(|source| {
            PlanError::Problem {
                path: path.clone(),
                source,
            }
        })?;
    if efficiency != Efficiency::MCCANDLISH {
        problem = Problem::with_efficiency(
            problem.phases,
            problem.states,
            switch_costs,
            dwell,
            efficiency,
        )
        .map_err(|source| PlanError::Problem { path, source })?;
    }
    let params = StrategyParams {
        switch_threshold: costs.switch_threshold,
        greedy_every: costs.greedy_every_phases.map_or(dwell, |g| g as usize),
        gbs,
    };
    let results = strategies::compare(&problem, &params);
    let mut report = build_report(r, &traj.label, axis, table, &problem, &results);
    report.best_along = best_along;
    report.horizon = horizon;
    let at_current = r
        .session
        .current_batch
        .and_then(|b| strategies::static_at_batch(&problem, b).map(|s| (b, s)));
    if let Some((batch, s)) = at_current {
        let static_time = report.strategies.first().map_or(f64::NAN, |s| s.time_s);
        report.current_batch_static = Some(StrategyRow {
            name: format!("static@{batch}"),
            how: "best layout at the session's current batch, whole run".into(),
            time_s: s.time_s,
            speedup_vs_static: static_time / s.time_s,
            switches: 0,
            start: state_label(table, &problem, s.states[0]),
            start_state: state_json(table, &problem, s.states[0]),
        });
    }
    Ok(report)
}

/// Aggregate fast-network bandwidth of the cluster, bytes/s: every GPU at NVLink speed within
/// one node, at its inter-node NIC across nodes.
fn fast_network_bw(r: &Resolved) -> f64 {
    let c = &r.session.cluster;
    let per_gpu = if c.nodes > 1 {
        r.hardware.inter_bw_bytes_per_s
    } else {
        r.hardware.intra_bw_bytes_per_s
    };
    f64::from(c.nodes) * f64::from(c.gpus_per_node) * per_gpu
}

/// What the session's B_crit source measures and how it is converted.
fn b_crit_conversion(r: &Resolved) -> BCritConversion {
    let (kind, implied) = match &r.session.source {
        DataSource::Scenario(s) => (s.law.kind(), s.law.b_noise_factor()),
        _ => (BCritKind::NoiseScale, None),
    };
    let factor = r.session.b_crit_scale;
    let factor_source = r
        .session
        .planner
        .b_crit_scale_source
        .clone()
        .unwrap_or_else(|| {
            if (factor - 1.0).abs() < 1e-12 {
                "default: the source is used as B_noise unconverted".into()
            } else {
                "session b_crit_scale (no source given)".into()
            }
        });
    BCritConversion {
        kind: kind.name().into(),
        measures: kind.measures().into(),
        factor,
        factor_source,
        implied_factor: implied.map(|i| i.0),
        implied_because: implied.map(|i| i.1.to_string()),
    }
}

fn build_report(
    r: &Resolved,
    label: &str,
    axis: TokenAxis,
    table: &ThroughputTable,
    p: &Problem,
    results: &[StrategyResult],
) -> PlanReport {
    let static_time = results
        .iter()
        .find(|s| s.name == "static")
        .map_or(f64::NAN, |s| s.schedule.time_s);
    let time_of = |name: &str| {
        results
            .iter()
            .find(|s| s.name == name)
            .map_or(f64::NAN, |s| s.schedule.time_s)
    };
    let optimal = time_of("optimal-joint");
    let (fastest_baseline, baseline_time) = strategies::PAPER_BASELINES
        .iter()
        .map(|&n| (n, time_of(n)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .unwrap_or(("static-gbs", f64::NAN));
    let eff = p.efficiency;
    let strategies = results
        .iter()
        .map(|s| StrategyRow {
            name: s.name.to_string(),
            how: s.how.to_string(),
            time_s: s.schedule.time_s,
            speedup_vs_static: static_time / s.schedule.time_s,
            switches: s.schedule.switches.len(),
            start: state_label(table, p, s.schedule.states[0]),
            start_state: state_json(table, p, s.schedule.states[0]),
        })
        .collect();
    let mut switches = Vec::new();
    if let Some(best) = results.iter().find(|s| s.name == "optimal-joint") {
        let seq = r.model.seq_len as f64;
        let (mut steps, mut samples, mut next) = (0.0, 0.0, 0);
        for sw in &best.schedule.switches {
            for i in next..sw.phase {
                let s = best.schedule.states[i];
                steps += p.steps(i, s);
                samples += p.steps(i, s) * p.states[s].batch as f64;
            }
            next = sw.phase;
            switches.push(SwitchRow {
                at_tokens: p.phases[sw.phase].start_tokens,
                at_step: steps.round() as u64,
                consumed_tokens: samples * seq,
                phase: sw.phase,
                b_crit: p.phases[sw.phase].b_crit,
                from: state_label(table, p, sw.from),
                to: state_label(table, p, sw.to),
                from_state: state_json(table, p, sw.from),
                to_state: state_json(table, p, sw.to),
                cost_s: sw.cost_s,
                kind: sw.kind.name().to_string(),
                gain_s: sw.gain_s,
            });
        }
    }
    let costs = &r.session.costs;
    PlanReport {
        session: r.session.name.clone(),
        objective: eff.objective.name().into(),
        lr_reference_batch: (eff.objective == Objective::LrSqrt).then_some(eff.reference_batch),
        trajectory: label.to_string(),
        b_crit: b_crit_conversion(r),
        reshard_mode: costs.reshard.name().into(),
        switch_threshold: costs.switch_threshold,
        fastest_baseline: fastest_baseline.into(),
        speedup_vs_fastest_baseline: baseline_time / optimal,
        speedup_vs_hindsight_static: static_time / optimal,
        token_axis: axis,
        horizon: None,
        phases: p.phases.len(),
        states: p.states.len(),
        costs: p.costs,
        min_dwell_phases: p.min_dwell,
        strategies,
        switches,
        current_batch_static: None,
        best_along: Vec::new(),
    }
}
