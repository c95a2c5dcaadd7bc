//! `copus watch`: follow a live training run (a growing protocol file or `tcp://HOST:PORT`).
//! Headless mode collects records until enough steps arrived (or a timeout) and prints a
//! summary; the interactive explorer view is wired by the lead.

use crate::source::live::aggregate::LiveCore;
use crate::source::live::history::HistoryBin;
use crate::source::live::{LinkState, LiveEvent, Target, spawn_default_follower_batched};
use crate::stats::{EstimatorSettings, SmootherKind, StepStats};
use clap::Args;
use serde::Serialize;
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

/// Arguments of `copus watch`.
#[derive(Debug, Args)]
pub struct WatchArgs {
    /// A growing stats file, `-` for standard input (a pipe: its end ends the watch), or
    /// tcp://HOST:PORT (tcp://:PORT is 127.0.0.1).
    pub target: String,
    /// Do not open the explorer; print a summary.
    #[arg(long)]
    pub headless: bool,
    /// With --headless: stop after this many records (`steps_ingested`: each valid line once,
    /// those the producer flagged `skipped` included; malformed and non-finite lines are not
    /// counted).
    #[arg(long, requires = "headless")]
    pub until_steps: Option<u64>,
    /// With --headless: print the summary as JSON.
    #[arg(long, requires = "headless")]
    pub json: bool,
    /// Indent the --json output (the default on a terminal; compact into a pipe or a
    /// file).
    #[arg(long, requires = "json")]
    pub pretty: bool,
    /// With --headless: give up after this many seconds (non-zero exit if --until-steps was
    /// not reached).
    #[arg(long, requires = "headless")]
    pub timeout_s: Option<f64>,
    /// Tokens per sample of the run (default: inferred from the records' tokens and b_big; in
    /// the explorer a run far from the model's sequence length is flagged until this is given;
    /// headless, the summary's tokens and the advice count in it, as `analyze --seq-len`).
    #[arg(long, value_parser = super::at_least_one_u32)]
    pub seq_len: Option<u32>,
    /// Explorer: model and cluster of the run.
    #[command(flatten)]
    pub cluster: super::cluster_args::ClusterArgs,
    /// Write advice (the batch and layout to run now, from the live B_crit and --session's
    /// model and cluster, else --model, --hardware and --nodes): with --headless to this file, FIFO or tcp://HOST:PORT (served to every client);
    /// in the explorer each advice waits for approval (A) and is appended to the file.
    #[arg(long, value_name = "OUT")]
    pub advise: Option<String>,
    /// The session (.ron) whose model, cluster and b_crit_scale --advise uses (instead of
    /// --model, --hardware and --nodes; not together with them).
    #[arg(
        long,
        requires = "advise",
        conflicts_with_all = ["model", "hardware", "nodes", "gpus_per_node"]
    )]
    pub session: Option<std::path::PathBuf>,
    /// With --advise: write advice marked `"dry_run": true` (shown, not to be applied).
    #[arg(long, requires = "advise")]
    pub dry_run: bool,
    /// With --advise: steps between two pieces of advice.
    #[arg(long, default_value_t = 50, requires = "advise")]
    pub min_dwell_steps: u64,
    /// With --advise: goodput gain a switch must predict, as a fraction (default: the
    /// session's switch_threshold).
    #[arg(long, requires = "advise")]
    pub advise_threshold: Option<f64>,
    /// With --advise: replace an existing OUT file.
    #[arg(long, requires = "advise")]
    pub force: bool,
    /// Calibration file (`copus calibrate --out`) in force for the explorer's heatmap and
    /// the advice, instead of the profile's efficiencies.
    #[arg(long)]
    pub calibration: Option<std::path::PathBuf>,
    /// The training stack of the run (changes the session's `stack`; the explorer's and the
    /// advice's predictions).
    #[command(flatten)]
    pub stack: super::stack_args::StackArgs,
    /// The explorer's configuration file and theme.
    #[command(flatten)]
    pub explorer: super::ExplorerArgs,
}

/// How many `applied` steps the summary lists (the newest).
const APPLIED_KEPT: usize = 1000;
/// How many malformed lines are quoted in the summary.
const MALFORMED_EXAMPLES: usize = 5;
/// Most step ranges in `history`.
pub const HISTORY_BINS: usize = 64;
/// Records the live estimate can place behind the newest (out-of-order arrivals).
pub use crate::source::live::aggregate::REPLAY_RECORDS;
/// How many malformed lines are printed to stderr as they arrive.
const MALFORMED_PRINTED: u64 = 20;

