//! The performance model against published measurements (assets/validation/*.csv, sources in
//! each file and in docs/MODEL.md). Hardware defaults were fitted on the rows marked `train`
//! (examples/fit_profiles.rs); every threshold below is asserted on rows marked `test`, which
//! no fit saw, except where a test says otherwise.

use copus::perf::calibrate::{Knob, calibrate_samples};
use copus::perf::efficiency::{AttentionKind, Precision};
use copus::perf::validation::{self, PublishedRow, Scored, error_summary, spearman};
use copus::perf::{EfficiencyParams, HardwareProfile, ModelProfile, ParallelConfig, Recompute};
use copus::perf::{PerfContext, predict};
use copus::profiles;
use std::path::Path;

fn rows(file: &str) -> Vec<PublishedRow> {
    let path = Path::new("assets/validation").join(file);
    let text = std::fs::read_to_string(&path).expect("validation file");
    validation::parse(&text, file).expect("parses")
}

fn hw(name: &str) -> HardwareProfile {
    profiles::hardware(name, Path::new(".")).expect("hardware profile")
}

fn scored(rows: &[PublishedRow]) -> Vec<(PublishedRow, Scored)> {
    rows.iter()
        .map(|r| {
            let h = hw(&r.hardware);
            let s = validation::score(r, &h, &h.efficiency)
                .unwrap_or_else(|e| panic!("{} {}: {e}", r.set, r.model.name));
            println!(
                "{:13} {:10} {:34} published {:6.1} predicted {:6.1} {:+6.1}% {}",
                r.set,
                r.model.name,
                s.config.to_string(),
                r.tflops,
                s.tflops,
                s.rel_error * 100.0,
                if r.train { "train" } else { "test" }
            );
            (r.clone(), s)
        })
        .collect()
}

#[test]
fn held_out_a100_rows_from_1_7b_to_1t_within_ten_percent_mean() {
    let mut all = rows("narayanan2021-table1.csv");
    all.extend(
        rows("narayanan2021-table2.csv")
            .into_iter()
            .filter(|r| r.set.starts_with("ptdp")),
    );
    let held_out: Vec<PublishedRow> = all.into_iter().filter(|r| !r.train).collect();
    assert!(held_out.len() >= 8);
    let sizes: Vec<&str> = held_out.iter().map(|r| r.model.name.as_str()).collect();
    assert!(
        sizes.contains(&"gpt-3.6b") && sizes.contains(&"gpt-1008b"),
        "{sizes:?}"
    );
    let errors: Vec<f64> = scored(&held_out).iter().map(|(_, s)| s.rel_error).collect();
    let (mean, worst) = error_summary(&errors);
    println!(
        "held-out A100: mean |error| {:.1}%, worst {:.1}%",
        mean * 100.0,
        worst * 100.0
    );
    assert!(mean <= 0.10, "mean {mean}");
    assert!(worst <= 0.20, "worst {worst}");
}

#[test]
fn sharded_data_parallel_falls_with_gpu_count_as_measured() {
    // DeepSpeed ZeRO-3 without model parallelism at a fixed global batch: per-GPU throughput
    // falls about threefold as the GPU count grows 4x (micro-batch 4 -> 1). The 175B job was
    // in the fit; the 530B job was not.
    let all = rows("narayanan2021-table2.csv");
    for job in ["zero3-175b", "zero3-530b"] {
        let r: Vec<PublishedRow> = all.iter().filter(|r| r.set == job).cloned().collect();
        let s = scored(&r);
        let (first, last) = (&s[0], &s[s.len() - 1]);
        let measured = first.0.tflops / last.0.tflops;
        let predicted = first.1.tflops / last.1.tflops;
        let ratio = predicted / measured;
        println!("{job}: measured fall {measured:.2}x, predicted {predicted:.2}x");
        assert!(
            (1.0 / 1.5..=1.5).contains(&ratio),
            "{job}: predicted fall {predicted:.2} vs measured {measured:.2}"
        );
        // And the order of the three GPU counts is right.
        assert!(s.windows(2).all(|w| w[1].1.tflops < w[0].1.tflops));
    }
}

/// The most a split copus ranks first may lose against the measured best of its batch.
const REGRET_LIMIT: f64 = 0.02;

/// How much slower the split copus ranks first measured than the measured best of `splits`
/// (a fraction; 0 when copus ranks the best first).
fn regret<'a>(splits: impl Iterator<Item = &'a (PublishedRow, Scored)> + Clone) -> f64 {
    let best = splits.clone().map(|(r, _)| r.tflops).fold(0.0, f64::max);
    let pick = splits
        .max_by(|a, b| a.1.tflops.total_cmp(&b.1.tflops))
        .map(|(r, _)| r.tflops)
        .expect("non-empty");
    1.0 - pick / best
}

#[test]
fn splits_of_one_job_rank_as_measured() {
    // Figures 14-16 of Narayanan et al.: (TP, DP, PP, micro-batch, batch) splits of one model on
    // 64 GPUs, read from the plots; none was in the fit.
    let all = rows("narayanan2021-figures.csv");
    let mut regrets = Vec::new();
    for job in ["fig14-15-5.9b", "fig16-91b"] {
        let r: Vec<PublishedRow> = all.iter().filter(|r| r.set == job).cloned().collect();
        assert!(r.len() >= 6 && r.iter().all(|r| !r.train));
        let s = scored(&r);
        let measured: Vec<f64> = s.iter().map(|(r, _)| r.tflops).collect();
        let predicted: Vec<f64> = s.iter().map(|(_, s)| s.tflops).collect();
        let rho = spearman(&measured, &predicted);
        println!(
            "{job}: Spearman rank correlation {rho:.2} over {} splits",
            r.len()
        );
        assert!(rho >= 0.8, "{job}: rank correlation {rho}");
        // Regret at each global batch with several splits: how much slower the split copus
        // ranks first measured than the measured best.
        let mut batches: Vec<u64> = s.iter().map(|(r, _)| r.batch).collect();
        batches.sort_unstable();
        batches.dedup();
        for batch in batches {
            let group: Vec<&(PublishedRow, Scored)> =
                s.iter().filter(|(r, _)| r.batch == batch).collect();
            if group.len() < 2 {
                continue;
            }
            let regret = regret(group.iter().copied());
            println!(
                "{job} batch {batch}: regret {:.1}% over {} splits",
                regret * 100.0,
                group.len()
            );
            regrets.push((job, batch, regret));
        }
    }
    // docs/MODEL.md records these: one batch of the 5.9B job (DP32·TP2 against DP32·PP2 at
    // batch 32, plot readings of ~55 and ~62 TFLOP/s) is ranked wrong by 11 %; every other
    // batch within the 2 % the issue asks for.
    let over: Vec<_> = regrets.iter().filter(|r| r.2 > REGRET_LIMIT).collect();
    assert!(over.len() <= 1, "regret over 2 %: {over:?}");
    assert!(regrets.iter().all(|r| r.2 <= 0.12), "{regrets:?}");
}

#[test]
fn cross_node_tensor_parallelism_within_ten_percent() {
    // Figure 15's TP 32 splits (4 nodes of 8): each TP all-reduce of one micro-batch's
    // activations (12.6 MB) takes NCCL's tree across the nodes; with the ring alone copus
    // predicted them 24-27 % too slow (docs/MODEL.md).
    let tp32: Vec<PublishedRow> = rows("narayanan2021-figures.csv")
        .into_iter()
        .filter(|r| r.config.tp == 32)
        .collect();
    assert_eq!(tp32.len(), 2);
    for (r, s) in scored(&tp32) {
        assert!(s.rel_error.abs() <= 0.10, "{}: {}", s.config, s.rel_error);
        assert!(r.config.tp > r.gpus_per_node);
    }
}

