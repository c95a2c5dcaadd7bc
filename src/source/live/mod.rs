//! Live attach: follow a running training job's stats (protocol v1, one JSON [`StepStats`]
//! per line) from a growing file or a TCP stats server, on a worker thread that sends
//! [`LiveEvent`]s over a channel, so the explorer never blocks on I/O.
//!
//! ```no_run
//! use copus::source::live::{spawn_default_follower, LiveEvent, Target};
//! let (tx, rx) = std::sync::mpsc::channel();
//! let target = Target::parse("tcp://:7000")?; // loopback
//! let follower = spawn_default_follower(target, tx)?;
//! for event in rx {
//!     if let LiveEvent::Record(step) = event {
//!         println!("step {} sq_big {}", step.step, step.sq_big);
//!     }
//! }
//! follower.stop();
//! # Ok::<(), copus::source::live::LiveError>(())
//! ```

pub mod aggregate;
mod dedupe;
mod file;
pub mod history;
mod lines;
mod record;
mod target;
mod tcp;

pub use dedupe::{Admit, Dedupe, fingerprint};
pub use lines::{LineIngest, MAX_LINE_BYTES};
pub use record::{check_record, parse_record};
pub use target::{DEFAULT_HOST, Target, is_loopback, parse_tcp_address};

use crate::stats::record::step::StepStats;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A parser's error, as the followers need it: its text, and whether it rejected a record
/// only for a NaN or ±Inf value (a non-finite step, skipped like `analyze` skips it).
pub trait RecordError: std::fmt::Display {
    /// Whether the line was a record with a non-finite value.
    fn is_non_finite(&self) -> bool {
        false
    }

    /// The advice-loop event the line is (kind, its `at_step`), if it is one.
    fn event(&self) -> Option<(&'static str, Option<u64>)> {
        None
    }
}

impl RecordError for LiveError {
    fn is_non_finite(&self) -> bool {
        matches!(
            self,
            LiveError::Protocol(crate::stats::ProtocolError::NonFinite { .. })
        )
    }

    fn event(&self) -> Option<(&'static str, Option<u64>)> {
        match self {
            LiveError::Protocol(crate::stats::ProtocolError::Event { kind, at_step }) => {
                Some((kind, *at_step))
            }
            _ => None,
        }
    }
}

impl RecordError for String {}

/// The state of a live link, as the explorer's title shows it (◌, ◉, ○).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkState {
    /// Waiting for the file or the server, retrying, reconnecting.
    Waiting,
    /// Connected or following: records can flow.
    Flowing,
    /// Nothing new for a while: the run ended or is paused.
    Quiet,
}

/// A live link's state and what happened, in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkStatus {
    /// The state.
    pub state: LinkState,
    /// What happened ("connected to tcp://…", "… was truncated: reading again").
    pub text: String,
}

impl LinkStatus {
    /// A status in `state` saying `text`.
    pub fn new(state: LinkState, text: impl Into<String>) -> Self {
        LinkStatus {
            state,
            text: text.into(),
        }
    }
}

impl std::fmt::Display for LinkStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// What a follower thread reports.
// Nearly every event is a `Record`, sent in batches: boxing it (to shrink the rare variants)
// measured 10 % slower through `watch` (BENCHMARKS.md, issue 32).
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum LiveEvent {
    /// A valid record (it may carry a producer's `skipped` flag).
    Record(StepStats),
    /// A complete line that is not a valid record: counted and shown, never fatal.
    Malformed {
        /// 1-based line number in the current stream (file generation or TCP connection).
        line_no: u64,
        /// Why it was rejected.
        reason: String,
    },
    /// A record whose values are NaN or ±Inf: skipped and counted as non-finite (as `analyze`
    /// does), not as malformed.
    NonFinite {
        /// 1-based line number in the current stream.
        line_no: u64,
        /// What is non-finite (the field and step).
        reason: String,
    },
    /// An advice-loop line (advice written by `watch --advise`, a change the hook applied):
    /// not a record, not malformed.
    Event {
        /// 1-based line number in the current stream.
        line_no: u64,
        /// "advice" or "applied".
        kind: &'static str,
        /// Its `at_step`, when it has one.
        at_step: Option<u64>,
    },
    /// Progress of the link: waiting, connected, truncated, rotated, reconnecting...
    Status(LinkStatus),
    /// A record dropped because its step was already delivered with the same values (the
    /// stream was replayed after a reconnect, or the file rewritten and renamed).
    Duplicate {
        /// Its step.
        step: u64,
    },
    /// The producer restarted: `step` was delivered before with other values. Drop what was
    /// received from `step` on; the [`LiveEvent::Record`] that follows starts the new run.
    Restarted {
        /// The step the new run starts at.
        step: u64,
    },
}

