//! Messages: everything that can happen to the explorer.

use super::update::WriteJob;
use crate::goodput::ThroughputTable;
use crate::session::Panel;
use crate::source::Loaded;
use std::sync::Arc;

/// A file of a save or an export that could not be written.
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", path.display())]
pub struct WriteFailed {
    /// The file.
    pub path: std::path::PathBuf,
    /// Why.
    pub source: std::io::Error,
}

/// One event for [`crate::app::update`].
#[derive(Debug)]
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
    /// Select the best cell (★).
    SelectBest,
    /// Drill into the selected cell: show its throughput curve.
    DrillIn,
    /// Show the next layer's B_simple over time on the timeline (then the whole model again).
    CycleLayer,
    /// Open (or close) the explanation of the selected cell: step time and memory by part,
    /// side by side with the marked cell when one is marked.
    Explain,
    /// Scroll the explanation popup down (+) or up (−) by this many lines.
    ExplainScroll(i64),
    /// Mark the selected cell for comparison (on the marked cell: unmark it).
    Mark,
    /// Cycle keyboard focus: timeline → heatmap → side panel.
    FocusNext,
    /// Show this side panel beside the heatmap and focus it.
    ShowSide(Panel),
    /// Scroll the focused side panel's text down (+) or up (−) by this many lines.
    ScrollSide(i64),
    /// Move the what-if editor's row selection.
    WhatIfRow(i64),
    /// Step the selected what-if value up (+1) or down (−1).
    WhatIfChange(i32),
    /// Next (+1) or previous (−1) step of the guided tour.
    Tour(i64),
    /// Scroll the tour popup's text down (+) or up (−) by this many lines.
    TourScroll(i64),
    /// Scroll the help overlay down (+) or up (−) by this many lines.
    HelpScroll(i64),
    /// Show or hide the help overlay.
    ToggleHelp,
    /// Reveal (or hide again) the answer to the tour (lesson) step's question.
    Reveal,
    /// Close the topmost popup (question, save-as prompt, help, explanation, tour); never quits.
    Escape,
    /// Save the session (atomically) to its save path (see `App::save_path`).
    Save,
    /// Ask for a path to save the session to ("save as").
    SaveAs,
    /// Open the layout filter prompt (`/`).
    Filter,
    /// Open (or close) the ranked list of layouts at the selected batch (`R`).
    Ranked,
    /// Scroll the ranked list down (+) or up (−) by this many lines.
    RankedScroll(i64),
    /// Open the go-to prompt: a step, a token count or a percentage of the run.
    GoTo,
    /// Widen (+1) or narrow (−1) the smoother of a measured run by a factor of 1.5, and
    /// re-analyse it (TensorBoard's smoothing slider).
    Smoothing(i8),
    /// Switch a measured run's estimate between the raw and the Adam-preconditioned gradient.
    ToggleGradient,
    /// An edit of the save-as prompt's text.
    Prompt(PromptEdit),
    /// The answer to the open question (`y`, `n`, `s`).
    Answer(char),
    /// Export the current view as CSV and JSON beside the save path.
    Export,
    /// Approve the pending live advice: append it to the `--advise` file.
    ApproveAdvice,
    /// An `Effect::AppendLine` finished.
    Appended {
        /// The file.
        path: std::path::PathBuf,
        /// `Err` with the reason when the line was not written.
        result: Result<(), std::io::Error>,
    },
    /// Quit the explorer (asks first when there are unsaved changes).
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
        plan: Box<Result<crate::plan::PlanReport, crate::pipeline::PlanError>>,
    },
    /// The worker loaded the data source (or says why it could not).
    SourceLoaded(Box<Result<Loaded, crate::source::SourceError>>),
    /// A live run was re-estimated: the new trajectory (or why there is none yet) and counts.
    Live {
        /// The re-estimated source.
        update: Box<Result<Loaded, crate::source::live::aggregate::NoLiveEstimate>>,
        /// Valid records received so far.
        steps: u64,
        /// Malformed lines so far.
        malformed: u64,
        /// Records skipped for a NaN or ±Inf value so far.
        non_finite: u64,
        /// Records dropped so far: duplicates (replayed or rewritten) and records superseded
        /// by a restarted run.
        dropped: u64,
    },
    /// A status line from the live follower (waiting, reconnecting, truncation, …).
    LiveStatus(crate::source::live::LinkStatus),
    /// Progress of a long load, 0–1, with a label.
    Progress(f64, String),
    /// A save or export finished (`Ok`) or failed (an error message).
    Written {
        /// The write that was carried out.
        job: Box<WriteJob>,
        /// Its outcome.
        result: Result<(), WriteFailed>,
    },
    /// A write would have replaced `existing`, a file this session did not write: nothing was
    /// written; the user is asked.
    WouldOverwrite {
        /// The write held back.
        job: Box<WriteJob>,
        /// The first file that exists.
        existing: std::path::PathBuf,
    },
}

/// An edit of a one-line text prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PromptEdit {
    /// Type a character.
    Char(char),
    /// Delete the last character.
    Backspace,
    /// Delete the whole text (Ctrl+U, as in a shell: the save-as path comes pre-filled).
    Clear,
    /// Delete the last word and the separators after it (Ctrl+W, as in a shell; a path's
    /// `/` separates words).
    DeleteWord,
    /// Accept the text.
    Submit,
}
