//! Performance-model benchmarks: the Goodput grid of 32 batch sizes × every configuration of
//! 64 GPUs (target ≤ 5 ms), against same-run baselines: one `predict` call, and the naive grid
//! that calls `predict` for every configuration × batch.

use copus::goodput::{Cluster, GoodputGrid, SearchSpace, StatEffForm, throughput_table};
use copus::perf::enumerate::{Choices, configurations};
use copus::perf::{
    EfficiencyParams, HardwareProfile, ModelProfile, ParallelConfig, PerfContext, Recompute,
    predict,
};
use std::path::Path;

fn main() {
    divan::main();
}

struct Setup {
    hw: HardwareProfile,
    model: ModelProfile,
    eff: EfficiencyParams,
    cluster: Cluster,
    search: SearchSpace,
}

fn setup() -> Setup {
    let base = Path::new(env!("CARGO_MANIFEST_DIR"));
    Setup {
        hw: copus::profiles::hardware("h100-sxm", base).expect("hw"),
        model: copus::profiles::model("llama-7b", base).expect("model"),
        eff: EfficiencyParams::default(),
        cluster: Cluster {
            nodes: 8,
            gpus_per_node: 8,
        },
        search: SearchSpace {
            batch_sizes: (1..=32).map(|k| 64 * k).collect(),
            micro_batches: vec![1, 2, 4, 8],
            zero: vec![0, 1, 2, 3],
            recompute: vec![Recompute::None, Recompute::Selective, Recompute::Full],
            interleave: vec![1, 2, 4],
            allow_cross_node_tp: false,
            context_parallel: vec![1],
            expert_parallel: Vec::new(),
        },
    }
}

impl Setup {
    fn ctx(&self) -> PerfContext<'_> {
        PerfContext {
            hw: &self.hw,
            model: &self.model,
            eff: &self.eff,
            gpus_per_node: self.cluster.gpus_per_node,
        }
    }
}

/// The grid the explorer builds: throughput table + goodput at one B_crit.
#[divan::bench]
fn grid_64_gpus_32_batches(bencher: divan::Bencher) {
    let s = setup();
    bencher.bench_local(|| {
        let table = throughput_table(&s.ctx(), &s.cluster, &s.search);
        GoodputGrid::at(&table, 500.0, StatEffForm::McCandlish)
    });
}

/// Scrubbing the timeline: re-weighting a built table at another B_crit.
#[divan::bench]
fn goodput_reweight_only(bencher: divan::Bencher) {
    let s = setup();
    let table = throughput_table(&s.ctx(), &s.cluster, &s.search);
    bencher.bench_local(|| GoodputGrid::at(&table, 500.0, StatEffForm::McCandlish));
}

/// Baseline: one `predict` call.
#[divan::bench]
fn single_predict(bencher: divan::Bencher) {
    let s = setup();
    let cfg = ParallelConfig {
        dp: 8,
        tp: 4,
        pp: 2,
        mbs: 2,
        zero: 1,
        recompute: Recompute::Selective,
        vpp: 2,
        cp: 1,
        ep: 1,
    };
    bencher.bench_local(|| predict(&s.ctx(), divan::black_box(&cfg), 512));
}

/// Baseline: `predict` for every configuration × batch (the skeleton's way).
#[divan::bench]
fn naive_predict_every_cell(bencher: divan::Bencher) {
    let s = setup();
    let choices = Choices {
        micro_batches: &s.search.micro_batches,
        zero: &s.search.zero,
        recompute: &s.search.recompute,
        interleave: &s.search.interleave,
        expert_parallel: &s.search.expert_parallel,
    };
    let configs: Vec<ParallelConfig> = configurations(&s.ctx(), 64, &choices, false)
        .into_iter()
        .filter(|(_, c)| c.is_ok())
        .map(|(c, _)| c)
        .collect();
    bencher.bench_local(|| {
        let mut ok = 0usize;
        for c in &configs {
            for &b in &s.search.batch_sizes {
                ok += predict(&s.ctx(), c, b).is_ok() as usize;
            }
        }
        ok
    });
}
