//! Configuration search: every (dp, tp, pp) factorisation of a GPU count with its options,
//! each valid one costed and each invalid one kept with its reason; and the fastest fitting
//! choice (`mbs auto`).

use super::config::Layout;
use super::{ConfigCost, Invalid, ParallelConfig, PerfContext, Prediction, Recompute};

/// Options a search may pick from for one 3D layout.
#[derive(Debug, Clone, Copy)]
pub struct Choices<'a> {
    /// Micro-batch sizes, samples.
    pub micro_batches: &'a [u32],
    /// ZeRO stages.
    pub zero: &'a [u8],
    /// Recompute policies.
    pub recompute: &'a [Recompute],
    /// Virtual pipeline stages (used only where pp > 1; 1 is always tried).
    pub interleave: &'a [u32],
    /// Expert-parallel degrees of a mixture-of-experts model, those the layout allows (all of
    /// them, to be refused with their reason, when it allows none); empty: every degree it
    /// allows ([`super::validate::expert_candidates`]).
    pub expert_parallel: &'a [u32],
}

/// Divisors of `n`, ascending.
pub fn divisors(n: u32) -> Vec<u32> {
    (1..=n).filter(|d| n.is_multiple_of(*d)).collect()
}

/// All (dp, tp, pp) with dp·tp·pp = `gpus`, ascending in tp then pp.
pub fn factorisations(gpus: u32) -> Vec<(u32, u32, u32)> {
    let mut out = Vec::new();
    for tp in divisors(gpus) {
        for pp in divisors(gpus / tp) {
            out.push((gpus / tp / pp, tp, pp));
        }
    }
    out
}

/// Why a layout cannot run on this cluster, if it cannot (shape and placement only).
pub fn layout_problem(
    ctx: &PerfContext,
    layout: impl Into<Layout>,
    allow_cross_node_tp: bool,
) -> Option<Invalid> {
    let Layout { dp, tp, pp, cp } = layout.into();
    if !allow_cross_node_tp && tp > ctx.gpus_per_node {
        return Some(Invalid::Other(format!(
            "TP {tp} spans nodes of {} GPUs",
            ctx.gpus_per_node
        )));
    }
    let cfg = ParallelConfig {
        dp,
        tp,
        pp,
        mbs: 1,
        zero: 0,
        recompute: Recompute::Selective,
        vpp: 1,
        cp,
        ep: 1,
    };
    super::validate::structure(ctx.model, &cfg).err()
}

/// Every full configuration of one layout under `choices` (vpp > 1 only where pp > 1).
pub fn layout_configs(layout: impl Into<Layout>, choices: &Choices) -> Vec<ParallelConfig> {
    let Layout { dp, tp, pp, cp } = layout.into();
    let mut vpps = vec![1u32];
    if pp > 1 {
        vpps.extend(choices.interleave.iter().copied().filter(|&v| v > 1));
    }
    let mut out = Vec::new();
    for &mbs in choices.micro_batches {
        for &zero in choices.zero {
            for &recompute in choices.recompute {
                for &vpp in &vpps {
                    out.push(ParallelConfig {
                        dp,
                        tp,
                        pp,
                        mbs,
                        zero,
                        recompute,
                        vpp,
                        cp,
                        ep: 1,
                    });
                }
            }
        }
    }
    out
}

/// Every full configuration of one layout under `choices` for `model`: [`layout_configs`],
/// each with every expert-parallel degree the model allows on the layout
/// ([`super::validate::expert_candidates`]; only 1 for a dense model).
pub fn model_layout_configs(
    model: &super::ModelProfile,
    layout: impl Into<Layout>,
    choices: &Choices,
) -> Vec<ParallelConfig> {
    let layout = layout.into();
    let mut eps = super::validate::expert_candidates(model, layout.dp.saturating_mul(layout.cp));
    if !choices.expert_parallel.is_empty() {
        eps.retain(|e| choices.expert_parallel.contains(e));
        if eps.is_empty() {
            // None of the asked-for degrees fits this layout: cost them anyway, so that the
            // cell says why ("EP 8 does not divide the 4 data-parallel ranks").
            eps = choices.expert_parallel.to_vec();
        }
    }
    with_expert_degrees(layout_configs(layout, choices), &eps)
}

