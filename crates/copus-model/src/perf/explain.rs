//! Why a cell of the grid is as fast (or as impossible) as it is: the step time and the memory
//! per GPU of one configuration split into named parts that add up to [`super::predict`]'s
//! step time and memory, and, for a configuration that cannot run, the nearest change that
//! makes it run (searched over neighbouring configurations with the same model).

use super::config::Layout;
use super::enumerate::{Choices, layout_problem, stack_layout_configs};
use super::memory::{MemoryBreakdown, fragmentation_risk, logits_room, peak_memory};
use super::{
    ConfigCost, EfficiencyParams, Invalid, ParallelConfig, PerfContext, Prediction, Recompute,
    validate,
};
use serde::Serialize;

/// One named part of a step or of memory.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Part {
    /// Stable snake_case name (`compute`, `bubble`, `tp`, `pp`, `dp`, `optimizer`; `weights`,
    /// `gradients`, `optimizer_state`, `activations`, `output`, `reserved`).
    pub key: &'static str,
    /// Name in words.
    pub label: &'static str,
    /// One letter standing for the part in a bar drawn without colour.
    pub glyph: char,
    /// Seconds (step parts) or bytes (memory parts).
    pub value: f64,
}

/// Step time and memory of one configuration at one batch, by part.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Explanation {
    /// The configuration (micro-batch, ZeRO stage, recompute, interleave included).
    pub config: ParallelConfig,
    /// Global batch, samples.
    pub batch: u64,
    /// Micro-batches per step on each data-parallel replica.
    pub micro_batches: u64,
    /// The prediction the parts come from.
    pub prediction: Prediction,
    /// Where the step time goes, seconds; the parts add up to `prediction.step_time_s`.
    pub step: Vec<Part>,
    /// Peak memory per GPU by part, bytes; the parts add up to
    /// `prediction.memory_per_gpu_bytes`.
    pub memory: Vec<Part>,
    /// Memory per GPU available, bytes (the hardware's HBM).
    pub capacity_bytes: f64,
    /// The largest single tensor of the step, bytes: one copy of a micro-batch's logits in the
    /// loss's precision ([`largest_buffer_bytes`]).
    pub largest_buffer_bytes: f64,
    /// Peak memory per GPU of the last pipeline stage, where that tensor is allocated, bytes
    /// (the peak itself without pipeline parallelism; [`super::memory::last_stage_memory`]).
    pub logits_stage_bytes: f64,
    /// Whether the configuration fits and its micro-batches are short enough, on an eager
    /// stack, to be bound by the host issuing kernels, so that its time is a lower bound
    /// ([`super::may_be_host_bound`]).
    pub host_bound_risk: bool,
    /// One micro-batch's share of the step on a stage, seconds ([`super::micro_batch_time_s`]).
    pub micro_batch_s: f64,
    /// The micro-batch time below which an eager stack may be host-bound on this
    /// configuration's stages, seconds ([`super::host_bound_threshold_s`]).
    pub host_bound_threshold_s: f64,
}

impl Explanation {
    /// Whether the configuration fits but its largest tensor takes more than half of the
    /// memory left free, so that the caching allocator's fragmentation can stop it
    /// ([`fragmentation_risk`]).
    pub fn fragmentation_risk(&self) -> bool {
        self.prediction.fits
            && fragmentation_risk(
                self.logits_stage_bytes,
                self.capacity_bytes,
                self.largest_buffer_bytes,
            )
    }

    /// Exposed communication (TP, EP, CP, PP and DP) as a share of the step, 0–1.
    pub fn exposed_comm_share(&self) -> f64 {
        comm_share(&self.prediction)
    }

    /// The pipeline bubble as a share of the step, 0–1.
    pub fn bubble_share(&self) -> f64 {
        bubble_share(&self.prediction)
    }

    /// The part of the step called `key`, seconds (0 when there is none).
    pub fn step_part(&self, key: &str) -> f64 {
        self.step
            .iter()
            .find(|p| p.key == key)
            .map_or(0.0, |p| p.value)
    }

    /// The part of memory called `key`, bytes (0 when there is none).
    pub fn memory_part(&self, key: &str) -> f64 {
        self.memory
            .iter()
            .find(|p| p.key == key)
            .map_or(0.0, |p| p.value)
    }
}

