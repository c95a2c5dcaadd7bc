//! `copus plan`: switch-point planning and strategy comparison for a session.

use clap::Args;
use std::path::PathBuf;

/// Arguments of `copus plan`.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// Session file (.ron).
    pub session: PathBuf,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Run `copus plan`.
pub fn run(_args: &PlanArgs) -> anyhow::Result<()> {
    Err(super::not_available("plan", "the switch-point planner"))
}
