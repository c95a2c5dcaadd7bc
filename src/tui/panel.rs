//! The frame every panel draws in: a bordered block whose border is highlighted when focused.

use ratatui::style::{Color, Style};
use ratatui::text::Line;
use ratatui::widgets::Block;

/// A bordered block titled `title`, with a cyan border when `focused`.
pub fn block<'a>(title: impl Into<Line<'a>>, focused: bool) -> Block<'a> {
    let border = if focused {
        Color::Cyan
    } else {
        Color::DarkGray
    };
    Block::bordered()
        .title(title)
        .border_style(Style::new().fg(border))
}