/// [`model_layout_configs`] as the stack in `ctx` runs them, each at the ZeRO stage it runs
/// ([`super::memory::effective_zero`], what copus costs): DeepSpeed's pipeline engine takes
/// ZeRO stage 0 or 1 only, so a pipelined layout's ZeRO-2/3 there is the ZeRO-1 its user
/// configures; FSDP's ZeRO-3 with pipeline stages keeps parameters gathered and gradients
/// unsharded until the last micro-batch, the ZeRO-1 PyTorch's pipeline schedules run. Written
/// as such, so that labels, JSON and emitted configs say the stage that runs, once each.
pub fn stack_layout_configs(
    ctx: &PerfContext,
    layout: impl Into<Layout>,
    choices: &Choices,
) -> Vec<ParallelConfig> {
    let configs = model_layout_configs(ctx.model, layout, choices);
    let mut out: Vec<ParallelConfig> = Vec::with_capacity(configs.len());
    for mut cfg in configs {
        cfg.zero = super::memory::effective_zero(ctx.eff, ctx.model, &cfg);
        if !out.contains(&cfg) {
            out.push(cfg);
        }
    }
    out
}

/// `configs`, each once per expert-parallel degree of `eps` (in that order within each).
fn with_expert_degrees(configs: Vec<ParallelConfig>, eps: &[u32]) -> Vec<ParallelConfig> {
    if eps == [1] {
        return configs;
    }
    configs
        .iter()
        .flat_map(|c| eps.iter().map(move |&ep| ParallelConfig { ep, ..*c }))
        .collect()
}

/// Every configuration of `gpus` GPUs under `choices`, each costed or with the reason it
/// cannot run (TP across nodes, heads, layers, ZeRO with PP, …).
pub fn configurations(
    ctx: &PerfContext,
    gpus: u32,
    choices: &Choices,
    allow_cross_node_tp: bool,
) -> Vec<(ParallelConfig, Result<ConfigCost, Invalid>)> {
    let mut out = Vec::new();
    for layout in factorisations(gpus) {
        let problem = layout_problem(ctx, layout, allow_cross_node_tp);
        for cfg in stack_layout_configs(ctx, layout, choices) {
            let cost = match &problem {
                Some(p) => Err(p.clone()),
                None => ConfigCost::new(ctx, &cfg),
            };
            out.push((cfg, cost));
        }
    }
    out
}

/// The fastest configuration among `costs` that runs and fits at `global_batch`, or the reason
/// of the closest miss (out of memory by the least, else the last other reason).
pub fn fastest<'a>(
    ctx: &PerfContext,
    costs: impl IntoIterator<Item = &'a ConfigCost>,
    global_batch: u64,
) -> Result<(ParallelConfig, Prediction), Invalid> {
    let mut best: Option<(ParallelConfig, Prediction)> = None;
    let mut oom: Option<f64> = None;
    let mut other: Option<Invalid> = None;
    for cost in costs {
        match cost.at(ctx, global_batch) {
            Ok(p) if p.fits => {
                if best.is_none_or(|(_, b)| p.step_time_s < b.step_time_s) {
                    best = Some((cost.cfg, p));
                }
            }
            Ok(p) => {
                oom = Some(oom.map_or(p.memory_per_gpu_bytes, |o| o.min(p.memory_per_gpu_bytes)))
            }
            // Keep the first reason: configurations come smallest micro-batch first, so it
            // names the least demanding one ("not divisible by dp·mbs = 64", not 256).
            Err(e) => {
                other.get_or_insert(e);
            }
        }
    }
    match (best, oom, other) {
        (Some(b), _, _) => Ok(b),
        (None, Some(need), _) => Err(Invalid::OutOfMemory {
            need_gb: need / 1e9,
            have_gb: ctx.hw.hbm_bytes / 1e9,
        }),
        (None, None, Some(e)) => Err(e),
        (None, None, None) => Err(Invalid::Other("no configuration to try".into())),
    }
}

