//! Kernel-efficiency, overlap and software-stack parameters of the performance model: what
//! fraction of the hardware's peaks real kernels reach, how much communication hides behind
//! compute, and which kernels and collectives the training stack runs. Every hardware profile
//! carries its own set (`assets/hardware/*.ron`, with sources); sessions and calibration files
//! may replace it. These are the parameters [`crate::perf::calibrate`] fits to measured step
//! times.
//!
//! The GEMM curve is a roofline with a fixed per-kernel cost: a GEMM of `F` FLOPs moving `Q`
//! bytes takes `max(F / (peak·max_eff·K/(K+k_half)), Q / (hbm_bw·mem_eff)) + gemm_overhead_s`.
//! Thin GEMMs (few tokens per GPU per micro-batch, or a high TP degree splitting the weight)
//! spend their time in the fixed cost and the memory roof (overhead-bound); large ones sit on
//! the compute-bound plateau `max_eff`.

use serde::{Deserialize, Serialize};

/// FLOPs of the FlashAttention-2/3 backward as a multiple of its forward's: five GEMM-shaped
/// products (the scores recomputed, dV, dP, dQ, dK) against the forward's two (Dao 2023,
/// arXiv 2307.08691).
pub const ATTN_BWD_FLOP_RATIO: f64 = 2.5;

/// How the attention core (QKᵀ, softmax, dropout, ·V) runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum AttentionKind {
    /// One fused kernel of FlashAttention-2's generation (flash-attn 2, PyTorch SDPA's flash
    /// backend): scores never reach HBM; runs at `attn_eff` / `attn_bwd_eff`.
    Fused,
    /// A Hopper-native fused kernel: cuDNN's fused attention (Transformer Engine's on H100)
    /// or FlashAttention-3. Runs `attn_native_speedup` × the FlashAttention-2 efficiencies
    /// (1 on GPUs before Hopper, where both are the same generation of kernel).
    #[default]
    Cudnn,
    /// Batched GEMMs with the s×s scores written to HBM and memory-bound scale, mask,
    /// softmax and dropout kernels between them (Megatron-LM before fused attention).
    Unfused,
    /// A Triton flash-attention kernel of FlashAttention-1's generation (llm-foundry's
    /// `attn_impl: triton`): FlashAttention-2's efficiencies divided by
    /// `attn_triton_slowdown`.
    Triton,
}

impl AttentionKind {
    /// Every kind, in a fixed order.
    pub const ALL: [AttentionKind; 4] = [
        AttentionKind::Fused,
        AttentionKind::Cudnn,
        AttentionKind::Unfused,
        AttentionKind::Triton,
    ];

    /// The kind [`AttentionKind::name`] calls `word`, if any.
    pub fn from_name(word: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == word)
    }

    /// "fused", "cudnn" or "unfused".
    pub fn name(self) -> &'static str {
        match self {
            AttentionKind::Fused => "fused",
            AttentionKind::Cudnn => "cudnn",
            AttentionKind::Unfused => "unfused",
            AttentionKind::Triton => "triton",
        }
    }
}

/// How the loss over the vocabulary is computed. It sets the memory the logits take at the
/// loss's backward, the peak of the last pipeline stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum CrossEntropy {
    /// A fused kernel on the BF16 logits (flash-attn's, as llm-foundry's MPT uses it; Liger's):
    /// the logits alone, 2 bytes per logit.
    Fused,
    /// Megatron's vocab-parallel cross-entropy: an FP32 softmax beside the BF16 logits, turned
    /// into the gradient in place: 6 bytes per logit.
    #[default]
    VocabParallel,
    /// PyTorch's `F.cross_entropy` on an FP32 copy of the logits (torchtitan, Hugging Face
    /// models): the saved log-probabilities, their gradient and the input's gradient, 4 bytes
    /// each, are live together in the loss's backward: 12 bytes per logit.
    Pytorch,
}

impl CrossEntropy {
    /// The kind [`CrossEntropy::name`] calls `word`, if any.
    pub fn from_name(word: &str) -> Option<Self> {
        [
            CrossEntropy::Fused,
            CrossEntropy::VocabParallel,
            CrossEntropy::Pytorch,
        ]
        .into_iter()
        .find(|k| k.name() == word)
    }