#[test]
fn megatron_core_h100_table_within_eight_percent_mean() {
    let s = scored(&rows("megatron-core-h100.csv"));
    let all: Vec<f64> = s.iter().map(|(_, s)| s.rel_error).collect();
    let held: Vec<f64> = s
        .iter()
        .filter(|(r, _)| !r.train)
        .map(|(_, s)| s.rel_error)
        .collect();
    let (mean, worst) = error_summary(&all);
    let (held_mean, held_worst) = error_summary(&held);
    println!(
        "H100 all rows: mean {:.1}% worst {:.1}%; held out: mean {:.1}% worst {:.1}%",
        mean * 100.0,
        worst * 100.0,
        held_mean * 100.0,
        held_worst * 100.0
    );
    assert!(mean <= 0.08, "mean {mean}");
    assert!(held_mean <= 0.10 && worst <= 0.20, "{held_mean} {worst}");
}

#[test]
fn shipped_a100_defaults_are_the_fit_on_the_training_rows() {
    assert_shipped_is_the_fit(
        "a100-80g",
        &[
            "narayanan2021-table1.csv",
            "narayanan2021-table2.csv",
            "narayanan2021-figures.csv",
            "modern-a100.csv",
        ],
        &[
            Knob::MaxEff,
            Knob::GemmOverhead,
            Knob::MemEff,
            Knob::MicrobatchOverhead,
            Knob::Zero3ChunkHalf,
            Knob::Zero3Overlap,
            Knob::AttnTritonSlowdown,
        ],
        // FlashAttention-2 as its paper measured it on A100, causal (Sections 4.1, 3.1.1):
        // not fitted.
        &[(Knob::AttnEff, 0.639), (Knob::AttnBwdEff, 0.551)],
        // The fit removes more than 70 % of the rms log error (0.261 -> 0.071).
        0.3,
    );
}

#[test]
fn shipped_h100_defaults_are_the_fit_on_the_training_rows() {
    assert_shipped_is_the_fit(
        "h100-sxm",
        &["megatron-core-h100.csv", "modern-h100.csv"],
        &[
            Knob::MaxEff,
            Knob::MicrobatchOverhead,
            Knob::AttnBwdEff,
            Knob::AttnNativeSpeedup,
        ],
        &[],
        // With the attention kernel stated per stack (FlashAttention-2 or Hopper-native), the
        // fit removes more than two thirds of the rms log error (0.230 -> 0.073).
        0.35,
    );
}

#[test]
fn shipped_h200_attention_is_measured_and_the_rest_the_h100_fit_around_it() {
    // FlashAttention-2's forward and backward on the H200 are the medians of the flash kernel
    // measured there at 4K tokens and more (copus-h200-kernels.json), not fitted; with them
    // fixed, the rest is the fit on the H100 SXM's training rows (the same chip and clocks).
    let (fwd, bwd) = h200_flash_medians();
    let h = hw("h200");
    assert!((h.efficiency.attn_eff - fwd).abs() < 0.0015, "{fwd}");
    assert!((h.efficiency.attn_bwd_eff - bwd).abs() < 0.0015, "{bwd}");
    assert_profile_is_the_fit(
        "h200",
        "h100-sxm",
        &["megatron-core-h100.csv", "modern-h100.csv"],
        &[
            Knob::MaxEff,
            Knob::MicrobatchOverhead,
            Knob::AttnNativeSpeedup,
            Knob::AttnTritonSlowdown,
        ],
        &[
            (Knob::AttnEff, h.efficiency.attn_eff),
            (Knob::AttnBwdEff, h.efficiency.attn_bwd_eff),
        ],
        // 0.169 -> 0.075: as good a fit of the H100 rows as leaving FlashAttention-2 free.
        0.5,
    );
}

/// copus's kernel measurements on an H200 (`assets/validation/copus-h200-kernels.json`,
/// scripts/measure_gpu.py), parsed.
fn h200_kernels() -> serde_json::Value {
    let text = std::fs::read_to_string("assets/validation/copus-h200-kernels.json")
        .expect("kernel measurements");
    serde_json::from_str(&text).expect("json")
}

/// The medians, over the flash rows at 4K tokens and more of copus-h200-kernels.json, of the
/// forward's and the backward's fraction of the H200's dense peak (the backward counted at
/// 2.5x the forward's causal FLOPs, as copus counts it).
fn h200_flash_medians() -> (f64, f64) {
    let v = h200_kernels();
    let peak = hw("h200").peak_flops;
    let num = |g: &serde_json::Value, k: &str| g[k].as_f64().expect(k);
    let (mut fwd, mut bwd) = (Vec::new(), Vec::new());
    for a in v["attention"].as_array().expect("attention rows") {
        if a["backend"] != "flash" || num(a, "seq") < 4096.0 {
            continue;
        }
        let flops = num(a, "causal_fwd_flops");
        fwd.push(flops / num(a, "fwd_s") / peak);
        bwd.push(2.5 * flops / num(a, "bwd_s") / peak);
    }
    assert_eq!(fwd.len(), 6);
    let median = |mut x: Vec<f64>| {
        x.sort_by(f64::total_cmp);
        (x[x.len() / 2 - 1] + x[x.len() / 2]) / 2.0
    };
    (median(fwd), median(bwd))
}

/// A hardware profile's kernel efficiencies are what examples/fit_profiles.rs finds on the
/// training rows of `files`, starting from the generic defaults with the `measured` parameters
/// fixed at their (shipped) measured values: rerun the fit, check it cuts the rms log error to
/// `rms_gain` of the start, and compare.
fn assert_shipped_is_the_fit(
    hardware: &str,
    files: &[&str],
    knobs: &[Knob],
    measured: &[(Knob, f64)],
    rms_gain: f64,
) {
    assert_profile_is_the_fit(hardware, hardware, files, knobs, measured, rms_gain);
}

/// As [`assert_shipped_is_the_fit`], for the profile `profile` fitted on the rows of
/// `rows_hardware` (another profile of the same chip).
fn assert_profile_is_the_fit(
    profile: &str,
    rows_hardware: &str,
    files: &[&str],
    knobs: &[Knob],
    measured: &[(Knob, f64)],
    rms_gain: f64,
) {
    let hardware = profile;
    let h = hw(rows_hardware);
    let shipped_profile = hw(profile);
    let mut train: Vec<PublishedRow> = files.iter().flat_map(|f| rows(f)).collect();
    train.retain(|r| r.train && r.hardware == rows_hardware);
    let mut start = EfficiencyParams::default();
    for &(k, v) in measured {
        *k.slot(&mut start) = v;
        let shipped = *k.slot(&mut shipped_profile.efficiency.clone());
        assert_eq!(
            shipped,
            v,
            "{}: the profile ships the measured value",
            k.name()
        );
    }
    let samples = validation::samples(&train, &h, &start).expect("samples");
    let fit = calibrate_samples(&samples, &start, knobs, 60).expect("fit");
    assert!(
        fit.rms < fit.initial_rms * rms_gain,
        "{} -> {}",
        fit.initial_rms,
        fit.rms
    );
    let (mut fitted, mut shipped) = (fit.params.clone(), shipped_profile.efficiency.clone());
    for &k in knobs {
        let (f, s) = (*k.slot(&mut fitted), *k.slot(&mut shipped));
        println!("{hardware} {:24} fitted {f:.4e} shipped {s:.4e}", k.name());
        assert!(
            (f / s - 1.0).abs() < 0.05,
            "{}: fitted {f} shipped {s}",
            k.name()
        );
    }
}

fn gpt(layers: u32, hidden: u32, heads: u32) -> ModelProfile {
    ModelProfile {
        name: "gpt".into(),
        layers,
        hidden,
        heads,
        kv_heads: heads,
        ffn_hidden: 4 * hidden,
        vocab: 51200,
        seq_len: 2048,
        swiglu: false,
        tied_embeddings: false,
        dropout: None,
        moe: None,
        source: String::new(),
    }
}

