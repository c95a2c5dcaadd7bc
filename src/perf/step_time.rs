//! Step time of one configuration (DESIGN.md §4), split into the batch-independent cost of a
//! micro-batch ([`ConfigCost::new`]) and the batch-dependent assembly ([`ConfigCost::at`]),
//! so a grid over many batch sizes evaluates each configuration once.
//!
//! One micro-batch on the slowest pipeline stage: GEMMs on the roofline-plus-overhead curve,
//! fused causal attention, memory-bound kernels (norms, activations, dropout, residuals; the
//! FP32 cross-entropy over the vocabulary on the last stage), sequence-parallel TP
//! collectives partly hidden behind GEMMs, and blocking pipeline point-to-point transfers.
//! A step: `m` micro-batches, the pipeline bubble `(pp−1)/v` stage times, the data-parallel
//! gradient/parameter collectives of the ZeRO stage hidden behind one micro-batch's backward
//! (or forward) where they fit, and the memory-bound Adam step.

use super::comms::{self, Placement};
use super::memory::{peak_memory, stage_params};
use super::{
    Breakdown, Invalid, ParallelConfig, PerfContext, Prediction, Recompute, flops, validate,
};

/// Bytes of HBM traffic per logit of the FP32 cross-entropy (cast, max, exp, sum, normalise,
/// gradient, cast back: about nine FP32 passes).
const CE_BYTES_PER_LOGIT: f64 = 36.0;
/// Bytes of HBM traffic per element of the hidden state in one layer's forward memory-bound
/// kernels (two norms, two bias-dropout-residual blocks, rotary/bias adds), BF16.
const ELEMWISE_BYTES_PER_HIDDEN: f64 = 38.0;
/// Memory-bound kernels in one layer's forward pass (backward launches twice as many).
const ELEMWISE_KERNELS: f64 = 12.0;
/// Adam step bytes per parameter (FP32 gradient, master weight, moments; BF16 copy out).
const OPTIMIZER_BYTES_PER_PARAM: f64 = 32.0;

/// Batch-independent cost of one configuration: seconds per micro-batch and per step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ConfigCost {
    /// The configuration.
    pub cfg: ParallelConfig,
    /// Compute seconds of one micro-batch (forward + backward + recompute) on the slowest stage.
    pub compute_mb: f64,
    /// Compute seconds of one micro-batch averaged over stages (sets the bubble).
    pub compute_mb_avg: f64,
    /// Backward share of `compute_mb`, seconds (window for gradient collectives).
    pub backward_mb: f64,
    /// Exposed tensor-parallel seconds per micro-batch.
    pub tp_mb: f64,
    /// Pipeline point-to-point seconds per micro-batch.
    pub p2p_mb: f64,
    /// Data-parallel seconds per micro-batch before overlap (ZeRO-2/3).
    pub dp_per_mb: f64,
    /// Once-per-step gradient collective seconds before overlap (hidden behind a backward).
    pub dp_grad_once: f64,
    /// Once-per-step parameter all-gather seconds before overlap (hidden behind a forward).
    pub dp_param_once: f64,
    /// Optimizer step seconds.
    pub optimizer_s: f64,
}