    /// "fused", "vocab_parallel" or "pytorch".
    pub fn name(self) -> &'static str {
        match self {
            CrossEntropy::Fused => "fused",
            CrossEntropy::VocabParallel => "vocab_parallel",
            CrossEntropy::Pytorch => "pytorch",
        }
    }

    /// Bytes per logit (tokens × vocabulary / TP) at the loss's backward.
    pub fn bytes_per_logit(self) -> f64 {
        match self {
            CrossEntropy::Fused => 2.0,
            CrossEntropy::VocabParallel => 6.0,
            CrossEntropy::Pytorch => 12.0,
        }
    }

    /// Bytes per logit of the largest single tensor the loss allocates: one FP32 copy of the
    /// logits for PyTorch's and the vocabulary-parallel loss, the BF16 logits for the fused one.
    pub fn largest_buffer_bytes_per_logit(self) -> f64 {
        match self {
            CrossEntropy::Fused => 2.0,
            CrossEntropy::VocabParallel | CrossEntropy::Pytorch => 4.0,
        }
    }
}

/// How a layer's element-wise work (normalisation, rotary embedding, activation, residual
/// adds) runs: what it costs in memory traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Elementwise {
    /// Hand-fused kernels (Megatron's and Transformer Engine's) or `torch.compile`'s fusion.
    #[default]
    Fused,
    /// PyTorch eager: one kernel per operation, the normalisation and rotary embedding of a
    /// Llama block in FP32 as torchtitan and Hugging Face write them.
    Eager,
}

impl Elementwise {
    /// The kind [`Elementwise::name`] calls `word`, if any.
    pub fn from_name(word: &str) -> Option<Self> {
        [Elementwise::Fused, Elementwise::Eager]
            .into_iter()
            .find(|k| k.name() == word)
    }

    /// "fused" or "eager".
    pub fn name(self) -> &'static str {
        match self {
            Elementwise::Fused => "fused",
            Elementwise::Eager => "eager",
        }
    }
}

/// How context parallelism exchanges keys and values between the ranks that share a
/// sequence. The three kinds are Megatron-Core's `cp_comm_type` values `p2p`, `all_gather`
/// and `a2a`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum CpComm {
    /// Ring attention: `cp − 1` point-to-point steps, each sending one rank's keys and values
    /// on while the chunk that came in is computed (Transformer Engine's `p2p`, the
    /// Megatron-Core and NeMo default; torchtitan's `alltoall` rotate method moves the same
    /// bytes the same way).
    #[default]
    Ring,
    /// Keys and values all-gathered over the CP group after the local chunk's attention, their
    /// gradients reduce-scattered after the backward's (the Llama 3 paper's, and PyTorch's
    /// `context_parallel` default that torchtitan runs, rotate method `allgather`).
    AllGather,
    /// DeepSpeed-Ulysses: all-to-alls turn the sequence split into a head split around the
    /// attention (queries, keys, values in, the output back), each rank computing whole
    /// sequences for `heads / cp` heads. Needs the heads per TP rank divisible by `cp`.
    AllToAll,
}

impl CpComm {
    /// Every kind, in a fixed order.
    pub const ALL: [CpComm; 3] = [CpComm::Ring, CpComm::AllGather, CpComm::AllToAll];

    /// The kind [`CpComm::name`] calls `word`, if any.
    pub fn from_name(word: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == word)
    }

    /// "ring", "all_gather" or "all_to_all".
    pub fn name(self) -> &'static str {
        match self {
            CpComm::Ring => "ring",
            CpComm::AllGather => "all_gather",
            CpComm::AllToAll => "all_to_all",
        }
    }
}

