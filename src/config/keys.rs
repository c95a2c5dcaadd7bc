//! The key table: every binding, the action it carries, where it applies and how the `?` page
//! and the footer show it. The runtime dispatches key presses through it
//! ([`Keymap::action`]), the help page and the footer are drawn from it, and a user's
//! configuration file rebinds any action ([`Keymap::rebind`]).

use serde::{Deserialize, Serialize};
use std::fmt;

/// A key without its modifiers, as the table names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Key {
    /// A character (case matters: `S` is Shift+s).
    Char(char),
    /// ←
    Left,
    /// →
    Right,
    /// ↑
    Up,
    /// ↓
    Down,
    /// Home
    Home,
    /// End
    End,
    /// Page Up
    PageUp,
    /// Page Down
    PageDown,
    /// Tab
    Tab,
    /// Enter
    Enter,
    /// Esc
    Esc,
    /// Backspace
    Backspace,
    /// A function key F1–F12.
    F(u8),
}

/// A key with its modifiers. Shift is part of a character itself (`S`), so for characters
/// only Ctrl and Alt count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Chord {
    /// The key.
    pub key: Key,
    /// Ctrl held.
    pub ctrl: bool,
    /// Alt held.
    pub alt: bool,
    /// Shift held (only for keys that are not characters).
    pub shift: bool,
}

impl Chord {
    /// The key alone.
    pub const fn plain(key: Key) -> Self {
        Chord {
            key,
            ctrl: false,
            alt: false,
            shift: false,
        }
    }

    /// A character alone.
    pub const fn char(c: char) -> Self {
        Chord::plain(Key::Char(c))
    }

    /// Shift + a key that is not a character.
    pub const fn shift(key: Key) -> Self {
        Chord {
            shift: true,
            ..Chord::plain(key)
        }
    }

    /// Ctrl + a key.
    pub const fn ctrl(key: Key) -> Self {
        Chord {
            ctrl: true,
            ..Chord::plain(key)
        }
    }

    /// The same chord without Shift.
    pub fn without_shift(self) -> Self {
        Chord {
            shift: false,
            ..self
        }
    }

    /// Parse the configuration file's spelling: `q`, `Q`, `ctrl+c`, `shift+left`, `alt+x`,
    /// `pgup`, `pgdn`, `home`, `end`, `tab`, `enter`, `esc`, `backspace`, `space`, `f1`–`f12`,
    /// `left`, `right`, `up`, `down`, `plus` (`+`), `minus` (`-`).
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut chord = Chord::plain(Key::Esc);
        let mut rest = text;
        loop {
            let lower = rest.to_ascii_lowercase();
            if let Some(r) = lower.strip_prefix("ctrl+").map(|r| rest.len() - r.len()) {
                chord.ctrl = true;
                rest = &rest[r..];
            } else if let Some(r) = lower.strip_prefix("alt+").map(|r| rest.len() - r.len()) {
                chord.alt = true;
                rest = &rest[r..];
            } else if let Some(r) = lower.strip_prefix("shift+").map(|r| rest.len() - r.len()) {
                chord.shift = true;
                rest = &rest[r..];
            } else {
                break;
            }
        }
        let mut chars = rest.chars();
        chord.key = match (chars.next(), chars.next()) {
            (Some(c), None) if !c.is_control() => Key::Char(c),
            _ => named_key(&rest.to_ascii_lowercase()).ok_or_else(|| {
                format!(
                    "unknown key `{text}` (a character, or ctrl+/alt+/shift+ with left, right, \
                     up, down, home, end, pgup, pgdn, tab, enter, esc, backspace, space, plus, \
                     minus, f1–f12)"
                )
            })?,
        };
        if let Key::Char(c) = chord.key
            && chord.ctrl
        {
            // Terminals send Ctrl+C and Ctrl+c alike.
            chord.key = Key::Char(c.to_ascii_lowercase());
        }
        if let Key::Char(c) = chord.key
            && chord.shift
        {
            // Shift+a is `A`: the character carries the shift.
            chord.shift = false;
            chord.key = Key::Char(c.to_uppercase().next().unwrap_or(c));
        }
        Ok(chord)
    }
}

