//! Reliability round 3 (issue 30), through the real binary: what the user owns is never
//! replaced, accepted values never loop or abort, every input is validated on every path,
//! non-regular inputs are refused or bounded in time, memory exhaustion is an error, and
//! results that cannot be trusted are not printed as numbers.

use super::reliability_support::{copus, copus_in, demo_with};
use super::session;
use std::path::Path;
use std::process::Command;

const MEASURED: &str = "dp,tp,pp,mbs,batch,step_time_s\n8,1,1,1,64,3.1\n4,2,1,1,64,3.4\n\
                        2,4,1,1,64,3.9\n8,1,1,2,128,6.0\n4,2,1,2,128,6.5\n2,2,2,1,64,4.2\n";

fn calibrate_to(dir: &Path, out: &str, extra: &[&str]) -> super::reliability_support::Run {
    std::fs::write(dir.join("m.csv"), MEASURED).expect("csv");
    let mut args = vec![
        "calibrate",
        "m.csv",
        "--hardware",
        "h100-sxm",
        "--model",
        "llama-7b",
        "--out",
        out,
    ];
    args.extend_from_slice(extra);
    copus_in(dir, &args, &[])
}

fn mkfifo(path: &Path) {
    let ok = Command::new("mkfifo").arg(path).status().expect("mkfifo");
    assert!(ok.success());
}

fn is_fifo(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_fifo())
}

#[test]
fn calibrate_out_never_replaces_a_link_a_fifo_or_an_existing_file_unasked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    std::fs::write(d.join("target.ron"), "old").expect("target");
    std::os::unix::fs::symlink("target.ron", d.join("link.ron")).expect("symlink");
    calibrate_to(d, "link.ron", &[]).fails_with(&["link.ron", "exists", "--force"]);
    assert_eq!(
        std::fs::read_to_string(d.join("target.ron"))
            .ok()
            .as_deref(),
        Some("old")
    );
    // With --force the link's file is written and the link kept.
    calibrate_to(d, "link.ron", &["--force"]).succeeds();
    assert!(
        std::fs::symlink_metadata(d.join("link.ron")).is_ok_and(|m| m.file_type().is_symlink()),
        "the symlink was replaced"
    );
    let text = std::fs::read_to_string(d.join("target.ron")).expect("target");
    assert!(text.contains("hardware"), "{text}");
    mkfifo(&d.join("pipe"));
    calibrate_to(d, "pipe", &["--force"]).fails_with(&["pipe", "FIFO"]);
    assert!(is_fifo(&d.join("pipe")), "the FIFO was replaced");
    std::os::unix::fs::symlink("pipe", d.join("to-pipe")).expect("symlink");
    calibrate_to(d, "to-pipe", &["--force"]).fails_with(&["to-pipe", "FIFO"]);
    std::os::unix::fs::symlink("missing.ron", d.join("dangling")).expect("symlink");
    calibrate_to(d, "dangling", &["--force"]).fails_with(&["dangling", "symlink"]);
    let leftovers: Vec<_> = std::fs::read_dir(d)
        .expect("dir")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
}

#[test]
fn the_library_writer_keeps_links_and_permissions() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let real = dir.path().join("real.ron");
    std::fs::write(&real, "old").expect("write");
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o640)).expect("chmod");
    let link = dir.path().join("session.ron");
    std::os::unix::fs::symlink(&real, &link).expect("symlink");
    copus::fsutil::write_atomic(&link, b"new").expect("write through the link");
    assert!(std::fs::symlink_metadata(&link).is_ok_and(|m| m.file_type().is_symlink()));
    assert_eq!(std::fs::read_to_string(&real).ok().as_deref(), Some("new"));
    let mode = std::fs::metadata(&real).expect("meta").permissions().mode() & 0o777;
    assert_eq!(mode, 0o640, "permissions not kept");
    let fifo = dir.path().join("fifo");
    mkfifo(&fifo);
    let err = copus::fsutil::write_atomic(&fifo, b"x").expect_err("a FIFO is refused");
    assert!(err.to_string().contains("FIFO"), "{err}");
    assert!(is_fifo(&fifo));
}

