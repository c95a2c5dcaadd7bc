//! The app's integration tests, one binary: every test file of this folder is a module here
//! (the app is linked once, and the tests of all areas share the machine's cores). Run one
//! file's tests with `cargo test --test integration -- FILE::`, e.g. `-- perf_published::`.
//! Areas: the explorer in process (`app_*`, `render_*`, `escape_render`, `plan_panel`), the
//! real binary in tmux (`e2e_*`, `reliability_signals`), the command line (`*_cli`,
//! `cli_consistency`, `watch_summary`, `live_docs`, `module_layering`), statistics and dumps
//! (`stats_*`, `dump_*`, `coarsen`), live sources and the trainer (`live_*`, `trainer_*`), the
//! model and planner (`perf_*`, `plan_*`), the Python hook (`python_*`).

mod drift_support;
mod dump_support;
mod reliability_support;
mod render_support;
mod stats_support;
mod tmux_support;

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
#[path = "cli_consistency.rs"]
mod cli_consistency;
#[path = "cli_whatif_flags.rs"]
mod cli_whatif_flags;
#[path = "coarsen.rs"]
mod coarsen;
#[path = "device_cli.rs"]
mod device_cli;
#[path = "dump_cli.rs"]
mod dump_cli;
#[path = "dump_device.rs"]
mod dump_device;
#[path = "dump_ema.rs"]
mod dump_ema;
#[path = "dump_errors.rs"]
mod dump_errors;
#[path = "dump_exact.rs"]
mod dump_exact;
#[path = "dump_npy.rs"]
mod dump_npy;
#[path = "e2e_drift.rs"]
mod e2e_drift;
#[path = "e2e_explain.rs"]
mod e2e_explain;
#[path = "e2e_lessons.rs"]
mod e2e_lessons;
#[path = "e2e_live.rs"]
mod e2e_live;
#[path = "e2e_tui.rs"]
mod e2e_tui;
#[path = "escape_render.rs"]
mod escape_render;
#[path = "live_cli.rs"]
mod live_cli;
#[path = "live_docs.rs"]
mod live_docs;
#[path = "live_file.rs"]
mod live_file;
#[path = "live_ingest.rs"]
mod live_ingest;
#[path = "live_tcp.rs"]
mod live_tcp;
#[path = "module_layering.rs"]
mod module_layering;
#[path = "perf_calibration.rs"]
mod perf_calibration;
#[path = "perf_cli.rs"]
mod perf_cli;
#[path = "perf_expert_parallel.rs"]
mod perf_expert_parallel;
#[path = "perf_explain.rs"]
mod perf_explain;
#[path = "perf_foundry.rs"]
mod perf_foundry;
#[path = "perf_model.rs"]
mod perf_model;
#[path = "perf_published.rs"]
mod perf_published;
#[path = "perf_run_calibration.rs"]
mod perf_run_calibration;
#[path = "perf_stack.rs"]
mod perf_stack;
#[path = "plan_advice_in_place.rs"]
mod plan_advice_in_place;
#[path = "plan_cli.rs"]
mod plan_cli;
#[path = "plan_costs.rs"]
mod plan_costs;
#[path = "plan_dp.rs"]
mod plan_dp;
#[path = "plan_panel.rs"]
mod plan_panel;
#[path = "plan_paper_table.rs"]
mod plan_paper_table;
#[path = "plan_scenario_laws.rs"]
mod plan_scenario_laws;
#[path = "plan_strategies.rs"]
mod plan_strategies;
#[path = "python_hook.rs"]
mod python_hook;
#[path = "python_torch.rs"]
mod python_torch;
#[path = "reliability_cli.rs"]
mod reliability_cli;
#[path = "reliability_signals.rs"]
mod reliability_signals;
#[path = "render_drift.rs"]
mod render_drift;
#[path = "render_snapshots.rs"]
mod render_snapshots;
#[path = "stats_cli.rs"]
mod stats_cli;
#[path = "stats_compare.rs"]
mod stats_compare;
#[path = "stats_diagnostics.rs"]
mod stats_diagnostics;
#[path = "stats_drift.rs"]
mod stats_drift;
#[path = "stats_dump_nan.rs"]
mod stats_dump_nan;
#[path = "stats_intervals.rs"]
mod stats_intervals;
#[path = "stats_oracle.rs"]
mod stats_oracle;
#[path = "stats_props.rs"]
mod stats_props;
#[path = "stats_protocol.rs"]
mod stats_protocol;
#[path = "trainer_learning.rs"]
mod trainer_learning;
#[path = "trainer_model.rs"]
mod trainer_model;
#[path = "trainer_serve.rs"]
mod trainer_serve;
#[path = "watch_summary.rs"]
mod watch_summary;