fn named_key(name: &str) -> Option<Key> {
    Some(match name {
        "left" => Key::Left,
        "right" => Key::Right,
        "up" => Key::Up,
        "down" => Key::Down,
        "home" => Key::Home,
        "end" => Key::End,
        "pgup" | "pageup" => Key::PageUp,
        "pgdn" | "pagedown" => Key::PageDown,
        "tab" => Key::Tab,
        "enter" | "return" => Key::Enter,
        "esc" | "escape" => Key::Esc,
        "backspace" => Key::Backspace,
        "space" => Key::Char(' '),
        "plus" => Key::Char('+'),
        "minus" => Key::Char('-'),
        f if f.starts_with('f') => match f[1..].parse::<u8>() {
            Ok(n @ 1..=12) => Key::F(n),
            _ => return None,
        },
        _ => return None,
    })
}

impl fmt::Display for Chord {
    /// The configuration file's spelling (which [`Chord::parse`] reads back).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.ctrl {
            f.write_str("ctrl+")?;
        }
        if self.alt {
            f.write_str("alt+")?;
        }
        if self.shift {
            f.write_str("shift+")?;
        }
        match self.key {
            Key::Char(' ') => f.write_str("space"),
            Key::Char('+') => f.write_str("plus"),
            Key::Char('-') => f.write_str("minus"),
            Key::Char(c) => write!(f, "{c}"),
            Key::Left => f.write_str("left"),
            Key::Right => f.write_str("right"),
            Key::Up => f.write_str("up"),
            Key::Down => f.write_str("down"),
            Key::Home => f.write_str("home"),
            Key::End => f.write_str("end"),
            Key::PageUp => f.write_str("pgup"),
            Key::PageDown => f.write_str("pgdn"),
            Key::Tab => f.write_str("tab"),
            Key::Enter => f.write_str("enter"),
            Key::Esc => f.write_str("esc"),
            Key::Backspace => f.write_str("backspace"),
            Key::F(n) => write!(f, "f{n}"),
        }
    }
}

impl Chord {
    /// How the help page and the footer show the chord: `q`, `Ctrl+C`, `Shift+←`, `PgUp`.
    pub fn label(&self) -> String {
        let mut s = String::new();
        if self.ctrl {
            s.push_str("Ctrl+");
        }
        if self.alt {
            s.push_str("Alt+");
        }
        if self.shift {
            s.push_str("Shift+");
        }
        match self.key {
            Key::Char(c) if self.ctrl || self.alt => s.extend(c.to_uppercase()),
            Key::Char(' ') => s.push_str("Space"),
            Key::Char(c) => s.push(c),
            Key::Left => s.push('←'),
            Key::Right => s.push('→'),
            Key::Up => s.push('↑'),
            Key::Down => s.push('↓'),
            Key::Home => s.push_str("Home"),
            Key::End => s.push_str("End"),
            Key::PageUp => s.push_str("PgUp"),
            Key::PageDown => s.push_str("PgDn"),
            Key::Tab => s.push_str("Tab"),
            Key::Enter => s.push_str("Enter"),
            Key::Esc => s.push_str("Esc"),
            Key::Backspace => s.push_str("Backspace"),
            Key::F(n) => s.push_str(&format!("F{n}")),
        }
        s
    }
}

/// What a key does. Names are the configuration file's (`quit: ["Q"]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum Action {
    ScrubBack,
    ScrubForward,
    ScrubBackFar,
    ScrubForwardFar,
    PageBack,
    PageForward,
    First,
    Last,
    PreviousSwitch,
    NextSwitch,
    FocusNext,
    Panel1,
    Panel2,
    Panel3,
    Panel4,
    Panel5,
    SelectLeft,
    SelectRight,
    SelectUp,
    SelectDown,
    DrillIn,
    Explain,
    Mark,
    SmootherNarrower,
    SmootherWider,
    ToggleGradient,
    GoTo,
    Filter,
    Ranked,
    SelectBest,
    WhatIfPreviousRow,
    WhatIfNextRow,
    WhatIfLess,
    WhatIfMore,
    ScrollUp,
    ScrollDown,
    TourNext,
    TourPrevious,
    Reveal,
    TourScrollUp,
    TourScrollDown,
    Save,
    SaveAs,
    ApproveAdvice,
    Export,
    Help,
    Escape,
    Quit,
    CycleLayer,
    AnswerYes,
    AnswerNo,
    AnswerSave,
}

impl Action {
    /// The configuration file's name of the action.
    pub fn name(self) -> String {
        ron::to_string(&self).unwrap_or_default()
    }
}

