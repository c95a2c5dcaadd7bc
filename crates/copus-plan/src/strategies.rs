//! The strategies a user would otherwise run, scored with the same accounting as the optimum
//! ([`Problem::evaluate`]: phase times in minimal-sample units plus per-kind switch costs).

use super::dp;
use super::problem::{Problem, Schedule};
use serde::Serialize;

/// Knobs of the heuristic strategies and baselines.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct StrategyParams {
    /// Goodput gain (fraction) a greedy switch (batch-adaptive, greedy-joint) must predict in
    /// the phase it is considered at (Pollux: 0.05).
    pub switch_threshold: f64,
    /// Phases between two argmax checks of greedy-joint (raised to the minimum dwell).
    pub greedy_every: usize,
    /// The session's fixed global batch for `static-gbs`, samples (`None`: the median batch of
    /// the grid); the nearest batch on the grid (in log scale) is used.
    pub gbs: Option<u64>,
}

impl Default for StrategyParams {
    fn default() -> Self {
        Self {
            switch_threshold: 0.05,
            greedy_every: 1,
            gbs: None,
        }
    }
}

/// One strategy's plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StrategyResult {
    /// "static", "static-gbs", "cbs-fixed-small", "cbs-fixed-large", "batch-adaptive",
    /// "config-adaptive", "greedy-joint" or "optimal-joint".
    pub name: &'static str,
    /// How it decides, in a few words.
    pub how: &'static str,
    /// Its schedule and predicted time.
    pub schedule: Schedule,
}

/// Best single state for the whole run (the fastest static baseline).
pub fn static_best(p: &Problem) -> Schedule {
    let n = p.phases.len();
    let total = |s: usize| (0..n).map(|i| p.phase_time(i, s)).sum::<f64>();
    let best = (0..p.states.len())
        .map(|s| (total(s), s))
        .min_by(|a, b| a.0.total_cmp(&b.0))
        .map_or(0, |(_, s)| s);
    p.schedule(vec![best; n])
}

/// The best layout held at global batch `batch` (samples) for the whole run, if any state
/// has that batch: the baseline of a user who keeps today's batch.
pub fn static_at_batch(p: &Problem, batch: u64) -> Option<Schedule> {
    let keep: Vec<usize> = (0..p.states.len())
        .filter(|&s| p.states[s].batch == batch)
        .collect();
    let sub = p.restricted(&keep).ok()?;
    let plan = static_best(&sub);
    Some(p.schedule(plan.states.iter().map(|&i| keep[i]).collect()))
}

fn argmin_at(p: &Problem, i: usize, among: &[usize]) -> usize {
    among
        .iter()
        .copied()
        .min_by(|&a, &b| p.phase_time(i, a).total_cmp(&p.phase_time(i, b)))
        .unwrap_or(0)
}

/// Pollux-like: one 3D layout for the whole run; at each boundary allowed by the dwell, move to
/// the layout's best batch when its goodput beats the current one by more than the threshold.
/// The best layout is kept.
pub fn batch_adaptive(p: &Problem, params: &StrategyParams) -> Schedule {
    let n = p.phases.len();
    let mut by_layout: Vec<Vec<usize>> = vec![Vec::new(); p.n_layouts];
    for s in 0..p.states.len() {
        by_layout[p.layout_of[s] as usize].push(s);
    }
    let mut best: Option<Schedule> = None;
    for among in by_layout.iter().filter(|v| !v.is_empty()) {
        let mut cur = argmin_at(p, 0, among);
        let mut last = 0;
        let mut assignment = Vec::with_capacity(n);
        assignment.push(cur);
        for k in 1..n {
            if k - last >= p.min_dwell {
                let cand = argmin_at(p, k, among);
                // Goodput ∝ 1 / (time per minimal sample) in a phase.
                let gain = p.phase_time(k, cur) / p.phase_time(k, cand) - 1.0;
                if cand != cur && gain > params.switch_threshold {
                    cur = cand;
                    last = k;
                }
            }
            assignment.push(cur);
        }
        let s = p.schedule(assignment);
        if best.as_ref().is_none_or(|b| s.time_s < b.time_s) {
            best = Some(s);
        }
    }
    best.unwrap_or_else(|| static_best(p))
}

/// One global batch for the whole run; the best layout per phase with switch costs, by the
/// exact dynamic programme restricted to that batch. The best batch is kept.
///
/// While step times do not depend on the training phase, a phase's time at fixed batch B is
/// ΔS_min·(1/B + 1/B_crit)·τ, so the layouts' ranking never changes and this strategy equals
/// the best static plan at its batch: configuration changes only pay off together with batch
/// changes. It will differ once throughput depends on the phase (e.g. sequence-length warm-up).
pub fn config_adaptive(p: &Problem) -> Schedule {
    let mut batches: Vec<u64> = p.states.iter().map(|s| s.batch).collect();
    batches.sort_unstable();
    batches.dedup();
    let mut best: Option<Schedule> = None;
    for b in batches {
        let keep: Vec<usize> = (0..p.states.len())
            .filter(|&s| p.states[s].batch == b)
            .collect();
        let Ok(sub) = p.restricted(&keep) else {
            continue;
        };
        let plan = dp::optimal(&sub);
        let s = p.schedule(plan.states.iter().map(|&i| keep[i]).collect());
        if best.as_ref().is_none_or(|b| s.time_s < b.time_s) {
            best = Some(s);
        }
    }
    best.unwrap_or_else(|| static_best(p))
}

