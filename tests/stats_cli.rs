//! `copus analyze` end to end: the real binary on a generated stats file.

use crate::stats_support;

use stats_support::{Model, to_ndjson};
use std::process::Command;

fn copus() -> Command {
    Command::new(env!("CARGO_BIN_EXE_copus"))
}

/// The standard output of `cmd`, which must succeed (its standard error in the failure).
fn stdout_of(cmd: &mut Command) -> String {
    let out = cmd.output().expect("run copus");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A file of the repository's assets/data.
fn asset(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("assets/data")
        .join(name)
}

#[test]
fn analyze_json_reports_the_documented_fields() {
    let mut m = Model::power_law(200, 1.0, 1000.0, 4.0, 8);
    m.layer_split = Some(20);
    let b_true = 96.0;
    let mut records = m.run(42, 1500, |_| m.trace() / b_true);
    for (i, r) in records.iter_mut().enumerate() {
        r.tokens = Some(2048.0 * 32.0 * (i + 1) as f64);
        r.loss = Some(3.0);
    }
    let mut text = to_ndjson(&records);
    text.push_str("garbage line\n{\"v\":1,\"step\":5000}\n");
    text.push_str(
        "{\"v\":1,\"step\":5001,\"b_small\":4,\"b_big\":32,\"sq_small\":\"NaN\",\"sq_big\":1}\n",
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("run.ndjson");
    std::fs::write(&path, text).expect("write");

    let out = copus()
        .arg("analyze")
        .arg(&path)
        .arg("--json")
        .output()
        .expect("run copus");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON output");
    let s = &v["summary"];
    let b = s["b_simple"].as_f64().expect("b_simple");
    assert!((b / b_true - 1.0).abs() < 0.15, "{b}");
    let (lo, hi) = (
        s["ci"][0].as_f64().expect("lo"),
        s["ci"][1].as_f64().expect("hi"),
    );
    assert!(lo < b && b < hi);
    assert!(s["g2"].as_f64().expect("g2") > 0.0);
    assert!(s["trace_sigma"].as_f64().expect("trace") > 0.0);
    assert_eq!(s["steps"], 1500);
    assert_eq!(s["malformed_lines"], 2);
    assert_eq!(s["non_finite_skipped"], 1);
    assert_eq!(s["seq_len"].as_f64(), Some(2048.0));
    let layers = s["layers"].as_array().expect("layers");
    assert_eq!(layers.len(), 2);
    for l in layers {
        assert!(l["name"].is_string() && l["trace_share"].is_f64() && l["b_simple"].is_f64());
    }
    let diags = s["diagnostics"].as_array().expect("diagnostics");
    let kinds: Vec<&str> = diags.iter().filter_map(|d| d["kind"].as_str()).collect();
    assert!(
        kinds.contains(&"malformed_lines") && kinds.contains(&"non_finite_skipped"),
        "{kinds:?}"
    );
    assert!(
        diags
            .iter()
            .all(|d| d["message"].is_string() && d["severity"].is_string())
    );
    let steps = v["steps"].as_array().expect("steps");
    assert_eq!(steps.len(), 1500);
    for st in steps {
        for key in ["step", "b_simple", "sq_small", "sq_big"] {
            assert!(st[key].is_number(), "{key} in {st}");
        }
        assert_eq!(st["ci"].as_array().map(Vec::len), Some(2));
    }
    assert_eq!(steps[10]["sq_big"].as_f64(), Some(records[10].sq_big));
}

#[test]
fn analyze_table_flags_and_errors() {
    let m = Model::power_law(100, 1.0, 100.0, 2.0, 4);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("run.ndjson");
    std::fs::write(&path, to_ndjson(&m.run(1, 300, |_| 2.0))).expect("write");

    let out = copus()
        .args([
            "analyze",
            "--smoother",
            "one-sided",
            "--decay",
            "0.95",
            "--confidence",
            "0.9",
        ])
        .arg(&path)
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("B_simple") && table.contains("90% CI"),
        "{table}"
    );
    assert!(table.contains("one_sided(double ema decay=0.95"), "{table}");
    // The headline leads with the last window and labels the run-wide value.
    assert!(table.starts_with("B_simple now "), "{table}");
    assert!(table.contains("run-wide "), "{table}");
    assert!(table.contains("verdict       "), "{table}");

    let bad = copus()
        .args(["analyze", "--confidence", "2"])
        .arg(&path)
        .output()
        .expect("run");
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("confidence"));

    let empty = dir.path().join("empty.ndjson");
    std::fs::write(&empty, "").expect("write");
    let out = copus().arg("analyze").arg(&empty).output().expect("run");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no stats records"));

    let out = copus()
        .arg("analyze")
        .arg(dir.path())
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no gradient dump found"));

    let missing = copus()
        .arg("analyze")
        .arg(dir.path().join("nope.ndjson"))
        .output()
        .expect("run");
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("nope.ndjson"));
}

