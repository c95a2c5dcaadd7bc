//! `copus open` and the no-argument default: the explorer on a session, a stats file or a
//! gradient dump directory.

use crate::app::App;
use crate::session::{DataSource, Resolved, Session};
use anyhow::Context;
use clap::Args;
use std::path::{Path, PathBuf};

/// Arguments of `copus open`.
#[derive(Debug, Args)]
pub struct OpenArgs {
    /// A session (.ron), a gradient dump directory, or a stats .ndjson file.
    pub path: PathBuf,
    /// Model and cluster for a stats file or dump.
    #[command(flatten)]
    pub cluster: super::cluster_args::ClusterArgs,
    /// Where gradient dumps are reduced (auto falls back to the CPU with a note).
    #[arg(long, value_enum, default_value_t = crate::compute::Device::Auto)]
    pub device: crate::compute::Device,
}

/// Where the bundled demo session lives in the source tree.
pub fn demo_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("sessions/demo.ron")
}

/// Load and resolve a session file.
pub fn resolve_session(path: &Path) -> anyhow::Result<Resolved> {
    Ok(Session::load(path)?.resolve(path)?)
}

/// Load a session and its data source synchronously (for headless use and tests).
pub fn app_for_session(path: &Path) -> anyhow::Result<App> {
    let resolved = resolve_session(path)?;
    let loaded = crate::source::load(&resolved)
        .with_context(|| format!("loading the data source of {}", path.display()))?;
    Ok(App::new(resolved, loaded))
}

/// Open the explorer on the bundled demo session.
pub fn run_demo() -> anyhow::Result<()> {
    let path = demo_path();
    let resolved =
        resolve_session(&path).with_context(|| format!("the bundled demo {}", path.display()))?;
    crate::tui::run(App::loading(resolved))?;
    Ok(())
}

/// The session for a path that is not a session file: a stats file or a dump directory.
pub fn adhoc_session(args: &OpenArgs) -> anyhow::Result<Resolved> {
    let p = &args.path;
    let name = p.file_name().map_or_else(
        || p.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let source_path = name.clone();
    let source = if p.is_dir() {
        DataSource::Dumps {
            path: source_path,
            samples: None,
            seed_ema: true,
        }
    } else {
        DataSource::Stats { path: source_path }
    };
    let session = args.cluster.session(name.clone(), source);
    let dir = p.parent().unwrap_or(Path::new("."));
    let session_path = dir.join(format!("{name}.copus.ron"));
    Ok(session.resolve(&session_path)?)
}

/// Probe the compute device before the terminal is taken over (a GPU probe may print or
/// fail): only dump sources need one. `--device cuda` that cannot run is an error here; an
/// `auto` that falls back to the CPU says so once, on the status line, when the dump is loaded
/// (the probe is cached, so the worker does not probe again).
fn probe_device(
    app: &App,
    wanted: crate::compute::Device,
) -> anyhow::Result<crate::compute::Device> {
    use crate::compute::{Device, check};
    if !matches!(app.resolved.session.source, DataSource::Dumps { .. }) {
        return Ok(Device::Cpu);
    }
    check(wanted)?;
    Ok(wanted)
}

/// Run `copus open`.
pub fn run(args: &OpenArgs) -> anyhow::Result<()> {
    let p = &args.path;
    if !p.exists() {
        anyhow::bail!("{}: no such file or directory", p.display());
    }
    let resolved = match p.extension().and_then(|e| e.to_str()) {
        Some("ron") if p.is_file() => resolve_session(p)?,
        _ if p.is_dir() => adhoc_session(args)?,
        Some("ndjson" | "jsonl" | "json") => adhoc_session(args)?,
        _ => anyhow::bail!(
            "{}: expected a session (.ron), a stats file (.ndjson) or a dump directory",
            p.display()
        ),
    };
    let mut app = App::loading(resolved);
    app.device = probe_device(&app, args.device)?;
    if let DataSource::Live { target } = &app.resolved.session.source {
        // A saved live session reattaches to its run.
        app.live_target = Some(target.clone());
        app.loading = false;
    }
    crate::tui::run(app)?;
    Ok(())
}
