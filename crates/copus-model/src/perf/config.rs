//! Parallel configurations: (DP, TP, PP, micro-batch, ZeRO, recompute) and their enumeration.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Activation recomputation policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Recompute {
    /// Keep all activations.
    None,
    /// Recompute attention internals only (Korthikanti et al. selective recompute).
    Selective,
    /// Recompute every layer in the backward pass.
    Full,
    /// Op-level selective checkpointing (torchtitan's `selective op` policy): keep the
    /// attention output and every other GEMM's output, recompute the other GEMMs and the
    /// memory-bound ops from them.
    Op,
}

impl Recompute {
    /// Every policy, in the order searches list them.
    pub const ALL: [Recompute; 4] = [
        Recompute::None,
        Recompute::Selective,
        Recompute::Op,
        Recompute::Full,
    ];

    /// The policy of a name as [`fmt::Display`] writes it.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.to_string() == name)
    }
}

impl Recompute {
    /// The policy's name as the CLI, sessions and JSON write it ("none", "selective", "op",
    /// "full").
    pub fn name(self) -> &'static str {
        match self {
            Recompute::None => "none",
            Recompute::Selective => "selective",
            Recompute::Full => "full",
            Recompute::Op => "op",
        }
    }
}

impl fmt::Display for Recompute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One 3D-parallel layout with its micro-batch and memory options.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ParallelConfig {
    /// Data-parallel degree.
    pub dp: u32,
    /// Tensor-parallel degree.
    pub tp: u32,
    /// Pipeline-parallel degree.
    pub pp: u32,
    /// Micro-batch size in samples.
    pub mbs: u32,
    /// ZeRO stage 0–3.
    pub zero: u8,
    /// Activation recomputation.
    pub recompute: Recompute,
    /// Virtual pipeline stages per GPU (1 = plain 1F1B; > 1 = interleaved).
    pub vpp: u32,
    /// Context-parallel degree: each sequence split over `cp` GPUs (ring attention passes the
    /// keys and values around them); 1 = none.
    #[serde(default = "one")]
    pub cp: u32,
    /// Expert-parallel degree of a mixture-of-experts model: each MoE layer's experts are
    /// split over `ep` ranks of the data-parallel (× context-parallel) group, which exchange
    /// tokens by all-to-all; 1 = every rank holds every expert (always 1 for a dense model).
    #[serde(default = "one")]
    pub ep: u32,
}

fn one() -> u32 {
    1
}

impl ParallelConfig {
    /// Total GPUs the layout occupies (dp·cp·tp·pp), saturating (a layout of more than
    /// `u32::MAX` GPUs is refused by validation before it is costed).
    pub fn gpus(&self) -> u32 {
        self.dp
            .saturating_mul(self.cp.max(1))
            .saturating_mul(self.tp)
            .saturating_mul(self.pp)
    }

    /// Short label of the layout, e.g. "DP4·TP8·PP1" ("DP2·CP2·TP8·PP1" with context
    /// parallelism).
    pub fn layout_label(&self) -> String {
        layout_label_cp(self.dp, self.cp, self.tp, self.pp)
    }

    /// Ranks the gradients are reduced and ZeRO states sharded over (dp·cp: context-parallel
    /// ranks hold the same weights).
    pub fn grad_ranks(&self) -> u32 {
        self.dp.saturating_mul(self.cp.max(1))
    }
}

/// A layout: the parallel degrees of one heatmap row (dp·cp·tp·pp = the cluster's GPUs),
/// without the per-configuration options.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Layout {
    /// Data-parallel degree.
    pub dp: u32,
    /// Tensor-parallel degree.
    pub tp: u32,
    /// Pipeline-parallel degree.
    pub pp: u32,
    /// Context-parallel degree (1: none).
    #[serde(default = "one")]
    pub cp: u32,
}

impl Layout {
    /// "DP4·TP8·PP1" ("DP2·CP2·TP8·PP1" with context parallelism).
    pub fn label(&self) -> String {
        layout_label_cp(self.dp, self.cp, self.tp, self.pp)
    }

    /// GPUs the layout occupies (saturating).
    pub fn gpus(&self) -> u32 {
        self.dp
            .saturating_mul(self.cp.max(1))
            .saturating_mul(self.tp)
            .saturating_mul(self.pp)
    }
}

