//! `copus open` and the no-argument default: the explorer on a session, a stats file or a
//! gradient dump directory. Everything that can fail is checked before the terminal is taken
//! over; where `s` saves is decided here (never over a shipped or commented file).

use super::estimator_args::EstimatorArgs;
use crate::app::{App, Msg, update};
use crate::session::{DataSource, Resolved, Session};
use anyhow::Context;
use clap::Args;
use std::path::{Path, PathBuf};

/// Arguments of `copus open`.
#[derive(Debug, Default, Args)]
pub struct OpenArgs {
    /// A session (.ron), a gradient dump directory, a stats .ndjson file, or `demo` (the
    /// bundled demo session, as `copus` alone opens it).
    pub path: PathBuf,
    /// Stats file or dump: model profile (built-in name or .ron file) [default: llama-7b].
    #[arg(long)]
    pub model: Option<String>,
    /// Stats file or dump: hardware profile (built-in name or .ron file) [default: h100-sxm].
    #[arg(long)]
    pub hardware: Option<String>,
    /// Stats file or dump: nodes in the cluster [default: 1].
    #[arg(long, value_parser = super::at_least_one_u32)]
    pub nodes: Option<u32>,
    /// Stats file or dump: GPUs per node [default: 8].
    #[arg(long, value_parser = super::at_least_one_u32)]
    pub gpus_per_node: Option<u32>,
    /// Stats file or dump: tokens per sample of the run [default: inferred from the records'
    /// `tokens`/`b_big`, else the model's sequence length].
    #[arg(long, value_parser = super::at_least_one_u32, value_name = "TOKENS")]
    pub seq_len: Option<u32>,
    /// Dump: samples per gradient file, overriding the files' `samples` metadata.
    #[arg(long, value_name = "SAMPLES", value_parser = super::analyze::samples_per_file)]
    pub samples: Option<f64>,
    /// Stats file or dump: estimator settings (smoother, bandwidth, decay, …).
    #[command(flatten)]
    pub estimator: EstimatorArgs,
    /// Stats file or dump: the batch (sequences of the model) the run uses now, marked ▼.
    #[arg(long, value_name = "SAMPLES")]
    pub current_batch: Option<u64>,
    /// Stats file: a second run (stats file) laid over the timeline, aligned by tokens, with
    /// where the two differ beyond their intervals (as `analyze A --compare B`).
    #[arg(long, value_name = "B")]
    pub compare: Option<PathBuf>,
    /// Stats file: branch records of a branched experiment on this run (`copus branch`): the
    /// measured critical batch size on the timeline beside B_simple, with the ratio
    /// (docs/CBS.md).
    #[arg(long, value_name = "FILE")]
    pub branches: Option<PathBuf>,
    /// With --branches: use the measured ratio (fitted B_noise or threshold CBS ÷ B_simple,
    /// the geometric mean over the branch points) as the session's B_crit conversion
    /// (`b_crit_scale`, its source named); `s` saves it.
    #[arg(long, value_enum, requires = "branches", value_name = "KIND")]
    pub b_crit_from: Option<BCritFrom>,
    /// Where gradient dumps are reduced (auto falls back to the CPU with a note).
    #[arg(long, value_enum, default_value_t = crate::compute::Device::Auto)]
    pub device: crate::compute::Device,
    /// Calibration file (`copus calibrate --out`) in force instead of the session's model (the
    /// what-if's "perf model" row switches between it and the profile; not written into the
    /// session by `s`).
    #[arg(long)]
    pub calibration: Option<PathBuf>,
    /// The training stack (changes the session's `stack`).
    #[command(flatten)]
    pub stack: super::stack_args::StackArgs,
    /// The explorer's configuration file and theme.
    #[command(flatten)]
    pub explorer: super::ExplorerArgs,
}

/// `--b-crit-from`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BCritFrom {
    /// Fitted B_noise ÷ B_simple.
    BNoise,
    /// Threshold CBS ÷ B_simple.
    ThresholdCbs,
}

impl OpenArgs {
    /// Arguments for `path` with every option at its default.
    pub fn for_path(path: &Path) -> Self {
        Self {
            path: path.to_path_buf(),
            ..Self::default()
        }
    }