impl LiveEvent {
    /// The step of a [`LiveEvent::NonFinite`] record, where its line named one (read back from
    /// the reason, which ends in " at step N" when the step could be read, as
    /// [`crate::stats::ProtocolError::NonFinite`] words it); `None` for every other event.
    pub fn non_finite_step(&self) -> Option<u64> {
        let LiveEvent::NonFinite { reason, .. } = self else {
            return None;
        };
        // Without a step the reason ends in the quoted field name, never in digits.
        let (_, tail) = reason.rsplit_once(" at step ")?;
        tail.parse().ok()
    }
}

/// Errors of live attach: bad targets, bad records, I/O.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// The target string is not a file path or `tcp://HOST:PORT`.
    #[error("bad live target {target:?}: {reason}")]
    Target {
        /// As given by the user.
        target: String,
        /// What is wrong.
        reason: String,
    },
    /// The line is not a valid protocol v1 record.
    #[error(transparent)]
    Protocol(crate::stats::ProtocolError),
    /// An I/O operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        source: std::io::Error,
    },
}

/// Most records a live consumer keeps for its full analysis (`copus watch`, the explorer):
/// 262,144 steps (about 130 MB with four layers per record, and as much again while they are
/// analysed). Past it the oldest are forgotten (and counted), so a run of any length is
/// followed in bounded memory; the full analysis then covers the newest records, while the
/// incremental estimate and its binned history ([`history`]) cover every step.
pub const MAX_KEPT_RECORDS: usize = 1 << 18;

/// Keep at most [`MAX_KEPT_RECORDS`] (dropping the oldest in batches of an eighth, so the cost
/// is amortised); returns how many were dropped now.
pub fn keep_bounded(records: &mut Vec<StepStats>) -> u64 {
    keep_at_most(records, MAX_KEPT_RECORDS)
}

/// [`keep_bounded`] with an explicit limit.
pub fn keep_at_most(records: &mut Vec<StepStats>, max: usize) -> u64 {
    if records.len() <= max + max / 8 {
        return 0;
    }
    let n = records.len() - max;
    records.drain(..n);
    n as u64
}

/// Timing of a follower. The defaults suit interactive use; tests shorten them.
#[derive(Debug, Clone)]
pub struct FollowOptions {
    /// How long to wait before looking again at a file with no new data, and the read
    /// timeout of a TCP connection (how quickly a stop request is noticed).
    pub poll: Duration,
    /// First delay before reconnecting to a TCP server; doubles on each failure.
    pub backoff_min: Duration,
    /// Longest delay between reconnection attempts.
    pub backoff_max: Duration,
    /// Limit on one TCP connection attempt.
    pub connect_timeout: Duration,
}

impl Default for FollowOptions {
    fn default() -> Self {
        Self {
            poll: Duration::from_millis(50),
            backoff_min: Duration::from_millis(100),
            backoff_max: Duration::from_secs(2),
            connect_timeout: Duration::from_secs(1),
        }
    }
}

/// A running follower thread. Dropping it asks the thread to stop (without waiting).
pub struct FollowerHandle {
    stop: Arc<AtomicBool>,
    join: Option<JoinHandle<()>>,
}

impl FollowerHandle {
    /// Ask the thread to stop and wait for it (at most about one poll interval).
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
    }

    /// Whether the thread has ended (stopped, or its channel's receiver was dropped).
    pub fn is_finished(&self) -> bool {
        self.join.as_ref().is_none_or(|j| j.is_finished())
    }
}

