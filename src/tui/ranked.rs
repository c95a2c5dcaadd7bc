//! The ranked list popup (`R`): every layout at the selected batch, best goodput first, with
//! its throughput, MFU, step time and chosen options, then the layouts that cannot run and
//! why. The numbers come from [`crate::app::ranked`].

use super::format::si;
use crate::app::App;
use crate::app::ranked::{Ranked, ranked_at};
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Clear};

/// The popup's title and lines for `app` (empty before the grid is computed).
pub fn popup_lines(app: &App) -> (String, Vec<Line<'static>>) {
    let (Some(table), Some(grid)) = (&app.table, &app.grid) else {
        return (" Ranked ".into(), Vec::new());
    };
    let rows = app.visible_rows();
    let Some(r) = ranked_at(table, grid, app.selected.1, Some(&rows)) else {
        return (" Ranked ".into(), Vec::new());
    };
    let filter = app
        .layout_filter
        .as_ref()
        .map(|f| format!(" · filter {}", f.text))
        .unwrap_or_default();
    let title = format!(
        " Layouts at batch {} ranked by goodput{filter} · ←/→ batch · Esc ",
        r.batch
    );
    (title, lines(&r))
}

fn lines(r: &Ranked) -> Vec<Line<'static>> {
    let bold = Style::new().add_modifier(Modifier::BOLD);
    let mut out = vec![
        Line::from(format!(
            "{} layouts run at batch {} (statistical efficiency {:.2}), {} cannot",
            r.runs.len(),
            r.batch,
            r.stat_eff,
            r.cannot_run.len()
        )),
        Line::styled(
            format!(
                "{:>4}  {:<20} {:>9} {:>7} {:>9} {:>5} {:>9} {:>4} {:>5}  {}",
                "rank",
                "layout",
                "goodput",
                "of best",
                "tok/s",
                "MFU",
                "step",
                "mbs",
                "ZeRO",
                "recompute"
            ),
            bold,
        ),
    ];
    for row in &r.runs {
        out.push(Line::from(format!(
            "{:>4}  {:<20} {:>9} {:>6.1}% {:>9} {:>4.0}% {:>8.3}s {:>4} {:>5}  {}",
            row.rank,
            row.layout.label(),
            si(row.goodput),
            100.0 * row.share_of_best,
            si(row.tokens_per_s),
            100.0 * row.mfu,
            row.step_time_s,
            row.micro_batch,
            row.zero,
            row.recompute
        )));
    }
    if !r.cannot_run.is_empty() {
        out.push(Line::from(""));
        out.push(Line::styled("cannot run:", bold));
        for c in &r.cannot_run {
            out.push(Line::styled(
                format!("  {:<20} {}", c.layout.label(), c.reason),
                Style::new().fg(Color::DarkGray),
            ));
        }
    }
    out
}

/// Draw the popup over `area` when it is open.
pub fn draw(frame: &mut Frame, area: Rect, app: &App) {
    if !app.ranked_open {
        return;
    }
    let r = super::explain::popup_area(area);
    if r.width < 20 || r.height < 5 {
        return;
    }
    let (title, lines) = popup_lines(app);
    frame.render_widget(Clear, r);
    super::panel::draw_scrolled(
        frame,
        r,
        Block::bordered()
            .title(title)
            .border_style(Style::new().fg(Color::Yellow)),
        lines,
        app.ranked_scroll,
    );
}
