//! Bounded memory for long runs (issue 15): a record buffer that keeps at most a fixed number
//! of records by merging consecutive compatible steps into one record each, uniformly (every
//! merged record stands for the same number of steps, up to partial groups at breaks).
//!
//! Why merging is sound: for fixed `(b_small, b_big)` the two-batch estimates of |G|² and
//! tr(Σ) are linear in `(sq_small, sq_big)`, so the estimate of a record holding the mean of
//! `c` steps' norms is the mean of those steps' estimates. The kernel smoother then runs on
//! bin means (binned kernel smoothing, bandwidth still in steps) and the interval's
//! autocorrelation-aware variance on bin means is the batch-means method. See
//! docs/STATISTICS.md, "Bounded memory for long runs".

use crate::analysis::settings::EstimatorSettings;
use crate::diagnostics::{Diagnostic, DiagnosticKind, Severity};
use crate::ingest::protocol::validate;
use crate::record::step::StepStats;
use serde::Serialize;

/// Records kept by default for one analysis (`copus analyze`, `copus open`): 2¹⁸ records,
/// a few hundred MiB of analysis whatever the length of the run.
pub const MAX_ANALYSED_RECORDS: usize = 1 << 18;

/// Smallest bound accepted: pairs must be able to merge.
pub const MIN_MAX_RECORDS: usize = 2;

/// Memory the default bound ([`RecordBound::Default`]) leaves to the kept records and their
/// analysis, bytes (640 MiB): records carrying many layers are bounded to fewer than
/// [`MAX_ANALYSED_RECORDS`].
pub const ANALYSIS_MEMORY_BYTES: u64 = 640 << 20;

/// Measured peak memory of `copus analyze --json` per analysed record, bytes: a base plus a
/// share per layer the record carries (`scripts/gen_stats.py` runs with 4 and 32 layers:
/// about 1.9 KB and 10 KB per record).
const BYTES_PER_RECORD: u64 = 1024;
/// See [`BYTES_PER_RECORD`]; bytes per layer of a record.
const BYTES_PER_LAYER: u64 = 320;

/// Fewest records the default bound keeps, however many layers the records carry.
pub const MIN_DEFAULT_RECORDS: usize = 4096;

/// How many records a read keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordBound {
    /// Every record, as read (memory grows with the run).
    All,
    /// At most this many records (at least [`MIN_MAX_RECORDS`]).
    Records(usize),
    /// At most [`MAX_ANALYSED_RECORDS`], fewer when the first record carries many layers, so
    /// that about [`ANALYSIS_MEMORY_BYTES`] suffice (never fewer than
    /// [`MIN_DEFAULT_RECORDS`]).
    Default,
}

impl RecordBound {
    /// The buffer for this bound; `None` for [`RecordBound::All`].
    pub fn coarsener(self) -> Option<Coarsener> {
        match self {
            Self::All => None,
            Self::Records(n) => Some(Coarsener::new(n)),
            Self::Default => Some(Coarsener {
                by_layers: true,
                ..Coarsener::new(MAX_ANALYSED_RECORDS)
            }),
        }
    }
}

/// The default bound for records carrying `layers` layers.
pub fn default_bound(layers: usize) -> usize {
    let layers = u64::try_from(layers).unwrap_or(u64::MAX);
    let per = BYTES_PER_LAYER
        .saturating_mul(layers)
        .saturating_add(BYTES_PER_RECORD);
    let n = usize::try_from(ANALYSIS_MEMORY_BYTES / per).unwrap_or(usize::MAX);
    n.clamp(MIN_DEFAULT_RECORDS, MAX_ANALYSED_RECORDS)
}

/// What a [`Coarsener`] did to a run (reported as `summary.coarsened`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub struct Coarsening {
    /// Records received (valid protocol records, in stream order).
    pub records_read: u64,
    /// Records kept after merging (what the analysis sees).
    pub records_kept: u64,
    /// Consecutive steps each fully merged record stands for (the final group size; records
    /// at a break, e.g. a batch-size change, may hold fewer).
    pub steps_per_record: u64,
    /// The bound on kept records that was applied.
    pub max_records: u64,
}

/// Per kept record: how many steps it sums, the last of their step numbers, and whether it
/// may merge at all ([`mergeable_alone`] of its steps, checked once per record).
#[derive(Debug, Clone, Copy)]
struct Meta {
    count: u64,
    last_step: u64,
    ok: bool,
}

/// A record whose norms, layer norms, loss and step time hold **sums** over `meta.count`
/// steps (a single record is stored as is).
#[derive(Debug, Clone)]
struct Group {
    rec: StepStats,
    meta: Meta,
}

/// Records the buffer reserves room for on the first push (at most its bound).
const RESERVED_RECORDS: usize = 1 << 18;

