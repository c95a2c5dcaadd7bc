//! Estimator panel: where B_crit at the cursor comes from and how sure we are — for measured
//! runs the estimators side by side (smoothed two-batch, the per-step ratio, the ratio-EMA
//! shown only as a teaching comparison), the per-layer breakdown and the diagnostics.

use super::format::{si, tokens};
use crate::app::App;
use crate::stats::{AnalyzeReport, Severity, StepRow};
use crate::ui::theme;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;

fn interval(ci: [f64; 2]) -> String {
    let hi = if ci[1].is_finite() {
        si(ci[1])
    } else {
        "∞".into()
    };
    format!("[{} – {hi}]", si(ci[0]))
}

/// The analysis row of optimizer step `step`, if the analysis has it.
pub fn row_at(report: &AnalyzeReport, step: u64) -> Option<&StepRow> {
    report
        .steps
        .binary_search_by_key(&step, |r| r.step)
        .ok()
        .map(|i| &report.steps[i])
}

/// The stable snake_case name of a reported kind, as words ("two_batch" → "two-batch").
fn word<T: serde::Serialize>(x: &T) -> String {
    serde_json::to_value(x)
        .ok()
        .and_then(|v| v.as_str().map(|s| s.replace('_', "-")))
        .unwrap_or_else(|| "?".into())
}

fn measured_lines(
    app: &App,
    report: &AnalyzeReport,
    step: Option<u64>,
    lines: &mut Vec<Line<'static>>,
) {
    use crate::app::measured_view as mv;
    let s = &report.summary;
    let bold = Style::new().add_modifier(Modifier::BOLD);
    let dim = Style::new().fg(theme::current().muted);
    let warn = Style::new().fg(theme::current().warning);
    // Where B_crit is now and how it moved lead; the run-wide value is labelled as such.
    lines.push(Line::styled(
        format!(
            "now (steps {}–{}): B_simple {} {}",
            s.now.first_step,
            s.now.last_step,
            s.now.b_simple.map_or("n/a".into(), si),
            interval(s.now.ci)
        ),
        bold,
    ));
    match &s.drift {
        Some(d) => lines.push(Line::styled(
            format!(
                "{} {} [{} – {}] since steps {}–{} (B_simple {})",
                if !d.significant {
                    "steady:"
                } else if d.factor >= 1.0 {
                    "drift: grew"
                } else {
                    "drift: shrank"
                },
                mv::factor_words(d.factor),
                mv::factor_words(d.ci[0]),
                mv::factor_words(d.ci[1]),
                d.from.first_step,
                d.from.last_step,
                d.from.b_simple.map_or("n/a".into(), si)
            ),
            if d.significant { warn } else { Style::new() },
        )),
        None => lines.push(Line::styled(
            format!("drift: not measured ({})", s.why_no_drift()),
            dim,
        )),
    }
    lines.push(Line::from(format!(
        "run-wide: B_simple {} {} over {} steps",
        s.b_simple.map_or("n/a".into(), si),
        interval(s.ci),
        s.steps
    )));
    lines.push(Line::styled(format!("verdict {}", word(&s.verdict)), bold));
    let unit = crate::app::measured_view::sample_word(app.trajectory.seq_len);
    for r in &s.reasons {
        lines.push(Line::styled(
            format!("  because {}", in_panel_words(&r.message, unit)),
            warn,
        ));
        lines.push(Line::styled(format!("  → {}", r.action), dim));
    }
    if let Some(c) = &app.compare {
        lines.push(Line::styled(format!("compared with B = {}", c.label), bold));
        lines.push(Line::from(format!(
            "  {}",
            mv::compare_summary(&c.comparison, &app.trajectory)
        )));
        for d in c.comparison.differs.iter().take(4) {
            lines.push(Line::from(format!(
                "  ≠ A steps {}–{}: B {} than A, median {}",
                d.steps_a[0],
                d.steps_a[1],
                if d.b_higher { "higher" } else { "lower" },
                mv::factor_words(d.median_ratio)
            )));
        }
    }
    lines.push(Line::styled(
        format!(
            "{} estimator, {} · |G|² < 0 on {:.0}% of steps",
            word(&s.estimator),
            s.smoother,
            s.negative_g2_fraction * 100.0
        ),
        dim,
    ));
    if let Some(row) = step.and_then(|st| row_at(report, st)) {
        let per_step = if row.g2_step > 0.0 {
            si(row.trace_step / row.g2_step)
        } else {
            "n/a (|G|² < 0)".into()
        };
        lines.push(Line::from(format!(
            "here: smoothed {} {} · per-step ratio {per_step}",
            row.b_simple.map_or("n/a".into(), si),
            interval(row.ci)
        )));
        if let Some(r) = row.ratio_ema {
            lines.push(Line::styled(
                format!("  ratio-EMA {} (teaching only: E[x/y] ≠ E[x]/E[y])", si(r)),
                dim,
            ));
        }
    }
    if !s.layers.is_empty() {
        lines.push(Line::styled(
            "layer · share of tr Σ · run-wide · here [interval] (l: over time)",
            bold,
        ));
        let mut layers: Vec<_> = s.layers.iter().collect();
        layers.sort_by(|a, b| b.trace_share.total_cmp(&a.trace_share));
        let viewed = app.viewed_layer();
        for l in layers.iter().take(6) {
            let here = step
                .and_then(|st| mv::layer_at(report, st, &l.name))
                .map_or("n/a".into(), |p| {
                    format!("{} {}", p.b_simple.map_or("n/a".into(), si), interval(p.ci))
                });
            let mark = if viewed.as_deref() == Some(l.name.as_str()) {
                "▸"
            } else {
                " "
            };
            lines.push(Line::from(format!(
                "{mark} {:<14} {:>5.1}% {:>6} · {here}",
                crate::format::escape_controls(&l.name),
                l.trace_share * 100.0,
                l.b_simple.map_or("n/a".into(), si)
            )));
        }
    }
    for d in &s.diagnostics {
        let style = match d.severity {
            Severity::Warning => warn,
            Severity::Info => dim,
        };
        let glyph = mv::CauseKind::of(d.kind).map_or('!', |k| k.glyph());
        let at = match (d.at.as_slice(), d.steps) {
            ([], None) => String::new(),
            ([], Some([a, b])) | (&[[a, b]], _) if a == b => format!(" [step {a}]"),
            ([], Some([a, b])) => format!(" [steps {a}–{b}]"),
            (at, _) => format!(
                " [steps {}{}]",
                at.iter()
                    .take(5)
                    .map(|[a, b]| if a == b {
                        a.to_string()
                    } else {
                        format!("{a}–{b}")
                    })
                    .collect::<Vec<_>>()
                    .join(", "),
                if at.len() > 5 { ", …" } else { "" }
            ),
        };
        let message = in_panel_words(&crate::format::escape_controls(&d.message), unit);
        lines.push(Line::styled(format!("{glyph} {message}{at}"), style));
    }
}

