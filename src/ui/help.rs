//! Help overlay and the one-line key help.

use super::keymap::Keymap;
use crate::ui::theme;
use ratatui::Frame;
use ratatui::layout::{Constraint, Flex, Layout, Rect};
use ratatui::style::Style;
use ratatui::text::Line;
use ratatui::widgets::{Block, Clear};

/// The bottom key-help line, from the key map, fitted to `width` columns; its `n` hint names
/// `tour_kind` ("tour" or "lesson", as [`crate::app::App::tour_kind`] gives it).
pub fn key_line(keymap: &Keymap, width: u16, tour_kind: &str) -> Line<'static> {
    Line::styled(
        format!(
            " {}",
            super::keymap::hints_fitting(keymap, usize::from(width).saturating_sub(1), tour_kind)
        ),
        Style::new().fg(theme::current().muted),
    )
}

/// Draw the help overlay (every line of `keymap`) centred in `area`, its text scrolled down by
/// `scroll` lines.
pub fn draw_overlay(frame: &mut Frame, area: Rect, keymap: &Keymap, scroll: u16) {
    let mut lines: Vec<Line> = keymap
        .bindings
        .iter()
        .map(|b| Line::from(format!(" {:<15} {}", b.label, b.what)))
        .collect();
    lines.push(Line::from(""));
    lines.push(Line::from(
        " Timeline marks (measured runs): ◆ lr change · ↯ loss-scale jump · ░ |G|²≤0 · ✕ NaN step",
    ));
    lines.push(Line::from(
        "   + compared run (open A --compare B) · ≠ the two differ beyond their intervals",
    ));
    lines.push(Line::from(
        "   branched training (--branches): ▲ threshold CBS · ● fitted B_noise",
    ));
    lines.push(Line::from(
        " Ctrl+Z suspends (fg resumes) · Ctrl+C quits as q does",
    ));
    lines.push(Line::from(
        " Goodput = throughput × statistical efficiency (McCandlish et al. 2018).",
    ));
    let names: Vec<String> = crate::app::lessons::builtin()
        .unwrap_or_default()
        .into_iter()
        .map(|l| l.name)
        .collect();
    lines.push(Line::from(format!(
        " Lessons: copus lesson {} (--list: titles)",
        names.join(" | ")
    )));
    lines.push(Line::from(" ? or Esc closes this help."));
    let height = (lines.len() as u16 + 2).min(area.height);
    let [v] = Layout::vertical([Constraint::Length(height)])
        .flex(Flex::Center)
        .areas(area);
    let [r] = Layout::horizontal([Constraint::Length(96.min(area.width))])
        .flex(Flex::Center)
        .areas(v);
    frame.render_widget(Clear, r);
    super::panel::draw_scrolled(
        frame,
        r,
        Block::bordered().title(" Help · every key "),
        lines,
        scroll,
    );
}
