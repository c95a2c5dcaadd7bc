//! Step time of one configuration (docs/MODEL.md), split into the batch-independent cost of a
//! micro-batch ([`ConfigCost::new`]) and the batch-dependent assembly ([`ConfigCost::at`]),
//! so a grid over many batch sizes evaluates each configuration once.
//!
//! One micro-batch on the slowest pipeline stage: GEMMs on the roofline-plus-overhead curve,
//! attention fused (flash) or unfused (batched GEMMs around memory-bound softmax and dropout
//! over the s×s scores), memory-bound kernels (norms, activations, dropout, residuals; the FP32
//! cross-entropy over the vocabulary on the last stage), tensor-parallel collectives partly
//! hidden behind GEMMs, blocking pipeline point-to-point transfers, and a fixed cost per
//! micro-batch and per virtual stage. A step: `m` micro-batches, the pipeline bubble
//! `(pp−1)/v` stage times, the data-parallel collectives of the ZeRO stage (bucketed gradient
//! reduction hidden behind at most the last backward; ZeRO-3 parameter all-gathers and
//! gradient reduce-scatters per layer and micro-batch, hidden behind that layer's compute as
//! far as prefetching allows), and the memory-bound Adam step.

use super::comms::{self, Net, Placement};
use super::efficiency::{
    ATTN_BWD_FLOP_RATIO, AttentionKind, CpComm, Elementwise, Precision, Sharding,
};
use super::memory::{
    effective_zero, hsdp_shard, peak_memory, shard_ranks, stage_extremes, stage_layers,
    stage_params,
};
use super::{
    Breakdown, EfficiencyParams, Invalid, ModelProfile, ParallelConfig, PerfContext, Prediction,
    Recompute, flops, validate,
};
use std::borrow::Cow;

/// Bytes of HBM traffic per logit of the FP32 cross-entropy (cast, max, exp, sum, normalise,
/// gradient, cast back: about nine FP32 passes).
/// Every cross-entropy implementation (`cross_entropy`) is charged the same: a fused kernel's
/// fewer passes (about 6 bytes a logit) made the held-out llm-foundry rows worse on both GPUs
/// (docs/MODEL.md), so only its memory saving is modelled.
const CE_BYTES_PER_LOGIT: f64 = 36.0;
/// Bytes of HBM traffic per element of the hidden state in one layer's forward memory-bound
/// kernels (two norms, two bias-dropout-residual blocks, rotary/bias adds), BF16.
const ELEMWISE_BYTES_PER_HIDDEN: f64 = 38.0;
/// Memory-bound kernels in one layer's forward pass (backward launches twice as many).
const ELEMWISE_KERNELS: f64 = 12.0;
/// Element-wise kernels of one Llama layer's forward in PyTorch eager (an RMSNorm alone is
/// six); a GELU block's eager kernels are no more than the fused count.
const EAGER_LLAMA_KERNELS: f64 = 30.0;
/// Bytes of HBM traffic per attention score in the forward pass of unfused attention besides
/// the two GEMMs' own reads and writes: fused scale-mask-softmax read and written (4), dropout
/// read, written and its mask (5), BF16. The backward moves about 1.25× as much.
const UNFUSED_BYTES_PER_SCORE: f64 = 9.0;
/// Bytes of HBM traffic per GEMM input element for its FP8 casts: a standalone cast reads
/// BF16 and writes FP8 in the forward and again for the backward's transposed copy (6), but
/// Transformer Engine writes the QKV and first MLP inputs as FP8 straight from the fused
/// LayerNorm (`LayerNormLinear`, `LayerNormMLP`), so about half the inputs need one: 3 on
/// average.
const FP8_CAST_BYTES_PER_ELEMENT: f64 = 3.0;
/// Adam step bytes per parameter (FP32 gradient, master weight, moments; BF16 copy out).
const OPTIMIZER_BYTES_PER_PARAM: f64 = 32.0;

