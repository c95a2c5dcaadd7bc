//! Integration tests, one binary: live sources and the built-in trainer.
//! Each module is one test file of this folder (run one with `cargo test --test live -- MODULE::`).

#[path = "live_file.rs"]
mod live_file;
#[path = "live_ingest.rs"]
mod live_ingest;
#[path = "live_tcp.rs"]
mod live_tcp;
#[path = "trainer_learning.rs"]
mod trainer_learning;
#[path = "trainer_model.rs"]
mod trainer_model;
#[path = "trainer_serve.rs"]
mod trainer_serve;