#[test]
fn demo_train_does_not_truncate_an_existing_file_unasked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    std::fs::write(d.join("run.ndjson"), "precious\n").expect("write");
    let args = [
        "demo-train",
        "--steps",
        "3",
        "--quiet",
        "--out",
        "run.ndjson",
    ];
    copus_in(d, &args, &[]).fails_with(&["run.ndjson", "--force"]);
    assert_eq!(
        std::fs::read_to_string(d.join("run.ndjson"))
            .ok()
            .as_deref(),
        Some("precious\n")
    );
    let mut forced = args.to_vec();
    forced.push("--force");
    copus_in(d, &forced, &[]).succeeds();
    let text = std::fs::read_to_string(d.join("run.ndjson")).expect("run");
    assert_eq!(text.lines().count(), 3, "{text}");
}

#[test]
fn accepted_extremes_neither_loop_nor_abort() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mb = session(
        dir.path(),
        "mb.ron",
        &demo_with("micro_batches: [1, 2, 4]", "micro_batches: [4294967295]"),
    );
    copus(&["grid", &mb]).fails_with(&["search.micro_batches", "4294967295"]);
    copus(&["plan", &mb]).fails_with(&["search.micro_batches"]);
    let measured = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("sessions/paper-measured-3b-8xh100.ron"),
    )
    .expect("session");
    let text = measured
        .replace("loss_window: Some(50)", "loss_window: Some(4294967295)")
        .replace(
            "\"../assets",
            &format!("\"{}/assets", env!("CARGO_MANIFEST_DIR")),
        );
    let lw = session(dir.path(), "lw.ron", &text);
    copus(&["plan", &lw]).fails_with(&["planner.loss_window", "4294967295"]);
    let longer = measured
        .replace("loss_window: Some(50)", "loss_window: Some(5000)")
        .replace(
            "\"../assets",
            &format!("\"{}/assets", env!("CARGO_MANIFEST_DIR")),
        );
    let lw = session(dir.path(), "lw5000.ron", &longer);
    let run = copus(&["plan", &lw]);
    run.fails_with(&["loss_window is 5000 points", "finite losses"]);
    assert!(!run.stderr.contains("inf"), "{}", run.stderr);
    for (flag, value, says) in [
        (
            "--micro-batch-size",
            "4294967295",
            "--micro-batch-size 4294967295: from 1 to 65536 samples",
        ),
        (
            "--micro-batches",
            "4294967295",
            "--micro-batches 4294967295: from 2 to 4096",
        ),
        (
            "--linger-s",
            "1e20",
            "--linger-s must be between 0 and 86400",
        ),
    ] {
        copus(&["demo-train", "--steps", "2", "--quiet", flag, value]).fails_with(&[says]);
    }
    copus(&[
        "bench",
        "--size-mb",
        "18446744073709551615",
        "--device",
        "cpu",
    ])
    .fails_with(&["--size-mb"]);
    copus(&[
        "bench",
        "--size-mb",
        "65536",
        "--steps",
        "100",
        "--device",
        "cpu",
    ])
    .fails_with(&["limited to"]);
    for (from, to, field) in [
        ("b_crit_scale: 1.0", "b_crit_scale: 1e300", "b_crit_scale"),
        ("b_crit_scale: 1.0", "b_crit_scale: 1e-320", "b_crit_scale"),
    ] {
        let s = session(dir.path(), "x.ron", &demo_with(from, to));
        let run = copus(&["plan", &s]);
        run.fails_with(&[field, "1e"]);
        assert!(
            !run.stderr.contains("00000000000"),
            "300 digits: {}",
            run.stderr
        );
    }
    // A measured conversion's range must hold its factor, lower end first.
    for (range, says) in [
        ("(0.5, 2.0)", None),
        ("(2.0, 0.5)", Some("must hold b_crit_scale 1")),
        ("(1.5, 2.0)", Some("must hold b_crit_scale 1")),
        ("(0.0, 2.0)", Some("its lower end")),
    ] {
        let text = demo_with(
            "b_crit_scale: 1.0",
            &format!("b_crit_scale: 1.0, planner: (b_crit_scale_range: Some({range}))"),
        );
        let s = session(dir.path(), "range.ron", &text);
        let run = copus(&["plan", &s]);
        match says {
            None => run.succeeds(),
            Some(says) => run.fails_with(&["planner.b_crit_scale_range", says]),
        };
    }
}

