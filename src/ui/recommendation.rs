//! Recommendation panel: the best batch and configuration at the cursor, its gain over the
//! current batch, and why; plus the selected heatmap cell.

use super::format::si;
use crate::app::App;
use crate::app::recommend::{Units, recommend};
use crate::goodput::StatEffForm;
use crate::goodput::TableCell;
use crate::ui::theme;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

/// Draw the recommendation into `area`.
pub fn draw(frame: &mut Frame, area: Rect, app: &App, focused: bool) {
    let block = super::panel::block(" Recommendation ", focused);
    if let Some(w) = &app.scale_warning {
        frame.render_widget(super::heatmap::scale_warning(w).block(block), area);
        return;
    }
    let (Some(table), Some(grid)) = (&app.table, &app.grid) else {
        let text = if app.table.is_some() && app.trajectory.points.is_empty() && !app.loading {
            "waiting for the run's first records…"
        } else {
            "waiting for the grid…"
        };
        frame.render_widget(Paragraph::new(text).block(block), area);
        return;
    };
    let bold = Style::new().add_modifier(Modifier::BOLD);
    let mut lines = Vec::new();
    let units = Units::of(&app.resolved);
    let form = units.form;
    match recommend(table, grid, app.current_batch_column(), units) {
        Some(r) => {
            lines.push(Line::from(vec![
                Span::raw("best: "),
                Span::styled(
                    format!("batch {} on {}", r.best.batch, r.best.config.layout_label()),
                    bold.fg(theme::current().good),
                ),
            ]));
            let c = &r.best.config;
            let ep = if c.ep > 1 {
                format!(" · EP {}", c.ep)
            } else {
                String::new()
            };
            lines.push(Line::from(format!(
                "  mbs {} · ZeRO-{} · recompute {}{ep}",
                c.mbs, c.zero, c.recompute
            )));
            lines.push(Line::from(goodput_line(
                form,
                r.best.goodput,
                r.best.tokens_per_s,
                r.best.stat_eff,
            )));
            // Right under the recommendation it qualifies (as the 4th bullet it went unread
            // while the title said "≥1.9k … open above" and the panel read 529k).
            if let Some(note) = open_interval_note(app) {
                lines.push(Line::styled(
                    format!("! {note}"),
                    Style::new().fg(theme::current().warning),
                ));
            }
            if let Some(line) = filter_line(app) {
                lines.push(line);
            }
            if let (Some(c), Some(gain)) = (&r.current, r.gain) {
                lines.push(Line::from(format!(
                    "your batch {} on {}, goodput {}",
                    c.batch,
                    c.config.layout_label(),
                    si(c.goodput)
                )));
                lines.push(Line::from(vec![
                    Span::raw("  best has "),
                    Span::styled(
                        format!("{:+.1}%", gain * 100.0),
                        bold.fg(theme::current().warning),
                    ),
                    Span::raw(" goodput over yours"),
                ]));
            }
            for reason in &r.reasons {
                lines.push(Line::styled(
                    format!("· {reason}"),
                    Style::new().fg(theme::current().dim),
                ));
            }
        }
        None => lines.push(Line::styled(
            crate::app::recommend::nothing_runs(table, app.resolved.cluster().gpus())
                .unwrap_or_else(|| "no configuration runs at any batch size".into()),
            Style::new().fg(theme::current().error),
        )),
    }
    let (row, col) = app.selected;
    if row < table.layouts.len() && col < table.batches.len() {
        lines.push(Line::from(""));
        let label = format!(
            "selected: {} @ batch {}",
            table.layouts[row].label(),
            table.batches[col]
        );
        lines.push(Line::styled(label, bold));
        match table.cell(row, col) {
            TableCell::Feasible { config, prediction } => {
                lines.push(Line::from(format!(
                    "  {} tok/s · {} MFU · {}/step · mbs {}",
                    si(prediction.tokens_per_s),
                    crate::format::percent(prediction.mfu),
                    crate::format::step_seconds(prediction.step_time_s),
                    config.mbs
                )));
            }
            TableCell::Infeasible(why) => {
                lines.push(Line::styled(
                    format!("  cannot run: {why}"),
                    Style::new().fg(theme::current().error),
                ));
            }
        }
    }
    if let Some((r, c)) = app.marked
        && let (Some(l), Some(b)) = (table.layouts.get(r), table.batches.get(c))
    {
        lines.push(Line::from(format!(
            "marked (m): {} @ batch {b} · x compares",
            l.label()
        )));
    }
    // What predict and grid say of the model and of the calibration in force (the explorer
    // said nothing of a calibration fitted on another model's steps).
    let r = &app.resolved;
    let stack = r.stack();
    let calibration = r.calibration_in_force().map(|c| {
        c.caveats_for(&crate::perf::calibration_file::CalibrationUse {
            model: &r.model.name,
            recompute: None,
            stack: &stack,
            hardware: &r.hardware.name,
        })
    });
    // And what the stack's attention kernel is costed as where the profile has no figure
    // (grid and plan said it; the explorer did not).
    for c in crate::perf::caveats(&r.model)
        .into_iter()
        .chain(calibration.into_iter().flatten())
        .chain(r.attention_note())
    {
        lines.push(Line::from(""));
        lines.push(Line::styled(
            format!("note: {c}"),
            Style::new().fg(theme::current().dim),
        ));
    }
    let scroll = if focused { app.side_scroll } else { 0 };
    super::panel::draw_scrolled(frame, area, block, lines, scroll);
}