/// The shipped sample run drifts (B_simple grows several-fold; the lr halves at step 450): the
/// text and the JSON lead with the last window, report the drift and locate the lr change.
#[test]
fn the_sample_run_reads_as_a_drifting_run() {
    let sample = concat!(env!("CARGO_MANIFEST_DIR"), "/assets/data/sample-run.ndjson");
    let out = copus()
        .args(["analyze", "--json", sample])
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let s = &v["summary"];
    let now = s["now"]["b_simple"].as_f64().expect("now");
    let run_wide = s["run_wide"]["b_simple"].as_f64().expect("run-wide");
    assert_eq!(s["b_simple"].as_f64(), Some(run_wide));
    assert_eq!(s["now"]["last_step"], 599);
    assert!(now > 2.0 * run_wide, "now {now}, run-wide {run_wide}");
    let drift = &s["drift"];
    assert_eq!(drift["significant"], true, "{drift}");
    assert!(drift["ci"][0].as_f64().expect("lo") > 2.0, "{drift}");
    let diags = s["diagnostics"].as_array().expect("diagnostics");
    let find = |k: &str| diags.iter().find(|d| d["kind"] == k).cloned();
    let d = find("drift").expect("drift diagnostic");
    assert_eq!(d["severity"], "warning");
    let lr = find("lr_change").expect("lr change");
    assert_eq!(lr["steps"], serde_json::json!([450, 450]));
    assert_eq!(lr["at"], serde_json::json!([[450, 450]]));
    // One malformed line and one NaN in 601 lines: counted, information only.
    let nf = find("non_finite_skipped").expect("nan");
    assert_eq!(nf["severity"], "info");
    assert_eq!(nf["steps"], serde_json::json!([301, 301]));
    assert_eq!(
        find("malformed_lines").expect("malformed")["severity"],
        "info"
    );
    // The verdict lists its reasons with what to do: here the drift only.
    assert_eq!(s["verdict"], "noisy");
    let reasons = s["reasons"].as_array().expect("reasons");
    assert_eq!(reasons.len(), 1, "{reasons:?}");
    assert_eq!(reasons[0]["kind"], "drift");
    assert!(reasons[0]["action"].as_str().is_some_and(|a| !a.is_empty()));
    assert!(
        s["verdict_meaning"]
            .as_str()
            .is_some_and(|m| m.starts_with("noisy"))
    );
    // Per-layer B_simple over time.
    let st = &v["steps"][300];
    for layer in ["embed", "blocks"] {
        assert!(st["layers"][layer]["b_simple"].is_f64(), "{st}");
        assert_eq!(st["layers"][layer]["ci"].as_array().map(Vec::len), Some(2));
    }

    let out = copus().args(["analyze", sample]).output().expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    let first = text.lines().next().unwrap_or_default();
    assert!(first.starts_with("B_simple now"), "{text}");
    assert!(first.contains("steps 541-599"), "{first}");
    assert!(text.contains("\ndrift         x"), "{text}");
    assert!(text.contains("\nrun-wide "), "{text}");
    assert!(text.contains("what to do:"), "{text}");
}

/// `--one-sided` runs the live view's smoother, with per-step intervals in `steps[]`.
#[test]
fn one_sided_flag_is_the_live_smoother() {
    let sample = concat!(env!("CARGO_MANIFEST_DIR"), "/assets/data/sample-run.ndjson");
    let out = copus()
        .args(["analyze", "--one-sided", "--json", sample])
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let smoother = v["summary"]["smoother"].as_str().expect("smoother");
    assert!(smoother.starts_with("one_sided(double ema"), "{smoother}");
    let last = v["steps"].as_array().and_then(|s| s.last()).expect("steps");
    assert!(
        last["b_simple"].is_f64() && last["ci"][0].is_f64(),
        "{last}"
    );
}

/// `copus analyze A --compare B --json`: both analyses and the comparison.
#[test]
fn compare_two_runs_in_json() {
    let sample = concat!(env!("CARGO_MANIFEST_DIR"), "/assets/data/sample-run.ndjson");
    let out = copus()
        .args(["analyze", "--json", sample, "--compare", sample])
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert!(v["a"]["summary"]["now"]["b_simple"].is_f64());
    assert_eq!(v["a"]["summary"], v["b"]["summary"]);
    let c = &v["comparison"];
    assert_eq!(c["aligned_by"], "tokens");
    assert_eq!(c["differs_share"].as_f64(), Some(0.0));
    assert_eq!(c["now"]["ratio"].as_f64(), Some(1.0));
    assert_eq!(c["now"]["differs"], false);
    assert_eq!(c["points"].as_array().map(Vec::len), Some(599));

    let missing = copus()
        .args(["analyze", sample, "--compare", "/nonexistent/b.ndjson"])
        .output()
        .expect("run");
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("/nonexistent/b.ndjson"));
}

#[test]
fn json_styles_carry_the_same_values_compact_pretty_lines_and_summary_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("run.ndjson");
    let mut m = Model::power_law(100, 1.0, 1000.0, 4.0, 8);
    m.layer_split = Some(10);
    let records = m.run(7, 400, |_| m.trace() / 50.0);
    std::fs::write(&path, to_ndjson(&records)).expect("write");
    let run = |args: &[&str]| -> String {
        let out = copus()
            .arg("analyze")
            .arg(&path)
            .args(args)
            .output()
            .expect("run");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8")
    };
    // Standard output is a pipe here: compact, one line; --pretty indents.
    let compact = run(&["--json"]);
    assert_eq!(compact.lines().count(), 1);
    let pretty = run(&["--json", "--pretty"]);
    assert!(pretty.lines().count() > 400);
    let c: serde_json::Value = serde_json::from_str(&compact).expect("JSON");
    let p: serde_json::Value = serde_json::from_str(&pretty).expect("JSON");
    assert_eq!(c, p);
    let rows: Vec<serde_json::Value> = run(&["--json-lines"])
        .lines()
        .map(|l| serde_json::from_str(l).expect("a row per line"))
        .collect();
    assert_eq!(serde_json::Value::Array(rows), p["steps"]);
    let s: serde_json::Value =
        serde_json::from_str(&run(&["--json", "--summary-only"])).expect("JSON");
    assert_eq!(s, serde_json::json!({ "summary": p["summary"] }));
    // Before the subcommand too.
    let before = copus()
        .args(["--pretty", "analyze"])
        .arg(&path)
        .arg("--json")
        .output()
        .expect("run");
    assert_eq!(String::from_utf8_lossy(&before.stdout), pretty);
    // Without --json there is nothing to indent: said, not ignored.
    let alone = copus()
        .arg("analyze")
        .arg(&path)
        .arg("--pretty")
        .output()
        .expect("run");
    assert!(!alone.status.success());
    assert!(
        String::from_utf8_lossy(&alone.stderr).contains("--json"),
        "{}",
        String::from_utf8_lossy(&alone.stderr)
    );
}

/// `--pretty` is offered by the commands that print JSON and by no other.
#[test]
fn pretty_is_offered_only_where_json_is_printed() {
    let help = |cmd: &str| -> String {
        let out = copus().args([cmd, "--help"]).output().expect("run");
        assert!(out.status.success(), "{cmd}");
        String::from_utf8(out.stdout).expect("utf-8")
    };
    for cmd in [
        "analyze",
        "cbs",
        "predict",
        "calibrate",
        "grid",
        "plan",
        "bench",
        "watch",
    ] {
        assert!(help(cmd).contains("--pretty"), "{cmd}");
    }
    for cmd in [
        "open",
        "branch",
        "demo-train",
        "lesson",
        "config",
        "snapshot",
    ] {
        assert!(!help(cmd).contains("--pretty"), "{cmd}");
    }
}

