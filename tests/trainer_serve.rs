//! The trainer's stats server: any number of loopback clients, each receiving the run so far
//! and then every new record, read by the live follower.

use copus::source::live::{FollowOptions, LiveEvent, Target, parse_record, spawn_follower};
use copus::trainer::{RecordSink, StatsServer, Trainer, TrainerConfig};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

fn steps_until(rx: &Receiver<LiveEvent>, n: usize) -> Vec<u64> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut steps = Vec::new();
    while steps.len() < n {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "timed out with {steps:?}");
        match rx.recv_timeout(left).expect("event") {
            LiveEvent::Record(r) => steps.push(r.step),
            LiveEvent::Malformed { reason, .. } | LiveEvent::NonFinite { reason, .. } => {
                panic!("malformed: {reason}")
            }
            LiveEvent::Status(_)
            | LiveEvent::Duplicate { .. }
            | LiveEvent::Restarted { .. }
            | LiveEvent::Event { .. } => {}
        }
    }
    steps
}

#[test]
fn late_clients_get_the_history_then_the_live_records() {
    let mut server = StatsServer::bind("tcp://:0").expect("bind");
    assert!(server.is_loopback());
    let cfg = TrainerConfig {
        micro_batches: 2,
        micro_batch_size: 4,
        hidden: 8,
        ..TrainerConfig::default()
    };
    let mut trainer = Trainer::new(cfg).expect("trainer");
    for _ in 0..5 {
        server.write_record(&trainer.step()).expect("publish");
    }
    let target = Target::parse(&format!("tcp://{}", server.local_addr())).expect("target");
    let opts = FollowOptions {
        poll: Duration::from_millis(5),
        ..FollowOptions::default()
    };
    let (tx1, rx1) = channel();
    let (tx2, rx2) = channel();
    let f1 = spawn_follower(target.clone(), parse_record, opts.clone(), tx1).expect("spawn");
    let f2 = spawn_follower(target, parse_record, opts, tx2).expect("spawn");
    assert_eq!(steps_until(&rx1, 5), [0, 1, 2, 3, 4]);
    assert_eq!(steps_until(&rx2, 5), [0, 1, 2, 3, 4]);
    assert_eq!(server.clients(), 2);
    for _ in 0..5 {
        server.write_record(&trainer.step()).expect("publish");
    }
    assert_eq!(steps_until(&rx1, 5), [5, 6, 7, 8, 9]);
    assert_eq!(steps_until(&rx2, 5), [5, 6, 7, 8, 9]);
    f1.stop();
    f2.stop();
}