/// Batch-independent cost of one configuration: seconds per micro-batch and per step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ConfigCost {
    /// The configuration.
    pub cfg: ParallelConfig,
    /// Compute seconds of one micro-batch (forward + backward + recompute + fixed costs) on
    /// the slowest stage.
    pub compute_mb: f64,
    /// Compute seconds of one micro-batch averaged over stages (sets the bubble).
    pub compute_mb_avg: f64,
    /// Backward share of `compute_mb`, seconds (window for gradient collectives).
    pub backward_mb: f64,
    /// Exposed tensor-parallel seconds per micro-batch.
    pub tp_mb: f64,
    /// Expert-parallel all-to-all seconds per micro-batch (token dispatch and combine).
    pub ep_mb: f64,
    /// Context parallelism's exposed key/value exchange per micro-batch, seconds (part of
    /// `compute_mb`: it sits inside each layer's forward and backward).
    pub cp_mb: f64,
    /// Pipeline point-to-point seconds per micro-batch.
    pub p2p_mb: f64,
    /// Exposed data-parallel seconds per micro-batch (ZeRO-2 gradient reduce-scatter,
    /// ZeRO-3 per-layer parameter gathers and gradient reduce-scatters).
    pub dp_exposed_mb: f64,
    /// Once-per-step gradient collective seconds before overlap.
    pub dp_grad_once: f64,
    /// Once-per-step parameter all-gather seconds before overlap (hidden behind a forward).
    pub dp_param_once: f64,
    /// Optimizer step seconds.
    pub optimizer_s: f64,
}

/// Seconds of one layer's forward on one GPU, split into GEMMs, attention core and
/// memory-bound kernels, and the share of the GEMMs op-level checkpointing recomputes.
struct LayerTimes {
    gemm_fwd: f64,
    gemm_bwd: f64,
    attn_fwd: f64,
    attn_bwd: f64,
    elem_fwd: f64,
    /// Mixture-of-experts token permutation (forward; its backward moves the same bytes).
    moe_permute: f64,
    /// Forward seconds of the GEMMs op-level checkpointing does not keep (every other one).
    gemm_op_recompute: f64,
}

/// The peak the projection and MLP GEMMs run at and their efficiency parameters: BF16, or
/// FP8 (the FP8 peak at `fp8_max_eff`) where the stack runs it and the hardware has an FP8
/// peak. Borrowed unchanged for BF16.
fn gemm_curve<'a>(ctx: &PerfContext<'a>) -> (f64, Cow<'a, EfficiencyParams>) {
    let (hw, e) = (ctx.hw, ctx.eff);
    if runs_fp8(ctx) {
        let fp8 = EfficiencyParams {
            max_eff: e.fp8_max_eff,
            ..e.clone()
        };
        (hw.fp8_peak_flops, Cow::Owned(fp8))
    } else {
        (hw.peak_flops, Cow::Borrowed(e))
    }
}

/// Whether the GEMMs run in FP8: the stack asks for it and the hardware has an FP8 peak.
fn runs_fp8(ctx: &PerfContext) -> bool {
    ctx.eff.precision == Precision::Fp8 && ctx.hw.fp8_peak_flops > 0.0
}

