//! Bounded history of a live run's smoothed estimate: the newest points at full resolution,
//! older ones summarised in bins (docs/LIVE.md, "Incremental estimate and memory").
//!
//! A point leaving the recent window goes into the open bin; a full bin is closed; when the
//! closed bins reach their limit, neighbours are merged pairwise and the bin width doubles. So
//! memory is `recent + bins` points whatever the run's length, and every step stays covered:
//! each bin keeps its step range, its point count, the smoothed point at its last step and the
//! minimum, maximum and mean of the smoothed B_simple over its steps.

use crate::stats::estimate::incremental::LivePoint;
use serde::Serialize;
use std::collections::VecDeque;

/// Points kept at full resolution by default (the live view's recent window).
pub const RECENT_POINTS: usize = 1 << 14;
/// Most closed bins kept by default before neighbours are merged.
pub const MAX_BINS: usize = 512;

/// Older history: consecutive points summarised.
#[derive(Debug, Clone, PartialEq)]
pub struct Bin {
    /// First step in the bin.
    pub first_step: u64,
    /// Last step in the bin.
    pub last_step: u64,
    /// Points (steps with an estimate) in the bin.
    pub points: u64,
    /// The point at the bin's last step (its smoothed estimate there).
    pub last: LivePoint,
    /// Sum of `b_big` over the bin's points (samples), for token accounting.
    pub b_big_sum: f64,
    /// Smallest smoothed B_simple in the bin (samples), over points where it is defined.
    pub b_min: f64,
    /// Largest smoothed B_simple in the bin.
    pub b_max: f64,
    /// Sum of the defined smoothed B_simple values.
    pub b_sum: f64,
    /// Points where the smoothed B_simple is defined.
    pub b_count: u64,
}

impl Bin {
    fn of(p: &LivePoint) -> Self {
        let b = p.b_simple();
        Self {
            first_step: p.step,
            last_step: p.step,
            points: 1,
            last: *p,
            b_big_sum: p.b_big,
            b_min: b.unwrap_or(f64::INFINITY),
            b_max: b.unwrap_or(f64::NEG_INFINITY),
            b_sum: b.unwrap_or(0.0),
            b_count: u64::from(b.is_some()),
        }
    }

    /// Absorb the bin that follows this one.
    fn absorb(&mut self, next: &Bin) {
        self.last_step = next.last_step;
        self.points += next.points;
        self.last = next.last;
        self.b_big_sum += next.b_big_sum;
        self.b_min = self.b_min.min(next.b_min);
        self.b_max = self.b_max.max(next.b_max);
        self.b_sum += next.b_sum;
        self.b_count += next.b_count;
    }

    /// Mean smoothed B_simple over the bin's points where it is defined.
    pub fn b_mean(&self) -> Option<f64> {
        (self.b_count > 0).then(|| self.b_sum / self.b_count as f64)
    }
}

/// One bin of `copus watch --json`'s `history`: the run's smoothed B_simple over a step range.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HistoryBin {
    /// First step of the range.
    pub first_step: u64,
    /// Last step of the range.
    pub last_step: u64,
    /// Steps with an estimate in the range.
    pub steps: u64,
    /// Smoothed B_simple at `last_step` (samples); `null` where the smoothed |G|² is not
    /// positive.
    pub b_simple: Option<f64>,
    /// Interval of `b_simple` (hi `null` = unbounded; `null` when empty: no positive |G|²
    /// fits, as in `analyze`).
    #[serde(serialize_with = "crate::stats::estimate::interval::serialize_ci")]
    pub ci: [f64; 2],
    /// Smallest smoothed B_simple over the range (samples).
    pub b_simple_min: Option<f64>,
    /// Largest smoothed B_simple over the range (samples).
    pub b_simple_max: Option<f64>,
    /// Mean smoothed B_simple over the range (samples).
    pub b_simple_mean: Option<f64>,
}

/// The live run's smoothed points: recent ones in full, older ones binned.
#[derive(Debug, Clone)]
pub struct History {
    recent: VecDeque<LivePoint>,
    recent_cap: usize,
    bins: Vec<Bin>,
    max_bins: usize,
    /// Points per closed bin (doubles on each merge).
    width: u64,
    open: Option<Bin>,
}

impl Default for History {
    fn default() -> Self {
        Self::new(RECENT_POINTS, MAX_BINS)
    }
}

impl History {
    /// Keep `recent` points at full resolution (at least 1) and at most `max_bins` closed bins
    /// (at least 2) of older ones.
    pub fn new(recent: usize, max_bins: usize) -> Self {
        Self {
            recent: VecDeque::new(),
            recent_cap: recent.max(1),
            bins: Vec::new(),
            max_bins: max_bins.max(2),
            width: 1,
            open: None,
        }
    }

    /// Add the next point (steps ascending).
    pub fn push(&mut self, p: LivePoint) {
        self.recent.push_back(p);
        while self.recent.len() > self.recent_cap {
            if let Some(old) = self.recent.pop_front() {
                self.retire(&old);
            }
        }
    }

    /// Forget the recent points from `step` on (they are about to be replaced). Points
    /// already binned are kept: a replay never reaches that far back.
    pub fn truncate_from(&mut self, step: u64) {
        let keep = self.recent.partition_point(|p| p.step < step);
        self.recent.truncate(keep);
    }

