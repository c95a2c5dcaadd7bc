//! Reduce a gradient dump directory to StepStats JSON lines (the library call behind
//! `copus analyze <dir>`), for whole-process timing against numpy
//! (`scripts/bench_vs_numpy.py`).
//!
//! Usage: `dump_reduce <dir> [--device auto|cpu|cuda] [--samples N] [--ema DECAY]`

use copus::compute::{Device, select};
use copus::source::dump::{DumpOptions, reduce_dump, scan};

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let mut dir = None;
    let mut device = Device::Auto;
    let mut opts = DumpOptions::default();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--device" => {
                device = match args.next().as_deref() {
                    Some("cpu") => Device::Cpu,
                    Some("cuda") => Device::Cuda,
                    Some("auto") => Device::Auto,
                    other => anyhow::bail!("--device auto|cpu|cuda, got {other:?}"),
                }
            }
            "--samples" => opts.samples = Some(args.next().unwrap_or_default().parse()?),
            "--ema" => opts.ema_decay = Some(args.next().unwrap_or_default().parse()?),
            _ => dir = Some(std::path::PathBuf::from(a)),
        }
    }
    let dir = dir.ok_or_else(|| anyhow::anyhow!("usage: dump_reduce <dir> [--device ...]"))?;
    let sel = select(device)?;
    if let Some(note) = &sel.note {
        eprintln!("note: {note}");
    }
    let index = scan(&dir)?;
    let out = reduce_dump(
        &index,
        &opts,
        sel.backend.as_ref(),
        &copus::cli::bench::stderr_progress,
    )?;
    copus::cli::bench::finish_progress();
    for s in &out.steps {
        println!("{}", serde_json::to_string(s)?);
    }
    for p in &out.ema {
        println!("{}", serde_json::to_string(p)?);
    }
    Ok(())
}
