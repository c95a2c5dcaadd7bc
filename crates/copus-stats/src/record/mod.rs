//! The per-step record every source produces, and its per-layer squared norms.

pub mod layer_map;
pub mod step;
