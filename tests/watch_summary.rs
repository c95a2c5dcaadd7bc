//! `copus watch --headless --json` reports `now`, `drift` and `reasons` exactly as
//! `copus analyze --one-sided --json` does on the same records (issue 14), and its estimate is
//! unchanged by the incremental live path on a file with out-of-order steps (issue 15).

use serde_json::Value;
use std::io::Write;
use std::process::Command;

fn copus() -> Command {
    Command::new(env!("CARGO_BIN_EXE_copus"))
}

/// `copus analyze PATH --json`, parsed (the command must succeed).
fn analyze_json(path: &std::path::Path) -> Value {
    json(
        copus()
            .arg("analyze")
            .arg(path)
            .arg("--json")
            .output()
            .expect("run"),
    )
}

fn json(out: std::process::Output) -> Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

#[test]
fn watch_summary_carries_now_drift_and_reasons_as_analyze_does() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("run.ndjson");
    let mut f = std::fs::File::create(&path).expect("create");
    // A run whose noise scale grows (drift), with pairs of steps written out of order.
    let n = 400u64;
    let mut steps: Vec<u64> = (0..n).collect();
    for i in (5..n as usize - 2).step_by(23) {
        steps.swap(i, i + 1);
    }
    for s in steps {
        let g2 = 1.0 / (1.0 + s as f64 / 50.0);
        let wobble = 1.0 + 0.3 * ((s * 7919 % 101) as f64 / 101.0 - 0.5);
        let sq_small = g2 + 40.0 / 8.0 * wobble;
        let sq_big = g2 + 40.0 / 256.0 * (2.0 - wobble);
        writeln!(
            f,
            r#"{{"v":1,"step":{s},"b_small":8,"b_big":256,"sq_small":{sq_small},"sq_big":{sq_big},"loss":2.5}}"#
        )
        .expect("write");
    }
    drop(f);
    let watch = json(
        copus()
            .arg("watch")
            .arg(&path)
            .args(["--headless", "--until-steps", &n.to_string(), "--json"])
            .args(["--timeout-s", "60"])
            .output()
            .expect("watch"),
    );
    let analyze = json(
        copus()
            .arg("analyze")
            .arg(&path)
            .args(["--one-sided", "--json"])
            .output()
            .expect("analyze"),
    );
    let (w, a) = (&watch["summary"], &analyze["summary"]);
    for field in ["now", "reasons", "b_simple", "ci", "verdict"] {
        assert_eq!(w[field], a[field], "{field}");
    }
    assert!(a["drift"].is_object(), "the fixture drifts: {}", a["drift"]);
    assert_eq!(w["drift"], a["drift"]);
    assert!(w["drift"]["significant"].as_bool().expect("bool"));
    // The newest smoothed point is the analysis' last step row, and the history ends there.
    let last = &analyze["steps"][n as usize - 1];
    assert_eq!(w["b_simple_now"], last["b_simple"]);
    let hist = w["history"].as_array().expect("history");
    let tail = hist.last().expect("a bin");
    assert_eq!(tail["last_step"], n - 1);
    let (b, want) = (
        tail["b_simple"].as_f64().expect("b"),
        last["b_simple"].as_f64().expect("b"),
    );
    assert!((b - want).abs() <= 1e-9 * want, "{b} vs {want}");
}

