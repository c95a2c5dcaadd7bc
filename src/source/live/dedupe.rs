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
//!
//! Memory is bounded: the fingerprints of the newest [`DEDUPE_WINDOW`] steps are kept; older
//! steps are remembered as ranges only, so a record at such a step counts as a duplicate (a
//! replay) without its values being compared: a producer restarting from a checkpoint more
//! than that many steps back is not recognised as a restart.

use crate::stats::record::step::StepStats;
use std::collections::{HashMap, VecDeque};

/// Steps whose fingerprints are kept (about 40 MB); older ones are kept as step ranges.
pub const DEDUPE_WINDOW: usize = 1 << 20;
use std::hash::{BuildHasher, Hash, Hasher};

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

/// Steps delivered so far: the newest with a fingerprint of each record's values, older ones
/// as ranges.
#[derive(Debug, Clone)]
pub struct Dedupe {
    highest: Option<u64>,
    seen: HashMap<u64, u64, foldhash::fast::RandomState>,
    /// Steps in the order they entered `seen` (may hold steps since removed by a restart).
    order: VecDeque<u64>,
    /// Steps forgotten from `seen`: sorted, disjoint, inclusive ranges.
    old: Vec<(u64, u64)>,
    window: usize,
}

impl Default for Dedupe {
    fn default() -> Self {
        Self::with_window(DEDUPE_WINDOW)
    }
}

/// A fingerprint of the values of a record (step, batch sizes, squared norms, loss).
pub fn fingerprint(r: &StepStats) -> u64 {
    // foldhash (fixed seed): a fast 64-bit hash of a few numbers, computed for every record.
    let mut h = foldhash::fast::FixedState::default().build_hasher();
    r.step.hash(&mut h);
    for x in [r.b_small, r.b_big, r.sq_small, r.sq_big] {
        x.to_bits().hash(&mut h);
    }
    r.loss.map(f64::to_bits).hash(&mut h);
    r.tokens.map(f64::to_bits).hash(&mut h);
    h.finish()
}

impl Dedupe {
    /// A filter keeping the fingerprints of the newest `window` steps (at least 1).
    pub fn with_window(window: usize) -> Self {
        Self {
            highest: None,
            seen: HashMap::default(),
            order: VecDeque::new(),
            old: Vec::new(),
            window: window.max(1),
        }
    }

    /// Decide about `r` and remember it when it is delivered.
    pub fn admit(&mut self, r: &StepStats) -> Admit {
        let fp = fingerprint(r);
        let verdict = match (self.highest, self.seen.get(&r.step)) {
            (Some(h), _) if r.step > h => Admit::New,
            (_, Some(old)) if *old == fp => Admit::Duplicate,
            (_, Some(_)) => Admit::Restart,
            (_, None) if self.in_old(r.step) => Admit::Duplicate,
            (_, None) => Admit::New,
        };
        match verdict {
            Admit::Duplicate => {}
            Admit::New => {
                self.highest = Some(self.highest.map_or(r.step, |h| h.max(r.step)));
                self.remember(r.step, fp);
            }
            Admit::Restart => {
                self.seen.retain(|s, _| *s < r.step);
                self.remember(r.step, fp);
                self.highest = Some(r.step);
            }
        }
        verdict
    }

    /// Steps held with their fingerprints plus ranges of older steps (bounded by the window).
    pub fn held(&self) -> (usize, usize) {
        (self.seen.len(), self.old.len())
    }

    fn in_old(&self, step: u64) -> bool {
        let i = self.old.partition_point(|r| r.1 < step);
        self.old.get(i).is_some_and(|r| r.0 <= step)
    }

    fn remember(&mut self, step: u64, fp: u64) {
        self.seen.insert(step, fp);
        self.order.push_back(step);
        while self.seen.len() > self.window || self.order.len() > 2 * self.window {
            let Some(s) = self.order.pop_front() else {
                break;
            };
            if self.seen.remove(&s).is_some() {
                self.forget(s);
            }
        }
    }

    /// Move `step` into the ranges of old steps.
    fn forget(&mut self, step: u64) {
        if let Some(last) = self.old.last_mut()
            && last.0 <= step
        {
            if step <= last.1 {
                return;
            }
            if step == last.1 + 1 {
                last.1 = step;
                return;
            }
            self.old.push((step, step));
            return;
        }
        let i = self.old.partition_point(|r| r.1 < step);
        if self.old.get(i).is_some_and(|r| r.0 <= step) {
            return;
        }
        self.old.insert(i, (step, step));
        // Merge with neighbours that now touch.
        if i + 1 < self.old.len() && self.old[i].1 + 1 >= self.old[i + 1].0 {
            self.old[i].1 = self.old[i + 1].1;
            self.old.remove(i + 1);
        }
        if i > 0 && self.old[i - 1].1 + 1 >= self.old[i].0 {
            self.old[i - 1].1 = self.old[i].1;
            self.old.remove(i);
        }
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

    #[test]
    fn memory_is_bounded_and_old_steps_still_count_as_seen() {
        let mut d = Dedupe::with_window(100);
        for s in 0..100_000 {
            assert_eq!(d.admit(&rec(s, 2.0)), Admit::New);
            let (fps, ranges) = d.held();
            assert!(fps <= 100 && ranges <= 1, "{fps} {ranges}");
        }
        // A replay of the whole history: old steps are duplicates, recent ones compared.
        assert_eq!(d.admit(&rec(5, 2.0)), Admit::Duplicate);
        assert_eq!(d.admit(&rec(99_990, 2.0)), Admit::Duplicate);
        assert_eq!(d.admit(&rec(99_990, 7.0)), Admit::Restart);
        assert_eq!(d.highest(), Some(99_990));
    }
}
