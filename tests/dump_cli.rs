//! `copus analyze <dump dir> --json`: the real binary reduces F32, F16 and BF16 dumps with odd
//! tensor sizes, and every step's sq_small and sq_big equal the direct f64 reference within
//! 1e-6 relative; a broken dump is a clear error naming the file.

use crate::dump_support;
use copus::compute::DType;
use dump_support::*;
use std::path::Path;
use std::process::Command;

const SIZES: &[(&str, &[usize])] = &[
    ("model.embed_tokens.weight", &[37, 11]),
    ("model.layers.0.mlp.weight", &[1021]),
    ("model.layers.1.attn.bias", &[2053]),
    ("lm_head.weight", &[9, 13]),
];

/// Write `steps` steps of 3 files each; return the reference (step, sq_small, sq_big).
fn write_dump(dir: &Path, dtype: DType, steps: u64, seed: u64) -> Vec<(u64, f64, f64)> {
    let mut r = rng(seed);
    let samples = [4.0, 4.0, 4.0];
    let mut out = Vec::new();
    for step in 0..steps {
        let files: Vec<Vec<T>> = samples
            .iter()
            .map(|_| {
                SIZES
                    .iter()
                    .map(|(name, shape)| {
                        let n: usize = shape.iter().product();
                        let mu: Vec<f64> = (0..n)
                            .map(|i| 0.03 * ((i as f64) * 0.11 + step as f64).cos())
                            .collect();
                        T {
                            name: name.to_string(),
                            dtype,
                            shape: shape.to_vec(),
                            vals: grad(&mut r, dtype, &mu, 0.05),
                        }
                    })
                    .collect()
            })
            .collect();
        for (k, f) in files.iter().enumerate() {
            let p = dir.join(format!("step_{step}/rank{k}.safetensors"));
            write_st(&p, f, Some(&samples[k].to_string()));
        }
        let per = reference(&files, &samples);
        out.push((
            step,
            per.iter().map(|p| p.0).sum(),
            per.iter().map(|p| p.1).sum(),
        ));
    }
    out
}

/// F32 tensors of `sizes` holding 0.5 everywhere.
fn constant(sizes: &[(&str, &[usize])]) -> Vec<T> {
    sizes
        .iter()
        .map(|(name, shape)| T {
            name: name.to_string(),
            dtype: DType::F32,
            shape: shape.to_vec(),
            vals: vec![0.5; shape.iter().product()],
        })
        .collect()
}

/// `copus analyze DIR --device cpu` (the text report), run.
fn analyze_text(dir: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_copus"))
        .args(["analyze", dir.to_str().expect("utf-8"), "--device", "cpu"])
        .output()
        .expect("run copus")
}

fn analyze(dir: &Path, extra: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_copus"))
        .args([
            "analyze",
            dir.to_str().expect("utf-8"),
            "--json",
            "--device",
            "cpu",
        ])
        .args(extra)
        .output()
        .expect("run copus")
}

