//! Strategies against the optimum, and the minimal-sample accounting of phases.

use copus::plan::progress::{self, TokenAxis};
use copus::plan::strategies::{self, StrategyParams};
use copus::plan::{Efficiency, Objective, PlanState, Problem, SwitchCosts, compare, synthetic};
use copus::trajectory::{Trajectory, TrajectoryPoint};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn optimal_joint_is_never_slower_and_all_respect_the_dwell(
        seed in any::<u64>(), n in 1usize..=30, ns in 1usize..=12, dwell in 1usize..=4,
        every in 1usize..=5, threshold in 0.0f64..0.2, lr_sqrt in any::<bool>(),
        b_ref in prop::sample::select(vec![16u64, 64, 256]), gbs in 1u64..600,
    ) {
        let p = synthetic::random_problem(seed, n, ns, dwell, synthetic::random_costs(seed))
            .expect("valid");
        let p = if lr_sqrt {
            let eff = Efficiency { objective: Objective::LrSqrt, reference_batch: b_ref as f64 };
            Problem::with_efficiency(p.phases.clone(), p.states.clone(), p.costs, p.min_dwell, eff)
                .expect("valid")
        } else {
            p
        };
        let params = StrategyParams { switch_threshold: threshold, greedy_every: every, gbs: Some(gbs) };
        let results = compare(&p, &params);
        let names: Vec<_> = results.iter().map(|r| r.name).collect();
        prop_assert_eq!(names, [
            "static", "static-gbs", "cbs-fixed-small", "cbs-fixed-large",
            "batch-adaptive", "config-adaptive", "greedy-joint", "optimal-joint",
        ]);
        let best = results[7].schedule.time_s;
        for r in &results {
            prop_assert!(best <= r.schedule.time_s * (1.0 + 1e-12), "{} beats optimal: {} < {}", r.name, r.schedule.time_s, best);
            prop_assert!(p.respects_dwell(&r.schedule.states), "{} breaks the dwell", r.name);
            let t = p.evaluate(&r.schedule.states);
            prop_assert!((t - r.schedule.time_s).abs() <= 1e-9 * t);
        }
        // Hindsight static is the best fixed state, so never slower than static-gbs.
        prop_assert!(results[0].schedule.time_s <= results[1].schedule.time_s * (1.0 + 1e-12));
        // Static and static-gbs never switch; static-gbs runs the grid batch nearest gbs.
        prop_assert!(results[0].schedule.switches.is_empty() && results[1].schedule.switches.is_empty());
        let gbs_batch = p.states[results[1].schedule.states[0]].batch as f64;
        prop_assert!(p.states.iter().all(|s| ((s.batch as f64) / gbs as f64).ln().abs()
            >= (gbs_batch / gbs as f64).ln().abs() - 1e-12));
        // CBS baselines, batch-adaptive keep one layout; config-adaptive one batch.
        let layout = |s: usize| (p.states[s].dp, p.states[s].tp, p.states[s].pp);
        for i in [2, 3, 4] {
            let a = &results[i].schedule.states;
            prop_assert!(a.iter().all(|&s| layout(s) == layout(a[0])), "{}", results[i].name);
        }
        let ca = &results[5].schedule.states;
        prop_assert!(ca.iter().all(|&s| p.states[s].batch == p.states[ca[0]].batch));
    }
}

fn one_layout(batches: &[(u64, f64)]) -> Vec<PlanState> {
    batches
        .iter()
        .map(|&(batch, step_time_s)| PlanState {
            dp: 8,
            tp: 1,
            pp: 1,
            cp: 1,
            ep: 1,
            zero: 1,
            batch,
            step_time_s,
            cell: None,
        })
        .collect()
}

fn phases_with_b_crit(b_crits: &[f64]) -> Vec<copus::plan::Phase> {
    b_crits
        .iter()
        .enumerate()
        .map(|(i, &b_crit)| copus::plan::Phase {
            start_tokens: i as f64,
            end_tokens: i as f64 + 1.0,
            b_crit,
            min_samples: 1e4,
        })
        .collect()
}