/// `copus branch ARGS --quiet --out OUT --run-out RUN`, which must succeed.
fn branch_experiment(args: &[&str], out: &std::path::Path, run: &std::path::Path) {
    let done = copus()
        .arg("branch")
        .args(args)
        .arg("--quiet")
        .arg("--out")
        .arg(out)
        .arg("--run-out")
        .arg(run)
        .output()
        .expect("run copus");
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
}

/// Branch records carry the base run's record before their branch point (`base`), so a
/// branch file laid over another run (another seed, the same learning rates: nothing said so)
/// is named in `run_mismatch`, and its own run's is not.
#[test]
fn a_branch_file_of_another_run_is_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let write = |seed: &str| {
        let (b, run) = (
            dir.path().join(format!("b{seed}.ndjson")),
            dir.path().join(format!("run{seed}.ndjson")),
        );
        branch_experiment(
            &[
                "--at",
                "20",
                "--batches",
                "8,32,128",
                "--seeds",
                "2",
                "--budget-samples",
                "2048",
                "--eval-samples",
                "128",
                "--seed",
                seed,
            ],
            &b,
            &run,
        );
        (b, run)
    };
    let ((b0, run0), (b3, _)) = (write("0"), write("3"));
    let first: serde_json::Value = serde_json::from_str(
        std::fs::read_to_string(&b0)
            .expect("branches")
            .lines()
            .next()
            .expect("a line"),
    )
    .expect("json");
    // The base mark is the run's own record at step 19, loss for loss.
    let run19: serde_json::Value = serde_json::from_str(
        std::fs::read_to_string(&run0)
            .expect("run")
            .lines()
            .nth(19)
            .expect("step 19"),
    )
    .expect("json");
    assert_eq!(first["base"]["step"], 19);
    assert_eq!(first["base"]["loss"], run19["loss"]);
    let mismatch = |b: &std::path::Path| {
        let out = copus()
            .arg("analyze")
            .arg(&run0)
            .arg("--branches")
            .arg(b)
            .arg("--json")
            .output()
            .expect("run copus");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        v["branches"]["run_mismatch"].clone()
    };
    assert_eq!(mismatch(&b0), serde_json::json!([]));
    let other = mismatch(&b3).to_string();
    assert!(
        other.contains("the branches were taken from a run whose training loss at step 19"),
        "{other}"
    );
}

