//! The best cell along training (in the plan panel): for the heatmap's best cell (★) at every
//! phase, the share of its step in exposed communication and in the pipeline bubble as two
//! glyph strips over the token axis, where ★ moves, and the cursor; from
//! [`crate::plan::shares`] (the same numbers as `copus plan --json`'s `best_along`).

use crate::app::App;
use crate::plan::shares::BestShares;
use crate::ui::theme;
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;

/// Levels of a strip, from a zero share to the top of the scale.
const LEVELS: [char; 9] = ['·', '▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// The glyph of `share` on a scale whose top is `top`.
pub fn level(share: f64, top: f64) -> char {
    if share.is_nan() || top.is_nan() || share <= 0.0 || top <= 0.0 {
        return LEVELS[0];
    }
    let i = (share / top * 8.0).ceil().clamp(1.0, 8.0) as usize;
    LEVELS[i]
}

/// The phase shown at each of `width` columns spanning the phases' token range.
pub fn columns(along: &[BestShares], width: usize) -> Vec<usize> {
    let (Some(first), Some(last)) = (along.first(), along.last()) else {
        return Vec::new();
    };
    let (lo, hi) = (first.start_tokens, last.start_tokens);
    (0..width)
        .map(|j| {
            let t = if width > 1 {
                lo + (hi - lo) * j as f64 / (width - 1) as f64
            } else {
                lo
            };
            along.iter().rposition(|b| b.start_tokens <= t).unwrap_or(0)
        })
        .collect()
}

/// The strip lines for `app`'s plan in `width` columns (empty without a plan).
pub fn lines(app: &App, width: usize) -> Vec<Line<'static>> {
    let Some(plan) = &app.plan else {
        return Vec::new();
    };
    let along = &plan.best_along;
    if along.is_empty() {
        return Vec::new();
    }
    let bold = Style::new().add_modifier(Modifier::BOLD);
    let strip_w = width.saturating_sub(8).max(4);
    let cols = columns(along, strip_w);
    let top = along
        .iter()
        .map(|b| b.exposed_comm_share.max(b.bubble_share))
        .fold(0.0, f64::max);
    // A round top: the next 5% above the largest share.
    let top = ((top * 20.0).ceil() / 20.0).max(0.05);
    let strip = |f: fn(&BestShares) -> f64| -> String {
        cols.iter().map(|&i| level(f(&along[i]), top)).collect()
    };
    let moves: String = cols
        .iter()
        .enumerate()
        .map(|(j, &i)| {
            let prev = if j == 0 { None } else { Some(cols[j - 1]) };
            let moved = prev.is_some_and(|p| {
                (along[p].layout.as_str(), along[p].batch)
                    != (along[i].layout.as_str(), along[i].batch)
            });
            if moved { '◆' } else { '─' }
        })
        .collect();
    let here = app
        .trajectory
        .points
        .get(app.cursor)
        .map(|p| p.tokens)
        .and_then(|t| along.iter().rposition(|b| b.start_tokens <= t).or(Some(0)));
    let cursor_col = here.and_then(|h| cols.iter().position(|&i| i >= h));
    let mut out = vec![
        Line::styled(
            format!("★ per phase (share of step, scale 0–{:.0}%)", top * 100.0),
            bold,
        ),
        Line::from(format!(" comm  {}", strip(|b| b.exposed_comm_share))),
        Line::from(format!(" bubble{}", strip(|b| b.bubble_share))),
        Line::styled(
            format!(" ★ move{moves}"),
            Style::new().fg(theme::current().muted),
        ),
    ];
    if let Some(c) = cursor_col {
        out.push(Line::from(format!(" cursor{}▲", " ".repeat(c))));
    }
    if let Some(b) = here.and_then(|h| along.get(h)) {
        // The phase's best, at the phase's B_crit: at a switch point the heatmap's ★ (at the
        // cursor's own B_crit) can differ, which the label says.
        out.push(Line::from(format!(
            " ★ of this phase (mean B_crit {}): {} B={} · comm {:.0}% · bubble {:.0}%",
            crate::format::si(b.b_crit),
            b.layout,
            b.batch,
            b.exposed_comm_share * 100.0,
            b.bubble_share * 100.0
        )));
        // The plan weighs what a switch costs, the ★ does not: where they differ, both are
        // named (the coupling lesson read "this phase: DP32·TP2·PP1 B=32" where the plan ran
        // DP64·TP1·PP1 at 64).
        let tokens = app.trajectory.points.get(app.cursor).map(|p| p.tokens);
        if let Some((layout, batch)) = tokens.and_then(|t| planned_state(plan, t))
            && (layout.as_str(), batch) != (b.layout.as_str(), b.batch)
        {
            out.push(Line::styled(
                format!(
                    " the plan runs {layout} B={batch} here (it weighs what switching costs; ★ \
                     does not)"
                ),
                Style::new().fg(theme::current().muted),
            ));
        }
    }
    out
}

/// The optimal-joint plan's layout and batch (samples) at trajectory `tokens`: its start
/// state, then each switch's from its point on.
fn planned_state(plan: &crate::plan::PlanReport, tokens: f64) -> Option<(String, u64)> {
    let row = plan.strategies.iter().find(|s| s.name == "optimal-joint")?;
    let state = plan
        .switches
        .iter()
        .rev()
        .find(|s| s.at_tokens <= tokens)
        .map_or(&row.start_state, |s| &s.to_state);
    let layout = crate::perf::config::layout_label_cp(state.dp, state.cp, state.tp, state.pp);
    Some((layout, state.batch))
}
