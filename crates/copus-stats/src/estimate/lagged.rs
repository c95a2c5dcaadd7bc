//! Lagged products of residual series for every lag up to a bound, in one sweep.
//!
//! A Newey–West variance needs Σ_j x_j·y_{j+l} for each lag l = 1..L. Summed lag by lag, each
//! lag streams the whole series again (L ≈ 18 passes over 3 MB for 10⁵ steps: bound by memory
//! bandwidth). Here the series is walked in tiles that stay in cache, and every lag takes its
//! products from the tile before the next tile is read.
//!
//! Each sum is the one [`dot`] forms: eight partial sums, element j going to partial
//! j mod 8 in increasing j, added pairwise at the end. Tiles start at multiples of eight, so
//! every partial receives the same products in the same order: the results are the lag-by-lag
//! sums to the bit (tested).

/// Partial sums per product (the vector width `dot` uses).
const LANES: usize = 8;
/// Elements per tile (a multiple of [`LANES`]): two series of 16 KiB each, plus the lag.
const TILE: usize = 2048;

/// Σ a_j·b_j over the common length, in eight interleaved partial sums added pairwise at the
/// end (vectorised; the order differs from a left-to-right sum only in rounding).
pub(crate) fn dot(a: &[f64], b: &[f64]) -> f64 {
    let n = a.len().min(b.len());
    total(auto_tile([0.0; LANES], &a[..n], &b[..n]))
}

/// The eight partial sums added as [`dot`] adds them.
#[inline(always)]
fn total([a0, a1, a2, a3, a4, a5, a6, a7]: [f64; LANES]) -> f64 {
    ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7))
}

/// Add one tile's products to the partial sums `s` of (t0·t1, t0·g1, t1·g0, g0·g1), element j
/// of the tile to partial j mod [`LANES`] (the tile starts at a multiple of it). The partials
/// are a local value and the inner loop has no bounds checks, so they stay in registers.
#[inline(always)]
fn cross_tile(
    mut s: [[f64; LANES]; 4],
    t0: &[f64],
    t1: &[f64],
    g0: &[f64],
    g1: &[f64],
) -> [[f64; LANES]; 4] {
    let (t0c, t0r) = t0.as_chunks::<LANES>();
    let (t1c, t1r) = t1.as_chunks::<LANES>();
    let (g0c, g0r) = g0.as_chunks::<LANES>();
    let (g1c, g1r) = g1.as_chunks::<LANES>();
    for (((x, y), c), d) in t0c.iter().zip(t1c).zip(g0c).zip(g1c) {
        for k in 0..LANES {
            s[0][k] += x[k] * y[k];
            s[1][k] += x[k] * d[k];
            s[2][k] += y[k] * c[k];
            s[3][k] += c[k] * d[k];
        }
    }
    // The tail of the last tile.
    for (k, (((x, y), c), d)) in t0r.iter().zip(t1r).zip(g0r).zip(g1r).enumerate() {
        s[0][k] += x * y;
        s[1][k] += x * d;
        s[2][k] += y * c;
        s[3][k] += c * d;
    }
    s
}

/// [`cross_tile`] for one series: the partial sums of x·y.
#[inline(always)]
fn auto_tile(mut s: [f64; LANES], x: &[f64], y: &[f64]) -> [f64; LANES] {
    let (xc, xr) = x.as_chunks::<LANES>();
    let (yc, yr) = y.as_chunks::<LANES>();
    for (x, y) in xc.iter().zip(yc) {
        for k in 0..LANES {
            s[k] += x[k] * y[k];
        }
    }
    for (k, (x, y)) in xr.iter().zip(yr).enumerate() {
        s[k] += x * y;
    }
    s
}

/// For each lag l in 1..=`max_lag` (index l − 1): the four sums over j < n − l of t_j·t_{j+l},
/// t_j·g_{j+l}, t_{j+l}·g_j and g_j·g_{j+l} (n the shorter length), each as `dot` sums it.
/// Lags of n or more sum nothing (zeros).
pub(crate) fn cross_lagged(t: &[f64], g: &[f64], max_lag: usize) -> Vec<[f64; 4]> {
    let n = t.len().min(g.len());
    let (t, g) = (&t[..n], &g[..n]);
    let mut acc = vec![[[0.0f64; LANES]; 4]; max_lag];
    for start in (0..n).step_by(TILE) {
        for (a, l) in acc.iter_mut().zip(1..) {
            // Products j in [start, end): j + l stays inside the series.
            let end = (start + TILE).min(n.saturating_sub(l));
            if end <= start {
                break; // longer lags end earlier still
            }
            let (t0, t1) = (&t[start..end], &t[start + l..end + l]);
            let (g0, g1) = (&g[start..end], &g[start + l..end + l]);
            *a = cross_tile(*a, t0, t1, g0, g1);
        }
    }
    acc.into_iter().map(|a| a.map(total)).collect()
}

/// For each lag l in 1..=`max_lag` (index l − 1): Σ_{j < n − l} u_j·u_{j+l}, as `dot` sums it.
pub(crate) fn auto_lagged(u: &[f64], max_lag: usize) -> Vec<f64> {
    let n = u.len();
    let mut acc = vec![[0.0f64; LANES]; max_lag];
    for start in (0..n).step_by(TILE) {
        for (a, l) in acc.iter_mut().zip(1..) {
            let end = (start + TILE).min(n.saturating_sub(l));
            if end <= start {
                break;
            }
            *a = auto_tile(*a, &u[start..end], &u[start + l..end + l]);
        }
    }
    acc.into_iter().map(total).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Series with mixed signs and magnitudes, so that any change of summation order shows.
    fn series(n: usize, seed: u64) -> Vec<f64> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                let m = (s >> 11) as f64 / (1u64 << 53) as f64 - 0.5;
                m * 10f64.powi((s % 9) as i32 - 4)
            })
            .collect()
    }

    #[test]
    fn every_lag_is_the_lag_by_lag_sum_to_the_bit() {
        for n in [0usize, 1, 7, 8, 9, 100, 2047, 2048, 2049, 4103, 10_000] {
            let (t, g) = (series(n, 1 + n as u64), series(n + 3, 2 + n as u64));
            for max_lag in [0usize, 1, 5, 18, 40] {
                let cross = cross_lagged(&t, &g, max_lag);
                let auto = auto_lagged(&t, max_lag);
                assert_eq!((cross.len(), auto.len()), (max_lag, max_lag));
                for l in 1..=max_lag {
                    let m = n.saturating_sub(l);
                    let (t0, t1) = (&t[..m], &t[n.min(l)..n.min(l) + m]);
                    let (g0, g1) = (&g[..m], &g[n.min(l)..n.min(l) + m]);
                    let want = [dot(t0, t1), dot(t0, g1), dot(t1, g0), dot(g0, g1)];
                    assert_eq!(
                        cross[l - 1].map(f64::to_bits),
                        want.map(f64::to_bits),
                        "n={n} lag {l}"
                    );
                    assert_eq!(
                        auto[l - 1].to_bits(),
                        dot(t0, t1).to_bits(),
                        "n={n} lag {l}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_left_to_right_sum_would_differ() {
        // The comparison above can fail: summing in another order changes the last bits of
        // these series' sums.
        let (t, g) = (series(10_000, 3), series(10_000, 4));
        let serial: f64 = t[..9_995].iter().zip(&g[5..]).map(|(x, y)| x * y).sum();
        assert_ne!(serial.to_bits(), cross_lagged(&t, &g, 5)[4][1].to_bits());
    }
}
