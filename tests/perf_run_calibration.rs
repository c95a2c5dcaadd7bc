//! A measured run that carries step times calibrates the model in the background: the source
//! load returns the calibration, the explorer uses it for the throughput table, and the
//! what-if editor switches between the calibrated and the profile model.

use copus::app::whatif::{FIELDS, Field};
use copus::app::{App, Effect, Msg, update};
use copus::perf::{PerfContext, predict};
use copus::session::{Panel, Session};
use copus::stats::{StepConfig, StepStats};
use std::io::Write;

/// A stats file whose step times come from the model with a GEMM plateau far below the H100
/// profile's, over three configurations of 8 GPUs.
fn timed_run(dir: &std::path::Path) -> std::path::PathBuf {
    let hw = copus::profiles::hardware("h100-sxm", std::path::Path::new(".")).expect("hw");
    let model = copus::profiles::model("llama-7b", std::path::Path::new(".")).expect("model");
    let truth = copus::perf::EfficiencyParams {
        max_eff: 0.4,
        ..hw.efficiency.clone()
    };
    let ctx = PerfContext {
        hw: &hw,
        model: &model,
        eff: &truth,
        gpus_per_node: 8,
    };
    let path = dir.join("run.ndjson");
    let mut f = std::fs::File::create(&path).expect("create");
    let layouts = [(8u32, 1u32, 1u32, 1u32), (4, 2, 1, 2), (2, 4, 1, 4)];
    for step in 0..60u64 {
        let (dp, tp, pp, mbs) = layouts[(step / 20) as usize];
        let batch = 64u64;
        let cfg = crate::perf_model::cfg(dp, tp, pp, mbs);
        let t = predict(&ctx, &cfg, batch).expect("runs").step_time_s;
        let mut r = StepStats::new(step, mbs as f64, batch as f64, 2.0, 1.0);
        r.step_time_s = Some(t * (1.0 + 0.01 * ((step % 5) as f64 - 2.0)));
        r.config = Some(StepConfig { dp, tp, pp, mbs });
        writeln!(f, "{}", serde_json::to_string(&r).expect("json")).expect("write");
    }
    path
}

/// The session over [`timed_run`]'s file in `dir` on one node of 8 H100, with `extra` fields
/// (each followed by a comma), resolved.
fn timed_session(dir: &std::path::Path, extra: &str) -> copus::session::Resolved {
    let session_path = dir.join("s.ron");
    std::fs::write(
        &session_path,
        format!(
            r#"(name: "timed", model: Named("llama-7b"),
            cluster: (hardware: Named("h100-sxm"), nodes: 1, gpus_per_node: 8),
            source: Stats(path: "run.ndjson"), {extra}
            search: (batch_sizes: [16, 32, 64], micro_batches: [1, 2, 4], zero: [1],
                     recompute: [Selective], interleave: [1], allow_cross_node_tp: false))"#
        ),
    )
    .expect("session");
    Session::load(&session_path)
        .expect("loads")
        .resolve(&session_path)
        .expect("resolves")
}