/// What a headless watch saw.
#[derive(Debug, Serialize)]
pub struct WatchSummary {
    /// The target followed.
    pub target: String,
    /// Valid records received (including ones the producer flagged `skipped`).
    pub steps_ingested: u64,
    /// Records flagged `skipped` by the producer (excluded from the estimate).
    pub steps_skipped: u64,
    /// Complete lines that were not valid records.
    pub malformed_lines: u64,
    /// Records skipped for a NaN or ±Inf value (as `analyze` counts them).
    pub non_finite_skipped: u64,
    /// Records dropped because their step was already received with the same values
    /// (replayed after a reconnect, or the file rewritten).
    pub duplicates_dropped: u64,
    /// Times the producer restarted (a step received again with other values).
    pub restarts: u64,
    /// Records received before a restart and superseded by the restarted run (from its first
    /// step on), so no longer counted in `steps_ingested`.
    pub superseded: u64,
    /// Why the restarts look like several writers into one stream (every rank writing its
    /// record of each step), when they do; `null` otherwise.
    pub several_writers: Option<String>,
    /// Oldest records forgotten to bound memory (more than
    /// [`crate::source::live::MAX_KEPT_RECORDS`] received); the estimate covers the newest.
    pub records_evicted: u64,
    /// Up to 5 malformed lines: `(line number, reason)`.
    pub malformed_examples: Vec<(u64, String)>,
    /// Step index of the first and last record (a range, where `analyze`'s `summary.steps` is
    /// a count: docs/JSON.md; `first_step` and `last_step` say the same by name).
    pub steps: Option<[u64; 2]>,
    /// Step index of the first record kept.
    pub first_step: Option<u64>,
    /// Step index of the last record.
    pub last_step: Option<u64>,
    /// Loss (nats) of the last record that has one.
    pub last_loss: Option<f64>,
    /// Whether --until-steps was reached (true when it was not asked for).
    pub complete: bool,
    /// The signal that stopped the watch before it ended by itself ("SIGINT", "SIGTERM",
    /// "SIGHUP"; the process then exits 128 + its number), `null` otherwise: a script that
    /// reads `complete` alone saw an interrupted watch as finished.
    pub stopped_by: Option<&'static str>,
    /// Whether the input ended for good (an anonymous pipe whose writer closed it, as in
    /// `… | copus watch /dev/stdin`): no more records could come.
    pub input_ended: bool,
    /// What the link last said when it had lost a source it had reached and not found it
    /// again by the end of the watch (a TCP server that closed the connection: the run ended,
    /// or it stalled); `null` while the source was there at the end.
    pub source_lost: Option<String>,
    /// Seconds spent watching.
    pub elapsed_s: f64,
    /// Records the incremental (live) estimate left out because they arrived too far behind
    /// the newest (the final estimate includes them).
    pub late_records: u64,
    /// The whole run's smoothed B_simple in at most [`HISTORY_BINS`] step ranges, from the
    /// incremental one-sided smoother (bounded memory: recent steps in full, older ones
    /// binned; see docs/LIVE.md).
    pub history: Vec<HistoryBin>,
    /// Advice-loop lines in the stream (`advice`, `applied`): not records, not malformed.
    pub event_lines: u64,
    /// Steps at which the run reported applying a change (`applied` lines; the newest 1000).
    pub applied_at: Vec<u64>,
    /// With --advise: the advice written, in order (`null` without --advise).
    pub advice: Option<Vec<crate::plan::advice::Advice>>,
    /// With --advise and no advice written: why (what the advisor said of the last estimate);
    /// `null` otherwise.
    pub advice_note: Option<String>,
    /// The noise-scale estimate over every unflagged record; its fields are flattened in.
    #[serde(flatten)]
    pub estimate: LiveEstimate,
}

/// The noise-scale estimate of a live run, from the stats engine with the one-sided (live)
/// smoother: the whole-run ratio of means with its interval, and the smoothed estimate at the
/// newest step (what the run looks like now).
#[derive(Debug, Clone, Default, Serialize)]
pub struct LiveEstimate {
    /// Steps the engine used (unflagged, finite records).
    pub steps_used: usize,
    /// Whole-run B_simple (samples): mean tr Σ / mean |G|²; `None` when mean |G|² ≤ 0.
    pub b_simple: Option<f64>,
    /// Interval of `b_simple` at the engine's confidence (an infinite end is `null`).
    pub ci: Option<[f64; 2]>,
    /// One-sided smoothed B_simple at the newest step (samples).
    pub b_simple_now: Option<f64>,
    /// Interval of `b_simple_now`.
    pub ci_now: Option<[f64; 2]>,
    /// Stability verdict (stable, noisy, unreliable).
    pub verdict: Option<crate::stats::Verdict>,
    /// Diagnostics with reasons.
    pub diagnostics: Vec<crate::stats::Diagnostic>,
    /// Where the estimate is now: the ratio of means over the last window of steps (as in
    /// `analyze --json`'s summary); `null` without an estimate.
    pub now: Option<crate::stats::WindowEstimate>,
    /// First window against last window (as in `analyze --json`); `null` when not measured
    /// (fewer steps than two windows, or no positive estimate in the first or the last window).
    pub drift: Option<crate::stats::Drift>,
    /// Why the verdict is not `stable`, each with what to do (as in `analyze --json`).
    pub reasons: Vec<crate::stats::Reason>,
    /// Why there is no estimate, when there is none.
    pub error: Option<String>,
    /// The headline `analyze` prints for the same summary (now, drift, run-wide, verdict and
    /// its reasons), for the text output; not in the JSON, whose fields carry it.
    #[serde(skip)]
    pub headline: Option<String>,
}

/// Settings the live estimate uses: the engine's defaults with the one-sided smoother.
pub fn live_settings() -> EstimatorSettings {
    EstimatorSettings {
        smoother: SmootherKind::OneSided,
        ..EstimatorSettings::default()
    }
}

/// Estimate B_simple of the records received so far with the stats engine.
pub fn live_estimate(records: &[StepStats]) -> LiveEstimate {
    live_estimate_and_inflation(records, crate::stats::InputCounts::default(), None).0
}

