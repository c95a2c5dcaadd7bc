//! The `lr_change` diagnostic: where the learning rate jumps and where it moves smoothly
//! (B_simple scales as 1/temperature, lr/B, so an lr decay inflates it).

use super::{Diagnostic, DiagnosticKind, Severity};
use crate::record::step::StepStats;

/// A jump of the learning rate between consecutive records by more than this factor is a
/// change point.
const LR_JUMP: f64 = 1.05;

/// A smooth stretch of the learning rate (no jump inside): where it first departs by more
/// than 10 % from the value its jump-free segment starts at, to where it stops changing.
#[derive(Debug, Clone, Copy, PartialEq)]
struct LrStretch {
    first_step: u64,
    last_step: u64,
    /// lr where the segment starts.
    from: f64,
    /// lr at `last_step`.
    to: f64,
    /// Smallest and largest lr over the stretch.
    lo: f64,
    hi: f64,
}

impl LrStretch {
    fn describe(&self) -> String {
        let (a, b) = (self.first_step, self.last_step);
        let (from, to) = (self.from, self.to);
        if self.lo >= to.min(from) && self.hi <= to.max(from) {
            let verb = if to < from { "decays" } else { "rises" };
            format!("{verb} smoothly from {from:.3e} to {to:.3e} over steps {a}-{b}")
        } else {
            format!(
                "moves smoothly between {:.3e} and {:.3e} over steps {a}-{b} (from {from:.3e} to \
                 {to:.3e})",
                self.lo, self.hi
            )
        }
    }
}

/// Two learning rates that differ by more than rounding.
fn lr_differs(a: f64, b: f64) -> bool {
    (a - b).abs() > 1e-9 * a.abs().max(b.abs())
}

/// For each record after the first, whether the lr jumped to it from the record before: by
/// more than [`LR_JUMP`]×, and not as one step of a ramp (two or more such steps in a row in
/// the same direction: a linear warm-up rises by more than 5 % a step for its first twenty
/// steps, and was reported as 19 changes and a smooth rise after them).
fn change_points(lrs: &[(u64, f64)]) -> Vec<bool> {
    let direction = |k: usize| -> i8 {
        let (a, b) = (lrs[k - 1].1, lrs[k].1);
        if b > a * LR_JUMP {
            1
        } else if a > b * LR_JUMP {
            -1
        } else {
            0
        }
    };
    let dirs: Vec<i8> = (1..lrs.len()).map(direction).collect();
    (0..dirs.len())
        .map(|k| {
            let d = dirs[k];
            let ramp = (k > 0 && dirs[k - 1] == d) || dirs.get(k + 1) == Some(&d);
            d != 0 && !ramp
        })
        .collect()
}

/// The smooth stretches of `lrs` (step, lr): each segment between change points
/// ([`change_points`]) is cut into monotone runs (a warm-up rises, then the decay falls), and
/// each run is a stretch from where lr first departs by more than 10 % from the run's first
/// value to the last record where it still changes.
fn lr_stretches(lrs: &[(u64, f64)], jumped: &[bool]) -> Vec<LrStretch> {
    let mut out = Vec::new();
    let mut seg_start = 0;
    for i in 1..=lrs.len() {
        if i < lrs.len() && !jumped[i - 1] {
            continue;
        }
        for run in monotone_runs(&lrs[seg_start..i]) {
            out.extend(lr_stretch(run));
        }
        seg_start = i;
    }
    out
}

/// `seg` cut where the lr turns (rising to falling or back; flat records join the run they
/// follow); consecutive runs share their turning record.
fn monotone_runs(seg: &[(u64, f64)]) -> Vec<&[(u64, f64)]> {
    let mut runs = Vec::new();
    let (mut start, mut direction) = (0, 0i8);
    for k in 1..seg.len() {
        let (a, b) = (seg[k - 1].1, seg[k].1);
        if !lr_differs(a, b) {
            continue;
        }
        let d = if b > a { 1 } else { -1 };
        if direction != 0 && d != direction {
            runs.push(&seg[start..k]);
            start = k - 1;
        }
        direction = d;
    }
    if !seg.is_empty() {
        runs.push(&seg[start..]);
    }
    runs
}