/// `copus branch` → `copus cbs` → `copus analyze RUN --branches`: the measured CBS of the
/// built-in trainer beside its B_simple, through the real binary, and the errors that name
/// the place.
#[test]
fn branched_experiment_measured_beside_the_estimate() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (b, run) = (dir.path().join("b.ndjson"), dir.path().join("run.ndjson"));
    branch_experiment(
        &[
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
        ],
        &b,
        &run,
    );
    let text = std::fs::read_to_string(&b).expect("branch file");
    // 2 points × 3 batches × 2 seeds, every branch evaluated at the same sample counts.
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    let evals = |batch: u64| {
        lines
            .iter()
            .filter(|l| l["branch"]["batch"] == batch && l["branch"]["from_step"] == 20)
            .map(|l| l["samples"].as_u64().unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(evals(8), evals(128));
    assert_eq!(evals(8).len(), 2 * (4096 / 128 + 1));
    // The base run is demo-train's run with the same flags, to the last branch point and 50
    // steps past it (the fewest: a tenth of 120 is less), so that its estimate there is
    // two-sided.
    let run_text = std::fs::read_to_string(&run).expect("run file");
    assert_eq!(run_text.lines().count(), 170);
    let demo = copus()
        .args(["demo-train", "--steps", "170", "--quiet"])
        .output()
        .expect("run copus");
    let strip = |l: &str| {
        let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
        v.as_object_mut().unwrap().remove("step_time_s");
        v
    };
    let demo_text = String::from_utf8_lossy(&demo.stdout).into_owned();
    for (a, d) in run_text.lines().zip(demo_text.lines()) {
        assert_eq!(strip(a), strip(d));
    }

    let cbs = copus()
        .arg("cbs")
        .arg(&b)
        .arg("--json")
        .output()
        .expect("run");
    assert!(
        cbs.status.success(),
        "{}",
        String::from_utf8_lossy(&cbs.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&cbs.stdout).expect("json");
    // The same records through standard input (`-`, as analyze and watch read it).
    let mut child = copus()
        .args(["cbs", "-", "--json"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin
            .write_all(&std::fs::read(&b).expect("branch file"))
            .expect("feed");
    }
    let piped = child.wait_with_output().expect("run");
    assert!(
        piped.status.success(),
        "{}",
        String::from_utf8_lossy(&piped.stderr)
    );
    assert_eq!(cbs.stdout, piped.stdout);
    let points = v["points"].as_array().expect("points");
    assert_eq!(points.len(), 2);
    for p in points {
        let th = p["threshold_cbs"]["batch"].as_u64().unwrap();
        assert!([8, 32, 128].contains(&th), "{p}");
        let ci = &p["threshold_cbs"]["ci"];
        assert!(ci[0].as_u64().unwrap() <= th && th <= ci[1].as_u64().unwrap());
        // The bounds say themselves in data: "below 32" at the smallest batch, and whether
        // the threshold is measured at all (not at the largest against a poor reference).
        let t = &p["threshold_cbs"];
        let at_most = t["at_most"].as_bool().unwrap();
        assert_eq!(t["below"].as_u64(), at_most.then_some(32), "{p}");
        let poor = p["poor_reference"].as_bool().unwrap() && t["at_least"].as_bool().unwrap();
        assert_eq!(t["measured"].as_bool(), Some(!poor), "{p}");
        assert!(
            p["b_noise_fit"].is_null() != p["b_noise_note"].is_null(),
            "{p}"
        );
        assert_eq!(p["branches"].as_array().unwrap().len(), 3);
    }

    let an = copus()
        .arg("analyze")
        .arg(&run)
        .arg("--branches")
        .arg(&b)
        .arg("--json")
        .output()
        .expect("run");
    assert!(
        an.status.success(),
        "{}",
        String::from_utf8_lossy(&an.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&an.stdout).expect("json");
    assert!(v["summary"]["b_simple"].is_number());
    let cmp = v["branches"]["comparison"].as_array().expect("comparison");
    // Its own run: the branches' learning rates agree with the run's at its batch.
    assert_eq!(
        v["branches"]["run_mismatch"].as_array().map(Vec::len),
        Some(0),
        "{}",
        v["branches"]["run_mismatch"]
    );
    // Another run (the same records at another learning rate): cautioned, in JSON, the text
    // and the explorer's estimators panel.
    let other = dir.path().join("other.ndjson");
    let run_text = std::fs::read_to_string(&run).expect("run");
    let relabelled: String = run_text
        .lines()
        .map(|l| match l.find("\"lr\":") {
            Some(i) => {
                let end = l[i + 5..].find([',', '}']).map_or(l.len(), |j| i + 5 + j);
                format!("{}\"lr\":0.9{}\n", &l[..i], &l[end..])
            }
            None => format!("{l}\n"),
        })
        .collect();
    assert_ne!(relabelled, run_text, "the run's records carry no lr");
    std::fs::write(&other, relabelled).expect("write");
    let an = copus()
        .arg("analyze")
        .arg(&other)
        .arg("--branches")
        .arg(&b)
        .arg("--json")
        .output()
        .expect("run");
    let w: serde_json::Value = serde_json::from_slice(&an.stdout).expect("json");
    let said = w["branches"]["run_mismatch"].to_string();
    assert!(said.contains("where the run ran 0.900"), "{said}");
    let snap = copus()
        .arg("snapshot")
        .arg(&other)
        .args([
            "--seq-len",
            "4096",
            "--size",
            "160x50",
            "--keys",
            "4",
            "--branches",
        ])
        .arg(&b)
        .output()
        .expect("run");
    let screen = String::from_utf8_lossy(&snap.stdout);
    assert!(screen.contains("caution: step"), "{screen}");
    assert_eq!(cmp.len(), 2);
    let row = |step: u64| {
        v["steps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["step"] == step)
            .cloned()
            .unwrap()
    };
    for (c, p) in cmp.iter().zip(points) {
        let step = c["estimate_step"].as_u64().unwrap();
        assert!(step <= c["from_step"].as_u64().unwrap());
        let b_simple = row(step)["b_simple"].as_f64().unwrap();
        assert_eq!(c["b_simple"].as_f64().unwrap(), b_simple);
        // At the smallest batch the ratio is its upper bound: the next batch over B_simple.
        let th = p["threshold_cbs"]["below"]
            .as_f64()
            .or(p["threshold_cbs"]["batch"].as_f64())
            .unwrap();
        let r = c["threshold_ratio"]["value"].as_f64().unwrap();
        assert!((r - th / b_simple).abs() < 1e-9 * r.abs().max(1.0));
    }
    let table = copus()
        .arg("analyze")
        .arg(&run)
        .arg("--branches")
        .arg(&b)
        .output()
        .unwrap();
    let t = String::from_utf8_lossy(&table.stdout);
    assert!(t.contains("measured critical batch size"), "{t}");

    // The explorer lays the measurements over the run's timeline (snapshot = open's screen).
    let snap = copus()
        .arg("snapshot")
        .arg(&run)
        .args(["--seq-len", "4096", "--size", "160x40", "--branches"])
        .arg(&b)
        .output()
        .expect("run");
    let screen = String::from_utf8_lossy(&snap.stdout);
    assert!(
        snap.status.success(),
        "{}",
        String::from_utf8_lossy(&snap.stderr)
    );
    assert!(screen.contains("▲ threshold CBS"), "{screen}");
    assert!(screen.contains("÷ B_simple ×"), "{screen}");
    // --b-crit-from: the geometric mean of the ratios becomes the session's B_crit scale;
    // a threshold at an end of the batches run is a bound and stays out of it (one at the
    // smallest batch, "<16", read as 8, made a ×0.024 conversion).
    let logs: Vec<f64> = cmp
        .iter()
        .zip(points)
        .filter(|(_, p)| {
            let t = &p["threshold_cbs"];
            t["at_least"] == false && t["at_most"] == false
        })
        .filter_map(|(c, _)| c["threshold_ratio"]["value"].as_f64())
        .map(f64::ln)
        .collect();
    let factor = (logs.iter().sum::<f64>() / logs.len() as f64).exp();
    let snap = copus()
        .arg("snapshot")
        .arg(&run)
        .args(["--seq-len", "4096", "--size", "160x40", "--branches"])
        .arg(&b)
        .args(["--b-crit-from", "threshold-cbs"])
        .output()
        .expect("run");
    let screen = String::from_utf8_lossy(&snap.stdout);
    if logs.is_empty() {
        assert!(
            screen.contains("no threshold CBS measured inside its batches"),
            "{screen}"
        );
    } else {
        assert!(
            screen.contains(&format!(
                "B_crit ×{} (measured by branching)",
                copus::format::factor(factor)
            )),
            "{factor}\n{screen}"
        );
    }
    let e = copus()
        .args(["open", "sessions/demo.ron", "--branches"])
        .arg(&b)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&e.stderr)
            .contains("over a stats file's run; this session's source is a published scenario")
    );

    // Errors name the place.
    let bad = dir.path().join("bad.ndjson");
    std::fs::write(&bad, "{\"v\":1,\"branch\":{\"from_step\":1,\"batch\":0,\"seed\":0},\"step\":0,\"samples\":0,\"loss\":1}\n").unwrap();
    let e = copus().arg("cbs").arg(&bad).output().unwrap();
    let msg = String::from_utf8_lossy(&e.stderr);
    assert_eq!(e.status.code(), Some(1), "{msg}");
    assert!(
        msg.contains("bad.ndjson") && msg.contains("line 1") && msg.contains("batch"),
        "{msg}"
    );
    let two = dir.path().join("two.ndjson");
    let kept: String = text
        .lines()
        .filter(|l| !l.contains("\"batch\":128"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&two, kept).unwrap();
    let e = copus().arg("cbs").arg(&two).output().unwrap();
    let msg = String::from_utf8_lossy(&e.stderr);
    assert!(
        msg.contains("step 20") && msg.contains("at least 3"),
        "{msg}"
    );
    // A branch point after the run's last step is not compared with the last step's
    // estimate; the point inside the run still is.
    let far = dir.path().join("far.ndjson");
    std::fs::write(
        &far,
        text.replace("\"from_step\":120", "\"from_step\":100000"),
    )
    .unwrap();
    let an = copus()
        .arg("analyze")
        .arg(&run)
        .arg("--branches")
        .arg(&far)
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        an.status.success(),
        "{}",
        String::from_utf8_lossy(&an.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&an.stdout).expect("json");
    let cmp = v["branches"]["comparison"].as_array().expect("comparison");
    assert_eq!(cmp[1]["from_step"], 100000);
    assert!(
        cmp[1]["estimate_step"].is_null() && cmp[1]["b_simple"].is_null(),
        "{v}"
    );
    assert!(cmp[0]["estimate_step"].is_u64());
    let t = copus()
        .arg("analyze")
        .arg(&run)
        .arg("--branches")
        .arg(&far)
        .output()
        .unwrap();
    let t = String::from_utf8_lossy(&t.stdout);
    assert!(
        t.contains("step 100000: not compared: after the run's last analysed step"),
        "{t}"
    );
    // A directory, a missing file and a statistics file for branch records are said in the
    // same words by `cbs` and `analyze --branches` (they differed), a JSON error's position
    // once, as a column of the file's line.
    let missing = dir.path().join("missing.ndjson");
    for bad in [dir.path(), missing.as_path(), run.as_path()] {
        let cbs = copus().arg("cbs").arg(bad).output().unwrap();
        let analyze = copus()
            .arg("analyze")
            .arg(&run)
            .arg("--branches")
            .arg(bad)
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&cbs.stderr).to_string();
        assert_eq!(said, String::from_utf8_lossy(&analyze.stderr), "{bad:?}");
        assert!(
            !cbs.status.success() && !said.contains(" at line "),
            "{said}"
        );
    }
    let e = copus().arg("cbs").arg(dir.path()).output().unwrap();
    assert!(String::from_utf8_lossy(&e.stderr).contains("a directory; branch records are a file"));
    // A device is named as what it is, not as "a stats file" (branch records are not one).
    #[cfg(unix)]
    {
        let e = copus().args(["cbs", "/dev/null"]).output().unwrap();
        let said = String::from_utf8_lossy(&e.stderr);
        assert_eq!(e.status.code(), Some(1), "{said}");
        assert!(
            said.contains("/dev/null: not a regular file or a pipe")
                && !said.contains("stats file"),
            "{said}"
        );
    }
    // 64 is a multiple of 8 and of the largest batch, not of 24 (the default is a multiple
    // of every batch).
    let e = copus()
        .args([
            "branch",
            "--at",
            "20",
            "--batches",
            "8,24,128",
            "--eval-every",
            "64",
            "--out",
        ])
        .arg(dir.path().join("x.ndjson"))
        .output()
        .unwrap();
    let msg = String::from_utf8_lossy(&e.stderr);
    assert!(
        msg.contains("--eval-every 64") && msg.contains("not of 24") && msg.contains("384"),
        "{msg}"
    );
    // The existing output is not replaced without --force.
    let e = copus()
        .args(["branch", "--at", "20", "--out"])
        .arg(&b)
        .output()
        .unwrap();
    assert_eq!(e.status.code(), Some(1));
    assert_eq!(std::fs::read_to_string(&b).unwrap(), text);
}

/// Without a drift measurement, `analyze --json` says why (`summary.drift_not_measured`), and
/// the text and the explorer give the same reason (the explorer said "run shorter than two
/// windows" for every run without one).
#[test]
fn a_run_without_a_drift_measurement_says_why() {
    let dir = tempfile::tempdir().expect("tempdir");
    let m = Model::power_law(50, 1.0, 100.0, 4.0, 8);
    let short = dir.path().join("short.ndjson");
    std::fs::write(&short, to_ndjson(&m.run(3, 60, |_| m.trace() / 50.0))).unwrap();
    let out = copus()
        .args(["analyze"])
        .arg(&short)
        .args(["--json", "--summary-only", "--window", "50"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert!(v["summary"]["drift"].is_null(), "{v}");
    assert_eq!(
        v["summary"]["drift_not_measured"], "fewer steps than two windows",
        "{}",
        v["summary"]
    );
    let text = copus()
        .args(["analyze"])
        .arg(&short)
        .args(["--window", "50"])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&text.stdout)
            .contains("not measured: fewer steps than two windows")
    );
    // Long enough: measured, and no reason given.
    let long = dir.path().join("long.ndjson");
    std::fs::write(&long, to_ndjson(&m.run(3, 300, |_| m.trace() / 50.0))).unwrap();
    let out = copus()
        .args(["analyze"])
        .arg(&long)
        .args(["--json", "--summary-only", "--window", "50"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert!(v["summary"]["drift"].is_object(), "{v}");
    assert!(v["summary"].get("drift_not_measured").is_none(), "{v}");
}

/// `analyze --preconditioned` estimates from the `precond` pair: the same as analysing a file
/// whose raw norms are those values; records without it are left out and counted; a file
/// without any, or a dump directory, is an error.
#[test]
fn preconditioned_analysis_reads_the_precond_pair() {
    let dir = tempfile::tempdir().expect("tempdir");
    let m = Model::power_law(50, 1.0, 100.0, 4.0, 8);
    let raw = m.run(3, 400, |_| m.trace() / 50.0);
    let pre = m.run(4, 400, |_| m.trace() / 120.0);
    let mut with = String::new();
    let mut plain = String::new();
    for (i, (r, p)) in raw.iter().zip(&pre).enumerate() {
        let mut v: serde_json::Value =
            serde_json::from_str(&to_ndjson(std::slice::from_ref(r))).expect("record");
        let mut q: serde_json::Value =
            serde_json::from_str(&to_ndjson(std::slice::from_ref(p))).expect("record");
        q["step"] = v["step"].clone();
        if i > 0 {
            v["precond"] = serde_json::json!({"sq_small": q["sq_small"], "sq_big": q["sq_big"]});
            plain.push_str(&format!("{q}\n"));
        }
        with.push_str(&format!("{v}\n"));
    }
    let (a, b) = (
        dir.path().join("with.ndjson"),
        dir.path().join("plain.ndjson"),
    );
    std::fs::write(&a, with).unwrap();
    std::fs::write(&b, plain).unwrap();
    let summary = |args: &[&std::ffi::OsStr]| {
        let out = copus().args(args).output().expect("run");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        (
            v["summary"].clone(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let os = |s: &str| std::ffi::OsString::from(s);
    let (pre_sum, stderr) = summary(&[
        &os("analyze"),
        a.as_os_str(),
        &os("--preconditioned"),
        &os("--json"),
        &os("--summary-only"),
    ]);
    assert!(
        stderr.contains("1 record without `precond` left out (the first optimizer step"),
        "{stderr}"
    );
    let (plain_sum, _) = summary(&[
        &os("analyze"),
        b.as_os_str(),
        &os("--json"),
        &os("--summary-only"),
    ]);
    assert_eq!(pre_sum["b_simple"], plain_sum["b_simple"]);
    assert_eq!(pre_sum["steps"], 399);
    let (raw_sum, _) = summary(&[
        &os("analyze"),
        a.as_os_str(),
        &os("--json"),
        &os("--summary-only"),
    ]);
    assert_ne!(raw_sum["b_simple"], pre_sum["b_simple"]);
    // A bad line is named by its line in the file, as without --preconditioned (the records
    // left out shifted the numbers: line 51 was reported as 50); a line that is not UTF-8 is
    // counted, not an error that stops the read.
    let mut lines: Vec<String> = std::fs::read_to_string(&a)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    lines[50] = "{not json".into();
    // A key named twice inside `precond` is refused with its line (a JSON map kept the last
    // of the two: B_simple went unbounded with "0 malformed lines").
    assert!(lines[59].contains("\"precond\":{"), "{}", lines[59]);
    lines[59] = lines[59].replace("\"precond\":{", "\"precond\":{\"sq_small\":99.0,");
    let mut bytes = lines.join("\n").into_bytes();
    bytes.extend_from_slice(b"\n\xff\xfe\n");
    let c = dir.path().join("bad.ndjson");
    std::fs::write(&c, bytes).unwrap();
    let e = copus()
        .args(["analyze"])
        .arg(&c)
        .args(["--preconditioned", "--json", "--summary-only"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&e.stderr);
    assert!(e.status.success(), "{said}");
    assert!(said.contains("bad.ndjson:51: "), "{said}");
    assert!(
        said.contains("bad.ndjson:60: bad field: \"sq_small\" appears twice in \"precond\""),
        "{said}"
    );
    assert!(
        said.contains(&format!("bad.ndjson:{}: ", lines.len() + 1)),
        "{said}"
    );
    let e = copus()
        .args(["analyze"])
        .arg(&b)
        .arg("--preconditioned")
        .output()
        .unwrap();
    assert_eq!(e.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&e.stderr).contains("no record carries `precond`"));
    // The same with a malformed line in it: still the missing pair that is named (the
    // malformed line, passed through to the reader, hid it behind "no stats records").
    let mut no_pair = std::fs::read_to_string(&b).unwrap();
    no_pair.push_str("{not json\n");
    let d = dir.path().join("no-pair-bad-line.ndjson");
    std::fs::write(&d, no_pair).unwrap();
    let e = copus()
        .args(["analyze"])
        .arg(&d)
        .arg("--preconditioned")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&e.stderr);
    assert_eq!(e.status.code(), Some(1), "{said}");
    assert!(said.contains("no record carries `precond`"), "{said}");
    let e = copus()
        .args(["analyze"])
        .arg(dir.path())
        .arg("--preconditioned")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&e.stderr).contains("--preconditioned"));
    // In the explorer, P switches to the preconditioned estimate (its label in the title) and
    // back; on a run without `precond` it says so and stays raw.
    let snap = |path: &std::path::Path, keys: &str| {
        let out = copus()
            .arg("snapshot")
            .arg(path)
            .args(["--seq-len", "4096", "--size", "200x40", "--keys", keys])
            .output()
            .expect("run");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(snap(&a, "P").contains("Adam-preconditioned gradient"));
    assert!(!snap(&a, "P P").contains("Adam-preconditioned gradient"));
    let screen = snap(&b, "P");
    assert!(
        screen.contains("Adam-preconditioned estimate unavailable"),
        "{screen}"
    );
    assert!(
        !screen.contains("Adam-preconditioned gradient ("),
        "{screen}"
    );
}

#[test]
fn snapshot_takes_the_model_and_cluster_of_a_stats_file_as_open_does() {
    // Its refusal of a run in 1-token samples suggests "--seq-len 1 with a --model (and
    // --hardware)": snapshot must have them.
    let out = copus()
        .args([
            "snapshot",
            "assets/data/sample-run.ndjson",
            "--model",
            "llama-7b",
            "--hardware",
            "a100-80g",
            "--nodes",
            "2",
            "--size",
            "100x30",
        ])
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let screen = String::from_utf8_lossy(&out.stdout);
    let top = screen.lines().next().expect("a screen");
    assert!(top.contains("llama-7b on 2×8 a100-80g"), "{top}");
}

#[test]
fn a_compressed_stats_file_is_named_as_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("run.ndjson.gz");
    // A gzip member's magic bytes, then anything: the check reads the first bytes only.
    std::fs::write(&path, [0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00]).expect("write");
    let out = copus().arg("analyze").arg(&path).output().expect("run");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("run.ndjson.gz: a gzip-compressed file") && err.contains("zcat"),
        "{err}"
    );
}

#[test]
fn a_window_of_steps_written_twice_counts_records_not_steps() {
    // Two writers into one file: "last window: steps 75-99, 50 steps" for 25 steps.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("two.ndjson");
    let mut text = String::new();
    for s in 0..100u64 {
        for w in 0..2u64 {
            text.push_str(&format!(
                "{{\"v\":1,\"step\":{s},\"b_small\":4,\"b_big\":32,\"sq_small\":{},\"sq_big\":{}}}\n",
                2.0 + 0.01 * ((s + w) % 7) as f64,
                0.5 + 0.002 * s as f64
            ));
        }
    }
    std::fs::write(&path, text).expect("write");
    let out = copus().arg("analyze").arg(&path).output().expect("runs");
    let head = String::from_utf8_lossy(&out.stdout);
    // The headline (wrapped at 100 columns where it is longer), its words rejoined.
    let first: Vec<&str> = head
        .lines()
        .take_while(|l| !l.starts_with("drift") && !l.trim_start().starts_with('='))
        .flat_map(str::split_whitespace)
        .collect();
    let first = first.join(" ");
    assert!(
        first.contains("steps 75-99, 50 records (steps written more than once)"),
        "{first}"
    );
}

/// A regular file and the same bytes through a pipe give the same report, byte for byte, in
/// every output style (blank, CRLF, malformed and non-finite lines and a last line without
/// its newline included), and the same problems on standard error.
#[test]
fn a_file_and_the_same_bytes_through_a_pipe_give_the_same_report() {
    let mut m = Model::power_law(200, 1.0, 1000.0, 4.0, 8);
    m.layer_split = Some(20);
    let records = m.run(7, 3000, |_| m.trace() / 80.0);
    let mut text =
        to_ndjson(&records).replace("\n{\"v\":1,\"step\":17,", "\r\n\n{\"v\":1,\"step\":17,");
    assert!(text.contains("\r\n\n"), "a CRLF line and a blank one");
    text.push_str("garbage line\n\n{\"v\":1,\"step\":5001,\"b_small\":4,\"b_big\":32,\"sq_small\":\"NaN\",\"sq_big\":1}\n");
    text.push_str("{\"v\":1,\"step\":5002,\"b_small\":4,\"b_big\":32,\"sq_small\":3,\"sq_big\":1}");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("run.ndjson");
    std::fs::write(&path, &text).expect("write");
    // `-` names standard input as /dev/stdin does.
    for (style, stdin) in [
        (&["--json"][..], "/dev/stdin"),
        (&["--json-lines"], "/dev/stdin"),
        (&[], "/dev/stdin"),
        (&["--json"], "-"),
    ] {
        let file = copus()
            .arg("analyze")
            .arg(&path)
            .args(style)
            .output()
            .expect("run");
        let mut child = copus()
            .args(["analyze", stdin])
            .args(style)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn");
        {
            use std::io::Write;
            let mut stdin = child.stdin.take().expect("stdin");
            stdin.write_all(text.as_bytes()).expect("feed");
        }
        let piped = child.wait_with_output().expect("run");
        assert!(
            file.status.success(),
            "{}",
            String::from_utf8_lossy(&file.stderr)
        );
        assert_eq!(file.status.code(), piped.status.code(), "{style:?}");
        assert_eq!(
            String::from_utf8_lossy(&file.stdout),
            String::from_utf8_lossy(&piped.stdout),
            "{style:?}"
        );
        let lines = |e: &[u8]| -> Vec<String> {
            String::from_utf8_lossy(e)
                .lines()
                .filter(|l| {
                    l.contains(":") && !l.contains("/dev/stdin") && !l.contains("run.ndjson")
                })
                .map(str::to_string)
                .collect()
        };
        assert_eq!(lines(&file.stderr), lines(&piped.stderr), "{style:?}");
    }
}

/// A threshold CBS at an end of the batches run is a bound and is printed as one: "below 16"
/// at the smallest (no larger batch came within the tolerance), not "8 samples (8..8)".
#[test]
fn a_threshold_at_the_smallest_batch_is_printed_as_a_bound() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut text = String::new();
    for batch in [8u64, 16, 32, 64] {
        for seed in 0..2u64 {
            for k in 0..=16u64 {
                let samples = k * 1024;
                let progress = (samples / batch) as f64 / (1.0 + 32.0 / batch as f64);
                let loss = 3.0 * (-progress / 400.0).exp() + 1.0 + 0.001 * seed as f64;
                text.push_str(&format!(
                    "{{\"v\":1,\"branch\":{{\"from_step\":30,\"batch\":{batch},\"seed\":{seed}}},\"step\":{},\"samples\":{samples},\"loss\":{loss}}}\n",
                    samples / batch
                ));
            }
        }
    }
    let file = dir.path().join("b.ndjson");
    std::fs::write(&file, text).expect("write");
    let out = copus().arg("cbs").arg(&file).output().expect("run");
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        report.contains("threshold CBS  below 16 samples (95 % interval of the batch picked 8..8)"),
        "{report}"
    );
}

/// A directory on standard input is said as such (it was read as a dump named `-`: "-: No
/// such file or directory").
#[test]
fn a_directory_on_standard_input_is_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = copus()
        .args(["analyze", "-"])
        .stdin(std::fs::File::open(dir.path()).expect("open the directory"))
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("-: standard input is a directory"), "{err}");
}

