//! `copus cbs`: the critical batch size measured by branched training (docs/CBS.md).

use clap::Args;
use std::path::PathBuf;

/// Arguments of `copus cbs`.
#[derive(Debug, Args)]
pub struct CbsArgs {
    /// Branch records (NDJSON): `{"v":1,"branch":{"from_step","batch","seed"},"step",
    /// "samples","loss"}`, samples and steps counted from the branch point.
    pub path: PathBuf,
    /// Loss tolerance of the threshold CBS, nats.
    #[arg(long, default_value_t = DEFAULT_TOLERANCE)]
    pub tolerance: f64,
    /// Confidence of the bootstrap intervals.
    #[arg(long, default_value_t = 0.95)]
    pub confidence: f64,
    /// Bootstrap resamples over seeds.
    #[arg(long, default_value_t = DEFAULT_RESAMPLES as u32, value_parser = clap::value_parser!(u32).range(10..=100_000))]
    pub resamples: u32,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Indent the --json output (the default on a terminal; compact into a pipe or a
    /// file).
    #[arg(long, requires = "json")]
    pub pretty: bool,
}

/// Default loss tolerance of the threshold CBS, nats.
pub const DEFAULT_TOLERANCE: f64 = 0.01;
/// Default bootstrap resamples.
pub const DEFAULT_RESAMPLES: usize = 1000;

/// Largest branch file `copus cbs` reads (it is read whole), bytes.
pub const MAX_BRANCH_FILE_BYTES: u64 = 256 << 20;

/// What is wrong with the branch records a session names (`branches:`), if anything: `grid`
/// and `plan` do not use them, but the explorer refuses the session until it is fixed, so they
/// say so as a caveat rather than pass over it.
pub fn session_branches_problem(r: &crate::session::Resolved) -> Option<String> {
    let rel = r.session.branches.as_deref()?;
    let problem = match crate::session::branches_in(&r.base, rel) {
        Err(e) => e,
        Ok(path) => load_branch_records(&path, r.session.estimator.confidence)
            .err()
            .map(|e| format!("{e:#}"))?,
    };
    Some(format!(
        "branches: {problem}: `copus open` refuses this session until it is fixed (the grid \
         and the plan do not use branch records)"
    ))
}

/// Read and measure a branch file (the defaults of `copus cbs`, intervals at `confidence`);
/// errors name the file.
pub fn load_branch_file(
    path: &std::path::Path,
    confidence: f64,
) -> anyhow::Result<crate::stats::estimate::cbs::CbsReport> {
    load_branch_records(path, confidence).map(|(report, _)| report)
}

/// [`load_branch_file`], with the file's text (a save copies it beside the session).
pub fn load_branch_records(
    path: &std::path::Path,
    confidence: f64,
) -> anyhow::Result<(crate::stats::estimate::cbs::CbsReport, String)> {
    let text = read_branch_text(path, path)?;
    let records = crate::stats::estimate::cbs::parse(&text)
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let report = crate::stats::estimate::cbs::measure(
        &records,
        DEFAULT_TOLERANCE,
        confidence,
        DEFAULT_RESAMPLES,
    )
    .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    Ok((report, text))
}

/// The text of the branch file at `path` (`shown` names it in errors, as the user gave it):
/// a directory is refused saying what to give, and every command says so in the same words.
fn read_branch_text(path: &std::path::Path, shown: &std::path::Path) -> anyhow::Result<String> {
    if path.is_dir() {
        anyhow::bail!(
            "{}: a directory; branch records are a file (copus branch --out FILE)",
            shown.display()
        );
    }
    crate::fsutil::read_stream_capped(path, MAX_BRANCH_FILE_BYTES)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", shown.display()))
}

/// Run `copus cbs`.
pub fn run(args: &CbsArgs) -> anyhow::Result<()> {
    if !(args.tolerance.is_finite() && args.tolerance > 0.0) {
        anyhow::bail!(
            "--tolerance {}: must be a loss difference > 0 (nats; at 0 every seed's noise counts as a difference)",
            args.tolerance
        );
    }
    if !(args.confidence > 0.0 && args.confidence < 1.0) {
        super::flag_bail!("--confidence {}: must be between 0 and 1", args.confidence);
    }
    // `-` is standard input, as for `analyze` and `watch`.
    let stdin = PathBuf::from("/dev/stdin");
    let p = if args.path.as_os_str() == "-" && cfg!(unix) {
        &stdin
    } else {
        &args.path
    };
    let text = read_branch_text(p, &args.path)?;
    if let (_, Some(_)) = crate::stats::estimate::cbs::split_partial_last_line(&text) {
        eprintln!(
            "copus cbs: {}: its last line is incomplete (a file still being written?): left out",
            args.path.display()
        );
    }
    let records = crate::stats::estimate::cbs::parse(&text)
        .map_err(|e| anyhow::anyhow!("{}: {e}", args.path.display()))?;
    let report = crate::stats::estimate::cbs::measure(
        &records,
        args.tolerance,
        args.confidence,
        args.resamples as usize,
    )
    .map_err(|e| anyhow::anyhow!("{}: {e}", args.path.display()))?;
    if args.json {
        return super::write_json(&report);
    }
    super::write_stdout(&render(&report))
}

fn ci(c: [Option<f64>; 2]) -> String {
    // An unbounded end: 0 below, ∞ above.
    let end = |x: Option<f64>, open: &str| x.map_or(open.to_string(), |v| format!("{v:.0}"));
    format!("{}..{}", end(c[0], "0"), end(c[1], "∞"))
}

/// The text report: a table per branch point.
pub fn render(r: &crate::stats::estimate::cbs::CbsReport) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    for p in &r.points {
        let _ = writeln!(out, "branch point: step {}", p.from_step);
        if p.poor_reference && p.threshold_cbs.at_least {
            let _ = writeln!(
                out,
                "  threshold CBS  not measured: every batch came within the tolerance of the reference, \
                 batch {}, which trained worse than larger batches (below)",
                p.branches.first().map_or(0, |b| b.batch)
            );
        } else {
            let text = format!(
                "{} samples ({:.0} % interval of the batch picked {}..{}): the largest batch within {} nats of the smallest batch's loss after {:.0} samples",
                threshold_text(p),
                r.confidence * 100.0,
                p.threshold_cbs.ci[0],
                p.threshold_cbs.ci[1],
                // Shortest form: 1e308 printed its 309 digits.
                if (1e-4..1e6).contains(&r.tolerance.abs()) || r.tolerance == 0.0 {
                    r.tolerance.to_string()
                } else {
                    format!("{:e}", r.tolerance)
                },
                p.budget_samples
            );
            out.push_str(&crate::format::one_line_unless_narrow(
                "  threshold CBS  ",
                &text,
            ));
        }
        let fitted = match &p.b_noise_fit {
            Some(f) => format!(
                "{:.0} samples ({:.0} % interval {}): from the samples each batch needs to reach loss {:.4}",
                f.value,
                r.confidence * 100.0,
                ci(f.ci),
                p.target_loss
            ),
            None => format!("none: {}", p.b_noise_note.as_deref().unwrap_or("no fit")),
        };
        out.push_str(&crate::format::one_line_unless_narrow(
            "  fitted B_noise ",
            &fitted,
        ));
        let _ = writeln!(
            out,
            "  {:>8} {:>6} {:>14} {:>18}",
            "batch", "seeds", "loss@budget", "samples→target"
        );
        for b in &p.branches {
            // Without a common target the engine gives none: the column has nothing to show
            // (it printed 0 for every batch, counted to the branch point's own loss).
            let to = b
                .samples_to_target
                .map_or("-".to_string(), |s| format!("{s:.0}"));
            let _ = writeln!(
                out,
                "  {:>8} {:>6} {:>14.4} {:>18}",
                b.batch, b.seeds, b.loss_at_budget, to
            );
        }
        for line in point_notes(p) {
            out.push_str(&note_line(&line));
        }
    }
    for line in unmeasured_lines(r) {
        let _ = writeln!(out, "{line}");
    }
    out
}

