//! Integration tests, one binary: the command line as a user runs it, and the layering guards.
//! Each module is one test file of this folder (run one with `cargo test --test cli -- MODULE::`).

mod dump_support;
mod reliability_support;
mod stats_support;

#[path = "cli_consistency.rs"]
mod cli_consistency;
#[path = "device_cli.rs"]
mod device_cli;
#[path = "live_cli.rs"]
mod live_cli;
#[path = "live_docs.rs"]
mod live_docs;
#[path = "module_layering.rs"]
mod module_layering;
#[path = "perf_cli.rs"]
mod perf_cli;
#[path = "plan_cli.rs"]
mod plan_cli;
#[path = "reliability_cli.rs"]
mod reliability_cli;
#[path = "stats_cli.rs"]
mod stats_cli;
#[path = "watch_summary.rs"]
mod watch_summary;
