//! Memory per GPU: model states under ZeRO (Rajbhandari et al. 2020) and activations per
//! layer (Korthikanti et al. 2022, arXiv 2205.05198), generalised to GQA, SwiGLU and MoE.
//!
//! With TP > 1 and sequence parallelism on (Megatron's default) every activation is split by
//! TP; without it the norm, dropout and residual activations are replicated. With TP = 1 the
//! formulas reduce to the no-parallelism case. The s×s attention scores are kept only when
//! attention runs unfused and nothing is recomputed.

use super::efficiency::{AttentionKind, Sharding, StageSplit};
use super::{EfficiencyParams, ModelProfile, ParallelConfig, Recompute};
use serde::Serialize;

/// Bytes per parameter of weights, gradients and Adam state with mixed precision (BF16
/// weights, gradients of `grad_bytes` each, FP32 master weights, momentum and variance) under
/// ZeRO `stage` over `dp` data-parallel ranks. With BF16 gradients (2 bytes) these are the
/// ZeRO paper's 16; 4 + 12/dp; 2 + 14/dp; 16/dp.
pub fn zero_bytes_per_param(stage: u8, dp: u32, grad_bytes: f64) -> f64 {
    let d = dp.max(1) as f64;
    let (w, g, o) = (2.0, grad_bytes, 12.0);
    match stage {
        0 => w + g + o,
        1 => w + g + o / d,
        2 => w + (g + o) / d,
        _ => (w + g + o) / d,
    }
}

/// Activation bytes one transformer layer keeps for the backward pass of one micro-batch of
/// `mbs` sequences on one GPU, with TP degree `tp`, sequence parallelism `sp` and the
/// attention kernel `attention`.
///
/// GPT shape (kv = h, ffn = 4h): s·b·h·(34 + 5as/h) without parallelism; s·b·h·(10 + 24/t +
/// 5as/(ht)) with TP; s·b·h·(34/t + 5as/(ht)) with TP+SP; the 5as/h term (attention scores,
/// softmax, dropout mask) disappears with selective recompute and with fused attention; full
/// recompute keeps only the layer input, 2·s·b·h (divided by t under SP).
pub fn layer_activation_bytes(
    m: &ModelProfile,
    mbs: u32,
    tp: u32,
    sp: bool,
    recompute: Recompute,
    attention: AttentionKind,
) -> f64 {
    layer_activation_bytes_cp(m, mbs, (tp, 1), sp, recompute, (attention, false))
}

/// [`layer_activation_bytes`] on a context-parallel rank of `cp` (tp, cp given together):
/// every activation is split by cp (the rank holds s/cp tokens of each sequence); unfused
/// attention keeps its s/cp × s scores.
///
/// Op-level selective checkpointing keeps the layer input, the attention output and its
/// log-sum-exp, and every other GEMM output (Q, V, the first MLP projection and the block
/// output of a Llama block): 2·s·b·(2h + kv + f) + 2·s·b·h, split by TP where the GEMM is.
///
/// With FP8 GEMMs (`fp8`) the inputs the projection and MLP GEMMs keep for their backward
/// are stored as FP8 copies (Transformer Engine, torchao float8): one byte instead of two
/// for the QKV, FC1 and FC2 inputs.
pub fn layer_activation_bytes_cp(
    m: &ModelProfile,
    mbs: u32,
    (tp, cp): (u32, u32),
    sp: bool,
    recompute: Recompute,
    (attention, fp8): (AttentionKind, bool),
) -> f64 {
    let cp = cp.max(1) as f64;
    let (s, b, h, t) = (
        m.seq_len as f64 / cp,
        mbs as f64,
        m.hidden as f64,
        tp.max(1) as f64,
    );
    let sbh = s * b * h;
    let split_by = |x: f64| if sp { x / t } else { x };
    if recompute == Recompute::Full {
        return split_by(2.0 * sbh);
    }
    if recompute == Recompute::Op {
        let kept =
            2.0 * s * b * (2.0 * h + m.kv_hidden() + m.ffn_hidden as f64 * m.active_experts());
        return split_by(2.0 * sbh) + kept / t;
    }
    // Not split by TP without SP: LN inputs (4), QKV and FC1 inputs (2 + 2), dropout masks
    // (1 + 1, when the model trains with dropout).
    let masks = if m.keeps_dropout_masks() { 2.0 } else { 0.0 };
    let replicated = (8.0 + masks) * sbh;
    // Split by TP: Q (2), K and V (4·kv/h), projection input (2), the FFN internals.
    let ffn_bytes_per_elem = if m.swiglu { 6.0 } else { 4.0 };
    let attn_split = s * b * (4.0 * h + 4.0 * m.kv_hidden());
    let ffn_split = s * b * ffn_bytes_per_elem * m.ffn_hidden as f64 * m.active_experts();
    let scores = if recompute == Recompute::None && attention == AttentionKind::Unfused {
        5.0 * m.heads as f64 * s * (s * cp) * b
    } else {
        0.0
    };
    let fp8_saving = if fp8 {
        // Half of the QKV and FC1 inputs (2h each, replicated without SP) and of the FC2
        // input (2f per active expert, split by TP).
        split_by(2.0 * sbh) + s * b * m.ffn_hidden as f64 * m.active_experts() / t
    } else {
        0.0
    };
    split_by(replicated) + (attn_split + ffn_split + scores) / t - fp8_saving
}

/// A byte count (computed in `f64`) as JSON writes it: a whole number of bytes, rounded
/// (`51707379711.99999` read as a fraction of a byte); a value no `u64` holds is written as
/// the float it is.
pub fn serialize_whole_bytes<S: serde::Serializer>(bytes: &f64, ser: S) -> Result<S::Ok, S::Error> {
    let rounded = bytes.round();
    if rounded.is_finite() && (0.0..=u64::MAX as f64).contains(&rounded) {
        ser.serialize_u64(rounded as u64)
    } else {
        ser.serialize_f64(*bytes)
    }
}

/// [`serialize_whole_bytes`] of an optional byte count (`null` for `None`).
pub fn serialize_whole_bytes_opt<S: serde::Serializer>(
    bytes: &Option<f64>,
    ser: S,
) -> Result<S::Ok, S::Error> {
    match bytes {
        Some(b) => serialize_whole_bytes(b, ser),
        None => ser.serialize_none(),
    }
}

/// A byte count that JSON writes as whole bytes ([`serialize_whole_bytes`]), for maps and
/// lists of them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WholeBytes(pub f64);

