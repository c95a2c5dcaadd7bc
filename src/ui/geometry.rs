//! Screen geometry shared by the view and the mouse hit-testing, so a click lands on what was
//! drawn there.

use ratatui::layout::{Constraint, Layout, Rect};

/// Where each part of the screen is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Areas {
    /// Title line.
    pub title: Rect,
    /// Timeline panel.
    pub timeline: Rect,
    /// Heatmap panel.
    pub heatmap: Rect,
    /// Side panel(s).
    pub side: Rect,
    /// Key-help / status line.
    pub keys: Rect,
}

/// Split the whole screen.
pub fn areas(area: Rect) -> Areas {
    let [title, timeline, bottom, keys] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Percentage(35),
        Constraint::Min(8),
        Constraint::Length(1),
    ])
    .areas(area);
    let [heatmap, side] =
        Layout::horizontal([Constraint::Percentage(62), Constraint::Percentage(38)]).areas(bottom);
    Areas {
        title,
        timeline,
        heatmap,
        side,
        keys,
    }
}

/// Whether (x, y) lies inside `r`.
pub fn contains(r: Rect, x: u16, y: u16) -> bool {
    x >= r.x && x < r.x + r.width && y >= r.y && y < r.y + r.height
}
