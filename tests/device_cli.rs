//! The default build carries the CUDA backend and says where it stands: `copus --version` and
//! `copus bench --devices` list the backends compiled in and which are usable here (on a
//! machine without a driver: "CPU (no CUDA driver found)"); `analyze --json` names the backend
//! that reduced a dump and carries the fallback note in the JSON, not as a stray stderr line.

use crate::dump_support;
use copus::compute::DType;
use copus::compute::device::cuda_probe;
use dump_support::*;
use std::process::{Command, Output};

fn copus(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_copus"))
        .args(args)
        .output()
        .expect("run copus")
}

fn stdout(o: &Output) -> String {
    assert!(
        o.status.success(),
        "copus failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// True for a build with CUDA on a machine where the probe finds no driver library (CI, most
/// laptops): there the exact "no CUDA driver found" wording is checked.
fn no_driver() -> bool {
    cfg!(feature = "cuda") && cuda_probe().driver.is_none()
}

#[test]
fn the_default_build_has_the_cuda_backend() {
    let manifest = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"))
        .expect("Cargo.toml");
    let default = manifest
        .lines()
        .find(|l| l.trim_start().starts_with("default ="))
        .expect("a default feature list");
    assert!(
        default.contains("\"cuda\""),
        "`cuda` must be a default feature (the README's commands build without flags): {default}"
    );
    assert_eq!(cuda_probe().compiled, cfg!(feature = "cuda"));
}

#[test]
fn version_lists_backends_and_what_auto_uses() {
    for flag in ["--version", "-V"] {
        let out = stdout(&copus(&[flag]));
        assert!(
            out.starts_with(&format!("copus {}\n", env!("CARGO_PKG_VERSION"))),
            "{out}"
        );
        assert!(out.contains("cpu   compiled in, usable: cpu ("), "{out}");
        assert!(out.contains("--device auto uses: "), "{out}");
        if !cfg!(feature = "cuda") {
            assert!(out.contains("cuda  not compiled in"), "{out}");
            continue;
        }
        assert!(out.contains("cuda  compiled in"), "{out}");
        if no_driver() {
            assert!(
                out.contains("cuda  compiled in, not usable here: no CUDA driver found"),
                "{out}"
            );
            assert!(
                out.contains("--device auto uses: CPU (no CUDA driver found)"),
                "{out}"
            );
        }
    }
}

#[test]
fn bench_devices_reports_the_same_in_json() {
    let text = stdout(&copus(&["bench", "--devices"]));
    let v: serde_json::Value =
        serde_json::from_str(&stdout(&copus(&["bench", "--devices", "--json"]))).expect("json");
    let backends = v["backends"].as_array().expect("backends");
    assert_eq!(backends[0]["name"], "cpu");
    assert_eq!(backends[0]["usable"], true);
    assert_eq!(backends[1]["name"], "cuda");
    assert_eq!(backends[1]["compiled"], cfg!(feature = "cuda"));
    let auto = v["auto"].as_str().expect("auto");
    assert!(
        text.contains(&format!("--device auto uses: {auto}")),
        "{text}"
    );
    if no_driver() {
        assert_eq!(auto, "CPU (no CUDA driver found)");
        assert_eq!(backends[1]["usable"], false);
        assert!(v["cuda_probe"]["driver"].is_null());
        // `--device cuda` that cannot run says so before generating a dump for it.
        let out = copus(&["bench", "--device", "cuda", "--size-mb", "1"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains("CUDA"), "{err}");
        assert!(!err.contains("generating a dump"), "{err}");
    }
}

/// `bench --keep DIR` writes a dump into a new or empty directory only: a directory holding
/// files (a real dump) is refused and left as it was.
#[test]
fn bench_keep_never_writes_over_a_used_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mine = dir.path().join("step_0");
    std::fs::create_dir_all(&mine).expect("mkdir");
    std::fs::write(mine.join("part_000.safetensors"), "precious").expect("write");
    let keep = dir.path().to_str().expect("utf-8");
    let out = copus(&["bench", "--size-mb", "1", "--steps", "1", "--keep", keep]);
    assert!(!out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not empty"),
        "{out:?}"
    );
    let kept = std::fs::read_to_string(mine.join("part_000.safetensors")).expect("read");
    assert_eq!(kept, "precious");
    // A new directory is written and kept.
    let fresh = dir.path().join("fresh");
    let out = copus(&[
        "bench",
        "--size-mb",
        "1",
        "--steps",
        "1",
        "--device",
        "cpu",
        "--keep",
        fresh.to_str().expect("utf-8"),
    ]);
    assert!(out.status.success(), "{out:?}");
    assert!(fresh.join("step_0").is_dir());
}

fn small_dump(dir: &std::path::Path) {
    let mut r = rng(3);
    for step in 0..4u64 {
        for k in 0..3 {
            let t = T {
                name: "l.0.w".into(),
                dtype: DType::F32,
                shape: vec![301],
                vals: grad(&mut r, DType::F32, &[0.02; 301], 0.05),
            };
            write_st(
                &dir.join(format!("step_{step}/r{k}.safetensors")),
                &[t],
                Some("4"),
            );
        }
    }
}

#[test]
fn analyze_json_names_the_backend_and_carries_the_fallback_note() {
    let d = tempfile::tempdir().expect("tmp");
    small_dump(d.path());
    let p = d.path().to_str().expect("utf-8");
    let cpu = copus(&["analyze", p, "--json", "--device", "cpu"]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&cpu)).expect("json");
    assert!(v["backend"].as_str().expect("backend").starts_with("cpu ("));
    assert!(v["backend_note"].is_null());

    let auto = copus(&["analyze", p, "--json"]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&auto)).expect("json");
    let backend = v["backend"].as_str().expect("backend");
    let err = String::from_utf8_lossy(&auto.stderr);
    assert!(
        !err.contains("CPU ("),
        "with --json the note belongs in the JSON, not on stderr: {err}"
    );
    if backend.starts_with("cpu") {
        let note = v["backend_note"].as_str().expect("a fallback says why");
        assert!(note.starts_with("CPU ("), "{note}");
        if no_driver() {
            assert_eq!(note, "CPU (no CUDA driver found)");
        }
    } else {
        assert!(backend.starts_with("cuda:"), "{backend}");
        assert!(v["backend_note"].is_null());
    }

    let text = stdout(&copus(&["analyze", p]));
    assert!(text.starts_with("backend   "), "{text}");
    if no_driver() {
        assert!(
            text.lines()
                .next()
                .is_some_and(|l| l.ends_with("; --device auto: CPU (no CUDA driver found)")),
            "{text}"
        );
    }
}

