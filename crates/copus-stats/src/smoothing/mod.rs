//! Smoothing the per-step numerator tr(Σ) and denominator |G|² **separately** (never their
//! ratio), with the weighted second moments the per-step intervals need.
//!
//! Smoothers: a two-sided Gaussian kernel over steps (recorded runs, low lag); for live runs a
//! one-sided double EMA (Brown) decayed per sample, θ = decay^(b_big/B0), without lag on a
//! linear trend ([`one_sided_lag_corrected`], what the live view uses); and the plain one-sided
//! EMA ([`one_sided`], for comparison). Both one-sided ones are normalised by their running
//! weight sum (Adam-style bias correction). The ratio-EMA is a teaching comparison.

pub(crate) mod fft;
pub(crate) mod kernel_sums;

/// Weighted sums over steps of (t, g) = (tr Σ, |G|²) estimates: Σw, Σw², Σw·x, Σw²·x, Σw²·x·y.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Moments {
    /// Σ w.
    pub w: f64,
    /// Σ w².
    pub w2: f64,
    /// Σ w·t.
    pub wt: f64,
    /// Σ w·g.
    pub wg: f64,
    /// Σ w²·t.
    pub qt: f64,
    /// Σ w²·g.
    pub qg: f64,
    /// Σ w²·t².
    pub qtt: f64,
    /// Σ w²·t·g.
    pub qtg: f64,
    /// Σ w²·g².
    pub qgg: f64,
}

impl Moments {
    /// The nine sums in declaration order (w, w2, wt, wg, qt, qg, qtt, qtg, qgg).
    pub fn fields(&self) -> [f64; 9] {
        [
            self.w, self.w2, self.wt, self.wg, self.qt, self.qg, self.qtt, self.qtg, self.qgg,
        ]
    }

    /// Add one step with weight `w`.
    pub fn add(&mut self, w: f64, t: f64, g: f64) {
        let w2 = w * w;
        self.w += w;
        self.w2 += w2;
        self.wt += w * t;
        self.wg += w * g;
        self.qt += w2 * t;
        self.qg += w2 * g;
        self.qtt += w2 * t * t;
        self.qtg += w2 * t * g;
        self.qgg += w2 * g * g;
    }

    /// Add the records of one step at once with weight `w`: `s` holds their count, Σt, Σg,
    /// Σt², Σt·g and Σg² (the same sums as adding them one by one).
    pub(crate) fn add_sums(&mut self, w: f64, s: &[f64; 6]) {
        let w2 = w * w;
        self.w += w * s[0];
        self.w2 += w2 * s[0];
        self.wt += w * s[1];
        self.wg += w * s[2];
        self.qt += w2 * s[1];
        self.qg += w2 * s[2];
        self.qtt += w2 * s[3];
        self.qtg += w2 * s[4];
        self.qgg += w2 * s[5];
    }

    /// Multiply every weight by `a` (EMA decay).
    pub fn decay(&mut self, a: f64) {
        let a2 = a * a;
        self.w *= a;
        self.wt *= a;
        self.wg *= a;
        for q in [
            &mut self.w2,
            &mut self.qt,
            &mut self.qg,
            &mut self.qtt,
            &mut self.qtg,
            &mut self.qgg,
        ] {
            *q *= a2;
        }
    }

    /// Effective number of steps behind the weighted means, (Σw)²/Σw² (Kish): the count of
    /// equally weighted steps whose mean would have the same variance. NaN without weight.
    pub fn effective_n(&self) -> f64 {
        self.w * self.w / self.w2
    }

    /// Weighted mean of t (smoothed tr Σ).
    pub fn mean_t(&self) -> f64 {
        self.wt / self.w
    }

    /// Weighted mean of g (smoothed |G|²).
    pub fn mean_g(&self) -> f64 {
        self.wg / self.w
    }

