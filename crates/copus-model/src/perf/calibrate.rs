//! Calibration: fit efficiency and link parameters to measured step times by nonlinear least
//! squares (Levenberg–Marquardt on nalgebra). Residuals are relative, `ln(predicted/measured)`,
//! so fast and slow configurations weigh alike; parameters are fitted in log space so they
//! stay positive, bounded to a factor [`BOUND`] either side of their starting value and pulled
//! toward it by a weak prior ([`PRIOR_WEIGHT`], [`USER_PRIOR_WEIGHT`] per unit of log change),
//! so that a few rows cannot run away with a parameter they barely determine.

use super::measurements::Measurement;
use super::{ConfigCost, EfficiencyParams, HardwareProfile, Invalid, ModelProfile, PerfContext};
use nalgebra::{DMatrix, DVector};
use serde::{Deserialize, Serialize};

/// How far a fitted parameter may move from its starting value, as a factor either way.
pub const BOUND: f64 = 8.0;
/// Weight of the prior residual `ln(θ/θ₀)` of every fitted parameter when fitting hardware
/// defaults on a handful of published rows ([`calibrate_samples`]).
pub const PRIOR_WEIGHT: f64 = 0.05;
/// The same for a user's own measurements of one job ([`calibrate`]), usually many more.
pub const USER_PRIOR_WEIGHT: f64 = 0.01;

/// A parameter calibration may fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
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
    /// Fixed cost per micro-batch ([`EfficiencyParams::microbatch_overhead_s`]).
    MicrobatchOverhead,
    /// Small-chunk bandwidth fall-off of collectives ([`EfficiencyParams::coll_chunk_half_bytes`]).
    ChunkHalf,
    /// Ring-step latency across the network ([`EfficiencyParams::hop_latency_inter_s`]).
    HopInter,
    /// Slowdown of compute while hiding communication ([`EfficiencyParams::overlap_cost`]).
    OverlapCost,
    /// Share of ZeRO-3 collectives prefetching hides ([`EfficiencyParams::zero3_overlap`]).
    Zero3Overlap,
    /// Small-shard fall-off of ZeRO-3 collectives ([`EfficiencyParams::zero3_chunk_half_bytes`]).
    Zero3ChunkHalf,
    /// Inner dimension of half GEMM efficiency ([`EfficiencyParams::gemm_k_half`]).
    GemmKHalf,
    /// Fused-attention backward efficiency ([`EfficiencyParams::attn_bwd_eff`]).
    AttnBwdEff,
    /// FP8 GEMM plateau ([`EfficiencyParams::fp8_max_eff`]).
    Fp8MaxEff,
    /// Share of FSDP collectives prefetching hides ([`EfficiencyParams::fsdp_overlap`]).
    FsdpOverlap,
    /// Hopper-native fused attention's speed-up ([`EfficiencyParams::attn_native_speedup`]).
    AttnNativeSpeedup,
    /// Share of tensor-parallel communication hidden behind GEMMs
    /// ([`EfficiencyParams::tp_overlap`]; only where the stack overlaps TP).
    TpOverlap,
    /// The Triton flash-attention kernel's slowdown against FlashAttention-2
    /// ([`EfficiencyParams::attn_triton_slowdown`]).
    AttnTritonSlowdown,
}

impl Knob {
    /// Every knob, in a fixed order.
    pub const ALL: [Knob; 19] = [
        Knob::MaxEff,
        Knob::GemmOverhead,
        Knob::AttnEff,
        Knob::MemEff,
        Knob::IntraLink,
        Knob::InterLink,
        Knob::MicrobatchOverhead,
        Knob::ChunkHalf,
        Knob::HopInter,
        Knob::OverlapCost,
        Knob::Zero3Overlap,
        Knob::Zero3ChunkHalf,
        Knob::GemmKHalf,
        Knob::AttnBwdEff,
        Knob::Fp8MaxEff,
        Knob::FsdpOverlap,
        Knob::AttnNativeSpeedup,
        Knob::TpOverlap,
        Knob::AttnTritonSlowdown,
    ];

