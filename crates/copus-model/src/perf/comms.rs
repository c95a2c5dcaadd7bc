//! Collective and point-to-point communication times (nccl-tests bus-bandwidth model):
//! all-reduce moves 2(n−1)/n·S per rank, reduce-scatter and all-gather (n−1)/n·S. Groups that
//! span several scale-up domains run hierarchically: the fast link inside a domain, and the
//! scale-out link (one NIC per GPU) for the 1/k share each of the k domain members carries.
//!
//! Two costs grow with the group size, as they do on real clusters: a ring phase over n ranks
//! takes n − 1 steps, each paying a hop latency (the inter-node one for steps that cross
//! domains, NCCL's own latency model), and the bus bandwidth falls when the chunk each rank
//! moves per step, S/n, is small: `bw · c/(c + chunk_half)` for a chunk of c bytes (the
//! nccl-tests bandwidth-against-size curve).

use super::{EfficiencyParams, HardwareProfile};

/// One kind of link as the model sees it: achievable bandwidth and latencies.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Link {
    /// Achievable bandwidth per GPU per direction, bytes/s.
    pub bw: f64,
    /// Fixed latency of one collective phase, seconds.
    pub latency: f64,
    /// Latency of one ring step over this link, seconds.
    pub hop: f64,
}

/// The network a collective runs over: both links and the small-chunk bandwidth fall-off.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Net {
    /// Scale-up (intra-domain) link.
    pub intra: Link,
    /// Scale-out link.
    pub inter: Link,
    /// Per-rank chunk size at which a ring reaches half its bus bandwidth, bytes.
    pub chunk_half_bytes: f64,
}

/// The scale-up and scale-out links of `hw`, with the link efficiencies of the profile
/// scaled by the calibration knobs of `eff`.
pub fn net(hw: &HardwareProfile, eff: &EfficiencyParams) -> Net {
    Net {
        intra: Link {
            bw: hw.intra_bw_bytes_per_s * (hw.intra_link_eff * eff.intra_link_scale).min(1.0),
            latency: hw.intra_latency_s * eff.intra_latency_scale,
            hop: eff.hop_latency_intra_s,
        },
        inter: Link {
            bw: hw.inter_bw_bytes_per_s * (hw.inter_link_eff * eff.inter_link_scale).min(1.0),
            latency: hw.inter_latency_s * eff.inter_latency_scale,
            hop: eff.hop_latency_inter_s,
        },
        chunk_half_bytes: eff.coll_chunk_half_bytes,
    }
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

    /// Scale-up domains the group spans.
    pub fn domains(&self) -> f64 {
        self.size as f64 / self.per_domain.clamp(1, self.size.max(1)) as f64
    }
}

/// Seconds of a reduce-scatter (or all-gather) of `bytes` (the full, unsharded buffer) over
/// the group `g`.
pub fn reduce_scatter(bytes: f64, g: Placement, net: &Net) -> f64 {
    if g.size <= 1 || bytes <= 0.0 {
        return 0.0;
    }
    let n = g.size as f64;
    let k = g.per_domain.min(g.size) as f64;
    let domains = g.domains();
    let chunk = bytes / n;
    let bus = chunk / (chunk + net.chunk_half_bytes.max(0.0));
    let mut t = 0.0;
    if k > 1.0 {
        t += (k - 1.0) / k * bytes / (net.intra.bw * bus);
    }
    if domains > 1.0 {
        t += (domains - 1.0) / domains * (bytes / k) / (net.inter.bw * bus);
        t += net.inter.latency;
    } else {
        t += net.intra.latency;
    }
    t + (n - domains) * net.intra.hop + (domains - 1.0) * net.inter.hop
}

/// Seconds of an all-reduce of `bytes` over the group `g`: NCCL's choice of the faster of
/// its two algorithms, the ring (a reduce-scatter then an all-gather, [`ring_all_reduce`])
/// and, for a group spanning several scale-up domains, the tree ([`tree_all_reduce`]).
pub fn all_reduce(bytes: f64, g: Placement, net: &Net) -> f64 {
    let ring = ring_all_reduce(bytes, g, net);
    if g.domains() > 1.0 {
        ring.min(tree_all_reduce(bytes, g, net))
    } else {
        ring
    }
}

/// Seconds of a ring all-reduce: a reduce-scatter and an all-gather of `bytes`.
pub fn ring_all_reduce(bytes: f64, g: Placement, net: &Net) -> f64 {
    2.0 * reduce_scatter(bytes, g, net)
}

