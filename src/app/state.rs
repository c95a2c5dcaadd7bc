//! The explorer's state: the session, its B_crit trajectory, the throughput table, the cursor
//! and what the user is looking at.

use super::update::WriteJob;
use crate::goodput::{GoodputGrid, ThroughputTable};
use crate::session::{Panel, Resolved, Session, ViewState};
use crate::source::Loaded;
use crate::stats::AnalyzeReport;
use crate::trajectory::Trajectory;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

/// Everything the view draws.
#[derive(Debug, Clone)]
pub struct App {
    /// The key table in force (the defaults with the user's bindings): dispatch, help, footer.
    pub keymap: crate::config::keys::Keymap,
    /// The theme the view draws in.
    pub theme: crate::config::ThemeName,
    /// The session with its profiles (edited in place by the what-if editor).
    pub resolved: Resolved,
    /// B_crit over training as the source gave it (before the session's B_crit scale).
    pub raw_trajectory: Arc<Trajectory>,
    /// B_crit over training, with the session's B_crit scale applied (shared with
    /// `raw_trajectory` at scale 1).
    pub trajectory: Arc<Trajectory>,
    /// The noise-scale analysis, when the source is a measured run.
    pub analysis: Option<Arc<AnalyzeReport>>,
    /// The seed's temporal EMA estimate per step (dumps only; a labelled, biased comparison).
    pub seed_ema: Arc<Vec<crate::source::dump::EmaPoint>>,
    /// Whether the data source is still being loaded by the worker.
    pub loading: bool,
    /// Progress of a long load (0–1) and what is being done, while loading.
    pub progress: Option<(f64, String)>,
    /// Where gradient dumps are reduced (auto: CUDA when usable, else the CPU).
    pub device: crate::compute::Device,
    /// Throughput of every layout × batch size, once the worker has computed it.
    pub table: Option<Arc<ThroughputTable>>,
    /// Generation of the table the app is waiting for (bumped on every what-if change).
    pub table_generation: u64,
    /// Goodput at the cursor (recomputed on every scrub; cheap).
    pub grid: Option<GoodputGrid>,
    /// Index of the scrubbed trajectory point.
    pub cursor: usize,
    /// Focused panel.
    pub focus: Panel,
    /// Side panel shown beside the heatmap.
    pub side: Panel,
    /// Selected heatmap cell (layout row, batch column).
    pub selected: (usize, usize),
    /// Whether the user (or the saved session) chose the selected cell; until then the
    /// selection follows the best cell whenever the goodput grid is recomputed.
    pub user_selected: bool,
    /// Selected row of the what-if editor.
    pub whatif_row: usize,
    /// Lines the focused side panel's text is scrolled down by (reset when the panel changes).
    pub side_scroll: u16,
    /// Current guided-tour step, when a tour is running.
    pub tour_step: Option<usize>,
    /// Lines the tour popup's text is scrolled down by from its start, or, with the answer
    /// revealed, from the answer's first line (reset on every step and on revealing).
    pub tour_scroll: u16,
    /// Whether the answer to the tour (lesson) step's question is shown (reset on every step).
    pub tour_revealed: bool,
    /// The tour (lesson) step Esc closed, where `n` resumes.
    pub tour_closed_at: Option<usize>,
    /// The switch plan and strategy comparison, once the worker has computed it.
    pub plan: Option<Arc<crate::plan::PlanReport>>,
    /// Generation of the plan the app is waiting for.
    pub plan_generation: u64,
    /// Trajectory indices where the plan switches (for `[` and `]`), ascending.
    pub switch_points: Vec<usize>,
    /// Live attach: the target followed, when this is a live run.
    pub live_target: Option<String>,
    /// Live attach: the follower's last word on the connection (following, waiting,
    /// reconnecting, restarted, ended), kept in the title line.
    pub live_link: Option<crate::source::live::LinkStatus>,
    /// Live attach with `--advise`: the advice loop (pending and approved advice).
    pub advice: Option<super::advice::AdviceLoop>,
    /// Live attach: keep the cursor at the newest point until the user scrubs away.
    pub follow: bool,
    /// Lines the help overlay is scrolled down by.
    pub help_scroll: u16,
    /// One-line status (last save, errors, device notes).
    pub status: String,
    /// The performance model calibrated on the run's step times, with the run's own
    /// configuration measured against predicted.
    pub run_calibration: Option<Arc<crate::perf::run_calibration::RunCalibration>>,
    /// Set when the user asked to quit.
    pub quit: bool,
    /// The session as last loaded or saved (what the dirty marker compares with).
    pub clean: Session,
    /// Where `s` writes the session (the opener chooses: never a shipped or commented file).
    pub save_path: PathBuf,
    /// Files this explorer may replace without asking (ones it wrote, or the plain session
    /// file it opened), each with the fingerprint ([`crate::fsutil::content_hash`]) of what
    /// it read or wrote there: a file changed on disk since is not replaced without asking.
    pub may_overwrite: BTreeMap<PathBuf, u64>,
    /// Files a save writes beside the session: (name relative to the save's directory,
    /// contents). A lesson trained into a temporary directory carries its run here, so that
    /// the saved session still finds its data after the lesson ends.
    pub save_with: Vec<(String, String)>,
    /// The popups over the main view, bottom first: the last is drawn on top and gets the
    /// keys; Esc closes it.
    pub overlays: Vec<Overlay>,
    /// Quit once the pending save has been written.
    pub quit_after_save: bool,
    /// The session's saved cursor, applied when the source has loaded.
    pub restore_cursor: Option<usize>,
    /// Why the data source could not be loaded, shown in place of the heatmap.
    pub load_error: Option<String>,
    /// The layer whose B_simple over time the timeline shows (index into
    /// [`super::measured_view::layer_names`]); `None`: the whole model.
    pub layer_view: Option<usize>,
    /// A second run laid over this one (`copus open A --compare B`).
    pub compare: Option<Arc<super::measured_view::CompareRun>>,
    /// Lines the explanation popup is scrolled down by.
    pub explain_scroll: u16,
    /// The heatmap cell marked for comparison (layout row, batch column).
    pub marked: Option<(usize, usize)>,
    /// The heatmap's layout filter (`/`); `None` shows every layout.
    pub layout_filter: Option<super::filter::LayoutFilter>,
    /// Lines the ranked list is scrolled down by.
    pub ranked_scroll: u16,
    /// Why the live run's goodput cannot be shown (its tokens per sample are far from the
    /// model's): the heatmap and the recommendation say so instead of showing numbers.
    pub scale_warning: Option<String>,
    /// The measured critical batch size of a branched experiment on this run
    /// (`open RUN --branches FILE`), laid over the timeline.
    pub branches: Option<Arc<crate::stats::estimate::cbs::CbsReport>>,
    /// A sentence for the status line of the next completed load (e.g. why the estimate went
    /// back to the raw gradient), placed before the load's own line.
    pub notice: Option<String>,
    /// Set the session's B_crit conversion from the measured ratio once the run is loaded
    /// (`open RUN --branches FILE --b-crit-from b-noise|threshold-cbs`).
    pub convert_from_branches: Option<super::branches::ConversionKind>,
    /// Replaced values waiting to be freed off the drawing thread ([`Retired`]).
    pub retired: Retired,
}