#[test]
fn calibration_files_are_validated_the_same_on_every_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    calibrate_to(d, "good.ron", &[]).succeeds();
    let good = std::fs::read_to_string(d.join("good.ron")).expect("calibration");
    let misspelt = good.replacen("max_eff:", "max_ef:", 1);
    assert_ne!(misspelt, good);
    std::fs::write(d.join("typo.ron"), &misspelt).expect("write");
    let s = session(
        d,
        "s.ron",
        &demo_with("b_crit_scale: 1.0", "b_crit_scale: 1.0"),
    );
    let s = s.as_str();
    copus_in(
        d,
        &[
            "predict",
            "--model",
            "llama-7b",
            "--gpus",
            "8",
            "--batch",
            "64",
            "--calibration",
            "typo.ron",
        ],
        &[],
    )
    .fails_with(&["typo.ron", "max_ef"]);
    copus_in(d, &["grid", s, "--calibration", "typo.ron"], &[]).fails_with(&["typo.ron", "max_ef"]);
    // The old value is commented out behind the new one.
    let negative = good.replacen("max_eff:", "max_eff: -0.5, //", 1);
    std::fs::write(d.join("neg.ron"), negative).expect("write");
    for cmd in ["grid", "plan"] {
        copus_in(d, &[cmd, s, "--calibration", "neg.ron"], &[])
            .fails_with(&["neg.ron", "max_eff", "-0.5"]);
    }
    // A session's calibration stays inside the session's directory.
    std::fs::create_dir_all(d.join("sub")).expect("mkdir");
    let outside = demo_with(
        "b_crit_scale: 1.0",
        "b_crit_scale: 1.0, calibration: Some(\"../../../../etc/passwd\")",
    );
    let s = session(&d.join("sub"), "x.ron", &outside);
    let run = copus(&["grid", &s]);
    run.fails_with(&["calibration", "inside the session's directory"]);
    assert!(
        !run.stderr.contains("root"),
        "the file's content is quoted: {}",
        run.stderr
    );
}