impl From<(u32, u32, u32)> for Layout {
    /// A (dp, tp, pp) layout without context parallelism.
    fn from((dp, tp, pp): (u32, u32, u32)) -> Self {
        Self { dp, tp, pp, cp: 1 }
    }
}

impl From<&ParallelConfig> for Layout {
    fn from(c: &ParallelConfig) -> Self {
        Self {
            dp: c.dp,
            tp: c.tp,
            pp: c.pp,
            cp: c.cp,
        }
    }
}

/// The label of a 3D layout, e.g. "DP4·TP8·PP1": the one place it is formatted.
pub fn layout_label(dp: u32, tp: u32, pp: u32) -> String {
    layout_label_cp(dp, 1, tp, pp)
}

/// The label of a layout with context parallelism: "DP2·CP2·TP8·PP1", and as
/// [`layout_label`] when `cp` is 1.
pub fn layout_label_cp(dp: u32, cp: u32, tp: u32, pp: u32) -> String {
    if cp > 1 {
        format!("DP{dp}·CP{cp}·TP{tp}·PP{pp}")
    } else {
        format!("DP{dp}·TP{tp}·PP{pp}")
    }
}

/// A configuration as JSON output writes it: the degrees and options as numbers and
/// snake_case words (never Rust enum names), with the layout label beside them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConfigJson {
    /// "DP4·TP8·PP1".
    pub layout: String,
    /// Data-parallel degree.
    pub dp: u32,
    /// Tensor-parallel degree.
    pub tp: u32,
    /// Pipeline-parallel degree.
    pub pp: u32,
    /// Micro-batch size, samples.
    pub mbs: u32,
    /// ZeRO stage 0–3.
    pub zero: u8,
    /// "none", "selective", "op" or "full".
    pub recompute: String,
    /// Virtual pipeline stages per GPU.
    pub vpp: u32,
    /// Context-parallel degree.
    pub cp: u32,
    /// Expert-parallel degree (1 without expert parallelism).
    pub ep: u32,
}

impl ConfigJson {
    /// The configuration as one label, as [`ParallelConfig`]'s `Display` writes it:
    /// "DP8·TP1·PP2 mbs1 Z1 rc:full v4 EP8".
    pub fn label(&self) -> String {
        let options = options_text(self.mbs, self.zero, &self.recompute, self.vpp, self.ep);
        format!("{} {options}", self.layout)
    }
}

/// "mbs2 Z1 rc:none v4 EP8": the options of a configuration, the virtual stages and the
/// expert-parallel degree only where above 1.
fn options_text(mbs: u32, zero: u8, recompute: &dyn fmt::Display, vpp: u32, ep: u32) -> String {
    let mut s = format!("mbs{mbs} Z{zero} rc:{recompute}");
    if vpp > 1 {
        s.push_str(&format!(" v{vpp}"));
    }
    if ep > 1 {
        s.push_str(&format!(" EP{ep}"));
    }
    s
}

/// Serialize a configuration as [`ConfigJson`]; for `#[serde(serialize_with = ...)]` on
/// fields of JSON outputs that hold a [`ParallelConfig`].
pub fn serialize_as_json<S: serde::Serializer>(
    c: &ParallelConfig,
    s: S,
) -> Result<S::Ok, S::Error> {
    serde::Serialize::serialize(&ConfigJson::from(c), s)
}

impl From<&ParallelConfig> for ConfigJson {
    fn from(c: &ParallelConfig) -> Self {
        Self {
            layout: c.layout_label(),
            dp: c.dp,
            tp: c.tp,
            pp: c.pp,
            mbs: c.mbs,
            zero: c.zero,
            recompute: c.recompute.to_string(),
            vpp: c.vpp,
            cp: c.cp,
            ep: c.ep,
        }
    }
}

impl ParallelConfig {
    /// The options beside the layout, e.g. "mbs2 Z1 rc:none v4 EP8" (the virtual stages and
    /// the expert-parallel degree only where they are above 1).
    pub fn options_label(&self) -> String {
        options_text(self.mbs, self.zero, &self.recompute, self.vpp, self.ep)
    }
}

impl fmt::Display for ParallelConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.layout_label(), self.options_label())
    }
}
