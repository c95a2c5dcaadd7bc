//! `copus watch`: follow a live training run.

use clap::Args;

/// Arguments of `copus watch`.
#[derive(Debug, Args)]
pub struct WatchArgs {
    /// A growing stats file or tcp://HOST:PORT.
    pub target: String,
    /// Do not open the explorer; print a summary.
    #[arg(long)]
    pub headless: bool,
    /// With --headless: stop after this many valid steps.
    #[arg(long)]
    pub until_steps: Option<u64>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Run `copus watch`.
pub fn run(_args: &WatchArgs) -> anyhow::Result<()> {
    Err(super::not_available("watch", "live attach"))
}
