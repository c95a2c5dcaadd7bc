//! A B_crit trajectory over training: what the estimators (measured runs) or the scenarios
//! (published laws) hand to the goodput grid, the planner and the timeline.

use serde::Serialize;

/// B_crit at one point of training.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TrajectoryPoint {
    /// Optimizer step (for scenarios: at the scenario's nominal batch size).
    pub step: u64,
    /// Tokens trained so far.
    pub tokens: f64,
    /// Critical batch size estimate, samples (sequences).
    pub b_crit: f64,
    /// Interval of `b_crit` (samples), when the source gives one.
    pub ci: Option<(f64, f64)>,
    /// Training loss (nats), when known.
    pub loss: Option<f64>,
}

/// B_crit over training, ordered by tokens.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Trajectory {
    /// Where the numbers come from (a law, a run), shown in the UI.
    pub label: String,
    /// Sequence length in tokens used to convert samples to tokens.
    pub seq_len: u32,
    /// Points, ascending in tokens.
    pub points: Vec<TrajectoryPoint>,
}

impl Trajectory {
    /// Index of the point nearest to `tokens`.
    pub fn index_at_tokens(&self, tokens: f64) -> usize {
        self.points
            .iter()
            .enumerate()
            .min_by(|a, b| {
                (a.1.tokens - tokens)
                    .abs()
                    .total_cmp(&(b.1.tokens - tokens).abs())
            })
            .map_or(0, |(i, _)| i)
    }

    /// The same trajectory with B_crit counted in sequences of `seq_len` tokens instead of this
    /// trajectory's samples (equal tokens: B × own seq_len / `seq_len`). The goodput grid and
    /// the planner count batches in the model's sequences; a measured run counts its own.
    pub fn in_sequences_of(&self, seq_len: u32) -> Trajectory {
        let mut t = self.clone();
        if seq_len == 0 || self.seq_len == 0 || seq_len == self.seq_len {
            return t;
        }
        let ratio = self.seq_len as f64 / seq_len as f64;
        for p in &mut t.points {
            p.b_crit *= ratio;
            p.ci = p.ci.map(|(lo, hi)| (lo * ratio, hi * ratio));
        }
        t.seq_len = seq_len;
        t
    }

    /// Smallest and largest B_crit (samples), for axis scaling.
    pub fn b_crit_range(&self) -> Option<(f64, f64)> {
        let lo = self.points.iter().map(|p| p.ci.map_or(p.b_crit, |c| c.0));
        let hi = self.points.iter().map(|p| p.ci.map_or(p.b_crit, |c| c.1));
        let lo = lo.fold(f64::INFINITY, f64::min);
        let hi = hi.fold(f64::NEG_INFINITY, f64::max);
        (lo.is_finite() && hi.is_finite()).then_some((lo, hi))
    }
}
