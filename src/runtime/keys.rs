//! Key and mouse input: crossterm events to [`Msg`]s through the key table in force
//! ([`crate::config::keys::Keymap`], the app's `keymap`), depending on what is open and which
//! panel has the focus.

use crate::app::{App, Msg, Overlay, PromptEdit};
use crate::config::keys::{Action, Chord, Key, Scope};
use crate::session::Panel;
use crate::ui::geometry::{Areas, contains};
use crate::ui::heatmap;
use ratatui::crossterm::event::{
    KeyCode, KeyEvent, KeyEventKind, KeyModifiers, MouseButton, MouseEvent, MouseEventKind,
};

/// Points moved by Shift+←/→ (and PageUp/PageDown).
pub const BIG_STEP: i64 = 10;

/// The table's chord for a crossterm key event (`None` for keys the table never names).
pub fn chord(key: &KeyEvent) -> Option<Chord> {
    let code = match key.code {
        KeyCode::Char(c) => Key::Char(c),
        KeyCode::Left => Key::Left,
        KeyCode::Right => Key::Right,
        KeyCode::Up => Key::Up,
        KeyCode::Down => Key::Down,
        KeyCode::Home => Key::Home,
        KeyCode::End => Key::End,
        KeyCode::PageUp => Key::PageUp,
        KeyCode::PageDown => Key::PageDown,
        KeyCode::Tab => Key::Tab,
        KeyCode::Enter => Key::Enter,
        KeyCode::Esc => Key::Esc,
        KeyCode::Backspace => Key::Backspace,
        KeyCode::F(n) => Key::F(n),
        _ => return None,
    };
    let is_char = matches!(code, Key::Char(_));
    Some(Chord {
        key: code,
        ctrl: key.modifiers.contains(KeyModifiers::CONTROL),
        alt: key.modifiers.contains(KeyModifiers::ALT),
        // A character carries its own shift (`S`).
        shift: !is_char && key.modifiers.contains(KeyModifiers::SHIFT),
    })
}

/// Whether `msg` may act while the screen is too small to show anything but how to quit:
/// quitting, and answering or dismissing the question quitting may ask.
pub fn acts_on_a_too_small_screen(msg: &Msg) -> bool {
    matches!(msg, Msg::Quit | Msg::Answer(_) | Msg::Escape)
}

