//! The dynamic programme against brute force and its limiting cases.

use copus::plan::dp::{optimal, optimal_with_value};
use copus::plan::{Phase, PlanState, Problem, SwitchCosts, synthetic};
use proptest::prelude::*;

fn instance(seed: u64, n: usize, ns: usize, dwell: usize, costs: SwitchCosts) -> Problem {
    synthetic::random_problem(seed, n, ns, dwell, costs).expect("valid instance")
}

/// Least total time over every assignment that respects the dwell.
fn brute_force(p: &Problem) -> f64 {
    let (n, ns) = (p.phases.len(), p.states.len());
    let mut best = f64::INFINITY;
    let mut a = vec![0usize; n];
    loop {
        if p.respects_dwell(&a) {
            best = best.min(p.evaluate(&a));
        }
        let mut i = 0;
        while i < n && a[i] + 1 == ns {
            a[i] = 0;
            i += 1;
        }
        if i == n {
            return best;
        }
        a[i] += 1;
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn dp_equals_brute_force(seed in any::<u64>(), n in 1usize..=6, ns in 1usize..=5, dwell in 1usize..=3) {
        let p = instance(seed, n, ns, dwell, synthetic::random_costs(seed));
        let (plan, value) = optimal_with_value(&p);
        let brute = brute_force(&p);
        prop_assert!(close(value, brute), "dp {} vs brute {}", value, brute);
        prop_assert!(close(p.evaluate(&plan.states), plan.time_s));
        prop_assert!(p.respects_dwell(&plan.states), "{:?}", plan.states);
        prop_assert_eq!(plan.states.len(), n);
    }

    #[test]
    fn zero_cost_gives_the_per_phase_optimum(seed in any::<u64>(), n in 1usize..=40, ns in 1usize..=12) {
        let p = instance(seed, n, ns, 1, SwitchCosts::uniform(0.0));
        let per_phase: f64 = (0..n)
            .map(|i| (0..ns).map(|s| p.phase_time(i, s)).fold(f64::INFINITY, f64::min))
            .sum();
        prop_assert!(close(optimal(&p).time_s, per_phase));
    }

    #[test]
    fn prohibitive_cost_gives_the_static_optimum(seed in any::<u64>(), n in 1usize..=40, ns in 1usize..=12) {
        let p = instance(seed, n, ns, 1, SwitchCosts::uniform(1e15));
        let plan = optimal(&p);
        let best_static = (0..ns)
            .map(|s| (0..n).map(|i| p.phase_time(i, s)).sum::<f64>())
            .fold(f64::INFINITY, f64::min);
        prop_assert!(plan.switches.is_empty());
        prop_assert!(close(plan.time_s, best_static));
    }

    #[test]
    fn min_dwell_is_respected(seed in any::<u64>(), n in 1usize..=60, ns in 2usize..=10, dwell in 1usize..=8) {
        let p = instance(seed, n, ns, dwell, SwitchCosts::uniform(0.0));
        let plan = optimal(&p);
        prop_assert!(p.respects_dwell(&plan.states));
        let mut last = 0;
        for sw in &plan.switches {
            prop_assert!(sw.phase - last >= dwell, "switch at {} after {}", sw.phase, last);
            last = sw.phase;
        }
    }
}

#[test]
fn growing_b_crit_with_free_switches_moves_to_larger_batches() {
    // Two states on one layout: small batch fast per sample, large batch needs a large B_crit.
    let states = [(32u64, 1.0), (256, 6.0)]
        .map(|(batch, step_time_s)| PlanState {
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
        .to_vec();
    let phases = (0..10)
        .map(|i| Phase {
            start_tokens: i as f64,
            end_tokens: i as f64 + 1.0,
            b_crit: 10.0 * 2f64.powi(i),
            min_samples: 1000.0,
        })
        .collect();
    let p = Problem::new(phases, states, SwitchCosts::uniform(0.0), 1).expect("valid");
    let plan = optimal(&p);
    assert_eq!(plan.states[0], 0, "small batch while B_crit is small");
    assert_eq!(plan.states[9], 1, "large batch once B_crit is large");
    assert_eq!(plan.switches.len(), 1, "{:?}", plan.states);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(120))]

    #[test]
    fn dp_equals_brute_force_under_lr_sqrt(
        seed in any::<u64>(), n in 1usize..=6, ns in 1usize..=5, dwell in 1usize..=3,
        b_ref in prop::sample::select(vec![16.0f64, 64.0, 256.0]),
    ) {
        let base = instance(seed, n, ns, dwell, synthetic::random_costs(seed));
        let eff = copus::plan::Efficiency {
            objective: copus::plan::Objective::LrSqrt,
            reference_batch: b_ref,
        };
        let p = Problem::with_efficiency(
            base.phases.clone(), base.states.clone(), base.costs, base.min_dwell, eff,
        ).expect("valid");
        let (plan, value) = optimal_with_value(&p);
        let brute = brute_force(&p);
        prop_assert!(close(value, brute), "dp {} vs brute {}", value, brute);
        prop_assert!(close(p.evaluate(&plan.states), plan.time_s));
        prop_assert!(p.respects_dwell(&plan.states));
        // The learning rate is off its optimum except at B_ref: never faster than McCandlish.
        for i in 0..n {
            for s in 0..ns {
                prop_assert!(p.phase_time(i, s) >= base.phase_time(i, s) * (1.0 - 1e-12));
                if p.states[s].batch as f64 == b_ref {
                    prop_assert!(close(p.phase_time(i, s), base.phase_time(i, s)));
                }
            }
        }
    }
}
