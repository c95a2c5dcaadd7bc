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
        format!("DP{}·TP{}·PP{}", self.dp, self.tp, self.pp)
    }
}

impl fmt::Display for ParallelConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "DP{}·TP{}·PP{} mbs{} Z{} rc:{}",
            self.dp, self.tp, self.pp, self.mbs, self.zero, self.recompute
        )?;
        if self.vpp > 1 {
            write!(f, " v{}", self.vpp)?;
        }
        Ok(())
    }
}
