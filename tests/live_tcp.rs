//! Following a loopback TCP stats server that sends garbage between records, cuts a line in
//! half and drops the connection, then replays the run on reconnect: every valid step is
//! ingested exactly once, malformed lines are counted, nothing crashes.

use copus::source::live::{FollowOptions, LiveEvent, Target, parse_record, spawn_follower};
use copus::stats::StepStats;
use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};
use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

fn line(step: u64) -> String {
    let mut r = StepStats::new(step, 8.0, 64.0, 5.0, 1.0 + step as f64 * 1e-3);
    r.n_small = Some(8);
    format!("{}\n", serde_json::to_string(&r).expect("serialise"))
}

/// The server's stream for steps `0..to`: records with garbage of several kinds between them.
/// Returns the text and how many garbage lines it holds.
fn stream_text(to: u64) -> (String, u64) {
    let garbage = [
        "}{ not json",
        "{\"v\":1,\"step\":",
        "\u{1F600} emoji",
        r#"{"v":7,"step":1}"#,
    ];
    let (mut text, mut bad) = (String::new(), 0);
    for s in 0..to {
        text.push_str(&line(s));
        if s % 4 == 1 {
            text.push_str(garbage[(s as usize / 4) % garbage.len()]);
            text.push_str("\r\n\n"); // a blank line is not malformed
            bad += 1;
        }
    }
    (text, bad)
}

/// Send `bytes` in random pieces with short pauses, so lines arrive split.
fn send_in_pieces(conn: &mut TcpStream, bytes: &[u8], rng: &mut Xoshiro256PlusPlus) {
    let mut at = 0;
    while at < bytes.len() {
        let n = rng.random_range(1..200).min(bytes.len() - at);
        conn.write_all(&bytes[at..at + n]).expect("send");
        at += n;
        if rng.random_range(0..8) == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

fn collect_until(rx: &Receiver<LiveEvent>, steps: usize) -> (Vec<u64>, u64, Vec<String>) {
    let (mut got, mut bad, mut statuses) = (Vec::new(), 0, Vec::new());
    let deadline = Instant::now() + Duration::from_secs(10);
    while got.len() < steps {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "timed out with {} steps; statuses {statuses:?}",
            got.len()
        );
        match rx.recv_timeout(left) {
            Ok(LiveEvent::Record(r)) => got.push(r.step),
            Ok(LiveEvent::Malformed { .. } | LiveEvent::NonFinite { .. }) => bad += 1,
            Ok(LiveEvent::Status(s)) => statuses.push(s.text),
            Ok(
                LiveEvent::Duplicate { .. } | LiveEvent::Restarted { .. } | LiveEvent::Event { .. },
            ) => {}
            Err(e) => panic!("channel: {e}; statuses {statuses:?}"),
        }
    }
    std::thread::sleep(Duration::from_millis(50));
    for ev in rx.try_iter() {
        match ev {
            LiveEvent::Record(r) => got.push(r.step),
            LiveEvent::Malformed { .. } | LiveEvent::NonFinite { .. } => bad += 1,
            LiveEvent::Status(s) => statuses.push(s.text),
            LiveEvent::Duplicate { .. } | LiveEvent::Restarted { .. } | LiveEvent::Event { .. } => {
            }
        }
    }
    (got, bad, statuses)
}

fn fast() -> FollowOptions {
    FollowOptions {
        poll: Duration::from_millis(5),
        backoff_min: Duration::from_millis(5),
        backoff_max: Duration::from_millis(50),
        connect_timeout: Duration::from_millis(500),
    }
}

#[test]
fn garbage_and_a_dropped_connection_lose_no_step() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let addr = listener.local_addr().expect("addr");
    let server = std::thread::spawn(move || {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(9);
        // First connection: steps 0..30, then half a line, then the connection drops.
        let (mut conn, _) = listener.accept().expect("accept 1");
        let (text, bad1) = stream_text(30);
        send_in_pieces(&mut conn, text.as_bytes(), &mut rng);
        let cut = line(30);
        send_in_pieces(&mut conn, &cut.as_bytes()[..cut.len() / 2], &mut rng);
        drop(conn);
        // Second connection: the server replays its history, then carries on to step 60.
        let (mut conn, _) = listener.accept().expect("accept 2");
        let (text, bad2) = stream_text(60);
        send_in_pieces(&mut conn, text.as_bytes(), &mut rng);
        (bad1 + bad2, conn)
    });
    let (tx, rx) = channel();
    let follower =
        spawn_follower(Target::Tcp(addr.to_string()), parse_record, fast(), tx).expect("spawn");
    let (steps, malformed, statuses) = collect_until(&rx, 60);
    let (garbage_sent, _conn) = server.join().expect("server");
    follower.stop();
    assert_eq!(
        steps,
        (0..60).collect::<Vec<_>>(),
        "each step once; statuses {statuses:?}"
    );
    assert_eq!(
        malformed, garbage_sent,
        "every garbage line counted, the cut line not"
    );
    assert_eq!(
        statuses
            .iter()
            .filter(|s| s.starts_with("connected"))
            .count(),
        2,
        "{statuses:?}"
    );
    assert!(
        statuses
            .iter()
            .any(|s| s.contains("lost") && s.contains("incomplete line"))
    );
    assert!(
        statuses.iter().any(|s| s.contains("skipped 30 replayed")),
        "{statuses:?}"
    );
}

#[test]
fn keeps_retrying_until_the_server_comes_up() {
    // Find a free loopback port, release it, and start the server only later.
    let port = TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let (tx, rx) = channel();
    let target = Target::parse(&format!("tcp://:{port}")).expect("target");
    assert_eq!(target, Target::Tcp(format!("127.0.0.1:{port}")));
    let follower = spawn_follower(target, parse_record, fast(), tx).expect("spawn");
    std::thread::sleep(Duration::from_millis(150));
    let listener = TcpListener::bind(("127.0.0.1", port)).expect("rebind the port");
    let server = std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().expect("accept");
        let (text, _) = stream_text(5);
        conn.write_all(text.as_bytes()).expect("send");
        conn
    });
    let (steps, malformed, statuses) = collect_until(&rx, 5);
    let _conn = server.join().expect("server");
    follower.stop();
    assert_eq!(steps, [0, 1, 2, 3, 4]);
    assert_eq!(malformed, 1);
    assert!(statuses[0].contains("cannot connect"), "{statuses:?}");
}
