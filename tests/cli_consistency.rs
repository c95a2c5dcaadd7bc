//! The command line behaves consistently (issue 13, item 15), through the real binary:
//! `grid`/`plan` explain that they need a session, `--at` takes steps or tokens and refuses a
//! point outside the trajectory, unsupported live targets and flags that do nothing are
//! errors naming them, JSON holds snake_case names and structured layouts (no Rust debug
//! strings), and `predict` validates its flags, warns on cross-node TP and, when a
//! configuration does not fit, prints its breakdown and a configuration that does.

use crate::reliability_support;

use reliability_support::{copus, copus_json as json};
use serde_json::Value;

const SAMPLE: &str = "assets/data/sample-run.ndjson";
const DEMO: &str = "sessions/demo.ron";

#[test]
fn grid_and_plan_open_a_stats_file_on_the_model_and_cluster_given_as_open_does() {
    // The sample run counts 2,048 tokens a sample, as the default model (llama-7b) does;
    // Llama 3 8B trains on 8,192: refused as `open` refuses it, naming --seq-len.
    for cmd in ["grid", "plan"] {
        let ok = copus(&[cmd, SAMPLE, "--json"]);
        assert_eq!(ok.code, Some(0), "{}", ok.stderr);
        copus(&[cmd, SAMPLE, "--model", "llama3-8b"]).fails_with(&[SAMPLE, "--seq-len"]);
    }
    let args = [
        SAMPLE,
        "--model",
        "llama3-8b",
        "--nodes",
        "2",
        "--seq-len",
        "8192",
        "--json",
    ];
    let g = json(&[&["grid"][..], &args[..]].concat());
    let cells = g["cells"].as_array().expect("cells");
    assert!(!cells.is_empty());
    for c in cells {
        let gpus: u64 = ["dp", "tp", "pp", "cp"]
            .iter()
            .map(|k| c["config"][*k].as_u64().unwrap_or(1))
            .product();
        assert!(c["config"].is_null() || gpus == 16, "{c}");
    }
    let p = json(&[&["plan"][..], &args[..]].concat());
    assert_eq!(p["session"], "sample-run.ndjson");
    // --seq-len is the run's tokens per sample: not for a session.
    copus(&["grid", DEMO, "--seq-len", "8"]).fails_with(&["--seq-len", "session"]);
}

#[test]
fn grid_and_plan_answer_what_if_on_another_model_and_cluster_without_editing_the_session() {
    let g = json(&[
        "grid",
        DEMO,
        "--model",
        "llama3-70b",
        "--nodes",
        "16",
        "--json",
    ]);
    let said = g["caveats"].to_string();
    assert!(said.contains("llama3-70b on 16×8 h100-sxm"), "{said}");
    for c in g["cells"].as_array().expect("cells") {
        if c["config"].is_null() {
            continue;
        }
        let gpus: u64 = ["dp", "tp", "pp", "cp"]
            .iter()
            .map(|k| c["config"][*k].as_u64().unwrap_or(1))
            .product();
        assert_eq!(gpus, 128, "{c}");
    }
    let p = json(&["plan", DEMO, "--hardware", "a100-80g", "--json"]);
    assert!(
        p["caveats"].to_string().contains("on 8×8 a100-80g"),
        "{}",
        p["caveats"]
    );
    copus(&["grid", DEMO, "--model", "no-such-model"]).fails_with(&["no-such-model"]);
    // The caveat names what changed, and only that.
    let g = json(&["grid", DEMO, "--seq", "2048", "--json"]);
    let said = g["caveats"].to_string();
    assert!(
        said.contains("sequence to 2048 tokens (was 4096)"),
        "{said}"
    );
    assert!(!said.contains("nodes"), "{said}");
    // A part of an inline shape alone is an error, not ignored; errors name the flags given,
    // not a file the user never wrote.
    copus(&["grid", DEMO, "--heads", "32"]).fails_with(&["missing --layers"]);
    copus(&["grid", DEMO, "--seq", "0"]).fails_with(&["--seq", "must be at least 1"]);
    copus(&["plan", SAMPLE, "--nodes", "0"]).fails_with(&["--nodes <NODES>", "must be at least 1"]);
    // A stats file says which model and cluster it was read on.
    let g = json(&["grid", SAMPLE, "--json"]);
    assert!(
        g["caveats"]
            .to_string()
            .contains("read as a run of llama-7b on 1×8 h100-sxm (the defaults"),
        "{}",
        g["caveats"]
    );
}

/// A run whose samples are not the model's sequences: grid and plan say that B_crit is carried
/// over at equal tokens (and by how much), and say nothing when the lengths agree.
#[test]
fn a_run_of_another_sequence_length_is_converted_with_a_caveat() {
    let at = |seq: &str| {
        let g = json(&[
            "grid",
            SAMPLE,
            "--model",
            "llama3-8b",
            "--seq-len",
            seq,
            "--json",
        ]);
        (
            g["b_crit_estimate"].as_f64().expect("b_crit"),
            g["caveats"].to_string(),
        )
    };
    let (b_short, said) = at("2048");
    assert!(
        said.contains("samples are 2048 tokens and llama3-8b's sequences 8192")
            && said.contains("× 0.250"),
        "{said}"
    );
    let (b_same, said) = at("8192");
    assert!(!said.contains("equal tokens"), "{said}");
    assert!(
        (b_short / b_same - 0.25).abs() < 1e-9,
        "{b_short} vs {b_same}"
    );
    let p = json(&[
        "plan",
        SAMPLE,
        "--model",
        "llama3-8b",
        "--seq-len",
        "2048",
        "--json",
    ]);
    assert!(
        p["caveats"].to_string().contains("at equal tokens"),
        "{}",
        p["caveats"]
    );
}

/// A measured run that names no current batch: the fixed-batch baselines run at the batch its
/// token counts imply (the one the explorer marks ▼), not at the middle of the grid.
#[test]
fn a_runs_fixed_batch_baseline_is_its_own_batch() {
    // 65,536 tokens a step in samples of 2,048 tokens: 16 of llama-7b's 4,096-token sequences.
    let p = json(&["plan", SAMPLE, "--json"]);
    let rows = p["strategies"].as_array().expect("strategies");
    let gbs = rows
        .iter()
        .find(|r| r["name"] == "static-gbs")
        .expect("static-gbs");
    assert!(gbs["start"].to_string().contains("B=16 "), "{gbs}");
    let at = &p["current_batch_static"];
    assert_eq!(at["name"], "static@16", "{at}");
    assert!(at["how"].to_string().contains("the run's batch"), "{at}");
}

/// Without `--at`, `grid` evaluates where the explorer opens: a run's latest point (the
/// explorer's "now"), a session's saved cursor.
#[test]
fn grid_without_at_is_the_explorers_first_screen() {
    // The sample's last points have intervals open above: grid and the explorer open at the
    // latest point whose interval is bounded, and grid says so.
    let run = json(&["grid", SAMPLE, "--json"]);
    let step = run["step"].as_u64().expect("step");
    let at = json(&["grid", SAMPLE, "--json", "--at", &step.to_string()]);
    let last = json(&["grid", SAMPLE, "--json", "--at", "599"]);
    let first = json(&["grid", SAMPLE, "--json", "--at", "0"]);
    assert!(step < 599 && step > 500, "{step}");
    assert_ne!(run["step"], first["step"]);
    assert_ne!(run["step"], last["step"]);
    assert_eq!(run["b_crit"], at["b_crit"]);
    assert!(
        run["b_crit_interval"][1].is_number(),
        "{}",
        run["b_crit_interval"]
    );
    assert!(
        last["b_crit_interval"][1].is_null(),
        "{}",
        last["b_crit_interval"]
    );
    assert!(
        run["caveats"].to_string().contains(&format!(
            "step {step}: the run's latest point whose B_crit interval is bounded"
        )),
        "{}",
        run["caveats"]
    );
    // The explorer's first screen says the same step.
    let screen = copus(&["snapshot", SAMPLE, "--size", "120x40"]);
    screen.succeeds();
    let step = run["step"].as_u64().expect("step").to_string();
    assert!(
        screen.stdout.contains(&format!("step {step} ")),
        "{step}\n{}",
        screen.stdout
    );
    // B_crit in the same tokens: the explorer's title counts the run's samples of 2,048
    // tokens, grid the model's sequences of 4,096 (it said "samples" for both).
    let title = screen
        .stdout
        .split(" tok)")
        .next()
        .and_then(|head| head.rsplit('(').next())
        .expect("B_crit in tokens on the title")
        .to_string();
    let text = copus(&["grid", SAMPLE]);
    text.succeeds();
    assert!(
        text.stdout
            .contains(&format!("sequences of 4096 tokens ({title} tokens;")),
        "{title}\n{}",
        text.stdout
    );
    // The demo session is saved at its first point.
    let demo = json(&["grid", DEMO, "--json"]);
    assert_eq!(demo["step"], 477, "{}", demo["step"]);
}

#[test]
fn at_takes_steps_or_tokens_and_refuses_points_outside_the_trajectory() {
    copus(&["grid", DEMO, "--at", "99999999"]).fails_with(&["--at 99999999", "outside"]);
    copus(&["grid", DEMO, "--at", "900T"]).fails_with(&["--at", "outside", "tokens"]);
    copus(&["grid", DEMO, "--at", "12x"]).fails_with(&["--at", "K/M/B/T"]);
    let first = json(&["grid", DEMO, "--json"]);
    let by_tokens = json(&["grid", DEMO, "--at", "150B", "--json"]);
    let tokens = by_tokens["tokens"].as_f64().expect("tokens");
    let step = by_tokens["step"].as_u64().expect("step");
    assert_ne!(
        step,
        first["step"].as_u64().expect("step"),
        "150B is not the first point"
    );
    // The nearest point: within a factor of the request on a log-spaced trajectory.
    assert!(
        (tokens / 150e9 - 1.0).abs() < 0.25,
        "150B picked {tokens} tokens"
    );
    // The same point asked for by its step.
    let by_step = json(&["grid", DEMO, "--at", &step.to_string(), "--json"]);
    assert_eq!(by_step["tokens"], by_tokens["tokens"]);
    // Between points: the nearest one, said (as the explorer's `g` says it) where an exact
    // point says nothing (a step just before a planned switch showed the grid after it).
    let snapped = |v: &Value| v["caveats"].to_string().contains("has no point there");
    assert!(!snapped(&by_step), "{}", by_step["caveats"]);
    assert!(snapped(&by_tokens), "{}", by_tokens["caveats"]);
    let before = json(&["grid", DEMO, "--at", &(step - 1).to_string(), "--json"]);
    assert_eq!(before["step"], by_step["step"]);
    assert!(
        before["caveats"].to_string().contains(&format!(
            "--at step {}: the trajectory has no point there; this is the nearest, step {step}",
            step - 1
        )),
        "{}",
        before["caveats"]
    );
}