fn layer_times(ctx: &PerfContext, cfg: &ParallelConfig) -> LayerTimes {
    let (m, hw, e) = (ctx.model, ctx.hw, ctx.eff);
    let (peak, bw) = (hw.peak_flops, hw.mem_bw_bytes_per_s);
    let t = cfg.tp as f64;
    let cp = cfg.cp.max(1) as f64;
    let (s, h) = (m.seq_len as f64, m.hidden as f64);
    let b = cfg.mbs as f64;
    // Tokens of one micro-batch on this GPU: a context-parallel rank holds s/cp of each
    // sequence.
    let tokens = b * s / cp;
    let (gemm_peak, ge) = gemm_curve(ctx);
    let gemm = |mm: f64, k: f64, n: f64| ge.gemm_time(mm, k, n, gemm_peak, bw);
    let gemm_bwd = |mm: f64, k: f64, n: f64| ge.gemm_backward_time(mm, k, n, gemm_peak, bw);
    // Expert parallelism: this GPU runs experts/ep experts, each on the tokens the ep ranks
    // of its group route to it (the same FLOPs, in fewer and larger GEMMs).
    let ep = f64::from(cfg.ep.max(1));
    let experts = m.experts() / ep;
    let expert_tokens = tokens * m.active_experts() / m.experts() * ep;
    let up_cols = (m.ffn_matrices() - 1.0) * m.ffn_hidden as f64 / t;
    let f = m.ffn_hidden as f64;
    let shapes = [
        (tokens, h, (h + 2.0 * m.kv_hidden()) / t, 1.0),
        (tokens, h / t, h, 1.0),
        (expert_tokens, h, up_cols, experts),
        (expert_tokens, f / t, h, experts),
    ];
    let fwd_of = |&(a, k, n, c): &(f64, f64, f64, f64)| c * gemm(a, k, n);
    let gemm_fwd: f64 = shapes.iter().map(fwd_of).sum();
    let gemm_bwd: f64 = shapes
        .iter()
        .map(|&(a, k, n, c)| c * gemm_bwd(a, k, n))
        .sum();
    // torchtitan's op-level policy keeps every other GEMM output: about half the GEMM
    // forward is recomputed (the K and V, output and one MLP projection of a Llama block).
    let gemm_op_recompute = 0.5 * gemm_fwd;
    let (attn_fwd, attn_bwd) = match e.attention {
        AttentionKind::Fused | AttentionKind::Cudnn | AttentionKind::Triton => {
            // Causal FLOPs, balanced over the context-parallel ranks.
            let flops = 2.0 * b * s * s * h / t / cp;
            let speedup = match e.attention {
                AttentionKind::Cudnn => e.attn_native_speedup,
                AttentionKind::Triton => 1.0 / e.attn_triton_slowdown,
                _ => 1.0,
            };
            // No kernel runs above the GPU's peak, whatever a fitted speed-up says.
            let (fwd_eff, bwd_eff) = (
                (e.attn_eff * speedup).min(1.0),
                (e.attn_bwd_eff * speedup).min(1.0),
            );
            let fwd = flops / (peak * fwd_eff);
            (fwd, ATTN_BWD_FLOP_RATIO * flops / (peak * bwd_eff))
        }
        AttentionKind::Unfused => {
            let heads = b * m.heads as f64 / t;
            let d = h / m.heads as f64;
            let q = s / cp;
            let scores = heads * q * s;
            let bg = |dims| e.batched_gemm_time(heads, dims, peak, bw);
            let soft = |passes: f64| {
                e.memory_time(passes * UNFUSED_BYTES_PER_SCORE * scores, 2.0 * passes, bw)
            };
            let fwd = bg((q, d, s)) + bg((q, s, d)) + soft(1.0);
            let bwd = bg((q, s, d)) + bg((d, q, s)) + bg((q, d, s)) + bg((s, q, d)) + soft(1.25);
            (fwd, bwd)
        }
    };
    let ffn_elem = if m.swiglu { 6.0 } else { 4.0 } * f * m.active_experts();
    let sp_split = sequence_split(e, cfg.tp);
    let fused_bytes = ELEMWISE_BYTES_PER_HIDDEN * h * tokens / sp_split + ffn_elem * tokens / t;
    let (mut elem_bytes, elem_kernels) = match e.elementwise {
        Elementwise::Fused => (fused_bytes, ELEMWISE_KERNELS),
        Elementwise::Eager => {
            let (bytes, kernels) = eager_elementwise(m, tokens, t, sp_split);
            (fused_bytes.max(bytes), kernels)
        }
    };
    if runs_fp8(ctx) {
        // FP8: every GEMM input cast (read BF16, write FP8) in forward and backward.
        let inputs: f64 = shapes.iter().map(|&(a, k, _, c)| c * a * k).sum();
        elem_bytes += FP8_CAST_BYTES_PER_ELEMENT * inputs;
    }
    let elem_fwd = e.memory_time(elem_bytes, elem_kernels, bw);
    let moe_permute = match moe_permute_bytes(m, tokens / sp_split) {
        0.0 => 0.0,
        bytes => e.memory_time(bytes, 2.0, bw),
    };
    LayerTimes {
        gemm_fwd,
        gemm_bwd,
        attn_fwd,
        attn_bwd,
        elem_fwd,
        moe_permute,
        gemm_op_recompute,
    }
}

/// HBM bytes and kernels of one layer's forward element-wise work in PyTorch eager, one
/// kernel per operation, for `tokens` tokens on a TP rank (`t`, and `sp` the sequence split outside the
/// TP regions). A Llama block (SwiGLU stands for the family: RMSNorm, rotary embedding) as
/// torchtitan and Hugging Face write it: each RMSNorm upcasts to FP32 (cast, square, mean,
/// scale, cast back, weight: 36 bytes per element), the rotary embedding of queries and keys
/// runs in FP32 (20 bytes per element), grouped keys and values are copied out to every query
/// head (4 bytes per key/value element and per query element), the attention output is made
/// contiguous (4), SwiGLU's SiLU and product move 10 bytes per FFN element and the two residual
/// adds 12 per hidden element. A GELU block's LayerNorm is one kernel even in eager (4 bytes),
/// with no rotary embedding and 4 bytes per FFN element, in no more kernels than the fused
/// count. Per hidden element of a Llama layer that is about three times what the fused kernels
/// move (`ELEMWISE_BYTES_PER_HIDDEN`).
fn eager_elementwise(m: &ModelProfile, tokens: f64, t: f64, sp: f64) -> (f64, f64) {
    let (h, kv, f) = (m.hidden as f64, m.kv_hidden(), m.ffn_hidden as f64);
    let llama = m.swiglu;
    let norm = if llama { 36.0 } else { 4.0 };
    let outside_tp = (2.0 * norm + 12.0) * h / sp;
    let rope = if llama { 20.0 * (h + kv) } else { 0.0 };
    let grouped = if kv < h { 4.0 * (kv + h) } else { 0.0 };
    let inside_tp = (rope + grouped + 4.0 * h) / t;
    let ffn = if llama { 10.0 } else { 4.0 } * f * m.active_experts() / t;
    let kernels = if llama {
        EAGER_LLAMA_KERNELS
    } else {
        ELEMWISE_KERNELS
    };
    (tokens * (outside_tp + inside_tp + ffn), kernels)
}

