//! Help overlay and the one-line key help.

use super::keymap::Keymap;
use crate::ui::theme;
use ratatui::Frame;
use ratatui::layout::{Constraint, Flex, Layout, Rect};
use ratatui::style::Style;
use ratatui::text::Line;
use ratatui::widgets::{Block, Clear};

/// The bottom key-help line, from the key map, fitted to `width` columns, for the keys of
/// `scopes` (the focused panel's and the global ones); its `n` hint names `tour_kind` ("tour"
/// or "lesson", as [`crate::app::App::tour_kind`] gives it).
pub fn key_line(
    keymap: &Keymap,
    width: u16,
    tour_kind: &str,
    scopes: &[super::keymap::Scope],
) -> Line<'static> {
    Line::styled(
        format!(
            " {}",
            super::keymap::hints_fitting(
                keymap,
                usize::from(width).saturating_sub(1),
                tour_kind,
                scopes
            )
        ),
        Style::new().fg(theme::current().muted),
    )
}

/// What Ctrl+Z and Ctrl+C do, as the key map has them: Ctrl+C quits only while it is one of
/// the quit keys (a configuration that rebinds quit takes it away).
fn signal_keys(keymap: &Keymap) -> String {
    use crate::config::keys::{Action, Chord, Key};
    let quits = keymap.keys_of(Action::Quit);
    let ctrl_c = Chord::ctrl(Key::Char('c'));
    match quits.iter().find(|k| **k != ctrl_c) {
        _ if !quits.contains(&ctrl_c) => " Ctrl+Z suspends (fg resumes)".to_string(),
        Some(other) => format!(
            " Ctrl+Z suspends (fg resumes) · Ctrl+C quits as {} does",
            other.label()
        ),
        None => " Ctrl+Z suspends (fg resumes) · Ctrl+C quits".to_string(),
    }
}

/// Draw the help overlay (every line of `keymap`) centred in `area`, its text scrolled down by
/// `scroll` lines.
pub fn draw_overlay(frame: &mut Frame, area: Rect, keymap: &Keymap, scroll: u16) {
    let width = 96.min(area.width);
    // A key's description wraps under itself, not under the key column.
    let room = usize::from(width.saturating_sub(2)).saturating_sub(KEY_COLUMN + 2);
    let mut lines: Vec<Line> = keymap
        .bindings
        .iter()
        .flat_map(|b| {
            hanging(b.what, room)
                .into_iter()
                .enumerate()
                .map(|(i, part)| {
                    let key = if i == 0 { b.label.as_str() } else { "" };
                    Line::from(format!(" {key:<KEY_COLUMN$} {part}"))
                })
                .collect::<Vec<_>>()
        })
        .collect();
    lines.push(Line::from(""));
    lines.push(Line::from(
        " Timeline marks (measured runs): ◆ lr change · ↯ loss-scale jump · ↕ level jump",
    ));
    lines.push(Line::from("   ░ |G|²≤0 · ✕ NaN step"));
    lines.push(Line::from(
        "   + compared run (open A --compare B) · ≠ the two differ beyond their intervals",
    ));
    lines.push(Line::from(
        "   branched training (--branches): ▲ threshold CBS · ● fitted B_noise",
    ));
    lines.push(Line::from(signal_keys(keymap)));
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
    let [r] = Layout::horizontal([Constraint::Length(width)])
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

/// Columns of the key names in the help overlay.
const KEY_COLUMN: usize = 15;

/// `text` word-wrapped to `width` columns (a word longer than the width on a line of its own;
/// everything on one line when the width is too small to wrap in).
fn hanging(text: &str, width: usize) -> Vec<String> {
    if width < 10 {
        return vec![text.to_string()];
    }
    let mut out: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split(' ') {
        let fits = line.chars().count() + 1 + word.chars().count() <= width;
        if line.is_empty() || fits {
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(word);
        } else {
            out.push(std::mem::take(&mut line));
            line.push_str(word);
        }
    }
    out.push(line);
    out
}

#[cfg(test)]
mod tests {
    use super::hanging;

    #[test]
    fn descriptions_wrap_within_their_column() {
        let lines = hanging("scrub through training by one point, or ten with Shift", 20);
        assert!(
            lines.len() > 1 && lines.iter().all(|l| l.chars().count() <= 20),
            "{lines:?}"
        );
        assert_eq!(
            lines.join(" "),
            "scrub through training by one point, or ten with Shift"
        );
        assert_eq!(hanging("short", 20), vec!["short".to_string()]);
    }

    /// The help says Ctrl+C quits only while the key map has it among the quit keys.
    #[test]
    fn the_help_names_ctrl_c_as_the_key_map_binds_it() {
        use crate::config::keys::{Action, Chord, Key, Keymap};
        let default = Keymap::default();
        assert!(super::signal_keys(&default).ends_with("Ctrl+C quits as q does"));
        let mut rebound = Keymap::default();
        rebound
            .rebind(Action::Quit, vec![Chord::char('Q')])
            .expect("rebind");
        let text = super::signal_keys(&rebound);
        assert!(!text.contains("Ctrl+C"), "{text}");
        rebound
            .rebind(
                Action::Quit,
                vec![Chord::char('Q'), Chord::ctrl(Key::Char('c'))],
            )
            .expect("rebind");
        assert!(super::signal_keys(&rebound).ends_with("Ctrl+C quits as Q does"));
    }
}
