//! `copus predict` and `copus grid` end to end.

use std::path::Path;
use std::process::Command;

fn copus(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_copus"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn predict_json_has_the_documented_fields_and_picks_mbs() {
    let (ok, out, err) = copus(&[
        "predict",
        "--hardware",
        "h100-sxm",
        "--model",
        "gpt-70b",
        "--gpus",
        "64",
        "--tp",
        "8",
        "--pp",
        "2",
        "--batch",
        "64",
        "--mbs",
        "auto",
        "--recompute",
        "selective",
        "--json",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    for key in [
        "step_time_s",
        "tokens_per_s",
        "tokens_per_s_per_gpu",
        "model_tflops_per_gpu",
        "hardware_tflops_per_gpu",
        "mfu",
        "memory_per_gpu_bytes",
        "fits",
        "mbs",
    ] {
        assert!(v.get(key).is_some(), "missing {key}");
    }
    for key in ["compute_s", "bubble_s", "tp_s", "pp_s", "dp_s"] {
        assert!(v["breakdown"].get(key).is_some(), "missing breakdown.{key}");
    }
    assert_eq!(v["dp"], 4);
    assert!(v["fits"].as_bool().expect("bool"));
    let mbs = v["mbs"].as_u64().expect("mbs");
    assert!(mbs >= 1 && 16 % mbs == 0);
}

#[test]
fn predict_inline_model_and_clear_errors() {
    let inline = [
        "predict", "--layers", "24", "--hidden", "2048", "--heads", "16", "--vocab", "50000",
        "--seq", "2048", "--gpus", "8", "--batch", "64", "--mbs", "2",
    ];
    let (ok, out, err) = copus(&inline);
    assert!(ok, "{err}");
    assert!(out.contains("tokens/s"), "{out}");
    let (ok, _, err) = copus(&[&inline[..], &["--tp", "3"]].concat());
    assert!(!ok && err.contains("does not divide 8 GPUs"), "{err}");
    let (ok, _, err) = copus(&[
        "predict", "--model", "gpt-32b", "--gpus", "8", "--tp", "8", "--batch", "12", "--mbs", "8",
    ]);
    assert!(!ok && err.contains("divisible"), "{err}");
    let (ok, _, err) = copus(&[
        "predict", "--model", "gpt-32b", "--gpus", "1", "--batch", "8", "--mbs", "1",
    ]);
    assert!(!ok && err.contains("out of memory"), "{err}");
    let (ok, _, err) = copus(&["predict", "--model", "nope", "--gpus", "8", "--batch", "8"]);
    assert!(!ok && err.contains("nope"), "{err}");
}

#[test]
fn grid_on_the_demo_session() {
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("sessions/demo.ron");
    let demo = demo.to_str().expect("utf-8 path");
    let (ok, out, err) = copus(&["grid", demo, "--json"]);
    assert!(ok, "{err}");
    let early: serde_json::Value = serde_json::from_str(&out).expect("json");
    let cells = early["cells"].as_array().expect("cells");
    assert!(!cells.is_empty());
    assert!(
        cells
            .iter()
            .any(|c| c["feasible"] == false && c["reason"].is_string())
    );
    assert!(
        cells
            .iter()
            .any(|c| c["feasible"] == true && c["goodput"].is_f64())
    );
    let best_early = early["best"]["batch"].as_u64().expect("best batch");
    let (ok, out, err) = copus(&["grid", demo, "--at", "10000000", "--json"]);
    assert!(ok, "{err}");
    let late: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert!(late["b_crit"].as_f64() > early["b_crit"].as_f64());
    assert!(late["best"]["batch"].as_u64().expect("best") >= best_early);
    let (ok, out, _) = copus(&["grid", demo, "--at", "5000"]);
    assert!(
        ok && out.contains("best:") && out.contains("infeasible"),
        "{out}"
    );
    let (ok, _, err) = copus(&["grid", "/nonexistent/s.ron"]);
    assert!(!ok && err.contains("/nonexistent/s.ron"), "{err}");
}