/// A popup over the main view.
#[derive(Debug, Clone, PartialEq)]
pub enum Overlay {
    /// The help page (`?`).
    Help,
    /// The explanation of the selected cell, beside the marked one (`x`).
    Explain,
    /// The layouts at the selected batch ranked by goodput (`R`).
    Ranked,
    /// A one-line prompt (save as, go to, filter).
    Prompt(Prompt),
    /// A question waiting for an answer.
    Confirm(Confirm),
}

/// Which popup an [`Overlay`] is, without its contents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OverlayKind {
    /// [`Overlay::Help`].
    Help,
    /// [`Overlay::Explain`].
    Explain,
    /// [`Overlay::Ranked`].
    Ranked,
    /// [`Overlay::Prompt`].
    Prompt,
    /// [`Overlay::Confirm`].
    Confirm,
}

impl Overlay {
    /// Which popup it is.
    pub fn kind(&self) -> OverlayKind {
        match self {
            Overlay::Help => OverlayKind::Help,
            Overlay::Explain => OverlayKind::Explain,
            Overlay::Ranked => OverlayKind::Ranked,
            Overlay::Prompt(_) => OverlayKind::Prompt,
            Overlay::Confirm(_) => OverlayKind::Confirm,
        }
    }
}

/// A question the explorer asks before doing something that loses work.
#[derive(Debug, Clone, PartialEq)]
pub enum Confirm {
    /// Quit with unsaved changes? (`y` quit, `s` save then quit, `n`/Esc stay)
    Quit,
    /// Replace a file this session did not write? (`y` replace, `n`/Esc keep it)
    Overwrite {
        /// The write held back.
        job: Box<WriteJob>,
        /// The file that exists.
        existing: PathBuf,
    },
}

