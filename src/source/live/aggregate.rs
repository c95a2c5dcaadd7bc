//! The one live aggregator: records of a followed run as they arrive, the incremental
//! (one-sided) estimate updated in O(1) per record, and a bounded history of its points.
//! The explorer's live view (`runtime::live`) and `copus watch` both hold one.

use super::history::History;
use crate::stats::estimate::incremental::{LiveEstimator, LivePoint, Placement};
use crate::stats::{EstimatorSettings, StepStats};

/// Why a live run has no estimate to show yet.
#[derive(Debug, thiserror::Error)]
pub enum NoLiveEstimate {
    /// No record so far gives a usable step.
    #[error("no usable step yet")]
    NoUsableStep,
    /// The analysis of the records kept failed.
    #[error(transparent)]
    Analysis(#[from] crate::stats::StatsError),
}

/// Records the live smoother can replay when one arrives out of order.
pub const REPLAY_RECORDS: usize = 4096;

/// The state a live run builds up, record by record.
pub struct LiveCore {
    records: Vec<StepStats>,
    evicted: u64,
    live: LiveEstimator,
    history: History,
    points: Vec<LivePoint>,
    last_point: Option<(u64, f64)>,
    last_ci: Option<[f64; 2]>,
}

/// Confidence of the interval that decides whether the newest live estimate is bounded.
const BOUNDED_CONFIDENCE: f64 = 0.95;

impl LiveCore {
    /// Nothing received yet; the incremental estimate uses `settings`' smoother.
    pub fn new(settings: &EstimatorSettings) -> Self {
        Self {
            // Room for the bound up front (address space; pages are taken as records come):
            // no copy of the records as the buffer grows.
            records: Vec::with_capacity(super::MAX_KEPT_RECORDS + super::MAX_KEPT_RECORDS / 8 + 1),
            evicted: 0,
            live: LiveEstimator::new(settings, REPLAY_RECORDS),
            history: History::default(),
            points: Vec::new(),
            last_point: None,
            last_ci: None,
        }
    }

    /// Take one record: the estimate and the history move on, the record is kept (the oldest
    /// are merged away past the bound, [`super::keep_bounded`]).
    pub fn push(&mut self, record: StepStats) {
        self.points.clear();
        if let Placement::Replayed { from_step } = self.live.push(&record, &mut self.points) {
            self.history.truncate_from(from_step);
        }
        if let Some(p) = self.points.last() {
            self.last_point = p.b_simple().map(|b| (p.step, b));
            // Without the variance inflation (unknown live): the most lenient interval.
            self.last_ci = Some(p.ci(1.0, BOUNDED_CONFIDENCE));
        }
        for p in self.points.drain(..) {
            self.history.push(p);
        }
        self.records.push(record);
        self.evicted += super::keep_bounded(&mut self.records);
    }

    /// The producer restarted at `step`: drop what was received from `step` on. Returns how
    /// many kept records that removed.
    pub fn restart_from(&mut self, step: u64) -> u64 {
        let before = self.records.len();
        self.records.retain(|r| r.step < step);
        if self.live.truncate_from(step) {
            self.history.truncate_from(step);
        } else {
            self.history.clear();
        }
        (before - self.records.len()) as u64
    }

    /// The records kept (bounded; see [`super::keep_bounded`]).
    pub fn records(&self) -> &[StepStats] {
        &self.records
    }

    /// Records merged away to keep the bound.
    pub fn evicted(&self) -> u64 {
        self.evicted
    }

    /// The incremental estimate's history (bounded whatever the run's length).
    pub fn history(&self) -> &History {
        &self.history
    }

    /// Whether the newest estimate's 95 % interval is bounded above: |G|² is distinguishable
    /// from zero there. An unbounded one (a step where noise swamps the signal) can read
    /// anything, and advice must not act on it.
    pub fn last_bounded(&self) -> bool {
        self.last_point.is_some() && self.last_ci.is_some_and(|ci| ci[1].is_finite())
    }

    /// The newest estimate's 95 % interval (samples; an upper end unbounded above is
    /// infinite), where there is one.
    pub fn last_ci(&self) -> Option<[f64; 2]> {
        self.last_point.and(self.last_ci)
    }

    /// The newest step of the incremental estimate and its B_simple, samples.
    pub fn last_point(&self) -> Option<(u64, f64)> {
        self.last_point
    }

    /// Records that arrived too late to be placed in the incremental estimate.
    pub fn late(&self) -> u64 {
        self.live.late()
    }
}