/// Where a binding applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Everywhere (no popup open).
    Global,
    /// When the timeline (or a side panel other than the what-if editor) has the focus.
    Timeline,
    /// When the heatmap has the focus.
    Heatmap,
    /// When the what-if editor has the focus.
    WhatIf,
    /// When a side panel other than the what-if editor has the focus.
    Side,
    /// While the guided tour is shown.
    Tour,
    /// While a question is open.
    Popup,
    /// The mouse (not a key).
    Mouse,
}

impl Scope {
    /// Whether a key could be active in both scopes at once (so one key may not mean two
    /// actions there).
    pub fn overlaps(self, other: Scope) -> bool {
        use Scope::*;
        match (self, other) {
            (Mouse, _) | (_, Mouse) => false,
            (Popup, x) | (x, Popup) => x == Popup,
            (a, b) if a == b => true,
            (Global | Tour, _) | (_, Global | Tour) => true,
            (Timeline, Side) | (Side, Timeline) => true,
            _ => false,
        }
    }
}

/// One line of the key table: its actions with their keys.
#[derive(Debug, Clone, PartialEq)]
pub struct Binding {
    /// Keys as shown to the user (made from the keys when the user rebinds one).
    pub label: String,
    /// What they do.
    pub what: &'static str,
    /// Where.
    pub scope: Scope,
    /// Each action of the line and the key presses that trigger it; empty for the mouse.
    pub actions: Vec<(Action, Vec<Chord>)>,
    /// The footer hint: (its keys as shown, the word), e.g. ("q", "quit").
    pub hint: Option<(String, &'static str)>,
}

impl Binding {
    /// Every chord of the line.
    pub fn chords(&self) -> impl Iterator<Item = Chord> + '_ {
        self.actions.iter().flat_map(|(_, c)| c.iter().copied())
    }

    /// The footer hint as shown: "q quit".
    pub fn hint_text(&self) -> Option<String> {
        self.hint.as_ref().map(|(k, w)| format!("{k} {w}"))
    }
}

/// The key table in force: the defaults with the user's rebindings.
#[derive(Debug, Clone, PartialEq)]
pub struct Keymap {
    /// The lines, in the order the `?` page lists them.
    pub bindings: Vec<Binding>,
}

impl Default for Keymap {
    fn default() -> Self {
        Keymap {
            bindings: default_bindings(),
        }
    }
}

/// Why a rebinding cannot apply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeymapError {
    /// The action has no line in the table (it cannot be rebound).
    #[error("`{0}` cannot be rebound")]
    NotRebindable(String),
    /// An action was given no key.
    #[error("`{0}` needs at least one key")]
    NoKeys(String),
    /// One key would mean two actions where both apply.
    #[error("`{key}` would mean both `{first}` and `{second}`")]
    Conflict {
        /// The key, as the configuration file spells it.
        key: String,
        /// One action.
        first: String,
        /// The other.
        second: String,
    },
}

impl Keymap {
    /// The action `chord` triggers in the first of `scopes` (in priority order) that binds it.
    /// Shift on a non-character key falls back to the key without Shift where no binding
    /// names the Shift chord (Shift+← moves the heatmap's selection like ←).
    pub fn action(&self, chord: Chord, scopes: &[Scope]) -> Option<Action> {
        self.exact(chord, scopes).or_else(|| {
            chord
                .shift
                .then(|| self.exact(chord.without_shift(), scopes))
                .flatten()
        })
    }

    fn exact(&self, chord: Chord, scopes: &[Scope]) -> Option<Action> {
        scopes.iter().find_map(|scope| {
            self.bindings
                .iter()
                .filter(|b| b.scope == *scope)
                .flat_map(|b| b.actions.iter())
                .find(|(_, keys)| keys.contains(&chord))
                .map(|(a, _)| *a)
        })
    }

