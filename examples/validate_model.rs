//! Prints the performance model against every published table in `assets/validation/`:
//! `cargo run --release --example validate_model`.

use copus::perf::validation::{self, error_summary};
use copus::profiles;
use std::path::Path;

fn main() -> anyhow::Result<()> {
    // `--tsv`: one tab-separated line per scored row (set, model, hardware, split, GPUs, DP,
    // TP, PP, CP, relative error, data-parallel seconds, step seconds) for analysis scripts.
    let tsv = std::env::args().any(|a| a == "--tsv");
    let mut files: Vec<_> = std::fs::read_dir("assets/validation")?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "csv"))
        .collect();
    files.sort();
    for file in files {
        let text = std::fs::read_to_string(&file)?;
        let rows = validation::parse(&text, &file.display().to_string())?;
        println!("== {}", file.display());
        let mut errors = Vec::new();
        for row in &rows {
            let hw = profiles::hardware(&row.hardware, Path::new("."))?;
            match validation::score(row, &hw, &hw.efficiency) {
                Ok(s) => {
                    let b = s.prediction.breakdown;
                    if tsv {
                        let c = &row.config;
                        println!(
                            "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{:.4}\t{:.4}\t{:.4}",
                            row.set,
                            row.model.name,
                            row.hardware,
                            if row.train { "train" } else { "test" },
                            c.gpus(),
                            c.dp,
                            c.tp,
                            c.pp,
                            c.cp,
                            s.rel_error,
                            b.dp_s,
                            s.prediction.step_time_s,
                        );
                        errors.push(s.rel_error);
                        continue;
                    }
                    println!(
                        "{:11} {:10} {:34} pub {:6.1} pred {:6.1} err {:+6.1}%  [comp {:.2} bub {:.2} tp {:.2} pp {:.2} dp {:.2} opt {:.2}] mem {:.0}GB{}",
                        row.set,
                        row.model.name,
                        s.config.to_string(),
                        row.tflops,
                        s.tflops,
                        s.rel_error * 100.0,
                        b.compute_s,
                        b.bubble_s,
                        b.tp_s,
                        b.pp_s,
                        b.dp_s,
                        b.optimizer_s,
                        s.prediction.memory_per_gpu_bytes / 1e9,
                        if s.prediction.fits {
                            ""
                        } else {
                            " DOES NOT FIT"
                        }
                    );
                    errors.push(s.rel_error);
                }
                Err(e) => println!("{:11} {:10} cannot run: {e}", row.set, row.model.name),
            }
        }
        let (mean, worst) = error_summary(&errors);
        println!(
            "mean |err| {:.1}%  worst {:.1}%",
            mean * 100.0,
            worst * 100.0
        );
    }
    Ok(())
}
