//! Hardware profiles: peak compute, memory, the links collectives run over, and the kernel
//! efficiencies the performance model uses on that hardware. Profiles live as RON under
//! `assets/hardware/`; each names the sources of its figures (docs/MODEL.md).

use super::EfficiencyParams;
use serde::{Deserialize, Serialize};

/// One accelerator type and the links around it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HardwareProfile {
    /// Short name used on the CLI and in sessions (e.g. "h100-sxm").
    pub name: String,
    /// Dense BF16 peak per GPU, FLOP/s.
    pub peak_flops: f64,
    /// Dense FP8 peak per GPU, FLOP/s (0: the GPU has no FP8 tensor cores).
    #[serde(default)]
    pub fp8_peak_flops: f64,
    /// HBM capacity per GPU, bytes.
    pub hbm_bytes: f64,
    /// HBM bandwidth per GPU, bytes/s.
    pub mem_bw_bytes_per_s: f64,
    /// Scale-up (NVLink / Infinity Fabric) bandwidth per GPU per direction, bytes/s.
    pub intra_bw_bytes_per_s: f64,
    /// Scale-out (InfiniBand / Ethernet) bandwidth per GPU per direction, bytes/s.
    pub inter_bw_bytes_per_s: f64,
    /// GPUs that share the fast scale-up domain (8 for an HGX node, 4 for an MI210 hive).
    pub scale_up_domain: u32,
    /// Collective latency on the scale-up link, seconds.
    pub intra_latency_s: f64,
    /// Collective latency on the scale-out link, seconds.
    pub inter_latency_s: f64,
    /// Achievable fraction of scale-up bandwidth.
    pub intra_link_eff: f64,
    /// Achievable fraction of scale-out bandwidth.
    pub inter_link_eff: f64,
    /// HBM not available to the model (CUDA context, NCCL buffers, allocator fragmentation),
    /// bytes.
    #[serde(default = "default_reserved")]
    pub reserved_bytes: f64,
    /// Kernel efficiencies, overlap and stack defaults on this hardware (fitted on published
    /// measurements, docs/MODEL.md); absent fields take the generic defaults.
    #[serde(default)]
    pub efficiency: EfficiencyParams,
    /// Where the figures come from.
    #[serde(default)]
    pub source: String,
}

fn default_reserved() -> f64 {
    4e9
}

impl HardwareProfile {
    /// GPUs that share the fast link in a node of `gpus_per_node` (the smaller of the node and
    /// the scale-up domain: an MI210 node of 8 has two hives of 4).
    pub fn fast_domain(&self, gpus_per_node: u32) -> u32 {
        self.scale_up_domain.min(gpus_per_node).max(1)
    }
}
