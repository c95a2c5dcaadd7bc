//! Messages: everything that can happen to the explorer.

use crate::goodput::ThroughputTable;
use std::sync::Arc;

/// One event for [`crate::app::update`].
#[derive(Debug, Clone)]
pub enum Msg {
    /// Move the scrub cursor by this many trajectory points (negative: back).
    Scrub(i64),
    /// Jump to the first trajectory point.
    Home,
    /// Jump to the last trajectory point.
    End,
    /// Move the heatmap selection by (rows, columns).
    MoveSelection(i64, i64),
    /// Cycle keyboard focus between panels.
    FocusNext,
    /// Show or hide the help overlay.
    ToggleHelp,
    /// Save the session (atomically) where it came from.
    Save,
    /// Quit the explorer.
    Quit,
    /// The worker finished a throughput table for table generation `generation`.
    TableReady {
        /// Which request this answers (stale answers are dropped).
        generation: u64,
        /// The table.
        table: Arc<ThroughputTable>,
    },
    /// A save finished: `Ok(path)` or an error message.
    Saved(Result<String, String>),
}