    /// Variances and covariance (v_tt, v_tg, v_gg) of the two weighted means, from the
    /// weighted residuals around them (heteroscedasticity-robust), with the effective-sample
    /// correction 1/(1 − Σw²/(Σw)²). Infinite when only one step carries weight.
    pub fn mean_cov(&self) -> (f64, f64, f64) {
        let (mt, mg) = (self.mean_t(), self.mean_g());
        let keep = 1.0 - self.w2 / (self.w * self.w);
        if keep <= 1e-12 {
            return (f64::INFINITY, 0.0, f64::INFINITY);
        }
        let norm = self.w * self.w * keep;
        let vtt = self.qtt - 2.0 * mt * self.qt + mt * mt * self.w2;
        let vtg = self.qtg - mt * self.qg - mg * self.qt + mt * mg * self.w2;
        let vgg = self.qgg - 2.0 * mg * self.qg + mg * mg * self.w2;
        (vtt.max(0.0) / norm, vtg / norm, vgg.max(0.0) / norm)
    }
}

/// Two-sided Gaussian kernel (σ = `bandwidth` steps, truncated at 4σ) over step positions
/// (`steps` sorted ascending; repeated step numbers allowed).
/// Returns each position's moments and its own normalised weight w_jj/Σw (for residual
/// corrections).
///
/// O(n) in the records whatever the bandwidth and however steps repeat: records of one step
/// are summed first, and long windows are convolved by FFT (module `kernel_sums`); the
/// results equal the record-by-record sums up to rounding (docs/STATISTICS.md).
pub fn two_sided(t: &[f64], g: &[f64], steps: &[u64], bandwidth: f64) -> Vec<(Moments, f64)> {
    crate::smoothing::kernel_sums::kernel_moments(
        t,
        g,
        steps,
        bandwidth,
        crate::smoothing::kernel_sums::Method::Auto,
    )
}

/// One-sided EMA decayed per sample: before adding step j the weights decay by
/// θ_j = decay^(b_big_j/B0) and step j enters with weight 1 − θ_j. Its weighted mean lags a
/// moving value by about θ/(1 − θ) steps; [`one_sided_lag_corrected`] removes that lag.
pub fn one_sided(t: &[f64], g: &[f64], b_big: &[f64], decay: f64, b0: f64) -> Vec<Moments> {
    let mut ema = OneSidedEma::default();
    let mut th = Theta::new(decay, b0);
    t.iter()
        .zip(g)
        .zip(b_big)
        .map(|((&ti, &gi), &b)| ema.push(ti, gi, th.of(b)))
        .collect()
}

/// Sums Σ c·f over steps of f ∈ {1, t, g, t², t·g, g²} for one set of step coefficients c.
type Sums6 = [f64; 6];

fn f6(t: f64, g: f64) -> Sums6 {
    [1.0, t, g, t * t, t * g, g * g]
}

/// The live smoother: Brown's double exponential smoothing of numerator and denominator
/// separately, each step's weight w_j = 2·a_j − b_j where a_j are the one-sided EMA weights and
/// b_j the weights of the EMA of that EMA (both decayed per sample, θ_j = decay^(b_big_j/B0)).
///
/// The EMA's mean lag θ/(1−θ) steps and the double EMA's 2θ/(1−θ) cancel, so the level is
/// unbiased for a locally linear trend (a one-sided window otherwise trails a growing noise
/// scale and its interval misses the present value). The price is about 2.5× the variance of
/// the plain EMA, which the interval carries. Weights are normalised by Σw (bias correction
/// at the start). The second moments Σw², Σw²x, … follow exactly from the recursions of
/// Σa²f, Σa·b·f and Σb²f, so the cost is O(1) per step.
pub fn one_sided_lag_corrected(
    t: &[f64],
    g: &[f64],
    b_big: &[f64],
    decay: f64,
    b0: f64,
) -> Vec<Moments> {
    let mut ema = LagCorrectedEma::default();
    let mut th = Theta::new(decay, b0);
    t.iter()
        .zip(g)
        .zip(b_big)
        .map(|((&ti, &gi), &b)| ema.push(ti, gi, th.of(b)))
        .collect()
}

/// Per-sample decay of a step with `b_big` samples: θ = decay^(b_big/b0).
pub fn theta(decay: f64, b_big: f64, b0: f64) -> f64 {
    decay.powf(b_big / b0)
}

/// [`theta`] for a fixed `decay` and `b0`, remembering the last batch size's value (runs keep
/// one batch size for long stretches, and `powf` is most of an EMA step's cost).
#[derive(Debug, Clone, Copy)]
pub struct Theta {
    decay: f64,
    b0: f64,
    last: Option<(u64, f64)>,
}

