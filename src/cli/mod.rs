//! Command-line surface (clap derive). The binary edge: commands return `anyhow::Result`.
//! Each subcommand's arguments and runner live in a file of their own.

pub mod analyze;
pub mod analyze_compare;
pub mod bench;
pub mod branch;
pub mod branch_args;
pub mod calibrate;
pub mod calibrate_links;
pub mod calibration_in_force;
pub mod cbs;
pub mod cluster_args;
pub mod demo_train;
pub mod estimator_args;
pub mod grid;
pub mod lesson;
pub mod model_args;
pub mod open;
pub mod open_compare;
pub mod plan;
pub mod predict;
pub mod scenario_args;
pub mod snapshot;
pub mod stack_args;
pub mod watch;
pub mod watch_advise;
pub mod whatif_args;

use clap::{Parser, Subcommand};

/// copus: explore how batch size (gradient noise scale) and 3D parallelism interact.
#[derive(Debug, Parser)]
#[command(
    name = "copus",
    about,
    long_about = None,
    disable_version_flag = true,
    after_help = EXIT_STATUS
)]
pub struct Cli {
    /// Print the version and the compute backends: compiled in, usable here, or why not.
    #[arg(short = 'V', long)]
    pub version: bool,
    /// Indent the --json output of the subcommand that follows (each command that prints JSON
    /// takes `--pretty` itself too).
    #[arg(long, hide = true)]
    pub pretty: bool,
    /// The explorer's configuration file and theme, for the bundled demo (no subcommand) and,
    /// given before it, for the explorer commands (`open`, `watch`, `lesson`, `config`).
    #[command(flatten)]
    pub explorer: ExplorerArgs,
    /// What to do; without a subcommand the explorer opens on the bundled demo session.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// What `copus --version` prints: the version, then each compute backend (compiled in, usable
/// here or why not) and what `--device auto` picks, e.g. "CPU (no CUDA driver found)".
pub fn version_text() -> String {
    format!(
        "copus {}\n{}",
        env!("CARGO_PKG_VERSION"),
        crate::compute::backend_report().render()
    )
}

/// The exit statuses, as `--help` states them (docs/RELIABILITY.md has the full table).
pub const EXIT_STATUS: &str = "Exit status: 0 success (a configuration that does not fit is a \
result: \"cannot run\" and `fits: false` in --json, exit 0); 1 an error of a file, its content \
or the run (the message names the file and line; also `plan` when no cell of its search can \
run); 2 a command-line error (a flag's value, a \
configuration the flags cannot form, an unknown built-in name; the message names the flag); \
4 out of memory; 128+N stopped by signal N (130 Ctrl+C). See docs/RELIABILITY.md.";

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Open the explorer on a session (.ron), a gradient dump directory, a stats .ndjson file or
    /// `demo`.
    Open(open::OpenArgs),
    /// Follow a live training run: a growing stats file or tcp://HOST:PORT.
    Watch(watch::WatchArgs),
    /// Estimate the gradient noise scale B_simple (the usual proxy for the critical batch size) of a stats file or dump directory.
    Analyze(analyze::AnalyzeArgs),
    /// The critical batch size measured by branched training: threshold CBS and fitted
    /// B_noise per branch point, with bootstrap intervals.
    Cbs(cbs::CbsArgs),
    /// The built-in trainer's branched experiment: branch records for `copus cbs`.
    Branch(branch::BranchArgs),
    /// Predict step time, throughput and memory of one parallel configuration.
    #[command(after_help = EXIT_STATUS)]
    Predict(predict::PredictArgs),
    /// Fit the performance model's efficiencies to measured step times (CSV or stats file).
    #[command(after_help = EXIT_STATUS)]
    Calibrate(calibrate::CalibrateArgs),
    /// The Goodput grid (batch sizes × parallel layouts) of a session at one training point.
    #[command(after_help = EXIT_STATUS)]
    Grid(grid::GridArgs),
    /// Plan batch-size and parallel-configuration switch points for a session.
    #[command(after_help = EXIT_STATUS)]
    Plan(plan::PlanArgs),
    /// Measure the gradient-reduction bandwidth against a memory-read baseline.
    Bench(bench::BenchArgs),
    /// Train a small character-level language model for real (built-in, CPU) and stream its
    /// per-micro-batch gradient statistics (protocol v1) to a file, TCP clients or stdout.
    DemoTrain(demo_train::DemoTrainArgs),
    /// A guided lesson in the explorer (noise scale, coupling, a measured run, what-if, is the
    /// estimate right); `--list` lists them.
    Lesson(lesson::LessonArgs),
    /// The explorer's configuration (key bindings, theme): `--print` writes the defaults;
    /// without it, checks the file in use (`--config FILE` or the default location).
    Config(ConfigArgs),
    /// Any explorer screen after a list of keys, as text or SVG (for slides), no terminal.
    Snapshot(snapshot::SnapshotArgs),
}