    /// The parameter this knob sets.
    pub fn slot(self, e: &mut EfficiencyParams) -> &mut f64 {
        match self {
            Knob::MaxEff => &mut e.max_eff,
            Knob::GemmOverhead => &mut e.gemm_overhead_s,
            Knob::AttnEff => &mut e.attn_eff,
            Knob::MemEff => &mut e.mem_eff,
            Knob::IntraLink => &mut e.intra_link_scale,
            Knob::InterLink => &mut e.inter_link_scale,
            Knob::MicrobatchOverhead => &mut e.microbatch_overhead_s,
            Knob::ChunkHalf => &mut e.coll_chunk_half_bytes,
            Knob::HopInter => &mut e.hop_latency_inter_s,
            Knob::OverlapCost => &mut e.overlap_cost,
            Knob::Zero3Overlap => &mut e.zero3_overlap,
            Knob::Zero3ChunkHalf => &mut e.zero3_chunk_half_bytes,
            Knob::GemmKHalf => &mut e.gemm_k_half,
            Knob::AttnBwdEff => &mut e.attn_bwd_eff,
            Knob::Fp8MaxEff => &mut e.fp8_max_eff,
            Knob::FsdpOverlap => &mut e.fsdp_overlap,
            Knob::AttnNativeSpeedup => &mut e.attn_native_speedup,
            Knob::TpOverlap => &mut e.tp_overlap,
            Knob::AttnTritonSlowdown => &mut e.attn_triton_slowdown,
        }
    }

    /// The field name in [`EfficiencyParams`] (and in calibration files).
    pub fn name(self) -> &'static str {
        match self {
            Knob::MaxEff => "max_eff",
            Knob::GemmOverhead => "gemm_overhead_s",
            Knob::AttnEff => "attn_eff",
            Knob::MemEff => "mem_eff",
            Knob::IntraLink => "intra_link_scale",
            Knob::InterLink => "inter_link_scale",
            Knob::MicrobatchOverhead => "microbatch_overhead_s",
            Knob::ChunkHalf => "coll_chunk_half_bytes",
            Knob::HopInter => "hop_latency_inter_s",
            Knob::OverlapCost => "overlap_cost",
            Knob::Zero3Overlap => "zero3_overlap",
            Knob::Zero3ChunkHalf => "zero3_chunk_half_bytes",
            Knob::GemmKHalf => "gemm_k_half",
            Knob::AttnBwdEff => "attn_bwd_eff",
            Knob::Fp8MaxEff => "fp8_max_eff",
            Knob::FsdpOverlap => "fsdp_overlap",
            Knob::AttnNativeSpeedup => "attn_native_speedup",
            Knob::TpOverlap => "tp_overlap",
            Knob::AttnTritonSlowdown => "attn_triton_slowdown",
        }
    }

    /// Largest physically meaningful value (fractions of a peak cannot exceed 1).
    pub fn upper(self) -> f64 {
        match self {
            Knob::MaxEff
            | Knob::AttnEff
            | Knob::Zero3Overlap
            | Knob::AttnBwdEff
            | Knob::Fp8MaxEff
            | Knob::FsdpOverlap
            | Knob::TpOverlap => 1.0,
            // Streaming kernels reach about 90 % of the HBM datasheet bandwidth at best.
            Knob::MemEff => 0.92,
            _ => f64::INFINITY,
        }
    }

    /// The knob of a field name, if it is one.
    pub fn from_name(name: &str) -> Option<Knob> {
        Knob::ALL.into_iter().find(|k| k.name() == name)
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
    #[error(
        "{points} measurement{} cannot determine {knobs} parameter{}",
        if *points == 1 { "" } else { "s" },
        if *knobs == 1 { "" } else { "s" }
    )]
    TooFew {
        /// Measurements given.
        points: usize,
        /// Knobs to fit.
        knobs: usize,
    },
    /// A measured configuration cannot run under the model.
    #[error("measurement {} of the input ({config}): {reason}", index + 1)]
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

/// One measurement with what it was measured on: the model and hardware, and the stack's
/// settings (`eff`, whose knob fields the fit overwrites).
#[derive(Debug, Clone)]
pub struct Sample<'a> {
    /// Hardware, model and node size.
    pub target: Target<'a>,
    /// The stack's settings for this measurement.
    pub eff: EfficiencyParams,
    /// The measured step.
    pub measurement: Measurement,
}

