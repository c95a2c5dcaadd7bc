//! The O(n) two-sided smoother against the record-by-record loop it replaced (kept here as the
//! oracle), on random inputs with distinct, repeated and irregular step numbers.

use super::Moments;
use crate::smoothing::kernel_sums::{Method, kernel_moments};

/// The two-sided smoother before issue 15: every record within 4σ of each record, one by one.
fn oracle(t: &[f64], g: &[f64], steps: &[u64], bandwidth: f64) -> Vec<(Moments, f64)> {
    let n = t.len();
    let reach = (4.0 * bandwidth).floor() as u64;
    let weight = |d: u64| {
        let x = d as f64 / bandwidth;
        (-0.5 * x * x).exp()
    };
    let table: Vec<f64> = (0..=reach.min(1 << 16)).map(weight).collect();
    let mut out = Vec::with_capacity(n);
    let mut lo = 0;
    for i in 0..n {
        let centre = steps[i];
        while lo < n && steps[lo].saturating_add(reach) < centre {
            lo += 1;
        }
        let mut m = Moments::default();
        for j in lo..n {
            let d = steps[j].abs_diff(centre);
            if steps[j] > centre && d > reach {
                break;
            }
            let w = table.get(d as usize).copied().unwrap_or_else(|| weight(d));
            m.add(w, t[j], g[j]);
        }
        out.push((m, 1.0 / m.w));
    }
    out
}

/// splitmix64: a small deterministic generator for the test inputs.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn fields(m: &Moments) -> [f64; 9] {
    [m.w, m.w2, m.wt, m.wg, m.qt, m.qg, m.qtt, m.qtg, m.qgg]
}

/// Step patterns: distinct consecutive, strided, all equal, small groups of repeats, irregular
/// gaps (some wider than the kernel's reach).
fn steps_of(kind: usize, n: usize, rng: &mut Rng) -> Vec<u64> {
    let mut s = 1000u64;
    (0..n)
        .map(|i| {
            match kind {
                0 => s = 1000 + i as u64,
                1 => s = 1000 + 10 * i as u64,
                2 => {}
                3 => s += u64::from(rng.next().is_multiple_of(3)),
                _ => s += [0, 1, 1, 2, 7, 40, 900][(rng.next() % 7) as usize],
            }
            s
        })
        .collect()
}

fn assert_close(t: &[f64], g: &[f64], steps: &[u64], h: f64, method: Method) {
    let want = oracle(t, g, steps, h);
    // Scale of each sum: the same sums over |t| and |g| (rounding is relative to these).
    let abs = |x: &[f64]| x.iter().map(|v| v.abs()).collect::<Vec<f64>>();
    let scale = oracle(&abs(t), &abs(g), steps, h);
    let got = kernel_moments(t, g, steps, h, method);
    assert_eq!(got.len(), want.len());
    for (i, ((m, sw), (o, osw))) in got.iter().zip(&want).enumerate() {
        let sc = fields(&scale[i].0);
        for (k, (a, b)) in fields(m).iter().zip(fields(o)).enumerate() {
            let tol = 1e-9 * sc[k].max(f64::MIN_POSITIVE);
            assert!(
                (a - b).abs() <= tol,
                "{method:?} h={h} record {i} field {k}: {a} vs {b} (scale {})",
                sc[k]
            );
        }
        assert!((sw - osw).abs() <= 1e-9 * osw, "self weight {sw} vs {osw}");
        let (mt, mg) = (m.mean_t(), m.mean_g());
        assert!((mt - o.mean_t()).abs() <= 1e-9 * (scale[i].0.mean_t() + 1e-300));
        assert!((mg - o.mean_g()).abs() <= 1e-9 * (scale[i].0.mean_g() + 1e-300));
    }
}

#[test]
fn equals_the_record_by_record_sums() {
    let mut rng = Rng(7);
    for kind in 0..5 {
        for &h in &[0.4, 3.0, 10.7, 60.0, 400.0] {
            let n = 300 + (rng.next() % 400) as usize;
            let steps = steps_of(kind, n, &mut rng);
            // Trace estimates can be negative; |G|² spans a few orders of magnitude.
            let t: Vec<f64> = (0..n).map(|_| 2.0 * rng.unit() - 0.3).collect();
            let g: Vec<f64> = (0..n).map(|_| 10f64.powf(-3.0 * rng.unit())).collect();
            for method in [Method::Auto, Method::Direct, Method::Fft] {
                assert_close(&t, &g, &steps, h, method);
            }
        }
    }
}

#[test]
fn unsorted_steps_give_the_sorted_sums_in_input_order() {
    let (t, g, steps) = (
        vec![1.0, 2.0, 3.0, 4.0],
        vec![0.5, 0.25, 1.0, 2.0],
        vec![5u64, 1, 3, 1],
    );
    let got = kernel_moments(&t, &g, &steps, 2.0, Method::Auto);
    let order = [1usize, 3, 2, 0];
    let sorted = oracle(
        &order.map(|i| t[i]),
        &order.map(|i| g[i]),
        &order.map(|i| steps[i]),
        2.0,
    );
    for (k, &i) in order.iter().enumerate() {
        assert!((got[i].0.wt - sorted[k].0.wt).abs() < 1e-12);
        assert!((got[i].0.w2 - sorted[k].0.w2).abs() < 1e-12);
    }
}

/// Repeated step numbers no longer make the window the whole run: 40k records on one step
/// and on 40k distinct steps cost the same order of work (counted as kernel evaluations by
/// timing both; generous bound for a shared machine).
#[test]
fn repeated_steps_are_not_quadratic() {
    let n = 40_000;
    let t: Vec<f64> = (0..n).map(|i| 1.0 + (i % 7) as f64).collect();
    let g: Vec<f64> = (0..n).map(|i| 0.5 + (i % 5) as f64).collect();
    let same = vec![3u64; n];
    let distinct: Vec<u64> = (0..n as u64).collect();
    let time = |s: &[u64]| {
        let start = std::time::Instant::now();
        let out = kernel_moments(&t, &g, s, 200.0, Method::Auto);
        (start.elapsed(), out)
    };
    let (t_same, out) = time(&same);
    // One step: every record carries the sums of all of them.
    assert!((out[0].0.w - n as f64).abs() < 1e-6 && (out[n - 1].0.wt - out[0].0.wt).abs() == 0.0);
    let (t_distinct, _) = time(&distinct);
    assert!(
        t_same <= t_distinct * 3 + std::time::Duration::from_millis(50),
        "one step {t_same:?} vs distinct {t_distinct:?}"
    );
}

/// The remembered θ is `theta` to the bit, whether the batch size repeats or changes.
#[test]
fn remembered_theta_equals_theta() {
    use crate::smoothing::{Theta, theta};
    let (decay, b0) = (0.9937, 96.0);
    let mut memo = Theta::new(decay, b0);
    for b in [96.0, 96.0, 128.0, 128.0, 96.0, 1.0, 1.0, 4096.0, 96.0] {
        assert_eq!(memo.of(b).to_bits(), theta(decay, b, b0).to_bits(), "b={b}");
    }
}