impl Serialize for WholeBytes {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        serialize_whole_bytes(&self.0, ser)
    }
}

/// Peak memory of one GPU, bytes, by kind (written to JSON as whole bytes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct MemoryBreakdown {
    /// Weights, gradients and optimizer state after ZeRO sharding, bytes.
    #[serde(serialize_with = "serialize_whole_bytes")]
    pub model_states: f64,
    /// Activations kept for backward (all in-flight micro-batches), bytes.
    #[serde(serialize_with = "serialize_whole_bytes")]
    pub activations: f64,
    /// Logits and the FP32 cross-entropy buffer of the output layer (none with a fused
    /// cross-entropy), bytes.
    #[serde(serialize_with = "serialize_whole_bytes")]
    pub output: f64,
    /// Reserved by the runtime (hardware profile), bytes.
    #[serde(serialize_with = "serialize_whole_bytes")]
    pub reserved: f64,
    /// The pipeline stage these figures are for (0-based; the fullest one), 0 without PP.
    pub stage: u32,
}

impl MemoryBreakdown {
    /// Total bytes.
    pub fn total(&self) -> f64 {
        self.model_states + self.activations + self.output + self.reserved
    }
}

/// Layers on the heaviest pipeline stage and on an average one (uneven stages: Megatron's
/// first/last-stage layer counts, torchtitan's split points; the heaviest stage holds
/// ⌈layers/pp⌉).
pub fn stage_layers(m: &ModelProfile, pp: u32) -> (f64, f64) {
    let pp = pp.max(1);
    (m.layers.div_ceil(pp) as f64, m.layers as f64 / pp as f64)
}

/// Layers on pipeline stage `stage` (0-based) of `pp` under `split`: ⌈layers/pp⌉, except on
/// the short stages. With [`StageSplit::Ends`] and [`StageSplit::Balanced`] the
/// `pp·⌈layers/pp⌉ − layers` short stages hold one layer fewer, at the ends of the pipeline or
/// after the full ones; [`StageSplit::Greedy`] is DeepSpeed's 2021 partition
/// ([`stage_layer_counts`], which computes every stage at once).
pub fn layers_on_stage(m: &ModelProfile, pp: u32, stage: u32, split: StageSplit) -> u32 {
    stage_layers_of(m.layers, pp, stage, split)
}

/// [`layers_on_stage`] of a model of `layers` transformer layers.
fn stage_layers_of(layers: u32, pp: u32, stage: u32, split: StageSplit) -> u32 {
    let pp = pp.max(1);
    let full = layers.div_ceil(pp);
    let short = u64::from(pp) * u64::from(full) - u64::from(layers);
    let stage = stage.min(pp - 1);
    // The stage's rank in the order the short stages are taken.
    let order = match split {
        StageSplit::Greedy => {
            let counts = greedy_partition(layers, pp);
            return counts.get(stage as usize).copied().unwrap_or(0);
        }
        StageSplit::Ends if stage < pp - stage => 2 * u64::from(stage),
        StageSplit::Ends => 2 * u64::from(pp - 1 - stage) + 1,
        StageSplit::Balanced => u64::from(pp - 1 - stage),
    };
    if order < short {
        full.saturating_sub(1)
    } else {
        full
    }
}

/// The layers of every pipeline stage of `pp` under `split`, in stage order.
pub fn stage_layer_counts(m: &ModelProfile, pp: u32, split: StageSplit) -> Vec<u32> {
    split_layers(m.layers, pp, split)
}

/// The layers of every one of `pp` pipeline stages when `split` splits `layers` transformer
/// layers over them, in stage order.
pub fn split_layers(layers: u32, pp: u32, split: StageSplit) -> Vec<u32> {
    let pp = pp.max(1);
    match split {
        StageSplit::Greedy => greedy_partition(layers, pp),
        _ => (0..pp)
            .map(|i| stage_layers_of(layers, pp, i, split))
            .collect(),
    }
}

/// Model-pipeline entries of Megatron-DeepSpeed's GPT model before and after its transformer
/// layers (the cast, the embedding and a transpose; a transpose, the final norm, the tied output
/// embedding and the cast back with BF16): `partition_method='type:transformer'` weighs them 0.
const PIPE_ENTRIES_AROUND_LAYERS: (usize, usize) = (3, 4);
/// The tolerance of DeepSpeed's binary search for the heaviest stage's weight.
const GREEDY_SEARCH_EPS: f64 = 1e-3;

/// Transformer layers per stage as DeepSpeed's pipeline engine before 0.11 partitions
/// `layers` layers over `pp` stages (`partition_balanced` of `deepspeed/runtime/utils.py`): a
/// binary search for the smallest heaviest-stage weight a greedy fill of the stages in order
/// can keep to, over the prefix sums of the entries' weights, then that fill. Usually
/// ⌈layers/pp⌉ on each stage from the first and the remainder after, leaving later stages
/// empty; the search's floating-point end can instead leave the first stages one layer short
/// and the last one fuller (16 layers on 3 stages: 5, 5, 6).
fn greedy_partition(layers: u32, pp: u32) -> Vec<u32> {
    // A search and a fill per call; a grid asks for the same few splits for every cell.
    thread_local! {
        static SPLITS: std::cell::RefCell<std::collections::HashMap<(u32, u32), Vec<u32>>> =
            std::cell::RefCell::new(std::collections::HashMap::new());
    }
    SPLITS.with(|cache| {
        cache
            .borrow_mut()
            .entry((layers, pp))
            .or_insert_with(|| greedy_partition_uncached(layers, pp))
            .clone()
    })
}