    /// The options given that only make sense for a stats file or a dump.
    fn data_flags(&self) -> Vec<&'static str> {
        let mut given = self.estimator.given();
        let flags: [(&str, bool); 7] = [
            ("--model", self.model.is_some()),
            ("--hardware", self.hardware.is_some()),
            ("--nodes", self.nodes.is_some()),
            ("--gpus-per-node", self.gpus_per_node.is_some()),
            ("--seq-len", self.seq_len.is_some()),
            ("--samples", self.samples.is_some()),
            ("--current-batch", self.current_batch.is_some()),
        ];
        for (name, set) in flags {
            if set {
                given.push(name);
            }
        }
        given
    }
}

/// Where the bundled demo session lives in the source tree (tests; the binary embeds it).
pub fn demo_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("sessions/demo.ron")
}

/// The bundled demo session, embedded in the binary.
pub const DEMO_RON: &str = include_str!("../../sessions/demo.ron");

/// The name `grid`, `plan` and `advise` take for the bundled demo session.
pub const DEMO_NAME: &str = "demo";

/// File name the demo is saved under, in the working directory.
pub const DEMO_SAVE_NAME: &str = "copus-demo.ron";

/// The embedded demo resolved as if it lived at `dir`/[`DEMO_SAVE_NAME`] (it names only
/// built-in profiles, so nothing is read from `dir`).
pub fn demo_session(dir: &Path) -> anyhow::Result<Resolved> {
    let path = dir.join(DEMO_SAVE_NAME);
    let session = Session::from_ron(DEMO_RON, Path::new("the bundled demo"))?;
    Ok(session.resolve(&path)?)
}

/// The embedded demo resolved under its command-line name, `demo` (what `grid demo` and
/// `plan demo` name in their messages; it reads nothing from the working directory).
pub fn demo_session_named() -> anyhow::Result<Resolved> {
    let session = Session::from_ron(DEMO_RON, Path::new("the bundled demo"))?;
    Ok(session.resolve(Path::new(DEMO_NAME))?)
}

/// Load and resolve a session file.
pub fn resolve_session(path: &Path) -> anyhow::Result<Resolved> {
    Ok(Session::load(path)?.resolve(path)?)
}

/// Load a session and its data source synchronously (for headless use and tests).
pub fn app_for_session(path: &Path) -> anyhow::Result<App> {
    let resolved = resolve_session(path)?;
    let loaded = crate::pipeline::load(&resolved)
        .with_context(|| format!("loading the data source of {}", path.display()))?;
    Ok(App::new(resolved, loaded))
}

/// Whether RON text holds comments that a save (which re-serialises) would drop.
pub fn has_comments(text: &str) -> bool {
    text.lines().any(|l| {
        let t = l.trim_start();
        t.starts_with("//") || t.contains("/*")
    })
}

/// Where `s` saves a session opened from `path` whose text is `text`, and whether that file
/// may be replaced without asking: the file itself when it holds no comments, else
/// `<stem>.saved.ron` beside it (asked before replacing, if it exists).
pub fn save_target(path: &Path, text: &str) -> (PathBuf, bool) {
    if !has_comments(text) {
        return (path.to_path_buf(), true);
    }
    let stem = path
        .file_stem()
        .map_or_else(|| "session".into(), |s| s.to_string_lossy().into_owned());
    (path.with_file_name(format!("{stem}.saved.ron")), false)
}