/// The seed's loop: every `greedy_every` phases (at least the dwell) jump to the argmax-goodput
/// state of the current phase when its goodput beats the current state's by more than the
/// switch threshold, paying whatever the switch costs.
pub fn greedy_joint(p: &Problem, params: &StrategyParams) -> Schedule {
    let n = p.phases.len();
    let every = params.greedy_every.max(p.min_dwell).max(1);
    let all: Vec<usize> = (0..p.states.len()).collect();
    let mut cur = argmin_at(p, 0, &all);
    let assignment = (0..n)
        .map(|k| {
            if k > 0 && k % every == 0 {
                let cand = argmin_at(p, k, &all);
                let gain = p.phase_time(k, cur) / p.phase_time(k, cand) - 1.0;
                if gain > params.switch_threshold {
                    cur = cand;
                }
            }
            cur
        })
        .collect();
    p.schedule(assignment)
}

/// The state among `among` whose batch is nearest to `target` samples in log scale (ties: the
/// smaller batch, then the faster step).
fn nearest_batch(p: &Problem, among: &[usize], target: f64) -> Option<usize> {
    let d = |s: usize| ((p.states[s].batch as f64) / target).ln().abs();
    among.iter().copied().min_by(|&a, &b| {
        d(a).total_cmp(&d(b))
            .then(p.states[a].batch.cmp(&p.states[b].batch))
            .then(p.per_step[a].total_cmp(&p.per_step[b]))
    })
}

/// The paper's fixed-batch baseline: the session's global batch (nearest on the grid to
/// `params.gbs`) with the best layout and micro-batch for it, held for the whole run.
pub fn static_gbs(p: &Problem, params: &StrategyParams) -> Schedule {
    let target = params.gbs.map_or_else(
        || p.batches[p.batches.len() / 2] as f64,
        |b| b.max(1) as f64,
    );
    let all: Vec<usize> = (0..p.states.len()).collect();
    nearest_batch(p, &all, target)
        .and_then(|s| static_at_batch(p, p.states[s].batch))
        .unwrap_or_else(|| static_best(p))
}

/// Which layout a CBS-following baseline is fixed to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CbsLayout {
    /// The fastest layout at the batch nearest the smallest B_crit of the run (pessimistic).
    Small,
    /// The fastest layout at the batch nearest the largest B_crit of the run (optimistic).
    Large,
}

/// The paper's CBS baselines: the batch follows B_crit (the nearest batch on the grid that
/// the fixed layout can run, in log scale), on one layout chosen for a small or a large batch.
/// A batch change waits for the minimum dwell.
pub fn cbs_fixed(p: &Problem, which: CbsLayout) -> Schedule {
    let n = p.phases.len();
    let b_crits = p.phases.iter().map(|ph| ph.b_crit);
    let target = match which {
        CbsLayout::Small => b_crits.fold(f64::INFINITY, f64::min),
        CbsLayout::Large => b_crits.fold(0.0, f64::max),
    };
    let all: Vec<usize> = (0..p.states.len()).collect();
    let Some(at) = nearest_batch(p, &all, target) else {
        return static_best(p);
    };
    let batch = p.states[at].batch;
    let layout = (0..p.states.len())
        .filter(|&s| p.states[s].batch == batch)
        .min_by(|&a, &b| p.per_step[a].total_cmp(&p.per_step[b]))
        .map_or(p.layout_of[at], |s| p.layout_of[s]);
    let among: Vec<usize> = (0..p.states.len())
        .filter(|&s| p.layout_of[s] == layout)
        .collect();
    let (mut cur, mut last) = (at, 0);
    let assignment = (0..n)
        .map(|k| {
            let want = nearest_batch(p, &among, p.phases[k].b_crit).unwrap_or(cur);
            if k == 0 || (want != cur && k - last >= p.min_dwell) {
                if k > 0 {
                    last = k;
                }
                cur = want;
            }
            cur
        })
        .collect();
    p.schedule(assignment)
}

/// Names of the paper's baselines (Sakip et al. 2026, arXiv 2604.26687), the ones
/// `speedup_vs_fastest_baseline` is taken over.
pub const PAPER_BASELINES: [&str; 3] = ["static-gbs", "cbs-fixed-small", "cbs-fixed-large"];

/// Every strategy, in report order: static (hindsight, an upper bound on baselines),
/// static-gbs, cbs-fixed-small, cbs-fixed-large, batch-adaptive, config-adaptive,
/// greedy-joint, optimal-joint.
pub fn compare(p: &Problem, params: &StrategyParams) -> Vec<StrategyResult> {
    vec![
        StrategyResult {
            name: "static",
            how: "hindsight: best single (layout, batch) for the whole run (upper bound on baselines)",
            schedule: static_best(p),
        },
        StrategyResult {
            name: "static-gbs",
            how: "paper baseline: the session's global batch, best layout for it, whole run",
            schedule: static_gbs(p, params),
        },
        StrategyResult {
            name: "cbs-fixed-small",
            how: "paper baseline: batch follows B_crit on the layout best for a small batch",
            schedule: cbs_fixed(p, CbsLayout::Small),
        },
        StrategyResult {
            name: "cbs-fixed-large",
            how: "paper baseline: batch follows B_crit on the layout best for a large batch",
            schedule: cbs_fixed(p, CbsLayout::Large),
        },
        StrategyResult {
            name: "batch-adaptive",
            how: "fixed layout, Pollux-like batch switches above the goodput threshold",
            schedule: batch_adaptive(p, params),
        },
        StrategyResult {
            name: "config-adaptive",
            how: "fixed batch, best layout per phase by DP with switch costs",
            schedule: config_adaptive(p),
        },
        StrategyResult {
            name: "greedy-joint",
            how: "seed: periodic argmax goodput, paying switch costs",
            schedule: greedy_joint(p, params),
        },
        StrategyResult {
            name: "optimal-joint",
            how: "DP over phases × (layout, batch) with switch costs and minimum dwell",
            schedule: dp::optimal(p),
        },
    ]
}
