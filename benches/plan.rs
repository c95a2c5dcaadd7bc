//! Planner benchmarks: 10,000 phases × every (dp, tp, pp) layout of 64 GPUs × 32 batch sizes,
//! against a same-size single pass over the phase-time table as the baseline.

use copus::goodput::{self, Cluster, SearchSpace};
use copus::perf::{EfficiencyParams, PerfContext};
use copus::plan::synthetic::cluster_problem;
use copus::plan::{Problem, StrategyParams, SwitchCosts, compare, dp};
use divan::Bencher;

fn main() {
    divan::main();
}

const PHASES: usize = 10_000;
const BATCHES: usize = 32;

fn costs() -> SwitchCosts {
    SwitchCosts {
        batch_s: 1.0,
        dp_resize_s: 30.0,
        reshard_s: 200.0,
    }
}

/// `configs` option variants per layout (1: one state per table cell).
fn instance(configs: usize, dwell: usize) -> Problem {
    cluster_problem(7, 64, configs, BATCHES, PHASES, costs(), dwell).expect("valid instance")
}

/// Baseline: one pass over phases × states computing every phase time (the least any exact
/// planner must do).
#[divan::bench(args = [1, 12])]
fn single_pass(bencher: Bencher, configs: usize) {
    let p = instance(configs, 1);
    bencher.bench_local(|| {
        let mut acc = 0.0;
        for i in 0..p.phases.len() {
            for s in 0..p.states.len() {
                acc += p.phase_time(i, s);
            }
        }
        divan::black_box(acc)
    });
}

/// The optimal-joint DP; `configs` 1 = 28 layouts × 32 batches = 896 states, 12 = 10,752.
#[divan::bench(args = [1, 12])]
fn optimal_joint(bencher: Bencher, configs: usize) {
    let p = instance(configs, 1);
    bencher.bench_local(|| divan::black_box(dp::optimal(&p).time_s));
}

/// The DP with a minimum dwell of 50 phases (rolling rows grow with the dwell, time does not).
#[divan::bench]
fn optimal_joint_dwell_50(bencher: Bencher) {
    let p = instance(1, 50);
    bencher.bench_local(|| divan::black_box(dp::optimal(&p).time_s));
}

/// Every strategy of the report on the 896-state instance.
#[divan::bench]
fn all_strategies(bencher: Bencher) {
    let p = instance(1, 1);
    let params = StrategyParams::default();
    bencher.bench_local(|| divan::black_box(compare(&p, &params).len()));
}

/// The real throughput table (placeholder perf model) of llama-7b on 8×8 H100, 32 batches.
#[divan::bench(sample_count = 10)]
fn real_table_64_gpus(bencher: Bencher) {
    let hw = copus::profiles::hardware("h100-sxm", std::path::Path::new(".")).expect("hw");
    let model = copus::profiles::model("llama-7b", std::path::Path::new(".")).expect("model");
    let eff = EfficiencyParams::default();
    let ctx = PerfContext {
        hw: &hw,
        model: &model,
        eff: &eff,
        gpus_per_node: 8,
    };
    let cluster = Cluster {
        nodes: 8,
        gpus_per_node: 8,
    };
    let search = SearchSpace {
        batch_sizes: (0..BATCHES as u64).map(|k| 64 * (k + 1)).collect(),
        ..SearchSpace::default()
    };
    bencher.bench_local(|| divan::black_box(goodput::throughput_table(&ctx, &cluster, &search)));
}
