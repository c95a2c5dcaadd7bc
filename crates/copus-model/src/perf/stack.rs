//! The training stack as a user states it: which attention kernel, sequence parallelism,
//! gradient-reduction dtype, communication overlap, sharding implementation and GEMM precision
//! the job runs. The stack is a property of the job (what its framework does), not a fitted
//! parameter: a preset names a framework's defaults (docs/MODEL.md, "Stating your stack") and
//! every setting can be changed on its own. [`Stack::apply`] writes the choices into the
//! [`EfficiencyParams`] the model reads, keeping the hardware's fitted kernel efficiencies.
//!
//! One definition serves the CLI (`--stack` and the per-setting flags), sessions (`stack:`),
//! the explorer's what-if, calibration and the published-measurement validation.

use super::EfficiencyParams;
use super::config::Recompute;
use super::efficiency::{
    AttentionKind, CpComm, CrossEntropy, Elementwise, Precision, Sharding, StageSplit,
};
use serde::{Deserialize, Serialize};
use std::fmt;

/// A framework's defaults, as its documentation and reproduction scripts state them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum StackPreset {
    /// Megatron-LM as of 2021 (Narayanan et al. 2021) with PyTorch DDP: unfused attention, no
    /// sequence parallelism, no TP overlap, FP32 gradients reduced overlapped with the last
    /// backward.
    MegatronLm2021,
    /// The same with Megatron's "local" DDP: gradients reduced after the backward.
    MegatronLm2021Local,
    /// DeepSpeed ZeRO as run in 2021 (Narayanan et al. 2021, Table 2): unfused attention, FP16
    /// gradient reduction, one collective per parameter tensor under ZeRO-3.
    DeepSpeed2021,
    /// Megatron-Core (r0.8 and later; the default): fused attention (Transformer Engine /
    /// cuDNN), sequence parallelism, TP/DP/PP overlap, FP32 gradient reduction, the
    /// distributed optimizer as ZeRO-1.
    MegatronCore,
    /// NVIDIA NeMo 2.x: Megatron-Core underneath, with the same defaults.
    Nemo,
    /// torchtitan with FSDP2: fused attention (SDPA flash), per-block parameter all-gathers
    /// prefetched behind compute, BF16 parameters and FP32 gradient reduction, async TP
    /// optional.
    TorchtitanFsdp2,
    /// MosaicML llm-foundry / Composer with FSDP (FULL_SHARD, FSDP1 flat parameters) as its
    /// benchmark tables ran: the Triton flash-attention kernel, BF16 gradient reduction.
    LlmFoundry,
    /// DeepSpeed ZeRO (current releases): fused attention (flash), BF16 gradient reduction,
    /// bucketed per-tensor ZeRO-3 collectives with prefetch.
    DeepSpeed,
}

impl StackPreset {
    /// Every preset, in the order the CLI lists them.
    pub const ALL: [StackPreset; 8] = [
        StackPreset::MegatronCore,
        StackPreset::Nemo,
        StackPreset::TorchtitanFsdp2,
        StackPreset::LlmFoundry,
        StackPreset::DeepSpeed,
        StackPreset::MegatronLm2021,
        StackPreset::MegatronLm2021Local,
        StackPreset::DeepSpeed2021,
    ];