#[test]
fn one_gpu_gains_from_larger_micro_batches_as_published() {
    // Narayanan et al. 2021, Figure 7: a 4-layer GPT (h 4096, 128 heads) on one A100 runs about
    // 1.3x faster per sample at micro-batch 8 than at 1 (read from the plot: ~67 -> ~88
    // TFLOP/s). The model gets the direction but only part of the size (a known gap,
    // docs/MODEL.md): GEMMs, the 32-wide attention heads and the per-micro-batch cost explain
    // ~1.05x; the rest is not modelled. The test holds the direction and the honest range.
    let h = hw("a100-80g");
    let m = gpt(4, 4096, 128);
    let mut eff = h.efficiency.clone();
    eff.attention = AttentionKind::Unfused;
    eff.sequence_parallel = false;
    let ctx = PerfContext {
        hw: &h,
        model: &m,
        eff: &eff,
        gpus_per_node: 8,
    };
    let per_sample = |mbs: u32| {
        let cfg = ParallelConfig {
            dp: 1,
            tp: 1,
            pp: 1,
            mbs,
            zero: 0,
            recompute: Recompute::Full,
            vpp: 1,
            cp: 1,
            ep: 1,
        };
        let p = predict(&ctx, &cfg, 8 * mbs as u64).expect("runs");
        p.step_time_s / (8 * mbs) as f64
    };
    let gain = per_sample(1) / per_sample(8);
    println!("micro-batch 1 -> 8: {gain:.2}x");
    assert!((1.03..=1.5).contains(&gain), "gain {gain}");
}

/// Held-out rows of the modern-stack tables (assets/validation/modern-*.csv), each predicted
/// with its source's stack: (mean |error|, worst, rows that do not fit).
fn modern_held_out(file: &str, min_rows: usize) -> (f64, f64, Vec<String>) {
    let held: Vec<PublishedRow> = rows(file).into_iter().filter(|r| !r.train).collect();
    assert!(
        held.len() >= min_rows,
        "{file}: {} held-out rows",
        held.len()
    );
    let scored = scored(&held);
    let not_fitting = scored
        .iter()
        .filter(|(_, s)| !s.prediction.fits)
        .map(|(r, s)| format!("{} {} {}", r.set, r.model.name, s.config))
        .collect();
    let errors: Vec<f64> = scored.iter().map(|(_, s)| s.rel_error).collect();
    let (mean, worst) = error_summary(&errors);
    println!("{file}: held-out mean {mean:.3}, worst {worst:.3}");
    (mean, worst, not_fitting)
}

#[test]
fn modern_h100_stacks_held_out_within_the_recorded_error() {
    // docs/MODEL.md records 5.1 % mean, 29.7 % worst on these held-out rows (NeMo BF16/FP8,
    // context parallelism to 128k, Megatron-Bridge, llm-foundry FSDP). (15.3 % and 37.6 %
    // before NVIDIA's recipes reduced gradients in BF16, the interleaved schedule's transfers
    // overlapped, TE's fused FP8 casts and the attention kernel by stack.)
    assert_modern_held_out("modern-h100.csv", 0.06, 0.35);
}

#[test]
fn every_held_out_h100_row_of_the_published_sets_within_eight_percent_mean() {
    // Issue 26's bound on the repo's validation sets: the held-out rows on H100 (every
    // variant) of every published set, pooled: Megatron-Core, NeMo, Megatron-Bridge, llm-foundry,
    // torchtitan, Llama 3, Nemotron-4, NeMo 24.07, IBM's FSDP runs, FlagPerf and OLMo-core
    // (copus's own H200 runs are not H100 and not published).
    let mut errors = Vec::new();
    for file in VALIDATION_SETS {
        let held: Vec<PublishedRow> = rows(file)
            .into_iter()
            .filter(|r| {
                // A profile name, or a validation hardware file named after its GPU.
                let name = Path::new(&r.hardware).file_name().and_then(|n| n.to_str());
                !r.train && name.is_some_and(|n| n.starts_with("h100"))
            })
            .collect();
        errors.extend(scored(&held).iter().map(|(_, s)| s.rel_error));
    }
    let (mean, worst) = error_summary(&errors);
    println!(
        "{} held-out H100 rows: mean {mean:.3}, worst {worst:.3}",
        errors.len()
    );
    assert!(errors.len() >= 90, "{}", errors.len());
    assert!(mean <= 0.08, "mean {mean}");
    assert!(worst <= 0.30, "worst {worst}");
}

#[test]
fn modern_a100_stacks_held_out_within_five_percent() {
    assert_modern_held_out("modern-a100.csv", 0.05, 0.30);
}

/// The held-out rows of `file` within `max_mean` and `max_worst` relative error, and none of
/// them (all published as running) called out of memory.
fn assert_modern_held_out(file: &str, max_mean: f64, max_worst: f64) {
    assert_held_out(file, 20, max_mean, max_worst);
}

/// [`assert_modern_held_out`] for a file of at least `min_rows` held-out rows.
fn assert_held_out(file: &str, min_rows: usize, max_mean: f64, max_worst: f64) {
    let (mean, worst, not_fitting) = modern_held_out(file, min_rows);
    assert!(mean <= max_mean, "{file}: mean {mean}");
    assert!(worst <= max_worst, "{file}: worst {worst}");
    assert!(
        not_fitting.is_empty(),
        "{file}: published running configurations called OOM: {not_fitting:?}"
    );
}

#[test]
fn torchtitan_tables_held_out_within_the_recorded_error() {
    // pytorch/torchtitan's own tables, in no fit (docs/MODEL.md): FSDP2 on 64 A100 (Llama 2
    // 13B/70B, Llama 3 8B/70B; mean 5.2 %, worst -10.5 %), and every table of its 2024-12 H100
    // report on Meta's 96 GiB, 500 W H100 (18 runs: 8B eager, compiled, Float8, context
    // parallel to 256K; 70B 2D; 405B 3D and 4D; mean 9.6 %, worst -28.2 % for the 64K
    // context-parallel run). Every one of them ran: none may be called OOM.
    // A100: 1.7 %, worst +5.2 % since FlashAttention-2 runs at its measured speed and the
    // Triton kernel of the llm-foundry rows is told apart (5.2 %, -10.5 % before).
    assert_held_out("torchtitan-a100.csv", 6, 0.03, 0.07);
    assert_held_out("torchtitan-h100.csv", 18, 0.10, 0.30);
}

#[test]
fn sources_found_after_every_fit_held_out() {
    // Found for issue 26's held-out check after every fit (docs/MODEL.md, "How it scores"):
    // NeMo's 24.07 FP8 table, the Nemotron rows of its 24.12 table and its 256K-1M context-
    // parallel rows on DGX H100; IBM's PyTorch FSDP runs on A100 and H100 (fms-fsdp and two
    // PyTorch blog posts); torchtitan on H200 (Trainy, June 2025). Every one of them ran.
    assert_held_out("nemo-2407-h100.csv", 18, 0.065, 0.16);
    assert_held_out("ibm-fsdp.csv", 19, 0.08, 0.17);
    assert_held_out("torchtitan-h200.csv", 2, 0.12, 0.13);
    // Their published memory bounds copus's live-tensor figure from above (the caching
    // allocator holds more), by less than 10 GB, with the compiled loss stated.
    for (r, s) in scored(&rows("torchtitan-h200.csv")) {
        let want = r.measured_memory_bytes.expect("published memory");
        let got = s.prediction.memory_per_gpu_bytes;
        assert!(
            got < want && got > want - 10e9,
            "{}: {got} vs {want}",
            s.config
        );
    }
}

#[test]
fn flagperf_and_olmo_core_held_out_within_the_recorded_error() {
    // Found after every fit (2026-12-05; docs/MODEL.md): FlagPerf's Megatron-LM core_v0.6 runs
    // (Llama 3 8B/70B at 8K tokens on A800 and H100, BF16 and FP8; Llama 2 70B on H800) and
    // OLMo-core's FSDP2/HSDP table (Llama 3 8B shape, OLMo 2 7B/13B on H100, BF16 and FP8).
    // Every one of them ran, and is predicted to fit.
    let file = "flagperf-olmo-core.csv";
    // Recorded: mean 9.8 %, worst +29.5 % (OLMo 2 13B in FP8).
    assert_held_out(file, 14, 0.10, 0.30);
    // FlagPerf's Megatron rows on H100 are all predicted too slow (FlashAttention-2 as stated:
    // its fitted H100 backward, docs/MODEL.md), OLMo-core's 7B/8B within 4 %.
    for (r, s) in scored(&rows(file)) {
        if r.set.starts_with("flagperf") && r.hardware == "h100-sxm" {
            assert!(
                (-0.21..-0.08).contains(&s.rel_error),
                "{}: {}",
                r.set,
                s.rel_error
            );
        }
        if r.set.starts_with("olmo-core") && !r.model.name.contains("13b") {
            assert!(s.rel_error.abs() < 0.04, "{}: {}", r.set, s.rel_error);
        }
    }
}

