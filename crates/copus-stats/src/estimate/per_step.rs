//! Per-step estimators of |G|² and tr(Σ) from squared gradient norms at two batch sizes
//! (McCandlish et al. 2018, App. A.1), and consecutive-step differencing for records that hold
//! one gradient only.
//!
//! With E|G_B|² = |G|² + tr(Σ)/B, squared norms at B_small and B_big give the unbiased
//! |G|² = (B_big·|G_big|² − B_small·|G_small|²)/(B_big − B_small) and
//! tr(Σ) = (|G_small|² − |G_big|²)/(1/B_small − 1/B_big). Σ is the per-**sample** covariance,
//! so B_simple = tr(Σ)/|G|² is in samples.

use crate::record::step::StepStats;
use serde::Serialize;

/// One step's unbiased estimates (same units as the squared norms).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TwoBatch {
    /// Unbiased |G|² (often negative on a single step).
    pub g2: f64,
    /// Unbiased tr(Σ), per-sample covariance trace.
    pub trace: f64,
}

/// The two-batch estimator; `None` unless `0 < b_small < b_big` (samples).
pub fn two_batch(b_small: f64, b_big: f64, sq_small: f64, sq_big: f64) -> Option<TwoBatch> {
    if !(b_small > 0.0 && b_big > b_small) {
        return None;
    }
    solve_two_sizes(b_small, sq_small, b_big, sq_big)
}

/// Solve E|G_B|² = |G|² + tr(Σ)/B from squared norms at any two distinct positive batch sizes
/// (the order of the pairs does not matter); `None` if the sizes coincide or are not positive.
pub fn solve_two_sizes(b1: f64, sq1: f64, b2: f64, sq2: f64) -> Option<TwoBatch> {
    if !(b1 > 0.0 && b2 > 0.0) || b1 == b2 {
        return None;
    }
    let span = b2 - b1;
    Some(TwoBatch {
        g2: (b2 * sq2 - b1 * sq1) / span,
        trace: (sq1 - sq2) * b1 * b2 / span,
    })
}

/// Which estimator produced a step's numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EstimatorKind {
    /// Two batch sizes within one step (unbiased).
    TwoBatch,
    /// Two-batch with per-example norms (b_small = 1): the lowest-variance variant (unbiased).
    PerExample,
    /// Consecutive-step differencing of single-gradient records: biased, because the
    /// parameters (and so G) move between the two steps (AdaptDL's fallback).
    Differencing,
}

impl EstimatorKind {
    /// True for estimators whose expectation is not exactly |G|² and tr(Σ).
    pub fn is_biased(self) -> bool {
        self == EstimatorKind::Differencing
    }
}

/// A usable step: its record index and its per-step estimates.
#[derive(Debug, Clone, PartialEq)]
pub struct StepEstimate {
    /// Index into the record slice the estimate came from.
    pub index: usize,
    /// Optimizer step.
    pub step: u64,
    /// Unbiased (or, for differencing, biased) |G|² of this step.
    pub g2: f64,
    /// Unbiased (or biased) tr(Σ) of this step.
    pub trace: f64,
    /// Which estimator produced it.
    pub kind: EstimatorKind,
}

/// Why a valid record still gave no estimate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoEstimate {
    /// Single-gradient record without `dot_prev`.
    NoDotPrev,
    /// Single-gradient record with `dot_prev` whose predecessor is missing, not the previous
    /// step, not single-gradient or of another batch size.
    NoPredecessor,
}

/// Estimate one record; `prev` is the record just before it in step order (for differencing).
pub fn estimate_record(
    index: usize,
    r: &StepStats,
    prev: Option<&StepStats>,
) -> Result<StepEstimate, NoEstimate> {
    let make = |tb: TwoBatch, kind| StepEstimate {
        index,
        step: r.step,
        g2: tb.g2,
        trace: tb.trace,
        kind,
    };
    if let Some(tb) = two_batch(r.b_small, r.b_big, r.sq_small, r.sq_big) {
        let kind = if r.b_small == 1.0 {
            EstimatorKind::PerExample
        } else {
            EstimatorKind::TwoBatch
        };
        return Ok(make(tb, kind));
    }
    let dot = r.dot_prev.ok_or(NoEstimate::NoDotPrev)?;
    let p = prev
        .filter(|p| {
            p.step.checked_add(1) == Some(r.step) && p.is_single_gradient() && p.b_big == r.b_big
        })
        .ok_or(NoEstimate::NoPredecessor)?;
    let tb = differencing(r.b_big, p.sq_big, r.sq_big, dot).ok_or(NoEstimate::NoPredecessor)?;
    Ok(make(tb, EstimatorKind::Differencing))
}

/// Consecutive-step differencing: the two gradients g_{t−1}, g_t (b samples each) act as two
/// small batches and their mean as a batch of 2b. Needs |g_{t−1}|², |g_t|² and ⟨g_t, g_{t−1}⟩.
pub fn differencing(b: f64, sq_prev: f64, sq_cur: f64, dot: f64) -> Option<TwoBatch> {
    let sq_small = 0.5 * (sq_prev + sq_cur);
    let sq_big = 0.25 * (sq_prev + sq_cur + 2.0 * dot);
    two_batch(b, 2.0 * b, sq_small, sq_big)
}