/// Where a pipeline puts its short stages when PP does not divide the layers: the stages that
/// hold fewer than ⌈layers/pp⌉ transformer layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum StageSplit {
    /// One layer fewer on the stages at the ends of the pipeline (first, last, second,
    /// second-to-last, …), beside the embedding and the output layer: Megatron's
    /// first/last-stage layer counts, torchtitan's split points, the Llama 3 run, and BLOOM's
    /// 70 layers on 12 stages under BigScience's `--pp-partition-method
    /// 'type:transformer|embedding'` (which counts the two embeddings as layers: the ends'
    /// split where PP divides the layers and the two, as there).
    #[default]
    Ends,
    /// DeepSpeed's pipeline engine since 0.11 (October 2023): `partition_balanced`, a dynamic
    /// programme over Megatron-DeepSpeed's `partition_method='type:transformer'`, which puts
    /// ⌈layers/pp⌉ on the first `layers mod pp` stages (the embedding's among them) and
    /// ⌊layers/pp⌋ on the rest.
    Balanced,
    /// DeepSpeed's pipeline engine before 0.11 (2021–2023): a binary search for the smallest
    /// heaviest stage, then a greedy fill, ⌈layers/pp⌉ on each stage from the first and the
    /// remainder on the next; the stages after it hold no transformer layer (a split its
    /// pipeline cannot run).
    Greedy,
}

impl StageSplit {
    /// Every split, in a fixed order.
    pub const ALL: [StageSplit; 3] = [StageSplit::Ends, StageSplit::Balanced, StageSplit::Greedy];

    /// The split [`StageSplit::name`] calls `word`, if any.
    pub fn from_name(word: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == word)
    }

    /// "ends", "balanced" or "greedy".
    pub fn name(self) -> &'static str {
        match self {
            StageSplit::Ends => "ends",
            StageSplit::Balanced => "balanced",
            StageSplit::Greedy => "greedy",
        }
    }
}

/// How ZeRO-3-style full sharding gathers parameters and scatters gradients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum Sharding {
    /// DeepSpeed ZeRO-3: one collective per parameter tensor (`zero3_collectives_per_layer`
    /// per layer and pass), prefetching hides `zero3_overlap` of a layer's traffic.
    DeepSpeed,
    /// PyTorch FSDP1 (flat parameters per wrapped block): one gather per block and pass,
    /// prefetched (`fsdp_overlap`).
    Fsdp1,
    /// PyTorch FSDP2 (per-parameter DTensor sharding, per-block gathers prefetched behind the
    /// previous block's compute): as FSDP1 on the wire (`fsdp_overlap`).
    #[default]
    Fsdp2,
    /// Hybrid sharding (HSDP): FSDP2 inside groups of `hsdp_shard_gpus` GPUs (a node),
    /// replicated across them; gradients of the shard all-reduced across replicas once per
    /// step, overlapped with the backward.
    Hsdp,
}

impl Sharding {
    /// "deepspeed", "fsdp1", "fsdp2" or "hsdp".
    pub fn name(self) -> &'static str {
        match self {
            Sharding::DeepSpeed => "deepspeed",
            Sharding::Fsdp1 => "fsdp1",
            Sharding::Fsdp2 => "fsdp2",
            Sharding::Hsdp => "hsdp",
        }
    }
}

/// Precision of the GEMMs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum Precision {
    /// BF16 GEMMs (the peak is the hardware's dense BF16 peak).
    #[default]
    Bf16,
    /// FP8 GEMMs with delayed or tensor-wise scaling (Transformer Engine, torchao float8):
    /// projections and MLP at the hardware's FP8 peak and `fp8_max_eff`, plus the casts;
    /// attention, norms and the output layer stay in BF16.
    Fp8,
}

impl Precision {
    /// "bf16" or "fp8".
    pub fn name(self) -> &'static str {
        match self {
            Precision::Bf16 => "bf16",
            Precision::Fp8 => "fp8",
        }
    }
}

