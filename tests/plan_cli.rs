//! `copus plan` on the shipped sessions, through the binary.

use std::path::Path;
use std::process::Command;

fn copus_plan(session: &Path, json: bool) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_copus"));
    cmd.arg("plan").arg(session);
    if json {
        cmd.arg("--json");
    }
    cmd.output().expect("run copus")
}

/// `copus ARGS…`, its output.
fn copus_run(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_copus"))
        .args(args)
        .output()
        .expect("run copus")
}

const EIGHT: [&str; 8] = [
    "static",
    "static-gbs",
    "cbs-fixed-small",
    "cbs-fixed-large",
    "batch-adaptive",
    "config-adaptive",
    "greedy-joint",
    "optimal-joint",
];

fn plan_json(session: &Path, extra: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_copus"))
        .arg("plan")
        .arg(session)
        .arg("--json")
        .args(extra)
        .output()
        .expect("run copus");
    assert!(
        out.status.success(),
        "{}: {}",
        session.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

fn sessions() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("sessions")
}

#[test]
fn demo_plan_json_has_every_strategy_and_the_optimal_switches() {
    let out = copus_plan(&sessions().join("demo.ron"), true);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let strategies = v["strategies"].as_array().expect("strategies");
    let names: Vec<&str> = strategies
        .iter()
        .filter_map(|s| s["name"].as_str())
        .collect();
    assert_eq!(names, EIGHT);
    let time = |i: usize| strategies[i]["time_s"].as_f64().expect("time_s");
    assert!(
        (strategies[0]["speedup_vs_static"]
            .as_f64()
            .expect("speedup")
            - 1.0)
            .abs()
            < 1e-12
    );
    for (i, s) in strategies.iter().enumerate() {
        assert!(time(i) > 0.0 && time(i).is_finite());
        assert!(
            time(7) <= time(i) * (1.0 + 1e-12),
            "optimal slower than {}",
            s["name"]
        );
        let speedup = s["speedup_vs_static"].as_f64().expect("speedup");
        assert!((speedup - time(0) / time(i)).abs() < 1e-9);
        assert!(s["switches"].as_u64().is_some());
    }
    let at_current = v["current_batch_static"]["time_s"]
        .as_f64()
        .expect("demo has current_batch");
    assert!(
        at_current >= time(0) * (1.0 - 1e-12),
        "static is the best fixed cell"
    );
    let switches = v["switches"].as_array().expect("switches");
    assert_eq!(
        switches.len() as u64,
        strategies[7]["switches"].as_u64().expect("n")
    );
    let mut last = (f64::NEG_INFINITY, 0);
    for s in switches {
        let at = s["at_tokens"].as_f64().expect("at_tokens");
        let step = s["at_step"].as_u64().expect("at_step");
        assert!(at > last.0 && step >= last.1, "switches in order");
        last = (at, step);
        assert!(
            s["from"]
                .as_str()
                .is_some_and(|f| f != s["to"].as_str().unwrap_or(""))
        );
        assert!(s["cost_s"].as_f64().is_some_and(|c| c >= 0.0));
        assert!(["batch", "dp-resize", "reshard"].contains(&s["kind"].as_str().expect("kind")));
    }
}

#[test]
fn every_shipped_session_plans_in_text() {
    let mut n = 0;
    for entry in std::fs::read_dir(sessions()).expect("sessions dir") {
        let path = entry.expect("entry").path();
        if path.extension().is_none_or(|e| e != "ron") {
            continue;
        }
        let out = copus_plan(&path, false);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        for name in EIGHT {
            assert!(
                text.contains(name),
                "{}: no {name} in\n{text}",
                path.display()
            );
        }
        n += 1;
    }
    assert!(n >= 5, "demo and four paper-like sessions, found {n}");
}

#[test]
fn bad_sessions_fail_with_the_file_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("bad.ron");
    let demo = std::fs::read_to_string(sessions().join("demo.ron")).expect("demo");
    let broken = demo.replace(
        "current_batch: Some(512),",
        "costs: (checkpoint_bw_bytes_per_s: 0.0),",
    );
    assert_ne!(broken, demo);
    std::fs::write(&path, broken).expect("write");
    let out = copus_plan(&path, true);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.ron") && err.contains("checkpoint_bw"),
        "{err}"
    );
    let out = copus_plan(&dir.path().join("missing.ron"), false);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing.ron"));
}

