//! `copus analyze`: noise-scale estimate of a stats protocol v1 file (.ndjson) or of a
//! gradient dump directory (reduced in one streaming pass on the CPU or a GPU).

use crate::compute::Device;
use crate::stats::{
    AnalyzeOptions, AnalyzeReport, EstimatorSettings, RecordBound, SmootherKind, analyze_parts,
};
use anyhow::Context;
use clap::Args;
use std::io::Write;
use std::path::PathBuf;

use super::estimator_args::EstimatorArgs;
pub use super::estimator_args::SmootherArg;

/// Arguments of `copus analyze`.
#[derive(Debug, Args)]
pub struct AnalyzeArgs {
    /// A stats protocol v1 file (.ndjson), `-` for standard input, or a gradient dump
    /// directory.
    pub path: PathBuf,
    /// Print JSON instead of a table (indented on a terminal or with --pretty, compact
    /// otherwise).
    #[arg(long)]
    pub json: bool,
    /// Indent the --json output (the default on a terminal; compact into a pipe or a
    /// file).
    #[arg(long, requires = "json")]
    pub pretty: bool,
    /// Print one compact JSON object per step row, one per line, and nothing else (for jq,
    /// pandas or polars `read_ndjson`).
    #[arg(long, conflicts_with_all = ["json", "summary_only", "compare"])]
    pub json_lines: bool,
    /// With --json: only the summary, without the per-step rows.
    #[arg(long, requires = "json")]
    pub summary_only: bool,
    /// Estimator settings (smoother, bandwidth, decay, …).
    #[command(flatten)]
    pub estimator: EstimatorArgs,
    /// The live view's smoother (same as `--smoother one-sided`): the exact estimate and
    /// intervals `copus watch` shows.
    #[arg(long, conflicts_with = "smoother")]
    pub one_sided: bool,
    /// Steps in the last window ("now") and the first window of the drift diagnostic
    /// (default: steps/10, at least 50).
    #[arg(long, value_name = "STEPS")]
    pub window: Option<usize>,
    /// A second run (stats file or dump directory) to lay over the first: trajectories aligned
    /// by tokens, stretches where they differ beyond their intervals, ratio of the estimates.
    #[arg(long, value_name = "PATH")]
    pub compare: Option<PathBuf>,
    /// Branch records of a branched experiment on this run (`copus branch`, docs/CBS.md): the
    /// measured critical batch size at each branch point beside the run's B_simple there, with
    /// the ratio measured/estimated and its interval (`branches` in --json).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["compare", "json_lines"])]
    pub branches: Option<PathBuf>,
    /// Stats file: analyse the Adam-preconditioned norms the hook writes as `precond`
    /// (`GradNoiseMeter(precondition=optimizer)`, docs/PROTOCOL.md) instead of the raw ones:
    /// the noise scale of the step Adam takes. Records without `precond` are left out
    /// (counted); per-layer norms are not preconditioned and are dropped.
    #[arg(long, conflicts_with_all = ["compare"])]
    pub preconditioned: bool,
    /// Table rows of the per-step trajectory (evenly spaced); 0 prints every step
    /// [default: 20]. Text output only.
    #[arg(long)]
    pub rows: Option<usize>,
    /// Stats files: most records analysed; a longer run is merged into records of equal
    /// numbers of consecutive steps (`summary.coarsened`, docs/STATISTICS.md). About 1 KB of
    /// memory per record plus 0.3 KB per layer; 0 keeps every record (memory grows with the
    /// run) [default: 262144, fewer for records with more than 4 layers, within 640 MiB].
    #[arg(long, value_name = "N", value_parser = max_records)]
    pub max_records: Option<usize>,
    /// Dumps: where to reduce them (auto falls back to the CPU with a note) [default: auto].
    #[arg(long, value_enum)]
    pub device: Option<Device>,
    /// Dumps: samples per gradient file, overriding the files' `samples` metadata.
    #[arg(long, value_name = "SAMPLES", value_parser = samples_per_file)]
    pub samples: Option<f64>,
    /// Dumps: also run the seed's temporal EMA estimator (biased; 8 bytes per parameter).
    #[arg(long)]
    pub seed_ema: bool,
    /// Tokens per sample, to show B_simple in tokens: a dump's sequence length [default: 4096];
    /// for a stats file, each sample read as a sequence of this many tokens (as `watch` and
    /// `open --seq-len` do), instead of the records' tokens ÷ b_big.
    #[arg(long, value_parser = super::at_least_one_u32)]
    pub seq_len: Option<u32>,
}

impl AnalyzeArgs {
    /// The default settings overridden by the flags given.
    pub fn settings(&self, base: &EstimatorSettings) -> EstimatorSettings {
        let mut s = base.clone();
        self.estimator.apply(&mut s);
        if self.one_sided {
            s.smoother = SmootherKind::OneSided;
        }
        if self.preconditioned {
            s.gradient = crate::stats::analysis::settings::GradientKind::AdamPreconditioned;
        }
        s.window_steps = self.window.or(s.window_steps);
        s
    }

    /// The bound on analysed records of a stats file.
    pub fn record_bound(&self) -> RecordBound {
        match self.max_records {
            None => RecordBound::Default,
            Some(0) => RecordBound::All,
            Some(n) => RecordBound::Records(n),
        }
    }
}

/// With this environment variable set, `copus analyze FILE --json` prints the wall time of
/// its phases (reading, analysis, JSON output; seconds) to stderr.
pub const TIMING_ENV: &str = "COPUS_ANALYZE_TIMING";

/// Buffer of `analyze --json`'s standard output, bytes: smaller than the row chunks the
/// report writer hands over (1,024 rows, ≥ 100 KB as soon as a row carries its fields), so
/// that those bypass it.
const STDOUT_BUFFER_BYTES: usize = 16 << 10;

