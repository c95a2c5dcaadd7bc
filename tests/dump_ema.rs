//! The seed's temporal EMA estimator (element-wise EMA of g and g² across steps, times B)
//! against a direct f64 transcription of `GradientNoiseScaleEstimator.update`.

use crate::dump_support;
use copus::compute::{CpuBackend, DType};
use copus::source::dump::{DumpOptions, EMA_LABEL, reduce_dump, scan};
use dump_support::*;

#[test]
fn ema_estimator_matches_direct_reference() {
    let d = tempfile::tempdir().expect("tmp");
    let mut r = rng(21);
    let samples = [3.0, 5.0];
    let shapes = [("a.0.w", 333usize), ("a.1.w", 70), ("b", 5)];
    let decay = 0.9;
    // Reference state in f64, over the flattened big-batch gradient.
    let n: usize = shapes.iter().map(|s| s.1).sum();
    let (mut m, mut q) = (vec![0.0f64; n], vec![0.0f64; n]);
    let mut want = Vec::new();
    for step in 0..5u64 {
        let files: Vec<Vec<T>> = samples
            .iter()
            .map(|_| {
                shapes
                    .iter()
                    .map(|(name, len)| {
                        let mu: Vec<f64> = (0..*len)
                            .map(|i| 0.02 * ((i as f64) + step as f64 * 0.7).cos())
                            .collect();
                        T {
                            name: name.to_string(),
                            dtype: DType::F32,
                            shape: vec![*len],
                            vals: grad(&mut r, DType::F32, &mu, 0.03),
                        }
                    })
                    .collect()
            })
            .collect();
        for (k, f) in files.iter().enumerate() {
            write_st(
                &d.path().join(format!("step_{step}/r{k}.safetensors")),
                f,
                Some(&samples[k].to_string()),
            );
        }
        let g: Vec<f64> = (0..shapes.len())
            .flat_map(|i| {
                let files = &files;
                (0..shapes[i].1)
                    .map(move |e| (3.0 * files[0][i].vals[e] + 5.0 * files[1][i].vals[e]) / 8.0)
            })
            .collect();
        for e in 0..n {
            if step == 0 {
                (m[e], q[e]) = (g[e], g[e] * g[e]);
            } else {
                m[e] = decay * m[e] + (1.0 - decay) * g[e];
                q[e] = decay * q[e] + (1.0 - decay) * g[e] * g[e];
            }
        }
        let noise: f64 = (0..n).map(|e| q[e] - m[e] * m[e]).sum();
        let signal: f64 = m.iter().map(|x| x * x).sum();
        want.push((noise, signal, noise / signal * 8.0));
    }
    let index = scan(d.path()).expect("scan");
    let opts = DumpOptions {
        ema_decay: Some(decay),
        segment_elems: Some(64),
        ..Default::default()
    };
    let out = reduce_dump(&index, &opts, &CpuBackend::new(), &|_| {}).expect("reduce");
    assert_eq!(out.ema.len(), 5);
    assert_eq!(out.steps.len(), 5);
    for (p, (noise, signal, est)) in out.ema.iter().zip(&want) {
        assert_eq!(p.label, EMA_LABEL);
        assert_eq!(p.b, 8.0);
        assert!(
            rel(p.signal, *signal) < 1e-6,
            "signal {} vs {signal}",
            p.signal
        );
        // The state is f32 (as the seed's tensors): noise is a difference of f32-rounded terms.
        assert!(
            (p.noise - noise).abs() < 1e-5 * signal,
            "step {}: noise {} vs {noise}",
            p.step,
            p.noise
        );
        if p.step > 0 {
            let got = p.b_estimate.expect("estimate");
            assert!(rel(got, *est) < 1e-3, "step {}: {got} vs {est}", p.step);
        }
    }
}

/// The EMA state is one value per element of the same tensors: a step (not the newest) that
/// holds other tensors stops the scan, naming the step and the tensor, before any EMA runs.
#[test]
fn ema_needs_the_same_tensors_every_step() {
    let d = tempfile::tempdir().expect("tmp");
    let t = |n: &str| {
        vec![T {
            name: n.into(),
            dtype: DType::F32,
            shape: vec![2],
            vals: vec![1.0, 2.0],
        }]
    };
    for k in 0..2 {
        for (step, name) in [(0, "x"), (1, "y"), (2, "x")] {
            write_st(
                &d.path().join(format!("step_{step}/r{k}.safetensors")),
                &t(name),
                Some("1"),
            );
        }
    }
    let e = scan(d.path()).expect_err("changed").to_string();
    assert!(
        e.contains("step_1") && e.contains("tensor x") && e.contains("missing"),
        "{e}"
    );
}

#[test]
fn ema_restarts_after_a_non_finite_step() {
    let d = tempfile::tempdir().expect("tmp");
    let t = |v: f64| {
        vec![T {
            name: "w".into(),
            dtype: DType::F32,
            shape: vec![3],
            vals: vec![v, 1.0, 2.0],
        }]
    };
    for (step, v) in [(0u64, 1.0), (1, f64::NAN), (2, 3.0), (3, 5.0)] {
        write_st(
            &d.path().join(format!("step_{step}/r0.safetensors")),
            &t(v),
            Some("1"),
        );
        write_st(
            &d.path().join(format!("step_{step}/r1.safetensors")),
            &t(1.0),
            Some("1"),
        );
    }
    let index = scan(d.path()).expect("scan");
    let opts = DumpOptions {
        ema_decay: Some(0.5),
        ..Default::default()
    };
    let out = reduce_dump(&index, &opts, &CpuBackend::new(), &|_| {}).expect("reduce");
    assert!(out.steps[1].skipped.is_some());
    assert_eq!(
        (out.ema[1].noise, out.ema[1].signal, out.ema[1].b_estimate),
        (0.0, 0.0, None)
    );
    assert!(serde_json::to_string(&out.ema[1]).is_ok());
    // Step 2 restarts: the state is set to g, so the noise is zero; step 3 blends again.
    assert!(out.ema[2].noise.abs() < 1e-6 * out.ema[2].signal);
    // g2 = (2, 1, 2), g3 = (3, 1, 2): EMA[g] = (2.5, 1, 2), EMA[g²] = (6.5, 1, 4) → noise 0.25.
    assert!(
        (out.ema[3].noise - 0.25).abs() < 1e-6,
        "{}",
        out.ema[3].noise
    );
    assert!((out.ema[3].b_estimate.expect("est") - 2.0 * 0.25 / 11.25).abs() < 1e-6);
}
