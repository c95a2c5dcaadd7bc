//! Bad input gives a clear error naming the file and the tensor, never a panic.

use crate::dump_support;
use copus::compute::{CpuBackend, DType};
use copus::source::dump::{DumpOptions, reduce_steps, scan};
use dump_support::*;
use std::path::Path;

fn tensors(n: usize) -> Vec<T> {
    vec![
        T {
            name: "layers.0.w".into(),
            dtype: DType::F32,
            shape: vec![n],
            vals: (0..n).map(|i| i as f64).collect(),
        },
        T {
            name: "layers.1.w".into(),
            dtype: DType::F32,
            shape: vec![2, 3],
            vals: vec![1.0; 6],
        },
    ]
}

fn err_of(dir: &Path) -> String {
    let res = scan(dir)
        .and_then(|i| reduce_steps(&i, &DumpOptions::default(), &CpuBackend::new(), &|_| {}));
    res.expect_err("bad input must fail").to_string()
}

fn two_good(dir: &Path) {
    write_st(&dir.join("step_0/a.safetensors"), &tensors(5), Some("4"));
    write_st(&dir.join("step_0/b.safetensors"), &tensors(5), Some("4"));
}

#[test]
fn truncated_file_names_file_and_tensor() {
    let d = tempfile::tempdir().expect("tmp");
    two_good(d.path());
    let p = d.path().join("step_0/b.safetensors");
    let bytes = std::fs::read(&p).expect("read");
    std::fs::write(&p, &bytes[..bytes.len() - 3]).expect("write");
    let e = err_of(d.path());
    assert!(
        e.contains("b.safetensors") && e.contains("layers.") && e.contains("truncated"),
        "{e}"
    );
}

#[test]
fn truncated_inside_the_header() {
    let d = tempfile::tempdir().expect("tmp");
    two_good(d.path());
    let p = d.path().join("step_0/a.safetensors");
    let bytes = std::fs::read(&p).expect("read");
    std::fs::write(&p, &bytes[..20]).expect("write");
    let e = err_of(d.path());
    assert!(
        e.contains("a.safetensors") && e.contains("truncated"),
        "{e}"
    );
}

#[test]
fn header_offsets_past_the_end_name_the_tensor() {
    let d = tempfile::tempdir().expect("tmp");
    two_good(d.path());
    let p = d.path().join("step_0/a.safetensors");
    // Rewrite the header so that layers.1.w claims more bytes than the file holds.
    let bytes = std::fs::read(&p).expect("read");
    let n = u64::from_le_bytes(bytes[..8].try_into().expect("8")) as usize;
    let mut h: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).expect("json");
    let end = h["layers.1.w"]["data_offsets"][1].as_u64().expect("end");
    h["layers.1.w"]["data_offsets"][1] = (end + 4000).into();
    h["layers.1.w"]["shape"] = serde_json::json!([2, 503]);
    let hs = serde_json::to_vec(&h).expect("ser");
    let mut out = (hs.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&hs);
    out.extend_from_slice(&bytes[8 + n..]);
    std::fs::write(&p, out).expect("write");
    let e = err_of(d.path());
    assert!(
        e.contains("a.safetensors") && e.contains("layers.1.w"),
        "{e}"
    );
}

#[test]
fn mismatched_shapes_and_names_name_file_and_tensor() {
    let d = tempfile::tempdir().expect("tmp");
    write_st(
        &d.path().join("step_0/a.safetensors"),
        &tensors(5),
        Some("4"),
    );
    write_st(
        &d.path().join("step_0/b.safetensors"),
        &tensors(6),
        Some("4"),
    );
    let e = err_of(d.path());
    assert!(
        e.contains("b.safetensors") && e.contains("layers.0.w") && e.contains("shape"),
        "{e}"
    );

    let d = tempfile::tempdir().expect("tmp");
    let mut renamed = tensors(5);
    renamed[1].name = "layers.1.v".into();
    write_st(
        &d.path().join("step_0/a.safetensors"),
        &tensors(5),
        Some("4"),
    );
    write_st(&d.path().join("step_0/b.safetensors"), &renamed, Some("4"));
    let e = err_of(d.path());
    assert!(
        e.contains("b.safetensors") && e.contains("layers.1.w") && e.contains("missing"),
        "{e}"
    );

    let d = tempfile::tempdir().expect("tmp");
    let mut more = tensors(5);
    more.push(T {
        name: "zz.extra".into(),
        dtype: DType::F32,
        shape: vec![1],
        vals: vec![0.0],
    });
    write_st(
        &d.path().join("step_0/a.safetensors"),
        &tensors(5),
        Some("4"),
    );
    write_st(&d.path().join("step_0/b.safetensors"), &more, Some("4"));
    let e = err_of(d.path());
    assert!(e.contains("b.safetensors") && e.contains("zz.extra"), "{e}");
}

fn replace_first(bytes: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let at = bytes
        .windows(from.len())
        .position(|w| w == from)
        .expect("pattern");
    let mut out = bytes.to_vec();
    out[at..at + from.len()].copy_from_slice(to);
    out
}

