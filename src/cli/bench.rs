//! `copus bench`: generate a gradient dump of a given size in a temporary directory and
//! measure the reduction's bandwidth (GB/s of tensor bytes) beside a plain memory-read
//! baseline (summing the mapped bytes as u64 on all cores) in the same run, on the CPU and,
//! when present, on CUDA.

use crate::compute::{DType, Device, select};
use crate::source::dump::synth::{SynthSpec, write_dump};
use crate::source::dump::{DumpOptions, Progress, reduce_steps, scan};
use clap::Args;
use rayon::prelude::*;
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::Instant;

/// Arguments of `copus bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Size of the generated dump (one step, 4 F32 files), MB.
    #[arg(long, default_value_t = 256)]
    pub size_mb: u64,
    /// Backend: auto measures the CPU and, when present, CUDA.
    #[arg(long, value_enum, default_value_t = Device::Auto)]
    pub device: Device,
    /// Timed repetitions (the best is reported; the page cache is warm after the first).
    #[arg(long, default_value_t = 3)]
    pub reps: u32,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// One measured row.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BenchRow {
    /// What was measured ("memory read (u64 sum)", "reduce cpu (2 threads)", ...).
    pub what: String,
    /// Best wall time of the repetitions, seconds.
    pub seconds: f64,
    /// Tensor bytes per second, GB/s (10^9 bytes).
    pub gb_per_s: f64,
}

/// Run `copus bench`.
pub fn run(args: &BenchArgs) -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("copus-bench-{}", std::process::id()));
    let result = bench_in(&dir, args);
    let _ = std::fs::remove_dir_all(&dir);
    let rows = result?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        println!("{:<40} {:>10} {:>10}", "measurement", "seconds", "GB/s");
        for r in &rows {
            println!("{:<40} {:>10.4} {:>10.2}", r.what, r.seconds, r.gb_per_s);
        }
    }
    Ok(())
}

fn bench_in(dir: &Path, args: &BenchArgs) -> anyhow::Result<Vec<BenchRow>> {
    eprintln!(
        "generating a {} MB dump (1 step, 4 F32 files) in {}",
        args.size_mb,
        dir.display()
    );
    write_dump(dir, &SynthSpec::of_size(args.size_mb << 20, 4, DType::F32))?;
    let index = scan(dir)?;
    let bytes = index.total_bytes() as f64;
    let files: Vec<_> = index.steps[0]
        .files
        .iter()
        .map(|f| f.path.clone())
        .collect();
    let reps = args.reps.max(1);
    let best = |f: &mut dyn FnMut() -> anyhow::Result<()>| -> anyhow::Result<f64> {
        let mut best = f64::INFINITY;
        for _ in 0..reps {
            let t = Instant::now();
            f()?;
            best = best.min(t.elapsed().as_secs_f64());
        }
        Ok(best)
    };
    let row = |what: String, s: f64| BenchRow {
        what,
        seconds: s,
        gb_per_s: bytes / s / 1e9,
    };
    let mut rows = vec![row(
        "memory read (u64 sum of the maps)".into(),
        best(&mut || read_baseline(&files).map(drop))?,
    )];
    let mut devices = vec![args.device];
    if args.device == Device::Auto {
        devices = vec![Device::Cpu, Device::Cuda];
    }
    for d in devices {
        let sel = match select(d) {
            Ok(s) => s,
            Err(e) if args.device == Device::Auto => {
                eprintln!("note: {e}; CUDA row skipped");
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let backend = sel.backend.as_ref();
        let s = best(&mut || {
            reduce_steps(&index, &DumpOptions::default(), backend, &stderr_progress)?;
            Ok(())
        })?;
        finish_progress();
        rows.push(row(format!("reduce {}", backend.name()), s));
    }
    Ok(rows)
}

/// The memory-read baseline: map every file and sum it as little-endian u64 words on all
/// cores; returns the sum so the work cannot be optimised away.
pub fn read_baseline(files: &[std::path::PathBuf]) -> anyhow::Result<u64> {
    let mut total = 0u64;
    for p in files {
        let f = std::fs::File::open(p)?;
        // SAFETY: read-only map of a file this process generated.
        let m = unsafe { memmap2::Mmap::map(&f)? };
        total = total.wrapping_add(
            m.par_chunks(1 << 20)
                .map(|c| {
                    c.chunks_exact(8)
                        .map(|w| {
                            u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]])
                        })
                        .fold(0u64, u64::wrapping_add)
                })
                .reduce(|| 0, u64::wrapping_add),
        );
    }
    Ok(total)
}

/// A progress line on stderr (only when stderr is a terminal), e.g. for `copus analyze`.
pub fn stderr_progress(p: Progress) {
    let mut err = std::io::stderr();
    if !err.is_terminal() || p.bytes_total == 0 {
        return;
    }
    let frac = p.bytes_done as f64 / p.bytes_total as f64;
    let filled = (frac * 30.0).round() as usize;
    let _ = write!(
        err,
        "\rstep {:>8} [{:<30}] {:>5.1}% of {:.2} GB",
        p.step,
        "#".repeat(filled.min(30)),
        100.0 * frac,
        p.bytes_total as f64 / 1e9
    );
    let _ = err.flush();
}

/// End the progress line started by [`stderr_progress`].
pub fn finish_progress() {
    let mut err = std::io::stderr();
    if err.is_terminal() {
        let _ = writeln!(err);
    }
}