impl Drop for FollowerHandle {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Follow `target` on a new thread with the default parser ([`parse_record`]) and timing.
pub fn spawn_default_follower(
    target: Target,
    tx: Sender<LiveEvent>,
) -> Result<FollowerHandle, LiveError> {
    spawn_follower(target, parse_record, FollowOptions::default(), tx)
}

/// Follow `target` on a new thread, parsing each complete line with `parser` and sending
/// events to `tx`. The thread ends when [`FollowerHandle::stop`] is called, the handle is
/// dropped, or `tx`'s receiver is dropped.
pub fn spawn_follower<P, E>(
    target: Target,
    parser: P,
    opts: FollowOptions,
    tx: Sender<LiveEvent>,
) -> Result<FollowerHandle, LiveError>
where
    P: Fn(&str) -> Result<StepStats, E> + Send + Sync + 'static,
    E: RecordError,
{
    spawn_with_sink(target, parser, opts, Sink::One(tx))
}

/// Follow `target` with the default parser and timing, sending events in batches (one per
/// chunk read, in order): one channel operation per chunk rather than per line, which is
/// what a consumer ingesting at full speed wants.
pub fn spawn_default_follower_batched(
    target: Target,
    tx: Sender<Vec<LiveEvent>>,
) -> Result<FollowerHandle, LiveError> {
    spawn_with_sink(
        target,
        parse_record,
        FollowOptions::default(),
        Sink::Batch(tx, Vec::new()),
    )
}

fn spawn_with_sink<P, E>(
    target: Target,
    parser: P,
    opts: FollowOptions,
    sink: Sink,
) -> Result<FollowerHandle, LiveError>
where
    P: Fn(&str) -> Result<StepStats, E> + Send + Sync + 'static,
    E: RecordError,
{
    let stop = Arc::new(AtomicBool::new(false));
    let mut em = Emitter {
        sink,
        stop: Arc::clone(&stop),
        closed: false,
        dedupe: Dedupe::default(),
    };
    let join = std::thread::Builder::new()
        .name(format!("copus-follow {target}"))
        .spawn(move || {
            match &target {
                Target::File(path) => file::follow_file(path, parser, &opts, &mut em),
                Target::Tcp(addr) => tcp::follow_tcp(addr, parser, &opts, &mut em),
            }
            em.flush();
        })
        .map_err(|source| LiveError::Io {
            context: "cannot start the follower thread".into(),
            source,
        })?;
    Ok(FollowerHandle {
        stop,
        join: Some(join),
    })
}

/// Where a follower's events go: one at a time, or gathered and sent per chunk read.
enum Sink {
    One(Sender<LiveEvent>),
    Batch(Sender<Vec<LiveEvent>>, Vec<LiveEvent>),
}

/// Events gathered before a batch is sent even within one chunk.
const BATCH_MAX: usize = 4096;

/// Run the TCP follower's byte handling (line framing, exactly-once filter, replay and cut-line
/// reports) on `connections` held in memory instead of sockets: each connection is a list of
/// chunks as `read` would return them, and ends as if the server closed it. Returns the events
/// the follower would send, in order. The same state machine as a real TCP follower, so it can
/// be fuzzed in-process at millions of cases.
pub fn follow_tcp_chunks<P, E>(
    addr: &str,
    connections: &[Vec<Vec<u8>>],
    parser: P,
) -> Vec<LiveEvent>
where
    P: Fn(&str) -> Result<StepStats, E> + Sync,
    E: RecordError,
{
    let (tx, rx) = std::sync::mpsc::channel();
    let mut em = Emitter {
        sink: Sink::One(tx),
        stop: Arc::new(AtomicBool::new(false)),
        closed: false,
        dedupe: Dedupe::default(),
    };
    let mut conn = tcp::TcpConnection::new(parser);
    for chunks in connections {
        conn.connected(addr, &mut em);
        for c in chunks {
            conn.received(c, &mut em);
        }
        conn.lost(addr, "closed by the server", &mut em);
    }
    drop(em);
    rx.into_iter().collect()
}

/// The follower thread's side of the channel, plus its stop flag.
pub(crate) struct Emitter {
    sink: Sink,
    stop: Arc<AtomicBool>,
    closed: bool,
    /// Exactly-once filter over every stream of this follower.
    dedupe: Dedupe,
}

impl Emitter {
    fn should_stop(&self) -> bool {
        self.closed || self.stop.load(Ordering::Relaxed)
    }

