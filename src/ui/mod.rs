//! The views: ratatui widgets that draw the app state, and nothing else (no I/O, no threads;
//! the event loop, workers and live aggregation are in [`crate::runtime`]). Colours come from
//! the [`theme`]; the key table that the help page and footer show is [`keymap`].

pub use crate::format;
pub mod estimators;
pub mod explain;
pub mod geometry;
pub mod heatmap;
pub mod help;
pub mod keymap;
pub mod palette;
pub mod panel;
pub mod plan;
pub mod polyline;
pub mod ranked;
pub mod recommendation;
pub mod shares;
pub mod snapshot;
pub mod theme;
pub mod throughput;
pub mod timeline;
pub mod timeline_marks;
pub mod view;
pub mod whatif;
