//! copus: a terminal explorer for the coupling between batch size (gradient noise scale,
//! critical batch size) and 3D parallelism (hardware throughput) in large-model training.
//!
//! Data flows one way: `source` → `stats` → `trajectory` → `perf`/`goodput` → `plan` →
//! `app` (state) → `tui` (view). `cli` is the command-line edge.
//! `session` (configuration) and `pipeline` (a resolved session run through `source` → `plan`)
//! sit above `source` and `plan`, which do not depend on them.
#![warn(missing_docs)]

pub mod app;
pub mod cli;
pub mod compute;
pub mod format;
pub mod fsutil;
pub mod goodput;
pub mod malloc_tuning;
pub mod perf;
pub mod pipeline;
pub mod plan;
pub mod profiles;
pub mod session;
pub mod signals;
pub mod source;
pub mod stats;
pub mod trainer;
pub mod trajectory;
pub mod tui;
pub mod validate;
