//! Performance model: step time, throughput and memory of one 3D-parallel configuration.
//!
//! SKELETON: `predict` below is a crude placeholder (6·N·tokens over a saturating efficiency)
//! that the performance-model issue replaces with the full model of DESIGN.md §4.

pub mod config;
pub mod efficiency;
pub mod hardware;
pub mod model;

pub use config::{ParallelConfig, Recompute};
pub use efficiency::EfficiencyParams;
pub use hardware::HardwareProfile;
pub use model::ModelProfile;

use serde::Serialize;

/// Everything the model needs besides the configuration and batch.
#[derive(Debug, Clone, Copy)]
pub struct PerfContext<'a> {
    /// Accelerator and links.
    pub hw: &'a HardwareProfile,
    /// Transformer shape.
    pub model: &'a ModelProfile,
    /// Efficiency curve and link parameters.
    pub eff: &'a EfficiencyParams,
    /// GPUs per node in the cluster (bounds TP within the scale-up domain).
    pub gpus_per_node: u32,
}

/// Where a step's time goes, seconds (exposed, i.e. not overlapped).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Breakdown {
    /// GEMM and attention compute, seconds.
    pub compute_s: f64,
    /// Pipeline bubble, seconds.
    pub bubble_s: f64,
    /// Tensor-parallel all-reduces, seconds.
    pub tp_s: f64,
    /// Pipeline point-to-point, seconds.
    pub pp_s: f64,
    /// Exposed data-parallel gradient all-reduce, seconds.
    pub dp_s: f64,
    /// Optimizer step, seconds.
    pub optimizer_s: f64,
}

/// Predicted performance of one configuration at one global batch.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Prediction {
    /// Wall-clock seconds per optimizer step.
    pub step_time_s: f64,
    /// Tokens per second for the whole job.
    pub tokens_per_s: f64,
    /// Tokens per second per GPU.
    pub tokens_per_s_per_gpu: f64,
    /// Model FLOP/s per GPU in TFLOP/s (6N-style model FLOPs, the MFU basis).
    pub model_tflops_per_gpu: f64,
    /// Hardware FLOP/s per GPU in TFLOP/s (counting recompute).
    pub hardware_tflops_per_gpu: f64,
    /// Model FLOPs utilisation, 0–1.
    pub mfu: f64,
    /// Peak memory per GPU, bytes.
    pub memory_per_gpu_bytes: f64,
    /// Whether the memory fits the GPU.
    pub fits: bool,
    /// Time breakdown.
    pub breakdown: Breakdown,
}

/// Why a configuration cannot run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Invalid {
    /// The layout does not use exactly the cluster's GPUs.
    #[error("dp·tp·pp = {used} ≠ {gpus} GPUs")]
    GpuCount {
        /// GPUs used by the layout.
        used: u32,
        /// GPUs in the cluster.
        gpus: u32,
    },
    /// Any other structural reason, in words.
    #[error("{0}")]
    Other(String),
    /// The configuration does not fit in memory.
    #[error("out of memory: {need_gb:.0} GB > {have_gb:.0} GB")]
    OutOfMemory {
        /// Needed per GPU, GB.
        need_gb: f64,
        /// Available per GPU, GB.
        have_gb: f64,
    },
}

/// Parameters of a dense decoder (embedding included), from the shape.
pub fn parameter_count(m: &ModelProfile) -> f64 {
    let h = m.hidden as f64;
    let kv = h * m.kv_heads as f64 / m.heads as f64;
    let attn = h * h * 2.0 + 2.0 * h * kv;
    let mlp = if m.swiglu { 3.0 } else { 2.0 } * h * m.ffn_hidden as f64;
    m.layers as f64 * (attn + mlp) + m.vocab as f64 * h
}

/// Predict step time and throughput of `cfg` at `global_batch` samples (PLACEHOLDER model).
pub fn predict(
    ctx: &PerfContext,
    cfg: &ParallelConfig,
    global_batch: u64,
) -> Result<Prediction, Invalid> {
    let per_replica = cfg.dp as u64 * cfg.mbs as u64;
    if per_replica == 0 || !global_batch.is_multiple_of(per_replica) {
        return Err(Invalid::Other(format!(
            "batch {global_batch} not divisible by dp·mbs = {per_replica}"
        )));
    }
    let n = parameter_count(ctx.model);
    let tokens = global_batch as f64 * ctx.model.seq_len as f64;
    let gpus = cfg.gpus() as f64;
    let gemm_tokens = cfg.mbs as f64 * ctx.model.seq_len as f64 / cfg.tp as f64;
    let eff = ctx.eff.max_eff * gemm_tokens / (gemm_tokens + ctx.eff.half_tokens);
    let flops = 6.0 * n * tokens;
    let compute = flops / (gpus * ctx.hw.peak_flops * eff);
    let m = global_batch as f64 / per_replica as f64;
    let bubble = compute * (cfg.pp as f64 - 1.0) / m;
    let step = compute + bubble;
    let model_tflops = flops / step / gpus / 1e12;
    Ok(Prediction {
        step_time_s: step,
        tokens_per_s: tokens / step,
        tokens_per_s_per_gpu: tokens / step / gpus,
        model_tflops_per_gpu: model_tflops,
        hardware_tflops_per_gpu: model_tflops,
        mfu: model_tflops * 1e12 / ctx.hw.peak_flops,
        memory_per_gpu_bytes: 0.0,
        fits: true,
        breakdown: Breakdown {
            compute_s: compute,
            bubble_s: bubble,
            ..Breakdown::default()
        },
    })
}