#[test]
fn non_regular_and_oversized_inputs_are_refused_or_bounded_in_time() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let cal = |input: &str| {
        copus_in(
            d,
            &[
                "calibrate",
                input,
                "--hardware",
                "h100-sxm",
                "--model",
                "llama-7b",
            ],
            &[],
        )
    };
    cal("/dev/zero").fails_with(&["/dev/zero", "not a regular file"]);
    mkfifo(&d.join("silent"));
    cal("silent").fails_with(&["silent", "not a regular file"]);
    let mut big = String::from("dp,tp,pp,mbs,batch,step_time_s\n");
    for _ in 0..20_000 {
        big.push_str("8,1,1,1,64,3.1\n");
    }
    std::fs::write(d.join("big.csv"), big).expect("write");
    cal("big.csv").fails_with(&["big.csv", "more than 10000 measurements"]);
    std::fs::write(
        d.join("comma.csv"),
        "dp,tp,pp,mbs,batch,step_time_s\n8,1,1,1,64,3,1\n",
    )
    .expect("write");
    cal("comma.csv").fails_with(&["comma.csv:2", "decimal comma"]);
    let rec = |t: f64| {
        format!(
            "{{\"v\":1,\"step\":1,\"b_small\":8,\"b_big\":64,\"sq_small\":2.0,\"sq_big\":1.0,\
             \"step_time_s\":{t},\"config\":{{\"dp\":8,\"tp\":1,\"pp\":1,\"mbs\":1}}}}\n"
        )
    };
    std::fs::write(d.join("st.ndjson"), rec(1.5) + &rec(0.0)).expect("write");
    cal("st.ndjson").fails_with(&["st.ndjson:2", "step_time_s"]);
    // A FIFO nobody writes to: watch ends at its timeout, an idle writer holding it too.
    let watch_seconds = || {
        let start = std::time::Instant::now();
        let args = [
            "watch",
            "silent",
            "--headless",
            "--timeout-s",
            "1",
            "--until-steps",
            "5",
        ];
        copus_in(d, &args, &[]);
        start.elapsed().as_secs_f64()
    };
    assert!(watch_seconds() < 4.0, "watch ignored its timeout on a FIFO");
    let mut writer = Command::new("sh")
        .arg("-c")
        .arg("sleep 8 > silent")
        .current_dir(d)
        .spawn()
        .expect("writer");
    assert!(
        watch_seconds() < 4.0,
        "an idle writer held watch past its timeout"
    );
    let _ = writer.kill();
    let _ = writer.wait();
    let run = d.join("run.ndjson");
    std::fs::write(&run, super::records(2.0, 1.0, 60)).expect("write");
    copus_in(d, &["analyze", "run.ndjson", "--compare", "/dev/zero"], &[])
        .fails_with(&["/dev/zero", "not a regular file or a pipe"]);
}

/// Run `copus ARGS` in `dir` under an address-space limit of `mib` MiB.
fn under_limit(dir: &Path, mib: u64, args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -v {}; exec \"$0\" \"$@\"", mib * 1024))
        .arg(env!("CARGO_BIN_EXE_copus"))
        .args(args)
        .current_dir(dir)
        .env_remove("RUST_BACKTRACE")
        .output()
        .expect("run");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn running_out_of_memory_is_an_error_and_small_limits_suffice_for_small_inputs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let (code, err) = under_limit(root, 64, &["analyze", "assets/data/sample-run.ndjson"]);
    assert_eq!(code, Some(0), "analyze of 600 lines under 64 MiB: {err}");
    let (code, err) = under_limit(root, 64, &["plan", "sessions/measured-sample.ron"]);
    assert_eq!(
        code,
        Some(0),
        "plan of a measured session under 64 MiB: {err}"
    );
    // Every record kept (--max-records 0) of a long run does not fit in 64 MiB.
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("long.ndjson"),
        super::records(2.0, 1.0, 400_000),
    )
    .expect("write");
    let (code, err) = under_limit(
        dir.path(),
        64,
        &["analyze", "long.ndjson", "--max-records", "0"],
    );
    assert_eq!(code, Some(4), "{err}");
    assert!(
        err.contains("out of memory") && err.contains("64 MiB"),
        "{err}"
    );
}