#[test]
fn watch_refuses_an_unsupported_url_scheme() {
    copus(&["watch", "--headless", "--json", "http://localhost:7000"]).fails_with(&[
        "http://",
        "not supported",
        "tcp://HOST:PORT",
    ]);
}

#[test]
fn analyze_refuses_dump_flags_on_a_stats_file() {
    copus(&["analyze", SAMPLE, "--samples", "8"]).fails_with(&["--samples", "dump"]);
    copus(&["analyze", SAMPLE, "--seed-ema"]).fails_with(&["--seed-ema", "dump"]);
    copus(&["analyze", SAMPLE, "--device", "cpu"]).fails_with(&["--device", "dump"]);
    copus(&["analyze", SAMPLE, "--json", "--rows", "5"]).fails_with(&["--rows", "--json"]);
    copus(&["analyze", SAMPLE, "--rows", "5"]).succeeds();
    // The estimator flags shared with `open` still work here.
    copus(&[
        "analyze",
        SAMPLE,
        "--smoother",
        "one-sided",
        "--confidence",
        "0.9",
    ])
    .succeeds();
}

/// `--seq-len` on a stats file reads each sample as a sequence of that many tokens, as `watch`
/// and `open` do (analyze refused it, so the measured-run lesson's B_simple in tokens could
/// not be reproduced headless).
#[test]
fn analyze_reads_samples_as_sequences_with_seq_len() {
    let plain = json(&["analyze", SAMPLE, "--json"]);
    let given = json(&["analyze", SAMPLE, "--json", "--seq-len", "1000"]);
    let b = given["summary"]["b_simple"].as_f64().expect("b_simple");
    assert_eq!(b, plain["summary"]["b_simple"].as_f64().expect("b_simple"));
    assert_eq!(given["summary"]["seq_len"].as_f64(), Some(1000.0));
    let tokens = given["summary"]["b_simple_tokens"]
        .as_f64()
        .expect("tokens");
    assert!(
        (tokens - 1000.0 * b).abs() <= 1e-9 * tokens,
        "{tokens} vs {b}"
    );
    assert_ne!(plain["summary"]["seq_len"].as_f64(), Some(1000.0));
    let text = copus(&["analyze", SAMPLE, "--seq-len", "1000"])
        .succeeds()
        .stdout
        .clone();
    assert!(text.contains("sequences of 1000 tokens"), "{text}");
}

/// Every key of `v` in snake_case; every string free of Rust debug forms.
fn check_json(v: &Value, at: &str) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                assert!(
                    k.chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
                    "key {at}.{k} is not snake_case"
                );
                check_json(x, &format!("{at}.{k}"));
            }
        }
        Value::Array(a) => a.iter().for_each(|x| check_json(x, at)),
        Value::String(s) => {
            for bad in [
                "..=",
                "Some(",
                "None",
                "Selective",
                "Full",
                "TwoBatch",
                "ReferenceBatch",
            ] {
                assert!(!s.contains(bad), "{at} = {s:?} holds a Rust debug form");
            }
        }
        _ => {}
    }
}

#[test]
fn json_holds_snake_case_names_and_structured_layouts() {
    let plan = json(&["plan", DEMO, "--json"]);
    check_json(&plan, "plan");
    assert_eq!(plan["token_axis"]["kind"], "reference_batch");
    assert!(
        plan["token_axis"]["batch"]
            .as_f64()
            .is_some_and(|b| b > 0.0)
    );
    let gpus = 64; // the demo's 8 × 8
    for s in plan["strategies"].as_array().expect("strategies") {
        let st = &s["start_state"];
        let n = ["dp", "tp", "pp"]
            .iter()
            .map(|k| st[k].as_u64().expect("degree"))
            .product::<u64>();
        assert_eq!(n, gpus, "{st}");
        assert!(
            s["start"]
                .as_str()
                .expect("label")
                .starts_with(st["config"]["layout"].as_str().expect("structured layout")),
            "{s}"
        );
    }
    let grid = json(&["grid", DEMO, "--json"]);
    check_json(&grid, "grid");
    let cells = grid["cells"].as_array().expect("cells");
    assert!(cells.iter().any(|c| c["config"].is_object()));
    for c in cells.iter().filter(|c| c["config"].is_object()) {
        let rc = c["config"]["recompute"].as_str().expect("recompute");
        assert!(["none", "selective", "full"].contains(&rc), "{rc}");
        assert_eq!(c["config"]["layout"], c["layout"]);
    }
    check_json(&json(&["analyze", SAMPLE, "--json"]), "analyze");
}

#[test]
fn predict_validates_its_flags_and_names_them() {
    let inline = [
        "predict", "--layers", "4", "--hidden", "100", "--heads", "3", "--vocab", "100", "--seq",
        "128", "--gpus", "1", "--batch", "8",
    ];
    copus(&inline).fails_with(&["hidden", "divisible", "3 heads"]);
    // Inline-shape flags with a profile would be silently ignored: refused.
    for flag in [["--kv-heads", "8"], ["--ffn", "1000"]] {
        copus(&[
            "predict", "--model", "llama-7b", flag[0], flag[1], "--gpus", "8", "--batch", "64",
        ])
        .fails_with(&[flag[0], "--model"]);
    }
    copus(&[
        "predict",
        "--model",
        "llama-7b",
        "--gpus",
        "8",
        "--batch",
        "64",
        "--gpus-per-node",
        "0",
    ])
    .fails_with(&["--gpus-per-node"]);
    copus(&[
        "predict", "--model", "llama-7b", "--gpus", "8", "--batch", "63",
    ])
    .fails_with(&[
        "--batch 63",
        "does not split over the 8 data-parallel replicas",
    ]);
    copus(&[
        "predict", "--model", "llama-7b", "--gpus", "8", "--tp", "3", "--batch", "64",
    ])
    .fails_with(&["--tp 3", "does not divide"]);
}

#[test]
fn predict_warns_when_tensor_parallelism_crosses_nodes() {
    let args = [
        "predict", "--model", "llama-7b", "--gpus", "16", "--batch", "64",
    ];
    let within = copus(&[&args[..], &["--tp", "8"]].concat());
    within.succeeds();
    assert!(!within.stdout.contains("spans"), "{}", within.stdout);
    // A note among the figures (and a caveat in --json), not a line on stderr.
    let across = copus(&[&args[..], &["--tp", "16"]].concat());
    across.succeeds();
    assert!(
        across
            .stdout
            .contains("note             TP 16 spans 2 nodes"),
        "{}",
        across.stdout
    );
}

