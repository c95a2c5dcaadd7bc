//! Live advice in the explorer (`copus watch SRC --advise OUT --session S`): the advisor
//! observes each live re-estimate; its advice waits as *pending* until the user approves it
//! (`A`), and only approved advice is appended to OUT, so a human stays in the loop. Pending
//! advice is judged again at every new estimate from the state of the last approved one: it
//! is what the run should do now, and advice the estimate no longer supports is withdrawn
//! (advice from step 208 stayed pending at step 1499 beside a recommendation of another
//! batch, and `A` wrote it with its old gain).
//!
//! Approval takes two presses: the first `A` names the switch it would write, the second
//! writes it while the pending advice is still that switch (advice that moves to another
//! switch in between drops the first press). In a live run pending advice
//! can change several times a second (batch 64, then 128, then 64 again), and one `A` wrote
//! whichever switch was pending at that instant, not the one the user had read; the
//! confirmation "approved: …" stays on the status line until new advice is pending.

use super::App;
use super::update::Effect;
use crate::plan::advice::{Advice, AdviceLine, Advisor, Apply, RunState};
use std::path::PathBuf;

/// The explorer's advice loop.
#[derive(Debug, Clone)]
pub struct AdviceLoop {
    /// The hysteresis state as of the last approved advice (what the run has applied).
    pub advisor: Advisor,
    /// The state the pending advice leaves it in, taken on approval.
    pub pending_advisor: Option<Advisor>,
    /// Why the last pending advice was withdrawn, while nothing new is pending.
    pub withdrawn: Option<String>,
    /// The file approved advice is appended to (created when the explorer starts).
    pub out: PathBuf,
    /// Advice waiting for approval (newer advice replaces it).
    pub pending: Option<Advice>,
    /// Advice approved and written, in order.
    pub approved: Vec<Advice>,
    /// The last step observed: each update observes the points after it, in order.
    pub observed_step: Option<u64>,
    /// The switch the first `A` named: the second `A` writes the pending advice while it is
    /// still this switch (batch, layout, micro-batch and how it applies).
    pub armed: Option<Advice>,
}

impl AdviceLoop {
    /// A loop writing to `out` with `advisor`.
    pub fn new(advisor: Advisor, out: PathBuf) -> Self {
        Self {
            advisor,
            pending_advisor: None,
            withdrawn: None,
            out,
            pending: None,
            approved: Vec::new(),
            observed_step: None,
            armed: None,
        }
    }
}

/// "batch 128 on DP64·TP1·PP1 (+7.9 %, apply: restart)": how it applies in the advice file's
/// words (`"apply":"batch"` or `"restart"`; it said "in place" for `batch`).
pub fn advice_label(a: &Advice) -> String {
    format!(
        "batch {} on {} ({:+.1} %, apply: {})",
        a.batch,
        crate::perf::config::layout_label_cp(a.layout.dp, 1, a.layout.tp, a.layout.pp),
        a.expected_gain * 100.0,
        match a.apply {
            Apply::Batch => "batch",
            Apply::Restart => "restart",
        }
    )
}

/// The run's global batch, samples: from the tokens of its last two points (the live run's
/// own), else the session's `current_batch`.
fn run_batch(app: &App) -> Option<u64> {
    app.measured_batch().or(app.resolved.session.current_batch)
}

