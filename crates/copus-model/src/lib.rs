//! copus's model engine: the throughput and memory model of 3D-parallel training (`perf`),
//! goodput over batch size × layout (`goodput`), the B_crit trajectory type (`trajectory`) and
//! unit formatting (`format`).
//!
//! It knows nothing of the app: data flows in from `copus-stats` and out to `copus-plan` and
//! the app.
#![warn(missing_docs)]

pub mod format;
pub mod goodput;
pub mod perf;
pub mod trajectory;