#[test]
fn answers_that_cannot_be_trusted_are_not_printed_as_numbers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = dir.path().join("neg.ndjson");
    std::fs::write(&f, super::records(1.0, 1.5, 60)).expect("write");
    let path = f.display().to_string();
    let run = copus(&["analyze", &path]);
    run.succeeds();
    assert!(run.stdout.contains("CI none"), "{}", run.stdout);
    assert!(!run.stdout.contains("[0.0000, 0.0000]"), "{}", run.stdout);
    assert!(
        run.stdout.contains("tr(Sigma) is"),
        "the reason must blame tr(Sigma): {}",
        run.stdout
    );
    let json = copus(&["analyze", &path, "--json"]);
    let v: serde_json::Value = serde_json::from_str(&json.stdout).expect("json");
    assert!(v["summary"]["ci"].is_null(), "{}", v["summary"]["ci"]);
    assert!(v["summary"]["now"]["ci"].is_null());
    assert!(v["steps"][0]["ci"].is_null(), "{}", v["steps"][0]["ci"]);
    let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/data/sample-run.ndjson");
    let sample = sample.display().to_string();
    let run = copus(&["analyze", &sample, "--block-length", "600"]);
    run.succeeds();
    assert!(
        run.stdout.contains("verdict       unreliable"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("block length 600"), "{}", run.stdout);
    copus(&["analyze", &sample, "--max-records", "2"]).fails_with(&["--max-records", "100"]);
    let h100 = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/hardware/h100-sxm.ron"),
    )
    .expect("profile");
    let at = h100.find("peak_flops:").expect("peak_flops");
    let end = at + h100[at..].find(',').expect("comma");
    let slow_hw = format!("{}peak_flops: 1e-300{}", &h100[..at], &h100[end..]);
    std::fs::write(dir.path().join("slow-hw.ron"), slow_hw).expect("write");
    let slow = session(
        dir.path(),
        "slow.ron",
        &demo_with("Named(\"h100-sxm\")", "Named(\"slow-hw.ron\")"),
    );
    for cmd in ["grid", "plan"] {
        let run = copus(&[cmd, &slow]);
        run.fails_with(&["peak_flops", "1e-300"]);
        assert!(!run.stderr.contains("PlanState {"), "{}", run.stderr);
    }
}

#[test]
fn an_unusable_stats_file_is_named_as_given() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("neg.ndjson"), super::records(1.0, 1.5, 60)).expect("write");
    let run = copus_in(dir.path(), &["open", "neg.ndjson"], &[]);
    run.fails_with(&["neg.ndjson: no step gives a usable B_crit"]);
    assert!(!run.stderr.contains(".copus.ron"), "{}", run.stderr);
}

#[test]
fn analyze_and_open_of_a_fifo_nobody_writes_end_in_time() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    mkfifo(&d.join("ff"));
    let run: String = (0..300)
        .map(|k| {
            let small = 2.5 + 0.3 * ((k * 7) % 11) as f64 / 11.0;
            format!(
                "{{\"v\":1,\"step\":{k},\"b_small\":4,\"b_big\":32,\"sq_small\":{small},\"sq_big\":0.5}}\n"
            )
        })
        .collect();
    std::fs::write(d.join("a.ndjson"), run).expect("a");
    let r = copus_in(d, &["analyze", "ff"], &[]);
    r.fails_with(&["ff", "named pipe", "no data within 5 s"]);
    assert!(r.elapsed.as_secs_f64() < 9.0, "{r:?}");
    copus_in(d, &["analyze", "a.ndjson", "--compare", "ff"], &[]).fails_with(&["ff", "named pipe"]);
    // A pipe whose writer delivers is read to its end as before.
    let mut child = Command::new("sh")
        .current_dir(d)
        .args(["-c", "sleep 1; cat a.ndjson > ff"])
        .spawn()
        .expect("writer");
    let r = copus_in(d, &["analyze", "ff", "--json", "--summary-only"], &[]);
    let _ = child.wait();
    r.succeeds();
    assert!(r.stdout.contains("\"steps\":300"), "{}", r.stdout);
}

#[test]
fn a_b_crit_scale_that_takes_b_crit_out_of_range_is_refused_with_the_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    for scale in ["0.000001", "0.000002"] {
        let s = session(
            dir.path(),
            "scale.ron",
            &demo_with("b_crit_scale: 1.0", &format!("b_crit_scale: {scale}")),
        );
        copus(&["grid", &s, "--at", "10B"]).fails_with(&[
            "scale.ron",
            "b_crit_scale",
            "median B_crit",
        ]);
        copus(&["plan", &s]).fails_with(&["b_crit_scale", "median B_crit"]);
    }
}

