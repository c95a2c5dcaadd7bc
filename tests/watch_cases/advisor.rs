//! The advice engine (`copus::plan::advice`) on the demo session's throughput table: a run
//! that follows its advice while B_crit grows, a steady noisy B_crit, in-place changes.

use copus::goodput::{GoodputGrid, StatEffForm, ThroughputTable};
use copus::plan::advice::{Advice, AdviceSettings, Advisor, Apply, RunState};
use std::path::Path;

fn demo_table() -> ThroughputTable {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("sessions/demo.ron");
    let r = copus::session::Session::load(&path)
        .expect("load")
        .resolve(&path)
        .expect("resolve");
    let eff = r.efficiency();
    let ctx = copus::perf::PerfContext {
        hw: &r.hardware,
        model: &r.model,
        eff: &eff,
        gpus_per_node: r.session.cluster.gpus_per_node,
    };
    copus::goodput::throughput_table(&ctx, &r.cluster(), &r.session.search)
}

fn advisor(min_dwell_steps: u64) -> Advisor {
    advisor_of(min_dwell_steps, 2048)
}

/// [`advisor`] for a model of `seq_len` tokens a sample.
fn advisor_of(min_dwell_steps: u64, seq_len: u32) -> Advisor {
    Advisor::new(AdviceSettings {
        threshold: 0.05,
        min_dwell_steps,
        min_steps: 50,
        b_crit_scale: 1.0,
        form: StatEffForm::McCandlish,
        dry_run: false,
        seq_len,
    })
}

/// A deterministic ±`amp` multiplicative wobble.
fn wobble(i: u64, amp: f64) -> f64 {
    let x = (i.wrapping_mul(2_654_435_761) % 1000) as f64 / 999.0;
    1.0 + amp * (2.0 * x - 1.0)
}

fn state_of(adv: &Advice) -> RunState {
    RunState {
        batch: adv.batch,
        layout: Some((adv.layout.dp, adv.layout.tp, adv.layout.pp)),
        micro_batch: Some(adv.micro_batch),
    }
}

/// The run follows each piece of advice from the step after it.
fn follow(
    t: &ThroughputTable,
    a: &mut Advisor,
    b_crit: impl Fn(u64) -> f64,
    steps: u64,
    start: RunState,
) -> Vec<Advice> {
    let mut run = start;
    let mut out = Vec::new();
    for step in 0..steps {
        if let Some(adv) = a.observe(t, live(step, b_crit(step)), &run) {
            run = state_of(&adv);
            out.push(adv);
        }
    }
    out
}

/// Goodput of `run`'s cell at `b_crit`, and the table's best.
fn goodput(t: &ThroughputTable, run: &RunState, b_crit: f64) -> (f64, f64) {
    let grid = GoodputGrid::at(t, b_crit, StatEffForm::McCandlish);
    let nb = t.batches.len();
    let b = t
        .batches
        .iter()
        .position(|&x| x == run.batch)
        .expect("batch on the axis");
    let (dp, tp, pp) = run.layout.expect("layout");
    let l = t
        .layouts
        .iter()
        .position(|l| (l.dp, l.tp, l.pp, l.cp) == (dp, tp, pp, 1))
        .expect("layout row");
    let best = grid.goodput.iter().flatten().fold(0.0f64, |m, &g| m.max(g));
    (grid.goodput[l * nb + b].expect("feasible"), best)
}

#[test]
fn a_run_following_advice_as_b_crit_grows_raises_its_batch_and_ends_near_the_best() {
    let t = demo_table();
    let mut a = advisor(50);
    let start = run_at(32);
    // B_crit grows 16× (300 → 4800 samples) over 4000 steps, with ±25 % noise.
    let advice = follow(
        &t,
        &mut a,
        |s| 300.0 * 16f64.powf(s as f64 / 4000.0) * wobble(s, 0.25),
        4000,
        start,
    );
    assert!(advice.len() >= 2, "{advice:#?}");
    for w in advice.windows(2) {
        assert!(w[1].batch >= w[0].batch, "{advice:#?}");
        assert!(w[1].at_step >= w[0].at_step + 50, "dwell: {advice:#?}");
    }
    for adv in &advice {
        assert!(adv.expected_gain > 0.05, "{adv:?}");
        let per = u64::from(adv.layout.dp) * u64::from(adv.micro_batch);
        assert_eq!(per * adv.accumulation, adv.batch, "{adv:?}");
        assert_eq!(adv.layout.dp * adv.layout.tp * adv.layout.pp, 64);
    }
    let last = advice.last().expect("advice");
    let (g_end, g_best) = goodput(&t, &state_of(last), 4800.0);
    assert!(g_end >= g_best / 1.05, "{g_end} vs {g_best}");
    assert!(last.batch >= 128, "{advice:#?}");
}

