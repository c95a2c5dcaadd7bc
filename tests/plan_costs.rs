//! Switch kinds and their costs.

use copus::plan::{Phase, PlanState, Problem, ReconfigCosts, ReshardMode, SwitchCosts, SwitchKind};

#[test]
fn reshard_cost_is_checkpoint_write_and_read_plus_restart_and_warmup() {
    let c = ReconfigCosts {
        checkpoint_bw_bytes_per_s: 7e9,
        restart_s: 11.0,
        warmup_s: 13.0,
        ..ReconfigCosts::default()
    };
    let params = 3.5e9;
    let s = c.switch_costs(params);
    let checkpoint = 2.0 * params * 14.0 / 7e9;
    assert!((s.reshard_s - (checkpoint + 24.0)).abs() < 1e-9, "{s:?}");
    assert_eq!(s.batch_s, c.batch_only_s);
    assert_eq!(s.dp_resize_s, c.dp_resize_s);
    // Twice the parameters, twice the checkpoint time.
    assert!((c.switch_costs(2.0 * params).reshard_s - (2.0 * checkpoint + 24.0)).abs() < 1e-9);
}

#[test]
fn effective_costs_are_monotone_and_use_the_cheapest_mechanism() {
    let raw = SwitchCosts {
        batch_s: 50.0,
        dp_resize_s: 500.0,
        reshard_s: 100.0,
    };
    let e = raw.effective();
    assert_eq!(
        (e.batch_s, e.dp_resize_s, e.reshard_s),
        (50.0, 100.0, 100.0)
    );
    assert_eq!(e.effective(), e);
    let e = SwitchCosts {
        batch_s: 9.0,
        dp_resize_s: 3.0,
        reshard_s: 5.0,
    }
    .effective();
    assert_eq!((e.batch_s, e.dp_resize_s, e.reshard_s), (3.0, 3.0, 5.0));
}

#[test]
fn kinds_follow_the_layout() {
    let st = |dp, tp, pp, batch| PlanState {
        dp,
        tp,
        pp,
        cp: 1,
        ep: 1,
        zero: 1,
        batch,
        step_time_s: 1.0,
        cell: None,
    };
    let states = vec![
        st(8, 1, 1, 64),
        st(8, 1, 1, 128),
        st(4, 1, 1, 64),
        st(4, 2, 1, 64),
        st(4, 1, 2, 64),
        // The same DP·TP·PP with the experts split eight ways instead of not at all: expert
        // weights move between ranks, a reshard (it was costed as a batch change).
        PlanState {
            ep: 8,
            zero: 1,
            ..st(8, 1, 1, 128)
        },
    ];
    let phase = Phase {
        start_tokens: 0.0,
        end_tokens: 1.0,
        b_crit: 100.0,
        min_samples: 10.0,
    };
    let costs = SwitchCosts {
        batch_s: 1.0,
        dp_resize_s: 2.0,
        reshard_s: 3.0,
    };
    let p = Problem::new(vec![phase, phase], states, costs, 1).expect("valid");
    assert_eq!(p.kind(0, 0), None);
    assert_eq!(p.kind(0, 1), Some(SwitchKind::Batch));
    assert_eq!(p.kind(0, 2), Some(SwitchKind::DpResize));
    assert_eq!(p.kind(0, 3), Some(SwitchKind::Reshard));
    assert_eq!(p.kind(3, 4), Some(SwitchKind::Reshard));
    assert_eq!(p.kind(1, 5), Some(SwitchKind::Reshard));
    assert_eq!(p.kind(0, 5), Some(SwitchKind::Reshard));
    assert_eq!(
        [
            p.switch_cost(0, 1),
            p.switch_cost(1, 2),
            p.switch_cost(2, 4)
        ],
        [1.0, 2.0, 3.0]
    );
    assert_eq!(p.switch_cost(4, 4), 0.0);
    // Assignments are scored with their switches.
    let expected = p.phase_time(0, 0) + p.phase_time(1, 3) + 3.0;
    assert!((p.evaluate(&[0, 3]) - expected).abs() < 1e-12);
    let sched = p.schedule(vec![0, 3]);
    assert_eq!(sched.switches.len(), 1);
    assert_eq!(
        (sched.switches[0].phase, sched.switches[0].kind),
        (1, SwitchKind::Reshard)
    );
    let saved = p.phase_time(1, 0) - p.phase_time(1, 3);
    assert!((sched.switches[0].gain_s - (saved - 3.0)).abs() < 1e-12);
}

#[test]
fn invalid_costs_and_defaults() {
    let bad = ReconfigCosts {
        checkpoint_bw_bytes_per_s: 0.0,
        ..ReconfigCosts::default()
    };
    assert!(
        bad.validate()
            .expect_err("zero bandwidth")
            .contains("checkpoint_bw")
    );
    let bad = ReconfigCosts {
        restart_s: -1.0,
        ..ReconfigCosts::default()
    };
    assert!(bad.validate().expect_err("negative").contains("restart_s"));
    assert!(ReconfigCosts::default().validate().is_ok());
    // Partial RON: the rest comes from the defaults.
    let c: ReconfigCosts = ron::from_str("(restart_s: 5.0)").expect("parses");
    assert_eq!(c.restart_s, 5.0);
    assert_eq!(c.checkpoint_bytes_per_param, 14.0);
    assert_eq!(c.switch_threshold, 0.05);
}

#[test]
fn in_place_reshard_moves_the_state_over_the_fast_network_and_reinitialises() {
    let params = 7e9;
    let c = ReconfigCosts {
        reshard: ReshardMode::InPlace {
            network_bw_bytes_per_s: None,
            reinit_s: 20.0,
        },
        ..ReconfigCosts::default()
    };
    // 16 GPUs at 50 GB/s each: 98 GB move in 0.1225 s.
    let s = c.switch_costs_on(params, 16.0 * 50e9);
    assert!(
        (s.reshard_s - (params * 14.0 / 800e9 + 20.0)).abs() < 1e-9,
        "{s:?}"
    );
    // Its own bandwidth wins over the cluster's.
    let own = ReconfigCosts {
        reshard: ReshardMode::InPlace {
            network_bw_bytes_per_s: Some(1e9),
            reinit_s: 0.0,
        },
        ..ReconfigCosts::default()
    };
    assert!((own.switch_costs_on(params, 800e9).reshard_s - 98.0).abs() < 1e-9);
    // Far cheaper than checkpoint-and-restart of the same model.
    assert!(s.reshard_s < ReconfigCosts::default().switch_costs(params).reshard_s / 5.0);
    // RON, and bad values named.
    let c: ReconfigCosts =
        ron::from_str("(reshard: InPlace(reinit_s: 30.0), switch_threshold: 0.1)").expect("parses");
    assert_eq!(c.reshard.name(), "in-place");
    assert_eq!(c.switch_threshold, 0.1);
    let old: ReconfigCosts = ron::from_str("(batch_adaptive_threshold: 0.2)").expect("alias");
    assert_eq!(old.switch_threshold, 0.2);
    let bad = ReconfigCosts {
        reshard: ReshardMode::InPlace {
            network_bw_bytes_per_s: Some(0.0),
            reinit_s: 1.0,
        },
        ..ReconfigCosts::default()
    };
    assert!(bad.validate().expect_err("zero bw").contains("network_bw"));
    let bad = ReconfigCosts {
        reshard: ReshardMode::InPlace {
            network_bw_bytes_per_s: None,
            reinit_s: f64::NAN,
        },
        ..ReconfigCosts::default()
    };
    assert!(bad.validate().expect_err("NaN").contains("reinit_s"));
}
