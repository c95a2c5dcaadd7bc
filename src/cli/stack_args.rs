//! The training stack on the command line (`--stack` and one flag per setting), shared by
//! `predict`, `grid`, `plan` and `calibrate` (docs/MODEL.md, "Stating your stack"). Each value
//! is also accepted as JSON outputs write it (`all_gather`, `vocab_parallel`, `true`/`false`),
//! so a value read from `--json` can be given back as a flag.

use crate::perf::Recompute;
use crate::perf::efficiency::{
    AttentionKind, CpComm, CrossEntropy, Elementwise, Precision, Sharding, StageSplit,
};
use crate::perf::stack::{GradReduce, Stack, StackPreset};
use clap::{Args, ValueEnum};

/// A framework preset on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PresetArg {
    /// Megatron-Core (r0.8+): cuDNN fused attention (Transformer Engine), SP, TP/DP overlap,
    /// FP32 grads (default).
    MegatronCore,
    /// NeMo 2.x (Megatron-Core underneath).
    Nemo,
    /// torchtitan with FSDP2.
    TorchtitanFsdp2,
    /// llm-foundry / Composer FSDP1 full shard as its benchmark tables ran: Triton flash
    /// attention (today's llm-foundry runs FlashAttention-2: add --attention fused)
    LlmFoundry,
    /// DeepSpeed ZeRO (current releases).
    Deepspeed,
    /// Megatron-LM 2021 with PyTorch DDP.
    #[value(name = "megatron-lm-2021")]
    MegatronLm2021,
    /// Megatron-LM 2021 with its local DDP.
    #[value(name = "megatron-lm-2021-local")]
    MegatronLm2021Local,
    /// DeepSpeed ZeRO as run in 2021.
    #[value(name = "deepspeed-2021")]
    Deepspeed2021,
}

impl From<PresetArg> for StackPreset {
    fn from(p: PresetArg) -> Self {
        match p {
            PresetArg::MegatronCore => StackPreset::MegatronCore,
            PresetArg::Nemo => StackPreset::Nemo,
            PresetArg::TorchtitanFsdp2 => StackPreset::TorchtitanFsdp2,
            PresetArg::LlmFoundry => StackPreset::LlmFoundry,
            PresetArg::Deepspeed => StackPreset::DeepSpeed,
            PresetArg::MegatronLm2021 => StackPreset::MegatronLm2021,
            PresetArg::MegatronLm2021Local => StackPreset::MegatronLm2021Local,
            PresetArg::Deepspeed2021 => StackPreset::DeepSpeed2021,
        }
    }
}

/// On or off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnOff {
    /// Switched on.
    #[value(alias = "true")]
    On,
    /// Switched off.
    #[value(alias = "false")]
    Off,
}

impl From<OnOff> for bool {
    fn from(v: OnOff) -> Self {
        v == OnOff::On
    }
}

/// Attention kernel on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AttentionArg {
    /// One fused kernel of FlashAttention-2's generation (flash-attn 2, PyTorch SDPA).
    Fused,
    /// A Hopper-native fused kernel: cuDNN fused attention (Transformer Engine) or
    /// FlashAttention-3.
    Cudnn,
    /// Batched GEMMs around softmax over stored scores.
    Unfused,
    /// A Triton flash-attention kernel of FlashAttention-1's generation (llm-foundry's
    /// `attn_impl: triton`).
    Triton,
}

/// Cross-entropy implementation on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CrossEntropyArg {
    /// A fused kernel on the BF16 logits (flash-attn's, Liger's): 2 bytes per logit.
    Fused,
    /// Megatron's vocab-parallel cross-entropy (FP32 softmax, gradient in place): 6 bytes.
    #[value(alias = "vocab_parallel")]
    VocabParallel,
    /// PyTorch's F.cross_entropy on FP32 logits (torchtitan, Hugging Face): 12 bytes at the
    /// loss's backward.
    Pytorch,
}

impl From<CrossEntropyArg> for CrossEntropy {
    fn from(c: CrossEntropyArg) -> Self {
        match c {
            CrossEntropyArg::Fused => CrossEntropy::Fused,
            CrossEntropyArg::VocabParallel => CrossEntropy::VocabParallel,
            CrossEntropyArg::Pytorch => CrossEntropy::Pytorch,
        }
    }
}