/// Peak resident memory of this process so far, in MiB (`VmHWM` of `/proc/self/status`;
/// `None` where that is not available).
fn peak_rss_mib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024)
}

/// Minor page faults of the process so far (first touches of memory), from
/// `/proc/self/stat`; `None` where that is not readable.
fn minor_faults() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces): state is the first; minflt
    // is the 10th field of the line, the 8th after the name.
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(7)?.parse().ok()
}

/// CPU time of the whole process so far (all threads), in seconds; `None` where the clock
/// cannot be read.
fn process_cpu_s() -> Option<f64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    (rc == 0).then_some(ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9)
}

/// Run `copus analyze`.
pub fn run(args: &AnalyzeArgs) -> anyhow::Result<()> {
    // `-` is standard input, as for most Unix tools (it read "cannot read -").
    let stdin = std::path::PathBuf::from("/dev/stdin");
    let path = if args.path.as_os_str() == "-" && cfg!(unix) {
        &stdin
    } else {
        &args.path
    };
    args.estimator.check()?;
    if args.window == Some(0) {
        super::flag_bail!("--window 0: the window must be at least 1 step");
    }
    let settings = args.settings(&EstimatorSettings::default());
    for note in args.estimator.unused_by(settings.smoother) {
        eprintln!("copus analyze: note: {note}");
    }
    if args.json && args.rows.is_some() {
        anyhow::bail!("--rows sets the rows of the text table; --json prints every step");
    }
    if let Some(other) = &args.compare {
        return super::analyze_compare::run(args, other);
    }
    if path.is_dir() && path == &stdin {
        anyhow::bail!(
            "-: standard input is a directory; give a gradient dump's directory by its path \
             (copus analyze DIR)"
        );
    }
    if path.is_dir() {
        if args.preconditioned {
            anyhow::bail!(
                "{}: --preconditioned reads the `precond` norms of a stats file; a gradient dump \
                 holds raw gradients",
                path.display()
            );
        }
        return run_dump(args);
    }
    if path
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("safetensors") || e.eq_ignore_ascii_case("npy"))
    {
        anyhow::bail!(
            "{}: one gradient file; copus analyze reads the dump's directory (its step_<N>/ \
             folders, or one step's folder of two or more gradient sets: docs/DUMPS.md), or a \
             stats file",
            path.display()
        );
    }
    check_stats_file_flags(args)?;
    if let Some(kind) = crate::fsutil::compression_of(path) {
        let cat = match kind {
            "gzip" => "zcat",
            "zstd" => "zstdcat",
            "bzip2" => "bzcat",
            _ => "xzcat",
        };
        anyhow::bail!(
            "{}: a {kind}-compressed file; copus reads the protocol's plain text lines: \
             decompress it first (`{cat} {} | copus analyze /dev/stdin`)",
            path.display(),
            path.display()
        );
    }
    let timing = std::env::var_os(TIMING_ENV).is_some();
    let t0 = std::time::Instant::now();
    let file = crate::fsutil::open_readable_stream(path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let (outcome, left_out) =
        crate::stats::estimate::precond::read_for(file, settings.gradient, args.record_bound())
            .with_context(|| format!("cannot read {}", path.display()))?;
    if left_out > 0 {
        eprintln!(
            "copus analyze: {}",
            crate::stats::estimate::precond::left_out_note(left_out)
        );
    }
    note_unfinished_last_line(path, &outcome);
    let t1 = std::time::Instant::now();
    let cpu_read = timing.then(process_cpu_s).flatten();
    let hwm_read = timing.then(peak_rss_mib).flatten();
    let faults_read = timing.then(minor_faults).flatten();
    let parts = analyze_parts(&outcome.records, AnalyzeOptions::read(&outcome, &settings));
    // The file's first bad line is named where the analysis found nothing to use, not
    // beside a setting it refused.
    let settings_error = matches!(parts, Err(crate::stats::StatsError::Settings(_)));
    let empty = matches!(parts, Err(crate::stats::StatsError::Empty { .. }));
    let (mut report, row_layers) = parts.map(|a| (a.report, a.layers)).with_context(|| {
        let first = outcome
            .errors
            .first()
            .filter(|_| !settings_error)
            .map(|e| format!(" (first problem, line {}: {})", e.line, e.reason))
            .unwrap_or_default();
        // Branch records read here said only "missing field `b_small`" (`cbs` on a stats
        // file points here).
        if empty && holds_branch_records(path) {
            return format!(
                "{} holds the branch records of a branched experiment, not gradient statistics \
                 (`copus cbs` reads them; `copus analyze RUN --branches FILE` lays them over \
                 their run)",
                path.display()
            );
        }
        format!("{}{first}", path.display())
    })?;
    apply_seq_len(&mut report, args.seq_len);
    let t2 = std::time::Instant::now();
    let cpu_analysis = timing.then(process_cpu_s).flatten();
    let hwm_analysis = timing.then(peak_rss_mib).flatten();
    let faults_analysis = timing.then(minor_faults).flatten();
    if let Some(b) = &args.branches {
        if args.json {
            print_line_errors(path, &outcome.errors);
        }
        return write_with_branches(args, &report, &row_layers, b);
    }
    if args.json || args.json_lines {
        print_line_errors(path, &outcome.errors);
        // Streamed: a long run's report is hundreds of MB of text, written in chunks of
        // ~1 MB. A write at least as large as the buffer goes straight to the file; a 1 MiB
        // buffer copied every chunk into itself first (76 MB of moves on 10⁵ steps, on the
        // writing thread that sets the pace of this phase), so the buffer only gathers the
        // small pieces (the summary, the closing brackets).
        let stdout = super::bulk_stdout().context("cannot write to standard output")?;
        let mut out = std::io::BufWriter::with_capacity(STDOUT_BUFFER_BYTES, stdout);
        use crate::stats::report::stream::JsonStyle;
        let style = match (args.json_lines, args.summary_only, super::json_pretty()) {
            (true, _, _) => JsonStyle::Lines,
            (_, true, pretty) => JsonStyle::SummaryOnly { pretty },
            (_, _, true) => JsonStyle::Pretty,
            _ => JsonStyle::Compact,
        };
        crate::stats::report::stream::write_report(&report, &row_layers, style, &mut out)
            .and_then(|()| out.flush())
            .context("cannot write to standard output")?;
        if timing {
            let t3 = std::time::Instant::now();
            eprintln!(
                "copus analyze: timing: read {:.3} s, analysis {:.3} s, JSON output {:.3} s",
                (t1 - t0).as_secs_f64(),
                (t2 - t1).as_secs_f64(),
                (t3 - t2).as_secs_f64()
            );
            let secs = |a: Option<f64>, b: Option<f64>| {
                a.zip(b)
                    .map_or_else(|| "?".to_string(), |(a, b)| format!("{:.3}", b - a))
            };
            eprintln!(
                "copus analyze: CPU time (all threads, s): read {}, analysis {}, JSON output {}",
                secs(Some(0.0), cpu_read),
                secs(cpu_read, cpu_analysis),
                secs(cpu_analysis, process_cpu_s())
            );
            let mib = |m: Option<u64>| m.map_or_else(|| "?".to_string(), |m| m.to_string());
            eprintln!(
                "copus analyze: peak RSS (MiB): after reading {}, after analysis {}, at the end {}",
                mib(hwm_read),
                mib(hwm_analysis),
                mib(peak_rss_mib())
            );
            eprintln!(
                "copus analyze: minor page faults: reading {}, analysis {}, JSON output {}",
                mib(faults_read),
                mib(faults_analysis
                    .zip(faults_read)
                    .map(|(b, a)| b.saturating_sub(a))),
                mib(minor_faults()
                    .zip(faults_analysis)
                    .map(|(b, a)| b.saturating_sub(a)))
            );
        }
        // The command ends here and the process with it: the OS takes the memory back in one
        // go, without freeing 10⁵ records, rows and layer points one by one first (≈ 5 % of
        // the whole command on 100k lines, BENCHMARKS.md). Everything written is flushed.
        std::mem::forget((outcome, report, row_layers));
    } else {
        // The table shows no per-layer trajectory: the rows' layer points stay unattached.
        super::write_stdout(&super::escape_controls(&render_table(
            &report,
            args.rows.unwrap_or(DEFAULT_ROWS),
        )))?;
        print_line_errors(path, &outcome.errors);
    }
    Ok(())
}