    /// The name used on the CLI, in sessions and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            StackPreset::MegatronLm2021 => "megatron-lm-2021",
            StackPreset::MegatronLm2021Local => "megatron-lm-2021-local",
            StackPreset::DeepSpeed2021 => "deepspeed-2021",
            StackPreset::MegatronCore => "megatron-core",
            StackPreset::Nemo => "nemo",
            StackPreset::TorchtitanFsdp2 => "torchtitan-fsdp2",
            StackPreset::LlmFoundry => "llm-foundry",
            StackPreset::DeepSpeed => "deepspeed",
        }
    }

    /// The preset of a name (as [`StackPreset::name`] writes it), if it is one.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name() == name)
    }

    /// What the preset stands for, one line.
    pub fn describe(self) -> &'static str {
        match self {
            StackPreset::MegatronLm2021 => {
                "Megatron-LM 2021, PyTorch DDP: unfused attention, no SP, FP32 grads overlapped"
            }
            StackPreset::MegatronLm2021Local => {
                "Megatron-LM 2021, local DDP: unfused attention, no SP, FP32 grads after backward"
            }
            StackPreset::DeepSpeed2021 => {
                "DeepSpeed ZeRO 2021: unfused attention, FP16 grads, per-tensor ZeRO-3 gathers"
            }
            StackPreset::MegatronCore => {
                "Megatron-Core: fused attention, SP, TP/DP/PP overlap, FP32 grads, per-layer FSDP"
            }
            StackPreset::Nemo => {
                "NeMo 2 / Megatron-Bridge performance recipes: as megatron-core, BF16 grad reduce"
            }
            StackPreset::TorchtitanFsdp2 => {
                "torchtitan FSDP2: flash attention, per-block prefetched gathers, FP32 grad reduce"
            }
            StackPreset::LlmFoundry => {
                "llm-foundry/Composer FSDP1 full shard as its benchmark tables ran: Triton flash \
                 attention (--attention fused for today's FlashAttention-2), fused CE, BF16 grad \
                 reduce"
            }
            StackPreset::DeepSpeed => {
                "DeepSpeed ZeRO (current): flash attention, BF16 grads, per-tensor ZeRO-3 gathers"
            }
        }
    }

    /// The ZeRO stage this framework runs when nothing else is said: none for Megatron-LM 2021
    /// (no distributed optimizer until 2022), the distributed optimizer (1) for Megatron-Core
    /// and NeMo, full sharding (3) for the FSDP stacks and DeepSpeed's ZeRO-3 presets.
    pub fn default_zero(self) -> u8 {
        match self {
            StackPreset::MegatronLm2021 | StackPreset::MegatronLm2021Local => 0,
            StackPreset::MegatronCore | StackPreset::Nemo => 1,
            StackPreset::TorchtitanFsdp2
            | StackPreset::LlmFoundry
            | StackPreset::DeepSpeed
            | StackPreset::DeepSpeed2021 => 3,
        }
    }

    /// The activation-checkpointing policies this framework can run, in search order: what
    /// `auto` choices search and the explorer's what-if cycles through. Megatron's selective
    /// recompute (the attention core) came with Megatron-LM in 2022 (Korthikanti et al.) and
    /// is Megatron-Core's and NeMo's; op-level selective checkpointing is torchtitan's
    /// (`selective op`); DeepSpeed, Hugging Face models and llm-foundry checkpoint whole
    /// layers; Megatron-LM 2021 had `--checkpoint-activations` (whole layers) only.
    pub fn recompute_policies(self) -> &'static [Recompute] {
        match self {
            StackPreset::MegatronCore | StackPreset::Nemo => {
                &[Recompute::None, Recompute::Selective, Recompute::Full]
            }
            StackPreset::TorchtitanFsdp2 => &[Recompute::None, Recompute::Op, Recompute::Full],
            StackPreset::MegatronLm2021
            | StackPreset::MegatronLm2021Local
            | StackPreset::DeepSpeed2021
            | StackPreset::DeepSpeed
            | StackPreset::LlmFoundry => &[Recompute::None, Recompute::Full],
        }
    }

    /// Whether this framework can overlap TP communication with its GEMMs: Megatron-Core and
    /// NeMo (`--tp-comm-overlap`, Transformer Engine's userbuffers) and torchtitan (async TP);
    /// not Megatron-LM or DeepSpeed as of 2021, nor Megatron-DeepSpeed, nor llm-foundry (no TP).
    pub fn has_tp_overlap(self) -> bool {
        matches!(
            self,
            StackPreset::MegatronCore | StackPreset::Nemo | StackPreset::TorchtitanFsdp2
        )
    }

    /// Whether this framework runs pipeline stages: every one but llm-foundry, which trains
    /// through Composer's FSDP without a pipeline schedule.
    pub fn has_pipeline_parallel(self) -> bool {
        self != StackPreset::LlmFoundry
    }

    /// Whether this framework splits a sequence over context-parallel ranks: Megatron-Core
    /// and NeMo (ring attention, 2023 on), torchtitan (PyTorch's context parallel) and
    /// DeepSpeed (Ulysses, 2023 on); not Megatron-LM or DeepSpeed as of 2021, nor llm-foundry.
    /// A search that may change the degree (`predict`'s "fits instead") keeps the one asked
    /// for on the others.
    pub fn has_context_parallel(self) -> bool {
        match self {
            StackPreset::MegatronCore
            | StackPreset::Nemo
            | StackPreset::TorchtitanFsdp2
            | StackPreset::DeepSpeed => true,
            StackPreset::MegatronLm2021
            | StackPreset::MegatronLm2021Local
            | StackPreset::DeepSpeed2021
            | StackPreset::LlmFoundry => false,
        }
    }

    /// The splits of uneven pipeline stages this framework runs, its default first:
    /// Megatron-LM, NeMo, torchtitan and llm-foundry shorten the end stages; DeepSpeed's
    /// pipeline engine since 0.11 fills the first stages (`balanced`), before it greedily,
    /// and BigScience's fork of 2021-2022 could count the embeddings as layers instead (the
    /// ends, as BLOOM ran).
    pub fn stage_splits(self) -> &'static [StageSplit] {
        match self {
            StackPreset::DeepSpeed => &[StageSplit::Balanced],
            StackPreset::DeepSpeed2021 => &[StageSplit::Greedy, StageSplit::Ends],
            StackPreset::MegatronCore
            | StackPreset::Nemo
            | StackPreset::TorchtitanFsdp2
            | StackPreset::LlmFoundry
            | StackPreset::MegatronLm2021
            | StackPreset::MegatronLm2021Local => &[StageSplit::Ends],
        }
    }

    /// Every setting of this preset.
    pub fn settings(self) -> StackSettings {
        let modern = StackSettings {
            attention: AttentionKind::Cudnn,
            sequence_parallel: true,
            grad_reduce: GradReduce::Fp32,
            dp_overlap: true,
            tp_overlap: true,
            pp_overlap: true,
            cross_entropy: CrossEntropy::VocabParallel,
            elementwise: Elementwise::Fused,
            cp_comm: CpComm::Ring,
            stage_split: StageSplit::Ends,
            sharding: Sharding::Fsdp2,
            precision: Precision::Bf16,
        };
        match self {
            StackPreset::MegatronCore => modern,
            // NVIDIA's performance recipes (NeMo 2 `scripts/performance`, Megatron-Bridge perf
            // configs, the NeMo launcher's H100 examples) reduce gradients in BF16
            // (`grad_reduce_in_fp32 = False`, `grad_sync_dtype=bf16`).
            StackPreset::Nemo => StackSettings {
                grad_reduce: GradReduce::Bf16,
                ..modern
            },
            StackPreset::MegatronLm2021 | StackPreset::MegatronLm2021Local => StackSettings {
                attention: AttentionKind::Unfused,
                sequence_parallel: false,
                tp_overlap: false,
                pp_overlap: false,
                dp_overlap: self == StackPreset::MegatronLm2021,
                ..modern
            },
            StackPreset::DeepSpeed2021 => StackSettings {
                attention: AttentionKind::Unfused,
                sequence_parallel: false,
                tp_overlap: false,
                pp_overlap: false,
                grad_reduce: GradReduce::Bf16,
                sharding: Sharding::DeepSpeed,
                // DeepSpeed's pipeline engine before 0.11 (BigScience's fork could count the
                // embeddings as layers instead: --stage-split ends, as BLOOM ran).
                stage_split: StageSplit::Greedy,
                ..modern
            },
            StackPreset::TorchtitanFsdp2 => StackSettings {
                attention: AttentionKind::Fused,
                cross_entropy: CrossEntropy::Pytorch,
                // torchtitan's default: no torch.compile.
                elementwise: Elementwise::Eager,
                // PyTorch's context_parallel, rotate method `allgather` (torchtitan's default).
                cp_comm: CpComm::AllGather,
                sharding: Sharding::Fsdp2,
                tp_overlap: false,
                pp_overlap: false,
                ..modern
            },
            // As its published benchmark tables ran (`submit_benchmarks.py --attn_impl triton`,
            // the default); today's llm-foundry runs FlashAttention-2 (`attention: fused`).
            StackPreset::LlmFoundry => StackSettings {
                attention: AttentionKind::Triton,
                sharding: Sharding::Fsdp1,
                sequence_parallel: false,
                tp_overlap: false,
                pp_overlap: false,
                cross_entropy: CrossEntropy::Fused,
                elementwise: Elementwise::Eager,
                grad_reduce: GradReduce::Bf16,
                ..modern
            },
            // Hugging Face models under DeepSpeed: PyTorch's cross-entropy on FP32 logits.
            // Its sequence parallelism is DeepSpeed-Ulysses (all-to-all).
            StackPreset::DeepSpeed => StackSettings {
                attention: AttentionKind::Fused,
                cp_comm: CpComm::AllToAll,
                cross_entropy: CrossEntropy::Pytorch,
                elementwise: Elementwise::Eager,
                sequence_parallel: false,
                tp_overlap: false,
                pp_overlap: false,
                grad_reduce: GradReduce::Bf16,
                sharding: Sharding::DeepSpeed,
                stage_split: StageSplit::Balanced,
                ..modern
            },
        }
    }
}

