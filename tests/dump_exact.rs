//! Exactness: per-step and per-layer sq_small / sq_big from the CPU backend equal a direct f64
//! reference within 1e-6 relative, on F32, F16 and BF16 dumps with odd tensor sizes, unequal
//! sample counts, and segment sizes that split tensors unevenly.

use crate::dump_support;
use copus::compute::{CpuBackend, DType};
use copus::source::dump::{DumpOptions, layer_key, reduce_steps, scan};
use dump_support::*;

const SIZES: &[(&str, &[usize])] = &[
    ("model.embed_tokens.weight", &[37, 11]),
    ("model.layers.0.mlp.weight", &[1021]),
    ("model.layers.0.mlp.bias", &[1]),
    ("model.layers.1.attn.weight", &[3, 5, 7]),
    ("model.layers.1.attn.bias", &[2053]),
    ("lm_head.weight", &[9, 13]),
];

fn check(dtype: DType, segment: Option<usize>, seed: u64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut r = rng(seed);
    let samples = [4.0, 4.0, 8.0];
    let mut steps_ref = Vec::new();
    for step in [3u64, 10] {
        let mus: Vec<Vec<f64>> = SIZES
            .iter()
            .map(|(_, s)| {
                let n = s.iter().product();
                (0..n)
                    .map(|i| 0.02 * ((i as f64) * 0.37 + step as f64).sin())
                    .collect()
            })
            .collect();
        let files: Vec<Vec<T>> = samples
            .iter()
            .map(|_| {
                SIZES
                    .iter()
                    .zip(&mus)
                    .map(|((name, shape), mu)| T {
                        name: name.to_string(),
                        dtype,
                        shape: shape.to_vec(),
                        vals: grad(&mut r, dtype, mu, 0.05),
                    })
                    .collect()
            })
            .collect();
        for (k, f) in files.iter().enumerate() {
            let p = dir.path().join(format!("step_{step}/rank{k}.safetensors"));
            write_st(&p, f, Some(&samples[k].to_string()));
        }
        steps_ref.push((step, files));
    }
    let index = scan(dir.path()).expect("scan");
    let opts = DumpOptions {
        segment_elems: segment,
        ..Default::default()
    };
    let stats = reduce_steps(&index, &opts, &CpuBackend::new(), &|_| {}).expect("reduce");
    assert_eq!(stats.len(), 2);
    for ((step, files), s) in steps_ref.iter().zip(&stats) {
        let per = reference(files, &samples);
        let small: f64 = per.iter().map(|p| p.0).sum();
        let big: f64 = per.iter().map(|p| p.1).sum();
        assert_eq!(s.step, *step);
        assert!(
            rel(s.sq_small, small) < 1e-6,
            "{dtype:?} sq_small {} vs {small}",
            s.sq_small
        );
        assert!(
            rel(s.sq_big, big) < 1e-6,
            "{dtype:?} sq_big {} vs {big}",
            s.sq_big
        );
        assert_eq!(s.b_big, 16.0);
        assert!(rel(s.b_small, 3.0 / (0.25 + 0.25 + 0.125)) < 1e-12);
        assert_eq!(s.n_small, Some(3));
        assert!(s.skipped.is_none());
        // Per layer.
        let mut want = std::collections::BTreeMap::<String, (f64, f64)>::new();
        for ((name, _), p) in SIZES.iter().zip(&per) {
            let e = want.entry(layer_key(name)).or_default();
            e.0 += p.0;
            e.1 += p.1;
        }
        assert_eq!(
            s.layers.keys().collect::<Vec<_>>(),
            want.keys().collect::<Vec<_>>()
        );
        for (k, (ws, wb)) in &want {
            assert!(rel(s.layers[k].sq_small, *ws) < 1e-6, "{k}");
            assert!(rel(s.layers[k].sq_big, *wb) < 1e-6, "{k}");
        }
    }
}

#[test]
fn f32_matches_f64_reference() {
    check(DType::F32, None, 1);
    check(DType::F32, Some(100), 2);
}

#[test]
fn f16_matches_f64_reference() {
    check(DType::F16, None, 3);
    check(DType::F16, Some(77), 4);
}

#[test]
fn bf16_matches_f64_reference() {
    check(DType::BF16, None, 5);
    check(DType::BF16, Some(9), 6);
}

