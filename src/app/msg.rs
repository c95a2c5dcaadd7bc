//! Messages: everything that can happen to the explorer.

use crate::goodput::ThroughputTable;
use crate::session::Panel;
use crate::source::Loaded;
use std::sync::Arc;

/// One event for [`crate::app::update`].
#[derive(Debug, Clone)]
pub enum Msg {
    /// Move the scrub cursor by this many trajectory points (negative: back).
    Scrub(i64),
    /// Put the cursor on trajectory point `index` (a click on the timeline).
    ScrubTo(usize),
    /// Jump to the first trajectory point.
    Home,
    /// Jump to the last trajectory point.
    End,
    /// Jump to the next (+1) or previous (−1) planned switch point.
    JumpSwitch(i64),
    /// Move the heatmap selection by (rows, columns).
    MoveSelection(i64, i64),
    /// Select heatmap cell (layout row, batch column) (a click on the heatmap).
    Select(usize, usize),
    /// Drill into the selected cell: show its throughput curve.
    DrillIn,
    /// Cycle keyboard focus: timeline → heatmap → side panel.
    FocusNext,
    /// Show this side panel beside the heatmap and focus it.
    ShowSide(Panel),
    /// Move the what-if editor's row selection.
    WhatIfRow(i64),
    /// Step the selected what-if value up (+1) or down (−1).
    WhatIfChange(i32),
    /// Next (+1) or previous (−1) step of the guided tour.
    Tour(i64),
    /// Show or hide the help overlay.
    ToggleHelp,
    /// Save the session (atomically) where it came from.
    Save,
    /// Export the current view as CSV and JSON beside the session.
    Export,
    /// Quit the explorer.
    Quit,
    /// The worker finished a throughput table for table generation `generation`.
    TableReady {
        /// Which request this answers (stale answers are dropped).
        generation: u64,
        /// The table.
        table: Arc<ThroughputTable>,
    },
    /// The worker finished the plan for plan generation `generation`.
    PlanReady {
        /// Which request this answers (stale answers are dropped).
        generation: u64,
        /// The plan, or why there is none.
        plan: Box<Result<crate::plan::PlanReport, String>>,
    },
    /// The worker loaded the data source (or says why it could not).
    SourceLoaded(Box<Result<Loaded, String>>),
    /// A live run was re-estimated: the new trajectory (or why there is none yet) and counts.
    Live {
        /// The re-estimated source.
        update: Box<Result<Loaded, String>>,
        /// Valid records received so far.
        steps: u64,
        /// Malformed lines so far.
        malformed: u64,
        /// Records dropped so far: duplicates (replayed or rewritten) and records superseded
        /// by a restarted run.
        dropped: u64,
    },
    /// A status line from the live follower (waiting, reconnecting, truncation, …).
    LiveStatus(String),
    /// Progress of a long load, 0–1, with a label.
    Progress(f64, String),
    /// A save or export finished: `Ok(what was written)` or an error message.
    Written(Result<String, String>),
}