#[test]
fn predict_shows_why_a_configuration_does_not_fit_and_what_would() {
    // A configuration that does not fit is a result (exit 0), with the reason and the
    // nearest change that runs (docs/MODEL.md, "Stating your stack").
    let run = copus(&[
        "predict",
        "--model",
        "gpt-70b",
        "--gpus",
        "32",
        "--batch",
        "64",
        "--zero",
        "0",
        "--recompute",
        "none",
    ]);
    run.succeeds();
    assert!(run.stdout.contains("does NOT fit"), "{}", run.stdout);
    // Each entry with its wrapped continuation lines (indented past the label) as one.
    let mut entries: Vec<String> = Vec::new();
    for l in run.stdout.lines() {
        match entries.last_mut() {
            Some(e) if l.starts_with("                   ") => {
                e.push(' ');
                e.push_str(l.trim());
            }
            _ => entries.push(l.to_string()),
        }
    }
    assert!(
        entries
            .iter()
            .filter(|l| l.contains("TFLOP/s") || l.contains("throughput"))
            .all(|l| l.ends_with("(if it fit)")),
        "{}",
        run.stdout
    );
    // Not "the fastest that fits" of micro-batches none of which fits.
    assert!(
        run.stdout
            .contains("micro-batch 1 (none of 1, 2 fits: the smallest shown)"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("out of memory") && run.stdout.contains("fits instead     --tp"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("states") && run.stdout.contains("breakdown"),
        "{}",
        run.stdout
    );
    // The suggestion runs and fits.
    let hint = run.stdout.split("fits instead     ").nth(1).expect("hint");
    let flags: Vec<&str> = hint
        .split(" (")
        .next()
        .expect("flags")
        .split_whitespace()
        .collect();
    let mut args = vec![
        "predict", "--model", "gpt-70b", "--gpus", "32", "--batch", "64",
    ];
    args.extend(&flags);
    let fixed = copus(&args);
    fixed.succeeds();
    assert!(fixed.stdout.contains("(fits in "), "{}", fixed.stdout);
    // Nothing fits on too few GPUs: said, with the fix.
    let none = copus(&[
        "predict", "--model", "gpt-70b", "--gpus", "8", "--batch", "64",
    ]);
    none.succeeds();
    assert!(
        none.stdout.contains("nothing on these GPUs") && none.stdout.contains("more GPUs"),
        "{}",
        none.stdout
    );
    // The same in --json: no nearest change, and what to change instead.
    let json = copus(&[
        "predict", "--model", "gpt-70b", "--gpus", "8", "--batch", "64", "--json",
    ]);
    json.succeeds();
    let v: serde_json::Value = serde_json::from_str(&json.stdout).expect("json");
    assert!(v["nearest_change"].is_null(), "{v}");
    assert!(
        v["nothing_fits"]
            .as_str()
            .is_some_and(|t| t.contains("more GPUs")),
        "{v}"
    );
}

#[test]
fn what_fits_instead_searches_the_recompute_policies_the_command_allowed() {
    // `--recompute auto` (the default) leaves the policy free: what fits instead is the fastest
    // on these GPUs with any of the stack's policies, not only the one the layout that did not
    // fit fell back to (full, 21 % slower here than the fastest that fits). A policy given is
    // kept.
    let fits_instead = |extra: &[&str]| {
        let mut args = vec![
            "predict",
            "--model",
            "llama3-70b",
            "--gpus",
            "128",
            "--tp",
            "1",
            "--pp",
            "1",
            "--batch",
            "512",
            "--json",
        ];
        args.extend_from_slice(extra);
        let out = copus(&args);
        out.succeeds();
        let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("json");
        assert_eq!(v["fits"], false, "{v}");
        // Throughput of what cannot run is no figure a script may sort by: null, as in grid.
        for key in [
            "tokens_per_s",
            "tokens_per_s_per_gpu",
            "mfu",
            "model_tflops_per_gpu",
        ] {
            assert!(v[key].is_null(), "{key}: {v}");
        }
        assert!(v["step_time_s"].as_f64().is_some_and(|t| t > 0.0), "{v}");
        let n = v["nearest_change"].clone();
        let flags = n["flags"].as_str().expect("flags").to_string();
        (n["tokens_per_s"].as_f64().expect("tokens/s"), flags)
    };
    let (auto, auto_flags) = fits_instead(&[]);
    let (full, full_flags) = fits_instead(&["--recompute", "full"]);
    assert!(full_flags.contains("--recompute full"), "{full_flags}");
    assert!(
        auto > 1.05 * full,
        "{auto_flags} {auto} vs {full_flags} {full}"
    );
    // And it runs as said.
    let mut args = vec![
        "predict",
        "--model",
        "llama3-70b",
        "--gpus",
        "128",
        "--batch",
        "512",
    ];
    args.extend(auto_flags.split_whitespace());
    args.push("--json");
    let ran = copus(&args);
    ran.succeeds();
    let v: serde_json::Value = serde_json::from_str(&ran.stdout).expect("json");
    assert_eq!(v["fits"], true, "{v}");
    assert!(
        (v["tokens_per_s"].as_f64().expect("tokens/s") / auto - 1.0).abs() < 1e-9,
        "{v}"
    );
}

#[test]
fn the_fragmentation_caution_weighs_the_logits_against_the_stage_that_holds_them() {
    // Llama 3 70B on 128 H100, TP 8 × PP 2: the first stage is the fullest (84.8 of 85.9 GB)
    // but holds no logits; the last stage, which does, has room. No caution (it said "fits
    // with 1.1 GB to spare, counting the loss's logits" against the first stage's room).
    let args = [
        "predict",
        "--model",
        "llama3-70b",
        "--gpus",
        "128",
        "--tp",
        "8",
        "--pp",
        "2",
        "--batch",
        "512",
        "--vpp",
        "auto",
        "--json",
    ];
    let out = copus(&args);
    out.succeeds();
    let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("json");
    assert_eq!(v["fits"], true, "{v}");
    assert_eq!(v["memory"]["stage"], 0, "{v}");
    let spare =
        v["memory_capacity_bytes"].as_f64().unwrap() - v["memory_per_gpu_bytes"].as_f64().unwrap();
    assert!(spare < 2e9, "the fullest stage is nearly full: {spare}");
    assert!(
        !v["caveats"].to_string().contains("logits"),
        "{}",
        v["caveats"]
    );
}

#[test]
fn an_interleave_no_pipeline_depth_can_run_is_said_not_dropped_silently() {
    let dir = tempfile::tempdir().expect("tempdir");
    let session = |interleave: &str| {
        let path = dir.path().join(format!("s{}.ron", interleave.len()));
        std::fs::write(
            &path,
            format!(
                r#"(name: "70b", model: Named("llama3-70b"),
                    cluster: (hardware: Named("h100-sxm"), nodes: 16, gpus_per_node: 8),
                    source: Scenario((law: MerrillPlateau, start_tokens: 1e9,
                        total_tokens: 600e9, phases: 20, nominal_batch: 512)),
                    search: (batch_sizes: [128, 256, 512], micro_batches: [1], zero: [1],
                        recompute: [None, Full], interleave: {interleave},
                        allow_cross_node_tp: false))"#
            ),
        )
        .expect("session");
        path.display().to_string()
    };
    // 80 layers: 7 divides no stage's layers at any depth of 128 GPUs, 2 does.
    let seven = copus(&["plan", &session("[1, 7]")]);
    seven.succeeds();
    assert!(
        seven
            .stdout
            .contains("the search's interleave 7 suits no pipeline depth"),
        "{}",
        seven.stdout
    );
    let two = copus(&["plan", &session("[1, 2, 4]")]);
    two.succeeds();
    assert!(
        !two.stdout.contains("suits no pipeline depth"),
        "{}",
        two.stdout
    );
}

#[test]
fn a_negative_number_is_named_as_the_value_it_is() {
    // clap reads `--batch -512` as the flags -5, -1, -2 ("unexpected argument '-5'").
    copus(&[
        "predict",
        "--model",
        "llama3-8b",
        "--gpus",
        "8",
        "--batch",
        "-512",
    ])
    .fails_with(&["--batch -512", "a negative number"]);
    copus(&["grid", "demo", "--at", "-5"]).fails_with(&["--at -5", "a negative number"]);
    // Other unknown arguments keep clap's own message.
    copus(&[
        "predict",
        "--model",
        "llama3-8b",
        "--gpus",
        "8",
        "--batch",
        "8",
        "--bogus",
    ])
    .fails_with(&["--bogus"]);
    // A flag the command does not have, or one that takes no value, before a negative number:
    // clap's message names what is wrong, not "a negative number, which --bogus does not take".
    for flag in ["--gemm-plateau", "--json"] {
        let run = copus(&[
            "predict",
            "--model",
            "llama3-8b",
            "--gpus",
            "8",
            "--batch",
            "8",
            flag,
            "-1",
        ]);
        assert_eq!(run.code, Some(2), "{run:?}");
        assert!(
            !run.stderr.contains("a negative number") && run.stderr.contains("unexpected argument"),
            "{run:?}"
        );
    }
}

#[test]
fn error_causes_are_printed_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = dir.path().join("missing-source.ron");
    std::fs::write(
        &s,
        r#"(name: "m", model: Named("llama-7b"),
            cluster: (hardware: Named("h100-sxm"), nodes: 1, gpus_per_node: 8),
            source: Stats(path: "missing.ndjson"))"#,
    )
    .expect("write");
    let s = s.display().to_string();
    for run in [
        copus(&["grid", &s]),
        copus(&["plan", &s]),
        copus(&["analyze", "/nonexistent/run.ndjson"]),
        copus(&[
            "predict",
            "--model",
            "/nonexistent/m.ron",
            "--gpus",
            "8",
            "--batch",
            "8",
        ]),
    ] {
        run.fails_with(&["No such file"]);
        assert_eq!(
            run.stderr.matches("No such file").count(),
            1,
            "{}",
            run.stderr
        );
        assert!(
            run.stderr.matches("missing.ndjson").count() <= 1,
            "{}",
            run.stderr
        );
    }
}

#[test]
fn every_cluster_size_the_what_if_reaches_has_runnable_cells_and_goodput_follows_the_gpus() {
    // The what-if steps nodes from 1 to 16 (8 GPUs each); powers-of-two batches alone left
    // 7, 6, 5, 3 nodes with every DP·mbs-divisible cell missing. The batch axis gains the
    // multiples of the GPU count, so each size has a best cell, and the best goodput grows
    // with the GPU count (never more than proportionally).
    let demo = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("sessions/demo.ron"),
    )
    .expect("demo")
    .replace("\"../", &format!("\"{}/", env!("CARGO_MANIFEST_DIR")));
    let dir = tempfile::tempdir().expect("tempdir");
    let mut previous: Option<(u32, f64)> = None;
    for nodes in 1..=16u32 {
        let path = dir.path().join(format!("n{nodes}.ron"));
        std::fs::write(
            &path,
            demo.replacen("nodes: 8", &format!("nodes: {nodes}"), 1),
        )
        .expect("write");
        let v: Value = json(&[
            "grid",
            path.to_str().expect("utf-8"),
            "--json",
            "--at",
            "100B",
        ]);
        let best = &v["best"];
        let goodput = best["goodput"]
            .as_f64()
            .unwrap_or_else(|| panic!("{nodes} nodes: {v}"));
        let batch = best["batch"].as_u64().expect("batch");
        let dp = best["config"]["dp"].as_u64().expect("dp");
        let mbs = best["config"]["mbs"].as_u64().expect("mbs");
        assert_eq!(batch % (dp * mbs), 0, "{nodes} nodes: {best}");
        if let Some((n0, g0)) = previous {
            let ratio = goodput / g0;
            let gpus = f64::from(nodes) / f64::from(n0);
            assert!(
                ratio > 1.0 && ratio < gpus * 1.1,
                "{n0}→{nodes} nodes: ×{ratio:.3}"
            );
        }
        previous = Some((nodes, goodput));
    }
}