#[test]
fn a_timed_run_calibrates_the_explorer_and_the_editor_switches_models() {
    let dir = tempfile::tempdir().expect("tempdir");
    timed_run(dir.path());
    let resolved = timed_session(dir.path(), "");
    let loaded = copus::pipeline::load(&resolved).expect("source loads");
    let cal = loaded
        .calibration
        .clone()
        .expect("calibrated from step times");
    println!("{}", cal.summary());
    assert_eq!(cal.file.n, 60);
    // The profile model is far off (its plateau is ~1.6x the truth's); the calibration is not.
    assert!(
        cal.file.profile_rms_rel_error > 0.2,
        "{}",
        cal.file.profile_rms_rel_error
    );
    assert!(cal.file.rms_rel_error < 0.03, "{}", cal.file.rms_rel_error);
    assert!((cal.calibrated_step_s / cal.measured_step_s - 1.0).abs() < 0.03);
    assert!((cal.file.params.max_eff / 0.4 - 1.0).abs() < 0.05);

    // The explorer takes it: a new throughput table with the calibrated model.
    let mut app = App::loading(resolved);
    let effects = update(&mut app, Msg::SourceLoaded(Box::new(Ok(loaded))));
    assert!(
        matches!(effects.as_slice(), [Effect::ComputeTable { .. }]),
        "{effects:?}"
    );
    assert!(
        app.status.contains("calibrated on 60 steps"),
        "{}",
        app.status
    );
    assert!((app.resolved.efficiency().max_eff / 0.4 - 1.0).abs() < 0.05);

    // The what-if editor switches to the profile model and back.
    let row = FIELDS
        .iter()
        .position(|f| *f == Field::PerfModel)
        .expect("row") as i64;
    update(&mut app, Msg::ShowSide(Panel::WhatIf));
    update(&mut app, Msg::WhatIfRow(row));
    let effects = update(&mut app, Msg::WhatIfChange(1));
    assert!(matches!(effects.as_slice(), [Effect::ComputeTable { .. }]));
    assert_eq!(
        app.resolved.efficiency().max_eff,
        app.resolved.hardware.efficiency.max_eff
    );
    update(&mut app, Msg::WhatIfChange(1));
    assert!((app.resolved.efficiency().max_eff / 0.4 - 1.0).abs() < 0.05);
}

/// A calibration the session names stays in force when the run's step times load (the
/// explorer had put the run's fit in its place, under the named file's name); the status says
/// what the run's own steps would fit.
#[test]
fn a_named_calibration_stays_in_force_over_the_runs_own_fit() {
    let dir = tempfile::tempdir().expect("tempdir");
    timed_run(dir.path());
    let slow = copus::perf::calibration_file::CalibrationFile {
        hardware: "h100-sxm".into(),
        model: "llama-7b".into(),
        n: 12,
        rms_rel_error: 0.01,
        cv_rel_error: 0.02,
        profile_rms_rel_error: 0.3,
        fitted: vec!["max_eff".into()],
        params: copus::perf::EfficiencyParams {
            max_eff: 0.2,
            ..copus::profiles::hardware("h100-sxm", std::path::Path::new("."))
                .expect("hw")
                .efficiency
        },
        stack: None,
        recompute: Vec::new(),
        unwritten: Vec::new(),
    };
    std::fs::write(dir.path().join("slow.ron"), slow.to_ron().expect("ron")).expect("write");
    let resolved = timed_session(dir.path(), r#"calibration: Some("slow.ron"),"#);
    let loaded = copus::pipeline::load(&resolved).expect("source loads");
    assert!(loaded.calibration.is_some(), "the run has its own fit");
    let mut app = App::loading(resolved);
    update(&mut app, Msg::SourceLoaded(Box::new(Ok(loaded))));
    assert_eq!(app.resolved.efficiency().max_eff, 0.2);
    assert!(!app.resolved.calibration_from_run);
    assert!(
        app.status.contains("the calibration named stays in force")
            && app.status.contains("60 timed steps"),
        "{}",
        app.status
    );
}

#[test]
fn a_run_without_step_times_keeps_the_profile_model() {
    let path = std::path::Path::new("sessions/measured-sample.ron");
    let resolved = Session::load(path)
        .expect("loads")
        .resolve(path)
        .expect("resolves");
    let loaded = copus::pipeline::load(&resolved).expect("source loads");
    assert!(loaded.calibration.is_none());
    let mut app = App::loading(resolved);
    update(&mut app, Msg::SourceLoaded(Box::new(Ok(loaded))));
    let row = FIELDS
        .iter()
        .position(|f| *f == Field::PerfModel)
        .expect("row") as i64;
    update(&mut app, Msg::ShowSide(Panel::WhatIf));
    update(&mut app, Msg::WhatIfRow(row));
    let effects = update(&mut app, Msg::WhatIfChange(1));
    assert!(effects.is_empty(), "{effects:?}");
    assert!(
        app.status.contains("no calibration") && app.status.contains("--calibration FILE"),
        "{}",
        app.status
    );
}

#[test]
fn a_session_efficiency_section_round_trips_without_some() {
    let path = std::path::Path::new("sessions/demo.ron");
    let mut s = Session::load(path).expect("loads");
    assert!(s.efficiency.is_none());
    assert!(!s.to_ron().expect("ron").contains("efficiency: ("));
    let e = copus::perf::EfficiencyParams {
        max_eff: 0.55,
        ..copus::perf::EfficiencyParams::default()
    };
    s.efficiency = Some(e.clone());
    let text = s.to_ron().expect("ron");
    assert!(text.contains("efficiency: ("), "written plainly");
    let back = Session::from_ron(&text, path).expect("reads back");
    assert_eq!(back.efficiency, Some(e));
}

/// `calibrate` on a stats file skips a line it cannot use (a trainer killed mid-line), as
/// every reader of the protocol does, names the first, and fits on the rest; it stopped at
/// the first such line.
#[test]
fn calibrate_skips_a_bad_line_of_a_stats_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = timed_run(dir.path());
    let mut text = std::fs::read_to_string(&path).expect("run");
    text.insert_str(text.find('\n').expect("a line") + 1, "{\"v\":1,\"step\":\n");
    std::fs::write(&path, text).expect("write");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_copus"))
        .args([
            "calibrate",
            "--hardware",
            "h100-sxm",
            "--model",
            "llama-7b",
            "--json",
        ])
        .arg(&path)
        .output()
        .expect("run");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains("1 line(s) that are not usable records skipped"),
        "{said}"
    );
    assert!(said.contains("run.ndjson:2: "), "{said}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert!(v.is_object(), "{v}");
}

