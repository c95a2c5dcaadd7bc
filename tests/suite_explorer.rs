//! Integration tests, one binary: the explorer in process: app state, update, views and snapshots.
//! Each module is one test file of this folder (run one with `cargo test --test explorer -- MODULE::`).

mod drift_support;
mod dump_support;
mod render_support;
mod stats_support;

#[path = "app_drift.rs"]
mod app_drift;
#[path = "app_explain.rs"]
mod app_explain;
#[path = "app_lessons.rs"]
mod app_lessons;
#[path = "app_measured.rs"]
mod app_measured;
#[path = "app_saving.rs"]
mod app_saving;
#[path = "app_tour.rs"]
mod app_tour;
#[path = "app_units.rs"]
mod app_units;
#[path = "app_update.rs"]
mod app_update;
#[path = "escape_render.rs"]
mod escape_render;
#[path = "plan_panel.rs"]
mod plan_panel;
#[path = "render_drift.rs"]
mod render_drift;
#[path = "render_snapshots.rs"]
mod render_snapshots;