/// Seconds of NCCL's tree all-reduce of `bytes` over a group spanning several scale-up
/// domains: each domain's `k` members reduce along a chain over the scale-up link, the domains
/// reduce up a binary tree and broadcast back down over the scale-out link, and the chain
/// broadcasts, all pipelined. Each of the `k` members drives one channel over its own NIC, so
/// a domain moves the whole buffer up and down at `k` NICs' bandwidth: `d/(d−1)` times the
/// ring's traffic for `d` domains, but in `2·(k − 1 + ⌈log2 d⌉)` steps instead of the ring's
/// `2·(n − 1)`, and in chunks of `bytes/k` per channel instead of the ring's `bytes/n` per
/// rank — the faster choice for small buffers over many ranks (NCCL's own tuner picks it
/// there; the double binary tree of NCCL 2.4+). The chain's and the tree's times are added,
/// as the ring's phases are in [`reduce_scatter`], so the tree never wins on bandwidth alone.
pub fn tree_all_reduce(bytes: f64, g: Placement, net: &Net) -> f64 {
    if g.size <= 1 || bytes <= 0.0 {
        return 0.0;
    }
    let k = g.per_domain.clamp(1, g.size) as f64;
    let domains = g.domains();
    let chunk = bytes / k;
    let bus = chunk / (chunk + net.chunk_half_bytes.max(0.0));
    let intra = if k > 1.0 {
        2.0 * bytes / (net.intra.bw * bus)
    } else {
        0.0
    };
    let inter = 2.0 * (bytes / k) / (net.inter.bw * bus);
    let steps = 2.0 * ((k - 1.0) * net.intra.hop + domains.log2().ceil() * net.inter.hop);
    intra + inter + steps + net.inter.latency
}

/// Seconds of an all-to-all over the group `g` in which each rank sends `bytes` in all,
/// spread evenly over the group's ranks (itself included): (n−1)/n of it leaves the rank,
/// the share bound for other domains over the scale-out link and the rest over the scale-up
/// link, both at once (NCCL posts every send of an all-to-all together).
pub fn all_to_all(bytes: f64, g: Placement, net: &Net) -> f64 {
    if g.size <= 1 || bytes <= 0.0 {
        return 0.0;
    }
    let n = g.size as f64;
    let k = g.per_domain.clamp(1, g.size) as f64;
    let intra = (k - 1.0) / n * bytes / net.intra.bw;
    let inter = (n - k) / n * bytes / net.inter.bw;
    let latency = if k < n {
        net.inter.latency
    } else {
        net.intra.latency
    };
    intra.max(inter) + latency
}