/// [`live_estimate`] and the variance inflation φ of its smoothed points (1 without one).
/// `counts`: the lines the follower skipped (malformed, non-finite), which weigh in the
/// diagnostics and the verdict as they do for `analyze`.
/// `seq_len`: `--seq-len`, the tokens of one of the run's samples as the user reads them (the
/// headline's tokens, as `analyze --seq-len` counts them; it said "1 token per sample").
fn live_estimate_and_inflation(
    records: &[StepStats],
    counts: crate::stats::InputCounts,
    seq_len: Option<u32>,
) -> (LiveEstimate, f64) {
    let settings = live_settings();
    let detail = crate::stats::analysis::layers::LayerDetail::DiagnosticsOnly;
    let options = crate::stats::AnalyzeOptions::from(&settings)
        .with_layers(detail)
        .with_counts(counts);
    use crate::stats::estimate::interval;
    match crate::stats::analyze_parts(records, options) {
        Ok(parts) => {
            let phi = parts.inflation;
            let mut report = parts.into_report();
            if let Some(seq) = seq_len.map(f64::from) {
                report.summary.seq_len = Some(seq);
                report.summary.b_simple_tokens = report.summary.b_simple.map(|b| b * seq);
            }
            let now = report.steps.last();
            let headline = Some(super::analyze::render_headline(&report.summary));
            let estimate = LiveEstimate {
                headline,
                steps_used: report.summary.steps,
                b_simple: report.summary.b_simple,
                // An empty interval (no positive |G|² fits) is `null`, as in `analyze`.
                ci: Some(report.summary.ci).filter(|ci| !interval::is_empty(*ci)),
                b_simple_now: now.and_then(|r| r.b_simple),
                ci_now: now.map(|r| r.ci).filter(|ci| !interval::is_empty(*ci)),
                verdict: Some(report.summary.verdict),
                diagnostics: report.summary.diagnostics,
                now: Some(report.summary.now),
                drift: report.summary.drift,
                reasons: report.summary.reasons,
                error: None,
            };
            (estimate, phi)
        }
        Err(e) => (
            LiveEstimate {
                error: Some(e.to_string()),
                ..LiveEstimate::default()
            },
            1.0,
        ),
    }
}

/// An `--advise` file must be neither the run being followed nor the session read: with
/// `--force` it was truncated before the first line was read (the run's 200 lines, gone).
fn check_advise_path(args: &WatchArgs) -> anyhow::Result<()> {
    let Some(out) = args.advise.as_deref().filter(|o| !o.starts_with("tcp://")) else {
        return Ok(());
    };
    let target = std::path::Path::new(&args.target);
    let mut read: Vec<(&str, &std::path::Path)> = Vec::new();
    if !args.target.starts_with("tcp://") {
        read.push(("the run being followed", target));
    }
    if let Some(s) = &args.session {
        read.push(("--session", s));
    }
    crate::fsutil::check_distinct("--advise", std::path::Path::new(out), &read)?;
    Ok(())
}

/// Run `copus watch`; `explorer` (the explorer's configuration file and theme) only matters
/// without `--headless`.
pub fn run(args: &WatchArgs, explorer: &super::ExplorerArgs) -> anyhow::Result<()> {
    let target = Target::parse(&args.target)?;
    check_advise_path(args)?;
    if !args.headless {
        return run_explorer(args, &explorer.load()?);
    }
    // A pipe's end ends the watch (`… | copus watch - --headless`): it stops on its own.
    let ends_by_itself = matches!(&target, Target::File(p) if crate::fsutil::is_anonymous_pipe(p));
    if args.until_steps.is_none()
        && args.timeout_s.is_none()
        && args.advise.is_none()
        && !ends_by_itself
    {
        // `-` redirected from a file (`< FILE`) is a file, which watch follows as it grows.
        if args.target == "-" && std::fs::metadata("/dev/stdin").is_ok_and(|m| m.is_file()) {
            anyhow::bail!(
                "-: standard input is a file (a redirect, `< FILE`), which watch follows as it \
                 grows: --headless needs --until-steps N or --timeout-s S to stop, or read it \
                 once with `copus analyze -` (a pipe, `cat FILE | copus watch -`, stops at its \
                 end)"
            );
        }
        anyhow::bail!(
            "--headless needs --until-steps N or --timeout-s S, so that it stops (a pipe, `-`, \
             stops at its end)"
        );
    }
    if let (Some(cal), None) = (&args.calibration, &args.advise) {
        // Said, not ignored: the headless summary has no throughput for it to change.
        anyhow::bail!(
            "--calibration {}: with --headless it applies to --advise only (the summary is the \
             noise scale, which a calibration does not change)",
            cal.display()
        );
    }
    if args.until_steps.is_none() && args.timeout_s.is_none() && !ends_by_itself {
        // Why it does not stop by itself, for the source it follows.
        let why = if args.target.starts_with("tcp://") {
            "a TCP stream ends only when its trainer closes it"
        } else {
            "a file has no end: its trainer may still append to it"
        };
        eprintln!("copus watch: advising until Ctrl+C, --until-steps N or --timeout-s S ({why})");
    }
    let timeout = args.timeout_s.map(timeout_of).transpose()?;
    let created_advice = new_advice_file(args);
    let result = run_headless(args, target, timeout);
    remove_if_left_empty(created_advice.as_deref());
    result
}

/// The `--advise` file this run will create, if it is a file that does not exist yet.
fn new_advice_file(args: &WatchArgs) -> Option<std::path::PathBuf> {
    args.advise
        .as_deref()
        .filter(|o| !o.starts_with("tcp://"))
        .filter(|o| std::fs::symlink_metadata(o).is_err())
        .map(std::path::PathBuf::from)
}

/// Remove an advice file this run created and left empty (it failed, no advice was due, or
/// none was approved): it would otherwise make the same command refuse to run again without
/// --force. A file that existed before is never removed.
fn remove_if_left_empty(created: Option<&std::path::Path>) {
    let Some(path) = created else { return };
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_file() && m.len() == 0)
        && std::fs::remove_file(path).is_ok()
    {
        eprintln!(
            "copus watch: --advise {}: no advice written; the empty file was removed",
            path.display()
        );
    }
}

