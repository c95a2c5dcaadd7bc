//! `copus bench`: generate a gradient dump of a given size in a temporary directory and
//! measure the reduction's bandwidth (GB/s of tensor bytes) beside a plain memory-read
//! baseline (summing the mapped bytes as u64 on all cores) in the same run, on the CPU and,
//! when present, on CUDA (beside the pinned host-to-device copy bandwidth, its bound, and the
//! device-to-device copy bandwidth, the kernel's roofline).
//! `copus bench --devices` lists the backends compiled in and whether each is usable here.

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
    /// Size of each step of the generated dump (all its files together), MB (1 to 65536).
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=65536))]
    pub size_mb: u64,
    /// Element type of the generated dump.
    #[arg(long, value_enum, default_value_t = DTypeArg::F32)]
    pub dtype: DTypeArg,
    /// Steps of the generated dump (1 to 10000).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub steps: u64,
    /// Gradient files per step (K, 2 to 4096).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(2..=4096))]
    pub files: u64,
    /// Write the dump to this directory and keep it (e.g. to compare `copus analyze
    /// --device cpu` with `--device cuda` on it), instead of a temporary one.
    #[arg(long, value_name = "DIR")]
    pub keep: Option<std::path::PathBuf>,
    /// Backend: auto measures the CPU and, when present, CUDA.
    #[arg(long, value_enum, default_value_t = Device::Auto)]
    pub device: Device,
    /// Timed repetitions (the best is reported; the page cache is warm after the first).
    #[arg(long, default_value_t = 3)]
    pub reps: u32,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Indent the --json output (the default on a terminal; compact into a pipe or a
    /// file).
    #[arg(long, requires = "json")]
    pub pretty: bool,
    /// Only list the compute backends: compiled in, usable here, or why not.
    #[arg(long)]
    pub devices: bool,
}

/// Largest dump `copus bench` generates, all steps together, MB.
const MAX_TOTAL_MB: u64 = 65_536;

/// Element type of a generated dump, on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DTypeArg {
    /// IEEE binary32.
    F32,
    /// IEEE binary16.
    F16,
    /// bfloat16.
    Bf16,
}

impl From<DTypeArg> for DType {
    fn from(d: DTypeArg) -> DType {
        match d {
            DTypeArg::F32 => DType::F32,
            DTypeArg::F16 => DType::F16,
            DTypeArg::Bf16 => DType::BF16,
        }
    }
}

/// What `copus bench --json` prints.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BenchReport {
    /// The measurements, baseline first.
    pub rows: Vec<BenchRow>,
    /// Notes for the reader, e.g. why there is no CUDA row ("CPU (no CUDA driver found)").
    pub notes: Vec<String>,
    /// What `--device auto` uses on this machine, in words.
    pub auto: String,
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
    if args.devices {
        let report = crate::compute::backend_report();
        if args.json {
            super::write_json(&report)?;
        } else {
            print!("{}", report.render());
        }
        return Ok(());
    }
    if let Some(d) = &args.keep {
        refuse_a_used_directory(d)?;
    }
    // A device asked for that cannot run is said before a dump is generated for it.
    if args.device == Device::Cuda {
        select(Device::Cuda)?;
    }
    let (dir, keep) = match &args.keep {
        Some(d) => (d.clone(), true),
        None => (
            std::env::temp_dir().join(format!("copus-bench-{}", std::process::id())),
            false,
        ),
    };
    let result = bench_in(&dir, args);
    if !keep {
        let _ = std::fs::remove_dir_all(&dir);
    }
    let report = result?;
    if args.json {
        super::write_json(&report)?;
    } else {
        println!("{:<48} {:>10} {:>10}", "measurement", "seconds", "GB/s");
        for r in &report.rows {
            println!("{:<48} {:>10.4} {:>10.2}", r.what, r.seconds, r.gb_per_s);
        }
        for n in &report.notes {
            println!("note: {n}");
        }
    }
    Ok(())
}

/// `--keep DIR` writes a dump's files there: only into a new or empty directory, never over
/// files the user has (a real dump's `step_0/part_000.safetensors` was replaced).
fn refuse_a_used_directory(dir: &Path) -> anyhow::Result<()> {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                anyhow::bail!(
                    "--keep {}: the directory is not empty; bench writes a new dump there and \
                     would replace files in it: name a new or empty directory",
                    dir.display()
                );
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(anyhow::anyhow!("--keep {}: {e}", dir.display())),
    }
}

fn bench_in(dir: &Path, args: &BenchArgs) -> anyhow::Result<BenchReport> {
    let dtype = DType::from(args.dtype);
    let files = usize::try_from(args.files)?;
    let total_mb = args.size_mb.saturating_mul(args.steps);
    if total_mb > MAX_TOTAL_MB {
        anyhow::bail!(
            "--size-mb × --steps is {total_mb} MB; the generated dump is limited to {MAX_TOTAL_MB} MB"
        );
    }
    eprintln!(
        "generating a dump of {} step(s) × {} MB ({files} {} files per step) in {}",
        args.steps.max(1),
        args.size_mb,
        dtype.name(),
        dir.display()
    );
    let spec = SynthSpec {
        steps: args.steps.max(1),
        ..SynthSpec::of_size(args.size_mb << 20, files, dtype)
    };
    write_dump(dir, &spec)?;
    let index = scan(dir)?;
    let bytes = index.total_bytes() as f64;
    let files: Vec<_> = index
        .steps
        .iter()
        .flat_map(|s| s.files.iter().map(|f| f.path.clone()))
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
    let mut notes = Vec::new();
    let mut devices = vec![args.device];
    if args.device == Device::Auto {
        devices = vec![Device::Cpu, Device::Cuda];
    }
    for d in devices {
        let sel = match select(d) {
            Ok(s) => s,
            Err(e) if args.device == Device::Auto => {
                notes.push(format!(
                    "no CUDA row: {}",
                    crate::compute::device::fallback_note(&e)
                ));
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let backend = sel.backend.as_ref();
        // A GPU backend: its copies of the same bytes (host to device, the reduction's
        // bound, and device to device), timed inside the backend after a warm-up round.
        let warm_up = backend.copy_baselines(bytes as usize);
        let mut fastest = vec![f64::INFINITY; warm_up.len()];
        for (_, t) in &warm_up {
            if let Err(e) = t {
                anyhow::bail!("{e}");
            }
        }
        for _ in 0..reps {
            for (i, (_, t)) in backend
                .copy_baselines(bytes as usize)
                .into_iter()
                .enumerate()
            {
                fastest[i] = fastest[i].min(t?);
            }
        }
        for ((what, _), s) in warm_up.iter().zip(fastest) {
            rows.push(row(format!("{what} ({})", backend.name()), s));
        }
        let s = best(&mut || {
            reduce_steps(&index, &DumpOptions::default(), backend, &stderr_progress)?;
            Ok(())
        })?;
        finish_progress();
        rows.push(row(format!("reduce {}", backend.name()), s));
    }
    Ok(BenchReport {
        rows,
        notes,
        auto: crate::compute::backend_report().auto,
    })
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