/// [`greedy_partition`] computed.
fn greedy_partition_uncached(layers: u32, pp: u32) -> Vec<u32> {
    let (before, after) = PIPE_ENTRIES_AROUND_LAYERS;
    let l = layers as usize;
    let n = before + l + after;
    let parts = pp.max(1) as usize;
    // Inclusive prefix sums of the entries' weights (1 for a transformer layer).
    let prefix: Vec<f64> = (0..n)
        .map(|i| (i + 1).saturating_sub(before).min(l) as f64)
        .collect();
    let layers_in = |lo: usize, hi: usize| {
        let at = |i: usize| if i == 0 { 0.0 } else { prefix[i - 1] };
        (at(hi) - at(lo)) as u32
    };
    if n <= parts {
        // One entry a stage while they last.
        return (0..parts)
            .map(|p| layers_in(p.min(n), (p + 1).min(n)))
            .collect();
    }
    let total = prefix[n - 1];
    // The first index in [lo, hi) whose prefix reaches `x` (hi if none): Python's bisect_left.
    let bisect = |x: f64, lo: usize, hi: usize| lo + prefix[lo..hi].partition_point(|&v| v < x);
    // Python's weights[i - 1], where i = 0 reads the last entry.
    let before_cut = |i: usize| prefix[i.checked_sub(1).unwrap_or(n - 1)];
    let probe = |bottleneck: f64| -> (Vec<usize>, bool) {
        let mut cuts = vec![n; parts + 1];
        cuts[0] = 0;
        let chunk = n / parts;
        let (mut target, mut step) = (bottleneck, chunk);
        for p in 1..parts {
            while step < n && prefix[step] < target {
                step += chunk;
            }
            cuts[p] = bisect(target, step - chunk, step.min(n));
            if cuts[p] == n {
                let size = total - prefix[cuts[p - 1].min(n - 1)];
                return (cuts, size < bottleneck);
            }
            target = before_cut(cuts[p]) + bottleneck;
        }
        (cuts, target >= total)
    };
    let (mut lower, mut upper) = (total / parts as f64, total);
    while upper > lower + GREEDY_SEARCH_EPS {
        let mid = lower + (upper - lower) / 2.0;
        if probe(mid).1 {
            upper = mid;
        } else {
            lower = mid + GREEDY_SEARCH_EPS;
        }
    }
    let (cuts, _) = probe(upper);
    cuts.windows(2).map(|c| layers_in(c[0], c[1])).collect()
}

/// The most layers a stage before the last holds (0 without pipeline parallelism) and the
/// layers of the last stage (the one with the output layer), under `split`.
pub fn stage_extremes(m: &ModelProfile, pp: u32, split: StageSplit) -> (u32, u32) {
    let counts = stage_layer_counts(m, pp, split);
    let (last, inner) = counts.split_last().unwrap_or((&0, &[]));
    (inner.iter().copied().max().unwrap_or(0), *last)
}

/// The first stage that holds no transformer layer under `split`, if any (a greedy split of
/// few layers over many stages: DeepSpeed's pipeline cannot run such a stage).
pub fn empty_stage(m: &ModelProfile, pp: u32, split: StageSplit) -> Option<u32> {
    let counts = stage_layer_counts(m, pp, split);
    counts
        .iter()
        .position(|&l| l == 0)
        .and_then(|i| u32::try_from(i).ok())
}

/// Pipeline stages of `pp` holding one layer fewer than ⌈layers/pp⌉: `pp·⌈layers/pp⌉ −
/// layers`, fewer than `pp`.
fn short_stages(m: &ModelProfile, pp: u32) -> u64 {
    let pp = pp.max(1);
    u64::from(pp) * u64::from(m.layers.div_ceil(pp)) - u64::from(m.layers)
}

/// Micro-batches whose activations stage `stage` (0-based) of `pp` holds at its peak, in
/// units of a whole stage's layers: `pp − stage` in 1F1B; with `vpp` virtual stages Megatron's
/// interleaved warm-up, `(2·(pp − stage − 1) + (vpp − 1)·pp + 1)` chunks of `1/vpp` of the
/// stage (on the first stage `pp·(1 + (pp − 1)/(pp·vpp))`, Narayanan et al.'s figure); never
/// more than the step's `micro_batches`.
pub fn in_flight(pp: u32, vpp: u32, stage: u32, micro_batches: u64) -> f64 {
    let pp = f64::from(pp.max(1));
    let i = f64::from(stage).min(pp - 1.0);
    let held = if vpp > 1 && pp > 1.0 {
        let v = f64::from(vpp);
        (2.0 * (pp - i - 1.0) + (v - 1.0) * pp + 1.0) / v
    } else {
        pp - i
    };
    held.min(micro_batches.max(1) as f64)
}

/// Ranks one HSDP shard group holds: the data-parallel ranks inside `hsdp_shard_gpus` GPUs,
/// at least 1 and a divisor of dp·cp.
pub fn hsdp_shard(e: &EfficiencyParams, cfg: &ParallelConfig) -> u32 {
    hsdp_shard_ranks(e.hsdp_shard_gpus, cfg.tp, cfg.grad_ranks())
}

/// [`hsdp_shard`] from its parts: the data-parallel ranks (of `ranks`, dp·cp) inside
/// `shard_gpus` GPUs at tensor-parallel degree `tp`, at least 1 and a divisor of `ranks`.
/// What a framework's shard degree must be for the plan to run as costed.
pub fn hsdp_shard_ranks(shard_gpus: f64, tp: u32, ranks: u32) -> u32 {
    let ranks = ranks.max(1);
    let fit = (shard_gpus / tp.max(1) as f64).floor().max(1.0);
    let mut shard = (fit.min(ranks as f64)) as u32;
    while shard > 1 && !ranks.is_multiple_of(shard) {
        shard -= 1;
    }
    shard.max(1)
}

/// The ZeRO stage `cfg` runs at under `e`'s stack, for its memory and its data-parallel
/// traffic. FSDP (1 or 2) with pipeline parallelism keeps the parameters gathered and the
/// gradients unsharded across a step's micro-batches and reduce-scatters once, after the last
/// backward: PyTorch's pipeline schedules turn FSDP's gradient sync and resharding off until
/// the last micro-batch, and torchtitan's default does not reshard after the forward when PP is
/// on. A ZeRO-3 layout with PP therefore sizes and costs as ZeRO-1 (parameters gathered once a
/// step, after the optimizer). torchtitan's 405B on 512 H100 (FSDP 8 · TP 8 · PP 8) measured
/// 82.5 GiB, where per-micro-batch resharding would hold under 25 GB (docs/MODEL.md).
/// ZeRO-2 keeps its stage with PP: a user who states it shards the gradients (Meta's Llama 3
/// stack, FSDP without resharding after the forward with gradient sync on), which are then
/// reduce-scattered every micro-batch and accumulated sharded; a stack that holds them
/// unsharded until the last micro-batch is ZeRO-1. HSDP keeps its stage too. DeepSpeed's
/// pipeline engine runs ZeRO stage 0 or 1 only (it refuses stages 2 and 3 with pipeline
/// parallelism), so a DeepSpeed layout with PP and ZeRO-2/3 sizes and costs as the ZeRO-1 a
/// DeepSpeed user runs there. DeepSpeed's engine also refuses ZeRO-3 for a model with
/// mixture-of-experts layers ("MoE not supported with Stage 3"): there ZeRO-3 runs as ZeRO-2.
pub fn effective_zero(e: &EfficiencyParams, m: &ModelProfile, cfg: &ParallelConfig) -> u8 {
    let fsdp = matches!(e.sharding, Sharding::Fsdp1 | Sharding::Fsdp2);
    let deepspeed = e.sharding == Sharding::DeepSpeed;
    if cfg.pp > 1 && ((cfg.zero >= 3 && fsdp) || (cfg.zero >= 2 && deepspeed)) {
        1
    } else if deepspeed && m.moe.is_some() && cfg.zero >= 3 {
        2
    } else {
        cfg.zero
    }
}

