//! The key map: one table of every binding, where it applies and what it does. The `?` page and
//! the footer hints are drawn from it, and a test checks that [`super::keys::key_to_msg`]
//! answers every key listed here in its context (and nothing is listed that does nothing).

use ratatui::crossterm::event::{KeyCode, KeyModifiers};

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
    /// While a question or the save-as prompt is open.
    Popup,
    /// The mouse (not a key).
    Mouse,
}

/// One line of the key map.
#[derive(Debug, Clone, Copy)]
pub struct Binding {
    /// Keys as shown to the user.
    pub label: &'static str,
    /// What they do.
    pub what: &'static str,
    /// Where.
    pub scope: Scope,
    /// The key presses (code, modifiers) the label stands for; empty for the mouse.
    pub keys: &'static [(KeyCode, KeyModifiers)],
    /// Shown in the footer hint line (short form).
    pub hint: Option<&'static str>,
}

const NONE: KeyModifiers = KeyModifiers::NONE;
const SHIFT: KeyModifiers = KeyModifiers::SHIFT;

/// Every binding, in the order the `?` page lists them.
pub const KEYMAP: &[Binding] = &[
    Binding {
        label: "←/→",
        what: "scrub through training (Shift: 10 points)",
        scope: Scope::Timeline,
        keys: &[
            (KeyCode::Left, NONE),
            (KeyCode::Right, NONE),
            (KeyCode::Left, SHIFT),
            (KeyCode::Right, SHIFT),
        ],
        hint: Some("←/→ scrub"),
    },
    Binding {
        label: "PgUp/PgDn",
        what: "scrub 10 points",
        scope: Scope::Global,
        keys: &[(KeyCode::PageUp, NONE), (KeyCode::PageDown, NONE)],
        hint: None,
    },
    Binding {
        label: "Home/End",
        what: "first / last point (End follows a live run)",
        scope: Scope::Global,
        keys: &[(KeyCode::Home, NONE), (KeyCode::End, NONE)],
        hint: None,
    },
    Binding {
        label: "[ / ]",
        what: "previous / next planned switch point",
        scope: Scope::Global,
        keys: &[(KeyCode::Char('['), NONE), (KeyCode::Char(']'), NONE)],
        hint: None,
    },
    Binding {
        label: "Tab",
        what: "cycle focus: timeline → heatmap → side panel",
        scope: Scope::Global,
        keys: &[(KeyCode::Tab, NONE)],
        hint: Some("Tab focus"),
    },
    Binding {
        label: "1 – 5",
        what: "side panel: recommendation, what-if, throughput, estimators, plan",
        scope: Scope::Global,
        keys: &[
            (KeyCode::Char('1'), NONE),
            (KeyCode::Char('2'), NONE),
            (KeyCode::Char('3'), NONE),
            (KeyCode::Char('4'), NONE),
            (KeyCode::Char('5'), NONE),
        ],
        hint: Some("1-5 panels"),
    },
    Binding {
        label: "arrows",
        what: "heatmap: select a cell (details in the recommendation)",
        scope: Scope::Heatmap,
        keys: &[
            (KeyCode::Left, NONE),
            (KeyCode::Right, NONE),
            (KeyCode::Up, NONE),
            (KeyCode::Down, NONE),
        ],
        hint: None,
    },
    Binding {
        label: "Enter",
        what: "heatmap: throughput against batch size of the selected layout",
        scope: Scope::Heatmap,
        keys: &[(KeyCode::Enter, NONE)],
        hint: None,
    },
    Binding {
        label: "x / m",
        what: "explain the selected cell / mark it to compare with another",
        scope: Scope::Global,
        keys: &[(KeyCode::Char('x'), NONE), (KeyCode::Char('m'), NONE)],
        hint: Some("x explain"),
    },
    Binding {
        label: "< / >",
        what: "measured run: narrow / widen the smoother (×1.5) and analyse again",
        scope: Scope::Global,
        keys: &[(KeyCode::Char('<'), NONE), (KeyCode::Char('>'), NONE)],
        hint: None,
    },
    Binding {
        label: "P",
        what: "recorded run: switch the estimate between the raw and the Adam-preconditioned gradient (the records' precond norms)",
        scope: Scope::Global,
        keys: &[(KeyCode::Char('P'), NONE)],
        hint: None,
    },
    Binding {
        label: "g",
        what: "go to a step (1200), tokens (150B) or a share of the run (40%)",
        scope: Scope::Global,
        keys: &[(KeyCode::Char('g'), NONE)],
        hint: None,
    },
    Binding {
        label: "/",
        what: "filter the heatmap's layouts: tp<=4 pp=1, dp>=8 (empty shows all; ★ and * follow)",
        scope: Scope::Global,
        keys: &[(KeyCode::Char('/'), NONE)],
        hint: None,
    },
    Binding {
        label: "R",
        what: "the layouts at the selected batch ranked by goodput, and why the others cannot run (←/→ batch, ↑/↓ scroll)",
        scope: Scope::Global,
        keys: &[(KeyCode::Char('R'), NONE)],
        hint: None,
    },
    Binding {
        label: "*",
        what: "select the best cell (★)",
        scope: Scope::Global,
        keys: &[(KeyCode::Char('*'), NONE)],
        hint: None,
    },
    Binding {
        label: "↑/↓  ←/→ (+/-)",
        what: "what-if: pick a setting / change it (all is recomputed)",
        scope: Scope::WhatIf,
        keys: &[
            (KeyCode::Up, NONE),
            (KeyCode::Down, NONE),
            (KeyCode::Left, NONE),
            (KeyCode::Right, NONE),
            (KeyCode::Char('+'), NONE),
            (KeyCode::Char('-'), NONE),
        ],
        hint: None,
    },
    Binding {
        label: "↑/↓",
        what: "focused side panel or this help: scroll its text (↓ more on its border)",
        scope: Scope::Side,
        keys: &[(KeyCode::Up, NONE), (KeyCode::Down, NONE)],
        hint: None,
    },
    Binding {
        label: "n / p",
        what: "guided tour or lesson: next / previous step",
        scope: Scope::Global,
        keys: &[(KeyCode::Char('n'), NONE), (KeyCode::Char('p'), NONE)],
        hint: Some(TOUR_HINT),
    },
    Binding {
        label: "r  Shift+↑/↓",
        what: "tour or lesson: reveal the answer (r) / scroll its text",
        scope: Scope::Tour,
        keys: &[
            (KeyCode::Char('r'), NONE),
            (KeyCode::Up, SHIFT),
            (KeyCode::Down, SHIFT),
        ],
        hint: None,
    },
    Binding {
        label: "s / S",
        what: "save the session (atomic; asks before replacing a file) / save as…",
        scope: Scope::Global,
        keys: &[(KeyCode::Char('s'), NONE), (KeyCode::Char('S'), SHIFT)],
        hint: Some("s save"),
    },
    Binding {
        label: "A",
        what: "live run with --advise: approve the pending advice (appends it to the advice file the hook reads)",
        scope: Scope::Global,
        keys: &[(KeyCode::Char('A'), SHIFT)],
        hint: None,
    },
    Binding {
        label: "e",
        what: "export the grid at the cursor as CSV and JSON, with its context",
        scope: Scope::Global,
        keys: &[(KeyCode::Char('e'), NONE)],
        hint: Some("e export"),
    },
    Binding {
        label: "?",
        what: "this help",
        scope: Scope::Global,
        keys: &[(KeyCode::Char('?'), NONE)],
        hint: Some("? help"),
    },
    Binding {
        label: "Esc",
        what: "close the topmost popup (question, prompt, help, tour); never quits",
        scope: Scope::Global,
        keys: &[(KeyCode::Esc, NONE)],
        hint: None,
    },
    Binding {
        label: "q / Ctrl+C",
        what: "quit (asks first when there are unsaved changes)",
        scope: Scope::Global,
        keys: &[
            (KeyCode::Char('q'), NONE),
            (KeyCode::Char('c'), KeyModifiers::CONTROL),
        ],
        hint: Some("q quit"),
    },
    Binding {
        label: "l",
        what: "timeline: one layer over time, with intervals (next; off)",
        scope: Scope::Global,
        keys: &[(KeyCode::Char('l'), NONE)],
        hint: None,
    },
    Binding {
        label: "y / n / s",
        what: "answer a question (s: save, then quit)",
        scope: Scope::Popup,
        keys: &[
            (KeyCode::Char('y'), NONE),
            (KeyCode::Char('n'), NONE),
            (KeyCode::Char('s'), NONE),
        ],
        hint: None,
    },
    Binding {
        label: "click / drag",
        what: "mouse: select a cell; click or drag on the timeline to scrub",
        scope: Scope::Mouse,
        keys: &[],
        hint: None,
    },
    Binding {
        label: "wheel",
        what: "mouse: scrub over the timeline, move the selection over the heatmap",
        scope: Scope::Mouse,
        keys: &[],
        hint: None,
    },
];