/// Draw the panel into `area`.
pub fn draw(frame: &mut Frame, area: Rect, app: &App, focused: bool) {
    let block = super::panel::block(" Estimators ", focused);
    let mut lines = vec![Line::from(format!("source: {}", app.trajectory.label))];
    let point = app.trajectory.points.get(app.cursor);
    if let Some(p) = point {
        lines.push(Line::from(format!(
            "at {} tokens: B_crit {} {} × {} tok = {} tokens",
            tokens(p.tokens),
            si(p.b_crit),
            crate::app::measured_view::sample_word(app.trajectory.seq_len),
            app.trajectory.seq_len,
            crate::format::tokens(p.b_crit * app.trajectory.seq_len as f64)
        )));
        let model_seq = app.resolved.model.seq_len;
        if model_seq != app.trajectory.seq_len {
            lines.push(Line::from(format!(
                "heatmap: {} sequences of {model_seq} tokens (the model's)",
                crate::format::count(p.b_crit * app.samples_to_model_seqs())
            )));
        }
    }
    if let Some(ema) = point.and_then(|p| app.seed_ema.iter().find(|e| e.step == p.step)) {
        lines.push(Line::styled(
            format!(
                "seed EMA estimate: {} (biased: temporal variance of a moving target)",
                ema.b_estimate.map_or("n/a".into(), si)
            ),
            Style::new().fg(theme::current().mark),
        ));
    }
    // A branched experiment is what the run was opened with to compare: first, in view.
    let cursor_step = point.map_or(0, |p| p.step);
    let branch_lines = app
        .branches
        .as_deref()
        .map(|b| {
            let marks = crate::app::branches::marks(b, &app.raw_trajectory);
            // The conversion the session already applies from this file, if any.
            let applied = app
                .convert_from_branches
                .filter(|_| crate::app::branches::is_measured_conversion(&app.resolved.session))
                .map(|_| app.resolved.session.b_crit_scale);
            // A branch file whose learning rates say it is another run's: first, since it
            // puts every ratio below in doubt.
            let mut lines: Vec<String> = app.analysis.as_ref().map_or_else(Vec::new, |a| {
                crate::stats::estimate::cbs::run_mismatches(b, &a.steps)
                    .into_iter()
                    .map(|m| format!("caution: {m}"))
                    .collect()
            });
            let another_run = !lines.is_empty();
            lines.extend(crate::app::branches::estimator_lines(
                &marks,
                cursor_step,
                applied,
                another_run,
                crate::app::measured_view::sample_word(app.trajectory.seq_len),
            ));
            // Points where the compared B_simple rests on the smoother's width: after the
            // ratios they qualify.
            if let Some(a) = app.analysis.as_ref() {
                lines.extend(
                    crate::stats::estimate::cbs::steep_estimates(
                        b,
                        &a.steps,
                        a.summary.bandwidth_steps,
                    )
                    .into_iter()
                    .map(|m| format!("caution: {m}")),
                );
            }
            lines
        })
        .unwrap_or_default();
    // The experiment's cautions come from `cbs` (counts in samples): in the panel's words.
    let unit = crate::app::measured_view::sample_word(app.trajectory.seq_len);
    for l in &branch_lines {
        lines.push(Line::styled(
            in_panel_words(l, unit),
            Style::new().fg(theme::current().mark),
        ));
    }
    match &app.analysis {
        Some(report) => measured_lines(app, report, point.map(|p| p.step), &mut lines),
        None => lines.push(Line::styled(
            "a published law, not a measurement: no sampling interval",
            Style::new().fg(theme::current().muted),
        )),
    }
    let scale = app.resolved.session.b_crit_scale;
    if (scale - 1.0).abs() > 1e-12 {
        // Three digits, and where the factor came from (a measured conversion is no what-if).
        let measured = crate::app::branches::is_measured_conversion(&app.resolved.session);
        lines.push(Line::from(format!(
            "B_crit scaled ×{} ({})",
            crate::format::factor(scale),
            if measured {
                "measured by branching"
            } else {
                "what-if"
            }
        )));
    }
    if branch_lines.is_empty() {
        lines.push(Line::styled(
            "The noise scale need not be the critical batch size: Merrill et al. 2025 measured \
             OLMo's far above it, and a run can sit below it too. Measure yours by branched \
             training (copus branch) or try the B_crit scale in the what-if panel.",
            Style::new().fg(theme::current().dim),
        ));
    }
    let scroll = if focused { app.side_scroll } else { 0 };
    super::panel::draw_scrolled(frame, area, block, lines, scroll);
}