/// The validation hardware files of IBM's clusters are the shipped profiles with the
/// cluster's network: nothing else may drift from them (a refit of a100-80g or h100-sxm must
/// reach these rows too).
#[test]
fn ibm_cluster_profiles_are_the_shipped_ones_but_for_their_network() {
    for (file, base) in [
        ("a100-80g-ibm-400gbps-node.ron", "a100-80g"),
        ("h100-sxm-ibm-800gbps-node.ron", "h100-sxm"),
    ] {
        let mut cluster = hw(&format!("assets/validation/hardware/{file}"));
        let shipped = hw(base);
        assert!(
            cluster.inter_bw_bytes_per_s < shipped.inter_bw_bytes_per_s,
            "{file}"
        );
        cluster.inter_bw_bytes_per_s = shipped.inter_bw_bytes_per_s;
        cluster.name = shipped.name.clone();
        cluster.source = shipped.source.clone();
        assert_eq!(
            format!("{cluster:?}"),
            format!("{shipped:?}"),
            "{file} differs from {base} beyond its network"
        );
    }
}

#[test]
fn megatron_2022_selective_recompute_and_sequence_parallelism_held_out() {
    // Korthikanti et al. 2022 (arXiv 2205.05198), Table 5: 22B, 175B, 530B and 1T on A100 with
    // full recomputation (no sequence parallelism) and with the paper's selective recompute
    // and sequence parallelism; added after every fit. All eight are predicted too slow, the
    // full-recompute rows the more (docs/MODEL.md, "Where copus disagrees"): mean 9.9 %,
    // worst -20.8 % (the 22B without sequence parallelism).
    assert_held_out("korthikanti2022-a100.csv", 8, 0.11, 0.22);
    let scored = scored(&rows("korthikanti2022-a100.csv"));
    assert!(
        scored.iter().all(|(_, s)| s.rel_error < 0.0),
        "all too slow"
    );
    // The paper's gain (full recompute -> selective + SP) is 1.29-1.32x at every size; copus
    // predicts 1.37-1.46x: it charges the missing sequence parallelism about four times the
    // 3 % of a layer's time the paper measures for it (its Table 4), so the full-recompute
    // rows are the further off. Each model's predicted gain is above the measured one and
    // within 13 % of it.
    for pair in scored.chunks(2) {
        let [(full_row, full), (sel_row, sel)] = pair else {
            panic!("rows come in pairs");
        };
        assert_eq!(full_row.model.name, sel_row.model.name);
        let measured = sel_row.tflops / full_row.tflops;
        let predicted = sel.tflops / full.tflops;
        println!(
            "{}: selective + SP over full recompute: measured {measured:.3}x, predicted {predicted:.3}x",
            full_row.model.name
        );
        assert!((1.28..=1.33).contains(&measured), "{measured}");
        assert!(
            predicted > measured && predicted < measured * 1.13,
            "{}: {predicted} vs {measured}",
            full_row.model.name
        );
    }
}

#[test]
fn bloom_176b_on_jean_zay_held_out() {
    // BigScience's BLOOM 176B run (Megatron-DeepSpeed: DeepSpeed's pipeline engine, TP 4 x PP 12
    // x DP 8, full checkpointing, BF16 optimizer as ZeRO-1, its two embeddings counted as layers
    // so that the end stages hold 5 layers and the others 6) on 384 A100 with four 100 Gb/s
    // Omni-Path links a node, in no fit. At its full batch (2048, micro-batch 2: 104.70 s an
    // iteration, 149.77 hardware TFLOP/s a GPU as its README logs) predicted +15.4 % (+1.3 %
    // while copus paced every pipeline by ⌈layers/pp⌉ layers and the output layer, a stage
    // BLOOM did not have); the two batch ramp-up points its README gives (192 at micro-batch 1:
    // 73 TFLOP/s; 16 at micro-batch 2: 15.23 s, 8.04 TFLOP/s) 61 % and 82 % too fast.
    let rows = rows("bloom-a100.csv");
    let scored = scored(&rows);
    assert_eq!(scored.len(), 3);
    for (r, s) in &scored {
        assert!(s.prediction.fits, "{}: published as running", s.config);
        let expected = if r.batch == 2048 {
            0.10..0.20
        } else {
            0.50..0.95
        };
        assert!(
            expected.contains(&s.rel_error),
            "batch {}: {}",
            r.batch,
            s.rel_error
        );
    }
    // The published TFLOP/s is copus's hardware FLOPs of the row over the logged 104.70 s.
    let (r, s) = &scored[0];
    let from_time = s.tflops * s.prediction.step_time_s / 104.70;
    assert!((from_time / r.tflops - 1.0).abs() < 1e-3, "{from_time}");
    // The two micro-batch-2 points in pipeline slots: a slot within 10 % of copus's (8 % over
    // it: 0.70 s against 0.65), and a cost
    // a step that does not shrink with the micro-batches of 5-8.5 s, where copus has under
    // 1 s — what Megatron-Turing NLG's three points on the same engine show (6.7 s, below).
    let mbs2: Vec<PublishedRow> = rows.iter().filter(|r| r.config.mbs == 2).cloned().collect();
    let ((slot, step), (copus_slot, copus_step)) = slot_line(&mbs2);
    println!(
        "BLOOM: measured {slot:.3} s a slot + {step:.2} s a step; copus {copus_slot:.3} s + {copus_step:.2} s"
    );
    assert!(
        (slot / copus_slot - 1.0).abs() < 0.10,
        "{slot} vs {copus_slot}"
    );
    assert!(
        (5.0..8.5).contains(&step) && copus_step < 1.0,
        "{step} vs {copus_step}"
    );
    // The cluster's profile is a100-80g but for its network: the fitted kernel efficiencies
    // are the same (refitting a100-80g must update it too).
    let (jz, a100) = (hw(&r.hardware), hw("a100-80g"));
    assert_eq!(jz.efficiency, a100.efficiency);
    assert_eq!(jz.inter_bw_bytes_per_s, 6.25e9);
    let as_a100 = HardwareProfile {
        name: jz.name.clone(),
        inter_bw_bytes_per_s: jz.inter_bw_bytes_per_s,
        source: jz.source.clone(),
        ..a100
    };
    assert_eq!(jz, as_a100);
}

#[test]
fn nemo_24_12_performance_table_held_out() {
    // The NeMo Framework 24.12 user guide's FP8 pre-training table on DGX H100 (GPT-3 5B, 20B,
    // 175B; Llama 2 7B, 13B, 70B; Llama 3 8B, 70B with CP 2), in no fit: 9 rows, mean 4.4 %,
    // worst +9.0 % (GPT-3 5B), all fitting.
    assert_held_out("nemo-2412-h100.csv", 9, 0.06, 0.12);
}

#[test]
fn nemotron4_340b_on_h100_held_out() {
    // Nemotron-4 340B (GQA, squared-ReLU MLP, vocabulary 256,000) on DGX H100 in BF16, in no
    // fit: the technical report's three batch ramp-up stages (Megatron-Core of 2024, TP 8 x
    // PP 12 interleaved, DP 16/32/64) predicted +4.1, +3.4 and +4.2 %, and the 2025 NeMo recipe
    // of dgxc-benchmarking (TP 8 x PP 8, VP 12, DP 4) -9.7 %: the newer stack runs the same
    // model 20 % faster a GPU (500 against 418 TFLOP/s) where copus's two presets differ by
    // 4 %. Every row fits.
    assert_held_out("nemotron4-h100.csv", 4, 0.07, 0.12);
    let scored = scored(&rows("nemotron4-h100.csv"));
    for (r, s) in &scored {
        let expected = if r.set.ends_with("report") {
            0.0..0.07
        } else {
            -0.12..0.0
        };
        assert!(
            expected.contains(&s.rel_error),
            "{} {}: {}",
            r.set,
            s.config,
            s.rel_error
        );
    }
}