#[test]
fn watch_and_analyze_screen_records_alike_nan_included() {
    // Python's json.dumps writes a NaN as a bare `NaN` and inf as `Infinity`: both, the
    // strings "NaN" and "-Infinity", a null and an overflowing number make a step non-finite
    // (skipped), a broken line is malformed; watch and analyze must count them the same.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("run.ndjson");
    let mut text = String::new();
    let odd = [
        (10, "NaN"),
        (20, "Infinity"),
        (30, "-Infinity"),
        (40, "\"NaN\""),
        (50, "null"),
        (60, "1e999"),
    ];
    for s in 0..120u64 {
        let sq_big = match odd.iter().find(|(at, _)| *at == s) {
            Some((_, v)) => (*v).to_string(),
            None => format!("{}", 1.0 + 0.01 * (s % 7) as f64),
        };
        if s == 70 {
            text.push_str("{\"v\":1,\"step\":70,\"b_small\":8\n");
            continue;
        }
        text.push_str(&format!(
            "{{\"v\": 1, \"step\": {s}, \"b_small\": 8, \"b_big\": 64, \"sq_small\": 2.5, \"sq_big\": {sq_big}}}\n"
        ));
    }
    std::fs::write(&path, text).expect("write");
    let p = path.to_str().expect("utf-8");
    let a = json(
        copus()
            .args(["analyze", p, "--json"])
            .output()
            .expect("analyze"),
    );
    let w = json(
        copus()
            .args([
                "watch",
                p,
                "--headless",
                "--json",
                "--until-steps",
                "113",
                "--timeout-s",
                "5",
            ])
            .output()
            .expect("watch"),
    );
    let (a, w) = (&a["summary"], &w["summary"]);
    assert_eq!(a["non_finite_skipped"], 6, "analyze: {a}");
    assert_eq!(a["malformed_lines"], 1, "analyze: {a}");
    assert_eq!(
        w["non_finite_skipped"], a["non_finite_skipped"],
        "watch: {w}"
    );
    assert_eq!(w["malformed_lines"], a["malformed_lines"], "watch: {w}");
    assert_eq!(w["steps_ingested"], a["steps"], "watch: {w}");
    // The skipped lines weigh in the diagnostics and the verdict alike: 6 non-finite steps
    // of 120 lines are a warning, one malformed line is information (watch said "stable" on
    // its records alone, with neither).
    let kinds = |v: &Value| -> Vec<String> {
        let mut k: Vec<String> = v["diagnostics"]
            .as_array()
            .expect("diagnostics")
            .iter()
            .map(|d| format!("{} {}", d["severity"], d["kind"]))
            .collect();
        k.sort();
        k
    };
    assert!(
        kinds(a).contains(&"\"warning\" \"non_finite_skipped\"".to_string()),
        "{a}"
    );
    assert!(
        kinds(a).contains(&"\"info\" \"malformed_lines\"".to_string()),
        "{a}"
    );
    assert_eq!(kinds(w), kinds(a), "watch: {w}");
    assert_eq!(w["verdict"], a["verdict"], "watch: {w}");
}

#[path = "watch_cases/advise.rs"]
mod advise_cases;

#[path = "watch_cases/advisor.rs"]
mod advisor_cases;

#[test]
fn watch_without_an_estimate_fails_as_analyze_does_and_counts_what_it_skipped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("array.ndjson");
    std::fs::write(&path, "[1, 2]\n").expect("write");
    let out = copus()
        .arg("watch")
        .arg(&path)
        .args(["--headless", "--timeout-s", "0.5", "--json"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1), "no estimate is a failure");
    let v: Value = serde_json::from_slice(&out.stdout).expect("the summary is still written");
    let error = v["summary"]["error"].as_str().expect("error");
    assert_eq!(v["summary"]["malformed_lines"], 1);
    assert!(error.contains("1 malformed"), "{error}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no estimate"), "{stderr}");
}