impl fmt::Display for StackPreset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Dtype gradients are kept and reduced in across data-parallel ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum GradReduce {
    /// FP32 gradient buffers and reduction (4 bytes per element; Megatron's and torchtitan's
    /// default with BF16 weights).
    Fp32,
    /// BF16 (or FP16) gradients on the wire and in the buffer (2 bytes per element).
    Bf16,
}

impl GradReduce {
    /// Bytes per gradient element.
    pub fn bytes(self) -> f64 {
        match self {
            GradReduce::Fp32 => 4.0,
            GradReduce::Bf16 => 2.0,
        }
    }
}

/// Every stack choice, resolved (a preset with the user's changes applied).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct StackSettings {
    /// Attention core kernel.
    pub attention: AttentionKind,
    /// Sequence parallelism with TP.
    pub sequence_parallel: bool,
    /// Gradient reduction dtype.
    pub grad_reduce: GradReduce,
    /// Data-parallel gradient reduction overlapped with the backward.
    pub dp_overlap: bool,
    /// Tensor-parallel communication overlapped with GEMMs.
    pub tp_overlap: bool,
    /// Pipeline transfers of the interleaved schedule overlapped with compute.
    pub pp_overlap: bool,
    /// How the loss over the vocabulary is computed (the logits' memory).
    pub cross_entropy: CrossEntropy,
    /// How the element-wise work runs (fused kernels or PyTorch eager).
    pub elementwise: Elementwise,
    /// How context parallelism exchanges keys and values.
    pub cp_comm: CpComm,
    /// Where the pipeline puts the stages short of ⌈layers/pp⌉ layers.
    pub stage_split: StageSplit,
    /// Implementation of ZeRO-3-style full sharding.
    pub sharding: Sharding,
    /// GEMM precision.
    pub precision: Precision,
}

