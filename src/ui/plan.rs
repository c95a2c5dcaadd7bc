//! Plan panel: the objective and B_crit conversion, the strategies compared (predicted time to
//! the target and speedup over the hindsight static choice), the paper-style speedup over the
//! fastest baseline, and the switch points of the optimal joint schedule.

use super::format::{duration, tokens};
use crate::app::App;
use crate::ui::theme;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::Paragraph;

/// Draw the panel into `area`.
pub fn draw(frame: &mut Frame, area: Rect, app: &App, focused: bool) {
    let block = super::panel::block(" Plan ([ ] jump to switches) ", focused);
    let Some(plan) = &app.plan else {
        let text = if app.table.is_some() {
            "planning…"
        } else {
            "waiting for the throughput table…"
        };
        frame.render_widget(Paragraph::new(text).block(block), area);
        return;
    };
    let bold = Style::new().add_modifier(Modifier::BOLD);
    let dim = Style::new().fg(theme::current().muted);
    let mut lines = vec![
        Line::styled(
            format!(
                "{} · B_crit {} ×{}",
                plan.objective,
                plan.b_crit.kind,
                crate::format::factor(plan.b_crit.factor)
            ),
            dim,
        ),
        // "static" (the table's first row, the best single choice in hindsight) is no paper
        // baseline: both comparisons, named, as `copus plan` gives them.
        Line::from(format!(
            "optimal {:+.1}% vs {} (fastest paper baseline)",
            (plan.speedup_vs_fastest_baseline - 1.0) * 100.0,
            plan.fastest_baseline,
        )),
        Line::from(format!(
            "optimal {:+.1}% vs static (best single choice in hindsight)",
            (plan.speedup_vs_hindsight_static - 1.0) * 100.0,
        )),
    ];
    let inner = area.width.saturating_sub(2) as usize;
    lines.extend(strategy_rows(plan, inner, bold));
    // What the hours are: the time to the trajectory's progress, whose token axis counts
    // tokens at a reference batch, not the tokens a plan's smaller batches consume (600B ÷ the
    // throughput is not the time).
    let until = match &plan.horizon {
        Some(h) => format!("loss {:.3} (the session's target)", h.target_loss),
        None => "the trajectory's end".to_string(),
    };
    lines.push(Line::styled(
        format!(
            "time to {until}; token axis: {}",
            plan.token_axis.words(plan.seq_len)
        ),
        dim,
    ));
    lines.push(Line::from(""));
    let strips = super::shares::lines(app, area.width.saturating_sub(2) as usize);
    if !strips.is_empty() {
        lines.extend(strips);
        lines.push(Line::from(""));
    }
    if plan.switches.is_empty() {
        lines.push(Line::from("optimal-joint: no switch pays for itself"));
    } else {
        lines.push(Line::styled("optimal-joint switches", bold));
    }
    for sw in &plan.switches {
        lines.push(Line::from(format!(
            "{} tok · {} → {}",
            tokens(sw.at_tokens),
            sw.from,
            sw.to
        )));
        lines.push(Line::styled(
            format!(
                "   {} · cost {} · net gain {}",
                sw.kind,
                duration(sw.cost_s),
                duration(sw.gain_s)
            ),
            dim,
        ));
        // The timeline's tokens are the trajectory's axis; a trainer following the plan
        // counts its own steps and tokens (what `plan --emit` writes).
        lines.push(Line::styled(
            format!(
                "   trainer: step {} · {} tok consumed",
                sw.plan_steps,
                tokens(sw.consumed_tokens)
            ),
            dim,
        ));
    }
    // Why the cbs-* baselines trail (as `copus plan` says it): not "following B_crit is bad".
    // Last, so that the strips and switches stay in view; the panel scrolls to it.
    if let Some(note) = crate::plan::render::cbs_baselines_note(plan) {
        lines.push(Line::from(""));
        lines.push(Line::styled(note, dim));
    }
    let scroll = if focused { app.side_scroll } else { 0 };
    super::panel::draw_scrolled(frame, area, block, lines, scroll);
}

/// Columns of the strategies table on one line: name, time, vs static, switches.
const TABLE_COLUMNS: usize = 40;

/// The strategies table (predicted time to the target, speedup over the hindsight static
/// choice, switches): one line a strategy where the panel holds [`TABLE_COLUMNS`], else the
/// name on one line and its figures indented below (a narrow panel wrapped the columns).
fn strategy_rows(plan: &crate::plan::PlanReport, inner: usize, bold: Style) -> Vec<Line<'static>> {
    let strategies = plan
        .strategies
        .iter()
        .chain(plan.current_batch_static.iter());
    let vs = |s: &crate::plan::report::StrategyRow| (s.speedup_vs_static - 1.0) * 100.0;
    if inner >= TABLE_COLUMNS {
        let head = format!(
            "{:<16}{:>10}{:>9}{:>5}",
            "strategy", "time", "vs stat", "sw"
        );
        std::iter::once(Line::styled(head, bold))
            .chain(strategies.map(|s| {
                Line::from(format!(
                    "{:<16}{:>10}{:>8.1}%{:>5}",
                    s.name,
                    duration(s.time_s),
                    vs(s),
                    s.switches
                ))
            }))
            .collect()
    } else {
        std::iter::once(Line::styled("strategy · time · vs static", bold))
            .chain(strategies.flat_map(|s| {
                [
                    Line::from(s.name.to_string()),
                    Line::from(format!(
                        "   {} · {:+.1}% · {} sw",
                        duration(s.time_s),
                        vs(s),
                        s.switches
                    )),
                ]
            }))
            .collect()
    }
}