#[test]
fn a_restarted_run_is_named_by_analyze_with_the_steps_it_wrote_twice() {
    // Steps 0-199, then 100-199 again with other values (a run restarted from a checkpoint):
    // analyze sums the records of a step and says so, counting every repeated record and
    // naming the steps; steps merely out of order get the order message only.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("restart.ndjson");
    let mut text = String::new();
    let line = |s: u64, small: f64| {
        format!(r#"{{"v":1,"step":{s},"b_small":8,"b_big":64,"sq_small":{small},"sq_big":1.0}}"#)
    };
    for s in 0..200 {
        text += &line(s, 3.0 + (s % 7) as f64 * 0.1);
        text.push('\n');
    }
    for s in 100..200 {
        text += &line(s, 5.0 + (s % 5) as f64 * 0.1);
        text.push('\n');
    }
    std::fs::write(&path, text).expect("write");
    let v = analyze_json(&path);
    let diags = v["summary"]["diagnostics"].as_array().expect("diagnostics");
    let order = diags
        .iter()
        .find(|d| d["kind"] == "step_order")
        .expect("step_order");
    let msg = order["message"].as_str().expect("message");
    assert!(msg.contains("100 record(s) repeat"), "{msg}");
    assert!(msg.contains("went back 1 time(s)"), "{msg}");
    assert_eq!(order["steps"], serde_json::json!([100, 199]));

    let swapped = dir.path().join("swapped.ndjson");
    let mut text = String::new();
    for s in [0u64, 2, 1, 3, 4, 6, 5, 7] {
        text += &line(s, 3.0);
        text.push('\n');
    }
    std::fs::write(&swapped, text).expect("write");
    let v = analyze_json(&swapped);
    let msg = v["summary"]["diagnostics"]
        .as_array()
        .expect("diagnostics")
        .iter()
        .find(|d| d["kind"] == "step_order")
        .and_then(|d| d["message"].as_str())
        .expect("step_order")
        .to_string();
    assert!(
        msg.contains("goes back 2 time(s)") && !msg.contains("repeat"),
        "{msg}"
    );
}

/// Every line written twice (two writers logging the same record, a file appended to
/// itself) is one measurement: analyze reads each once, as watch does, and says so; it counted
/// them twice, narrowing the interval ([94.51, 112.00] against [94.18, 112.46]).
#[test]
fn lines_written_twice_are_read_once_by_analyze_as_by_watch() {
    let dir = tempfile::tempdir().expect("tempdir");
    let line = |s: u64| {
        format!(
            "{{\"v\":1,\"step\":{s},\"b_small\":8,\"b_big\":64,\"sq_small\":{},\"sq_big\":{}}}\n",
            3.0 + (s % 7) as f64 * 0.1,
            1.0 + (s % 3) as f64 * 0.05
        )
    };
    let once: String = (0..300).map(line).collect();
    let twice: String = (0..300).map(|s| line(s).repeat(2)).collect();
    let (a, b) = (
        dir.path().join("once.ndjson"),
        dir.path().join("twice.ndjson"),
    );
    std::fs::write(&a, once).expect("write");
    std::fs::write(&b, twice).expect("write");
    let (va, vb) = (analyze_json(&a), analyze_json(&b));
    let (sa, sb) = (&va["summary"], &vb["summary"]);
    assert_eq!(sa["ci"], sb["ci"]);
    assert_eq!(sa["now"], sb["now"]);
    assert_eq!(sb["duplicates_dropped"], 300);
    assert_eq!(sa["duplicates_dropped"], 0);
    let said = sb["diagnostics"].to_string();
    assert!(
        said.contains("300 record(s) repeat an earlier record exactly"),
        "{said}"
    );
}

#[test]
fn summary_only_leaves_the_rows_out_of_a_comparison_too() {
    let dir = tempfile::tempdir().expect("tempdir");
    let write = |name: &str, scale: f64| {
        let path = dir.path().join(name);
        let text: String = (0..120u64)
            .map(|s| {
                format!(
                    "{{\"v\":1,\"step\":{s},\"b_small\":8,\"b_big\":64,\"sq_small\":{},\"sq_big\":1.0,\"tokens\":{}}}\n",
                    scale * (3.0 + (s % 7) as f64 * 0.1),
                    (s + 1) * 64 * 128
                )
            })
            .collect();
        std::fs::write(&path, text).expect("write");
        path
    };
    let (a, b) = (write("a.ndjson", 1.0), write("b.ndjson", 1.3));
    let compare = |extra: &[&str]| {
        json(
            copus()
                .arg("analyze")
                .arg(&a)
                .arg("--compare")
                .arg(&b)
                .arg("--json")
                .args(extra)
                .output()
                .expect("run"),
        )
    };
    let full = compare(&[]);
    assert!(full["a"]["steps"].is_array() && full["comparison"]["points"].is_array());
    let short = compare(&["--summary-only"]);
    for (key, rows) in [("a", "steps"), ("b", "steps"), ("comparison", "points")] {
        assert!(short[key][rows].is_null(), "{key}.{rows} left in");
    }
    assert_eq!(short["a"]["summary"], full["a"]["summary"]);
    assert_eq!(
        short["comparison"]["run_wide"],
        full["comparison"]["run_wide"]
    );
}

#[test]
fn skipped_lines_are_named_on_stderr_in_every_output_style() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("cut.ndjson");
    let mut text: String = (0..60u64)
        .map(|s| {
            format!(
                "{{\"v\":1,\"step\":{s},\"b_small\":8,\"b_big\":64,\"sq_small\":{},\"sq_big\":1.0}}\n",
                3.0 + (s % 7) as f64 * 0.1
            )
        })
        .collect();
    text.push_str("{\"v\":1,\"step\":60,\"b_sm");
    std::fs::write(&path, text).expect("write");
    for style in ["--json", "--json-lines"] {
        let out = copus()
            .arg("analyze")
            .arg(&path)
            .arg(style)
            .output()
            .expect("run");
        assert!(out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("cut.ndjson:61: "), "{style}: {stderr}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let first = stdout.lines().next().expect("output");
        serde_json::from_str::<Value>(first).expect("stdout stays JSON");
    }
}

#[test]
fn a_short_run_whose_last_window_disagrees_with_the_run_is_not_called_stable() {
    // 90 steps: too few for the drift test's two windows. B_simple jumps from 40 to 800
    // samples halfway; the last window and the run-wide value disagree beyond their
    // intervals, which alone must keep the verdict from "stable".
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("short.ndjson");
    write_two_batch_run(&path, 90, 40.0, |s| if s < 45 { 1.0 } else { 0.05 });
    let v = analyze_json(&path);
    let s = &v["summary"];
    assert!(s["drift"].is_null(), "too short for the drift test");
    assert_ne!(s["verdict"], "stable", "{s}");
    let reasons = s["reasons"].as_array().expect("reasons");
    assert!(
        reasons.iter().any(|r| r["kind"] == "drift"
            && r["message"]
                .as_str()
                .is_some_and(|m| m.contains("do not overlap"))),
        "{reasons:?}"
    );
}

#[test]
fn one_bad_line_in_a_hundred_is_info_whether_malformed_or_non_finite() {
    // The 1 % rule counts every input line: a NaN line is one line of a hundred as a
    // malformed one is (the NaN one was a warning: it counted against the 99 records only).
    let dir = tempfile::tempdir().expect("tempdir");
    let run = |bad: &[(u64, &str)]| {
        let text: String = (0..100u64)
            .map(|s| match bad.iter().find(|(at, _)| *at == s) {
                Some((_, line)) => format!("{line}\n"),
                None => format!(
                    "{{\"v\":1,\"step\":{s},\"b_small\":8,\"b_big\":64,\"sq_small\":{},\"sq_big\":1.0}}\n",
                    3.0 + (s % 7) as f64 * 0.1
                ),
            })
            .collect();
        let path = dir.path().join("r.ndjson");
        std::fs::write(&path, text).expect("write");
        let v = analyze_json(&path);
        v["summary"]["diagnostics"].clone()
    };
    let severity = |d: &Value, kind: &str| {
        d.as_array()
            .expect("diagnostics")
            .iter()
            .find(|x| x["kind"] == kind)
            .map(|x| x["severity"].as_str().expect("severity").to_string())
    };
    let nan = r#"{"v":1,"step":50,"b_small":8,"b_big":64,"sq_small":NaN,"sq_big":1.0}"#;
    let d = run(&[(50, nan)]);
    assert_eq!(
        severity(&d, "non_finite_skipped").as_deref(),
        Some("info"),
        "{d}"
    );
    let d = run(&[(50, "garbage")]);
    assert_eq!(
        severity(&d, "malformed_lines").as_deref(),
        Some("info"),
        "{d}"
    );
    let nan2 = r#"{"v":1,"step":51,"b_small":8,"b_big":64,"sq_small":NaN,"sq_big":1.0}"#;
    let d = run(&[(50, nan), (51, nan2)]);
    assert_eq!(
        severity(&d, "non_finite_skipped").as_deref(),
        Some("warning"),
        "{d}"
    );
}

#[test]
fn two_writers_into_one_file_are_named_once_not_as_a_restart_at_every_step() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("two-ranks.ndjson");
    let mut f = std::fs::File::create(&path).expect("create");
    // Two ranks each writing their own record of every step, interleaved.
    let n = 300u64;
    for s in 0..n {
        for rank in 0..2u64 {
            let wobble = 1.0 + 0.1 * rank as f64 + 0.2 * ((s * 7919 % 101) as f64 / 101.0);
            let sq_small = 0.5 + 5.0 * wobble;
            let sq_big = 0.5 + 5.0 / 32.0 * wobble;
            writeln!(
                f,
                r#"{{"v":1,"step":{s},"b_small":8,"b_big":256,"sq_small":{sq_small},"sq_big":{sq_big}}}"#
            )
            .expect("write");
        }
    }
    drop(f);
    let out = copus()
        .arg("watch")
        .arg(&path)
        .args(["--headless", "--until-steps", &n.to_string()])
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let announced = stderr.matches("the run restarted at step").count();
    assert!(
        (1..=20).contains(&announced),
        "{announced} restart lines:\n{stderr}"
    );
    assert!(stderr.contains("further restarts are counted"), "{stderr}");
    assert!(stdout.contains("several writers"), "{stdout}");
    assert!(stdout.contains("copus analyze"), "{stdout}");
    // --json carries it too.
    let v = json(
        copus()
            .arg("watch")
            .arg(&path)
            .args(["--headless", "--until-steps", &n.to_string(), "--json"])
            .output()
            .expect("run"),
    );
    assert!(
        v["summary"]["several_writers"]
            .as_str()
            .is_some_and(|s| s.contains("several writers")),
        "{}",
        v["summary"]
    );
}