#[test]
fn flash_attention_training_runs_held_out_and_its_kernels_told_apart() {
    // The flash-attention repository's own GPT-3 training runs on 8 A100 (its README's speed
    // table and Table 1 of the FlashAttention-2 paper), in no fit: 17 rows, mean 6.4 %, worst
    // -19.1 % (the unfused baseline, whose micro-batch and checkpointing the paper does not
    // state); every one of them fits.
    assert_held_out("flash-attention-a100.csv", 17, 0.075, 0.20);
    // The speed-up of FlashAttention-2 over FlashAttention on the same runs (Table 1: 1.04 and
    // 1.08 at 2K, 1.29 and 1.29 at 8K) comes out of FlashAttention-2's measured efficiencies
    // and the Triton slowdown fitted on llm-foundry's rows: predicted 1.07, 1.06, 1.23 and
    // 1.21, each within 7 %. Short at 8K because FlashAttention 1 is stated as the Triton
    // kind and its CUDA kernel is the slower of the two (the paper: FlashAttention-2 is
    // 1.7-3.0x faster than FlashAttention, 1.3-2.5x faster than the Triton kernel).
    let scored = scored(&rows("flash-attention-a100.csv"));
    let of = |model: &str, seq: u32, kind: AttentionKind| {
        scored
            .iter()
            .find(|(r, _)| {
                r.set == "flash-attention-2-paper"
                    && r.model.name == model
                    && r.model.seq_len == seq
                    && r.stack.attention == Some(kind)
            })
            .map(|(r, s)| (r.tflops, s.tflops))
            .unwrap_or_else(|| panic!("{model} {seq} {kind:?}"))
    };
    for model in ["gpt3-1.3b", "gpt3-2.7b"] {
        for seq in [2048, 8192] {
            let (fa2, fa1) = (
                of(model, seq, AttentionKind::Fused),
                of(model, seq, AttentionKind::Triton),
            );
            let (measured, predicted) = (fa2.0 / fa1.0, fa2.1 / fa1.1);
            println!(
                "{model} {seq}: FlashAttention-2 over 1: measured {measured:.3}, predicted {predicted:.3}"
            );
            assert!(
                (predicted / measured - 1.0).abs() < 0.07,
                "{model} {seq}: {measured} {predicted}"
            );
        }
    }
}

#[test]
fn torch_compile_speed_up_of_torchtitan_8b_is_the_eager_element_wise_traffic() {
    // torchtitan's 8B on 8 and 128 H100 (Table 1 and 3 of its 2024-12 report), eager against
    // torch.compile, the same runs otherwise: measured 386.1/333.7 = 1.157 and 377.2/324.6 =
    // 1.162. copus charges eager its one-kernel-per-operation traffic (`elementwise eager`)
    // and compile the fused kernels', counted from the operations, fitted on nothing.
    let rows = rows("torchtitan-h100.csv");
    let scored = scored(&rows);
    for gpus in [8, 128] {
        let pick = |set: &str| {
            scored
                .iter()
                .find(|(r, _)| {
                    r.set == set
                        && r.config.gpus() == gpus
                        && r.stack.precision != Some(Precision::Fp8)
                })
                .unwrap_or_else(|| panic!("{set} on {gpus} GPUs"))
        };
        let (eager, compiled) = (pick("torchtitan-h100"), pick("torchtitan-h100-compile"));
        let measured = compiled.0.tflops / eager.0.tflops;
        let predicted = compiled.1.tflops / eager.1.tflops;
        println!("{gpus} GPUs: compile/eager measured {measured:.3}, predicted {predicted:.3}");
        assert!(measured > 1.15, "{measured}");
        assert!(
            (predicted / measured - 1.0).abs() < 0.03,
            "{predicted} vs {measured}"
        );
    }
}

#[test]
fn own_h200_runs_held_out_within_the_recorded_error() {
    // copus's own single-GPU runs on an H200 (copus-h200.csv, scripts/measure_gpu.py): FSDP2
    // with torchtitan's precision (eager), SDPA flash or cuDNN attention, 2K-48K tokens, in no
    // fit. Seventeen runs from three calls: mean 6.0 %, worst -15.0 % (8 of Llama 3.1 8B's
    // layers at 32K with cuDNN) since the h200 profile takes FlashAttention-2 at the speed
    // measured on it; the five of the third call were measured after that change and score
    // 5.7 % (11.5 % with the H100 fit's attention, whose backward runs at 13 % of peak).
    // With that attention all 17: 10.8 %, every FlashAttention-2 run at 8K and more 13-31 %
    // too slow (docs/MODEL.md).
    assert_held_out("copus-h200.csv", 17, 0.07, 0.16);
    // copus's memory sits below PyTorch's reserved peak of every run (the allocator's cache
    // is in the peak, not in copus's live tensors) and within MAX_GAP of it.
    const MAX_GAP: f64 = 40e9;
    for (r, s) in &scored(&rows("copus-h200.csv")) {
        let want = r.measured_memory_bytes.expect("every row has its memory");
        let got = s.prediction.memory_per_gpu_bytes;
        assert!(
            got < want && got > want - MAX_GAP,
            "{}: {got} vs {want}",
            s.config
        );
    }
}

#[test]
fn own_h200_batch_sweep_is_right_from_four_sequences_and_too_fast_below() {
    // copus-h200-batch.csv, in no fit: the 1B and eight of Llama 3.1 8B's layers at 1, 2, 4
    // and 8 sequences of 2K tokens on one H200 (the first 8 rows), then 8 runs measured
    // afterwards to check the host-bound caution (the 3B at 1-4 x 2K, the 1B at 1-2 x 4K and
    // 4 and 16 x 1K, the 8B layers at 1 x 4K), then 5 more of the 3B to check its per-layer
    // term. copus predicts the device's work; for the
    // first 8, from 4 sequences up that is the step (within 10 %), below it the step is bound
    // by the CPU issuing eager PyTorch's ops and FSDP2's copies (docs/MODEL.md, "Small
    // steps"): copus is too fast there, most at the 1B's single sequence.
    let rows = rows("copus-h200-batch.csv");
    assert_eq!(rows.len(), 21);
    let scored = scored(&rows);
    let err = |(r, s): &(PublishedRow, Scored)| s.tflops / r.tflops - 1.0;
    for row in &scored[..8] {
        let (r, e) = (&row.0, err(row));
        println!("{} batch {}: {:+.1} %", r.model.name, r.batch, e * 100.0);
        if r.batch >= 4 {
            assert!(e.abs() <= 0.10, "{} batch {}: {e}", r.model.name, r.batch);
        } else {
            assert!(e > 0.05, "{} batch {}: {e}", r.model.name, r.batch);
        }
    }
    // The larger the step, the smaller the gap: per model, the error falls with the batch.
    for model in ["llama3.2-1b", "llama3.1-8b-8l"] {
        let errs: Vec<f64> = scored[..8]
            .iter()
            .filter(|(r, _)| r.model.name == model)
            .map(err)
            .collect();
        assert!(errs.windows(2).all(|w| w[1] < w[0]), "{model}: {errs:?}");
    }
    // The host-bound caution (predict's caveat, the explorer's explain): every run it marks
    // copus is too fast on, every run it leaves unmarked copus has within 12 %. The rule was
    // chosen on the first 8 with a fixed 0.15 s; on the 8 later runs that rule held for 7 and
    // missed the 28-layer 3B at 2 x 2K (+19 %, 0.23 s predicted), which the per-layer term
    // (0.15 s per 16 layers) added afterwards marks. On the last 5, measured after that term,
    // the three it marks were 8.6-27 % too fast and the two just above it 11.3 and 11.7 % (the
    // 3B runs 9 % slower than copus even at 4 x 2K).
    let mut flagged = 0;
    for row in &scored {
        let (r, s) = (&row.0, &row.1);
        let eff = r.stack.apply(&hw(&r.hardware).efficiency);
        let layers = copus::perf::memory::stage_layers(&r.model, s.config.pp).0;
        let e = err(row);
        if copus::perf::may_be_host_bound(&eff, &s.prediction, micro_batches((r, s)), layers) {
            flagged += 1;
            // The least: the 8B layers at 1 x 4K, +8.2 %.
            assert!(e > 0.07, "{} batch {}: {e}", r.model.name, r.batch);
        } else {
            assert!(e.abs() <= 0.12, "{} batch {}: {e}", r.model.name, r.batch);
        }
    }
    assert_eq!(flagged, 12);
}