/// The headless follower: the run, its advice and its summary.
fn run_headless(args: &WatchArgs, target: Target, timeout: Option<Duration>) -> anyhow::Result<()> {
    let mut advising = match &args.advise {
        Some(out) => Some(super::watch_advise::Advising::open(
            &super::watch_advise::AdviseOptions {
                out,
                session: advice_session(args),
                dry_run: args.dry_run,
                min_dwell_steps: args.min_dwell_steps,
                threshold: args.advise_threshold,
                force: args.force,
                seq_len: args.seq_len,
                calibration: args.calibration.as_deref(),
                stack: args.stack.stack(),
            },
        )?),
        None => None,
    };
    // Ctrl+C or SIGTERM ends the follow with its summary and the advice written so far, then
    // exits 128 + the signal's number (the process died without a word before).
    let signals = crate::signals::StopSignals::register_headless()?;
    // The summary reads a sample as the advice does (it announced the session's 64 tokens,
    // then counted "1 token per sample").
    let seq_len = args
        .seq_len
        .or_else(|| advising.as_ref().and_then(|a| a.seq_len()));
    let (mut summary, advise_error) = watch_headless(
        target,
        (args.until_steps, seq_len),
        timeout,
        advising.as_mut(),
        &signals,
    );
    let stopped = signals.received();
    drop(signals);
    summary.stopped_by = stopped.map(crate::signals::signal_name);
    summary.advice = advising.as_ref().map(|a| a.written().to_vec());
    summary.advice_note = advising.as_ref().and_then(|a| a.why_none());
    if let Some(e) = advise_error {
        return Err(e);
    }
    if args.json {
        super::write_json(&serde_json::json!({ "summary": &summary }))?;
    } else {
        super::write_stdout(&summary_text(&summary))?;
    }
    if let Some(sig) = stopped {
        return Err(crate::signals::StoppedBySignal(sig).into());
    }
    match (args.until_steps, &summary.estimate.error) {
        (Some(n), _) if !summary.complete && summary.input_ended => anyhow::bail!(
            "the input ended after {} of {n} steps (its writer closed the pipe)",
            summary.steps_ingested
        ),
        (Some(n), _) if !summary.complete => anyhow::bail!(
            "timed out after {:.1} s with {} of {n} steps",
            summary.elapsed_s,
            summary.steps_ingested
        ),
        // As `analyze`: no estimate is a failure, after the summary that says why.
        (_, Some(e)) => anyhow::bail!("{}: no estimate: {e}", summary.target),
        _ => Ok(()),
    }
}

/// Longest `--timeout-s` accepted: one year, in seconds.
pub const MAX_TIMEOUT_S: f64 = 365.0 * 24.0 * 3600.0;

/// `--timeout-s` as a duration: finite, non-negative and at most [`MAX_TIMEOUT_S`].
pub fn timeout_of(t: f64) -> anyhow::Result<Duration> {
    if !(t.is_finite() && (0.0..=MAX_TIMEOUT_S).contains(&t)) {
        anyhow::bail!(
            "--timeout-s must be a number of seconds between 0 and {MAX_TIMEOUT_S} (one year), not {t}"
        );
    }
    Ok(Duration::from_secs_f64(t))
}

/// The model and cluster `--advise` advises on: `--session`, else the command line's
/// (copus's defaults said on stderr, as the explorer's title says them).
fn advice_session(args: &WatchArgs) -> super::watch_advise::AdviceSession<'_> {
    if let Some(path) = &args.session {
        return super::watch_advise::AdviceSession::File(path);
    }
    let c = &args.cluster;
    if *c == super::cluster_args::ClusterArgs::default() {
        eprintln!(
            "copus watch: advising on copus's default model and cluster ({} on {}×{} {}): set \
             --model, --hardware and --nodes, or --session, to your run's",
            c.model, c.nodes, c.gpus_per_node, c.hardware
        );
    }
    let source = crate::session::DataSource::Live {
        target: args.target.clone(),
        seq_len: args.seq_len,
    };
    super::watch_advise::AdviceSession::Flags {
        session: Box::new(c.session(format!("live: {}", args.target), source)),
        shown: format!(
            "--model {} --hardware {} ({}×{} GPUs)",
            c.model, c.hardware, c.nodes, c.gpus_per_node
        ),
    }
}

/// The explorer's session for a live run, and where `s` saves it: the `--session` (with
/// `--advise`) showing its model and cluster and the run's own batch as the current one, else
/// an ad-hoc one on the command line's model and cluster, saved as `copus-live.ron`.
fn explorer_session(
    args: &WatchArgs,
) -> anyhow::Result<(crate::session::Session, std::path::PathBuf)> {
    let source = |seq_len| crate::session::DataSource::Live {
        target: args.target.clone(),
        seq_len,
    };
    // With --advise, the explorer shows the advice session's model and cluster.
    Ok(match &args.session {
        Some(p) => {
            super::model_args::check_session_path(p)
                .map_err(|e| anyhow::anyhow!("--session {e}"))?;
            let mut s =
                crate::session::Session::load(p).map_err(|e| anyhow::anyhow!("--session {e}"))?;
            s.name = format!("live: {} · {}", args.target, s.name);
            // The flag, else what the session says of its own live run.
            let seq_len = args
                .seq_len
                .or_else(|| super::watch_advise::live_seq_len(&s));
            s.source = source(seq_len);
            // The run's batch is the current one (its records' b_big, as the advice reads it):
            // the session's own current_batch (512 in the demo) was shown as "your batch"
            // beside advice about the run's 32.
            s.current_batch = None;
            (s, p.clone())
        }
        None => (
            args.cluster
                .session(format!("live: {}", args.target), source(args.seq_len)),
            std::path::PathBuf::from(super::watch_advise::AD_HOC_SESSION_FILE),
        ),
    })
}

