//! The cell explanation model: parts that add up to `predict`'s step time and memory, the
//! weights / gradients / optimizer-state split of ZeRO, and the nearest change that makes an
//! infeasible cell run (feasible, and minimal among the neighbours searched).

use copus::goodput::{Cluster, SearchSpace, TableCell, throughput_table};
use copus::perf::enumerate::Choices;
use copus::perf::explain::{candidates, explain, nearest_change, zero_split};
use copus::perf::memory::{peak_memory, zero_bytes_per_param};
use copus::perf::{
    EfficiencyParams, HardwareProfile, ModelProfile, ParallelConfig, PerfContext, Recompute,
    predict,
};
use copus::profiles;
use std::path::Path;

fn hw() -> HardwareProfile {
    profiles::hardware("h100-sxm", Path::new(".")).expect("hw")
}

fn model(name: &str) -> ModelProfile {
    profiles::model(name, Path::new(".")).expect("model")
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1e-30)
}

#[test]
fn parts_add_up_to_predict_for_every_option() {
    let (hw, m, eff) = (hw(), model("llama-7b"), EfficiencyParams::default());
    let ctx = PerfContext {
        hw: &hw,
        model: &m,
        eff: &eff,
        gpus_per_node: 8,
    };
    let mut checked = 0;
    for (dp, tp, pp) in [(64, 1, 1), (16, 2, 2), (8, 8, 1), (4, 4, 4), (2, 8, 4)] {
        for zero in 0..=3u8 {
            for recompute in [Recompute::None, Recompute::Selective, Recompute::Full] {
                for (mbs, vpp) in [(1, 1), (2, 1), (1, 2)] {
                    let cfg = ParallelConfig {
                        dp,
                        tp,
                        pp,
                        mbs,
                        zero,
                        recompute,
                        vpp,
                        cp: 1,
                        ep: 1,
                    };
                    let batch = 1024;
                    let Ok(p) = predict(&ctx, &cfg, batch) else {
                        assert!(explain(&ctx, &cfg, batch).is_err(), "{cfg}");
                        continue;
                    };
                    let e = explain(&ctx, &cfg, batch).expect("explains what predicts");
                    assert_eq!(e.prediction, p, "{cfg}");
                    let step: f64 = e.step.iter().map(|x| x.value).sum();
                    assert!(
                        close(step, p.step_time_s),
                        "{cfg}: {step} vs {}",
                        p.step_time_s
                    );
                    let b = &p.breakdown;
                    for (key, v) in [
                        ("compute", b.compute_s),
                        ("bubble", b.bubble_s),
                        ("tp", b.tp_s),
                        ("pp", b.pp_s),
                        ("dp", b.dp_s),
                        ("optimizer", b.optimizer_s),
                    ] {
                        assert_eq!(e.step_part(key), v, "{cfg} {key}");
                    }
                    let mem: f64 = e.memory.iter().map(|x| x.value).sum();
                    assert!(
                        close(mem, p.memory_per_gpu_bytes),
                        "{cfg}: {mem} vs {}",
                        p.memory_per_gpu_bytes
                    );
                    let pm = peak_memory(&m, &cfg, e.micro_batches, hw.reserved_bytes, &eff);
                    let states = e.memory_part("weights")
                        + e.memory_part("gradients")
                        + e.memory_part("optimizer_state");
                    assert!(close(states, pm.model_states), "{cfg}");
                    assert_eq!(e.memory_part("activations"), pm.activations);
                    assert_eq!(e.capacity_bytes, hw.hbm_bytes);
                    let shares = e.exposed_comm_share() + e.bubble_share();
                    assert!((0.0..1.0).contains(&shares), "{cfg}: {shares}");
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 100, "only {checked} configurations ran");
}

#[test]
fn zero_split_is_the_zero_papers_bytes_per_parameter() {
    for dp in [1u32, 2, 8, 64] {
        for stage in 0..=3u8 {
            for g in [2.0, 4.0] {
                let (w, gr, o) = zero_split(stage, dp, g);
                assert!(close(w + gr + o, zero_bytes_per_param(stage, dp, g)));
            }
        }
        let d = f64::from(dp);
        // What each stage shards: optimizer state (1), gradients (2), weights (3).
        assert!(close(zero_split(1, dp, 2.0).2, 12.0 / d));
        assert!(close(zero_split(2, dp, 2.0).1, 2.0 / d));
        assert!(close(zero_split(3, dp, 2.0).0, 2.0 / d));
        assert_eq!(zero_split(2, dp, 2.0).0, 2.0);
    }
}

#[test]
fn every_runnable_grid_cell_is_explained_as_the_table_predicts() {
    let (hw, m, eff) = (hw(), model("llama-7b"), EfficiencyParams::default());
    let ctx = PerfContext {
        hw: &hw,
        model: &m,
        eff: &eff,
        gpus_per_node: 8,
    };
    let cluster = Cluster {
        nodes: 4,
        gpus_per_node: 8,
    };
    let table = throughput_table(&ctx, &cluster, &SearchSpace::default());
    let mut n = 0;
    for (i, cell) in table.cells.iter().enumerate() {
        if let TableCell::Feasible { config, prediction } = cell {
            let batch = table.batches[i % table.batches.len()];
            let e = explain(&ctx, config, batch).expect("runs");
            assert_eq!(&e.prediction, prediction);
            let mem: f64 = e.memory.iter().map(|x| x.value).sum();
            assert!(close(mem, prediction.memory_per_gpu_bytes));
            n += 1;
        }
    }
    assert!(n > 10, "{n} runnable cells");
}

#[test]
fn the_nearest_change_runs_and_nothing_nearer_does() {
    let (hw, m, eff) = (hw(), model("gpt-70b"), EfficiencyParams::default());
    let ctx = PerfContext {
        hw: &hw,
        model: &m,
        eff: &eff,
        gpus_per_node: 8,
    };
    let search = SearchSpace::default();
    let choices = Choices {
        micro_batches: &search.micro_batches,
        zero: &search.zero,
        recompute: &search.recompute,
        interleave: &search.interleave,
        expert_parallel: &search.expert_parallel,
    };
    let mut found = 0;
    // 70B on 64 GPUs: pure data parallelism and narrow layouts run out of memory.
    for layout in [(64u32, 1u32, 1u32), (32, 2, 1), (16, 4, 1), (32, 1, 2)] {
        for batch in [64u64, 256] {
            let all = candidates(&ctx, layout, batch, &choices, false);
            // The cell itself (distance 0 on its own layout) does not run.
            assert!(
                all.iter()
                    .filter(|c| (c.config.dp, c.config.tp, c.config.pp) == layout
                        && c.distance == 0)
                    .all(|c| !c.runs()),
                "{layout:?} runs at {batch} already"
            );
            let Some(n) = nearest_change(&ctx, layout, batch, &choices, false) else {
                assert!(all.iter().all(|c| !c.runs()));
                continue;
            };
            found += 1;
            let p = predict(&ctx, &n.config, batch).expect("the change runs");
            assert!(p.fits, "{}: {} GB", n.config, p.memory_per_gpu_bytes / 1e9);
            assert_eq!(p, n.prediction);
            assert!(n.distance > 0 && !n.changes.is_empty(), "{n:?}");
            assert_eq!(n.tried, all.len());
            for c in all.iter().filter(|c| c.runs()) {
                assert!(c.distance >= n.distance, "{} is nearer", c.config);
                if c.distance == n.distance {
                    let t = c.outcome.as_ref().expect("runs").step_time_s;
                    assert!(
                        t >= n.prediction.step_time_s,
                        "{} is as near and faster",
                        c.config
                    );
                }
            }
            // The GPU count is kept.
            assert_eq!(n.config.gpus(), layout.0 * layout.1 * layout.2);
        }
    }
    assert!(
        found >= 4,
        "only {found} infeasible cells had a nearest change"
    );
}

#[test]
fn an_explanation_cautions_when_one_tensor_takes_over_half_the_free_memory() {
    use copus::perf::{Stack, StackPreset};
    // Llama 3.2 1B's shape at 48K tokens on one H200 with PyTorch's loss (torchtitan): it fits
    // by copus's count (109 of 151 GB), but its FP32 logits (25.2 GB) are over half of what is
    // left; the flash run of it went out of memory on an H200 (docs/MODEL.md). At 16K it is
    // not flagged.
    let hw = profiles::hardware("h200", Path::new(".")).expect("hw");
    let eff = Stack::preset(StackPreset::TorchtitanFsdp2).apply(&hw.efficiency);
    for (seq, risky) in [(49_152, true), (16_384, false)] {
        let m = ModelProfile {
            name: "llama3.2-1b".into(),
            layers: 16,
            hidden: 2048,
            heads: 32,
            kv_heads: 8,
            ffn_hidden: 8192,
            vocab: 128_256,
            seq_len: seq,
            swiglu: true,
            tied_embeddings: true,
            dropout: None,
            moe: None,
            source: String::new(),
        };
        let ctx = PerfContext {
            hw: &hw,
            model: &m,
            eff: &eff,
            gpus_per_node: 1,
        };
        let cfg = ParallelConfig {
            dp: 1,
            tp: 1,
            pp: 1,
            mbs: 1,
            zero: 3,
            recompute: Recompute::Full,
            vpp: 1,
            cp: 1,
            ep: 1,
        };
        let e = explain(&ctx, &cfg, 1).expect("explains");
        assert!(e.prediction.fits, "{seq}");
        assert!(close(e.largest_buffer_bytes, seq as f64 * 128_256.0 * 4.0));
        assert_eq!(e.fragmentation_risk(), risky, "{seq}");
        // Without pipeline parallelism the stage that holds the logits is the whole GPU.
        assert!(
            close(e.logits_stage_bytes, e.prediction.memory_per_gpu_bytes),
            "{seq}"
        );
        // Seconds a step: not short enough to be host-bound.
        assert!(!e.host_bound_risk, "{seq}");
    }
}

#[test]
fn the_explorer_cautions_micro_batches_short_enough_to_be_host_bound() {
    // Llama 3.2 1B's shape at 2K tokens on one H200 with torchtitan's eager stack: every
    // micro-batch is 0.06 s of GPU work, where copus's own runs were bound by the host
    // (docs/MODEL.md, "Small steps"); the explanation (`x`) says so. At 32K tokens a
    // micro-batch is seconds and there is no caution.
    let dir = tempfile::tempdir().expect("tempdir");
    let session = |seq: u32| {
        format!(
            r#"(
    name: "1B on one H200",
    description: "host-bound caution check",
    model: Inline((name: "llama3.2-1b", layers: 16, hidden: 2048, heads: 32, kv_heads: 8, ffn_hidden: 8192, vocab: 128256, seq_len: {seq}, swiglu: true, tied_embeddings: true, source: "test")),
    cluster: (hardware: Named("h200"), nodes: 1, gpus_per_node: 1),
    stack: (preset: Some(TorchtitanFsdp2)),
    source: Scenario((law: MerrillPlateau, start_tokens: 1e9, total_tokens: 60e9, phases: 20, nominal_batch: 4)),
    b_crit_scale: 1.0,
    stat_eff: McCandlish,
    search: (batch_sizes: [1, 2, 4], micro_batches: [1], zero: [3], recompute: [None, Full], interleave: [1], allow_cross_node_tp: false),
    current_batch: Some(1),
)"#
        )
    };
    for (seq, cautioned) in [(2048, true), (32768, false)] {
        let path = dir.path().join(format!("s{seq}.ron"));
        std::fs::write(&path, session(seq)).expect("session");
        let path = path.to_str().expect("utf-8 path");
        let screen = crate::render_support::snapshot(&[path, "--keys", "x", "--size", "80x24"]);
        assert!(screen.contains("Step time"), "{screen}");
        assert_eq!(
            screen.contains("Caution: each micro-batch"),
            cautioned,
            "{seq}:\n{screen}"
        );
        // Headless, `grid --json` carries the same flag for every cell that runs: at 2K tokens
        // the batch-1 cell (one 0.06 s micro-batch) is marked, at 32K none is.
        let v = crate::perf_cli::copus_json(&["grid", path, "--json"]);
        let cells = v["cells"].as_array().expect("cells");
        let marked: Vec<bool> = cells
            .iter()
            .filter(|c| c["feasible"] == true)
            .map(|c| c["host_bound_risk"].as_bool().expect("host_bound_risk"))
            .collect();
        assert!(!marked.is_empty());
        assert_eq!(marked.iter().any(|m| *m), cautioned, "{seq}: {marked:?}");
        assert!(
            cells
                .iter()
                .all(|c| c["fragmentation_risk"].is_boolean() == (c["feasible"] == true)),
            "{seq}"
        );
    }
}

#[test]
fn the_recommendation_says_when_the_layout_filter_hides_its_layout() {
    // The heatmap's ★ is the best of the layouts a filter shows; the recommendation stays over
    // every layout (as the plan), and says which layout the filter shows best.
    let demo = concat!(env!("CARGO_MANIFEST_DIR"), "/sessions/demo.ron");
    let snap =
        |keys: &str| crate::render_support::snapshot(&[demo, "--keys", keys, "--size", "200x60"]);
    let hidden = snap("/ t p = 4 Enter");
    assert!(
        hidden.contains("best: batch 32 on DP32·TP2·PP1")
            && hidden.contains("of every layout; 'tp=4' shows best batch 32 on DP16·TP4·PP1 (★)"),
        "{hidden}"
    );
    let shown = snap("/ t p = 2 Enter");
    assert!(!shown.contains("of every layout;"), "{shown}");
}