/// Open the explorer on the bundled demo; `s` saves to `./copus-demo.ron` (asking before it
/// replaces a file that exists), `e` exports to the working directory.
pub fn run_demo(config: &crate::config::Config) -> anyhow::Result<()> {
    let cwd = std::env::current_dir().context("the working directory")?;
    let mut app = prepared(demo_session(&cwd)?, crate::compute::Device::Cpu)?;
    app.configure(config);
    crate::runtime::run(app)?;
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
            samples: args.samples,
            seed_ema: true,
            seq_len: args.seq_len,
        }
    } else {
        if args.samples.is_some() {
            anyhow::bail!(
                "{}: --samples applies to gradient dump directories, not to a stats file \
                 (its records carry b_big)",
                p.display()
            );
        }
        DataSource::Stats {
            path: source_path,
            seq_len: args.seq_len,
        }
    };
    let defaults = super::cluster_args::ClusterArgs::default();
    let mut session = Session::adhoc(
        name.clone(),
        source,
        args.model.as_deref().unwrap_or(&defaults.model),
        args.hardware.as_deref().unwrap_or(&defaults.hardware),
        args.nodes.unwrap_or(defaults.nodes),
        args.gpus_per_node.unwrap_or(defaults.gpus_per_node),
    );
    args.estimator.check()?;
    args.estimator.apply(&mut session.estimator);
    // A measured run opens where it is now (its latest step), as TensorBoard and nvitop do;
    // the cursor is clamped to the last point when the run is loaded, or set to the latest
    // point with a bounded interval where the last ones are open above (`App::set_loaded`).
    session.view.cursor = usize::MAX;
    let dir = p.parent().unwrap_or(Path::new("."));
    let session_path = dir.join(format!("{name}.copus.ron"));
    // The session exists only in memory: its errors are the flags' (they named the session
    // file it would be saved as, "run.ndjson.copus.ron: unknown model profile …").
    let mut r = session
        .resolve(&session_path)
        .map_err(|e| adhoc_error(e, args))?;
    if let Some(b) = args.current_batch {
        let searched = crate::goodput::batch_axis(&r.session.search, &r.cluster());
        if !searched.contains(&b) {
            let list: Vec<String> = searched.iter().map(ToString::to_string).collect();
            super::flag_bail!(
                "--current-batch {b}: not one of the batch sizes searched ({}); pick one of them",
                list.join(", ")
            );
        }
        // One the grid adds beside the searched ones: listed with them, as `grid` does.
        let listed = &mut r.session.search.batch_sizes;
        if !listed.contains(&b) {
            listed.push(b);
            listed.sort_unstable();
        }
        r.session.current_batch = Some(b);
    }
    Ok(r)
}

/// An error of the session built from `args` in memory, said as the flags' it comes from.
fn adhoc_error(e: crate::session::SessionError, args: &OpenArgs) -> anyhow::Error {
    use crate::session::SessionError;
    match e {
        SessionError::Profile { source, .. } => match &source {
            crate::profiles::ProfileError::Unknown { kind, name, .. } => {
                // An unknown name is an error of the profile (exit 1), as `predict` says it.
                let flag = if *kind == "model" {
                    "--model"
                } else {
                    "--hardware"
                };
                anyhow::anyhow!("{flag} {name}: {source}")
            }
            // A profile file's own error names the file.
            _ => source.into(),
        },
        SessionError::Invalid { msg, .. } => {
            super::FlagValueError(format!("{}: {msg}", args.path.display())).into()
        }
        other => other.into(),
    }
}

/// The explorer title's note for a run costed on copus's defaults.
pub const ASSUMED_CLUSTER: &str =
    "model and cluster: copus's defaults (set --model, --hardware, --nodes)";

/// A run opened without `--model`, `--hardware`, `--nodes` or `--gpus-per-node` is costed on
/// copus's defaults: the explorer's title says so and which flags set them, as `plan` and
/// `grid` say in a note (a note of the title: saving the session does not write it into its
/// name).
fn note_assumed_cluster(r: &mut Resolved, args: &OpenArgs) {
    let given = args.model.is_some()
        || args.hardware.is_some()
        || args.nodes.is_some()
        || args.gpus_per_node.is_some();
    if !given {
        r.title_note = Some(ASSUMED_CLUSTER.to_string());
    }
}

/// Probe the compute device before the terminal is taken over (a GPU probe may print or
/// fail): only dump sources need one. `--device cuda` that cannot run is an error here; an
/// `auto` that falls back to the CPU says so once, on the status line, when the dump is loaded
/// (the probe is cached, so the worker does not probe again).
fn probe_device(
    resolved: &Resolved,
    wanted: crate::compute::Device,
) -> anyhow::Result<crate::compute::Device> {
    use crate::compute::{Device, check};
    if !matches!(resolved.session.source, DataSource::Dumps { .. }) {
        return Ok(Device::Cpu);
    }
    check(wanted)?;
    Ok(wanted)
}