#[test]
fn a_run_far_from_the_models_sequence_length_is_not_laid_on_it_silently() {
    // The built-in trainer's samples are one token each; the default model's are 4096.
    let dir = tempfile::tempdir().expect("tempdir");
    let run = dir.path().join("run.ndjson");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_copus"))
        .args(["demo-train", "--steps", "60", "--quiet", "--out"])
        .arg(&run)
        .output()
        .expect("demo-train");
    assert!(out.status.success());
    let session = dir.path().join("s.ron");
    std::fs::write(
        &session,
        r#"(name: "own run", model: Named("llama-7b"),
            cluster: (hardware: Named("h100-sxm"), nodes: 1, gpus_per_node: 8),
            source: Stats(path: "run.ndjson"))"#,
    )
    .expect("session");
    let r = copus(&["grid", session.to_str().expect("utf-8")]);
    r.fails_with(&["1 token per sample", "4096-token samples", "--seq-len 4096"]);
    let fixed = std::fs::read_to_string(&session).expect("session").replace(
        "Stats(path: \"run.ndjson\")",
        "Stats(path: \"run.ndjson\", seq_len: Some(4096))",
    );
    std::fs::write(&session, fixed).expect("session");
    let v: Value = json(&["grid", session.to_str().expect("utf-8"), "--json"]);
    assert!(
        v["b_crit"].as_f64().is_some_and(|b| b > 1.0),
        "{}",
        v["b_crit"]
    );
    // Stated as one-token samples: the run's 128 tokens a step are no whole sequence of the
    // model's, so neither `grid` nor the explorer marks a current batch on the heatmap (the
    // explorer put ▼ on batch 128, its recommendation "your batch 128"); the timeline, on
    // the run's own axis, still shows the run's 128.
    let one = std::fs::read_to_string(&session)
        .expect("session")
        .replace("seq_len: Some(4096)", "seq_len: Some(1)");
    std::fs::write(&session, one).expect("session");
    let v: Value = json(&["grid", session.to_str().expect("utf-8"), "--json"]);
    assert!(v["current_batch"].is_null(), "{}", v["current_batch"]);
    let shot = copus(&[
        "snapshot",
        session.to_str().expect("utf-8"),
        "--size",
        "120x40",
    ]);
    shot.succeeds();
    assert!(!shot.stdout.contains("your batch"), "{}", shot.stdout);
    assert!(!shot.stdout.contains('▼'), "{}", shot.stdout);
    assert!(shot.stdout.contains("▄ batch 128×1 now"), "{}", shot.stdout);
    // A run batch that is no column of the grid (128 samples of 1000 tokens: 31 sequences) is
    // said, not dropped.
    let odd = std::fs::read_to_string(&session)
        .expect("session")
        .replace("seq_len: Some(1)", "seq_len: Some(1000)");
    std::fs::write(&session, odd).expect("session");
    let v: Value = json(&["grid", session.to_str().expect("utf-8"), "--json"]);
    assert_eq!(v["current_batch"], 31, "{}", v["current_batch"]);
    assert!(v["current"].is_null());
    let caveats = v["caveats"].to_string();
    assert!(
        caveats.contains("the run's batch 31 (sequences of 4096 tokens) is not one of"),
        "{caveats}"
    );
}

#[test]
fn demo_train_schedules_change_the_learning_rate_and_analyze_locates_the_drop() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = dir.path().join("drop.ndjson");
    let run_s = run.to_str().expect("utf-8");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_copus"))
        .args([
            "demo-train",
            "--steps",
            "120",
            "--quiet",
            "--lr-schedule",
            "step",
        ])
        .args(["--drop-at", "80", "--drop-factor", "0.2", "--out", run_s])
        .output()
        .expect("demo-train");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&run).expect("run");
    let lrs = learning_rates(&text);
    assert_eq!(lrs.len(), 120);
    assert!(
        (lrs[79] - 0.05).abs() < 1e-12 && (lrs[80] - 0.01).abs() < 1e-12,
        "{lrs:?}"
    );
    let v = json(&["analyze", run_s, "--json"]);
    let lr = v["summary"]["diagnostics"]
        .as_array()
        .expect("diagnostics")
        .iter()
        .find(|d| d["kind"] == "lr_change")
        .cloned()
        .expect("an lr_change diagnostic");
    assert_eq!(lr["steps"], serde_json::json!([80, 80]), "{lr}");
    let cosine = std::process::Command::new(env!("CARGO_BIN_EXE_copus"))
        .args([
            "demo-train",
            "--steps",
            "50",
            "--quiet",
            "--lr-schedule",
            "cosine",
        ])
        .output()
        .expect("demo-train");
    let lrs = learning_rates(&String::from_utf8_lossy(&cosine.stdout));
    let peak = lrs.iter().cloned().fold(0.0, f64::max);
    assert!(
        lrs[0] < peak && lrs[49] < 0.2 * peak,
        "warm-up then decay: {lrs:?}"
    );
}

#[test]
fn snapshot_draws_any_screen_after_keys_as_text_or_svg() {
    let run = crate::render_support::snapshot;
    let first = run(&["--size", "80x24"]);
    assert_eq!(first.lines().count(), 24);
    assert!(first.lines().all(|l| l.chars().count() == 80), "{first}");
    assert!(
        first.contains("Goodput") && first.contains("8×8"),
        "{first}"
    );
    // The what-if lesson's key: one node fewer, recomputed at once.
    let fewer = run(&["--keys", "2 Left", "--size", "120x40"]);
    assert!(
        fewer.contains("7×8") && fewer.contains("[modified]"),
        "{fewer}"
    );
    let lesson = run(&["--lesson", "what-if", "--size", "120x40"]);
    assert!(lesson.contains("Lesson 1/2"), "{lesson}");
    let svg = run(&["--format", "svg", "--size", "80x24"]);
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    // Glyphs of one style in a row are one <text> (a label is a word to select and edit), each
    // placed at its cell: read back by position, the picture holds the text screen's glyphs.
    let texts = svg.matches("<text").count();
    let glyphs = first.chars().filter(|c| !c.is_whitespace()).count();
    assert!(
        texts > 20 && texts * 5 < glyphs,
        "{texts} texts for {glyphs} glyphs"
    );
    let mut grid = vec![vec![' '; 80]; 24];
    for element in svg.split("<text x=\"").skip(1) {
        let (xs, rest) = element.split_once('"').expect("x list");
        let y: f64 = rest
            .split_once("y=\"")
            .and_then(|(_, r)| r.split_once('"'))
            .and_then(|(y, _)| y.parse().ok())
            .expect("y");
        let body = rest
            .split_once('>')
            .and_then(|(_, b)| b.split_once("</text>"))
            .expect("body")
            .0
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"")
            .replace("&amp;", "&");
        let row = (y / 17.0).floor() as usize;
        let xs: Vec<f64> = xs.split(' ').map(|x| x.parse().expect("x")).collect();
        assert_eq!(xs.len(), body.chars().count(), "{element}");
        for (x, c) in xs.iter().zip(body.chars()) {
            grid[row][(x / 8.4).round() as usize] = c;
        }
    }
    // (The heatmap's rows differ: in colour its cells carry no shade glyphs.)
    let shades = ['█', '▓', '▒', '░'];
    let mut compared = 0;
    for (row, line) in grid.iter().zip(first.lines()) {
        if line.contains(shades) {
            continue;
        }
        let drawn: String = row.iter().collect();
        assert_eq!(drawn.trim_end(), line.trim_end());
        compared += 1;
    }
    assert!(compared >= 8, "{compared} rows compared");
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("s.svg");
    std::fs::write(&out, "mine").expect("write");
    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_copus"))
        .args(["snapshot", "--out", out.to_str().expect("utf-8")])
        .output()
        .expect("snapshot");
    assert!(!refused.status.success());
    assert_eq!(std::fs::read_to_string(&out).ok().as_deref(), Some("mine"));
    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_copus"))
        .args(["snapshot", "--keys", "Nope"])
        .output()
        .expect("snapshot");
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--keys: unknown key 'Nope'"));
}

/// The `lr` of every protocol line of `text`.
fn learning_rates(text: &str) -> Vec<f64> {
    text.lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).expect("json")["lr"]
                .as_f64()
                .expect("lr")
        })
        .collect()
}

/// `grid --rank B [--filter …]` is the explorer's ranked list, headless: the grid's feasible
/// cells of that batch column (and only the filtered layouts) in goodput order.
#[test]
fn grid_rank_is_the_batch_column_sorted_by_goodput() {
    let grid = json(&["grid", DEMO, "--at", "150B", "--json"]);
    let ranked = json(&["grid", DEMO, "--at", "150B", "--rank", "256", "--json"]);
    let mut want: Vec<(String, f64)> = grid["cells"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["batch"] == 256 && c["feasible"] == true)
        .map(|c| {
            (
                c["layout"].as_str().unwrap().to_string(),
                c["goodput"].as_f64().unwrap(),
            )
        })
        .collect();
    want.sort_by(|a, b| b.1.total_cmp(&a.1));
    let runs = ranked["runs"].as_array().unwrap();
    assert_eq!(runs.len(), want.len());
    for (i, (r, (_, g))) in runs.iter().zip(&want).enumerate() {
        assert_eq!(r["rank"], i + 1);
        assert_eq!(r["goodput"].as_f64().unwrap(), *g);
        // The configuration in the shape of the grid's cells: the same one.
        let cell = grid["cells"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["batch"] == 256 && c["config"]["layout"] == r["config"]["layout"])
            .expect("the grid's cell");
        assert_eq!(r["config"], cell["config"]);
        assert_eq!(r["config"]["mbs"], r["micro_batch"]);
    }
    let filtered = json(&[
        "grid",
        DEMO,
        "--at",
        "150B",
        "--rank",
        "256",
        "--filter",
        "tp<=2 pp=1",
        "--json",
    ]);
    for r in filtered["runs"].as_array().unwrap() {
        assert!(
            r["layout"]["tp"].as_u64().unwrap() <= 2 && r["layout"]["pp"] == 1,
            "{r}"
        );
    }
    let cells = json(&["grid", DEMO, "--filter", "tp=8", "--json"]);
    assert!(
        cells["cells"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["layout"].as_str().unwrap().contains("TP8"))
    );
    copus(&["grid", DEMO, "--rank", "100"]).fails_with(&["--rank 100", "not a batch", "256"]);
    copus(&["grid", DEMO, "--filter", "zero=1"]).fails_with(&["--filter", "what-if"]);
    // What the ranking rests on is said as the grid says it: the command line's replacements
    // (a note; `caveats` in JSON), the trajectory point and its B_crit.
    let args = [
        "grid", DEMO, "--at", "150B", "--rank", "256", "--nodes", "16",
    ];
    let text = copus(&args);
    text.succeeds();
    assert!(
        text.stdout
            .contains("note: the command line changed the session's nodes to 16"),
        "{}",
        text.stdout
    );
    assert!(text.stdout.contains("B_crit"), "{}", text.stdout);
    let mut with_json = args.to_vec();
    with_json.push("--json");
    let v = json(&with_json);
    assert!(v["caveats"].to_string().contains("nodes to 16"), "{v}");
    // A layout that cannot run gets the nearest change that does, in the ranking's text and
    // JSON as in `predict` and the grid's cells (the text gave only the reason).
    let rank = [
        "grid",
        DEMO,
        "--model",
        "llama3-70b",
        "--nodes",
        "16",
        "--rank",
        "512",
    ];
    let text = copus(&rank);
    text.succeeds();
    assert!(
        text.stdout
            .contains("nearest change that runs, on the same GPUs:")
            && text.stdout.contains("B_crit 40 sequences of 8192 tokens"),
        "{}",
        text.stdout
    );
    let mut with_json = rank.to_vec();
    with_json.push("--json");
    let v = json(&with_json);
    let refused = v["cannot_run"].as_array().expect("cannot_run");
    assert!(!refused.is_empty(), "{v}");
    for r in refused {
        let n = &r["nearest_change"];
        assert!(
            n["prediction"]["tokens_per_s"]
                .as_f64()
                .is_some_and(|t| t > 0.0),
            "{r}"
        );
        let l = &r["layout"];
        let label = format!("DP{}·TP{}·PP{}", l["dp"], l["tp"], l["pp"]);
        let changes: Vec<&str> = n["changes"]
            .as_array()
            .expect("changes")
            .iter()
            .filter_map(|c| c.as_str())
            .collect();
        let line = format!("  {label:<20} {}", changes.join(", "));
        assert!(text.stdout.contains(&line), "{line}\n{}", text.stdout);
    }
    // A model of another sequence length keeps B_crit's tokens and the current batch's
    // sequences: the note says what that does to the current batch's tokens.
    let v = json(&["grid", DEMO, "--model", "llama3-8b", "--json"]);
    assert!(
        v["caveats"]
            .to_string()
            .contains("current batch kept at 512 sequences, so 4.2M tokens (was 2.1M"),
        "{v}"
    );
    let v = json(&[
        "grid",
        DEMO,
        "--model",
        "llama3-8b",
        "--seq",
        "4096",
        "--json",
    ]);
    assert!(
        !v["caveats"].to_string().contains("current batch kept"),
        "{v}"
    );
    assert!(
        v["calibration"].is_null() && v["step"].is_u64() && v["b_crit"].is_f64(),
        "{v}"
    );
}

