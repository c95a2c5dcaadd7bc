//! The PyTorch hook under real torch: `assets/python/test_torch_hook.py` runs DDP with gloo on
//! CPU in 2 and 3 processes (accumulation, GradScaler with a skipped overflow step, a fixed
//! loss scale, bf16 autocast), FSDP2 (`fully_shard`) and the model-parallel mode on a
//! hand-sharded tensor-parallel MLP (TP 2 x DP 2 on 4 ranks), and checks every record against
//! an independent float64 recomputation on the unsharded model; its records are then read
//! back by copus's parser. The PyTorch Lightning and Hugging Face Trainer callbacks run one
//! training each (accumulation, strong clipping) against the same kind of recomputation, and
//! so does their meter under DDP. It also writes gradient
//! dumps of a real model with `dump_gradients` (F32, BF16, F16), which `copus analyze` reads
//! (B_simple within 5 % of the per-example truth) and which open in the explorer.
//!
//! Needs a Python with torch: `COPUS_PYTHON`, else the venv `scripts/python_env.sh` makes
//! (`$HOME/.cache/copus-ci-venv`). Without one the tests print a visible skip, except under
//! CI (`CI=true`) or `COPUS_REQUIRE_TORCH=1`, where a missing torch is a failure.

use copus::source::live::parse_record;
use std::path::PathBuf;
use std::process::Command;

fn python_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("assets/python")
}

fn torch_required() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
        || std::env::var("COPUS_REQUIRE_TORCH").is_ok_and(|v| v == "1")
}

/// A python that imports torch, or `None` (after a visible skip line) when there is none and
/// none is required.
pub fn torch_python(test: &str) -> Option<PathBuf> {
    let mut candidates = Vec::new();
    if let Some(p) = std::env::var_os("COPUS_PYTHON") {
        candidates.push(PathBuf::from(p));
    }
    if let Some(home) = std::env::var_os("HOME") {
        candidates.push(PathBuf::from(home).join(".cache/copus-ci-venv/bin/python"));
    }
    candidates.push(PathBuf::from("python3"));
    for c in &candidates {
        let ok = Command::new(c)
            .args([
                "-c",
                "import torch, torch.distributed as d; assert d.is_gloo_available()",
            ])
            .output()
            .is_ok_and(|o| o.status.success());
        if ok {
            return Some(c.clone());
        }
    }
    let msg = format!(
        "no python with torch (tried {candidates:?}); run scripts/python_env.sh or set COPUS_PYTHON"
    );
    if torch_required() {
        panic!("{test}: torch is required here (CI=true or COPUS_REQUIRE_TORCH=1): {msg}");
    }
    eprintln!("SKIPPED {test}: {msg}");
    None
}

#[test]
fn ddp_hook_under_real_torch_matches_an_independent_recomputation() {
    let Some(py) = torch_python("python_torch") else {
        return;
    };
    let out_dir = tempfile::tempdir().expect("tempdir");
    let out = Command::new(&py)
        .args(["-m", "unittest", "-v", "test_torch_hook"])
        .current_dir(python_dir())
        .env("COPUS_TORCH_OUT", out_dir.path())
        .env("COPUS_BIN", env!("CARGO_BIN_EXE_copus"))
        .output()
        .expect("run python");
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "torch tests failed:\n{log}");
    assert!(
        log.contains("Ran 18 tests") && log.contains("\nOK"),
        "{log}"
    );
    assert!(
        !log.contains("skipped="),
        "no torch test may skip here:\n{log}"
    );

    // The dump written by dump_gradients opens in the explorer (what `copus open DIR` does
    // after its terminal set-up): 200 steps, with the analysis.
    {
        use copus::app::{App, Msg, update};
        use copus::cli::open::{OpenArgs, adhoc_session};
        let args = OpenArgs {
            device: copus::compute::Device::Auto,
            ..OpenArgs::for_path(&out_dir.path().join("dump_f32"))
        };
        let resolved = adhoc_session(&args).expect("an ad-hoc session for the dump");
        let mut app = App::loading(resolved.clone());
        let loaded = copus::pipeline::load_with(&resolved, args.device, &|_| {});
        update(&mut app, Msg::SourceLoaded(Box::new(loaded)));
        assert!(!app.loading, "{}", app.status);
        assert!(app.status.starts_with("loaded "), "{}", app.status);
        assert_eq!(app.analysis.as_ref().map(|a| a.steps.len()), Some(200));
    }

    // Every record the hook wrote parses in copus, with the flags the scenarios expect.
    let mut files = 0;
    for e in std::fs::read_dir(out_dir.path()).expect("out dir") {
        let p = e.expect("entry").path();
        if p.extension().is_none_or(|x| x != "ndjson") {
            continue;
        }
        files += 1;
        let text = std::fs::read_to_string(&p).expect("records");
        let recs: Vec<_> = text
            .lines()
            .map(|l| parse_record(l).unwrap_or_else(|e| panic!("{}: {l}: {e}", p.display())))
            .collect();
        assert!(!recs.is_empty(), "{}", p.display());
        let name = p.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
        let skipped = recs.iter().filter(|r| r.skipped.is_some()).count();
        let want = match name {
            "grad_scaler_overflow" => 1,
            "accum_without_no_sync" => recs.len(),
            _ => 0,
        };
        assert_eq!(skipped, want, "{name}");
        for r in recs.iter().filter(|r| r.skipped.is_none()) {
            assert!(r.sq_small > r.sq_big && r.sq_big > 0.0, "{name}: {r:?}");
        }
    }
    assert_eq!(files, 10);
}

