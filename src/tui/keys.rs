//! Key and mouse bindings: crossterm events to [`Msg`]s, depending on the focused panel.

use crate::app::{App, Msg};
use crate::session::Panel;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

/// Points moved by Shift+←/→ (and PageUp/PageDown).
pub const BIG_STEP: i64 = 10;

/// The message for a key press, if the key means anything here.
pub fn key_to_msg(app: &App, key: KeyEvent) -> Option<Msg> {
    if key.kind == KeyEventKind::Release {
        return None;
    }
    let shift = key.modifiers.contains(KeyModifiers::SHIFT);
    let step = if shift { BIG_STEP } else { 1 };
    if app.show_help {
        return match key.code {
            KeyCode::Char('?') | KeyCode::Esc => Some(Msg::ToggleHelp),
            KeyCode::Char('q') => Some(Msg::Quit),
            _ => None,
        };
    }
    let in_heatmap = app.focus == Panel::Heatmap;
    Some(match key.code {
        KeyCode::Char('q') | KeyCode::Esc => Msg::Quit,
        KeyCode::Char('c') if key.modifiers.contains(KeyModifiers::CONTROL) => Msg::Quit,
        KeyCode::Char('?') => Msg::ToggleHelp,
        KeyCode::Char('s') => Msg::Save,
        KeyCode::Tab => Msg::FocusNext,
        KeyCode::Home => Msg::Home,
        KeyCode::End => Msg::End,
        KeyCode::PageUp => Msg::Scrub(-BIG_STEP),
        KeyCode::PageDown => Msg::Scrub(BIG_STEP),
        KeyCode::Left if in_heatmap => Msg::MoveSelection(0, -1),
        KeyCode::Right if in_heatmap => Msg::MoveSelection(0, 1),
        KeyCode::Up if in_heatmap => Msg::MoveSelection(-1, 0),
        KeyCode::Down if in_heatmap => Msg::MoveSelection(1, 0),
        KeyCode::Left => Msg::Scrub(-step),
        KeyCode::Right => Msg::Scrub(step),
        _ => return None,
    })
}