#[test]
fn snapshot_takes_the_stack_as_open_does() {
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_copus"))
            .arg("snapshot")
            .args(args)
            .output()
            .expect("snapshot")
    };
    let sample = concat!(env!("CARGO_MANIFEST_DIR"), "/assets/data/sample-run.ndjson");
    let out = run(&[sample, "--stack", "torchtitan-fsdp2", "--size", "120x40"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let screen = String::from_utf8(out.stdout).expect("utf-8");
    let title = screen.lines().next().unwrap_or_default();
    assert!(title.contains("torchtitan-fsdp2"), "{title}");
    // A stats file states no ZeRO stage: the stack's own (FSDP: 3) is searched.
    assert!(screen.contains("ZeRO-3"), "{screen}");
    let demo = run(&["--stack", "nemo", "--size", "120x40"]);
    assert!(demo.status.success());
    assert!(String::from_utf8_lossy(&demo.stdout).contains("· nemo ·"));
    let lesson = run(&["--lesson", "1", "--stack", "nemo"]);
    assert!(!lesson.status.success());
    assert!(String::from_utf8_lossy(&lesson.stderr).contains("a lesson sets its own stack"));
}

/// `predict --mbs auto` and `grid` search different micro-batches and say which: the same
/// cell can read faster in `predict`, and `predict --mbs N` with the grid's choice is the
/// grid's number.
#[test]
fn predict_and_grid_name_the_micro_batches_they_searched() {
    let grid = json(&["grid", DEMO, "--json"]);
    let searched: Vec<u64> = grid["micro_batches_searched"]
        .as_array()
        .expect("grid's list")
        .iter()
        .filter_map(Value::as_u64)
        .collect();
    assert_eq!(searched, [1, 2, 4], "the demo session's search");
    let cell = grid["best"].clone();
    let config = &cell["config"];
    let (dp, tp, pp, mbs) = (
        config["dp"].as_u64().expect("dp"),
        config["tp"].as_u64().expect("tp"),
        config["pp"].as_u64().expect("pp"),
        config["mbs"].as_u64().expect("mbs"),
    );
    let batch = cell["batch"].as_u64().expect("batch").to_string();
    let gpus = (dp * tp * pp).to_string();
    let (tp, pp) = (tp.to_string(), pp.to_string());
    let base = [
        "predict",
        "--model",
        "llama-7b",
        "--hardware",
        "h100-sxm",
        "--gpus",
        &gpus,
        "--tp",
        &tp,
        "--pp",
        &pp,
        "--batch",
        &batch,
        "--json",
    ];
    let auto = json(&base);
    let per_replica = cell["batch"].as_u64().expect("batch") / dp;
    let divisors: Vec<u64> = (1..=per_replica.min(64))
        .filter(|m| per_replica.is_multiple_of(*m))
        .collect();
    let listed: Vec<u64> = auto["micro_batches_searched"]
        .as_array()
        .expect("predict's list")
        .iter()
        .filter_map(Value::as_u64)
        .collect();
    assert_eq!(listed, divisors);
    let mbs = mbs.to_string();
    let fixed = json(&[&base[..], &["--mbs", &mbs]].concat());
    assert_eq!(
        fixed["micro_batches_searched"],
        serde_json::json!([mbs.parse::<u64>().unwrap()])
    );
    let text = copus(&[
        "predict",
        "--model",
        "llama-7b",
        "--hardware",
        "h100-sxm",
        "--gpus",
        "64",
        "--tp",
        "2",
        "--batch",
        "512",
    ]);
    assert!(
        text.stdout
            .contains("(the fastest that fits of 1, 2, 4, 8, 16)"),
        "{}",
        text.stdout
    );
    assert!(
        copus(&["grid", DEMO])
            .stdout
            .contains("micro-batches searched: 1, 2, 4"),
        "grid's header names its search"
    );
}

/// An interleave that splits uneven pipeline stages into virtual stages of unequal depth is
/// predicted, with a caveat naming what runs it; an even one without. One rule for both:
/// vpp divides a full stage's layers (vpp 3 was refused on 20 layers a stage but taken on
/// stages of 7 and 8).
#[test]
fn an_interleave_of_unequal_virtual_stages_is_named() {
    let predict = |gpus: &str, pp: &str, vpp: &str| {
        json(&[
            "predict",
            "--model",
            "llama3-70b",
            "--gpus",
            gpus,
            "--tp",
            "8",
            "--pp",
            pp,
            "--vpp",
            vpp,
            "--batch",
            "480",
            "--json",
        ])
    };
    // 80 layers on PP 3: the first stage one short (26, 27, 27); the embedding takes its place.
    let caveats = predict("120", "3", "3")["caveats"].to_string();
    assert!(
        caveats.contains("vpp 3 on end stages of 26 layers, one short of the others' 27")
            && caveats.contains("--account-for-embedding-in-pipeline-split"),
        "{caveats}"
    );
    // 80 layers on PP 6: four stages of 13 beside two of 14, which only a layout expresses.
    let caveats = predict("96", "6", "2")["caveats"].to_string();
    assert!(
        caveats.contains("vpp 2 does not divide the 13 layers")
            && caveats.contains("--pipeline-model-parallel-layout"),
        "{caveats}"
    );
    // vpp must divide a full stage's layers, even stages or not.
    for (gpus, pp, vpp, why) in [
        (
            "128",
            "4",
            "3",
            "3 virtual stages do not divide the 20 layers per stage",
        ),
        (
            "120",
            "3",
            "2",
            "2 virtual stages do not divide the 27 layers of a full stage",
        ),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_copus"))
            .args([
                "predict",
                "--model",
                "llama3-70b",
                "--tp",
                "8",
                "--batch",
                "480",
            ])
            .args(["--gpus", gpus, "--pp", pp, "--vpp", vpp])
            .output()
            .expect("runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(why), "{err}");
    }
    let even = json(&[
        "predict",
        "--model",
        "llama3-70b",
        "--gpus",
        "128",
        "--tp",
        "8",
        "--pp",
        "4",
        "--vpp",
        "2",
        "--batch",
        "512",
        "--json",
    ]);
    assert!(
        !even["caveats"].to_string().contains("does not divide"),
        "{even}"
    );
}

/// `plan` on a measured run says which switches rest on what the estimate does not support:
/// one after a learning-rate jump, and those where B_crit's interval is unbounded above —
/// each checked against `analyze --json`'s own per-step intervals.
#[test]
fn plan_cautions_switches_the_estimate_does_not_support() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = dir.path().join("run.ndjson");
    let run_s = run.to_str().expect("utf-8");
    copus(&[
        "demo-train",
        "--steps",
        "800",
        "--lr-schedule",
        "step",
        "--out",
        run_s,
    ])
    .succeeds();
    let plan = json(&["plan", run_s, "--seq-len", "4096", "--json"]);
    let caveats: Vec<String> = plan["caveats"]
        .as_array()
        .expect("caveats")
        .iter()
        .filter_map(|c| c.as_str().map(str::to_string))
        .collect();
    let analysis = json(&["analyze", run_s, "--json"]);
    let steps = analysis["steps"].as_array().expect("steps");
    let unbounded_at = |step: u64| {
        steps
            .iter()
            .find(|r| r["step"].as_u64() == Some(step))
            .is_some_and(|r| r["ci"].is_array() && r["ci"][1].is_null())
    };
    let lr_jumps: Vec<u64> = steps
        .windows(2)
        .filter(|w| {
            let (a, b) = (w[0]["lr"].as_f64(), w[1]["lr"].as_f64());
            matches!((a, b), (Some(a), Some(b)) if (b / a - 1.0).abs() > 0.2)
        })
        .filter_map(|w| w[1]["step"].as_u64())
        .collect();
    assert!(!lr_jumps.is_empty(), "a step schedule changes the lr");
    let mut named = 0;
    for (k, s) in plan["switches"]
        .as_array()
        .expect("switches")
        .iter()
        .enumerate()
    {
        let step = s["at_step"].as_u64().expect("step");
        let said = |what: &str| {
            caveats
                .iter()
                .any(|c| c.starts_with(&format!("switch {} at step {step} {what}", k + 1)))
        };
        assert_eq!(
            said("rests on a B_crit whose interval is unbounded"),
            unbounded_at(step)
        );
        let after_jump = lr_jumps.iter().any(|&j| j <= step && step - j <= 40);
        assert_eq!(
            said("follows the learning-rate change"),
            after_jump,
            "{caveats:?}"
        );
        named += usize::from(unbounded_at(step) || after_jump);
    }
    assert!(named > 0, "the run has switches to caution: {caveats:?}");
    // In the unit the switch lines name B_crit in (sequences at --seq-len 4096; it said
    // "samples" beside the switch line's "sequences" for the same number).
    for c in caveats
        .iter()
        .filter(|c| c.contains("is unbounded above there"))
    {
        assert!(c.contains("–∞] sequences)"), "{c}");
    }
}

/// Under `lr-sqrt` a batch whose √-scaled learning rate diverges is said to diverge (grid's
/// text and `diverges` in JSON, `div` on the heatmap), not shown as a goodput of "1 tok/s".
#[test]
fn a_diverging_learning_rate_is_named_not_shown_as_a_speed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let session = lr_sqrt_demo(dir.path());
    let s = session.to_str().expect("utf-8");
    let grid = json(&["grid", s, "--at", "150B", "--json"]);
    let cells = grid["cells"].as_array().expect("cells");
    let diverging: Vec<&Value> = cells.iter().filter(|c| c["diverges"] == true).collect();
    assert!(
        !diverging.is_empty(),
        "some batch diverges under lr-sqrt at 150B"
    );
    for c in &diverging {
        assert!(c["stat_eff"].as_f64().is_some_and(|e| e < 1e-3), "{c}");
    }
    assert!(cells.iter().any(|c| c["diverges"] == false));
    let text = copus(&["grid", s, "--at", "150B"]).stdout;
    assert!(text.contains("diverges  "), "{text}");
    let screen = copus(&["snapshot", s, "--size", "160x40"]).stdout;
    assert!(screen.contains("div: lr diverges"), "{screen}");
    let plain = json(&["grid", "sessions/demo.ron", "--json"]);
    assert!(
        plain["cells"]
            .as_array()
            .expect("cells")
            .iter()
            .all(|c| c["diverges"] == false)
    );
}