/// A note of a branch point, indented under it: on a terminal narrower than the usual text
/// width wrapped at it with its label (`caution: `) hanging (cautions of 259 columns broke
/// mid-word at 80); in a file or a pipe one line, as before.
fn note_line(line: &str) -> String {
    match line.split_once(": ") {
        Some((label, rest)) if label.len() <= 12 && !label.contains(' ') => {
            crate::format::one_line_unless_narrow(&format!("  {label}: "), rest)
        }
        _ => crate::format::one_line_unless_narrow("  ", line),
    }
}

/// Where a threshold CBS lies on the batches run: at the smallest (the CBS lies below the next
/// batch), at the largest (it is that batch or more), or between (a value).
enum ThresholdBound {
    Below(u64),
    AtLeast(u64),
    Value(u64),
}

fn threshold_bound_of(p: &crate::stats::estimate::cbs::PointReport) -> ThresholdBound {
    let batches: Vec<u64> = p.branches.iter().map(|b| b.batch).collect();
    let th = p.threshold_cbs.batch;
    match batches.as_slice() {
        [first, next, ..] if th == *first => ThresholdBound::Below(*next),
        [.., last] if th == *last && batches.len() >= 2 => ThresholdBound::AtLeast(th),
        _ => ThresholdBound::Value(th),
    }
}

/// The threshold CBS as a value or, at an end of the batches run, the bound it is: "below
/// 16" at the smallest batch (no larger one came within the tolerance), "256 or more" at the
/// largest (every one did).
fn threshold_text(p: &crate::stats::estimate::cbs::PointReport) -> String {
    match threshold_bound_of(p) {
        ThresholdBound::Below(next) => format!("below {next}"),
        // Every batch beat a reference that trained worse: no number to lead with.
        ThresholdBound::AtLeast(_) if p.poor_reference => "not measured".to_string(),
        ThresholdBound::AtLeast(th) => format!("{th} or more"),
        ThresholdBound::Value(th) => th.to_string(),
    }
}