#[test]
fn a_steady_noisy_b_crit_does_not_flip_flop() {
    let t = demo_table();
    let mut a = advisor(20);
    let start = run_at(32);
    let first = follow(&t, &mut a, |_| 1500.0, 1, start);
    let run = first.last().map_or(start, state_of);
    // 10 000 steps of ±30 % noise around the B_crit the run was advised for.
    let later = follow(&t, &mut a, |s| 1500.0 * wobble(s, 0.3), 10_000, run);
    assert!(later.len() <= 1, "{later:#?}");
}

/// In the same layout the advice is applied in place. It keeps the run's micro-batch (more
/// accumulation) only where that change itself pays, costed at that micro-batch; else it is
/// the best cell as a restart. Without a model to cost it, a micro-batch other than the best
/// cell's is a restart.
#[test]
fn the_same_layout_is_applied_in_place_keeping_the_micro_batch() {
    let t = demo_table();
    let grid = GoodputGrid::at(&t, 1.0e6, StatEffForm::McCandlish);
    let (l, b) = grid.best.expect("best");
    let lay = t.layouts[l];
    let copus::goodput::TableCell::Feasible { config, .. } = t.cell(l, b) else {
        panic!("the best cell runs");
    };
    let best_mbs = config.mbs;
    // The run sits at batch 64 on the layout the table likes at a huge B_crit, at the best
    // cell's micro-batch (kept in place) and at another one (a restart without a model).
    for (run_mbs, in_place) in [(best_mbs, Apply::Batch), (best_mbs * 2, Apply::Restart)] {
        let mut a = advisor(0);
        let run = RunState {
            batch: 64,
            layout: Some((lay.dp, lay.tp, lay.pp)),
            micro_batch: Some(run_mbs),
        };
        let adv = a
            .observe(&t, live(10, 1.0e6), &run)
            .expect("advice at a huge B_crit");
        assert!(adv.batch > 64);
        let same = (adv.layout.dp, adv.layout.tp, adv.layout.pp) == (lay.dp, lay.tp, lay.pp);
        // The case this test is about: the run's micro-batch would fit the advised batch.
        assert!(
            same && adv
                .batch
                .is_multiple_of(u64::from(lay.dp) * u64::from(run_mbs)),
            "{adv:?}"
        );
        {
            assert_eq!(adv.apply, in_place, "run micro-batch {run_mbs}: {adv:?}");
            let mbs = if in_place == Apply::Batch {
                run_mbs
            } else {
                adv.micro_batch
            };
            assert_eq!(adv.micro_batch, mbs);
            assert_eq!(
                adv.accumulation,
                adv.batch / (u64::from(lay.dp) * u64::from(mbs))
            );
        }
        // Not advised twice, and nothing for a non-finite estimate.
        assert!(a.observe(&t, live(11, 1.0e6), &run).is_none());
        assert!(a.observe(&t, live(12, f64::NAN), &run).is_none());
    }
}

/// A run at `batch` whose records carry no layout.
fn run_at(batch: u64) -> RunState {
    RunState {
        batch,
        layout: None,
        micro_batch: None,
    }
}

/// A bounded live estimate of `b_simple` samples at `step` (resting on 100 steps).
fn live(step: u64, b_simple: f64) -> copus::plan::advice::LiveB {
    copus::plan::advice::LiveB {
        step,
        b_simple,
        bounded: true,
        ci: None,
        steps: 100,
    }
}

