//! copus: a terminal explorer for the coupling between batch size (gradient noise scale,
//! critical batch size) and 3D parallelism (hardware throughput) in large-model training.
//!
//! Data flows one way: `source` → `stats` → `trajectory` → `perf`/`goodput` → `plan` →
//! `app` (state) → `ui` (view); `runtime` runs the event loop and the background work. `cli` is the command-line edge.
//! `session` (configuration) and `pipeline` (a resolved session run through `source` → `plan`)
//! sit above `source` and `plan`, which do not depend on them.
//!
//! The engines are crates of their own under `crates/` and know nothing of the app:
//! `copus-stats` (records, protocol, estimators), `copus-compute` (CPU and CUDA reductions),
//! `copus-model` (throughput and memory model, goodput), `copus-plan` (the planner) and
//! `copus-io` (file handling). They are re-exported here under their module names.
#![warn(missing_docs)]

pub use copus_compute as compute;
pub use copus_io as fsutil;
pub use copus_model::{format, goodput, perf, trajectory};
pub use copus_plan as plan;
pub use copus_stats as stats;

pub mod app;
pub mod cli;
pub mod config;
pub mod malloc_tuning;
pub mod pipeline;
pub mod profiles;
pub mod runtime;
pub mod session;
pub mod session_edit;
pub mod signals;
pub mod source;
pub mod trainer;
pub mod ui;
pub mod validate;