/// A stats file's steps are fitted as each configuration's median: the text counts
/// configurations, not "measured steps" (300 steps read "calibrated 1 parameter on 2 measured
/// steps"), and the JSON says so.
#[test]
fn calibrate_on_a_stats_file_counts_its_configurations() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = timed_run(dir.path());
    let run = |json: bool| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_copus"));
        c.args(["calibrate", "--hardware", "h100-sxm", "--model", "llama-7b"])
            .arg(&path);
        if json {
            c.arg("--json");
        }
        c.output().expect("run")
    };
    let out = run(false);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !text.contains("measured step") && text.contains("(the median step time of each)")
            || text.contains("configuration (its median step time)"),
        "{text}"
    );
    let v: serde_json::Value = serde_json::from_slice(&run(true).stdout).expect("json");
    assert_eq!(v["medians_of_configurations"], true, "{v}");
}

/// Keys of a record's `config` the protocol does not define (`zero`, `recompute`) are not
/// read, and `calibrate` says so with the ZeRO stage and recompute it fitted at (it assumed
/// ZeRO-1 beside `"zero":3` without a word); a run without them gets no such note.
#[test]
fn calibrate_names_the_config_keys_it_does_not_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = timed_run(dir.path());
    let run = |p: &std::path::Path| {
        std::process::Command::new(env!("CARGO_BIN_EXE_copus"))
            .args(["calibrate", "--hardware", "h100-sxm", "--model", "llama-7b"])
            .arg(p)
            .output()
            .expect("run")
    };
    let plain = run(&path);
    assert!(plain.status.success());
    assert!(!String::from_utf8_lossy(&plain.stderr).contains("does not read"));
    let text = std::fs::read_to_string(&path).expect("read");
    let extra = dir.path().join("extra.ndjson");
    std::fs::write(
        &extra,
        text.replace("\"mbs\":", "\"zero\":3,\"recompute\":\"full\",\"mbs\":"),
    )
    .expect("write");
    let out = run(&extra);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("config carries recompute, zero, which copus does not read")
            && err.contains("fitted at ZeRO-1 and recompute selective"),
        "{err}"
    );
}