/// Parameters of the efficiency curve, the memory-bound kernels, the overlap of communication
/// with compute and the stack's choices. Every field has a default (H100-class, modern
/// Megatron-Core stack); hardware profiles give their own values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EfficiencyParams {
    /// Plateau fraction of dense peak reached by large GEMMs (compute-bound regime).
    pub max_eff: f64,
    /// Fixed cost per GEMM kernel (launch, wave-quantisation tail), seconds.
    pub gemm_overhead_s: f64,
    /// Inner (K) dimension at which a GEMM tile spends as long in its prologue/epilogue as in
    /// its main loop: efficiency falls as K/(K + gemm_k_half) for short inner dimensions.
    pub gemm_k_half: f64,
    /// Fraction of dense peak reached by the FlashAttention-2-generation fused attention
    /// forward, counting causal FLOPs only.
    pub attn_eff: f64,
    /// Fraction of dense peak reached by that kernel's backward, counting its own FLOPs
    /// ([`ATTN_BWD_FLOP_RATIO`] × the forward's: FlashAttention-2/3 recompute the scores).
    pub attn_bwd_eff: f64,
    /// Speed of the Hopper-native fused attention ([`AttentionKind::Cudnn`]) relative to
    /// FlashAttention-2's, forward and backward (1 where they are the same generation).
    pub attn_native_speedup: f64,
    /// How many times slower than FlashAttention-2 the Triton flash-attention kernel
    /// ([`AttentionKind::Triton`]) runs, forward and backward (1: as fast).
    pub attn_triton_slowdown: f64,
    /// Attention kernel kind the stack runs.
    pub attention: AttentionKind,
    /// Fraction of HBM bandwidth reached by memory-bound kernels (norms, activations, optimizer).
    pub mem_eff: f64,
    /// Fixed cost per memory-bound kernel, seconds.
    pub kernel_overhead_s: f64,
    /// Fixed cost of one micro-batch on one pipeline stage besides its kernels (framework
    /// dispatch, synchronisation, data loading share), seconds.
    pub microbatch_overhead_s: f64,
    /// Extra cost of each virtual pipeline stage per micro-batch (schedule bookkeeping, more
    /// and smaller point-to-point transfers), seconds.
    pub vpp_stage_overhead_s: f64,
    /// Sequence parallelism with tensor parallelism (Korthikanti et al. 2022): norms, dropout
    /// and residual activations split by TP, all-gather/reduce-scatter instead of all-reduce.
    pub sequence_parallel: bool,
    /// Fraction of tensor-parallel communication hidden behind GEMMs (0 = none, 1 = all).
    pub tp_overlap: f64,
    /// Pipeline point-to-point transfers of the interleaved schedule posted asynchronously
    /// and hidden behind the micro-batch's compute on the stage (Megatron's
    /// `overlap_p2p_comm`, on by default with virtual stages); off: blocking transfers.
    pub pp_overlap: bool,
    /// How the element-wise work of a layer runs (its memory traffic).
    pub elementwise: Elementwise,
    /// How context parallelism exchanges keys and values.
    pub cp_comm: CpComm,
    /// Where the pipeline puts the stages short of ⌈layers/pp⌉ layers.
    pub stage_split: StageSplit,
    /// Read, never written: calibration files saved before `cross_entropy` existed (until
    /// 2026-12-04) carry `fused_cross_entropy: true|false`;
    /// [`EfficiencyParams::upgrade_legacy`] turns it into `cross_entropy`.
    #[serde(
        default,
        skip_serializing,
        rename = "fused_cross_entropy",
        deserialize_with = "plain_bool"
    )]
    pub legacy_fused_cross_entropy: Option<bool>,
    /// How the loss over the vocabulary is computed: the memory of the logits at its backward
    /// (time is charged alike for all three: docs/MODEL.md).
    pub cross_entropy: CrossEntropy,
    /// Slowdown of compute while it hides communication, as a fraction of the hidden
    /// communication time (communication kernels take SMs and HBM bandwidth).
    pub overlap_cost: f64,
    /// Bytes per gradient element, in the gradient buffer and on the wire (4: Megatron
    /// accumulates and reduces BF16 gradients in FP32; 2: BF16 reduction).
    #[serde(alias = "grad_comm_bytes")]
    pub grad_bytes: f64,
    /// Fraction of the last micro-batch's backward pass that the data-parallel gradient
    /// reduction can hide behind (1: bucketed reduction overlapped with backward, as
    /// Megatron-Core's overlap option and PyTorch DDP; 0: reduced after the backward).
    pub grad_reduce_overlap: f64,
    /// Gradient bucket size of the data-parallel reduction, bytes (one collective per bucket):
    /// the smallest bucket, whatever the data-parallel size.
    pub grad_bucket_bytes: f64,
    /// How buckets grow with the data-parallel size, parameters per data-parallel rank: a
    /// bucket holds at least this × DP gradients. Megatron-Core's default bucket is
    /// max(40M, 1M × DP) parameters (`DistributedDataParallelConfig.bucket_size`), so that a
    /// collective over hundreds of ranks, whose ring pays a hop latency per rank, stays
    /// bandwidth-bound; DeepSpeed's default bucket (5·10⁸ elements) is as large up to DP 500.
    /// 0: fixed buckets of [`Self::grad_bucket_bytes`].
    pub grad_bucket_params_per_dp_rank: f64,
    /// Parameter all-gathers per layer per pass under ZeRO-3 / FSDP (one per parameter tensor
    /// in DeepSpeed ZeRO-3; one per wrapped layer in FSDP).
    pub zero3_collectives_per_layer: f64,
    /// Fraction of a layer's ZeRO-3 collectives that prefetching hides behind that layer's
    /// compute (the rest, and whatever exceeds the compute, is exposed).
    pub zero3_overlap: f64,
    /// Fraction of a block's FSDP1/FSDP2/HSDP collectives that prefetching hides behind the
    /// neighbouring block's compute.
    pub fsdp_overlap: f64,
    /// GPUs in one HSDP shard group (parameters sharded inside it, replicated across).
    pub hsdp_shard_gpus: f64,
    /// ZeRO-3-style sharding implementation the stack runs.
    pub sharding: Sharding,
    /// GEMM precision the stack runs.
    pub precision: Precision,
    /// Plateau fraction of the FP8 dense peak reached by large FP8 GEMMs.
    pub fp8_max_eff: f64,
    /// Latency of one ring step inside the scale-up domain, seconds (a ring collective over
    /// n ranks takes n − 1 steps per phase).
    pub hop_latency_intra_s: f64,
    /// Latency of one ring step that crosses the scale-out network, seconds.
    pub hop_latency_inter_s: f64,
    /// Per-rank chunk size at which a ring collective reaches half its bus bandwidth, bytes
    /// (small chunks: many ranks sharing a small buffer).
    pub coll_chunk_half_bytes: f64,
    /// The same for ZeRO-3 / FSDP parameter gathers and gradient scatters, which move one
    /// layer's parameters in many small per-rank shards (the framework's per-shard bookkeeping
    /// adds to NCCL's own fall-off), bytes.
    pub zero3_chunk_half_bytes: f64,
    /// Multiplier on the hardware's scale-up link efficiency (calibration knob, 1 = datasheet).
    pub intra_link_scale: f64,
    /// Multiplier on the hardware's scale-out link efficiency (calibration knob, 1 = datasheet).
    pub inter_link_scale: f64,
    /// Multiplier on the hardware's fixed collective latency inside the scale-up domain
    /// (calibration knob, 1 = the profile's).
    pub intra_latency_scale: f64,
    /// The same for collectives that cross the scale-out network.
    pub inter_latency_scale: f64,
}

