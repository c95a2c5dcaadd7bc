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
use std::cmp::Reverse;
use std::collections::BinaryHeap;

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

/// Fewest kept records the default kernel of a merged run spans (its σ), as the default
/// kernel of any run spans at least 3 records.
const MIN_MERGED_KERNEL_RECORDS: f64 = 3.0;

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
    /// at a break, e.g. a batch-size change, may hold fewer; with records out of order, the
    /// median number a kept record holds, when more).
    pub steps_per_record: u64,
    /// The bound on kept records that was applied.
    pub max_records: u64,
    /// Records that arrived with a step at or below one already read (out of step order, or
    /// written again after a restart): each was merged into the kept record whose steps
    /// surround its own, or kept as its own record there when it could not merge.
    pub records_out_of_order: u64,
    /// The highest step read: the last record kept stands for the steps up to it (a window
    /// that ends there is labelled to it, not to that record's first step).
    pub last_step_read: u64,
    /// Of the records out of order, those later than the reorder window (merged into the
    /// record of their steps, which then holds more steps than the others).
    pub records_beyond_window: u64,
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
    /// The highest step read so far.
    high_step: Option<u64>,
    /// Records read at or below [`Coarsener::high_step`].
    out_of_order: u64,
    /// Once merging has begun, records wait here to be placed in step order (the lowest step
    /// first, ties in reading order): lines a little out of order merge as if sorted.
    reorder: BinaryHeap<Reverse<Pending>>,
    /// The highest step placed into the buffer so far.
    placed_high: Option<u64>,
    /// Records placed below [`Coarsener::placed_high`] once merging had begun.
    beyond_window: u64,
}

/// A record waiting in [`Coarsener::reorder`]: ordered by step, then by when it was read.
#[derive(Debug, Clone)]
struct Pending {
    step: u64,
    read: u64,
    rec: StepStats,
}

impl PartialEq for Pending {
    fn eq(&self, other: &Self) -> bool {
        (self.step, self.read) == (other.step, other.read)
    }
}

impl Eq for Pending {}

impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Pending {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.step, self.read).cmp(&(other.step, other.read))
    }
}

