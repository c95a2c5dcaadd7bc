//! `copus analyze A --compare B`: two runs side by side (the comparison itself is
//! `stats::analysis::compare`).

use super::analyze::{AnalyzeArgs, render_headline};
use crate::stats::{AnalyzeReport, EstimatorSettings, read_ndjson_bounded};
use anyhow::Context;
use std::io::BufReader;

/// The analysis of one path (stats file or dump directory) for `--compare`; file problems go
/// to stderr as in the single-run case.
fn report_of(path: &std::path::Path, args: &AnalyzeArgs) -> anyhow::Result<AnalyzeReport> {
    let settings = args.settings(&EstimatorSettings::default());
    if path.is_dir() {
        let selected = crate::compute::select(args.device.unwrap_or(crate::compute::Device::Auto))?;
        if let Some(note) = &selected.note {
            eprintln!("copus: {note}");
        }
        let d = crate::source::measured::load_dump_dir(
            path,
            args.samples,
            None,
            selected.backend.as_ref(),
            &settings,
            args.seq_len.unwrap_or(super::analyze::DEFAULT_DUMP_SEQ_LEN),
            &crate::cli::bench::stderr_progress,
        );
        crate::cli::bench::finish_progress();
        let d = d?;
        if let Some(note) = crate::source::measured::left_out_note(&d.left_out) {
            eprintln!("copus: {}: {note}", path.display());
        }
        return Ok(d.report);
    }
    let file = crate::fsutil::open_readable_stream(path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let outcome = read_ndjson_bounded(BufReader::new(file), args.record_bound())
        .with_context(|| format!("cannot read {}", path.display()))?;
    for e in &outcome.errors {
        eprintln!("{}:{}: {}", path.display(), e.line, e.reason);
    }
    crate::stats::analyze(
        &outcome.records,
        crate::stats::AnalyzeOptions::read(&outcome, &settings),
    )
    .with_context(|| path.display().to_string())
}

/// `copus analyze A --compare B`: both analyses and the comparison of B with A.
pub fn run(args: &AnalyzeArgs, other: &std::path::Path) -> anyhow::Result<()> {
    let mut a = report_of(&args.path, args)?;
    let mut b = report_of(other, args)?;
    let settings = args.settings(&EstimatorSettings::default());
    let confidence = settings.confidence;
    let mut c = crate::stats::compare(&a, &b, &settings);
    // `--seq-len` reads both runs' samples as it does one run's (it was ignored here), and
    // the token axis with them, as the explorer draws it.
    let factor = super::analyze::apply_seq_len(&mut a, args.seq_len);
    super::analyze::apply_seq_len(&mut b, args.seq_len);
    if let Some(f) = factor {
        c.scale_tokens(f);
    }
    if args.json {
        let mut v = serde_json::json!({ "a": &a, "b": &b, "comparison": &c });
        if args.summary_only {
            // The per-step rows of both runs and the aligned points: what --summary-only
            // leaves out of a single run's report too.
            for (key, rows) in [("a", "steps"), ("b", "steps"), ("comparison", "points")] {
                if let Some(o) = v.get_mut(key).and_then(|x| x.as_object_mut()) {
                    o.remove(rows);
                }
            }
        }
        super::write_json(&v)?;
        return Ok(());
    }
    println!("A: {}", args.path.display());
    print!("{}", render_headline(&a.summary));
    println!("\nB: {}", other.display());
    print!("{}", render_headline(&b.summary));
    print!("\n{}", render_comparison(&c, confidence));
    Ok(())
}

/// The comparison as text: ratios of the estimates and the stretches that differ.
pub fn render_comparison(c: &crate::stats::Comparison, confidence: f64) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let pct = 100.0 * confidence;
    let axis = match c.aligned_by {
        crate::stats::analysis::compare::AlignedBy::Tokens => "tokens",
        crate::stats::analysis::compare::AlignedBy::Steps => "steps",
    };
    let words = |r: &crate::stats::analysis::compare::WindowRatio| {
        format!(
            "B/A x{:.3}{}{}",
            r.ratio,
            r.ci.map_or_else(
                || " (interval unbounded: not resolved)".to_string(),
                |c| format!(" ({pct:.0}% CI x{:.3}-x{:.3})", c[0], c[1])
            ),
            if r.differs { " differs" } else { "" }
        )
    };
    let ratio = |name: &str, r: &Option<crate::stats::analysis::compare::WindowRatio>| match r {
        Some(r) => format!("{name:<10} {}", words(r)),
        None => format!("{name:<10} B/A not available (an estimate is not positive)"),
    };
    let _ = write!(out, "{}", ratio("now", &c.now));
    // Each run's own last window: where they do not overlap, not one point in training.
    match c.now_windows {
        Some([wa, wb]) if !c.now_windows_overlap => {
            let _ = writeln!(
                out,
                "\n           A's last window at {axis} {:.4e}-{:.4e}, B's at {:.4e}-{:.4e}: \
                 not the same point in training (read the shared end below)",
                wa[0], wa[1], wb[0], wb[1]
            );
        }
        _ => {
            let _ = writeln!(out);
        }
    }
    if let Some(end) = &c.shared_end {
        let _ = writeln!(
            out,
            "{:<10} {} over {axis} {:.4e}-{:.4e} (A steps {}-{}, B steps {}-{}): the last \
             window of the run that ends first, and the other's over the same span",
            "shared end",
            words(&end.ratio),
            end.at[0],
            end.at[1],
            end.steps_a[0],
            end.steps_a[1],
            end.steps_b[0],
            end.steps_b[1]
        );
    }
    let _ = writeln!(out, "{}", ratio("run-wide", &c.run_wide));
    let _ = writeln!(
        out,
        "aligned by {axis}: {} point(s), intervals apart on {:.0}%",
        c.points.len(),
        100.0 * c.differs_share
    );
    for d in &c.differs {
        let _ = writeln!(
            out,
            "  {axis} {:.4e}-{:.4e} (A steps {}-{}, B steps {}-{}): B {} than A, median x{:.3}",
            d.at[0],
            d.at[1],
            d.steps_a[0],
            d.steps_a[1],
            d.steps_b[0],
            d.steps_b[1],
            if d.b_higher { "higher" } else { "lower" },
            d.median_ratio
        );
    }
    out
}