fn log_residuals(
    samples: &[Sample],
    knobs: &[Knob],
    theta: &DVector<f64>,
) -> Result<DVector<f64>, CalibrationError> {
    let mut r = DVector::zeros(samples.len());
    for (i, s) in samples.iter().enumerate() {
        let eff = with(&s.eff, knobs, theta);
        let ctx = PerfContext {
            hw: s.target.hw,
            model: s.target.model,
            eff: &eff,
            gpus_per_node: s.target.gpus_per_node,
        };
        let p = &s.measurement;
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

/// Fit `knobs` of `start` to `points` of one target by Levenberg–Marquardt (numerical
/// Jacobian, Marquardt scaling), at most `max_iter` iterations.
pub fn calibrate(
    target: &Target,
    start: &EfficiencyParams,
    knobs: &[Knob],
    points: &[Measurement],
    max_iter: usize,
) -> Result<Calibration, CalibrationError> {
    let samples: Vec<Sample> = points
        .iter()
        .map(|m| Sample {
            target: *target,
            eff: start.clone(),
            measurement: *m,
        })
        .collect();
    fit(&samples, start, knobs, max_iter, USER_PRIOR_WEIGHT)
}

/// Fit `knobs` to measurements of several targets and stacks at once: every sample keeps its
/// own settings, and the fitted knobs (starting at `start`'s values) replace theirs.
pub fn calibrate_samples(
    samples: &[Sample],
    start: &EfficiencyParams,
    knobs: &[Knob],
    max_iter: usize,
) -> Result<Calibration, CalibrationError> {
    fit(samples, start, knobs, max_iter, PRIOR_WEIGHT)
}

fn fit(
    samples: &[Sample],
    start: &EfficiencyParams,
    knobs: &[Knob],
    max_iter: usize,
    prior_weight: f64,
) -> Result<Calibration, CalibrationError> {
    if samples.len() < knobs.len() || samples.is_empty() {
        return Err(CalibrationError::TooFew {
            points: samples.len(),
            knobs: knobs.len(),
        });
    }
    let mut start = start.clone();
    let theta0 = DVector::from_iterator(
        knobs.len(),
        knobs.iter().map(|k| k.slot(&mut start).max(1e-12).ln()),
    );
    let bound = BOUND.ln();
    let upper: Vec<f64> = knobs.iter().map(|k| k.upper().ln()).collect();
    let clamp = |t: DVector<f64>| {
        DVector::from_iterator(
            t.len(),
            t.iter()
                .zip(theta0.iter())
                .zip(&upper)
                .map(|((x, x0), u)| x.clamp(x0 - bound, (x0 + bound).min(*u).max(x0 - bound))),
        )
    };
    // Residuals with the prior terms appended.
    let full = |theta: &DVector<f64>| -> Result<(DVector<f64>, DVector<f64>), CalibrationError> {
        let data = log_residuals(samples, knobs, theta)?;
        let mut r = DVector::zeros(data.len() + knobs.len());
        r.rows_mut(0, data.len()).copy_from(&data);
        for j in 0..knobs.len() {
            r[data.len() + j] = prior_weight * (theta[j] - theta0[j]);
        }
        Ok((r, data))
    };
    let mut theta = theta0.clone();
    let (mut r, mut data) = full(&theta)?;
    let initial_rms = rms(&data);
    let mut cost = r.norm_squared();
    let mut lambda = 1e-3;
    let mut iterations = 0;
    while iterations < max_iter && !knobs.is_empty() {
        iterations += 1;
        let mut jac = DMatrix::zeros(r.len(), knobs.len());
        for j in 0..knobs.len() {
            let step = 1e-6;
            let mut t = theta.clone();
            t[j] += step;
            let (rj, _) = full(&t)?;
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
            let cand = clamp(&theta + &delta);
            let (rc, dc) = full(&cand)?;
            let c = rc.norm_squared();
            if c < cost {
                let small = delta.norm() < 1e-9 || (cost - c) < 1e-14 * cost.max(1e-300);
                theta = cand;
                r = rc;
                data = dc;
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
        residuals: data.iter().map(|x| x.exp() - 1.0).collect(),
        rms: rms(&data),
        initial_rms,
        params,
        iterations,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every knob is found by its name, writes its own slot, and the shares are bounded by 1.
    #[test]
    fn every_knob_has_a_name_and_its_own_slot() {
        let mut seen = std::collections::BTreeSet::new();
        for k in Knob::ALL {
            assert_eq!(Knob::from_name(k.name()), Some(k));
            assert!(seen.insert(k.name()), "{} twice", k.name());
            let mut e = EfficiencyParams::default();
            *k.slot(&mut e) = 0.123_456;
            let others = Knob::ALL.iter().filter(|&&o| o != k);
            for &o in others {
                let mut f = e.clone();
                assert_ne!(
                    *o.slot(&mut f),
                    0.123_456,
                    "{} shares {}'s slot",
                    o.name(),
                    k.name()
                );
            }
        }
        for k in [
            Knob::TpOverlap,
            Knob::AttnEff,
            Knob::AttnBwdEff,
            Knob::FsdpOverlap,
        ] {
            assert_eq!(k.upper(), 1.0, "{}", k.name());
        }
        assert_eq!(Knob::AttnNativeSpeedup.upper(), f64::INFINITY);
    }
}
