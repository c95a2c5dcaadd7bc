//! `copus open` and the no-argument default: the explorer on a session.

use crate::app::App;
use crate::session::Session;
use anyhow::Context;
use clap::Args;
use std::path::{Path, PathBuf};

/// Arguments of `copus open`.
#[derive(Debug, Args)]
pub struct OpenArgs {
    /// A session (.ron), a gradient dump directory, or a stats .ndjson file.
    pub path: PathBuf,
}

/// Where the bundled demo session lives in the source tree.
pub fn demo_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("sessions/demo.ron")
}

/// Load and resolve a session file and build the explorer state for it.
pub fn app_for_session(path: &Path) -> anyhow::Result<App> {
    let resolved = Session::load(path)?.resolve(path)?;
    let trajectory = crate::source::load_trajectory(&resolved)
        .with_context(|| format!("loading the B_crit trajectory of {}", path.display()))?;
    Ok(App::new(resolved, trajectory))
}

/// Open the explorer on the bundled demo session.
pub fn run_demo() -> anyhow::Result<()> {
    let path = demo_path();
    let app = app_for_session(&path)
        .with_context(|| format!("the bundled demo session {}", path.display()))?;
    crate::tui::run(app)?;
    Ok(())
}

/// Run `copus open`.
pub fn run(args: &OpenArgs) -> anyhow::Result<()> {
    let p = &args.path;
    if p.is_dir() {
        anyhow::bail!(
            "{}: opening a gradient dump directory in the explorer is not available yet; \
             use a session file",
            p.display()
        );
    }
    match p.extension().and_then(|e| e.to_str()) {
        Some("ron") => {
            let app = app_for_session(p)?;
            crate::tui::run(app)?;
            Ok(())
        }
        Some("ndjson") | Some("jsonl") => anyhow::bail!(
            "{}: opening a stats file in the explorer is not available yet; use a session file",
            p.display()
        ),
        _ => anyhow::bail!(
            "{}: expected a session (.ron), a stats file (.ndjson) or a dump directory",
            p.display()
        ),
    }
}
