//! Regression corpus of the reliability issue: every hostile input that crashed, hung, ate
//! memory or gave a silently wrong answer, run through the real binary as a user would. Each
//! must end within 10 s and 2 GB with a clear message and an exit status in 1–100 (or give a
//! correct result), never a panic, abort or signal death.

use crate::reliability_support;

use reliability_support::{copus, copus_in, demo_with, write_npy_raw};

#[cfg(target_os = "linux")]
#[path = "reliability_cases/round3.rs"]
mod round3;
use std::path::Path;

fn session(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write session");
    p.display().to_string()
}

fn grid(path: &str) -> reliability_support::Run {
    copus(&["grid", path, "--json"])
}

// ---- crashes ------------------------------------------------------------------------------

fn overflowing_npy_dump(dir: &Path) -> String {
    for k in 0..2 {
        let part = dir.join(format!("ovf/step_1/part{k}"));
        std::fs::create_dir_all(&part).expect("mkdir");
        // 2^62 elements × 4 bytes = 2^64: wrapped to 0 before the fix.
        write_npy_raw(&part.join("w.npy"), "<f4", "(4611686018427387904,)", &[]);
        std::fs::write(part.join("samples.txt"), "8").expect("samples");
    }
    dir.join("ovf").display().to_string()
}

#[test]
fn npy_shape_times_dtype_overflow_is_an_error_everywhere() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dump = overflowing_npy_dump(dir.path());
    copus(&["analyze", &dump, "--device", "cpu"]).fails_with(&["w.npy", "overflows"]);
    copus(&["analyze", &dump, "--device", "cpu", "--seed-ema"]).fails_with(&["overflows"]);
    let s = session(
        dir.path(),
        "d.ron",
        r#"(name: "d", model: Named("llama-7b"),
            cluster: (hardware: Named("h100-sxm"), nodes: 1, gpus_per_node: 8),
            source: Dumps(path: "ovf"))"#,
    );
    grid(&s).fails_with(&["overflows"]);
    copus(&["plan", &s]).fails_with(&["overflows"]);
}

#[test]
fn huge_phases_are_refused_before_allocating() {
    let dir = tempfile::tempdir().expect("tempdir");
    for phases in ["4294967295", "18446744073709551615", "100000000"] {
        let s = session(
            dir.path(),
            "p.ron",
            &demo_with("phases: 120", &format!("phases: {phases}")),
        );
        let run = grid(&s);
        run.fails_with(&["source.phases", phases]);
    }
}

#[test]
fn astronomical_token_budgets_are_refused_by_name() {
    // Found by fuzzing whole commands: a session of 1e307 tokens hung the explorer's chart
    // (its axis arithmetic overflowed) and 1.8e19 hung `plan --emit megatron`.
    let dir = tempfile::tempdir().expect("tempdir");
    for total in ["1e307", "18446744073709551615", "1.1e18"] {
        let s = session(
            dir.path(),
            "t.ron",
            &demo_with("total_tokens: 600e9", &format!("total_tokens: {total}")),
        );
        grid(&s).fails_with(&["source.total_tokens", "at most"]);
        copus(&["snapshot", &s, "--size", "80x24"]).fails_with(&["source.total_tokens", "at most"]);
        copus(&["plan", &s, "--emit", "megatron"]).fails_with(&["source.total_tokens"]);
    }
    let s = session(
        dir.path(),
        "t.ron",
        &demo_with("start_tokens: 1e9", "start_tokens: 1e300"),
    );
    grid(&s).fails_with(&["source.start_tokens", "at most"]);
    // The largest budget accepted still plans.
    let s = session(
        dir.path(),
        "t.ron",
        &demo_with("total_tokens: 600e9", "total_tokens: 1e18"),
    );
    assert_eq!(copus(&["plan", &s, "--emit", "megatron"]).code, Some(0));
}

#[test]
fn watch_timeout_out_of_range_is_blamed_on_the_flag() {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = dir.path().join("s.ndjson");
    std::fs::write(&f, "").expect("touch");
    let f = f.display().to_string();
    for t in ["1e20", "-1", "NaN", "inf"] {
        let flag = format!("--timeout-s={t}");
        copus(&["watch", &f, "--headless", &flag]).fails_with(&["--timeout-s"]);
    }
}

// ---- silent wrong answers ------------------------------------------------------------------

#[test]
fn cluster_sizes_that_wrap_u32_are_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (nodes, gpn) in [("8", "536870913"), ("65536", "65536")] {
        let s = session(
            dir.path(),
            "c.ron",
            &demo_with(
                "nodes: 8, gpus_per_node: 8",
                &format!("nodes: {nodes}, gpus_per_node: {gpn}"),
            ),
        );
        grid(&s).fails_with(&["cluster", "at most 1048576"]);
    }
    let s = session(
        dir.path(),
        "z.ron",
        &demo_with("gpus_per_node: 8", "gpus_per_node: 0"),
    );
    grid(&s).fails_with(&["cluster.gpus_per_node"]);
    copus(&[
        "predict", "--model", "llama-7b", "--gpus", "8", "--tp", "65536", "--pp", "65536",
        "--batch", "64",
    ])
    .fails_with(&["tp·pp", "overflows"]);
}