/// The skipped lines kept by the reader, as `FILE:LINE: reason` on standard error (every
/// output style: JSON on standard output stays clean).
/// A stats file whose last line has no newline and did not parse is most likely being
/// written (a run in progress): say so, instead of leaving it among the malformed lines.
/// Whether the first line of `path` is a branch record (`"branch"` at the top level).
fn holds_branch_records(path: &std::path::Path) -> bool {
    use std::io::BufRead;
    let Ok(file) = std::fs::File::open(path) else {
        return false;
    };
    let mut line = String::new();
    // One line, at most 64 KiB of it: a branch record is a few hundred bytes.
    let read = std::io::Read::take(std::io::BufReader::new(file), 1 << 16).read_line(&mut line);
    read.is_ok()
        && serde_json::from_str::<serde_json::Value>(line.trim())
            .is_ok_and(|v| v.get("branch").is_some())
}

fn note_unfinished_last_line(
    path: &std::path::Path,
    outcome: &crate::stats::ingest::reader::ReadOutcome,
) {
    let last_failed = outcome
        .errors
        .last()
        .is_some_and(|e| e.line == outcome.lines);
    // A run being written has records before its unfinished line; a file with none (a binary
    // file, another format) is not one, and its errors say what it is.
    if last_failed && !outcome.records.is_empty() && ends_without_newline(path) {
        eprintln!(
            "copus analyze: {}:{}: the last line has no newline yet, so a run is probably still \
             writing it: it is counted as malformed here (`copus watch {}` follows a growing \
             file)",
            path.display(),
            outcome.lines,
            path.display()
        );
    }
}

/// Whether the regular file `path` is non-empty and its last byte is not a newline.
fn ends_without_newline(path: &std::path::Path) -> bool {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = std::fs::File::open(path) else {
        return false;
    };
    if !f.metadata().is_ok_and(|m| m.is_file() && m.len() > 0) {
        return false;
    }
    let mut last = [0u8; 1];
    f.seek(SeekFrom::End(-1)).is_ok() && f.read_exact(&mut last).is_ok() && last[0] != b'\n'
}

fn print_line_errors(path: &std::path::Path, errors: &[crate::stats::ingest::reader::LineError]) {
    for e in errors {
        eprintln!(
            "{}:{}: {}",
            path.display(),
            e.line,
            super::escape_controls(&e.reason)
        );
    }
}

/// The measured CBS of a branch file beside this run's estimate (`--branches`).
#[derive(Debug, serde::Serialize)]
struct BranchesSection {
    /// What `copus cbs --json` prints for the file.
    cbs: crate::stats::estimate::cbs::CbsReport,
    /// Per branch point: the run's B_simple there and the ratios measured/estimated.
    comparison: Vec<crate::stats::estimate::cbs::EstimateComparison>,
    /// The run's first and last analysed steps.
    #[serde(skip)]
    run_steps: Option<(u64, u64)>,
    /// The smoother B_simple is taken from (`summary.smoother` in JSON).
    #[serde(skip)]
    smoother: String,
    /// Branch points whose learning rates say the branches may not be this run's
    /// ([`crate::stats::estimate::cbs::run_mismatch`]), each in words.
    run_mismatch: Vec<String>,
    /// Branch points where B_simple moves more within one smoothing width than its interval
    /// spans ([`crate::stats::estimate::cbs::steep_estimates`]), each in words.
    smoothing_sensitive: Vec<String>,
}