/// `watch - --headless < FILE`: standard input is then a file, which watch follows as it
/// grows; it is said so, with the ways to stop or to read it once (the message spoke of a
/// pipe's end, contradicting the `-` given).
#[test]
fn a_file_redirected_into_watch_is_named_as_a_file() {
    let sample =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/data/sample-run.ndjson");
    let out = copus()
        .args(["watch", "-", "--headless"])
        .stdin(std::fs::File::open(&sample).expect("sample"))
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("-: standard input is a file") && err.contains("copus analyze -"),
        "{err}"
    );
}

/// The display smoother's bandwidth (`--bandwidth`, the explorer's `<` and `>`) changes the
/// per-step curve, never the run-wide, window and drift intervals: with it, `--bandwidth 5`
/// made a drift interval [2.13, 3.47] of the default's [1.83, 4.04] (a narrow kernel takes the
/// run's slow wandering out of the residuals their variances come from).
#[test]
fn the_display_bandwidth_leaves_the_window_intervals_alone() {
    let sample = concat!(env!("CARGO_MANIFEST_DIR"), "/assets/data/sample-run.ndjson");
    let analyze = |extra: &[&str]| -> serde_json::Value {
        let out = copus()
            .args(["analyze", "--json", sample])
            .args(extra)
            .output()
            .expect("run");
        assert!(out.status.success(), "{out:?}");
        serde_json::from_slice(&out.stdout).expect("json")
    };
    let default = analyze(&[]);
    let intervals = |v: &serde_json::Value| {
        let s = &v["summary"];
        [
            s["ci"].clone(),
            s["now"]["ci"].clone(),
            s["drift"]["ci"].clone(),
            s["drift"]["from"]["ci"].clone(),
        ]
    };
    let step = |v: &serde_json::Value| v["steps"][300]["ci"].clone();
    for bandwidth in ["3", "5", "60"] {
        let other = analyze(&["--bandwidth", bandwidth]);
        assert_eq!(
            intervals(&other),
            intervals(&default),
            "--bandwidth {bandwidth}"
        );
        assert_ne!(
            step(&other),
            step(&default),
            "--bandwidth {bandwidth}: the curve"
        );
    }
}