/// Exposed seconds per micro-batch and layer of context parallelism's exchange over the
/// `cfg.cp` ranks sharing a sequence, by [`CpComm`] kind. Returns (forward, backward).
///
/// - Ring: `cp − 1` point-to-point steps of one rank's keys and values in the forward, twice
///   the bytes (keys, values and their gradients) in the backward, each hidden behind the
///   attention compute of the chunk it overlaps.
/// - All-gather: the keys and values gathered once, behind the local chunk's attention
///   (`1/cp` of the layer's); the backward gathers them again and reduce-scatters their
///   gradients, behind its local chunk.
/// - All-to-all (Ulysses): queries, keys and values re-split from sequence to heads before
///   the attention and the output back after it, the gradients alike in the backward; the
///   attention waits for them, so nothing hides them.
fn context_parallel_exposed(
    ctx: &PerfContext,
    cfg: &ParallelConfig,
    (attn_fwd, attn_bwd): (f64, f64),
    net: &Net,
) -> (f64, f64) {
    if cfg.cp <= 1 {
        return (0.0, 0.0);
    }
    let (m, e) = (ctx.model, ctx.eff);
    let cp = cfg.cp as f64;
    let t = cfg.tp as f64;
    let domain = ctx.hw.fast_domain(ctx.gpus_per_node);
    // This rank's tokens of one micro-batch, and its keys and values (BF16) for them.
    let tokens = cfg.mbs as f64 * m.seq_len as f64 / cp;
    let kv_bytes = 2.0 * 2.0 * tokens * m.kv_hidden() / t;
    // Megatron order: CP ranks are adjacent after the TP ranks.
    let group = Placement::strided(cfg.cp, cfg.tp, domain);
    match e.cp_comm {
        CpComm::Ring => {
            let link = if cfg.tp.saturating_mul(cfg.cp) <= domain {
                net.intra
            } else {
                net.inter
            };
            let fwd = (cp - 1.0) * comms::p2p(kv_bytes, link);
            let bwd = (cp - 1.0) * comms::p2p(2.0 * kv_bytes, link);
            (e.exposed(fwd, attn_fwd), e.exposed(bwd, attn_bwd))
        }
        CpComm::AllGather => {
            let gather = comms::reduce_scatter(cp * kv_bytes, group, net);
            (
                e.exposed(gather, attn_fwd / cp),
                e.exposed(2.0 * gather, attn_bwd / cp),
            )
        }
        CpComm::AllToAll => {
            // Queries and the output at the rank's heads, keys and values at theirs (whole
            // heads on every CP rank: `validate::stack_structure` refuses other layouts).
            let head_dim = f64::from(m.hidden) / f64::from(m.heads.max(1));
            let kv_heads = f64::from(m.kv_heads) / t;
            let bytes = 2.0 * tokens * (2.0 * m.hidden as f64 / t + 2.0 * kv_heads * head_dim);
            let pass = comms::all_to_all(bytes, group, net);
            (pass, pass)
        }
    }
}

/// The factor sequence parallelism splits a TP rank's tokens by outside the TP regions
/// (`tp` with it, 1 without).
fn sequence_split(e: &EfficiencyParams, tp: u32) -> f64 {
    if e.sequence_parallel {
        f64::from(tp)
    } else {
        1.0
    }
}

/// BF16 bytes of `tokens` tokens' hidden states routed to their `k` experts: what a MoE layer
/// dispatches (and combines, and permutes) for them; 0 for a dense model.
fn routed_bytes(m: &ModelProfile, tokens: f64) -> f64 {
    if m.moe.is_none() {
        return 0.0;
    }
    tokens * m.active_experts() * m.hidden as f64 * 2.0
}