fn branches_section(
    report: &AnalyzeReport,
    path: &std::path::Path,
) -> anyhow::Result<BranchesSection> {
    let cbs = super::cbs::load_branch_file(path, report.summary.confidence)?;
    let steps = &report.steps;
    let last = steps.last().map(|r| r.step);
    // A branch point after the run's last analysed step has no estimate at it.
    let comparison = crate::stats::estimate::cbs::compare_with_estimate(&cbs, |at| {
        if last.is_none_or(|last| at > last) {
            return None;
        }
        let i = steps.partition_point(|r| r.step <= at).checked_sub(1)?;
        let r = &steps[i];
        Some((r.step, r.b_simple, r.ci))
    });
    if comparison.iter().all(|c| c.estimate_step.is_none()) {
        let span = steps
            .first()
            .zip(last)
            .map_or(String::new(), |(a, b)| format!(" ({}–{b})", a.step));
        anyhow::bail!(
            "{}: no branch point lies within the run's analysed steps{span} (is it the branched \
             experiment of this run?)",
            path.display()
        );
    }
    let run_steps = steps.first().zip(last).map(|(a, b)| (a.step, b));
    // The run's batch and learning rate at each compared point against the branches' rates.
    let run_mismatch = crate::stats::estimate::cbs::run_mismatches(&cbs, steps);
    let smoothing_sensitive =
        crate::stats::estimate::cbs::steep_estimates(&cbs, steps, report.summary.bandwidth_steps);
    Ok(BranchesSection {
        run_mismatch,
        smoothing_sensitive,
        cbs,
        comparison,
        run_steps,
        smoother: report.summary.smoother.clone(),
    })
}

fn write_with_branches(
    args: &AnalyzeArgs,
    report: &AnalyzeReport,
    row_layers: &crate::stats::report::stream::RowLayers,
    path: &std::path::Path,
) -> anyhow::Result<()> {
    let section = branches_section(report, path)?;
    if args.json {
        use crate::stats::report::stream::JsonStyle;
        let pretty = super::json_pretty();
        let style = match (args.summary_only, pretty) {
            (true, pretty) => JsonStyle::SummaryOnly { pretty },
            (false, true) => JsonStyle::Pretty,
            (false, false) => JsonStyle::Compact,
        };
        let mut buf = Vec::new();
        crate::stats::report::stream::write_report(report, row_layers, style, &mut buf)
            .context("cannot write the report")?;
        while buf.last().is_some_and(|b| b.is_ascii_whitespace()) {
            buf.pop();
        }
        if buf.pop() != Some(b'}') {
            anyhow::bail!("internal: the report is not a JSON object");
        }
        let extra = if pretty {
            serde_json::to_string_pretty(&section)?
        } else {
            serde_json::to_string(&section)?
        };
        let mut text = String::from_utf8(buf)?;
        text.push_str(if pretty {
            ",\n  \"branches\": "
        } else {
            ",\"branches\":"
        });
        text.push_str(&extra);
        text.push_str(if pretty { "\n}\n" } else { "}\n" });
        return super::write_stdout(&text);
    }
    let mut text = render_table(report, args.rows.unwrap_or(DEFAULT_ROWS));
    text.push('\n');
    text.push_str(&render_branches(&section));
    super::write_stdout(&super::escape_controls(&text))
}

fn render_branches(section: &BranchesSection) -> String {
    use std::fmt::Write;
    let mut out =
        String::from("measured critical batch size (branched training) beside B_simple\n");
    let pct = confidence_percent(section.cbs.confidence);
    // An unbounded end: above, ∞; below, 0 (every quantity here is positive).
    let end = |x: Option<f64>, d: usize| x.map_or("∞".to_string(), |v| format!("{v:.d$}"));
    let low = |x: Option<f64>, d: usize| x.map_or("0".to_string(), |v| format!("{v:.d$}"));
    let mut rows: Vec<[String; 6]> = Vec::new();
    for (p, c) in section.cbs.points.iter().zip(&section.comparison) {
        let bs = c.b_simple.map_or("-".to_string(), |b| {
            format!(
                "{b:.0} [{}, {}]",
                low(c.b_simple_ci[0], 0),
                end(c.b_simple_ci[1], 0)
            )
        });
        // Not measured (a bound against a poor reference): no value, no interval.
        let th = if p.threshold_cbs.measured {
            format!(
                "{} [{}, {}]",
                super::cbs::threshold_bound(p),
                p.threshold_cbs.ci[0],
                p.threshold_cbs.ci[1]
            )
        } else {
            "not measured".to_string()
        };
        let fit = p.b_noise_fit.map_or("none".to_string(), |f| {
            format!("{:.0} [{}, {}]", f.value, low(f.ci[0], 0), end(f.ci[1], 0))
        });
        let ratio = |r: Option<crate::stats::estimate::cbs::WithCi>| {
            r.map_or("-".to_string(), |r| {
                let end = r.ci[1].map_or("∞".to_string(), ratio_number);
                let low = r.ci[0].map_or("0".to_string(), ratio_number);
                format!("{} [{low}, {end}]", ratio_number(r.value))
            })
        };
        // At the smallest batch the threshold is an upper bound: so is its ratio (the
        // smallest batch over B_simple is no value; "0.04 [0, 0.11]" read as one).
        let threshold_ratio = match c.threshold_ratio {
            Some(r) if p.threshold_cbs.at_most => {
                let end = r.ci[1].map_or("∞".to_string(), ratio_number);
                format!("<{} [0, {end}]", ratio_number(r.value))
            }
            r => ratio(r),
        };
        rows.push([
            p.from_step.to_string(),
            bs,
            th,
            fit,
            threshold_ratio,
            ratio(c.b_noise_ratio),
        ]);
    }
    out.push_str(&branches_table(&rows));
    // Notes wrap on a terminal narrower than the usual text width (one ran to 402 columns).
    let note = format!(
        "samples; intervals {pct}%, a ratio's from its two {pct}% intervals' ends (lowest \
         measured over highest estimated, and the reverse: wider than a {pct}% interval of \
         the ratio); B_simple is the run's smoothed estimate ({}) at the last analysed step at \
         or before each branch point; the default bandwidth grows with the run's length, so \
         compare runs of other lengths at one --bandwidth",
        section.smoother
    );
    out.push_str(&crate::format::one_line_unless_narrow("", &note));
    for (p, c) in section.cbs.points.iter().zip(&section.comparison) {
        let at = format!("step {}: ", p.from_step);
        if let Some(n) = &p.b_noise_note {
            out.push_str(&crate::format::one_line_unless_narrow(
                &at,
                &format!("fitted B_noise none: {n}"),
            ));
        }
        if c.estimate_step.is_none() {
            let why = match section.run_steps {
                Some((_, last)) if p.from_step > last => {
                    format!("after the run's last analysed step ({last})")
                }
                Some((first, _)) => format!("before the run's first analysed step ({first})"),
                None => "the run has no analysed step".to_string(),
            };
            let _ = writeln!(out, "step {}: not compared: {why}", p.from_step);
        }
        for line in super::cbs::point_notes(p) {
            out.push_str(&crate::format::one_line_unless_narrow(&at, &line));
        }
    }
    for line in super::cbs::unmeasured_lines(&section.cbs) {
        let _ = writeln!(out, "{line}");
    }
    for line in section
        .run_mismatch
        .iter()
        .chain(&section.smoothing_sensitive)
    {
        let _ = writeln!(out, "caution: {line}");
    }
    out
}