#[test]
fn paper_sessions_report_both_speedups_consistently_under_both_objectives() {
    let mut n = 0;
    for entry in std::fs::read_dir(sessions()).expect("sessions dir") {
        let path = entry.expect("entry").path();
        let name = path.file_name().and_then(|f| f.to_str()).unwrap_or("");
        if !name.starts_with("paper-") || !name.ends_with(".ron") {
            continue;
        }
        for objective in ["mccandlish", "lr-sqrt"] {
            let v = plan_json(&path, &["--objective", objective]);
            assert_eq!(v["objective"], objective, "{name}");
            let rows = v["strategies"].as_array().expect("strategies");
            let names: Vec<&str> = rows.iter().filter_map(|s| s["name"].as_str()).collect();
            assert_eq!(names, EIGHT, "{name}");
            let time = |n: &str| {
                rows.iter()
                    .find(|s| s["name"] == n)
                    .and_then(|s| s["time_s"].as_f64())
                    .expect("time")
            };
            let opt = time("optimal-joint");
            for s in EIGHT {
                assert!(opt <= time(s) * (1.0 + 1e-12), "{name} {objective}: {s}");
            }
            let fastest = ["static-gbs", "cbs-fixed-small", "cbs-fixed-large"]
                .map(time)
                .into_iter()
                .fold(f64::INFINITY, f64::min);
            let sb = v["speedup_vs_fastest_baseline"].as_f64().expect("field");
            let sh = v["speedup_vs_hindsight_static"].as_f64().expect("field");
            assert!((sb - fastest / opt).abs() < 1e-9, "{name}: {sb}");
            assert!((sh - time("static") / opt).abs() < 1e-9, "{name}: {sh}");
            assert!(sb >= sh - 1e-12, "hindsight static bounds the baselines");
            assert_eq!(time(v["fastest_baseline"].as_str().expect("name")), fastest);
            let kind = v["b_crit"]["kind"].as_str().expect("kind");
            assert!(["noise-scale", "threshold-cbs", "scaling-law", "given"].contains(&kind));
            assert!(v["b_crit"]["factor"].as_f64().is_some_and(|f| f > 0.0));
            assert!(
                v["b_crit"]["factor_source"]
                    .as_str()
                    .is_some_and(|s| !s.is_empty())
            );
            assert_eq!(v["lr_reference_batch"].is_null(), objective == "mccandlish");
        }
        n += 1;
    }
    assert!(n >= 4, "four paper-like sessions, found {n}");
}

#[test]
fn lr_sqrt_batch_grows_with_b_crit_on_the_7b_session() {
    let path = sessions().join("paper-7b-16xh100.ron");
    let batch_of = |label: &str| -> u64 {
        let b = label.split("B=").nth(1).expect("B=");
        b.split(|c: char| !c.is_ascii_digit())
            .next()
            .and_then(|d| d.parse().ok())
            .expect("batch")
    };
    let v = plan_json(&path, &["--objective", "lr-sqrt"]);
    let switches = v["switches"].as_array().expect("switches");
    assert!(switches.len() >= 3, "{switches:?}");
    let mut last_b_crit = 0.0;
    for s in switches {
        let (from, to) = (
            batch_of(s["from"].as_str().expect("from")),
            batch_of(s["to"].as_str().expect("to")),
        );
        assert!(to > from, "the batch only grows: {from} → {to}");
        let b_crit = s["b_crit"].as_f64().expect("b_crit");
        assert!(b_crit > last_b_crit, "as B_crit grows");
        last_b_crit = b_crit;
    }
    let first = batch_of(switches[0]["from"].as_str().expect("from"));
    let last = batch_of(switches[switches.len() - 1]["to"].as_str().expect("to"));
    assert!(last >= 8 * first, "{first} → {last}");
    // The lr-sqrt optimum leaves the smallest batch for most of the run.
    assert!(last >= 128, "{last}");
}

#[test]
fn bad_objectives_are_named() {
    let out = Command::new(env!("CARGO_BIN_EXE_copus"))
        .args(["plan", "--objective", "sgd"])
        .arg(sessions().join("demo.ron"))
        .output()
        .expect("run copus");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("mccandlish or lr-sqrt"), "{err}");

    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("zero-ref.ron");
    let demo = std::fs::read_to_string(sessions().join("demo.ron")).expect("demo");
    let broken = demo.replace(
        "current_batch: Some(512),",
        "current_batch: Some(512), planner: (objective: LrSqrt, lr_reference_batch: Some(0)),",
    );
    assert_ne!(broken, demo);
    std::fs::write(&path, broken).expect("write");
    let out = copus_plan(&path, true);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("zero-ref.ron") && err.contains("reference batch"),
        "{err}"
    );
}

