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

#[test]
fn a_truncated_dump_file_is_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_dump(dir.path(), DType::F32, 2, 7);
    let victim = dir.path().join("step_1/rank2.safetensors");
    let bytes = std::fs::read(&victim).expect("read");
    std::fs::write(&victim, &bytes[..bytes.len() / 2]).expect("truncate");
    let out = analyze(dir.path(), &[]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("rank2.safetensors"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
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