/// A diagnostic's text (written for `analyze`'s plain output: "x5.09 (95% CI x3.13-x8.26)",
/// counts in "samples") in the panel's words: factors with "×" as the panel's own lines write
/// them, and the run's samples named `word` ("sequences" where a sample is a sequence of
/// several tokens, as the panel's title counts them); the panel mixed both within a few lines.
pub fn in_panel_words(message: &str, word: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut prev: Option<char> = None;
    let mut chars = message.chars().peekable();
    while let Some(c) = chars.next() {
        let factor = c == 'x'
            && !prev.is_some_and(char::is_alphanumeric)
            && chars.peek().is_some_and(char::is_ascii_digit);
        if factor {
            // "x3.13-x8.26": the range's dash as the panel's.
            if out.ends_with("-") && prev == Some('-') {
                out.pop();
                out.push('–');
            }
            out.push('×');
        } else {
            out.push(c);
        }
        prev = Some(c);
    }
    // The panel's notation for the two sums ("tr(Sigma)", "|G|^2" in analyze's ASCII text).
    let out = out.replace("tr(Sigma)", "tr Σ").replace("|G|^2", "|G|²");
    if word == "samples" {
        out
    } else {
        out.replace(" samples", &format!(" {word}"))
    }
}

#[cfg(test)]
mod tests {
    use super::in_panel_words;

    #[test]
    fn diagnostics_read_in_the_panels_words() {
        let drift = "B_simple grows x5.09 (95% CI x3.13-x8.26) from 302.8 samples over steps \
                     0-59 to 1540.1 samples: read E[x/y] max(x2)";
        assert_eq!(
            in_panel_words(drift, "sequences"),
            "B_simple grows ×5.09 (95% CI ×3.13–×8.26) from 302.8 sequences over steps \
             0-59 to 1540.1 sequences: read E[x/y] max(×2)"
        );
        assert_eq!(
            in_panel_words("tr(Sigma) over |G|^2", "samples"),
            "tr Σ over |G|²"
        );
        // One-token samples stay samples; words with an x inside stay as they are.
        assert_eq!(
            in_panel_words("2 samples, box 3, x4", "samples"),
            "2 samples, box 3, ×4"
        );
    }
}
