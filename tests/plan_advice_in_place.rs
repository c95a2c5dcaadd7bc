//! Live advice that keeps the run's micro-batch is costed at that micro-batch: the gain
//! written is the gain of the change applied, not of the best cell's own micro-batch.

use copus::plan::advice::{Advice, AdviceSettings, Advisor, Apply, LiveB, RunState};
use copus::session::{Resolved, Session};
use std::path::Path;

fn session_mbs() -> Resolved {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/advised_run/session-mbs.ron");
    Session::load(&path)
        .expect("load")
        .resolve(&path)
        .expect("resolve")
}

/// The session's throughput table.
fn table_of(r: &Resolved) -> copus::goodput::ThroughputTable {
    let eff = r.efficiency();
    let ctx = r.perf_context(&eff);
    copus::goodput::throughput_table(&ctx, &r.cluster(), &r.session.search)
}

/// An advisor at a 5 % threshold waiting `wait` steps (dwell and minimum).
fn advisor_of(r: &Resolved, wait: u64) -> Advisor {
    Advisor::new(AdviceSettings {
        threshold: 0.05,
        min_dwell_steps: wait,
        min_steps: wait,
        b_crit_scale: 1.0,
        form: r.session.stat_eff,
        dry_run: false,
        seq_len: r.model.seq_len,
    })
}

/// The advised run of docs/ADVISED_RUN.md: batch 16 = 2 ranks × micro-batch 8.
const RUN: RunState = RunState {
    batch: 16,
    layout: Some((2, 1, 1)),
    micro_batch: Some(8),
};

/// Its estimate at step 235: B_crit 19, with the interval `ci`.
fn estimate(ci: Option<(f64, f64)>) -> LiveB {
    LiveB {
        step: 235,
        b_simple: 19.0,
        bounded: true,
        ci,
        steps: 236,
    }
}

fn advise(r: &Resolved, in_place: Option<copus::plan::advice::InPlaceThroughput<'_>>) -> Advice {
    advisor_of(r, 50)
        .observe_with(&table_of(r), estimate(None), &RUN, in_place)
        .expect("the best cell beats the run's")
}

/// The best cell at B_crit 19 is batch 128 at micro-batch 64; kept at the run's micro-batch 8
/// (accumulation 8) the model predicts no gain, so the advice is the restart to micro-batch
/// 64 with its own gain. It used to be written as micro 8 × accumulation 8, applied in place,
/// beside the +84 % of micro-batch 64.
#[test]
fn advice_kept_at_the_run_micro_batch_is_costed_there() {
    let r = session_mbs();
    let eff = r.efficiency();
    let ctx = r.perf_context(&eff);
    let predict = |cfg: &copus::perf::ParallelConfig, batch: u64| {
        copus::perf::ConfigCost::new(&ctx, cfg)
            .and_then(|c| c.at(&ctx, batch))
            .ok()
            .map(|p| p.tokens_per_s)
    };
    let costed = advise(&r, Some(&predict));
    assert_eq!(costed.apply, Apply::Restart, "{costed:?}");
    assert_ne!(costed.micro_batch, 8, "{costed:?}");
    assert_eq!(
        u64::from(costed.micro_batch) * costed.accumulation * 2,
        costed.batch,
        "{costed:?}"
    );
    // Without a model to cost the run's micro-batch: the same restart.
    let uncosted = advise(&r, None);
    assert_eq!(uncosted, costed);
    // Where the run's micro-batch does pay in place (a model that says it runs as fast as
    // the best cell), it is kept, with its own gain.
    let as_fast = |cfg: &copus::perf::ParallelConfig, batch: u64| {
        let best = copus::perf::ParallelConfig {
            mbs: costed.micro_batch,
            ..*cfg
        };
        predict(&best, batch).map(|t| t * 0.9)
    };
    let kept = advise(&r, Some(&as_fast));
    assert_eq!(
        (kept.apply, kept.micro_batch),
        (Apply::Batch, 8),
        "{kept:?}"
    );
    assert_eq!(kept.accumulation, 8);
    assert!(
        kept.expected_gain < costed.expected_gain && kept.expected_gain > 0.05,
        "{} against {}",
        kept.expected_gain,
        costed.expected_gain
    );
}

/// The advice's reason writes a wide interval's ends as the explorer writes counts (an
/// approved advice read "B_crit 1061 [527–4941085]").
#[test]
fn the_reason_writes_large_interval_ends_short() {
    let r = session_mbs();
    let advice = advisor_of(&r, 0)
        .observe(&table_of(&r), estimate(Some((18.0, 4_941_085.0))), &RUN)
        .expect("the best cell beats the run's");
    assert!(
        advice.reason.contains("B_crit 19 [18–4.9M]"),
        "{}",
        advice.reason
    );
    assert!(!advice.reason.contains("4941085"), "{}", advice.reason);
}