#[test]
fn samples_option_overrides_metadata_and_missing_samples_is_an_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let t = |v: f64| {
        vec![T {
            name: "w".into(),
            dtype: DType::F32,
            shape: vec![3],
            vals: vec![v, 1.0, 2.0],
        }]
    };
    write_st(&dir.path().join("step_1/a.safetensors"), &t(1.0), None);
    write_st(&dir.path().join("step_1/b.safetensors"), &t(3.0), Some("2"));
    let index = scan(dir.path()).expect("scan");
    let err = reduce_steps(&index, &DumpOptions::default(), &CpuBackend::new(), &|_| {})
        .expect_err("no samples");
    assert!(
        err.to_string().contains("a.safetensors") && err.to_string().contains("samples"),
        "{err}"
    );
    let opts = DumpOptions {
        samples: Some(5.0),
        ..Default::default()
    };
    let s = &reduce_steps(&index, &opts, &CpuBackend::new(), &|_| {}).expect("reduce")[0];
    assert_eq!((s.b_small, s.b_big), (5.0, 10.0));
    assert!(rel(s.sq_small, (1.0 + 1.0 + 4.0 + 9.0 + 1.0 + 4.0) / 2.0) < 1e-12);
    assert!(rel(s.sq_big, 4.0 + 1.0 + 4.0) < 1e-12);
}

#[test]
fn progress_is_monotonic_and_reaches_the_total() {
    let dir = tempfile::tempdir().expect("tempdir");
    let t = |n: usize| {
        vec![T {
            name: "x.w".into(),
            dtype: DType::BF16,
            shape: vec![n],
            vals: vec![0.5; n],
        }]
    };
    for step in 0..3 {
        for k in 0..2 {
            write_st(
                &dir.path().join(format!("step_{step}/r{k}.safetensors")),
                &t(1000),
                Some("1"),
            );
        }
    }
    let index = scan(dir.path()).expect("scan");
    let seen = std::cell::RefCell::new(Vec::new());
    let opts = DumpOptions {
        segment_elems: Some(100),
        ..Default::default()
    };
    reduce_steps(&index, &opts, &CpuBackend::new(), &|p| {
        seen.borrow_mut().push(p)
    })
    .expect("reduce");
    let seen = seen.into_inner();
    let total = 2 * 2 * 3 * 1000_u64;
    assert!(!seen.is_empty());
    assert!(
        seen.windows(2)
            .all(|w| w[0].bytes_done <= w[1].bytes_done && w[0].step <= w[1].step)
    );
    assert!(seen.iter().all(|p| p.bytes_total == total));
    assert_eq!(
        seen.last().map(|p| (p.step, p.bytes_done)),
        Some((2, total))
    );
}

/// The index keeps the tensors of the first step only (the reference); later steps are read
/// again when reduced, so the index does not grow with steps × tensors (1,000 steps of 2,000
/// tensors held 900 MB of entries), and the reduction is the same. A step whose gradient sets
/// change between the scan and the reduction is an error naming it.
#[test]
fn the_index_keeps_one_steps_tensors_and_rereads_the_rest() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut r = rng(21);
    let tensors = |r: &mut _| -> Vec<T> {
        SIZES
            .iter()
            .map(|(name, shape)| {
                let n: usize = shape.iter().product();
                T {
                    name: name.to_string(),
                    dtype: DType::F32,
                    shape: shape.to_vec(),
                    vals: grad(r, DType::F32, &vec![0.01; n], 0.05),
                }
            })
            .collect()
    };
    for step in 0..4u64 {
        for k in 0..2 {
            let p = dir.path().join(format!("step_{step}/rank{k}.safetensors"));
            write_st(&p, &tensors(&mut r), Some("4"));
        }
    }
    let index = scan(dir.path()).expect("scan");
    assert_eq!(index.steps.len(), 4);
    assert!(
        index.steps[0]
            .files
            .iter()
            .all(|f| f.tensors.len() == SIZES.len())
    );
    for s in &index.steps[1..] {
        assert!(
            s.files.iter().all(|f| f.tensors.is_empty()),
            "step {}",
            s.step
        );
        assert_eq!(s.bytes(), index.steps[0].bytes());
    }
    let opts = DumpOptions::default();
    let stats = reduce_steps(&index, &opts, &CpuBackend::new(), &|_| {}).expect("reduce");
    assert_eq!(stats.len(), 4);
    assert!(stats.iter().all(|s| s.sq_small > 0.0 && s.sq_big > 0.0));
    // A third set appears in step 2 after the scan.
    let extra = dir.path().join("step_2/rank2.safetensors");
    write_st(&extra, &tensors(&mut r), Some("4"));
    let err = reduce_steps(&index, &opts, &CpuBackend::new(), &|_| {})
        .expect_err("the step changed")
        .to_string();
    assert!(err.contains("step_2") && err.contains("changed"), "{err}");
}