/// Exposed TP, EP, CP, PP and DP communication of `p` as a share of its step, 0–1.
pub fn comm_share(p: &Prediction) -> f64 {
    let b = &p.breakdown;
    share(b.tp_s + b.ep_s + b.cp_s + b.pp_s + b.dp_s, p.step_time_s)
}

/// The pipeline bubble of `p` as a share of its step, 0–1.
pub fn bubble_share(p: &Prediction) -> f64 {
    share(p.breakdown.bubble_s, p.step_time_s)
}

fn share(part: f64, whole: f64) -> f64 {
    if whole > 0.0 { part / whole } else { 0.0 }
}

/// The step-time parts of `p`, seconds, in the order of `copus predict`'s breakdown (the
/// expert-parallel all-to-alls and the context-parallel exchange only where there are some).
pub fn step_parts(p: &Prediction) -> Vec<Part> {
    let b = &p.breakdown;
    let part = |key, label, glyph, value| Part {
        key,
        label,
        glyph,
        value,
    };
    let mut parts = vec![
        part("compute", "compute", 'C', b.compute_s),
        part("bubble", "pipeline bubble", 'B', b.bubble_s),
        part("tp", "exposed TP comm", 'T', b.tp_s),
        part("pp", "PP send/recv", 'P', b.pp_s),
        part("dp", "exposed DP comm", 'D', b.dp_s),
        part("optimizer", "optimizer step", 'O', b.optimizer_s),
    ];
    if b.ep_s > 0.0 {
        parts.insert(3, part("ep", "EP all-to-all", 'E', b.ep_s));
    }
    if b.cp_s > 0.0 {
        let at = parts
            .iter()
            .position(|p| p.key == "pp")
            .unwrap_or(parts.len());
        parts.insert(at, part("cp", "CP K/V exchange", 'K', b.cp_s));
    }
    parts
}

/// Bytes per parameter of (weights, gradients, optimizer state) under ZeRO `stage` over `dp`
/// ranks with gradients of `grad_bytes`: the split of
/// [`super::memory::zero_bytes_per_param`] (BF16 weights, FP32 master weights and moments).
pub fn zero_split(stage: u8, dp: u32, grad_bytes: f64) -> (f64, f64, f64) {
    let d = f64::from(dp.max(1));
    let (w, g, o) = (2.0, grad_bytes, 12.0);
    match stage {
        0 => (w, g, o),
        1 => (w, g, o / d),
        2 => (w, g / d, o / d),
        _ => (w / d, g / d, o / d),
    }
}

/// The memory parts of `cfg` under the stack `eff` with peak memory `m`, bytes: the model
/// states split into weights, gradients and optimizer state by the ZeRO stage it runs at
/// ([`crate::perf::memory::effective_zero`]).
pub fn memory_parts(
    cfg: &ParallelConfig,
    eff: &EfficiencyParams,
    model: &crate::perf::ModelProfile,
    m: &MemoryBreakdown,
) -> Vec<Part> {
    let stage = crate::perf::memory::effective_zero(eff, model, cfg);
    let (w, g, o) = zero_split(stage, cfg.dp, eff.grad_bytes);
    let per_param = w + g + o;
    let params = if per_param > 0.0 {
        m.model_states / per_param
    } else {
        0.0
    };
    let part = |key, label, glyph, value| Part {
        key,
        label,
        glyph,
        value,
    };
    vec![
        part("weights", "weights", 'W', params * w),
        part("gradients", "gradients", 'G', params * g),
        part("optimizer_state", "optimizer state", 'S', params * o),
        part("activations", "activations", 'A', m.activations),
        part("output", "logits + loss", 'L', m.output),
        part("reserved", "runtime reserve", 'R', m.reserved),
    ]
}