/// The heatmap's legend never cuts a mark in the middle: at every width its marks are whole,
/// in their long forms where they fit and their short ones where not.
#[test]
fn the_heatmap_legend_keeps_its_marks_whole_at_every_width() {
    let dir = tempfile::tempdir().expect("tempdir");
    let session = lr_sqrt_demo(dir.path());
    let s = session.to_str().expect("utf-8");
    let endings = [
        "best",
        "current batch",
        "now",
        "cannot run",
        "can't run",
        "lr diverges",
        "div diverges",
    ];
    for width in (80..=200).step_by(20) {
        for path in [s, "demo"] {
            let size = format!("{width}x40");
            let screen = copus(&["snapshot", path, "--size", &size]).stdout;
            let line = screen
                .lines()
                .find(|l| l.contains("low ") && l.contains("high · ★ best"))
                .unwrap_or_else(|| panic!("no legend at {size}:\n{screen}"));
            let start = line.find("low ").expect("legend start");
            let legend = line[start..].split(['│', '┃']).next().expect("legend");
            let legend = legend.trim_end();
            assert!(
                endings.iter().any(|e| legend.ends_with(e)),
                "{path} at {size}: a mark cut: {legend:?}"
            );
        }
    }
}

/// The bundled demo under the `lr-sqrt` objective, written into `dir`.
fn lr_sqrt_demo(dir: &std::path::Path) -> std::path::PathBuf {
    let session = dir.join("lrs.ron");
    std::fs::write(
        &session,
        reliability_support::demo_with(
            "    tour: [",
            "    planner: (objective: LrSqrt),\n    tour: [",
        ),
    )
    .expect("write");
    session
}

#[test]
fn grid_json_carries_what_the_explorer_shows_of_a_cell_and_of_the_current_batch() {
    let session = "sessions/measured-sample.ron";
    let g = json(&["grid", session, "--at", "300", "--json"]);
    // The Recommendation panel's "your batch … goodput …, best has +x % over yours".
    let current = &g["current"];
    assert_eq!(current["batch"], g["current_batch"], "{g}");
    assert_eq!(g["current_batch_inferred"], false);
    let (best, mine) = (
        g["best_overall"]["goodput"].as_f64().expect("best"),
        current["goodput"].as_f64().expect("current"),
    );
    let gain = g["gain_over_current"].as_f64().expect("gain");
    assert!((best / mine - 1.0 - gain).abs() < 1e-12, "{g}");
    assert!(!g["reasons"].as_array().expect("reasons").is_empty());
    let screen = copus(&[
        "snapshot",
        session,
        "--keys",
        "g 3 0 0 Enter",
        "--size",
        "120x40",
    ]);
    screen.succeeds();
    let said = format!("best has {:+.1}% goodput over yours", gain * 100.0);
    assert!(
        screen.stdout.contains(&said),
        "{said} in\n{}",
        screen.stdout
    );
    // The title's interval, in b_crit's units, and the loss.
    let (lo, hi) = (
        g["b_crit_interval"][0].as_f64().expect("lo"),
        g["b_crit_interval"][1].as_f64().expect("hi"),
    );
    let b = g["b_crit"].as_f64().expect("b_crit");
    assert!(lo < b && b < hi, "{g}");
    assert!(g["loss"].as_f64().is_some(), "{g}");
    // A cell out of memory carries the searched configuration that comes closest, with its
    // step time and memory as the explorer's x shows them, and no throughput.
    let p = json(&["grid", "sessions/paper-32b-32xh100.ron", "--json"]);
    let cells = p["cells"].as_array().expect("cells");
    let oom = cells
        .iter()
        .find(|c| {
            c["reason"]
                .as_str()
                .is_some_and(|r| r.contains("out of memory"))
        })
        .expect("a cell out of memory");
    let (mem, over) = (
        oom["memory_per_gpu_bytes"].as_f64().expect("memory"),
        oom["over_by_bytes"].as_f64().expect("over by"),
    );
    assert!(over > 0.0 && mem > over, "{oom}");
    let parts: f64 = oom["memory_parts"]
        .as_object()
        .expect("parts")
        .values()
        .filter_map(Value::as_f64)
        .sum();
    assert!((parts / mem - 1.0).abs() < 1e-9, "{oom}");
    assert!(oom["config"]["mbs"].as_u64().is_some() && oom["step_time_s"].as_f64().is_some());
    assert!(
        oom["tokens_per_s"].is_null() && oom["goodput"].is_null(),
        "{oom}"
    );
}

#[test]
fn analyze_says_a_last_line_without_its_newline_is_probably_still_being_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let full = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/data/sample-run.ndjson"),
    )
    .expect("sample");
    let lines: Vec<&str> = full.lines().take(300).collect();
    let half = &lines[299][..lines[299].len() / 2];
    let growing = dir.path().join("growing.ndjson");
    std::fs::write(&growing, format!("{}\n{half}", lines[..299].join("\n"))).expect("write");
    let run = copus(&["analyze", growing.to_str().expect("utf-8")]);
    run.succeeds();
    assert!(
        run.stderr
            .contains("growing.ndjson:300: the last line has no newline yet"),
        "{}",
        run.stderr
    );
    // The same broken line with its newline is only malformed.
    let broken = dir.path().join("broken.ndjson");
    std::fs::write(&broken, format!("{}\n{half}\n", lines[..299].join("\n"))).expect("write");
    let run = copus(&["analyze", broken.to_str().expect("utf-8")]);
    run.succeeds();
    assert!(!run.stderr.contains("no newline yet"), "{}", run.stderr);
    // A binary file (no record at all) is not a run being written: its errors say what it is.
    let binary = dir.path().join("binary.ndjson");
    std::fs::write(&binary, [0xffu8, 0xfe, 0x00, b'\n', 0x81, 0x82]).expect("write");
    let run = copus(&["analyze", binary.to_str().expect("utf-8")]);
    assert!(!run.stderr.contains("no newline yet"), "{}", run.stderr);
    assert!(run.stderr.contains("not valid UTF-8"), "{}", run.stderr);
}

/// A ranked row names what the grid's labels name, so it can be run again as written: the
/// expert-parallel degree of a mixture of experts (and the virtual stages where above 1).
/// Under DeepSpeed, whose pipeline engine takes ZeRO-0/1 only, a pipelined layout shows the
/// ZeRO-1 it runs (and is costed as), not the ZeRO-3 the search asked for, and says so.
#[test]
fn ranked_rows_show_the_configuration_that_runs() {
    let args = ["grid", DEMO, "--model", "mixtral-8x7b", "--rank", "256"];
    let text = copus(&args);
    text.succeeds();
    let mut with_json = args.to_vec();
    with_json.push("--json");
    let v = json(&with_json);
    let first = &v["runs"][0];
    let ep = first["config"]["ep"].as_u64().expect("ep");
    assert!(ep > 1, "{first}");
    let line = text
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("1 "))
        .expect("rank 1");
    assert!(line.ends_with(&format!(" EP{ep}")), "{line}");

    let args = [
        "grid",
        DEMO,
        "--model",
        "llama3-70b",
        "--nodes",
        "16",
        "--stack",
        "deepspeed",
        "--rank",
        "128",
        "--json",
    ];
    let v = json(&args);
    let runs = v["runs"].as_array().expect("runs");
    assert!(runs.iter().any(|r| r["config"]["pp"].as_u64() > Some(1)));
    for r in runs {
        let (pp, zero) = (r["config"]["pp"].as_u64(), r["config"]["zero"].as_u64());
        if pp > Some(1) {
            assert_eq!(zero, Some(1), "{r}");
            assert_eq!(r["zero"], 1, "{r}");
        } else {
            assert_eq!(zero, Some(3), "{r}");
        }
    }
    assert!(
        v["caveats"]
            .to_string()
            .contains("DeepSpeed's pipeline engine runs ZeRO-0 or ZeRO-1 only"),
        "{}",
        v["caveats"]
    );
    // predict of a ranked pipelined row gives its step time with the stage it shows.
    let row = runs
        .iter()
        .find(|r| r["config"]["pp"].as_u64() > Some(1))
        .expect("a pipelined row");
    let c = &row["config"];
    let n = |k: &str| c[k].as_u64().expect(k).to_string();
    let p = json(&[
        "predict",
        "--model",
        "llama3-70b",
        "--hardware",
        "h100-sxm",
        "--gpus",
        "128",
        "--batch",
        "128",
        "--stack",
        "deepspeed",
        "--tp",
        &n("tp"),
        "--pp",
        &n("pp"),
        "--mbs",
        &n("mbs"),
        "--zero",
        &n("zero"),
        "--recompute",
        c["recompute"].as_str().expect("recompute"),
        "--json",
    ]);
    let (a, b) = (
        p["step_time_s"].as_f64().expect("predict step"),
        row["step_time_s"].as_f64().expect("ranked step"),
    );
    assert!((a / b - 1.0).abs() < 1e-9, "predict {a} against grid {b}");
}