    /// Forget everything (a new run).
    pub fn clear(&mut self) {
        *self = Self::new(self.recent_cap, self.max_bins);
    }

    /// Points held at full resolution, oldest first.
    pub fn recent(&self) -> impl Iterator<Item = &LivePoint> {
        self.recent.iter()
    }

    /// The newest point.
    pub fn last(&self) -> Option<&LivePoint> {
        self.recent.back()
    }

    /// Closed and open bins of the older history, oldest first.
    pub fn bins(&self) -> impl Iterator<Item = &Bin> {
        self.bins.iter().chain(self.open.as_ref())
    }

    /// Entries held (recent points plus bins): bounded by `recent + max_bins + 1`.
    pub fn len(&self) -> usize {
        self.recent.len() + self.bins.len() + usize::from(self.open.is_some())
    }

    /// True when no point was pushed (or all were truncated).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every step summarised in at most `max` bins of about equal point counts (bins first,
    /// then the recent points), with intervals at inflation `phi` and `confidence`.
    pub fn summary(&self, max: usize, phi: f64, confidence: f64) -> Vec<HistoryBin> {
        let all: Vec<Bin> = self
            .bins()
            .cloned()
            .chain(self.recent.iter().map(Bin::of))
            .collect();
        let total: u64 = all.iter().map(|b| b.points).sum();
        let mut per = total.div_ceil(max.max(1) as u64).max(1);
        let out = loop {
            let mut out: Vec<Bin> = Vec::new();
            for b in &all {
                match out.last_mut() {
                    Some(last) if last.points + b.points <= per => last.absorb(b),
                    _ => out.push(b.clone()),
                }
            }
            if out.len() <= max.max(1) {
                break out;
            }
            per = per.saturating_mul(2);
        };
        let finite = |x: f64| x.is_finite().then_some(x);
        out.iter()
            .map(|b| HistoryBin {
                first_step: b.first_step,
                last_step: b.last_step,
                steps: b.points,
                b_simple: b.last.b_simple(),
                ci: b.last.ci(phi, confidence),
                b_simple_min: finite(b.b_min),
                b_simple_max: finite(b.b_max),
                b_simple_mean: b.b_mean(),
            })
            .collect()
    }

    fn retire(&mut self, p: &LivePoint) {
        let bin = Bin::of(p);
        match self.open.as_mut() {
            Some(open) => open.absorb(&bin),
            None => self.open = Some(bin),
        }
        if self.open.as_ref().is_some_and(|o| o.points >= self.width)
            && let Some(full) = self.open.take()
        {
            self.bins.push(full);
        }
        if self.bins.len() >= self.max_bins {
            let old = std::mem::take(&mut self.bins);
            for pair in old.chunks(2) {
                let mut merged = pair[0].clone();
                if let Some(second) = pair.get(1) {
                    merged.absorb(second);
                }
                self.bins.push(merged);
            }
            self.width = self.width.saturating_mul(2);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::EstimatorKind;

    fn point(step: u64, b: f64) -> LivePoint {
        LivePoint {
            step,
            b_big: 32.0,
            tokens: None,
            loss: None,
            kind: EstimatorKind::TwoBatch,
            trace: b,
            g2: 1.0,
            cov: (0.01, 0.0, 0.0001),
            effective_n: 50.0,
        }
    }

    #[test]
    fn storage_stays_bounded_and_every_step_stays_covered() {
        let (recent, max_bins) = (100, 16);
        let mut h = History::new(recent, max_bins);
        let n = 1_000_000u64;
        let mut most = 0;
        for s in 0..n {
            h.push(point(s, 1.0 + s as f64));
            most = most.max(h.len());
        }
        assert!(most <= recent + max_bins + 1, "held {most} entries");
        // Bins and recent points tile the steps, in order, without gaps or overlaps.
        let mut next = 0;
        let mut points = 0;
        for b in h.bins() {
            assert_eq!(b.first_step, next);
            assert!(b.b_min <= b.b_max);
            assert_eq!(b.b_min, 1.0 + b.first_step as f64);
            assert_eq!(b.b_max, 1.0 + b.last_step as f64);
            next = b.last_step + 1;
            points += b.points;
        }
        assert_eq!(h.recent().next().map(|p| p.step), Some(next));
        assert_eq!(points + h.recent().count() as u64, n);
        let summary = h.summary(10, 1.0, 0.95);
        assert!(
            summary.len() <= 10 && summary.len() >= 3,
            "{}",
            summary.len()
        );
        assert_eq!(summary.iter().map(|b| b.steps).sum::<u64>(), n);
        assert_eq!(summary.last().map(|b| b.last_step), Some(n - 1));
    }

    #[test]
    fn truncation_drops_recent_points_from_a_step_on() {
        let mut h = History::new(10, 4);
        for s in 0..20 {
            h.push(point(s, 2.0));
        }
        h.truncate_from(15);
        assert_eq!(h.last().map(|p| p.step), Some(14));
        h.push(point(15, 3.0));
        assert_eq!(h.last().map(|p| p.step), Some(15));
    }
}
