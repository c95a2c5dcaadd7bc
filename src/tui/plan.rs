//! Plan panel: the switch points of the planned schedule and the strategies compared.

use crate::app::App;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::{Color, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Paragraph, Wrap};

/// Draw the panel into `area`.
pub fn draw(frame: &mut Frame, area: Rect, app: &App, focused: bool) {
    let border = if focused {
        Color::Cyan
    } else {
        Color::DarkGray
    };
    let block = Block::bordered()
        .title(" Plan ")
        .border_style(Style::new().fg(border));
    let lines = if app.switch_points.is_empty() {
        vec![Line::styled(
            "no plan computed for this session",
            Style::new().fg(Color::DarkGray),
        )]
    } else {
        vec![Line::from(format!(
            "{} switch points ([ and ] jump)",
            app.switch_points.len()
        ))]
    };
    frame.render_widget(
        Paragraph::new(lines)
            .block(block)
            .wrap(Wrap { trim: false }),
        area,
    );
}