/// Micro-batches per step on each data-parallel replica of a scored row.
fn micro_batches((r, s): (&PublishedRow, &Scored)) -> u64 {
    (r.batch / (u64::from(s.config.dp) * u64::from(s.config.mbs)).max(1)).max(1)
}

#[test]
fn published_runs_the_host_bound_caution_marks_are_predicted_too_fast() {
    // The published runs of every validation set but copus's own batch sweep: the caution marks
    // one, llm-foundry's FP8 MPT-350M at 512 tokens (24 layers, 0.16 s a micro-batch), which
    // copus predicts 13.8 % too fast; the runs it leaves alone take longer micro-batches.
    let mut marked = Vec::new();
    for file in VALIDATION_SETS
        .iter()
        .filter(|f| **f != "copus-h200-batch.csv")
    {
        for (r, s) in &scored(&rows(file)) {
            let eff = r.stack.apply(&hw(&r.hardware).efficiency);
            let layers = copus::perf::memory::stage_layers(&r.model, s.config.pp).0;
            let step = s.prediction.step_time_s;
            if copus::perf::may_be_host_bound(&eff, &s.prediction, micro_batches((r, s)), layers) {
                println!(
                    "{file}: {} {} {} at {step:.3} s: {:+.1} %",
                    r.set,
                    r.model.name,
                    s.config,
                    s.rel_error * 100.0
                );
                marked.push(s.rel_error);
            }
        }
    }
    println!("{} marked", marked.len());
    assert_eq!(marked.len(), 1, "{marked:?}");
    assert!(marked.iter().all(|e| *e > 0.10), "{marked:?}");
}

/// The H200's GEMM sweep (copus-h200-kernels.json, `gemm_sweep`: every GEMM of a layer's
/// forward and backward for five model widths, TP 1-8 and 1K-16K tokens, 780 in all) against
/// the `h200` profile's GEMM model, which was fitted on H100 step times and never saw a
/// kernel: mean 10.5 % by time; the GEMMs of 100 GFLOP and more run on average 7.5 % faster
/// than the model, the ones under 10 GFLOP 40 % slower than the model's fixed 20 µs a GEMM
/// allows for (docs/MODEL.md, "The GEMM sweep").
#[test]
fn the_h200_gemm_model_against_every_gemm_of_a_layer_measured_on_an_h200() {
    let v = h200_kernels();
    let h = hw("h200");
    let (peak, bw) = (h.peak_flops, h.mem_bw_bytes_per_s);
    let num = |g: &serde_json::Value, k: &str| g[k].as_f64().expect(k);
    let mut by_size: [(f64, f64, usize); 3] = [(0.0, 0.0, 0); 3];
    let mut errors = Vec::new();
    for g in v["gemm_sweep"]["rows"].as_array().expect("sweep rows") {
        let (m, n, k) = (num(g, "m"), num(g, "n"), num(g, "k"));
        let err = num(g, "median_s") / h.efficiency.gemm_time(m, k, n, peak, bw) - 1.0;
        let gflop = 2.0 * m * n * k / 1e9;
        let bucket = if gflop < 10.0 {
            0
        } else if gflop < 100.0 {
            1
        } else {
            2
        };
        by_size[bucket].0 += err;
        by_size[bucket].1 += err.abs();
        by_size[bucket].2 += 1;
        errors.push(err);
    }
    assert_eq!(errors.len(), 780);
    let (mean, _) = error_summary(&errors);
    let within_20 = errors.iter().filter(|e| e.abs() <= 0.2).count() as f64 / 780.0;
    println!(
        "mean {:.1} %, {:.0} % within 20 %",
        mean * 100.0,
        within_20 * 100.0
    );
    for (name, (signed, abs, n)) in ["< 10", "10-100", ">= 100"].iter().zip(by_size) {
        let n_f = n as f64;
        println!(
            "{name} GFLOP: {n} GEMMs, measured/predicted {:+.1} %, mean |error| {:.1} %",
            signed / n_f * 100.0,
            abs / n_f * 100.0
        );
    }
    assert!(mean <= 0.11 && within_20 >= 0.9, "{mean} {within_20}");
    let avg = |b: usize, f: fn(&(f64, f64, usize)) -> f64| f(&by_size[b]) / by_size[b].2 as f64;
    assert!(avg(2, |b| b.1) <= 0.10, "large GEMMs");
    assert!(
        avg(2, |b| b.0) < 0.0,
        "large GEMMs run faster than the plateau"
    );
    assert!(avg(0, |b| b.0) > 0.3, "small GEMMs slower than the model");
}

#[test]
fn torchtitan_measured_memory_bounds_the_prediction() {
    // The report's peak memory of every run (memory_gib: the maximum over GPUs of PyTorch's
    // reading, 61.8-84.9 GiB). copus's figure is live tensors (PyTorch's cross-entropy: 12
    // bytes a logit at the loss's backward) plus a fixed reserve, so it must sit below each
    // measured peak (which includes the caching allocator's cached blocks) and within MAX_GAP
    // of it (4-22.5 GB; 12-31 GB while the loss was counted at 6 bytes a logit); between the
    // two eager runs (8 and 128 GPUs) the sharded state is the only difference, and that must
    // match.
    const MAX_GAP: f64 = 25e9;
    let rows = rows("torchtitan-h100.csv");
    assert!(rows.len() >= 18 && rows.iter().all(|r| r.measured_memory_bytes.is_some()));
    let scored = scored(&rows);
    let mut gaps = Vec::new();
    for (r, s) in &scored {
        let want = r.measured_memory_bytes.expect("every row has its memory");
        let got = s.prediction.memory_per_gpu_bytes;
        println!(
            "{} {}: predicted {:.1} GB, measured {:.1} GB (gap {:.1})",
            r.set,
            s.config,
            got / 1e9,
            want / 1e9,
            (want - got) / 1e9
        );
        assert!(
            got < want && got > want - MAX_GAP,
            "{}: {got} vs {want}",
            s.config
        );
        gaps.push((r.set.as_str(), want - got));
    }
    let eager: Vec<f64> = gaps
        .iter()
        .filter(|(set, _)| *set == "torchtitan-h100")
        .map(|g| g.1)
        .collect();
    assert_eq!(eager.len(), 2);
    assert!((eager[0] - eager[1]).abs() < 3e9, "{eager:?}");
}

#[test]
fn torchtitan_published_out_of_memory_is_called_cannot_run() {
    // torchtitan's docs/performance.md: Llama 2 70B on 64 A100 with local batch 2 runs out of
    // memory under selective (op-level) checkpointing — why the table shows local batch 1.
    let ran = rows("torchtitan-a100.csv")
        .into_iter()
        .find(|r| r.model.name == "llama2-70b" && r.recompute == Some(Recompute::Op))
        .expect("the 70B op-level row");
    let scored_ran = scored(std::slice::from_ref(&ran));
    assert!(scored_ran[0].1.prediction.fits, "the batch-1 run fits");
    let mut oom = ran.clone();
    oom.config.mbs = 2;
    oom.batch = 2 * ran.batch;
    let h = hw(&oom.hardware);
    let s = validation::score(&oom, &h, &h.efficiency).expect("scores");
    assert!(
        !s.prediction.fits,
        "local batch 2 published as OOM, predicted to fit in {:.1} GB",
        s.prediction.memory_per_gpu_bytes / 1e9
    );
}