#[test]
fn analyze_json_matches_the_f64_reference_for_every_dtype() {
    for (i, dtype) in [DType::F32, DType::F16, DType::BF16]
        .into_iter()
        .enumerate()
    {
        let dir = tempfile::tempdir().expect("tempdir");
        let want = write_dump(dir.path(), dtype, 6, 40 + i as u64);
        let out = analyze(dir.path(), &["--seed-ema"]);
        assert!(
            out.status.success(),
            "{dtype:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        let steps = v["steps"].as_array().expect("steps");
        assert_eq!(steps.len(), want.len(), "{dtype:?}");
        for (row, (step, small, big)) in steps.iter().zip(&want) {
            assert_eq!(row["step"].as_u64(), Some(*step));
            let s = row["sq_small"].as_f64().expect("sq_small");
            let b = row["sq_big"].as_f64().expect("sq_big");
            assert!(
                rel(s, *small) < 1e-6,
                "{dtype:?} step {step}: {s} vs {small}"
            );
            assert!(rel(b, *big) < 1e-6, "{dtype:?} step {step}: {b} vs {big}");
        }
        assert!(v["summary"]["b_simple"].is_number() || v["summary"]["b_simple"].is_null());
        let ema = v["seed_ema"]
            .as_array()
            .expect("with --seed-ema the seed's EMA estimate rides along");
        assert_eq!(ema.len(), want.len());
    }
}

fn truncate_half(file: &Path) {
    let bytes = std::fs::read(file).expect("read");
    std::fs::write(file, &bytes[..bytes.len() / 2]).expect("truncate");
}

#[test]
fn a_truncated_dump_file_is_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_dump(dir.path(), DType::F32, 2, 7);
    truncate_half(&dir.path().join("step_0/rank2.safetensors"));
    let out = analyze(dir.path(), &[]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("step_0/rank2.safetensors"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// A trainer still writing its newest step (a file truncated, one missing, tensors to come)
/// does not stop the analysis of the complete steps: that step is left out and named, in
/// the JSON (`left_out_steps`) and in the text; the complete steps read as without it.
#[test]
fn the_newest_step_still_being_written_is_left_out_and_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let want = write_dump(dir.path(), DType::F32, 4, 11);
    let complete = analyze(dir.path(), &[]);
    assert!(complete.status.success());
    let complete: serde_json::Value = serde_json::from_slice(&complete.stdout).expect("JSON");
    assert_eq!(complete["left_out_steps"], serde_json::json!([]));
    let newest = dir.path().join("step_3");
    let cases: [(&str, &dyn Fn()); 5] = [
        ("truncated", &|| {
            truncate_half(&newest.join("rank1.safetensors"))
        }),
        ("2 of the 3 gradient sets step 2 has", &|| {
            std::fs::remove_file(newest.join("rank2.safetensors")).expect("rm");
        }),
        ("no sample count yet", &|| {
            write_st(&newest.join("rank2.safetensors"), &constant(SIZES), None);
        }),
        ("at least 2 gradient files", &|| {
            for k in 1..3 {
                std::fs::remove_file(newest.join(format!("rank{k}.safetensors"))).expect("rm");
            }
        }),
        ("missing (present in", &|| {
            let only = constant(&SIZES[..1]);
            for k in 0..3 {
                write_st(
                    &newest.join(format!("rank{k}.safetensors")),
                    &only,
                    Some("4"),
                );
            }
        }),
    ];
    for (why, damage) in cases {
        std::fs::remove_dir_all(&newest).expect("rm step");
        write_dump(dir.path(), DType::F32, 4, 11);
        damage();
        let out = analyze(dir.path(), &[]);
        assert!(
            out.status.success(),
            "{why}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        let steps: Vec<u64> = v["steps"]
            .as_array()
            .expect("steps")
            .iter()
            .filter_map(|r| r["step"].as_u64())
            .collect();
        assert_eq!(steps, vec![0, 1, 2], "{why}");
        for (row, (_, small, _)) in v["steps"].as_array().expect("steps").iter().zip(&want) {
            let s = row["sq_small"].as_f64().expect("sq_small");
            assert!(rel(s, *small) < 1e-6, "{why}: {s} vs {small}");
        }
        let left = &v["left_out_steps"][0];
        assert_eq!(left["step"].as_u64(), Some(3), "{why}: {v}");
        let reason = left["reason"].as_str().expect("reason");
        assert!(
            reason.contains("step_3") && reason.contains(why),
            "{why}: {reason}"
        );
        let text = analyze_text(dir.path());
        let text = String::from_utf8_lossy(&text.stdout);
        assert!(
            text.contains("note: the newest step, 3, was left out (still being written?)"),
            "{why}: {text}"
        );
    }
}

/// The newest step's benefit of the doubt covers what further writing mends, not faults: a
/// header that is not valid JSON, or a set whose tensor has another shape, is an error naming
/// the file, as in any other step (it was left out with "still being written?" and exit 0; a
/// dump whose second of two steps was broken read as a one-step run).
#[test]
fn a_fault_in_the_newest_step_is_an_error_not_a_step_left_out() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_dump(dir.path(), DType::F32, 3, 13);
    let newest = dir.path().join("step_2");
    let bad = newest.join("rank1.safetensors");
    let header = b"{not json at all}";
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header);
    std::fs::write(&bad, &bytes).expect("write");
    let out = analyze(dir.path(), &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("step_2/rank1.safetensors"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    // Another shape in one set of the newest step.
    write_dump(dir.path(), DType::F32, 3, 13);
    let (name, shape) = SIZES[0];
    let mut other = constant(SIZES);
    other[0] = T {
        name: name.to_string(),
        dtype: DType::F32,
        shape: vec![shape[0] + 1],
        vals: vec![0.5; shape[0] + 1],
    };
    write_st(&bad, &other, Some("4"));
    let out = analyze(dir.path(), &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("rank1.safetensors") && err.contains("shape"),
        "{err}"
    );
    // A set that is a symbolic link to a file that does not exist.
    #[cfg(unix)]
    {
        write_dump(dir.path(), DType::F32, 3, 13);
        std::fs::remove_file(&bad).expect("rm");
        std::os::unix::fs::symlink(dir.path().join("nowhere.safetensors"), &bad).expect("symlink");
        let out = analyze(dir.path(), &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{err}");
        assert!(err.contains("symbolic link that leads to no file"), "{err}");
    }
}

/// A step that is not the newest and lacks a tensor the others have (or has another shape)
/// would have its norms cover other parameters: an error naming the step and the tensor.
#[test]
fn an_earlier_step_with_other_tensors_is_an_error_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_dump(dir.path(), DType::F32, 3, 12);
    let step1 = dir.path().join("step_1");
    let (name, shape) = SIZES[2];
    let mut other = constant(&SIZES[..1]);
    for (what, tensors) in [
        ("missing (present in", other.clone()),
        ("shape [", {
            other.extend(SIZES[1..].iter().map(|(n, s)| T {
                name: n.to_string(),
                dtype: DType::F32,
                shape: if *n == name {
                    vec![shape[0] + 1]
                } else {
                    s.to_vec()
                },
                vals: vec![
                    0.5;
                    if *n == name {
                        shape[0] + 1
                    } else {
                        s.iter().product()
                    }
                ],
            }));
            other.clone()
        }),
    ] {
        for k in 0..3 {
            write_st(
                &step1.join(format!("rank{k}.safetensors")),
                &tensors,
                Some("4"),
            );
        }
        let out = analyze(dir.path(), &[]);
        assert!(!out.status.success(), "{what}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("step_1") && err.contains(what) && err.contains("same tensors"),
            "{what}: {err}"
        );
    }
}

#[test]
fn one_gradient_file_is_named_as_such_and_assumed_tokens_are_said() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_dump(dir.path(), DType::F32, 2, 7);
    // A single file is not a stats stream (it read as 126 malformed lines).
    let file = dir.path().join("step_1/rank2.safetensors");
    let out = Command::new(env!("CARGO_BIN_EXE_copus"))
        .arg("analyze")
        .arg(&file)
        .output()
        .expect("run copus");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("one gradient file") && err.contains("directory"),
        "{err}"
    );
    // Dumps record no tokens: JSON says the sequence length was assumed, text says so too.
    let json = analyze(dir.path(), &[]);
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).expect("json");
    assert_eq!(v["seq_len_assumed"], true, "{v}");
    let given = analyze(dir.path(), &["--seq-len", "2048"]);
    let v: serde_json::Value = serde_json::from_slice(&given.stdout).expect("json");
    assert_eq!(v["seq_len_assumed"], false, "{v}");
    let text = Command::new(env!("CARGO_BIN_EXE_copus"))
        .arg("analyze")
        .arg(dir.path())
        .args(["--device", "cpu"])
        .output()
        .expect("run copus");
    assert!(
        String::from_utf8_lossy(&text.stdout).contains("assume sequences of 4096 tokens"),
        "{}",
        String::from_utf8_lossy(&text.stdout)
    );
}

