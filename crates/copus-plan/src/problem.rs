//! A planning instance: phases × states with per-phase times and per-kind switch costs, and the
//! exact accounting every strategy is scored with.

use super::costs::{SwitchCosts, SwitchKind};
use super::objective::Efficiency;
use super::progress::Phase;
use crate::goodput::{TableCell, ThroughputTable};
use serde::Serialize;
use std::collections::HashMap;

/// One thing the job can run as: a 3D layout at a global batch with a known step time.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PlanState {
    /// Data-parallel degree.
    pub dp: u32,
    /// Tensor-parallel degree.
    pub tp: u32,
    /// Pipeline-parallel degree.
    pub pp: u32,
    /// Context-parallel degree (1: none); a change of it restarts the job like TP and PP.
    pub cp: u32,
    /// Expert-parallel degree (1: none, or a dense model); a change of it moves expert
    /// weights between ranks, a restart like TP and PP.
    pub ep: u32,
    /// ZeRO stage of the cell's configuration (0–3); a change of it repartitions the
    /// optimizer state (and, to or from stage 3, the weights): a checkpoint conversion and
    /// restart like a TP or PP change, never a batch switch.
    pub zero: u8,
    /// Global batch, samples.
    pub batch: u64,
    /// Seconds per optimizer step at `batch`.
    pub step_time_s: f64,
    /// (layout row, batch column) in the throughput table it came from, if any.
    pub cell: Option<(usize, usize)>,
}

/// Why a planning instance is malformed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProblemError {
    /// No phase to plan.
    #[error("nothing to plan: no phases")]
    NoPhases,
    /// No feasible state.
    #[error("nothing to plan: no feasible (layout, batch) cell")]
    NoStates,
    /// A value is out of range.
    #[error("{0}")]
    Invalid(String),
}

/// A planning instance.
#[derive(Debug, Clone)]
pub struct Problem {
    /// Phases in training order.
    pub phases: Vec<Phase>,
    /// Candidate states.
    pub states: Vec<PlanState>,
    /// Effective (monotone) per-kind switch costs, seconds.
    pub costs: SwitchCosts,
    /// Minimum phases between switches (≥ 1).
    pub min_dwell: usize,
    /// Statistical-efficiency model phase times are computed under.
    pub efficiency: Efficiency,
    /// Layout group of each state (same dp, tp, pp).
    pub(crate) layout_of: Vec<u32>,
    /// (tp, pp) group of each state.
    pub(crate) tp_pp_of: Vec<u32>,
    pub(crate) n_layouts: usize,
    pub(crate) n_tp_pp: usize,
    /// Per state: step time (s) and index of its batch in the distinct batches.
    pub(crate) per_step: Vec<f64>,
    pub(crate) batch_idx: Vec<u32>,
    /// Distinct batches, ascending, samples.
    pub(crate) batches: Vec<u64>,
    /// Steps to finish phase i at batch j: `steps[i * batches.len() + j]`.
    pub(crate) steps: Vec<f64>,
}

/// Smallest B_crit of a phase the planner accepts, samples: below this the step counts
/// overflow and the plan means nothing.
pub const MIN_PHASE_B_CRIT: f64 = 1e-9;
/// Largest B_crit of a phase the planner accepts, samples.
pub const MAX_PHASE_B_CRIT: f64 = 1e30;

impl Problem {
    /// Build an instance under the McCandlish objective; costs are made effective,
    /// `min_dwell` 0 is read as 1.
    pub fn new(
        phases: Vec<Phase>,
        states: Vec<PlanState>,
        costs: SwitchCosts,
        min_dwell: usize,
    ) -> Result<Self, ProblemError> {
        Self::with_efficiency(phases, states, costs, min_dwell, Efficiency::MCCANDLISH)
    }