/// Observe the live points not observed yet, in step order, as they would have come live (a
/// file that already held 800 steps was judged once, at its last step, and could advise a
/// smaller batch than the pass through its steps, as `watch --headless --advise` makes it);
/// new advice becomes the pending one.
pub fn observe(app: &mut App) {
    // The heatmap shows no goodput when the run's samples are not the model's (its B_crit
    // would be read at the wrong scale): no advice from it either.
    if app.scale_warning.is_some() {
        if let Some(lp) = app.advice.as_mut() {
            lp.pending = None;
        }
        return;
    }
    let (Some(table), Some(batch)) = (app.table.clone(), run_batch(app)) else {
        return;
    };
    let to_model_seqs = app.samples_to_model_seqs();
    let unit = crate::format::sample_word(app.resolved.model.seq_len);
    let Some(lp) = app.advice.as_mut() else {
        return;
    };
    let after = lp.observed_step;
    let new_points = app
        .trajectory
        .points
        .iter()
        .enumerate()
        .filter(|(_, p)| after.is_none_or(|s| p.step > s));
    for (i, point) in new_points {
        let run = RunState {
            batch: lp.approved.last().map_or(batch, |a| a.batch.max(batch)),
            layout: None,
            micro_batch: None,
        };
        let estimate = crate::plan::advice::LiveB {
            step: point.step,
            // In the model's sequences, as the heatmap's batch axis counts them.
            b_simple: point.b_crit * to_model_seqs,
            bounded: point.ci.is_none_or(|(_, hi)| hi.is_finite()),
            ci: point
                .ci
                .map(|(lo, hi)| (lo * to_model_seqs, hi * to_model_seqs)),
            // The points the trajectory held then (a merged point stands for several steps:
            // this errs on the side of waiting).
            steps: i as u64 + 1,
        };
        let mut trial = lp.advisor.clone();
        match trial.observe(&table, estimate, &run) {
            Some(a) => {
                // Another switch than the one the first `A` named: that press no longer
                // holds (it stayed armed, and a single press later wrote the named switch
                // when it came back).
                if lp
                    .armed
                    .as_ref()
                    .is_some_and(|armed| !same_switch(armed, &a))
                {
                    lp.armed = None;
                }
                lp.pending = Some(a);
                lp.pending_advisor = Some(trial);
                lp.withdrawn = None;
            }
            // An estimate judged that calls for no switch withdraws what was pending, unless
            // the same switch still predicts more than the lower threshold of withdrawal:
            // it is kept, with the gain of now (at the threshold it came and went twice
            // in a live run).
            None if lp.advisor.judges(&estimate) => {
                if let Some((kept, advisor)) = lp
                    .pending
                    .as_ref()
                    .and_then(|old| still_holds(&lp.advisor, old, &table, estimate, &run))
                {
                    lp.pending = Some(kept);
                    lp.pending_advisor = Some(advisor);
                } else if let Some(old) = lp.pending.take() {
                    // The withdrawn advice's gain was judged earlier: the sentence says that
                    // no switch is worth the threshold now (it read "… (+5.0 %) worth 5 %").
                    lp.withdrawn = Some(format!(
                        "advice withdrawn at step {}: at B_crit {:.0} {unit} no switch is worth \
                         {:.0} % now (it was {})",
                        point.step,
                        estimate.b_simple,
                        lp.advisor.threshold() * 100.0,
                        advice_label(&old),
                    ));
                }
                if lp.pending.is_none() {
                    lp.pending_advisor = None;
                    lp.armed = None;
                }
            }
            None => {}
        }
        lp.observed_step = Some(point.step);
    }
}

/// The share of the advice threshold pending advice must keep predicting to stay pending:
/// advice is given above the threshold and withdrawn only below this share of it.
pub const WITHDRAW_SHARE: f64 = 0.5;

/// `pending` judged again at `estimate` with the lower threshold of withdrawal: the same
/// switch (batch, layout, micro-batch) with the gain of now, and the advisor state it leaves
/// (at the approved advisor's own threshold), or `None` where it no longer holds.
fn still_holds(
    advisor: &Advisor,
    pending: &Advice,
    table: &crate::goodput::ThroughputTable,
    estimate: crate::plan::advice::LiveB,
    run: &RunState,
) -> Option<(Advice, Advisor)> {
    let threshold = advisor.threshold();
    let mut lenient = advisor.with_threshold(threshold * WITHDRAW_SHARE);
    let again = lenient.observe(table, estimate, run)?;
    same_switch(&again, pending).then(|| (again, lenient.with_threshold(threshold)))
}