/// Element-wise kernels on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ElementwiseArg {
    /// Hand-fused kernels (Megatron, Transformer Engine) or torch.compile.
    Fused,
    /// PyTorch eager, one kernel per operation (torchtitan without torch.compile).
    Eager,
}

/// Context parallelism's key/value exchange on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CpCommArg {
    /// Ring attention, point-to-point steps hidden behind each chunk (Megatron-Core `p2p`,
    /// Transformer Engine; torchtitan's `alltoall` rotate method)
    Ring,
    /// Keys and values all-gathered, gradients reduce-scattered (Llama 3; PyTorch
    /// context_parallel's default, torchtitan's `allgather`; Megatron-Core `all_gather`)
    #[value(alias = "all_gather")]
    AllGather,
    /// DeepSpeed-Ulysses: all-to-all from a sequence split to a head split and back
    /// (Megatron-Core `a2a`); needs the heads per TP rank divisible by --cp
    #[value(alias = "all_to_all")]
    AllToAll,
}

/// Where the pipeline puts its short stages (PP not dividing the layers), on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StageSplitArg {
    /// One layer fewer on the end stages, beside the embedding and the output layer
    /// (Megatron's first/last-stage counts, torchtitan; BLOOM's 70 layers on 12 stages under
    /// BigScience's `--pp-partition-method 'type:transformer|embedding'`)
    Ends,
    /// DeepSpeed's pipeline engine since 0.11: the full stages first, the short ones last
    Balanced,
    /// DeepSpeed's pipeline engine before 0.11: full stages from the first and usually the
    /// remainder after (its search can end a layer short: 16 on 3 is 5, 5, 6); a split leaving
    /// a stage without layers cannot run
    Greedy,
}

/// Gradient reduction dtype on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GradReduceArg {
    /// FP32 gradient buffers and reduction.
    Fp32,
    /// BF16 gradients on the wire.
    Bf16,
}

/// Sharding implementation on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ShardingArg {
    /// DeepSpeed ZeRO-3: per-tensor collectives.
    Deepspeed,
    /// PyTorch FSDP1 (flat parameters per block; costed as FSDP2: one collective a block,
    /// prefetched).
    Fsdp1,
    /// PyTorch FSDP2 (per-block gathers, prefetched).
    Fsdp2,
    /// Hybrid sharding: FSDP2 inside a node, replicated across.
    Hsdp,
}

/// GEMM precision on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PrecisionArg {
    /// BF16 GEMMs.
    Bf16,
    /// FP8 GEMMs (H100/H200; Transformer Engine, torchao float8).
    Fp8,
}

/// One recompute policy by name (a measured step ran one; a grid's search lists some): no
/// `auto`, which `predict` has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RecomputePolicy {
    /// All activations kept.
    None,
    /// The attention core recomputed (Megatron's selective).
    Selective,
    /// Op-level selective checkpointing (torchtitan `selective op`).
    Op,
    /// Every layer recomputed.
    Full,
}

impl From<RecomputePolicy> for Recompute {
    /// The policy named.
    fn from(r: RecomputePolicy) -> Self {
        match r {
            RecomputePolicy::None => Recompute::None,
            RecomputePolicy::Selective => Recompute::Selective,
            RecomputePolicy::Op => Recompute::Op,
            RecomputePolicy::Full => Recompute::Full,
        }
    }
}

