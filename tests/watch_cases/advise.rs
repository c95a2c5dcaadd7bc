//! `copus watch --headless --advise OUT --session S`: advice from the live B_crit, with
//! hysteresis, written as protocol lines to a file or served on TCP; advice-loop lines in a
//! stats stream are counted apart, not as malformed.

use super::{copus, json};
use serde_json::Value;
use std::io::{BufRead, Write};
use std::path::Path;

/// A deterministic ±`amp` multiplicative wobble.
fn wobble(i: u64, amp: f64) -> f64 {
    let x = (i.wrapping_mul(2_654_435_761) % 1000) as f64 / 999.0;
    1.0 + amp * (2.0 * x - 1.0)
}

/// Records at batch 32 (4 per small batch) whose noise scale is `b(step)` samples: |G|² = 1,
/// tr Σ = b, so sq_small = 1 + b/4 and sq_big = 1 + b/32; 4096 tokens a sample (the demo
/// session's model).
fn write_run(path: &Path, steps: u64, b: impl Fn(u64) -> f64) {
    write_run_of(path, steps, 4096, b);
}

/// [`write_run`] with `tokens_per_sample` tokens a sample.
fn write_run_of(path: &Path, steps: u64, tokens_per_sample: u64, b: impl Fn(u64) -> f64) {
    let mut f = std::fs::File::create(path).expect("create");
    for s in 0..steps {
        let b = b(s);
        writeln!(
            f,
            r#"{{"v":1,"step":{s},"b_small":4,"b_big":32,"n_small":8,"sq_small":{},"sq_big":{},"tokens":{}}}"#,
            1.0 + b / 4.0,
            1.0 + b / 32.0,
            (s + 1) * 32 * tokens_per_sample
        )
        .expect("write");
    }
}

fn demo() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("sessions/demo.ron")
}

/// `copus watch RUN --headless --until-steps STEPS --advise OUT --session demo EXTRA…`, run.
fn watch_advising(run: &Path, out: &Path, extra: &[&str], steps: u64) -> std::process::Output {
    copus()
        .args(["watch"])
        .arg(run)
        .args([
            "--headless",
            "--until-steps",
            &steps.to_string(),
            "--advise",
        ])
        .arg(out)
        .arg("--session")
        .arg(demo())
        .args(extra)
        .output()
        .expect("run")
}

fn advise(run: &Path, out: &Path, extra: &[&str], steps: u64) -> Value {
    let extra: Vec<&str> = std::iter::once("--json")
        .chain(extra.iter().copied())
        .collect();
    json(watch_advising(run, out, &extra, steps))["summary"].clone()
}

fn lines(out: &Path) -> Vec<Value> {
    std::fs::read_to_string(out)
        .expect("advice file")
        .lines()
        .map(|l| serde_json::from_str(l).expect("advice line is JSON"))
        .collect()
}

#[test]
fn a_b_crit_growing_16x_gets_advice_whose_batch_never_goes_down() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (run, out) = (
        dir.path().join("run.ndjson"),
        dir.path().join("advice.ndjson"),
    );
    write_run(&run, 4000, |s| {
        300.0 * 16f64.powf(s as f64 / 4000.0) * wobble(s, 0.25)
    });
    let summary = advise(&run, &out, &[], 4000);
    let advice = lines(&out);
    assert!(advice.len() >= 2, "{advice:?}");
    assert_eq!(
        summary["advice"].as_array().expect("advice").len(),
        advice.len()
    );
    let mut last = (0u64, 0u64);
    for line in &advice {
        assert_eq!(line["v"], 1);
        let a = &line["advice"];
        let get = |k: &str| a[k].as_u64().unwrap_or_else(|| panic!("{k} in {a}"));
        let (dp, tp, pp) = (
            a["layout"]["dp"].as_u64().expect("dp"),
            a["layout"]["tp"].as_u64().expect("tp"),
            a["layout"]["pp"].as_u64().expect("pp"),
        );
        assert_eq!(dp * tp * pp, 64, "{a}");
        assert_eq!(
            dp * get("micro_batch") * get("accumulation"),
            get("batch"),
            "{a}"
        );
        assert!(get("batch") >= last.1, "the batch went down: {advice:?}");
        assert!(get("at_step") >= last.0 + 50, "dwell: {advice:?}");
        assert!(a["expected_gain"].as_f64().expect("gain") > 0.05, "{a}");
        assert!(
            matches!(a["apply"].as_str(), Some("batch" | "restart")),
            "{a}"
        );
        assert_eq!(a["dry_run"], false);
        assert!(a["reason"].as_str().expect("reason").contains("B_crit"));
        last = (get("at_step"), get("batch"));
    }
    assert!(last.1 >= 128, "{advice:?}");
}