/// The message for a key press, if the key means anything here.
pub fn key_to_msg(app: &App, key: KeyEvent) -> Option<Msg> {
    if key.kind == KeyEventKind::Release {
        return None;
    }
    let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
    if let Some(Overlay::Prompt(_)) = app.overlay() {
        // Text entry: keys are characters, not actions.
        return match key.code {
            KeyCode::Esc => Some(Msg::Escape),
            // Ctrl+C quits from a prompt too, as everywhere (asking first if there is
            // something unsaved).
            KeyCode::Char('c') if ctrl => Some(Msg::Quit),
            KeyCode::Enter => Some(Msg::Prompt(PromptEdit::Submit)),
            KeyCode::Backspace => Some(Msg::Prompt(PromptEdit::Backspace)),
            KeyCode::Char('u') if ctrl => Some(Msg::Prompt(PromptEdit::Clear)),
            KeyCode::Char('w') if ctrl => Some(Msg::Prompt(PromptEdit::DeleteWord)),
            KeyCode::Char(c) if !ctrl => Some(Msg::Prompt(PromptEdit::Char(c))),
            _ => None,
        };
    }
    let chord = chord(&key)?;
    let map = &app.keymap;
    if let Some(Overlay::Confirm(_)) = app.overlay() {
        // A question is open: only its answers (and Esc) mean something; Ctrl+C answers yes.
        if chord == Chord::ctrl(Key::Char('c')) {
            return Some(Msg::Answer('y'));
        }
        return match map.action(chord, &[Scope::Popup, Scope::Global])? {
            Action::Escape => Some(Msg::Escape),
            Action::AnswerYes => Some(Msg::Answer('y')),
            Action::AnswerNo => Some(Msg::Answer('n')),
            Action::AnswerSave => Some(Msg::Answer('s')),
            _ => None,
        };
    }
    // The popups read the keys of the actions they share with the main view.
    let any = [
        Scope::Global,
        Scope::Side,
        Scope::Heatmap,
        Scope::Timeline,
        Scope::WhatIf,
        Scope::Tour,
    ];
    let Some(top) = app.overlay() else {
        return main_view_msg(map.action(chord, &app.key_scopes())?);
    };
    let action = map.action(chord, &any)?;
    match top {
        Overlay::Help => match action {
            Action::Help => Some(Msg::ToggleHelp),
            Action::Escape => Some(Msg::Escape),
            Action::ScrollUp | Action::SelectUp => Some(Msg::HelpScroll(-1)),
            Action::ScrollDown | Action::SelectDown => Some(Msg::HelpScroll(1)),
            Action::Quit => Some(Msg::Quit),
            _ => None,
        },
        Overlay::Explain => popup_scroll(action)
            .map(Msg::ExplainScroll)
            .or_else(|| popup_common(action))
            .or(match action {
                Action::Explain => Some(Msg::Explain),
                Action::Mark => Some(Msg::Mark),
                _ => None,
            }),
        Overlay::Ranked => popup_scroll(action)
            .map(Msg::RankedScroll)
            .or_else(|| popup_common(action))
            .or(match action {
                Action::Ranked => Some(Msg::Ranked),
                Action::SelectLeft | Action::ScrubBack | Action::ScrubBackFar => {
                    Some(Msg::MoveSelection(0, -1))
                }
                Action::SelectRight | Action::ScrubForward | Action::ScrubForwardFar => {
                    Some(Msg::MoveSelection(0, 1))
                }
                _ => None,
            }),
        Overlay::Prompt(_) | Overlay::Confirm(_) => None,
    }
}

/// What Esc, the help key and the quit key do in a scrolling popup.
fn popup_common(action: Action) -> Option<Msg> {
    match action {
        Action::Escape => Some(Msg::Escape),
        Action::Help => Some(Msg::ToggleHelp),
        Action::Quit => Some(Msg::Quit),
        _ => None,
    }
}

/// Lines a scrolling popup moves for `action` (↑/↓ one line, PgUp/PgDn a page), if it scrolls.
fn popup_scroll(action: Action) -> Option<i64> {
    match action {
        Action::ScrollUp | Action::SelectUp => Some(-1),
        Action::ScrollDown | Action::SelectDown => Some(1),
        Action::PageBack => Some(-BIG_STEP),
        Action::PageForward => Some(BIG_STEP),
        _ => None,
    }
}

