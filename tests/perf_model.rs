//! Behaviour of the performance model and the Goodput grid.

use copus::goodput::{
    Cluster, GoodputGrid, SearchSpace, StatEffForm, TableCell, stat_eff, throughput_table,
};
use copus::perf::{
    EfficiencyParams, HardwareProfile, ModelProfile, MoeSpec, ParallelConfig, PerfContext,
    Recompute, predict,
};
use copus::profiles;
use proptest::prelude::*;
use std::path::Path;

fn hw() -> HardwareProfile {
    profiles::hardware("h100-sxm", Path::new(".")).expect("hw")
}

fn model(name: &str) -> ModelProfile {
    profiles::model(name, Path::new(".")).expect("model")
}

/// A layout with ZeRO-1, selective recompute and no interleave, CP or EP (the integration
/// tests' common configuration).
pub(crate) fn cfg(dp: u32, tp: u32, pp: u32, mbs: u32) -> ParallelConfig {
    ParallelConfig {
        dp,
        tp,
        pp,
        mbs,
        zero: 1,
        recompute: Recompute::Selective,
        vpp: 1,
        cp: 1,
        ep: 1,
    }
}

#[test]
fn throughput_rises_then_plateaus_with_batch() {
    let (hw, m, eff) = (hw(), model("llama-7b"), EfficiencyParams::default());
    let ctx = PerfContext {
        hw: &hw,
        model: &m,
        eff: &eff,
        gpus_per_node: 8,
    };
    let c = cfg(16, 2, 2, 1);
    let tput: Vec<f64> = (4..=14)
        .map(|i| predict(&ctx, &c, 1u64 << i).expect("valid").tokens_per_s)
        .collect();
    assert!(tput.windows(2).all(|w| w[1] > w[0]), "monotone: {tput:?}");
    let gain = |i: usize| tput[i + 1] / tput[i] - 1.0;
    // Overhead-bound at small batches (bubble, DP collectives, optimizer per step) …
    assert!(gain(0) > 0.2, "first doubling gains {:.3}", gain(0));
    // … compute-bound plateau at large ones.
    assert!(
        gain(tput.len() - 2) < 0.02,
        "last doubling gains {:.3}",
        gain(tput.len() - 2)
    );
}

#[test]
fn gemm_efficiency_curve_saturates() {
    let e = EfficiencyParams::default();
    let h = hw();
    let eff: Vec<f64> = [64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0]
        .iter()
        .map(|&tokens| {
            e.gemm_eff(
                tokens,
                4096.0,
                4096.0 / 8.0,
                h.peak_flops,
                h.mem_bw_bytes_per_s,
            )
        })
        .collect();
    assert!(eff.windows(2).all(|w| w[1] > w[0]), "{eff:?}");
    assert!(
        eff[0] < 0.25 * e.max_eff,
        "thin GEMMs are overhead-bound: {eff:?}"
    );
    assert!(eff[5] > 0.9 * e.max_eff && eff[5] <= e.max_eff, "{eff:?}");
}

#[test]
fn invalid_configurations_say_why() {
    let (hw, m, eff) = (hw(), model("gpt-32b"), EfficiencyParams::default());
    let ctx = PerfContext {
        hw: &hw,
        model: &m,
        eff: &eff,
        gpus_per_node: 8,
    };
    let bad_tp = predict(&ctx, &cfg(1, 3, 1, 1), 8).expect_err("56 heads / 3");
    assert!(bad_tp.to_string().contains("heads"), "{bad_tp}");
    // Uneven stages run (⌈48/5⌉ = 10 layers on the heaviest stage, slower than PP 4's 12
    // per stage would suggest only by the bubble); more stages than layers do not.
    let uneven = predict(&ctx, &cfg(1, 8, 5, 1), 8).expect("48 layers on PP 5 run unevenly");
    assert!(uneven.step_time_s > 0.0);
    let bad_pp = predict(&ctx, &cfg(1, 1, 64, 1), 8).expect_err("48 layers / 64");
    assert!(bad_pp.to_string().contains("layers"), "{bad_pp}");
    let bad_batch = predict(&ctx, &cfg(4, 8, 1, 2), 12).expect_err("12 / 8");
    assert!(bad_batch.to_string().contains("divisible"), "{bad_batch}");
    let zero3_pp = ParallelConfig {
        zero: 3,
        ..cfg(2, 8, 2, 1)
    };
    // ZeRO-3 with PP (torchtitan FSDP2 + PP) runs.
    assert!(predict(&ctx, &zero3_pp, 8).is_ok());
    let oom = predict(&ctx, &cfg(1, 1, 1, 1), 8).expect("runs");
    assert!(!oom.fits && oom.memory_per_gpu_bytes > hw.hbm_bytes);
}

