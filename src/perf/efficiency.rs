//! Kernel-efficiency and overlap parameters of the performance model: what fraction of the
//! hardware's peaks real kernels reach, and how much communication hides behind compute.
//! These are the parameters [`crate::perf::calibrate`] fits to measured step times.
//!
//! The GEMM curve is a roofline with a fixed per-kernel cost: a GEMM of `F` FLOPs moving `Q`
//! bytes takes `max(F / (peak·max_eff), Q / (hbm_bw·mem_eff)) + gemm_overhead_s`. Thin GEMMs
//! (few tokens per GPU per micro-batch, or a high TP degree splitting the weight) spend their
//! time in the fixed cost and the memory roof (overhead-bound); large ones sit on the
//! compute-bound plateau `max_eff`.

use serde::{Deserialize, Serialize};

/// Parameters of the efficiency curve, the memory-bound kernels and the overlap of
/// communication with compute. Every field has a default (H100-class, physically motivated:
/// sustained tensor-core rate under the power cap, fused-attention rate, streaming-copy rate).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct EfficiencyParams {
    /// Plateau fraction of dense peak reached by large GEMMs (compute-bound regime).
    pub max_eff: f64,
    /// Fixed cost per GEMM kernel (launch, wave-quantisation tail), seconds.
    pub gemm_overhead_s: f64,
    /// Inner (K) dimension at which a GEMM tile spends as long in its prologue/epilogue as in
    /// its main loop: efficiency falls as K/(K + gemm_k_half) for short inner dimensions.
    pub gemm_k_half: f64,
    /// Fraction of dense peak reached by fused (flash) attention, counting causal FLOPs only.
    pub attn_eff: f64,
    /// Fraction of HBM bandwidth reached by memory-bound kernels (norms, activations, optimizer).
    pub mem_eff: f64,
    /// Fixed cost per memory-bound kernel, seconds.
    pub kernel_overhead_s: f64,
    /// Fraction of tensor-parallel communication hidden behind GEMMs (0 = none, 1 = all).
    pub tp_overlap: f64,
    /// Slowdown of compute while it hides communication, as a fraction of the hidden
    /// communication time (communication kernels take SMs and HBM bandwidth).
    pub overlap_cost: f64,
    /// Bytes per gradient element on the wire (4: Megatron reduces BF16 gradients in FP32).
    pub grad_comm_bytes: f64,
    /// Multiplier on the hardware's scale-up link efficiency (calibration knob, 1 = datasheet).
    pub intra_link_scale: f64,
    /// Multiplier on the hardware's scale-out link efficiency (calibration knob, 1 = datasheet).
    pub inter_link_scale: f64,
}

impl Default for EfficiencyParams {
    fn default() -> Self {
        Self {
            max_eff: 0.65,
            gemm_overhead_s: 20e-6,
            gemm_k_half: 128.0,
            attn_eff: 0.45,
            mem_eff: 0.8,
            kernel_overhead_s: 4e-6,
            tp_overlap: 0.5,
            overlap_cost: 0.2,
            grad_comm_bytes: 4.0,
            intra_link_scale: 1.0,
            inter_link_scale: 1.0,
        }
    }
}

impl EfficiencyParams {
    /// Seconds for a GEMM (M×K)·(K×N) in BF16 on a GPU of `peak_flops` FLOP/s and `hbm_bw`
    /// bytes/s: roofline of compute and memory plus the fixed per-kernel cost.
    pub fn gemm_time(&self, m: f64, k: f64, n: f64, peak_flops: f64, hbm_bw: f64) -> f64 {
        let flops = 2.0 * m * k * n;
        let bytes = 2.0 * (m * k + k * n + m * n);
        let k_eff = k / (k + self.gemm_k_half);
        (flops / (peak_flops * self.max_eff * k_eff)).max(bytes / (hbm_bw * self.mem_eff))
            + self.gemm_overhead_s
    }

    /// Seconds for the backward of that GEMM: data gradient (M×N)·(N×K) and weight gradient
    /// (K×M)·(M×N).
    pub fn gemm_backward_time(&self, m: f64, k: f64, n: f64, peak_flops: f64, hbm_bw: f64) -> f64 {
        self.gemm_time(m, n, k, peak_flops, hbm_bw) + self.gemm_time(k, m, n, peak_flops, hbm_bw)
    }

    /// Achieved fraction of peak of that GEMM (the efficiency curve over GEMM size).
    pub fn gemm_eff(&self, m: f64, k: f64, n: f64, peak_flops: f64, hbm_bw: f64) -> f64 {
        2.0 * m * k * n / (self.gemm_time(m, k, n, peak_flops, hbm_bw) * peak_flops)
    }

    /// Seconds for memory-bound kernels moving `bytes` in `kernels` launches.
    pub fn memory_time(&self, bytes: f64, kernels: f64, hbm_bw: f64) -> f64 {
        bytes / (hbm_bw * self.mem_eff) + kernels * self.kernel_overhead_s
    }

    /// Exposed seconds of `comm` seconds of communication that may hide behind `window`
    /// seconds of compute: the part that does not fit, plus the slowdown of the hidden part.
    pub fn exposed(&self, comm: f64, window: f64) -> f64 {
        let hidden = comm.min(window.max(0.0));
        (comm - hidden) + self.overlap_cost * hidden
    }
}
