//! The .npy layout (`step_<N>/<part>/<tensor>.npy` + `samples.txt`) gives the same statistics
//! as the f64 reference and as the same data in safetensors.

use crate::dump_support;
use copus::compute::{CpuBackend, DType};
use copus::source::dump::{DumpOptions, reduce_steps, scan};
use dump_support::*;

#[test]
fn npy_dump_matches_reference_and_safetensors() {
    for dtype in [DType::F32, DType::F16] {
        let npy_dir = tempfile::tempdir().expect("tmp");
        let st_dir = tempfile::tempdir().expect("tmp");
        let mut r = rng(11);
        let samples = [2.0, 6.0];
        let shapes: [(&str, Vec<usize>); 3] = [
            ("blocks.0.w", vec![17, 3]),
            ("blocks.1.w", vec![101]),
            ("head.b", vec![1]),
        ];
        let files: Vec<Vec<T>> = samples
            .iter()
            .map(|_| {
                shapes
                    .iter()
                    .map(|(n, s)| {
                        let mu: Vec<f64> = (0..s.iter().product::<usize>())
                            .map(|i| 0.01 * i as f64)
                            .collect();
                        T {
                            name: n.to_string(),
                            dtype,
                            shape: s.clone(),
                            vals: grad(&mut r, dtype, &mu, 0.1),
                        }
                    })
                    .collect()
            })
            .collect();
        for (k, f) in files.iter().enumerate() {
            let part = npy_dir.path().join(format!("step_5/rank{k}"));
            for t in f {
                write_npy(&part.join(format!("{}.npy", t.name)), t);
            }
            // The second part's count written with a byte-order mark (Notepad, PowerShell): read
            // as the number it is (it was refused).
            let bom = if k == 1 { "\u{feff}" } else { "" };
            std::fs::write(part.join("samples.txt"), format!("{bom}{}\n", samples[k]))
                .expect("samples");
            write_st(
                &st_dir.path().join(format!("step_5/rank{k}.safetensors")),
                f,
                Some(&samples[k].to_string()),
            );
        }
        let run = |d: &std::path::Path| {
            let i = scan(d).expect("scan");
            reduce_steps(&i, &DumpOptions::default(), &CpuBackend::new(), &|_| {}).expect("reduce")
        };
        let (a, b) = (run(npy_dir.path()), run(st_dir.path()));
        let per = reference(&files, &samples);
        let (small, big): (f64, f64) =
            (per.iter().map(|p| p.0).sum(), per.iter().map(|p| p.1).sum());
        assert_eq!(a[0].step, 5);
        assert!(
            rel(a[0].sq_small, small) < 1e-6 && rel(a[0].sq_big, big) < 1e-6,
            "{dtype:?}"
        );
        assert!(rel(a[0].sq_small, b[0].sq_small) < 1e-12 && rel(a[0].sq_big, b[0].sq_big) < 1e-12);
        assert_eq!(
            a[0].layers.keys().collect::<Vec<_>>(),
            vec!["blocks.0", "blocks.1", "head"]
        );
        assert_eq!((a[0].b_big, a[0].n_small), (8.0, Some(2)));
    }
}

#[test]
fn npy_bad_inputs_name_the_file() {
    let d = tempfile::tempdir().expect("tmp");
    let t = T {
        name: "w".into(),
        dtype: DType::F32,
        shape: vec![4],
        vals: vec![1.0; 4],
    };
    write_npy(&d.path().join("step_0/a/w.npy"), &t);
    write_npy(&d.path().join("step_0/b/w.npy"), &t);
    let p = d.path().join("step_0/b/w.npy");
    let bytes = std::fs::read(&p).expect("read");
    std::fs::write(&p, &bytes[..bytes.len() - 2]).expect("write");
    let e = scan(d.path()).expect_err("truncated").to_string();
    assert!(e.contains("b/w.npy") && e.contains("tensor w"), "{e}");
    let mut out = bytes[..bytes.len() - 16].to_vec();
    let at = out.windows(3).position(|w| w == b"<f4").expect("descr");
    out[at..at + 3].copy_from_slice(b"<f8");
    out.extend_from_slice(&[0u8; 32]);
    std::fs::write(&p, out).expect("write");
    let e = scan(d.path()).expect_err("f64").to_string();
    assert!(e.contains("b/w.npy") && e.contains("<f8"), "{e}");
    // More data than the header's shape describes (half the tensor was read without a word).
    let mut longer = bytes.clone();
    longer.extend_from_slice(&[0u8; 16]);
    std::fs::write(&p, longer).expect("write");
    let e = scan(d.path()).expect_err("trailing data").to_string();
    assert!(
        e.contains("b/w.npy") && e.contains("16 bytes after the data"),
        "{e}"
    );
}
