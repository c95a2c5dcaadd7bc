//! Calibration: fit efficiency and link parameters to measured step times by nonlinear least
//! squares (Levenberg–Marquardt on nalgebra). Residuals are relative, `ln(predicted/measured)`,
//! so fast and slow configurations weigh alike; parameters are fitted in log space so they
//! stay positive.

use super::measurements::Measurement;
use super::{ConfigCost, EfficiencyParams, HardwareProfile, Invalid, ModelProfile, PerfContext};
use nalgebra::{DMatrix, DVector};
use serde::{Deserialize, Serialize};

/// A parameter calibration may fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Knob {
    /// GEMM plateau efficiency ([`EfficiencyParams::max_eff`]).
    MaxEff,
    /// Fixed cost per GEMM ([`EfficiencyParams::gemm_overhead_s`]).
    GemmOverhead,
    /// Fused-attention efficiency ([`EfficiencyParams::attn_eff`]).
    AttnEff,
    /// Memory-bound kernel efficiency ([`EfficiencyParams::mem_eff`]).
    MemEff,
    /// Scale-up link efficiency multiplier ([`EfficiencyParams::intra_link_scale`]).
    IntraLink,
    /// Scale-out link efficiency multiplier ([`EfficiencyParams::inter_link_scale`]).
    InterLink,
}

impl Knob {
    fn slot(self, e: &mut EfficiencyParams) -> &mut f64 {
        match self {
            Knob::MaxEff => &mut e.max_eff,
            Knob::GemmOverhead => &mut e.gemm_overhead_s,
            Knob::AttnEff => &mut e.attn_eff,
            Knob::MemEff => &mut e.mem_eff,
            Knob::IntraLink => &mut e.intra_link_scale,
            Knob::InterLink => &mut e.inter_link_scale,
        }
    }
}

/// Result of a calibration.
#[derive(Debug, Clone, PartialEq)]
pub struct Calibration {
    /// Fitted parameters (the knobs changed, everything else as given).
    pub params: EfficiencyParams,
    /// Relative residual per measurement after the fit: predicted/measured − 1.
    pub residuals: Vec<f64>,
    /// Root-mean-square of `ln(predicted/measured)` before the fit.
    pub initial_rms: f64,
    /// Root-mean-square of `ln(predicted/measured)` after the fit.
    pub rms: f64,
    /// Levenberg–Marquardt iterations taken.
    pub iterations: usize,
}

/// Why calibration failed.
#[derive(Debug, thiserror::Error)]
pub enum CalibrationError {
    /// Fewer measurements than knobs.
    #[error("{points} measurements cannot determine {knobs} parameters")]
    TooFew {
        /// Measurements given.
        points: usize,
        /// Knobs to fit.
        knobs: usize,
    },
    /// A measured configuration cannot run under the model.
    #[error("measurement {index} ({config}): {reason}")]
    Invalid {
        /// 0-based index of the measurement.
        index: usize,
        /// The configuration, as text.
        config: String,
        /// Why.
        reason: Invalid,
    },
}

/// What the model is fitted for: hardware, model shape and node size.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    /// Hardware profile.
    pub hw: &'a HardwareProfile,
    /// Model shape.
    pub model: &'a ModelProfile,
    /// GPUs per node.
    pub gpus_per_node: u32,
}

fn log_residuals(
    target: &Target,
    eff: &EfficiencyParams,
    points: &[Measurement],
) -> Result<DVector<f64>, CalibrationError> {
    let ctx = PerfContext {
        hw: target.hw,
        model: target.model,
        eff,
        gpus_per_node: target.gpus_per_node,
    };
    let mut r = DVector::zeros(points.len());
    for (i, p) in points.iter().enumerate() {
        let invalid = |reason| CalibrationError::Invalid {
            index: i,
            config: p.config.to_string(),
            reason,
        };
        let pred = ConfigCost::new(&ctx, &p.config)
            .and_then(|c| c.at(&ctx, p.batch))
            .map_err(invalid)?;
        r[i] = (pred.step_time_s / p.step_time_s).ln();
    }
    Ok(r)
}

fn with(start: &EfficiencyParams, knobs: &[Knob], theta: &DVector<f64>) -> EfficiencyParams {
    let mut e = start.clone();
    for (k, t) in knobs.iter().zip(theta.iter()) {
        *k.slot(&mut e) = t.exp();
    }
    e
}

fn rms(r: &DVector<f64>) -> f64 {
    (r.norm_squared() / r.len().max(1) as f64).sqrt()
}

/// Fit `knobs` of `start` to `points` by Levenberg–Marquardt (numerical Jacobian, Marquardt
/// scaling), at most `max_iter` iterations.
pub fn calibrate(
    target: &Target,
    start: &EfficiencyParams,
    knobs: &[Knob],
    points: &[Measurement],
    max_iter: usize,
) -> Result<Calibration, CalibrationError> {
    if points.len() < knobs.len() || points.is_empty() {
        return Err(CalibrationError::TooFew {
            points: points.len(),
            knobs: knobs.len(),
        });
    }
    let mut start = start.clone();
    let mut theta = DVector::from_iterator(
        knobs.len(),
        knobs.iter().map(|k| k.slot(&mut start).max(1e-12).ln()),
    );
    let mut r = log_residuals(target, &with(&start, knobs, &theta), points)?;
    let initial_rms = rms(&r);
    let mut cost = r.norm_squared();
    let mut lambda = 1e-3;
    let mut iterations = 0;
    while iterations < max_iter && !knobs.is_empty() {
        iterations += 1;
        let mut jac = DMatrix::zeros(points.len(), knobs.len());
        for j in 0..knobs.len() {
            let step = 1e-6;
            let mut t = theta.clone();
            t[j] += step;
            let rj = log_residuals(target, &with(&start, knobs, &t), points)?;
            jac.set_column(j, &((rj - &r) / step));
        }
        let jtj = jac.transpose() * &jac;
        let g = jac.transpose() * &r;
        let mut improved = false;
        for _ in 0..12 {
            let mut a = jtj.clone();
            for i in 0..a.nrows() {
                a[(i, i)] += lambda * jtj[(i, i)].max(1e-12);
            }
            let Some(delta) = a.lu().solve(&(-&g)) else {
                lambda *= 10.0;
                continue;
            };
            let cand = &theta + &delta;
            let rc = log_residuals(target, &with(&start, knobs, &cand), points)?;
            let c = rc.norm_squared();
            if c < cost {
                let small = delta.norm() < 1e-9 || (cost - c) < 1e-14 * cost.max(1e-300);
                theta = cand;
                r = rc;
                cost = c;
                lambda = (lambda / 3.0).max(1e-12);
                improved = !small;
                break;
            }
            lambda *= 4.0;
        }
        if !improved {
            break;
        }
    }
    let params = with(&start, knobs, &theta);
    Ok(Calibration {
        residuals: r.iter().map(|x| x.exp() - 1.0).collect(),
        rms: rms(&r),
        initial_rms,
        params,
        iterations,
    })
}
