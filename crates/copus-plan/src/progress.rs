//! Phases of a B_crit trajectory in minimal-sample units.
//!
//! Between trajectory points i and i+1 lies phase i. Its critical batch is the geometric mean of
//! the two points' B_crit (samples) times the session's `b_crit_scale`. Its work is a fixed
//! number of *minimal samples* ΔS_min — the samples it would take at B → 0 — derived from the
//! tokens between the points according to the [`TokenAxis`]:
//!
//! - [`TokenAxis::ReferenceBatch`] (what `copus plan` uses for scenarios, at their
//!   `nominal_batch`): the token axis counts tokens consumed by a run at batch B_ref, so
//!   ΔS_min = Δtokens / seq_len / (1 + B_ref / B_crit). A run at B_ref then reproduces the
//!   scenario's token budget exactly; runs at a larger batch consume more tokens to reach the
//!   same loss, as they must.
//! - [`TokenAxis::FromSteps`] (measured runs): like a reference batch, with B_ref of each phase
//!   read from the trajectory itself as Δtokens / (seq_len · Δstep).
//! - [`TokenAxis::Minimal`]: the axis already counts minimal tokens, ΔS_min = Δtokens / seq_len.

use crate::trajectory::Trajectory;
use serde::Serialize;

/// How the trajectory's token axis is read. JSON writes it as `{"kind": "reference_batch",
/// "batch": 512.0}`, `{"kind": "from_steps"}` or `{"kind": "minimal"}`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TokenAxis {
    /// Tokens consumed by a run at this global batch, samples.
    ReferenceBatch(f64),
    /// Tokens consumed by the run that produced the trajectory, at the batch its step numbering
    /// implies.
    FromSteps,
    /// Minimal tokens (the B → 0 limit of E = E_min(1 + B/B_crit)).
    Minimal,
}

impl Serialize for TokenAxis {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let (kind, batch) = match self {
            TokenAxis::ReferenceBatch(b) => ("reference_batch", Some(*b)),
            TokenAxis::FromSteps => ("from_steps", None),
            TokenAxis::Minimal => ("minimal", None),
        };
        let mut st = ser.serialize_struct("TokenAxis", 2)?;
        st.serialize_field("kind", kind)?;
        st.serialize_field("batch", &batch)?;
        st.end()
    }
}

impl TokenAxis {
    /// The axis in words for a model of `seq_len` tokens a sample ("tokens consumed at a
    /// batch of 512 sequences"; one-token samples stay samples).
    pub fn words(&self, seq_len: u32) -> String {
        match self {
            TokenAxis::ReferenceBatch(b) => format!(
                "tokens consumed at a batch of {b:.0} {}",
                crate::format::sample_word(seq_len)
            ),
            other => other.to_string(),
        }
    }
}

impl std::fmt::Display for TokenAxis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TokenAxis::ReferenceBatch(b) => {
                write!(f, "tokens consumed at a batch of {b:.0} samples")
            }
            TokenAxis::FromSteps => f.write_str("tokens the measured run consumed"),
            TokenAxis::Minimal => f.write_str("minimal tokens (B → 0)"),
        }
    }
}

/// One phase of training between two trajectory points.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Phase {
    /// Tokens on the trajectory axis at the phase start.
    pub start_tokens: f64,
    /// Tokens on the trajectory axis at the phase end.
    pub end_tokens: f64,
    /// Critical batch during the phase, samples (already scaled).
    pub b_crit: f64,
    /// Work of the phase in minimal samples ΔS_min.
    pub min_samples: f64,
}

impl Phase {
    /// Samples consumed to finish the phase at global batch `batch` (samples) under the
    /// McCandlish objective: ΔS_min · (1 + B/B_crit) (see [`super::Problem::steps`] for any
    /// objective).
    pub fn samples_at(&self, batch: f64) -> f64 {
        self.min_samples * (1.0 + batch / self.b_crit)
    }

    /// Optimizer steps to finish the phase at `batch` samples (McCandlish objective).
    pub fn steps_at(&self, batch: f64) -> f64 {
        self.samples_at(batch) / batch
    }
}

/// Why a trajectory cannot be turned into phases.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProgressError {
    /// Fewer than two points.
    #[error("trajectory '{0}' needs at least two points to form a phase")]
    TooShort(String),
    /// A point is out of order or out of range.
    #[error("trajectory '{label}', point {index}: {msg}")]
    BadPoint {
        /// Trajectory label.
        label: String,
        /// Index of the offending point.
        index: usize,
        /// What is wrong.
        msg: String,
    },
    /// A parameter is out of range.
    #[error("{0}")]
    Invalid(String),
}

/// Cut `traj` into phases in minimal-sample units, multiplying B_crit by `b_crit_scale`.
pub fn phases(
    traj: &Trajectory,
    axis: TokenAxis,
    b_crit_scale: f64,
) -> Result<Vec<Phase>, ProgressError> {
    if traj.points.len() < 2 {
        return Err(ProgressError::TooShort(traj.label.clone()));
    }
    if traj.seq_len == 0 || !(b_crit_scale.is_finite() && b_crit_scale > 0.0) {
        return Err(ProgressError::Invalid(format!(
            "need seq_len > 0 and b_crit_scale > 0, got {} and {b_crit_scale}",
            traj.seq_len
        )));
    }
    if let TokenAxis::ReferenceBatch(b) = axis
        && !(b.is_finite() && b > 0.0)
    {
        return Err(ProgressError::Invalid(format!(
            "reference batch must be positive, got {b}"
        )));
    }
    let bad = |index: usize, msg: String| ProgressError::BadPoint {
        label: traj.label.clone(),
        index,
        msg,
    };
    for (i, p) in traj.points.iter().enumerate() {
        if !(p.b_crit.is_finite() && p.b_crit > 0.0) {
            return Err(bad(i, format!("B_crit must be positive, got {}", p.b_crit)));
        }
        if !p.tokens.is_finite() {
            return Err(bad(i, format!("tokens must be finite, got {}", p.tokens)));
        }
    }
    let seq = traj.seq_len as f64;
    traj.points
        .windows(2)
        .enumerate()
        .map(|(i, w)| {
            let (a, b) = (w[0], w[1]);
            let d_tokens = b.tokens - a.tokens;
            if d_tokens <= 0.0 {
                return Err(bad(i + 1, "tokens must increase strictly".into()));
            }
            let b_crit = (a.b_crit * b.b_crit).sqrt() * b_crit_scale;
            let samples = d_tokens / seq;
            let reference = match axis {
                TokenAxis::ReferenceBatch(r) => Some(r),
                TokenAxis::Minimal => None,
                TokenAxis::FromSteps => {
                    if b.step <= a.step {
                        return Err(bad(i + 1, "steps must increase strictly".into()));
                    }
                    Some(samples / (b.step - a.step) as f64)
                }
            };
            let min_samples = reference.map_or(samples, |r| samples / (1.0 + r / b_crit));
            Ok(Phase {
                start_tokens: a.tokens,
                end_tokens: b.tokens,
                b_crit,
                min_samples,
            })
        })
        .collect()
}
