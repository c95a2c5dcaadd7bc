//! Live advice: from a running job's B_crit estimate, the (batch, layout) the session's model
//! says to run now, with hysteresis so that a noisy estimate does not flip the run back and
//! forth (`copus watch --advise`, docs/ADVICE.md).
//!
//! At each observation the goodput of every feasible cell of the throughput table is weighed
//! by the statistical efficiency at the live B_crit (times the session's `b_crit_scale`), as
//! the explorer's heatmap does. Advice is written only when all of these hold:
//!
//! - the best cell's goodput beats the run's current cell by more than `threshold` (a
//!   fraction; the session's `switch_threshold`);
//! - the estimate rests on at least `min_steps` usable steps (the estimator's own minimum,
//!   below which `analyze` and `watch` call it unreliable);
//! - at least `min_dwell_steps` steps passed since the last advice;
//! - the best cell is not the one last advised (no repeats while the run catches up);
//! - its batch is not below the run's current batch: B_crit grows as training goes on, so a
//!   lower estimate is taken as noise, not as a reason to shrink the batch.

use crate::goodput::{GoodputGrid, StatEffForm, TableCell, ThroughputTable};
use serde::Serialize;

/// The throughput (tokens/s) the session's model predicts for a configuration at a global
/// batch (samples); `None` where it cannot run.
pub type InPlaceThroughput<'a> = &'a dyn Fn(&crate::perf::ParallelConfig, u64) -> Option<f64>;

/// How advice is decided.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdviceSettings {
    /// Goodput gain a switch must predict, as a fraction (0.05: 5 %).
    pub threshold: f64,
    /// Steps between two pieces of advice.
    pub min_dwell_steps: u64,
    /// Usable steps an estimate must rest on before it is acted on (the estimator's
    /// `min_steps`, 50 by default: below it the verdict is `unreliable`, too few steps).
    pub min_steps: u64,
    /// B_noise = scale × the live estimate (the session's `b_crit_scale`).
    pub b_crit_scale: f64,
    /// Statistical efficiency form (the session's `stat_eff`).
    pub form: StatEffForm,
    /// Write advice marked not to apply.
    pub dry_run: bool,
    /// Tokens in one sample of the session's model: the reason names B_crit and batches in
    /// "sequences" where it is more than one, "samples" otherwise (as the explorer does).
    pub seq_len: u32,
}

/// What the run is doing now, as its records say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunState {
    /// Global batch, samples.
    pub batch: u64,
    /// (dp, tp, pp), when the records carry `config`.
    pub layout: Option<(u32, u32, u32)>,
    /// Micro-batch, samples, when the records carry `config`.
    pub micro_batch: Option<u32>,
}

/// The advised layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct AdviceLayout {
    /// Data-parallel degree.
    pub dp: u32,
    /// Tensor-parallel degree.
    pub tp: u32,
    /// Pipeline-parallel degree.
    pub pp: u32,
}

/// How the advice is applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Apply {
    /// Only the global batch changes: a trainer applies it in place by changing its
    /// gradient-accumulation steps.
    Batch,
    /// The layout changes: checkpoint, then restart in the new layout.
    Restart,
}

/// One piece of advice, as `{"v":1,"advice":{...}}` carries it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Advice {
    /// The first step to run with it.
    pub at_step: u64,
    /// Global batch, samples.
    pub batch: u64,
    /// Micro-batch per data-parallel rank, samples.
    pub micro_batch: u32,
    /// Micro-batches per rank and step: batch / (dp · micro_batch).
    pub accumulation: u64,
    /// Layout.
    pub layout: AdviceLayout,
    /// Predicted goodput gain over the current state, as a fraction (0.12: +12 %).
    pub expected_gain: f64,
    /// The interval of the B_crit the advice rests on (samples, the session's conversion
    /// applied), where the estimate has one; `null` otherwise.
    pub b_crit_ci: Option<[f64; 2]>,
    /// The same cells' gain at the interval's lower end (the least B_crit the data allow,
    /// where a larger batch pays least), as a fraction; `null` without an interval. Below
    /// zero: at that end the advice loses goodput.
    pub gain_at_lower_end: Option<f64>,
    /// Why, in words.
    pub reason: String,
    /// In place (`batch`) or by a restart (`restart`).
    pub apply: Apply,
    /// Written for information only: not to be applied.
    pub dry_run: bool,
}

/// The advice line of the stream: `{"v":1,"advice":{...}}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AdviceLine<'a> {
    /// Protocol version, 1.
    pub v: u32,
    /// The advice.
    pub advice: &'a Advice,
}