/// Two directories for one step number (`step_1` and `step_01`) are an error naming both (the
/// step was read twice).
#[test]
fn two_directories_of_one_step_number_are_an_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_dump(dir.path(), DType::F32, 3, 13);
    std::fs::rename(dir.path().join("step_1"), dir.path().join("step_01")).expect("rename");
    write_dump(dir.path(), DType::F32, 3, 13);
    let out = analyze(dir.path(), &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("step 1 again") && err.contains("step_01") && err.contains("step_1"),
        "{err}"
    );
}

/// A directory named `step_…` that is no step number (`step_abc`) is passed over, and said so
/// in the text and the JSON (it had been skipped without a word); the steps are analysed.
#[test]
fn a_step_directory_named_without_a_number_is_named_as_passed_over() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_dump(dir.path(), DType::F32, 3, 17);
    std::fs::rename(dir.path().join("step_2"), dir.path().join("step_abc")).expect("rename");
    std::fs::create_dir(dir.path().join("logs")).expect("dir");
    let out = analyze_text(dir.path());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("note: directory step_abc passed over: not named step_<N>"),
        "{text}"
    );
    assert!(!text.contains("logs"), "{text}");
    let out = analyze(dir.path(), &[]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let skipped = v["skipped_dirs"].as_array().expect("skipped_dirs");
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert!(skipped[0].as_str().is_some_and(|p| p.ends_with("step_abc")));
    assert_eq!(v["steps"].as_array().map(Vec::len), Some(2));
}