/// A ratio measured/estimated: two decimals, or two significant digits below 0.01 (a fitted
/// B_noise of 8 against a B_simple of 3134 read "0.00").
fn ratio_number(x: f64) -> String {
    if x != 0.0 && x.abs() < 0.01 {
        crate::stats::text::significant(x, 2)
    } else {
        format!("{x:.2}")
    }
}

/// The comparison table of `--branches`: one table of 106 columns, or on a terminal narrower
/// than the usual text width the measurements and the ratios as two tables (64 and 50
/// columns), each row led by its step.
fn branches_table(rows: &[[String; 6]]) -> String {
    use std::fmt::Write;
    const HEAD: [&str; 6] = [
        "step",
        "B_simple",
        "threshold CBS",
        "fitted B_noise",
        "threshold/B_s",
        "B_noise/B_s",
    ];
    const WIDTH: [usize; 6] = [8, 18, 15, 20, 20, 20];
    let parts: &[&[usize]] = if crate::format::narrow_text() {
        &[&[0, 1, 2, 3], &[0, 4, 5]]
    } else {
        &[&[0, 1, 2, 3, 4, 5]]
    };
    let mut out = String::new();
    for (k, columns) in parts.iter().enumerate() {
        if k > 0 {
            out.push('\n');
        }
        for line in std::iter::once(HEAD.map(String::from)).chain(rows.iter().cloned()) {
            let cells: Vec<String> = columns
                .iter()
                .map(|&i| format!("{:>w$}", line[i], w = WIDTH[i]))
                .collect();
            let _ = writeln!(out, "{}", cells.join(" "));
        }
    }
    out
}

/// Dump-only flags given with a stats file do nothing: an error naming them.
pub fn check_stats_file_flags(args: &AnalyzeArgs) -> anyhow::Result<()> {
    let given: Vec<&str> = [
        ("--samples", args.samples.is_some()),
        ("--seed-ema", args.seed_ema),
        ("--device", args.device.is_some()),
    ]
    .into_iter()
    .filter_map(|(n, set)| set.then_some(n))
    .collect();
    if !given.is_empty() {
        anyhow::bail!(
            "{}: {} applies to gradient dump directories, not to a stats file (its records carry \
             b_big and tokens)",
            args.path.display(),
            given.join(", ")
        );
    }
    Ok(())
}

/// Rows of the text trajectory table when `--rows` is not given.
pub const DEFAULT_ROWS: usize = 20;

/// Sequence length of a dump when `--seq-len` is not given, tokens.
pub const DEFAULT_DUMP_SEQ_LEN: u32 = 4096;

