//! `copus predict`: step time, throughput and memory of one parallel configuration.

use clap::Args;

/// Arguments of `copus predict`.
#[derive(Debug, Args)]
pub struct PredictArgs {
    /// Hardware profile: a built-in name (h100-sxm, h200, a100-80g, mi210) or a .ron file.
    #[arg(long)]
    pub hardware: Option<String>,
    /// Model profile: a built-in name or a .ron file.
    #[arg(long)]
    pub model: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Run `copus predict`.
pub fn run(_args: &PredictArgs) -> anyhow::Result<()> {
    Err(super::not_available("predict", "the performance model"))
}