    /// Build an instance under `efficiency` (its reference batch must be positive).
    pub fn with_efficiency(
        phases: Vec<Phase>,
        states: Vec<PlanState>,
        costs: SwitchCosts,
        min_dwell: usize,
        efficiency: Efficiency,
    ) -> Result<Self, ProblemError> {
        let b_ref = efficiency.reference_batch;
        if !(b_ref.is_finite() && b_ref > 0.0) {
            return Err(ProblemError::Invalid(format!(
                "reference batch must be positive, got {b_ref}"
            )));
        }
        if phases.is_empty() {
            return Err(ProblemError::NoPhases);
        }
        if states.is_empty() {
            return Err(ProblemError::NoStates);
        }
        for (i, p) in phases.iter().enumerate() {
            // Named only when a phase is rejected: planning re-checks every phase often.
            let at = || {
                format!(
                    "phase {} ({:.4e} to {:.4e} tokens)",
                    i + 1,
                    p.start_tokens,
                    p.end_tokens
                )
            };
            if !(MIN_PHASE_B_CRIT..=MAX_PHASE_B_CRIT).contains(&p.b_crit) {
                return Err(ProblemError::Invalid(format!(
                    "{}: B_crit is {:.4e} samples, outside {MIN_PHASE_B_CRIT:e}..{MAX_PHASE_B_CRIT:e} \
                     (check b_crit_scale and the source's law or data)",
                    at(),
                    p.b_crit
                )));
            }
            if !(p.min_samples.is_finite() && p.min_samples >= 0.0) {
                return Err(ProblemError::Invalid(format!(
                    "{}: its minimal samples are {:.4e}, not a finite number ≥ 0",
                    at(),
                    p.min_samples
                )));
            }
        }
        for (i, s) in states.iter().enumerate() {
            if s.batch == 0 || !(s.step_time_s.is_finite() && s.step_time_s > 0.0) {
                return Err(ProblemError::Invalid(format!(
                    "configuration {} (DP {} CP {} TP {} PP {} at batch {}): its predicted step \
                     time is {:.4e} s, not a positive finite number (check the hardware profile's \
                     peak FLOP/s, bandwidths and efficiency)",
                    i + 1,
                    s.dp,
                    s.cp,
                    s.tp,
                    s.pp,
                    s.batch,
                    s.step_time_s
                )));
            }
        }
        let mut layouts = HashMap::new();
        let mut tp_pps = HashMap::new();
        let mut layout_of = Vec::with_capacity(states.len());
        let mut tp_pp_of = Vec::with_capacity(states.len());
        for s in &states {
            let n = layouts.len() as u32;
            layout_of.push(
                *layouts
                    .entry((s.dp, s.cp, s.tp, s.pp, s.ep, s.zero))
                    .or_insert(n),
            );
            let n = tp_pps.len() as u32;
            tp_pp_of.push(*tp_pps.entry((s.cp, s.tp, s.pp, s.ep, s.zero)).or_insert(n));
        }
        let mut batches: Vec<u64> = states.iter().map(|s| s.batch).collect();
        batches.sort_unstable();
        batches.dedup();
        let batch_idx = states
            .iter()
            .map(|s| batches.partition_point(|&b| b < s.batch) as u32)
            .collect();
        let steps = phases
            .iter()
            .flat_map(|p| {
                batches.iter().map(move |&b| {
                    p.min_samples * efficiency.steps_per_min_sample(b as f64, p.b_crit)
                })
            })
            .collect();
        Ok(Self {
            per_step: states.iter().map(|s| s.step_time_s).collect(),
            batch_idx,
            batches,
            steps,
            phases,
            states,
            costs: costs.effective(),
            min_dwell: min_dwell.max(1),
            efficiency,
            layout_of,
            tp_pp_of,
            n_layouts: layouts.len(),
            n_tp_pp: tp_pps.len(),
        })
    }

    /// One state per feasible cell of `table`, step time of the cell's fastest configuration.
    pub fn from_table(
        table: &ThroughputTable,
        phases: Vec<Phase>,
        costs: SwitchCosts,
        min_dwell: usize,
    ) -> Result<Self, ProblemError> {
        let nb = table.batches.len();
        let states = table
            .cells
            .iter()
            .enumerate()
            .filter_map(|(i, c)| match c {
                TableCell::Feasible { config, prediction } => {
                    let (l, b) = (i / nb, i % nb);
                    let layout = table.layouts[l];
                    Some(PlanState {
                        dp: layout.dp,
                        tp: layout.tp,
                        pp: layout.pp,
                        cp: layout.cp,
                        ep: config.ep,
                        zero: config.zero,
                        batch: table.batches[b],
                        step_time_s: prediction.step_time_s,
                        cell: Some((l, b)),
                    })
                }
                TableCell::Infeasible(_) => None,
            })
            .collect();
        Self::new(phases, states, costs, min_dwell)
    }

