//! Help overlay and the one-line key help.

use ratatui::Frame;
use ratatui::layout::{Constraint, Flex, Layout, Rect};
use ratatui::style::{Color, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Clear, Paragraph};

/// Key bindings, shown in the overlay: (keys, what they do).
pub const BINDINGS: &[(&str, &str)] = &[
    ("←/→", "scrub through training (Shift: 10 points)"),
    ("PgUp/PgDn", "scrub 10 points"),
    ("Home/End", "first / last point"),
    ("Tab", "cycle focus: timeline → heatmap → recommendation"),
    (
        "arrows in heatmap",
        "select a cell (details in the recommendation)",
    ),
    ("s", "save the session (atomic)"),
    ("?", "this help"),
    ("q / Esc", "quit"),
];

/// The bottom key-help line.
pub fn key_line() -> Line<'static> {
    Line::styled(
        " ←/→ scrub · Tab focus · 1-5 panels · n tour · s save · e export · ? help · q quit",
        Style::new().fg(Color::DarkGray),
    )
}

/// Draw the help overlay centred in `area`.
pub fn draw_overlay(frame: &mut Frame, area: Rect) {
    let height = BINDINGS.len() as u16 + 6;
    let [v] = Layout::vertical([Constraint::Length(height)])
        .flex(Flex::Center)
        .areas(area);
    let [r] = Layout::horizontal([Constraint::Length(84.min(area.width))])
        .flex(Flex::Center)
        .areas(v);
    let mut lines: Vec<Line> = BINDINGS
        .iter()
        .map(|(k, d)| Line::from(format!(" {k:<18} {d}")))
        .collect();
    lines.push(Line::from(""));
    lines.push(Line::from(
        " Goodput = throughput × B_crit/(B + B_crit) (McCandlish et al. 2018).",
    ));
    lines.push(Line::from(" ? or Esc closes this help."));
    frame.render_widget(Clear, r);
    frame.render_widget(
        Paragraph::new(lines).block(Block::bordered().title(" Help ")),
        r,
    );
}
