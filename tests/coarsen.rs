//! Issue 15, bounded memory: `copus analyze --max-records N` merges a long run into at most N
//! records of equal numbers of consecutive steps, reports it, and gives the estimate of the
//! whole run.

use crate::reliability_support;
use crate::stats_support;

use stats_support::{Model, to_ndjson};
use std::process::Command;

fn analyze_json(path: &std::path::Path, extra: &[&str]) -> serde_json::Value {
    let path = path.to_str().expect("a UTF-8 temporary path");
    let args: Vec<&str> = ["analyze", path, "--json"]
        .into_iter()
        .chain(extra.iter().copied())
        .collect();
    reliability_support::copus_json(&args)
}

/// A 5,000-step run with layers, tokens and loss, written to a temporary file.
fn run_file(dir: &tempfile::TempDir, steps: u64) -> std::path::PathBuf {
    let mut m = Model::power_law(200, 1.0, 1000.0, 4.0, 8);
    m.layer_split = Some(20);
    let b_true = 96.0;
    let mut records = m.run(7, steps, |_| m.trace() / b_true);
    for (i, r) in records.iter_mut().enumerate() {
        r.tokens = Some(2048.0 * 32.0 * (i + 1) as f64);
        r.loss = Some(3.0);
        r.lr = Some(3e-4);
    }
    let path = dir.path().join("run.ndjson");
    std::fs::write(&path, to_ndjson(&records)).expect("write");
    path
}

fn f(v: &serde_json::Value) -> f64 {
    v.as_f64().expect("number")
}

#[test]
fn a_long_run_is_coarsened_and_reported() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = run_file(&dir, 5000);
    let small = analyze_json(&path, &["--max-records", "1000"]);
    let all = analyze_json(&path, &["--max-records", "100000"]);

    let c = &small["summary"]["coarsened"];
    assert_eq!(c["records_read"], 5000);
    assert_eq!(c["steps_per_record"], 8);
    assert_eq!(c["max_records"], 1000);
    let kept = c["records_kept"].as_u64().expect("count");
    assert!((500..=1000).contains(&kept), "{kept}");
    let rows = small["steps"].as_array().expect("rows");
    assert_eq!(rows.len() as u64, kept);
    assert!(rows.len() <= 1000);
    let steps: Vec<u64> = rows
        .iter()
        .map(|r| r["step"].as_u64().expect("step"))
        .collect();
    assert!(steps.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(small["summary"]["steps"], kept);
    let diag = small["summary"]["diagnostics"]
        .as_array()
        .expect("diagnostics")
        .iter()
        .find(|d| d["kind"] == "coarsened")
        .expect("a coarsened diagnostic");
    assert_eq!(diag["severity"], "info");
    let msg = diag["message"].as_str().expect("message");
    assert!(msg.starts_with("5,000 records analysed as"), "{msg}");
    assert!(msg.contains("8 consecutive steps"), "{msg}");

    // The estimate of the whole run: the same run-wide B_simple, nearly the same interval.
    assert!(all["summary"].get("coarsened").is_none());
    let (a, b) = (
        f(&small["summary"]["b_simple"]),
        f(&all["summary"]["b_simple"]),
    );
    assert!((a - b).abs() <= 0.03 * b, "{a} vs {b}");
    for i in 0..2 {
        let (x, y) = (f(&small["summary"]["ci"][i]), f(&all["summary"]["ci"][i]));
        assert!((x - y).abs() <= 0.05 * y, "ci[{i}]: {x} vs {y}");
    }
    let (x, y) = (
        f(&small["summary"]["now"]["b_simple"]),
        f(&all["summary"]["now"]["b_simple"]),
    );
    assert!((x - y).abs() <= 0.05 * y, "now: {x} vs {y}");
}

#[test]
fn a_short_run_is_not_coarsened_by_default() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = run_file(&dir, 800);
    let v = analyze_json(&path, &[]);
    assert!(v["summary"].get("coarsened").is_none());
    assert_eq!(v["steps"].as_array().expect("rows").len(), 800);
    let every = analyze_json(&path, &["--max-records", "0"]);
    assert_eq!(v, every);
}

#[test]
fn the_table_mentions_the_coarsening_and_bad_bounds_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = run_file(&dir, 600);
    let out = Command::new(env!("CARGO_BIN_EXE_copus"))
        .args([
            "analyze",
            path.to_str().expect("utf-8"),
            "--max-records",
            "100",
        ])
        .output()
        .expect("run copus");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("600 records analysed as"), "{text}");
    for bad in ["1", "2", "99", "many"] {
        let out = Command::new(env!("CARGO_BIN_EXE_copus"))
            .args([
                "analyze",
                path.to_str().expect("utf-8"),
                "--max-records",
                bad,
            ])
            .output()
            .expect("run copus");
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--max-records"), "{err}");
    }
}

