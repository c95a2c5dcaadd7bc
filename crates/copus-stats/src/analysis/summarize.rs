//! From per-step estimates to the run summary, the estimate over the last window ("now"), the
//! first window (for drift), and the smoothed per-step trajectory, each with a Fieller interval
//! whose variance accounts for autocorrelation between steps.

use crate::analysis::settings::{EstimatorSettings, SmootherKind};
use crate::estimate::interval::{fieller, hac_mean_cov, inflation, z_for};
use crate::smoothing::kernel_sums::{Method, record_moments};
use crate::smoothing::{Moments, one_sided_lag_corrected};

/// Per-step input series, in step order (units of the squared norms; batch sizes in samples).
pub struct Series<'a> {
    /// Optimizer steps.
    pub steps: &'a [u64],
    /// Per-step tr(Σ) estimates.
    pub trace: &'a [f64],
    /// Per-step |G|² estimates.
    pub g2: &'a [f64],
    /// Samples in each step's big batch (for the per-sample EMA decay).
    pub b_big: &'a [f64],
}

/// One smoothed point.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    /// Smoothed tr(Σ).
    pub trace: f64,
    /// Smoothed |G|².
    pub g2: f64,
    /// Their ratio, when the smoothed |G|² is positive.
    pub b_simple: Option<f64>,
    /// Fieller interval of the ratio.
    pub ci: [f64; 2],
}

/// The ratio of means over a contiguous window of steps.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WindowPoint {
    /// First optimizer step of the window.
    pub first_step: u64,
    /// Last optimizer step of the window.
    pub last_step: u64,
    /// Usable steps in the window.
    pub steps: usize,
    /// Window means and the interval of their ratio.
    pub point: Point,
    /// Delta-method variance of ln(B_simple) (ln T̄ − ln Ḡ); `None` when either mean is not
    /// positive or the variance is not finite.
    pub var_ln: Option<f64>,
}

/// The summary point, the windows and the trajectory, plus a description of the smoother used.
pub struct Smoothed {
    /// Run-average point (ratio of means over all steps).
    pub summary: Point,
    /// The last window of steps (where the estimate is now).
    pub now: WindowPoint,
    /// The first window, when it does not overlap the last one (for drift).
    pub first: Option<WindowPoint>,
    /// One point per input step.
    pub points: Vec<Point>,
    /// E.g. `two_sided(gaussian sigma=75 steps)`.
    pub description: String,
    /// The autocorrelation inflation φ ≥ 1 applied to the variance of every point.
    pub inflation: f64,
}

/// Residuals of the per-step estimates around the two-sided kernel (the detrended noise), with
/// each step's retained-variance factor; the input of every autocorrelation-aware variance.
pub struct Detrended {
    /// tr(Σ) residuals.
    pub dt: Vec<f64>,
    /// |G|² residuals.
    pub dg: Vec<f64>,
    /// Variance a residual retains of its step's noise, 1 − 2·w_jj/Σw + Σw²/(Σw)².
    pub keep: Vec<f64>,
    /// The kernel's moments at every step (the two-sided trajectory).
    pub kernel: Vec<Moments>,
}

/// Detrend (t, g) over `steps` by the two-sided Gaussian kernel of `bandwidth` steps.
pub fn detrend(t: &[f64], g: &[f64], steps: &[u64], bandwidth: f64) -> Detrended {
    // The moments of `two_sided`; each record's own normalised weight is 1/Σw.
    let kernel = record_moments(t, g, steps, bandwidth, Method::Auto);
    let n = t.len();
    let mut d = Detrended {
        dt: Vec::with_capacity(n),
        dg: Vec::with_capacity(n),
        keep: Vec::with_capacity(n),
        kernel: Vec::new(),
    };
    for (i, m) in kernel.iter().enumerate() {
        let self_w = 1.0 / m.w;
        d.dt.push(t[i] - m.mean_t());
        d.dg.push(g[i] - m.mean_g());
        d.keep.push(1.0 - 2.0 * self_w + m.w2 / (m.w * m.w));
    }
    d.kernel = kernel;
    d
}

