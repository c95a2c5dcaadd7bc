//! The explorer's state: the session, its B_crit trajectory, the throughput table, the cursor
//! and what the user is looking at.

use crate::goodput::{GoodputGrid, ThroughputTable};
use crate::session::{Panel, Resolved};
use crate::source::Loaded;
use crate::stats::AnalyzeReport;
use crate::trajectory::Trajectory;
use std::sync::Arc;

/// Everything the view draws.
#[derive(Debug, Clone)]
pub struct App {
    /// The session with its profiles (edited in place by the what-if editor).
    pub resolved: Resolved,
    /// B_crit over training as the source gave it (before the session's B_crit scale).
    pub raw_trajectory: Trajectory,
    /// B_crit over training, with the session's B_crit scale applied.
    pub trajectory: Trajectory,
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
    /// Selected row of the what-if editor.
    pub whatif_row: usize,
    /// Current guided-tour step, when a tour is running.
    pub tour_step: Option<usize>,
    /// The switch plan and strategy comparison, once the worker has computed it.
    pub plan: Option<Arc<crate::plan::PlanReport>>,
    /// Generation of the plan the app is waiting for.
    pub plan_generation: u64,
    /// Trajectory indices where the plan switches (for `[` and `]`), ascending.
    pub switch_points: Vec<usize>,
    /// Live attach: the target followed, when this is a live run.
    pub live_target: Option<String>,
    /// Live attach: keep the cursor at the newest point until the user scrubs away.
    pub follow: bool,
    /// Whether the help overlay is shown.
    pub show_help: bool,
    /// One-line status (last save, errors, device notes).
    pub status: String,
    /// The performance model calibrated on the run's step times, with the run's own
    /// configuration measured against predicted.
    pub run_calibration: Option<Arc<crate::perf::run_calibration::RunCalibration>>,
    /// Set when the user asked to quit.
    pub quit: bool,
}

fn scaled(raw: &Trajectory, scale: f64) -> Trajectory {
    let mut t = raw.clone();
    for p in &mut t.points {
        p.b_crit *= scale;
        p.ci = p.ci.map(|(lo, hi)| (lo * scale, hi * scale));
    }
    t
}

impl App {
    /// An explorer on `resolved` whose source is still loading (see `Msg::SourceLoaded`).
    pub fn loading(resolved: Resolved) -> Self {
        let label = format!("loading {}…", resolved.path.display());
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
            },
        );
        app.loading = true;
        app
    }

    /// Install a loaded source (keeps the cursor where the session left it, if it fits).
    pub fn set_loaded(&mut self, loaded: Loaded) {
        self.raw_trajectory = loaded.trajectory;
        self.analysis = loaded.analysis.map(Arc::new);
        self.seed_ema = Arc::new(loaded.seed_ema);
        self.loading = false;
        self.progress = None;
        let n = self.raw_trajectory.points.len();
        self.cursor = self.cursor.min(n.saturating_sub(1));
        self.rescale();
    }

    /// A new explorer on `resolved` with its loaded source.
    pub fn new(resolved: Resolved, loaded: Loaded) -> Self {
        let raw = loaded.trajectory;
        let trajectory = scaled(&raw, resolved.session.b_crit_scale);
        let view = resolved.session.view.clone();
        let cursor = view.cursor.min(trajectory.points.len().saturating_sub(1));
        let side = if view.side.is_side() {
            view.side
        } else {
            Panel::Recommendation
        };
        Self {
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
            whatif_row: view.whatif_row,
            tour_step: view.tour_step,
            plan: None,
            plan_generation: 0,
            switch_points: Vec::new(),
            live_target: None,
            follow: true,
            show_help: false,
            status: String::new(),
            run_calibration: loaded.calibration.clone().map(Arc::new),
            quit: false,
        }
    }

    /// Re-apply the session's B_crit scale to the raw trajectory.
    pub fn rescale(&mut self) {
        self.trajectory = scaled(&self.raw_trajectory, self.resolved.session.b_crit_scale);
        self.refresh_grid();
    }

    /// B_crit (samples) at the cursor, if the trajectory has points.
    pub fn b_crit_at_cursor(&self) -> Option<f64> {
        self.trajectory.points.get(self.cursor).map(|p| p.b_crit)
    }

    /// Recompute the goodput grid at the cursor from the table (if there is one).
    pub fn refresh_grid(&mut self) {
        self.grid = match (&self.table, self.b_crit_at_cursor()) {
            (Some(t), Some(b)) => Some(GoodputGrid::at(t, b, self.resolved.session.stat_eff)),
            _ => None,
        };
    }

    /// Column of the session's current batch size on the batch axis, if it is on the grid.
    pub fn current_batch_column(&self) -> Option<usize> {
        let current = self.resolved.session.current_batch?;
        self.table
            .as_ref()?
            .batches
            .iter()
            .position(|&b| b == current)
    }
}