impl Default for EfficiencyParams {
    fn default() -> Self {
        Self {
            max_eff: 0.65,
            gemm_overhead_s: 20e-6,
            gemm_k_half: 128.0,
            attn_eff: 0.35,
            attn_bwd_eff: 0.5625,
            attention: AttentionKind::Cudnn,
            attn_native_speedup: 1.0,
            attn_triton_slowdown: 1.0,
            mem_eff: 0.8,
            kernel_overhead_s: 4e-6,
            microbatch_overhead_s: 1e-3,
            vpp_stage_overhead_s: 0.3e-3,
            sequence_parallel: true,
            tp_overlap: 0.5,
            pp_overlap: true,
            cross_entropy: CrossEntropy::VocabParallel,
            elementwise: Elementwise::Fused,
            cp_comm: CpComm::Ring,
            stage_split: StageSplit::Ends,
            legacy_fused_cross_entropy: None,
            overlap_cost: 0.2,
            grad_bytes: 4.0,
            grad_reduce_overlap: 1.0,
            grad_bucket_bytes: 160e6,
            grad_bucket_params_per_dp_rank: 1e6,
            zero3_collectives_per_layer: 4.0,
            zero3_overlap: 0.5,
            fsdp_overlap: 0.9,
            hsdp_shard_gpus: 8.0,
            sharding: Sharding::Fsdp2,
            precision: Precision::Bf16,
            fp8_max_eff: 0.65,
            hop_latency_intra_s: 1e-6,
            hop_latency_inter_s: 10e-6,
            coll_chunk_half_bytes: 0.5e6,
            zero3_chunk_half_bytes: 0.5e6,
            intra_link_scale: 1.0,
            inter_link_scale: 1.0,
            intra_latency_scale: 1.0,
            inter_latency_scale: 1.0,
        }
    }
}