#[test]
fn a_steady_run_gets_no_flip_flop_and_dry_run_marks_the_advice() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (run, out) = (
        dir.path().join("run.ndjson"),
        dir.path().join("advice.ndjson"),
    );
    write_run(&run, 3000, |s| 1500.0 * wobble(s, 0.3));
    advise(&run, &out, &["--dry-run", "--min-dwell-steps", "10"], 3000);
    let advice = lines(&out);
    // Batch 32 is far from the best at B_crit 1500: one piece of advice, then quiet.
    assert_eq!(advice.len(), 1, "{advice:?}");
    assert_eq!(advice[0]["advice"]["dry_run"], true);
    // OUT exists now: refused without --force, replaced with it.
    let o = copus()
        .arg("watch")
        .arg(&run)
        .args(["--headless", "--until-steps", "10", "--advise"])
        .arg(&out)
        .arg("--session")
        .arg(demo())
        .output()
        .expect("run");
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("advice.ndjson") && err.contains("--force"),
        "{err}"
    );
    advise(&run, &out, &["--force"], 3000);
}

#[test]
fn advice_is_served_on_tcp_to_a_client() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = dir.path().join("run.ndjson");
    // Steps 0..400 grow fast, so advice comes early; the watch then waits for more steps.
    write_run(&run, 400, |s| 300.0 * 16f64.powf(s as f64 / 400.0));
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("free port")
        .local_addr()
        .expect("addr")
        .port();
    let mut child = copus()
        .arg("watch")
        .arg(&run)
        .args([
            "--headless",
            "--timeout-s",
            "20",
            "--advise",
            &format!("tcp://127.0.0.1:{port}"),
        ])
        .arg("--session")
        .arg(demo())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    let stream = loop {
        match std::net::TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => break s,
            Err(_) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(50))
            }
            Err(e) => panic!("no advice server: {e}"),
        }
    };
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .expect("timeout");
    let mut line = String::new();
    std::io::BufReader::new(stream)
        .read_line(&mut line)
        .expect("an advice line");
    let _ = child.kill();
    let _ = child.wait();
    let v: Value = serde_json::from_str(&line).expect("JSON");
    assert!(v["advice"]["batch"].as_u64().expect("batch") > 32, "{v}");
}

