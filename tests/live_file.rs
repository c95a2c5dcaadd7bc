//! Following a growing protocol file while a writer appends to it, truncates it and rotates
//! it: every valid step is ingested exactly once, malformed lines are counted.

use copus::source::live::{FollowOptions, LiveEvent, Target, parse_record, spawn_follower};
use copus::stats::StepStats;
use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

fn line(step: u64) -> String {
    let mut r = StepStats::new(step, 4.0, 32.0, 2.0 + step as f64, 1.0);
    r.loss = Some(3.0 - step as f64 * 0.01);
    format!("{}\n", serde_json::to_string(&r).expect("serialise"))
}

/// Append steps `from..to` to `path` in randomly split writes (so lines arrive in pieces),
/// with a garbage line after every 7th step. Returns the number of garbage lines.
fn write_steps(path: &Path, from: u64, to: u64, seed: u64) -> u64 {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("open");
    let mut garbage = 0;
    for s in from..to {
        let mut text = line(s);
        if s % 7 == 3 {
            text.push_str(&format!("garbage after step {s} {{\n"));
            garbage += 1;
        }
        let cut = rng.random_range(1..text.len());
        f.write_all(&text.as_bytes()[..cut]).expect("write");
        f.flush().expect("flush");
        std::thread::sleep(Duration::from_micros(rng.random_range(0..1500)));
        f.write_all(&text.as_bytes()[cut..]).expect("write");
    }
    garbage
}

#[derive(Default)]
struct Seen {
    steps: Vec<u64>,
    malformed: u64,
    statuses: Vec<String>,
}

impl Seen {
    /// Drain events until `done` holds, failing after 10 s.
    fn until(&mut self, rx: &Receiver<LiveEvent>, what: &str, done: impl Fn(&Seen) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !done(self) {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "timed out waiting for {what}; statuses {:?}",
                self.statuses
            );
            match rx.recv_timeout(left) {
                Ok(LiveEvent::Record(r)) => self.steps.push(r.step),
                Ok(LiveEvent::Malformed { .. } | LiveEvent::NonFinite { .. }) => {
                    self.malformed += 1
                }
                Ok(LiveEvent::Status(s)) => self.statuses.push(s.text),
                Ok(
                    LiveEvent::Duplicate { .. }
                    | LiveEvent::Restarted { .. }
                    | LiveEvent::Event { .. },
                ) => {}
                Err(e) => panic!("follower channel: {e}; statuses {:?}", self.statuses),
            }
        }
    }
}

fn fast() -> FollowOptions {
    FollowOptions {
        poll: Duration::from_millis(5),
        ..FollowOptions::default()
    }
}

#[test]
fn follows_appends_through_truncation_and_rotation_exactly_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path: PathBuf = dir.path().join("stats.ndjson");
    let (tx, rx) = channel();
    let follower =
        spawn_follower(Target::File(path.clone()), parse_record, fast(), tx).expect("spawn");
    let mut seen = Seen::default();
    seen.until(&rx, "the waiting status", |s| {
        s.statuses.iter().any(|m| m.contains("waiting"))
    });

    // 1. The file appears and grows while it is followed.
    let p = path.clone();
    let writer = std::thread::spawn(move || write_steps(&p, 0, 40, 1));
    seen.until(&rx, "steps 0..40", |s| s.steps.len() == 40);
    let mut garbage = writer.join().expect("writer");

    // 2. Truncation: the writer starts the file over; the follower reads it from the start.
    drop(File::create(&path).expect("truncate"));
    seen.until(&rx, "the truncation status", |s| {
        s.statuses.iter().any(|m| m.contains("truncated"))
    });
    let p = path.clone();
    let writer = std::thread::spawn(move || write_steps(&p, 40, 80, 2));
    seen.until(&rx, "steps 40..80", |s| s.steps.len() == 80);
    garbage += writer.join().expect("writer");

    // 3. Rotation: last lines land in the old file just before it is renamed away; the new
    //    file at the path carries on. Both are read to their end.
    garbage += write_steps(&path, 80, 86, 3);
    std::fs::rename(&path, dir.path().join("stats.ndjson.1")).expect("rotate");
    garbage += write_steps(&path, 86, 120, 4);
    seen.until(&rx, "steps 80..120", |s| s.steps.len() >= 120);
    std::thread::sleep(Duration::from_millis(50));
    while let Ok(ev) = rx.try_recv() {
        match ev {
            LiveEvent::Record(r) => seen.steps.push(r.step),
            LiveEvent::Malformed { .. } | LiveEvent::NonFinite { .. } => seen.malformed += 1,
            LiveEvent::Status(s) => seen.statuses.push(s.text),
            LiveEvent::Duplicate { .. } | LiveEvent::Restarted { .. } | LiveEvent::Event { .. } => {
            }
        }
    }
    follower.stop();

    assert_eq!(
        seen.steps,
        (0..120).collect::<Vec<_>>(),
        "each step once, in order"
    );
    assert_eq!(seen.malformed, garbage);
    #[cfg(unix)]
    assert!(
        seen.statuses.iter().any(|m| m.contains("rotated")),
        "{:?}",
        seen.statuses
    );
}

#[test]
fn a_partial_last_line_waits_for_its_newline() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("s.ndjson");
    let text = line(5);
    let (head, tail) = text.split_at(text.len() / 2);
    std::fs::write(&path, format!("{}{head}", line(4))).expect("write");
    let (tx, rx) = channel();
    let follower =
        spawn_follower(Target::File(path.clone()), parse_record, fast(), tx).expect("spawn");
    let mut seen = Seen::default();
    seen.until(&rx, "step 4", |s| s.steps == [4]);
    std::thread::sleep(Duration::from_millis(40));
    assert!(
        rx.try_iter()
            .all(|e| !matches!(e, LiveEvent::Record(_) | LiveEvent::Malformed { .. }))
    );
    OpenOptions::new()
        .append(true)
        .open(&path)
        .expect("open")
        .write_all(tail.as_bytes())
        .expect("write");
    seen.until(&rx, "step 5", |s| s.steps == [4, 5]);
    assert_eq!(seen.malformed, 0);
    follower.stop();
}
