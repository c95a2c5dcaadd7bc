//! The worker thread: carries out [`Effect`]s off the UI thread and answers with [`Msg`]s.

use crate::app::{Effect, Msg, WriteJob};
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
        Arc<crate::trajectory::Trajectory>,
        Arc<crate::goodput::ThroughputTable>,
        u64,
    ),
    /// Load a session's data source, reducing dumps on the given device.
    Load(Box<crate::session::Resolved>, crate::compute::Device),
    /// Free what the app replaced (`App::take_retired`), off the drawing thread.
    Free(crate::app::state::Retired),
}

/// Carry out a write: nothing is replaced unless the job allows it (then the user is asked).
pub fn write(mut job: WriteJob) -> Msg {
    // Copies become files written like the others (asked about, atomic, in order).
    for (from, to) in std::mem::take(&mut job.copies) {
        if from == to {
            continue;
        }
        match std::fs::read_to_string(&from) {
            Ok(text) => job.files.push((to, text)),
            Err(source) => {
                return Msg::Written {
                    job: Box::new(job),
                    result: Err(crate::app::msg::WriteFailed { path: from, source }),
                };
            }
        }
    }
    let held_back = if job.overwrite {
        job.expected
            .iter()
            .find(|(p, hash)| crate::fsutil::changed_since(p, *hash))
            .map(|(p, _)| p)
    } else {
        job.files.iter().find(|(p, _)| p.exists()).map(|(p, _)| p)
    };
    if let Some(existing) = held_back {
        let existing = existing.clone();
        return Msg::WouldOverwrite {
            job: Box::new(job),
            existing,
        };
    }
    let result = job.files.iter().try_for_each(|(path, text)| {
        crate::fsutil::write_atomic(path, text.as_bytes()).map_err(|source| {
            crate::app::msg::WriteFailed {
                path: path.clone(),
                source,
            }
        })
    });
    Msg::Written {
        job: Box::new(job),
        result,
    }
}

/// What the write lane does, in order.
enum WriteWork {
    Files(WriteJob),
    Append(std::path::PathBuf, String),
}

/// Append `line` and a newline to the existing file `path`.
pub fn append(path: std::path::PathBuf, line: &str) -> Msg {
    use std::io::Write as _;
    let result = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .and_then(|mut f| writeln!(f, "{line}").and_then(|()| f.flush()));
    Msg::Appended { path, result }
}

/// One lane of work: a thread that runs `f` on its jobs in order and sends what it answers.
/// With `latest_wins`, jobs that queued up while it was busy are dropped but the newest (a
/// newer table, plan or load supersedes the older ones; the app ignores stale answers anyway).
fn lane<T: Send + 'static>(
    name: &str,
    results: Sender<Msg>,
    latest_wins: bool,
    f: impl Fn(T, &Sender<Msg>) -> Option<Msg> + Send + 'static,
) -> (Sender<T>, JoinHandle<()>) {
    let (tx, rx): (Sender<T>, Receiver<T>) = channel();
    let handle = std::thread::Builder::new()
        .name(format!("copus-{name}"))
        .spawn(move || {
            super::priority::lower_current_thread();
            while let Ok(mut job) = rx.recv() {
                if latest_wins {
                    while let Ok(newer) = rx.try_recv() {
                        job = newer;
                    }
                }
                if let Some(msg) = f(job, &results)
                    && results.send(msg).is_err()
                {
                    break;
                }
            }
        })
        .unwrap_or_else(|e| panic!("cannot start the {name} worker thread: {e}"));
    (tx, handle)
}

fn load(
    resolved: &crate::session::Resolved,
    device: crate::compute::Device,
    results: &Sender<Msg>,
) -> Msg {
    let progress = |p: crate::source::dump::Progress| {
        if p.bytes_total > 0 {
            let f = p.bytes_done as f64 / p.bytes_total as f64;
            let _ = results.send(Msg::Progress(f, "reducing the dump".into()));
        }
    };
    let loaded = crate::pipeline::load_with(resolved, device, &progress);
    Msg::SourceLoaded(Box::new(loaded))
}

/// Environment variable that makes the worker panic on start (for tests only).
pub const PANIC_TEST_VAR: &str = "COPUS_TEST_WORKER_PANIC";