    /// Every action of the table, in its order.
    pub fn actions(&self) -> impl Iterator<Item = Action> + '_ {
        self.bindings
            .iter()
            .flat_map(|b| b.actions.iter().map(|(a, _)| *a))
    }

    /// How many actions have other keys than the built-in table's.
    pub fn rebound(&self) -> usize {
        let defaults = Keymap::default();
        self.actions()
            .filter(|a| self.keys_of(*a) != defaults.keys_of(*a))
            .count()
    }

    /// The keys of `action` (empty when the table has none).
    pub fn keys_of(&self, action: Action) -> Vec<Chord> {
        self.bindings
            .iter()
            .flat_map(|b| b.actions.iter())
            .find(|(a, _)| *a == action)
            .map(|(_, k)| k.clone())
            .unwrap_or_default()
    }

    /// The first key of `action` as the help shows it (`q`), or `?` when it has none.
    pub fn key_label(&self, action: Action) -> String {
        self.keys_of(action)
            .first()
            .map_or_else(|| "?".to_string(), Chord::label)
    }

    /// Bind `action` to `keys` instead of its default keys; the line's label and footer hint
    /// are made from the new keys.
    pub fn rebind(&mut self, action: Action, keys: Vec<Chord>) -> Result<(), KeymapError> {
        if keys.is_empty() {
            return Err(KeymapError::NoKeys(action.name()));
        }
        let line = self
            .bindings
            .iter_mut()
            .find(|b| b.actions.iter().any(|(a, _)| *a == action))
            .ok_or_else(|| KeymapError::NotRebindable(action.name()))?;
        if let Some(slot) = line.actions.iter_mut().find(|(a, _)| *a == action) {
            if slot.1 == keys {
                // The default keys, written out: the line stays as it is.
                return Ok(());
            }
            slot.1 = keys;
        }
        line.label = line
            .actions
            .iter()
            .map(|(_, k)| k.iter().map(Chord::label).collect::<Vec<_>>().join(" "))
            .collect::<Vec<_>>()
            .join(" / ");
        if let Some((shown, _)) = line.hint.as_mut() {
            let first = line.actions.first().and_then(|(_, k)| k.first());
            *shown = first.map(Chord::label).unwrap_or_default();
        }
        Ok(())
    }

    /// The first pair of actions that one key triggers where both apply.
    pub fn conflict(&self) -> Option<KeymapError> {
        let all: Vec<(Scope, Action, Chord)> = self
            .bindings
            .iter()
            .flat_map(|b| {
                b.actions
                    .iter()
                    .flat_map(move |(a, keys)| keys.iter().map(move |k| (b.scope, *a, *k)))
            })
            .collect();
        for (i, (s1, a1, k1)) in all.iter().enumerate() {
            for (s2, a2, k2) in &all[i + 1..] {
                if k1 == k2 && a1 != a2 && s1.overlaps(*s2) {
                    return Some(KeymapError::Conflict {
                        key: k1.to_string(),
                        first: a1.name(),
                        second: a2.name(),
                    });
                }
            }
        }
        None
    }
}

