//! The frame every panel draws in: a bordered block whose border is highlighted when focused.

use crate::ui::theme;
use ratatui::style::Style;
use ratatui::text::Line;
use ratatui::widgets::{Block, BorderType};

/// A bordered block titled `title`; when `focused`, a thick cyan border (the thickness marks
/// the focus without colour).
pub fn block<'a>(title: impl Into<Line<'a>>, focused: bool) -> Block<'a> {
    let (border, kind) = if focused {
        (theme::current().accent, BorderType::Thick)
    } else {
        (theme::current().muted, BorderType::Plain)
    };
    Block::bordered()
        .border_type(kind)
        .title(title)
        .border_style(Style::new().fg(border))
}

/// `text` cut to `columns` characters, its last one "…", when it is longer.
pub fn ellipsized(text: &str, columns: usize) -> String {
    if text.chars().count() <= columns {
        return text.to_string();
    }
    let kept: String = text.chars().take(columns.saturating_sub(1)).collect();
    format!("{kept}…")
}

/// A popup over `area`: cleared, in a yellow bordered block titled `title`, with `lines`
/// scrolled as [`draw_scrolled`] does (the explanation and the ranked list).
pub fn draw_popup(
    frame: &mut ratatui::Frame,
    area: ratatui::layout::Rect,
    title: String,
    lines: Vec<Line<'_>>,
    scroll: u16,
) {
    use ratatui::style::Style;
    frame.render_widget(ratatui::widgets::Clear, area);
    draw_scrolled(
        frame,
        area,
        Block::bordered()
            .title(title)
            .border_style(Style::new().fg(theme::current().warning)),
        lines,
        scroll,
    );
}

/// Draw `lines` word-wrapped in `block` over `area`, scrolled down by `scroll` lines (clamped
/// to the text), with a "more" marker on the bottom border when text is hidden.
pub fn draw_scrolled(
    frame: &mut ratatui::Frame,
    area: ratatui::layout::Rect,
    block: Block<'_>,
    lines: Vec<Line<'_>>,
    scroll: u16,
) {
    use ratatui::widgets::{Paragraph, Wrap};
    let inner_w = area.width.saturating_sub(2) as usize;
    let visible = area.height.saturating_sub(2) as usize;
    let total: usize = lines
        .iter()
        .map(|l| {
            let text: String = l.spans.iter().map(|s| s.content.as_ref()).collect();
            super::view::wrapped_lines(&text, inner_w)
        })
        .sum();
    let max = total.saturating_sub(visible);
    let s = (scroll as usize).min(max);
    let block = match (s > 0, s < max) {
        (_, true) => block.title_bottom(Line::from(" ↓ more (↑/↓ scroll) ").right_aligned()),
        (true, false) => block.title_bottom(Line::from(" ↑ (scrolled) ").right_aligned()),
        (false, false) => block,
    };
    frame.render_widget(
        Paragraph::new(lines)
            .block(block)
            .wrap(Wrap { trim: false })
            .scroll((s as u16, 0)),
        area,
    );
}