#[test]
fn advice_loop_lines_in_a_stream_are_counted_apart_not_malformed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = dir.path().join("run.ndjson");
    write_run(&run, 200, |_| 100.0);
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&run)
        .expect("open");
    writeln!(f, r#"{{"v":1,"advice":{{"at_step":150,"batch":64,"micro_batch":1,"accumulation":2,"layout":{{"dp":32,"tp":2,"pp":1}},"expected_gain":0.1,"reason":"r","apply":"batch","dry_run":false}}}}"#).expect("w");
    writeln!(f, r#"{{"v":1,"applied":{{"at_step":151,"batch":64,"micro_batch":1,"accumulation":2,"advice_step":150,"lr_factor":1.0}}}}"#).expect("w");
    writeln!(
        f,
        r#"{{"v":1,"step":200,"b_small":4,"b_big":32,"sq_small":26,"sq_big":4.1}}"#
    )
    .expect("w");
    drop(f);
    let w = json(
        copus()
            .arg("watch")
            .arg(&run)
            .args(["--headless", "--json", "--until-steps", "201"])
            .output()
            .expect("run"),
    );
    let s = &w["summary"];
    assert_eq!(s["malformed_lines"], 0, "{s}");
    assert_eq!(s["event_lines"], 2, "{s}");
    assert_eq!(s["applied_at"], serde_json::json!([151]));
    let a = json(
        copus()
            .arg("analyze")
            .arg(&run)
            .arg("--json")
            .output()
            .expect("run"),
    );
    assert_eq!(a["summary"]["malformed_lines"], 0, "{}", a["summary"]);
}

/// `watch --headless --advise` on `run` with `extra` flags: (advice lines written, stderr).
fn advise_with_stderr(run: &Path, out: &Path, extra: &[&str], steps: u64) -> (usize, String) {
    let o = watch_advising(run, out, extra, steps);
    assert!(o.status.success(), "{o:?}");
    let n = std::fs::read_to_string(out).map_or(0, |t| t.lines().count());
    (n, String::from_utf8_lossy(&o.stderr).into_owned())
}

#[test]
fn a_run_whose_samples_are_not_the_models_gets_no_advice_and_is_told_why() {
    // The built-in trainer counts 1 token a sample, the demo's model 4096: its B_crit in
    // samples read on the model's batch axis was off 4096-fold, and headless advice was given
    // on it without a word (the explorer already refused to show goodput).
    let dir = tempfile::tempdir().expect("tempdir");
    let run = dir.path().join("run.ndjson");
    let growing = |s: u64| 300.0 * 16f64.powf(s as f64 / 2000.0);
    write_run_of(&run, 2000, 1, growing);
    let (n, err) = advise_with_stderr(&run, &dir.path().join("a.ndjson"), &[], 2000);
    assert_eq!(n, 0, "{err}");
    assert!(
        err.contains("1 token(s) per sample") && err.contains("--seq-len 4096"),
        "{err}"
    );
    // Each sample read as one of the model's sequences: advised as the matching run is.
    let (n, err) = advise_with_stderr(
        &run,
        &dir.path().join("b.ndjson"),
        &["--seq-len", "4096"],
        2000,
    );
    assert!(n >= 1 && !err.contains("wrong scale"), "{err}");
    write_run(&run, 2000, growing);
    let (m, _) = advise_with_stderr(&run, &dir.path().join("c.ndjson"), &[], 2000);
    assert_eq!(m, n);
    // A session that states its live run's tokens per sample needs no flag (`plan` sends a
    // Live session to `watch --session` without one; its seq_len was ignored).
    write_run_of(&run, 2000, 1, growing);
    let demo_text = std::fs::read_to_string(demo()).expect("demo");
    let start = demo_text
        .find("    source: Scenario((")
        .expect("the demo's source");
    let end = start + demo_text[start..].find("    )),\n").expect("its end") + 8;
    let live = "    source: Live(target: \"run.ndjson\", seq_len: Some(4096)),\n";
    let session = dir.path().join("live.ron");
    let text = format!("{}{live}{}", &demo_text[..start], &demo_text[end..]);
    std::fs::write(&session, text).expect("write");
    let o = copus()
        .args(["watch"])
        .arg(&run)
        .args(["--headless", "--until-steps", "2000", "--advise"])
        .arg(dir.path().join("d.ndjson"))
        .arg("--session")
        .arg(&session)
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let k = std::fs::read_to_string(dir.path().join("d.ndjson")).map_or(0, |t| t.lines().count());
    assert!(k == n && !err.contains("wrong scale"), "{k} vs {n}: {err}");
    assert!(
        err.contains("reading each sample as 4096 tokens, as --session"),
        "{err}"
    );
}

#[test]
fn no_advice_before_the_estimate_rests_on_the_estimators_minimum_of_steps() {
    // Advice came at step 2 while the same command's verdict said "unreliable: too few steps".
    let dir = tempfile::tempdir().expect("tempdir");
    let run = dir.path().join("run.ndjson");
    write_run(&run, 49, |_| 5000.0);
    let (n, err) = advise_with_stderr(&run, &dir.path().join("a.ndjson"), &[], 49);
    assert_eq!(n, 0, "{err}");
    write_run(&run, 120, |_| 5000.0);
    let (n, err) = advise_with_stderr(&run, &dir.path().join("b.ndjson"), &[], 120);
    assert!(n >= 1, "{err}");
    let first = std::fs::read_to_string(dir.path().join("b.ndjson")).expect("advice");
    let at: u64 = serde_json::from_str::<Value>(first.lines().next().expect("a line"))
        .expect("json")["advice"]["at_step"]
        .as_u64()
        .expect("at_step");
    assert!(at >= 50, "{first}");
}

#[test]
fn the_text_summary_names_the_advice_and_the_verdict() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (run, out) = (
        dir.path().join("run.ndjson"),
        dir.path().join("advice.ndjson"),
    );
    write_run(&run, 2000, |s| 300.0 * 16f64.powf(s as f64 / 2000.0));
    let o = watch_advising(&run, &out, &[], 2000);
    assert!(o.status.success(), "{o:?}");
    let text = String::from_utf8_lossy(&o.stdout);
    let written = lines(&out).len();
    assert!(written >= 1);
    assert!(
        text.contains(&format!(
            "advice           {written} written; the last at step"
        )) && text.contains("verdict "),
        "{text}"
    );
    // It leads as `analyze` does: the last window's value with its interval before the
    // run-wide one (which a drifting run's verdict says not to read), and the newest smoothed
    // value carries its interval.
    let at = |needle: &str| {
        text.find(needle)
            .unwrap_or_else(|| panic!("{needle}: {text}"))
    };
    assert!(at("B_simple now  ") < at("run-wide      "), "{text}");
    let latest = &text[at("latest        ")..];
    assert!(latest.contains("95% CI ["), "{text}");
    assert!(text.contains("drift         x"), "{text}");
}