#[test]
fn a_window_as_long_as_the_run_does_not_hide_its_drift() {
    // 300 steps whose B_simple grows 20×: the default window (50 steps) measures the drift;
    // --window 1000 (clamped to the run) leaves no room for two windows, and the verdict must
    // not turn "stable" for that reason.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("growing.ndjson");
    write_two_batch_run(&path, 300, 40.0, |s| 1.0 / (1.0 + s as f64 / 15.0));
    let default = analyze_json(&path);
    assert_eq!(
        default["summary"]["drift"]["significant"], true,
        "{}",
        default["summary"]
    );
    let out = copus()
        .arg("analyze")
        .arg(&path)
        .args(["--window", "1000", "--json"])
        .output()
        .expect("run");
    let v = json(out);
    let s = &v["summary"];
    assert!(s["drift"].is_null(), "{s}");
    assert_ne!(s["verdict"], "stable", "{s}");
    assert!(
        s["reasons"].to_string().contains("drift not measured"),
        "{}",
        s["reasons"]
    );
}

#[test]
fn a_run_without_a_negative_single_step_g2_says_nothing_about_it() {
    // |G|² well above the noise at every step: no "0% … negative" line.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("clean.ndjson");
    write_two_batch_run(&path, 120, 4.0, |_| 5.0);
    let v = analyze_json(&path);
    let s = &v["summary"];
    assert_eq!(s["negative_g2_fraction"], 0.0, "{s}");
    assert!(
        !s["diagnostics"].to_string().contains("negative_g2"),
        "{}",
        s["diagnostics"]
    );
}