#[test]
fn recompute_trades_memory_for_time_and_interleaving_cuts_the_bubble() {
    // Unfused attention keeps the s×s scores unless recomputed (Korthikanti et al. 2022).
    let (hw, m) = (hw(), model("gpt-70b"));
    let eff = EfficiencyParams {
        attention: copus::perf::efficiency::AttentionKind::Unfused,
        ..EfficiencyParams::default()
    };
    let ctx = PerfContext {
        hw: &hw,
        model: &m,
        eff: &eff,
        gpus_per_node: 8,
    };
    let run = |rc, vpp| {
        let c = ParallelConfig {
            recompute: rc,
            vpp,
            ..cfg(4, 8, 4, 1)
        };
        predict(&ctx, &c, 64).expect("valid")
    };
    let (none, sel, full) = (
        run(Recompute::None, 1),
        run(Recompute::Selective, 1),
        run(Recompute::Full, 1),
    );
    assert!(none.memory_per_gpu_bytes > sel.memory_per_gpu_bytes);
    assert!(sel.memory_per_gpu_bytes > full.memory_per_gpu_bytes);
    assert!(full.step_time_s > sel.step_time_s);
    assert!(full.hardware_tflops_per_gpu > full.model_tflops_per_gpu);
    let inter = run(Recompute::Selective, 3);
    assert!(inter.breakdown.bubble_s < sel.breakdown.bubble_s / 2.5);
    // Fused (flash) attention never stores the scores: selective recompute saves no memory
    // and only costs the attention forward again.
    let fused = EfficiencyParams::default();
    let fctx = PerfContext { eff: &fused, ..ctx };
    let frun = |rc| {
        let c = ParallelConfig {
            recompute: rc,
            ..cfg(4, 8, 4, 1)
        };
        predict(&fctx, &c, 64).expect("valid")
    };
    let (fnone, fsel) = (frun(Recompute::None), frun(Recompute::Selective));
    assert_eq!(fnone.memory_per_gpu_bytes, fsel.memory_per_gpu_bytes);
    assert!(fsel.step_time_s > fnone.step_time_s);
}

#[test]
fn grid_cells_keep_reasons_and_the_best_cell_is_the_argmax() {
    let (hw, m, eff) = (hw(), model("llama-32b"), EfficiencyParams::default());
    let ctx = PerfContext {
        hw: &hw,
        model: &m,
        eff: &eff,
        gpus_per_node: 8,
    };
    let cluster = Cluster {
        nodes: 2,
        gpus_per_node: 8,
    };
    let search = SearchSpace::default();
    let table = throughput_table(&ctx, &cluster, &search);
    assert_eq!(table.cells.len(), table.layouts.len() * table.batches.len());
    assert!(
        table
            .layouts
            .iter()
            .all(|l| l.dp * l.tp * l.pp == 16 && l.tp <= 8)
    );
    let mut reasons = 0;
    for (i, c) in table.cells.iter().enumerate() {
        match c {
            TableCell::Feasible { config, prediction } => {
                assert!(prediction.fits);
                let l = table.layouts[i / table.batches.len()];
                assert_eq!((config.dp, config.tp, config.pp), (l.dp, l.tp, l.pp));
            }
            TableCell::Infeasible(why) => {
                assert!(!why.is_empty());
                reasons += 1;
            }
        }
    }
    assert!(reasons > 0, "DP16·TP1 cannot hold a 32B model");
    let grid = GoodputGrid::at(&table, 300.0, StatEffForm::McCandlish);
    let (bl, bb) = grid.best.expect("some cell runs");
    let best = grid.goodput[bl * table.batches.len() + bb].expect("feasible");
    assert!(grid.goodput.iter().flatten().all(|&g| g <= best));
    let scaled = GoodputGrid::at_scaled(&table, 300.0, 4.0, StatEffForm::McCandlish);
    assert_eq!(scaled.b_crit, 1200.0);
    // A larger B_crit never moves the best batch down.
    assert!(scaled.best.expect("best").1 >= bb);
}

