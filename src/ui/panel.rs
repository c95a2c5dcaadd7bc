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

/// `text` cut to `columns` characters, its last one "…", when it is longer: after its last
/// whole word that fits ("and is n…" read as a word), or mid-word where a word fills more than
/// half the room.
pub fn ellipsized(text: &str, columns: usize) -> String {
    if text.chars().count() <= columns {
        return text.to_string();
    }
    let kept: String = text.chars().take(columns.saturating_sub(1)).collect();
    // Cut at the space before the partial word (the character after `kept` is not a space).
    let partial = text
        .chars()
        .nth(kept.chars().count())
        .is_some_and(|c| c != ' ');
    let cut = match kept.rfind(' ') {
        Some(i) if partial && kept[..i].chars().count() * 2 >= columns => kept[..i].trim_end(),
        _ => kept.trim_end(),
    };
    format!("{cut}…")
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

#[cfg(test)]
mod tests {
    use super::ellipsized;

    #[test]
    fn a_cut_text_ends_after_a_whole_word() {
        let text = "s saves to l70i.saved.ron (l70i.ron has comments and is not rewritten)";
        assert_eq!(ellipsized(text, 200), text);
        for columns in 8..text.chars().count() {
            let cut = ellipsized(text, columns);
            assert!(cut.chars().count() <= columns, "{columns}: {cut}");
            assert!(cut.ends_with('…'), "{columns}: {cut}");
            let body = cut.trim_end_matches('…');
            // The last word shown is whole, or cut only where the words before it fill less
            // than half the room.
            let last = body.split(' ').next_back().unwrap_or_default();
            let whole = text.split(' ').any(|w| w == last);
            let before = body.trim_end_matches(last).trim_end().chars().count();
            assert!(whole || before * 2 < columns, "{columns}: {cut}");
        }
        assert_eq!(
            ellipsized(text, 58),
            "s saves to l70i.saved.ron (l70i.ron has comments and is…"
        );
    }
}