/// What an action does in the main view (no popup open).
fn main_view_msg(action: Action) -> Option<Msg> {
    Some(match action {
        Action::ScrubBack => Msg::Scrub(-1),
        Action::ScrubForward => Msg::Scrub(1),
        Action::ScrubBackFar | Action::PageBack => Msg::Scrub(-BIG_STEP),
        Action::ScrubForwardFar | Action::PageForward => Msg::Scrub(BIG_STEP),
        Action::First => Msg::Home,
        Action::Last => Msg::End,
        Action::PreviousSwitch => Msg::JumpSwitch(-1),
        Action::NextSwitch => Msg::JumpSwitch(1),
        Action::FocusNext => Msg::FocusNext,
        Action::Panel1 => Msg::ShowSide(Panel::SIDE[0]),
        Action::Panel2 => Msg::ShowSide(Panel::SIDE[1]),
        Action::Panel3 => Msg::ShowSide(Panel::SIDE[2]),
        Action::Panel4 => Msg::ShowSide(Panel::SIDE[3]),
        Action::Panel5 => Msg::ShowSide(Panel::SIDE[4]),
        Action::SelectLeft => Msg::MoveSelection(0, -1),
        Action::SelectRight => Msg::MoveSelection(0, 1),
        Action::SelectUp => Msg::MoveSelection(-1, 0),
        Action::SelectDown => Msg::MoveSelection(1, 0),
        Action::DrillIn => Msg::DrillIn,
        Action::Explain => Msg::Explain,
        Action::Mark => Msg::Mark,
        Action::SmootherNarrower => Msg::Smoothing(-1),
        Action::SmootherWider => Msg::Smoothing(1),
        Action::ToggleGradient => Msg::ToggleGradient,
        Action::GoTo => Msg::GoTo,
        Action::Filter => Msg::Filter,
        Action::Ranked => Msg::Ranked,
        Action::SelectBest => Msg::SelectBest,
        Action::WhatIfPreviousRow => Msg::WhatIfRow(-1),
        Action::WhatIfNextRow => Msg::WhatIfRow(1),
        Action::WhatIfLess => Msg::WhatIfChange(-1),
        Action::WhatIfMore => Msg::WhatIfChange(1),
        Action::ScrollUp => Msg::ScrollSide(-1),
        Action::ScrollDown => Msg::ScrollSide(1),
        Action::TourNext => Msg::Tour(1),
        Action::TourPrevious => Msg::Tour(-1),
        Action::Reveal => Msg::Reveal,
        Action::TourScrollUp => Msg::TourScroll(-1),
        Action::TourScrollDown => Msg::TourScroll(1),
        Action::Save => Msg::Save,
        Action::SaveAs => Msg::SaveAs,
        Action::ApproveAdvice => Msg::ApproveAdvice,
        Action::Export => Msg::Export,
        Action::Help => Msg::ToggleHelp,
        Action::Escape => Msg::Escape,
        Action::Quit => Msg::Quit,
        Action::CycleLayer => Msg::CycleLayer,
        Action::AnswerYes | Action::AnswerNo | Action::AnswerSave => return None,
    })
}

/// The message for a mouse event on a screen split as `areas`, if it hits something: a left
/// click or drag selects a heatmap cell or scrubs the timeline; the wheel scrubs over the
/// timeline and moves the selection over the heatmap.
pub fn mouse_to_msg(app: &App, areas: &Areas, ev: MouseEvent) -> Option<Msg> {
    if !app.overlays.is_empty() {
        return None;
    }
    let (x, y) = (ev.column, ev.row);
    let on_heatmap = contains(areas.heatmap, x, y);
    let on_timeline = contains(areas.timeline, x, y);
    match ev.kind {
        MouseEventKind::ScrollUp if on_timeline => return Some(Msg::Scrub(-1)),
        MouseEventKind::ScrollDown if on_timeline => return Some(Msg::Scrub(1)),
        MouseEventKind::ScrollUp if on_heatmap => return Some(Msg::MoveSelection(-1, 0)),
        MouseEventKind::ScrollDown if on_heatmap => return Some(Msg::MoveSelection(1, 0)),
        MouseEventKind::Down(MouseButton::Left) | MouseEventKind::Drag(MouseButton::Left) => {}
        _ => return None,
    }
    if on_heatmap {
        return heatmap::hit(areas.heatmap, app, x, y).map(|(r, c)| Msg::Select(r, c));
    }
    if on_timeline {
        let pts = &app.trajectory.points;
        // The plot spans the panel's inside right of the y-axis labels (about 7 columns).
        let left = areas.timeline.x + 1 + 7;
        let right = areas.timeline.x + areas.timeline.width.saturating_sub(2);
        if pts.len() < 2 || right <= left {
            return None;
        }
        let f = (x.saturating_sub(left) as f64 / (right - left) as f64).min(1.0);
        let (lo, hi) = (pts[0].tokens, pts[pts.len() - 1].tokens);
        return Some(Msg::ScrubTo(
            app.trajectory.index_at_tokens(lo + f * (hi - lo)),
        ));
    }
    None
}