#[test]
fn out_of_range_laws_figures_and_parameters_name_the_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let h100 = r#"hardware: Inline((name: "h", peak_flops: 989e12, hbm_bytes: 80e9,
        mem_bw_bytes_per_s: NaN, intra_bw_bytes_per_s: 450e9, inter_bw_bytes_per_s: 50e9,
        scale_up_domain: 8, intra_latency_s: 10e-6, inter_latency_s: 20e-6,
        intra_link_eff: 0.65, inter_link_eff: 0.9))"#;
    let cases = [
        (
            "law: MerrillPlateau",
            "law: KaplanChinchilla(b_star_tokens: -2e8, alpha_b: 0.21, loss: (e: 1.69, a: 406.4, alpha: 0.34, b: 410.7, beta: 0.28), params: 7e9)",
            "source.law.b_star_tokens",
        ),
        (
            "stat_eff: McCandlish",
            "stat_eff: Pollux(b0: -5.0)",
            "stat_eff.Pollux.b0",
        ),
        (
            "hardware: Named(\"h100-sxm\")",
            h100,
            "cluster.hardware.mem_bw_bytes_per_s",
        ),
        (
            "b_crit_scale: 1.0,",
            "b_crit_scale: 1.0, efficiency: (tp_overlap: NaN),",
            "efficiency.tp_overlap",
        ),
        ("b_crit_scale: 1.0,", "b_crit_scale: inf,", "b_crit_scale"),
    ];
    for (from, to, field) in cases {
        let s = session(dir.path(), "x.ron", &demo_with(from, to));
        grid(&s).fails_with(&[field]);
    }
}

#[test]
fn inconsistent_model_shapes_are_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = |edit: &str| {
        let base = "name: \"m\", layers: 32, hidden: 4096, heads: 32, kv_heads: 32, ffn_hidden: 11008, vocab: 32000, seq_len: 4096, swiglu: true";
        format!(
            "model: Inline(({}))",
            base.replace(
                edit.split('|').next().unwrap_or(""),
                edit.split('|').nth(1).unwrap_or("")
            )
        )
    };
    let cases = [
        ("hidden: 4096|hidden: 4097", "model.hidden"),
        ("kv_heads: 32|kv_heads: 64", "model.kv_heads"),
        ("ffn_hidden: 11008|ffn_hidden: 0", "model.ffn_hidden"),
        ("vocab: 32000|vocab: 0", "model.vocab"),
        (
            "swiglu: true|swiglu: true, moe: Some((experts: 8, top_k: 2, capacity_factor: NaN))",
            "model.moe.capacity_factor",
        ),
    ];
    for (edit, field) in cases {
        let s = session(
            dir.path(),
            "m.ron",
            &demo_with("model: Named(\"llama-7b\")", &model(edit)),
        );
        grid(&s).fails_with(&[field]);
    }
}

#[test]
fn unknown_session_fields_name_the_nearest_known_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = session(
        dir.path(),
        "t.ron",
        &demo_with("current_batch: Some(512)", "curent_batch: Some(512)"),
    );
    grid(&s).fails_with(&[
        "t.ron:",
        "unknown field `curent_batch`",
        "did you mean `current_batch`",
    ]);
    let s = session(
        dir.path(),
        "n.ron",
        &demo_with("micro_batches:", "micro_batchs:"),
    );
    grid(&s).fails_with(&["search", "did you mean `micro_batches`"]);
}

#[test]
fn negative_per_layer_norms_are_rejected() {
    let line = r#"{"v":1,"step":1,"b_small":4,"b_big":32,"sq_small":2,"sq_big":1,"layers":{"a":{"sq_small":-1,"sq_big":0.5}}}"#;
    let err = copus::stats::parse_line(line).expect_err("negative layer norm");
    assert!(err.to_string().contains("cannot be negative"), "{err}");
}

fn records(sq_small: f64, sq_big: f64, n: u64) -> String {
    (0..n)
        .map(|s| {
            format!(
                "{{\"v\":1,\"step\":{s},\"b_small\":4,\"b_big\":32,\"sq_small\":{sq_small},\"sq_big\":{sq_big}}}\n"
            )
        })
        .collect()
}

#[test]
fn a_negative_b_simple_is_printed_as_such() {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = dir.path().join("neg.ndjson");
    // sq_small < sq_big every step: the tr Σ estimate is negative.
    std::fs::write(&f, records(1.0, 1.5, 60)).expect("write");
    let run = copus(&["analyze", &f.display().to_string()]);
    assert!(!run.stderr.contains("panicked"), "{run:?}");
    run.succeeds();
    let first = run.stdout.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("B_simple now  negative (-1.455"),
        "a negative B_simple must be called negative, not a sample count: {first}"
    );
}

#[test]
fn samples_flag_out_of_range_is_blamed_on_the_flag() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dump = dir.path().display().to_string();
    for v in ["0", "nan", "inf", "-3"] {
        let flag = format!("--samples={v}");
        copus(&["analyze", &dump, &flag]).fails_with(&["--samples"]);
    }
}