/// A protocol file of `steps` steps at batches 8 and 64 whose |G|² at step s is `g2(s)` and
/// whose tr(Σ) is `trace`, with a small deterministic wobble on both norms.
fn write_two_batch_run(path: &std::path::Path, steps: u64, trace: f64, g2: impl Fn(u64) -> f64) {
    let text: String = (0..steps)
        .map(|s| {
            let g2 = g2(s);
            let wobble = 1.0 + 0.02 * ((s * 7919 % 11) as f64 / 11.0 - 0.5);
            let sq_small = g2 + trace / 8.0 * wobble;
            let sq_big = g2 + trace / 64.0 * (2.0 - wobble);
            format!(
                "{{\"v\":1,\"step\":{s},\"b_small\":8,\"b_big\":64,\"sq_small\":{sq_small},\"sq_big\":{sq_big}}}\n"
            )
        })
        .collect();
    std::fs::write(path, text).expect("write");
}

/// Norms written swapped (the small batch's below the big one's: tr(Σ) estimates below zero):
/// no positive value fits, and `watch` says so as `analyze` does, with a `null` interval, not
/// `[0.0, 0.0]` (which a script reads as a measured interval at zero), in its summary and its
/// history.
#[test]
fn an_empty_interval_is_null_in_watch_as_in_analyze() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("swapped.ndjson");
    let text: String = (0..200u64)
        .map(|s| {
            let wobble = 1.0 + 0.02 * ((s * 7919 % 11) as f64 / 11.0 - 0.5);
            let (small, big) = (30.0 + 100.0 / 64.0 * wobble, 30.0 + 100.0 / 8.0 * wobble);
            format!(
                "{{\"v\":1,\"step\":{s},\"b_small\":8,\"b_big\":64,\"sq_small\":{small},\"sq_big\":{big}}}\n"
            )
        })
        .collect();
    std::fs::write(&path, text).expect("write");
    let analyzed = analyze_json(&path);
    assert!(
        analyzed["summary"]["ci"].is_null(),
        "{}",
        analyzed["summary"]
    );
    let out = copus()
        .args(["watch", "--headless", "--json", "--until-steps", "200"])
        .arg(&path)
        .output()
        .expect("run");
    let s = &json(out)["summary"];
    assert!(s["b_simple"].as_f64().is_some_and(|b| b < 0.0), "{s}");
    assert!(s["ci"].is_null(), "{s}");
    assert!(s["ci_now"].is_null(), "{s}");
    let history = s["history"].as_array().expect("history");
    assert!(!history.is_empty());
    assert!(history.iter().all(|h| h["ci"].is_null()), "{s}");
    let text = copus()
        .args(["watch", "--headless", "--until-steps", "200"])
        .arg(&path)
        .output()
        .expect("run");
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("CI none (no positive value fits the data)"),
        "{text}"
    );
    assert!(text.contains("latest        negative ("), "{text}");
}

