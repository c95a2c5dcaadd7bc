//! The footer's key hints, drawn from the key table in force
//! ([`crate::config::keys::Keymap`]: the defaults with the user's bindings).

pub use crate::config::keys::{Binding, Keymap, Scope};

/// The footer hint word of `n` / `p`, as a tour names it.
const TOUR_HINT: &str = "tour";

/// The footer hints, the focused panel's first, then in table order, of the keys of `scopes` (those of the focused panel and
/// the global ones: ←/→ scrubs the timeline, selects a heatmap cell, or changes a what-if
/// setting, and the hint says which), the `n` hint naming what it steps through: `tour_kind`
/// as [`crate::app::App::tour_kind`] gives it ("n lesson" inside a lesson), left out when
/// `tour_kind` is empty (a session without guided steps).
fn hint_list(keymap: &Keymap, tour_kind: &str, scopes: &[Scope]) -> Vec<String> {
    // The focused panel's keys first: what the arrows do there leads the line.
    let focused = keymap
        .bindings
        .iter()
        .filter(|b| b.scope != Scope::Global && scopes.contains(&b.scope));
    let global = keymap
        .bindings
        .iter()
        .filter(|b| b.scope == Scope::Global && scopes.contains(&b.scope));
    focused
        .chain(global)
        .filter_map(|b| b.hint.as_ref())
        .filter(|(_, word)| *word != TOUR_HINT || !tour_kind.is_empty())
        .map(|(keys, word)| {
            if *word == TOUR_HINT {
                format!("{keys} {tour_kind}")
            } else {
                format!("{keys} {word}")
            }
        })
        .collect()
}

/// The footer hint line of the timeline's focus (the explorer's first), with the tour's:
/// the short forms, in table order.
pub fn hints(keymap: &Keymap) -> String {
    hint_list(keymap, "tour", &[Scope::Timeline, Scope::Global]).join(" · ")
}

/// The hint words always kept in a narrow footer: how to get help and how to leave.
const ALWAYS_WORDS: [&str; 2] = ["help", "quit"];

/// The footer hint line within `width` terminal columns: whole hints in table order, leaving
/// out the later optional ones that do not fit, but always ending with the help and quit hints ("? help · q quit") (the
/// help page lists every key). Never cuts a hint in the middle. The `n` hint names
/// `tour_kind` ([`crate::app::App::tour_kind`]: "tour" or "lesson"); `scopes` are those in
/// force ([`crate::app::App::key_scopes`]).
pub fn hints_fitting(keymap: &Keymap, width: usize, tour_kind: &str, scopes: &[Scope]) -> String {
    let all = hint_list(keymap, tour_kind, scopes);
    let always: Vec<String> = ALWAYS_WORDS
        .iter()
        .filter_map(|w| {
            keymap
                .bindings
                .iter()
                .find_map(|b| b.hint.as_ref().filter(|(_, word)| word == w))
                .map(|(keys, word)| format!("{keys} {word}"))
        })
        .collect();
    let sep = " · ";
    let tail = always.join(sep);
    let mut budget = width.saturating_sub(tail.chars().count());
    let mut kept: Vec<&str> = Vec::new();
    for h in all.iter().filter(|h| !always.contains(h)) {
        let need = h.chars().count() + sep.chars().count();
        if need > budget {
            break;
        }
        budget -= need;
        kept.push(h);
    }
    kept.extend(always.iter().map(String::as_str));
    kept.join(sep)
}