#[test]
fn watch_errors_name_their_flag_and_a_source_never_reached() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = dir.path().join("run.ndjson");
    write_run(&run, 10, |_| 300.0);
    let err = |args: &[&str]| {
        let o = copus()
            .args(args)
            .current_dir(dir.path())
            .output()
            .expect("run");
        assert!(!o.status.success(), "{args:?}");
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    let e = err(&[
        "watch",
        "run.ndjson",
        "--headless",
        "--until-steps",
        "10",
        "--advise",
        "a.ndjson",
        "--session",
        "nope.ron",
    ]);
    assert!(e.contains("--session nope.ron"), "{e}");
    // A port nothing listens on: the summary says the source was never reached.
    let e = err(&[
        "watch",
        "tcp://127.0.0.1:1",
        "--headless",
        "--timeout-s",
        "1",
    ]);
    assert!(e.contains("never reached tcp://127.0.0.1:1"), "{e}");
    // --until-steps, --json and --timeout-s belong to --headless (they were ignored).
    let e = err(&["watch", "run.ndjson", "--until-steps", "5"]);
    assert!(e.contains("--headless"), "{e}");
    // The explorer without a terminal says so and what runs without one.
    let o = copus()
        .args(["watch", "run.ndjson"])
        .current_dir(dir.path())
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run");
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && e.contains("needs a terminal") && e.contains("--headless"),
        "{e}"
    );
    // A session given as a model profile is named as such.
    let e = err(&[
        "predict",
        "--model",
        demo().to_str().expect("utf-8"),
        "--gpus",
        "8",
        "--batch",
        "64",
    ]);
    assert!(e.contains("a session file, not a model profile"), "{e}");
}