#[cfg(unix)]
#[test]
fn rank_entries_that_are_not_regular_files_are_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let step = dir.path().join("step_1");
    std::fs::create_dir_all(&step).expect("mkdir");
    // Two good ranks and a dangling symlink as the third.
    for k in 0..2 {
        let part = step.join(format!("p{k}"));
        std::fs::create_dir_all(&part).expect("mkdir");
        write_npy_raw(&part.join("w.npy"), "<f4", "(2,)", &[0u8; 8]);
        std::fs::write(part.join("samples.txt"), "4").expect("samples");
    }
    std::os::unix::fs::symlink(dir.path().join("gone"), step.join("r2.safetensors"))
        .expect("symlink");
    let d = dir.path().display().to_string();
    copus(&["analyze", &d, "--device", "cpu"]).fails_with(&["r2.safetensors"]);
    std::fs::remove_file(step.join("r2.safetensors")).expect("rm");
    let fifo = step.join("r2.safetensors");
    let ok = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo");
    assert!(ok.success());
    copus(&["analyze", &d, "--device", "cpu"])
        .fails_with(&["r2.safetensors", "not a regular file"]);
}

// ---- limits and messages -------------------------------------------------------------------

#[test]
fn an_over_long_line_is_counted_not_buffered_and_devices_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = dir.path().join("long.ndjson");
    let mut text = records(2.0, 1.0, 60);
    text.push_str(&format!(
        "{{\"v\":1,\"junk\":[{}0]}}\n",
        "0,".repeat(1_500_000)
    ));
    std::fs::write(&f, text).expect("write");
    let run = copus(&["analyze", &f.display().to_string(), "--json"]);
    run.succeeds();
    let v: serde_json::Value = serde_json::from_str(&run.stdout).expect("json");
    assert_eq!(v["summary"]["malformed_lines"], 1, "{}", run.stdout);
    assert_eq!(v["summary"]["steps"], 60, "{}", run.stdout);
    #[cfg(unix)]
    copus(&["analyze", "/dev/zero"]).fails_with(&["/dev/zero", "not a regular file"]);
}

#[test]
fn session_sizes_and_profile_files_are_bounded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let many: Vec<String> = (1..=100_000).map(|b| b.to_string()).collect();
    let s = session(
        dir.path(),
        "b.ron",
        &demo_with(
            "batch_sizes: [32, 64, 128, 256, 512, 1024, 2048, 4096, 8192]",
            &format!("batch_sizes: [{}]", many.join(", ")),
        ),
    );
    grid(&s).fails_with(&["search.batch_sizes", "at most 256"]);
    #[cfg(unix)]
    {
        let s = session(
            dir.path(),
            "z.ron",
            &demo_with("Named(\"h100-sxm\")", "Named(\"/dev/zero\")"),
        );
        grid(&s).fails_with(&["/dev/zero"]);
        copus(&[
            "predict",
            "--hardware",
            "/dev/zero",
            "--model",
            "llama-7b",
            "--gpus",
            "8",
            "--batch",
            "64",
        ])
        .fails_with(&["/dev/zero", "not a regular file"]);
    }
    // A profile path that leaves the session's directory is refused, not read and quoted.
    for escape in ["../../../../etc/passwd", "/etc/passwd"] {
        let s = session(
            dir.path(),
            "e.ron",
            &demo_with("Named(\"h100-sxm\")", &format!("Named({escape:?})")),
        );
        let run = grid(&s);
        run.fails_with(&["cluster.hardware", "outside the session's directory"]);
        assert!(!run.stderr.contains("root"), "{}", run.stderr);
    }
}

#[test]
fn watch_of_a_directory_is_an_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path().display().to_string();
    copus(&["watch", &d, "--headless", "--until-steps", "1"]).fails_with(&["is a directory"]);
}

#[test]
fn chained_errors_are_printed_once() {
    let run = copus(&["grid", "/nonexistent/session.ron"]);
    run.fails_with(&["/nonexistent/session.ron"]);
    assert_eq!(
        run.stderr.matches("No such file").count(),
        1,
        "{}",
        run.stderr
    );
}

#[test]
fn control_characters_in_names_are_escaped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = dir.path().join("esc.ndjson");
    let text: String = (0..60)
        .map(|s| {
            format!(
                "{{\"v\":1,\"step\":{s},\"b_small\":4,\"b_big\":32,\"sq_small\":2,\"sq_big\":1,\"layers\":{{\"evil\\u001b[2J\":{{\"sq_small\":2,\"sq_big\":1}}}}}}\n"
            )
        })
        .collect();
    std::fs::write(&f, text).expect("write");
    let run = copus(&["analyze", &f.display().to_string()]);
    run.succeeds();
    assert!(!run.stdout.contains('\u{1b}'), "raw escape printed");
    assert!(run.stdout.contains("evil\\u{1b}[2J"), "{}", run.stdout);
}

#[test]
fn a_utf8_bom_costs_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = dir.path().join("bom.ndjson");
    std::fs::write(&f, format!("\u{feff}{}", records(2.0, 1.0, 60))).expect("write");
    let run = copus(&["analyze", &f.display().to_string(), "--json"]);
    run.succeeds();
    let v: serde_json::Value = serde_json::from_str(&run.stdout).expect("json");
    assert_eq!(v["summary"]["steps"], 60);
    assert_eq!(v["summary"]["malformed_lines"], 0);
    let s = session(
        dir.path(),
        "bom.ron",
        &format!("\u{feff}{}", demo_with("", "")),
    );
    grid(&s).succeeds();
}

