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
    assert_eq!(
        names,
        [
            "static",
            "batch-adaptive",
            "config-adaptive",
            "greedy-joint",
            "optimal-joint"
        ]
    );
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
            time(4) <= time(i) * (1.0 + 1e-12),
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
        strategies[4]["switches"].as_u64().expect("n")
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
        for name in [
            "static",
            "batch-adaptive",
            "config-adaptive",
            "greedy-joint",
            "optimal-joint",
        ] {
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