/// The explorer on a live run: an ad-hoc session (saved in the current directory as
/// `copus-live.ron` on `s`, asking before it replaces one) whose trajectory grows as records
/// arrive.
fn run_explorer(args: &WatchArgs, config: &crate::config::Config) -> anyhow::Result<()> {
    let (session, path) = explorer_session(args)?;
    let session_seq_len = super::watch_advise::live_seq_len(&session);
    let mut resolved = session.resolve(&path)?;
    // As `open` says it: a run costed on copus's defaults says so in its title (a 6k-parameter
    // demo run read as "llama-7b on 1×8 h100-sxm" without a word).
    if args.session.is_none() && args.cluster == super::cluster_args::ClusterArgs::default() {
        resolved.title_note = Some(super::open::ASSUMED_CLUSTER.to_string());
    }
    // The session's tokens per sample over the records' own: said on screen, as headless
    // says it on stderr (3.3M tokens read where the file counted 51.2k, without a word).
    if args.seq_len.is_none()
        && let Some(n) = session_seq_len.filter(|_| args.session.is_some())
    {
        resolved.title_note = Some(format!("{n} tokens a sample, from --session"));
    }
    super::model_args::apply_overrides_noted(
        &mut resolved,
        args.calibration.as_deref(),
        args.stack.stack().as_ref(),
    )?;
    let created_advice = new_advice_file(args);
    let advice = match &args.advise {
        Some(out) if out.starts_with("tcp://") => anyhow::bail!(
            "--advise {out}: the explorer appends approved advice to a file; serve it on TCP with --headless"
        ),
        Some(out) => {
            let path = std::path::PathBuf::from(out);
            crate::fsutil::create_stream_output(&path, args.force)
                .map_err(|e| anyhow::anyhow!("--advise {out}: {e}"))?;
            let threshold = args
                .advise_threshold
                .unwrap_or(resolved.session.costs.switch_threshold);
            let advisor = crate::plan::advice::Advisor::new(crate::plan::advice::AdviceSettings {
                threshold,
                min_dwell_steps: args.min_dwell_steps,
                min_steps: resolved.session.estimator.min_steps as u64,
                b_crit_scale: resolved.session.b_crit_scale,
                form: resolved.session.stat_eff,
                dry_run: args.dry_run,
                seq_len: resolved.model.seq_len,
            });
            Some(crate::app::advice::AdviceLoop::new(advisor, path))
        }
        None => None,
    };
    let mut app = crate::app::App::loading(resolved);
    app.configure(config);
    app.loading = false;
    app.live_target = Some(args.target.clone());
    app.advice = advice;
    app.status = format!("waiting for records from {}…", args.target);
    let result = crate::runtime::run(app);
    remove_if_left_empty(created_advice.as_deref());
    result?;
    Ok(())
}

