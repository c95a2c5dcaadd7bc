//! The CUDA backend agrees with the CPU backend to f64 rounding (sums and EMA state), on F32,
//! F16 and BF16 with odd sizes. Needs the `cuda` feature (default) and a GPU; prints a visible
//! skip otherwise, and FAILS instead when `COPUS_REQUIRE_GPU=1` (`scripts/gpu_check.sh` sets
//! it, so a check on a GPU machine cannot pass by skipping).
#![cfg(feature = "cuda")]

mod dump_support;
use copus::compute::{Backend, CpuBackend, DType, Device, select};
use copus::source::dump::{DumpOptions, reduce_dump, scan};
use dump_support::*;

/// Whether the caller demands a GPU (`COPUS_REQUIRE_GPU=1`): then a missing one fails.
fn gpu_required() -> bool {
    std::env::var("COPUS_REQUIRE_GPU").is_ok_and(|v| v == "1")
}

fn gpu() -> Option<Box<dyn Backend>> {
    match select(Device::Cuda) {
        Ok(s) => Some(s.backend),
        Err(e) if gpu_required() => {
            panic!("COPUS_REQUIRE_GPU=1 but the CUDA backend cannot start: {e}")
        }
        Err(e) => {
            eprintln!("SKIPPED kernels_gpu: {e}");
            None
        }
    }
}

#[test]
fn requiring_a_gpu_fails_rather_than_skips() {
    // Without a GPU, `COPUS_REQUIRE_GPU=1` must turn the skip into a failure: run this very
    // test binary again with it set and check that `cuda_matches_cpu` fails.
    if gpu_required() || std::env::var("COPUS_KERNELS_GPU_CHILD").is_ok() {
        return;
    }
    if select(Device::Cuda).is_ok() {
        return; // a GPU is here: the real test runs instead
    }
    let out = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args(["cuda_matches_cpu", "--exact", "--nocapture"])
        .env("COPUS_REQUIRE_GPU", "1")
        .env("COPUS_KERNELS_GPU_CHILD", "1")
        .output()
        .expect("rerun the test binary");
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "must fail without a GPU:\n{log}");
    assert!(
        log.contains("COPUS_REQUIRE_GPU=1 but the CUDA backend cannot start"),
        "{log}"
    );
    assert!(!log.contains("SKIPPED"), "{log}");
}

#[test]
fn cuda_matches_cpu() {
    let Some(gpu) = gpu() else { return };
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        let d = tempfile::tempdir().expect("tmp");
        let mut r = rng(7);
        for step in 0..3u64 {
            for (k, s) in ["2", "3", "5"].iter().enumerate() {
                let ts: Vec<T> = [("l.0.w", 100_003usize), ("l.1.w", 1), ("l.2.w", 4_194_311)]
                    .iter()
                    .map(|(n, len)| {
                        let mu: Vec<f64> = (0..*len)
                            .map(|i| 0.01 * ((i + step as usize) as f64).sin())
                            .collect();
                        T {
                            name: n.to_string(),
                            dtype,
                            shape: vec![*len],
                            vals: grad(&mut r, dtype, &mu, 0.02),
                        }
                    })
                    .collect();
                write_st(
                    &d.path().join(format!("step_{step}/r{k}.safetensors")),
                    &ts,
                    Some(s),
                );
            }
        }
        let index = scan(d.path()).expect("scan");
        let opts = DumpOptions {
            ema_decay: Some(0.95),
            ..Default::default()
        };
        let a = reduce_dump(&index, &opts, &CpuBackend::new(), &|_| {}).expect("cpu");
        let b = reduce_dump(&index, &opts, gpu.as_ref(), &|_| {}).expect("gpu");
        for (x, y) in a.steps.iter().zip(&b.steps) {
            assert!(
                rel(y.sq_small, x.sq_small) < 1e-12,
                "{dtype:?} {} vs {}",
                y.sq_small,
                x.sq_small
            );
            assert!(rel(y.sq_big, x.sq_big) < 1e-12, "{dtype:?}");
        }
        for (x, y) in a.ema.iter().zip(&b.ema) {
            assert!(rel(y.signal, x.signal) < 1e-9, "{dtype:?}");
            assert!((y.noise - x.noise).abs() < 1e-9 * x.signal, "{dtype:?}");
        }
        eprintln!("CHECKED {dtype:?} on {}", gpu.name());
    }
}
