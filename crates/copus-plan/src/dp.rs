//! The optimal joint schedule: dynamic programming over phases × states with per-kind switch
//! costs and a minimum dwell, in O(phases × states) time.
//!
//! Boundary k sits before phase k (k = 0 … n). Two value rows per boundary:
//! - U[k][s]: least time to finish phases < k, running in s, *eligible* to switch at k (the
//!   current segment started at least D phases ago, D the minimum dwell).
//! - F[k][t]: least time to finish phases < k and enter t at k. F[0][t] = 0 (start anywhere);
//!   for k ≥ 1, F[k][t] = min over s ≠ t of U[k][s] + c(kind(s, t)).
//!
//! U[k][s] = min(U[k−1][s] + T[k−1][s], F[k−D][s] + P[k][s] − P[k−D][s]), with T the phase
//! time and P its prefix sum per state (kept as one running row, the ring storing F − P): stay while already eligible, or become eligible exactly
//! D phases after entering. The last segment may be shorter than D (the run ends), so the
//! answer is min over s of U[n][s] and F[k][s] + P[n][s] − P[k][s] for n − D < k < n.
//!
//! F needs a minimum over all predecessors, which naively is O(states²) per boundary. Costs are
//! constant per kind and monotone (Batch ≤ DpResize ≤ Reshard, see
//! [`super::costs::SwitchCosts::effective`]), so
//! F[k][t] = min(L_t + c_batch, G_t + c_dp, A_t + c_reshard) where L_t, G_t and A_t are the
//! least U[k][s], s ≠ t, over t's layout, over t's (tp, pp) group and over all states: a
//! predecessor in t's layout is also counted with the dearer DP or reshard cost, which can
//! only overestimate, and every predecessor is counted with its exact cost in its own group.
//! "s ≠ t" is handled by keeping the two best (value, state) pairs per group. States are
//! visited in layout order, so the layout minima come from one contiguous pass; the (tp, pp)
//! and global minima merge the layouts' pairs; and every state of a layout except the
//! layout's own best gets the same F value, so a row of F is a fill plus one write per layout.
//! Memory: rolling rows of D states, a bit per (boundary, state) for the U choice, and the
//! group minima per boundary for backtracking.

use super::costs::SwitchCosts;
use super::problem::{Problem, Schedule};

#[derive(Debug, Clone, Copy)]
struct Top2 {
    v1: f64,
    i1: u32,
    v2: f64,
    i2: u32,
}

impl Top2 {
    const EMPTY: Top2 = Top2 {
        v1: f64::INFINITY,
        i1: u32::MAX,
        v2: f64::INFINITY,
        i2: u32::MAX,
    };

    #[inline]
    fn push(&mut self, v: f64, i: u32) {
        if v < self.v1 {
            self.v2 = self.v1;
            self.i2 = self.i1;
            self.v1 = v;
            self.i1 = i;
        } else if v < self.v2 {
            self.v2 = v;
            self.i2 = i;
        }
    }

    #[inline]
    fn excluding(&self, t: u32) -> (f64, u32) {
        if self.i1 == t {
            (self.v2, self.i2)
        } else {
            (self.v1, self.i1)
        }
    }
}

/// States in layout order, with the per-state coefficients of the phase time.
struct Prepared {
    /// Permuted position → original state index.
    order: Vec<usize>,
    /// Seconds per step and batch index, in permuted order.
    per_step: Vec<f64>,
    batch_idx: Vec<u32>,
    /// Contiguous range of each layout group and its (tp, pp) group.
    ranges: Vec<(usize, usize, usize)>,
    /// Layout group of each permuted position.
    layout: Vec<u32>,
    n_tp_pp: usize,
}

impl Prepared {
    fn new(p: &Problem) -> Self {
        let mut order: Vec<usize> = (0..p.states.len()).collect();
        order.sort_by_key(|&s| p.layout_of[s]);
        let mut ranges = Vec::with_capacity(p.n_layouts);
        let mut lo = 0;
        for j in 1..=order.len() {
            if j == order.len() || p.layout_of[order[j]] != p.layout_of[order[lo]] {
                ranges.push((lo, j, p.tp_pp_of[order[lo]] as usize));
                lo = j;
            }
        }
        let mut layout = vec![0u32; order.len()];
        for (l, &(lo, hi, _)) in ranges.iter().enumerate() {
            layout[lo..hi].fill(l as u32);
        }
        Self {
            batch_idx: order.iter().map(|&s| p.batch_idx[s]).collect(),
            per_step: order.iter().map(|&s| p.per_step[s]).collect(),
            order,
            ranges,
            layout,
            n_tp_pp: p.n_tp_pp,
        }
    }

    fn n_groups(&self) -> usize {
        self.ranges.len() + self.n_tp_pp + 1
    }

    /// Fill the group minima of `u` (layouts, then (tp, pp) groups, then global) into `g`.
    fn group_minima(&self, u: &[f64], g: &mut [Top2]) {
        g.fill(Top2::EMPTY);
        let (nl, last) = (self.ranges.len(), g.len() - 1);
        for (l, &(lo, hi, tp_pp)) in self.ranges.iter().enumerate() {
            let mut t2 = Top2::EMPTY;
            for (j, &v) in u[lo..hi].iter().enumerate() {
                t2.push(v, (lo + j) as u32);
            }
            g[l] = t2;
            for (v, i) in [(t2.v1, t2.i1), (t2.v2, t2.i2)] {
                g[nl + tp_pp].push(v, i);
                g[last].push(v, i);
            }
        }
    }