/// An explorer on `resolved`, with everything that can fail checked before the terminal is
/// taken over: scenarios and stats files are loaded here (they are quick), a dump directory
/// is scanned (the reduction runs in the worker with a progress gauge), a live session
/// reattaches to its run.
pub fn prepared(resolved: Resolved, device: crate::compute::Device) -> anyhow::Result<App> {
    let device = probe_device(&resolved, device)?;
    let path = resolved.path.clone();
    let mut app = App::loading(resolved);
    app.device = device;
    match &app.resolved.session.source {
        DataSource::Live { target, .. } => {
            crate::source::live::Target::parse(target)
                .with_context(|| format!("{}: live source", path.display()))?;
            app.live_target = Some(target.clone());
            app.loading = false;
        }
        DataSource::Dumps {
            path: dir, samples, ..
        } => {
            let full = app.resolved.resolve_path(dir);
            crate::pipeline::missing_source(&app.resolved, dir, &full)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            // The error's text already names its cause: no second copy of the chain.
            let index = crate::source::dump::scan(&full).map_err(|e| anyhow::anyhow!("{e}"))?;
            if samples.is_none()
                && let Some(f) = index
                    .steps
                    .iter()
                    .flat_map(|s| &s.files)
                    .find(|f| f.samples.is_none())
            {
                anyhow::bail!(
                    "{}: no sample count: add \"samples\" to the safetensors __metadata__ (or \
                     samples.txt beside .npy files), or pass --samples",
                    f.path.display()
                );
            }
        }
        DataSource::Scenario(_) | DataSource::Stats { .. } => {
            let loaded =
                crate::pipeline::load(&app.resolved).map_err(|e| anyhow::anyhow!("{e}"))?;
            let _ = update(&mut app, Msg::SourceLoaded(Box::new(Ok(loaded))));
            if app.trajectory.points.is_empty() {
                // Name the file the user gave: the stats file, not the session built for it.
                let shown = match &app.resolved.session.source {
                    DataSource::Stats { path: stats, .. } => app.resolved.resolve_path(stats),
                    _ => path.clone(),
                };
                anyhow::bail!(
                    "{}: no step gives a usable B_crit estimate (see `copus analyze {}`)",
                    shown.display(),
                    shown.display()
                );
            }
        }
    }
    Ok(app)
}

/// Run `copus open`.
pub fn run(args: &OpenArgs, config: &crate::config::Config) -> anyhow::Result<()> {
    let mut app = explorer_app(args)?;
    app.configure(config);
    crate::runtime::run(app)?;
    Ok(())
}

/// The explorer `copus open` runs, prepared (everything that can fail checked) but not yet
/// on the terminal; `copus snapshot` draws it in memory instead.
pub fn explorer_app(args: &OpenArgs) -> anyhow::Result<App> {
    let p = &args.path;
    // `demo` names the bundled demo (as `copus` alone opens it, and as `grid demo` and
    // `plan demo` read it) unless a file of that name is here.
    let demo = p == Path::new(DEMO_NAME) && !p.exists();
    if !p.exists() && !demo {
        anyhow::bail!("{}: no such file or directory", p.display());
    }
    // A file that is not a stats file is read as a session whatever its name (as `grid` and
    // `plan` read it: `UP.RON`, `s.ron.txt`); one without `.ron` that does not parse says
    // what copus expected.
    let ron_named = p.extension().is_some_and(|e| e.eq_ignore_ascii_case("ron"));
    let is_session = demo || (p.is_file() && !super::model_args::is_data_path(p));
    let (resolved, save) = if demo {
        let flags = args.data_flags();
        if !flags.is_empty() {
            // Flags that do not apply: a command-line error (exit 2), as grid's and plan's.
            super::flag_bail!(
                "demo: {} cannot be used with the demo session (they are for a stats file or a \
                 dump directory); change its model and cluster in the what-if panel (key 2)",
                flags.join(", ")
            );
        }
        let cwd = std::env::current_dir().context("the working directory")?;
        (demo_session(&cwd)?, None)
    } else if is_session {
        let flags = args.data_flags();
        if !flags.is_empty() {
            super::flag_bail!(
                "{}: {} cannot be used with a session (they are for a stats file or a dump \
                 directory); a session names its \
                 own model, cluster and settings (change them in the what-if panel, 2)",
                p.display(),
                flags.join(", ")
            );
        }
        let (session, text) = Session::load_with_text(p).map_err(|e| {
            if ron_named {
                anyhow::Error::from(e)
            } else {
                anyhow::anyhow!(
                    "{e}\n(expected a session (.ron), a stats file (.ndjson) or a dump directory)"
                )
            }
        })?;
        let mut session = session;
        if args.calibration.is_some() {
            // `--calibration` replaces the session's: its file is not read.
            session.calibration = None;
        }
        let resolved = session.resolve(p)?;
        let hash = crate::fsutil::content_hash(text.as_bytes());
        (resolved, Some((save_target(p, &text), hash)))
    } else if p.is_dir()
        || p.extension()
            .is_some_and(|e| e == "ndjson" || e == "jsonl" || e == "json")
    {
        let mut r = adhoc_session(args)?;
        note_assumed_cluster(&mut r, args);
        (r, None)
    } else {
        anyhow::bail!(
            "{}: expected a session (.ron), a stats file (.ndjson) or a dump directory",
            p.display()
        )
    };
    let mut resolved = resolved;
    super::model_args::apply_overrides_noted(
        &mut resolved,
        args.calibration.as_deref(),
        args.stack.stack().as_ref(),
    )?;
    let mut app = prepared(resolved, args.device)?;
    if let Some(other) = &args.compare {
        super::open_compare::attach(&mut app, other)?;
    }
    let branch_copy = attach_branches(&mut app, args, p)?;
    if let Some(((path, replace), read_hash)) = save {
        if replace {
            app.may_overwrite.insert(path.clone(), read_hash);
        } else {
            let note = format!(
                "s saves to {} ({} has comments)",
                path.display(),
                p.display()
            );
            app.status = if app.status.is_empty() {
                note
            } else {
                format!("{} · {note}", app.status)
            };
        }
        app.save_path = path;
    }
    if let Some((file, text)) = branch_copy {
        name_branches_for_save(&mut app, &file, text);
    }
    Ok(app)
}

