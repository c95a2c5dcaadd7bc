//! Explorer state, messages and update (Elm-style). The view (`crate::tui`) only reads
//! [`App`]; everything that changes it goes through [`update::update`] as a [`msg::Msg`].
//! Slow work (throughput tables, writing files) is requested as [`update::Effect`]s that a
//! worker thread carries out, answering with messages.

pub mod advice;
mod answers;
pub mod branches;
pub mod explain;
pub mod export;
pub mod filter;
pub mod goto;
pub mod lessons;
pub mod measured_view;
pub mod msg;
pub mod ranked;
pub mod rebase;
pub mod recommend;
pub mod state;
pub mod update;
pub mod whatif;

pub use msg::{Msg, PromptEdit};
pub use state::App;
pub use state::{Confirm, Overlay, OverlayKind};
pub use state::{Prompt, PromptKind};
pub use update::{Effect, WriteJob, update};
