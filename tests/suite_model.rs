//! Integration tests, one binary: the performance model, its validation on published measurements, and the planner.
//! Each module is one test file of this folder (run one with `cargo test --test model -- MODULE::`).

#[path = "perf_calibration.rs"]
mod perf_calibration;
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
#[path = "plan_costs.rs"]
mod plan_costs;
#[path = "plan_dp.rs"]
mod plan_dp;
#[path = "plan_paper_table.rs"]
mod plan_paper_table;
#[path = "plan_scenario_laws.rs"]
mod plan_scenario_laws;
#[path = "plan_strategies.rs"]
mod plan_strategies;