/// Bytes one MoE layer's token permutation moves in its forward for `tokens` tokens on this
/// GPU: each token's hidden state is copied into expert order for each of its `k` experts
/// before them and back after them (permute and unpermute, each reading and writing `k·h`
/// BF16 values a token); 0 for a dense model.
pub fn moe_permute_bytes(m: &ModelProfile, tokens: f64) -> f64 {
    let (reads_and_writes, passes) = (2.0, 2.0);
    reads_and_writes * passes * routed_bytes(m, tokens)
}

/// Seconds per micro-batch and layer of expert parallelism's all-to-alls over `cfg.ep` ranks
/// of the data-parallel group (TP fastest, then EP): each token's hidden state (BF16) goes to
/// its `k` experts and comes back, in the forward (dispatch and combine) and again in the
/// backward (their gradients), and once more in a fully recomputed forward. Under sequence
/// parallelism each TP rank sends its 1/tp of the micro-batch's `tokens` on this GPU. Not
/// overlapped: Megatron-Core's default dispatchers wait for them.
fn expert_parallel_layer(ctx: &PerfContext, cfg: &ParallelConfig, tokens: f64, net: &Net) -> f64 {
    if cfg.ep <= 1 {
        return 0.0;
    }
    let bytes = routed_bytes(ctx.model, tokens / sequence_split(ctx.eff, cfg.tp));
    let group = Placement::strided(cfg.ep, cfg.tp, ctx.hw.fast_domain(ctx.gpus_per_node));
    let passes = if cfg.recompute == Recompute::Full {
        6.0
    } else {
        4.0
    };
    passes * comms::all_to_all(bytes, group, net)
}

/// Exposed seconds of ZeRO-3 / FSDP collectives per micro-batch: parameters gathered per
/// layer in forward and again in backward, gradients reduce-scattered per layer in backward,
/// each layer's traffic hidden behind that layer's compute as far as prefetching allows.
/// DeepSpeed issues one collective per parameter tensor with its own shard fall-off; FSDP
/// one per block with NCCL's.
fn zero3_exposed(
    e: &EfficiencyParams,
    local_params: f64,
    layers: f64,
    (fwd_layer, bwd_layer): (f64, f64),
    group: Placement,
    net: &Net,
) -> f64 {
    let per_layer = local_params / layers.max(1.0);
    let (n, overlap, net) = match e.sharding {
        Sharding::DeepSpeed => (
            e.zero3_collectives_per_layer.max(1.0),
            e.zero3_overlap,
            Net {
                chunk_half_bytes: net.chunk_half_bytes.max(e.zero3_chunk_half_bytes),
                ..*net
            },
        ),
        Sharding::Fsdp1 | Sharding::Fsdp2 | Sharding::Hsdp => (1.0, e.fsdp_overlap, *net),
    };
    let gather = n * comms::reduce_scatter(per_layer * 2.0 / n, group, &net);
    let scatter = n * comms::reduce_scatter(per_layer * e.grad_bytes / n, group, &net);
    let overlap = overlap.clamp(0.0, 1.0);
    layers
        * (e.exposed(gather, overlap * fwd_layer)
            + e.exposed(gather + scatter, overlap * bwd_layer))
}

/// Seconds of a bucketed collective over `group`: one collective per bucket of at most
/// `bucket` bytes.
fn bucketed(bytes: f64, bucket: f64, group: Placement, net: &Net) -> f64 {
    bucketed_with(bytes, bucket, |b| comms::reduce_scatter(b, group, net))
}

/// Seconds of a bucketed all-reduce over `group` (NCCL's ring or tree per bucket, whichever
/// is faster: [`comms::all_reduce`]).
fn bucketed_all_reduce(bytes: f64, bucket: f64, group: Placement, net: &Net) -> f64 {
    bucketed_with(bytes, bucket, |b| comms::all_reduce(b, group, net))
}

/// `bytes` split into equal buckets of at most `bucket` bytes, each costing `one(size)`.
fn bucketed_with(bytes: f64, bucket: f64, one: impl Fn(f64) -> f64) -> f64 {
    if bytes <= 0.0 {
        return 0.0;
    }
    let buckets = (bytes / bucket.max(1.0)).ceil().max(1.0);
    buckets * one(bytes / buckets)
}