/// The stack flags.
#[derive(Debug, Clone, Default, Args)]
pub struct StackArgs {
    /// Training stack preset: the framework's defaults [default: the session's `stack`; without
    /// a session the stack the --calibration (or hardware) file was written for: megatron-core
    /// for the shipped profiles]. A setting flag without --stack changes that setting of it.
    #[arg(long, value_enum)]
    pub stack: Option<PresetArg>,
    /// Attention kernel (changes the preset's).
    #[arg(long, value_enum)]
    pub attention: Option<AttentionArg>,
    /// Sequence parallelism with TP.
    #[arg(long, value_enum)]
    pub sequence_parallel: Option<OnOff>,
    /// Gradient reduction dtype.
    #[arg(long, value_enum)]
    pub grad_reduce: Option<GradReduceArg>,
    /// Data-parallel gradient reduction overlapped with the backward (the bucketed reduction
    /// of ZeRO 0-2 and HSDP's all-reduce across replicas; ZeRO-3's per-layer collectives are
    /// hidden by prefetching whatever this says).
    #[arg(long, value_enum)]
    pub dp_overlap: Option<OnOff>,
    /// Tensor-parallel communication overlapped with GEMMs.
    #[arg(long, value_enum)]
    pub tp_overlap: Option<OnOff>,
    /// Pipeline transfers of the interleaved schedule (--vpp > 1) overlapped with compute
    /// (Megatron's overlap_p2p_comm).
    #[arg(long, value_enum)]
    pub pp_overlap: Option<OnOff>,
    /// How the loss over the vocabulary is computed: the logits' memory at its backward.
    #[arg(long, value_enum)]
    pub cross_entropy: Option<CrossEntropyArg>,
    /// Element-wise kernels: fused (Megatron's, or torch.compile) or eager PyTorch.
    #[arg(long, value_enum)]
    pub elementwise: Option<ElementwiseArg>,
    /// How context parallelism (--cp > 1) exchanges keys and values.
    #[arg(long, value_enum)]
    pub cp_comm: Option<CpCommArg>,
    /// Where the pipeline puts the stages holding fewer than ⌈layers/pp⌉ layers when PP does
    /// not divide the layers: which stage is fullest (memory) and which sets the pace (step
    /// time). Default: the preset's (balanced for deepspeed, greedy for deepspeed-2021, ends
    /// for the others)
    #[arg(long, value_enum)]
    pub stage_split: Option<StageSplitArg>,
    /// ZeRO-3 / FSDP implementation, where ZeRO-3 runs (`predict --zero 3`, a stack whose
    /// framework shards fully, or a session searching ZeRO 3).
    #[arg(long, value_enum)]
    pub sharding: Option<ShardingArg>,
    /// GEMM precision.
    #[arg(long, value_enum)]
    pub precision: Option<PrecisionArg>,
}

impl StackArgs {
    /// The stack these flags state, `None` when no flag is given.
    pub fn stack(&self) -> Option<Stack> {
        let s = Stack {
            preset: self.stack.map(Into::into),
            attention: self.attention.map(|a| match a {
                AttentionArg::Fused => AttentionKind::Fused,
                AttentionArg::Cudnn => AttentionKind::Cudnn,
                AttentionArg::Unfused => AttentionKind::Unfused,
                AttentionArg::Triton => AttentionKind::Triton,
            }),
            sequence_parallel: self.sequence_parallel.map(Into::into),
            grad_reduce: self.grad_reduce.map(|g| match g {
                GradReduceArg::Fp32 => GradReduce::Fp32,
                GradReduceArg::Bf16 => GradReduce::Bf16,
            }),
            dp_overlap: self.dp_overlap.map(Into::into),
            tp_overlap: self.tp_overlap.map(Into::into),
            pp_overlap: self.pp_overlap.map(Into::into),
            cross_entropy: self.cross_entropy.map(Into::into),
            elementwise: self.elementwise.map(|w| match w {
                ElementwiseArg::Fused => Elementwise::Fused,
                ElementwiseArg::Eager => Elementwise::Eager,
            }),
            cp_comm: self.cp_comm.map(|c| match c {
                CpCommArg::Ring => CpComm::Ring,
                CpCommArg::AllGather => CpComm::AllGather,
                CpCommArg::AllToAll => CpComm::AllToAll,
            }),
            stage_split: self.stage_split.map(|s| match s {
                StageSplitArg::Ends => StageSplit::Ends,
                StageSplitArg::Balanced => StageSplit::Balanced,
                StageSplitArg::Greedy => StageSplit::Greedy,
            }),
            sharding: self.sharding.map(|s| match s {
                ShardingArg::Deepspeed => Sharding::DeepSpeed,
                ShardingArg::Fsdp1 => Sharding::Fsdp1,
                ShardingArg::Fsdp2 => Sharding::Fsdp2,
                ShardingArg::Hsdp => Sharding::Hsdp,
            }),
            precision: self.precision.map(|p| match p {
                PrecisionArg::Bf16 => Precision::Bf16,
                PrecisionArg::Fp8 => Precision::Fp8,
            }),
        };
        (s != Stack::default()).then_some(s)
    }
}