#[test]
fn stat_eff_forms() {
    assert_eq!(stat_eff(StatEffForm::McCandlish, 100.0, 100.0), 0.5);
    let pollux = StatEffForm::Pollux { b0: 64.0 };
    assert!((stat_eff(pollux, 64.0, 500.0) - 1.0).abs() < 1e-12);
    assert!(stat_eff(pollux, 1024.0, 500.0) < 1.0);
}

#[test]
fn moe_floor_blocks_small_batches() {
    let (hw, eff) = (hw(), EfficiencyParams::default());
    let mut m = model("gpt-1.7b");
    (
        m.layers,
        m.hidden,
        m.heads,
        m.kv_heads,
        m.ffn_hidden,
        m.seq_len,
    ) = (4, 1024, 8, 8, 4096, 128);
    m.moe = Some(MoeSpec {
        experts: 64,
        top_k: 1,
        capacity_factor: Some(1.0),
    });
    let ctx = PerfContext {
        hw: &hw,
        model: &m,
        eff: &eff,
        gpus_per_node: 8,
    };
    let search = SearchSpace {
        batch_sizes: vec![8, 64, 512, 4096, 32768],
        ..SearchSpace::default()
    };
    let table = throughput_table(
        &ctx,
        &Cluster {
            nodes: 1,
            gpus_per_node: 8,
        },
        &search,
    );
    let row = table
        .layouts
        .iter()
        .position(|l| l.tp == 1 && l.pp == 1)
        .expect("DP8");
    assert!(matches!(table.cell(row, 0), TableCell::Infeasible(w) if w.starts_with("MoE")));
    assert!(
        matches!(table.cell(row, 4), TableCell::Feasible { .. }),
        "{:?}",
        table.cell(row, 4)
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn breakdown_adds_up(tp_i in 0usize..4, pp_i in 0usize..3, mbs in 1u32..5, k in 1u64..32, z in 0u8..2) {
        let (hw, m, eff) = (hw(), model("gpt-7.1b"), EfficiencyParams::default());
        let ctx = PerfContext { hw: &hw, model: &m, eff: &eff, gpus_per_node: 8 };
        let (tp, pp) = ([1u32, 2, 4, 8][tp_i], [1u32, 2, 3][pp_i]);
        let c = ParallelConfig { zero: z, ..cfg(64 / tp / pp.min(2), tp, pp.min(2), mbs) };
        let p = predict(&ctx, &c, c.dp as u64 * mbs as u64 * k).expect("valid");
        let b = p.breakdown;
        let sum = b.compute_s + b.bubble_s + b.tp_s + b.pp_s + b.dp_s + b.optimizer_s;
        prop_assert!((sum / p.step_time_s - 1.0).abs() < 1e-12);
        prop_assert!(p.mfu > 0.0 && p.mfu < eff.max_eff);
        prop_assert!(p.memory_per_gpu_bytes > hw.reserved_bytes);
    }
}

/// `attention: Triton` (llm-foundry's `attn_impl: triton`) costs FlashAttention-2's attention
/// time × `attn_triton_slowdown`: at 1 it is FlashAttention-2; at 2 only the attention part of
/// the step doubles, so the step grows by exactly the FlashAttention-2 attention time.
#[test]
fn the_triton_attention_kernel_is_flash_attention_slowed_down() {
    use copus::perf::efficiency::AttentionKind;
    let (hw, m) = (hw(), model("llama-7b"));
    let step = |attention, slowdown: f64, attn_scale: f64| {
        let mut eff = hw.efficiency.clone();
        eff.attention = attention;
        eff.attn_triton_slowdown = slowdown;
        eff.attn_eff *= attn_scale;
        eff.attn_bwd_eff *= attn_scale;
        let ctx = PerfContext {
            hw: &hw,
            model: &m,
            eff: &eff,
            gpus_per_node: 8,
        };
        predict(&ctx, &cfg(8, 1, 1, 1), 64)
            .expect("valid")
            .step_time_s
    };
    let fused = step(AttentionKind::Fused, 1.0, 1.0);
    assert_eq!(step(AttentionKind::Triton, 1.0, 1.0), fused);
    // Halving FlashAttention-2's efficiencies doubles its attention time: the same step as
    // the Triton kernel at slowdown 2.
    let triton = step(AttentionKind::Triton, 2.0, 1.0);
    let half_flash = step(AttentionKind::Fused, 1.0, 0.5);
    assert!(triton > fused * 1.01, "{triton} vs {fused}");
    assert!(
        (triton - half_flash).abs() < 1e-12 * fused,
        "{triton} vs {half_flash}"
    );
}
