//! A NaN in a gradient dump is the same event as a NaN in a stats file: counted in
//! `non_finite_skipped` and reported as a located `non_finite_skipped` diagnostic.

use crate::dump_support;

use copus::compute::{CpuBackend, DType};
use copus::source::measured::load_dump_dir;
use copus::stats::{DiagnosticKind as K, EstimatorSettings};
use dump_support::*;

fn tensor(r: &mut rand::rngs::StdRng, name: &str) -> T {
    let mu: Vec<f64> = (0..64).map(|i| 0.05 * (i as f64).sin()).collect();
    T {
        name: name.into(),
        dtype: DType::F32,
        shape: vec![64],
        vals: grad(r, DType::F32, &mu, 0.5),
    }
}

#[test]
fn a_nan_in_a_dump_is_counted_as_non_finite() {
    let d = tempfile::tempdir().expect("tmp");
    let mut r = rng(7);
    for step in 0..6 {
        for file in ["a", "b", "c"] {
            let mut t = vec![tensor(&mut r, "layers.0.w"), tensor(&mut r, "layers.1.w")];
            if step == 3 && file == "b" {
                t[1].vals[5] = f64::NAN;
            }
            write_st(
                &d.path().join(format!("step_{step}/{file}.safetensors")),
                &t,
                Some("4"),
            );
        }
    }
    let a = load_dump_dir(
        d.path(),
        None,
        None,
        &CpuBackend::new(),
        &EstimatorSettings::default(),
        2048,
        &|_| {},
    )
    .expect("analysis");
    let s = &a.report.summary;
    assert_eq!(s.non_finite_skipped, 1);
    assert_eq!(s.steps, 5);
    let nf = s
        .diagnostics
        .iter()
        .find(|d| d.kind == K::NonFiniteSkipped)
        .expect("non-finite diagnostic");
    assert_eq!(nf.steps, Some([3, 3]));
    assert!(!s.diagnostics.iter().any(|d| d.kind == K::ProducerSkipped));
}