/// What a review of the headless commands asked for: the unit of the batches in the JSON
/// (`seq_len`), a count of 0 refused in words, and a plan with no runnable cell saying why
/// one cannot and what to change.
#[test]
fn batches_carry_their_sequence_and_empty_plans_say_why() {
    // `predict` of llama3-8b on 8 GPUs at `batch`, with `extra` flags.
    let predict = |batch: &str, extra: &[&str]| {
        let mut args = vec![
            "predict",
            "--model",
            "llama3-8b",
            "--gpus",
            "8",
            "--batch",
            batch,
        ];
        args.extend_from_slice(extra);
        copus(&args)
    };
    let p: Value = serde_json::from_str(&predict("16", &["--json"]).stdout).expect("json");
    assert_eq!(p["seq_len"], 8192, "{p}");
    let g = json(&["grid", DEMO, "--json"]);
    assert_eq!(g["seq_len"], 4096);
    let r = json(&["grid", DEMO, "--rank", "256", "--json"]);
    assert_eq!(r["seq_len"], 4096);
    let text = predict("16", &[]);
    text.succeeds();
    assert!(
        text.stdout
            .contains("(global batch 16 sequences of 8192 tokens)"),
        "{}",
        text.stdout
    );
    predict("0", &[]).fails_with(&["--batch", "must be at least 1"]);
    copus(&["plan", DEMO, "--model", "llama3-70b", "--nodes", "1"]).fails_with(&[
        "nothing to plan",
        "for example DP",
        "out of memory",
        "--nodes",
    ]);
}

/// `predict` on Llama 3 70B at 128K tokens on 128 H100 at batch 16: the long-sequence case
/// "fits instead" is tested on (followed by the flags of each test).
const LONG_70B: [&str; 9] = [
    "predict",
    "--model",
    "llama3-70b",
    "--seq",
    "131072",
    "--gpus",
    "128",
    "--batch",
    "16",
];

/// `copus` with `head`, then `tail`, then `--json`: required to succeed, parsed.
fn json_of(head: &[&str], tail: &[&str]) -> Value {
    json(&[head, tail, &["--json"]].concat())
}

/// At 128K tokens context parallelism is what makes a layout fit: "fits instead" searches it
/// (it kept the CP asked for, and proposed TP 8 × PP 2 with full recompute at 29k tokens/s
/// where CP ran about 1.7× faster), prefers the CP asked for unless another is clearly faster,
/// and writes the CP it found even where it is back to 1, so that the flags run as printed.
#[test]
fn fits_instead_searches_context_parallelism_and_its_flags_run_as_printed() {
    let nearest = |extra: &[&str]| {
        let v = json_of(&LONG_70B, &[&["--tp", "8"], extra].concat());
        assert_eq!(v["fits"], false, "{v}");
        let n = &v["nearest_change"];
        (
            n["flags"].as_str().expect("flags").to_string(),
            n["tokens_per_s"].as_f64().expect("tokens/s"),
            n["config"]["cp"].as_u64().expect("cp"),
        )
    };
    let (flags, tokens, cp) = nearest(&[]);
    assert!(cp > 1 && flags.contains(&format!("--cp {cp}")), "{flags}");
    // What it proposed before, without CP, runs much slower.
    let v = json_of(
        &LONG_70B,
        &["--tp", "8", "--pp", "2", "--recompute", "full"],
    );
    assert_eq!(v["fits"], true, "{v}");
    let tokens_cp1 = v["tokens_per_s"].as_f64().expect("tokens/s");
    assert!(
        tokens > 1.3 * tokens_cp1,
        "{flags} {tokens} vs {tokens_cp1}"
    );
    // Asked for CP 2 on a layout that does not fit, and CP 1 were the answer, the flags
    // would say `--cp 1`; here the CP asked for is kept unless another is clearly faster.
    let (flags2, tokens2, cp2) = nearest(&["--cp", "2", "--pp", "1", "--mbs", "2"]);
    assert!(flags2.contains(&format!("--cp {cp2}")), "{flags2}");
    assert!(tokens2 > 0.0);
    // A framework without context parallelism is not offered it (here nothing else fits).
    let v = json_of(&LONG_70B, &["--tp", "8", "--stack", "megatron-lm-2021"]);
    let n = &v["nearest_change"];
    assert!(n.is_null() || n["config"]["cp"] == 1, "{n}");
    let flags_given: Vec<&str> = flags.split_whitespace().collect();
    let v = json_of(&LONG_70B, &flags_given);
    assert_eq!(v["fits"], true, "{flags}: {v}");
    assert!((v["tokens_per_s"].as_f64().expect("tokens/s") / tokens - 1.0).abs() < 1e-9);
}

/// A MoE layout that does not fit shows the choice that misses the memory by the least, as
/// grid's cell does (it showed EP 1 at 875 GB where grid read EP 8 at 165 GB), so that adding
/// recompute never looks like it halves the step.
#[test]
fn a_moe_layout_that_does_not_fit_shows_what_grid_shows() {
    let run = |recompute: &str| {
        let v = json(&[
            "predict",
            "--model",
            "mixtral-8x7b",
            "--gpus",
            "256",
            "--tp",
            "4",
            "--mbs",
            "2",
            "--batch",
            "128",
            "--stack",
            "megatron-lm-2021",
            "--recompute",
            recompute,
            "--json",
        ]);
        (
            v["fits"].as_bool().expect("fits"),
            v["ep"].as_u64().expect("ep"),
            v["step_time_s"].as_f64().expect("step"),
        )
    };
    let (fits_none, ep_none, step_none) = run("none");
    let (fits_sel, ep_sel, step_sel) = run("selective");
    assert!(!fits_none && fits_sel);
    assert_eq!(ep_none, ep_sel);
    assert!(
        step_sel >= step_none,
        "recompute made it faster: {step_sel} < {step_none}"
    );
}

/// Tensor parallelism beyond the GPUs that share the fast link is named in `caveats` (the JSON
/// had none: the warning went to stderr only), across nodes and across NVLink domains inside
/// a node larger than the hardware's domain (TP 16 in a 16-GPU node of H100 SXM, whose NVLink
/// domain is 8, was costed across domains without a word).
#[test]
fn tensor_parallelism_beyond_the_fast_link_is_a_caveat_in_json() {
    let caveats = |extra: &[&str]| {
        let base = [
            "predict", "--model", "gpt-70b", "--gpus", "128", "--batch", "512", "--pp", "2",
        ];
        let v = json_of(&base, extra);
        (
            v["caveats"].to_string(),
            v["step_time_s"].as_f64().expect("step"),
        )
    };
    let (nodes, across_nodes) = caveats(&["--tp", "16"]);
    assert!(nodes.contains("TP 16 spans 2 nodes of 8 GPUs"), "{nodes}");
    let (domains, across_domains) = caveats(&["--tp", "16", "--gpus-per-node", "16"]);
    assert!(
        domains.contains("TP 16 spans 2 scale-up domains of 8 GPUs"),
        "{domains}"
    );
    // Costed the same either way: the slower link between domains.
    assert!((across_nodes / across_domains - 1.0).abs() < 1e-9);
    let (inside, _) = caveats(&["--tp", "8"]);
    assert!(!inside.contains("spans"), "{inside}");
    // TP groups that do not tile a node straddle two.
    let (straddle, _) = caveats(&["--tp", "4", "--gpus-per-node", "6"]);
    assert!(
        straddle.contains("TP 4 does not divide the 6 GPUs of a node"),
        "{straddle}"
    );
}

/// Under DeepSpeed "fits instead" proposes only what DeepSpeed runs as stated (it proposed
/// Ulysses over 32 ranks with a caveat that DeepSpeed cannot run it), and CP on a stack whose
/// framework had none is a caveat.
#[test]
fn fits_instead_under_deepspeed_runs_as_stated_and_cp_without_a_framework_is_named() {
    let deepspeed = [&LONG_70B[..], &["--stack", "deepspeed"]].concat();
    let v = json_of(&deepspeed, &["--tp", "8"]);
    let flags = v["nearest_change"]["flags"]
        .as_str()
        .expect("flags")
        .to_string();
    let flags_given: Vec<&str> = flags.split_whitespace().collect();
    let r = json_of(&deepspeed, &flags_given);
    assert_eq!(r["fits"], true, "{flags}: {r}");
    assert!(
        !r["caveats"]
            .to_string()
            .contains("does not run this configuration"),
        "{flags}: {}",
        r["caveats"]
    );
    let v = json(&[
        "predict",
        "--model",
        "llama3-8b",
        "--gpus",
        "64",
        "--cp",
        "2",
        "--batch",
        "64",
        "--stack",
        "megatron-lm-2021",
        "--json",
    ]);
    assert!(
        v["caveats"]
            .to_string()
            .contains("has no context parallelism"),
        "{}",
        v["caveats"]
    );
}

/// A flag's value out of its range exits 2, as clap's value errors do (docs/RELIABILITY.md),
/// whether clap or copus's own check refuses it, and the message names the flag.
#[test]
fn a_flag_value_out_of_range_exits_two() {
    let cases: [&[&str]; 8] = [
        &["grid", "demo", "--gemm-plateau", "0"],
        &["grid", "demo", "--b-crit-scale", "0"],
        &["plan", "demo", "--restart-cost", "-1"],
        &["plan", "demo", "--switch-threshold", "2"],
        &["plan", "demo", "--checkpoint-bw", "0"],
        &["grid", "demo", "--inter-link-scale", "0"],
        &["grid", "demo", "--nodes", "0"],
        &["snapshot", "--samples", "0"],
    ];
    for args in cases {
        let run = copus(args);
        assert_eq!(run.code, Some(2), "{args:?}: {run:?}");
        assert!(run.stderr.contains(args[2]), "{args:?}: {run:?}");
    }
}

