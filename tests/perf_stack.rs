//! The training stack as a setting (presets, single settings, `stack` in every output) and the
//! layouts modern stacks run: context parallelism, op-level checkpointing, uneven pipeline
//! stages, ZeRO-2/3 with PP, HSDP and FP8 (docs/MODEL.md, "Stating your stack").

use copus::perf::efficiency::{Precision, Sharding, StageSplit};
use copus::perf::memory::peak_memory;
use copus::perf::{ParallelConfig, PerfContext, Recompute, Stack, StackPreset, predict};
use copus::profiles;
use std::path::Path;
use std::process::Command;

fn copus(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_copus"))
        .args(args)
        .output()
        .expect("runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn cfg(dp: u32, cp: u32, tp: u32, pp: u32) -> ParallelConfig {
    ParallelConfig {
        dp,
        tp,
        pp,
        mbs: 1,
        zero: 1,
        recompute: Recompute::None,
        vpp: 1,
        cp,
        ep: 1,
    }
}

#[test]
fn context_parallelism_splits_the_sequence_and_pays_for_the_ring() {
    let hw = profiles::hardware("h100-sxm", Path::new(".")).expect("hw");
    let mut model = profiles::model("llama3-8b", Path::new(".")).expect("model");
    model.seq_len = 65536;
    let eff = hw.efficiency.clone();
    let ctx = PerfContext {
        hw: &hw,
        model: &model,
        eff: &eff,
        gpus_per_node: 8,
    };
    let one = peak_memory(&model, &cfg(8, 1, 1, 1), 1, 0.0, &eff);
    let eight = peak_memory(&model, &cfg(1, 8, 1, 1), 1, 0.0, &eff);
    assert!((one.activations / eight.activations - 8.0).abs() < 1e-9);
    // 64k tokens of an 8B model do not fit one GPU without CP; with CP 8 they do.
    let sharded = |dp, cp| ParallelConfig {
        zero: 3,
        recompute: Recompute::Full,
        ..cfg(dp, cp, 1, 1)
    };
    let no_cp = predict(&ctx, &sharded(8, 1), 8).expect("costs");
    let with_cp = predict(&ctx, &sharded(1, 8), 1).expect("costs");
    assert!(!no_cp.fits && with_cp.fits, "{no_cp:?} {with_cp:?}");
    // Per token, CP 8 is slower than an (impossible) replica per GPU: the ring exchange and
    // the smaller GEMMs cost something, but not more than half.
    let per_token = |p: &copus::perf::Prediction| p.tokens_per_s_per_gpu;
    assert!(per_token(&with_cp) < per_token(&no_cp));
    assert!(per_token(&with_cp) > 0.5 * per_token(&no_cp));
}

#[test]
fn a_2021_stack_is_slower_than_megatron_core_on_the_same_layout() {
    let hw = profiles::hardware("h100-sxm", Path::new(".")).expect("hw");
    let model = profiles::model("llama3-8b", Path::new(".")).expect("model");
    let time = |stack: &Stack| {
        let eff = stack.apply(&hw.efficiency);
        let ctx = PerfContext {
            hw: &hw,
            model: &model,
            eff: &eff,
            gpus_per_node: 8,
        };
        let mut c = cfg(4, 1, 2, 1);
        c.recompute = Recompute::Full;
        predict(&ctx, &c, 64).expect("costs").step_time_s
    };
    let modern = time(&Stack::default());
    let old = time(&Stack::preset(StackPreset::MegatronLm2021Local));
    assert!(old > modern * 1.05, "{old} vs {modern}");
    let fp8 = time(&Stack {
        precision: Some(Precision::Fp8),
        ..Stack::default()
    });
    assert!(fp8 < modern * 0.9, "{fp8} vs {modern}");
}

#[test]
fn uneven_stages_and_sharding_with_pp_and_hsdp_run() {
    let hw = profiles::hardware("h100-sxm", Path::new(".")).expect("hw");
    let model = profiles::model("llama3-405b", Path::new(".")).expect("model");
    let eff = Stack::preset(StackPreset::TorchtitanFsdp2).apply(&hw.efficiency);
    let ctx = PerfContext {
        hw: &hw,
        model: &model,
        eff: &eff,
        gpus_per_node: 8,
    };
    // 126 layers on PP 16: eight on the heaviest stage.
    let mut c = cfg(4, 1, 8, 16);
    c.zero = 2;
    c.recompute = Recompute::Full;
    let p = predict(&ctx, &c, 64).expect("uneven stages with ZeRO-2 run");
    assert!(p.step_time_s.is_finite() && p.step_time_s > 0.0);
    // HSDP shards the states inside a node only: more memory per GPU than FSDP over all.
    let model = profiles::model("llama3-70b", Path::new(".")).expect("model");
    let mut fsdp = cfg(64, 1, 1, 1);
    fsdp.zero = 3;
    let full = peak_memory(&model, &fsdp, 1, 0.0, &eff).model_states;
    let hsdp_eff = Stack {
        sharding: Some(Sharding::Hsdp),
        ..Stack::preset(StackPreset::TorchtitanFsdp2)
    }
    .apply(&hw.efficiency);
    let hybrid = peak_memory(&model, &fsdp, 1, 0.0, &hsdp_eff).model_states;
    assert!((hybrid / full - 8.0).abs() < 1e-9, "{hybrid} {full}");
}

/// The pipeline runs at its slowest stage's pace: with uneven stages that is the fullest stage
/// before the last, or the last one with the output layer, whichever is slower, never
/// ⌈layers/pp⌉ layers and the output layer together where no stage holds both. Per-layer and
/// output-layer costs come from two even splits of the same shape.
#[test]
fn an_uneven_pipeline_runs_at_its_slowest_stage() {
    let hw = profiles::hardware("h100-sxm", Path::new(".")).expect("hw");
    let base = profiles::model("llama3-405b", Path::new(".")).expect("model");
    let c = cfg(4, 1, 8, 16);
    let batch = 64;
    let micro_batches = (batch / 4) as f64;
    for split in StageSplit::ALL {
        let mut eff = Stack {
            stage_split: Some(split),
            ..Stack::preset(StackPreset::MegatronCore)
        }
        .apply(&hw.efficiency);
        // Without the fixed cost of a micro-batch (every stage's), what the even splits leave
        // beside their layers is the output layer alone.
        eff.microbatch_overhead_s = 0.0;
        let compute_mb = |layers: u32| {
            let model = copus::perf::ModelProfile {
                layers,
                ..base.clone()
            };
            let ctx = PerfContext {
                hw: &hw,
                model: &model,
                eff: &eff,
                gpus_per_node: 8,
            };
            let p = predict(&ctx, &c, batch).expect("runs");
            (p.breakdown.compute_s + p.breakdown.tp_s) / micro_batches
        };
        // Even: 8 and 7 layers a stage, the last with the output layer.
        let (eight, seven) = (compute_mb(128), compute_mb(112));
        let layer = eight - seven;
        let output = eight - 8.0 * layer;
        assert!(layer > 0.0 && output > 0.0, "{layer} {output}");
        let stages = copus::perf::memory::stage_layer_counts(
            &copus::perf::ModelProfile {
                layers: 126,
                ..base.clone()
            },
            16,
            split,
        );
        let (last, inner) = stages.split_last().expect("stages");
        let inner = f64::from(*inner.iter().max().expect("inner"));
        let want = (inner * layer).max(f64::from(*last) * layer + output);
        let got = compute_mb(126);
        assert!(
            (got / want - 1.0).abs() < 1e-9,
            "{split:?}: {got} vs {want}"
        );
        // Before, 126 layers on 16 stages were charged a full stage and the output layer.
        assert!(got < eight - 1e-9, "{split:?}");
    }
}

/// Run copus with `args` (space-separated) plus `--json`, expect exit 0, parse the output.
fn json_of(args: &str) -> serde_json::Value {
    let mut all: Vec<&str> = args.split_whitespace().collect();
    all.push("--json");
    let (code, out, err) = copus(&all);
    assert_eq!(code, 0, "copus {args}: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("copus {args}: {e}: {out}"))
}

#[test]
fn predict_states_the_stack_and_reports_a_config_that_does_not_fit_as_a_result() {
    let v = json_of(
        "predict --model llama3-70b --gpus 8 --batch 64 --stack torchtitan-fsdp2 --grad-reduce bf16",
    );
    assert_eq!(v["stack"]["preset"], "torchtitan-fsdp2");
    assert_eq!(v["stack"]["settings"]["grad_reduce"], "bf16");
    assert_eq!(v["fits"], false);
    assert!(
        v["reason"]
            .as_str()
            .is_some_and(|r| r.contains("out of memory"))
    );
    // With ZeRO-3 on 64 GPUs it fits, and recompute was chosen like grid's.
    let v = json_of(
        "predict --model llama3-70b --gpus 64 --batch 128 --zero 3 --stack torchtitan-fsdp2",
    );
    assert_eq!(v["fits"], true, "{v}");
    assert!(v["reason"].is_null() && v["nearest_change"].is_null());
    // FP8 on a GPU without FP8 tensor cores is an input error that names the setting.
    let (code, _, err) = copus(&[
        "predict",
        "--model",
        "llama3-8b",
        "--hardware",
        "a100-80g",
        "--gpus",
        "8",
        "--batch",
        "64",
        "--precision",
        "fp8",
    ]);
    // A configuration the flags ask for that cannot be formed (docs/RELIABILITY.md).
    assert_eq!(code, 2);
    assert!(err.contains("fp8") && err.contains("a100-80g"), "{err}");
}

#[test]
fn grid_and_plan_print_the_stack_they_predict_for() {
    let v = json_of("grid sessions/demo.ron --stack megatron-lm-2021");
    assert_eq!(v["stack"]["preset"], "megatron-lm-2021");
    assert_eq!(v["stack"]["settings"]["attention"], "unfused");
    let v = json_of("plan sessions/demo.ron");
    assert_eq!(v["stack"]["preset"], "megatron-core", "{}", v["stack"]);
}

/// The bundled demo session, resolved as the explorer opens it.
fn demo_session() -> copus::session::Resolved {
    let path = Path::new("sessions/demo.ron");
    copus::session::Session::load(path)
        .expect("demo")
        .resolve(path)
        .expect("resolves")
}

#[test]
fn the_what_if_editor_switches_the_stack_and_refuses_fp8_without_fp8_hardware() {
    use copus::app::whatif::{Field, apply, value};
    let mut r = demo_session();
    assert_eq!(value(&r, Field::Stack), "megatron-core");
    apply(&mut r, Field::Precision, 1).expect("h100 runs fp8");
    assert_eq!(value(&r, Field::Precision), "fp8");
    assert_eq!(r.efficiency().precision, Precision::Fp8);
    // Another preset keeps the precision chosen.
    apply(&mut r, Field::Stack, 1).expect("next preset");
    assert_eq!(value(&r, Field::Stack), "nemo (precision fp8)");
    // On an A100 FP8 is refused and the stack stays as it was.
    r.hardware = profiles::hardware("a100-80g", Path::new(".")).expect("a100");
    r.session.stack = None;
    let err = apply(&mut r, Field::Precision, 1).expect_err("no fp8 on a100");
    assert!(err.contains("a100-80g"), "{err}");
    assert_eq!(r.session.stack, None);
    assert_eq!(value(&r, Field::Precision), "bf16");
}

#[test]
fn the_what_if_editor_changes_the_attention_kernel_and_the_cp_exchange() {
    use copus::app::whatif::{Field, apply, value};
    use copus::perf::efficiency::{AttentionKind, CpComm};
    let mut r = demo_session();
    assert_eq!(
        (value(&r, Field::Attention), value(&r, Field::CpComm)),
        ("cudnn".to_string(), "ring".to_string())
    );
    // cudnn -> unfused: the kernel in force, the label says so, and a step slows down.
    let cfg = cfg(64, 1, 1, 1);
    let step = |r: &copus::session::Resolved| {
        let eff = r.efficiency();
        let ctx = PerfContext {
            hw: &r.hardware,
            model: &r.model,
            eff: &eff,
            gpus_per_node: 8,
        };
        predict(&ctx, &cfg, 512).expect("costs").step_time_s
    };
    let before = step(&r);
    apply(&mut r, Field::Attention, 1).expect("unfused");
    assert_eq!(r.efficiency().attention, AttentionKind::Unfused);
    assert_eq!(value(&r, Field::Stack), "megatron-core (attention unfused)");
    assert!(step(&r) > before);
    // The CP exchange steps through the three kinds and stops at the last.
    apply(&mut r, Field::CpComm, 1).expect("all-gather");
    assert_eq!(value(&r, Field::CpComm), "all-gather");
    apply(&mut r, Field::CpComm, 1).expect("all-to-all");
    apply(&mut r, Field::CpComm, 1).expect("stays");
    assert_eq!(r.efficiency().cp_comm, CpComm::AllToAll);
    assert_eq!(
        value(&r, Field::Stack),
        "megatron-core (attention unfused, cp-comm all-to-all)"
    );
}

#[test]
fn automatic_choices_keep_the_context_parallel_degree() {
    // mbs and vpp auto search the layout's options without losing its CP degree.
    let v = json_of(
        "predict --model llama3-405b --gpus 16384 --tp 8 --pp 16 --cp 16 --batch 128 --seq 131072 --vpp auto",
    );
    assert_eq!(v["cp"], 16, "{v}");
    assert_eq!(v["dp"], 8, "{v}");
    assert!(v["vpp"].as_u64().is_some_and(|x| x > 1), "interleaved: {v}");
    let fixed = json_of(
        "predict --model llama3-405b --gpus 16384 --tp 8 --pp 16 --cp 16 --batch 128 --seq 131072 --vpp 1",
    );
    assert!(
        v["step_time_s"].as_f64() < fixed["step_time_s"].as_f64(),
        "auto {v} vs 1F1B {fixed}"
    );
}

#[test]
fn a_session_can_lay_out_context_parallel_layouts_on_the_grid() {
    // The demo with a 64k-token model: searched CP degrees add DP·CP·TP·PP rows, and at this
    // length the best cell uses CP (one sequence no longer fits a GPU's memory on its own).
    let demo = std::fs::read_to_string("sessions/demo.ron").expect("demo");
    let long = demo
        .replace(
            r#"model: Named("llama-7b"),"#,
            r#"model: Inline((name: "llama3-8b-64k", layers: 32, hidden: 4096, heads: 32, kv_heads: 8, ffn_hidden: 14336, vocab: 128256, seq_len: 65536, swiglu: true)),"#,
        )
        .replace(
            "        allow_cross_node_tp: false,",
            "        allow_cross_node_tp: false,\n        context_parallel: [1, 2, 4, 8],",
        );
    assert_ne!(long, demo, "the demo's model and search lines moved");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("long.ron");
    std::fs::write(&path, &long).expect("writes");
    let v = json_of(&format!("grid {} --at 150B", path.display()));
    let cells = v["cells"].as_array().expect("cells");
    let cp_rows = cells
        .iter()
        .filter(|c| c["layout"].as_str().is_some_and(|l| l.contains("·CP")))
        .count();
    assert!(cp_rows > 0, "no CP layouts");
    let best = &v["best"];
    assert!(
        best["config"]["cp"].as_u64().is_some_and(|cp| cp > 1),
        "{best}"
    );
    // The planner keeps CP in its states.
    let plan = json_of(&format!("plan {}", path.display()));
    assert!(plan.to_string().contains("\"cp\":"), "plan JSON names CP");
    // A CP degree of 0 in a session is refused with the field named.
    std::fs::write(&path, long.replace("[1, 2, 4, 8]", "[0, 2]")).expect("writes");
    let (code, _, err) = copus(&["grid", path.to_str().expect("utf-8")]);
    assert_eq!(code, 1);
    assert!(err.contains("search.context_parallel"), "{err}");
}

/// A calibration of llama-7b on h100-sxm (8 measurements, max_eff fitted) holding `params`.
pub(crate) fn calibration_file(
    params: copus::perf::EfficiencyParams,
) -> copus::perf::calibration_file::CalibrationFile {
    copus::perf::calibration_file::CalibrationFile {
        hardware: "h100-sxm".into(),
        model: "llama-7b".into(),
        n: 8,
        rms_rel_error: 0.01,
        cv_rel_error: 0.02,
        profile_rms_rel_error: 0.2,
        fitted: vec!["max_eff".into()],
        params,
        stack: None,
        recompute: Vec::new(),
        unwritten: Vec::new(),
    }
}

#[test]
fn a_calibration_file_is_validated_on_every_path_that_reads_it() {
    // Write a calibration with the generic parameters, then break its GEMM plateau.
    let dir = tempfile::tempdir().expect("tempdir");
    let file = calibration_file(copus::perf::EfficiencyParams {
        max_eff: -0.5,
        ..copus::perf::EfficiencyParams::default()
    });
    let path = dir.path().join("bad.ron");
    std::fs::write(&path, file.to_ron().expect("ron")).expect("writes");
    let cal = path.to_str().expect("utf-8");
    for args in [
        vec![
            "predict",
            "--model",
            "llama-7b",
            "--gpus",
            "8",
            "--batch",
            "64",
            "--calibration",
            cal,
        ],
        vec!["grid", "sessions/demo.ron", "--calibration", cal],
        vec!["plan", "sessions/demo.ron", "--calibration", cal],
        vec!["open", "sessions/demo.ron", "--calibration", cal],
    ] {
        let (code, out, err) = copus(&args);
        assert_eq!(code, 1, "{args:?}: {out}");
        assert!(err.contains("max_eff"), "{args:?}: {err}");
    }
}

/// A single stack flag changes that setting of the stack a calibration was fitted under; it
/// does not throw that stack away for megatron-core's (a torchtitan calibration with
/// `--sequence-parallel on`, the value it has, predicted ZeRO-1 under megatron-core and a
/// step 40 % shorter). `--stack` still replaces it.
#[test]
fn a_stack_flag_changes_one_setting_of_the_calibrations_stack() {
    let dir = tempfile::tempdir().expect("tempdir");
    let stack = copus::perf::Stack {
        preset: Some(copus::perf::StackPreset::TorchtitanFsdp2),
        attention: Some(copus::perf::efficiency::AttentionKind::Cudnn),
        ..Default::default()
    };
    let hw = copus::profiles::hardware("h100-sxm", std::path::Path::new(".")).expect("hw");
    let mut file = calibration_file(stack.apply(&hw.efficiency));
    file.stack = Some(stack.label());
    let path = dir.path().join("tt.ron");
    std::fs::write(&path, file.to_ron().expect("ron")).expect("writes");
    let base = format!(
        "predict --model llama3-8b --gpus 16 --tp 2 --batch 64 --calibration {}",
        path.display()
    );
    let plain = json_of(&base);
    assert_eq!(
        plain["stack"]["label"],
        "torchtitan-fsdp2 (attention cudnn)"
    );
    let same = json_of(&format!("{base} --sequence-parallel on"));
    assert_eq!(same["stack"], plain["stack"]);
    assert_eq!(same["config"], plain["config"]);
    assert_eq!(same["step_time_s"], plain["step_time_s"]);
    let fp8 = json_of(&format!("{base} --precision fp8"));
    assert_eq!(
        fp8["stack"]["label"],
        "torchtitan-fsdp2 (attention cudnn, precision fp8)"
    );
    assert_eq!(
        fp8["config"]["zero"], plain["config"]["zero"],
        "{}",
        fp8["config"]
    );
    let replaced = json_of(&format!("{base} --stack megatron-core"));
    assert_eq!(replaced["stack"]["label"], "megatron-core");
}

/// `grid --recompute` states the checkpointing searched (as a session's `search.recompute`
/// does): every cell uses a policy listed; one the framework lacks is a caveat.
#[test]
fn grid_and_plan_search_the_recompute_policies_given() {
    let cells = |v: &serde_json::Value| -> std::collections::BTreeSet<String> {
        v["cells"]
            .as_array()
            .expect("cells")
            .iter()
            .filter_map(|c| c["config"]["recompute"].as_str().map(str::to_string))
            .collect()
    };
    let full = json_of("grid sessions/demo.ron --recompute full");
    assert_eq!(cells(&full), ["full".to_string()].into());
    let free = json_of("grid sessions/demo.ron");
    assert!(cells(&free).contains("none"), "{:?}", cells(&free));
    let op = json_of("grid sessions/demo.ron --recompute op,full");
    assert!(cells(&op).iter().all(|p| p == "op" || p == "full"));
    assert!(
        op["caveats"]
            .to_string()
            .contains("recompute op is not a policy megatron-core has"),
        "{}",
        op["caveats"]
    );
    let plan = json_of("plan sessions/demo.ron --recompute full");
    let text = plan["schedule"].to_string();
    assert!(
        text.contains("\"full\"") && !text.contains("\"none\""),
        "{text}"
    );
    let (code, _, err) = copus(&["grid", "sessions/demo.ron", "--recompute", "auto"]);
    assert_eq!(code, 2, "{err}");
}

/// A stack flag that leaves every layout of the grid unchanged is named in `caveats` (it
/// was accepted without a word), and `predict` names one the layout leaves without effect;
/// the values `--json` writes are accepted back as flags.
#[test]
fn settings_without_effect_are_named_and_json_values_are_flags() {
    let v = json_of("grid sessions/demo.ron --sharding deepspeed --cp-comm ring --pp-overlap off");
    let caveats = v["caveats"].to_string();
    for flag in ["--sharding", "--cp-comm", "--pp-overlap"] {
        assert!(
            caveats.contains(&format!("{flag} has no effect on this grid")),
            "{caveats}"
        );
    }
    let v = json_of("grid sessions/demo.ron --grad-reduce bf16");
    assert!(
        !v["caveats"].to_string().contains("no effect"),
        "{}",
        v["caveats"]
    );
    let v = json_of(
        "predict --model llama3-8b --gpus 8 --batch 64 --pp-overlap off --tp-overlap on \
         --sequence-parallel off",
    );
    let caveats = v["caveats"].to_string();
    for flag in ["--pp-overlap", "--tp-overlap", "--sequence-parallel"] {
        assert!(
            caveats.contains(&format!("{flag} has no effect")),
            "{caveats}"
        );
    }
    let v = json_of(
        "predict --model llama3-8b --gpus 16 --cp 2 --batch 64 --cp-comm all_gather \
         --cross-entropy vocab_parallel --sequence-parallel false",
    );
    let settings = &v["stack"]["settings"];
    assert_eq!(settings["cp_comm"], "all_gather");
    assert_eq!(settings["cross_entropy"], "vocab_parallel");
    assert_eq!(settings["sequence_parallel"], false);
}

/// `--pp-overlap`: Megatron-Core's interleaved schedule hides its point-to-point transfers
/// behind the stage's compute (less pipeline time, same compute); without virtual stages, or
/// switched off, they block. The 2021 presets block; `nemo` reduces gradients in BF16.
#[test]
fn interleaved_pipeline_transfers_hide_where_the_stack_overlaps_them() {
    let base =
        "predict --model llama3-70b --gpus 64 --tp 8 --pp 4 --mbs 1 --recompute none --batch 256";
    let pp_s = |extra: &str| {
        let v = json_of(&format!("{base} {extra}"));
        let pp = v["breakdown"]["pp_s"].as_f64().expect("pp_s");
        (
            pp,
            v["breakdown"]["compute_s"].as_f64().expect("compute_s"),
            v,
        )
    };
    let (on, compute_on, v) = pp_s("--vpp 4");
    assert_eq!(v["stack"]["settings"]["pp_overlap"], true, "{v}");
    let (off, compute_off, v) = pp_s("--vpp 4 --pp-overlap off");
    assert_eq!(v["stack"]["settings"]["pp_overlap"], false);
    assert!(
        v["stack"]["label"]
            .as_str()
            .is_some_and(|l| l.contains("pp-overlap off")),
        "{v}"
    );
    assert!(
        on < 0.5 * off && off > 0.0,
        "hidden {on} s, blocking {off} s"
    );
    assert_eq!(compute_on, compute_off);
    // Without virtual stages the transfers block either way.
    let (plain_on, _, _) = pp_s("--vpp 1");
    let (plain_off, _, _) = pp_s("--vpp 1 --pp-overlap off");
    assert_eq!(plain_on, plain_off);
    let v = json_of(&format!("{base} --vpp 4 --stack megatron-lm-2021"));
    assert_eq!(v["stack"]["settings"]["pp_overlap"], false);
    let v = json_of(&format!("{base} --vpp 4 --stack nemo"));
    assert_eq!(v["stack"]["settings"]["grad_reduce"], "bf16");
    assert_eq!(v["stack"]["settings"]["pp_overlap"], true);
}

/// `--cross-entropy` (fused in `llm-foundry`, vocab-parallel in Megatron, pytorch in
/// torchtitan): the output layer's logits take 2, 6 or 12 bytes each at the loss's backward;
/// the step time does not change (docs/MODEL.md).
#[test]
fn the_cross_entropy_sets_the_logit_memory() {
    let base = "predict --layers 24 --hidden 2048 --heads 16 --vocab 50368 --seq 2048 \
                --tied-embeddings --gpus 16 --tp 1 --pp 1 --mbs 20 --zero 3 --recompute none \
                --batch 320 --stack llm-foundry";
    let fused = json_of(base);
    let plain = json_of(&format!("{base} --cross-entropy vocab-parallel"));
    let torch = json_of(&format!("{base} --cross-entropy pytorch"));
    assert_eq!(fused["stack"]["settings"]["cross_entropy"], "fused");
    assert_eq!(
        plain["stack"]["settings"]["cross_entropy"],
        "vocab_parallel"
    );
    assert_eq!(torch["stack"]["settings"]["cross_entropy"], "pytorch");
    let output = |v: &serde_json::Value| v["memory"]["output"].as_f64().expect("output");
    let ratio = output(&fused) / output(&plain);
    assert!((ratio - 1.0 / 3.0).abs() < 1e-9, "{ratio}");
    let ratio = output(&torch) / output(&plain);
    assert!((ratio - 2.0).abs() < 1e-9, "{ratio}");
    assert_eq!(fused["step_time_s"], plain["step_time_s"]);
    assert_eq!(torch["step_time_s"], plain["step_time_s"]);
    // llm-foundry's MPT-1B at micro-batch 20 on 16 H100 ran (modern-h100.csv): it fits.
    assert_eq!(fused["fits"], true, "{fused}");
    assert_eq!(plain["fits"], false, "{plain}");
    let v = json_of("predict --model llama3-8b --gpus 8 --batch 64 --stack nemo");
    assert_eq!(v["stack"]["settings"]["cross_entropy"], "vocab_parallel");
    let v = json_of("predict --model llama3-8b --gpus 8 --batch 64 --stack torchtitan-fsdp2");
    assert_eq!(v["stack"]["settings"]["cross_entropy"], "pytorch");
}

/// `--attention cudnn` (Megatron-Core's and NeMo's Transformer Engine attention, or
/// FlashAttention-3) runs the hardware's `attn_native_speedup` × FlashAttention-2's speed: on
/// H100 the long-sequence step is faster with it; on A100 (speed-up 1) the two are the same.
/// The FSDP and DeepSpeed presets run FlashAttention-2 (`fused`), llm-foundry's the Triton
/// kernel its benchmark tables ran.
#[test]
fn hopper_native_attention_is_faster_on_h100_only() {
    let run = |hw: &str, attention: &str| {
        let v = json_of(&format!(
            "predict --model llama3-8b --hardware {hw} --gpus 8 --batch 16 --seq 16384 \
             --tp 1 --pp 1 --cp 2 --mbs 1 --recompute full --attention {attention}"
        ));
        assert_eq!(v["stack"]["settings"]["attention"], attention, "{v}");
        v["step_time_s"].as_f64().expect("step time")
    };
    let (native, flash2) = (run("h100-sxm", "cudnn"), run("h100-sxm", "fused"));
    assert!(native < 0.9 * flash2, "cudnn {native} s, fused {flash2} s");
    assert_eq!(run("a100-80g", "cudnn"), run("a100-80g", "fused"));
    for (stack, attention) in [
        ("megatron-core", "cudnn"),
        ("nemo", "cudnn"),
        ("torchtitan-fsdp2", "fused"),
        ("llm-foundry", "triton"),
        ("deepspeed", "fused"),
        ("megatron-lm-2021", "unfused"),
    ] {
        let v = json_of(&format!(
            "predict --model llama3-8b --gpus 8 --batch 64 --stack {stack}"
        ));
        assert_eq!(v["stack"]["settings"]["attention"], attention, "{stack}");
    }
}

#[test]
fn the_what_if_stack_carries_its_zero_stage_until_one_is_chosen() {
    // A stats file opened without a session lists no ZeRO stages: the stack's own is
    // searched, and follows the what-if's stack until the ZeRO field is set.
    use copus::app::whatif::{Field, apply, value};
    let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/data/sample-run.ndjson");
    let mut r = copus::cli::open::adhoc_session(&copus::cli::open::OpenArgs::for_path(&sample))
        .expect("ad-hoc session");
    assert_eq!(r.session.search.zero, vec![1]);
    // megatron-core → nemo → torchtitan-fsdp2 (StackPreset::ALL order).
    for _ in 0..8 {
        if value(&r, Field::Stack) == "torchtitan-fsdp2" {
            break;
        }
        apply(&mut r, Field::Stack, 1).expect("next preset");
    }
    assert_eq!(value(&r, Field::Stack), "torchtitan-fsdp2");
    assert_eq!(r.session.search.zero, vec![3]);
    apply(&mut r, Field::Zero, -1).expect("ZeRO-2");
    assert_eq!(r.session.search.zero, vec![2]);
    apply(&mut r, Field::Stack, 1).expect("next preset");
    assert_eq!(r.session.search.zero, vec![2], "chosen: kept");

    // A session file's list was written for its framework (the demo: ZeRO [1], Megatron-Core's
    // distributed optimizer): another framework in the what-if searches its own stages.
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("sessions/demo.ron");
    let mut r = copus::session::Session::load(&demo)
        .expect("load")
        .resolve(&demo)
        .expect("resolve");
    assert_eq!(r.session.search.zero, vec![1]);
    apply(&mut r, Field::Stack, 1).expect("nemo");
    assert_eq!(value(&r, Field::Stack), "nemo");
    assert_eq!(
        r.session.search.zero,
        vec![1],
        "the same framework underneath"
    );
    for _ in 0..8 {
        if value(&r, Field::Stack) == "torchtitan-fsdp2" {
            break;
        }
        apply(&mut r, Field::Stack, 1).expect("next preset");
    }
    assert_eq!(r.session.search.zero, vec![3]);
}

/// `--elementwise eager` (torchtitan's default, no torch.compile) charges a Llama block its
/// one-kernel-per-operation traffic (FP32 RMSNorm and rotary embedding, grouped keys copied
/// out, SiLU and product apart), about three times the fused kernels' bytes; a GELU block,
/// whose LayerNorm is one kernel even in eager, is charged the fused bytes (and more launches).
#[test]
fn eager_element_wise_work_slows_a_llama_block_and_hardly_a_gpt_block() {
    let step = |model: &str, stack: &str, extra: &str| {
        let v = json_of(&format!(
            "predict --model {model} --gpus 8 --batch 64 --tp 1 --pp 1 --mbs 1 \
             --recompute none --zero 3 --stack {stack} {extra}"
        ));
        let ew = v["stack"]["settings"]["elementwise"].clone();
        (v["step_time_s"].as_f64().expect("step time"), ew)
    };
    let (eager, ew) = step("llama3-8b", "torchtitan-fsdp2", "");
    assert_eq!(ew, "eager", "torchtitan runs eager unless told");
    let (fused, ew) = step("llama3-8b", "torchtitan-fsdp2", "--elementwise fused");
    assert_eq!(ew, "fused");
    assert!(eager > 1.05 * fused, "eager {eager} s, fused {fused} s");
    let (gpt_eager, _) = step("gpt-1.7b", "torchtitan-fsdp2", "");
    let (gpt_fused, _) = step("gpt-1.7b", "torchtitan-fsdp2", "--elementwise fused");
    assert!(
        gpt_eager >= gpt_fused && gpt_eager < 1.02 * gpt_fused,
        "{gpt_eager} vs {gpt_fused}"
    );
    let (_, ew) = step("llama3-8b", "megatron-core", "");
    assert_eq!(ew, "fused", "Megatron's kernels are hand-fused");
}

/// A calibration file saved before `cross_entropy` replaced `fused_cross_entropy` (a bool)
/// still loads: `true` reads as the fused loss, `false` as the 6 bytes a logit it meant, and a
/// file written now carries `cross_entropy` only.
#[test]
fn a_calibration_file_with_the_old_fused_cross_entropy_field_still_loads() {
    use copus::perf::calibration_file::CalibrationFile;
    use copus::perf::efficiency::CrossEntropy;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = calibration_file(copus::perf::EfficiencyParams::default());
    let now = file.to_ron().expect("ron");
    assert!(now.contains("cross_entropy: VocabParallel") && !now.contains("fused_cross"));
    for (old, want) in [
        ("true", CrossEntropy::Fused),
        ("false", CrossEntropy::VocabParallel),
    ] {
        // The old file: the new field absent, the bool in its place.
        let text = now.replace(
            "cross_entropy: VocabParallel",
            &format!("fused_cross_entropy: {old}"),
        );
        let path = dir.path().join(format!("old-{old}.ron"));
        std::fs::write(&path, &text).expect("writes");
        let loaded = CalibrationFile::load(&path).expect("an old calibration file loads");
        assert_eq!(loaded.params.cross_entropy, want);
        assert_eq!(loaded.params.legacy_fused_cross_entropy, None);
        assert!(!loaded.to_ron().expect("ron").contains("fused_cross"));
    }
}

/// docs/MODEL.md's preset table says what the code does: each preset's attention kernel,
/// cross-entropy, element-wise kind, context-parallel exchange and stage split as
/// `StackPreset::settings` resolves them.
#[test]
fn the_preset_table_in_the_model_docs_matches_the_presets() {
    use copus::perf::StackPreset;
    let doc = std::fs::read_to_string("docs/MODEL.md").expect("docs/MODEL.md");
    let header = doc
        .lines()
        .find(|l| l.starts_with("| preset (`--stack`)"))
        .expect("the preset table");
    let columns: Vec<&str> = header.split('|').map(str::trim).collect();
    let col = |name: &str| {
        columns
            .iter()
            .position(|c| *c == name)
            .unwrap_or_else(|| panic!("column {name}"))
    };
    let (attention, ce, ew) = (col("attention"), col("cross-entropy"), col("element-wise"));
    let cp = col("CP exchange");
    let split = col("stage split");
    for preset in StackPreset::ALL {
        let row = doc
            .lines()
            .find(|l| l.starts_with(&format!("| `{}`", preset.name())))
            .unwrap_or_else(|| panic!("no row for {}", preset.name()));
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let s = preset.settings();
        assert_eq!(cells[attention], s.attention.name(), "{}", preset.name());
        assert_eq!(
            cells[ce].replace('-', "_"),
            s.cross_entropy.name(),
            "{}",
            preset.name()
        );
        assert_eq!(cells[ew], s.elementwise.name(), "{}", preset.name());
        assert_eq!(
            cells[cp].replace('-', "_"),
            s.cp_comm.name(),
            "{}",
            preset.name()
        );
        assert_eq!(cells[split], s.stage_split.name(), "{}", preset.name());
    }
}

/// Step time of `cfg` for Llama 3 8B at `seq` tokens on H100s under each way context
/// parallelism exchanges keys and values, in `CpComm::ALL` order.
fn step_by_cp_comm(seq: u32, gpus_per_node: u32, cfg: &ParallelConfig, batch: u64) -> Vec<f64> {
    breakdown_by_cp_comm(seq, gpus_per_node, cfg, batch)
        .into_iter()
        .map(|(step, _)| step)
        .collect()
}

/// (step time, breakdown) of `cfg` as [`step_by_cp_comm`].
fn breakdown_by_cp_comm(
    seq: u32,
    gpus_per_node: u32,
    cfg: &ParallelConfig,
    batch: u64,
) -> Vec<(f64, copus::perf::Breakdown)> {
    use copus::perf::efficiency::CpComm;
    let hw = profiles::hardware("h100-sxm", Path::new(".")).expect("hw");
    let mut model = profiles::model("llama3-8b", Path::new(".")).expect("model");
    model.seq_len = seq;
    CpComm::ALL
        .iter()
        .map(|&kind| {
            let eff = Stack {
                cp_comm: Some(kind),
                ..Stack::default()
            }
            .apply(&hw.efficiency);
            let ctx = PerfContext {
                hw: &hw,
                model: &model,
                eff: &eff,
                gpus_per_node,
            };
            let p = predict(&ctx, cfg, batch).expect("costs");
            (p.step_time_s, p.breakdown)
        })
        .collect()
}

#[test]
fn the_context_parallel_exchange_costs_what_each_kind_moves_and_hides() {
    let rel = |a: f64, b: f64| (a - b).abs() / b;
    // Without context parallelism the kind changes nothing.
    let [ring, gather, a2a] = step_by_cp_comm(8192, 8, &cfg(8, 1, 1, 1), 64)[..] else {
        panic!("three kinds")
    };
    assert!(ring == gather && ring == a2a, "{ring} {gather} {a2a}");
    // CP 8 inside a node at 8K tokens (1K a rank: little attention to hide behind). The
    // all-gather moves the ring's bytes but hides only behind the local chunk; Ulysses's one
    // all-to-all moves fewer (queries, keys, values and output of a rank's tokens, 10,240
    // elements a token with Llama 3's 8 key/value heads, against the ring's 7 × 2,048) and
    // pays one latency instead of seven.
    let [ring, gather, a2a] = step_by_cp_comm(8192, 8, &cfg(1, 8, 1, 1), 8)[..] else {
        panic!("three kinds")
    };
    assert!(ring < gather && a2a < gather, "{ring} {gather} {a2a}");
    assert!(a2a <= ring, "{ring} {a2a}");
    // The same CP group spread over 8 nodes (one GPU each): every exchange crosses the
    // slower scale-out network and costs more.
    let [ring_x, gather_x, a2a_x] = step_by_cp_comm(8192, 1, &cfg(1, 8, 1, 1), 8)[..] else {
        panic!("three kinds")
    };
    assert!(ring_x > ring && gather_x > gather && a2a_x > a2a);
    // The breakdown shows the exchange on its own (`cp_s`). Compute is the same for every
    // kind; the step differs by the exchange and by the data-parallel reduction, which hides
    // behind a backward that now includes it. Without CP it is 0.
    let breakdowns = breakdown_by_cp_comm(8192, 8, &cfg(1, 8, 1, 1), 8);
    assert!(breakdowns.iter().all(|(_, b)| b.cp_s > 0.0));
    for (a, b) in [(0, 1), (0, 2), (1, 2)] {
        let (sa, ba) = breakdowns[a];
        let (sb, bb) = breakdowns[b];
        let (xa, xb) = (ba.cp_s + ba.dp_s, bb.cp_s + bb.dp_s);
        assert!(
            ((sa - sb) - (xa - xb)).abs() < 1e-9 * sa,
            "{a} {b}: {sa} {sb} {ba:?} {bb:?}"
        );
        assert!(ba.cp_s != bb.cp_s);
        assert!((ba.compute_s - bb.compute_s).abs() < 1e-9 * sa);
    }
    let none = breakdown_by_cp_comm(8192, 8, &cfg(8, 1, 1, 1), 64);
    assert!(none.iter().all(|(_, b)| b.cp_s == 0.0));
    // At 128K tokens the attention dwarfs the exchange: all three within 2 %.
    let long = step_by_cp_comm(131_072, 8, &cfg(1, 8, 1, 1), 1);
    assert!(long.iter().all(|t| rel(*t, long[0]) < 0.02), "{long:?}");
}

#[test]
fn the_cp_comm_setting_reaches_every_output_and_ulysses_needs_whole_heads() {
    let base = "predict --model llama3-8b --seq 32768 --gpus 16 --cp 8 --batch 16";
    let v = json_of(&format!("{base} --cp-comm all-to-all"));
    assert_eq!(v["stack"]["settings"]["cp_comm"], "all_to_all");
    assert!(
        v["stack"]["label"]
            .as_str()
            .is_some_and(|l| l.contains("cp-comm all-to-all")),
        "{}",
        v["stack"]
    );
    // Each preset states its framework's: ring for Megatron-Core, PyTorch's all-gather for
    // torchtitan, Ulysses for DeepSpeed.
    for (preset, kind) in [
        ("megatron-core", "ring"),
        ("torchtitan-fsdp2", "all_gather"),
        ("deepspeed", "all_to_all"),
    ] {
        let v = json_of(&format!("{base} --stack {preset}"));
        assert_eq!(v["stack"]["settings"]["cp_comm"], kind, "{preset}");
    }
    // 32 heads over TP 8 leave 4 a rank: Ulysses cannot split them over 8 CP ranks, and the
    // error says so and what to use instead.
    let (code, _, err) = copus(&[
        "predict",
        "--model",
        "llama3-8b",
        "--seq",
        "32768",
        "--gpus",
        "64",
        "--tp",
        "8",
        "--cp",
        "8",
        "--batch",
        "16",
        "--cp-comm",
        "all-to-all",
    ]);
    assert_eq!(code, 2);
    assert!(
        err.contains("all_to_all") && err.contains("4 heads per TP rank") && err.contains("ring"),
        "{err}"
    );
    // Given without context parallelism it changes nothing, and the output says so.
    let v = json_of("predict --model llama3-8b --gpus 8 --batch 64 --cp-comm all-gather");
    assert!(
        v["caveats"].as_array().is_some_and(|c| c
            .iter()
            .any(|c| c.as_str().is_some_and(|c| c.contains("--cp-comm")))),
        "{}",
        v["caveats"]
    );
    let v = json_of(&format!("{base} --cp-comm all-gather"));
    assert!(
        v["caveats"]
            .as_array()
            .is_some_and(|c| c.iter().all(|c| !c.to_string().contains("--cp-comm")))
    );
    // A session states it like every other setting.
    let stack: Stack = ron::from_str("(preset: Some(TorchtitanFsdp2), cp_comm: Some(Ring))")
        .expect("a session's stack");
    assert_eq!(
        stack.label(),
        "torchtitan-fsdp2 (cp-comm ring)",
        "{stack:?}"
    );
}

/// The outputs a review found without the stack they were costed for: `grid --rank --json`
/// (no `stack`), `plan --emit json` (the preset alone, its changed settings dropped) and the
/// DeepSpeed document.
#[test]
fn ranked_grid_and_emitted_schedules_name_the_stack_they_were_costed_for() {
    let (code, out, err) = copus(&[
        "grid",
        "sessions/demo.ron",
        "--rank",
        "256",
        "--attention",
        "unfused",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["stack"]["settings"]["attention"], "unfused", "{v}");
    let (code, text, err) = copus(&["grid", "sessions/demo.ron", "--rank", "256"]);
    assert_eq!(code, 0, "{err}");
    assert!(text.starts_with("stack: megatron-core"), "{text}");
    let (code, out, err) = copus(&[
        "plan",
        "sessions/demo.ron",
        "--attention",
        "unfused",
        "--elementwise",
        "eager",
        "--emit",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["stack"], "megatron-core");
    assert_eq!(
        v["stack_label"],
        "megatron-core (attention unfused, elementwise eager)"
    );
    assert_eq!(v["stack_settings"]["elementwise"], "eager");
    let (code, out, err) = copus(&[
        "plan",
        "sessions/demo.ron",
        "--stack",
        "deepspeed",
        "--grad-reduce",
        "fp32",
        "--emit",
        "deepspeed",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["stack"], "deepspeed (grad-reduce fp32)", "{v}");
    // A flag the session's hardware cannot run is the flag's error, not the session's field.
    let (code, _, err) = copus(&[
        "grid",
        "sessions/paper-7b-8xmi210.ron",
        "--precision",
        "fp8",
    ]);
    assert!(
        code == 2 && err.contains("--precision: precision fp8: hardware 'mi210'"),
        "{err}"
    );
}

/// A session's own stack settings survive a trip through another framework in the what-if:
/// stepping the preset away replaced them with the other framework's defaults, and stepping
/// back left the plain preset (151k → 180k tokens/s at one cell, and `s` saved the loss).
#[test]
fn the_what_if_returns_to_the_sessions_own_stack_settings() {
    use copus::app::whatif::{Field, apply, value};
    let text = std::fs::read_to_string("sessions/demo.ron").expect("demo");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("s.ron");
    let mut session = copus::session::Session::from_ron(&text, &path).expect("parses");
    session.stack = Some(Stack {
        attention: Some(copus::perf::efficiency::AttentionKind::Fused),
        grad_reduce: Some(copus::perf::stack::GradReduce::Bf16),
        ..Stack::preset(StackPreset::MegatronCore)
    });
    let mut r = session.resolve(&path).expect("resolves");
    let own = value(&r, Field::Stack);
    assert!(
        own.contains("attention fused") && own.contains("grad-reduce bf16"),
        "{own}"
    );
    apply(&mut r, Field::Stack, 1).expect("next preset");
    assert!(!value(&r, Field::Stack).starts_with("megatron-core"));
    apply(&mut r, Field::Stack, -1).expect("back");
    assert_eq!(value(&r, Field::Stack), own);
}

/// `--stack PRESET` replaces a session's stack with the preset's own settings (as documented);
/// the session's single settings it drops are named, not dropped without a word.
#[test]
fn a_stack_preset_on_the_command_line_names_the_session_settings_it_drops() {
    let text = std::fs::read_to_string("sessions/demo.ron").expect("demo");
    let with = text.replacen(
        "(\n    name:",
        "(\n    stack: (preset: Some(MegatronCore), attention: Some(Fused)),\n    name:",
        1,
    );
    assert_ne!(with, text, "the demo starts with its name");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("s.ron");
    std::fs::write(&path, with).expect("write");
    let p = path.to_str().expect("utf-8");
    let (code, out, err) = copus(&["grid", p, "--stack", "megatron-core"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(
            "--stack megatron-core replaces the session's stack megatron-core (attention fused)"
        ),
        "{out}"
    );
    // The bundled demo names no single setting: nothing to say.
    let (code, out, err) = copus(&["grid", "sessions/demo.ron", "--stack", "nemo"]);
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains("replaces the session's stack"), "{out}");
}

/// A session whose own stack is torchtitan but whose search lists ZeRO-1 and Megatron's
/// selective recompute: `grid` and `plan` say those cells are what-ifs, as `predict` says of
/// one cell (they said nothing).
#[test]
fn grid_and_plan_say_when_the_search_asks_what_the_sessions_framework_does_not_run() {
    let text = std::fs::read_to_string("sessions/demo.ron").expect("demo");
    let with = text.replacen(
        "(\n    name:",
        "(\n    stack: (preset: Some(TorchtitanFsdp2)),\n    name:",
        1,
    );
    assert!(with.contains("zero: [1],") && with.contains("recompute: [None, Selective, Full]"));
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tt.ron");
    std::fs::write(&path, with).expect("write");
    let p = path.to_str().expect("utf-8");
    for cmd in ["grid", "plan"] {
        let (code, out, err) = copus(&[cmd, p, "--json"]);
        assert_eq!(code, 0, "{cmd}: {err}");
        let v: serde_json::Value = serde_json::from_str(&out).expect("json");
        let caveats = v["caveats"].to_string();
        assert!(
            caveats.contains("recompute selective is not a policy torchtitan-fsdp2 has"),
            "{cmd}: {caveats}"
        );
        assert!(
            caveats.contains("ZeRO-1 is not something torchtitan-fsdp2 runs"),
            "{cmd}: {caveats}"
        );
    }
}

/// What a framework cannot run is said, not costed silently: sequence parallelism over a
/// sequence TP does not divide (Megatron asserts it), DeepSpeed's interleaved schedule (it has
/// only 1F1B) and its context parallelism (Ulysses, which the emitter does not write), FP8 on
/// a 2021 stack, and a torchtitan schedule costed with DeepSpeed's ZeRO-3 collectives.
#[test]
fn configurations_a_framework_cannot_run_are_refused_or_said() {
    let (code, _, err) = copus(&[
        "predict",
        "--model",
        "llama3-70b",
        "--gpus",
        "128",
        "--tp",
        "8",
        "--pp",
        "4",
        "--batch",
        "512",
        "--seq",
        "8191",
    ]);
    // A configuration the flags ask for that cannot be formed: a command-line error.
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(
            "sequence parallelism needs the sequence of each rank (8191 tokens) divisible by TP 8"
        ),
        "{err}"
    );
    let off = json_of(
        "predict --model llama3-70b --gpus 128 --tp 8 --pp 4 --batch 512 --seq 8191 \
         --sequence-parallel off",
    );
    assert!(off["step_time_s"].as_f64().is_some(), "{off}");
    // DeepSpeed's engine runs no ZeRO-3 with experts: sized and costed as ZeRO-2, and said.
    let moe = |zero: &str| {
        json_of(&format!(
            "predict --model mixtral-8x7b --stack deepspeed --gpus 32 --ep 8 --batch 64 --mbs 1 \
             --zero {zero}"
        ))
    };
    let (asked3, asked2) = (moe("3"), moe("2"));
    assert_eq!(asked3["zero_effective"], 2, "{asked3}");
    assert_eq!(asked3["step_time_s"], asked2["step_time_s"]);
    let (_, text, _) = copus(&[
        "predict",
        "--model",
        "mixtral-8x7b",
        "--stack",
        "deepspeed",
        "--gpus",
        "32",
        "--ep",
        "8",
        "--batch",
        "64",
        "--zero",
        "3",
    ]);
    assert!(
        text.contains("runs no ZeRO-3 with mixture-of-experts"),
        "{text}"
    );
    let caveats = |args: &str| json_of(args)["caveats"].to_string();
    let c =
        caveats("predict --model llama3-8b --gpus 8 --batch 16 --stack deepspeed --pp 2 --vpp 2");
    assert!(c.contains("an interleaved (virtual-stage) pipeline"), "{c}");
    // Ulysses CP (the DeepSpeed stack's exchange) runs; with PP it does not.
    let c = caveats("predict --model llama3-8b --gpus 8 --batch 16 --stack deepspeed --cp 2");
    assert!(!c.contains("does not run this configuration"), "{c}");
    let c = caveats(
        "predict --model llama3-8b --gpus 8 --batch 16 --stack deepspeed --cp 2 --pp 2 --zero 1",
    );
    assert!(
        c.contains("DeepSpeed-Ulysses with pipeline parallelism"),
        "{c}"
    );
    let c = caveats("predict --model llama3-8b --gpus 8 --batch 16 --stack deepspeed");
    assert!(!c.contains("Ulysses") && !c.contains("interleaved"), "{c}");
    // Uneven stages run under DeepSpeed (BLOOM ran 70 layers on 12 stages), sized as its
    // partition splits them: the first stage holds the extra layer beside the embedding. The
    // split is the stack's (`stage_split`), not the ZeRO-3 implementation's.
    let bloom = |stack: &str| {
        json_of(&format!(
            "predict --hardware a100-80g --layers 70 --hidden 14336 --heads 112 --vocab 250880 \
             --seq 2048 --tied-embeddings --gpus 384 --tp 4 --pp 12 --mbs 2 --batch 2048 \
             --recompute full --zero 1 --stack {stack}"
        ))
    };
    let greedy = bloom("deepspeed-2021");
    let ends = bloom("deepspeed-2021 --stage-split ends");
    assert_eq!(greedy["stack"]["settings"]["stage_split"], "greedy");
    assert!(
        !greedy["caveats"]
            .to_string()
            .contains("does not run this configuration"),
        "{greedy}"
    );
    assert_eq!(greedy["memory"]["stage"], 0, "{greedy}");
    let bytes = |v: &serde_json::Value| -> f64 {
        ["model_states", "activations", "output", "reserved"]
            .iter()
            .map(|k| v["memory"][k].as_f64().expect("memory"))
            .sum()
    };
    assert!(bytes(&greedy) > bytes(&ends) + 1e9, "{greedy} {ends}");
    // The pace is the slowest stage's: greedy's last (4 layers and the output layer) and
    // BLOOM's own (5 and the output layer, which costs copus a little under a layer here) are
    // no slower than the full ones (6 layers), so both run at the full stages' pace.
    let step = |v: &serde_json::Value| v["step_time_s"].as_f64().expect("step");
    assert_eq!(step(&ends), step(&greedy), "{ends} {greedy}");
    let other_sharding = bloom("deepspeed-2021 --sharding fsdp2");
    assert_eq!(bytes(&other_sharding), bytes(&greedy));
    // DeepSpeed before 0.11 leaves stages empty on some splits: its engine cannot run them.
    let (code, _, err) = copus(&[
        "predict",
        "--layers",
        "42",
        "--hidden",
        "4096",
        "--heads",
        "32",
        "--vocab",
        "32000",
        "--seq",
        "4096",
        "--gpus",
        "16",
        "--pp",
        "16",
        "--batch",
        "64",
        "--stack",
        "deepspeed-2021",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("leave stages 15–16 of 16 without"), "{err}");
    // A split the framework does not run is a what-if, said by predict (with both splits'
    // counts) and by a session's grid; a split where the stages are even changes nothing.
    let c = caveats(
        "predict --model llama3-405b --gpus 1024 --tp 8 --pp 16 --batch 1024 --stage-split \
         balanced",
    );
    assert!(
        c.contains("megatron-core's own split of uneven pipeline stages is ends (7, 8 ×14, 7")
            && c.contains("the balanced split (8 ×14, 7 ×2) is a what-if"),
        "{c}"
    );
    let c = caveats("predict --model llama3-8b --gpus 8 --pp 4 --batch 64 --stage-split greedy");
    assert!(c.contains("--stage-split has no effect"), "{c}");
    let grid = json_of(
        "grid sessions/demo.ron --model llama3-405b --nodes 16 --stack deepspeed --stage-split \
         ends",
    );
    assert!(
        grid["caveats"]
            .to_string()
            .contains("stage_split ends is not how deepspeed splits uneven pipeline stages"),
        "{grid}"
    );
    let c = caveats(
        "predict --model llama3-8b --gpus 8 --batch 16 --stack megatron-lm-2021 --precision fp8",
    );
    assert!(c.contains("had no FP8 training"), "{c}");
    let c = caveats("predict --model llama3-8b --gpus 8 --batch 16 --precision fp8");
    assert!(!c.contains("had no FP8"), "{c}");
    // A torchtitan schedule of the demo with `extra` flags: its text.
    let torchtitan = |extra: &[&str]| {
        let mut args = vec![
            "plan",
            "sessions/demo.ron",
            "--stack",
            "torchtitan-fsdp2",
            "--emit",
            "torchtitan",
        ];
        args.extend_from_slice(extra);
        let (code, out, err) = copus(&args);
        assert_eq!(code, 0, "{err}");
        out
    };
    let out = torchtitan(&["--sharding", "deepspeed"]);
    assert!(
        out.contains("were costed with sharding deepspeed, which torchtitan does not run"),
        "{out}"
    );
    let out = torchtitan(&[]);
    assert!(!out.contains("costed with sharding"), "{out}");
    // Pipelined phases that DeepSpeed's sharding turned into ZeRO-1 are said too.
    let out = torchtitan(&[
        "--sharding",
        "deepspeed",
        "--model",
        "gpt-177b",
        "--nodes",
        "16",
        "--inter-link-scale",
        "0.05",
    ]);
    assert!(out.contains("pipeline_parallel_degree = 16"), "{out}");
    assert!(
        out.contains("sharded phases were costed with sharding deepspeed"),
        "{out}"
    );
}

/// A preset's own Triton attention (llm-foundry's tables) on a GPU whose profile fits no
/// Triton slowdown is costed as the fused kernel, and the caveat says so as it does for
/// `--attention triton` (it was silent: the help's "add --attention fused" then changed
/// nothing); where the profile fits one (A100), no caveat.
#[test]
fn a_presets_triton_attention_costed_as_fused_is_said() {
    let caveats = |hw: &str| {
        json_of(&format!(
            "predict --model llama3-8b --gpus 8 --batch 64 --stack llm-foundry --hardware {hw}"
        ))["caveats"]
            .to_string()
    };
    let h100 = caveats("h100-sxm");
    assert!(
        h100.contains("attention triton (llm-foundry's)") && h100.contains("costed as fused"),
        "{h100}"
    );
    let a100 = caveats("a100-80g");
    assert!(!a100.contains("attention triton"), "{a100}");
    // `grid` (and so `plan` and the explorer, which read the session's notes) says it too:
    // it was only in `predict`.
    let grid = |extra: &str| {
        json_of(&format!("grid demo --stack llm-foundry {extra}"))["caveats"].to_string()
    };
    let g = grid("");
    assert!(
        g.contains("attention triton (llm-foundry's)") && g.contains("costed as fused"),
        "{g}"
    );
    assert!(!grid("--attention fused").contains("attention triton"));
    // The explorer's recommendation panel says it too.
    let screen = |extra: &[&str]| {
        let mut args = vec!["snapshot", "--size", "200x60", "--stack", "llm-foundry"];
        args.extend(extra);
        let (code, out, err) = copus(&args);
        assert_eq!(code, 0, "{err}");
        out
    };
    assert!(screen(&[]).contains("costed as fused"));
    assert!(!screen(&["--attention", "fused"]).contains("costed as fused"));
}

/// `predict`'s "faster here" proposes no layout that `predict` itself calls tight on memory
/// (it proposed 84.1 GB of 85.5 GB for a 70B in FP8, then cautioned it when run).
#[test]
fn faster_here_leaves_the_room_predict_asks_for() {
    for extra in [
        "--precision fp8",
        "--precision bf16",
        "--precision fp8 --recompute none",
    ] {
        let v = json_of(&format!(
            "predict --model llama3-70b --gpus 128 --tp 4 --pp 4 --batch 512 {extra}"
        ));
        let capacity = v["memory_capacity_bytes"].as_f64().expect("capacity");
        if let Some(need) = v["faster_layout"]["memory_per_gpu_bytes"].as_f64() {
            assert!(need <= 0.98 * capacity, "{extra}: {need} of {capacity}");
        }
    }
}

/// A stack without pipeline parallelism (llm-foundry) is never proposed pipeline stages,
/// whether a layout runs faster here or one fits instead (it was proposed `--pp 32`).
#[test]
fn a_stack_without_pipelines_is_proposed_none() {
    for case in [
        // The reviewer's case: it proposed `--tp 4 --pp 32 --zero 3`.
        "--model llama3-70b --gpus 128 --tp 8 --pp 4 --batch 512 --mbs 1 --recompute none",
        "--model llama3-70b --gpus 128 --tp 8 --pp 4 --batch 512",
        "--model llama3-70b --gpus 64 --tp 8 --pp 8 --batch 256",
        "--model llama3-405b --gpus 256 --tp 8 --pp 8 --batch 1024",
    ] {
        let v = json_of(&format!("predict {case} --stack llm-foundry"));
        for key in ["faster_layout", "nearest_change", "faster_if_it_fit"] {
            if let Some(p) = v[key]["config"]["pp"].as_u64() {
                assert_eq!(p, 1, "{case} {key}: {}", v[key]);
            }
        }
    }
}