/// Explain `cfg` at `batch` samples: [`super::predict`]'s step time and memory by part, or
/// why the configuration cannot run at all. A configuration that runs out of memory is
/// explained too (`prediction.fits` is false).
pub fn explain(
    ctx: &PerfContext,
    cfg: &ParallelConfig,
    batch: u64,
) -> Result<Explanation, Invalid> {
    let prediction = ConfigCost::new(ctx, cfg)?.at(ctx, batch)?;
    let micro_batches = validate::micro_batches(cfg, batch)?;
    let mem = peak_memory(
        ctx.model,
        cfg,
        micro_batches,
        ctx.hw.reserved_bytes,
        ctx.eff,
    );
    let layers = super::memory::stage_layers(ctx.model, cfg.pp).0;
    let room = logits_room(
        ctx.model,
        cfg,
        (micro_batches, ctx.hw.reserved_bytes),
        ctx.eff,
        ctx.hw.hbm_bytes,
    );
    Ok(Explanation {
        config: *cfg,
        batch,
        micro_batches,
        prediction,
        step: step_parts(&prediction),
        memory: memory_parts(cfg, ctx.eff, ctx.model, &mem),
        capacity_bytes: ctx.hw.hbm_bytes,
        largest_buffer_bytes: room.largest_bytes,
        logits_stage_bytes: room.stage_bytes,
        host_bound_risk: prediction.fits
            && super::may_be_host_bound(ctx.eff, &prediction, micro_batches, layers),
        micro_batch_s: super::micro_batch_time_s(&prediction, micro_batches),
        host_bound_threshold_s: super::host_bound_threshold_s(layers),
    })
}

/// The configuration of layout `(dp, tp, pp)` among `choices` that comes closest to running at
/// `batch`: the one that needs the least memory among those that split the batch; `None`
/// when none does.
pub fn closest_miss(
    ctx: &PerfContext,
    layout: impl Into<Layout>,
    batch: u64,
    choices: &Choices,
) -> Option<Explanation> {
    stack_layout_configs(ctx, layout, choices)
        .iter()
        .filter_map(|c| explain(ctx, c, batch).ok())
        .min_by(|a, b| {
            a.prediction
                .memory_per_gpu_bytes
                .total_cmp(&b.prediction.memory_per_gpu_bytes)
        })
}

/// A neighbouring configuration tried by [`nearest_change`].
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// The configuration.
    pub config: ParallelConfig,
    /// How far it is from the searched space: one per doubling of TP or PP (halving DP), per
    /// ZeRO stage, recompute level or micro-batch halving outside the search's own choices.
    pub distance: u32,
    /// Its prediction at the batch, or why it cannot run.
    pub outcome: Result<Prediction, Invalid>,
}

impl Candidate {
    /// Whether it runs and fits.
    pub fn runs(&self) -> bool {
        matches!(&self.outcome, Ok(p) if p.fits)
    }
}

/// The smallest change that makes a cell run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NearestChange {
    /// The configuration that runs (written as [`super::config::ConfigJson`]).
    #[serde(serialize_with = "super::config::serialize_as_json")]
    pub config: ParallelConfig,
    /// Its distance from the searched space (see [`Candidate::distance`]).
    pub distance: u32,
    /// What changes, in words ("PP 1 → 2 (DP 8 → 4)", "ZeRO-3 (searched: 1)").
    pub changes: Vec<String>,
    /// Its prediction at the cell's batch.
    pub prediction: Prediction,
    /// Neighbouring configurations tried.
    pub tried: usize,
}

fn log2_steps(factor: u32) -> u32 {
    factor.max(1).ilog2()
}

/// Steps from `v` to the nearest of `set` on the ordered `scale` (0 when `v` is in `set`).
fn steps_outside<T: PartialEq + Copy>(v: T, set: &[T], scale: &[T]) -> u32 {
    let pos = |x: T| scale.iter().position(|&s| s == x);
    let Some(at) = pos(v) else { return 0 };
    set.iter()
        .filter_map(|&s| pos(s))
        .map(|p| at.abs_diff(p) as u32)
        .min()
        .unwrap_or(0)
}

const RECOMPUTE: [Recompute; 3] = [Recompute::None, Recompute::Selective, Recompute::Full];
const ZERO: [u8; 4] = [0, 1, 2, 3];

/// Micro-batch sizes a neighbour may use: the searched ones and the powers of two below them.
fn micro_batch_scale(choices: &Choices) -> Vec<u32> {
    let mut v: Vec<u32> = choices.micro_batches.to_vec();
    let top = choices.micro_batches.iter().copied().max().unwrap_or(1);
    // Powers of two up to `top`: at most 32 of them, whatever `top` is (no loop that can
    // stop growing at u32::MAX).
    v.extend((0..u32::BITS).map(|k| 1u32 << k).take_while(|&p| p <= top));
    v.sort_unstable();
    v.dedup();
    v
}

