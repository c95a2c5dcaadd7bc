//! `copus analyze`: noise-scale estimate of a stats file or dump directory.

use clap::Args;
use std::path::PathBuf;

/// Arguments of `copus analyze`.
#[derive(Debug, Args)]
pub struct AnalyzeArgs {
    /// A stats protocol v1 file (.ndjson) or a gradient dump directory.
    pub path: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Run `copus analyze`.
pub fn run(_args: &AnalyzeArgs) -> anyhow::Result<()> {
    Err(super::not_available("analyze", "the noise-scale engine"))
}