// ---- live data loss ------------------------------------------------------------------------

fn watch_json(
    dir: &Path,
    file: &str,
    until: &str,
) -> std::thread::JoinHandle<reliability_support::Run> {
    let (dir, file, until) = (dir.to_path_buf(), file.to_owned(), until.to_owned());
    std::thread::spawn(move || {
        copus_in(
            &dir,
            &[
                "watch",
                &file,
                "--headless",
                "--until-steps",
                &until,
                "--timeout-s",
                "8",
                "--json",
            ],
            &[],
        )
    })
}

fn rewrite_atomically(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).expect("tmp");
    std::fs::rename(&tmp, path).expect("rename");
}

#[test]
fn an_atomic_rewrite_is_not_counted_twice_and_a_restart_is_detected() {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = dir.path().join("run.ndjson");
    std::fs::write(&f, records(2.0, 1.0, 10)).expect("write");
    let h = watch_json(dir.path(), "run.ndjson", "15");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    // The producer rewrites the whole file (tmp + rename) with 5 more steps.
    rewrite_atomically(&f, &records(2.0, 1.0, 15));
    let run = h.join().expect("watch");
    run.succeeds();
    let v: serde_json::Value = serde_json::from_str(&run.stdout).expect("json");
    let s = &v["summary"];
    assert_eq!(s["steps_ingested"], 15, "{}", run.stdout);
    assert_eq!(s["duplicates_dropped"], 10, "{}", run.stdout);
    assert_eq!(s["restarts"], 0);

    // A restarted producer: steps 0..5 as before, then other values from step 5 on.
    std::fs::write(&f, records(2.0, 1.0, 10)).expect("write");
    let h = watch_json(dir.path(), "run.ndjson", "15");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let restarted: String = records(2.0, 1.0, 5)
        + &(5..15)
            .map(|s| format!("{{\"v\":1,\"step\":{s},\"b_small\":4,\"b_big\":32,\"sq_small\":3,\"sq_big\":1}}\n"))
            .collect::<String>();
    rewrite_atomically(&f, &restarted);
    let run = h.join().expect("watch");
    run.succeeds();
    let v: serde_json::Value = serde_json::from_str(&run.stdout).expect("json");
    let s = &v["summary"];
    assert_eq!(s["restarts"], 1, "{}", run.stdout);
    assert_eq!(s["superseded"], 5, "{}", run.stdout);
    assert_eq!(s["steps_ingested"], 15, "{}", run.stdout);
    assert_eq!(s["duplicates_dropped"], 5, "{}", run.stdout);
}

/// Standard output on a full device (`> /dev/full`): every command that prints its result
/// reports the failed write, naming standard output, instead of panicking in `println!`.
#[test]
fn a_full_standard_output_is_an_error_not_a_panic() {
    if !Path::new("/dev/full").exists() {
        return; // Linux only
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let f = dir.path().join("run.ndjson");
    std::fs::write(&f, records(2.0, 1.0, 60)).expect("write");
    let file = f.display().to_string();
    let demo = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("sessions/demo.ron")
        .display()
        .to_string();
    for args in [
        vec!["analyze", &file, "--json"],
        vec!["analyze", &file],
        vec![
            "watch",
            &file,
            "--headless",
            "--until-steps",
            "60",
            "--json",
        ],
        vec!["watch", &file, "--headless", "--until-steps", "60"],
        vec!["grid", &demo, "--at", "1200", "--json"],
        // Text outputs written with `println!` (the panic in the standard library is said as
        // the error it is, exit status 1).
        vec!["grid", &demo],
        vec!["plan", &demo],
        vec!["plan", &demo, "--emit", "megatron"],
        vec![
            "predict",
            "--model",
            "llama3-8b",
            "--gpus",
            "8",
            "--batch",
            "64",
        ],
    ] {
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg("exec \"$0\" \"$@\" > /dev/full")
            .arg(env!("CARGO_BIN_EXE_copus"))
            .args(&args)
            .output()
            .expect("run copus");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(
            stderr.contains("cannot write to standard output"),
            "{args:?}: {stderr}"
        );
    }
}

/// A hardware profile file given to `predict` has its efficiency section checked like a
/// session's: an out-of-range kernel efficiency or a negative attention speed-up is an error
/// that names the field, not a prediction.
#[test]
fn a_hardware_file_with_a_bad_efficiency_is_refused_with_the_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let shipped = include_str!("../assets/hardware/h100-sxm.ron");
    for (from, to, field) in [
        (
            "max_eff: 0.6615",
            "max_eff: 1.6615",
            "hardware.efficiency.max_eff",
        ),
        (
            "attn_native_speedup: 2.407",
            "attn_native_speedup: -1.0",
            "hardware.efficiency.attn_native_speedup",
        ),
        // Fields that were only checked to be finite: a backward at 0 % of peak printed a
        // step time of NaN; a negative Triton slowdown an MFU of 124 %.
        (
            "attn_bwd_eff: 0.1304",
            "attn_bwd_eff: 0.0",
            "hardware.efficiency.attn_bwd_eff",
        ),
        (
            "attn_bwd_eff: 0.1304",
            "attn_bwd_eff: 0.1304, attn_triton_slowdown: -1.0",
            "hardware.efficiency.attn_triton_slowdown",
        ),
        (
            "attn_bwd_eff: 0.1304",
            "attn_bwd_eff: 0.1304, fsdp_overlap: -1.0",
            "hardware.efficiency.fsdp_overlap",
        ),
        (
            "attn_bwd_eff: 0.1304",
            "attn_bwd_eff: 0.1304, hsdp_shard_gpus: 0.0",
            "hardware.efficiency.hsdp_shard_gpus",
        ),
        (
            "attn_bwd_eff: 0.1304",
            "attn_bwd_eff: 0.1304, grad_bytes: 1e300",
            "hardware.efficiency.grad_bytes: must lie in 1..=8 bytes, got 1e300",
        ),
        (
            "microbatch_overhead_s: 0.4819e-3",
            "microbatch_overhead_s: 1e200",
            "hardware.efficiency.microbatch_overhead_s",
        ),
        (
            "fp8_peak_flops: 1979e12",
            "fp8_peak_flops: 500e12",
            "hardware.fp8_peak_flops",
        ),
        // A name reaches the terminal: no escape sequences in it.
        (
            "name: \"h100-sxm\"",
            "name: \"\\u{1b}]0;pwned\\u{7}\"",
            "hardware.name: must be printable text",
        ),
    ] {
        assert!(shipped.contains(from), "the profile has {from}");
        let path = dir.path().join("hw.ron");
        std::fs::write(&path, shipped.replace(from, to)).expect("write");
        let hw = path.display().to_string();
        copus(&[
            "predict",
            "--model",
            "llama3-8b",
            "--gpus",
            "8",
            "--batch",
            "64",
            "--hardware",
            &hw,
        ])
        .fails_with(&[field]);
    }
}