#[test]
fn advisor_applies_batch_advice_at_the_same_step_on_every_rank() {
    // `assets/python/test_torch_advisor.py`: copus_hook.Advisor under 2-process gloo DDP,
    // following an advice file and a TCP line server (accumulation 2 -> 4 at step 3 on both
    // ranks, dry-run and restart advice not applied, the `applied` line in the stats stream,
    // b_big doubled after it), plus its one-process unit tests.
    let Some(py) = torch_python("python_torch (advisor)") else {
        return;
    };
    run_suite(&py, "test_torch_advisor", 12);
}

/// Run the unittest module `module` of assets/python with the copus binary under test; it
/// must pass all of its `tests` tests, none skipped. Returns its log (stderr).
fn run_suite(py: &std::path::Path, module: &str, tests: usize) -> String {
    let out = Command::new(py)
        .args(["-m", "unittest", "-v", module])
        .current_dir(python_dir())
        .env("COPUS_BIN", env!("CARGO_BIN_EXE_copus"))
        .output()
        .expect("run python");
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{module} failed:\n{log}");
    assert!(
        log.contains(&format!("Ran {tests} tests")) && log.contains("\nOK"),
        "{log}"
    );
    assert!(
        !log.contains("skipped="),
        "no {module} test may skip here:\n{log}"
    );
    log
}

#[test]
fn copus_hook_is_installed_as_a_package_in_the_test_venv() {
    // `scripts/python_env.sh` installs assets/python with pip; the import must then work from
    // anywhere, not only next to the file.
    let Some(py) = torch_python("python_torch (package)") else {
        return;
    };
    let elsewhere = tempfile::tempdir().expect("tempdir");
    let out = Command::new(&py)
        .args(["-c", "import copus_hook, sys; print(copus_hook.__file__)"])
        .current_dir(elsewhere.path())
        .env_remove("PYTHONPATH")
        .output()
        .expect("run python");
    if !out.status.success() && !torch_required() {
        eprintln!("SKIPPED: copus_hook not installed in {py:?} (pip install ./assets/python)");
        return;
    }
    let where_ = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && where_.contains("site-packages"),
        "pip install ./assets/python did not install copus_hook: {where_} {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_hook_on_a_tiny_gpt_matches_the_exact_per_example_oracle() {
    // `assets/python/test_torch_oracle.py`: a tiny character GPT trained with AdamW on CPU,
    // measured by GradNoiseMeter (16 micro-batches of 2); the exact per-example stream of the
    // same samples; `copus analyze` of both within 5 % run-wide and in the last window; the
    // hook's |G|^2 equal to the trainer's clip-grad norm at every step.
    let Some(py) = torch_python("python_torch (oracle)") else {
        return;
    };
    let log = run_suite(&py, "test_torch_oracle", 5);
    for what in ["run-wide: hook B_simple", "last window: hook B_simple"] {
        assert!(log.contains(what), "{log}");
    }
}