/// Branch records given to `analyze` are named as such, with the command that reads them (it
/// said only "missing field `b_small`"), as `cbs` on a stats file points to `analyze`.
#[test]
fn analyze_on_branch_records_points_to_cbs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("br.ndjson");
    let line =
        r#"{"v":1,"branch":{"from_step":30,"batch":8,"seed":0},"step":0,"samples":0,"loss":2.5}"#;
    std::fs::write(&file, format!("{line}\n")).expect("write");
    let out = copus().arg("analyze").arg(&file).output().expect("run");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("holds the branch records of a branched experiment")
            && err.contains("copus cbs"),
        "{err}"
    );
}

/// `branch --run-out` names the base run it wrote and the command that sets its noise scale
/// beside the measured critical batch (it named only the branch file).
#[test]
fn branch_names_the_base_run_it_wrote() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (b, run) = (dir.path().join("b.ndjson"), dir.path().join("run.ndjson"));
    let out = copus()
        .args([
            "branch",
            "--at",
            "30",
            "--batches",
            "8,16,32",
            "--seeds",
            "2",
        ])
        .args(["--budget-samples", "512", "--eval-samples", "128"])
        .arg("--out")
        .arg(&b)
        .arg("--run-out")
        .arg(&run)
        .output()
        .expect("run copus");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let want = format!("copus analyze {} --branches {}", run.display(), b.display());
    assert!(
        err.contains(&format!("wrote the base run to {}", run.display())) && err.contains(&want),
        "{err}"
    );
    // The command it names runs.
    let analyzed = copus()
        .args(["analyze"])
        .arg(&run)
        .arg("--branches")
        .arg(&b)
        .output()
        .expect("run copus");
    assert!(analyzed.status.success(), "{analyzed:?}");
}

