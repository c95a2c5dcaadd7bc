//! The frame every panel draws in: a bordered block whose border is highlighted when focused.

use ratatui::style::{Color, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, BorderType};

/// A bordered block titled `title`; when `focused`, a thick cyan border (the thickness marks
/// the focus without colour).
pub fn block<'a>(title: impl Into<Line<'a>>, focused: bool) -> Block<'a> {
    let (border, kind) = if focused {
        (Color::Cyan, BorderType::Thick)
    } else {
        (Color::DarkGray, BorderType::Plain)
    };
    Block::bordered()
        .border_type(kind)
        .title(title)
        .border_style(Style::new().fg(border))
}
