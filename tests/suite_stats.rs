//! Integration tests, one binary: the statistics engine: protocol, estimators, intervals, oracles; dumps.
//! Each module is one test file of this folder (run one with `cargo test --test stats -- MODULE::`).

mod dump_support;
mod reliability_support;
mod stats_support;

#[path = "coarsen.rs"]
mod coarsen;
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
