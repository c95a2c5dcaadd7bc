//! The worker thread: carries out [`Effect`]s off the UI thread and answers with [`Msg`]s.

use crate::app::{Effect, Msg};
use crate::goodput::{Cluster, SearchSpace, throughput_table};
use crate::perf::{EfficiencyParams, HardwareProfile, ModelProfile, PerfContext};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread::JoinHandle;

/// What the worker needs to compute a throughput table (a snapshot, so the UI keeps going).
#[derive(Debug, Clone)]
pub struct TableJob {
    /// Hardware profile.
    pub hardware: HardwareProfile,
    /// Model profile.
    pub model: ModelProfile,
    /// Efficiency parameters.
    pub efficiency: EfficiencyParams,
    /// Cluster.
    pub cluster: Cluster,
    /// Search space.
    pub search: SearchSpace,
}

impl TableJob {
    /// Compute the throughput table (every layout × batch size) for these settings.
    pub fn compute(&self) -> crate::goodput::ThroughputTable {
        let ctx = PerfContext {
            hw: &self.hardware,
            model: &self.model,
            eff: &self.efficiency,
            gpus_per_node: self.cluster.gpus_per_node,
        };
        throughput_table(&ctx, &self.cluster, &self.search)
    }
}

/// A job for the worker.
pub enum Job {
    /// Run an effect; `table` carries the settings a `ComputeTable` needs.
    Run(Effect, Option<Box<TableJob>>),
    /// Plan switch points: the session, its raw trajectory and the throughput table.
    Plan(
        Box<crate::session::Resolved>,
        Box<crate::trajectory::Trajectory>,
        Arc<crate::goodput::ThroughputTable>,
        u64,
    ),
    /// Load a session's data source, reducing dumps on the given device.
    Load(Box<crate::session::Resolved>, crate::compute::Device),
}

/// Environment variable that makes the worker panic on start (for tests only).
pub const PANIC_TEST_VAR: &str = "COPUS_TEST_WORKER_PANIC";

/// Start the worker; it stops when the job sender is dropped.
pub fn spawn(results: Sender<Msg>) -> (Sender<Job>, JoinHandle<()>) {
    let (tx, rx): (Sender<Job>, Receiver<Job>) = channel();
    let handle = std::thread::spawn(move || {
        // Test hook for the end-to-end check that a worker panic stops the explorer with a
        // message, a non-zero exit and the terminal restored (tests/reliability_tui.rs).
        if std::env::var_os(PANIC_TEST_VAR).is_some() {
            panic!("{PANIC_TEST_VAR} is set: deliberate worker panic");
        }
        for job in rx {
            let (effect, job) = match job {
                Job::Run(effect, job) => (effect, job),
                Job::Plan(resolved, trajectory, table, generation) => {
                    let plan = crate::plan::plan_with(&resolved, &trajectory, &table)
                        .map_err(|e| e.to_string());
                    let msg = Msg::PlanReady {
                        generation,
                        plan: Box::new(plan),
                    };
                    if results.send(msg).is_err() {
                        break;
                    }
                    continue;
                }
                Job::Load(resolved, device) => {
                    let progress = |p: crate::source::dump::Progress| {
                        if p.bytes_total > 0 {
                            let f = p.bytes_done as f64 / p.bytes_total as f64;
                            let _ = results.send(Msg::Progress(f, "reducing the dump".into()));
                        }
                    };
                    let loaded = crate::source::load_with(&resolved, device, &progress)
                        .map_err(|e| e.to_string());
                    if results.send(Msg::SourceLoaded(Box::new(loaded))).is_err() {
                        break;
                    }
                    continue;
                }
            };
            let msg = match (effect, job) {
                (Effect::LoadSource | Effect::ComputePlan { .. }, _) => continue,
                (Effect::ComputeTable { generation }, Some(job)) => Msg::TableReady {
                    generation,
                    table: Arc::new(job.compute()),
                },
                (Effect::ComputeTable { .. }, None) => continue,
                (Effect::Write { files, what }, _) => Msg::Written(
                    files
                        .iter()
                        .try_for_each(|(path, text)| {
                            crate::fsutil::write_atomic(path, text.as_bytes())
                                .map_err(|e| format!("{}: {e}", path.display()))
                        })
                        .map(|()| what),
                ),
            };
            if results.send(msg).is_err() {
                break;
            }
        }
    });
    (tx, handle)
}
