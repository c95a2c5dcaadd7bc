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

/// Run `copus plan`: load and resolve the session, plan every strategy, print the report.
pub fn run(args: &PlanArgs) -> anyhow::Result<()> {
    let p = &args.session;
    let resolved = copus_session(p)?;
    let report = crate::plan::plan_session(&resolved)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", crate::plan::render_text(&report));
    }
    Ok(())
}

fn copus_session(p: &std::path::Path) -> anyhow::Result<crate::session::Resolved> {
    Ok(crate::session::Session::load(p)?.resolve(p)?)
}