impl Detrended {
    /// Long-run (co)variances of the means of t and g over steps `range` (Bartlett lag `lag`).
    pub fn mean_cov(&self, range: std::ops::Range<usize>, lag: usize) -> (f64, f64, f64) {
        hac_mean_cov(
            &self.dt[range.clone()],
            &self.dg[range.clone()],
            Some(&self.keep[range]),
            lag,
        )
    }
}

/// The common scale of the per-step estimates (their largest magnitude; 1 when that is 0 or
/// not finite): the smoother works on values divided by it.
fn scale_of(trace: &[f64], g2: &[f64]) -> f64 {
    let scale = trace.iter().chain(g2).map(|x| x.abs()).fold(0.0, f64::max);
    if scale > 0.0 && scale.is_finite() {
        scale
    } else {
        1.0
    }
}

fn mean(x: &[f64]) -> f64 {
    x.iter().sum::<f64>() / x.len() as f64
}

/// Run-wide mean tr(Σ) and mean |G|² of a series, bit for bit as [`smooth`]'s summary
/// computes them, without smoothing (for callers that need only the means).
pub fn run_means(trace: &[f64], g2: &[f64]) -> (f64, f64) {
    let scale = scale_of(trace, g2);
    let t: Vec<f64> = trace.iter().map(|x| x / scale).collect();
    let g: Vec<f64> = g2.iter().map(|x| x / scale).collect();
    (mean(&t) * scale, mean(&g) * scale)
}

/// Summary, windows and trajectory. Values are rescaled internally for numerical range;
/// B_simple is invariant to that scale.
pub fn smooth(series: &Series<'_>, settings: &EstimatorSettings) -> Smoothed {
    let n = series.trace.len();
    let scale = scale_of(series.trace, series.g2);
    let t: Vec<f64> = series.trace.iter().map(|x| x / scale).collect();
    let g: Vec<f64> = series.g2.iter().map(|x| x / scale).collect();
    let z = z_for(settings.confidence);
    let lag = settings.block_length_for(n);
    let h = settings.bandwidth_for(n);

    // Two-sided kernel: detrending residuals for the variances (whatever the smoother).
    let mut d = detrend(&t, &g, series.steps, h);
    let window = |range: std::ops::Range<usize>| {
        let (mt, mg) = (mean(&t[range.clone()]), mean(&g[range.clone()]));
        let v = d.mean_cov(range.clone(), lag);
        let var_ln = (mt > 0.0 && mg > 0.0)
            .then(|| v.0 / (mt * mt) - 2.0 * v.1 / (mt * mg) + v.2 / (mg * mg))
            .filter(|x| x.is_finite() && *x >= 0.0);
        WindowPoint {
            first_step: series.steps[range.start],
            last_step: series.steps[range.end - 1],
            steps: range.len(),
            point: point(mt, mg, v, z, scale),
            var_ln,
        }
    };
    let summary = window(0..n).point;
    let w = settings.window_for(n);
    let now = window(n - w..n);
    let first = (2 * w <= n).then(|| window(0..w));

    let r = summary.b_simple.unwrap_or(0.0);
    let phi = inflation(&d.dt, &d.dg, r, lag);
    let (moments, description): (Vec<Moments>, String) = match settings.smoother {
        SmootherKind::TwoSided => (
            std::mem::take(&mut d.kernel),
            format!("two_sided(gaussian sigma={h:.0} steps)"),
        ),
        SmootherKind::OneSided => {
            let b0 = settings
                .reference_batch
                .or_else(|| series.b_big.first().copied())
                .unwrap_or(1.0);
            let dec = settings.ema_decay;
            (
                one_sided_lag_corrected(&t, &g, series.b_big, dec, b0),
                format!("one_sided(double ema decay={dec} per {b0} samples, lag-corrected)"),
            )
        }
    };
    let points = moments
        .iter()
        .map(|m| {
            let (a, b, c) = m.mean_cov();
            point(
                m.mean_t(),
                m.mean_g(),
                (a * phi, b * phi, c * phi),
                z,
                scale,
            )
        })
        .collect();
    Smoothed {
        summary,
        now,
        first,
        points,
        description,
        inflation: phi,
    }
}

fn point(t: f64, g: f64, v: (f64, f64, f64), z: f64, scale: f64) -> Point {
    Point {
        trace: t * scale,
        g2: g * scale,
        b_simple: (g > 0.0).then(|| t / g),
        ci: fieller(t, g, v, z),
    }
}
