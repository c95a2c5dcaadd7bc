//! `copus bench`: reduction bandwidth against a memory-read baseline.

use clap::Args;

/// Arguments of `copus bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Size of the generated dump, MB.
    #[arg(long, default_value_t = 256)]
    pub size_mb: u64,
}

/// Run `copus bench`.
pub fn run(_args: &BenchArgs) -> anyhow::Result<()> {
    Err(super::not_available(
        "bench",
        "the dump reader and compute backends",
    ))
}
