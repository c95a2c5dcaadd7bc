//! The performance model against the Megatron-Core r0.8.0 H100 table (Megatron-LM README,
//! REFERENCES.md): one H100 profile, default efficiency parameters, no per-row tuning;
//! `mbs auto` (fastest fitting micro-batch, recompute and interleave) on every row.

use copus::perf::{EfficiencyParams, ParallelConfig, PerfContext, Recompute, enumerate, flops};
use copus::profiles;
use std::path::Path;

/// (model, TP, PP, global batch, published TFLOP/s per GPU); DP = 48 in every row.
const ROWS: &[(&str, u32, u32, u64, f64)] = &[
    ("gpt-1.7b", 1, 1, 192, 408.8),
    ("gpt-7.1b", 2, 1, 192, 465.9),
    ("gpt-16b", 4, 1, 192, 489.1),
    ("gpt-32b", 8, 1, 192, 459.6),
    ("gpt-70b", 8, 2, 384, 419.7),
    ("gpt-119b", 8, 4, 768, 420.5),
    ("gpt-177b", 8, 6, 1152, 432.8),
    ("gpt-314b", 8, 8, 1536, 474.4),
    ("gpt-462b", 8, 16, 3072, 459.9),
];

#[test]
fn megatron_core_h100_table_within_tolerance() {
    let hw = profiles::hardware("h100-sxm", Path::new(".")).expect("h100 profile");
    let eff = EfficiencyParams::default();
    let mut errors = Vec::new();
    for &(name, tp, pp, batch, published) in ROWS {
        let model = profiles::model(name, Path::new(".")).expect("model profile");
        let ctx = PerfContext {
            hw: &hw,
            model: &model,
            eff: &eff,
            gpus_per_node: 8,
        };
        let base = ParallelConfig {
            dp: 48,
            tp,
            pp,
            mbs: 1,
            zero: 1,
            recompute: Recompute::Selective,
            vpp: 1,
        };
        let interleave: Vec<u32> = (1..=24).collect();
        let all = [Recompute::None, Recompute::Selective, Recompute::Full];
        let (cfg, p) = enumerate::auto(&ctx, &base, batch, &all, &interleave)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let tokens = batch as f64 * model.seq_len as f64;
        // Model TFLOP/s per GPU on Megatron's basis (Narayanan et al.), as published.
        let tflops = flops::model_flops(&model, tokens) / p.step_time_s / cfg.gpus() as f64 / 1e12;
        assert!((tflops - p.model_tflops_per_gpu).abs() < 1e-9);
        let err = tflops / published - 1.0;
        println!(
            "{name:9} {cfg}  predicted {tflops:6.1}  published {published:6.1}  error {:+5.1}%  mem {:5.1} GB",
            err * 100.0,
            p.memory_per_gpu_bytes / 1e9
        );
        errors.push(err.abs());
    }
    let mean = errors.iter().sum::<f64>() / errors.len() as f64;
    let worst = errors.iter().cloned().fold(0.0, f64::max);
    println!(
        "mean |error| {:.1}%, worst {:.1}%",
        mean * 100.0,
        worst * 100.0
    );
    assert!(mean <= 0.10, "mean |error| {mean}");
    assert!(worst <= 0.20, "worst |error| {worst}");
}