impl Command {
    /// Whether this command was asked for indented JSON (`--pretty` after the subcommand).
    fn pretty(&self) -> bool {
        match self {
            Command::Analyze(a) => a.pretty,
            Command::Bench(a) => a.pretty,
            Command::Calibrate(a) => a.pretty,
            Command::Cbs(a) => a.pretty,
            Command::Grid(a) => a.pretty,
            Command::Plan(a) => a.pretty,
            Command::Predict(a) => a.pretty,
            Command::Watch(a) => a.pretty,
            Command::Open(_)
            | Command::Branch(_)
            | Command::DemoTrain(_)
            | Command::Lesson(_)
            | Command::Config(_)
            | Command::Snapshot(_) => false,
        }
    }
}

/// The options of the commands that open the explorer: its configuration file and theme.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ExplorerArgs {
    /// The configuration file (key bindings, theme) for the explorer; default
    /// $XDG_CONFIG_HOME/copus/config.ron (or ~/.config/copus/config.ron) when it exists.
    #[arg(long, value_name = "FILE")]
    pub config: Option<std::path::PathBuf>,
    /// The explorer's theme, over the configuration file's.
    #[arg(long, value_enum)]
    pub theme: Option<crate::config::ThemeName>,
}

impl ExplorerArgs {
    /// These options where given, else `outer`'s (those given before the subcommand).
    pub fn or(&self, outer: &ExplorerArgs) -> ExplorerArgs {
        ExplorerArgs {
            config: self.config.clone().or_else(|| outer.config.clone()),
            theme: self.theme.or(outer.theme),
        }
    }

    /// The explorer's configuration these options name (see [`explorer_config`]).
    pub fn load(&self) -> anyhow::Result<crate::config::Config> {
        explorer_config(self.config.as_deref(), self.theme)
    }
}

/// Text output on a terminal narrower than 100 columns wraps at its width (`COLUMNS` where
/// set, else the terminal's own): at 80 columns the lines of 100 broke mid-word. Output to a
/// file or a pipe keeps 100 whatever the environment says.
fn wrap_at_the_terminal() {
    use std::io::IsTerminal;
    if !std::io::stdout().is_terminal() {
        return;
    }
    let columns = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
        .or_else(|| {
            ratatui::crossterm::terminal::size()
                .ok()
                .map(|(w, _)| usize::from(w))
        });
    if let Some(c) = columns.filter(|&c| c > 0) {
        crate::format::set_text_columns(c);
    }
}

/// Run the parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    let pretty = cli.pretty || cli.command.as_ref().is_some_and(Command::pretty);
    PRETTY.store(pretty, std::sync::atomic::Ordering::Relaxed);
    wrap_at_the_terminal();
    if cli.version {
        print!("{}", version_text());
        return Ok(());
    }
    let outer = &cli.explorer;
    match cli.command {
        None => open::run_demo(&outer.load()?),
        Some(Command::Open(a)) => open::run(&a, &a.explorer.or(outer).load()?),
        Some(Command::Config(a)) => {
            let file = a.config.clone().or_else(|| outer.config.clone());
            config_command(&a, file.as_deref())
        }
        Some(Command::Watch(a)) => watch::run(&a, &a.explorer.or(outer)),
        Some(Command::Analyze(a)) => analyze::run(&a),
        Some(Command::Predict(a)) => predict::run(&a),
        Some(Command::Cbs(a)) => cbs::run(&a),
        Some(Command::Branch(a)) => branch::run(&a),
        Some(Command::Calibrate(a)) => calibrate::run(&a),
        Some(Command::Grid(a)) => grid::run(&a),
        Some(Command::Plan(a)) => plan::run(&a),
        Some(Command::Bench(a)) => bench::run(&a),
        Some(Command::Lesson(a)) => lesson::run(&a, &a.explorer.or(outer).load()?),
        Some(Command::Snapshot(a)) => snapshot::run(&a),
        Some(Command::DemoTrain(a)) => demo_train::run(&a),
    }
}