/// The stack as written in a session or on the command line: a preset (default
/// `megatron-core`) and any settings changed from it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Stack {
    /// The framework's defaults the settings start from (absent: `megatron-core`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preset: Option<StackPreset>,
    /// Attention kernel, if changed from the preset's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attention: Option<AttentionKind>,
    /// Sequence parallelism, if changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sequence_parallel: Option<bool>,
    /// Gradient reduction dtype, if changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grad_reduce: Option<GradReduce>,
    /// DP overlap, if changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dp_overlap: Option<bool>,
    /// TP overlap, if changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tp_overlap: Option<bool>,
    /// PP overlap (interleaved schedule), if changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pp_overlap: Option<bool>,
    /// Cross-entropy implementation, if changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cross_entropy: Option<CrossEntropy>,
    /// Element-wise kernels, if changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub elementwise: Option<Elementwise>,
    /// Context-parallel key/value exchange, if changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cp_comm: Option<CpComm>,
    /// Pipeline stage split, if changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stage_split: Option<StageSplit>,
    /// Sharding implementation, if changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sharding: Option<Sharding>,
    /// GEMM precision, if changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub precision: Option<Precision>,
}

impl Stack {
    /// A preset with nothing changed.
    pub fn preset(p: StackPreset) -> Self {
        Self {
            preset: Some(p),
            ..Self::default()
        }
    }

