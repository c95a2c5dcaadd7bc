//! The update's part for the workers' answers: a throughput table, a plan, a loaded source,
//! a live run re-estimated.

use super::state::App;
use super::update::{Effect, convert_from_branches, request_plan, request_table, select_best};
use crate::goodput::ThroughputTable;
use crate::pipeline::PlanError;
use crate::plan::PlanReport;
use crate::source::{Loaded, SourceError};
use std::sync::Arc;

/// A throughput table for table generation `generation` (stale ones are dropped).
pub(super) fn table_ready(
    app: &mut App,
    generation: u64,
    table: Arc<ThroughputTable>,
) -> Vec<Effect> {
    if generation == app.table_generation {
        let (rows, cols) = (table.layouts.len(), table.batches.len());
        app.selected = (
            app.selected.0.min(rows.saturating_sub(1)),
            app.selected.1.min(cols.saturating_sub(1)),
        );
        if app.marked.is_some_and(|(r, c)| r >= rows || c >= cols) {
            app.marked = None;
        }
        app.table = Some(table);
        app.refresh_grid();
        if !app.user_selected || !app.visible_rows().contains(&app.selected.0) {
            // Start on the best cell, not on one that cannot run or is filtered out.
            select_best(app);
        }
        return request_plan(app).into_iter().collect();
    }
    Vec::new()
}

/// The plan for plan generation `generation` (stale ones are dropped), or why there is none.
pub(super) fn plan_ready(app: &mut App, generation: u64, plan: Result<PlanReport, PlanError>) {
    if generation == app.plan_generation {
        match plan {
            Ok(plan) => {
                let mut points = app
                    .trajectory
                    .indices_at_tokens(plan.switches.iter().map(|s| s.at_tokens));
                points.sort_unstable();
                points.dedup();
                app.switch_points = points;
                app.plan = Some(std::sync::Arc::new(plan));
            }
            Err(e) => app.status = format!("plan: {e}"),
        }
    }
}

/// The data source loaded, or why it could not be.
pub(super) fn source_loaded(
    app: &mut App,
    result: Box<Result<Loaded, SourceError>>,
) -> Vec<Effect> {
    match *result {
        Ok(loaded) => {
            let note = loaded.note.clone();
            let calibration = loaded.calibration.clone();
            app.set_loaded(loaded);
            if let Some(c) = calibration {
                let named =
                    app.resolved.calibration.is_some() && !app.resolved.calibration_from_run;
                if !named {
                    app.resolved.calibration = Some(c.file.clone());
                    app.resolved.calibration_from_run = true;
                    app.status = format!("perf model {}", c.summary());
                    app.run_calibration = Some(std::sync::Arc::new(c));
                    return vec![request_table(app)];
                }
                // The calibration the user named stays in force: the run's own fit is said,
                // not put in its place under its name.
                app.notice = Some(format!(
                    "the calibration named stays in force; the run's {} timed steps would fit \
                     the model to ±{:.0} % (the profile ±{:.0} %): open the run without \
                     --calibration to use them",
                    c.file.n,
                    c.file.rms_rel_error * 100.0,
                    c.file.profile_rms_rel_error * 100.0
                ));
            }
            convert_from_branches(app);
            app.status = format!(
                "{}loaded {} points: {}{}",
                app.notice
                    .take()
                    .map(|n| format!("{n} · "))
                    .unwrap_or_default(),
                app.trajectory.points.len(),
                app.trajectory.label,
                note.map(|n| format!(" · {n}")).unwrap_or_default()
            );
            return request_plan(app).into_iter().collect();
        }
        Err(e) => {
            use crate::stats::analysis::settings::GradientKind;
            let est = &mut app.resolved.session.estimator;
            if est.gradient == GradientKind::AdamPreconditioned {
                // The run has no preconditioned norms: back to the raw estimate.
                est.gradient = GradientKind::Raw;
                app.notice = Some(format!(
                    "Adam-preconditioned estimate unavailable ({e}); back to the raw gradient"
                ));
                return vec![Effect::LoadSource];
            }
            app.loading = false;
            app.progress = None;
            app.status = "loading failed (see the panel)".into();
            app.load_error = Some(e.to_string());
        }
    }
    Vec::new()
}

/// Counts of a live run so far, for the status line.
pub(super) struct LiveCounts {
    pub(super) steps: u64,
    pub(super) malformed: u64,
    pub(super) non_finite: u64,
    pub(super) dropped: u64,
}

/// A live run re-estimated: the new trajectory (or why there is none yet).
pub(super) fn live(
    app: &mut App,
    update: Box<Result<Loaded, crate::source::live::aggregate::NoLiveEstimate>>,
    counts: LiveCounts,
) -> Vec<Effect> {
    let LiveCounts {
        steps,
        malformed,
        non_finite,
        dropped,
    } = counts;
    let mut head = format!("live: {steps} steps, {malformed} malformed");
    if non_finite > 0 {
        head.push_str(&format!(", {non_finite} non-finite skipped"));
    }
    if dropped > 0 {
        head.push_str(&format!(", {dropped} dropped (duplicate or superseded)"));
    }
    match *update {
        Ok(loaded) => {
            let follow = app.follow;
            let warning = loaded.warning.clone();
            app.scale_warning = warning.clone();
            // The live aggregator sends the full analysis only when it re-ran it;
            // between two, the trajectory moves and the analysis stays.
            let kept = loaded.analysis.is_none().then(|| app.analysis.clone());
            app.set_loaded(loaded);
            if let Some(a) = kept.flatten() {
                app.analysis = Some(a);
            }
            if follow {
                app.cursor = app.trajectory.points.len().saturating_sub(1);
                app.refresh_grid();
            }
            super::advice::observe(app);
            // An analysis can arrive after the stream went down: say so, not "following".
            let mode = match app.live_link.as_ref().map(|l| l.state) {
                Some(crate::source::live::LinkState::Waiting) => {
                    "the stream is down, retrying (header)"
                }
                _ if follow => "following the head",
                _ => "End resumes following",
            };
            // A head without an estimate: the cursor stays on the last point, so say why (a
            // run whose newest steps have no estimate looked stalled while "following").
            let mode = match app.tail_words().filter(|_| follow) {
                Some(words) => format!("{mode} · {words}"),
                None => mode.to_string(),
            };
            app.status = match warning {
                Some(w) => format!("{head} · {mode} · {w}"),
                None => format!("{head} · {mode}"),
            };
            if let Some(note) = super::advice::pending_note(app) {
                app.status = format!("{note} · {}", app.status);
            }
            return request_plan(app).into_iter().collect();
        }
        Err(e) => app.status = format!("{head} · no estimate yet: {e}"),
    }
    Vec::new()
}
