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
}

impl fmt::Display for Recompute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Recompute::None => "none",
            Recompute::Selective => "selective",
            Recompute::Full => "full",
        })
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
}

impl ParallelConfig {
    /// Total GPUs the layout occupies (dp·tp·pp).
    pub fn gpus(&self) -> u32 {
        self.dp * self.tp * self.pp
    }

    /// Short label of the 3D layout, e.g. "DP4·TP8·PP1".
    pub fn layout_label(&self) -> String {
        layout_label(self.dp, self.tp, self.pp)
    }
}

/// The label of a 3D layout, e.g. "DP4·TP8·PP1": the one place it is formatted.
pub fn layout_label(dp: u32, tp: u32, pp: u32) -> String {
    format!("DP{dp}·TP{tp}·PP{pp}")
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
    /// "none", "selective" or "full".
    pub recompute: String,
    /// Virtual pipeline stages per GPU.
    pub vpp: u32,
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
        }
    }
}

impl fmt::Display for ParallelConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} mbs{} Z{} rc:{}",
            self.layout_label(),
            self.mbs,
            self.zero,
            self.recompute
        )?;
        if self.vpp > 1 {
            write!(f, " v{}", self.vpp)?;
        }
        Ok(())
    }
}