/// `copus analyze <dump dir>`: reduce, analyse, and show the seed's EMA estimate beside.
fn run_dump(args: &AnalyzeArgs) -> anyhow::Result<()> {
    let selected = crate::compute::select(args.device.unwrap_or(Device::Auto))?;
    let backend = selected.backend.name();
    let settings = args.settings(&EstimatorSettings::default());
    let d = crate::source::measured::load_dump_dir(
        &args.path,
        args.samples,
        args.seed_ema
            .then_some(crate::source::measured::SEED_EMA_DECAY),
        selected.backend.as_ref(),
        &settings,
        args.seq_len.unwrap_or(DEFAULT_DUMP_SEQ_LEN),
        &crate::cli::bench::stderr_progress,
    );
    crate::cli::bench::finish_progress();
    let mut d = d?;
    // A dump's records carry no token counts to infer the sequence length from: the one
    // given (or the default) is the report's, so that tokens show beside samples.
    let summary = &mut d.report.summary;
    if summary.seq_len.is_none() {
        let seq = f64::from(args.seq_len.unwrap_or(DEFAULT_DUMP_SEQ_LEN));
        summary.seq_len = Some(seq);
        summary.b_simple_tokens = summary.b_simple.map(|b| b * seq);
    }
    let left_out = crate::source::measured::left_out_note(&d.left_out);
    let skipped = crate::source::dump::skipped_note(&d.skipped_dirs);
    if args.json_lines {
        for note in left_out.iter().chain(&skipped) {
            eprintln!("copus: {note}");
        }
        let mut text = String::new();
        for row in &d.report.steps {
            text.push_str(&serde_json::to_string(row)?);
            text.push('\n');
        }
        super::write_stdout(&text)?;
    } else if args.json {
        let mut v = serde_json::to_value(&d.report)?;
        if args.summary_only
            && let Some(o) = v.as_object_mut()
        {
            o.remove("steps");
        }
        if args.seed_ema {
            v["seed_ema"] = serde_json::to_value(&d.seed_ema)?;
        }
        // Which backend reduced the dump, and why not the GPU when `auto` fell back.
        v["backend"] = backend.into();
        v["backend_note"] = selected.note.clone().into();
        // Whether `summary.seq_len` was given or assumed (dumps record no tokens).
        v["seq_len_assumed"] = args.seq_len.is_none().into();
        // The newest step, when it was still being written: left out, with why.
        v["left_out_steps"] = serde_json::to_value(&d.left_out)?;
        // Directories named `step_…` that are no step number: passed over.
        v["skipped_dirs"] = serde_json::to_value(&d.skipped_dirs)?;
        super::write_json(&v)?;
    } else {
        let why = selected
            .note
            .map(|n| format!("; --device auto: {n}"))
            .unwrap_or_default();
        println!("backend   {backend}{why}");
        print!(
            "{}",
            super::escape_controls(&render_table_of(
                &d.report,
                args.rows.unwrap_or(DEFAULT_ROWS),
                false
            ))
        );
        if args.seq_len.is_none() {
            println!(
                "note: the tokens above assume sequences of {DEFAULT_DUMP_SEQ_LEN} tokens (a dump \
                 records none): --seq-len sets your model's, and a model that is not a language \
                 model reads samples only"
            );
        }
        for note in left_out.iter().chain(&skipped) {
            println!("note: {}", super::escape_controls(note));
        }
        if let Some(last) = d.seed_ema.iter().rev().find(|p| p.b_estimate.is_some()) {
            println!(
                "\nseed EMA estimate (biased: temporal variance of a moving target) at step {}: {:.1} samples",
                last.step,
                last.b_estimate.unwrap_or(f64::NAN)
            );
        }
    }
    Ok(())
}

/// Whether the verdict is unreliable because no noise was measured (the small batches hold
/// one gradient: `equal_norms` among its reasons).
fn no_noise_measured(s: &crate::stats::Summary) -> bool {
    s.verdict == crate::stats::Verdict::Unreliable
        && s.reasons
            .iter()
            .any(|r| r.kind == crate::stats::DiagnosticKind::EqualNorms)
}

/// What the headline says for B_simple when no noise was measured (`equal_norms`).
const NO_NOISE: &str =
    "none: no noise measured (the small batches hold one gradient; see the verdict)";

/// The headline: where B_simple is now (last window), its drift, the run-wide value labelled
/// as such, and the verdict with its meaning and reasons.
pub fn render_headline(s: &crate::stats::Summary) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let pct = confidence_percent(s.confidence);
    let n = &s.now;
    // A coarsened run's rows are records of several steps each: count them as records.
    // More rows than step numbers in the window: steps written more than once (several
    // writers, a restarted run), so the rows are records.
    let span = n.last_step.saturating_sub(n.first_step).saturating_add(1);
    let unit = match &s.coarsened {
        Some(c) => format!("records of {} steps", c.steps_per_record),
        None if n.steps as u64 > span => "records (steps written more than once)".to_string(),
        None => "steps".to_string(),
    };
    // The small batches holding one gradient measure no noise: a B_simple of 0 (or a hair
    // either side of it) is no estimate, and is not printed as one.
    let no_noise = no_noise_measured(s);
    labelled(
        &mut out,
        "B_simple now  ",
        format!(
            "{}  {pct}% CI {}  (last window: steps {}-{}, {} {unit})",
            if no_noise {
                NO_NOISE.to_string()
            } else {
                fmt_b_simple(n.b_simple)
            },
            if no_noise {
                "-".to_string()
            } else {
                fmt_ci(n.ci)
            },
            n.first_step,
            n.last_step,
            n.steps
        ),
    );
    if let (Some(t), Some(b)) = (s.seq_len, n.b_simple.filter(|b| *b > 0.0 && !no_noise)) {
        let _ = writeln!(
            out,
            "              = {} tokens ({})",
            crate::format::tokens(t * b),
            // One token a sample (a next-token pair, as the built-in trainer's) is no sequence.
            if format!("{t:.0}") == "1" {
                "1 token per sample".to_string()
            } else {
                format!("sequences of {t:.0} tokens")
            }
        );
    }
    match &s.drift {
        Some(d) if d.significant => {
            let _ = writeln!(
                out,
                "drift         x{:.2} ({pct}% CI x{:.2}-x{:.2}) from {} samples over steps {}-{}",
                d.factor,
                d.ci[0],
                d.ci[1],
                fmt_opt(d.from.b_simple),
                d.from.first_step,
                d.from.last_step
            );
        }
        Some(d) if d.ci[0] > 1.0 || d.ci[1] < 1.0 => {
            let _ = writeln!(
                out,
                "drift         small: x{:.2} ({pct}% CI x{:.2}-x{:.2}) since steps {}-{}: it changed, \
                 but the interval reaches within x{:.2}, the least that counts as drift",
                d.factor, d.ci[0], d.ci[1], d.from.first_step, d.from.last_step, d.min_factor
            );
        }
        Some(d) => {
            let _ = writeln!(
                out,
                "drift         none: x{:.2} ({pct}% CI x{:.2}-x{:.2}) since steps {}-{} is within \
                 the uncertainty",
                d.factor, d.ci[0], d.ci[1], d.from.first_step, d.from.last_step
            );
        }
        None => {
            let _ = writeln!(out, "drift         not measured: {}", s.why_no_drift());
        }
    }
    labelled(
        &mut out,
        "run-wide      ",
        format!(
            "{}  {pct}% CI {}  (ratio of run averages over steps {}-{}; \
         weighted toward early steps where |G|^2 is large)",
            match s.b_simple {
                _ if no_noise => NO_NOISE.to_string(),
                Some(v) if v < 0.0 => format!("negative ({}; no batch-size estimate)", sig(v)),
                other => format!("{} samples", fmt_opt(other)),
            },
            if no_noise {
                "-".to_string()
            } else {
                fmt_ci(s.ci)
            },
            s.run_wide.first_step,
            s.run_wide.last_step
        ),
    );
    if let Some(t) = s.b_simple_tokens.filter(|t| *t > 0.0 && !no_noise) {
        let _ = writeln!(out, "              = {} tokens", crate::format::tokens(t));
    }
    labelled(&mut out, "verdict       ", s.verdict_meaning.to_string());
    for r in &s.reasons {
        labelled(&mut out, "  because     ", r.message.to_string());
        labelled(&mut out, "    what to do: ", r.action.to_string());
    }
    out
}