/// Ranks the ZeRO states of `cfg` are sharded over under `e`'s stack (dp·cp, or the HSDP
/// shard group).
pub fn shard_ranks(e: &EfficiencyParams, cfg: &ParallelConfig) -> u32 {
    if e.sharding == Sharding::Hsdp && cfg.zero >= 3 {
        hsdp_shard(e, cfg)
    } else {
        cfg.grad_ranks()
    }
}

/// Parameters held by the first and the last pipeline stage of one GPU (before ZeRO-3).
pub fn stage_params(m: &ModelProfile, tp: u32, pp: u32) -> (f64, f64) {
    let t = tp.max(1) as f64;
    let layers = stage_layers(m, pp).0;
    let body = layers * m.layer_params() / t;
    let vh = m.vocab as f64 * m.hidden as f64 / t;
    if pp <= 1 {
        (
            body + m.embedding_params() / t,
            body + m.embedding_params() / t,
        )
    } else {
        // Tied embeddings still need a copy on the last stage for the output layer.
        (body + vh, body + vh)
    }
}

/// Share of the memory left free (device memory less the predicted peak) above which one
/// allocation can fail in PyTorch's caching allocator although the total fits: its free
/// blocks are split among cached segments, and a tensor larger than the largest of them
/// needs a new segment. Observed on an H200 (docs/MODEL.md): a 23.5 GiB logits buffer failed
/// with 38.6 GiB free by copus's count (18.5 GiB of it reserved but unallocated), and a
/// 31 GiB one with 13 GiB free; runs with a quarter to a third of the free memory in their
/// largest buffer ran.
pub const FRAGMENTATION_FREE_SHARE: f64 = 0.5;

/// The largest single allocation of a step on the last pipeline stage, bytes: one copy of a
/// micro-batch's logits (tokens × vocabulary / TP) in the loss's precision.
pub fn largest_buffer_bytes(m: &ModelProfile, cfg: &ParallelConfig, eff: &EfficiencyParams) -> f64 {
    logits_per_gpu(m, cfg) * eff.cross_entropy.largest_buffer_bytes_per_logit()
}

/// Logits of one micro-batch on one GPU of the last stage: its tokens (after context
/// parallelism) × the vocabulary (split over TP).
fn logits_per_gpu(m: &ModelProfile, cfg: &ParallelConfig) -> f64 {
    m.seq_len as f64 / f64::from(cfg.cp.max(1)) * f64::from(cfg.mbs) * m.vocab as f64
        / f64::from(cfg.tp.max(1))
}

/// Whether a configuration whose peak of `total_bytes` fits in `device_bytes` allocates one
/// tensor of `largest_bytes` larger than [`FRAGMENTATION_FREE_SHARE`] of the memory left
/// free: a run the caching allocator's fragmentation can stop although the total fits.
pub fn fragmentation_risk(total_bytes: f64, device_bytes: f64, largest_bytes: f64) -> bool {
    total_bytes <= device_bytes
        && largest_bytes > FRAGMENTATION_FREE_SHARE * (device_bytes - total_bytes)
}

/// Peak memory per GPU of `cfg` with `micro_batches` micro-batches per step: that of the
/// fullest pipeline stage. Stage `i` keeps [`in_flight`] micro-batches' activations of its
/// [`layers_on_stage`] layers, the first holds the input embedding and the last the output
/// layer and its logits; with even stages the fullest is the first or the last.
pub fn peak_memory(
    m: &ModelProfile,
    cfg: &ParallelConfig,
    micro_batches: u64,
    reserved: f64,
    eff: &EfficiencyParams,
) -> MemoryBreakdown {
    let stages = Stages::new(m, cfg, micro_batches, reserved, eff);
    let pp = stages.pp;
    // Stage i holds states and activations in proportion to its layers, and fewer micro-batches
    // the later it is, so besides the ends only the first inner stage of each layer count can
    // be the fullest: the second, and the first of the other count (after the short stages at
    // the front, or the first short one after the full ones).
    let short = short_stages(m, pp);
    let first_other = match stages.split {
        StageSplit::Ends => short.div_ceil(2),
        StageSplit::Balanced => u64::from(pp) - short,
        // The first stage holding fewer layers than the first.
        StageSplit::Greedy => stages
            .counts
            .iter()
            .position(|&c| c < stages.counts[0])
            .map_or(0, |i| i as u64),
    };
    let first_other = u32::try_from(first_other).unwrap_or(u32::MAX);
    [0, 1, first_other, pp - 1]
        .into_iter()
        .filter(|&i| i < pp)
        .map(|i| stages.memory(i))
        .fold(None::<MemoryBreakdown>, |best, b| match best {
            Some(x) if x.total() >= b.total() => Some(x),
            _ => Some(b),
        })
        .unwrap_or_default()
}

/// Peak memory per GPU of the last pipeline stage (the whole model without pipeline
/// parallelism): the stage that holds the output layer and the loss's logits, where the
/// step's largest tensor ([`largest_buffer_bytes`]) is allocated. Its room, not that of the
/// fullest stage ([`peak_memory`]), is what [`fragmentation_risk`] compares that tensor with.
pub fn last_stage_memory(
    m: &ModelProfile,
    cfg: &ParallelConfig,
    micro_batches: u64,
    reserved: f64,
    eff: &EfficiencyParams,
) -> MemoryBreakdown {
    let stages = Stages::new(m, cfg, micro_batches, reserved, eff);
    stages.memory(stages.pp - 1)
}

/// The loss's logits against the room of the stage that holds them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LogitsRoom {
    /// Peak memory per GPU of the last pipeline stage ([`last_stage_memory`]), bytes.
    pub stage_bytes: f64,
    /// The logits tensor ([`largest_buffer_bytes`]), bytes.
    pub largest_bytes: f64,
    /// Whether it fits but the tensor takes over half the room left ([`fragmentation_risk`]).
    pub risk: bool,
}