/// The advice predicts for the run's stack: `--stack` (and the setting flags) lay over the
/// session's stack as on `grid`, so a torchtitan run is advised from torchtitan's throughput
/// (the same B_crit, other gains); a bad `--calibration` is an error naming that file, not
/// the session.
#[test]
fn advice_predicts_for_the_stack_and_calibration_given() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = dir.path().join("run.ndjson");
    write_run(&run, 4000, |s| {
        300.0 * 16f64.powf(s as f64 / 4000.0) * wobble(s, 0.25)
    });
    let gains = |extra: &[&str], name: &str| -> Vec<String> {
        let out = dir.path().join(name);
        let summary = advise(&run, &out, extra, 4000);
        assert!(summary["advice"].is_array(), "{summary}");
        lines(&out)
            .iter()
            .map(|l| format!("{} {}", l["advice"]["layout"], l["advice"]["expected_gain"]))
            .collect()
    };
    let megatron = gains(&[], "a.ndjson");
    let torchtitan = gains(&["--stack", "torchtitan-fsdp2"], "b.ndjson");
    assert!(!megatron.is_empty() && !torchtitan.is_empty());
    assert_ne!(megatron, torchtitan, "the stack changed no advice");
    let bad = dir.path().join("bad.ron");
    std::fs::write(&bad, "garbage").expect("write");
    let out = watch_advising(
        &run,
        &dir.path().join("c.ndjson"),
        &["--calibration", bad.to_str().expect("utf-8")],
        100,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("bad.ron") && !err.contains("--session"),
        "{err}"
    );
}

/// A run that gets no advice leaves no empty file behind (the same command then refused to
/// run again without --force), and says so; a file that was there before is kept, empty or
/// not.
#[test]
fn an_advice_file_left_empty_is_removed_unless_it_was_there_before() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (run, out) = (
        dir.path().join("run.ndjson"),
        dir.path().join("advice.ndjson"),
    );
    // Too few steps for any advice.
    write_run(&run, 20, |_| 5000.0);
    for _ in 0..2 {
        let o = watch_advising(&run, &out, &["--json"], 20);
        assert!(o.status.success(), "{o:?}");
        // Why none was written ("advice none written" said nothing more).
        let v: Value = serde_json::from_slice(&o.stdout).expect("json");
        let note = v["summary"]["advice_note"].as_str().unwrap_or_default();
        assert!(note.contains("fewer than the 50 advice waits for"), "{v}");
        // And what kept every estimate quiet, counted.
        assert!(
            note.contains("; estimates without advice: ")
                && note.contains(" on fewer steps than advice waits for"),
            "{note}"
        );
        assert!(!out.exists(), "the empty advice file is left behind");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("no advice written; the empty file was removed"),
            "{err}"
        );
    }
    std::fs::write(&out, "").expect("the user's own empty file");
    let o = watch_advising(&run, &out, &["--json", "--force"], 20);
    assert!(o.status.success(), "{o:?}");
    assert!(out.exists(), "a file the user had is removed");
}

/// A run whose B_crit stays far below its batch gets no advice (advice never shrinks the
/// batch), and the note counts the estimates that reason kept quiet, not only the last
/// step's reason.
#[test]
fn the_no_advice_note_counts_why_each_estimate_was_quiet() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (run, out) = (
        dir.path().join("run.ndjson"),
        dir.path().join("advice.ndjson"),
    );
    write_run(&run, 400, |s| 2.0 * wobble(s, 0.1));
    let o = watch_advising(&run, &out, &["--json"], 400);
    assert!(o.status.success(), "{o:?}");
    let v: Value = serde_json::from_slice(&o.stdout).expect("json");
    let note = v["summary"]["advice_note"].as_str().unwrap_or_default();
    let tally = note
        .split("; estimates without advice: ")
        .nth(1)
        .unwrap_or_else(|| panic!("no tally: {note}"));
    let own: u64 = tally
        .split(", ")
        .find(|p| p.contains("the run's own cell the best at its batch or above"))
        .and_then(|p| p.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{note}"));
    assert!(own > 100, "{note}");
}