/// An output that is one of the command's inputs (or its other output) is refused before
/// anything is opened, `--force` or not: `watch --advise RUN --force` emptied the run it was
/// to follow, `branch --out F --run-out F` tore the two streams into one file, and
/// `calibrate --out`/`snapshot --out` on their input replaced it. Nothing is changed.
#[test]
fn an_output_that_is_an_input_is_refused_and_nothing_changes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/data/sample-run.ndjson");
    let run_text = std::fs::read_to_string(&sample).expect("sample");
    std::fs::write(d.join("run.ndjson"), &run_text).expect("write");
    let demo =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("sessions/demo.ron"))
            .expect("demo");
    std::fs::write(d.join("demo.ron"), &demo).expect("write");
    let watch = |advise: &str| {
        copus_in(
            d,
            &[
                "watch",
                "run.ndjson",
                "--headless",
                "--until-steps",
                "50",
                "--timeout-s",
                "5",
                "--session",
                "demo.ron",
                "--advise",
                advise,
                "--force",
            ],
            &[],
        )
    };
    watch("./run.ndjson").fails_with(&["--advise ./run.ndjson is also the run being followed"]);
    watch("demo.ron").fails_with(&["--advise demo.ron is also --session"]);
    // A small branched experiment writing `out` and `run_out` (and `extra`).
    let branch = |out: &str, run_out: &str, extra: &[&str]| {
        let mut args = vec![
            "branch",
            "--at",
            "5",
            "--out",
            out,
            "--run-out",
            run_out,
            "--budget-samples",
            "64",
            "--batches",
            "8,16,32",
            "--seeds",
            "2",
            "--quiet",
        ];
        args.extend_from_slice(extra);
        copus_in(d, &args, &[])
    };
    branch("same.ndjson", "./same.ndjson", &["--force"])
        .fails_with(&["--run-out ./same.ndjson is also --out"]);
    assert!(!d.join("same.ndjson").exists(), "nothing created");
    // A --run-out that exists (no --force) is refused before --out is created: an empty --out
    // left behind made the rerun fail with "exists".
    std::fs::write(d.join("mine.ndjson"), "mine").expect("write");
    branch("new.ndjson", "mine.ndjson", &[]).fails_with(&["mine.ndjson", "exists"]);
    assert!(!d.join("new.ndjson").exists(), "--out not created");
    // A --run-out in a missing directory: the --out this run created is removed again.
    branch("new.ndjson", "nodir/r.ndjson", &[]).fails_with(&["nodir/r.ndjson"]);
    assert!(!d.join("new.ndjson").exists(), "--out removed");
    assert_eq!(
        std::fs::read_to_string(d.join("mine.ndjson"))
            .ok()
            .as_deref(),
        Some("mine")
    );
    std::fs::remove_file(d.join("mine.ndjson")).expect("remove");
    copus_in(
        d,
        &[
            "calibrate",
            "--hardware",
            "h100-sxm",
            "--model",
            "llama3-8b",
            "run.ndjson",
            "--out",
            "run.ndjson",
            "--force",
        ],
        &[],
    )
    .fails_with(&["--out run.ndjson is also the measurements read"]);
    // Profiles given as files are inputs too: `--out` over one of them with --force replaced
    // the hardware profile by a calibration file.
    let hw_text = std::fs::read_to_string("assets/hardware/h100-sxm.ron").expect("profile");
    let model_text = std::fs::read_to_string("assets/models/llama3-8b.ron").expect("profile");
    std::fs::write(d.join("myhw.ron"), &hw_text).expect("write");
    std::fs::write(d.join("mymodel.ron"), &model_text).expect("write");
    for (out, role) in [
        ("myhw.ron", "the --hardware profile"),
        ("./mymodel.ron", "the --model profile"),
    ] {
        copus_in(
            d,
            &[
                "calibrate",
                "--hardware",
                "myhw.ron",
                "--model",
                "mymodel.ron",
                "run.ndjson",
                "--out",
                out,
                "--force",
            ],
            &[],
        )
        .fails_with(&[&format!("--out {out} is also {role}")]);
    }
    for (name, text) in [("myhw.ron", &hw_text), ("mymodel.ron", &model_text)] {
        assert_eq!(&std::fs::read_to_string(d.join(name)).expect(name), text);
    }
    copus_in(
        d,
        &["snapshot", "demo.ron", "--out", "demo.ron", "--force"],
        &[],
    )
    .fails_with(&["--out demo.ron is also the session or run drawn"]);
    assert_eq!(
        std::fs::read_to_string(d.join("run.ndjson")).expect("run"),
        run_text
    );
    assert_eq!(
        std::fs::read_to_string(d.join("demo.ron")).expect("demo"),
        demo
    );
    // A snapshot of `s` and `e` draws the screen and writes nothing beside the session.
    let shot = copus_in(
        d,
        &["snapshot", "demo.ron", "--keys", "s e", "--size", "160x40"],
        &[],
    );
    shot.succeeds();
    assert!(
        shot.stdout.contains("snapshot: nothing written"),
        "{}",
        shot.stdout
    );
    let mut names: Vec<String> = std::fs::read_dir(d)
        .expect("dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["demo.ron", "myhw.ron", "mymodel.ron", "run.ndjson"]);
}