#[test]
fn a_strongly_coarsened_run_keeps_its_window_in_steps() {
    // 1,000 steps kept as 100 records of 16 steps: the last window is the default's tenth of
    // the run in steps (100 steps, 7 records), not min_steps records (50 records = 800 steps,
    // which left no room for the drift test).
    let dir = tempfile::tempdir().expect("tempdir");
    let path = run_file(&dir, 1000);
    let all = analyze_json(&path, &[]);
    let few = analyze_json(&path, &["--max-records", "100"]);
    assert_eq!(few["summary"]["coarsened"]["steps_per_record"], 16);
    let span = |v: &serde_json::Value| {
        let now = &v["summary"]["now"];
        f(&now["last_step"]) - f(&now["first_step"])
    };
    assert!(span(&all) < 100.0, "{}", all["summary"]["now"]);
    assert!(
        span(&few) <= 1.2 * span(&all),
        "{} against {}",
        few["summary"]["now"],
        all["summary"]["now"]
    );
    assert!(few["summary"]["drift"].is_object(), "{}", few["summary"]);
}

/// Lines a little out of order (every third pair swapped) are coarsened as the sorted file is:
/// the same records, the same estimate; a restarted run's second attempt joins the records of
/// its own steps. Before, a late line started a record that then took in steps far from its own.
#[test]
fn lines_out_of_order_are_coarsened_by_step() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = run_file(&dir, 5000);
    let text = std::fs::read_to_string(&path).expect("read");
    let mut lines: Vec<&str> = text.lines().collect();
    let sorted = analyze_json(&path, &["--max-records", "500"]);
    for i in (0..lines.len() - 1).step_by(3) {
        lines.swap(i, i + 1);
    }
    let jittered = dir.path().join("jittered.ndjson");
    std::fs::write(&jittered, lines.join("\n") + "\n").expect("write");
    let got = analyze_json(&jittered, &["--max-records", "500"]);
    let (a, b) = (&sorted["summary"], &got["summary"]);
    let kept = |s: &serde_json::Value| s["coarsened"]["records_kept"].as_i64().expect("kept");
    // One record may differ where the window opened (the first swapped pair).
    assert!((kept(a) - kept(b)).abs() <= 1, "{} vs {}", kept(a), kept(b));
    assert_eq!(b["coarsened"]["records_out_of_order"], 1667);
    let rel = |x: &serde_json::Value, y: &serde_json::Value| (f(x) / f(y) - 1.0).abs();
    // The groups may start a few steps apart from the sorted file's (the reorder window takes
    // room from the bound): the same estimate to well inside its interval.
    assert!(rel(&a["b_simple"], &b["b_simple"]) < 5e-3, "{a} {b}");
    let now = f(&b["now"]["b_simple"]);
    let ci = &a["now"]["ci"];
    assert!(now > f(&ci[0]) && now < f(&ci[1]), "{now} against {ci}");
    assert!(rel(&a["now"]["b_simple"], &b["now"]["b_simple"]) < 0.05);
    let said = b["diagnostics"].to_string();
    assert!(
        said.contains("1,667 records came at or below a step"),
        "{said}"
    );

    // Steps 0..4999 then 3000..4999 again (a restart from a checkpoint at step 3000).
    let mut restarted: Vec<&str> = text.lines().collect();
    restarted.extend(text.lines().skip(3000));
    let again = dir.path().join("restarted.ndjson");
    std::fs::write(&again, restarted.join("\n") + "\n").expect("write");
    let got = analyze_json(&again, &["--max-records", "500"]);
    let steps: Vec<u64> = got["steps"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| r["step"].as_u64().expect("step"))
        .collect();
    assert!(steps.windows(2).all(|w| w[0] < w[1]), "in step order");
    assert_eq!(got["summary"]["coarsened"]["records_out_of_order"], 2000);
    // Both attempts wrote the same values: each stretch of steps is their mean, as sorted.
    let rel_b = rel(&a["b_simple"], &got["summary"]["b_simple"]);
    assert!(rel_b < 1e-3, "{rel_b}");
}

/// A run merged into records of more steps than the default kernel's 200: the default kernel
/// spans three kept records. It was refused ("bandwidth_steps 200 is narrower than the usual
/// gap between the logged steps (256)") though no `--bandwidth` was given.
#[test]
fn the_default_kernel_of_a_merged_run_spans_several_records() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = run_file(&dir, 13_000);
    let got = analyze_json(&path, &["--max-records", "100"]);
    let s = &got["summary"];
    let per = s["coarsened"]["steps_per_record"].as_u64().expect("count");
    assert_eq!(per, 256);
    assert_eq!(f(&s["bandwidth_steps"]), 3.0 * per as f64);
    let ci = &s["now"]["ci"];
    assert!(f(&ci[1]) > f(&ci[0]), "a bounded, open interval: {ci}");
}

/// The windows that end at the last merged record end at the last step read: "last window:
/// steps 896-992" was printed for a run that ended at step 999 (each merged record carries
/// its first step).
#[test]
fn windows_of_a_merged_run_end_at_the_last_step_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = run_file(&dir, 5000);
    let got = analyze_json(&path, &["--max-records", "500"]);
    let s = &got["summary"];
    assert_eq!(s["coarsened"]["last_step_read"], 4999);
    assert_eq!(s["run_wide"]["last_step"], 4999, "{}", s["run_wide"]);
    assert_eq!(s["now"]["last_step"], 4999, "{}", s["now"]);
    let rows = got["steps"].as_array().expect("rows");
    let last_row = rows[rows.len() - 1]["step"].as_u64().expect("step");
    assert!(
        last_row < 4999,
        "the last record is labelled with its first step: {last_row}"
    );
}