/// A confidence level as a percentage with the digits it needs: 0.95 → "95", 0.9999999999 →
/// "99.99999999" (it read "100% CI", a level no interval has).
pub(crate) fn confidence_percent(confidence: f64) -> String {
    let p = 100.0 * confidence;
    (0..=12)
        .map(|d| format!("{p:.d$}"))
        .find(|s| {
            s.parse::<f64>().is_ok_and(|b| {
                (b - p).abs() <= 1e-9 * p.abs().max(1.0) && (b < 100.0 || p >= 100.0)
            })
        })
        .unwrap_or_else(|| format!("{p}"))
}

/// `text` after `label` on one line where it fits in [`crate::format::text_columns`] (as
/// written, its column spacing kept), else wrapped under the label's end.
fn labelled(out: &mut String, label: &str, text: String) {
    out.push_str(&crate::format::line_labelled(label, &text));
}

pub(crate) fn fmt_ci(ci: [f64; 2]) -> String {
    if crate::stats::estimate::interval::is_empty(ci) {
        return "none (no positive value fits the data)".into();
    }
    let hi = if ci[1].is_finite() {
        sig(ci[1])
    } else {
        "inf".into()
    };
    format!("[{}, {hi}]", sig(ci[0]))
}

/// B_simple for the terminal, saying plainly when the estimate is negative (the tr Σ
/// estimate fell below zero: the noise is not resolved), instead of a negative count of
/// samples beside a clamped interval.
pub fn fmt_b_simple(x: Option<f64>) -> String {
    match x {
        Some(v) if v < 0.0 => format!(
            "negative ({}: the tr(Sigma) estimate is below zero, noise not resolved; no batch-size estimate)",
            sig(v)
        ),
        Some(v) => format!("{} samples", sig(v)),
        None => "unbounded samples".into(),
    }
}

pub(crate) fn fmt_opt(x: Option<f64>) -> String {
    x.map_or_else(|| "unbounded".into(), sig)
}

/// An estimate on the terminal: four significant digits, what its interval supports
/// (`--json` keeps every digit).
fn sig(x: f64) -> String {
    crate::format::significant(x, 4)
}

/// The readable report: summary, layers, diagnostics and an evenly spaced trajectory sample.
pub fn render_table(r: &AnalyzeReport, rows: usize) -> String {
    render_table_of(r, rows, true)
}

