//! Live attach in the explorer: a follower thread reads the run's protocol lines, and this
//! aggregator re-analyses the records with the one-sided (live) smoother a few times a second,
//! sending the new trajectory to the UI as a message.

use crate::app::Msg;
use crate::source::Loaded;
use crate::source::live::{FollowerHandle, LiveEvent, Target, spawn_default_follower};
use crate::source::measured::trajectory_from_report;
use crate::stats::{EstimatorSettings, SmootherKind, StepStats, analyze};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::time::{Duration, Instant};

/// How often the trajectory is re-estimated while records arrive.
pub const REFRESH: Duration = Duration::from_millis(300);

/// What the live view knows besides the trajectory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LiveCounts {
    /// Valid records received.
    pub steps: u64,
    /// Lines that were not valid records.
    pub malformed: u64,
    /// Records dropped as duplicates, plus records superseded by a restarted run.
    pub dropped: u64,
}

/// Follow `target`, re-estimate every [`REFRESH`] while records arrive, and send
/// `Msg::Live` to `ui` until the UI goes away. Returns the follower (stopped when dropped).
pub fn spawn(
    target: Target,
    settings: EstimatorSettings,
    seq_len: u32,
    ui: Sender<Msg>,
) -> Result<FollowerHandle, crate::source::live::LiveError> {
    let (tx, rx) = channel();
    let label = format!("live: {target}");
    let follower = spawn_default_follower(target, tx)?;
    let settings = EstimatorSettings {
        smoother: SmootherKind::OneSided,
        ..settings
    };
    std::thread::spawn(move || aggregate(rx, settings, seq_len, label, ui));
    Ok(follower)
}

fn aggregate(
    rx: Receiver<LiveEvent>,
    settings: EstimatorSettings,
    seq_len: u32,
    label: String,
    ui: Sender<Msg>,
) {
    let mut records: Vec<StepStats> = Vec::new();
    let mut counts = LiveCounts::default();
    let mut dirty = false;
    let mut last = Instant::now();
    loop {
        match rx.recv_timeout(REFRESH) {
            Ok(LiveEvent::Record(r)) => {
                records.push(r);
                crate::source::live::keep_bounded(&mut records);
                counts.steps += 1;
                dirty = true;
            }
            Ok(LiveEvent::Malformed { .. }) => {
                counts.malformed += 1;
                dirty = true;
            }
            Ok(LiveEvent::Duplicate { .. }) => {
                counts.dropped += 1;
                dirty = true;
            }
            Ok(LiveEvent::Restarted { step }) => {
                let before = records.len();
                records.retain(|r| r.step < step);
                let gone = (before - records.len()) as u64;
                counts.dropped += gone;
                counts.steps = records.len() as u64;
                dirty = true;
                let note = format!(
                    "the run restarted at step {step}: {gone} earlier records from that step on replaced"
                );
                if ui.send(Msg::LiveStatus(note)).is_err() {
                    return;
                }
            }
            Ok(LiveEvent::Status(s)) => {
                if ui.send(Msg::LiveStatus(s)).is_err() {
                    return;
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        if dirty && last.elapsed() >= REFRESH {
            dirty = false;
            last = Instant::now();
            let update = match analyze(&records, &settings) {
                Ok(report) => Ok(Loaded {
                    trajectory: trajectory_from_report(&report, seq_len, label.clone()),
                    analysis: Some(report),
                    seed_ema: Vec::new(),
                    note: None,
                }),
                Err(e) => Err(e.to_string()),
            };
            let msg = Msg::Live {
                update: Box::new(update),
                steps: counts.steps,
                malformed: counts.malformed,
                dropped: counts.dropped,
            };
            if ui.send(msg).is_err() {
                return;
            }
        }
    }
}
