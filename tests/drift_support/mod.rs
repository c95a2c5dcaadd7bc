//! Test support for the explorer's drift, located-cause, per-layer and compare views: the
//! shipped sample run, a second run made from it, and explorers opened on them.
#![allow(dead_code)]

use copus::app::App;
use copus::cli::open::{OpenArgs, adhoc_session, prepared};
use std::path::{Path, PathBuf};

/// The shipped sample run (drifts, one lr change, one NaN step, two layers).
pub fn sample_run() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/data/sample-run.ndjson")
}

/// Write run B into `dir`: the sample run with `sq_small` ×1.2 before step 250 (more noise
/// early, so B's B_simple is higher there and the same afterwards); lines that are not JSON
/// records are copied as they are. Returns its path.
pub fn write_compared(dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(sample_run()).expect("sample run");
    let mut out = String::new();
    for line in text.lines() {
        match serde_json::from_str::<serde_json::Value>(line) {
            Ok(mut v) => {
                let early = v["step"].as_u64().is_some_and(|s| s < 250);
                if let (true, Some(x)) = (early, v["sq_small"].as_f64()) {
                    v["sq_small"] = serde_json::json!(x * 1.2);
                }
                out.push_str(&v.to_string());
            }
            Err(_) => out.push_str(line),
        }
        out.push('\n');
    }
    let path = dir.join("run-b.ndjson");
    std::fs::write(&path, out).expect("write run B");
    path
}

/// The explorer opened on stats file `path` as `copus open` does (CPU), optionally with
/// `--compare other`.
pub fn open(path: &Path, other: Option<&Path>) -> anyhow::Result<App> {
    let args = OpenArgs {
        device: copus::compute::Device::Cpu,
        ..OpenArgs::for_path(path)
    };
    let mut app = prepared(adhoc_session(&args)?, args.device)?;
    if let Some(o) = other {
        copus::cli::open_compare::attach(&mut app, o)?;
    }
    Ok(app)
}