/// The stretch of a monotone run: from where lr first departs by more than 10 % from the
/// run's first value to where it last changes; `None` when it never departs that far.
fn lr_stretch(run: &[(u64, f64)]) -> Option<LrStretch> {
    let l0 = run.first()?.1;
    let first = run
        .iter()
        .position(|&(_, l)| l > l0 * 1.1 || l < l0 / 1.1)?;
    let last = (1..run.len())
        .rev()
        .find(|&k| lr_differs(run[k - 1].1, run[k].1))
        .unwrap_or(first)
        .max(first);
    let (lo, hi) = run[first..=last]
        .iter()
        .fold((l0, l0), |(lo, hi), &(_, l)| (lo.min(l), hi.max(l)));
    Some(LrStretch {
        first_step: run[first].0,
        last_step: run[last].0,
        from: l0,
        to: run[last].1,
        lo,
        hi,
    })
}

/// Learning-rate changes: located at the change points (consecutive records whose lr differs
/// by more than [`LR_JUMP`]×) and at the smooth stretches between them ([`lr_stretches`]: a
/// warm-up in jumps followed by a cosine decay is located at both).
pub(super) fn lr_change(records: &[&StepStats]) -> Option<Diagnostic> {
    let lrs: Vec<(u64, f64)> = records
        .iter()
        .filter_map(|r| {
            r.lr.filter(|l| *l > 0.0 && l.is_finite())
                .map(|l| (r.step, l))
        })
        .collect();
    let (lo, hi) = lrs
        .iter()
        .fold((f64::INFINITY, 0.0f64), |(lo, hi), &(_, l)| {
            (lo.min(l), hi.max(l))
        });
    if lrs.len() < 2 || hi <= lo * 1.1 {
        return None;
    }
    let jumped = change_points(&lrs);
    let jumps: Vec<(u64, f64, f64)> = lrs
        .windows(2)
        .zip(&jumped)
        .filter(|(_, j)| **j)
        .map(|(w, _)| (w[1].0, w[0].1, w[1].1))
        .collect();
    let mut stretches = lr_stretches(&lrs, &jumped);
    if jumps.is_empty() && stretches.is_empty() {
        // Drifting by under 10 % from where it started, yet over 10 % from end to end.
        let (first, last) = (lrs[0], lrs[lrs.len() - 1]);
        stretches.push(LrStretch {
            first_step: first.0,
            last_step: last.0,
            from: first.1,
            to: last.1,
            lo,
            hi,
        });
    }
    let mut parts: Vec<String> = Vec::new();
    if let Some(&(s, from, to)) = jumps.first() {
        parts.push(format!(
            "learning rate changes {} time(s), first at step {s} ({from:.3e} -> {to:.3e}, x{:.2})",
            jumps.len(),
            to / from
        ));
    }
    let shown: Vec<String> = stretches.iter().take(2).map(LrStretch::describe).collect();
    if !shown.is_empty() {
        let more = stretches.len().saturating_sub(shown.len());
        let mut smooth = shown.join(", then ");
        if more > 0 {
            smooth.push_str(&format!(" (and {more} more smooth stretch(es))"));
        }
        parts.push(if parts.is_empty() {
            format!("learning rate {smooth}")
        } else {
            format!("it {smooth}")
        });
    }
    let tail = "B_simple scales as 1/temperature (lr/B), so an lr decay inflates it: compare \
                steps at equal lr";
    let msg = format!(
        "{}; it varies from {lo:.3e} to {hi:.3e} (x{:.1}) over the run; {tail}",
        parts.join(", and "),
        hi / lo
    );
    let mut at: Vec<[u64; 2]> = jumps.iter().map(|j| [j.0, j.0]).collect();
    at.extend(stretches.iter().map(|s| [s.first_step, s.last_step]));
    at.sort_unstable();
    Some(Diagnostic::new(DiagnosticKind::LrChange, Severity::Info, msg).located(&at))
}