    /// The preset in force (`megatron-core` when none is named).
    pub fn base(&self) -> StackPreset {
        self.preset.unwrap_or(StackPreset::MegatronCore)
    }

    /// Every setting: the preset's, with this stack's changes.
    pub fn settings(&self) -> StackSettings {
        let p = self.base().settings();
        StackSettings {
            attention: self.attention.unwrap_or(p.attention),
            sequence_parallel: self.sequence_parallel.unwrap_or(p.sequence_parallel),
            grad_reduce: self.grad_reduce.unwrap_or(p.grad_reduce),
            dp_overlap: self.dp_overlap.unwrap_or(p.dp_overlap),
            tp_overlap: self.tp_overlap.unwrap_or(p.tp_overlap),
            pp_overlap: self.pp_overlap.unwrap_or(p.pp_overlap),
            cross_entropy: self.cross_entropy.unwrap_or(p.cross_entropy),
            elementwise: self.elementwise.unwrap_or(p.elementwise),
            cp_comm: self.cp_comm.unwrap_or(p.cp_comm),
            stage_split: self.stage_split.unwrap_or(p.stage_split),
            sharding: self.sharding.unwrap_or(p.sharding),
            precision: self.precision.unwrap_or(p.precision),
        }
    }

    /// Changes of `other` laid over this stack (a named preset replaces the base and its
    /// changes; each set field replaces this one's).
    pub fn overlaid(&self, other: &Stack) -> Stack {
        let base = if other.preset.is_some() {
            Stack::preset(other.base())
        } else {
            self.clone()
        };
        Stack {
            preset: base.preset,
            attention: other.attention.or(base.attention),
            sequence_parallel: other.sequence_parallel.or(base.sequence_parallel),
            grad_reduce: other.grad_reduce.or(base.grad_reduce),
            dp_overlap: other.dp_overlap.or(base.dp_overlap),
            tp_overlap: other.tp_overlap.or(base.tp_overlap),
            pp_overlap: other.pp_overlap.or(base.pp_overlap),
            cross_entropy: other.cross_entropy.or(base.cross_entropy),
            elementwise: other.elementwise.or(base.elementwise),
            cp_comm: other.cp_comm.or(base.cp_comm),
            stage_split: other.stage_split.or(base.stage_split),
            sharding: other.sharding.or(base.sharding),
            precision: other.precision.or(base.precision),
        }
    }

    /// `base` (the hardware's or a calibration's kernel efficiencies) with this stack's choices
    /// written in. Overlap switched on keeps `base`'s fitted share (or the generic default
    /// where `base` has none); switched off sets it to zero.
    pub fn apply(&self, base: &EfficiencyParams) -> EfficiencyParams {
        self.settings().apply(base)
    }

    /// One line naming the preset and the settings changed from it, e.g.
    /// "torchtitan-fsdp2 (attention unfused, grad-reduce bf16)", spelled as the command-line flags.
    pub fn label(&self) -> String {
        let changed: Vec<String> = self
            .settings()
            .changed_from(&self.base().settings())
            // Spelled as the flags are (`cp-comm all-to-all`), so the label can be pasted
            // back as options; JSON's `settings` keep the snake_case names.
            .map(|(name, value)| format!("{} {}", name.replace('_', "-"), value.replace('_', "-")))
            .collect();
        if changed.is_empty() {
            self.base().name().to_string()
        } else {
            format!("{} ({})", self.base().name(), changed.join(", "))
        }
    }

    /// The stack as JSON outputs write it: the preset, the label and every resolved setting.
    pub fn to_json(&self) -> StackJson {
        StackJson {
            preset: self.base().name(),
            label: self.label(),
            settings: self.settings().into(),
        }
    }
}