/// Estimator flags are checked by name before the file is read (they were reported as a
/// problem of the stats file, under internal names like `bandwidth_steps`), and a kernel
/// narrower than a step, which made every interval zero-width without a word, is refused.
#[test]
fn estimator_flags_are_checked_by_name_before_reading() {
    let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/data/sample-run.ndjson");
    let s = sample.to_str().expect("utf-8");
    for (flag, value, says) in [
        ("--bandwidth", "0.1", "at least 1 step"),
        ("--bandwidth", "0", "at least 1 step"),
        ("--decay", "0", "must lie in (0, 1)"),
        ("--reference-batch", "0", "positive number of samples"),
        ("--window", "0", "at least 1 step"),
        ("--confidence", "1", "must lie in (0, 1)"),
        ("--block-length", "0", "at least 1 step"),
    ] {
        let run = copus(&["analyze", s, flag, value]);
        run.fails_with(&[&format!("{flag} {value}: "), says]);
        assert!(!run.stderr.contains("first problem"), "{}", run.stderr);
        assert!(!run.stderr.contains("_steps"), "{}", run.stderr);
    }
    // One step is the narrowest kernel, and its intervals are not collapsed.
    let v = reliability_support::copus_json(&["analyze", s, "--bandwidth", "1", "--json"]);
    let ci = &v["summary"]["now"]["ci"];
    let (lo, hi) = (ci[0].as_f64().expect("lo"), ci[1].as_f64().expect("hi"));
    assert!(hi > 1.2 * lo, "{ci}");
}

/// A law that gives B_crit ≈ 0 at the first point (a scenario starting at 0 tokens) rates
/// every batch at efficiency ≈ 0: `grid` says so instead of naming a "best" cell silently;
/// a later point has no such caveat.
#[test]
fn a_critical_batch_below_one_sample_is_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("sessions/demo.ron"))
            .expect("demo");
    let start = text
        .lines()
        .find(|l| l.trim_start().starts_with("start_tokens:"))
        .expect("a start_tokens line");
    let zero = text.replace(start, "        start_tokens: 0.0,");
    let path = session(dir.path(), "zero.ron", &zero);
    let v = reliability_support::copus_json(&["grid", &path, "--json"]);
    assert!(
        v["caveats"].to_string().contains("below one sequence"),
        "{}",
        v["caveats"]
    );
    let later = reliability_support::copus_json(&["grid", &path, "--at", "150B", "--json"]);
    assert!(
        !later["caveats"].to_string().contains("below one sequence"),
        "{}",
        later["caveats"]
    );
}

/// `demo-train --step-delay-ms` is bounded as `--linger-s` is (2^64 ms slept for ever).
#[test]
fn an_endless_step_delay_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    copus_in(
        dir.path(),
        &[
            "demo-train",
            "--steps",
            "5",
            "--out",
            "o.ndjson",
            "--step-delay-ms",
            "18446744073709551615",
        ],
        &[],
    )
    .fails_with(&["--step-delay-ms 18446744073709551615: at most 60000"]);
    assert!(!dir.path().join("o.ndjson").exists());
}