#[test]
fn unknown_dtypes_name_file_and_tensor() {
    // A dtype safetensors knows but copus does not reduce (I32).
    let d = tempfile::tempdir().expect("tmp");
    two_good(d.path());
    let p = d.path().join("step_0/a.safetensors");
    let bytes = std::fs::read(&p).expect("read");
    std::fs::write(&p, replace_first(&bytes, b"\"F32\"", b"\"I32\"")).expect("write");
    let e = err_of(d.path());
    assert!(
        e.contains("a.safetensors") && e.contains("layers.") && e.contains("I32"),
        "{e}"
    );
    // A dtype nobody knows ("Q7"; same length as "F32" keeps the offsets valid).
    std::fs::write(&p, replace_first(&bytes, b"\"F32\"", b"\"Q7X\"")).expect("write");
    let e = err_of(d.path());
    assert!(
        e.contains("a.safetensors") && e.contains("layers.") && e.contains("Q7X"),
        "{e}"
    );
}

#[test]
fn a_step_with_one_file_is_an_error() {
    let d = tempfile::tempdir().expect("tmp");
    write_st(
        &d.path().join("step_7/only.safetensors"),
        &tensors(5),
        Some("4"),
    );
    let e = err_of(d.path());
    assert!(
        e.contains("step_7") && e.contains("at least 2") && e.contains("found 1"),
        "{e}"
    );
}

#[test]
fn an_empty_directory_is_an_error() {
    let d = tempfile::tempdir().expect("tmp");
    let e = err_of(d.path());
    assert!(e.contains("no gradient dump"), "{e}");
}

#[test]
fn non_finite_values_flag_the_step_with_file_and_tensor() {
    let d = tempfile::tempdir().expect("tmp");
    let mut bad = tensors(5);
    bad[0].vals[3] = f64::NAN;
    bad[0].vals[4] = f64::INFINITY;
    write_st(
        &d.path().join("step_0/a.safetensors"),
        &tensors(5),
        Some("4"),
    );
    write_st(&d.path().join("step_0/b.safetensors"), &bad, Some("4"));
    write_st(
        &d.path().join("step_1/a.safetensors"),
        &tensors(5),
        Some("4"),
    );
    write_st(
        &d.path().join("step_1/b.safetensors"),
        &tensors(5),
        Some("4"),
    );
    let i = scan(d.path()).expect("scan");
    let s = reduce_steps(&i, &DumpOptions::default(), &CpuBackend::new(), &|_| {}).expect("reduce");
    let why = s[0].skipped.as_deref().expect("flagged");
    assert!(
        why.starts_with("non-finite")
            && why.contains("b.safetensors")
            && why.contains("layers.0.w")
            && why.contains("2 NaN/Inf"),
        "{why}"
    );
    assert!(s[0].sq_small.is_finite() && s[0].sq_big.is_finite());
    assert!(serde_json::to_string(&s[0]).is_ok());
    assert!(s[1].skipped.is_none() && s[1].sq_small > 0.0);
    // The analysis's diagnostic names them too (it said only "1 step(s) with NaN/Inf values").
    let mut records = s.clone();
    for k in 2..80u64 {
        let mut r = s[1].clone();
        r.step = k;
        records.push(r);
    }
    let report = copus::stats::analyze(&records, &copus::stats::EstimatorSettings::default())
        .expect("analysis");
    let said = report
        .summary
        .diagnostics
        .iter()
        .find(|d| d.kind == copus::stats::DiagnosticKind::NonFiniteSkipped)
        .map(|d| d.message.clone())
        .expect("non_finite_skipped");
    assert!(
        said.contains("step 0") && said.contains("b.safetensors") && said.contains("layers.0.w"),
        "{said}"
    );
}

#[test]
fn shape_disagreeing_with_offsets_names_the_tensor() {
    let d = tempfile::tempdir().expect("tmp");
    two_good(d.path());
    let p = d.path().join("step_0/b.safetensors");
    let bytes = std::fs::read(&p).expect("read");
    // [2,3] → [3,3]: same text length, 9 elements but 24 bytes of offsets.
    std::fs::write(&p, replace_first(&bytes, b"[2,3]", b"[3,3]")).expect("write");
    let e = err_of(d.path());
    assert!(
        e.contains("b.safetensors") && e.contains("layers.1.w"),
        "{e}"
    );
}

/// A directory numbered like a step that is none (`step_-1`, one past 2^64 − 1) is an error
/// naming it (its gradients were passed over without a word); other names stay the user's.
#[test]
fn a_step_directory_whose_number_is_no_step_is_named() {
    for bad in ["step_-1", "step_18446744073709551616"] {
        let d = tempfile::tempdir().expect("tmp");
        two_good(d.path());
        write_st(
            &d.path().join(bad).join("a.safetensors"),
            &tensors(5),
            Some("4"),
        );
        write_st(
            &d.path().join(bad).join("b.safetensors"),
            &tensors(5),
            Some("4"),
        );
        let e = err_of(d.path());
        assert!(e.contains(bad) && e.contains("not a step number"), "{e}");
    }
    let d = tempfile::tempdir().expect("tmp");
    two_good(d.path());
    std::fs::create_dir_all(d.path().join("step_notes")).expect("dir");
    std::fs::create_dir_all(d.path().join("notes")).expect("dir");
    let index = scan(d.path()).expect("scans");
    assert_eq!(index.skipped_dirs, vec![d.path().join("step_notes")]);
}
