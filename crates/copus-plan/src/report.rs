//! The `copus plan` report (JSON and text); the app builds it from a resolved session.

use super::costs::SwitchCosts;
use super::problem::Problem;
use super::progress::TokenAxis;
use crate::goodput::{TableCell, ThroughputTable};
use serde::Serialize;

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
    /// Context-parallel degree.
    pub cp: u32,
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
    /// The trajectory's step at the switch: the step the explorer shows there and `grid --at`
    /// takes (the run's own step for a measured run, the scenario's nominal-batch step for a
    /// scenario).
    pub at_step: u64,
    /// Optimizer steps the optimal plan itself has run before the switch (at its own batches).
    pub plan_steps: u64,
    /// Tokens the optimal plan has consumed before the switch.
    pub consumed_tokens: f64,
    /// Index (0-based) of the planner's trajectory phase the new state starts at: one of
    /// `phases`, not the run number `--emit` gives its schedule (1…N, one per held state).
    pub phase: usize,
    /// B_crit at the switch's trajectory point (the source's B_crit times the session's
    /// `b_crit_scale`), samples: the value the explorer shows there.
    pub b_crit: f64,
    /// Mean B_noise of the phase the new state starts at (what the planner weighs), samples.
    pub phase_b_noise: f64,
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

/// One run of the optimal-joint plan: the phases it holds one (layout, batch) state for, in the
/// plan's own accounting (its optimizer steps at its own batches), which is what a trainer
/// counts; `copus plan --emit` turns these into framework arguments.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScheduleRun {
    /// Optimizer steps the plan has run before this run starts (a trainer's step counter).
    pub from_step: u64,
    /// Samples consumed before it starts (Σ steps × global batch of the earlier runs).
    pub from_samples: u64,
    /// Tokens consumed before it starts (`from_samples` × sequence length).
    pub from_tokens: f64,
    /// Optimizer steps the run lasts (at least 1).
    pub steps: u64,
    /// Where the run starts on the trajectory's token axis (the explorer's position), tokens.
    pub at_tokens: f64,
    /// The trajectory's step there (the step the explorer shows and `grid --at` takes).
    pub at_step: u64,
    /// The state held: layout, global batch and configuration.
    pub state: StateJson,
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
    /// The model and cluster planned for, as `MODEL on NODES×GPUS_PER_NODE HARDWARE`: the
    /// session's, or what `--model`, `--hardware`, `--nodes` and `--gpus-per-node` changed
    /// them to (the session's name and description stay the session's).
    pub scenario: String,
    /// The training stack the throughputs are predicted for.
    pub stack: crate::perf::stack::StackJson,
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
    /// Tokens per sample of the plan's model (its sequence length).
    pub seq_len: u32,
    /// Batches (samples) the grid searched that the session's `search.batch_sizes` does not
    /// list: the nearest multiples of the GPU count, added so that a batch divides over the
    /// data-parallel ranks (docs/MODEL.md, "The batch axis"). Empty when none was added.
    pub added_batches: Vec<u64>,
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
    /// The optimal-joint plan as runs a trainer can follow (one per held state, in order).
    pub schedule: Vec<ScheduleRun>,
    /// Where the schedule ends: its optimizer steps, samples and tokens in all (what a trainer
    /// following it counts; `--emit json`'s `end`), when it holds runs.
    pub end: Option<crate::emit::EmitEnd>,
    /// Where the trajectory's token axis ends (its last phase's end; see `token_axis`), tokens:
    /// `end.tokens` differs from it by design (the objective's count of the samples the plan's
    /// batches need for the same progress).
    pub trajectory_end_tokens: Option<f64>,
    /// Where the planned stretch of the trajectory's token axis starts (its first phase's
    /// start, e.g. a session's `start_tokens`), tokens: the schedule's token 0 and step 0 are
    /// this point of the trajectory.
    pub trajectory_start_tokens: Option<f64>,
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
        crate::perf::config::layout_label_cp(st.dp, st.cp, st.tp, st.pp),
        st.batch
    );
    match st.cell.map(|(l, b)| table.cell(l, b)) {
        Some(TableCell::Feasible { config, .. }) => {
            format!("{base} ({})", config.options_label())
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
        cp: st.cp,
        batch: st.batch,
        config,
    }
}

/// Where `schedule` ends (see [`PlanReport::end`]), at `seq_len` tokens a sample; `None`
/// without runs or past `u64`.
pub fn schedule_end(schedule: &[ScheduleRun], seq_len: u32) -> Option<crate::emit::EmitEnd> {
    let last = schedule.last()?;
    let step = last.from_step.checked_add(last.steps)?;
    let samples = last
        .from_samples
        .checked_add(last.steps.checked_mul(last.state.batch)?)?;
    Some(crate::emit::EmitEnd {
        step,
        samples,
        tokens: samples as f64 * f64::from(seq_len),
    })
}

impl PlanReport {
    /// The schedule's tokens against the trajectory's stretch it plans: (the stretch's
    /// tokens, its end less its start; the schedule's tokens over them − 1, a fraction,
    /// negative where the plan trains on fewer), when both are known and positive. The
    /// schedule counts from the stretch's start, so a trajectory that starts past 0 (a
    /// session's `start_tokens`) is compared over what the schedule covers, not from 0.
    pub fn tokens_against_trajectory(&self) -> Option<(f64, f64)> {
        let plan = self.end.map(|e| e.tokens).filter(|t| *t > 0.0)?;
        let span = self.trajectory_span_tokens()?;
        Some((span, plan / span - 1.0))
    }

    /// Tokens of the trajectory's planned stretch (end less start), when positive.
    pub fn trajectory_span_tokens(&self) -> Option<f64> {
        let end = self.trajectory_end_tokens?;
        let start = self.trajectory_start_tokens.unwrap_or(0.0).max(0.0);
        Some(end - start).filter(|t| t.is_finite() && *t > 0.0)
    }

    /// The trajectory's start where it is past 0 (the schedule's step 0 is there), tokens.
    pub fn trajectory_start_past_zero(&self) -> Option<f64> {
        self.trajectory_start_tokens
            .filter(|t| t.is_finite() && *t > 0.0)
    }
}