#[test]
fn llama3_405b_pretraining_time_and_its_memory_disagreement() {
    // The Llama 3 paper's Table 4 (8,192 and 16,384 H100, TP 8 · PP 16, ZeRO-2, no activation
    // checkpointing at 8K tokens, an interleaved schedule): both ran at 430 and 400 TFLOP/s.
    // Gradients sharded over DP (ZeRO-2) are reduce-scattered every micro-batch, FSDP's one
    // collective per layer, behind the pipeline's compute. With the interleaving the paper
    // describes (8 virtual stages of one layer for 126 layers on 16 stages) the time is within
    // 15 %. Memory (Megatron's per-layer accounting without dropout masks): the plain 1F1B
    // schedule fits both; interleaved, the 16,384-GPU row (16 micro-batches, at most 16 in
    // flight) fits and the 8,192-GPU row's second stage comes out under 1 GB over 80 GiB,
    // where Meta ran it: docs/MODEL.md records the disagreement, bounded here.
    let r = rows("llama3-h100.csv");
    assert_eq!(r.len(), 2);
    for (row, s) in scored(&r) {
        assert!(
            s.prediction.fits,
            "{}: the published layout runs in some schedule",
            s.config
        );
        let h = hw(&row.hardware);
        let mut interleaved = row.clone();
        interleaved.config.mbs = 1;
        interleaved.config.vpp = 8;
        let i = validation::score(&interleaved, &h, &h.efficiency).expect("scores");
        let b = i.prediction.breakdown;
        assert!(
            b.dp_s > 0.02 * i.prediction.step_time_s && b.dp_s < 0.25 * i.prediction.step_time_s,
            "{}: data-parallel {:.2} s of {:.2} s",
            i.config,
            b.dp_s,
            i.prediction.step_time_s
        );
        let gb = i.prediction.memory_per_gpu_bytes / 1e9;
        println!(
            "{} {}: {:.1} TFLOP/s predicted, {:.1} published ({:+.1} %), {gb:.1} GB, fits {}",
            row.set,
            i.config,
            i.tflops,
            row.tflops,
            i.rel_error * 100.0,
            i.prediction.fits
        );
        assert!(
            i.rel_error.abs() < 0.15,
            "{}: {:+.3}",
            i.config,
            i.rel_error
        );
        if row.config.dp == 128 {
            assert!(i.prediction.fits, "{}: {gb:.1} GB", i.config);
        } else {
            assert!(
                !i.prediction.fits && gb < h.hbm_bytes / 1e9 + 1.0,
                "{}: {gb:.1} GB, just over the capacity",
                i.config
            );
        }
    }
}

/// Rows of every validation set grouped into jobs: the same set, model, hardware, stack,
/// sequence, global batch and GPU count, run as different configurations (layout, micro-batch,
/// interleaving, ZeRO stage or recompute). Only jobs with at least two configurations.
fn jobs_with_several_splits() -> Vec<(String, Vec<(PublishedRow, Scored)>)> {
    let mut groups: std::collections::BTreeMap<String, Vec<PublishedRow>> = Default::default();
    for file in VALIDATION_SETS {
        for r in rows(file) {
            let key = format!(
                "{file}: {} {} {} [{}] seq {} batch {} on {} GPUs",
                r.set,
                r.model.name,
                r.hardware,
                r.stack.label(),
                r.model.seq_len,
                r.batch,
                r.config.gpus()
            );
            groups.entry(key).or_default().push(r);
        }
    }
    groups
        .into_iter()
        .filter_map(|(key, rows)| {
            let mut configs: Vec<String> = rows.iter().map(|r| format!("{:?}", r.config)).collect();
            configs.sort();
            configs.dedup();
            (configs.len() >= 2).then(|| (key, scored(&rows)))
        })
        .collect()
}

const VALIDATION_SETS: [&str; 21] = [
    "copus-h200.csv",
    "copus-h200-batch.csv",
    "flash-attention-a100.csv",
    "nemo-2412-h100.csv",
    "narayanan2021-table1.csv",
    "narayanan2021-table2.csv",
    "narayanan2021-figures.csv",
    "megatron-core-h100.csv",
    "modern-a100.csv",
    "modern-h100.csv",
    "torchtitan-a100.csv",
    "torchtitan-h100.csv",
    "llama3-h100.csv",
    "mtnlg-a100.csv",
    "korthikanti2022-a100.csv",
    "bloom-a100.csv",
    "nemotron4-h100.csv",
    "nemo-2407-h100.csv",
    "ibm-fsdp.csv",
    "torchtitan-h200.csv",
    "flagperf-olmo-core.csv",
];

#[test]
fn every_job_with_several_splits_ranks_its_best_first() {
    // Across every validation set: at each job (set, model, hardware, stack, sequence, global
    // batch, GPUs) run as several configurations, the one copus ranks first measured within
    // 2 % of the measured best. docs/MODEL.md records the one exception (the 5.9B job at batch
    // 32, 11 %).
    let mut on_disk: Vec<String> = std::fs::read_dir("assets/validation")
        .expect("validation directory")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".csv"))
        .collect();
    on_disk.sort();
    let mut listed: Vec<String> = VALIDATION_SETS.iter().map(|s| s.to_string()).collect();
    listed.sort();
    assert_eq!(on_disk, listed, "every validation set is searched for jobs");
    let jobs = jobs_with_several_splits();
    assert!(jobs.len() >= 6, "{} jobs", jobs.len());
    let mut over = Vec::new();
    for (job, s) in &jobs {
        let regret = regret(s.iter());
        println!("{job}: {} splits, regret {:.1} %", s.len(), regret * 100.0);
        assert!(regret <= 0.12, "{job}: regret {regret}");
        if regret > REGRET_LIMIT {
            over.push(job.clone());
        }
    }
    assert!(
        over.len() <= 1
            && over
                .iter()
                .all(|j| j.contains("5.9b") && j.contains("batch 32 ")),
        "regret over 2 %: {over:?}"
    );
}

#[test]
fn every_published_running_configuration_fits() {
    // Issue 26's memory criterion over the repo's validation sets: a configuration published
    // as running is not called "cannot run" (with auto choices, some micro-batch, recompute
    // and interleave of the layout fits; the Llama 3 405B row on 8,192 GPUs fits only without
    // the interleaving it ran with, see llama3_405b_pretraining_time_and_its_memory_disagreement).
    let mut not_fitting = Vec::new();
    let mut rows_seen = 0;
    for file in VALIDATION_SETS {
        for (r, s) in scored(&rows(file)) {
            rows_seen += 1;
            if !s.prediction.fits {
                not_fitting.push(format!("{file}: {} {} {}", r.set, r.model.name, s.config));
            }
        }
    }
    assert!(rows_seen > 200, "{rows_seen} rows");
    assert!(not_fitting.is_empty(), "{not_fitting:#?}");
}

/// The kernels measured on an H200 (`copus-h200-kernels.json`, scripts/measure_gpu.py) against
/// the `h200` profile's kernel model: BF16 GEMMs of Llama layers at 16K tokens and one 8192³
/// (the GEMM plateau fitted on H100 step times that never saw them: mean 8.5 %, worst −17 % by
/// time) and FlashAttention-2's forward at 4K-128K (the profile takes the median, 0.343).
#[test]
fn the_h200_kernel_model_matches_the_kernels_measured_on_an_h200() {
    let v = h200_kernels();
    let h = hw("h200");
    let (peak, bw) = (h.peak_flops, h.mem_bw_bytes_per_s);
    let num = |g: &serde_json::Value, k: &str| g[k].as_f64().expect(k);
    let mut errors = Vec::new();
    for g in v["gemm"].as_array().expect("gemm rows") {
        if g["dtype"] != "bf16" {
            continue;
        }
        let (m, n, k) = (num(g, "m"), num(g, "n"), num(g, "k"));
        let predicted = h.efficiency.gemm_time(m, k, n, peak, bw);
        let err = num(g, "median_s") / predicted - 1.0;
        println!(
            "GEMM {}: measured/predicted time {:+.1} %",
            g["shape"],
            err * 100.0
        );
        errors.push(err);
    }
    assert_eq!(errors.len(), 15);
    let (mean, worst) = error_summary(&errors);
    assert!(mean <= 0.10 && worst <= 0.20, "mean {mean}, worst {worst}");
    let mut seen = 0;
    for a in v["attention"].as_array().expect("attention rows") {
        if a["backend"] != "flash" || num(a, "seq") < 4096.0 {
            continue;
        }
        let eff = num(a, "causal_fwd_flops") / num(a, "fwd_s") / peak;
        println!("flash forward at {}: {eff:.3} of peak", a["seq"]);
        assert!((eff / h.efficiency.attn_eff - 1.0).abs() < 0.10, "{eff}");
        seen += 1;
    }
    assert_eq!(seen, 6);
}

