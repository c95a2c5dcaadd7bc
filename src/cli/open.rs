//! `copus open` and the no-argument default: the explorer on a session.

use clap::Args;
use std::path::PathBuf;

/// Arguments of `copus open`.
#[derive(Debug, Args)]
pub struct OpenArgs {
    /// A session (.ron), a gradient dump directory, or a stats .ndjson file.
    pub path: PathBuf,
}

/// Open the explorer on the bundled demo session.
pub fn run_demo() -> anyhow::Result<()> {
    Err(super::not_available("explorer", "the foundation"))
}

/// Run `copus open`.
pub fn run(_args: &OpenArgs) -> anyhow::Result<()> {
    Err(super::not_available("open", "the foundation"))
}
