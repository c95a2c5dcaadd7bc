//! `copus grid`: the Goodput grid of a session at one training point.

use clap::Args;
use std::path::PathBuf;

/// Arguments of `copus grid`.
#[derive(Debug, Args)]
pub struct GridArgs {
    /// Session file (.ron).
    pub session: PathBuf,
    /// Training step to evaluate at (nearest trajectory point).
    #[arg(long)]
    pub at: Option<u64>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Run `copus grid`.
pub fn run(_args: &GridArgs) -> anyhow::Result<()> {
    Err(super::not_available("grid", "the performance model"))
}
