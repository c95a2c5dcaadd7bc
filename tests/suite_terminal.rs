//! Integration tests, one binary: the real binary in a tmux pseudo-terminal, and signals.
//! Each module is one test file of this folder (run one with `cargo test --test terminal -- MODULE::`).

mod drift_support;
mod reliability_support;
mod tmux_support;

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
#[path = "reliability_signals.rs"]
mod reliability_signals;