fn line(
    label: &str,
    what: &'static str,
    scope: Scope,
    actions: &[(Action, &[Chord])],
    hint: Option<(&str, &'static str)>,
) -> Binding {
    Binding {
        label: label.to_string(),
        what,
        scope,
        actions: actions.iter().map(|(a, k)| (*a, k.to_vec())).collect(),
        hint: hint.map(|(k, w)| (k.to_string(), w)),
    }
}

/// The built-in table, in the order the `?` page lists it.
pub fn default_bindings() -> Vec<Binding> {
    use Action as A;
    use Key::*;
    use Scope as S;
    let c = Chord::char;
    let p = Chord::plain;
    vec![
        line(
            "←/→",
            "scrub through training (Shift: 10 points)",
            S::Timeline,
            &[
                (A::ScrubBack, &[p(Left)]),
                (A::ScrubForward, &[p(Right)]),
                (A::ScrubBackFar, &[Chord::shift(Left)]),
                (A::ScrubForwardFar, &[Chord::shift(Right)]),
            ],
            Some(("←/→", "scrub")),
        ),
        line(
            "PgUp/PgDn",
            "scrub 10 points",
            S::Global,
            &[
                (A::PageBack, &[p(PageUp)]),
                (A::PageForward, &[p(PageDown)]),
            ],
            None,
        ),
        line(
            "Home/End",
            "first / last point (End follows a live run)",
            S::Global,
            &[(A::First, &[p(Home)]), (A::Last, &[p(End)])],
            None,
        ),
        line(
            "[ / ]",
            "previous / next planned switch point",
            S::Global,
            &[(A::PreviousSwitch, &[c('[')]), (A::NextSwitch, &[c(']')])],
            None,
        ),
        line(
            "Tab",
            "cycle focus: timeline → heatmap → side panel",
            S::Global,
            &[(A::FocusNext, &[p(Tab)])],
            Some(("Tab", "focus")),
        ),
        line(
            "1 – 5",
            "side panel: recommendation, what-if, throughput, estimators, plan",
            S::Global,
            &[
                (A::Panel1, &[c('1')]),
                (A::Panel2, &[c('2')]),
                (A::Panel3, &[c('3')]),
                (A::Panel4, &[c('4')]),
                (A::Panel5, &[c('5')]),
            ],
            Some(("1-5", "panels")),
        ),
        line(
            "arrows",
            "heatmap: select a cell (details in the recommendation)",
            S::Heatmap,
            &[
                (A::SelectLeft, &[p(Left)]),
                (A::SelectRight, &[p(Right)]),
                (A::SelectUp, &[p(Up)]),
                (A::SelectDown, &[p(Down)]),
            ],
            Some(("arrows", "select")),
        ),
        line(
            "Enter",
            "heatmap: throughput against batch size of the selected layout",
            S::Heatmap,
            &[(A::DrillIn, &[p(Enter)])],
            None,
        ),
        line(
            "x / m",
            "explain the selected cell / mark it to compare with another",
            S::Global,
            &[(A::Explain, &[c('x')]), (A::Mark, &[c('m')])],
            Some(("x", "explain")),
        ),
        line(
            "< / >",
            "measured run: narrow / widen the smoother (×1.5) and analyse again",
            S::Global,
            &[
                (A::SmootherNarrower, &[c('<')]),
                (A::SmootherWider, &[c('>')]),
            ],
            None,
        ),
        line(
            "P",
            "recorded run: switch the estimate between the raw and the Adam-preconditioned gradient (the records' precond norms)",
            S::Global,
            &[(A::ToggleGradient, &[c('P')])],
            None,
        ),
        line(
            "g",
            "go to a step (1200), tokens (150B) or a share of the run (40%)",
            S::Global,
            &[(A::GoTo, &[c('g')])],
            None,
        ),
        line(
            "/",
            "filter the heatmap's layouts: tp<=4 pp=1, dp>=8 (empty shows all; ★ and * follow)",
            S::Global,
            &[(A::Filter, &[c('/')])],
            None,
        ),
        line(
            "R",
            "the layouts at the selected batch ranked by goodput, and why the others cannot run (←/→ batch, ↑/↓ scroll)",
            S::Global,
            &[(A::Ranked, &[c('R')])],
            None,
        ),
        line(
            "*",
            "select the best cell (★)",
            S::Global,
            &[(A::SelectBest, &[c('*')])],
            None,
        ),
        line(
            "↑/↓  ←/→ (+/-)",
            "what-if: pick a setting / change it (all is recomputed): cluster, model, \
             B_crit scale, perf model (calibration), the stack and each of its settings",
            S::WhatIf,
            &[
                (A::WhatIfPreviousRow, &[p(Up)]),
                (A::WhatIfNextRow, &[p(Down)]),
                (A::WhatIfLess, &[p(Left), c('-')]),
                (A::WhatIfMore, &[p(Right), c('+')]),
            ],
            Some(("↑/↓ ←/→", "edit")),
        ),
        line(
            "↑/↓",
            "focused side panel or this help: scroll its text (↓ more on its border)",
            S::Side,
            &[(A::ScrollUp, &[p(Up)]), (A::ScrollDown, &[p(Down)])],
            None,
        ),
        line(
            "n / p",
            "guided tour or lesson: next / previous step",
            S::Global,
            &[(A::TourNext, &[c('n')]), (A::TourPrevious, &[c('p')])],
            Some(("n", "tour")),
        ),
        line(
            "r  Shift+↑/↓",
            "tour or lesson: reveal the answer / scroll its text",
            S::Tour,
            &[
                (A::Reveal, &[c('r')]),
                (A::TourScrollUp, &[Chord::shift(Up)]),
                (A::TourScrollDown, &[Chord::shift(Down)]),
            ],
            None,
        ),
        line(
            "s / S",
            "save the session (atomic; asks before replacing a file) / save as…",
            S::Global,
            &[(A::Save, &[c('s')]), (A::SaveAs, &[c('S')])],
            Some(("s", "save")),
        ),
        line(
            "A",
            "live run with --advise: approve the pending advice (the first press names the switch, the second appends it to the advice file the hook reads)",
            S::Global,
            &[(A::ApproveAdvice, &[c('A')])],
            None,
        ),
        line(
            "e",
            "export the grid at the cursor as CSV and JSON, with its context",
            S::Global,
            &[(A::Export, &[c('e')])],
            Some(("e", "export")),
        ),
        line(
            "?",
            "this help",
            S::Global,
            &[(A::Help, &[c('?')])],
            Some(("?", "help")),
        ),
        line(
            "Esc",
            "close the topmost popup (question, prompt, help, tour); never quits",
            S::Global,
            &[(A::Escape, &[p(Esc)])],
            None,
        ),
        line(
            "q / Ctrl+C",
            "quit (asks first when there are unsaved changes)",
            S::Global,
            &[(A::Quit, &[c('q'), Chord::ctrl(Char('c'))])],
            Some(("q", "quit")),
        ),
        line(
            "l",
            "timeline: one layer over time, with intervals (next; off)",
            S::Global,
            &[(A::CycleLayer, &[c('l')])],
            None,
        ),
        line(
            "y / n / s",
            "answer a question (s: save, then quit)",
            S::Popup,
            &[
                (A::AnswerYes, &[c('y')]),
                (A::AnswerNo, &[c('n')]),
                (A::AnswerSave, &[c('s')]),
            ],
            None,
        ),
        line(
            "click / drag",
            "mouse: select a cell; click or drag on the timeline to scrub",
            S::Mouse,
            &[],
            None,
        ),
        line(
            "wheel",
            "mouse: scrub over the timeline, move the selection over the heatmap",
            S::Mouse,
            &[],
            None,
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_table_has_no_conflict_and_every_action_once() {
        let map = Keymap::default();
        assert_eq!(map.conflict(), None);
        let mut seen = std::collections::BTreeSet::new();
        for (a, keys) in map.bindings.iter().flat_map(|b| b.actions.iter()) {
            assert!(seen.insert(*a), "{a:?} twice");
            assert!(!keys.is_empty(), "{a:?} without keys");
        }
    }

    #[test]
    fn chords_parse_and_print_back() {
        for text in [
            "q",
            "Q",
            "ctrl+c",
            "shift+left",
            "alt+x",
            "pgup",
            "f5",
            "space",
            "plus",
        ] {
            let chord = Chord::parse(text).expect(text);
            assert_eq!(Chord::parse(&chord.to_string()), Ok(chord), "{text}");
        }
        assert_eq!(Chord::parse("shift+a"), Ok(Chord::char('A')));
        assert_eq!(Chord::parse("Ctrl+C"), Ok(Chord::ctrl(Key::Char('c'))));
        assert!(Chord::parse("hyper+q").is_err());
        assert!(Chord::parse("f13").is_err());
        assert!(Chord::parse("").is_err());
    }

    #[test]
    fn rebinding_moves_the_action_and_relabels_its_line() {
        let mut map = Keymap::default();
        map.rebind(Action::Quit, vec![Chord::char('Q')])
            .expect("rebind");
        let g = [Scope::Global];
        assert_eq!(map.action(Chord::char('Q'), &g), Some(Action::Quit));
        assert_eq!(map.action(Chord::char('q'), &g), None);
        let quit = map
            .bindings
            .iter()
            .find(|b| b.hint_text().as_deref() == Some("Q quit"));
        assert_eq!(quit.map(|b| b.label.as_str()), Some("Q"));
        map.rebind(Action::Quit, vec![Chord::char('x')])
            .expect("rebind");
        assert!(matches!(map.conflict(), Some(KeymapError::Conflict { .. })));
        assert_eq!(
            map.rebind(Action::Quit, vec![]),
            Err(KeymapError::NoKeys("quit".into()))
        );
    }

    #[test]
    fn shift_falls_back_to_the_plain_key_only_where_no_shift_binding_exists() {
        let map = Keymap::default();
        let heat = [Scope::Heatmap, Scope::Global];
        let timeline = [Scope::Timeline, Scope::Global];
        assert_eq!(
            map.action(Chord::shift(Key::Left), &heat),
            Some(Action::SelectLeft)
        );
        assert_eq!(
            map.action(Chord::shift(Key::Left), &timeline),
            Some(Action::ScrubBackFar)
        );
        assert_eq!(
            map.action(Chord::plain(Key::Left), &timeline),
            Some(Action::ScrubBack)
        );
    }
}