#[test]
fn pollux_threshold_blocks_small_gains_and_allows_large_ones() {
    // Step time 1 s at B = 32 and 1.9 s at B = 64. Gain of B = 64 over B = 32 at B_crit c:
    // t32/t64 − 1 = (1/32 + 1/c) / (1.9/64 + 1.9/c) − 1.
    let states = one_layout(&[(32, 1.0), (64, 1.9)]);
    let p = Problem::new(
        phases_with_b_crit(&[10.0, 10.0, 10_000.0]),
        states,
        SwitchCosts::uniform(0.0),
        1,
    )
    .expect("valid");
    let gain = |c: f64| (1.0 / 32.0 + 1.0 / c) / (1.9 / 64.0 + 1.9 / c) - 1.0;
    assert!(
        gain(10_000.0) > 0.04 && gain(10_000.0) < 0.06,
        "{}",
        gain(10_000.0)
    );
    let strict = StrategyParams {
        switch_threshold: 0.06,
        greedy_every: 1,
        gbs: None,
    };
    let loose = StrategyParams {
        switch_threshold: 0.04,
        ..strict
    };
    assert!(strategies::batch_adaptive(&p, &strict).switches.is_empty());
    let s = strategies::batch_adaptive(&p, &loose);
    assert_eq!(s.states, vec![0, 0, 1]);
    // The same threshold holds greedy-joint back.
    assert!(strategies::greedy_joint(&p, &strict).switches.is_empty());
    assert_eq!(strategies::greedy_joint(&p, &loose).states, vec![0, 0, 1]);
}

#[test]
fn greedy_checks_only_every_n_phases() {
    let states = one_layout(&[(32, 1.0), (256, 3.0)]);
    let b = [10.0, 1e5, 1e5, 1e5, 1e5, 1e5];
    let p =
        Problem::new(phases_with_b_crit(&b), states, SwitchCosts::uniform(0.0), 1).expect("valid");
    let every3 = StrategyParams {
        switch_threshold: 0.05,
        greedy_every: 3,
        gbs: None,
    };
    assert_eq!(
        strategies::greedy_joint(&p, &every3).states,
        vec![0, 0, 0, 1, 1, 1]
    );
    let optimal = compare(&p, &every3).pop().expect("optimal-joint");
    assert_eq!(optimal.schedule.states, vec![0, 1, 1, 1, 1, 1]);
}

#[test]
fn cbs_baselines_follow_b_crit_on_the_layout_chosen_for_small_or_large_batches() {
    // Layout A (dp8) is fastest at small batches, layout B (dp4·tp2) at large ones.
    let mut states = Vec::new();
    for (batch, a, b) in [(32u64, 1.0, 1.5), (128, 3.0, 3.2), (512, 12.0, 8.0)] {
        for (dp, tp, t) in [(8, 1, a), (4, 2, b)] {
            states.push(PlanState {
                dp,
                tp,
                pp: 1,
                cp: 1,
                ep: 1,
                zero: 1,
                batch,
                step_time_s: t,
                cell: None,
            });
        }
    }
    let p = Problem::new(
        phases_with_b_crit(&[30.0, 120.0, 600.0]),
        states,
        SwitchCosts::uniform(1.0),
        1,
    )
    .expect("valid");
    let small = strategies::cbs_fixed(&p, strategies::CbsLayout::Small);
    let large = strategies::cbs_fixed(&p, strategies::CbsLayout::Large);
    let batches = |s: &copus::plan::Schedule| -> Vec<u64> {
        s.states.iter().map(|&i| p.states[i].batch).collect()
    };
    assert_eq!(batches(&small), vec![32, 128, 512]);
    assert_eq!(batches(&large), vec![32, 128, 512]);
    assert!(small.states.iter().all(|&i| p.states[i].dp == 8));
    assert!(large.states.iter().all(|&i| p.states[i].dp == 4));
    assert_eq!(small.switches.len(), 2);
}

