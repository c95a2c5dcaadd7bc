//! `update`: the only place the explorer's state changes.

use super::export::{export_view, to_csv};
use super::whatif::{self, FIELDS};
use super::{App, Msg};
use crate::session::{Panel, Session};
use std::path::PathBuf;

/// Work the update asks the runtime to do off the UI thread.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Compute the throughput table for the current what-if settings.
    ComputeTable {
        /// Generation to tag the answer with.
        generation: u64,
    },
    /// Load the session's data source.
    LoadSource,
    /// Plan switch points over the current trajectory and table.
    ComputePlan {
        /// Generation to tag the answer with.
        generation: u64,
    },
    /// Write files atomically (a save or an export), then report `what`.
    Write {
        /// (path, contents) pairs.
        files: Vec<(PathBuf, String)>,
        /// Description for the status line.
        what: String,
    },
}

fn clamp_add(value: usize, delta: i64, len: usize) -> usize {
    if len == 0 {
        return 0;
    }
    let v = value as i64 + delta;
    v.clamp(0, len as i64 - 1) as usize
}

/// The session as it stands now, with the view state folded in (what `s` saves).
pub fn session_snapshot(app: &App) -> Session {
    let mut s = app.resolved.session.clone();
    s.view.cursor = app.cursor;
    s.view.focus = app.focus;
    s.view.side = app.side;
    s.view.selected = Some(app.selected);
    s.view.whatif_row = app.whatif_row;
    s.view.tour_step = app.tour_step;
    s
}

/// Request a fresh throughput table (after a start or a what-if change).
pub fn request_table(app: &mut App) -> Effect {
    app.table_generation += 1;
    app.table = None;
    app.grid = None;
    Effect::ComputeTable {
        generation: app.table_generation,
    }
}

/// Request a fresh plan when there is a table and a trajectory to plan over.
pub fn request_plan(app: &mut App) -> Option<Effect> {
    app.plan_generation += 1;
    app.plan = None;
    app.switch_points.clear();
    (app.table.is_some() && app.trajectory.points.len() >= 2).then_some(Effect::ComputePlan {
        generation: app.plan_generation,
    })
}

fn set_cursor(app: &mut App, cursor: usize) {
    let last = app.trajectory.points.len().saturating_sub(1);
    app.cursor = cursor.min(last);
    // Follow mode (live runs): on while the cursor sits on the newest point.
    app.follow = app.cursor == last;
    app.refresh_grid();
}

fn tour(app: &mut App, delta: i64) {
    let count = app.resolved.session.tour.len();
    if count == 0 {
        app.status = "this session has no guided tour".into();
        return;
    }
    let next = match app.tour_step {
        None if delta > 0 => Some(0),
        None => None,
        Some(i) => {
            let j = i as i64 + delta;
            (0..count as i64).contains(&j).then_some(j as usize)
        }
    };
    app.tour_step = next;
    if let Some(i) = next {
        let step = app.resolved.session.tour[i].clone();
        if step.panel.is_side() {
            app.side = step.panel;
        }
        app.focus = step.panel;
        if let Some(c) = step.cursor {
            set_cursor(app, c);
        }
        app.status = format!("tour {}/{}", i + 1, count);
    } else {
        app.status = "tour ended (n starts it again)".into();
    }
}

fn export(app: &App) -> Result<Effect, String> {
    let (Some(table), Some(grid), Some(at)) =
        (&app.table, &app.grid, app.trajectory.points.get(app.cursor))
    else {
        return Err("nothing to export yet".into());
    };
    let view = export_view(table, grid, at);
    let json = serde_json::to_string_pretty(&view).map_err(|e| e.to_string())?;
    let stem = app
        .resolved
        .path
        .file_stem()
        .map_or("copus".into(), |s| s.to_string_lossy().into_owned());
    let base = app.resolved.base.join(format!("{stem}-step{}", at.step));
    Ok(Effect::Write {
        files: vec![
            (base.with_extension("csv"), to_csv(&view)),
            (base.with_extension("json"), json),
        ],
        what: format!("exported {}.csv and .json", base.display()),
    })
}