/// Lay the branch records over the run: `--branches FILE`, else the session's `branches:`
/// (relative to it). Returns the file given on the command line and its text, which a save
/// names in the session ([`name_branches_for_save`]).
fn attach_branches(
    app: &mut App,
    args: &OpenArgs,
    p: &Path,
) -> anyhow::Result<Option<(PathBuf, String)>> {
    let session = &app.resolved.session;
    let (file, given) = match (&args.branches, &session.branches) {
        (Some(b), _) => {
            if !matches!(session.source, crate::session::DataSource::Stats { .. }) {
                // A command-line error (exit 2), as plan's and grid's.
                super::flag_bail!(
                    "{}: --branches lays a branched experiment over a stats file's run; this \
                     session's source is {}",
                    p.display(),
                    session.source.kind_label()
                );
            }
            (b.clone(), true)
        }
        (None, Some(rel)) => (
            crate::session::branches_in(&app.resolved.base, rel)
                .map_err(|e| anyhow::anyhow!("{}: branches: {e}", p.display()))?,
            false,
        ),
        (None, None) => return Ok(None),
    };
    let confidence = session.estimator.confidence;
    let (report, text) = super::cbs::load_branch_records(&file, confidence).with_context(|| {
        if given {
            "--branches".to_string()
        } else {
            format!("{}: branches", p.display())
        }
    })?;
    app.branches = Some(std::sync::Arc::new(report));
    app.convert_from_branches = args.b_crit_from.map(|k| match k {
        BCritFrom::BNoise => crate::app::branches::ConversionKind::BNoise,
        BCritFrom::ThresholdCbs => crate::app::branches::ConversionKind::ThresholdCbs,
    });
    if !app.loading {
        crate::app::update::convert_from_branches(app);
        if let Some(n) = app.notice.take() {
            app.status = n;
        }
        // The table and plan requested on opening see the converted B_crit.
    }
    Ok(given.then_some((file, text)))
}

/// Name the branch records given with `--branches` in the session a save writes: by their
/// file name when they lie in the save's directory, else as a copy written beside it. Not a
/// change to save by itself: a session that was clean stays clean.
fn name_branches_for_save(app: &mut App, file: &Path, text: String) {
    let Some(name) = file.file_name().map(|n| n.to_string_lossy().into_owned()) else {
        return;
    };
    let save_dir = app
        .save_path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let same_dir = match (file.parent(), save_dir.canonicalize()) {
        (Some(d), Ok(save)) => {
            let d = if d.as_os_str().is_empty() {
                Path::new(".")
            } else {
                d
            };
            d.canonicalize().is_ok_and(|d| d == save)
        }
        _ => false,
    };
    if !same_dir {
        app.save_with.push((name.clone(), text));
    }
    let was_clean = !app.dirty();
    app.resolved.session.branches = Some(name);
    if was_clean {
        let s = app.resolved.session.clone();
        app.mark_clean(&s);
    }
}