/// Every neighbour of layout `(dp, tp, pp)` at `batch` on the same GPUs: TP and PP up to ×4
/// each (DP shrinking to keep the GPU count), any ZeRO stage and recompute policy, the
/// searched micro-batches and smaller ones, the searched interleaves; each with its distance
/// and outcome. Layouts the cluster cannot host (TP across nodes, shape) are left out.
pub fn candidates(
    ctx: &PerfContext,
    layout: impl Into<Layout>,
    batch: u64,
    choices: &Choices,
    allow_cross_node_tp: bool,
) -> Vec<Candidate> {
    let Layout { dp, tp, pp, cp } = layout.into();
    let mbs_scale = micro_batch_scale(choices);
    let mut out = Vec::new();
    for ft in [1u32, 2, 4] {
        for fp in [1u32, 2, 4] {
            let f = ft * fp;
            if !dp.is_multiple_of(f) {
                continue;
            }
            let (Some(tp2), Some(pp2)) = (tp.checked_mul(ft), pp.checked_mul(fp)) else {
                continue;
            };
            let layout = Layout {
                dp: dp / f,
                tp: tp2,
                pp: pp2,
                cp,
            };
            if layout_problem(ctx, layout, allow_cross_node_tp).is_some() {
                continue;
            }
            let wide = Choices {
                micro_batches: &mbs_scale,
                zero: &ZERO,
                recompute: &RECOMPUTE,
                interleave: choices.interleave,
                expert_parallel: choices.expert_parallel,
            };
            for cfg in stack_layout_configs(ctx, layout, &wide) {
                let distance = log2_steps(ft)
                    + log2_steps(fp)
                    + steps_outside(cfg.zero, choices.zero, &ZERO)
                    + steps_outside(cfg.recompute, choices.recompute, &RECOMPUTE)
                    + steps_outside(cfg.mbs, choices.micro_batches, &mbs_scale);
                let outcome = ConfigCost::new(ctx, &cfg).and_then(|c| c.at(ctx, batch));
                out.push(Candidate {
                    config: cfg,
                    distance,
                    outcome,
                });
            }
        }
    }
    out
}

fn list<T: std::fmt::Display>(xs: &[T]) -> String {
    xs.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// What changes from layout `from` and the searched `choices` to `to`, in words.
pub fn describe(from: impl Into<Layout>, to: &ParallelConfig, choices: &Choices) -> Vec<String> {
    let mut out = Vec::new();
    let Layout { dp, tp, pp, .. } = from.into();
    if tp != to.tp {
        out.push(format!("TP {tp} → {}", to.tp));
    }
    if pp != to.pp {
        out.push(format!("PP {pp} → {}", to.pp));
    }
    if dp != to.dp {
        out.push(format!("DP {dp} → {}", to.dp));
    }
    if !choices.zero.contains(&to.zero) {
        out.push(format!(
            "ZeRO-{} (searched: {})",
            to.zero,
            list(choices.zero)
        ));
    }
    if !choices.recompute.contains(&to.recompute) {
        out.push(format!(
            "recompute {} (searched: {})",
            to.recompute,
            list(choices.recompute)
        ));
    }
    if !choices.micro_batches.contains(&to.mbs) {
        out.push(format!(
            "micro-batch {} (searched: {})",
            to.mbs,
            list(choices.micro_batches)
        ));
    }
    out
}

/// The nearest configuration to layout `(dp, tp, pp)` under `choices` that runs and fits at
/// `batch`: the smallest [`Candidate::distance`] among [`candidates`], the fastest among
/// equals; `None` when no neighbour runs.
pub fn nearest_change(
    ctx: &PerfContext,
    layout: impl Into<Layout>,
    batch: u64,
    choices: &Choices,
    allow_cross_node_tp: bool,
) -> Option<NearestChange> {
    let layout = layout.into();
    let all = candidates(ctx, layout, batch, choices, allow_cross_node_tp);
    let tried = all.len();
    let best = all
        .into_iter()
        .filter_map(|c| match c.outcome {
            Ok(p) if p.fits => Some((c.config, c.distance, p)),
            _ => None,
        })
        .min_by(|a, b| {
            a.1.cmp(&b.1)
                .then(a.2.step_time_s.total_cmp(&b.2.step_time_s))
        })?;
    Some(NearestChange {
        config: best.0,
        distance: best.1,
        changes: describe(layout, &best.0, choices),
        prediction: best.2,
        tried,
    })
}