/// The bounded buffer: push records in stream order, [`Coarsener::finish`] gives the kept
/// records (means of their groups) and what happened.
#[derive(Debug, Clone)]
pub struct Coarsener {
    max_records: usize,
    /// Buffer length at which the next compaction runs (`max_records`, or more while the
    /// buffer is full of records that cannot merge).
    limit: usize,
    group: u64,
    kept: Vec<StepStats>,
    meta: Vec<Meta>,
    acc: Option<Group>,
    records_in: u64,
    /// Lower the bound to [`default_bound`] of the first record's layers.
    by_layers: bool,
}

impl Coarsener {
    /// A buffer keeping at most `max_records` records (at least [`MIN_MAX_RECORDS`]) as long
    /// as records can merge; records that cannot merge (single-gradient, flagged, invalid)
    /// are kept as they are even beyond the bound.
    pub fn new(max_records: usize) -> Self {
        let max_records = max_records.max(MIN_MAX_RECORDS);
        Self {
            max_records,
            limit: max_records,
            group: 1,
            kept: Vec::new(),
            meta: Vec::new(),
            acc: None,
            records_in: 0,
            by_layers: false,
        }
    }

    /// Steps each fully merged record stands for now.
    pub fn steps_per_record(&self) -> u64 {
        self.group
    }

    /// Records held now (kept plus the group being gathered).
    pub fn len(&self) -> usize {
        self.kept.len() + usize::from(self.acc.is_some())
    }

    /// True when nothing was pushed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Add the next record in stream order.
    pub fn push(&mut self, r: StepStats) {
        if self.records_in == 0 {
            if self.by_layers {
                self.max_records = self.max_records.min(default_bound(r.layers.len()));
                self.limit = self.max_records;
            }
            // The buffer's room up front (address space only until used): no copies as it
            // grows. Only an optimisation: under a memory limit the buffer grows as needed.
            let room = self.max_records.min(RESERVED_RECORDS);
            if self.kept.try_reserve(room).is_err() || self.meta.try_reserve(room).is_err() {
                self.kept.shrink_to_fit();
                self.meta.shrink_to_fit();
            }
        }
        self.records_in = self.records_in.saturating_add(1);
        let meta = Meta {
            count: 1,
            last_step: r.step,
            ok: mergeable_alone(&r),
        };
        match self.acc.as_mut() {
            Some(g) if g.meta.count < self.group && mergeable(&g.rec, g.meta, &r, meta) => {
                add_into(&mut g.rec, &r);
                g.meta.count += 1;
                g.meta.last_step = meta.last_step;
            }
            _ => {
                self.flush();
                self.make_room();
                if self.group == 1 {
                    // A group of one step is complete as it starts: straight into the buffer.
                    self.kept.push(r);
                    self.meta.push(meta);
                    return;
                }
                self.acc = Some(Group { rec: r, meta });
            }
        }
        if self
            .acc
            .as_ref()
            .is_some_and(|g| g.meta.count >= self.group)
        {
            self.flush();
        }
    }

    /// Move the group being gathered into the buffer.
    fn flush(&mut self) {
        if let Some(g) = self.acc.take() {
            self.kept.push(g.rec);
            self.meta.push(g.meta);
        }
    }

    /// Before a new group starts: while the buffer is full, merge pairs and double the group
    /// size, so that the buffer and the new group stay within the bound.
    fn make_room(&mut self) {
        while self.kept.len() >= self.limit {
            if !self.compact() {
                // Nothing could merge: wait until the buffer doubles before trying again.
                self.limit = self.kept.len().saturating_mul(2).max(MIN_MAX_RECORDS);
                return;
            }
            self.group = self.group.saturating_mul(2);
            self.limit = self.max_records;
        }
    }

    /// Merge adjacent compatible pairs; false when no pair merged.
    fn compact(&mut self) -> bool {
        let kept = std::mem::take(&mut self.kept);
        let meta = std::mem::take(&mut self.meta);
        let mut merged_any = false;
        let mut it = kept.into_iter().zip(meta).peekable();
        while let Some((mut rec, mut m)) = it.next() {
            if let Some((next, nm)) = it.peek()
                && mergeable(&rec, m, next, *nm)
            {
                add_into(&mut rec, next);
                m.count = m.count.saturating_add(nm.count);
                m.last_step = nm.last_step;
                merged_any = true;
                it.next();
            }
            self.kept.push(rec);
            self.meta.push(m);
        }
        merged_any
    }

    /// The kept records in stream order (each the mean of its steps) and, when any records
    /// were merged, what was done.
    pub fn finish(mut self) -> (Vec<StepStats>, Option<Coarsening>) {
        self.flush();
        let kept = self.kept.len() as u64;
        let coarsening = (kept < self.records_in).then_some(Coarsening {
            records_read: self.records_in,
            records_kept: kept,
            steps_per_record: self.group,
            max_records: self.max_records as u64,
        });
        if self.meta.iter().all(|m| m.count == 1) {
            // Nothing merged: the records as read.
            return (self.kept, coarsening);
        }
        let records = self
            .kept
            .into_iter()
            .zip(self.meta)
            .map(|(mut r, m)| {
                if m.count > 1 {
                    divide(&mut r, m.count as f64);
                }
                r
            })
            .collect();
        (records, coarsening)
    }
}

