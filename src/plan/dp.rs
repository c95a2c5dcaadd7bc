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
//! time and P its prefix sum per state: stay while already eligible, or become eligible exactly
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
//! "s ≠ t" is handled by keeping the two best (value, state) pairs per group. Memory: rolling
//! rows of D states, a bit per (boundary, state) for the U choice, and the group minima per
//! boundary for backtracking.

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

/// Best predecessor of `t` from the group minima at one boundary: (value incl. cost, state).
#[inline]
fn best_entry(p: &Problem, groups: &[Top2], t: usize) -> (f64, u32) {
    let t32 = t as u32;
    let c = p.costs;
    let (vl, il) = groups[p.layout_of[t] as usize].excluding(t32);
    let (vg, ig) = groups[p.n_layouts + p.tp_pp_of[t] as usize].excluding(t32);
    let (va, ia) = groups[p.n_layouts + p.n_tp_pp].excluding(t32);
    let mut best = (vl + c.batch_s, il);
    if vg + c.dp_resize_s < best.0 {
        best = (vg + c.dp_resize_s, ig);
    }
    if va + c.reshard_s < best.0 {
        best = (va + c.reshard_s, ia);
    }
    best
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
    let n_groups = p.n_layouts + p.n_tp_pp + 1;
    let inf = f64::INFINITY;
    let mut u = vec![inf; ns];
    let mut f_ring = vec![inf; d * ns];
    f_ring[..ns].fill(0.0);
    let mut p_ring = vec![0.0; (d + 1) * ns];
    let words = ns.div_ceil(64);
    let mut entered = vec![0u64; (n + 1) * words];
    let mut groups = vec![Top2::EMPTY; n.saturating_sub(d) * n_groups];

    for k in 1..=n {
        let (prev, cur) = ((k - 1) % (d + 1), k % (d + 1));
        let old = (k + 1) % (d + 1); // slot of P[k − d]
        let fslot = k % d; // holds F[k − d], then receives F[k]
        for s in 0..ns {
            let t = p.phase_time(k - 1, s);
            let pk = p_ring[prev * ns + s] + t;
            p_ring[cur * ns + s] = pk;
            let stay = u[s] + t;
            u[s] = stay;
            if k >= d {
                let enter = f_ring[fslot * ns + s] + pk - p_ring[old * ns + s];
                if enter < stay {
                    u[s] = enter;
                    entered[k * words + s / 64] |= 1 << (s % 64);
                }
            }
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
        for (s, &v) in u.iter().enumerate() {
            g[p.layout_of[s] as usize].push(v, s as u32);
            g[p.n_layouts + p.tp_pp_of[s] as usize].push(v, s as u32);
            g[n_groups - 1].push(v, s as u32);
        }
        for (t, slot) in row.iter_mut().enumerate() {
            *slot = best_entry(p, g, t).0;
        }
    }

    // Final: eligible at n, or a last segment entered less than D phases before the end.
    let pn = (n % (d + 1)) * ns;
    let mut best = (inf, 0usize, n); // (value, state, entry boundary; n = "via U")
    for s in 0..ns {
        if u[s] < best.0 {
            best = (u[s], s, n);
        }
        for k in (n + 1).saturating_sub(d)..n {
            let v = f_ring[(k % d) * ns + s] + p_ring[pn + s] - p_ring[(k % (d + 1)) * ns + s];
            if v < best.0 {
                best = (v, s, k);
            }
        }
    }

    // Backtrack.
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
            s = best_entry(p, g, s).1 as usize;
            in_u = true;
        }
    }
    (p.schedule(assignment), value)
}