/// The explorer's configuration: the file given with `--config` (or the default location's),
/// its theme replaced by `--theme` when given.
fn explorer_config(
    file: Option<&std::path::Path>,
    theme: Option<crate::config::ThemeName>,
) -> anyhow::Result<crate::config::Config> {
    let mut config = crate::config::load(file)?;
    if let Some(theme) = theme {
        config.theme = theme;
    }
    Ok(config)
}

/// `copus config`: print the defaults (`--print`) or check a configuration file.
fn config_command(args: &ConfigArgs, file: Option<&std::path::Path>) -> anyhow::Result<()> {
    if args.print {
        return write_stdout(&crate::config::defaults_text());
    }
    let config = crate::config::load(file)?;
    let text = match &config.source {
        Some(path) => format!(
            "{}: valid (theme {}, {} of {} actions rebound)\n",
            path.display(),
            ron::to_string(&config.theme).unwrap_or_default(),
            config.keymap.rebound(),
            crate::config::keys::Keymap::default().actions().count()
        ),
        None => match crate::config::default_path() {
            Some(p) => format!(
                "no configuration file at {} (the defaults apply; copus config --print writes them)\n",
                p.display()
            ),
            None => "no configuration file (the defaults apply)\n".to_string(),
        },
    };
    write_stdout(&text)
}

/// `copus config` options.
#[derive(Debug, clap::Args)]
pub struct ConfigArgs {
    /// Write the default configuration (every key binding and the theme) to standard output.
    #[arg(long)]
    pub print: bool,
    /// The configuration file to check; default $XDG_CONFIG_HOME/copus/config.ron (or
    /// ~/.config/copus/config.ron).
    #[arg(long, value_name = "FILE")]
    pub config: Option<std::path::PathBuf>,
}

/// The message of `e` for the terminal: each cause of the chain once (a cause whose text the
/// message already holds is not repeated), joined by ": ", with control characters (terminal
/// escape sequences in file or layer names) escaped.
pub fn error_message(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    escape_controls(&out)
}

pub use crate::format::escape_controls;

/// A command-line flag's value outside what the flag takes (`--gemm-plateau 0`,
/// `--restart-cost -1`), found after parsing: exit status 2, as clap's errors, where other
/// errors are 1 (docs/RELIABILITY.md).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct FlagValueError(pub String);

/// `return Err(FlagValueError(format!(…)))`: a flag's value it does not take (exit status 2).
macro_rules! flag_bail {
    ($($t:tt)*) => {
        return Err($crate::cli::FlagValueError(format!($($t)*)).into())
    };
}
pub(crate) use flag_bail;

/// Any error of `r` as a flag's value it does not take (exit status 2): for checks every
/// error of which is about the flags' values (the what-if flags, the cluster flags).
pub fn as_flag_error<T>(r: anyhow::Result<T>) -> anyhow::Result<T> {
    r.map_err(|e| {
        if e.is::<FlagValueError>() {
            e
        } else {
            FlagValueError(format!("{e:#}")).into()
        }
    })
}

/// The profile a flag names (`--model NAME|FILE`, `--hardware NAME|FILE`): a name that is no
/// built-in profile is the flag's value it does not take (exit status 2, as an unknown
/// `--stack` is); a file that does not read stays an error of the file (1).
pub fn flag_profile<T>(
    flag: &str,
    r: Result<T, crate::profiles::ProfileError>,
) -> anyhow::Result<T> {
    r.map_err(|e| match e {
        crate::profiles::ProfileError::Unknown { .. } => {
            FlagValueError(format!("{flag}: {e}")).into()
        }
        other => anyhow::Error::new(other).context(flag.to_string()),
    })
}

/// A count that must be at least 1 (`--batch`, `--tp`): clap's own range check printed
/// "0 is not in 1..18446744073709551615".
pub fn at_least_one_u64(s: &str) -> Result<u64, String> {
    use std::num::IntErrorKind;
    let t = s.trim();
    match t.parse::<u64>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        // A whole number all the same: said as what is wrong with it.
        Err(e) if *e.kind() == IntErrorKind::PosOverflow => {
            Err(format!("{t} is too large (at most {})", u64::MAX))
        }
        Err(_)
            if t.strip_prefix('-')
                .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit())) =>
        {
            Err(format!("{t}: must be at least 1"))
        }
        Err(_) => Err(format!("'{s}' is not a whole number (at least 1)")),
    }
}

