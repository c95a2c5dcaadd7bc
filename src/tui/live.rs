//! Live attach in the explorer: a follower thread reads the run's protocol lines, and this
//! aggregator re-analyses the records with the one-sided (live) smoother a few times a second,
//! sending the new trajectory to the UI as a message.

use crate::app::Msg;
use crate::source::Loaded;
use crate::source::live::{FollowerHandle, LiveEvent, Target, spawn_default_follower};
use crate::source::measured::{run_seq_len, seq_len_note, trajectory_from_report};
use crate::stats::{EstimatorSettings, SmootherKind, StepStats, analyze};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::time::{Duration, Instant};

/// How often the trajectory is re-estimated while records arrive.
pub const REFRESH: Duration = Duration::from_millis(300);

/// After this long without a record the run is reported as ended or paused.
pub const IDLE: Duration = Duration::from_secs(10);

/// Add record `r` to the run in `records`. A step at or below the last one means the run was
/// restarted (or a new run writes to the same target): the old records are dropped and the
/// new run is followed from its first step; returns the note saying so.
pub fn accept(records: &mut Vec<StepStats>, r: StepStats) -> Option<String> {
    let note = match records.last() {
        Some(last) if r.step <= last.step => {
            let note = format!(
                "restarted run detected (step {} after {}): following it as a new run",
                r.step, last.step
            );
            records.clear();
            Some(note)
        }
        _ => None,
    };
    records.push(r);
    note
}

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
    let mut last_record: Option<Instant> = None;
    let mut told_idle = false;
    loop {
        match rx.recv_timeout(REFRESH) {
            Ok(LiveEvent::Record(r)) => {
                if let Some(note) = accept(&mut records, r) {
                    counts = LiveCounts::default();
                    if ui.send(Msg::LiveStatus(note)).is_err() {
                        return;
                    }
                }
                crate::source::live::keep_bounded(&mut records);
                counts.steps += 1;
                dirty = true;
                last_record = Some(Instant::now());
                told_idle = false;
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
            Err(RecvTimeoutError::Timeout) => {
                if !told_idle && last_record.is_some_and(|t| t.elapsed() >= IDLE) {
                    told_idle = true;
                    let note = format!(
                        "no new records for {} s: the run ended or is paused",
                        IDLE.as_secs()
                    );
                    if ui.send(Msg::LiveStatus(note)).is_err() {
                        return;
                    }
                }
            }
            Err(RecvTimeoutError::Disconnected) => return,
        }
        if dirty && last.elapsed() >= REFRESH {
            dirty = false;
            last = Instant::now();
            let update = match analyze(&records, &settings) {
                Ok(report) => {
                    let (run_seq, origin) = run_seq_len(&report, None, seq_len);
                    Ok(Loaded {
                        trajectory: trajectory_from_report(&report, run_seq, label.clone()),
                        analysis: Some(report),
                        seed_ema: Vec::new(),
                        note: Some(seq_len_note(run_seq, origin)),
                        calibration: None,
                    })
                }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_going_back_starts_a_new_run() {
        let rec = |step| StepStats::new(step, 4.0, 32.0, 10.0, 2.0);
        let mut records = Vec::new();
        for s in 0..5 {
            assert_eq!(accept(&mut records, rec(s)), None);
        }
        let note = accept(&mut records, rec(0)).expect("a restart is reported");
        assert!(note.contains("step 0 after 4"), "{note}");
        assert_eq!(records.len(), 1, "the old run is dropped");
        assert_eq!(accept(&mut records, rec(1)), None);
    }
}