/// `snapshot --compare B` draws the two-run view `open --compare B` shows (it was refused as
/// an unknown argument, so that view could not be captured), with the comparison in the
/// estimators panel; `--compare` beside `--out` may not name the same file.
#[test]
fn snapshot_draws_the_two_run_view() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = asset("sample-run.ndjson");
    let screen = stdout_of(
        copus()
            .arg("snapshot")
            .arg(&a)
            .args(["--size", "200x90", "--keys", "4", "--compare"])
            .arg(&a),
    );
    assert!(
        screen.contains("compared with B = sample-run.ndjson") && screen.contains("B/A now ×1.00"),
        "{screen}"
    );
    let out = dir.path().join("b.ndjson");
    std::fs::copy(&a, &out).expect("copy");
    let clash = copus()
        .arg("snapshot")
        .arg(&a)
        .arg("--compare")
        .arg(&out)
        .arg("--out")
        .arg(&out)
        .output()
        .expect("run");
    assert!(!clash.status.success());
    assert!(String::from_utf8_lossy(&clash.stderr).contains("--compare"));
}

/// `analyze A --compare B --seq-len N` reads both runs' samples as N tokens, as one run's
/// analysis does, and puts the comparison's token axis on that scale (the flag was ignored:
/// 1 token a sample, while the explorer drew the same comparison at N tokens a sample).
#[test]
fn analyze_compare_honours_seq_len() {
    let a = asset("demo-train-3000.ndjson");
    let json = |extra: &[&str]| -> serde_json::Value {
        let text = stdout_of(
            copus()
                .arg("analyze")
                .arg(&a)
                .arg("--compare")
                .arg(&a)
                .args(["--json", "--summary-only"])
                .args(extra),
        );
        serde_json::from_str(&text).expect("json")
    };
    let (plain, read) = (json(&[]), json(&["--seq-len", "4096"]));
    let own = plain["a"]["summary"]["seq_len"]
        .as_f64()
        .expect("own tokens a sample");
    for run in ["a", "b"] {
        assert_eq!(read[run]["summary"]["seq_len"], 4096.0, "{run}");
    }
    let span = |v: &serde_json::Value| v["comparison"]["now_windows"][0][1].as_f64().expect("end");
    let scaled = span(&plain) * 4096.0 / own;
    assert!(
        (span(&read) / scaled - 1.0).abs() < 1e-12,
        "{} vs {scaled}",
        span(&read)
    );
}