/// [`LogitsRoom`] of `cfg` with `micro_batches` micro-batches on a GPU of `device_bytes`: the
/// one check `predict`, `grid` and the explorer's explanation make.
pub fn logits_room(
    m: &ModelProfile,
    cfg: &ParallelConfig,
    (micro_batches, reserved): (u64, f64),
    eff: &EfficiencyParams,
    device_bytes: f64,
) -> LogitsRoom {
    let stage_bytes = last_stage_memory(m, cfg, micro_batches, reserved, eff).total();
    let largest_bytes = largest_buffer_bytes(m, cfg, eff);
    LogitsRoom {
        stage_bytes,
        largest_bytes,
        risk: fragmentation_risk(stage_bytes, device_bytes, largest_bytes),
    }
}

/// What every pipeline stage's memory is made of, computed once for [`peak_memory`].
struct Stages {
    pp: u32,
    /// Where the short stages sit.
    split: StageSplit,
    /// Layers of each stage.
    counts: Vec<u32>,
    vpp: u32,
    micro_batches: u64,
    reserved: f64,
    /// Bytes per parameter after ZeRO sharding.
    per_param: f64,
    /// Activation bytes per layer and micro-batch.
    per_layer: f64,
    /// One layer re-materialised in backward (full and op-level recompute), bytes.
    working: f64,
    /// Output logits of one micro-batch on the last stage, bytes.
    logits: f64,
    /// Parameters per layer on one GPU without expert parallelism (all experts).
    layer_params: f64,
    /// Model-state bytes of one layer on one GPU: its dense part at `per_param`, its share of
    /// the experts (1/ep of them) at the expert-data-parallel group's ZeRO bytes.
    layer_state_bytes: f64,
    /// Parameters of a full first and last stage on one GPU.
    ends: (f64, f64),
    /// Layers of a full stage.
    full_layers: f64,
}

impl Stages {
    fn new(
        m: &ModelProfile,
        cfg: &ParallelConfig,
        micro_batches: u64,
        reserved: f64,
        eff: &EfficiencyParams,
    ) -> Self {
        let zero = effective_zero(eff, m, cfg);
        let shard = shard_ranks(eff, cfg);
        let per_param = zero_bytes_per_param(zero, shard, eff.grad_bytes);
        // Expert parallelism: a GPU holds 1/ep of the experts, whose states ZeRO shards over
        // the expert-data-parallel group (the shard ranks / ep).
        let ep = cfg.ep.max(1);
        let per_expert_param = zero_bytes_per_param(zero, (shard / ep).max(1), eff.grad_bytes);
        let sp = cfg.tp > 1 && eff.sequence_parallel;
        let attn = (
            eff.attention,
            eff.precision == super::efficiency::Precision::Fp8,
        );
        let tc = (cfg.tp, cfg.cp);
        let per_layer = layer_activation_bytes_cp(m, cfg.mbs, tc, sp, cfg.recompute, attn);
        // Full and op-level recompute re-materialise one layer at a time in backward.
        let working = if matches!(cfg.recompute, Recompute::Full | Recompute::Op) {
            layer_activation_bytes_cp(m, cfg.mbs, tc, sp, Recompute::None, attn)
        } else {
            0.0
        };
        let pp = cfg.pp.max(1);
        // The logits at the loss's backward, as the stack computes the loss.
        let t = cfg.tp.max(1) as f64;
        let logits = logits_per_gpu(m, cfg) * eff.cross_entropy.bytes_per_logit();
        Self {
            pp,
            split: eff.stage_split,
            counts: stage_layer_counts(m, pp, eff.stage_split),
            vpp: cfg.vpp,
            micro_batches,
            reserved,
            per_param,
            per_layer,
            working,
            logits,
            layer_params: m.layer_params() / t,
            layer_state_bytes: m.dense_layer_params() / t * per_param
                + m.expert_layer_params() / (t * f64::from(ep)) * per_expert_param,
            ends: stage_params(m, cfg.tp, pp),
            full_layers: stage_layers(m, pp).0,
        }
    }

