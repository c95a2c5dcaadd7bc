//! Performance model: step time, throughput and memory of one 3D-parallel configuration
//! (docs/MODEL.md): FLOPs ([`flops`]), memory ([`memory`]), collectives ([`comms`]), step time
//! ([`step_time`]), configuration search ([`enumerate`]), calibration ([`calibrate`]) and the
//! mixture-of-experts batch floor ([`moe`]).

pub mod calibrate;
pub mod calibration_file;
pub(crate) mod comms;
pub mod config;
pub mod crossval;
pub mod efficiency;
pub mod enumerate;
pub mod explain;
pub(crate) mod flops;
pub(crate) mod hardware;
pub mod knob_selection;
pub mod measurements;
pub mod memory;
pub(crate) mod model;
pub mod moe;
pub mod nccl;
pub mod run_calibration;
pub(crate) mod simplex;
pub mod stack;
pub(crate) mod step_time;
pub mod validate;
pub mod validation;

pub use config::{ParallelConfig, Recompute};
pub use efficiency::EfficiencyParams;
pub use flops::attention_flop_share;
pub use hardware::HardwareProfile;
pub use measurements::Measurement;
pub use model::{ModelProfile, MoeSpec};
pub use stack::{Stack, StackPreset};
pub use step_time::{ConfigCost, moe_permute_bytes};

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
    /// GEMM, attention and element-wise compute, seconds (context parallelism's exchange is
    /// `cp_s`).
    pub compute_s: f64,
    /// Pipeline bubble, seconds.
    pub bubble_s: f64,
    /// Tensor-parallel all-reduces, seconds.
    pub tp_s: f64,
    /// Expert-parallel all-to-alls (mixture-of-experts token dispatch), seconds; 0 without
    /// expert parallelism.
    pub ep_s: f64,
    /// Context parallelism's exposed key/value exchange (ring steps, all-gather or
    /// all-to-all, `cp_comm`), seconds; 0 without context parallelism.
    pub cp_s: f64,
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
    /// Model FLOPs utilisation, 0–1: model TFLOP/s over the hardware's dense BF16 peak, also
    /// for FP8 runs (NVIDIA's and torchtitan's convention; against the FP8 peak it is half).
    pub mfu: f64,
    /// Peak memory per GPU, bytes (whole bytes in JSON).
    #[serde(serialize_with = "memory::serialize_whole_bytes")]
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
    #[error("out of memory: {need_gb:.1} GB > {have_gb:.1} GB")]
    OutOfMemory {
        /// Needed per GPU, GB.
        need_gb: f64,
        /// Available per GPU, GB.
        have_gb: f64,
    },
}

/// Parameters of the model (embeddings included, all experts of an MoE counted), from the shape.
pub fn parameter_count(m: &ModelProfile) -> f64 {
    m.layers as f64 * m.layer_params() + m.embedding_params()
}

/// Predict step time, throughput and memory of `cfg` at `global_batch` samples. A
/// configuration that runs but does not fit in memory is `Ok` with `fits: false`; one that
/// cannot run at all (shape, divisibility) is an [`Invalid`] with the reason.
pub fn predict(
    ctx: &PerfContext,
    cfg: &ParallelConfig,
    global_batch: u64,
) -> Result<Prediction, Invalid> {
    ConfigCost::new(ctx, cfg)?.at(ctx, global_batch)
}

/// Predicted time of one micro-batch, seconds, below which a step on an eager stack can be
/// bound by the host issuing kernels rather than by the GPU, whatever the model: copus's own
/// H200 runs whose micro-batches it predicted under this (or under [`HOST_BOUND_LAYER_S`] a
/// layer on deeper stages) took 8–121 % longer than predicted (docs/MODEL.md, "Small steps").
pub const HOST_BOUND_MICRO_BATCH_S: f64 = 0.15;

/// The same per transformer layer on the stage, seconds: the host issues a layer's ops in
/// turn, so a deeper stage needs a longer micro-batch to keep the GPU busy (0.15 s for the
/// 16 layers of the 1B runs the threshold was chosen on; added after the 28-layer 3B at
/// 2 × 2K tokens, 0.23 s predicted, measured 19 % slower).
pub const HOST_BOUND_LAYER_S: f64 = HOST_BOUND_MICRO_BATCH_S / 16.0;