/// [`render_table`] for a source read from lines (`lines`: a stats file or stream, whose
/// malformed lines are counted) or not (a gradient dump).
pub fn render_table_of(r: &AnalyzeReport, rows: usize, lines: bool) -> String {
    use std::fmt::Write;
    let s = &r.summary;
    let mut out = String::new();
    out.push_str(&render_headline(s));
    let _ = writeln!(
        out,
        "|G|^2     {}   tr(Sigma) {}  (run averages)",
        sig(s.g2),
        sig(s.trace_sigma)
    );
    labelled(
        &mut out,
        "steps     ",
        format!(
            "{} usable{}, {}{} non-finite skipped; estimator {}; {}",
            s.steps,
            s.coarsened.as_ref().map_or(String::new(), |c| format!(
                " (records of {} steps each, merged from {} read)",
                c.steps_per_record, c.records_read
            )),
            if lines {
                format!("{} malformed line(s), ", s.malformed_lines)
            } else {
                String::new()
            },
            s.non_finite_skipped,
            super::json_name(&s.estimator),
            s.smoother
        ),
    );
    if !s.layers.is_empty() {
        let _ = writeln!(
            out,
            "\n{:<32} {:>8} {:>14}  CI",
            "layer", "share", "B_simple"
        );
        for l in &s.layers {
            // A layer whose norms are zero throughout (an unused or frozen parameter written
            // as zeros) has no B_simple: neither signal nor noise, not an unbounded one.
            let no_noise = no_noise_measured(s);
            let (b, ci) = if l.g2 == 0.0 && l.trace_sigma == 0.0 {
                ("no gradient".to_string(), "(all norms zero)".to_string())
            } else if no_noise {
                ("none".to_string(), "(no noise measured)".to_string())
            } else {
                (fmt_opt(l.b_simple), fmt_ci(l.ci))
            };
            let _ = writeln!(
                out,
                "{:<32} {:>7.1}% {:>14}  {ci}",
                l.name,
                100.0 * l.trace_share,
                b
            );
        }
    }
    if !s.diagnostics.is_empty() {
        let _ = writeln!(out, "\ndiagnostics");
        for d in &s.diagnostics {
            let range = d
                .steps
                .map(|[a, b]| {
                    if a == b {
                        format!(" [step {a}]")
                    } else {
                        format!(" [steps {a}-{b}]")
                    }
                })
                .unwrap_or_default();
            labelled(
                &mut out,
                &format!(
                    "  {} {}: ",
                    super::json_name(&d.severity),
                    super::json_name(&d.kind)
                ),
                format!("{}{range}", d.message),
            );
            if d.at.len() > 1 {
                let list: Vec<String> =
                    d.at.iter()
                        .map(|[a, b]| {
                            if a == b {
                                a.to_string()
                            } else {
                                format!("{a}-{b}")
                            }
                        })
                        .collect();
                let _ = writeln!(out, "      at steps {}", list.join(", "));
            }
        }
    }
    // On a terminal narrower than the usual text width, narrower columns and the squared
    // norms to four digits (the 97-column table wrapped every row at 80).
    let narrow = crate::format::narrow_text();
    let (w_step, w_b, w_ci, w_sq, w_ema, sq_digits) = if narrow {
        (8, 10, 22, 11, 10, 3)
    } else {
        (10, 14, 28, 14, 15, 6)
    };
    let _ = writeln!(
        out,
        "\n{:>w_step$} {:>w_b$} {:>w_ci$} {:>w_sq$} {:>w_sq$} {:>w_ema$}",
        "step", "B_simple", "CI", "sq_small", "sq_big", "ratio-EMA*"
    );
    let every = if rows == 0 {
        1
    } else {
        r.steps.len().div_ceil(rows).max(1)
    };
    for row in r.steps.iter().step_by(every) {
        // A column-wide form of an empty interval keeps the columns aligned.
        let ci = if crate::stats::estimate::interval::is_empty(row.ci) {
            "none".to_string()
        } else {
            fmt_ci(row.ci)
        };
        let _ = writeln!(
            out,
            "{:>w_step$} {:>w_b$} {:>w_ci$} {:>w_sq$.sq_digits$e} {:>w_sq$.sq_digits$e} {:>w_ema$}",
            row.step,
            fmt_opt(row.b_simple),
            ci,
            row.sq_small,
            row.sq_big,
            fmt_opt(row.ratio_ema)
        );
    }
    out.push_str(&crate::format::wrap_labelled(
        "",
        "* ratio-EMA: EMA of per-step tr/|G|^2 ratios, a biased teaching comparison, never the \
         estimate",
    ));
    if r.steps
        .iter()
        .step_by(every)
        .any(|row| crate::stats::estimate::interval::is_empty(row.ci))
    {
        let _ = writeln!(
            out,
            "  CI none: no positive value fits the data at that step (|G|^2 lost in the noise)"
        );
    }
    out
}

/// Fewest records `--max-records` may keep: an interval needs at least the estimator's
/// default `min_steps` (50) twice over, so that the merged run still has first and last
/// windows of their own.
pub const MIN_CLI_MAX_RECORDS: usize = 100;

/// Parse `--max-records`: 0 (every record) or at least [`MIN_CLI_MAX_RECORDS`].
fn max_records(s: &str) -> Result<usize, String> {
    let min = MIN_CLI_MAX_RECORDS.max(crate::stats::ingest::coarsen::MIN_MAX_RECORDS);
    match s.trim().parse::<usize>() {
        Ok(n) if n == 0 || n >= min => Ok(n),
        Ok(n) => Err(format!(
            "must be 0 (keep every record) or at least {min} records (fewer leave no interval to \
             speak of), got {n}"
        )),
        Err(e) => Err(format!("not a whole number of records: {e}")),
    }
}

/// Parse a dump's sample count per gradient file (for `--samples`): the files' own rule, a
/// whole number from 1 to 10⁹.
pub(crate) fn samples_per_file(s: &str) -> Result<f64, String> {
    crate::source::dump::st_file::whole_samples(s).map_err(|why| format!("must be {why}, got {s}"))
}

/// A user's `--seq-len`, the reading of a sample (the built-in trainer's one-token samples as
/// the model's sequences, as the measured-run lesson shows them), written into `report`'s
/// summary; returns the factor from the records' own tokens per sample to it (`None` without
/// the flag or where the records give none).
pub fn apply_seq_len(
    report: &mut crate::stats::AnalyzeReport,
    seq_len: Option<u32>,
) -> Option<f64> {
    let seq = f64::from(seq_len?);
    let own = report.summary.seq_len.filter(|s| *s > 0.0);
    report.summary.seq_len = Some(seq);
    report.summary.b_simple_tokens = report.summary.b_simple.map(|b| b * seq);
    own.map(|own| seq / own)
}

#[cfg(test)]
mod tests {

    #[test]
    fn small_ratios_keep_two_significant_digits() {
        use super::ratio_number;
        assert_eq!(ratio_number(0.0025526), "0.0026");
        assert_eq!(ratio_number(0.0), "0.00");
        assert_eq!(ratio_number(0.5), "0.50");
        assert_eq!(ratio_number(12.345), "12.35");
    }

    /// A level is written with the digits it needs, never rounded up to 100 %.
    #[test]
    fn a_confidence_level_keeps_its_digits() {
        use super::confidence_percent as c;
        assert_eq!(c(0.95), "95");
        assert_eq!(c(0.9), "90");
        assert_eq!(c(0.975), "97.5");
        assert_eq!(c(0.9999999999), "99.99999999");
        assert_eq!(c(0.9999999999999), "99.99999999999");
    }
}