/// [`at_least_one_u64`] for a 32-bit count.
pub fn at_least_one_u32(s: &str) -> Result<u32, String> {
    let n = at_least_one_u64(s)?;
    u32::try_from(n).map_err(|_| format!("{n} is too large (at most {})", u32::MAX))
}

/// Write `text` to standard output and flush it: a full disk or a closed descriptor is an
/// error naming standard output (`println!` would panic).
pub fn write_stdout(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| anyhow::anyhow!("cannot write to standard output: {e}"))
}

/// Standard output for writing hundreds of MB in large pieces (`analyze --json`): on Unix a
/// duplicate of its file descriptor, written without Rust's `Stdout`, which is line-buffered
/// and searches every write for its last newline (76 MB of compact JSON scanned byte by byte
/// for none) and copies what follows the last one into its buffer. Whatever `Stdout` holds is
/// flushed first, so the order of the output is kept. Elsewhere, `Stdout` itself.
pub fn bulk_stdout() -> std::io::Result<Box<dyn std::io::Write + Send>> {
    use std::io::Write;
    std::io::stdout().lock().flush()?;
    #[cfg(unix)]
    {
        use std::os::fd::AsFd;
        let fd = std::io::stdout().as_fd().try_clone_to_owned()?;
        Ok(Box::new(std::fs::File::from(fd)))
    }
    #[cfg(not(unix))]
    {
        Ok(Box::new(std::io::stdout()))
    }
}

/// The name `value` has in JSON output (an enum's snake_case variant, `"two_batch"`), for text
/// that should say what `--json` says rather than Rust's own names.
pub fn json_name<T: serde::Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => "?".to_string(),
    }
}

/// `--pretty` was given.
static PRETTY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether `--json` output is indented: with `--pretty`, or when standard output is a
/// terminal (a pipe or a file gets compact JSON, the same fields).
pub fn json_pretty() -> bool {
    use std::io::IsTerminal;
    PRETTY.load(std::sync::atomic::Ordering::Relaxed) || std::io::stdout().is_terminal()
}

/// [`write_stdout`] of `value` as JSON and a newline (the `--json` output of the commands):
/// indented where [`json_pretty`] says so, else compact.
pub fn write_json<T: serde::Serialize + ?Sized>(value: &T) -> anyhow::Result<()> {
    let text = if json_pretty() {
        serde_json::to_string_pretty(value)?
    } else {
        serde_json::to_string(value)?
    };
    write_stdout(&format!("{text}\n"))
}

/// Exit status of a failed command: 1, or 128 + the signal's number when a termination
/// signal stopped the explorer (143 for SIGTERM, 130 for SIGINT, 129 for SIGHUP).
pub fn exit_code(e: &anyhow::Error) -> u8 {
    // A flag's value out of its range is a command-line error, as clap's own are.
    if e.downcast_ref::<FlagValueError>().is_some() {
        return 2;
    }
    if let Some(crate::signals::StoppedBySignal(sig)) = e.downcast_ref() {
        return u8::try_from(128 + sig).unwrap_or(crate::signals::SIGNAL_EXIT as u8);
    }
    match e.downcast_ref::<crate::runtime::TuiError>() {
        // As a shell reports a process a signal ended: 128 + the signal's number.
        Some(crate::runtime::TuiError::Signal(sig, _)) => {
            u8::try_from(128 + sig).unwrap_or(crate::signals::SIGNAL_EXIT as u8)
        }
        _ => 1,
    }
}

#[cfg(test)]
mod count_tests {
    use super::{at_least_one_u32, at_least_one_u64};

    /// A whole number out of range is said so, not "not a whole number".
    #[test]
    fn a_count_out_of_range_is_named_as_such() {
        assert_eq!(at_least_one_u64("64"), Ok(64));
        assert_eq!(at_least_one_u64("0"), Err("must be at least 1".into()));
        let big = at_least_one_u64("99999999999999999999").unwrap_err();
        assert!(big.contains("too large"), "{big}");
        let negative = at_least_one_u64("-2").unwrap_err();
        assert_eq!(negative, "-2: must be at least 1");
        let tp = at_least_one_u32("5000000000").unwrap_err();
        assert!(tp.contains("too large (at most 4294967295)"), "{tp}");
        for bad in ["6.5", "x", "-", "-x", ""] {
            let e = at_least_one_u64(bad).unwrap_err();
            assert!(e.contains("is not a whole number"), "{bad}: {e}");
        }
    }
}