    /// Memory of stage `i` (0-based).
    fn memory(&self, i: u32) -> MemoryBreakdown {
        let pp = self.pp;
        let layers = f64::from(self.counts.get(i as usize).copied().unwrap_or(0));
        // stage_params is for a full stage: what it holds beyond its layers is the embedding
        // (first stage) or the output layer (last).
        let full = if i == 0 {
            self.ends.0
        } else if i + 1 == pp {
            self.ends.1
        } else {
            self.full_layers * self.layer_params
        };
        // The embedding and output layer the ends hold beside their layers.
        let ends_extra = full - self.full_layers * self.layer_params;
        let in_flight = in_flight(pp, self.vpp, i, self.micro_batches);
        MemoryBreakdown {
            model_states: ends_extra * self.per_param + layers * self.layer_state_bytes,
            activations: layers * self.per_layer * in_flight + self.working,
            output: if i + 1 == pp { self.logits } else { 0.0 },
            reserved: self.reserved,
            stage: if pp > 1 { i } else { 0 },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small GPT shape with `layers` transformer layers.
    fn with_layers(layers: u32) -> ModelProfile {
        ModelProfile {
            layers,
            ..gpt(1024, 16)
        }
    }

    fn gpt(h: u32, a: u32) -> ModelProfile {
        ModelProfile {
            name: "gpt".into(),
            layers: 4,
            hidden: h,
            heads: a,
            kv_heads: a,
            ffn_hidden: 4 * h,
            vocab: 1000,
            seq_len: 2048,
            swiglu: false,
            tied_embeddings: false,
            dropout: None,
            moe: None,
            source: String::new(),
        }
    }

    #[test]
    fn one_buffer_over_half_the_free_memory_is_a_fragmentation_risk() {
        use crate::perf::efficiency::CrossEntropy;
        // Llama 3.2 1B's vocabulary at 48K tokens: 6.3e9 logits, 25.2 GB in FP32 (PyTorch's
        // loss), halved by the fused loss, divided by TP.
        let m = ModelProfile {
            vocab: 128_256,
            seq_len: 49_152,
            ..gpt(2048, 32)
        };
        let mut cfg = ParallelConfig {
            dp: 1,
            tp: 1,
            pp: 1,
            mbs: 1,
            zero: 3,
            recompute: Recompute::Full,
            vpp: 1,
            cp: 1,
            ep: 1,
        };
        let mut eff = EfficiencyParams {
            cross_entropy: CrossEntropy::Pytorch,
            ..EfficiencyParams::default()
        };
        let fp32 = largest_buffer_bytes(&m, &cfg, &eff);
        assert!((fp32 - 49_152.0 * 128_256.0 * 4.0).abs() < 1.0);
        eff.cross_entropy = CrossEntropy::Fused;
        assert!((largest_buffer_bytes(&m, &cfg, &eff) - fp32 / 2.0).abs() < 1.0);
        cfg.tp = 2;
        eff.cross_entropy = CrossEntropy::VocabParallel;
        assert!((largest_buffer_bytes(&m, &cfg, &eff) - fp32 / 2.0).abs() < 1.0);
        // The H200 run that failed: 108.9 GB of 150.7 predicted, 41.8 GB free.
        assert!(fragmentation_risk(108.9e9, 150.7e9, fp32));
        // The 1B at 32K that ran: 16.8 GB of logits with 69 GB free.
        assert!(!fragmentation_risk(81.3e9, 150.7e9, 16.8e9));
        // What does not fit is not a risk but a refusal.
        assert!(!fragmentation_risk(160e9, 150.7e9, fp32));
    }

    #[test]
    fn short_stages_sit_at_the_ends_of_the_pipeline() {
        let split = |layers, pp| -> Vec<u32> {
            (0..pp)
                .map(|i| layers_on_stage(&with_layers(layers), pp, i, StageSplit::Ends))
                .collect()
        };
        // Llama 3 405B: 126 layers on 16 stages, one fewer on the first and the last.
        let llama = split(126, 16);
        assert_eq!((llama[0], llama[15]), (7, 7));
        assert!(llama[1..15].iter().all(|&l| l == 8));
        // 70 on 12: the two short stages are the ends; 9 on 4: first, last and second.
        assert_eq!(split(70, 12), [5, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 5]);
        assert_eq!(split(9, 4), [2, 2, 3, 2]);
        assert_eq!(split(8, 4), [2, 2, 2, 2]);
        for (layers, pp) in [(126, 16), (70, 12), (9, 4), (5, 5), (61, 8)] {
            assert_eq!(
                split(layers, pp).iter().sum::<u32>(),
                layers,
                "{layers} on {pp}"
            );
        }
    }

    /// DeepSpeed's `partition_balanced` (deepspeed/runtime/utils.py, the dynamic programme of
    /// the linear partition problem: fewest max − min, later cut points on ties), ported as
    /// the oracle: the layer counts of each part of `weights` in `parts` parts.
    fn deepspeed_partition_balanced(weights: &[u32], parts: usize) -> Vec<u32> {
        let n = weights.len();
        let inf = f64::INFINITY;
        let mut dp_max = vec![vec![inf; parts + 1]; n + 1];
        let mut dp_min = vec![vec![inf; parts + 1]; n + 1];
        let mut dp_cost = vec![vec![inf; parts + 1]; n + 1];
        let mut position = vec![vec![0usize; parts + 1]; n + 1];
        let mut prefix = vec![0.0; n + 1];
        for (i, &w) in weights.iter().enumerate() {
            prefix[i + 1] = prefix[i] + f64::from(w);
        }
        dp_max[0][0] = 0.0;
        dp_cost[0][0] = 0.0;
        for i in 1..=n {
            for j in 1..=i.min(parts) {
                for k in 0..i {
                    let max_sum = dp_max[k][j - 1].max(prefix[i] - prefix[k]);
                    let min_sum = dp_min[k][j - 1].min(prefix[i] - prefix[k]);
                    let cost = max_sum - min_sum;
                    if dp_cost[i][j] >= cost {
                        dp_cost[i][j] = cost;
                        dp_max[i][j] = max_sum;
                        dp_min[i][j] = min_sum;
                        position[i][j] = k;
                    }
                }
            }
        }
        let mut cuts = vec![n];
        for j in (1..=parts).rev() {
            let last = *cuts.last().expect("one cut");
            cuts.push(position[last][j]);
        }
        cuts.reverse();
        cuts.windows(2)
            .map(|c| weights[c[0]..c[1]].iter().sum())
            .collect()
    }

    #[test]
    fn deepspeed_2021_stages_are_split_as_its_greedy_partition_splits_them() {
        // Layer counts per stage from DeepSpeed 0.10's own `partition_balanced`
        // (deepspeed/runtime/utils.py, run in Python) over Megatron-DeepSpeed's GPT model
        // entries, three before the layers and four after (weights 0) with
        // `partition_method='type:transformer'`; the power-of-two rows are where its search
        // ends a hair under ⌈layers/pp⌉.
        let published: [(u32, u32, &[u32]); 15] = [
            (4, 3, &[1, 1, 2]),
            (8, 7, &[1, 1, 1, 1, 1, 1, 2]),
            (16, 3, &[5, 5, 6]),
            (16, 5, &[3, 3, 3, 3, 4]),
            (64, 7, &[9, 9, 9, 9, 9, 9, 10]),
            (64, 9, &[7, 7, 7, 7, 7, 7, 7, 7, 8]),
            (70, 12, &[6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 4]),
            (42, 16, &[3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 0, 0]),
            (10, 4, &[3, 3, 3, 1]),
            (50, 8, &[7, 7, 7, 7, 7, 7, 7, 1]),
            (126, 16, &[8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 6]),
            (105, 35, &[3; 35]),
            (30, 4, &[8, 8, 8, 6]),
            (7, 3, &[3, 3, 1]),
            (126, 8, &[16, 16, 16, 16, 16, 16, 16, 14]),
        ];
        for (layers, pp, want) in published {
            let m = with_layers(layers);
            assert_eq!(
                stage_layer_counts(&m, pp, StageSplit::Greedy),
                want,
                "{layers} on {pp}"
            );
            let one_by_one: Vec<u32> = (0..pp)
                .map(|i| layers_on_stage(&m, pp, i, StageSplit::Greedy))
                .collect();
            assert_eq!(one_by_one, want);
            assert_eq!(
                empty_stage(&m, pp, StageSplit::Greedy),
                want.iter().position(|&l| l == 0).map(|i| i as u32)
            );
        }
        // Every split holds every layer once, and never more than ⌈layers/pp⌉ + 1 a stage.
        for layers in 1..=130u32 {
            for pp in 1..=layers.min(64) {
                let counts = stage_layer_counts(&with_layers(layers), pp, StageSplit::Greedy);
                assert_eq!(counts.len(), pp as usize);
                assert_eq!(counts.iter().sum::<u32>(), layers, "{layers} on {pp}");
                assert!(counts.iter().all(|&c| c <= layers.div_ceil(pp) + 1));
            }
        }
        let m = with_layers(42);
        assert_eq!(empty_stage(&m, 16, StageSplit::Balanced), None);
    }

    #[test]
    fn deepspeed_stages_are_split_as_its_balanced_partition_splits_them() {
        for layers in 2..=40u32 {
            for pp in 2..=layers.min(12) {
                // Megatron-DeepSpeed's GPTModelPipe: the cast, the embedding and a transpose
                // before the layers, a transpose, the final norm, the tied output embedding and
                // the cast back after them; `type:transformer` weighs the layers 1, the rest 0.
                let (before, after) = PIPE_ENTRIES_AROUND_LAYERS;
                let mut weights = vec![0; before];
                weights.extend(std::iter::repeat_n(1, layers as usize));
                weights.extend(vec![0; after]);
                let want = deepspeed_partition_balanced(&weights, pp as usize);
                let got: Vec<u32> = (0..pp)
                    .map(|i| layers_on_stage(&with_layers(layers), pp, i, StageSplit::Balanced))
                    .collect();
                assert_eq!(got, want, "{layers} layers on {pp} stages");
            }
        }
        // BLOOM's shape: the first ten of twelve stages full.
        let bloom: Vec<u32> = (0..12)
            .map(|i| layers_on_stage(&with_layers(70), 12, i, StageSplit::Balanced))
            .collect();
        assert_eq!(bloom, [6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 5, 5]);
    }

    #[test]
    fn the_first_stage_under_deepspeed_holds_its_extra_layers() {
        // 70 layers on PP 12: under DeepSpeed's balanced split the first stage holds 6 layers beside
        // the embedding and is the fullest; under Megatron's split it holds 5, and the second
        // stage (6 layers, one micro-batch fewer in flight) is the fullest.
        let m = ModelProfile {
            layers: 70,
            ..gpt(4096, 32)
        };
        let cfg = ParallelConfig {
            dp: 2,
            tp: 2,
            pp: 12,
            mbs: 1,
            zero: 1,
            recompute: Recompute::Selective,
            vpp: 1,
            cp: 1,
            ep: 1,
        };
        let mut eff = EfficiencyParams {
            stage_split: StageSplit::Ends,
            ..EfficiencyParams::default()
        };
        let ends = peak_memory(&m, &cfg, 64, 0.0, &eff);
        eff.stage_split = StageSplit::Balanced;
        let deepspeed = peak_memory(&m, &cfg, 64, 0.0, &eff);
        // DeepSpeed's 2021 greedy split fills the first stage the same way.
        eff.stage_split = StageSplit::Greedy;
        let greedy = peak_memory(&m, &cfg, 64, 0.0, &eff);
        assert_eq!(greedy, deepspeed);
        assert_eq!((ends.stage, deepspeed.stage), (1, 0));
        // 6 layers × 12 micro-batches in flight against 6 × 11.
        let ratio = deepspeed.activations / ends.activations;
        assert!((ratio - 72.0 / 66.0).abs() < 1e-9, "{ratio}");
        assert!(deepspeed.total() > ends.total());
    }

    #[test]
    fn micro_batches_in_flight_per_stage() {
        // 1F1B: pp − i; the interleaved first stage is Narayanan et al.'s pp·(1 + (pp−1)/(pp·v)).
        assert_eq!(in_flight(4, 1, 0, 64), 4.0);
        assert_eq!(in_flight(4, 1, 3, 64), 1.0);
        for (pp, v) in [(4u32, 2u32), (16, 7), (8, 3)] {
            let want = pp as f64 * (1.0 + (pp as f64 - 1.0) / (pp as f64 * v as f64));
            assert!((in_flight(pp, v, 0, 1000) - want).abs() < 1e-12, "{pp} {v}");
            // The last stage of an interleaved schedule holds more than one micro-batch.
            assert!(in_flight(pp, v, pp - 1, 1000) > 1.0);
        }
        // Never more than the step has.
        assert_eq!(in_flight(8, 2, 0, 3), 3.0);
        assert_eq!(in_flight(8, 1, 0, 3), 3.0);
    }

    #[test]
    fn the_fullest_stage_is_found_among_all_stages() {
        // Brute force over every stage against peak_memory's four candidates.
        let eff = EfficiencyParams::default();
        for layers in [7u32, 9, 30, 61, 126] {
            for pp in [2u32, 3, 4, 5, 8, 16, 24, 32] {
                for vpp in [1u32, 2, 3] {
                    for micro_batches in [1u64, 3, 64] {
                        if layers < pp {
                            continue;
                        }
                        let m = ModelProfile {
                            layers,
                            ..gpt(1024, 16)
                        };
                        let cfg = ParallelConfig {
                            dp: 1,
                            tp: 2,
                            pp,
                            mbs: 1,
                            zero: 1,
                            recompute: Recompute::None,
                            vpp,
                            cp: 1,
                            ep: 1,
                        };
                        let got = peak_memory(&m, &cfg, micro_batches, 0.0, &eff).total();
                        let stages = Stages::new(&m, &cfg, micro_batches, 0.0, &eff);
                        let brute = (0..pp)
                            .map(|i| stages.memory(i).total())
                            .fold(0.0, f64::max);
                        assert_eq!(got, brute, "{layers} on {pp}, vpp {vpp}, m {micro_batches}");
                    }
                }
            }
        }
    }

    #[test]
    fn uneven_stages_peak_below_the_full_stage_bound() {
        let cfg = ParallelConfig {
            dp: 1,
            tp: 1,
            pp: 4,
            mbs: 1,
            zero: 1,
            recompute: Recompute::None,
            vpp: 1,
            cp: 1,
            ep: 1,
        };
        let eff = EfficiencyParams::default();
        let m = |layers| ModelProfile {
            layers,
            ..gpt(1024, 16)
        };
        let even = peak_memory(&m(8), &cfg, 16, 0.0, &eff);
        let uneven = peak_memory(&m(7), &cfg, 16, 0.0, &eff);
        // 8 on 4: the first stage (2 layers, 4 in flight) is the fullest.
        assert_eq!(even.stage, 0);
        // 7 on 4 (1, 2, 2, 2 layers): the second stage (2 layers, 3 in flight) is, and it
        // holds less than a full first stage would (2 layers, 4 in flight).
        assert_eq!(uneven.stage, 1);
        let per_layer = even.activations / 8.0;
        assert!((uneven.activations - 6.0 * per_layer).abs() < 1e-6 * per_layer);
        assert!(uneven.total() < even.total());
    }

    #[test]
    fn a_pipeline_runs_fsdp_zero_3_as_zero_1_and_keeps_zero_2() {
        let cfg = |zero, pp| ParallelConfig {
            dp: 8,
            tp: 8,
            pp,
            mbs: 1,
            zero,
            recompute: Recompute::Full,
            vpp: 1,
            cp: 1,
            ep: 1,
        };
        let with = |sharding| EfficiencyParams {
            sharding,
            ..EfficiencyParams::default()
        };
        let dense = gpt(1024, 16);
        for s in [Sharding::Fsdp1, Sharding::Fsdp2] {
            assert_eq!(effective_zero(&with(s), &dense, &cfg(3, 8)), 1);
            assert_eq!(effective_zero(&with(s), &dense, &cfg(3, 1)), 3);
            assert_eq!(effective_zero(&with(s), &dense, &cfg(2, 1)), 2);
        }
        for s in [Sharding::Fsdp1, Sharding::Fsdp2, Sharding::Hsdp] {
            assert_eq!(effective_zero(&with(s), &dense, &cfg(2, 8)), 2, "{s:?}");
        }
        assert_eq!(effective_zero(&with(Sharding::Hsdp), &dense, &cfg(3, 8)), 3);
        // DeepSpeed's pipeline engine runs ZeRO-0/1 only: 2 and 3 with PP run as 1.
        let ds = with(Sharding::DeepSpeed);
        assert_eq!(effective_zero(&ds, &dense, &cfg(3, 8)), 1);
        assert_eq!(effective_zero(&ds, &dense, &cfg(2, 8)), 1);
        assert_eq!(effective_zero(&ds, &dense, &cfg(3, 1)), 3);
        assert_eq!(effective_zero(&ds, &dense, &cfg(0, 8)), 0);
        // And no ZeRO-3 with experts: ZeRO-2 there (ZeRO-3 elsewhere keeps its stage).
        let moe = ModelProfile {
            moe: Some(crate::perf::model::MoeSpec {
                experts: 8,
                top_k: 2,
                capacity_factor: Some(1.0),
            }),
            ..dense.clone()
        };
        assert_eq!(effective_zero(&ds, &moe, &cfg(3, 1)), 2);
        assert_eq!(effective_zero(&ds, &moe, &cfg(3, 8)), 1);
        assert_eq!(effective_zero(&with(Sharding::Fsdp2), &moe, &cfg(3, 1)), 3);
    }

    #[test]
    fn reproduces_korthikanti_formulas() {
        for (h, a, b, t) in [
            (4096u32, 32u32, 1u32, 8u32),
            (2048, 16, 4, 2),
            (12288, 96, 2, 4),
        ] {
            let m = gpt(h, a);
            let (s, bf, hf, af, tf) = (2048.0, b as f64, h as f64, a as f64, t as f64);
            let sbh = s * bf * hf;
            let rel = |x: f64, y: f64| (x / y - 1.0).abs() < 1e-12;
            let un = AttentionKind::Unfused;
            let none1 = layer_activation_bytes(&m, b, 1, false, Recompute::None, un);
            assert!(rel(none1, sbh * (34.0 + 5.0 * af * s / hf)));
            let tp = layer_activation_bytes(&m, b, t, false, Recompute::None, un);
            assert!(rel(tp, sbh * (10.0 + 24.0 / tf + 5.0 * af * s / (hf * tf))));
            let sp = layer_activation_bytes(&m, b, t, true, Recompute::None, un);
            assert!(rel(sp, sbh * (34.0 / tf + 5.0 * af * s / (hf * tf))));
            let sel = layer_activation_bytes(&m, b, t, true, Recompute::Selective, un);
            assert!(rel(sel, sbh * 34.0 / tf));
            // Fused attention never stores the scores: as selective recompute.
            let fused =
                layer_activation_bytes(&m, b, t, true, Recompute::None, AttentionKind::Fused);
            assert!(rel(fused, sel));
            let full = layer_activation_bytes(&m, b, 1, false, Recompute::Full, un);
            assert!(rel(full, 2.0 * sbh));
        }
    }

    #[test]
    fn reproduces_zero_stages() {
        for dp in [1u32, 2, 8, 64] {
            let d = dp as f64;
            assert_eq!(zero_bytes_per_param(0, dp, 2.0), 16.0);
            assert!((zero_bytes_per_param(1, dp, 2.0) - (4.0 + 12.0 / d)).abs() < 1e-12);
            assert!((zero_bytes_per_param(2, dp, 2.0) - (2.0 + 14.0 / d)).abs() < 1e-12);
            assert!((zero_bytes_per_param(3, dp, 2.0) - 16.0 / d).abs() < 1e-12);
            // FP32 gradient buffers (Megatron's default with BF16): two more bytes unsharded.
            assert_eq!(
                zero_bytes_per_param(1, dp, 4.0),
                zero_bytes_per_param(1, dp, 2.0) + 2.0
            );
        }
        // Higher stages never need more memory.
        for dp in 1..100 {
            let b: Vec<f64> = (0..4).map(|z| zero_bytes_per_param(z, dp, 4.0)).collect();
            assert!(b.windows(2).all(|w| w[1] <= w[0] + 1e-12));
        }
    }

    #[test]
    fn pipeline_first_stage_holds_pp_micro_batches() {
        let m = gpt(4096, 32);
        let cfg = |pp, vpp| ParallelConfig {
            dp: 1,
            tp: 1,
            pp,
            mbs: 1,
            zero: 1,
            recompute: Recompute::Selective,
            vpp,
            cp: 1,
            ep: 1,
        };
        let e = EfficiencyParams::default();
        let a1 = peak_memory(&m, &cfg(1, 1), 8, 0.0, &e).activations;
        let a4 = peak_memory(&m, &cfg(4, 1), 8, 0.0, &e).activations;
        // pp = 4: a quarter of the layers, four micro-batches in flight.
        assert!((a4 / a1 - 1.0).abs() < 1e-12);
        let a4v = peak_memory(&m, &cfg(4, 2), 8, 0.0, &e).activations;
        assert!((a4v / a4 - (1.0 + 3.0 / 8.0)).abs() < 1e-12);
    }
}