/// `… | copus watch /dev/stdin` ends when the writer closes the pipe (nobody can open an
/// anonymous pipe again), where it used to wait until killed: with `--timeout-s` it prints its
/// summary and succeeds at once; with `--until-steps` beyond what came, it says the input
/// ended (not "timed out"). A last line without its newline counts, as in `analyze`.
#[test]
fn watch_ends_when_the_pipe_it_reads_is_closed() {
    use std::process::Stdio;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("run.ndjson");
    write_two_batch_run(&path, 120, 40.0, |_| 1.0);
    let mut text = std::fs::read(&path).expect("read");
    assert_eq!(text.pop(), Some(b'\n'));
    for (target, args, ok) in [
        ("/dev/stdin", vec!["--timeout-s", "60", "--json"], true),
        ("/dev/stdin", vec!["--until-steps", "500", "--json"], false),
        // `-` is standard input too.
        ("-", vec!["--timeout-s", "60", "--json"], true),
        // A pipe stops at its end: no stop condition needed (it was refused, "--headless needs
        // --until-steps N or --timeout-s S").
        ("-", vec!["--json"], true),
    ] {
        let start = std::time::Instant::now();
        let mut child = copus()
            .args(["watch", target, "--headless"])
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(&text).expect("write");
        drop(stdin);
        let out = child.wait_with_output().expect("wait");
        assert!(
            start.elapsed().as_secs() < 30,
            "{args:?} waited past the pipe's end"
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.success(), ok, "{args:?}: {stderr}");
        let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
        let s = &v["summary"];
        assert_eq!(s["steps_ingested"], 120, "{s}");
        assert_eq!(s["input_ended"], true, "{s}");
        if !ok {
            assert!(
                stderr.contains("the input ended after 120 of 500 steps"),
                "{stderr}"
            );
        }
    }
}