/// `grid --rank` with `--filter` says the list is filtered and by what, in text and JSON, as
/// the grid itself does (it read "2 layouts run at batch 64" of 21 with no word of a filter).
#[test]
fn a_filtered_ranking_names_its_filter() {
    let run = copus(&["grid", DEMO, "--filter", "pp=1 tp>=4", "--rank", "64"]);
    run.succeeds();
    assert!(
        run.stdout
            .contains("the layouts matching 'pp=1 tp>=4' (2 of "),
        "{}",
        run.stdout
    );
    let v = json(&[
        "grid",
        DEMO,
        "--filter",
        "pp=1 tp>=4",
        "--rank",
        "64",
        "--json",
    ]);
    assert_eq!(v["filter"], "pp=1 tp>=4", "{v}");
    let all = json(&["grid", DEMO, "--rank", "64", "--json"]);
    assert!(all["filter"].is_null(), "{all}");
}

/// `calibrate` says, as `predict` does, when the measurements' recompute policy is not one the
/// stack has: the fit is then of a what-if.
#[test]
fn calibrate_names_a_recompute_policy_the_stack_lacks() {
    let dir = tempfile::tempdir().expect("tempdir");
    let csv = dir.path().join("m.csv");
    std::fs::write(
        &csv,
        "dp,tp,pp,mbs,batch,step_time_s\n8,1,1,1,64,9.9\n4,2,1,1,64,10.1\n",
    )
    .expect("write");
    let csv = csv.to_str().expect("utf-8");
    let args = |r: &'static str| {
        [
            "calibrate",
            csv,
            "--hardware",
            "h100-sxm",
            "--model",
            "llama3-8b",
            "--recompute",
            r,
            "--json",
        ]
    };
    let v = json(&args("op"));
    let caveats = v["caveats"].to_string();
    assert!(
        caveats.contains("recompute op is not a policy megatron-core has"),
        "{caveats}"
    );
    let v = json(&args("full"));
    assert!(!v["caveats"].to_string().contains("is not a policy"), "{v}");
}

/// A configuration the flags ask for that cannot be formed, a missing flag and contradicting
/// flags are command-line errors (exit 2, docs/RELIABILITY.md), told apart from a file's
/// error (1) and from a configuration that forms but does not fit (a result, 0).
#[test]
fn flag_errors_exit_2_and_a_misfit_is_a_result() {
    let status = |args: &[&str]| copus(args).code;
    let predict = |extra: &[&str]| {
        let mut args = vec![
            "predict", "--model", "llama-7b", "--gpus", "8", "--batch", "8",
        ];
        args.extend_from_slice(extra);
        status(&args)
    };
    assert_eq!(predict(&["--tp", "3"]), Some(2));
    assert_eq!(predict(&["--mbs", "3"]), Some(2));
    // calibrate's flag values refused after parsing exit 2 too (they exited 1).
    let dir = tempfile::tempdir().expect("tempdir");
    let csv = dir.path().join("steps.csv");
    std::fs::write(&csv, "dp,tp,pp,mbs,batch,step_time_s\n8,1,1,1,64,2.0\n").expect("write");
    let csv = csv.to_str().expect("utf-8");
    let calibrate = |extra: &[&str]| {
        let mut args = vec![
            "calibrate",
            csv,
            "--hardware",
            "h100-sxm",
            "--model",
            "llama-7b",
        ];
        args.extend_from_slice(extra);
        copus(&args)
    };
    let folds = calibrate(&["--folds", "0"]);
    folds.fails_with(&["--folds 0"]);
    assert_eq!(folds.code, Some(2));
    let fit = calibrate(&["--fit", "max_eff,foo"]);
    fit.fails_with(&["--fit", "'foo'"]);
    assert_eq!(fit.code, Some(2));
    // A micro-batch too large for the batch says so, with the flag, instead of calling it a
    // divisibility problem; one that does not divide names the nearest batches.
    let small = copus(&[
        "predict",
        "--model",
        "llama3-8b",
        "--gpus",
        "128",
        "--batch",
        "512",
        "--mbs",
        "8",
    ]);
    small.fails_with(&[
        "--mbs 8",
        "batch 512 is smaller than dp·mbs = 1024 (128 replicas × mbs 8); each replica gets 4 \
         samples of this batch: an mbs that divides 4",
    ]);
    assert_eq!(small.code, Some(2));
    copus(&[
        "predict",
        "--model",
        "llama3-8b",
        "--gpus",
        "128",
        "--batch",
        "1280",
        "--mbs",
        "8",
    ])
    .fails_with(&["not divisible by dp·mbs = 1024 (the nearest: 1024 or 2048)"]);
    assert_eq!(predict(&["--ep", "2"]), Some(2));
    assert_eq!(
        status(&[
            "predict", "--model", "llama-7b", "--gpus", "6", "--batch", "6", "--cp", "3"
        ]),
        Some(2)
    );
    assert_eq!(status(&["predict", "--gpus", "8", "--batch", "8"]), Some(2));
    assert_eq!(
        status(&[
            "predict",
            "--model",
            "no-such-model",
            "--gpus",
            "8",
            "--batch",
            "8"
        ]),
        // A name that is no built-in profile is the flag's value (as an unknown --stack);
        // a .ron file that does not read is the file's error (1).
        Some(2)
    );
    assert_eq!(
        status(&[
            "predict",
            "--model",
            "no-such-model.ron",
            "--gpus",
            "8",
            "--batch",
            "8"
        ]),
        Some(1)
    );
    assert_eq!(
        status(&[
            "predict",
            "--model",
            "llama3-70b",
            "--gpus",
            "8",
            "--batch",
            "8",
            "--json"
        ]),
        Some(0),
        "does not fit: a result"
    );
    assert_eq!(
        status(&["grid", "sessions/demo.ron", "--seq-len", "1"]),
        Some(2),
        "--seq-len is for a stats file"
    );
    for cmd in ["snapshot", "open"] {
        assert_eq!(status(&[cmd, "demo", "--seq-len", "1"]), Some(2), "{cmd}");
    }
    // The JSON schedule of a plan made within a framework's limits: no contradiction.
    assert_eq!(
        status(&[
            "plan",
            "sessions/demo.ron",
            "--within",
            "megatron",
            "--emit",
            "json"
        ]),
        Some(0)
    );
    let both = copus(&[
        "plan",
        "sessions/demo.ron",
        "--within",
        "megatron",
        "--emit",
        "torchtitan",
    ]);
    assert_eq!(both.code, Some(2));
    assert!(
        both.stderr
            .contains("--within megatron and --emit torchtitan"),
        "{}",
        both.stderr
    );
}

/// "faster here" searches every ZeRO stage and interleave whatever `--recompute` says: it
/// stayed at the ZeRO stage asked for unless `--recompute` named a policy the stack lacks
/// (`op` on Megatron-Core found a ZeRO-2 layout 7 % faster that the default did not), and
/// never tried interleaving (Llama 3 405B at vpp 1, 21 % MFU, said nothing of vpp 8).
#[test]
fn faster_here_searches_every_zero_stage_and_interleave() {
    let faster = |extra: &[&str]| {
        let mut args = vec![
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
            "128",
            "--json",
        ];
        args.extend_from_slice(extra);
        json(&args)["faster_layout"].clone()
    };
    let default = faster(&[]);
    assert!(default["flags"].is_string(), "{default}");
    assert_eq!(default, faster(&["--recompute", "op"]));
    let v = json(&[
        "predict",
        "--model",
        "llama3-405b",
        "--gpus",
        "16384",
        "--tp",
        "8",
        "--pp",
        "16",
        "--batch",
        "2048",
        "--json",
    ]);
    let found = &v["faster_layout"];
    assert!(
        found["config"]["vpp"].as_u64().is_some_and(|vpp| vpp > 1),
        "{found}"
    );
    let gain = found["tokens_per_s"].as_f64().expect("tokens")
        / v["tokens_per_s"].as_f64().expect("tokens");
    assert!(gain > 1.05, "{gain}");
}

/// At long sequences the attention is most of the FLOPs MFU counts (in full, Megatron's
/// convention), and `predict` says the MFU of what causal kernels execute beside it (at 128K
/// tokens the headline read 1.7× that without a word).
#[test]
fn predict_says_the_causal_mfu_where_attention_dominates_the_count() {
    let args = |seq: &'static str| {
        vec![
            "predict",
            "--model",
            "llama3-8b",
            "--gpus",
            "128",
            "--cp",
            "16",
            "--seq",
            seq,
            "--batch",
            "8",
        ]
    };
    let long = json(&[&args("131072")[..], &["--json"]].concat());
    let share = long["attention_flop_share"].as_f64().expect("share");
    assert!((0.75..0.9).contains(&share), "{share}");
    let (mfu, causal) = (
        long["mfu"].as_f64().expect("mfu"),
        long["mfu_causal"].as_f64().expect("mfu_causal"),
    );
    assert!((causal / (mfu * (1.0 - share / 2.0)) - 1.0).abs() < 1e-12);
    let text = std::process::Command::new(env!("CARGO_BIN_EXE_copus"))
        .args(args("131072"))
        .output()
        .expect("runs");
    let text = String::from_utf8_lossy(&text.stdout).replace('\n', " ");
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        text.contains(&format!(
            "attention is {:.0}% of that count at 131072 tokens: MFU {:.1}% counting its causal half only",
            share * 100.0,
            causal * 100.0
        )),
        "{text}"
    );
    let short = json(&[&args("2048")[..], &["--json"]].concat());
    assert!(
        short["attention_flop_share"]
            .as_f64()
            .is_some_and(|s| s < 0.1),
        "{short}"
    );
    let text = std::process::Command::new(env!("CARGO_BIN_EXE_copus"))
        .args(args("2048"))
        .output()
        .expect("runs");
    assert!(!String::from_utf8_lossy(&text.stdout).contains("causal half only"));
}