#[test]
fn an_estimate_on_fewer_steps_than_the_estimators_minimum_gives_no_advice() {
    // `watch --advise` advised at step 2 while its own verdict called the estimate unreliable
    // (too few steps); that first advice also set the floor no later advice goes below.
    let t = demo_table();
    let mut a = advisor(0);
    let run = run_at(64);
    for steps in [1, 2, 49] {
        let early = copus::plan::advice::LiveB {
            steps,
            ..live(steps, 1.0e6)
        };
        assert!(a.observe(&t, early, &run).is_none(), "{steps} steps");
    }
    let enough = copus::plan::advice::LiveB {
        steps: 50,
        ..live(50, 1.0e6)
    };
    assert!(a.observe(&t, enough, &run).is_some());
}

#[test]
fn an_estimate_with_an_unbounded_interval_gives_no_advice() {
    // One step where |G|² is lost in the noise reads a huge B_simple with an interval open
    // above: advice on it could never be taken back (it never shrinks the batch).
    let t = demo_table();
    let mut a = advisor(0);
    let run = run_at(64);
    let noise = copus::plan::advice::LiveB {
        bounded: false,
        ci: None,
        ..live(10, 1.0e6)
    };
    assert!(a.observe(&t, noise, &run).is_none());
    assert!(a.observe(&t, live(11, 1.0e6), &run).is_some());
}

#[test]
fn a_run_below_the_sessions_smallest_batch_gets_no_advice_and_is_named() {
    // The run's records cannot be a cell of this session (a 2-GPU run at batch 16 against a
    // 64-GPU session whose batches start at 32): nothing is advised from a made-up current
    // cell, and the mismatch is said.
    let t = demo_table();
    let mut a = advisor(0);
    let small = run_at(t.batches[0] - 1);
    assert!(a.observe(&t, live(10, 1.0e6), &small).is_none());
    let why = copus::cli::watch_advise::session_mismatch(&small, 64, &t.batches).expect("named");
    assert!(why.contains("below the session's smallest"), "{why}");
    let two_gpus = RunState {
        batch: 64,
        layout: Some((2, 1, 1)),
        micro_batch: Some(8),
    };
    let why = copus::cli::watch_advise::session_mismatch(&two_gpus, 64, &t.batches).expect("named");
    assert!(why.contains("2 GPU(s); the session has 64"), "{why}");
    let fits = RunState {
        batch: 64,
        layout: Some((64, 1, 1)),
        micro_batch: Some(1),
    };
    assert_eq!(
        copus::cli::watch_advise::session_mismatch(&fits, 64, &t.batches),
        None
    );
}

/// Advice carries the interval it rests on and what it is worth at the interval's lower end
/// (advice fired on an interval 17× wide with neither in its line).
#[test]
fn advice_carries_its_interval_and_the_gain_at_its_lower_end() {
    let t = demo_table();
    let run = run_at(64);
    let wide = copus::plan::advice::LiveB {
        ci: Some((300.0, 2.0e4)),
        ..live(100, 4000.0)
    };
    let a = advisor(0)
        .observe(&t, wide, &run)
        .expect("advice at B_crit 4000");
    assert_eq!(a.b_crit_ci, Some([300.0, 2.0e4]));
    let low = a.gain_at_lower_end.expect("a gain at the lower end");
    assert!(low < a.expected_gain, "{low} vs {}", a.expected_gain);
    assert!(
        a.reason.contains("B_crit 4000 [300–20.0k] sequences")
            && a.reason.contains("at the interval's lower end, B_crit 300"),
        "{}",
        a.reason
    );
    // One-token samples (the built-in trainer's) are called samples, as on screen.
    let a = advisor_of(0, 1).observe(&t, wide, &run).expect("advice");
    assert!(
        a.reason.contains("B_crit 4000 [300–20.0k] samples"),
        "{}",
        a.reason
    );
    // Without an interval: neither.
    let a = advisor(0)
        .observe(&t, live(100, 4000.0), &run)
        .expect("advice");
    assert!(a.b_crit_ci.is_none() && a.gain_at_lower_end.is_none());
    assert!(!a.reason.contains("lower end"), "{}", a.reason);
}