#[test]
fn plan_json_has_the_best_cells_step_shares_per_phase() {
    let v = plan_json(&sessions().join("demo.ron"), &[]);
    let along = v["best_along"].as_array().expect("best_along");
    assert_eq!(along.len() as u64, v["phases"].as_u64().expect("phases"));
    let mut last_tokens = f64::NEG_INFINITY;
    for b in along {
        for key in [
            "layout",
            "batch",
            "config",
            "step_time_s",
            "goodput",
            "b_crit",
        ] {
            assert!(b.get(key).is_some(), "missing {key}: {b}");
        }
        let share = |k: &str| b[k].as_f64().unwrap_or_else(|| panic!("{k}: {b}"));
        let (c, x, u) = (
            share("compute_share"),
            share("exposed_comm_share"),
            share("bubble_share"),
        );
        for s in [c, x, u] {
            assert!((0.0..=1.0).contains(&s), "{b}");
        }
        assert!(c + x + u <= 1.0 + 1e-9, "{b}");
        let t = share("start_tokens");
        assert!(t > last_tokens, "phases in token order");
        last_tokens = t;
    }
}

#[test]
fn a_switch_step_pasted_into_grid_at_lands_on_the_switch() {
    // One meaning of "step": the trajectory's, as the explorer shows it and `grid --at` takes
    // it; the B_crit printed at a switch is the value at that point.
    let demo = sessions().join("demo.ron");
    let out = copus_plan(&demo, true);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let switches = v["switches"].as_array().expect("switches");
    assert!(!switches.is_empty(), "the demo plan switches");
    for s in switches.iter().take(3) {
        let step = s["at_step"].as_u64().expect("at_step");
        assert!(s["plan_steps"].as_u64().is_some(), "{s}");
        let grid = std::process::Command::new(env!("CARGO_BIN_EXE_copus"))
            .args([
                "grid",
                demo.to_str().expect("utf-8"),
                "--json",
                "--at",
                &step.to_string(),
            ])
            .output()
            .expect("grid");
        assert!(
            grid.status.success(),
            "{}",
            String::from_utf8_lossy(&grid.stderr)
        );
        let g: serde_json::Value = serde_json::from_slice(&grid.stdout).expect("grid json");
        let (t_plan, t_grid) = (
            s["at_tokens"].as_f64().expect("at_tokens"),
            g["tokens"].as_f64().expect("tokens"),
        );
        assert!(
            (t_grid / t_plan - 1.0).abs() < 1e-9,
            "step {step}: plan {t_plan} vs grid {t_grid}"
        );
        let (b_plan, b_grid) = (
            s["b_crit"].as_f64().expect("b_crit"),
            g["b_crit"].as_f64().expect("grid b_crit"),
        );
        assert!(
            (b_grid / b_plan - 1.0).abs() < 1e-9,
            "step {step}: B_crit {b_plan} vs {b_grid}"
        );
    }
}

#[path = "plan_cases/emit.rs"]
mod emit_cases;

/// Every switch point in `plan`'s text names its cost: a reshard's line is too long for the
/// cost beside its gain, and it was left out (the JSON said 515 s).
#[test]
fn every_switch_in_the_text_names_its_cost() {
    let args = [
        "plan",
        "demo",
        "--model",
        "llama3-70b",
        "--nodes",
        "16",
        "--seq",
        "8192",
    ];
    let out = Command::new(env!("CARGO_BIN_EXE_copus"))
        .args(args)
        .output()
        .expect("runs");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    let mut switches = 0;
    for (i, line) in lines.iter().enumerate() {
        if line.contains(" switch, ") && line.contains("net gain") {
            switches += 1;
            let next = lines.get(i + 1).copied().unwrap_or("");
            assert!(
                line.contains(", cost ") || next.trim_start().starts_with("cost "),
                "{line}\n{next}"
            );
        }
    }
    assert!(text.contains("reshard switch"), "{text}");
    assert!(switches >= 2, "{text}");
}