/// The predicted micro-batch time, seconds, below which a stage of `stage_layers` layers on an
/// eager stack may be host-bound: the larger of [`HOST_BOUND_MICRO_BATCH_S`] and
/// [`HOST_BOUND_LAYER_S`] per layer.
pub fn host_bound_threshold_s(stage_layers: f64) -> f64 {
    HOST_BOUND_MICRO_BATCH_S.max(HOST_BOUND_LAYER_S * stage_layers)
}

/// One micro-batch's share of the predicted step on a pipeline stage, seconds: the step
/// without its pipeline bubble, over the `micro_batches` micro-batches per replica (the
/// optimizer step and exposed communication spread over them).
pub fn micro_batch_time_s(p: &Prediction, micro_batches: u64) -> f64 {
    (p.step_time_s - p.breakdown.bubble_s).max(0.0) / micro_batches.max(1) as f64
}

/// Whether the step `p`, run as `micro_batches` micro-batches per replica on stages of at
/// most `stage_layers` layers, on a stack with `eff`, may be host-bound, so that its time is
/// a lower bound: the stack runs its element-wise work eagerly (one kernel launch per PyTorch
/// op, thousands a micro-batch, no compiler fusing them) and a micro-batch
/// ([`micro_batch_time_s`], seconds) is under [`host_bound_threshold_s`].
pub fn may_be_host_bound(
    eff: &EfficiencyParams,
    p: &Prediction,
    micro_batches: u64,
    stage_layers: f64,
) -> bool {
    eff.elementwise == efficiency::Elementwise::Eager
        && micro_batch_time_s(p, micro_batches) < host_bound_threshold_s(stage_layers)
}

/// What the model leaves out for `m`: for a mixture-of-experts model, the router and load
/// imbalance (docs/MODEL.md: a model of 128 narrow experts measured 2.4× slower than
/// predicted).
pub fn caveats(m: &ModelProfile) -> Vec<String> {
    match &m.moe {
        Some(moe) => vec![format!(
            "{} experts, top-{}: routing and load imbalance are not modelled, so the step \
             is a lower bound; many narrow experts measure up to 2.4× slower (docs/MODEL.md, \
             expert parallelism)",
            moe.experts, moe.top_k
        )],
        None => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prediction(step_time_s: f64, bubble_s: f64) -> Prediction {
        Prediction {
            step_time_s,
            tokens_per_s: 1.0,
            tokens_per_s_per_gpu: 1.0,
            model_tflops_per_gpu: 1.0,
            hardware_tflops_per_gpu: 1.0,
            mfu: 0.5,
            memory_per_gpu_bytes: 1.0,
            fits: true,
            breakdown: Breakdown {
                bubble_s,
                ..Breakdown::default()
            },
        }
    }

    #[test]
    fn a_micro_batch_is_the_step_without_its_bubble_over_the_micro_batches() {
        // A pipeline step of 1 s, half of it bubble, in 4 micro-batches: 0.125 s each, under
        // the 0.15 s an eager stack needs (step / micro-batches, 0.25 s, would not be).
        let p = prediction(1.0, 0.5);
        assert!((micro_batch_time_s(&p, 4) - 0.125).abs() < 1e-12);
        let eager = EfficiencyParams {
            elementwise: efficiency::Elementwise::Eager,
            ..EfficiencyParams::default()
        };
        assert!(may_be_host_bound(&eager, &p, 4, 16.0));
        // A deeper stage needs longer micro-batches: 32 layers, 0.3 s.
        assert!((host_bound_threshold_s(32.0) - 0.3).abs() < 1e-12);
        assert!(may_be_host_bound(&eager, &prediction(1.0, 0.0), 4, 32.0));
        assert!(!may_be_host_bound(&eager, &prediction(1.0, 0.0), 4, 16.0));
        // Fused element-wise kernels: no caution, however short.
        let fused = EfficiencyParams {
            elementwise: efficiency::Elementwise::Fused,
            ..EfficiencyParams::default()
        };
        assert!(!may_be_host_bound(&fused, &p, 4, 16.0));
        // No micro-batch count: one.
        assert!((micro_batch_time_s(&p, 0) - 0.5).abs() < 1e-12);
    }
}