    /// The same instance restricted to the states `keep` (indices into `self.states`).
    pub fn restricted(&self, keep: &[usize]) -> Result<Self, ProblemError> {
        let states = keep.iter().map(|&i| self.states[i]).collect();
        Self::with_efficiency(
            self.phases.clone(),
            states,
            self.costs,
            self.min_dwell,
            self.efficiency,
        )
    }

    /// Optimizer steps state `s` takes to finish phase `i` under the objective (McCandlish:
    /// ΔS_min·(1/B + 1/B_crit)).
    #[inline]
    pub fn steps(&self, i: usize, s: usize) -> f64 {
        self.steps[i * self.batches.len() + self.batch_idx[s] as usize]
    }

    /// Seconds state `s` takes to finish phase `i`: steps × step time.
    #[inline]
    pub fn phase_time(&self, i: usize, s: usize) -> f64 {
        self.steps(i, s) * self.per_step[s]
    }

    /// Kind of a switch from state `from` to state `to`; `None` when they are the same state.
    pub fn kind(&self, from: usize, to: usize) -> Option<SwitchKind> {
        if from == to {
            None
        } else if self.layout_of[from] == self.layout_of[to] {
            Some(SwitchKind::Batch)
        } else if self.tp_pp_of[from] == self.tp_pp_of[to] {
            Some(SwitchKind::DpResize)
        } else {
            Some(SwitchKind::Reshard)
        }
    }

    /// Effective cost of switching from `from` to `to`, seconds (0 when they are equal).
    pub fn switch_cost(&self, from: usize, to: usize) -> f64 {
        self.kind(from, to).map_or(0.0, |k| self.costs.of(k))
    }

    /// Whether every segment of `assignment` except the last lasts at least `min_dwell` phases.
    pub fn respects_dwell(&self, assignment: &[usize]) -> bool {
        let mut last = 0;
        for k in 1..assignment.len() {
            if assignment[k] != assignment[k - 1] {
                if k - last < self.min_dwell {
                    return false;
                }
                last = k;
            }
        }
        true
    }

    /// Total seconds of a per-phase state assignment, switch costs included.
    pub fn evaluate(&self, assignment: &[usize]) -> f64 {
        let run: f64 = assignment
            .iter()
            .enumerate()
            .map(|(i, &s)| self.phase_time(i, s))
            .sum();
        let switches: f64 = assignment
            .windows(2)
            .map(|w| self.switch_cost(w[0], w[1]))
            .sum();
        run + switches
    }

    /// A scored schedule from a per-phase assignment (one state index per phase).
    pub fn schedule(&self, assignment: Vec<usize>) -> Schedule {
        let mut switches = Vec::new();
        for k in 1..assignment.len() {
            let (from, to) = (assignment[k - 1], assignment[k]);
            let Some(kind) = self.kind(from, to) else {
                continue;
            };
            let end = (k + 1..assignment.len())
                .find(|&j| assignment[j] != to)
                .unwrap_or(assignment.len());
            let saved: f64 = (k..end)
                .map(|i| self.phase_time(i, from) - self.phase_time(i, to))
                .sum();
            let cost_s = self.costs.of(kind);
            switches.push(Switch {
                phase: k,
                from,
                to,
                kind,
                cost_s,
                gain_s: saved - cost_s,
            });
        }
        Schedule {
            time_s: self.evaluate(&assignment),
            states: assignment,
            switches,
        }
    }
}

/// A per-phase plan with its predicted time.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Schedule {
    /// State index of each phase.
    pub states: Vec<usize>,
    /// Predicted seconds to the target, switch costs included.
    pub time_s: f64,
    /// Switches in order.
    pub switches: Vec<Switch>,
}

/// One switch of a schedule.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Switch {
    /// First phase run in the new state (the switch happens at this phase boundary).
    pub phase: usize,
    /// State before.
    pub from: usize,
    /// State after.
    pub to: usize,
    /// Kind of switch.
    pub kind: SwitchKind,
    /// Its cost, seconds.
    pub cost_s: f64,
    /// Predicted net gain, seconds: time saved over staying in `from` until the next switch (or
    /// the end), minus `cost_s`.
    pub gain_s: f64,
}