impl ConfigCost {
    /// Evaluate `cfg` for the context's model and hardware, or say why it cannot run.
    pub fn new(ctx: &PerfContext, cfg: &ParallelConfig) -> Result<Self, Invalid> {
        validate::structure(ctx.model, cfg)?;
        let (m, hw, e) = (ctx.model, ctx.hw, ctx.eff);
        let (intra, inter) = comms::links(hw, e);
        let domain = hw.fast_domain(ctx.gpus_per_node);
        let (peak, bw) = (hw.peak_flops, hw.mem_bw_bytes_per_s);
        let t = cfg.tp as f64;
        let (s, h) = (m.seq_len as f64, m.hidden as f64);
        let tokens = cfg.mbs as f64 * s;
        let gemm = |mm: f64, k: f64, n: f64| e.gemm_time(mm, k, n, peak, bw);
        let gemm_bwd = |mm: f64, k: f64, n: f64| e.gemm_backward_time(mm, k, n, peak, bw);

        // One layer, forward, per GPU.
        let experts = m.experts();
        let expert_tokens = tokens * m.active_experts() / experts;
        let up_cols = (m.ffn_matrices() - 1.0) * m.ffn_hidden as f64 / t;
        let f = m.ffn_hidden as f64;
        let shapes = [
            (tokens, h, (h + 2.0 * m.kv_hidden()) / t, 1.0),
            (tokens, h / t, h, 1.0),
            (expert_tokens, h, up_cols, experts),
            (expert_tokens, f / t, h, experts),
        ];
        let gemm_fwd: f64 = shapes.iter().map(|&(a, b, c, n)| n * gemm(a, b, c)).sum();
        let gemm_back: f64 = shapes
            .iter()
            .map(|&(a, b, c, n)| n * gemm_bwd(a, b, c))
            .sum();
        let attn_fwd = 2.0 * cfg.mbs as f64 * s * s * h / t / (peak * e.attn_eff);
        let attn_bwd_factor = if cfg.recompute == Recompute::None {
            2.0
        } else {
            2.5
        };
        let ffn_elem = if m.swiglu { 6.0 } else { 4.0 } * f * m.active_experts();
        let elem_bytes = (ELEMWISE_BYTES_PER_HIDDEN * h + ffn_elem) * tokens / t;
        let elem_fwd = e.memory_time(elem_bytes, ELEMWISE_KERNELS, bw);
        let fwd = gemm_fwd + attn_fwd + elem_fwd;
        let bwd = gemm_back + attn_bwd_factor * attn_fwd + 2.0 * elem_fwd;
        let recompute = if cfg.recompute == Recompute::Full {
            fwd
        } else {
            0.0
        };

        // Sequence-parallel TP: all-gather + reduce-scatter around attention and MLP, forward
        // and backward (= 2 all-reduces of s·b·h each way).
        let tp_group = Placement::strided(cfg.tp, 1, domain);
        let tp_fwd = 2.0 * comms::all_reduce(tokens * h * 2.0, tp_group, intra, inter);
        let tp_passes = if cfg.recompute == Recompute::Full {
            3.0
        } else {
            2.0
        };
        let tp_layer = tp_passes * tp_fwd;
        let tp_exposed =
            e.exposed(tp_layer * e.tp_overlap, f64::INFINITY) + tp_layer * (1.0 - e.tp_overlap);

        // Output layer and FP32 cross-entropy on the last stage.
        let v = m.vocab as f64;
        let logits = gemm(tokens, h, v / t)
            + gemm_bwd(tokens, h, v / t)
            + e.memory_time(tokens * v / t * CE_BYTES_PER_LOGIT, 10.0, bw);

        let layers = m.layers as f64 / cfg.pp as f64;
        let body = layers * (fwd + bwd + recompute);
        let compute_mb = body + logits;
        let compute_mb_avg = body + logits / cfg.pp as f64;
        let backward_mb = layers * bwd + logits * 2.0 / 3.0;
        let tp_mb = layers * tp_exposed;

        // Pipeline p2p: activation forward and gradient backward at each virtual boundary.
        let p2p_mb = if cfg.pp > 1 {
            let link = if cfg.tp * cfg.dp * cfg.pp <= domain {
                intra
            } else {
                inter
            };
            2.0 * cfg.vpp as f64 * comms::p2p(tokens * h * 2.0 / t, link)
        } else {
            0.0
        };

        // Data parallelism over the local parameters of the heaviest stage.
        let (first, last) = stage_params(m, cfg.tp, cfg.pp);
        let local = first.max(last);
        let dp_group = Placement::strided(cfg.dp, cfg.tp, domain);
        let grads = local * e.grad_comm_bytes;
        let params = local * 2.0;
        let rs = |b| comms::reduce_scatter(b, dp_group, intra, inter);
        let (dp_per_mb, dp_grad_once, dp_param_once) = match cfg.zero {
            0 => (0.0, 2.0 * rs(grads), 0.0),
            1 => (0.0, rs(grads), rs(params)),
            2 => (rs(grads), 0.0, rs(params)),
            _ => (rs(grads) + 2.0 * rs(params), 0.0, 0.0),
        };
        let opt_params = if cfg.zero >= 1 {
            local / cfg.dp as f64
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
            p2p_mb,
            dp_per_mb,
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
        let stage = self.compute_mb + self.tp_mb;
        let stage_avg = self.compute_mb_avg + self.tp_mb;
        let bubble_s = (cfg.pp as f64 - 1.0) / cfg.vpp as f64 * stage_avg;
        let forward_mb = stage - self.backward_mb;
        let dp_s = m * e.exposed(self.dp_per_mb, stage)
            + e.exposed(self.dp_grad_once, self.backward_mb)
            + e.exposed(self.dp_param_once, forward_mb);
        let breakdown = Breakdown {
            compute_s: m * self.compute_mb,
            bubble_s,
            tp_s: m * self.tp_mb,
            pp_s: m * self.p2p_mb,
            dp_s,
            optimizer_s: self.optimizer_s,
        };
        let step = breakdown.compute_s
            + bubble_s
            + breakdown.tp_s
            + breakdown.pp_s
            + dp_s
            + self.optimizer_s;
        let gpus = cfg.gpus() as f64;
        let tokens = global_batch as f64 * ctx.model.seq_len as f64;
        let model_flops = flops::model_flops(ctx.model, tokens);
        let hw_flops = flops::hardware_flops(ctx.model, tokens, cfg.recompute);
        let memory = peak_memory(ctx.model, cfg, mb, ctx.hw.reserved_bytes).total();
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
