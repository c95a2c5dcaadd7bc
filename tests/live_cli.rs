//! The real binary: `copus demo-train` writes or serves a run, `copus watch --headless`
//! follows it and reports a summary whose B_simple matches the records.

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn copus() -> Command {
    Command::new(env!("CARGO_BIN_EXE_copus"))
}

/// Wait for a child with a deadline, killing it if it overstays.
fn wait_bounded(mut child: Child, limit: Duration) -> Output {
    let start = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if start.elapsed() > limit {
            child.kill().expect("kill the child we started");
            panic!("child ran longer than {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

fn summary(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "watch failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("watch prints JSON");
    v["summary"].clone()
}

/// The summed two-batch estimate recomputed independently from a protocol file.
fn b_simple_of_file(path: &Path) -> f64 {
    let (mut g2, mut trace) = (0.0, 0.0);
    for line in std::fs::read_to_string(path).expect("read").lines() {
        let r: Value = serde_json::from_str(line).expect("line");
        let f = |k: &str| r[k].as_f64().expect("number");
        let (bs, bb, ss, sb) = (f("b_small"), f("b_big"), f("sq_small"), f("sq_big"));
        g2 += (bb * sb - bs * ss) / (bb - bs);
        trace += (ss - sb) / (1.0 / bs - 1.0 / bb);
    }
    trace / g2
}

#[test]
fn watch_follows_demo_train_writing_a_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("run.ndjson");
    // The watcher starts first and waits for the file to appear.
    let watch = copus()
        .args([
            "watch",
            file.to_str().expect("utf-8 path"),
            "--headless",
            "--until-steps",
            "300",
            "--json",
        ])
        .args(["--timeout-s", "60"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn watch");
    let train = copus()
        .args([
            "demo-train",
            "--steps",
            "300",
            "--seed",
            "7",
            "--quiet",
            "--out",
        ])
        .arg(&file)
        .output()
        .expect("run demo-train");
    assert!(
        train.status.success(),
        "{}",
        String::from_utf8_lossy(&train.stderr)
    );
    let s = summary(&wait_bounded(watch, Duration::from_secs(70)));
    assert_eq!(s["steps_ingested"], 300);
    assert_eq!(s["malformed_lines"], 0);
    assert_eq!(s["steps"], serde_json::json!([0, 299]));
    // The same range by name (analyze's `steps` is a count: docs/JSON.md).
    assert_eq!(
        (s["first_step"].clone(), s["last_step"].clone()),
        (0.into(), 299.into())
    );
    assert_eq!(s["complete"], true);
    let b = s["b_simple"].as_f64().expect("b_simple");
    let expected = b_simple_of_file(&file);
    assert!((b - expected).abs() <= 1e-9 * expected, "{b} vs {expected}");
    let (lo, hi) = (
        s["ci"][0].as_f64().expect("lo"),
        s["ci"][1].as_f64().expect("hi"),
    );
    assert!(lo < b && b < hi, "interval [{lo}, {hi}] should bracket {b}");
    assert!(
        s["last_loss"].as_f64().expect("loss") < 3.0,
        "the model learned: {}",
        s["last_loss"]
    );
}

#[test]
fn watch_follows_demo_train_serving_tcp() {
    let mut train = copus()
        .args([
            "demo-train",
            "--steps",
            "60",
            "--serve",
            "tcp://:0",
            "--linger-s",
            "20",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn demo-train");
    let stderr = train.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    let addr = loop {
        let line = lines
            .next()
            .expect("demo-train announces its address")
            .expect("read");
        if let Some(a) = line.split("serving protocol v1 on ").nth(1) {
            break a.trim().to_owned();
        }
    };
    assert!(
        addr.starts_with("tcp://127.0.0.1:"),
        "loopback by default: {addr}"
    );
    let out = copus()
        .args([
            "watch",
            &addr,
            "--headless",
            "--until-steps",
            "60",
            "--json",
            "--timeout-s",
            "60",
        ])
        .output()
        .expect("run watch");
    train.kill().expect("stop the demo-train we started");
    let _ = train.wait();
    let s = summary(&out);
    assert_eq!(s["steps_ingested"], 60);
    assert_eq!(s["steps"], serde_json::json!([0, 59]));
}

#[test]
fn watch_reports_errors_clearly() {
    let out = copus()
        .args(["watch", "x.ndjson", "--headless"])
        .output()
        .expect("run");
    assert!(
        !out.status.success(),
        "--headless needs a stopping condition"
    );
    let out = copus()
        .args(["watch", "tcp://nowhere", "--headless", "--timeout-s", "1"])
        .output()
        .expect("run");
    assert!(String::from_utf8_lossy(&out.stderr).contains("tcp://HOST:PORT"));
    // Nothing arrives before the timeout: a summary, then a non-zero exit.
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("never.ndjson");
    let out = copus()
        .args([
            "watch",
            missing.to_str().expect("utf-8"),
            "--headless",
            "--until-steps",
            "5",
        ])
        .args(["--timeout-s", "0.3", "--json"])
        .output()
        .expect("run");
    assert!(!out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).expect("summary JSON");
    assert_eq!(v["summary"]["steps_ingested"], 0);
    assert_eq!(v["summary"]["complete"], false);
    assert!(v["summary"]["b_simple"].is_null());
    assert!(String::from_utf8_lossy(&out.stderr).contains("timed out"));
}

/// A run whose big-batch norm was written as 0: `watch` names the fault, and says there is
/// no interval as `analyze` does (it printed "0.0 .. 0.0").
#[test]
fn watch_names_zero_norms_and_no_interval() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("zeros.ndjson");
    let text: String = (0..120)
        .map(|s| {
            format!(
                "{{\"v\":1,\"step\":{s},\"b_small\":8,\"b_big\":64,\"sq_small\":{},\"sq_big\":0}}\n",
                1.0 + (s % 7) as f64 * 0.01
            )
        })
        .collect();
    std::fs::write(&file, text).expect("write");
    let out = copus()
        .args(["watch", file.to_str().expect("utf-8 path"), "--headless"])
        .args(["--until-steps", "120", "--timeout-s", "30"])
        .output()
        .expect("run watch");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("CI none (no positive value fits the data)"),
        "{text}"
    );
    assert!(!text.contains("0.0 .. 0.0"), "{text}");
    assert!(
        text.contains("sq_big is exactly 0 on 120 of 120 steps"),
        "{text}"
    );
}

/// `watch --headless --seq-len N` counts the headline's tokens in sequences of N tokens, as
/// `analyze --seq-len N` does (it said "= 796 tokens (1 token per sample)" beside advice in
/// sequences).
#[test]
fn headless_watch_reads_samples_at_the_given_sequence_length() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/data/demo-train-3000.ndjson");
    let f = file.to_str().expect("utf-8");
    let tokens_line = |out: Output| {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find(|l| l.trim_start().starts_with("= ") && l.contains(" tokens ("))
            .map(str::to_string)
            .unwrap_or_else(|| panic!("no tokens line in {}", String::from_utf8_lossy(&out.stdout)))
    };
    let watched = tokens_line(
        copus()
            .args([
                "watch",
                f,
                "--headless",
                "--seq-len",
                "4096",
                "--until-steps",
                "3000",
                "--timeout-s",
                "60",
            ])
            .output()
            .expect("watch"),
    );
    let analyzed = tokens_line(
        copus()
            .args(["analyze", f, "--seq-len", "4096"])
            .output()
            .expect("analyze"),
    );
    assert!(watched.contains("(sequences of 4096 tokens)"), "{watched}");
    // The same number where both read the same last window (watch's one-sided smoothing does
    // not enter the window's ratio of means).
    assert_eq!(watched, analyzed);
}