/// [`threshold_text`] in a table cell: `<16`, `≥256`, or the value.
pub fn threshold_bound(p: &crate::stats::estimate::cbs::PointReport) -> String {
    match threshold_bound_of(p) {
        ThresholdBound::Below(next) => format!("<{next}"),
        ThresholdBound::AtLeast(th) => format!("≥{th}"),
        ThresholdBound::Value(th) => th.to_string(),
    }
}

/// The notes of a branch point (`cbs` and `analyze --branches`): branches left out, a
/// threshold at an end of the grid (a bound, not a value), the branch that set a short budget.
pub fn point_notes(p: &crate::stats::estimate::cbs::PointReport) -> Vec<String> {
    let mut lines: Vec<String> = p
        .left_out
        .iter()
        .map(|l| {
            format!(
                "left out: batch {} seed {} stopped at {:.0} samples, under half the branches' \
                 median {:.0} (interrupted?); kept in, it would set every batch's budget",
                l.batch, l.seed, l.samples, l.median_samples
            )
        })
        .collect();
    // The threshold at an end of the grid is censored: the CBS lies beyond what was run.
    match threshold_bound_of(p) {
        ThresholdBound::Below(next) => lines.push(format!(
            "threshold CBS at the smallest batch: no larger batch came within the tolerance, so \
             the CBS lies below {next} (the next batch run); its ratios are upper bounds"
        )),
        // Every batch beat a reference that itself trained badly: no bound at all.
        ThresholdBound::AtLeast(th) if p.poor_reference => lines.push(format!(
            "threshold CBS not measured: every batch came within the tolerance of the reference, batch \
             {}, which itself trained worse than larger batches (below): against it '{th} or \
             more' bounds nothing; branch again with a larger smallest batch",
            p.branches.first().map_or(0, |b| b.batch)
        )),
        ThresholdBound::AtLeast(th) => lines.push(format!(
            "threshold CBS at the largest batch: every batch came within the tolerance, so the \
             CBS is {th} or more; its ratios are lower bounds"
        )),
        ThresholdBound::Value(_) => {}
    }
    lines.extend(p.cautions.iter().map(|c| format!("caution: {c}")));
    if let Some(b) = &p.budget_set_by {
        lines.push(format!(
            "budget: batch {} seed {} stopped at {:.0} samples against the branches' median \
             {:.0}, and every batch is compared there (kept: its batch needs two seeds, or it \
             ran over half the median); rerun it to compare at the full budget",
            b.batch, b.seed, b.samples, b.median_samples
        ));
    }
    lines
}

/// One line per branch point that could not be measured.
pub fn unmeasured_lines(r: &crate::stats::estimate::cbs::CbsReport) -> Vec<String> {
    r.unmeasured
        .iter()
        .map(|u| {
            format!(
                "branch point at step {}: not measured: {}",
                u.from_step, u.why
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::estimate::cbs::{BatchSummary, PointReport, ThresholdCbs};

    fn point(threshold: u64) -> PointReport {
        PointReport {
            from_step: 30,
            budget_samples: 4096.0,
            target_loss: 2.0,
            threshold_cbs: ThresholdCbs {
                batch: threshold,
                ci: [threshold, threshold],
                at_least: threshold == 128,
                at_most: threshold == 8,
                below: (threshold == 8).then_some(32),
                measured: true,
            },
            b_noise_fit: None,
            b_noise_note: None,
            poor_reference: false,
            base: None,
            branches: [8, 32, 128]
                .into_iter()
                .map(|batch| BatchSummary {
                    batch,
                    seeds: 2,
                    loss_at_budget: 2.0,
                    samples_to_target: None,
                    lr: None,
                })
                .collect(),
            left_out: Vec::new(),
            budget_set_by: None,
            cautions: Vec::new(),
        }
    }

    #[test]
    fn a_threshold_at_an_end_of_the_grid_is_called_a_bound() {
        let low = point_notes(&point(8)).join("\n");
        assert!(
            low.contains("lies below 32") && low.contains("upper bounds"),
            "{low}"
        );
        let high = point_notes(&point(128)).join("\n");
        assert!(
            high.contains("128 or more") && high.contains("lower bounds"),
            "{high}"
        );
        assert!(point_notes(&point(32)).is_empty());
        // Against a reference that trained worse than larger batches, "or more" bounds
        // nothing, and the note says so instead of calling the ratios lower bounds.
        let poor = PointReport {
            poor_reference: true,
            ..point(128)
        };
        let poor = point_notes(&poor).join("\n");
        assert!(
            poor.contains("'128 or more' bounds nothing")
                && poor.contains("threshold CBS not measured")
                && !poor.contains("lower bounds"),
            "{poor}"
        );
    }
}