/// Whether two pieces of advice name the same switch: batch, layout, micro-batch and how it
/// applies (their gains and steps may differ).
fn same_switch(a: &Advice, b: &Advice) -> bool {
    (a.batch, a.layout, a.micro_batch, a.apply) == (b.batch, b.layout, b.micro_batch, b.apply)
}

/// Whether the first `A` named the switch pending now.
fn armed_for(lp: &AdviceLoop, pending: &Advice) -> bool {
    lp.armed.as_ref().is_some_and(|a| same_switch(a, pending))
}

/// The status-line note of a pending advice.
pub fn pending_note(app: &App) -> Option<String> {
    let lp = app.advice.as_ref()?;
    match &lp.pending {
        // The step it was judged at (its `at_step` is the next, where it applies).
        // For the step it applies at, as the advice file's `at_step` and `watch --headless`
        // say (it gave the step it was judged at, one earlier).
        Some(a) => {
            let threshold = lp.advisor.threshold();
            // Kept below the threshold (within the band of withdrawal): say so.
            let below = (a.expected_gain <= threshold).then(|| {
                format!(
                    " (under the {:.0} % threshold now; withdrawn under {:.1} %)",
                    threshold * 100.0,
                    threshold * WITHDRAW_SHARE * 100.0
                )
            });
            // The key first: a narrow status line cuts the end (at 80 columns "A approves"
            // and "A again writes it" were cut off).
            if armed_for(lp, a) {
                return Some(format!(
                    "A again writes: {} for step {}{} → {}",
                    advice_label(a),
                    a.at_step,
                    below.unwrap_or_default(),
                    lp.out.display()
                ));
            }
            Some(format!(
                "A approves: {} for step {}{}",
                advice_label(a),
                a.at_step,
                below.unwrap_or_default()
            ))
        }
        // What the last approval wrote stays said until new advice is pending.
        None => lp
            .withdrawn
            .clone()
            .or_else(|| lp.approved.last().map(|a| approved_text(a, &lp.out))),
    }
}

/// "approved: batch 128 on … for step 445 → OUT": what an approval wrote, and where.
fn approved_text(a: &Advice, out: &std::path::Path) -> String {
    format!(
        "approved: {} for step {} → {}",
        advice_label(a),
        a.at_step,
        out.display()
    )
}

/// `A`: write the pending advice to OUT.
pub fn approve(app: &mut App) -> Vec<Effect> {
    let Some(lp) = app.advice.as_mut() else {
        app.status = "no advice loop: start with copus watch SRC --advise OUT --session S".into();
        return Vec::new();
    };
    let Some(pending) = lp.pending.as_ref() else {
        lp.armed = None;
        // What was written last stays said beside it.
        app.status = match lp.approved.last() {
            Some(a) => format!("no advice pending · {}", approved_text(a, &lp.out)),
            None => "no advice pending".into(),
        };
        return Vec::new();
    };
    // The first press names the switch; the second writes it while it is still pending.
    if !armed_for(lp, pending) {
        lp.armed = Some(pending.clone());
        app.status = pending_note(app).unwrap_or_default();
        return Vec::new();
    }
    let Some(a) = lp.pending.take() else {
        return Vec::new();
    };
    lp.armed = None;
    let line = match serde_json::to_string(&AdviceLine { v: 1, advice: &a }) {
        Ok(l) => l,
        Err(e) => {
            app.status = format!("advice not written: {e}");
            return Vec::new();
        }
    };
    app.status = approved_text(&a, &lp.out);
    lp.withdrawn = None;
    let path = lp.out.clone();
    if let Some(advisor) = lp.pending_advisor.take() {
        lp.advisor = advisor;
    }
    lp.approved.push(a);
    vec![Effect::AppendLine { path, line }]
}