#[test]
fn a_session_calibration_or_profile_linked_outside_its_directory_is_refused_unread() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    std::fs::create_dir(d.join("sub")).expect("sub");
    std::fs::write(d.join("secret.ron"), "root:x:0:0").expect("secret");
    std::os::unix::fs::symlink(d.join("secret.ron"), d.join("sub/cal.ron")).expect("link");
    std::os::unix::fs::symlink(d.join("secret.ron"), d.join("sub/model.ron")).expect("link");
    let cal = session(
        &d.join("sub"),
        "c.ron",
        &demo_with(
            "model: Named(\"llama-7b\"),",
            "calibration: Some(\"cal.ron\"),\n    model: Named(\"llama-7b\"),",
        ),
    );
    let r = copus(&["grid", &cal, "--at", "10B"]);
    r.fails_with(&["calibration", "cal.ron", "outside the session's directory"]);
    assert!(!r.stderr.contains("root"), "{r:?}");
    let model = session(
        &d.join("sub"),
        "m.ron",
        &demo_with(
            "model: Named(\"llama-7b\"),",
            "model: Named(\"model.ron\"),",
        ),
    );
    let r = copus(&["grid", &model, "--at", "10B"]);
    r.fails_with(&["model", "model.ron", "outside the session's directory"]);
    assert!(!r.stderr.contains("root"), "{r:?}");
    // The explorer reads a session through the same checks (it parsed the linked file and
    // quoted its first word before).
    let hardware = session(
        &d.join("sub"),
        "h.ron",
        &demo_with(
            "model: Named(\"llama-7b\"),",
            "model: Named(\"llama-7b\"),\n    // hand-edited",
        )
        .replace("Named(\"h100-sxm\")", "Named(\"/etc/passwd\")"),
    );
    for (s, field) in [(&model, "model"), (&hardware, "cluster.hardware")] {
        let r = copus(&["snapshot", s, "--size", "80x24"]);
        r.fails_with(&[field, "outside the session's directory"]);
        assert!(!r.stderr.contains("root"), "{r:?}");
    }
    // And through the same size cap as grid and plan.
    let big = format!("// {}\n{}", "x".repeat(17 << 20), demo_with("", ""));
    let big = session(d, "big.ron", &big);
    copus(&["snapshot", &big, "--size", "80x24"]).fails_with(&["big.ron", "larger than"]);
}