#[test]
fn cuda_asked_for_without_a_gpu_is_a_clear_error() {
    if !no_driver() {
        return; // a machine with a driver: covered by kernels_gpu
    }
    let d = tempfile::tempdir().expect("tmp");
    small_dump(d.path());
    let out = copus(&[
        "analyze",
        d.path().to_str().expect("utf-8"),
        "--device",
        "cuda",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no CUDA driver found"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn the_explorer_status_line_names_the_backend_that_reduced_a_dump() {
    use copus::app::{App, Msg, update};
    use copus::cli::open::{OpenArgs, adhoc_session};
    use copus::compute::Device;
    let d = tempfile::tempdir().expect("tmp");
    let dump = d.path().join("dump");
    small_dump(&dump);
    let args = OpenArgs {
        device: Device::Auto,
        ..OpenArgs::for_path(&dump)
    };
    let resolved = adhoc_session(&args).expect("session");
    let mut app = App::loading(resolved.clone());
    // What `copus open` hands the worker: the device as asked, the probe already cached.
    let loaded = copus::pipeline::load_with(&resolved, Device::Auto, &|_| {});
    update(&mut app, Msg::SourceLoaded(Box::new(loaded)));
    assert!(app.status.contains(" · reduced on "), "{}", app.status);
    if no_driver() {
        assert!(
            app.status.contains(" · reduced on cpu (")
                && app.status.ends_with(" · CPU (no CUDA driver found)"),
            "{}",
            app.status
        );
    }
}

#[test]
fn a_dump_shows_tokens_at_the_sequence_length_given() {
    // A dump's records carry no token counts: --seq-len (default 4096) gives the tokens
    // beside samples, in the text and as seq_len and b_simple_tokens in JSON.
    let d = tempfile::tempdir().expect("tmp");
    small_dump(d.path());
    let p = d.path().to_str().expect("utf-8");
    let v: serde_json::Value = serde_json::from_str(&stdout(&copus(&[
        "analyze",
        p,
        "--json",
        "--device",
        "cpu",
        "--seq-len",
        "2048",
    ])))
    .expect("json");
    let s = &v["summary"];
    assert_eq!(s["seq_len"], 2048.0);
    let b = s["b_simple"].as_f64().expect("b_simple");
    let t = s["b_simple_tokens"].as_f64().expect("tokens");
    assert!((t - 2048.0 * b).abs() <= 1e-9 * t, "{t} vs {b}");
    let text = stdout(&copus(&["analyze", p, "--device", "cpu"]));
    assert!(text.contains("(sequences of 4096 tokens)"), "{text}");
}
