//! Exactly-once delivery of a live run's records, whatever the transport does: a producer
//! that rewrites its file atomically (a temporary file renamed over it) makes the follower
//! read every line again, and a stats server replays its history to each new connection.
//!
//! Rule: a record whose step is above the highest step seen is new. One at or below it is a
//! **duplicate** when the same step was seen with the same values (a replay or a rewrite:
//! dropped and counted), an **out-of-order** record when that step was never seen (accepted),
//! and a **restarted run** when the step was seen with different values (the producer
//! restarted, e.g. from a checkpoint: accepted, and the consumer drops the old records from
//! that step on, which the new run supersedes).

use crate::stats::step::StepStats;
use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};

/// What to do with a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Not seen before: deliver.
    New,
    /// The same step with the same values was already delivered: drop and count.
    Duplicate,
    /// The step was delivered with other values: the run restarted at this step; deliver,
    /// and forget what was delivered from this step on.
    Restart,
}

/// Steps delivered so far, with a fingerprint of each record's values (16 bytes per step).
#[derive(Debug, Default, Clone)]
pub struct Dedupe {
    highest: Option<u64>,
    seen: HashMap<u64, u64>,
}

/// A fingerprint of the values of a record (step, batch sizes, squared norms, loss).
pub fn fingerprint(r: &StepStats) -> u64 {
    let mut h = DefaultHasher::new();
    r.step.hash(&mut h);
    for x in [r.b_small, r.b_big, r.sq_small, r.sq_big] {
        x.to_bits().hash(&mut h);
    }
    r.loss.map(f64::to_bits).hash(&mut h);
    r.tokens.map(f64::to_bits).hash(&mut h);
    h.finish()
}

impl Dedupe {
    /// Decide about `r` and remember it when it is delivered.
    pub fn admit(&mut self, r: &StepStats) -> Admit {
        let fp = fingerprint(r);
        let verdict = match (self.highest, self.seen.get(&r.step)) {
            (Some(h), _) if r.step > h => Admit::New,
            (_, Some(old)) if *old == fp => Admit::Duplicate,
            (_, Some(_)) => Admit::Restart,
            (_, None) => Admit::New,
        };
        match verdict {
            Admit::Duplicate => {}
            Admit::New => {
                self.highest = Some(self.highest.map_or(r.step, |h| h.max(r.step)));
                self.seen.insert(r.step, fp);
            }
            Admit::Restart => {
                self.seen.retain(|s, _| *s < r.step);
                self.seen.insert(r.step, fp);
                self.highest = Some(r.step);
            }
        }
        verdict
    }

    /// The highest step delivered.
    pub fn highest(&self) -> Option<u64> {
        self.highest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(step: u64, sq: f64) -> StepStats {
        StepStats::new(step, 4.0, 32.0, sq, 0.5)
    }

    #[test]
    fn replays_are_duplicates_gaps_are_filled_restarts_are_seen() {
        let mut d = Dedupe::default();
        for s in 1..=5 {
            assert_eq!(d.admit(&rec(s, 2.0)), Admit::New);
        }
        // A replay of the history (rewrite or reconnect): all duplicates.
        for s in 1..=5 {
            assert_eq!(d.admit(&rec(s, 2.0)), Admit::Duplicate);
        }
        // Out of order: step 7 before 6.
        assert_eq!(d.admit(&rec(7, 2.0)), Admit::New);
        assert_eq!(d.admit(&rec(6, 2.0)), Admit::New);
        assert_eq!(d.admit(&rec(6, 2.0)), Admit::Duplicate);
        // A restarted producer writes step 3 again with other values.
        assert_eq!(d.admit(&rec(3, 9.0)), Admit::Restart);
        assert_eq!(d.highest(), Some(3));
        assert_eq!(d.admit(&rec(4, 9.0)), Admit::New);
        assert_eq!(d.admit(&rec(2, 2.0)), Admit::Duplicate);
    }
}
