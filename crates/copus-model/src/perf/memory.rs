//! Memory per GPU: model states under ZeRO (Rajbhandari et al. 2020) and activations per
//! layer (Korthikanti et al. 2022, arXiv 2205.05198), generalised to GQA, SwiGLU and MoE.
//!
//! With TP > 1 and sequence parallelism on (Megatron's default) every activation is split by
//! TP; without it the norm, dropout and residual activations are replicated. With TP = 1 the
//! formulas reduce to the no-parallelism case. The s×s attention scores are kept only when
//! attention runs unfused and nothing is recomputed.

use super::efficiency::{AttentionKind, Sharding};
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
    // Not split by TP without SP: LN inputs (4), QKV and FC1 inputs (2 + 2), dropout masks (1 + 1).
    let replicated = 10.0 * sbh;
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

/// Peak memory of one GPU, bytes, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct MemoryBreakdown {
    /// Weights, gradients and optimizer state after ZeRO sharding, bytes.
    pub model_states: f64,
    /// Activations kept for backward (all in-flight micro-batches), bytes.
    pub activations: f64,
    /// Logits and the FP32 cross-entropy buffer of the output layer (none with a fused
    /// cross-entropy), bytes.
    pub output: f64,
    /// Reserved by the runtime (hardware profile), bytes.
    pub reserved: f64,
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

/// Ranks one HSDP shard group holds: the data-parallel ranks inside `hsdp_shard_gpus` GPUs,
/// at least 1 and a divisor of dp·cp.
pub fn hsdp_shard(e: &EfficiencyParams, cfg: &ParallelConfig) -> u32 {
    let ranks = cfg.grad_ranks().max(1);
    let fit = (e.hsdp_shard_gpus / cfg.tp.max(1) as f64).floor().max(1.0);
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
/// ZeRO-2 with PP runs as ZeRO-1 under every stack: the stacks that combine the two (FSDP
/// without resharding after the forward, Meta's Llama 3 stack) accumulate a step's gradients
/// unsharded, in FP32 for Llama 3, and reduce-scatter them once; DeepSpeed's pipeline engine
/// refuses ZeRO-2 and Megatron has none, so no stack reduces per micro-batch under a pipeline.
/// DeepSpeed ZeRO-3 (which its pipeline engine refuses too) and HSDP keep their stage.
pub fn effective_zero(e: &EfficiencyParams, cfg: &ParallelConfig) -> u8 {
    let fsdp = matches!(e.sharding, Sharding::Fsdp1 | Sharding::Fsdp2);
    let once_a_step = cfg.zero == 2 || (cfg.zero >= 3 && fsdp);
    if cfg.pp > 1 && once_a_step {
        1
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

/// Peak memory per GPU of `cfg` with `micro_batches` micro-batches per step (the stage that
/// needs most: the first keeps `min(m, pp)` micro-batches in flight, the last the logits).
pub fn peak_memory(
    m: &ModelProfile,
    cfg: &ParallelConfig,
    micro_batches: u64,
    reserved: f64,
    eff: &EfficiencyParams,
) -> MemoryBreakdown {
    let (first_p, last_p) = stage_params(m, cfg.tp, cfg.pp);
    let per_param = zero_bytes_per_param(
        effective_zero(eff, cfg),
        shard_ranks(eff, cfg),
        eff.grad_bytes,
    );
    let layers = stage_layers(m, cfg.pp).0;
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
    let pp = cfg.pp.max(1) as f64;
    let mut in_flight = (micro_batches.max(1) as f64).min(pp);
    if cfg.vpp > 1 && cfg.pp > 1 {
        in_flight *= 1.0 + (pp - 1.0) / (pp * cfg.vpp as f64);
    }
    // BF16 logits, plus their FP32 copy for the loss unless a fused kernel works on them.
    let bytes_per_logit = if eff.fused_cross_entropy { 2.0 } else { 6.0 };
    let logits = m.seq_len as f64 / cfg.cp.max(1) as f64 * cfg.mbs as f64 * m.vocab as f64
        / cfg.tp.max(1) as f64
        * bytes_per_logit;
    let first = MemoryBreakdown {
        model_states: first_p * per_param,
        activations: layers * per_layer * in_flight + working,
        output: if cfg.pp <= 1 { logits } else { 0.0 },
        reserved,
    };
    let last = MemoryBreakdown {
        model_states: last_p * per_param,
        activations: layers * per_layer + working,
        output: logits,
        reserved,
    };
    if first.total() >= last.total() {
        first
    } else {
        last
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            moe: None,
            source: String::new(),
        }
    }

    #[test]
    fn a_pipeline_runs_fsdp_zero_3_and_any_zero_2_as_zero_1() {
        let cfg = |zero, pp| ParallelConfig {
            dp: 8,
            tp: 8,
            pp,
            mbs: 1,
            zero,
            recompute: Recompute::Full,
            vpp: 1,
            cp: 1,
        };
        let with = |sharding| EfficiencyParams {
            sharding,
            ..EfficiencyParams::default()
        };
        for s in [Sharding::Fsdp1, Sharding::Fsdp2] {
            assert_eq!(effective_zero(&with(s), &cfg(3, 8)), 1);
            assert_eq!(effective_zero(&with(s), &cfg(3, 1)), 3);
            assert_eq!(effective_zero(&with(s), &cfg(2, 1)), 2);
        }
        for s in [
            Sharding::Fsdp1,
            Sharding::Fsdp2,
            Sharding::DeepSpeed,
            Sharding::Hsdp,
        ] {
            assert_eq!(effective_zero(&with(s), &cfg(2, 8)), 1, "{s:?}");
        }
        assert_eq!(effective_zero(&with(Sharding::DeepSpeed), &cfg(3, 8)), 3);
        assert_eq!(effective_zero(&with(Sharding::Hsdp), &cfg(3, 8)), 3);
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