#[test]
fn session_values_the_command_line_refuses_are_refused_in_a_session_too() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    // A current batch off the searched list lost its ▼, its plan comparison and static-gbs's
    // batch without a word.
    let off = session(
        d,
        "off.ron",
        &demo_with("current_batch: Some(512)", "current_batch: Some(500)"),
    );
    for cmd in ["grid", "plan"] {
        copus(&[cmd, &off]).fails_with(&["off.ron", "current_batch", "500", "search.batch_sizes"]);
    }
    // `--block-length 0` and `--seq-len 0` are refused; the same values in a session were
    // taken as "choose" and "infer".
    let block = session(
        d,
        "block.ron",
        &demo_with(
            "current_batch: Some(512)",
            "current_batch: Some(512),\n    estimator: (block_length: Some(0))",
        ),
    );
    copus(&["grid", &block]).fails_with(&["block.ron", "estimator.block_length"]);
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/data/sample-run.ndjson");
    let seq = session(
        d,
        "seq.ron",
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("sessions/measured-sample.ron"),
        )
        .expect("session")
        .replace(
            "Stats(path: \"../assets/data/sample-run.ndjson\")",
            &format!(
                "Stats(path: {:?}, seq_len: Some(0))",
                data.display().to_string()
            ),
        ),
    );
    copus(&["grid", &seq]).fails_with(&["seq.ron", "source.seq_len"]);
    // A misspelt optional field is shown on its line with a caret, as a missing one is.
    let typo = session(
        d,
        "typo.ron",
        &demo_with("current_batch: Some(512)", "current_bach: Some(512)"),
    );
    // Branch records the session names but that are missing: grid and plan do not use them
    // but say the explorer will refuse the session.
    let measured = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("sessions/measured-sample.ron"),
    )
    .expect("session")
    .replace(
        "Stats(path: \"../assets/data/sample-run.ndjson\")",
        &format!("Stats(path: {:?})", data.display().to_string()),
    );
    let branches = session(
        d,
        "br.ron",
        &measured.replacen(
            "estimator:",
            "branches: Some(\"nope.ndjson\"),\n    estimator:",
            1,
        ),
    );
    for cmd in ["grid", "plan"] {
        let r = copus(&[cmd, &branches]);
        r.succeeds();
        assert!(
            r.stdout.contains("nope.ndjson: No such file")
                && r.stdout.contains("refuses this session"),
            "{cmd}: {}",
            r.stdout
        );
    }
    // Bytes that are not UTF-8 are placed by line and column, not by byte index alone.
    let mut bytes = demo_with("", "").into_bytes();
    let lines = bytes.iter().filter(|b| **b == b'\n').count();
    bytes.extend_from_slice(b"// \xff\n");
    let bad = d.join("latin.ron");
    std::fs::write(&bad, bytes).expect("write");
    copus(&["grid", bad.to_str().expect("utf-8")]).fails_with(&[
        "latin.ron",
        &format!("line {}, column 4: not valid UTF-8", lines + 1),
    ]);
    copus(&["grid", &typo]).fails_with(&[
        "typo.ron:",
        "unknown field `current_bach` (did you mean `current_batch`?)",
        "|     current_bach: Some(512)",
        "|     ^",
    ]);
}

/// A name a flag gives that is no built-in profile, and FP8 asked of hardware without an FP8
/// peak, are errors of the flags (exit 2, as an unknown `--stack` is); a profile file that
/// does not read is an error of the file (1).
#[test]
fn unknown_profile_names_and_unformable_precisions_are_flag_errors() {
    let base = ["predict", "--gpus", "8", "--batch", "64"];
    let with = |extra: &[&str]| {
        let mut args = base.to_vec();
        args.extend_from_slice(extra);
        copus(&args)
    };
    for (extra, says) in [
        (
            &["--model", "llama3-9b"][..],
            "--model: unknown model profile 'llama3-9b'",
        ),
        (
            &["--model", "llama3-8b", "--hardware", "h100"][..],
            "--hardware: unknown hardware profile 'h100'",
        ),
        (
            &[
                "--model",
                "llama3-8b",
                "--hardware",
                "a100-80g",
                "--precision",
                "fp8",
            ][..],
            "no FP8 peak",
        ),
    ] {
        let run = with(extra);
        run.fails_with(&[says]);
        assert_eq!(run.code, Some(2), "{run:?}");
    }
    // A near miss names the built-in it most likely meant (case, a prefix, a typo).
    for (extra, meant) in [
        (&["--model", "Llama3-8B"][..], "did you mean 'llama3-8b'?"),
        (&["--model", "llama3-9b"][..], "did you mean 'llama3-8b'?"),
        (
            &["--model", "llama3-8b", "--hardware", "h100"][..],
            "did you mean 'h100-sxm' or 'h100-pcie'",
        ),
    ] {
        let run = with(extra);
        run.fails_with(&[meant]);
        assert_eq!(run.code, Some(2), "{run:?}");
    }
    let run = with(&["--model", "no-such-dir/m.ron"]);
    run.fails_with(&["--model", "m.ron"]);
    assert_eq!(run.code, Some(1), "{run:?}");
    let run = copus(&["grid", "sessions/demo.ron", "--hardware", "h100"]);
    run.fails_with(&["--hardware h100: unknown hardware profile"]);
    assert_eq!(run.code, Some(2), "{run:?}");
}