/// How far over the device's memory, as a share of it, a configuration may be and still be
/// reported by [`faster_near_miss`] (5 %).
pub const NEAR_MISS_SHARE: f64 = 0.05;

/// The least step-time saving, as a share of the chosen step, that [`faster_near_miss`]
/// reports (5 %).
pub const NEAR_MISS_MIN_GAIN: f64 = 0.05;

/// Among `costs`, the fastest configuration that does not fit but needs at most
/// [`NEAR_MISS_SHARE`] more memory than the device has, and whose step at `global_batch` is
/// at least [`NEAR_MISS_MIN_GAIN`] shorter than `chosen_step_s` (seconds): what a little
/// memory (a smaller reserve, the allocator's settings) would buy. `None` when there is none.
pub fn faster_near_miss<'a>(
    ctx: &PerfContext,
    costs: impl IntoIterator<Item = &'a ConfigCost>,
    global_batch: u64,
    chosen_step_s: f64,
) -> Option<(ParallelConfig, Prediction)> {
    let limit = ctx.hw.hbm_bytes * (1.0 + NEAR_MISS_SHARE);
    let faster_than = chosen_step_s * (1.0 - NEAR_MISS_MIN_GAIN);
    costs
        .into_iter()
        .filter_map(|c| c.at(ctx, global_batch).ok().map(|p| (c.cfg, p)))
        .filter(|(_, p)| !p.fits && p.memory_per_gpu_bytes <= limit)
        .filter(|(_, p)| p.step_time_s <= faster_than)
        .min_by(|a, b| a.1.step_time_s.total_cmp(&b.1.step_time_s))
}

/// `mbs auto`: the fastest fitting configuration of `base`'s layout (and context-parallel
/// degree) at `global_batch`, among [`auto_choices`].
pub fn auto(
    ctx: &PerfContext,
    base: &ParallelConfig,
    global_batch: u64,
    recompute: &[Recompute],
    (interleave, expert_parallel): (&[u32], &[u32]),
) -> Result<(ParallelConfig, Prediction), Invalid> {
    let costs = auto_choices(
        ctx,
        base,
        global_batch,
        recompute,
        (interleave, expert_parallel),
    )?;
    fastest(ctx, &costs, global_batch)
}

/// The micro-batch sizes (samples) [`auto_choices`] searches for `global_batch` over `dp`
/// replicas: every divisor of a replica's batch up to 64.
pub fn auto_micro_batches(global_batch: u64, dp: u32) -> Vec<u32> {
    let per_replica = global_batch / u64::from(dp.max(1));
    (1..=per_replica.min(64) as u32)
        .filter(|b| per_replica.is_multiple_of(u64::from(*b)))
        .collect()
}

/// The configurations `mbs auto` chooses among, costed: `base`'s layout (and context-parallel
/// degree) with every micro-batch size that divides the per-replica batch, the given recompute
/// policies, exactly the given virtual-stage counts (include 1 for plain 1F1B) and
/// expert-parallel degrees (`[base.ep]` to keep it; ZeRO stage as in `base`). A structural
/// problem of the layout (or of the stack's with it) is the error; an option the model cannot cost (a vpp that does not
/// divide the stage, an EP that does not divide the experts) is left out.
pub fn auto_choices(
    ctx: &PerfContext,
    base: &ParallelConfig,
    global_batch: u64,
    recompute: &[Recompute],
    (interleave, expert_parallel): (&[u32], &[u32]),
) -> Result<Vec<ConfigCost>, Invalid> {
    let mbs = auto_micro_batches(global_batch, base.dp);
    let choices = Choices {
        micro_batches: &mbs,
        zero: &[base.zero],
        recompute,
        interleave,
        expert_parallel: &[],
    };
    let plain = ParallelConfig {
        vpp: 1,
        ep: 1,
        ..*base
    };
    super::validate::structure(ctx.model, &plain)?;
    super::validate::stack_structure(ctx.model, &plain, ctx.eff)?;
    Ok(with_expert_degrees(
        layout_configs(Layout::from(base), &choices),
        expert_parallel,
    )
    .iter()
    .filter(|c| interleave.contains(&c.vpp))
    .filter_map(|c| ConfigCost::new(ctx, c).ok())
    .collect())
}
