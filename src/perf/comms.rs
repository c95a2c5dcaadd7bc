//! Collective and point-to-point communication times (nccl-tests bus-bandwidth model):
//! all-reduce moves 2(n−1)/n·S per rank, reduce-scatter and all-gather (n−1)/n·S. Groups that
//! span several scale-up domains run hierarchically: the fast link inside a domain, and the
//! scale-out link (one NIC per GPU) for the 1/k share each of the k domain members carries.

use super::{EfficiencyParams, HardwareProfile};

/// One kind of link as the model sees it: achievable bandwidth and latency.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Link {
    /// Achievable bandwidth per GPU per direction, bytes/s.
    pub bw: f64,
    /// Latency of one collective phase, seconds.
    pub latency: f64,
}

/// The scale-up (intra-domain) and scale-out links of `hw`, with the link efficiencies of the
/// profile scaled by the calibration knobs of `eff`.
pub fn links(hw: &HardwareProfile, eff: &EfficiencyParams) -> (Link, Link) {
    let intra = Link {
        bw: hw.intra_bw_bytes_per_s * (hw.intra_link_eff * eff.intra_link_scale).min(1.0),
        latency: hw.intra_latency_s,
    };
    let inter = Link {
        bw: hw.inter_bw_bytes_per_s * (hw.inter_link_eff * eff.inter_link_scale).min(1.0),
        latency: hw.inter_latency_s,
    };
    (intra, inter)
}

/// Where a communication group's ranks sit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Placement {
    /// Ranks in the group.
    pub size: u32,
    /// Ranks of the group inside one fast (scale-up) domain.
    pub per_domain: u32,
}

impl Placement {
    /// A group of `size` ranks whose members are `stride` global ranks apart, in domains of
    /// `domain` GPUs (Megatron order: TP fastest, then DP, then PP).
    pub fn strided(size: u32, stride: u32, domain: u32) -> Self {
        let per_domain = if stride >= domain {
            1
        } else {
            (domain / stride.max(1)).clamp(1, size.max(1))
        };
        Self {
            size: size.max(1),
            per_domain,
        }
    }
}

/// Seconds of a reduce-scatter (or all-gather) of `bytes` (the full, unsharded buffer) over
/// the group `g`.
pub fn reduce_scatter(bytes: f64, g: Placement, intra: Link, inter: Link) -> f64 {
    if g.size <= 1 || bytes <= 0.0 {
        return 0.0;
    }
    let k = g.per_domain.min(g.size) as f64;
    let domains = g.size as f64 / k;
    let mut t = 0.0;
    if k > 1.0 {
        t += (k - 1.0) / k * bytes / intra.bw + intra.latency;
    }
    if domains > 1.0 {
        t += (domains - 1.0) / domains * (bytes / k) / inter.bw + inter.latency;
    }
    t
}

/// Seconds of an all-reduce of `bytes` over the group `g` (reduce-scatter + all-gather).
pub fn all_reduce(bytes: f64, g: Placement, intra: Link, inter: Link) -> f64 {
    2.0 * reduce_scatter(bytes, g, intra, inter)
}

/// Seconds of a point-to-point transfer of `bytes` over `link`.
pub fn p2p(bytes: f64, link: Link) -> f64 {
    bytes / link.bw + link.latency
}

#[cfg(test)]
mod tests {
    use super::*;

    const FAST: Link = Link {
        bw: 300e9,
        latency: 10e-6,
    };
    const SLOW: Link = Link {
        bw: 45e9,
        latency: 20e-6,
    };

    #[test]
    fn flat_groups_follow_the_bus_bandwidth_formula() {
        let s = 1e9;
        for n in [2u32, 4, 8] {
            let g = Placement::strided(n, 1, 8);
            let want = 2.0 * (n as f64 - 1.0) / n as f64 * s / FAST.bw + 2.0 * FAST.latency;
            assert!((all_reduce(s, g, FAST, SLOW) - want).abs() < 1e-12);
        }
        // One rank per node: everything on the scale-out link.
        let g = Placement::strided(4, 8, 8);
        let want = 0.75 * s / SLOW.bw + SLOW.latency;
        assert!((reduce_scatter(s, g, FAST, SLOW) - want).abs() < 1e-12);
    }

    #[test]
    fn hierarchy_spreads_inter_node_traffic_over_the_domain() {
        let s = 1e9;
        let one_per_node = reduce_scatter(s, Placement::strided(16, 8, 8), FAST, SLOW);
        let eight_per_node = reduce_scatter(s, Placement::strided(128, 1, 8), FAST, SLOW);
        assert!(eight_per_node < one_per_node / 3.0);
        assert_eq!(all_reduce(s, Placement::strided(1, 1, 8), FAST, SLOW), 0.0);
    }
}
