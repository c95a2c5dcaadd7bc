//! Integration tests, one binary: the Python hook: protocol writer, and torch.distributed under gloo.
//! Each module is one test file of this folder (run one with `cargo test --test python -- MODULE::`).

#[path = "python_hook.rs"]
mod python_hook;
#[path = "python_torch.rs"]
mod python_torch;