/// A bare `true`/`false` (as old files wrote it) read into `Some`.
fn plain_bool<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
    <bool as Deserialize>::deserialize(d).map(Some)
}

impl EfficiencyParams {
    /// Set the BF16 GEMM plateau (`max_eff`, a fraction of peak) and move the FP8 one
    /// (`fp8_max_eff`) by the same factor, at most 1: what slows or speeds the BF16 GEMMs on
    /// a cluster (clocks under a power cap, the software) does the same to the FP8 ones. A
    /// calibration on BF16 steps and the what-if's plateau moved only BF16, so the FP8 gain
    /// they predicted grew from 1.31× to 1.49×.
    pub fn set_gemm_plateau(&mut self, max_eff: f64) {
        if self.max_eff > 0.0 && max_eff.is_finite() && max_eff > 0.0 {
            self.fp8_max_eff = (self.fp8_max_eff * max_eff / self.max_eff).min(1.0);
        }
        self.max_eff = max_eff;
    }

    /// These parameters with a field of an older file read into its current form:
    /// `fused_cross_entropy: true` is [`CrossEntropy::Fused`]; `false` was the 6 bytes a
    /// logit of [`CrossEntropy::VocabParallel`], the default.
    pub fn upgrade_legacy(mut self) -> Self {
        if self.legacy_fused_cross_entropy.take() == Some(true) {
            self.cross_entropy = CrossEntropy::Fused;
        }
        self
    }

    /// Seconds for a GEMM (M×K)·(K×N) in BF16 on a GPU of `peak_flops` FLOP/s and `hbm_bw`
    /// bytes/s: roofline of compute and memory plus the fixed per-kernel cost.
    pub fn gemm_time(&self, m: f64, k: f64, n: f64, peak_flops: f64, hbm_bw: f64) -> f64 {
        let flops = 2.0 * m * k * n;
        let bytes = 2.0 * (m * k + k * n + m * n);
        let k_eff = k / (k + self.gemm_k_half);
        (flops / (peak_flops * self.max_eff * k_eff)).max(bytes / (hbm_bw * self.mem_eff))
            + self.gemm_overhead_s
    }

    /// Seconds for `count` independent GEMMs of one shape run as one batched kernel: the
    /// roofline of all of them plus one fixed cost.
    pub fn batched_gemm_time(
        &self,
        count: f64,
        (m, k, n): (f64, f64, f64),
        peak_flops: f64,
        hbm_bw: f64,
    ) -> f64 {
        let one = self.gemm_time(m, k, n, peak_flops, hbm_bw) - self.gemm_overhead_s;
        count * one + self.gemm_overhead_s
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

#[cfg(test)]
mod tests {
    use super::EfficiencyParams;

    /// The FP8 plateau moves by the factor the BF16 one moves, never past 1 of the FP8 peak.
    #[test]
    fn the_fp8_plateau_moves_with_the_bf16_one() {
        let mut e = EfficiencyParams {
            max_eff: 0.66,
            fp8_max_eff: 0.65,
            ..EfficiencyParams::default()
        };
        e.set_gemm_plateau(0.33);
        assert_eq!(e.max_eff, 0.33);
        assert!((e.fp8_max_eff - 0.325).abs() < 1e-12, "{}", e.fp8_max_eff);
        e.fp8_max_eff = 0.9;
        e.set_gemm_plateau(0.66);
        assert_eq!(e.fp8_max_eff, 1.0);
    }
}