#[test]
fn fragmentation_caveat_flags_the_runs_the_allocator_stopped() {
    // Two of copus's own H200 runs went out of memory where copus says they fit: the 1B at
    // 48K tokens with flash attention (a 23.5 GiB logits tensor, 18.5 GiB reserved but
    // unallocated; the cuDNN run of the same configuration ran, at copus's figure to 1 %) and
    // the 1B at 64K. Both are flagged. Of the 290 configurations published as running, the
    // rule flags seven, which ran: the 3B at 32K and the 1B at 48K on the H200 (16.8 and 25.2
    // GB of logits with 29.9 and 41.9 GB free) and torchtitan's four context-parallel 8B runs
    // (16.8 GB with 18.2 free; compiled, whose loss need not hold an FP32 copy of the logits).
    // It is a caveat, not a refusal.
    use copus::perf::memory::{fragmentation_risk, largest_buffer_bytes};
    let risk = |r: &PublishedRow, s: &Scored| {
        let h = hw(&r.hardware);
        let eff = r.stack.apply(&h.efficiency);
        let largest = largest_buffer_bytes(&r.model, &s.config, &eff);
        fragmentation_risk(s.prediction.memory_per_gpu_bytes, h.hbm_bytes, largest)
    };
    let mut flagged = Vec::new();
    let mut rows_seen = 0;
    for file in VALIDATION_SETS {
        for (r, s) in scored(&rows(file)) {
            rows_seen += 1;
            assert!(s.prediction.fits);
            if risk(&r, &s) {
                flagged.push(format!("{file}: {} {} {}", r.set, r.model.name, s.config));
            }
        }
    }
    println!("{rows_seen} rows; flagged: {flagged:#?}");
    assert!(rows_seen > 280 && flagged.len() <= 7, "{flagged:#?}");
    // The two that failed: the 48K row's configuration, and the same at 64K tokens.
    let h200 = rows("copus-h200.csv");
    let at_48k = h200
        .iter()
        .find(|r| r.model.seq_len == 49_152)
        .expect("the 48K run")
        .clone();
    let mut at_64k = at_48k.clone();
    at_64k.model.seq_len = 65_536;
    for (r, s) in scored(&[at_48k, at_64k]) {
        assert!(s.prediction.fits, "copus calls it running");
        assert!(risk(&r, &s), "seq {}", r.model.seq_len);
    }
}

/// A line through the published step times of one job's rows in pipeline slots (micro-batches
/// per pipeline plus the bubble's `(pp − 1) / vpp`): (seconds a slot, seconds a step), and
/// copus's (compute, TP and PP a micro-batch; the largest gradient reduction and optimizer).
fn slot_line(r: &[PublishedRow]) -> ((f64, f64), (f64, f64)) {
    let mut points = Vec::new();
    for (row, s) in scored(r) {
        let c = &s.config;
        let micro_batches = row.batch as f64 / f64::from(c.dp * c.mbs);
        let slots = micro_batches + f64::from(c.pp - 1) / f64::from(c.vpp);
        let measured_s = s.prediction.step_time_s * s.tflops / row.tflops;
        let b = &s.prediction.breakdown;
        let copus_slot_s = (b.compute_s + b.tp_s + b.pp_s) / micro_batches;
        points.push((slots, measured_s, copus_slot_s, b.dp_s + b.optimizer_s));
    }
    let n = points.len() as f64;
    let mean = |f: fn(&(f64, f64, f64, f64)) -> f64| points.iter().map(f).sum::<f64>() / n;
    let (mx, my) = (mean(|p| p.0), mean(|p| p.1));
    let slope = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum::<f64>()
        / points.iter().map(|p| (p.0 - mx).powi(2)).sum::<f64>();
    let copus_fixed = points.iter().map(|p| p.3).fold(0.0, f64::max);
    ((slope, my - slope * mx), (mean(|p| p.2), copus_fixed))
}

#[test]
fn mt_nlg_530b_is_predicted_too_fast_by_a_cost_per_step_copus_lacks() {
    // Megatron-Turing NLG 530B (Smith et al. 2022, Section 2.4), held out and added after every
    // fit: DeepSpeed's 2021 pipeline engine with Megatron's TP 8 and 35 stages, batch 1920 on
    // 2,240, 2,800 and 3,360 A100. copus predicts all three 20-30 % too fast. A line through
    // the three published iteration times in pipeline slots gives the diagnosis docs/MODEL.md
    // records: a slot within 15 % of copus's, but about 6.7 s a step that does not shrink with
    // the micro-batches, where copus has well under 1 s (gradient reduction and optimizer).
    // Megatron-LM's own PTD-P rows show the same kind of cost, smaller (3.1 s at 530B, 1.9 s
    // at 175B), with copus's slot within 5 %. The papers do not say what it is.
    let r = rows("mtnlg-a100.csv");
    assert_eq!(r.len(), 3);
    for (row, s) in scored(&r) {
        assert!(s.prediction.fits, "{}: published as running", s.config);
        println!(
            "{}: {:.1} TFLOP/s predicted, {:.1} published ({:+.1} %)",
            s.config,
            s.tflops,
            row.tflops,
            s.rel_error * 100.0
        );
        assert!(
            (0.15..0.35).contains(&s.rel_error),
            "{}: {:+.3}",
            s.config,
            s.rel_error
        );
    }
    let table2 = rows("narayanan2021-table2.csv");
    let ptdp = |set: &str| -> Vec<PublishedRow> {
        table2.iter().filter(|r| r.set == set).cloned().collect()
    };
    for (name, job, slot_within, step_range) in [
        ("MT-NLG 530B", r, 0.15, 5.0..8.5),
        ("PTD-P 530B", ptdp("ptdp-530b"), 0.06, 2.4..4.0),
        ("PTD-P 175B", ptdp("ptdp-175b"), 0.06, 1.2..2.4),
    ] {
        assert_eq!(job.len(), 3, "{name}");
        let ((slot, step), (copus_slot, copus_step)) = slot_line(&job);
        println!(
            "{name}: measured {slot:.3} s a slot + {step:.2} s a step; copus {copus_slot:.3} s + {copus_step:.2} s"
        );
        assert!(
            (slot / copus_slot - 1.0).abs() < slot_within,
            "{name}: {slot} vs {copus_slot}"
        );
        assert!(
            step_range.contains(&step) && copus_step < 1.0,
            "{name}: {step} vs {copus_step}"
        );
    }
}

/// Every shipped validation row names its stack as `--stack` does, so that a row can be
/// re-predicted by copying its stack column into the command line.
#[test]
fn validation_rows_name_their_stack_as_the_command_line_does() {
    let mut files: Vec<_> = std::fs::read_dir("assets/validation")
        .expect("validation dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "csv"))
        .collect();
    files.sort();
    let mut named = 0;
    for file in files {
        let text = std::fs::read_to_string(&file).expect("readable");
        for line in text.lines().filter(|l| !l.starts_with('#')).skip(1) {
            let Some(stack) = line.split(',').nth(3).filter(|s| !s.is_empty()) else {
                continue;
            };
            assert!(
                copus::perf::stack::StackPreset::parse(stack).is_some(),
                "{}: stack '{stack}' is not a --stack name",
                file.display()
            );
            named += 1;
        }
    }
    assert!(named >= 300, "{named}");
}