/// Apply `msg` to `app`; return the effects to run.
pub fn update(app: &mut App, msg: Msg) -> Vec<Effect> {
    let n = app.trajectory.points.len();
    match msg {
        Msg::Scrub(d) => set_cursor(app, clamp_add(app.cursor, d, n)),
        Msg::ScrubTo(i) => set_cursor(app, i),
        Msg::Home => set_cursor(app, 0),
        Msg::End => set_cursor(app, n.saturating_sub(1)),
        Msg::JumpSwitch(d) => {
            let target = if d > 0 {
                app.switch_points.iter().find(|&&i| i > app.cursor)
            } else {
                app.switch_points.iter().rev().find(|&&i| i < app.cursor)
            };
            match target {
                Some(&i) => set_cursor(app, i),
                None if app.switch_points.is_empty() => {
                    app.status = "no planned switch points".into()
                }
                None => app.status = "no further switch point".into(),
            }
        }
        Msg::MoveSelection(dr, dc) => {
            if let Some(t) = &app.table {
                app.selected = (
                    clamp_add(app.selected.0, dr, t.layouts.len()),
                    clamp_add(app.selected.1, dc, t.batches.len()),
                );
            }
        }
        Msg::Select(r, c) => {
            if let Some(t) = &app.table
                && r < t.layouts.len()
                && c < t.batches.len()
            {
                app.selected = (r, c);
                app.focus = Panel::Heatmap;
            }
        }
        Msg::DrillIn => {
            app.side = Panel::Throughput;
        }
        Msg::FocusNext => {
            app.focus = match app.focus {
                Panel::Timeline => Panel::Heatmap,
                Panel::Heatmap => app.side,
                _ => Panel::Timeline,
            }
        }
        Msg::ShowSide(p) => {
            if p.is_side() {
                app.side = p;
                app.focus = p;
            }
        }
        Msg::WhatIfRow(d) => app.whatif_row = clamp_add(app.whatif_row, d, FIELDS.len()),
        Msg::WhatIfChange(d) => {
            let field = FIELDS[app.whatif_row.min(FIELDS.len() - 1)];
            match whatif::apply(&mut app.resolved, field, d) {
                Ok(()) => {
                    app.status = format!(
                        "{} = {}",
                        field.label(),
                        whatif::value(&app.resolved, field)
                    );
                    app.rescale();
                    if field.affects_throughput() {
                        return vec![request_table(app)];
                    }
                    return request_plan(app).into_iter().collect();
                }
                Err(e) => app.status = e,
            }
        }
        Msg::Tour(d) => tour(app, d),
        Msg::ToggleHelp => app.show_help = !app.show_help,
        Msg::Save => match session_snapshot(app).to_ron() {
            Ok(text) => {
                app.status = "saving…".into();
                return vec![Effect::Write {
                    files: vec![(app.resolved.path.clone(), text)],
                    what: format!("saved {}", app.resolved.path.display()),
                }];
            }
            Err(e) => app.status = format!("save failed: {e}"),
        },
        Msg::Export => match export(app) {
            Ok(effect) => return vec![effect],
            Err(e) => app.status = format!("export failed: {e}"),
        },
        Msg::Quit => app.quit = true,
        Msg::TableReady { generation, table } => {
            if generation == app.table_generation {
                let (rows, cols) = (table.layouts.len(), table.batches.len());
                app.selected = (
                    app.selected.0.min(rows.saturating_sub(1)),
                    app.selected.1.min(cols.saturating_sub(1)),
                );
                app.table = Some(table);
                app.refresh_grid();
                return request_plan(app).into_iter().collect();
            }
        }
        Msg::PlanReady { generation, plan } => {
            if generation == app.plan_generation {
                match *plan {
                    Ok(plan) => {
                        let mut points: Vec<usize> = plan
                            .switches
                            .iter()
                            .map(|s| app.trajectory.index_at_tokens(s.at_tokens))
                            .collect();
                        points.sort_unstable();
                        points.dedup();
                        app.switch_points = points;
                        app.plan = Some(std::sync::Arc::new(plan));
                    }
                    Err(e) => app.status = format!("plan: {e}"),
                }
            }
        }
        Msg::SourceLoaded(result) => match *result {
            Ok(loaded) => {
                let note = loaded.note.clone();
                app.set_loaded(loaded);
                app.status = format!(
                    "loaded {} points: {}{}",
                    app.trajectory.points.len(),
                    app.trajectory.label,
                    note.map(|n| format!(" · {n}")).unwrap_or_default()
                );
                return request_plan(app).into_iter().collect();
            }
            Err(e) => {
                app.loading = false;
                app.progress = None;
                app.status = format!("loading failed: {e}");
            }
        },
        Msg::Live {
            update,
            steps,
            malformed,
            dropped,
        } => {
            let head = if dropped > 0 {
                format!(
                    "live: {steps} steps, {malformed} malformed, {dropped} dropped (duplicate or superseded)"
                )
            } else {
                format!("live: {steps} steps, {malformed} malformed")
            };
            match *update {
                Ok(loaded) => {
                    let follow = app.follow;
                    app.set_loaded(loaded);
                    if follow {
                        app.cursor = app.trajectory.points.len().saturating_sub(1);
                        app.refresh_grid();
                    }
                    app.status = if follow {
                        format!("{head} · following the head")
                    } else {
                        format!("{head} · End resumes following")
                    };
                    return request_plan(app).into_iter().collect();
                }
                Err(e) => app.status = format!("{head} · no estimate yet: {e}"),
            }
        }
        Msg::LiveStatus(s) => app.status = s,
        Msg::Progress(f, what) => {
            app.status = format!("{what} {:.0}%", f * 100.0);
            app.progress = Some((f.clamp(0.0, 1.0), what));
        }
        Msg::Written(Ok(what)) => app.status = what,
        Msg::Written(Err(e)) => app.status = format!("write failed: {e}"),
    }
    Vec::new()
}