/// `demo-train --out -` writes to standard output, as `watch -` reads standard input (it
/// created a file named `-`).
#[test]
fn demo_train_out_dash_is_standard_output() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = stdout_of(copus().current_dir(dir.path()).args([
        "demo-train",
        "--steps",
        "3",
        "--out",
        "-",
        "--quiet",
    ]));
    assert_eq!(out.lines().count(), 3);
    assert!(!dir.path().join("-").exists());
}

/// A run whose last window has no bounded estimate, with a learning-rate drop: the verdict
/// does not send the reader to the run-wide value (which averages the two regimes; it did,
/// on a run whose trajectory went from about 470 to 47,700 across the drop).
#[test]
fn an_unbounded_now_after_an_lr_change_does_not_point_to_the_run_wide_value() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = dir.path().join("r.ndjson");
    stdout_of(
        copus()
            .args([
                "demo-train",
                "--steps",
                "2000",
                "--micro-batches",
                "4",
                "--micro-batch-size",
                "32",
                "--lr-schedule",
                "step",
                "--drop-at",
                "1000",
                "--drop-factor",
                "0.2",
                "--seed",
                "3",
                "--quiet",
                "--out",
            ])
            .arg(&run),
    );
    // The summary of `analyze PATH --json --summary-only`.
    let summary_of = |path: &std::path::Path| -> serde_json::Value {
        let text = stdout_of(
            copus()
                .arg("analyze")
                .arg(path)
                .args(["--json", "--summary-only"]),
        );
        let v: serde_json::Value = serde_json::from_str(&text).expect("json");
        v["summary"].clone()
    };
    let summary = summary_of(&run);
    let reasons = summary["reasons"].to_string();
    assert!(
        summary["diagnostics"].to_string().contains("lr_change"),
        "{}",
        summary["diagnostics"]
    );
    assert!(
        reasons.contains("the `now` value")
            && reasons.contains(
                "not the run-wide value: it averages the steps before and after the \
                 learning-rate change at step 1000"
            ),
        "{reasons}"
    );
    // A schedule that moves smoothly is named over the steps it moves, not as a change at
    // its first step (a cosine run read "the learning-rate change at step 1").
    let cosine = dir.path().join("cosine.ndjson");
    stdout_of(
        copus()
            .args(["demo-train", "--steps", "1500", "--lr-schedule", "cosine"])
            .args(["--seed", "7", "--quiet", "--out"])
            .arg(&cosine),
    );
    let reasons = summary_of(&cosine)["reasons"].to_string();
    assert!(
        reasons.contains(
            "not the run-wide value: it averages steps at the different learning rates of its \
             schedule, which moves over steps 1-1499"
        ) && !reasons.contains("change at step 1)"),
        "{reasons}"
    );
}
