//! Switch-point planning: when to change batch size and parallel configuration as B_crit
//! grows, and what each strategy costs (DESIGN.md §5).

pub mod costs;

pub use costs::ReconfigCosts;