/// Start the workers: one lane per kind of job (load, table, plan: latest wins; writes: all,
/// in order), so that a long dump load never holds up a table, a plan or a save. They stop
/// when the job sender is dropped; the handle joins them all.
pub fn spawn(results: Sender<Msg>) -> (Sender<Job>, JoinHandle<()>) {
    type LoadJob = (Box<crate::session::Resolved>, crate::compute::Device);
    type PlanJob = (
        Box<crate::session::Resolved>,
        Arc<crate::trajectory::Trajectory>,
        Arc<crate::goodput::ThroughputTable>,
        u64,
    );
    let (loads, load_h) = lane("load", results.clone(), true, |(r, d): LoadJob, res| {
        Some(load(&r, d, res))
    });
    let (tables, table_h) = lane(
        "table",
        results.clone(),
        true,
        |(generation, job): (u64, Box<TableJob>), _| {
            Some(Msg::TableReady {
                generation,
                table: Arc::new(job.compute()),
            })
        },
    );
    let (plans, plan_h) = lane(
        "plan",
        results.clone(),
        true,
        |(r, t, table, generation): PlanJob, _| {
            let plan = crate::pipeline::plan_with(&r, &t, &table);
            Some(Msg::PlanReady {
                generation,
                plan: Box::new(plan),
            })
        },
    );
    let (writes, write_h) = lane("write", results.clone(), false, |w: WriteWork, _| {
        Some(match w {
            WriteWork::Files(job) => write(job),
            WriteWork::Append(path, line) => append(path, &line),
        })
    });
    // Freeing runs on its own lane so that a large drop never delays a plan or a save.
    let (frees, free_h) = lane(
        "free",
        results,
        false,
        |r: crate::app::state::Retired, _| {
            drop(r);
            None
        },
    );
    let (tx, rx): (Sender<Job>, Receiver<Job>) = channel();
    let handle = std::thread::spawn(move || {
        // Test hook for the end-to-end check that a worker panic stops the explorer with a
        // message, a non-zero exit and the terminal restored (tests/reliability_tui.rs).
        if std::env::var_os(PANIC_TEST_VAR).is_some() {
            panic!("{PANIC_TEST_VAR} is set: deliberate worker panic");
        }
        for job in rx {
            // A closed lane means its thread is gone (the UI went away); stop routing.
            let sent = match job {
                Job::Load(r, d) => loads.send((r, d)).is_ok(),
                Job::Plan(r, t, table, g) => plans.send((r, t, table, g)).is_ok(),
                Job::Free(retired) => frees.send(retired).is_ok(),
                Job::Run(Effect::ComputeTable { generation }, Some(job)) => {
                    tables.send((generation, job)).is_ok()
                }
                Job::Run(Effect::Write(job), _) => writes.send(WriteWork::Files(job)).is_ok(),
                Job::Run(Effect::AppendLine { path, line }, _) => {
                    writes.send(WriteWork::Append(path, line)).is_ok()
                }
                Job::Run(_, _) => true,
            };
            if !sent {
                break;
            }
        }
        drop((loads, tables, plans, writes, frees));
        drop(free_h);
        // Writes must land before the explorer exits; a dump load still running is left to
        // stop on its own (its answer has nowhere to go).
        drop(load_h);
        for h in [table_h, plan_h, write_h] {
            let _ = h.join();
        }
    });
    (tx, handle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_busy_lane_answers_only_the_newest_of_the_jobs_queued_meanwhile() {
        let (results, answers) = channel();
        let (started_tx, started) = channel();
        let (jobs, handle) = lane("test", results, true, move |n: u64, _| {
            let _ = started_tx.send(n);
            std::thread::sleep(Duration::from_millis(100));
            Some(Msg::Progress(n as f64, String::new()))
        });
        jobs.send(1).expect("lane alive");
        assert_eq!(started.recv().ok(), Some(1), "the first job starts");
        // Queued while the lane is busy with job 1: only the newest survives.
        for n in 2..=5 {
            jobs.send(n).expect("lane alive");
        }
        drop(jobs);
        handle.join().expect("lane ends");
        let done: Vec<f64> = answers
            .try_iter()
            .filter_map(|m| match m {
                Msg::Progress(f, _) => Some(f),
                _ => None,
            })
            .collect();
        assert_eq!(done, [1.0, 5.0]);
    }

    #[test]
    fn writes_are_never_dropped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (results, answers) = channel();
        let (jobs, handle) = spawn(results);
        for i in 0..5 {
            let job = WriteJob {
                files: vec![(dir.path().join(format!("f{i}")), "x".into())],
                what: format!("w{i}"),
                overwrite: false,
                expected: Vec::new(),
                copies: Vec::new(),
                rebased_to: None,
                saved: None,
            };
            jobs.send(Job::Run(Effect::Write(job), None))
                .expect("alive");
        }
        drop(jobs);
        handle.join().expect("workers end");
        let written = answers
            .try_iter()
            .filter(|m| matches!(m, Msg::Written { result: Ok(()), .. }))
            .count();
        assert_eq!(written, 5);
    }
}