/// A dump whose sets all hold one gradient (written after the all-reduce) measures no noise:
/// the text says so where the number would be, not "B_simple now 0.0000 samples … = 0 tokens".
#[test]
fn a_dump_of_one_gradient_per_step_prints_no_number() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_dump(dir.path(), DType::F32, 6, 14);
    for step in 0..6 {
        let s = dir.path().join(format!("step_{step}"));
        for k in 1..3 {
            std::fs::copy(
                s.join("rank0.safetensors"),
                s.join(format!("rank{k}.safetensors")),
            )
            .expect("copy");
        }
    }
    let out = analyze_text(dir.path());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("B_simple now  none: no noise measured")
            && text.contains("run-wide      none: no noise measured"),
        "{text}"
    );
    assert!(
        !text.contains("0.0000 samples") && !text.contains("= 0 tokens"),
        "{text}"
    );
    // The layers' shares of a noise measured to rounding are not shares: none dominates.
    let layers: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("model.") || l.starts_with("lm_head"))
        .collect();
    assert!(!layers.is_empty(), "{text}");
    assert!(
        layers
            .iter()
            .all(|l| l.contains(" 0.0%") && !l.contains("-")),
        "{layers:?}"
    );
    assert!(!text.contains("dominat"), "{text}");
}

/// A tensor written as zeros in every set (an unused or frozen parameter) is a layer with no
/// gradient, said as such, not an "unbounded" B_simple; a dump's summary counts no lines.
#[test]
fn a_layer_of_zeros_reads_as_no_gradient() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut r = rng(15);
    for step in 0..6u64 {
        for k in 0..3 {
            let mu: Vec<f64> = (0..64).map(|i| 0.03 * (i as f64 * 0.1).cos()).collect();
            let tensors = vec![
                T {
                    name: "model.layers.0.w".into(),
                    dtype: DType::F32,
                    shape: vec![64],
                    vals: grad(&mut r, DType::F32, &mu, 0.05),
                },
                T {
                    name: "model.frozen.w".into(),
                    dtype: DType::F32,
                    shape: vec![16],
                    vals: vec![0.0; 16],
                },
            ];
            write_st(
                &dir.path().join(format!("step_{step}/rank{k}.safetensors")),
                &tensors,
                Some("4"),
            );
        }
    }
    let out = analyze_text(dir.path());
    let text = String::from_utf8_lossy(&out.stdout);
    let frozen = text
        .lines()
        .find(|l| l.starts_with("model.frozen"))
        .unwrap_or_else(|| panic!("a row for the frozen layer: {text}"));
    assert!(
        frozen.contains("no gradient") && !frozen.contains("unbounded"),
        "{frozen}"
    );
    assert!(!text.contains("malformed line"), "{text}");
}

/// A sample count is a whole number of samples behind one gradient set: "2.5" or 10²³ in a
/// file, or `--samples 2.5`, is an error naming it (they were read as 2.5 samples, or as a
/// batch of 10²³ that turned the step's tr Σ negative).
#[test]
fn sample_counts_must_be_whole_and_plausible() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_dump(dir.path(), DType::F32, 3, 14);
    let set = dir.path().join("step_1/rank0.safetensors");
    for (count, why) in [
        ("2.5", "whole number"),
        ("99999999999999999999999", "at most 10^9"),
    ] {
        write_st(&set, &constant(SIZES), Some(count));
        let out = analyze(dir.path(), &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{count}: {err}");
        assert!(
            err.contains("step_1/rank0.safetensors") && err.contains(why),
            "{err}"
        );
    }
    write_dump(dir.path(), DType::F32, 3, 14);
    let out = analyze(dir.path(), &["--samples", "2.5"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("whole number"));
}

/// `copus snapshot` takes `--samples` as `open` does: a dump without sample counts, whose
/// error says to pass it, can be shown.
#[test]
fn a_snapshot_of_a_dump_without_counts_takes_samples() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_dump(dir.path(), DType::F32, 3, 15);
    for step in 0..3 {
        for k in 0..3 {
            let f = dir.path().join(format!("step_{step}/rank{k}.safetensors"));
            write_st(&f, &constant(SIZES), None);
        }
    }
    let snapshot = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_copus"))
            .args(["snapshot", dir.path().to_str().expect("utf-8")])
            .args(["--size", "80x24"])
            .args(extra)
            .output()
            .expect("run copus")
    };
    let without = snapshot(&[]);
    let err = String::from_utf8_lossy(&without.stderr);
    assert!(
        !without.status.success() && err.contains("--samples"),
        "{err}"
    );
    let with = snapshot(&["--samples", "4"]);
    assert!(
        with.status.success(),
        "{}",
        String::from_utf8_lossy(&with.stderr)
    );
    assert!(String::from_utf8_lossy(&with.stdout).contains("B_crit"));
}
