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
    /// Where a view of a measured run opens "now": the latest point whose B_crit interval is
    /// bounded, where the last points' intervals are open above (a smoothed |G|² near zero at
    /// the run's end reads as a B_crit of hundreds of thousands, every statistical efficiency
    /// near 1); the last point otherwise, and where no point is bounded. `None` without
    /// points. The explorer and `grid` (without `--at`) open there.
    pub fn latest_bounded(&self) -> Option<usize> {
        let bounded = |p: &TrajectoryPoint| p.ci.is_some_and(|(_, hi)| hi.is_finite());
        let last = self.points.len().checked_sub(1)?;
        if bounded(&self.points[last]) {
            return Some(last);
        }
        Some(self.points.iter().rposition(bounded).unwrap_or(last))
    }

    /// Index of the point nearest to `tokens` (the first of equally near ones; 0 without
    /// points). A binary search where the points' tokens ascend, as a run's do; a scan
    /// otherwise (unsorted or non-finite tokens).
    pub fn index_at_tokens(&self, tokens: f64) -> usize {
        self.nearest(tokens, self.tokens_ascend())
    }

    /// [`Self::index_at_tokens`] of each of `at`, checking the order of the points once.
    pub fn indices_at_tokens(&self, at: impl IntoIterator<Item = f64>) -> Vec<usize> {
        let ascending = self.tokens_ascend();
        at.into_iter().map(|t| self.nearest(t, ascending)).collect()
    }

    /// Whether the points' tokens ascend (ties allowed).
    fn tokens_ascend(&self) -> bool {
        self.points.is_sorted_by(|a, b| a.tokens <= b.tokens)
    }

    /// The nearest point to `tokens`; `ascending` from [`Self::tokens_ascend`].
    fn nearest(&self, tokens: f64, ascending: bool) -> usize {
        let pts = &self.points;
        // Every distance finite (the largest is to an end): otherwise ties among infinite or
        // NaN distances are the scan's to break.
        let finite_to =
            |p: Option<&TrajectoryPoint>| p.is_some_and(|p| (p.tokens - tokens).abs().is_finite());
        if !(ascending && finite_to(pts.first()) && finite_to(pts.last())) {
            return self.index_at_tokens_scan(tokens);
        }
        let distance = |i: usize| (pts[i].tokens - tokens).abs();
        // First point at or after `tokens`, and the nearest before it.
        let after = pts.partition_point(|p| p.tokens < tokens);
        let best = match (after.checked_sub(1), after < pts.len()) {
            (None, _) => after.min(pts.len().saturating_sub(1)),
            (Some(before), false) => before,
            (Some(before), true) => {
                if distance(before).total_cmp(&distance(after)).is_le() {
                    before
                } else {
                    after
                }
            }
        };
        // The first point with the same tokens (the scan keeps the first of a tie).
        match pts.get(best) {
            Some(p) => pts.partition_point(|q| q.tokens < p.tokens),
            None => 0,
        }
    }

    /// [`Self::index_at_tokens`] by a scan over every point.
    fn index_at_tokens_scan(&self, tokens: f64) -> usize {
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

    /// Whether B_crit here already counts sequences of `seq_len` tokens (or either length is
    /// unknown, 0): then [`Self::in_sequences_of`] changes nothing.
    pub fn counts_in(&self, seq_len: u32) -> bool {
        seq_len == 0 || self.seq_len == 0 || seq_len == self.seq_len
    }

    /// The same trajectory with B_crit counted in sequences of `seq_len` tokens instead of this
    /// trajectory's samples (equal tokens: B × own seq_len / `seq_len`). The goodput grid and
    /// the planner count batches in the model's sequences; a measured run counts its own.
    pub fn in_sequences_of(&self, seq_len: u32) -> Trajectory {
        let mut t = self.clone();
        if self.counts_in(seq_len) {
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

    /// The global batch, in this trajectory's samples, that its last two points imply (tokens
    /// per step over tokens per sample), if they do: what a measured run trains with now.
    pub fn implied_batch(&self) -> Option<u64> {
        self.implied_batch_in(self.seq_len)
    }

    /// [`Self::implied_batch`] counted in sequences of `seq_len` tokens (the model's, which the
    /// goodput grid's batch axis counts), if the run's tokens per step make at least one.
    pub fn implied_batch_in(&self, seq_len: u32) -> Option<u64> {
        let seq = f64::from(seq_len.max(1));
        match self.points.as_slice() {
            [.., a, b] if b.step > a.step && b.tokens > a.tokens => {
                let per_step = (b.tokens - a.tokens) / (b.step - a.step) as f64 / seq;
                (per_step.is_finite() && per_step >= 1.0).then(|| per_step.round() as u64)
            }
            _ => None,
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn trajectory(tokens: &[f64]) -> Trajectory {
        Trajectory {
            label: String::new(),
            seq_len: 1,
            points: tokens
                .iter()
                .enumerate()
                .map(|(i, &t)| TrajectoryPoint {
                    step: i as u64,
                    tokens: t,
                    b_crit: 1.0,
                    ci: None,
                    loss: None,
                })
                .collect(),
        }
    }

    proptest! {
        /// The search gives the scan's index (first of equally near points) on ascending
        /// tokens with repeats, and on any order.
        #[test]
        fn the_search_finds_what_the_scan_finds(
            steps in proptest::collection::vec(0u8..4, 0..40),
            shuffle in any::<bool>(),
            at in -5.0f64..200.0,
        ) {
            let mut acc = 0.0;
            let mut tokens: Vec<f64> = steps.iter().map(|&d| { acc += f64::from(d) * 2.5; acc }).collect();
            if shuffle { tokens.reverse(); }
            let t = trajectory(&tokens);
            let xs = [at, at.round(), at.round() + 1.25, 0.0];
            for x in xs {
                prop_assert_eq!(t.index_at_tokens(x), t.index_at_tokens_scan(x));
            }
            let each: Vec<usize> = xs.iter().map(|&x| t.index_at_tokens_scan(x)).collect();
            prop_assert_eq!(t.indices_at_tokens(xs), each);
        }
    }

    #[test]
    fn non_finite_tokens_take_the_scan() {
        let t = trajectory(&[0.0, 1.0, f64::INFINITY]);
        for x in [f64::INFINITY, f64::NAN, 0.4, f64::MAX] {
            assert_eq!(t.index_at_tokens(x), t.index_at_tokens_scan(x));
        }
        let huge = trajectory(&[-f64::MAX, 0.0, f64::MAX]);
        for x in [f64::MAX, -f64::MAX, 1.0] {
            assert_eq!(huge.index_at_tokens(x), huge.index_at_tokens_scan(x));
        }
        assert_eq!(trajectory(&[]).index_at_tokens(3.0), 0);
    }
}