impl Stack {
    /// The stack that states `e`'s choices: `hint` (or, without one, the preset needing the
    /// fewest changes) with the settings that differ from it.
    pub fn describing(e: &EfficiencyParams, hint: Option<StackPreset>) -> Stack {
        let want = StackSettings::of(e);
        let pick = hint.unwrap_or_else(|| {
            StackPreset::ALL
                .into_iter()
                .min_by_key(|p| want.changed_from(&p.settings()).count())
                .unwrap_or(StackPreset::MegatronCore)
        });
        let p = pick.settings();
        Stack {
            preset: Some(pick),
            attention: (want.attention != p.attention).then_some(want.attention),
            sequence_parallel: (want.sequence_parallel != p.sequence_parallel)
                .then_some(want.sequence_parallel),
            grad_reduce: (want.grad_reduce != p.grad_reduce).then_some(want.grad_reduce),
            dp_overlap: (want.dp_overlap != p.dp_overlap).then_some(want.dp_overlap),
            tp_overlap: (want.tp_overlap != p.tp_overlap).then_some(want.tp_overlap),
            pp_overlap: (want.pp_overlap != p.pp_overlap).then_some(want.pp_overlap),
            cross_entropy: (want.cross_entropy != p.cross_entropy).then_some(want.cross_entropy),
            elementwise: (want.elementwise != p.elementwise).then_some(want.elementwise),
            cp_comm: (want.cp_comm != p.cp_comm).then_some(want.cp_comm),
            stage_split: (want.stage_split != p.stage_split).then_some(want.stage_split),
            sharding: (want.sharding != p.sharding).then_some(want.sharding),
            precision: (want.precision != p.precision).then_some(want.precision),
        }
    }
}

/// Why the stack of `e` cannot run on `hw`, if it cannot (FP8 on a GPU without FP8 tensor
/// cores).
pub fn hardware_problem(hw: &super::HardwareProfile, e: &EfficiencyParams) -> Option<String> {
    (e.precision == Precision::Fp8 && hw.fp8_peak_flops <= 0.0).then(|| {
        format!(
            "precision fp8: hardware '{}' has no FP8 peak (fp8_peak_flops); use bf16",
            hw.name
        )
    })
}

fn on_off(b: bool) -> &'static str {
    if b { "on" } else { "off" }
}

impl GradReduce {
    /// "fp32" or "bf16".
    pub fn name(self) -> &'static str {
        match self {
            GradReduce::Fp32 => "fp32",
            GradReduce::Bf16 => "bf16",
        }
    }
}

impl StackSettings {
    /// Every setting as (name, value word), in a fixed order: what labels and JSON print.
    pub fn words(&self) -> [(&'static str, &'static str); 12] {
        [
            ("attention", self.attention.name()),
            ("sequence_parallel", on_off(self.sequence_parallel)),
            ("grad_reduce", self.grad_reduce.name()),
            ("dp_overlap", on_off(self.dp_overlap)),
            ("tp_overlap", on_off(self.tp_overlap)),
            ("pp_overlap", on_off(self.pp_overlap)),
            ("cross_entropy", self.cross_entropy.name()),
            ("elementwise", self.elementwise.name()),
            ("cp_comm", self.cp_comm.name()),
            ("stage_split", self.stage_split.name()),
            ("sharding", self.sharding.name()),
            ("precision", self.precision.name()),
        ]
    }

    /// The settings of `self` that differ from `base`'s, as (name, value word).
    pub fn changed_from(
        &self,
        base: &StackSettings,
    ) -> impl Iterator<Item = (&'static str, &'static str)> {
        self.words()
            .into_iter()
            .zip(base.words())
            .filter(|(a, b)| a != b)
            .map(|(a, _)| a)
    }