/// The session without its view state: what counts as an unsaved change.
fn settings_of(s: &Session) -> Session {
    Session {
        view: ViewState::default(),
        ..s.clone()
    }
}

/// `raw` with the B_crit scale applied; at scale 1 the same trajectory, shared (a live run's
/// is hundreds of thousands of points, replaced several times a second).
fn scaled(raw: &Arc<Trajectory>, session: &Session) -> Arc<Trajectory> {
    let conversion = BCritScaling::of(session);
    if conversion.is_identity() {
        return Arc::clone(raw);
    }
    let mut t = Trajectory::clone(raw);
    conversion.apply(&mut t);
    Arc::new(t)
}

/// The session's B_crit scaling: the factor (`b_crit_scale`) and, where it was measured with
/// one, its range (`planner.b_crit_scale_range`), both dimensionless. (The plan report's
/// `BCritConversion` describes the factor for JSON.)
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BCritScaling {
    /// Multiplies B_crit.
    pub factor: f64,
    /// Multiply the interval's lower and upper ends (the factor's own range), else `factor`.
    pub range: Option<[f64; 2]>,
}

impl BCritScaling {
    /// The conversion `session` applies.
    pub fn of(session: &Session) -> Self {
        Self {
            factor: session.b_crit_scale,
            range: session.planner.b_crit_scale_range,
        }
    }

    /// True where it changes nothing.
    pub fn is_identity(&self) -> bool {
        self.factor == 1.0 && self.range.is_none_or(|r| r == [1.0, 1.0])
    }

    /// Convert every point of `t`: B_crit times the factor, its interval's ends times the
    /// range's ends (the factor's uncertainty widens the interval; without a range, times the
    /// factor).
    pub fn apply(&self, t: &mut Trajectory) {
        let [lo_f, hi_f] = self.range.unwrap_or([self.factor, self.factor]);
        for p in &mut t.points {
            p.b_crit *= self.factor;
            p.ci = p.ci.map(|(lo, hi)| (lo * lo_f, hi * hi_f));
        }
    }
}

/// What the app replaced and no longer needs, handed to a background thread to be freed: a
/// live run's analysis is 10⁵ rows, and freeing it took a third of the drawing thread's time
/// at 100k lines/s. The runtime takes it after every update ([`App::take_retired`]); a
/// clone of the app starts with none.
#[derive(Default)]
pub struct Retired(Vec<Box<dyn std::any::Any + Send>>);

/// Most values kept for the runtime to take; beyond it (an app driven without the runtime,
/// as in tests) they are freed in place.
const RETIRED_KEPT: usize = 16;

impl Retired {
    /// Keep `value` to be freed elsewhere.
    pub fn push(&mut self, value: impl std::any::Any + Send) {
        if self.0.len() >= RETIRED_KEPT {
            self.0.clear();
        }
        self.0.push(Box::new(value));
    }

    /// Values waiting to be freed.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when nothing waits to be freed.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Clone for Retired {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl std::fmt::Debug for Retired {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Retired({} values)", self.0.len())
    }
}