/// One live estimate the [`Advisor`] observes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LiveB {
    /// Optimizer step of the estimate.
    pub step: u64,
    /// B_simple (samples).
    pub b_simple: f64,
    /// Whether its 95 % interval is bounded above (|G|² distinguishable from zero).
    pub bounded: bool,
    /// Its 95 % interval (samples, the unit of `b_simple`), where known.
    pub ci: Option<(f64, f64)>,
    /// Usable steps (records) the estimate rests on so far.
    pub steps: u64,
}

/// Decides advice from a stream of observations (the hysteresis state; the throughput table
/// is passed to each observation, so that a what-if change of the model applies at once).
#[derive(Debug, Clone)]
pub struct Advisor {
    settings: AdviceSettings,
    last_advice_step: Option<u64>,
    last_advised: Option<(usize, usize)>,
    quiet: Option<String>,
    /// How many estimates gave no advice, by why (in the words of [`Advisor::why_no_advice`]
    /// without the numbers), in the order first met.
    quiet_tally: Vec<(&'static str, u64)>,
}

impl Advisor {
    /// An advisor that has advised nothing yet.
    pub fn new(settings: AdviceSettings) -> Self {
        Self {
            settings,
            last_advice_step: None,
            last_advised: None,
            quiet: None,
            quiet_tally: Vec::new(),
        }
    }

    /// Why the last estimate observed gave no advice (`None` after advice, or before any
    /// estimate): "advice none written" said nothing of the threshold, the dwell or the rest.
    pub fn why_no_advice(&self) -> Option<&str> {
        self.quiet.as_deref()
    }

    /// How many of the estimates observed gave no advice, and why, most first ("1199 the
    /// run's own cell was the best at its batch or above, 12 the interval was unbounded"):
    /// the last estimate's reason alone hid what kept the rest quiet. `None` before any.
    pub fn quiet_tally(&self) -> Option<String> {
        let mut tally = self.quiet_tally.clone();
        tally.sort_by_key(|t| std::cmp::Reverse(t.1));
        let parts: Vec<String> = tally.iter().map(|(why, n)| format!("{n} {why}")).collect();
        (!parts.is_empty()).then(|| parts.join(", "))
    }

    fn count_quiet(&mut self, why: &'static str) {
        match self.quiet_tally.iter_mut().find(|(w, _)| *w == why) {
            Some((_, n)) => *n = n.saturating_add(1),
            None => self.quiet_tally.push((why, 1)),
        }
    }

    /// Whether `estimate` is one this advisor judges at all (bounded, positive, on at least
    /// the settings' minimum of steps): where it is not, no advice says nothing about the
    /// switch (an explorer keeps what it has pending).
    pub fn judges(&self, estimate: &LiveB) -> bool {
        estimate.bounded
            && estimate.b_simple.is_finite()
            && estimate.b_simple > 0.0
            && estimate.steps >= self.settings.min_steps
    }

    /// The goodput gain a switch must predict, as a fraction.
    pub fn threshold(&self) -> f64 {
        self.settings.threshold
    }

    /// This advisor (the same state: last advice, dwell) deciding with another `threshold`
    /// (a fraction): an explorer judges whether pending advice still holds with a lower one
    /// than advice must beat to be given, so that an estimate near the threshold does not
    /// make it come and go.
    pub fn with_threshold(&self, threshold: f64) -> Self {
        let mut other = self.clone();
        other.settings.threshold = threshold;
        other
    }

    /// The batch column of `batch`: its own, else the largest batch below it (the smallest
    /// column below the axis).
    fn column_of(table: &ThroughputTable, batch: u64) -> usize {
        table.batches.iter().rposition(|&x| x <= batch).unwrap_or(0)
    }

    /// The table cell the run is in: its batch's column and its layout's row (the fastest
    /// layout at that batch when the records do not say).
    fn current_cell(
        table: &ThroughputTable,
        run: &RunState,
        grid: &GoodputGrid,
    ) -> Option<(usize, usize, f64)> {
        // A batch below every column is no cell of the table: the session does not
        // describe this run.
        if table.batches.first().is_none_or(|&b| run.batch < b) {
            return None;
        }
        let b = Self::column_of(table, run.batch);
        let nb = table.batches.len();
        let rows = 0..table.layouts.len();
        let goodput = |l: usize| grid.goodput[l * nb + b];
        match run.layout {
            Some((dp, tp, pp)) => rows
                .into_iter()
                .find(|&l| {
                    let lay = &table.layouts[l];
                    (lay.dp, lay.tp, lay.pp, lay.cp) == (dp, tp, pp, 1)
                })
                .and_then(|l| goodput(l).map(|g| (l, b, g))),
            None => rows
                .filter_map(|l| goodput(l).map(|g| (l, b, g)))
                .max_by(|x, y| x.2.total_cmp(&y.2)),
        }
    }