#[test]
fn lr_sqrt_moves_the_best_batch_with_b_noise_when_throughput_is_flat() {
    // Step time ∝ batch (flat throughput): McCandlish always prefers the smallest batch,
    // lr-sqrt an interior batch that grows with B_noise.
    let batches = [8u64, 16, 32, 64, 128, 256, 512, 1024];
    let states = one_layout(&batches.map(|b| (b, b as f64 * 0.01)));
    let b_noise = [100.0, 400.0, 1600.0, 6400.0];
    let best = |obj: Objective| -> Vec<u64> {
        let eff = Efficiency {
            objective: obj,
            reference_batch: 512.0,
        };
        let p = Problem::with_efficiency(
            phases_with_b_crit(&b_noise),
            states.clone(),
            SwitchCosts::uniform(0.0),
            1,
            eff,
        )
        .expect("valid");
        let plan = copus::plan::dp::optimal(&p);
        plan.states.iter().map(|&i| p.states[i].batch).collect()
    };
    assert_eq!(best(Objective::McCandlish), vec![8, 8, 8, 8]);
    let lr = best(Objective::LrSqrt);
    assert!(lr.windows(2).all(|w| w[0] <= w[1]), "{lr:?}");
    assert!(lr[0] > 8 && lr[3] > lr[0], "{lr:?}");
}

fn trajectory(points: &[(u64, f64, f64)]) -> Trajectory {
    Trajectory {
        label: "test".into(),
        seq_len: 1000,
        points: points
            .iter()
            .map(|&(step, tokens, b_crit)| TrajectoryPoint {
                step,
                tokens,
                b_crit,
                ci: None,
                loss: None,
            })
            .collect(),
    }
}

#[test]
fn reference_batch_reproduces_the_token_budget() {
    // 3 phases, B_crit 100 → 400 → 1600 → 6400 samples, 1e9 tokens each.
    let t = trajectory(&[
        (0, 0.0, 100.0),
        (0, 1e9, 400.0),
        (0, 2e9, 1600.0),
        (0, 3e9, 6400.0),
    ]);
    let b_ref = 512.0;
    let ph = progress::phases(&t, TokenAxis::ReferenceBatch(b_ref), 1.0).expect("phases");
    assert_eq!(ph.len(), 3);
    assert!((ph[0].b_crit - 200.0).abs() < 1e-9, "geometric mean");
    let samples: f64 = ph.iter().map(|p| p.samples_at(b_ref)).sum();
    assert!((samples * 1000.0 - 3e9).abs() < 1e-3, "{samples}");
    // Larger batches consume more tokens for the same progress, smaller ones fewer.
    let big: f64 = ph.iter().map(|p| p.samples_at(4096.0)).sum();
    let small: f64 = ph.iter().map(|p| p.samples_at(64.0)).sum();
    assert!(big > samples && small < samples);
    // Minimal axis: ΔS_min is the raw sample count; scale doubles B_crit.
    let m = progress::phases(&t, TokenAxis::Minimal, 2.0).expect("phases");
    assert!((m[1].min_samples - 1e6).abs() < 1e-6 && (m[1].b_crit - 1600.0).abs() < 1e-9);
}

#[test]
fn steps_give_the_reference_batch_of_measured_runs() {
    // 1e9 tokens in 1000 steps of 1000-token sequences: batch 1000 samples.
    let t = trajectory(&[(0, 0.0, 500.0), (1000, 1e9, 500.0)]);
    let a = progress::phases(&t, TokenAxis::FromSteps, 1.0).expect("phases");
    let b = progress::phases(&t, TokenAxis::ReferenceBatch(1000.0), 1.0).expect("phases");
    assert!((a[0].min_samples - b[0].min_samples).abs() < 1e-6);
    assert!((a[0].min_samples - 1e6 / 3.0).abs() < 1e-3);
}

#[test]
fn bad_trajectories_name_the_point() {
    let t = trajectory(&[(0, 0.0, 100.0), (10, 5.0, 100.0), (20, 5.0, 100.0)]);
    let err = progress::phases(&t, TokenAxis::Minimal, 1.0).expect_err("flat tokens");
    assert!(err.to_string().contains("point 2"), "{err}");
    let t = trajectory(&[(0, 0.0, 100.0), (10, 5.0, -1.0)]);
    let err = progress::phases(&t, TokenAxis::Minimal, 1.0).expect_err("negative B_crit");
    assert!(err.to_string().contains("point 1"), "{err}");
    let t = trajectory(&[(0, 0.0, 100.0)]);
    assert!(progress::phases(&t, TokenAxis::Minimal, 1.0).is_err());
}