/// `demo-train --steps 0` is refused before any file is written (it exited 0 with an empty
/// file).
#[test]
fn training_no_step_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    copus_in(
        dir.path(),
        &["demo-train", "--steps", "0", "--out", "z.ndjson"],
        &[],
    )
    .fails_with(&["'--steps <STEPS>'"]);
    assert!(!dir.path().join("z.ndjson").exists());
}

/// `--decay` with the two-sided smoother changes only the ratio-EMA column: `analyze` says so
/// (it looked ignored); with the one-sided smoother it says nothing.
#[test]
fn a_decay_for_the_other_smoother_is_noted() {
    let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/data/sample-run.ndjson");
    let s = sample.to_str().expect("utf-8");
    let two = copus(&["analyze", s, "--decay", "0.5"]);
    two.succeeds();
    assert!(
        two.stderr
            .contains("--decay sets the one-sided smoother's EMA"),
        "{}",
        two.stderr
    );
    let one = copus(&["analyze", s, "--one-sided", "--decay", "0.5"]);
    one.succeeds();
    assert!(!one.stderr.contains("--decay sets"), "{}", one.stderr);
}

/// A session whose `source.path` names nothing: the error names the session and the field (it
/// named only the path, as if the user had typed it); a stats file given directly that does
/// not exist is named as given, not as a session file copus made up.
#[test]
fn a_missing_source_file_names_the_session_and_the_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("sessions/measured-sample.ron"),
    )
    .expect("session")
    .replace("../assets/data/sample-run.ndjson", "nonexist.ndjson");
    session(dir.path(), "miss.ron", &text);
    copus_in(dir.path(), &["grid", "miss.ron"], &[])
        .fails_with(&["miss.ron: source.path \"nonexist.ndjson\": No such file"]);
    let direct = copus_in(dir.path(), &["plan", "nonexist.ndjson"], &[]);
    direct.fails_with(&["nonexist.ndjson: no such file or directory"]);
    assert!(!direct.stderr.contains(".copus.ron"), "{}", direct.stderr);
}

/// A stats file without one usable record: the explorer's loader (here through `snapshot`)
/// names the first bad line as `analyze` does; it said only how many lines were skipped.
#[test]
fn an_unusable_stats_file_names_its_first_problem_everywhere() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("bad.ndjson"), "{bad\n{\"v\":1}\n").expect("write");
    for cmd in ["analyze", "snapshot"] {
        copus_in(dir.path(), &[cmd, "bad.ndjson"], &[])
            .fails_with(&["bad.ndjson (first problem, line 1: not valid JSON"]);
    }
}

/// `demo-train`'s progress names the step as its records number it (from 0): it printed
/// "step 300/300" for a run whose records and explorer end at step 299.
#[test]
fn demo_train_progress_counts_steps_as_the_records_do() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = copus_in(
        dir.path(),
        &["demo-train", "--steps", "3", "--out", "r.ndjson"],
        &[],
    );
    run.succeeds();
    assert!(run.stderr.contains("step 2 (3/3 done)"), "{}", run.stderr);
    let text = std::fs::read_to_string(dir.path().join("r.ndjson")).expect("records");
    assert!(
        text.lines().last().expect("a line").contains("\"step\":2,"),
        "{text}"
    );
}

/// A symlink to an output not yet written is that output: `branch --run-out LINK` where LINK
/// points at `--out` wrote both streams into one file before (only existing paths were
/// resolved).
#[cfg(unix)]
#[test]
fn a_link_to_an_output_not_yet_written_is_that_output() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::os::unix::fs::symlink("a.ndjson", dir.path().join("b.ndjson")).expect("symlink");
    copus_in(
        dir.path(),
        &[
            "branch",
            "--at",
            "5",
            "--out",
            "a.ndjson",
            "--run-out",
            "b.ndjson",
            "--batches",
            "8,16,32",
            "--seeds",
            "2",
            "--budget-samples",
            "64",
            "--force",
            "--quiet",
        ],
        &[],
    )
    .fails_with(&["--run-out b.ndjson is also --out"]);
    assert!(!dir.path().join("a.ndjson").exists(), "nothing written");
}

