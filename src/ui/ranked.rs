//! The ranked list popup (`R`): every layout at the selected batch, best goodput first, with
//! its throughput, MFU, step time and chosen options, then the layouts that cannot run and
//! why. The numbers come from [`crate::app::ranked`].

use crate::app::App;
use crate::app::ranked::{LineKind, Ranked, ranked_at, text_lines};
use crate::ui::theme;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;

/// The popup's title and lines for `app` (empty before the grid is computed).
pub fn popup_lines(app: &App, width: usize) -> (String, Vec<Line<'static>>) {
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
    (title, lines(&r, width))
}

fn lines(r: &Ranked, width: usize) -> Vec<Line<'static>> {
    let bold = Style::new().add_modifier(Modifier::BOLD);
    let dim = Style::new().fg(theme::current().muted);
    text_lines(r, width)
        .into_iter()
        .map(|(kind, text)| match kind {
            LineKind::Heading => Line::styled(text, bold),
            LineKind::CannotRun => Line::styled(text, dim),
            LineKind::Plain | LineKind::Runs => Line::from(text),
        })
        .collect()
}

/// Draw the popup over `area` when it is open.
pub fn draw(frame: &mut Frame, area: Rect, app: &App) {
    if !app.is_open(crate::app::OverlayKind::Ranked) {
        return;
    }
    let r = super::explain::popup_area(area);
    if r.width < 20 || r.height < 5 {
        return;
    }
    let (title, lines) = popup_lines(app, r.width.saturating_sub(2) as usize);
    super::panel::draw_popup(frame, r, title, lines, app.ranked_scroll);
}