/// "goodput 692k tok/s = 738k × 0.938 stat. eff." (three decimals, so that the product checks
/// by hand against the rounded throughput) — or, for the Pollux form, the efficiency as a
/// factor relative to B0 (it is not a fraction of samples and may exceed 1).
pub fn goodput_line(form: StatEffForm, goodput: f64, tokens_per_s: f64, eff: f64) -> String {
    match form {
        StatEffForm::McCandlish => format!(
            "  goodput {} tok/s = {} × {:.3} stat. eff.",
            si(goodput),
            si(tokens_per_s),
            eff
        ),
        StatEffForm::Pollux { b0 } => format!(
            "  goodput {} B0-equivalent tok/s = {} tok/s × {:.2} (progress per sample vs B0 = {b0:.0})",
            si(goodput),
            si(tokens_per_s),
            eff
        ),
    }
}

/// With a layout filter (`/`) that hides the recommended layout: which layout the filter
/// keeps best (the heatmap's ★), so the panel and the heatmap do not seem to disagree. The
/// recommendation itself stays over every layout, as the plan's.
fn filter_line(app: &App) -> Option<Line<'static>> {
    let filter = app.layout_filter.as_ref()?;
    let (table, grid) = (app.table.as_ref()?, app.grid.as_ref()?);
    let shown = app.best_visible();
    if shown == grid.best {
        return None;
    }
    let text = match shown {
        Some((row, col)) => format!(
            "  of every layout; '{}' shows best batch {} on {} (★)",
            filter.text,
            table.batches.get(col)?,
            table.layouts.get(row)?.label()
        ),
        None => format!("  of every layout; nothing '{}' shows runs", filter.text),
    };
    Some(Line::styled(text, Style::new().fg(theme::current().dim)))
}

/// A caution where B_crit at the cursor has no upper bound (the edge of a two-sided smoother,
/// or steps where |G|² is lost in noise) or, measured, no interval at all: the best batch there may be larger than the heatmap
/// says. For a measured run, the last window's bounded estimate is named beside it.
fn open_interval_note(app: &App) -> Option<String> {
    let point = app.trajectory.points.get(app.cursor)?;
    let Some((lo, hi)) = point.ci else {
        // A measured point without any interval (one record): as uncertain as an unbounded
        // one (a one-record file was recommended without a word). A scenario has none.
        return app.analysis.is_some().then(|| {
            "B_crit here has no interval (the steps up to it are too few to bound it), so \
             this recommendation rests on an uncertain value"
                .to_string()
        });
    };
    if hi.is_finite() {
        return None;
    }
    // The unit the timeline's title gives the same numbers in.
    let word = crate::format::sample_word(app.trajectory.seq_len);
    let window = app
        .analysis
        .as_deref()
        .and_then(|r| {
            let now = &r.summary.now;
            let b = now.b_simple?;
            now.ci[1].is_finite().then(|| {
                format!(
                    "; the run's last {} steps read {} {word} {}",
                    now.steps,
                    crate::format::si(b),
                    crate::app::measured_view::interval_words(now.ci)
                )
            })
        })
        .unwrap_or_default();
    Some(format!(
        "B_crit here is only bounded below (≥{} {word}; the point {} rests on an estimate the \
         data do not bound above), so this recommendation rests on an uncertain value{window}",
        crate::format::si(lo),
        crate::format::si(point.b_crit)
    ))
}