/// Follow `target` until `until_steps` records arrived or `timeout` passed; statuses and
/// malformed lines go to stderr as they happen. The last step of the command: what it held
/// is left to the OS at exit (private for that reason).
fn watch_headless(
    target: Target,
    (until_steps, seq_len): (Option<u64>, Option<u32>),
    timeout: Option<Duration>,
    mut advising: Option<&mut super::watch_advise::Advising>,
    signals: &crate::signals::StopSignals,
) -> (WatchSummary, Option<anyhow::Error>) {
    let mut advise_error = None;
    let start = Instant::now();
    let shown = target.to_string();
    let (tx, rx) = std::sync::mpsc::channel();
    let follower = match spawn_default_follower_batched(target, tx) {
        Ok(f) => Some(f),
        Err(e) => {
            eprintln!("copus watch: {e}");
            None
        }
    };
    let mut state = WatchState::new(shown.clone()).with_seq_len(seq_len);
    let mut input_ended = false;
    'outer: while follower.is_some() && !state.reached(until_steps) {
        let left = timeout.map(|t| t.saturating_sub(start.elapsed()));
        if left == Some(Duration::ZERO) || signals.received().is_some() {
            break;
        }
        let wait = left
            .unwrap_or(Duration::from_secs(1))
            .min(Duration::from_millis(200));
        match rx.recv_timeout(wait) {
            Ok(batch) => {
                for ev in batch {
                    let Some(adv) = advising.as_deref_mut() else {
                        state.event(ev);
                        if state.reached(until_steps) {
                            break 'outer;
                        }
                        continue;
                    };
                    if let LiveEvent::Record(r) = &ev {
                        adv.record(r);
                    }
                    let before = state.b_simple_now();
                    state.event(ev);
                    if let Some((step, b)) = state.b_simple_now()
                        && before != Some((step, b))
                        && let Err(e) = adv.observe(step, b, state.core.last_ci(), state.steps())
                    {
                        advise_error = Some(e);
                        break 'outer;
                    }
                    if state.reached(until_steps) {
                        break 'outer;
                    }
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            // The follower ends by itself only when its input ended for good.
            Err(RecvTimeoutError::Disconnected) => {
                input_ended = true;
                break;
            }
        }
    }
    if let Some(f) = follower {
        f.stop();
    }
    let ingested = start.elapsed();
    let mut summary = state.finish(until_steps, start.elapsed().as_secs_f64());
    summary.input_ended = input_ended;
    // The command ends with this summary: the OS takes the records' memory back at exit,
    // without freeing up to 2^18 records one by one first.
    std::mem::forget(state);
    if std::env::var_os(TIMING_ENV).is_some() {
        eprintln!(
            "copus watch: timing: ingest {:.3} s, final estimate {:.3} s",
            ingested.as_secs_f64(),
            (start.elapsed() - ingested).as_secs_f64()
        );
    }
    (summary, advise_error)
}

/// With this environment variable set, headless `watch` prints the time of its two phases
/// (ingest until `--until-steps`, then the final estimate) to stderr.
pub const TIMING_ENV: &str = "COPUS_WATCH_TIMING";

/// What a watch accumulates: a bounded window of records for the final estimate, the
/// incremental estimate and its bounded history, and the counts.
pub struct WatchState {
    shown: String,
    core: LiveCore,
    malformed: u64,
    non_finite: u64,
    examples: Vec<(u64, String)>,
    duplicates: u64,
    restarts: u64,
    superseded: u64,
    events: u64,
    applied: Vec<u64>,
    /// Whether the link ever reached its file or server (records could flow).
    reached_source: bool,
    /// The last thing the link said while it waited, before it ever reached the source.
    last_wait: Option<String>,
    /// What the link said when it lost the source it had reached, while it has not come back.
    lost: Option<String>,
    /// Tokens of one of the run's samples as the user reads them (`--seq-len`).
    seq_len: Option<u32>,
}

impl WatchState {
    /// Nothing received yet from `shown` (the target, for messages).
    pub fn new(shown: String) -> Self {
        Self {
            shown,
            core: LiveCore::new(&live_settings()),
            malformed: 0,
            non_finite: 0,
            examples: Vec::new(),
            duplicates: 0,
            restarts: 0,
            superseded: 0,
            events: 0,
            applied: Vec::new(),
            reached_source: false,
            last_wait: None,
            lost: None,
            seq_len: None,
        }
    }

    /// The same, reading each of the run's samples as `seq_len` tokens (`--seq-len`).
    pub fn with_seq_len(mut self, seq_len: Option<u32>) -> Self {
        self.seq_len = seq_len;
        self
    }

    /// Valid records received (including evicted ones).
    pub fn steps(&self) -> u64 {
        self.core.records().len() as u64 + self.core.evicted()
    }

    fn reached(&self, until_steps: Option<u64>) -> bool {
        until_steps.is_some_and(|n| self.steps() >= n)
    }

    /// The newest step of the incremental (one-sided smoothed) estimate and its B_simple,
    /// samples.
    pub fn b_simple_now(&self) -> Option<(u64, f64)> {
        self.core.last_point()
    }

    /// Entries held by the incremental history (bounded).
    pub fn history_len(&self) -> usize {
        self.core.history().len()
    }

    /// Take one event from the follower.
    pub fn event(&mut self, ev: LiveEvent) {
        let shown = &self.shown;
        match ev {
            LiveEvent::Record(r) => self.core.push(r),
            LiveEvent::Malformed { line_no, reason } => {
                self.malformed += 1;
                if self.malformed <= MALFORMED_PRINTED {
                    eprintln!("copus watch: {shown}: line {line_no}: {reason}");
                } else if self.malformed == MALFORMED_PRINTED + 1 {
                    eprintln!("copus watch: further malformed lines are counted, not shown");
                }
                if self.examples.len() < MALFORMED_EXAMPLES {
                    self.examples.push((line_no, reason));
                }
            }
            LiveEvent::NonFinite { line_no, reason } => {
                self.non_finite += 1;
                if self.non_finite <= MALFORMED_PRINTED {
                    eprintln!("copus watch: {shown}: line {line_no}: skipped: {reason}");
                }
            }
            LiveEvent::Event { kind, at_step, .. } => {
                self.events += 1;
                if kind == "applied" {
                    self.applied.extend(at_step);
                    if self.applied.len() > 2 * APPLIED_KEPT {
                        self.applied.drain(..APPLIED_KEPT);
                    }
                }
            }
            LiveEvent::Status(s) => {
                match s.state {
                    LinkState::Flowing | LinkState::Quiet => {
                        self.reached_source = true;
                        self.lost = None;
                    }
                    LinkState::Waiting if !self.reached_source => {
                        self.last_wait = Some(s.text.clone());
                    }
                    // The first word of the loss (later ones say "retrying").
                    LinkState::Waiting if self.lost.is_none() => {
                        self.lost = Some(s.text.clone());
                    }
                    LinkState::Waiting => {}
                }
                eprintln!("copus watch: {}", s.text);
            }
            LiveEvent::Duplicate { .. } => self.duplicates += 1,
            LiveEvent::Restarted { step } => {
                self.restarts += 1;
                let gone = self.core.restart_from(step);
                self.superseded += gone;
                if self.restarts <= MALFORMED_PRINTED {
                    eprintln!(
                        "copus watch: {shown}: the run restarted at step {step}; {gone} earlier record(s) from that step on are replaced"
                    );
                } else if self.restarts == MALFORMED_PRINTED + 1 {
                    eprintln!("copus watch: further restarts are counted, not shown");
                }
            }
        }
    }

    /// The summary of what was received.
    pub fn finish(&self, until_steps: Option<u64>, elapsed_s: f64) -> WatchSummary {
        let counts = crate::stats::InputCounts {
            malformed: usize::try_from(self.malformed).unwrap_or(usize::MAX),
            non_finite: usize::try_from(self.non_finite).unwrap_or(usize::MAX),
            ..crate::stats::InputCounts::default()
        };
        let (mut estimate, phi) =
            live_estimate_and_inflation(self.core.records(), counts, self.seq_len);
        if self.steps() == 0 && estimate.error.is_some() {
            // The analysis saw no records, so its counts of skipped lines are not the
            // follower's; and a source never reached is not an empty one.
            estimate.error = Some(match (&self.last_wait, self.reached_source) {
                (Some(wait), false) => format!(
                    "never reached {}: {}",
                    self.shown,
                    wait.split("; retrying").next().unwrap_or(wait)
                ),
                _ => format!(
                    "no stats records in the input ({} malformed and {} non-finite line(s) \
                     skipped)",
                    self.malformed, self.non_finite
                ),
            });
        }
        let records = self.core.records();
        WatchSummary {
            target: self.shown.clone(),
            steps_ingested: self.steps(),
            records_evicted: self.core.evicted(),
            steps_skipped: records.iter().filter(|r| r.skipped.is_some()).count() as u64,
            malformed_lines: self.malformed,
            non_finite_skipped: self.non_finite,
            duplicates_dropped: self.duplicates,
            restarts: self.restarts,
            superseded: self.superseded,
            several_writers: several_writers_note(self.restarts, self.superseded),
            malformed_examples: self.examples.clone(),
            steps: records
                .first()
                .zip(records.last())
                .map(|(a, b)| [a.step, b.step]),
            first_step: records.first().map(|r| r.step),
            last_step: records.last().map(|r| r.step),
            last_loss: records.iter().rev().find_map(|r| r.loss),
            complete: until_steps.is_none() || self.reached(until_steps),
            stopped_by: None,
            input_ended: false,
            source_lost: self.lost.as_ref().map(|why| {
                let after = records
                    .last()
                    .map_or(String::new(), |r| format!(" after step {}", r.step));
                format!(
                    "{}{after}, and not back when the watch ended: the run ended, or it stalled",
                    why.trim_end_matches("; reconnecting")
                )
            }),
            elapsed_s,
            advice: None,
            advice_note: None,
            event_lines: self.events,
            applied_at: self.applied[self.applied.len().saturating_sub(APPLIED_KEPT)..].to_vec(),
            late_records: self.core.late(),
            history: self
                .core
                .history()
                .summary(HISTORY_BINS, phi, live_settings().confidence),
            estimate,
        }
    }
}

/// Restarts before which this many records or fewer were superseded, on average, and at
/// least [`SEVERAL_WRITERS_RESTARTS`] of them, read as several writers, not restarts.
const SEVERAL_WRITERS_SUPERSEDED_PER_RESTART: u64 = 2;
/// The fewest restarts [`several_writers_note`] reads as several writers.
const SEVERAL_WRITERS_RESTARTS: u64 = 10;

/// A note when the "restarts" look like several writers into one stream (every rank writing
/// its own record of each step): many restarts, each replacing about one record. A trainer
/// restarted from a checkpoint replaces the steps since that checkpoint, and rarely.
fn several_writers_note(restarts: u64, superseded: u64) -> Option<String> {
    let per_restart_bound = restarts.checked_mul(SEVERAL_WRITERS_SUPERSEDED_PER_RESTART)?;
    (restarts >= SEVERAL_WRITERS_RESTARTS && superseded <= per_restart_bound).then(|| {
        format!(
            "{restarts} restarts that each replaced about one record: more likely several \
             writers sending their own record of each step (every rank writing?) than a \
             restarted run. watch keeps the last record of each step; write from one rank \
             (or gather first), or read the file with `copus analyze`, which sums the records \
             of one step"
        )
    })
}

/// The summary of a headless watch as text, as the command prints it.
fn summary_text(s: &WatchSummary) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(out, "target           {}", s.target);
    let _ = writeln!(
        out,
        "steps ingested   {} ({} flagged skipped)",
        s.steps_ingested, s.steps_skipped
    );
    let _ = writeln!(out, "malformed lines  {}", s.malformed_lines);
    let _ = writeln!(
        out,
        "non-finite lines {} (skipped: a NaN or Inf value)",
        s.non_finite_skipped
    );
    let _ = writeln!(
        out,
        "dropped          {} duplicate records (replayed or rewritten), {} superseded by {} restart(s)",
        s.duplicates_dropped, s.superseded, s.restarts
    );
    if let Some(note) = &s.several_writers {
        let _ = writeln!(out, "  {note}");
    }
    if let Some([a, b]) = s.steps {
        let _ = writeln!(out, "steps            {a}–{b}");
    }
    if let Some(lost) = &s.source_lost {
        let _ = writeln!(out, "source lost      {lost}");
    }
    if let Some(sig) = s.stopped_by {
        let _ = writeln!(
            out,
            "stopped by       {sig}, before the watch ended by itself"
        );
    }
    let e = &s.estimate;
    if let Some(err) = &e.error {
        let _ = writeln!(out, "B_simple         no estimate: {err}");
        return out;
    }
    // As `analyze` leads: where the estimate is now (last window), its drift, the run-wide
    // value labelled as such, the verdict and what to do; then the live smoother's value at
    // the newest step with its interval. (It led with the run-wide value, which the drift
    // verdict says not to read, and gave the newest value without its interval.)
    if let Some(h) = &e.headline {
        out.push_str(h);
    }
    if let Some(now) = e.b_simple_now {
        // A negative value is no batch size: said as `analyze` says it.
        let value = if now < 0.0 {
            super::analyze::fmt_b_simple(Some(now))
        } else {
            format!("{} samples", crate::format::significant(now, 4))
        };
        let ci = e.ci_now.map_or_else(
            || "none (no positive value fits the data)".to_string(),
            super::analyze::fmt_ci,
        );
        out.push_str(&crate::format::line_labelled(
            "latest        ",
            &format!(
                "{value}  {:.0}% CI {ci}  (one-sided smoother at the newest step, over {} steps)",
                100.0 * live_settings().confidence,
                e.steps_used
            ),
        ));
    }
    if !e.diagnostics.is_empty() {
        out.push_str("diagnostics\n");
    }
    for d in &e.diagnostics {
        out.push_str(&crate::format::line_labelled("  ", &d.message));
    }
    if let Some(advice) = &s.advice {
        match advice.last() {
            None => {
                let why = s
                    .advice_note
                    .as_deref()
                    .map_or(String::new(), |w| format!(": {w}"));
                let _ = writeln!(out, "advice           none written{why}");
            }
            Some(a) => {
                let _ = writeln!(
                    out,
                    "advice           {} written; the last at step {}: batch {} on DP{}·TP{}·PP{} \
                     ({}{})",
                    advice.len(),
                    a.at_step,
                    a.batch,
                    a.layout.dp,
                    a.layout.tp,
                    a.layout.pp,
                    super::json_name(&a.apply),
                    if a.dry_run { ", dry run" } else { "" }
                );
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    /// Under `--advise --session` the explorer's current batch is the run's, not the
    /// session's (the demo's 512 was shown as "your batch" beside advice about the run's 32).
    #[test]
    fn the_advice_sessions_current_batch_is_left_to_the_run() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            watch: WatchArgs,
        }
        let demo = concat!(env!("CARGO_MANIFEST_DIR"), "/sessions/demo.ron");
        assert!(
            crate::session::Session::load(std::path::Path::new(demo))
                .expect("demo")
                .current_batch
                .is_some()
        );
        let cli = <Cli as clap::Parser>::try_parse_from([
            "watch",
            "run.ndjson",
            "--advise",
            "a.ndjson",
            "--session",
            demo,
        ])
        .expect("parses");
        let (session, path) = explorer_session(&cli.watch).expect("session");
        assert_eq!(session.current_batch, None);
        assert_eq!(path, std::path::PathBuf::from(demo));
        assert!(
            session.name.starts_with("live: run.ndjson"),
            "{}",
            session.name
        );
    }

    use super::*;

    #[test]
    fn many_one_record_restarts_read_as_several_writers() {
        // Two ranks interleaving their records of 3000 steps: 3000 restarts of one record.
        let note = several_writers_note(3000, 3000).expect("a note");
        assert!(note.contains("several writers"), "{note}");
        // A trainer restarted twice from checkpoints 500 steps back: no note.
        assert_eq!(several_writers_note(2, 1000), None);
        // Many restarts that each replaced hundreds of records: restarts, no note.
        assert_eq!(several_writers_note(40, 40 * 300), None);
        // A few one-record restarts are not enough to say.
        assert_eq!(several_writers_note(3, 3), None);
        assert_eq!(several_writers_note(u64::MAX, 5), None);
    }
    use crate::source::live::{Admit, Dedupe};
    use rand::rngs::StdRng;
    use rand::{RngExt, SeedableRng};

    /// Records of a run with out-of-order steps, replayed stretches (exact duplicates) and a
    /// restart from an earlier step with other values.
    fn run(rng: &mut StdRng) -> Vec<StepStats> {
        let make = |step: u64, rng: &mut StdRng| {
            let g2 = 1.0 / (1.0 + step as f64 / 100.0);
            let mut r = StepStats::new(
                step,
                8.0,
                128.0,
                g2 + 50.0 / 8.0 * rng.random_range(0.6..1.4),
                g2 + 50.0 / 128.0 * rng.random_range(0.6..1.4),
            );
            r.loss = Some(2.0 + 1.0 / (1.0 + step as f64));
            r
        };
        let mut out: Vec<StepStats> = (0..600).map(|s| make(s, rng)).collect();
        for i in (10..590).step_by(37) {
            out.swap(i, i + 2);
        }
        let replay: Vec<StepStats> = out[100..150].to_vec();
        out.splice(300..300, replay);
        out.extend((450..700).map(|s| make(s, rng)));
        out
    }

    /// The follower's events for `records`, through the exactly-once filter.
    fn events(records: &[StepStats]) -> Vec<LiveEvent> {
        let mut d = Dedupe::default();
        let mut out = Vec::new();
        for r in records {
            match d.admit(r) {
                Admit::New => out.push(LiveEvent::Record(r.clone())),
                Admit::Duplicate => out.push(LiveEvent::Duplicate { step: r.step }),
                Admit::Restart => {
                    out.push(LiveEvent::Restarted { step: r.step });
                    out.push(LiveEvent::Record(r.clone()));
                }
            }
        }
        out
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
    }

    #[test]
    fn the_summary_equals_the_batch_analysis_of_the_records_the_old_path_kept() {
        let mut rng = StdRng::seed_from_u64(3);
        let evs = events(&run(&mut rng));
        // The old path: keep records, drop those superseded by a restart, analyse them all.
        let mut kept: Vec<StepStats> = Vec::new();
        for ev in &evs {
            match ev {
                LiveEvent::Record(r) => kept.push(r.clone()),
                LiveEvent::Restarted { step } => kept.retain(|r| r.step < *step),
                _ => {}
            }
        }
        let mut state = WatchState::new("fixture".into());
        for ev in evs {
            state.event(ev);
        }
        let s = state.finish(None, 0.0);
        assert_eq!((s.duplicates_dropped, s.restarts), (50, 1));
        assert_eq!(s.steps_ingested, kept.len() as u64);
        let expected = crate::stats::analyze(&kept, &live_settings()).expect("an estimate");
        let got = serde_json::to_value(&s.estimate).expect("json");
        let want = serde_json::to_value(live_estimate(&kept)).expect("json");
        assert_eq!(got, want);
        assert_eq!(
            got["now"],
            serde_json::to_value(&expected.summary.now).expect("json")
        );
        assert_eq!(
            got["drift"],
            serde_json::to_value(&expected.summary.drift).expect("json")
        );
        assert!(!got["drift"].is_null(), "a 700-step run has two windows");
        assert_eq!(
            got["reasons"],
            serde_json::to_value(&expected.summary.reasons).expect("json")
        );
        // The incremental history ends where the batch smoother ends, and counts every step.
        let last = s.history.last().expect("history");
        let (now, ci_now) = (
            s.estimate.b_simple_now.expect("now"),
            s.estimate.ci_now.expect("ci"),
        );
        assert!(close(last.b_simple.expect("b"), now), "{last:?} vs {now}");
        assert!(close(last.ci[0], ci_now[0]) && close(last.ci[1], ci_now[1]));
        assert_eq!(
            s.history.iter().map(|b| b.steps).sum::<u64>(),
            expected.steps.len() as u64
        );
        assert_eq!(s.late_records, 0);
    }

    #[test]
    fn what_a_watch_holds_stays_bounded() {
        let mut state = WatchState::new("bounded".into());
        let limit = crate::source::live::history::RECENT_POINTS
            + crate::source::live::history::MAX_BINS
            + 1;
        for s in 0..(3 * limit as u64) {
            state.event(LiveEvent::Record(StepStats::new(s, 4.0, 64.0, 3.0, 1.0)));
            assert!(state.history_len() <= limit);
        }
        assert_eq!(state.steps(), 3 * limit as u64);
    }
}