/// The data-parallel group of `cfg` (dp·cp ranks, TP fastest) and, under HSDP, the shard
/// group inside it and the replica group across.
fn dp_groups(
    ctx: &PerfContext,
    cfg: &ParallelConfig,
) -> (Placement, Option<(Placement, Placement)>) {
    let domain = ctx.hw.fast_domain(ctx.gpus_per_node);
    let ranks = cfg.grad_ranks();
    let all = Placement::strided(ranks, cfg.tp, domain);
    if ctx.eff.sharding != Sharding::Hsdp || cfg.zero < 3 {
        return (all, None);
    }
    let shard = hsdp_shard(ctx.eff, cfg);
    let replicas = ranks / shard;
    let inner = Placement::strided(shard, cfg.tp, domain);
    let across = Placement::strided(replicas, cfg.tp.saturating_mul(shard), domain);
    (all, Some((inner, across)))
}

impl ConfigCost {
    /// Evaluate `cfg` for the context's model and hardware, or say why it cannot run.
    pub fn new(ctx: &PerfContext, cfg: &ParallelConfig) -> Result<Self, Invalid> {
        validate::structure(ctx.model, cfg)?;
        validate::stack_structure(ctx.model, cfg, ctx.eff)?;
        let (m, hw, e): (&ModelProfile, _, &EfficiencyParams) = (ctx.model, ctx.hw, ctx.eff);
        let net = comms::net(hw, e);
        let domain = hw.fast_domain(ctx.gpus_per_node);
        let bw = hw.mem_bw_bytes_per_s;
        let t = cfg.tp as f64;
        let h = m.hidden as f64;
        let tokens = cfg.mbs as f64 * m.seq_len as f64 / cfg.cp.max(1) as f64;
        let lt = layer_times(ctx, cfg);
        let (cp_fwd, cp_bwd) = context_parallel_exposed(ctx, cfg, (lt.attn_fwd, lt.attn_bwd), &net);
        let fwd = lt.gemm_fwd + lt.attn_fwd + lt.elem_fwd + lt.moe_permute + cp_fwd;
        let bwd = lt.gemm_bwd + lt.attn_bwd + 2.0 * lt.elem_fwd + lt.moe_permute + cp_bwd;
        let recompute = match cfg.recompute {
            Recompute::None => 0.0,
            Recompute::Selective => lt.attn_fwd,
            Recompute::Op => lt.gemm_op_recompute + lt.elem_fwd,
            Recompute::Full => fwd,
        };
        let cp_layer = cp_fwd
            + cp_bwd
            + if cfg.recompute == Recompute::Full {
                cp_fwd
            } else {
                0.0
            };

        // TP: with sequence parallelism an all-gather and a reduce-scatter around attention and
        // the MLP, without it two all-reduces: the same bytes, 2 all-reduces of s·b·h each way.
        let tp_group = Placement::strided(cfg.tp, 1, domain);
        let tp_fwd = 2.0 * comms::all_reduce(tokens * h * 2.0, tp_group, &net);
        let tp_passes = if cfg.recompute == Recompute::Full {
            3.0
        } else {
            2.0
        };
        let tp_layer = tp_passes * tp_fwd;
        let tp_exposed =
            e.exposed(tp_layer * e.tp_overlap, f64::INFINITY) + tp_layer * (1.0 - e.tp_overlap);

        // Output layer and FP32 cross-entropy on the last stage.
        let (peak, v) = (hw.peak_flops, m.vocab as f64);
        let logits = e.gemm_time(tokens, h, v / t, peak, bw)
            + e.gemm_backward_time(tokens, h, v / t, peak, bw)
            + e.memory_time(tokens * v / t * CE_BYTES_PER_LOGIT, 10.0, bw);

        let (layers, layers_avg) = stage_layers(m, cfg.pp);
        let fixed = e.microbatch_overhead_s
            + if cfg.vpp > 1 {
                cfg.vpp as f64 * e.vpp_stage_overhead_s
            } else {
                0.0
            };
        let per_layer = fwd + bwd + recompute;
        let ep_layer = expert_parallel_layer(ctx, cfg, tokens, &net);
        // The slowest stage sets the pace: the fullest stage before the last, or the last with
        // the output layer (where the stage split leaves it fewer layers, the two can differ;
        // with even stages it is the last).
        let (inner, last) = stage_extremes(m, cfg.pp, e.stage_split);
        let (inner, last) = (f64::from(inner), f64::from(last));
        let layer_cost = per_layer + tp_exposed + ep_layer;
        let (paced, paced_logits) = if last * layer_cost + logits >= inner * layer_cost {
            (last, logits)
        } else {
            (inner, 0.0)
        };
        let compute_mb = paced * per_layer + fixed + paced_logits;
        let compute_mb_avg = layers_avg * per_layer + fixed + logits / cfg.pp as f64;
        let backward_mb = paced * (bwd + recompute) + paced_logits * 2.0 / 3.0;
        let tp_mb = paced * tp_exposed;
        let cp_mb = paced * cp_layer;
        let ep_mb = paced * ep_layer;

        // Pipeline p2p: activation forward and gradient backward at each virtual boundary.
        let p2p_mb = if cfg.pp > 1 {
            let link = if cfg.gpus() <= domain {
                net.intra
            } else {
                net.inter
            };
            let transfers = 2.0 * cfg.vpp as f64 * comms::p2p(tokens * h * 2.0 / t, link);
            // Interleaved schedules can post the next chunk's transfers while this one
            // computes (Megatron's overlap_p2p_comm); without virtual stages they block.
            if e.pp_overlap && cfg.vpp > 1 {
                e.exposed(transfers, compute_mb)
            } else {
                transfers
            }
        } else {
            0.0
        };

        // Data parallelism over the local parameters of the heaviest stage: with expert
        // parallelism 1/ep of its experts. (Their gradients reduce over the smaller
        // expert-data-parallel group; costed here over the whole data-parallel group, which
        // changes a ring's time by its (n−1)/n factor only.)
        let (first, last) = stage_params(m, cfg.tp, cfg.pp);
        let not_held = 1.0 - 1.0 / f64::from(cfg.ep.max(1));
        let local = first.max(last) - layers * m.expert_layer_params() / t * not_held;
        let (dp_group, hsdp) = dp_groups(ctx, cfg);
        let grads = local * e.grad_bytes;
        let params = local * 2.0;
        let bucket = e
            .grad_bucket_bytes
            .max(e.grad_bucket_params_per_dp_rank * f64::from(dp_group.size) * e.grad_bytes);
        let rs = |b| bucketed(b, bucket, dp_group, &net);
        let ar = |b| bucketed_all_reduce(b, bucket, dp_group, &net);
        let (dp_exposed_mb, dp_grad_once, dp_param_once) = match effective_zero(e, m, cfg) {
            0 => (0.0, ar(grads), 0.0),
            1 => (0.0, rs(grads), rs(params)),
            2 => {
                // Gradients reduce-scattered every micro-batch as its backward produces them
                // and accumulated sharded: FSDP one collective per layer (its unit), DeepSpeed
                // per bucket. Without PP the step waits for them at the end of each backward;
                // under a pipeline schedule the stage goes on to another micro-batch's forward
                // while they travel, so the whole micro-batch's compute hides them.
                let per_layer = grads / layers.max(1.0);
                let scatter = match e.sharding {
                    Sharding::DeepSpeed => rs(grads),
                    Sharding::Fsdp1 | Sharding::Fsdp2 | Sharding::Hsdp => {
                        bucketed(grads, per_layer.max(bucket), dp_group, &net)
                    }
                };
                let window = if cfg.pp > 1 { compute_mb } else { layers * bwd };
                // Without DP overlap (`grad_reduce_overlap` 0) nothing hides it.
                let window = window * e.grad_reduce_overlap.clamp(0.0, 1.0);
                (e.exposed(scatter, window), 0.0, rs(params))
            }
            _ => {
                let windows = (fwd, bwd + recompute);
                match hsdp {
                    // HSDP: FSDP inside the shard group every micro-batch, and the shard's
                    // gradients all-reduced across replicas once per step.
                    Some((inner, across)) => {
                        let exposed = zero3_exposed(e, local, layers, windows, inner, &net);
                        let shard = local * e.grad_bytes / inner.size.max(1) as f64;
                        let replica = bucketed_all_reduce(shard, bucket, across, &net);
                        (exposed, replica, 0.0)
                    }
                    None => {
                        let exposed = zero3_exposed(e, local, layers, windows, dp_group, &net);
                        (exposed, 0.0, 0.0)
                    }
                }
            }
        };
        // ZeRO over the expert-data-parallel group leaves each GPU 1/shard of all experts'
        // states, as without expert parallelism.
        let opt_params = if cfg.zero >= 1 {
            first.max(last) / shard_ranks(e, cfg) as f64
        } else {
            local
        };
        let optimizer_s = e.memory_time(opt_params * OPTIMIZER_BYTES_PER_PARAM, 4.0, bw);
        Ok(Self {
            cfg: *cfg,
            compute_mb,
            compute_mb_avg,
            backward_mb,
            tp_mb,
            ep_mb,
            cp_mb,
            p2p_mb,
            dp_exposed_mb,
            dp_grad_once,
            dp_param_once,
            optimizer_s,
        })
    }