impl Theta {
    /// θ for steps of this `decay` (per `b0` samples).
    pub fn new(decay: f64, b0: f64) -> Self {
        Self {
            decay,
            b0,
            last: None,
        }
    }

    /// The reference batch (samples) this θ is for.
    pub fn b0(&self) -> f64 {
        self.b0
    }

    /// θ of a step of `b_big` samples: exactly [`theta`]`(decay, b_big, b0)`.
    pub fn of(&mut self, b_big: f64) -> f64 {
        match self.last {
            Some((bits, th)) if bits == b_big.to_bits() => th,
            _ => {
                let th = theta(self.decay, b_big, self.b0);
                self.last = Some((b_big.to_bits(), th));
                th
            }
        }
    }
}

/// State of the plain one-sided EMA ([`one_sided`] is this over a run).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct OneSidedEma {
    m: Moments,
}

impl OneSidedEma {
    /// Add the next step (tr Σ estimate `t`, |G|² estimate `g`) with decay `theta`; returns the
    /// moments at this step.
    pub fn push(&mut self, t: f64, g: f64, theta: f64) -> Moments {
        self.m.decay(theta);
        self.m.add(1.0 - theta, t, g);
        self.m
    }
}

/// State of the lag-corrected double EMA ([`one_sided_lag_corrected`] is this over a run):
/// first and second moments of the EMA weights a and of the EMA-of-EMA weights b.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LagCorrectedEma {
    a1: [f64; 3],
    b1: [f64; 3],
    aa: Sums6,
    ab: Sums6,
    bb: Sums6,
}

impl LagCorrectedEma {
    /// Add the next step with decay `theta`; returns the moments at this step (the same
    /// arithmetic, in the same order, as the batch function).
    // Indexed loops over the parallel sums, written as the batch function writes them.
    #[allow(clippy::needless_range_loop)]
    pub fn push(&mut self, t: f64, g: f64, theta: f64) -> Moments {
        let alpha = 1.0 - theta;
        let f = f6(t, g);
        let th2 = theta * theta;
        for k in 0..3 {
            self.a1[k] = theta * self.a1[k] + alpha * f[k];
            self.b1[k] = theta * self.b1[k] + alpha * self.a1[k];
        }
        for k in 0..6 {
            // Order matters: each uses the previous value of the later sums.
            self.bb[k] = th2 * self.bb[k] + 2.0 * th2 * alpha * self.ab[k];
            self.aa[k] = th2 * self.aa[k] + alpha * alpha * f[k];
            self.ab[k] = th2 * self.ab[k] + alpha * self.aa[k];
            self.bb[k] += alpha * alpha * self.aa[k];
        }
        let lin = |k: usize| 2.0 * self.a1[k] - self.b1[k];
        let quad = |k: usize| 4.0 * self.aa[k] - 4.0 * self.ab[k] + self.bb[k];
        Moments {
            w: lin(0),
            wt: lin(1),
            wg: lin(2),
            w2: quad(0),
            qt: quad(1),
            qg: quad(2),
            qtt: quad(3),
            qtg: quad(4),
            qgg: quad(5),
        }
    }
}

/// Teaching comparison: a bias-corrected EMA of the per-step ratio tr/|G|² (the wrong way: the
/// ratio is heavy-tailed and its mean is not the ratio of means). Steps whose |G|² estimate is
/// not positive are passed over, as naive implementations do.
pub fn ratio_ema(t: &[f64], g: &[f64], b_big: &[f64], decay: f64, b0: f64) -> Vec<Option<f64>> {
    let (mut num, mut den) = (0.0, 0.0);
    let mut th = Theta::new(decay, b0);
    t.iter()
        .zip(g)
        .zip(b_big)
        .map(|((&ti, &gi), &b)| {
            if gi > 0.0 {
                let theta = th.of(b);
                num = theta * num + (1.0 - theta) * ti / gi;
                den = theta * den + (1.0 - theta);
            }
            (den > 0.0).then(|| num / den)
        })
        .collect()
}

#[cfg(test)]
#[path = "smoothing_tests.rs"]
mod tests;
