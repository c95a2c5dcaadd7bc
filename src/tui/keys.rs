//! Key and mouse bindings: crossterm events to [`Msg`]s, depending on the focused panel.

use super::geometry::{Areas, contains};
use super::heatmap;
use crate::app::{App, Msg, PromptEdit};
use crate::session::Panel;
use ratatui::crossterm::event::{
    KeyCode, KeyEvent, KeyEventKind, KeyModifiers, MouseButton, MouseEvent, MouseEventKind,
};

/// Points moved by Shift+←/→ (and PageUp/PageDown).
pub const BIG_STEP: i64 = 10;

/// The message for a key press, if the key means anything here.
pub fn key_to_msg(app: &App, key: KeyEvent) -> Option<Msg> {
    if key.kind == KeyEventKind::Release {
        return None;
    }
    let shift = key.modifiers.contains(KeyModifiers::SHIFT);
    let step = if shift { BIG_STEP } else { 1 };
    let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
    if app.confirm.is_some() {
        // A question is open: only its answers (and Esc) mean something.
        return match key.code {
            KeyCode::Esc => Some(Msg::Escape),
            KeyCode::Char(c @ ('y' | 'n' | 's')) if !ctrl => Some(Msg::Answer(c)),
            KeyCode::Char('c') if ctrl => Some(Msg::Answer('y')),
            _ => None,
        };
    }
    if app.prompt.is_some() {
        return match key.code {
            KeyCode::Esc => Some(Msg::Escape),
            KeyCode::Enter => Some(Msg::Prompt(PromptEdit::Submit)),
            KeyCode::Backspace => Some(Msg::Prompt(PromptEdit::Backspace)),
            KeyCode::Char(c) if !ctrl => Some(Msg::Prompt(PromptEdit::Char(c))),
            _ => None,
        };
    }
    if app.show_help {
        return match key.code {
            KeyCode::Char('?') => Some(Msg::ToggleHelp),
            KeyCode::Esc => Some(Msg::Escape),
            KeyCode::Up => Some(Msg::HelpScroll(-1)),
            KeyCode::Down => Some(Msg::HelpScroll(1)),
            KeyCode::Char('q') => Some(Msg::Quit),
            _ => None,
        };
    }
    if app.explain_open {
        return match key.code {
            KeyCode::Esc => Some(Msg::Escape),
            KeyCode::Char('x') => Some(Msg::Explain),
            KeyCode::Char('m') => Some(Msg::Mark),
            KeyCode::Up => Some(Msg::ExplainScroll(-1)),
            KeyCode::Down => Some(Msg::ExplainScroll(1)),
            KeyCode::PageUp => Some(Msg::ExplainScroll(-BIG_STEP)),
            KeyCode::PageDown => Some(Msg::ExplainScroll(BIG_STEP)),
            KeyCode::Char('?') => Some(Msg::ToggleHelp),
            KeyCode::Char('q') => Some(Msg::Quit),
            KeyCode::Char('c') if ctrl => Some(Msg::Quit),
            _ => None,
        };
    }
    if app.ranked_open {
        return match key.code {
            KeyCode::Esc => Some(Msg::Escape),
            KeyCode::Char('R') => Some(Msg::Ranked),
            KeyCode::Left => Some(Msg::MoveSelection(0, -1)),
            KeyCode::Right => Some(Msg::MoveSelection(0, 1)),
            KeyCode::Up => Some(Msg::RankedScroll(-1)),
            KeyCode::Down => Some(Msg::RankedScroll(1)),
            KeyCode::PageUp => Some(Msg::RankedScroll(-BIG_STEP)),
            KeyCode::PageDown => Some(Msg::RankedScroll(BIG_STEP)),
            KeyCode::Char('?') => Some(Msg::ToggleHelp),
            KeyCode::Char('q') => Some(Msg::Quit),
            KeyCode::Char('c') if ctrl => Some(Msg::Quit),
            _ => None,
        };
    }
    let arrows_edit = match app.focus {
        Panel::Heatmap => Some(true),
        Panel::WhatIf => Some(false),
        _ => None,
    };
    Some(match (key.code, arrows_edit) {
        (KeyCode::Char('q'), _) => Msg::Quit,
        (KeyCode::Esc, _) => Msg::Escape,
        (KeyCode::Char('c'), _) if ctrl => Msg::Quit,
        (KeyCode::Char('?'), _) => Msg::ToggleHelp,
        (KeyCode::Char('s'), _) => Msg::Save,
        (KeyCode::Char('S'), _) => Msg::SaveAs,
        (KeyCode::Char('g'), _) => Msg::GoTo,
        (KeyCode::Char('/'), _) => Msg::Filter,
        (KeyCode::Char('R'), _) => Msg::Ranked,
        (KeyCode::Char('>'), _) => Msg::Smoothing(1),
        (KeyCode::Char('<'), _) => Msg::Smoothing(-1),
        (KeyCode::Char('P'), _) => Msg::ToggleGradient,
        (KeyCode::Char('e'), _) => Msg::Export,
        (KeyCode::Char('A'), _) => Msg::ApproveAdvice,
        (KeyCode::Char('n'), _) => Msg::Tour(1),
        (KeyCode::Char('p'), _) => Msg::Tour(-1),
        (KeyCode::Char('*'), _) => Msg::SelectBest,
        (KeyCode::Char('x'), _) => Msg::Explain,
        (KeyCode::Char('m'), _) => Msg::Mark,
        (KeyCode::Char('['), _) => Msg::JumpSwitch(-1),
        (KeyCode::Char(']'), _) => Msg::JumpSwitch(1),
        (KeyCode::Char('l'), _) => Msg::CycleLayer,
        (KeyCode::Char(c @ '1'..='5'), _) => Msg::ShowSide(Panel::SIDE[c as usize - '1' as usize]),
        (KeyCode::Tab, _) => Msg::FocusNext,
        (KeyCode::Char('r'), _) if app.tour_step.is_some() => Msg::Reveal,
        (KeyCode::Down, _) if shift && app.tour_step.is_some() => Msg::TourScroll(1),
        (KeyCode::Up, _) if shift && app.tour_step.is_some() => Msg::TourScroll(-1),
        (KeyCode::Home, _) => Msg::Home,
        (KeyCode::End, _) => Msg::End,
        (KeyCode::PageUp, _) => Msg::Scrub(-BIG_STEP),
        (KeyCode::PageDown, _) => Msg::Scrub(BIG_STEP),
        (KeyCode::Enter, Some(true)) => Msg::DrillIn,
        (KeyCode::Left, Some(true)) => Msg::MoveSelection(0, -1),
        (KeyCode::Right, Some(true)) => Msg::MoveSelection(0, 1),
        (KeyCode::Up, Some(true)) => Msg::MoveSelection(-1, 0),
        (KeyCode::Down, Some(true)) => Msg::MoveSelection(1, 0),
        (KeyCode::Left | KeyCode::Char('-'), Some(false)) => Msg::WhatIfChange(-1),
        (KeyCode::Right | KeyCode::Char('+'), Some(false)) => Msg::WhatIfChange(1),
        (KeyCode::Up, Some(false)) => Msg::WhatIfRow(-1),
        (KeyCode::Down, Some(false)) => Msg::WhatIfRow(1),
        (KeyCode::Up, None) if app.focus.is_side() => Msg::ScrollSide(-1),
        (KeyCode::Down, None) if app.focus.is_side() => Msg::ScrollSide(1),
        (KeyCode::Left, _) => Msg::Scrub(-step),
        (KeyCode::Right, _) => Msg::Scrub(step),
        _ => return None,
    })
}

/// The message for a mouse event on a screen split as `areas`, if it hits something: a left
/// click or drag selects a heatmap cell or scrubs the timeline; the wheel scrubs over the
/// timeline and moves the selection over the heatmap.
pub fn mouse_to_msg(app: &App, areas: &Areas, ev: MouseEvent) -> Option<Msg> {
    if app.show_help
        || app.explain_open
        || app.ranked_open
        || app.confirm.is_some()
        || app.prompt.is_some()
    {
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