/// Share of the bound that the reorder window holds once a record came out of order (1/16:
/// 16,384 records at the default bound, none below 16).
const REORDER_SHARE: usize = 16;

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
            high_step: None,
            out_of_order: 0,
            reorder: BinaryHeap::new(),
            placed_high: None,
            beyond_window: 0,
        }
    }

    /// Steps each fully merged record stands for now.
    pub fn steps_per_record(&self) -> u64 {
        self.group
    }

    /// Records held now (kept, the group being gathered and those waiting to be placed).
    pub fn len(&self) -> usize {
        self.kept.len() + usize::from(self.acc.is_some()) + self.reorder.len()
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
        if self.high_step.is_some_and(|h| r.step <= h) {
            self.out_of_order = self.out_of_order.saturating_add(1);
        }
        self.high_step = self.high_step.max(Some(r.step));
        if self.group == 1 {
            // Nothing merged yet: records are kept as read.
            self.place(r);
            return;
        }
        self.reorder.push(Reverse(Pending {
            step: r.step,
            read: self.records_in,
            rec: r,
        }));
        // In-order runs never wait (and merge exactly as before); the window opens at the
        // first record out of order.
        let window = if self.out_of_order > 0 {
            self.max_records / REORDER_SHARE
        } else {
            0
        };
        if self.reorder.len() > window
            && let Some(Reverse(next)) = self.reorder.pop()
        {
            self.place(next.rec);
        }
    }

    /// Put the next record into the buffer: into the group being gathered, a new group, or,
    /// once merging has begun and its step is at or below one already placed, the record of
    /// the steps around its own ([`Coarsener::place_late`]).
    fn place(&mut self, r: StepStats) {
        let meta = Meta {
            count: 1,
            last_step: r.step,
            ok: mergeable_alone(&r),
        };
        let late = self.placed_high.is_some_and(|h| r.step <= h);
        self.placed_high = self.placed_high.max(Some(r.step));
        if late && self.group > 1 {
            // Once merging has begun the kept records are in step order, one per stretch of
            // steps: a late record joins the stretch around its step (or sits there alone),
            // never a record of steps placed just before it but far from its own.
            self.place_late(r, meta);
            return;
        }
        match self.acc.as_mut() {
            Some(g) if g.meta.count < self.group && mergeable(&g.rec, g.meta, &r, meta) => {
                add_into(&mut g.rec, &r);
                g.meta.count += 1;
                g.meta.last_step = meta.last_step;
            }
            _ => {
                self.flush();
                self.make_room();
                if late && self.group > 1 {
                    // Merging began with this record.
                    self.place_late(r, meta);
                    return;
                }
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

    /// A record whose step is at or below one already read, once records are merging: merged
    /// into the kept record (or the group being gathered) whose stretch of steps is the last
    /// to start at or before its step (the first one when it is earlier than all), or, when it
    /// cannot merge there, kept as its own record at its place in step order.
    fn place_late(&mut self, r: StepStats, meta: Meta) {
        self.beyond_window = self.beyond_window.saturating_add(1);
        let in_acc = self.acc.as_ref().is_some_and(|g| g.rec.step <= r.step)
            || (self.kept.is_empty() && self.acc.is_some());
        if in_acc {
            if let Some(g) = self.acc.as_mut()
                && compatible(&g.rec, g.meta, &r, meta)
            {
                add_late(&mut g.rec, &mut g.meta, &r);
                if g.meta.count >= self.group {
                    self.flush();
                }
                return;
            }
        } else {
            let at = self.kept.partition_point(|k| k.step <= r.step).max(1) - 1;
            if compatible(&self.kept[at], self.meta[at], &r, meta) {
                add_late(&mut self.kept[at], &mut self.meta[at], &r);
                return;
            }
        }
        // Alone: the group being gathered goes into the buffer first, so that the buffer
        // stays in step order with the record inserted at its place.
        self.flush();
        self.make_room();
        let at = self.kept.partition_point(|k| k.step <= r.step);
        self.kept.insert(at, r);
        self.meta.insert(at, meta);
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
        while self.kept.len() + self.reorder.len() >= self.limit {
            if !self.compact() {
                // Nothing could merge: wait until the buffer doubles before trying again.
                self.limit = self.kept.len().saturating_mul(2).max(MIN_MAX_RECORDS);
                return;
            }
            self.group = self.group.saturating_mul(2);
            self.limit = self.max_records;
        }
    }

    /// Merge adjacent compatible pairs (in step order: records read out of order before the
    /// first merge are sorted first); false when no pair merged.
    fn compact(&mut self) -> bool {
        let mut kept = std::mem::take(&mut self.kept);
        let mut meta = std::mem::take(&mut self.meta);
        if !kept.is_sorted_by_key(|r| r.step) {
            let mut both: Vec<(StepStats, Meta)> = kept.into_iter().zip(meta).collect();
            both.sort_by_key(|(r, _)| r.step);
            (kept, meta) = both.into_iter().unzip();
        }
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
        while let Some(Reverse(next)) = self.reorder.pop() {
            self.place(next.rec);
        }
        self.flush();
        let kept = self.kept.len() as u64;
        let steps_per_record = if self.out_of_order > 0 {
            // Late records make some records hold more than the group: the usual count.
            let mut counts: Vec<u64> = self.meta.iter().map(|m| m.count).collect();
            let mid = counts.len() / 2;
            match counts.get(mid) {
                Some(_) => (*counts.select_nth_unstable(mid).1).max(self.group),
                None => self.group,
            }
        } else {
            self.group
        };
        let coarsening = (kept < self.records_in).then_some(Coarsening {
            records_read: self.records_in,
            records_kept: kept,
            steps_per_record,
            max_records: self.max_records as u64,
            records_out_of_order: self.out_of_order,
            last_step_read: self.high_step.unwrap_or(0),
            records_beyond_window: self.beyond_window,
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
    b.step >= ma.last_step && compatible(a, ma, b, mb)
}

/// Do `a` and `b` agree on everything the estimators use (steps aside), and may both merge?
fn compatible(a: &StepStats, ma: Meta, b: &StepStats, mb: Meta) -> bool {
    ma.ok
        && mb.ok
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

/// Add the late record `b` into the group `a` (`ma`): its sums as [`add_into`]; the group's
/// first step (and its lr) when `b` is earlier, its last step (and tokens) when later.
fn add_late(a: &mut StepStats, ma: &mut Meta, b: &StepStats) {
    let tokens = a.tokens;
    add_into(a, b);
    if b.step < a.step {
        (a.step, a.lr) = (b.step, b.lr);
    }
    if b.step <= ma.last_step {
        a.tokens = tokens;
    }
    ma.count = ma.count.saturating_add(1);
    ma.last_step = ma.last_step.max(b.step);
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
        let kept_gap = crate::analysis::settings::typical_spacing(kept_steps);
        let spacing = kept_gap / c as f64;
        let wanted = settings.bandwidth_for(read, spacing);
        // The default kernel spans at least MIN_MERGED_KERNEL_RECORDS kept records: the steps
        // read call for up to 200 steps, narrower than one record of 256 merged steps (it
        // was refused as too narrow, and where it ran its intervals under-covered).
        let default = EstimatorSettings {
            bandwidth_steps: None,
            ..settings.clone()
        }
        .bandwidth_for(read, spacing)
        .max(MIN_MERGED_KERNEL_RECORDS * kept_gap);
        s.bandwidth_steps = Some(match settings.bandwidth_steps {
            Some(_) => wanted,
            None => default,
        });
        // The window intervals detrend by the default kernel whatever the display bandwidth.
        s.window_detrend_steps = Some(default);
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
        let each = if self.records_beyond_window > 0 {
            format!("about {} steps", self.steps_per_record)
        } else {
            format!("{} consecutive steps", self.steps_per_record)
        };
        let mut msg = format!(
            "{} records analysed as {} records of {each} each (memory bound of {} records; \
             --max-records N to change, 0 keeps every record; each carries the step and lr of its \
             first step); records at a change of batch size or configuration hold fewer",
            thousands(self.records_read),
            thousands(self.records_kept),
            thousands(self.max_records),
        );
        if self.records_out_of_order > 0 {
            msg.push_str(&format!(
                "; {} records came at or below a step already read (out of order, or written \
                 again after a restart) and were merged into the record of the steps around \
                 theirs",
                thousands(self.records_out_of_order)
            ));
        }
        // A file far from step order (over 1 % of its records later than the window): the
        // merged records are unequal, and what is read from them can be far off (a shuffled
        // file's `now` read 11× the sorted file's, its drift lost).
        let far = self.records_beyond_window.saturating_mul(100) > self.records_read;
        if far {
            msg.push_str(&format!(
                "; {} of them came later than the reorder window (the file is far from step \
                 order): the merged records hold unequal numbers of steps, so `now`, the windows \
                 and the drift test can be far off; sort the file by step, or give --max-records 0",
                thousands(self.records_beyond_window)
            ));
        }
        let severity = if far {
            Severity::Warning
        } else {
            Severity::Info
        };
        Diagnostic::new(DiagnosticKind::Coarsened, severity, msg)
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
