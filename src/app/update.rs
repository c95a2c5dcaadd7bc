//! `update`: the only place the explorer's state changes.

use super::{App, Msg};
use crate::session::{Panel, Session};
use std::path::PathBuf;

/// Work the update asks the runtime to do off the UI thread.
#[derive(Debug, Clone)]
pub enum Effect {
    /// Compute the throughput table for the current what-if settings.
    ComputeTable {
        /// Generation to tag the answer with.
        generation: u64,
    },
    /// Write the session atomically to `path`.
    Save {
        /// The session to write.
        session: Box<Session>,
        /// Where.
        path: PathBuf,
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
    s.view.selected = Some(app.selected);
    s
}

/// Request a fresh throughput table (after a start or a what-if change).
pub fn request_table(app: &mut App) -> Effect {
    app.table_generation += 1;
    Effect::ComputeTable {
        generation: app.table_generation,
    }
}

/// Apply `msg` to `app`; return the effects to run.
pub fn update(app: &mut App, msg: Msg) -> Vec<Effect> {
    let n = app.trajectory.points.len();
    match msg {
        Msg::Scrub(d) => {
            app.cursor = clamp_add(app.cursor, d, n);
            app.refresh_grid();
        }
        Msg::Home => {
            app.cursor = 0;
            app.refresh_grid();
        }
        Msg::End => {
            app.cursor = n.saturating_sub(1);
            app.refresh_grid();
        }
        Msg::MoveSelection(dr, dc) => {
            if let Some(t) = &app.table {
                app.selected = (
                    clamp_add(app.selected.0, dr, t.layouts.len()),
                    clamp_add(app.selected.1, dc, t.batches.len()),
                );
            }
        }
        Msg::FocusNext => {
            app.focus = match app.focus {
                Panel::Timeline => Panel::Heatmap,
                Panel::Heatmap => Panel::Recommendation,
                Panel::Recommendation => Panel::Timeline,
            }
        }
        Msg::ToggleHelp => app.show_help = !app.show_help,
        Msg::Save => {
            app.status = "saving…".into();
            return vec![Effect::Save {
                session: Box::new(session_snapshot(app)),
                path: app.resolved.path.clone(),
            }];
        }
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
            }
        }
        Msg::Saved(Ok(path)) => app.status = format!("saved {path}"),
        Msg::Saved(Err(e)) => app.status = format!("save failed: {e}"),
    }
    Vec::new()
}