/// `--calibration` with `--headless` and no `--advise` is refused, not silently ignored (a
/// path that did not exist ran with exit 0).
#[test]
fn a_calibration_without_advice_is_refused_headless() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("run.ndjson");
    write_two_batch_run(&path, 20, 40.0, |_| 1.0);
    let out = copus()
        .args([
            "watch",
            "--headless",
            "--until-steps",
            "20",
            "--calibration",
            "nope.ron",
        ])
        .arg(&path)
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--calibration nope.ron") && err.contains("--advise"),
        "{err}"
    );
}

/// Where the last window's estimate is negative (tr(Σ) estimated below zero) the reason says
/// so, with the interval's upper end: it said "has no bounded estimate" beside a printed
/// interval [0, 0.0012].
#[test]
fn a_negative_last_window_is_called_no_batch_size_not_unbounded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tiny-noise.ndjson");
    // |G|² ≈ 1 and tr(Σ) ≈ 0.003 for 450 steps, then tr(Σ) ≈ −0.003 (sq_big above sq_small).
    let text: String = (0..500u64)
        .map(|s| {
            let wiggle = ((s * 7919 % 101) as f64 / 101.0 - 0.5) * 2e-4;
            let gap = if s < 450 { 3.2e-4 } else { -3.2e-4 };
            format!(
                "{{\"v\":1,\"step\":{s},\"b_small\":4,\"b_big\":32,\"sq_small\":{},\"sq_big\":{}}}\n",
                1.0 + gap + wiggle,
                1.0 - wiggle
            )
        })
        .collect();
    std::fs::write(&path, text).expect("write");
    let s = &analyze_json(&path)["summary"];
    let now = s["now"]["b_simple"].as_f64().expect("a value");
    assert!(now < 0.0, "{}", s["now"]);
    let reasons = s["reasons"].to_string();
    assert!(
        reasons.contains("no batch size (tr(Σ) estimated below zero"),
        "{reasons}"
    );
    assert!(!reasons.contains("has no bounded estimate"), "{reasons}");
}

/// A TCP server that sends its records and closes (a run that ended, or a stalled one) is
/// said in the summary (`source_lost`, with the last step): the watch reconnected until its
/// timeout and the summary read as if the source were still there. A file that is still
/// there at the end says nothing of it.
#[test]
fn a_server_that_closed_and_did_not_come_back_is_said_in_the_summary() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("run.ndjson");
    write_two_batch_run(&path, 60, 40.0, |_| 1.0);
    let text = std::fs::read(&path).expect("read");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let addr = listener.local_addr().expect("address");
    let server = std::thread::spawn(move || {
        // One connection, the whole run, then the server is gone.
        let (mut conn, _) = listener.accept().expect("accept");
        conn.write_all(&text).expect("send");
    });
    let out = copus()
        .args([
            "watch",
            &format!("tcp://{addr}"),
            "--headless",
            "--timeout-s",
            "3",
            "--json",
        ])
        .output()
        .expect("run");
    server.join().expect("server");
    let v = json(out);
    let s = &v["summary"];
    assert_eq!(s["steps_ingested"], 60, "{s}");
    let lost = s["source_lost"].as_str().expect("source_lost");
    assert!(
        lost.contains("closed by the server") && lost.contains("after step 59"),
        "{lost}"
    );
    let file = json(
        copus()
            .arg("watch")
            .arg(&path)
            .args(["--headless", "--until-steps", "60", "--json"])
            .output()
            .expect("run"),
    );
    assert!(
        file["summary"]["source_lost"].is_null(),
        "{}",
        file["summary"]
    );
}