/// The footer hint of `n` / `p`, as a tour names it.
const TOUR_HINT: &str = "n tour";

/// The footer hints in table order, the `n` hint naming what it steps through: `tour_kind`
/// as [`crate::app::App::tour_kind`] gives it ("n lesson" inside a lesson).
fn hint_list(tour_kind: &str) -> Vec<String> {
    KEYMAP
        .iter()
        .filter_map(|b| b.hint)
        .map(|h| {
            if h == TOUR_HINT {
                format!("n {tour_kind}")
            } else {
                h.to_string()
            }
        })
        .collect()
}

/// The footer hint line of a tour: the short forms, in table order.
pub fn hints() -> String {
    hint_list("tour").join(" · ")
}

/// The hints that are always kept in a narrow footer: how to get help and how to leave.
const ALWAYS_HINTS: [&str; 2] = ["? help", "q quit"];

/// The footer hint line within `width` terminal columns: whole hints in table order, leaving
/// out the later optional ones that do not fit, but always ending with "? help · q quit" (the
/// help page lists every key). Never cuts a hint in the middle. The `n` hint names
/// `tour_kind` ([`crate::app::App::tour_kind`]: "tour" or "lesson").
pub fn hints_fitting(width: usize, tour_kind: &str) -> String {
    let all = hint_list(tour_kind);
    let sep = " · ";
    let tail = ALWAYS_HINTS.join(sep);
    let mut budget = width.saturating_sub(tail.chars().count());
    let mut kept: Vec<&str> = Vec::new();
    for h in all.iter().filter(|h| !ALWAYS_HINTS.contains(&h.as_str())) {
        let need = h.chars().count() + sep.chars().count();
        if need > budget {
            break;
        }
        budget -= need;
        kept.push(h);
    }
    kept.extend(ALWAYS_HINTS);
    kept.join(sep)
}