    /// Predict the step at `global_batch` samples of `ctx.model.seq_len` tokens.
    pub fn at(&self, ctx: &PerfContext, global_batch: u64) -> Result<Prediction, Invalid> {
        let cfg = &self.cfg;
        let mb = validate::micro_batches(cfg, global_batch)?;
        let m = mb as f64;
        let e = ctx.eff;
        let stage = self.compute_mb + self.tp_mb + self.ep_mb;
        let stage_avg = self.compute_mb_avg + self.tp_mb + self.ep_mb;
        let bubble_s = (cfg.pp as f64 - 1.0) / cfg.vpp as f64 * stage_avg;
        let forward_mb = stage - self.backward_mb;
        let overlap = e.grad_reduce_overlap.clamp(0.0, 1.0);
        let dp_s = m * self.dp_exposed_mb
            + e.exposed(self.dp_grad_once, overlap * self.backward_mb)
            + e.exposed(self.dp_param_once, overlap * forward_mb);
        let breakdown = Breakdown {
            compute_s: m * (self.compute_mb - self.cp_mb),
            bubble_s,
            tp_s: m * self.tp_mb,
            ep_s: m * self.ep_mb,
            cp_s: m * self.cp_mb,
            pp_s: m * self.p2p_mb,
            dp_s,
            optimizer_s: self.optimizer_s,
        };
        let step = breakdown.compute_s
            + bubble_s
            + breakdown.tp_s
            + breakdown.ep_s
            + breakdown.cp_s
            + breakdown.pp_s
            + dp_s
            + self.optimizer_s;
        let gpus = cfg.gpus() as f64;
        let tokens = global_batch as f64 * ctx.model.seq_len as f64;
        let model_flops = flops::model_flops(ctx.model, tokens);
        let hw_flops = flops::hardware_flops(ctx.model, tokens, cfg.recompute);
        let memory = peak_memory(ctx.model, cfg, mb, ctx.hw.reserved_bytes, e).total();
        // Every profile field is range-checked on load; a combination that still overflows
        // (or divides by zero) is named, not printed as NaN or inf.
        if !(step.is_finite() && step > 0.0 && memory.is_finite() && memory >= 0.0) {
            return Err(Invalid::Other(format!(
                "the hardware and efficiency values give no finite step time or memory \
                 ({step} s, {memory} bytes): check the profile"
            )));
        }
        Ok(Prediction {
            step_time_s: step,
            tokens_per_s: tokens / step,
            tokens_per_s_per_gpu: tokens / step / gpus,
            model_tflops_per_gpu: model_flops / step / gpus / 1e12,
            hardware_tflops_per_gpu: hw_flops / step / gpus / 1e12,
            mfu: model_flops / step / gpus / ctx.hw.peak_flops,
            memory_per_gpu_bytes: memory,
            fits: memory <= ctx.hw.hbm_bytes,
            breakdown,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::comms::Link;

    #[test]
    fn a_bucketed_gradient_all_reduce_takes_nccls_faster_algorithm_per_bucket() {
        let net = Net {
            intra: Link {
                bw: 200e9,
                latency: 10e-6,
                hop: 1e-6,
            },
            inter: Link {
                bw: 22e9,
                latency: 20e-6,
                hop: 10e-6,
            },
            chunk_half_bytes: 0.5e6,
        };
        // DP 32 with one rank a node (TP 8 inside): small chunks over a 32-rank ring.
        let g = Placement::strided(32, 8, 8);
        let (bytes, bucket): (f64, f64) = (1e9, 40e6);
        let buckets = (bytes / bucket).ceil();
        let each = bytes / buckets;
        let t = bucketed_all_reduce(bytes, bucket, g, &net);
        assert!((t - buckets * comms::all_reduce(each, g, &net)).abs() < 1e-12);
        let ring = 2.0 * bucketed(bytes, bucket, g, &net);
        assert!(t <= ring && t > 0.0);
        // Inside one node the tree is no option: exactly the ring's two phases.
        let inside = Placement::strided(8, 1, 8);
        let t = bucketed_all_reduce(bytes, bucket, inside, &net);
        assert!((t - 2.0 * bucketed(bytes, bucket, inside, &net)).abs() < 1e-12);
        assert_eq!(bucketed_all_reduce(0.0, bucket, g, &net), 0.0);
    }
}