    /// Take the live estimate with the run in `run`; the advice to write, if any. An estimate
    /// on fewer than `min_steps` steps gives none (two steps set a floor rule 4 then keeps),
    /// nor does one whose interval is unbounded: one step where |G|² is lost in the noise can
    /// read any B_simple, and advice is never taken back to a smaller batch (rule 4). Without
    /// a model to cost the run's own micro-batch ([`Advisor::observe_with`]), advice that
    /// would keep a micro-batch other than the best cell's is a restart to the best cell.
    pub fn observe(
        &mut self,
        table: &ThroughputTable,
        estimate: LiveB,
        run: &RunState,
    ) -> Option<Advice> {
        self.observe_with(table, estimate, run, None)
    }

    /// [`Advisor::observe`], with `in_place` giving the throughput (tokens/s) of a
    /// configuration at a batch: where the run's micro-batch differs from the best cell's,
    /// the advice kept in place (the run's micro-batch, more accumulation) is costed with it
    /// and written only if that beats the threshold itself; otherwise the best cell is advised
    /// as a restart. (The gain of the best cell was written beside an in-place change the
    /// model predicts no faster: +84 % for micro-batch 64 over a run at 8, applied as micro
    /// 8 × accumulation 8.)
    pub fn observe_with(
        &mut self,
        table: &ThroughputTable,
        estimate: LiveB,
        run: &RunState,
        in_place: Option<InPlaceThroughput<'_>>,
    ) -> Option<Advice> {
        let advice = self.decide(table, estimate, run, in_place);
        if advice.is_some() {
            self.quiet = None;
        }
        advice
    }