    /// Best predecessor of permuted state `t`: (value including the switch cost, state).
    fn best_entry(&self, c: &SwitchCosts, g: &[Top2], t: usize) -> (f64, u32) {
        let l = self.layout[t] as usize;
        let t32 = t as u32;
        let (vl, il) = g[l].excluding(t32);
        let (vg, ig) = g[self.ranges.len() + self.ranges[l].2].excluding(t32);
        let (va, ia) = g[g.len() - 1].excluding(t32);
        let mut best = (vl + c.batch_s, il);
        if vg + c.dp_resize_s < best.0 {
            best = (vg + c.dp_resize_s, ig);
        }
        if va + c.reshard_s < best.0 {
            best = (va + c.reshard_s, ia);
        }
        best
    }

    /// Row F[k] from the group minima: one value for every state of a layout but its best.
    fn entry_row(&self, c: &SwitchCosts, g: &[Top2], row: &mut [f64]) {
        let (nl, last) = (self.ranges.len(), g.len() - 1);
        for (l, &(lo, hi, tp_pp)) in self.ranges.iter().enumerate() {
            let generic = (g[l].v1 + c.batch_s)
                .min(g[nl + tp_pp].v1 + c.dp_resize_s)
                .min(g[last].v1 + c.reshard_s);
            row[lo..hi].fill(generic);
            let best = g[l].i1 as usize;
            if best < row.len() {
                row[best] = self.best_entry(c, g, best).0;
            }
        }
    }
}

/// The schedule of least total time (switch costs included) that respects the minimum dwell.
pub fn optimal(p: &Problem) -> Schedule {
    optimal_with_value(p).0
}

/// [`optimal`] and the value the recursion computed for it, seconds (equal to the schedule's
/// `time_s` up to rounding; exposed so tests can check the recursion itself).
pub fn optimal_with_value(p: &Problem) -> (Schedule, f64) {
    let n = p.phases.len();
    let ns = p.states.len();
    let d = p.min_dwell.clamp(1, n);
    let q = Prepared::new(p);
    let c = p.costs;
    let n_groups = q.n_groups();
    let inf = f64::INFINITY;
    let mut u = vec![inf; ns];
    // P[k][s]: time of phases < k spent in s (one running row). The ring keeps
    // F[j][s] − P[j][s] for the last D boundaries, so entering at j and staying until k costs
    // ring[j][s] + P[k][s].
    let mut prefix = vec![0.0; ns];
    let mut f_ring = vec![inf; d * ns];
    f_ring[..ns].fill(0.0);
    let words = ns.div_ceil(64);
    let mut entered = vec![0u64; (n + 1) * words];
    let mut groups = vec![Top2::EMPTY; n.saturating_sub(d) * n_groups];

    for k in 1..=n {
        let nb = p.batches.len();
        let steps = &p.steps[(k - 1) * nb..k * nb];
        let fslot = k % d; // holds F[k − d] − P[k − d] (∞ while k < d), then receives F[k] − P[k]
        let frow = &f_ring[fslot * ns..(fslot + 1) * ns];
        let bits = &mut entered[k * words..(k + 1) * words];
        let chunks = u
            .chunks_mut(64)
            .zip(prefix.chunks_mut(64))
            .zip(frow.chunks(64))
            .zip(q.batch_idx.chunks(64).zip(q.per_step.chunks(64)));
        for (word, (((uc, pc), fc), (ac, bc))) in bits.iter_mut().zip(chunks) {
            let mut w = 0u64;
            for (i, ((((uu, pp), &fe), a), &b)) in uc
                .iter_mut()
                .zip(pc.iter_mut())
                .zip(fc)
                .zip(ac.iter().copied())
                .zip(bc)
                .enumerate()
            {
                let t = steps[a as usize] * b;
                *pp += t;
                let stay = *uu + t;
                let enter = fe + *pp;
                let take = enter < stay;
                *uu = if take { enter } else { stay };
                w |= (take as u64) << i;
            }
            *word = w;
        }
        if k >= n {
            break;
        }
        let row = &mut f_ring[fslot * ns..(fslot + 1) * ns];
        if k < d {
            row.fill(inf);
            continue;
        }
        let g = &mut groups[(k - d) * n_groups..(k - d + 1) * n_groups];
        q.group_minima(&u, g);
        q.entry_row(&c, g, row);
        for (f, &pk) in row.iter_mut().zip(&prefix) {
            *f -= pk;
        }
    }

    // Final: eligible at n, or a last segment entered less than D phases before the end.
    let mut best = (inf, 0usize, n); // (value, state, entry boundary; n = "via U")
    for s in 0..ns {
        if u[s] < best.0 {
            best = (u[s], s, n);
        }
        for k in (n + 1).saturating_sub(d)..n {
            let v = f_ring[(k % d) * ns + s] + prefix[s];
            if v < best.0 {
                best = (v, s, k);
            }
        }
    }

    // Backtrack in permuted positions.
    let mut assignment = vec![usize::MAX; n];
    let (value, mut s, entry) = best;
    let mut k = n;
    if entry < n {
        assignment[entry..n].fill(s);
        k = entry;
    }
    let mut in_u = entry == n;
    loop {
        if in_u {
            if entered[k * words + s / 64] >> (s % 64) & 1 == 1 {
                assignment[k - d..k].fill(s);
                k -= d;
                in_u = false;
            } else {
                assignment[k - 1] = s;
                k -= 1;
            }
        } else {
            if k == 0 {
                break;
            }
            let g = &groups[(k - d) * n_groups..(k - d + 1) * n_groups];
            s = q.best_entry(&c, g, s).1 as usize;
            in_u = true;
        }
    }
    let assignment = assignment.into_iter().map(|j| q.order[j]).collect();
    (p.schedule(assignment), value)
}
