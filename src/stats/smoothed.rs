//! From per-step estimates to the run summary and the smoothed per-step trajectory, each with a
//! Fieller interval whose variance accounts for autocorrelation between steps.

use super::interval::{fieller, hac_mean_cov, inflation, z_for};
use super::settings::{EstimatorSettings, SmootherKind};
use super::smoothing::{Moments, one_sided, two_sided};

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

/// The summary point and the trajectory, plus a description of the smoother used.
pub struct Smoothed {
    /// Run-average point (ratio of means over all steps).
    pub summary: Point,
    /// One point per input step.
    pub points: Vec<Point>,
    /// E.g. `two_sided(gaussian sigma=75 steps)`.
    pub description: String,
}

/// Summary and trajectory. Values are rescaled internally for numerical range; B_simple is
/// invariant to that scale.
pub fn smooth(series: &Series<'_>, settings: &EstimatorSettings) -> Smoothed {
    let n = series.trace.len();
    let scale = series
        .trace
        .iter()
        .chain(series.g2)
        .map(|x| x.abs())
        .fold(0.0, f64::max);
    let scale = if scale > 0.0 && scale.is_finite() {
        scale
    } else {
        1.0
    };
    let t: Vec<f64> = series.trace.iter().map(|x| x / scale).collect();
    let g: Vec<f64> = series.g2.iter().map(|x| x / scale).collect();
    let z = z_for(settings.confidence);
    let lag = settings.block_length_for(n);
    let h = settings.bandwidth_for(n);

    // Two-sided kernel: detrending residuals for the variances (whatever the smoother).
    let kernel = two_sided(&t, &g, series.steps, h);
    let mut dt = Vec::with_capacity(n);
    let mut dg = Vec::with_capacity(n);
    let mut keep = Vec::with_capacity(n);
    for (i, (m, self_w)) in kernel.iter().enumerate() {
        dt.push(t[i] - m.mean_t());
        dg.push(g[i] - m.mean_g());
        keep.push(1.0 - 2.0 * self_w + m.w2 / (m.w * m.w));
    }
    let mt = t.iter().sum::<f64>() / n as f64;
    let mg = g.iter().sum::<f64>() / n as f64;
    let v = hac_mean_cov(&dt, &dg, Some(&keep), lag);
    let summary = point(mt, mg, v, z, scale);

    let r = summary.b_simple.unwrap_or(0.0);
    let phi = inflation(&dt, &dg, r, lag);
    let (moments, description): (Vec<Moments>, String) = match settings.smoother {
        SmootherKind::TwoSided => (
            kernel.iter().map(|(m, _)| *m).collect(),
            format!("two_sided(gaussian sigma={h:.0} steps)"),
        ),
        SmootherKind::OneSided => {
            let b0 = settings
                .reference_batch
                .or_else(|| series.b_big.first().copied())
                .unwrap_or(1.0);
            let d = settings.ema_decay;
            (
                one_sided(&t, &g, series.b_big, d, b0),
                format!("one_sided(ema decay={d} per {b0} samples, bias-corrected)"),
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
        points,
        description,
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