    fn send(&mut self, ev: LiveEvent) {
        let full = match &mut self.sink {
            Sink::One(tx) => {
                if tx.send(ev).is_err() {
                    self.closed = true;
                }
                return;
            }
            Sink::Batch(_, pending) => {
                pending.push(ev);
                pending.len() >= BATCH_MAX
            }
        };
        if full {
            self.flush();
        }
    }

    /// Send the gathered events (batched sink); called after each chunk, before waiting.
    pub(crate) fn flush(&mut self) {
        if let Sink::Batch(tx, pending) = &mut self.sink
            && !pending.is_empty()
            && tx.send(std::mem::take(pending)).is_err()
        {
            self.closed = true;
        }
    }

    /// Send `ev`, passing records through the exactly-once filter: a duplicate becomes
    /// [`LiveEvent::Duplicate`], a restart is announced by [`LiveEvent::Restarted`]. Returns
    /// the verdict for a record.
    fn deliver(&mut self, ev: LiveEvent) -> Option<Admit> {
        let LiveEvent::Record(r) = ev else {
            self.send(ev);
            return None;
        };
        let verdict = self.dedupe.admit(&r);
        match verdict {
            Admit::New => self.send(LiveEvent::Record(r)),
            Admit::Duplicate => self.send(LiveEvent::Duplicate { step: r.step }),
            Admit::Restart => {
                self.send(LiveEvent::Restarted { step: r.step });
                self.send(LiveEvent::Record(r));
            }
        }
        Some(verdict)
    }

    fn status(&mut self, state: LinkState, text: String) {
        self.send(LiveEvent::Status(LinkStatus { state, text }));
    }

    /// Sleep for `d` (after sending what is gathered), waking early (every 10 ms at most) if
    /// asked to stop.
    fn sleep(&mut self, d: Duration) {
        self.flush();
        let end = Instant::now() + d;
        while !self.should_stop() {
            let now = Instant::now();
            if now >= end {
                return;
            }
            std::thread::sleep((end - now).min(Duration::from_millis(10)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_non_finite_event_names_its_step() {
        let line = r#"{"v":1,"step":392,"b_small":4,"b_big":32,"sq_small":2.0,"sq_big":NaN}"#;
        let err = crate::stats::parse_line(line).expect_err("NaN is not a record");
        assert!(err.is_non_finite(), "{err}");
        let ev = LiveEvent::NonFinite {
            line_no: 7,
            reason: err.to_string(),
        };
        assert_eq!(ev.non_finite_step(), Some(392));
        let no_step = crate::stats::ProtocolError::NonFinite {
            field: "layers.at step 5.sq_big".into(),
            step: None,
            why: None,
        };
        let ev = LiveEvent::NonFinite {
            line_no: 8,
            reason: no_step.to_string(),
        };
        assert_eq!(ev.non_finite_step(), None);
        assert_eq!(LiveEvent::Duplicate { step: 3 }.non_finite_step(), None);
    }

    #[test]
    fn kept_records_are_bounded_and_the_newest_stay() {
        let mut v: Vec<StepStats> = Vec::new();
        let mut evicted = 0;
        for s in 0..1000 {
            v.push(StepStats::new(s, 4.0, 32.0, 2.0, 1.0));
            evicted += keep_at_most(&mut v, 100);
            assert!(v.len() <= 100 + 100 / 8);
        }
        assert_eq!(evicted + v.len() as u64, 1000);
        assert_eq!(v.last().map(|r| r.step), Some(999));
        assert_eq!(v.first().map(|r| r.step), Some(evicted));
    }
}