/// Can `b` (a single record or a group, `mb`) be merged after the group `a` (`ma`)?
fn mergeable(a: &StepStats, ma: Meta, b: &StepStats, mb: Meta) -> bool {
    ma.ok
        && mb.ok
        && b.step > ma.last_step
        && a.b_small == b.b_small
        && a.b_big == b.b_big
        && a.n_small == b.n_small
        && a.config == b.config
        && a.lr.is_some() == b.lr.is_some()
        && a.tokens.is_some() == b.tokens.is_some()
        && a.loss.is_some() == b.loss.is_some()
        && a.step_time_s.is_some() == b.step_time_s.is_some()
        && a.layers.len() == b.layers.len()
        && a.layers.keys().eq(b.layers.keys())
}

/// A record that may join a group at all: two-batch (not single-gradient), not flagged, no
/// `dot_prev`, valid. A group of such records is valid too: its sums stay finite (each value
/// is below `f32::MAX`, far from the `f64` limit) and its means are means of valid values.
fn mergeable_alone(r: &StepStats) -> bool {
    r.skipped.is_none() && r.dot_prev.is_none() && !r.is_single_gradient() && validate(r).is_ok()
}

/// Add `b`'s summed fields (norms, loss, step time) into `a`; `tokens` becomes `b`'s
/// (cumulative); `step` and `lr` stay `a`'s (the group's first step's).
fn add_into(a: &mut StepStats, b: &StepStats) {
    a.sq_small += b.sq_small;
    a.sq_big += b.sq_big;
    for (la, lb) in a.layers.values_mut().zip(b.layers.values()) {
        la.sq_small += lb.sq_small;
        la.sq_big += lb.sq_big;
    }
    let add = |x: &mut Option<f64>, y: Option<f64>| {
        if let (Some(x), Some(y)) = (x.as_mut(), y) {
            *x += y;
        }
    };
    add(&mut a.loss, b.loss);
    add(&mut a.step_time_s, b.step_time_s);
    a.tokens = b.tokens;
}

/// Divide the summed fields by `n` steps (sums to means).
fn divide(r: &mut StepStats, n: f64) {
    r.sq_small /= n;
    r.sq_big /= n;
    for l in r.layers.values_mut() {
        l.sq_small /= n;
        l.sq_big /= n;
    }
    for x in [&mut r.loss, &mut r.step_time_s].into_iter().flatten() {
        *x /= n;
    }
}

impl Coarsening {
    /// The settings that analyse the kept records, at step numbers `kept_steps`, as the steps
    /// they stand for: the default kernel bandwidth from the records read (not the records
    /// kept) and their spacing (the kept records' usual gap over the records each merges),
    /// the window and the autocorrelation window given in steps (or their defaults for the
    /// steps read) turned into records, and the one-sided EMA decay per record (`decay^c`).
    pub fn settings_for(
        &self,
        settings: &EstimatorSettings,
        kept_steps: &[u64],
    ) -> EstimatorSettings {
        let mut s = settings.clone();
        let read = usize::try_from(self.records_read).unwrap_or(usize::MAX);
        let c = self.steps_per_record.max(1);
        let spacing = crate::analysis::settings::typical_spacing(kept_steps) / c as f64;
        s.bandwidth_steps = Some(settings.bandwidth_for(read, spacing));
        let per = usize::try_from(c).unwrap_or(usize::MAX);
        // The window in steps (given, or the default for the steps read: a tenth of the run,
        // at least `min_steps`), in records; the default for the records kept would have
        // stretched `min_steps` records over `min_steps` × c steps.
        s.window_steps = Some(settings.window_for(read).div_ceil(per).max(1));
        s.block_length = Some(settings.block_length_for(read).div_ceil(per));
        let exp = i32::try_from(c).unwrap_or(i32::MAX);
        s.ema_decay = settings.ema_decay.powi(exp).max(f64::MIN_POSITIVE);
        s
    }

    /// The info diagnostic saying how the run was merged.
    pub fn diagnostic(&self) -> Diagnostic {
        let msg = format!(
            "{} records analysed as {} records of {} consecutive steps each (memory bound of {} \
             records; --max-records N to change, 0 keeps every record; each carries the step and lr \
             of its first step); records at a change of batch size or configuration hold fewer",
            thousands(self.records_read),
            thousands(self.records_kept),
            self.steps_per_record,
            thousands(self.max_records),
        );
        Diagnostic::new(DiagnosticKind::Coarsened, Severity::Info, msg)
    }
}

/// `n` with a comma every three digits: 10000000 → "10,000,000".
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

#[cfg(test)]
#[path = "coarsen_tests.rs"]
mod tests;