    /// The choices `e` carries (the inverse of [`StackSettings::apply`]).
    pub fn of(e: &EfficiencyParams) -> Self {
        Self {
            attention: e.attention,
            sequence_parallel: e.sequence_parallel,
            grad_reduce: if e.grad_bytes >= 3.0 {
                GradReduce::Fp32
            } else {
                GradReduce::Bf16
            },
            dp_overlap: e.grad_reduce_overlap > 0.0,
            tp_overlap: e.tp_overlap > 0.0,
            pp_overlap: e.pp_overlap,
            cross_entropy: e.cross_entropy,
            elementwise: e.elementwise,
            cp_comm: e.cp_comm,
            stage_split: e.stage_split,
            sharding: e.sharding,
            precision: e.precision,
        }
    }

    /// `base` with these choices written in (see [`Stack::apply`]).
    pub fn apply(&self, base: &EfficiencyParams) -> EfficiencyParams {
        let generic = EfficiencyParams::default();
        let mut e = base.clone();
        e.attention = self.attention;
        e.sequence_parallel = self.sequence_parallel;
        e.grad_bytes = self.grad_reduce.bytes();
        e.grad_reduce_overlap = if self.dp_overlap {
            if base.grad_reduce_overlap > 0.0 {
                base.grad_reduce_overlap
            } else {
                generic.grad_reduce_overlap
            }
        } else {
            0.0
        };
        // TP communication overlaps its GEMMs only with sequence parallelism: Megatron's
        // --tp-comm-overlap asserts --sequence-parallel, and torchtitan's async TP runs on its
        // sequence-parallel plan.
        e.tp_overlap = if self.tp_overlap && self.sequence_parallel {
            if base.tp_overlap > 0.0 {
                base.tp_overlap
            } else {
                generic.tp_overlap
            }
        } else {
            0.0
        };
        e.pp_overlap = self.pp_overlap;
        e.cross_entropy = self.cross_entropy;
        e.elementwise = self.elementwise;
        e.cp_comm = self.cp_comm;
        e.stage_split = self.stage_split;
        e.sharding = self.sharding;
        e.precision = self.precision;
        e
    }
}

/// [`StackSettings`] as JSON writes them: words, never Rust enum names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StackSettingsJson {
    /// "fused" or "unfused".
    pub attention: &'static str,
    /// Sequence parallelism with TP.
    pub sequence_parallel: bool,
    /// "fp32" or "bf16".
    pub grad_reduce: &'static str,
    /// DP gradient reduction overlapped with the backward.
    pub dp_overlap: bool,
    /// TP communication overlapped with GEMMs.
    pub tp_overlap: bool,
    /// Interleaved pipeline transfers overlapped with compute.
    pub pp_overlap: bool,
    /// "fused", "vocab_parallel" or "pytorch".
    pub cross_entropy: &'static str,
    /// "fused" or "eager".
    pub elementwise: &'static str,
    /// "ring", "all_gather" or "all_to_all".
    pub cp_comm: &'static str,
    /// "ends", "balanced" or "greedy".
    pub stage_split: &'static str,
    /// "deepspeed", "fsdp1", "fsdp2" or "hsdp".
    pub sharding: &'static str,
    /// "bf16" or "fp8".
    pub precision: &'static str,
}

impl From<StackSettings> for StackSettingsJson {
    fn from(s: StackSettings) -> Self {
        Self {
            attention: s.attention.name(),
            sequence_parallel: s.sequence_parallel,
            grad_reduce: s.grad_reduce.name(),
            dp_overlap: s.dp_overlap,
            tp_overlap: s.tp_overlap,
            pp_overlap: s.pp_overlap,
            cross_entropy: s.cross_entropy.name(),
            elementwise: s.elementwise.name(),
            cp_comm: s.cp_comm.name(),
            stage_split: s.stage_split.name(),
            sharding: s.sharding.name(),
            precision: s.precision.name(),
        }
    }
}