/// The report names the model and cluster it planned for: the session's, or the ones the
/// command line put in their place (the header kept the session's description, "7B on 8×8
/// H100", above a plan for a 70B on 16 nodes).
#[test]
fn the_report_names_the_model_and_cluster_planned_for() {
    let demo = Path::new("demo");
    let own = plan_json(demo, &[]);
    assert_eq!(own["scenario"], "llama-7b on 8×8 h100-sxm");
    let what_if = plan_json(demo, &["--model", "llama3-70b", "--nodes", "16"]);
    assert_eq!(what_if["scenario"], "llama3-70b on 16×8 h100-sxm");
    assert_eq!(what_if["session"], own["session"]);
    let out = copus_run(&["plan", "demo", "--model", "llama3-70b", "--nodes", "16"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let second = text.lines().nth(1).unwrap_or_default();
    assert_eq!(second, "planned for: llama3-70b on 16×8 h100-sxm", "{text}");
}

/// A switch that changes only the ZeRO stage of a layout repartitions the optimizer state:
/// a reshard at the reshard's cost, not a 1 s batch switch (`plan demo --zero 1,3` priced
/// DP64 B=128 Z1 → B=256 Z3 at 1 s).
#[test]
fn a_zero_stage_change_is_priced_as_a_reshard() {
    let v = plan_json(Path::new("demo"), &["--zero", "1,3"]);
    let switches = v["switches"].as_array().expect("switches");
    let mut zero_changes = 0;
    for s in switches {
        let from = &s["from_state"]["config"];
        let to = &s["to_state"]["config"];
        if from["zero"] != to["zero"] {
            zero_changes += 1;
            assert_eq!(s["kind"], "reshard", "{s}");
            assert!(s["cost_s"].as_f64().expect("cost") > 60.0, "{s}");
        }
    }
    assert!(
        zero_changes > 0,
        "the demo's plan changes ZeRO stage: {}",
        v["switches"]
    );
}

/// DeepSpeed resumes a phase whose ZeRO stage differs from the phase before from a
/// universal checkpoint, as it does after a TP/PP change (ZeRO-1 → ZeRO-3 had none).
#[test]
fn a_deepspeed_zero_stage_change_resumes_from_a_universal_checkpoint() {
    let out = copus_run(&["plan", "demo", "--zero", "1,3", "--emit", "deepspeed"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let phases = v["phases"].as_array().expect("phases");
    let stage = |p: &serde_json::Value| p["ds_config"]["zero_optimization"]["stage"].as_u64();
    let mut changes = 0;
    for w in phases.windows(2) {
        let args: Vec<&str> = w[1]["megatron_deepspeed_args"]
            .as_array()
            .expect("args")
            .iter()
            .filter_map(|a| a.as_str())
            .collect();
        if stage(&w[0]) != stage(&w[1]) {
            changes += 1;
            assert!(args.contains(&"--universal-checkpoint"), "{args:?}");
        }
    }
    assert!(
        changes > 0,
        "no ZeRO-stage change among {} phases",
        phases.len()
    );
}

/// A missing `--calibration` file is named with its flag (the error said only
/// "nonexist.ron: No such file or directory").
#[test]
fn a_missing_calibration_file_is_named_with_its_flag() {
    for cmd in [&["plan", "demo"][..], &["grid", "demo"][..]] {
        let out = copus_run(&[cmd, &["--calibration", "no-such-calibration.ron"]].concat());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{err}");
        assert!(
            err.contains("--calibration no-such-calibration.ron"),
            "{cmd:?}: {err}"
        );
    }
}

/// Nothing to plan within a framework's limits says why the layouts the framework does
/// express fail too (torchtitan's DDP beside TP/PP was named, the out-of-memory of every pure
/// data-parallel layout it could run was not).
#[test]
fn nothing_to_plan_within_limits_names_why_the_expressible_layouts_fail() {
    let out = copus_run(&["plan", "demo", "--zero", "0", "--emit", "torchtitan"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("cannot express"), "{err}");
    assert!(
        err.contains("where it can express the layout: DP64·TP1·PP1 at batch")
            && err.contains("out of memory"),
        "{err}"
    );
}

/// `plan --within FRAMEWORK` prints the plan the framework's `--emit` writes (the plan text
/// and `--emit json` showed only the unlimited plan): the same phases, layouts and steps.
#[test]
fn plan_within_a_framework_is_the_plan_its_emit_writes() {
    let v = plan_json(Path::new("demo"), &["--within", "deepspeed"]);
    assert_eq!(v["within"], "deepspeed");
    let out = copus_run(&["plan", "demo", "--emit", "deepspeed"]);
    assert!(out.status.success());
    let emitted: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let phases = emitted["phases"].as_array().expect("phases");
    let schedule = v["schedule"].as_array().expect("schedule");
    assert_eq!(phases.len(), schedule.len());
    for (p, s) in phases.iter().zip(schedule) {
        for k in ["dp", "tp", "pp"] {
            assert_eq!(p[k], s["state"][k], "{k}: {p} / {s}");
        }
        // The rest of the layout at the top level, as `--emit json` phases carry it (a
        // launcher had to parse them out of the arguments).
        let config = &s["state"]["config"];
        for (k, want) in [
            ("cp", "cp"),
            ("ep", "ep"),
            ("vpp", "vpp"),
            ("zero", "zero"),
            ("recompute", "recompute"),
            ("micro_batch", "mbs"),
        ] {
            assert_eq!(p[k], config[want], "{k}: {p} / {s}");
        }
        assert_eq!(p["zero"], p["ds_config"]["zero_optimization"]["stage"]);
        assert_eq!(
            p["accumulation"],
            p["ds_config"]["gradient_accumulation_steps"]
        );
        assert_eq!(p["from_step"], s["from_step"]);
        let until = s["from_step"].as_u64().expect("from") + s["steps"].as_u64().expect("steps");
        assert_eq!(p["until_step"].as_u64(), Some(until));
    }
    // One framework at a time, and json is no framework.
    for extra in [
        &["--within", "deepspeed", "--emit", "megatron"][..],
        &["--within", "json"],
    ] {
        let out = copus_run(&[&["plan", "demo"][..], extra].concat());
        assert!(!out.status.success(), "{extra:?}");
    }
    // --within offers the frameworks only (it listed json with --emit's descriptions), and
    // json is refused by the parser (exit 2, the values named).
    let out = copus_run(&["plan", "demo", "--within", "json"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("megatron, torchtitan, deepspeed"), "{err}");
    let help = copus_run(&["plan", "--help"]);
    let help = String::from_utf8_lossy(&help.stdout);
    let within = help.split("--within").nth(1).expect("--within in the help");
    let within = within.split("\n      --").next().unwrap_or(within);
    assert!(!within.contains("- json"), "{within}");
}

/// Where nothing fits even without a framework's limits (a 405B model on one node), `--emit`
/// says so, not that the framework cannot express what it was asked, and does not send the
/// user to plan without --emit (which fails the same way).
#[test]
fn emit_where_nothing_fits_at_all_names_memory_not_the_framework() {
    let dir = tempfile::tempdir().expect("tempdir");
    let demo = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/sessions/demo.ron"))
        .expect("demo");
    let big = demo
        .replace("Named(\"llama-7b\")", "Named(\"llama3-405b\")")
        .replace("nodes: 8,", "nodes: 1,");
    let path = dir.path().join("big.ron");
    std::fs::write(&path, big).expect("write");
    let path = path.to_str().expect("utf-8");
    for (stack, target) in [("deepspeed", "megatron"), ("megatron-core", "torchtitan")] {
        let out = copus_run(&["plan", path, "--stack", stack, "--emit", target]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains("nothing to plan: no (layout, batch) cell of the grid can run")
                && err.contains("out of memory")
                && !err.contains("cannot express")
                && !err.contains("plan without --emit"),
            "{stack} → {target}: {err}"
        );
    }
}

/// A plan on a run whose estimate `analyze` calls unreliable says so first (it printed a
/// 1.84× speed-up from three steps without a word); a run whose only reason is its drift (what
/// a plan follows) gets no such note.
#[test]
fn a_plan_on_an_unreliable_estimate_says_so_first() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/data/demo-train-3000.ndjson");
    let text = std::fs::read_to_string(&sample).expect("sample");
    let three = dir.path().join("three.ndjson");
    let lines: Vec<&str> = text.lines().take(3).collect();
    std::fs::write(&three, lines.join("\n") + "\n").expect("write");
    let v = plan_json(&three, &["--seq-len", "4096"]);
    let first = v["caveats"][0].as_str().unwrap_or_default();
    assert!(
        first.starts_with("the run's B_crit estimate is unreliable:")
            && first.contains("fewer than 50"),
        "{}",
        v["caveats"]
    );
    let whole = plan_json(&sample, &["--seq-len", "4096"]);
    let caveats = whole["caveats"].to_string();
    assert!(!caveats.contains("B_crit estimate is"), "{caveats}");
}

/// The plan names the configurations it holds with little memory to spare, with their phases
/// (a 405B plan on 512 H100 ran every phase at 85.5 of 85.9 GB).
#[test]
fn a_plan_names_its_phases_whose_memory_is_tight() {
    let demo = sessions().join("demo.ron");
    let v = plan_json(&demo, &["--model", "llama3-405b", "--nodes", "64"]);
    let caveats = v["caveats"].to_string();
    assert!(
        caveats.contains("memory is tight") && caveats.contains("phase"),
        "{caveats}"
    );
    let v = plan_json(&demo, &[]);
    assert!(
        !v["caveats"].to_string().contains("memory is tight"),
        "{}",
        v["caveats"]
    );
}

/// `plan --json` carries the schedule's totals the text prints ("the plan runs N steps, M
/// samples"): `end`, the sum of its runs, the same as `--emit json`'s `end`.
#[test]
fn plan_json_carries_the_schedules_end() {
    let demo = sessions().join("demo.ron");
    let v = plan_json(&demo, &[]);
    let schedule = v["schedule"].as_array().expect("schedule");
    let steps: u64 = schedule
        .iter()
        .map(|r| r["steps"].as_u64().expect("steps"))
        .sum();
    let samples: u64 = schedule
        .iter()
        .map(|r| r["steps"].as_u64().expect("steps") * r["state"]["batch"].as_u64().expect("batch"))
        .sum();
    assert_eq!(v["end"]["step"].as_u64(), Some(steps), "{}", v["end"]);
    assert_eq!(v["end"]["samples"].as_u64(), Some(samples));
    let seq = v["seq_len"].as_f64().expect("seq_len");
    assert_eq!(v["end"]["tokens"].as_f64(), Some(samples as f64 * seq));
    let out = Command::new(env!("CARGO_BIN_EXE_copus"))
        .args(["plan", demo.to_str().expect("utf-8"), "--emit", "json"])
        .output()
        .expect("run copus");
    let emitted: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(emitted["end"], v["end"]);
    // Beside it, where the trajectory's axis starts and ends: the demo's 1B to 600B tokens, of
    // which the plan trains on fewer at its smaller batches; the text says by how much and
    // why. The schedule counts from the axis's start (its step 0 is the trajectory's 1B
    // tokens), so the share is of the 599B it covers (it was of 600B).
    let axis_end = v["trajectory_end_tokens"]
        .as_f64()
        .expect("trajectory_end_tokens");
    let axis_start = v["trajectory_start_tokens"]
        .as_f64()
        .expect("trajectory_start_tokens");
    assert!((axis_end - 600e9).abs() < 1e6, "{axis_end}");
    assert!((axis_start - 1e9).abs() < 1e3, "{axis_start}");
    let tokens = v["end"]["tokens"].as_f64().expect("tokens");
    let pct = 100.0 * (1.0 - tokens / (axis_end - axis_start));
    assert!(pct > 0.0, "{pct}");
    let text = Command::new(env!("CARGO_BIN_EXE_copus"))
        .args(["plan", demo.to_str().expect("utf-8")])
        .output()
        .expect("run copus");
    let text = String::from_utf8_lossy(&text.stdout).replace('\n', " ");
    assert!(
        text.contains(&format!("the plan trains on {pct:.1} % fewer"))
            && text.contains("from 1.0B to 600.0B tokens (599.0B tokens; the schedule's step 0 is its 1.0B tokens)"),
        "{pct:.1}: {text}"
    );
    // The written schedules say it too (a trainer reads them, not the plan's text).
    let notes = emitted["notes"].as_array().expect("notes");
    assert!(
        notes.iter().any(|n| n
            .as_str()
            .is_some_and(|n| n.contains(&format!("{pct:.1} % fewer tokens"))
                && n.contains("run the last phase on to 599.0B tokens of this schedule"))),
        "{pct:.1}: {notes:?}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_copus"))
        .args(["plan", demo.to_str().expect("utf-8"), "--emit", "megatron"])
        .output()
        .expect("run copus");
    let megatron = String::from_utf8_lossy(&out.stdout);
    assert!(
        megatron.contains("# note: this schedule ends at")
            && megatron.contains(&format!("{pct:.1} % fewer tokens")),
        "{megatron}"
    );
}

/// `plan` and `grid` convert B_crit by the run's own branched experiment
/// (`--branches FILE --b-crit-from KIND`), as the explorer's `open --b-crit-from` does: the
/// factor is the geometric mean of the ratios `analyze --branches` measures, named as the
/// source, with a note of its range; the flags' misuses are command-line errors (exit 2).
#[test]
fn plan_and_grid_convert_b_crit_by_the_runs_branched_experiment() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (b, run) = (dir.path().join("b.ndjson"), dir.path().join("run.ndjson"));
    let (bs, rs) = (b.to_str().expect("utf-8"), run.to_str().expect("utf-8"));
    let out = copus_run(&[
        "branch",
        "--at",
        "20,120",
        "--batches",
        "8,32,128",
        "--seeds",
        "2",
        "--budget-samples",
        "4096",
        "--eval-samples",
        "256",
        "--quiet",
        "--out",
        bs,
        "--run-out",
        rs,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let analyzed = copus_run(&["analyze", rs, "--branches", bs, "--json", "--summary-only"]);
    assert!(analyzed.status.success());
    let a: serde_json::Value = serde_json::from_slice(&analyzed.stdout).expect("json");
    let ratios: Vec<f64> = a["branches"]["comparison"]
        .as_array()
        .expect("comparison")
        .iter()
        .filter_map(|c| c["b_noise_ratio"]["value"].as_f64())
        .collect();
    assert!(!ratios.is_empty(), "{}", a["branches"]);
    let mean = (ratios.iter().map(|r| r.ln()).sum::<f64>() / ratios.len() as f64).exp();
    let flags = [
        "--seq-len",
        "4096",
        "--branches",
        bs,
        "--b-crit-from",
        "b-noise",
    ];
    let v = plan_json(&run, &flags);
    let factor = v["b_crit"]["factor"].as_f64().expect("factor");
    assert!((factor / mean - 1.0).abs() < 1e-9, "{factor} vs {mean}");
    assert!(
        v["b_crit"]["factor_source"]
            .as_str()
            .is_some_and(|s| s.starts_with("measured B_noise ÷ B_simple by branched training")),
        "{}",
        v["b_crit"]
    );
    assert!(
        v["caveats"].as_array().expect("caveats").iter().any(|c| c
            .as_str()
            .is_some_and(|c| c.contains(&format!("B_crit × {factor:.3}")))),
        "{}",
        v["caveats"]
    );
    // Without the flags, the session's own factor (1).
    let plain = plan_json(&run, &["--seq-len", "4096"]);
    assert_eq!(plain["b_crit"]["factor"].as_f64(), Some(1.0));
    // grid says the same conversion, names its source, and widens B_crit's interval by the
    // factor's range as the explorer does (it gave B_simple's interval times the factor).
    let grid = copus_run(&[&["grid", rs][..], &flags[..]].concat());
    assert!(
        grid.status.success(),
        "{}",
        String::from_utf8_lossy(&grid.stderr)
    );
    let text = String::from_utf8_lossy(&grid.stdout).replace('\n', " ");
    assert!(text.contains(&format!("B_crit × {factor:.3}")), "{text}");
    let grid_json = |extra: &[&str]| -> serde_json::Value {
        let out = copus_run(&[&["grid", rs, "--json", "--at", "120"][..], extra].concat());
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("json")
    };
    let raw = grid_json(&["--seq-len", "4096"]);
    let converted = grid_json(&flags);
    assert!(
        converted["b_crit_scale_source"]
            .as_str()
            .is_some_and(|s| s.starts_with("measured B_noise")),
        "{converted}"
    );
    let range = &converted["b_crit_scale_range"];
    let end = |v: &serde_json::Value, i: usize| v[i].as_f64().expect("a number");
    let (lo, hi) = (end(range, 0), end(range, 1));
    assert!(lo < factor && factor < hi, "{range}");
    let (raw_i, conv_i) = (&raw["b_crit_interval"], &converted["b_crit_interval"]);
    assert!(
        (end(conv_i, 0) / (end(raw_i, 0) * lo) - 1.0).abs() < 1e-9,
        "{raw_i} {conv_i}"
    );
    assert!(
        (end(conv_i, 1) / (end(raw_i, 1) * hi) - 1.0).abs() < 1e-9,
        "{raw_i} {conv_i}"
    );
    assert!(raw.get("b_crit_scale_source").is_none(), "{raw}");
    // Misuses: exit 2, the flag named.
    for (args, says) in [
        (
            vec!["plan", rs, "--seq-len", "4096", "--b-crit-from", "b-noise"],
            "--branches FILE",
        ),
        (
            [&["plan", rs][..], &flags[..], &["--b-crit-scale", "2"][..]].concat(),
            "--b-crit-scale",
        ),
        (
            vec!["plan", "demo", "--branches", bs, "--b-crit-from", "b-noise"],
            "this session's source",
        ),
    ] {
        let out = copus_run(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

/// A stats file of one record: `grid` computes its grid on an estimate with no interval and
/// says so (it gave a best cell with only the default-model caveat), and the explorer's
/// recommendation carries the same caution.
#[test]
fn a_one_record_run_is_said_to_have_no_interval() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("one.ndjson");
    std::fs::write(
        &file,
        "{\"v\":1,\"step\":0,\"b_small\":1.0,\"b_big\":16.0,\"sq_small\":2.0,\"sq_big\":0.3,\"n_small\":16}\n",
    )
    .expect("write");
    let f = file.to_str().expect("utf-8");
    let out = copus_run(&["grid", f, "--seq-len", "4096", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let caveats = v["caveats"].to_string();
    assert!(
        caveats.contains("has no interval") && caveats.contains("the run needs more steps"),
        "{caveats}"
    );
    let snap = copus_run(&["snapshot", f, "--seq-len", "4096", "--size", "200x60"]);
    let screen = String::from_utf8_lossy(&snap.stdout);
    assert!(screen.contains("B_crit here has no interval"), "{screen}");
    // `plan` cannot cut one point into phases: its error names the file given, not the
    // session file it would be saved as (`one.ndjson.copus.ron`, a file the user never gave).
    let plan = copus_run(&["plan", f, "--seq-len", "4096"]);
    let err = String::from_utf8_lossy(&plan.stderr);
    assert!(
        !plan.status.success() && err.contains(&format!("{f}: ")) && !err.contains(".copus.ron"),
        "{err}"
    );
    // A run long enough for intervals has neither.
    let demo = copus_run(&["grid", "demo", "--json"]);
    assert!(!String::from_utf8_lossy(&demo.stdout).contains("has no interval"));
}

/// `grid --at 40%` takes a share of the run as the explorer's go-to (`g 40%`) does, and lands
/// on the same point (it was refused as "neither a step nor tokens"); over 100 % is an error.
#[test]
fn grid_at_a_share_of_the_run_is_the_explorers_point() {
    let out = copus_run(&["grid", "demo", "--at", "40%", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let step = v["step"].as_u64().expect("step");
    let snap = copus_run(&["snapshot", "--keys", "g 4 0 % Enter", "--size", "120x40"]);
    let screen = String::from_utf8_lossy(&snap.stdout);
    assert!(
        screen.contains(&format!("· step {step} ·")),
        "{step}\n{screen}"
    );
    let over = copus_run(&["grid", "demo", "--at", "140%"]);
    assert_eq!(over.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&over.stderr).contains("0–100%"));
    // A key snapshot does not know is a bad flag value, exit 2 as the others (it was 1).
    let typo = copus_run(&["snapshot", "--keys", "Rigth"]);
    assert_eq!(typo.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&typo.stderr).contains("--keys: unknown key 'Rigth'"));
}

/// A plan whose strategies take under an hour in an hours column reads them to three decimals
/// (five strategies 33.3 to 33.7 min apart all read "0.56" h), and the note on the paper's
/// baselines sits under the table, not between its rows.
#[test]
fn short_plans_read_apart_in_the_hours_column() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = dir.path().join("run.ndjson");
    let made = copus_run(&[
        "demo-train",
        "--steps",
        "400",
        "--quiet",
        "--out",
        run.to_str().expect("utf-8"),
    ]);
    assert!(made.status.success(), "{made:?}");
    let out = copus_run(&["plan", run.to_str().expect("utf-8"), "--seq-len", "4096"]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines().skip_while(|l| !l.starts_with("strategy"));
    let header = lines.next().expect("strategy table");
    assert!(header.contains("time (h)"), "{text}");
    let rows: Vec<&str> = lines.take_while(|l| !l.trim().is_empty()).collect();
    let times: Vec<&str> = rows
        .iter()
        .filter(|l| !l.starts_with(' '))
        .filter_map(|l| l.split_whitespace().nth(1))
        .collect();
    assert!(times.len() >= 8, "{rows:?}");
    assert!(
        times
            .iter()
            .any(|t| t.parse::<f64>().is_ok_and(|h| h < 1.0)),
        "{times:?}"
    );
    for t in &times {
        assert_eq!(t.split('.').nth(1).map(str::len), Some(3), "{t}: {times:?}");
    }
    let note = rows
        .iter()
        .position(|l| l.contains("(cbs-*:"))
        .expect("the baselines' note");
    assert!(
        rows[note..].iter().all(|l| l.starts_with(' ')),
        "a table row after the note: {rows:?}"
    );
    // The caution on a noisy estimate says what to do once, without the source's wrapping
    // spaces (it read "… (widen the smoother or collect more samples per step) (widen the
    // smoother (press > …) or record more samples per step); … rests on it          (`copus").
    let out = copus_run(&[
        "plan",
        run.to_str().expect("utf-8"),
        "--seq-len",
        "4096",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let caveats = v["caveats"].as_array().expect("caveats");
    let noisy = caveats
        .iter()
        .filter_map(|c| c.as_str())
        .find(|c| c.contains("B_crit estimate is"))
        .expect("the estimate's caution");
    assert!(!noisy.contains("  "), "{noisy}");
    assert_eq!(noisy.matches("widen the smoother").count(), 1, "{noisy}");
}

/// A plan costed with fused elementwise kernels (torch.compile under torchtitan) writes
/// torchtitan's `[compile]` section; an eager one does not (the TOML ran eager, about 14 %
/// slower than the plan it was written for).
#[test]
fn torchtitan_emit_compiles_what_was_costed_compiled() {
    let emit = |extra: &[&str]| {
        let mut args = vec![
            "plan",
            "demo",
            "--stack",
            "torchtitan-fsdp2",
            "--emit",
            "torchtitan",
        ];
        args.extend_from_slice(extra);
        let out = copus_run(&args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8")
    };
    // torchtitan's own default runs eager, as the preset does.
    let eager = emit(&[]);
    assert!(!eager.contains("[compile]"), "{eager}");
    let fused = emit(&["--elementwise", "fused"]);
    assert!(
        fused.contains("[compile]") && fused.contains("components = [\"model\", \"loss\"]"),
        "{fused}"
    );
}