    /// [`Advisor::observe_with`]'s decision; each way to no advice says why in `quiet`.
    fn decide(
        &mut self,
        table: &ThroughputTable,
        estimate: LiveB,
        run: &RunState,
        in_place: Option<InPlaceThroughput<'_>>,
    ) -> Option<Advice> {
        let LiveB {
            step,
            b_simple,
            bounded,
            ci,
            steps,
        } = estimate;
        let quiet = |me: &mut Self, (kind, why): (&'static str, String)| {
            me.count_quiet(kind);
            me.quiet = Some(format!("at step {step}: {why}"));
            None
        };
        if !(bounded && b_simple.is_finite() && b_simple > 0.0) {
            return quiet(
                self,
                (
                    "with an unbounded interval",
                    "the estimate's interval is unbounded (the noise scale is not resolved)".into(),
                ),
            );
        }
        if steps < self.settings.min_steps {
            return quiet(
                self,
                (
                    "on fewer steps than advice waits for",
                    format!(
                        "{steps} steps estimated, fewer than the {} advice waits for",
                        self.settings.min_steps
                    ),
                ),
            );
        }
        if let Some(last) = self.last_advice_step
            && step.saturating_sub(last) < self.settings.min_dwell_steps
        {
            return quiet(
                self,
                (
                    "within the dwell after advice",
                    format!(
                        "within {} steps of the last advice (--min-dwell-steps)",
                        self.settings.min_dwell_steps
                    ),
                ),
            );
        }
        let s = &self.settings;
        let b_noise = b_simple * s.b_crit_scale;
        let unit = crate::format::sample_word(s.seq_len);
        let grid = GoodputGrid::at(table, b_noise, s.form);
        let Some((cl, cb, current)) = Self::current_cell(table, run, &grid) else {
            return quiet(
                self,
                (
                    "with the run's batch outside the grid",
                    format!(
                        "the run's batch of {} is no cell of the session's grid",
                        run.batch
                    ),
                ),
            );
        };
        let nb = table.batches.len();
        // The best cell at a batch no smaller than the run's or the last advice's.
        let floor = self.last_advised.map_or(cb, |(_, b)| b.max(cb));
        let (bl, bb, best) = grid
            .goodput
            .iter()
            .enumerate()
            .filter_map(|(i, g)| g.map(|g| (i / nb, i % nb, g)))
            .filter(|&(_, b, g)| b >= floor && g.is_finite() && g > 0.0)
            .max_by(|x, y| x.2.total_cmp(&y.2))?;
        let gain = best / current - 1.0;
        if (bl, bb) == (cl, cb) {
            return quiet(
                self,
                (
                    "with the run's own cell the best at its batch or above (advice never shrinks the batch)",
                    format!(
                        "B_crit {b_noise:.0} {unit}: the run's own cell (batch {}) is the best at its batch \
                     or above (advice never shrinks the batch)",
                        table.batches[cb]
                    ),
                ),
            );
        }
        if self.last_advised == Some((bl, bb)) {
            return quiet(
                self,
                (
                    "with the best cell the one advised last",
                    format!(
                        "B_crit {b_noise:.0} {unit}: the best cell is the one advised last (batch {})",
                        table.batches[bb]
                    ),
                ),
            );
        }
        if gain.partial_cmp(&s.threshold) != Some(std::cmp::Ordering::Greater) {
            let threshold = s.threshold;
            return quiet(
                self,
                (
                    "with a gain not above the threshold",
                    format!(
                        "B_crit {b_noise:.0} {unit}: the best cell, batch {}, predicts {:+.2} % goodput, \
                     not above the {:.1} % threshold",
                        table.batches[bb],
                        gain * 100.0,
                        threshold * 100.0
                    ),
                ),
            );
        }
        let TableCell::Feasible { config, .. } = table.cell(bl, bb) else {
            return None;
        };
        let lay = table.layouts[bl];
        let batch = table.batches[bb];
        // The run's layout, or the one assumed for it (the fastest at its batch).
        let same_layout = bl == cl && lay.cp == 1;
        // In place the run keeps its micro-batch where the new batch allows it, and where
        // that change itself predicts the gain: the best cell's gain is its own micro-batch's.
        let mut gain = gain;
        let keep_mbs = run
            .micro_batch
            .filter(|&m| {
                same_layout && m > 0 && batch.is_multiple_of(u64::from(lay.dp) * u64::from(m))
            })
            .filter(|&m| {
                if m == config.mbs {
                    return true;
                }
                let kept = crate::perf::ParallelConfig { mbs: m, ..*config };
                let in_place_gain = in_place
                    .and_then(|f| f(&kept, batch))
                    .map(|tokens_per_s| tokens_per_s * grid.stat_eff[bb] / current - 1.0);
                match in_place_gain {
                    Some(g) if g.partial_cmp(&s.threshold) == Some(std::cmp::Ordering::Greater) => {
                        gain = g;
                        true
                    }
                    _ => false,
                }
            });
        // The same two cells at the interval's lower end: what the advice is worth if B_crit
        // is as small as the data allow (advice fired on intervals 17× wide without a word).
        let b_crit_ci = ci
            .filter(|(lo, hi)| lo.is_finite() && *lo > 0.0 && hi.is_finite())
            .map(|(lo, hi)| [lo * s.b_crit_scale, hi * s.b_crit_scale]);
        let gain_at_lower_end = b_crit_ci.and_then(|[lo, _]| {
            let at_lo = GoodputGrid::at(table, lo, s.form);
            let best = at_lo.goodput[bl * nb + bb]?;
            let current = at_lo.goodput[cl * nb + cb]?;
            (current > 0.0).then(|| best / current - 1.0)
        });
        let micro_batch = keep_mbs.unwrap_or(config.mbs);
        let per_step = u64::from(lay.dp) * u64::from(micro_batch.max(1));
        let apply = if same_layout && (keep_mbs.is_some() || run.micro_batch.is_none()) {
            Apply::Batch
        } else {
            Apply::Restart
        };
        self.last_advice_step = Some(step);
        self.last_advised = Some((bl, bb));
        Some(Advice {
            at_step: step.saturating_add(1),
            batch,
            micro_batch,
            accumulation: batch / per_step,
            layout: AdviceLayout {
                dp: lay.dp,
                tp: lay.tp,
                pp: lay.pp,
            },
            expected_gain: gain,
            b_crit_ci,
            gain_at_lower_end,
            reason: format!(
                "B_crit {}{} {} at step {step}: batch {batch} on {} predicts {:+.1} % goodput over batch {} on {}{}",
                whole(b_noise),
                b_crit_ci.map_or(String::new(), |[lo, hi]| {
                    format!(" [{}–{}]", whole(lo), whole(hi))
                }),
                crate::format::sample_word(s.seq_len),
                crate::perf::config::layout_label_cp(lay.dp, lay.cp, lay.tp, lay.pp),
                gain * 100.0,
                run.batch,
                {
                    let c = table.layouts[cl];
                    crate::perf::config::layout_label_cp(c.dp, c.cp, c.tp, c.pp)
                },
                match (b_crit_ci, gain_at_lower_end) {
                    (Some([lo, _]), Some(g)) => format!(
                        " ({:+.1} % at the interval's lower end, B_crit {})",
                        g * 100.0,
                        whole(lo)
                    ),
                    _ => String::new(),
                }
            ),
            apply,
            dry_run: s.dry_run,
        })
    }
}

/// A critical batch in the advice's reason: whole below 10,000, else as the explorer writes
/// counts (`4.9M`; an open interval's upper end was printed as 4941085).
fn whole(x: f64) -> String {
    if x.abs() >= 10_000.0 {
        crate::format::si(x)
    } else {
        format!("{x:.0}")
    }
}
