//! What-if editor panel: the settings that can be changed live, one per row.

use crate::app::App;
use crate::app::whatif::{FIELDS, value};
use crate::ui::theme;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

/// Draw the what-if editor into `area`.
pub fn draw(frame: &mut Frame, area: Rect, app: &App, focused: bool) {
    let block = super::panel::block(" What-if (↑/↓ field, ←/→ change) ", focused);
    let mut lines: Vec<Line> = FIELDS
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let selected = i == app.whatif_row;
            let style = if selected && focused {
                Style::new().add_modifier(Modifier::REVERSED)
            } else if selected {
                Style::new().add_modifier(Modifier::BOLD)
            } else {
                Style::new()
            };
            Line::from(vec![
                Span::styled(format!(" {:<16}", f.label()), style),
                Span::raw(format!(" {}", value(&app.resolved, *f))),
            ])
        })
        .collect();
    lines.push(Line::from(""));
    let gpus = app.resolved.cluster().gpus();
    let layouts = app.table.as_ref().map_or(0, |t| t.layouts.len());
    lines.push(Line::styled(
        format!(" {gpus} GPUs · {layouts} layouts on the heatmap"),
        Style::new().fg(theme::current().muted),
    ));
    frame.render_widget(Paragraph::new(lines).block(block), area);
}