/// The `stack` object of JSON outputs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StackJson {
    /// Preset name.
    pub preset: &'static str,
    /// Preset and changed settings, one line.
    pub label: String,
    /// Every resolved setting.
    pub settings: StackSettingsJson,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_preset_splits_uneven_stages_its_own_way_by_default() {
        for p in StackPreset::ALL {
            assert_eq!(p.settings().stage_split, p.stage_splits()[0], "{p}");
        }
    }

    #[test]
    fn each_preset_searches_only_the_checkpointing_its_framework_has() {
        for p in StackPreset::ALL {
            let r = p.recompute_policies();
            assert!(
                r.contains(&Recompute::None) && r.contains(&Recompute::Full),
                "{p}"
            );
            assert_eq!(
                r.contains(&Recompute::Op),
                p == StackPreset::TorchtitanFsdp2,
                "{p}: op-level is torchtitan's"
            );
            assert_eq!(
                r.contains(&Recompute::Selective),
                matches!(p, StackPreset::MegatronCore | StackPreset::Nemo),
                "{p}: Megatron's selective recompute"
            );
        }
    }

    #[test]
    fn each_preset_names_its_default_zero_stage() {
        let zero: Vec<(&str, u8)> = StackPreset::ALL
            .into_iter()
            .map(|p| (p.name(), p.default_zero()))
            .collect();
        for (name, z) in &zero {
            let want = match *name {
                "megatron-lm-2021" | "megatron-lm-2021-local" => 0,
                "megatron-core" | "nemo" => 1,
                _ => 3,
            };
            assert_eq!(*z, want, "{name}");
        }
        assert_eq!(zero.len(), StackPreset::ALL.len());
    }

    #[test]
    fn presets_round_trip_by_name_and_default_is_megatron_core() {
        for p in StackPreset::ALL {
            assert_eq!(StackPreset::parse(p.name()), Some(p));
            let ron = ron::to_string(&p).expect("serialises");
            assert_eq!(ron::from_str::<StackPreset>(&ron).expect("reads back"), p);
        }
        assert_eq!(Stack::default().base(), StackPreset::MegatronCore);
        // The default stack leaves the default efficiency parameters as they are.
        let e = EfficiencyParams::default();
        assert_eq!(Stack::default().apply(&e), e);
    }

    #[test]
    fn changes_override_the_preset_and_show_in_the_label() {
        let s = Stack {
            preset: Some(StackPreset::TorchtitanFsdp2),
            grad_reduce: Some(GradReduce::Bf16),
            ..Stack::default()
        };
        let e = s.apply(&EfficiencyParams::default());
        assert_eq!(e.grad_bytes, 2.0);
        assert_eq!(e.sharding, Sharding::Fsdp2);
        assert_eq!(e.tp_overlap, 0.0);
        assert_eq!(s.label(), "torchtitan-fsdp2 (grad-reduce bf16)");
        // A 2021 stack turns overlap off; switching it back on restores the fitted share.
        let base = EfficiencyParams {
            tp_overlap: 0.7,
            ..EfficiencyParams::default()
        };
        let old = Stack::preset(StackPreset::MegatronLm2021Local);
        assert_eq!(old.apply(&base).grad_reduce_overlap, 0.0);
        assert_eq!(old.apply(&base).attention, AttentionKind::Unfused);
        let on = old.overlaid(&Stack {
            tp_overlap: Some(true),
            sequence_parallel: Some(true),
            ..Stack::default()
        });
        assert_eq!(on.apply(&base).tp_overlap, 0.7);
        assert_eq!(on.base(), StackPreset::MegatronLm2021Local);
        // Without sequence parallelism TP communication does not overlap (Megatron's
        // --tp-comm-overlap requires --sequence-parallel), asked for or not.
        let without_sp = old.overlaid(&Stack {
            tp_overlap: Some(true),
            ..Stack::default()
        });
        assert_eq!(without_sp.apply(&base).tp_overlap, 0.0);
    }

    #[test]
    fn describing_recovers_the_stack_that_was_applied() {
        let base = EfficiencyParams::default();
        for p in StackPreset::ALL {
            let e = Stack::preset(p).apply(&base);
            let d = Stack::describing(&e, Some(p));
            assert_eq!(d, Stack::preset(p), "{p}");
            // Without a hint some preset with the same settings is found, with no changes.
            let any = Stack::describing(&e, None);
            assert_eq!(any.settings(), Stack::preset(p).settings(), "{p}");
        }
    }
}