/// Ctrl+C and SIGTERM end the headless commands with what they had, not as a killed process:
/// `watch --headless --json` prints its summary (it printed nothing, killed by the signal) and
/// `demo-train` stops after a whole step and says where; both exit 128 + the signal's number.
#[cfg(unix)]
#[test]
fn headless_watch_and_demo_train_finish_their_output_on_a_stop_signal() {
    use std::process::{Command, Stdio};
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let bin = env!("CARGO_BIN_EXE_copus");
    let run = d.join("run.ndjson");
    let made = Command::new(bin)
        .args(["demo-train", "--steps", "40", "--quiet", "--out"])
        .arg(&run)
        .output()
        .expect("demo-train");
    assert!(made.status.success(), "{made:?}");
    let send = |child: &std::process::Child, sig: i32| {
        let pid = i32::try_from(child.id()).expect("pid");
        // SAFETY: kill(2) on the child this test spawned.
        assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
    };
    // A file has no end: the follow runs until the signal.
    let watch = Command::new(bin)
        .args(["watch", "--headless", "--json", "--advise"])
        .arg(d.join("advice.ndjson"))
        .args(["--session", "demo"])
        .arg(&run)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("watch");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    send(&watch, libc::SIGINT);
    let out = watch.wait_with_output().expect("waits");
    assert_eq!(out.status.code(), Some(130), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("the summary");
    assert_eq!(v["summary"]["steps_ingested"], 40, "{v}");
    // The summary says so too (`complete` alone read an interrupted watch as finished).
    assert_eq!(v["summary"]["stopped_by"], "SIGINT", "{v}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("stopped by SIGINT"));
    // demo-train stops after a whole step.
    let stats = d.join("slow.ndjson");
    let train = Command::new(bin)
        .args([
            "demo-train",
            "--steps",
            "100000",
            "--step-delay-ms",
            "10",
            "--out",
        ])
        .arg(&stats)
        .stderr(Stdio::piped())
        .spawn()
        .expect("demo-train");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    send(&train, libc::SIGTERM);
    let out = train.wait_with_output().expect("waits");
    assert_eq!(out.status.code(), Some(143), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("stopped after") && err.contains("of 100000 steps"),
        "{err}"
    );
    let text = std::fs::read_to_string(&stats).expect("stats");
    assert!(text.ends_with('\n') && !text.is_empty());
    for line in text.lines() {
        serde_json::from_str::<serde_json::Value>(line).expect("every record whole");
    }
}

/// A Hopper-native speed-up that would lift attention above the GPU's peak is capped at the
/// peak in the model (MFU stays below 100 %), not refused: a calibration of a stack that runs
/// FlashAttention-2 fits its efficiencies without regard to the cuDNN factor it never uses.
#[test]
fn a_native_attention_speed_up_never_lifts_a_kernel_above_peak() {
    let dir = tempfile::tempdir().expect("tempdir");
    let shipped = include_str!("../assets/hardware/h100-sxm.ron");
    let path = dir.path().join("hw.ron");
    std::fs::write(
        &path,
        shipped.replace("attn_native_speedup: 2.407", "attn_native_speedup: 9.0"),
    )
    .expect("write");
    let hw = path.display().to_string();
    let run = copus(&[
        "predict",
        "--model",
        "llama3-8b",
        "--gpus",
        "8",
        "--batch",
        "8",
        "--cp",
        "8",
        "--seq",
        "32768",
        "--attention",
        "cudnn",
        "--json",
        "--hardware",
        &hw,
    ]);
    run.succeeds();
    let v: serde_json::Value = serde_json::from_str(&run.stdout).expect("json");
    // A configuration that fits (one that does not has no MFU: null).
    assert_eq!(v["fits"], true, "{v}");
    let mfu = v["mfu"].as_f64().expect("mfu");
    assert!(mfu > 0.0 && mfu < 1.0, "{mfu}");
}

/// A built-in training run that diverges (every step after the first a loss that is not
/// finite) ends with exit status 1 and says so; it exited 0. Its records are whole; a run
/// that trains exits 0.
#[test]
fn a_diverged_trainer_run_says_so_and_exits_1() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("run.ndjson");
    let o = out.to_str().expect("utf-8");
    let r = copus(&[
        "demo-train",
        "--steps",
        "20",
        "--lr",
        "1e30",
        "--out",
        o,
        "--quiet",
    ]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(
        r.stderr.contains("the run diverged") && r.stderr.contains("lower --lr"),
        "{}",
        r.stderr
    );
    let lines = std::fs::read_to_string(&out).expect("read");
    assert_eq!(lines.lines().count(), 20);
    let ok = dir.path().join("ok.ndjson");
    let r = copus(&[
        "demo-train",
        "--steps",
        "20",
        "--out",
        ok.to_str().expect("utf-8"),
        "--quiet",
    ]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
}

/// A session whose `source.path` names the wrong kind of thing (a directory as a stats file,
/// a device, a file as a dump) is an error naming the session and the field (it named only
/// the path: "copus: .: is a directory").
#[test]
fn a_source_path_of_the_wrong_kind_names_the_session_and_the_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("run.ndjson"), "").expect("file");
    // A named pipe nobody writes to (read for 5 s first, then refused).
    let fifo = std::process::Command::new("mkfifo")
        .arg(dir.path().join("pipe"))
        .status()
        .is_ok_and(|s| s.success());
    let mut cases = vec![
        (r#"Stats(path: ".")"#, "a directory, not a stats file"),
        (r#"Stats(path: "/dev/zero")"#, "not a regular file"),
        (r#"Dumps(path: "run.ndjson")"#, "not a directory"),
    ];
    if fifo {
        cases.push((r#"Stats(path: "pipe")"#, "a named pipe"));
    }
    for (source, says) in cases {
        let s = session(
            dir.path(),
            "s.ron",
            &format!(
                "(name: \"s\", model: Named(\"llama-7b\"), cluster: (hardware: \
                 Named(\"h100-sxm\"), nodes: 1, gpus_per_node: 8), source: {source})"
            ),
        );
        let r = copus(&["plan", &s]);
        assert_eq!(r.code, Some(1), "{}", r.stderr);
        assert!(
            r.stderr.contains("s.ron: source.path \"") && r.stderr.contains(says),
            "{source}: {}",
            r.stderr
        );
    }
}
