//! The PyTorch hook's protocol writer (plain python3, no torch): its own unittest suite, and
//! its output read back by copus's parser.

use copus::source::live::parse_record;
use std::path::PathBuf;
use std::process::{Command, Output};

fn python_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("assets/python")
}

fn python3(args: &[&str]) -> Output {
    Command::new("python3")
        .args(args)
        .current_dir(python_dir())
        .output()
        .unwrap_or_else(|e| {
            panic!("python3 is needed to test assets/python/copus_hook.py but could not run: {e}")
        })
}

#[test]
fn hook_unittests_pass_under_plain_python3() {
    let out = python3(&["-m", "unittest", "-v", "test_copus_hook"]);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "python unittest failed:\n{log}");
    assert!(log.contains("Ran 10 tests"), "{log}");
}

#[test]
fn records_written_by_the_hook_parse_in_copus() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("hook.ndjson");
    let script = format!(
        r#"
import copus_hook as h
w = h.open_writer(path={path:?}, rank=0)
w.write(h.make_record(0, 8, 64, 4096.0, 1024.0, n_small=8, loss=2.5, lr=1e-3, loss_scale=32.0,
                      layers={{"attn": (2048.0, 512.0), "mlp": (2048.0, 512.0)}}))
w.write(h.make_record(1, 8, 64, float("inf"), 1.0, loss=float("nan")))
w.close()
"#,
        path = path.to_str().expect("utf-8 path")
    );
    let out = python3(&["-c", &script]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&path).expect("hook output");
    let recs: Vec<_> = text
        .lines()
        .map(|l| parse_record(l).expect("copus parses the hook's line"))
        .collect();
    assert_eq!(recs.len(), 2);
    let r = &recs[0];
    assert_eq!(
        (r.step, r.b_small, r.b_big, r.n_small),
        (0, 8.0, 64.0, Some(8))
    );
    assert_eq!(
        (r.sq_small, r.sq_big),
        (4.0, 1.0),
        "AMP loss scale divided out squared"
    );
    assert_eq!(r.layers["attn"].sq_small, 2.0);
    assert!(r.skipped.is_none());
    let flagged = recs[1].skipped.as_deref().expect("non-finite step flagged");
    assert!(
        flagged.contains("non-finite") && flagged.contains("sq_small") && flagged.contains("loss")
    );
}