/// Seconds of a point-to-point transfer of `bytes` over `link`.
pub fn p2p(bytes: f64, link: Link) -> f64 {
    bytes / link.bw + link.latency
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_to_all_inside_a_domain_and_across() {
        // 8 ranks in one domain: 7/8 of the bytes over the fast link.
        let inside = Placement::strided(8, 1, 8);
        let t = all_to_all(8e9, inside, &NET);
        assert!((t - (7.0 / 8.0 * 8e9 / NET.intra.bw + NET.intra.latency)).abs() < 1e-12);
        // 16 ranks over two domains: half the bytes cross, over the slower link.
        let across = Placement::strided(16, 1, 8);
        let t = all_to_all(8e9, across, &NET);
        let want = (8.0 / 16.0 * 8e9 / NET.inter.bw).max(7.0 / 16.0 * 8e9 / NET.intra.bw)
            + NET.inter.latency;
        assert!((t - want).abs() < 1e-12, "{t} vs {want}");
        assert_eq!(all_to_all(8e9, Placement::strided(1, 1, 8), &NET), 0.0);
    }

    const NET: Net = Net {
        intra: Link {
            bw: 300e9,
            latency: 10e-6,
            hop: 0.0,
        },
        inter: Link {
            bw: 45e9,
            latency: 20e-6,
            hop: 0.0,
        },
        chunk_half_bytes: 0.0,
    };

    #[test]
    fn flat_groups_follow_the_bus_bandwidth_formula() {
        let s = 1e9;
        for n in [2u32, 4, 8] {
            let g = Placement::strided(n, 1, 8);
            let want =
                2.0 * (n as f64 - 1.0) / n as f64 * s / NET.intra.bw + 2.0 * NET.intra.latency;
            assert!((all_reduce(s, g, &NET) - want).abs() < 1e-12);
        }
        // One rank per node: everything on the scale-out link.
        let g = Placement::strided(4, 8, 8);
        let want = 0.75 * s / NET.inter.bw + NET.inter.latency;
        assert!((reduce_scatter(s, g, &NET) - want).abs() < 1e-12);
    }

    #[test]
    fn hierarchy_spreads_inter_node_traffic_over_the_domain() {
        let s = 1e9;
        let one_per_node = reduce_scatter(s, Placement::strided(16, 8, 8), &NET);
        let eight_per_node = reduce_scatter(s, Placement::strided(128, 1, 8), &NET);
        assert!(eight_per_node < one_per_node / 3.0);
        assert_eq!(all_reduce(s, Placement::strided(1, 1, 8), &NET), 0.0);
    }

    #[test]
    fn all_reduce_takes_the_tree_across_domains_only_where_it_is_faster() {
        // Inside one domain NCCL's tree is no option: always the ring.
        let mut net = NET;
        net.intra.hop = 1e-6;
        net.inter.hop = 10e-6;
        net.chunk_half_bytes = 0.5e6;
        let inside = Placement::strided(8, 1, 8);
        assert_eq!(
            all_reduce(1e6, inside, &net),
            ring_all_reduce(1e6, inside, &net)
        );
        // Large buffers across domains: the ring moves (d−1)/d of the tree's inter-domain
        // traffic, so it stays the choice.
        let across = Placement::strided(32, 1, 8);
        let big = 4e9;
        assert!(ring_all_reduce(big, across, &net) < tree_all_reduce(big, across, &net));
        assert_eq!(
            all_reduce(big, across, &net),
            ring_all_reduce(big, across, &net)
        );
        // A TP all-reduce of 12.6 MB over 4 domains of 8: the ring's 393 KB chunks and 62
        // steps lose to the tree's 1.6 MB chunks and 2·(7 + 2) steps.
        let small = 12.6e6;
        let (k, chunk) = (8.0, small / 8.0);
        let bus = chunk / (chunk + net.chunk_half_bytes);
        let want = 2.0 * small / (net.intra.bw * bus)
            + 2.0 * (small / k) / (net.inter.bw * bus)
            + 2.0 * (7.0 * net.intra.hop + 2.0 * net.inter.hop)
            + net.inter.latency;
        let tree = tree_all_reduce(small, across, &net);
        assert!((tree - want).abs() < 1e-12, "{tree} vs {want}");
        assert!(tree < 0.8 * ring_all_reduce(small, across, &net));
        assert_eq!(all_reduce(small, across, &net), tree);
        // Never slower than either algorithm, and nothing to do for one rank.
        for bytes in [1e3, 1e5, 1e7, 1e9] {
            let t = all_reduce(bytes, across, &net);
            assert!(t <= ring_all_reduce(bytes, across, &net));
            assert!(t <= tree_all_reduce(bytes, across, &net));
        }
        assert_eq!(tree_all_reduce(1e6, Placement::strided(1, 1, 8), &net), 0.0);
    }

    #[test]
    fn ring_steps_and_small_chunks_cost_more_as_the_group_grows() {
        let mut net = NET;
        net.inter.hop = 5e-6;
        net.intra.hop = 1e-6;
        // 64 ranks in 8 domains: 56 intra steps and 7 inter steps.
        let g = Placement::strided(64, 1, 8);
        let with_hops = reduce_scatter(1e9, g, &net) - reduce_scatter(1e9, g, &NET);
        assert!((with_hops - (56.0 * 1e-6 + 7.0 * 5e-6)).abs() < 1e-12);
        // Half-bandwidth chunk: a buffer whose per-rank chunk equals it takes twice as long
        // (latency aside).
        net = NET;
        net.chunk_half_bytes = 1e9 / 64.0;
        let slow = reduce_scatter(1e9, g, &net) - NET.inter.latency;
        let fast = reduce_scatter(1e9, g, &NET) - NET.inter.latency;
        assert!((slow / fast - 2.0).abs() < 1e-9);
        // Per-GPU time of a fixed buffer grows with the group once chunks are small.
        let t = |n: u32| reduce_scatter(1e9, Placement::strided(n, 1, 8), &net);
        assert!(t(1024) > t(256) && t(256) > t(64) * 0.99);
    }
}