/// With `--advise --session S` whose live source says how many tokens a sample is, the summary
/// counts tokens as the advice reads the samples (it announced "reading each sample as 64
/// tokens", then counted "1 token per sample").
#[test]
fn the_summary_reads_a_sample_as_the_advice_does() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = dir.path().join("run.ndjson");
    write_two_batch_run(&run, 300, 40.0, |_| 0.5);
    let session = dir.path().join("s.ron");
    std::fs::write(
        &session,
        r#"(name: "advised", model: Inline((name: "tiny", layers: 2, hidden: 64, heads: 4,
            kv_heads: 4, ffn_hidden: 256, vocab: 72, seq_len: 64, swiglu: false,
            tied_embeddings: true, source: "test")),
            cluster: (hardware: Named("h100-sxm"), nodes: 1, gpus_per_node: 2),
            source: Live(target: "run.ndjson", seq_len: Some(64)),
            search: (batch_sizes: [16, 32, 64, 128], micro_batches: [8], zero: [1],
                     recompute: [None], interleave: [1], allow_cross_node_tp: false))"#,
    )
    .expect("session");
    let out = copus()
        .arg("watch")
        .arg(&run)
        .args(["--headless", "--until-steps", "300", "--timeout-s", "30"])
        .arg("--advise")
        .arg(dir.path().join("advice.ndjson"))
        .arg("--session")
        .arg(&session)
        .output()
        .expect("watch");
    let (text, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{err}");
    assert!(err.contains("reading each sample as 64 tokens"), "{err}");
    assert!(
        text.contains("(sequences of 64 tokens)") && !text.contains("1 token per sample"),
        "{text}"
    );
}

/// `--advise` without `--session` advises on the command line's model and cluster (it was a
/// bare "required argument" error although `watch` takes `--model`, `--hardware` and
/// `--nodes`), says so when those are copus's defaults, and refuses both at once.
#[test]
fn advice_without_a_session_uses_the_command_lines_model_and_cluster() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = dir.path().join("run.ndjson");
    write_two_batch_run(&run, 300, 40.0, |_| 0.05);
    let watch = |extra: &[&str]| {
        let out = copus()
            .arg("watch")
            .arg(&run)
            .args(["--headless", "--until-steps", "300", "--timeout-s", "30"])
            .args(["--seq-len", "4096", "--advise"])
            .arg(dir.path().join("advice.ndjson"))
            .args(extra)
            .output()
            .expect("watch");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.code(), text, err)
    };
    let (code, text, err) = watch(&[]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("advising on copus's default model and cluster (llama-7b on 1×8 h100-sxm)"),
        "{err}"
    );
    assert!(
        text.contains("advice ") && text.contains("B_crit"),
        "{text}"
    );
    let (code, text, err) = watch(&["--model", "llama3-8b", "--nodes", "2"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(!err.contains("default model"), "{err}");
    assert!(
        text.contains("advice ") && text.contains("B_crit"),
        "{text}"
    );
    let (code, _, err) = watch(&["--model", "llama3-8b", "--session", "s.ron"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--session") && err.contains("--model"),
        "{err}"
    );
}
