//! Confidence intervals for the ratio B_simple = tr(Σ)/|G|²: Fieller's method on the two
//! (smoothed or averaged) means with an autocorrelation-aware (Bartlett/Newey–West) variance.
//!
//! Fieller's interval is the set of R with (T − R·G)² ≤ z²·Var(T − R·G). Unlike the plain delta
//! method it is asymmetric and becomes unbounded when |G|² is not distinguishable from zero:
//! exactly the honest answer when the noise scale is not measurable.

/// Standard normal quantile Φ⁻¹(p) for p in (0, 1) (Acklam's rational approximation, relative
/// error < 1.2·10⁻⁹).
pub fn normal_quantile(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    if p < 0.02425 {
        tail((-2.0 * p.ln()).sqrt())
    } else if p > 1.0 - 0.02425 {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
}

/// Student's t quantile at probability `p` (in (½, 1)) on `df` degrees of freedom: exact for
/// 1 and 2, else the Cornish–Fisher expansion in 1/df (Abramowitz & Stegun 26.7.5; 3.179 at
/// p = 0.975 and df = 3 against the tabulated 3.182, closer from there on).
pub fn student_t_quantile(p: f64, df: usize) -> f64 {
    match df {
        0 => f64::INFINITY,
        1 => (std::f64::consts::PI * (p - 0.5)).tan(),
        2 => (2.0 * p - 1.0) / (2.0 * p * (1.0 - p)).sqrt(),
        _ => {
            let x = normal_quantile(p);
            let v = df as f64;
            let x2 = x * x;
            let g1 = (x2 + 1.0) * x / 4.0;
            let g2 = ((5.0 * x2 + 16.0) * x2 + 3.0) * x / 96.0;
            let g3 = (((3.0 * x2 + 19.0) * x2 + 17.0) * x2 - 15.0) * x / 384.0;
            let g4 =
                ((((79.0 * x2 + 776.0) * x2 + 1482.0) * x2 - 1920.0) * x2 - 945.0) * x / 92160.0;
            x + g1 / v + g2 / (v * v) + g3 / (v * v * v) + g4 / (v * v * v * v)
        }
    }
}

/// Two-sided critical value z for a confidence level (0.95 → 1.96).
pub fn z_for(confidence: f64) -> f64 {
    normal_quantile(0.5 + 0.5 * confidence)
}

/// Two-sided critical value for a confidence level when the variance was estimated from
/// `effective_n` effectively independent values (a weighted mean's (Σw)²/Σw², divided by the
/// autocorrelation inflation): Student's t on `effective_n − 1` degrees of freedom, rounded
/// down (the wider of the two neighbours), at least 1. A kernel a few steps wide leaves each
/// step's variance estimated from about ten values, where z (1.96) covered about 90 % of the
/// time instead of 95 % (docs/STATISTICS.md); from about 10⁴ values on it is z.
pub fn t_for(confidence: f64, effective_n: f64) -> f64 {
    TQuantile::new(confidence).of(effective_n)
}

/// [`t_for`] over many points at one confidence level, remembering the last degrees of
/// freedom's quantile (a run's kernel weighs the same number of steps everywhere but near
/// its ends, and the expansion on each of 10⁵ steps of five smoothings was 4 % of `analyze`'s
/// time). [`t_for`] is one use of it.
#[derive(Debug, Clone, Copy)]
pub struct TQuantile {
    p: f64,
    z: f64,
    last: Option<(usize, f64)>,
}

impl TQuantile {
    /// Critical values at `confidence` (0.95 for 95 % intervals).
    pub fn new(confidence: f64) -> Self {
        let p = 0.5 + 0.5 * confidence;
        Self {
            p,
            z: normal_quantile(p),
            last: None,
        }
    }

    /// [`t_for`]`(confidence, effective_n)`.
    pub fn of(&mut self, effective_n: f64) -> f64 {
        if !(effective_n.is_finite() && effective_n < 1e4) {
            return self.z;
        }
        // Truncation intended: the degrees of freedom round down; a sub-2 count gives 1.
        let df = (effective_n - 1.0).floor().max(1.0) as usize;
        match self.last {
            Some((d, t)) if d == df => t,
            _ => {
                let t = student_t_quantile(self.p, df);
                self.last = Some((df, t));
                t
            }
        }
    }
}

/// Whether an interval of B_simple from [`fieller`] holds no positive value (its upper end
/// is not above 0, or it is not a number): the data rule out every positive estimate, and
/// the interval is reported as undefined, never as `[0, 0]`.
pub fn is_empty(ci: [f64; 2]) -> bool {
    ci[1].is_nan() || ci[1] <= 0.0
}

/// An interval for JSON: `[lo, hi]`, or `null` when it holds no positive value
/// ([`is_empty`]); an unbounded end stays `null` inside the pair as before.
pub fn serialize_ci<S: serde::Serializer>(ci: &[f64; 2], s: S) -> Result<S::Ok, S::Error> {
    use serde::Serialize;
    if is_empty(*ci) {
        s.serialize_none()
    } else {
        ci.serialize(s)
    }
}

/// Fieller interval [lo, hi] for R = num/den, given the variances and covariance of num and
/// den. B_simple is non-negative, so `lo` is clamped at 0; `hi` is +∞ when den is compatible
/// with zero. A den significantly below zero fits no |G|² ≥ 0, so no positive ratio fits
/// either: the interval is empty (`[0, 0]`, [`is_empty`]) — not a bounded interval around
/// num/den, which for two negatives (a trend-following smoother overshooting a steep fall)
/// is a positive ratio, and for a positive over a negative reaches a little above 0, both
/// read as a measurement.
pub fn fieller(num: f64, den: f64, (vnn, vnd, vdd): (f64, f64, f64), z: f64) -> [f64; 2] {
    if !(vnn.is_finite() && vdd.is_finite() && vnd.is_finite()) {
        return [0.0, f64::INFINITY];
    }
    let c = z * z;
    let a = den * den - c * vdd;
    let b = num * den - c * vnd;
    let k = num * num - c * vnn;
    let disc = b * b - a * k;
    if a > 0.0 && den < 0.0 {
        return [0.0, 0.0];
    }
    if a > 0.0 {
        let root = disc.max(0.0).sqrt();
        let lo = (b - root) / a;
        let hi = (b + root) / a;
        return [lo.max(0.0), hi.max(0.0)];
    }
    // Denominator compatible with zero: the set is unbounded.
    if a == 0.0 {
        return if b > 0.0 {
            [(k / (2.0 * b)).max(0.0), f64::INFINITY]
        } else {
            [0.0, f64::INFINITY]
        };
    }
    if disc <= 0.0 {
        return [0.0, f64::INFINITY];
    }
    // a < 0: the accepted set is (−∞, r1] ∪ [r2, ∞); report the hull of its positive part.
    let root = disc.sqrt();
    let (r1, r2) = ((b + root) / a, (b - root) / a);
    let (r1, r2) = (r1.min(r2), r1.max(r2));
    if r1 < 0.0 && r2 > 0.0 {
        [r2, f64::INFINITY]
    } else {
        [0.0, f64::INFINITY]
    }
}

/// Lag-0 sums Σ t²/k, Σ t·g/k, Σ g²/k (k floored at 10⁻⁶), in interleaved partial sums as
/// [`dot`].
fn lag0_divided(dt: &[f64], dg: &[f64], keep: &[f64]) -> (f64, f64, f64) {
    const LANES: usize = 4;
    let n = dt.len().min(dg.len()).min(keep.len());
    let mut acc = [[0.0f64; LANES]; 3];
    // Whole groups of four as arrays (no bounds checks: packed arithmetic), then the tail;
    // element j still goes to partial j mod 4, in increasing j.
    let (tc, tr) = dt[..n].as_chunks::<LANES>();
    let (gc, gr) = dg[..n].as_chunks::<LANES>();
    let (kc, kr) = keep[..n].as_chunks::<LANES>();
    for ((t, g), k) in tc.iter().zip(gc).zip(kc) {
        for lane in 0..LANES {
            let k = k[lane].max(1e-6);
            acc[0][lane] += t[lane] * t[lane] / k;
            acc[1][lane] += t[lane] * g[lane] / k;
            acc[2][lane] += g[lane] * g[lane] / k;
        }
    }
    for (lane, ((t, g), k)) in tr.iter().zip(gr).zip(kr).enumerate() {
        let k = k.max(1e-6);
        acc[0][lane] += t * t / k;
        acc[1][lane] += t * g / k;
        acc[2][lane] += g * g / k;
    }
    let sum = |a: [f64; LANES]| (a[0] + a[1]) + (a[2] + a[3]);
    (sum(acc[0]), sum(acc[1]), sum(acc[2]))
}

/// Long-run (co)variances of the means of two residual series, Bartlett weights up to `lag`:
/// returns (v_tt, v_tg, v_gg) = Var/Cov of the sample means. Lag-0 products are divided by the
/// per-step `keep` factors (the variance a smoother's residual retains), if given.
pub fn hac_mean_cov(dt: &[f64], dg: &[f64], keep: Option<&[f64]>, lag: usize) -> (f64, f64, f64) {
    let n = dt.len().min(dg.len());
    if n < 2 {
        return (f64::INFINITY, 0.0, f64::INFINITY);
    }
    let (dt, dg) = (&dt[..n], &dg[..n]);
    use crate::estimate::lagged::dot;
    let (mut vtt, mut vtg, mut vgg) = match keep {
        Some(keep) => lag0_divided(dt, dg, &keep[..n]),
        None => (dot(dt, dt), dot(dt, dg), dot(dg, dg)),
    };
    let lags = crate::estimate::lagged::cross_lagged(dt, dg, lag.min(n - 1));
    for (l, [tt, tg, gt, gg]) in (1..).zip(lags) {
        let w = 1.0 - l as f64 / (lag as f64 + 1.0);
        vtt += 2.0 * w * tt;
        vtg += w * (tg + gt);
        vgg += 2.0 * w * gg;
    }
    let norm = (n * n) as f64 * (1.0 - 1.0 / n as f64);
    (vtt.max(0.0) / norm, vtg / norm, vgg.max(0.0) / norm)
}

/// Variance inflation of a mean from autocorrelation of the residual u = dt − R·dg:
/// long-run variance over lag-0 variance, clamped to [1, 20].
pub fn inflation(dt: &[f64], dg: &[f64], r: f64, lag: usize) -> f64 {
    let u: Vec<f64> = dt.iter().zip(dg).map(|(t, g)| t - r * g).collect();
    let n = u.len();
    let g0 = crate::estimate::lagged::dot(&u, &u);
    if n < 3 || g0 <= 0.0 {
        return 1.0;
    }
    let mut lr = g0;
    for (l, uu) in (1..).zip(crate::estimate::lagged::auto_lagged(&u, lag.min(n - 1))) {
        let w = 1.0 - l as f64 / (lag as f64 + 1.0);
        lr += 2.0 * w * uu;
    }
    (lr / g0).clamp(1.0, 20.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A |G|² estimate significantly below zero (which the true |G|² cannot be) fits no
    /// positive ratio, whatever the sign of tr(Σ): the empty interval; significantly above
    /// zero, the usual bounded interval around the ratio.
    /// The per-step critical value: Student's t on n_eff − 1 degrees of freedom (tables:
    /// 2.262 at 9, 2.042 at 30), never below z, z itself for very many steps or no weight.
    #[test]
    fn per_step_critical_values_follow_the_effective_steps() {
        let z = z_for(0.95);
        assert!(
            (t_for(0.95, 10.0) - 2.262).abs() < 0.003,
            "{}",
            t_for(0.95, 10.0)
        );
        assert!((t_for(0.95, 31.5) - 2.042).abs() < 0.002);
        assert!(
            (t_for(0.95, 1.2) - 12.706).abs() < 0.01,
            "one degree of freedom"
        );
        assert_eq!(t_for(0.95, 1e5), z);
        let mut cached = TQuantile::new(0.95);
        for n in [10.0, 10.5, 10.9, 3.0, 1e5, 10.0, f64::NAN, 700.0, 700.2] {
            assert_eq!(cached.of(n).to_bits(), t_for(0.95, n).to_bits(), "{n}");
        }
        assert_eq!(t_for(0.95, f64::NAN), z);
        let mut last = f64::INFINITY;
        for n in [2.0, 3.0, 5.0, 10.0, 100.0, 1000.0, 9999.0] {
            let t = t_for(0.95, n);
            assert!(t < last && t > z, "{n}: {t}");
            last = t;
        }
    }

    #[test]
    fn a_significantly_negative_denominator_fits_no_ratio() {
        let var = (1.0, 0.0, 1.0);
        assert!(is_empty(fieller(-200.0, -10.0, var, 1.96)));
        assert!(is_empty(fieller(5.8, -3.9, var, 1.96)));
        let [lo, hi] = fieller(200.0, 10.0, var, 1.96);
        assert!(
            lo > 0.0 && lo < 20.0 && hi > 20.0 && hi.is_finite(),
            "{lo} {hi}"
        );
    }

    /// The left-to-right sums the interleaved ones replaced (the oracle).
    fn hac_serial(dt: &[f64], dg: &[f64], keep: Option<&[f64]>, lag: usize) -> (f64, f64, f64) {
        let n = dt.len();
        let (mut vtt, mut vtg, mut vgg) = (0.0, 0.0, 0.0);
        for j in 0..n {
            let k = keep.map_or(1.0, |k| k[j].max(1e-6));
            vtt += dt[j] * dt[j] / k;
            vtg += dt[j] * dg[j] / k;
            vgg += dg[j] * dg[j] / k;
        }
        for l in 1..=lag.min(n - 1) {
            let w = 1.0 - l as f64 / (lag as f64 + 1.0);
            for j in 0..n - l {
                vtt += 2.0 * w * dt[j] * dt[j + l];
                vtg += w * (dt[j] * dg[j + l] + dt[j + l] * dg[j]);
                vgg += 2.0 * w * dg[j] * dg[j + l];
            }
        }
        let norm = (n * n) as f64 * (1.0 - 1.0 / n as f64);
        (vtt.max(0.0) / norm, vtg / norm, vgg.max(0.0) / norm)
    }

    /// Uniform numbers in [0, 1) from a linear congruential generator started at `seed`.
    fn uniform(mut state: u64) -> impl FnMut() -> f64 {
        move || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    /// The lag-0 sums taken four at a time are the element-by-element ones (each element to
    /// partial j mod 4) to the bit, keep factors below the floor and NaN included.
    #[test]
    fn lag0_groups_are_the_element_loop_to_the_bit() {
        fn by_element(dt: &[f64], dg: &[f64], keep: &[f64]) -> (f64, f64, f64) {
            let mut acc = [[0.0f64; 4]; 3];
            for (j, ((t, g), k)) in dt.iter().zip(dg).zip(keep).enumerate() {
                let k = k.max(1e-6);
                acc[0][j % 4] += t * t / k;
                acc[1][j % 4] += t * g / k;
                acc[2][j % 4] += g * g / k;
            }
            let sum = |a: [f64; 4]| (a[0] + a[1]) + (a[2] + a[3]);
            (sum(acc[0]), sum(acc[1]), sum(acc[2]))
        }
        let mut next = uniform(11);
        for n in [0usize, 1, 3, 4, 5, 8, 13, 1001] {
            let dt: Vec<f64> = (0..n).map(|_| next() - 0.3).collect();
            let dg: Vec<f64> = (0..n).map(|_| (next() - 0.5) * 1e-3).collect();
            let mut keep: Vec<f64> = (0..n).map(|_| next()).collect();
            if n > 3 {
                keep[1] = 1e-9;
                keep[2] = f64::NAN;
            }
            let bits = |x: (f64, f64, f64)| (x.0.to_bits(), x.1.to_bits(), x.2.to_bits());
            assert_eq!(
                bits(lag0_divided(&dt, &dg, &keep)),
                bits(by_element(&dt, &dg, &keep)),
                "n={n}"
            );
        }
    }

    /// Interleaved sums agree with the serial ones to rounding, for lengths around the lane
    /// count, lags up to the length, with and without keep factors.
    #[test]
    fn interleaved_sums_match_serial_sums() {
        let mut next = uniform(7);
        for n in [2usize, 3, 7, 8, 9, 17, 64, 1000] {
            let dt: Vec<f64> = (0..n).map(|_| next() - 0.3).collect();
            let dg: Vec<f64> = (0..n).map(|_| 0.1 * next() - 0.05).collect();
            let keep: Vec<f64> = (0..n).map(|_| 0.5 + 0.5 * next()).collect();
            for lag in [0usize, 1, 5, n] {
                for k in [None, Some(&keep[..])] {
                    let got = hac_mean_cov(&dt, &dg, k, lag);
                    let want = hac_serial(&dt, &dg, k, lag);
                    let scale = (want.0.abs() + want.2.abs()).max(1e-300);
                    for (a, b) in [(got.0, want.0), (got.1, want.1), (got.2, want.2)] {
                        assert!((a - b).abs() <= 1e-12 * scale, "n={n} lag={lag}: {a} {b}");
                    }
                }
                let r = 3.0;
                let u: Vec<f64> = dt.iter().zip(&dg).map(|(t, g)| t - r * g).collect();
                let g0: f64 = u.iter().map(|x| x * x).sum();
                if n >= 3 && g0 > 0.0 {
                    let mut lr = g0;
                    for l in 1..=lag.min(n - 1) {
                        let w = 1.0 - l as f64 / (lag as f64 + 1.0);
                        lr += 2.0 * w * (0..n - l).map(|j| u[j] * u[j + l]).sum::<f64>();
                    }
                    let want = (lr / g0).clamp(1.0, 20.0);
                    assert!((inflation(&dt, &dg, r, lag) - want).abs() <= 1e-12 * want);
                }
            }
        }
    }
}