impl App {
    /// An explorer on `resolved` whose source is still loading (see `Msg::SourceLoaded`).
    pub fn loading(resolved: Resolved) -> Self {
        let label = format!("loading {}…", resolved.error_path().display());
        let seq_len = resolved.model.seq_len;
        let mut app = Self::new(
            resolved,
            Loaded {
                trajectory: Trajectory {
                    label,
                    seq_len,
                    points: Vec::new(),
                },
                analysis: None,
                seed_ema: Vec::new(),
                note: None,
                calibration: None,
                warning: None,
            },
        );
        app.loading = true;
        app.restore_cursor = Some(app.resolved.session.view.cursor);
        app
    }

    /// What the session's guided steps are called: "lesson" for `copus lesson`, else "tour".
    pub fn tour_kind(&self) -> &'static str {
        if self.resolved.session.name.starts_with("lesson: ") {
            "lesson"
        } else {
            "tour"
        }
    }

    /// The scopes whose keys apply in the main view, in priority order: the tour's, then the
    /// focused panel's (the heatmap's, the what-if editor's, or a side panel's and the
    /// timeline's), then the global ones. The key handler and the footer's hints read them.
    pub fn key_scopes(&self) -> Vec<crate::config::keys::Scope> {
        use crate::config::keys::Scope;
        let mut scopes = Vec::with_capacity(4);
        if self.tour_step.is_some() {
            scopes.push(Scope::Tour);
        }
        match self.focus {
            Panel::Heatmap => scopes.push(Scope::Heatmap),
            Panel::WhatIf => scopes.push(Scope::WhatIf),
            focus => {
                if focus.is_side() {
                    scopes.push(Scope::Side);
                }
                scopes.push(Scope::Timeline);
            }
        }
        scopes.push(Scope::Global);
        scopes
    }

    /// The text of the open prompt, if any.
    pub fn prompt_text(&self) -> Option<&str> {
        self.prompt().map(|p| p.text.as_str())
    }

    /// The popup on top, if any.
    pub fn overlay(&self) -> Option<&Overlay> {
        self.overlays.last()
    }

    /// Whether a popup of `kind` is open (anywhere in the stack).
    pub fn is_open(&self, kind: OverlayKind) -> bool {
        self.overlays.iter().any(|o| o.kind() == kind)
    }

    /// The open question, if any.
    pub fn confirm(&self) -> Option<&Confirm> {
        self.overlays.iter().rev().find_map(|o| match o {
            Overlay::Confirm(c) => Some(c),
            _ => None,
        })
    }

    /// The open prompt, if any.
    pub fn prompt(&self) -> Option<&Prompt> {
        self.overlays.iter().rev().find_map(|o| match o {
            Overlay::Prompt(p) => Some(p),
            _ => None,
        })
    }

    /// The open prompt, to edit.
    pub fn prompt_mut(&mut self) -> Option<&mut Prompt> {
        self.overlays.iter_mut().rev().find_map(|o| match o {
            Overlay::Prompt(p) => Some(p),
            _ => None,
        })
    }

    /// Open `overlay` on top (one of a kind: an open one of its kind is replaced).
    pub fn open(&mut self, overlay: Overlay) {
        self.close(overlay.kind());
        self.overlays.push(overlay);
    }

    /// Close the popup of `kind`; what it was, if it was open.
    pub fn close(&mut self, kind: OverlayKind) -> Option<Overlay> {
        let i = self.overlays.iter().position(|o| o.kind() == kind)?;
        Some(self.overlays.remove(i))
    }

    /// Install a loaded source (keeps the cursor where the session left it, if it fits).
    pub fn set_loaded(&mut self, loaded: Loaded) {
        let old_raw = std::mem::replace(&mut self.raw_trajectory, Arc::new(loaded.trajectory));
        let old_analysis = std::mem::replace(&mut self.analysis, loaded.analysis.map(Arc::new));
        let old_ema = std::mem::replace(&mut self.seed_ema, Arc::new(loaded.seed_ema));
        self.retired.push((old_raw, old_analysis, old_ema));
        self.loading = false;
        self.progress = None;
        self.load_error = None;
        let n = self.raw_trajectory.points.len();
        let restored = self.restore_cursor.take();
        if let Some(c) = restored {
            self.cursor = c;
        }
        self.cursor = self.cursor.min(n.saturating_sub(1));
        if restored == Some(usize::MAX) {
            self.open_at_a_bounded_point();
        }
        self.rescale();
    }

    /// A recorded run opens at its latest point; where the last points' intervals are open
    /// above (a smoothed |G|² near zero at the run's end: B_crit 529k [2.0k–∞] on a finished
    /// demo run whose last 50 steps read 1.9k), at the latest point with a bounded interval
    /// instead, and the notice says so (End goes to the last point). A live run follows its
    /// head.
    fn open_at_a_bounded_point(&mut self) {
        use crate::session::DataSource;
        if !matches!(
            self.resolved.session.source,
            DataSource::Stats { .. } | DataSource::Dumps { .. }
        ) {
            return;
        }
        let points = &self.raw_trajectory.points;
        let (Some(at), Some(last)) = (self.raw_trajectory.latest_bounded(), points.last()) else {
            return;
        };
        // Steps the analysis gave no estimate (a smoothed |G|² not above zero) have no point:
        // said, not dropped without a word.
        let left_out = self
            .analysis
            .as_ref()
            .map_or(0, |a| a.steps.len().saturating_sub(points.len()));
        // Counts first and short: the line is the terminal's width, and at 100 columns the
        // count of steps without an estimate was cut off.
        let left_out = match left_out {
            0 => String::new(),
            1 => " · 1 step with no estimate (|G|² ≤ 0)".to_string(),
            n => format!(" · {n} steps with no estimate (|G|² ≤ 0)"),
        };
        if at + 1 < points.len() {
            self.cursor = at;
            let open = points.len() - 1 - at;
            self.notice = Some(format!(
                "opened at step {} (last bounded B_crit) · {open} later point{} open above{left_out}",
                points[at].step,
                if open == 1 { "" } else { "s" },
            ));
        } else if !left_out.is_empty() {
            self.notice = Some(format!("opened at step {}{left_out}", last.step));
        }
    }

    /// Where the run goes on past its last point: (the last point's step, the last analysed
    /// step, the steps after the point), when steps after the last point have no estimate
    /// (a smoothed |G|² not above zero gives no point: the timeline ends before the run).
    pub fn tail_without_estimate(&self) -> Option<(u64, u64, usize)> {
        let last_point = self.raw_trajectory.points.last()?.step;
        let rows = &self.analysis.as_ref()?.steps;
        let last_row = rows.last()?.step;
        let after = rows.len() - rows.partition_point(|r| r.step <= last_point);
        (last_row > last_point && after > 0).then_some((last_point, last_row, after))
    }

    /// [`App::tail_without_estimate`] in words, for the status line.
    pub fn tail_words(&self) -> Option<String> {
        self.tail_without_estimate().map(|(point, last, after)| {
            format!(
                "the timeline ends at step {point}, the last with an estimate: the run goes on \
                 to step {last} ({after} step{} with no estimate, |G|² ≤ 0)",
                if after == 1 { "" } else { "s" }
            )
        })
    }

    /// Use the user's key bindings and theme.
    pub fn configure(&mut self, config: &crate::config::Config) {
        self.keymap = config.keymap.clone();
        self.theme = config.theme;
    }

    /// A new explorer on `resolved` with its loaded source.
    pub fn new(resolved: Resolved, loaded: Loaded) -> Self {
        let raw = Arc::new(loaded.trajectory);
        let trajectory = scaled(&raw, &resolved.session);
        let view = resolved.session.view.clone();
        let cursor = view.cursor.min(trajectory.points.len().saturating_sub(1));
        let resolved_session = resolved.session.clone();
        let save_path = resolved.path.clone();
        let side = if view.side.is_side() {
            view.side
        } else {
            Panel::Recommendation
        };
        Self {
            keymap: crate::config::keys::Keymap::default(),
            theme: crate::config::ThemeName::Dark,
            resolved,
            raw_trajectory: raw,
            trajectory,
            analysis: loaded.analysis.map(Arc::new),
            seed_ema: Arc::new(loaded.seed_ema),
            loading: false,
            progress: None,
            device: crate::compute::Device::Auto,
            table: None,
            table_generation: 0,
            grid: None,
            cursor,
            focus: view.focus,
            side,
            selected: view.selected.unwrap_or((0, 0)),
            user_selected: view.selected.is_some(),
            whatif_row: view.whatif_row,
            side_scroll: 0,
            tour_step: view.tour_step,
            tour_scroll: 0,
            tour_revealed: false,
            tour_closed_at: None,
            plan: None,
            plan_generation: 0,
            switch_points: Vec::new(),
            live_target: None,
            advice: None,
            live_link: None,
            follow: true,
            help_scroll: 0,
            status: String::new(),
            run_calibration: loaded.calibration.clone().map(Arc::new),
            quit: false,
            clean: settings_of(&resolved_session),
            save_path,
            may_overwrite: BTreeMap::new(),
            save_with: Vec::new(),
            overlays: Vec::new(),
            quit_after_save: false,
            restore_cursor: None,
            load_error: None,
            layer_view: None,
            compare: None,
            explain_scroll: 0,
            marked: None,
            layout_filter: None,
            ranked_scroll: 0,
            scale_warning: None,
            branches: None,
            notice: None,
            convert_from_branches: None,
            retired: Retired::default(),
        }
    }

    /// The table's layout rows the heatmap shows, in order: those the filter keeps (every row
    /// without a filter; none before the table is computed).
    pub fn visible_rows(&self) -> Vec<usize> {
        let Some(table) = &self.table else {
            return Vec::new();
        };
        (0..table.layouts.len())
            .filter(|&r| {
                self.layout_filter
                    .as_ref()
                    .is_none_or(|f| f.matches(&table.layouts[r]))
            })
            .collect()
    }

    /// The best cell (highest goodput) among the visible rows, if any cell there runs.
    pub fn best_visible(&self) -> Option<(usize, usize)> {
        let grid = self.grid.as_ref()?;
        if self.layout_filter.is_none() {
            return grid.best;
        }
        grid.best_among(&self.visible_rows())
    }

    /// Whether settings changed since the session was loaded or last saved (view state such as
    /// the cursor does not count).
    pub fn dirty(&self) -> bool {
        settings_of(&self.resolved.session) != self.clean
    }

    /// Mark `session` as what is on disk now (after a save).
    pub fn mark_clean(&mut self, session: &Session) {
        self.clean = settings_of(session);
    }

    /// Re-apply the session's B_crit conversion (factor and range) to the raw trajectory.
    pub fn rescale(&mut self) {
        let scaled = scaled(&self.raw_trajectory, &self.resolved.session);
        let old = std::mem::replace(&mut self.trajectory, scaled);
        self.retired.push(old);
        self.refresh_grid();
    }

    /// B_crit (samples) at the cursor, if the trajectory has points.
    pub fn b_crit_at_cursor(&self) -> Option<f64> {
        self.trajectory.points.get(self.cursor).map(|p| p.b_crit)
    }

    /// Tokens per sample of the trajectory (the run's own for a measured run).
    pub fn run_seq_len(&self) -> u32 {
        self.trajectory.seq_len
    }

    /// How many of the model's sequences one sample of the trajectory is worth (equal tokens):
    /// run tokens per sample / model sequence length; 1 for scenarios.
    pub fn samples_to_model_seqs(&self) -> f64 {
        let (run, model) = (self.trajectory.seq_len, self.resolved.model.seq_len);
        if run == 0 || model == 0 {
            1.0
        } else {
            run as f64 / model as f64
        }
    }

    /// B_crit at the cursor in the model's sequences (what the heatmap's batch axis counts).
    pub fn b_crit_model_seqs_at_cursor(&self) -> Option<f64> {
        self.b_crit_at_cursor()
            .map(|b| b * self.samples_to_model_seqs())
    }

    /// The raw trajectory counted in the model's sequences (what the planner compares with
    /// the table's batches).
    pub fn planning_trajectory(&self) -> Arc<Trajectory> {
        let seq_len = self.resolved.model.seq_len;
        if self.raw_trajectory.counts_in(seq_len) {
            return Arc::clone(&self.raw_trajectory);
        }
        Arc::new(self.raw_trajectory.in_sequences_of(seq_len))
    }

    /// What updates replaced since the last call, for the runtime to free off this thread.
    pub fn take_retired(&mut self) -> Retired {
        std::mem::take(&mut self.retired)
    }

    /// Recompute the goodput grid at the cursor from the table (if there is one); B_crit is
    /// converted from the run's samples to the model's sequences.
    pub fn refresh_grid(&mut self) {
        self.grid = match (&self.table, self.b_crit_model_seqs_at_cursor()) {
            (Some(t), Some(b)) => Some(crate::pipeline::session_grid(&self.resolved, t, b)),
            _ => None,
        };
        // Until the user picks a cell, the selection (the side panels' layout) follows the ★
        // as the goodput changes: along the run, with a live run's new points, with a new
        // B_crit scale (the tour's halfway step showed the early best's throughput beside a
        // ★ that had moved).
        if !self.user_selected
            && let Some(best) = self.best_visible()
        {
            self.selected = best;
        }
    }

    /// The layer the timeline shows (see `layer_view`), by name, when the run has it.
    pub fn viewed_layer(&self) -> Option<String> {
        let names = super::measured_view::layer_names(self.analysis.as_deref()?);
        names.get(self.layer_view?).cloned()
    }

    /// Step to the next per-layer view of the timeline: whole model → each layer (largest
    /// share of tr(Σ) first) → whole model. Returns the layer now shown; says why on the
    /// status line when the run has no layers.
    pub fn cycle_layer(&mut self) -> Option<String> {
        let n = self
            .analysis
            .as_deref()
            .map_or(0, |r| r.summary.layers.len());
        if n == 0 {
            self.layer_view = None;
            self.status = "no per-layer statistics in this run (records carry no `layers`)".into();
            return None;
        }
        self.layer_view = match self.layer_view {
            None => Some(0),
            Some(i) if i + 1 < n => Some(i + 1),
            Some(_) => None,
        };
        self.viewed_layer()
    }

    /// The batch the run uses now, in the model's sequences (the heatmap's batch axis): the
    /// session's `current_batch`, else for a measured run (stats file, dump, live) the global
    /// batch its last two points imply (tokens per step over the model's sequence), as `grid`
    /// reads it; none where that is under one sequence.
    pub fn current_batch(&self) -> Option<u64> {
        self.resolved.current_batch(&self.trajectory)
    }

    /// [`Self::current_batch`] in the trajectory's own samples (the timeline's axis): the
    /// session's `current_batch` converted from the model's sequences (fractional where the
    /// two lengths differ), else the measured run's own.
    pub fn current_batch_in_run_samples(&self) -> Option<f64> {
        if let Some(b) = self.resolved.session.current_batch {
            return Some(b as f64 / self.samples_to_model_seqs());
        }
        // A run's own (a scenario's trajectory is a law, with no batch of its own).
        let scenario = matches!(
            self.resolved.session.source,
            crate::session::DataSource::Scenario(_)
        );
        (!scenario)
            .then(|| self.measured_batch())
            .flatten()
            .map(|b| b as f64)
    }

    /// The global batch, samples, the trajectory's last two points imply (tokens per step over
    /// tokens per sample), if they do.
    pub fn measured_batch(&self) -> Option<u64> {
        self.trajectory.implied_batch()
    }

    /// Column of the current batch size ([`App::current_batch`]) on the batch axis, if it is
    /// on the grid.
    pub fn current_batch_column(&self) -> Option<usize> {
        let current = self.current_batch()?;
        self.table
            .as_ref()?
            .batches
            .iter()
            .position(|&b| b == current)
    }
}

/// What a one-line prompt asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptKind {
    /// A path to save the session to.
    SaveAs,
    /// Where to move the cursor: a step, a token count (`150B`) or a percentage (`40%`).
    GoTo,
    /// The heatmap's layout filter (`tp<=4 pp=1`).
    Filter,
}

/// An open one-line prompt: what it asks for and the text typed so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prompt {
    /// What it asks for.
    pub kind: PromptKind,
    /// The text typed so far.
    pub text: String,
}
