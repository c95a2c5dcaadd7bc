//! `copus plan --emit`: every target on every shipped plan session, checked against
//! `plan --json` (the same batches, layouts and steps), for divisibility, and parsed as its
//! framework reads it; the layouts no shipped plan reaches (PP, interleaving, ZeRO-2/3,
//! recompute) through the library on a changed schedule.

use copus::plan::emit::{EmitContext, EmitError, EmitTarget, emit};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn shipped() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("sessions");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("sessions/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "ron"))
        .collect();
    v.sort();
    assert!(v.len() >= 5, "{v:?}");
    v
}

fn run(session: &Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_copus"))
        .arg("plan")
        .arg(session)
        .args(args)
        .output()
        .expect("run copus");
    assert!(
        out.status.success(),
        "{} {args:?}: {}",
        session.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// `plan SESSION ARGS` (which must succeed), its standard output parsed as JSON.
fn run_json(session: &Path, args: &[&str]) -> Value {
    serde_json::from_str(&run(session, args)).expect("JSON")
}

/// The Megatron-DeepSpeed arguments of one phase of a DeepSpeed document.
fn ds_args(phase: &Value) -> Vec<&str> {
    phase["megatron_deepspeed_args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("string"))
        .collect()
}

/// The standard error of `copus plan SESSION ARGS`, which must fail.
fn fails(session: &Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_copus"))
        .arg("plan")
        .arg(session)
        .args(args)
        .output()
        .expect("run copus");
    assert!(
        !out.status.success(),
        "{} {args:?} succeeded",
        session.display()
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not an integer: {v}"))
}

/// Flags of one argument string: `--name value` pairs (a bare flag maps to "").
fn flags(args: &str) -> BTreeMap<String, String> {
    let words: Vec<&str> = args.split_whitespace().collect();
    let mut m = BTreeMap::new();
    let mut i = 0;
    while i < words.len() {
        let k = words[i];
        assert!(k.starts_with("--"), "{k} in {args}");
        let mut vals = Vec::new();
        while i + 1 < words.len() && !words[i + 1].starts_with("--") {
            vals.push(words[i + 1]);
            i += 1;
        }
        m.insert(k.to_string(), vals.join(" "));
        i += 1;
    }
    m
}

#[test]
fn json_schedule_is_the_plans_own_and_adds_up() {
    for s in shipped() {
        let plan: Value = run_json(&s, &["--json"]);
        let emitted: Value = run_json(&s, &["--emit", "json"]);
        let phases = emitted["phases"].as_array().expect("phases");
        let switches = plan["switches"].as_array().expect("switches");
        assert_eq!(phases.len(), switches.len() + 1, "{}", s.display());
        let optimal = plan["strategies"]
            .as_array()
            .expect("strategies")
            .iter()
            .find(|r| r["name"] == "optimal-joint")
            .expect("optimal-joint");
        let gpus = u(&emitted["gpus"]);
        let seq = u(&emitted["seq_len"]) as f64;
        for (k, p) in phases.iter().enumerate() {
            let state = if k == 0 {
                &optimal["start_state"]
            } else {
                assert_eq!(
                    p["from_step"],
                    switches[k - 1]["plan_steps"],
                    "{}",
                    s.display()
                );
                &switches[k - 1]["to_state"]
            };
            for (a, b) in [
                ("dp", "dp"),
                ("tp", "tp"),
                ("pp", "pp"),
                ("cp", "cp"),
                ("global_batch", "batch"),
            ] {
                assert_eq!(p[a], state[b], "{} phase {k} {a}", s.display());
            }
            let c = &state["config"];
            for f in ["zero", "recompute", "vpp"] {
                assert_eq!(p[f], c[f], "{} phase {k} {f}", s.display());
            }
            assert_eq!(p["micro_batch"], c["mbs"]);
            let (dp, tp, pp, cp) = (u(&p["dp"]), u(&p["tp"]), u(&p["pp"]), u(&p["cp"]));
            assert_eq!(dp * tp * pp * cp, gpus, "{}", s.display());
            assert_eq!(
                dp * u(&p["micro_batch"]) * u(&p["accumulation"]),
                u(&p["global_batch"]),
                "{} phase {k}",
                s.display()
            );
            let from_samples = u(&p["from_samples"]);
            assert!(
                (p["from_tokens"].as_f64().expect("tokens") - from_samples as f64 * seq).abs()
                    < 1.0
            );
            let (until, next_samples) = match phases.get(k + 1) {
                Some(n) => (u(&n["from_step"]), u(&n["from_samples"])),
                None => (u(&emitted["end"]["step"]), u(&emitted["end"]["samples"])),
            };
            assert_eq!(u(&p["until_step"]), until);
            assert!(
                until > u(&p["from_step"]),
                "{} phase {k} is empty",
                s.display()
            );
            assert_eq!(
                from_samples + (until - u(&p["from_step"])) * u(&p["global_batch"]),
                next_samples,
                "{} phase {k}: samples are steps × batch",
                s.display()
            );
        }
    }
}

#[test]
fn megatron_torchtitan_and_deepspeed_say_the_same_schedule() {
    for s in shipped() {
        let emitted: Value = run_json(&s, &["--emit", "json"]);
        let phases = emitted["phases"].as_array().expect("phases");
        let end_samples = u(&emitted["end"]["samples"]);

        // Megatron: one ramp or one argument set per phase.
        let text = run(&s, &["--emit", "megatron"]);
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .collect();
        let value = |l: &str| {
            l.split_once('=')
                .expect("NAME=\"...\"")
                .1
                .trim_matches('"')
                .to_string()
        };
        if lines.len() == 1 && lines[0].starts_with("MEGATRON_ARGS=") {
            let f = flags(&value(lines[0]));
            let ramp: Vec<u64> = f["--rampup-batch-size"]
                .split(' ')
                .map(|x| x.parse().expect("integer"))
                .collect();
            assert_eq!(ramp[0], u(&phases[0]["global_batch"]));
            let inc = ramp[1];
            for w in phases.windows(2) {
                assert_eq!(u(&w[1]["global_batch"]) - u(&w[0]["global_batch"]), inc);
            }
            // Megatron's k-th increment lands within 10 % of an interval of the plan's switch.
            let delta = ramp[2] as f64 / (phases.len() - 1) as f64;
            for (k, p) in phases.iter().enumerate().skip(1) {
                let off = (u(&p["from_samples"]) as f64 - k as f64 * delta).abs() / delta;
                assert!(off <= 0.10, "{}: switch {k} off by {off}", s.display());
            }
            assert_eq!(
                f["--global-batch-size"].parse::<u64>().expect("batch"),
                u(&phases[phases.len() - 1]["global_batch"])
            );
            assert_eq!(
                f["--train-samples"].parse::<u64>().expect("samples"),
                end_samples
            );
            // The header states the steps Megatron's own ramp arithmetic runs
            // (`update_train_iters`), which are not the plan's: counted here independently.
            let global = f["--global-batch-size"].parse::<u64>().expect("batch");
            let increments = (global - ramp[0]) / ramp[1];
            let per = ramp[2] as f64 / increments as f64;
            let (mut steps, mut consumed) = (0u64, 0u64);
            while consumed <= ramp[2] && consumed <= end_samples {
                let b = if consumed > ramp[2] {
                    global
                } else {
                    (ramp[0] + (consumed as f64 / per) as u64 * ramp[1]).min(global)
                };
                consumed += b;
                steps += 1;
            }
            if end_samples > consumed {
                steps += (end_samples - consumed) / global;
            }
            assert!(
                text.contains(&format!(
                    "By Megatron's ramp arithmetic this run takes {steps} steps"
                )),
                "{}: {steps}\n{text}",
                s.display()
            );
        } else {
            assert_eq!(lines.len(), phases.len(), "{}:\n{text}", s.display());
            for (k, (l, p)) in lines.iter().zip(phases).enumerate() {
                assert!(l.starts_with(&format!("PHASE_{}=", k + 1)), "{l}");
                let f = flags(&value(l));
                for (flag, field) in [
                    ("--global-batch-size", "global_batch"),
                    ("--micro-batch-size", "micro_batch"),
                    ("--tensor-model-parallel-size", "tp"),
                    ("--pipeline-model-parallel-size", "pp"),
                ] {
                    assert_eq!(
                        f[flag].parse::<u64>().expect(flag),
                        u(&p[field]),
                        "{} {flag}",
                        s.display()
                    );
                }
                // Megatron-LM's own stop rule: sample-based training runs train_samples /
                // global_batch steps (update_train_iters), and --exit-interval N stops at the
                // first step that is a multiple of N. Each phase must stop at its last step.
                let until = u(&p["until_step"]);
                let batch = u(&p["global_batch"]);
                let train_iters = f["--train-samples"].parse::<u64>().expect("samples") / batch;
                let exit = f
                    .get("--exit-interval")
                    .map(|e| e.parse::<u64>().expect("exit"));
                let from = u(&p["from_step"]);
                let exit_at = exit.map(|e| from / e * e + e);
                let stop = exit_at.map_or(train_iters, |x| x.min(train_iters));
                assert_eq!(stop, until, "{} phase {}: {l}", s.display(), k + 1);
                // The learning-rate schedule spans the whole plan in every phase.
                assert_eq!(
                    f["--lr-decay-samples"].parse::<u64>().expect("decay"),
                    end_samples
                );
                // Megatron checks a resumed run's scheduler against its checkpoint's, and in
                // sample-based training the weight-decay increment spans --train-samples: one
                // value for every phase, or phase 2 stops with "total number of weight decay
                // iterations do not match".
                let first = flags(&value(lines[0]));
                assert_eq!(
                    f["--train-samples"],
                    first["--train-samples"],
                    "{} phase {}",
                    s.display(),
                    k + 1
                );
            }
        }

        // torchtitan: a TOML document per phase.
        let text = run(&s, &["--emit", "torchtitan"]);
        let docs: Vec<&str> = text.split("\n# ==== phase ").skip(1).collect();
        assert_eq!(docs.len(), phases.len(), "{}", s.display());
        for (doc, p) in docs.iter().zip(phases) {
            let t: toml::Table = toml::from_str(doc.split_once('\n').expect("marker line").1)
                .unwrap_or_else(|e| panic!("{}: {e}\n{doc}", s.display()));
            let int = |sec: &str, k: &str| {
                t[sec][k]
                    .as_integer()
                    .unwrap_or_else(|| panic!("{sec}.{k}")) as u64
            };
            assert_eq!(int("training", "global_batch_size"), u(&p["global_batch"]));
            assert_eq!(int("training", "steps"), u(&p["until_step"]));
            // The checkpoint a phase ends with keeps what the next one resumes from, and the
            // learning rate decays only in the last phase, from within it: torchtitan's
            // schedule spans training.steps, which each phase changes.
            assert_eq!(
                t["checkpoint"]["last_save_model_only"].as_bool(),
                Some(false)
            );
            let ratio = t["lr_scheduler"]["decay_ratio"]
                .as_float()
                .expect("decay_ratio");
            let last = u(&p["until_step"]) == u(&emitted["end"]["step"]);
            if last {
                let decay_from = u(&p["until_step"]) as f64 * (1.0 - ratio);
                assert!(ratio > 0.0 && decay_from >= u(&p["from_step"]) as f64 - 1.0);
            } else {
                assert_eq!(ratio, 0.0);
            }
            let dp = int("parallelism", "data_parallel_replicate_degree")
                * int("parallelism", "data_parallel_shard_degree");
            assert_eq!(dp, u(&p["dp"]));
            assert_eq!(int("parallelism", "tensor_parallel_degree"), u(&p["tp"]));
            assert_eq!(int("parallelism", "pipeline_parallel_degree"), u(&p["pp"]));
            // torchtitan's accumulation: global / (local · dp) without a pipeline.
            if u(&p["pp"]) == 1 {
                assert_eq!(
                    int("training", "global_batch_size")
                        / (int("training", "local_batch_size") * dp),
                    u(&p["accumulation"])
                );
            }
        }

        // DeepSpeed: JSON, train_batch_size = micro × accumulation × dp.
        let ds: Value = run_json(&s, &["--emit", "deepspeed"]);
        let ds_phases = ds["phases"].as_array().expect("phases");
        assert_eq!(ds_phases.len(), phases.len());
        for (d, p) in ds_phases.iter().zip(phases) {
            let c = &d["ds_config"];
            assert_eq!(u(&c["train_batch_size"]), u(&p["global_batch"]));
            assert_eq!(
                u(&c["train_micro_batch_size_per_gpu"])
                    * u(&c["gradient_accumulation_steps"])
                    * u(&d["dp"]),
                u(&c["train_batch_size"])
            );
            assert_eq!(u(&c["zero_optimization"]["stage"]), u(&p["zero"]));
            // The Megatron-DeepSpeed arguments: one argv item per flag and per value, the
            // batch flags agreeing with ds_config.
            let args: Vec<&str> = ds_args(d);
            assert!(args.iter().all(|a| !a.contains(' ')), "{args:?}");
            let value = |flag: &str| -> u64 {
                let i = args.iter().position(|a| *a == flag).expect(flag);
                args[i + 1].parse().expect("number")
            };
            assert_eq!(value("--global-batch-size"), u(&c["train_batch_size"]));
            assert_eq!(
                value("--micro-batch-size"),
                u(&c["train_micro_batch_size_per_gpu"])
            );
            assert_eq!(value("--tensor-model-parallel-size"), u(&p["tp"]));
            // Megatron-DeepSpeed takes Megatron-LM's stop rule: each phase stops at its last
            // step, with one --train-samples and the whole plan's --lr-decay-samples.
            let train_iters = value("--train-samples") / u(&p["global_batch"]);
            let from = u(&p["from_step"]);
            let exit_at = args
                .iter()
                .position(|a| *a == "--exit-interval")
                .map(|i| args[i + 1].parse::<u64>().expect("exit"))
                .map(|e| from / e * e + e);
            let stop = exit_at.map_or(train_iters, |x| x.min(train_iters));
            assert_eq!(stop, u(&p["until_step"]), "{}: {args:?}", s.display());
            assert_eq!(value("--lr-decay-samples"), end_samples);
            let first: Vec<&str> = ds_args(&ds_phases[0]);
            let at = first
                .iter()
                .position(|a| *a == "--train-samples")
                .expect("--train-samples");
            assert_eq!(value("--train-samples").to_string(), first[at + 1]);
        }
    }
}

fn demo_report() -> (copus::plan::PlanReport, EmitContext) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("sessions/demo.ron");
    let r = copus::session::Session::load(&path)
        .expect("load")
        .resolve(&path)
        .expect("resolve");
    let rep = copus::pipeline::plan_session(&r).expect("plan");
    let c = &r.session.cluster;
    let ctx = EmitContext {
        gpus: c.nodes * c.gpus_per_node,
        seq_len: r.model.seq_len,
        layers: r.model.layers,
        kv_heads: r.model.kv_heads,
        moe: r.model.moe.is_some(),
        hsdp_shard_gpus: r.efficiency().hsdp_shard_gpus,
        notes: Vec::new(),
    };
    (rep, ctx)
}

/// The demo's plan with its first phase moved to `dp·tp·pp` at batch 32 and its
/// configuration changed (the batch fixed here, whatever the plan chose: the cases below
/// are about how a configuration is written, not about the plan).
fn changed(
    dp: u32,
    tp: u32,
    pp: u32,
    mbs: u32,
    zero: u8,
    recompute: &str,
    vpp: u32,
) -> (copus::plan::PlanReport, EmitContext) {
    let (mut rep, ctx) = demo_report();
    let st = &mut rep.schedule[0].state;
    st.batch = 32;
    st.dp = dp;
    st.tp = tp;
    st.pp = pp;
    let c = st.config.as_mut().expect("config");
    c.dp = dp;
    c.tp = tp;
    c.pp = pp;
    c.mbs = mbs;
    c.zero = zero;
    c.recompute = recompute.into();
    c.vpp = vpp;
    (rep, ctx)
}

#[test]
fn pipelines_interleaving_zero_and_recompute_are_written_or_refused_by_name() {
    // 8 × 2 × 4 = 64 GPUs, batch 32 = 8 dp × 1 micro × 4 accumulation, 32 layers / (4 · 2).
    let (rep, ctx) = changed(8, 2, 4, 1, 1, "full", 2);
    let m = emit(&rep, &ctx, EmitTarget::Megatron).expect("megatron");
    let first = m
        .lines()
        .find(|l| l.starts_with("PHASE_1="))
        .expect("phase 1");
    assert!(
        first.contains("--num-layers-per-virtual-pipeline-stage 4"),
        "{first}"
    );
    assert!(first.contains("--recompute-granularity full"), "{first}");
    let t = emit(&rep, &ctx, EmitTarget::Torchtitan).expect("torchtitan");
    let doc = t.split("\n# ==== phase ").nth(1).expect("phase 1");
    let tt: toml::Table = toml::from_str(doc.split_once('\n').expect("marker").1).expect("TOML");
    assert_eq!(
        tt["parallelism"]["pipeline_parallel_schedule"].as_str(),
        Some("Interleaved1F1B")
    );
    assert_eq!(
        tt["parallelism"]["pipeline_parallel_layers_per_stage"].as_integer(),
        Some(4)
    );
    // torchtitan's own stage count: ceil((layers + first_less + last_less) / layers_per_stage)
    // virtual stages, which must be pp · vpp (its two "less layers" default to 1: written as
    // 0, or 32 layers in stages of 4 make 9 stages and torchtitan refuses PP 4).
    let int = |k: &str| u64::try_from(tt["parallelism"][k].as_integer().expect(k)).expect(k);
    let stages = (32
        + int("pipeline_parallel_first_stage_less_layers")
        + int("pipeline_parallel_last_stage_less_layers"))
    .div_ceil(int("pipeline_parallel_layers_per_stage"));
    assert_eq!(stages, 4 * 2);
    // A rank's pipeline takes all four micro-batches of a step as its local batch (and the
    // phase's comment calls them the schedule's, not gradient accumulation).
    assert_eq!(tt["training"]["local_batch_size"].as_integer(), Some(4));
    assert!(
        t.contains("global batch 32 = 8 dp × 1 micro × 4 pipeline micro-batches"),
        "{t}"
    );
    assert_eq!(tt["activation_checkpoint"]["mode"].as_str(), Some("full"));
    // DeepSpeed's pipeline has no virtual stages: refused, naming the phase.
    match emit(&rep, &ctx, EmitTarget::Deepspeed) {
        Err(EmitError::Inexpressible {
            phase: 1,
            target: "DeepSpeed",
            why,
            ..
        }) => {
            assert!(why.contains("interleaved"), "{why}")
        }
        other => panic!("{other:?}"),
    }
    // ZeRO-3 with a pipeline: DeepSpeed refuses, Megatron writes Megatron-FSDP.
    let (rep, ctx) = changed(8, 2, 4, 1, 3, "none", 1);
    let e = emit(&rep, &ctx, EmitTarget::Deepspeed).expect_err("ZeRO-3 + PP");
    assert!(
        e.to_string().contains("phase 1") && e.to_string().contains("ZeRO-3"),
        "{e}"
    );
    let m = emit(&rep, &ctx, EmitTarget::Megatron).expect("megatron");
    assert!(
        m.contains("--data-parallel-sharding-strategy optim_grads_params"),
        "{m}"
    );
    // Its checkpoints are fsdp_dtensor, not the torch_dist the header asks for on a TP/PP
    // change: the header says so instead of contradicting the arguments.
    assert!(
        m.contains("--ckpt-format fsdp_dtensor checkpoints, not torch_dist"),
        "{m}"
    );
    // ZeRO-0 beside TP is DDP with another parallelism, which torchtitan refuses ("DDP has
    // not supported > 1D parallelism"): refused by name, not written as a replicate degree.
    let (rep, ctx) = changed(32, 2, 1, 1, 0, "none", 1);
    let e = emit(&rep, &ctx, EmitTarget::Torchtitan).expect_err("DDP with TP");
    assert!(
        e.to_string().contains("phase 1") && e.to_string().contains("DDP"),
        "{e}"
    );
    // Op-level checkpointing is torchtitan's policy: Megatron refuses it by name.
    let (rep, ctx) = changed(32, 2, 1, 1, 1, "op", 1);
    let e = emit(&rep, &ctx, EmitTarget::Megatron).expect_err("op recompute");
    assert!(e.to_string().contains("recompute 'op'"), "{e}");
    let t = emit(&rep, &ctx, EmitTarget::Torchtitan).expect("torchtitan");
    assert!(
        t.contains("mode = \"selective\"") && t.contains("selective_ac_option = \"op\""),
        "{t}"
    );
}

#[test]
fn a_phase_that_breaks_divisibility_or_the_gpu_count_is_named() {
    // batch 32 on dp 32 with micro-batch 2 is not a whole number of micro-batches.
    let (rep, ctx) = changed(32, 2, 1, 2, 1, "none", 1);
    for target in [
        EmitTarget::Json,
        EmitTarget::Megatron,
        EmitTarget::Torchtitan,
        EmitTarget::Deepspeed,
    ] {
        let e = emit(&rep, &ctx, target).expect_err("indivisible");
        let msg = e.to_string();
        assert!(
            msg.contains("phase 1") && msg.contains("not a whole number of micro-batches"),
            "{msg}"
        );
    }
    // 16 × 2 × 1 = 32 of the cluster's 64 GPUs.
    let (rep, ctx) = changed(16, 2, 1, 1, 1, "none", 1);
    let e = emit(&rep, &ctx, EmitTarget::Json).expect_err("GPU count");
    assert!(e.to_string().contains("cluster has 64 GPUs"), "{e}");
    // Uneven pipeline stages: 32 layers on PP 3 (on a 24-GPU cluster, the first phase alone)
    // are 10, 11, 11, the short stage first as copus costs it; with an interleaved schedule,
    // refused.
    let (mut rep, mut ctx) = changed(8, 1, 3, 1, 1, "none", 1);
    rep.schedule.truncate(1);
    ctx.gpus = 24;
    let m = emit(&rep, &ctx, EmitTarget::Megatron).expect("uneven stages");
    let phase = megatron_phases(&m).remove(0);
    let f = flags(&phase);
    assert_eq!(f["--decoder-first-pipeline-num-layers"], "10", "{phase}");
    assert!(
        !f.contains_key("--decoder-last-pipeline-num-layers"),
        "{phase}"
    );
    let t = emit(&rep, &ctx, EmitTarget::Torchtitan).expect("uneven stages");
    for line in [
        "pipeline_parallel_layers_per_stage = 11",
        "pipeline_parallel_first_stage_less_layers = 1",
        "pipeline_parallel_last_stage_less_layers = 0",
    ] {
        assert!(t.contains(line), "{line}: {t}");
    }
    let (mut rep, mut ctx) = changed(4, 1, 3, 2, 1, "none", 3);
    rep.schedule.truncate(1);
    ctx.gpus = 12;
    let e = emit(&rep, &ctx, EmitTarget::Megatron).expect_err("uneven and interleaved");
    assert!(e.to_string().contains("do not split evenly"), "{e}");
    // torchtitan could split it, but its middle stages would hold 3 × 4 = 12 layers where the
    // plan costs ⌈32/3⌉ = 11: refused too.
    let e = emit(&rep, &ctx, EmitTarget::Torchtitan).expect_err("not the plan's split");
    assert!(e.to_string().contains("where the plan costs 11"), "{e}");
    // 32 layers on PP 6 × VPP 2: torchtitan's counts would make virtual stages of 3 with the
    // ends 1, so the devices hold 4, 6, 6, 6, 6, 4 layers, where the plan costs the ends split
    // of four short stages, 5, 5, 6, 6, 5, 5: refused.
    let (mut rep, mut ctx) = changed(2, 1, 6, 2, 1, "none", 2);
    rep.schedule.truncate(1);
    ctx.gpus = 12;
    let e = emit(&rep, &ctx, EmitTarget::Torchtitan).expect_err("not the plan's split");
    assert!(
        e.to_string()
            .contains("5 ×2, 6 ×2, 5 ×2 (4 short stages at the ends)"),
        "{e}"
    );
    // 126 layers on PP 8 × VPP 2 (two short stages, as Llama 3 405B ran): virtual stages of
    // 8, the ends 7, the devices 15, 16 × 6, 15 as costed.
    let (mut rep, mut ctx) = changed(2, 1, 8, 2, 1, "none", 2);
    rep.schedule.truncate(1);
    ctx.gpus = 16;
    ctx.layers = 126;
    let t = emit(&rep, &ctx, EmitTarget::Torchtitan).expect("torchtitan splits it");
    for line in [
        "pipeline_parallel_layers_per_stage = 8",
        "pipeline_parallel_first_stage_less_layers = 1",
        "pipeline_parallel_last_stage_less_layers = 1",
    ] {
        assert!(t.contains(line), "{line}: {t}");
    }
}

#[test]
fn emit_errors_name_the_session_and_the_target_through_the_binary() {
    let out = Command::new(env!("CARGO_BIN_EXE_copus"))
        .args(["plan", "sessions/demo.ron", "--emit", "json", "--json"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot be used with"));
}

#[test]
fn a_schedule_for_another_framework_than_the_plans_stack_says_so() {
    let text = run(Path::new("sessions/demo.ron"), &["--emit", "torchtitan"]);
    assert!(
        text.contains("note: this plan was costed for the megatron-core stack, not for torchtitan"),
        "{text}"
    );
    let own = run(
        Path::new("sessions/demo.ron"),
        &["--emit", "torchtitan", "--stack", "torchtitan-fsdp2"],
    );
    assert!(!own.contains("note: this plan was costed"), "{own}");
    let megatron = run(Path::new("sessions/demo.ron"), &["--emit", "megatron"]);
    assert!(!megatron.contains("note: this plan was costed"));
    let ds: Value = run_json(Path::new("sessions/demo.ron"), &["--emit", "deepspeed"]);
    assert!(
        ds["note"]
            .as_str()
            .is_some_and(|n| n.contains("--stack deepspeed") && !n.starts_with("note")),
        "{ds}"
    );
}

/// The `PHASE_N="…"` argument strings of a Megatron script.
fn megatron_phases(script: &str) -> Vec<String> {
    script
        .lines()
        .filter_map(|l| l.strip_prefix("PHASE_"))
        .filter_map(|l| {
            l.split_once("=\"")
                .map(|(_, a)| a.trim_end_matches('"').to_string())
        })
        .collect()
}

#[test]
fn megatron_arguments_reduce_gradients_in_the_dtype_the_plan_was_costed_with() {
    // NeMo's recipes reduce gradients in BF16 (2 bytes a gradient): a layout the plan fits
    // that way needs `--grad-reduce-in-bf16`, or Megatron reduces in FP32 and runs out of
    // memory. The same for a stack told `--grad-reduce bf16`; absent for FP32 reduction.
    let demo = Path::new("sessions/demo.ron");
    for (args, bf16) in [
        (&["--stack", "nemo"][..], true),
        (
            &["--stack", "megatron-core", "--grad-reduce", "bf16"][..],
            true,
        ),
        (&["--stack", "megatron-core"][..], false),
    ] {
        let mut all = vec![
            "--emit",
            "megatron",
            "--model",
            "llama3-8b",
            "--nodes",
            "16",
        ];
        all.extend_from_slice(args);
        let script = run(demo, &all);
        let phases = megatron_phases(&script);
        assert!(!phases.is_empty(), "{script}");
        for p in &phases {
            assert_eq!(
                flags(p).contains_key("--grad-reduce-in-bf16"),
                bf16,
                "{args:?}: {p}"
            );
        }
    }
}

#[test]
fn plan_text_names_the_trainers_step_of_each_switch_and_the_plans_total() {
    // The text gives the trajectory's step (the explorer's) and, under it, the step a trainer
    // following the plan reads, as `plan --json` (`plan_steps`) and `--emit` do.
    let session = Path::new("sessions/demo.ron");
    let text = run(session, &[]);
    let plan: Value = run_json(session, &["--json"]);
    let emitted: Value = run_json(session, &["--emit", "json"]);
    let switches = plan["switches"].as_array().expect("switches");
    assert!(!switches.is_empty());
    for s in switches {
        let line = format!("the trainer's step {} (", u(&s["plan_steps"]));
        assert!(text.contains(&line), "{line}\n{text}");
    }
    let total = format!(
        // The model's samples are its sequences (as the explorer names them).
        "the plan runs {} steps, {} sequences",
        u(&emitted["end"]["step"]),
        u(&emitted["end"]["samples"])
    );
    assert!(text.contains(&total), "{total}\n{text}");
    // Every shipped session, one-run plans too: the total's tokens are the emitted ones (a
    // plan without a switch read "0 tokens").
    for s in shipped() {
        let text = run(&s, &[]);
        let megatron = run(&s, &["--emit", "megatron"]);
        let tokens = megatron
            .split(" samples (")
            .nth(1)
            .and_then(|t| t.split(" tokens)").next())
            .expect("the emit header's tokens");
        assert!(
            text.contains(&format!(" sequences ({tokens} tokens) in all")),
            "{}: {tokens}\n{text}",
            s.display()
        );
    }
}

#[test]
fn plan_text_names_the_batches_it_added_to_the_sessions_axis() {
    // 7 nodes of 8 GPUs: no power of two divides over 56 data-parallel ranks, so the grid adds
    // the nearest multiples of 56; the plan says so (it planned at B=56 silently).
    let dir = tempfile::tempdir().expect("tempdir");
    let text = std::fs::read_to_string("sessions/demo.ron")
        .expect("demo")
        .replace("nodes: 8,", "nodes: 7,");
    let session = dir.path().join("seven.ron");
    std::fs::write(&session, text).expect("write");
    let out = run(&session, &[]);
    assert!(
        out.contains("batch axis: the session's batch_sizes and 56, 112, 168"),
        "{out}"
    );
    let plan: Value = run_json(&session, &["--json"]);
    assert_eq!(plan["added_batches"][0], 56);
    let own = run(Path::new("sessions/demo.ron"), &[]);
    assert!(!own.contains("batch axis:"), "64 GPUs add nothing");
}

#[test]
fn what_a_plan_rests_on_beyond_the_session_is_written_into_every_document() {
    let (rep, mut ctx) = demo_report();
    ctx.notes =
        vec!["the command line changed the session's nodes to 16 (was 8)\nsecond line".into()];
    let m = emit(&rep, &ctx, EmitTarget::Megatron).expect("megatron");
    assert!(
        m.lines().any(|l| l
            == "# note: the command line changed the session's nodes to 16 (was 8) second line"),
        "{m}"
    );
    let t = emit(&rep, &ctx, EmitTarget::Torchtitan).expect("torchtitan");
    assert!(t.contains("# note: the command line changed"), "{t}");
    for target in [EmitTarget::Json, EmitTarget::Deepspeed] {
        let doc: serde_json::Value =
            serde_json::from_str(&emit(&rep, &ctx, target).expect("json")).expect("parses");
        assert_eq!(
            doc["notes"][0].as_str().map(|s| s.contains("nodes to 16")),
            Some(true),
            "{doc}"
        );
    }
    // Without notes of the command line, only what the schedule leaves to the user: the
    // learning rate the objective assumes, and that it trains on fewer tokens than the
    // trajectory's axis counts.
    ctx.notes.clear();
    let doc: serde_json::Value =
        serde_json::from_str(&emit(&rep, &ctx, EmitTarget::Json).expect("json")).expect("parses");
    let notes = doc["notes"].as_array().expect("notes");
    assert_eq!(notes.len(), 2, "{doc}");
    assert!(
        notes[0]
            .as_str()
            .is_some_and(|n| n.starts_with("the plan assumes the learning rate")),
        "{doc}"
    );
    assert!(
        notes[1]
            .as_str()
            .is_some_and(|n| n.starts_with("this schedule ends at") && n.contains("fewer tokens")),
        "{doc}"
    );
}

/// A schedule whose layout changes resumes in every framework: Megatron's distributed
/// optimizer saved fully reshardable, torchtitan's data loader not loaded across a change of
/// the DP degree (it refuses to), Megatron-DeepSpeed told the ZeRO stage and the universal
/// checkpoint; a plan costed with in-place switches says it is written as restarts.
#[test]
fn a_layout_change_resumes_in_every_framework() {
    let demo = Path::new("demo");
    let m = run(demo, &["--reshard", "in-place", "--emit", "megatron"]);
    let phases = megatron_phases(&m);
    assert!(phases.len() > 1, "{m}");
    for p in &phases {
        let f = flags(p);
        if f.contains_key("--use-distributed-optimizer") {
            assert!(f.contains_key("--dist-ckpt-optim-fully-reshardable"), "{p}");
        }
    }
    assert!(
        m.contains("the plan costed its TP/PP switches as in-place resharding"),
        "{m}"
    );

    let t = run(demo, &["--zero", "3", "--emit", "torchtitan"]);
    // (The header names the marker too: "each after a '# ==== phase K of N ====' line".)
    let docs: Vec<&str> = t
        .split("# ==== phase ")
        .filter(|d| d.starts_with(|c: char| c.is_ascii_digit()))
        .collect();
    assert!(docs.len() > 1, "{t}");
    let shard = |d: &str| {
        d.lines()
            .find_map(|l| l.strip_prefix("data_parallel_shard_degree = "))
            .map(str::to_string)
    };
    for w in docs.windows(2) {
        let excluded = w[1].contains("exclude_from_loading = [\"dataloader\"]");
        assert_eq!(excluded, shard(w[0]) != shard(w[1]), "{}", w[1]);
    }
    assert!(
        docs.iter().any(|d| d.contains("exclude_from_loading")),
        "{t}"
    );

    let d: Value = run_json(demo, &["--zero", "3", "--emit", "deepspeed"]);
    let phases = d["phases"].as_array().expect("phases");
    for (i, p) in phases.iter().enumerate() {
        let args: Vec<&str> = ds_args(p);
        let stage = args
            .iter()
            .position(|a| *a == "--zero-stage")
            .expect("--zero-stage");
        assert_eq!(
            args[stage + 1],
            p["ds_config"]["zero_optimization"]["stage"].to_string()
        );
        let changed = i > 0 && (p["tp"] != phases[i - 1]["tp"] || p["pp"] != phases[i - 1]["pp"]);
        assert_eq!(
            args.contains(&"--universal-checkpoint"),
            changed,
            "{args:?}"
        );
    }
    assert!(
        t.contains("keep lr_scheduler.warmup_steps within the first phase"),
        "{t}"
    );

    // From the plain engine to the pipeline engine: said; full recompute read by DeepSpeed.
    let d: Value = run_json(
        demo,
        &[
            "--model",
            "llama3-70b",
            "--nodes",
            "8",
            "--recompute",
            "full",
            "--emit",
            "deepspeed",
        ],
    );
    let pps: Vec<u64> = d["phases"]
        .as_array()
        .expect("phases")
        .iter()
        .map(|p| u(&p["pp"]))
        .collect();
    let crosses = pps.windows(2).any(|w| (w[0] > 1) != (w[1] > 1));
    assert!(crosses, "{pps:?}");
    assert!(
        d["notes"]
            .to_string()
            .contains("plain engine (PP 1) and its pipeline engine"),
        "{}",
        d["notes"]
    );
    for p in d["phases"].as_array().expect("phases") {
        let args = p["megatron_deepspeed_args"].to_string();
        assert_eq!(
            args.contains("--checkpoint-activations"),
            args.contains("--deepspeed-activation-checkpointing"),
            "{args}"
        );
    }

    // Context parallelism exchanges keys and values as the plan costed it, in Megatron too.
    for (comm, kind) in [
        ("ring", "p2p"),
        ("all-gather", "allgather"),
        ("all-to-all", "a2a"),
    ] {
        let m = run(
            demo,
            &["--cp", "2", "--cp-comm", comm, "--emit", "megatron"],
        );
        for p in megatron_phases(&m) {
            let f = flags(&p);
            if f.contains_key("--context-parallel-size") {
                assert_eq!(f["--cp-comm-type"], kind, "{p}");
            }
        }
    }
    for (stack, method) in [
        ("torchtitan-fsdp2", "allgather"),
        ("megatron-core", "alltoall"),
    ] {
        let t = run(
            demo,
            &[
                "--model",
                "llama3-8b",
                "--seq",
                "131072",
                "--cp",
                "1,2,4,8",
                "--stack",
                stack,
                "--emit",
                "torchtitan",
            ],
        );
        let mut with_cp = 0;
        for d in t
            .split("# ==== phase ")
            .filter(|d| d.starts_with(|c: char| c.is_ascii_digit()))
        {
            let no_cp = d.contains("context_parallel_degree = 1\n");
            let line = format!("context_parallel_rotate_method = \"{method}\"");
            assert_eq!(!no_cp, d.contains(&line), "{stack}: {d}");
            with_cp += usize::from(!no_cp);
        }
        assert!(with_cp > 0, "{stack}: {t}");
    }
}

/// A plan written for a framework is searched within what that framework can express: a
/// torchtitan-costed plan (op-level recompute) written for Megatron was refused before with
/// "cannot express it"; now it is planned over what runs there, and the note counts what was
/// left out and what it costs. DeepSpeed writes uneven pipeline stages (its pipelined model
/// balances transformer layers), with the flags Megatron-DeepSpeed needs to start its engine.
#[test]
fn emit_plans_only_what_the_framework_can_express() {
    let session = Path::new("sessions/paper-measured-32b-32xh100.ron");
    let script = run(
        session,
        &["--stack", "torchtitan-fsdp2", "--emit", "megatron"],
    );
    assert!(
        script
            .contains("# note: the plan searched only the configurations Megatron-LM can express"),
        "{script}"
    );
    assert!(script.contains("rc:op: recompute 'op'"), "{script}");
    assert!(script.contains("within them the plan takes"), "{script}");
    let plain = run(session, &["--stack", "torchtitan-fsdp2", "--json"]);
    assert!(plain.contains("\"recompute\":\"op\""), "{plain}");

    let doc: Value = run_json(
        Path::new("sessions/demo.ron"),
        &[
            "--model",
            "llama3-405b",
            "--nodes",
            "128",
            "--stack",
            "deepspeed",
            "--emit",
            "deepspeed",
        ],
    );
    let phases = doc["phases"].as_array().expect("phases");
    assert!(!phases.is_empty());
    let notes = doc["notes"].to_string();
    for p in phases {
        // Uneven stages are written as DeepSpeed's balanced partition splits them, the split
        // the DeepSpeed stack costs: the note says how.
        let pp = u(&p["pp"]);
        if 126 % pp != 0 {
            let split = format!("126 layers on {pp} pipeline stages: DeepSpeed's pipeline engine");
            assert!(
                notes.contains(&split) && notes.contains("as copus costs them"),
                "{notes}"
            );
        }
        let args: Vec<&str> = ds_args(p);
        let at = args
            .iter()
            .position(|&a| a == "--deepspeed_config")
            .expect("--deepspeed_config");
        assert!(
            args.contains(&"--deepspeed") && args.contains(&"--bf16"),
            "{args:?}"
        );
        assert_eq!(
            args.get(at + 1).copied(),
            Some(format!("ds_config_phase{}.json", u(&p["phase"])).as_str())
        );
    }
    // Under the DeepSpeed stack the plan is costed with DeepSpeed's own split: written as made.
    let v: Value = run_json(
        Path::new("sessions/demo.ron"),
        &[
            "--model",
            "llama3-405b",
            "--nodes",
            "128",
            "--stack",
            "deepspeed",
            "--json",
        ],
    );
    let ds = v["emit_targets"]
        .as_array()
        .and_then(|f| f.iter().find(|f| f["target"] == "deepspeed"))
        .expect("deepspeed");
    assert_eq!(ds["writes_as_planned"], true, "{ds}");
    assert_eq!(ds["costed_for_it"], true, "{ds}");

    // Context parallelism costed as DeepSpeed-Ulysses (the DeepSpeed stack's exchange) is
    // written as Megatron-DeepSpeed's sequence-parallel size: the ranks dp·tp·pp leaves.
    let doc: Value = run_json(
        Path::new("sessions/demo.ron"),
        &[
            "--model",
            "llama3-8b",
            "--nodes",
            "4",
            "--seq",
            "65536",
            "--cp",
            "1,2,4,8",
            "--stack",
            "deepspeed",
            "--emit",
            "deepspeed",
        ],
    );
    let mut ulysses = 0;
    for p in doc["phases"].as_array().expect("phases") {
        let args: Vec<&str> = ds_args(p);
        let cp = 32 / (u(&p["dp"]) * u(&p["tp"]) * u(&p["pp"]));
        match args
            .iter()
            .position(|&a| a == "--ds-sequence-parallel-size")
        {
            Some(at) => {
                assert_eq!(args[at + 1], cp.to_string(), "{args:?}");
                assert!(!args.contains(&"--sequence-parallel"), "{args:?}");
                ulysses += 1;
            }
            None => assert_eq!(cp, 1, "{args:?}"),
        }
    }
    assert!(ulysses > 0, "{doc}");

    // `plan` says beforehand which frameworks run its plan as made: DeepSpeed has no FP8
    // setting, so nothing within its limits runs an FP8 plan.
    let fp8 = [
        "--model",
        "llama3-405b",
        "--nodes",
        "16",
        "--precision",
        "fp8",
    ];
    let v: Value = run_json(
        Path::new("sessions/demo.ron"),
        &[&fp8[..], &["--json"]].concat(),
    );
    let fits = v["emit_targets"].as_array().expect("emit_targets");
    let fit = |t: &str| {
        fits.iter()
            .find(|f| f["target"] == t)
            .expect("target")
            .clone()
    };
    assert_eq!(fit("megatron")["writes_as_planned"], true, "{fits:?}");
    assert!(fit("megatron")["why"].is_null());
    assert!(fit("megatron")["plannable_within_limits"].is_null());
    assert_eq!(fit("deepspeed")["writes_as_planned"], false, "{fits:?}");
    // ... and nothing within DeepSpeed's limits runs there (as `--emit deepspeed` finds below).
    assert_eq!(
        fit("deepspeed")["plannable_within_limits"],
        false,
        "{fits:?}"
    );
    assert!(
        fit("deepspeed")["why"]
            .as_str()
            .is_some_and(|w| w.contains("FP8 GEMMs"))
    );
    // The text wraps at 100 columns: compared with its whitespace folded.
    let text = run(Path::new("sessions/demo.ron"), &fp8)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        text.contains("frameworks: Megatron-LM, torchtitan can write this plan's phases as they"),
        "{text}"
    );
    assert!(
        text.contains("nothing within its limits runs here"),
        "{text}"
    );

    // A one-phase Megatron script speaks of one run: no resume, no --exit-interval.
    let one = run(
        Path::new("sessions/demo.ron"),
        &[
            "--model",
            "llama3-8b",
            "--nodes",
            "4",
            "--stack",
            "deepspeed",
            "--emit",
            "megatron",
        ],
    );
    assert!(
        one.contains("# 1 phase, one Megatron run to the plan's end"),
        "{one}"
    );
    assert!(
        !one.contains("--exit-interval") && !one.contains("the one before"),
        "{one}"
    );

    // A plan costed for Megatron-Core (short stages at the ends) is not written for DeepSpeed,
    // whose engine fills the first stages: planned within its limits, nothing runs here.
    let demo = Path::new("sessions/demo.ron");
    let err = fails(
        demo,
        &[
            "--model",
            "llama3-405b",
            "--nodes",
            "16",
            "--emit",
            "deepspeed",
        ],
    );
    assert!(
        err.contains("nothing to plan for DeepSpeed")
            && err.contains("costed as the ends split puts them")
            && err.contains("--stage-split balanced"),
        "{err}"
    );
    // Where the framework's limits leave nothing, the error says so: DeepSpeed's
    // configuration has no FP8.
    let err = fails(
        demo,
        &[
            "--stack",
            "deepspeed",
            "--precision",
            "fp8",
            "--emit",
            "deepspeed",
        ],
    );
    assert!(
        err.contains("nothing to plan for DeepSpeed") && err.contains("FP8 GEMMs"),
        "{err}"
    );
}

/// HSDP is written as HSDP: torchtitan's shard degree is the shard group the plan costed and
/// the replicate degree the rest of the data-parallel ranks (it wrote full FSDP over every
/// data-parallel rank: another memory and traffic than priced). FSDP's ZeRO-3 with pipeline
/// stages is shown and written as the ZeRO-1 PyTorch's pipeline schedules run.
#[test]
fn hsdp_and_pipelined_fsdp_are_written_as_costed() {
    let s = Path::new(env!("CARGO_MANIFEST_DIR")).join("sessions/demo.ron");
    let stack = ["--stack", "torchtitan-fsdp2", "--zero", "3"];
    let docs = |extra: &[&str]| -> Vec<(String, toml::Table)> {
        let args: Vec<&str> = stack.iter().chain(extra).copied().collect();
        let text = run(&s, &[&args[..], &["--emit", "torchtitan"]].concat());
        text.split("\n# ==== phase ")
            .skip(1)
            .map(|d| {
                let body = d.split_once('\n').expect("marker").1;
                (body.to_string(), toml::from_str(body).expect("TOML"))
            })
            .collect()
    };
    let int = |t: &toml::Table, k: &str| t["parallelism"][k].as_integer().expect(k);
    let hsdp = docs(&["--sharding", "hsdp"]);
    assert!(!hsdp.is_empty());
    for (body, t) in &hsdp {
        let (tp, dp) = (
            int(t, "tensor_parallel_degree"),
            int(t, "data_parallel_replicate_degree") * int(t, "data_parallel_shard_degree"),
        );
        // 8 GPUs a node: the shard group is the node's data-parallel ranks.
        assert_eq!(
            int(t, "data_parallel_shard_degree"),
            (8 / tp).min(dp),
            "{body}"
        );
        assert!(int(t, "data_parallel_replicate_degree") > 1, "{body}");
        assert!(body.contains("# HSDP: parameters sharded over"), "{body}");
    }
    // A pipelined phase at ZeRO-1 (what FSDP's ZeRO-3 with PP runs and is shown as): written
    // as torchtitan's default FSDP, whose pipeline schedules hold gradients until the last
    // micro-batch.
    let (rep, ctx) = changed(8, 2, 4, 1, 1, "full", 2);
    let t = emit(&rep, &ctx, EmitTarget::Torchtitan).expect("torchtitan");
    let doc = t.split("\n# ==== phase ").nth(1).expect("phase 1");
    let body = doc.split_once('\n').expect("marker").1;
    let tt: toml::Table = toml::from_str(body).expect("TOML");
    assert_eq!(int(&tt, "pipeline_parallel_degree"), 4, "{body}");
    assert_eq!(
        tt["parallelism"]["fsdp_reshard_after_forward"].as_str(),
        Some("default"),
        "{body}"
    );
    assert_eq!(int(&tt, "data_parallel_shard_degree"), 8, "{body}");
    assert!(
        body.contains("ZeRO-1 with pipeline stages is torchtitan's FSDP2"),
        "{body}"
    );
}
