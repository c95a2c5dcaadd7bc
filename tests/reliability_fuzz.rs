//! Property-based fuzzing on stable Rust (proptest) of every parser that reads outside data:
//! the stats protocol (NDJSON lines and streams), the live line splitter and exactly-once
//! filter (what the file and TCP followers run on the bytes they receive), .npy and
//! safetensors headers with a reduction of what they accept, and RON sessions. Each target
//! gets arbitrary bytes and structure-aware mutations of valid inputs; the property is always
//! "no panic, and whatever is accepted is consistent".
//!
//! The budget per target is `COPUS_FUZZ_CASES` (default 256 in `cargo test`). The long run
//! recorded in docs/RELIABILITY.md sets it to 1,000,000.

use copus::session::Session;
use copus::source::dump::{DumpOptions, npy, reduce_dump, scan, st_file};
use copus::source::live::{Admit, Dedupe, LineIngest, LiveEvent, parse_record};
use copus::stats::{StepStats, parse_line, read_ndjson};
use proptest::prelude::*;
use proptest::test_runner::Config;
use std::path::Path;

fn config() -> Config {
    let cases = std::env::var("COPUS_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256);
    Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    }
}

// ---- stats protocol -------------------------------------------------------------------------

const VALID: &str = r#"{"v":1,"step":7,"b_small":4,"b_big":32,"sq_small":2.5,"sq_big":0.5,"tokens":1e6,"loss":2.1,"n_small":8,"layers":{"blk.0":{"sq_small":1.5,"sq_big":0.25}},"skipped":null}"#;

/// A JSON value likely to break a field: odd numbers, wrong types, nesting.
fn json_value() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<f64>().prop_map(|x| format!("{x:e}")),
        any::<i64>().prop_map(|x| x.to_string()),
        any::<u64>().prop_map(|x| x.to_string()),
        Just("1e400".to_string()),
        Just("-1e400".to_string()),
        Just("null".to_string()),
        Just("\"NaN\"".to_string()),
        Just("[]".to_string()),
        Just("{}".to_string()),
        Just("{\"a\":{\"sq_small\":-1,\"sq_big\":1}}".to_string()),
        "\"[^\"\\\\]{0,12}\"".prop_map(|s| s),
        Just("true".to_string()),
    ]
}

/// Structure-aware mutation of a valid record: set a field to an odd value, drop a field,
/// cut the line, or splice bytes in.
fn mutated_record() -> impl Strategy<Value = String> {
    let fields = prop::sample::select(vec![
        "v", "step", "b_small", "b_big", "sq_small", "sq_big", "tokens", "loss", "n_small",
        "layers", "skipped", "config", "lr",
    ]);
    prop_oneof![
        (fields.clone(), json_value()).prop_map(|(f, v)| {
            let mut obj: serde_json::Map<String, serde_json::Value> =
                serde_json::from_str(VALID).expect("valid");
            match serde_json::from_str(&v) {
                Ok(val) => {
                    obj.insert(f.to_string(), val);
                    serde_json::Value::Object(obj).to_string()
                }
                // Values serde_json cannot hold (1e400): splice the text in.
                Err(_) => VALID.replacen("\"step\":7", &format!("\"{f}\":{v},\"step\":7"), 1),
            }
        }),
        fields.prop_map(|f| {
            let mut obj: serde_json::Map<String, serde_json::Value> =
                serde_json::from_str(VALID).expect("valid");
            obj.remove(f);
            serde_json::Value::Object(obj).to_string()
        }),
        (0..VALID.len()).prop_map(|n| VALID[..n].to_string()),
        (0..VALID.len(), any::<Vec<u8>>()).prop_map(|(at, junk)| {
            let mut b = VALID.as_bytes().to_vec();
            b.splice(at..at, junk);
            String::from_utf8_lossy(&b).into_owned()
        }),
    ]
}

fn check_record(r: &StepStats) {
    for x in [r.b_small, r.b_big, r.sq_small, r.sq_big] {
        assert!(x.is_finite(), "accepted a non-finite value: {r:?}");
    }
    assert!(r.b_small > 0.0 && r.b_big >= r.b_small, "{r:?}");
    assert!(r.sq_small >= 0.0 && r.sq_big >= 0.0, "{r:?}");
    for l in r.layers.values() {
        assert!(l.sq_small >= 0.0 && l.sq_big >= 0.0, "{r:?}");
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn ndjson_line_arbitrary_text(s in any::<String>()) {
        if let Ok(r) = parse_line(&s) {
            check_record(&r);
        }
    }

    #[test]
    fn ndjson_line_mutated_records(s in mutated_record()) {
        if let Ok(r) = parse_line(&s) {
            check_record(&r);
        }
    }

    #[test]
    fn ndjson_stream_arbitrary_bytes(lines in prop::collection::vec(
        prop_oneof![mutated_record().prop_map(String::into_bytes), any::<Vec<u8>>()], 0..8)) {
        let bytes = lines.join(&b'\n');
        let out = read_ndjson(std::io::Cursor::new(&bytes)).expect("in-memory read");
        prop_assert!(out.records.len() + out.malformed + out.non_finite <= out.lines);
        out.records.iter().for_each(check_record);
    }

    /// What the file and TCP followers run on received bytes: the line splitter with the
    /// protocol parser, fed in arbitrary chunks, then the exactly-once filter.
    #[test]
    fn live_ingest_and_dedupe(lines in prop::collection::vec(
        prop_oneof![mutated_record(), "[ -~]{0,40}"], 0..12), cuts in prop::collection::vec(0usize..64, 0..8)) {
        let bytes = lines.join("\n").into_bytes();
        let mut ingest = LineIngest::new(parse_record);
        let mut events = Vec::new();
        let mut rest: &[u8] = &bytes;
        for c in cuts {
            let (a, b) = rest.split_at(c.min(rest.len()));
            ingest.feed(a, &mut |e| events.push(e));
            rest = b;
        }
        ingest.feed(rest, &mut |e| events.push(e));
        let mut d = Dedupe::default();
        let mut last_line = 0;
        for e in &events {
            match e {
                LiveEvent::Record(r) => {
                    check_record(r);
                    let again = d.admit(r);
                    prop_assert!(again != Admit::Duplicate || d.highest().is_some());
                }
                LiveEvent::Malformed { line_no, .. } | LiveEvent::NonFinite { line_no, .. } => {
                    prop_assert!(*line_no > last_line);
                    last_line = *line_no;
                }
                _ => {}
            }
        }
    }
}

// ---- dumps ----------------------------------------------------------------------------------

fn npy_bytes(
    version: u8,
    descr: &str,
    shape: &[u64],
    header_len_delta: i32,
    data: usize,
) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
    let shape = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let mut h = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}\n");
    while h.len() % 16 != 0 {
        h.insert(h.len() - 1, ' ');
    }
    let declared = (h.len() as i64 + header_len_delta as i64).max(0) as u64;
    let mut b = b"\x93NUMPY".to_vec();
    b.push(version);
    b.push(0);
    if version == 1 {
        b.extend_from_slice(&(declared as u16).to_le_bytes());
    } else {
        b.extend_from_slice(&(declared as u32).to_le_bytes());
    }
    b.extend_from_slice(h.as_bytes());
    b.extend(std::iter::repeat_n(0x3cu8, data));
    b
}

fn dim() -> impl Strategy<Value = u64> {
    prop_oneof![
        0u64..6,
        any::<u64>(),
        Just(1u64 << 62),
        Just(u64::MAX),
        Just(1u64 << 32)
    ]
}

fn descr() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("<f4".to_string()),
        Just("<f2".to_string()),
        Just(">f4".to_string()),
        Just("|u1".to_string()),
        "[ -~]{0,6}".prop_map(|s| s.replace('\'', "")),
    ]
}

thread_local! {
    /// One scratch directory per test thread, reused by every case (on tmpfs where there is
    /// one): creating a directory per case would make file cases 100× slower.
    static SCRATCH: tempfile::TempDir = {
        let shm = Path::new("/dev/shm");
        if shm.is_dir() {
            tempfile::tempdir_in(shm).expect("tempdir")
        } else {
            tempfile::tempdir().expect("tempdir")
        }
    };
}

fn scratch() -> std::path::PathBuf {
    SCRATCH.with(|d| d.path().to_path_buf())
}

fn write_tmp(dir: &Path, name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).expect("write");
    p
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn npy_header_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let p = write_tmp(&scratch(), "a.npy", &bytes);
        if let Ok(t) = npy::read_header(&p) {
            prop_assert!(t.offset + t.nbytes <= bytes.len() as u64);
        }
    }

    #[test]
    fn npy_header_mutated(version in prop_oneof![Just(1u8), Just(2u8), Just(3u8), any::<u8>()],
                          descr in descr(), shape in prop::collection::vec(dim(), 0..4),
                          delta in prop_oneof![Just(0i32), -20i32..20, any::<i32>()],
                          data in 0usize..96) {
        let bytes = npy_bytes(version, &descr, &shape, delta, data);
        let p = write_tmp(&scratch(), "a.npy", &bytes);
        if let Ok(t) = npy::read_header(&p) {
            prop_assert!(t.offset + t.nbytes <= bytes.len() as u64);
            prop_assert_eq!(t.nbytes, t.elems() as u64 * t.dtype.size() as u64);
        }
    }

    /// Two ranks of mutated .npy files through scan and the whole reduction.
    #[test]
    fn npy_dump_scan_and_reduce(a in (descr(), prop::collection::vec(dim(), 0..3), 0usize..64),
                                b in (descr(), prop::collection::vec(dim(), 0..3), 0usize..64),
                                samples in prop_oneof![Just("4".to_string()), "[ -~]{0,6}"]) {
        let dir = scratch().join("dump");
        for (k, (d, s, n)) in [a, b].into_iter().enumerate() {
            let part = dir.join(format!("step_1/p{k}"));
            std::fs::create_dir_all(&part).expect("mkdir");
            write_tmp(&part, "w.npy", &npy_bytes(1, &d, &s, 0, n));
            write_tmp(&part, "samples.txt", samples.as_bytes());
        }
        if let Ok(index) = scan(&dir) {
            let backend = copus::compute::select(copus::compute::Device::Cpu).expect("cpu").backend;
            let opts = DumpOptions { ema_decay: Some(0.9), ..DumpOptions::default() };
            let _ = reduce_dump(&index, &opts, backend.as_ref(), &|_| {});
        }
    }

    #[test]
    fn safetensors_header_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let p = write_tmp(&scratch(), "a.safetensors", &bytes);
        if let Ok(f) = st_file::read_header(&p) {
            for t in &f.tensors {
                prop_assert!(t.offset + t.nbytes <= bytes.len() as u64);
            }
        }
    }

    #[test]
    fn safetensors_header_mutated(dtype in prop_oneof![Just("F32"), Just("F16"), Just("BF16"), Just("I64"), Just("X")],
                                  shape in prop::collection::vec(dim(), 0..3),
                                  offsets in (prop_oneof![Just(0u64), any::<u64>()], prop_oneof![0u64..64, any::<u64>()]),
                                  samples in prop_oneof![Just("\"4\"".to_string()), Just("\"-1\"".to_string()), Just("3".to_string()), "\"[ -~]{0,5}\""],
                                  len_delta in prop_oneof![Just(0i64), -10i64..10, any::<i64>()],
                                  data in 0usize..64) {
        let shape: Vec<String> = shape.iter().map(u64::to_string).collect();
        let header = format!(
            "{{\"__metadata__\":{{\"samples\":{samples}}},\"w\":{{\"dtype\":\"{dtype}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}}}",
            shape.join(","), offsets.0, offsets.1
        );
        let mut bytes = ((header.len() as i64).wrapping_add(len_delta) as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(header.as_bytes());
        bytes.extend(std::iter::repeat_n(0u8, data));
        let p = write_tmp(&scratch(), "a.safetensors", &bytes);
        if let Ok(f) = st_file::read_header(&p) {
            for t in &f.tensors {
                prop_assert!(t.offset + t.nbytes <= bytes.len() as u64);
            }
        }
    }
}

// ---- sessions -------------------------------------------------------------------------------

fn demo_text() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("sessions/demo.ron"))
        .expect("demo")
}

/// Structure-aware mutation of the demo session: a number replaced by an odd one, a span
/// deleted, an identifier renamed, or bytes spliced in.
fn mutated_session() -> impl Strategy<Value = String> {
    let text = demo_text();
    let numbers: Vec<(usize, usize)> = {
        let b = text.as_bytes();
        let mut v = Vec::new();
        let mut i = 0;
        while i < b.len() {
            if b[i].is_ascii_digit() && (i == 0 || !b[i - 1].is_ascii_alphanumeric()) {
                let s = i;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'.') {
                    i += 1;
                }
                v.push((s, i));
            } else {
                i += 1;
            }
        }
        v
    };
    let odd = prop_oneof![
        Just("0".to_string()),
        Just("-1".to_string()),
        Just("NaN".to_string()),
        Just("inf".to_string()),
        Just("4294967295".to_string()),
        Just("18446744073709551615".to_string()),
        Just("1e308".to_string()),
        any::<u32>().prop_map(|x| x.to_string()),
        any::<f64>().prop_map(|x| format!("{x:e}")),
    ];
    let t1 = text.clone();
    let t2 = text.clone();
    let t3 = text.clone();
    let len = text.len();
    prop_oneof![
        (prop::sample::select(numbers), odd)
            .prop_map(move |((a, b), n)| { format!("{}{}{}", &t1[..a], n, &t1[b..]) }),
        (0..len, 0usize..40).prop_map(move |(a, n)| {
            let mut b = t2.as_bytes().to_vec();
            let end = (a + n).min(b.len());
            b.drain(a..end);
            String::from_utf8_lossy(&b).into_owned()
        }),
        (0..len, "[a-z_]{1,10}: [0-9]{1,3},").prop_map(move |(a, junk)| {
            let mut b = t3.as_bytes().to_vec();
            b.splice(a..a, junk.into_bytes());
            String::from_utf8_lossy(&b).into_owned()
        }),
    ]
}

fn check_session(text: &str) {
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("sessions/fuzz.ron");
    let Ok(s) = Session::from_ron(text, &base) else {
        return;
    };
    let Ok(r) = s.resolve(&base) else {
        return;
    };
    // Accepted sessions are in range: the cluster fits u32, the scenario samples.
    let c = &r.session.cluster;
    assert!(c.nodes.checked_mul(c.gpus_per_node).is_some());
    if let copus::session::DataSource::Scenario(sc) = &r.session.source
        && let Ok(t) = sc.trajectory(r.model.seq_len)
    {
        assert!(
            t.points
                .iter()
                .all(|p| p.b_crit.is_finite() && p.b_crit > 0.0)
        );
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn session_arbitrary_text(s in any::<String>()) {
        check_session(&s);
    }

    #[test]
    fn session_mutated_demo(s in mutated_session()) {
        check_session(&s);
    }
}

// ---- TCP follower ---------------------------------------------------------------------------

/// Serve `chunks` over loopback twice: the first connection is cut after `cut` chunks, the
/// second replays everything (as the trainer and the hook do). Returns what the follower
/// delivered once both connections are done.
fn follow_tcp_session(chunks: &[Vec<u8>], cut: usize) -> Vec<LiveEvent> {
    use copus::source::live::{FollowOptions, Target, spawn_follower};
    use std::io::Write;
    use std::time::Duration;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let owned: Vec<Vec<u8>> = chunks.to_vec();
    let server = std::thread::spawn(move || {
        for conn in 0..2 {
            let Ok((mut s, _)) = listener.accept() else {
                return;
            };
            let n = if conn == 0 {
                cut.min(owned.len())
            } else {
                owned.len()
            };
            for c in &owned[..n] {
                if s.write_all(c).is_err() {
                    break;
                }
            }
            let _ = s.flush();
        }
    });
    let (tx, rx) = std::sync::mpsc::channel();
    let opts = FollowOptions {
        poll: Duration::from_millis(2),
        backoff_min: Duration::from_millis(1),
        backoff_max: Duration::from_millis(5),
        connect_timeout: Duration::from_millis(500),
    };
    let follower = spawn_follower(Target::Tcp(addr), parse_record, opts, tx).expect("spawn");
    server.join().expect("server");
    // Let the follower read what the second connection sent.
    std::thread::sleep(Duration::from_millis(30));
    follower.stop();
    rx.try_iter().collect()
}

fn tcp_config() -> Config {
    let c = config();
    // Each case opens two connections: a tenth of the budget, at least 16.
    Config {
        cases: (c.cases / 10).max(16),
        ..c
    }
}

proptest! {
    #![proptest_config(tcp_config())]

    /// Exactly once over a real socket: no (step, values) pair is delivered twice, however the
    /// stream is cut, replayed or corrupted.
    #[test]
    fn tcp_follower_replay_and_garbage(chunks in prop::collection::vec(
        prop_oneof![
            mutated_record().prop_map(|s| format!("{s}\n").into_bytes()),
            (0u64..20).prop_map(|s| format!("{{\"v\":1,\"step\":{s},\"b_small\":4,\"b_big\":32,\"sq_small\":2,\"sq_big\":1}}\n").into_bytes()),
            prop::collection::vec(any::<u8>(), 0..40),
        ], 0..10), cut in 0usize..10) {
        let events = follow_tcp_session(&chunks, cut);
        let mut seen = std::collections::HashSet::new();
        for e in &events {
            if let LiveEvent::Restarted { .. } = e {
                seen.clear();
            }
            if let LiveEvent::Record(r) = e {
                check_record(r);
                prop_assert!(seen.insert((r.step, copus::source::live::fingerprint(r))),
                    "step {} delivered twice", r.step);
            }
        }
    }
}

// ---- TCP follower, in process ---------------------------------------------------------------

/// One chunk of a server's stream: a record line, a small-step record (so replays and
/// restarts collide), or raw bytes.
fn tcp_chunk() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        mutated_record().prop_map(|s| format!("{s}\n").into_bytes()),
        (0u64..20, 1u32..3).prop_map(|(s, v)| format!(
            "{{\"v\":1,\"step\":{s},\"b_small\":4,\"b_big\":32,\"sq_small\":{v},\"sq_big\":1}}\n"
        )
        .into_bytes()),
        prop::collection::vec(any::<u8>(), 0..40),
    ]
}

proptest! {
    #![proptest_config(config())]

    /// The TCP follower's framing, exactly-once filter and replay/cut-line reports, driven in
    /// memory by the same state machine as the socket follower: up to four connections, each
    /// a prefix of the server's stream (a replay, as the trainer and the hook do) split at
    /// arbitrary points. No (step, values) pair is delivered twice between restarts, every
    /// connection is reported opened and lost, and line numbers grow within a connection.
    #[test]
    fn tcp_follower_chunks_in_process(chunks in prop::collection::vec(tcp_chunk(), 0..10),
        conns in prop::collection::vec((0usize..11, prop::collection::vec(0usize..64, 0..4)), 1..5)) {
        let stream: Vec<u8> = chunks.concat();
        let connections: Vec<Vec<Vec<u8>>> = conns
            .iter()
            .map(|(upto, cuts)| {
                let mut rest: &[u8] = &chunks[..(*upto).min(chunks.len())].concat();
                let mut out = Vec::new();
                for c in cuts {
                    let (a, b) = rest.split_at((*c).min(rest.len()));
                    out.push(a.to_vec());
                    rest = b;
                }
                out.push(rest.to_vec());
                out
            })
            .collect();
        prop_assert!(connections.iter().all(|c| c.concat().len() <= stream.len()));
        let events = copus::source::live::follow_tcp_chunks("127.0.0.1:9", &connections, parse_record);
        let mut seen = std::collections::HashSet::new();
        let (mut opened, mut lost, mut last_line) = (0, 0, 0);
        for e in &events {
            match e {
                LiveEvent::Restarted { step } => seen.retain(|(s, _)| s < step),
                LiveEvent::Record(r) => {
                    check_record(r);
                    prop_assert!(seen.insert((r.step, copus::source::live::fingerprint(r))),
                        "step {} delivered twice", r.step);
                }
                LiveEvent::Malformed { line_no, .. } | LiveEvent::NonFinite { line_no, .. } => {
                    prop_assert!(*line_no > last_line);
                    last_line = *line_no;
                }
                LiveEvent::Status(s) if s.text.starts_with("connected to tcp://") => {
                    opened += 1;
                    last_line = 0;
                }
                LiveEvent::Status(s) if s.text.starts_with("connection to tcp://") => lost += 1,
                _ => {}
            }
        }
        prop_assert_eq!(opened, connections.len());
        prop_assert_eq!(lost, connections.len());
    }
}

/// The in-process driver and a real socket deliver the same records for the same stream:
/// the fuzzed state machine is the one that runs behind the socket.
#[test]
fn tcp_in_process_matches_the_socket_follower() {
    let lines: Vec<Vec<u8>> = (1..=6u64)
        .map(|s| {
            format!(
                "{{\"v\":1,\"step\":{s},\"b_small\":4,\"b_big\":32,\"sq_small\":2,\"sq_big\":1}}\n"
            )
            .into_bytes()
        })
        .chain([b"garbage\n".to_vec(), b"{\"v\":1,\"st".to_vec()])
        .collect();
    let records = |events: &[LiveEvent]| -> Vec<u64> {
        events
            .iter()
            .filter_map(|e| match e {
                LiveEvent::Record(r) => Some(r.step),
                _ => None,
            })
            .collect()
    };
    let socket = follow_tcp_session(&lines, 3);
    let memory = copus::source::live::follow_tcp_chunks(
        "x:1",
        &[lines[..3].to_vec(), lines.clone()],
        parse_record,
    );
    assert_eq!(records(&socket), vec![1, 2, 3, 4, 5, 6]);
    assert_eq!(records(&memory), records(&socket));
    let dups = |events: &[LiveEvent]| {
        events
            .iter()
            .filter(|e| matches!(e, LiveEvent::Duplicate { .. }))
            .count()
    };
    assert_eq!(dups(&memory), 3);
    assert_eq!(dups(&socket), dups(&memory));
    let cut = memory.iter().any(|e| matches!(e, LiveEvent::Status(s) if s.text.contains("dropped an incomplete line (10 bytes)")));
    assert!(cut, "{memory:?}");
}

// ---- calibration inputs ---------------------------------------------------------------------

const MEASURED_CSV: &str = "dp,tp,pp,mbs,batch,step_time_s,zero,recompute,vpp\n\
                            8,1,1,1,64,3.1,1,selective,1\n4,2,1,2,64,3.4,0,none,1\n\
                            2,2,2,1,64,4.2,1,full,2\n";

/// Structure-aware mutation of a measurement CSV: a field replaced by an odd value, a comma
/// inserted or removed, a line duplicated or cut.
fn mutated_csv() -> impl Strategy<Value = String> {
    let odd = prop_oneof![
        Just("".to_string()),
        Just("0".to_string()),
        Just("-1".to_string()),
        Just("NaN".to_string()),
        Just("inf".to_string()),
        Just("3,5".to_string()),
        Just("4294967296".to_string()),
        Just("18446744073709551616".to_string()),
        Just("1e308".to_string()),
        "[a-z]{1,6}",
        any::<f64>().prop_map(|x| format!("{x:e}")),
    ];
    let fields: Vec<usize> = MEASURED_CSV
        .char_indices()
        .filter(|(_, c)| *c == ',' || *c == '\n')
        .map(|(i, _)| i)
        .collect();
    (prop::sample::select(fields), odd, 0usize..4).prop_map(|(at, v, how)| {
        let t = MEASURED_CSV;
        match how {
            0 => format!("{}{v}{}", &t[..at], &t[at..]),
            1 => format!("{}{}", &t[..at], &t[(at + 1).min(t.len())..]),
            2 => format!("{}{}", &t[..at], t.repeat(2)),
            _ => t[..at].to_string(),
        }
    })
}

fn check_csv(text: &str) {
    if let Ok(rows) = copus::perf::measurements::parse_csv(text, "fuzz.csv") {
        assert!(rows.len() <= copus::perf::measurements::MAX_MEASUREMENTS);
        for m in rows {
            assert!(m.step_time_s.is_finite() && m.step_time_s > 0.0, "{m:?}");
            assert!(m.config.zero <= 3, "{m:?}");
        }
    }
}

/// A calibration file as `copus calibrate --out` writes it, with one span mutated.
fn mutated_calibration() -> impl Strategy<Value = String> {
    let good = copus::perf::calibration_file::CalibrationFile {
        hardware: "h100-sxm".into(),
        model: "llama-7b".into(),
        n: 6,
        rms_rel_error: 0.05,
        cv_rel_error: 0.07,
        profile_rms_rel_error: 0.06,
        fitted: vec!["max_eff".into()],
        params: copus::perf::EfficiencyParams::default(),
        stack: Some("megatron-core".into()),
        recompute: Vec::new(),
        unwritten: Vec::new(),
    }
    .to_ron()
    .expect("ron");
    let numbers: Vec<usize> = good
        .char_indices()
        .filter(|(i, c)| c.is_ascii_digit() && (*i == 0 || good.as_bytes()[i - 1] == b' '))
        .map(|(i, _)| i)
        .collect();
    let odd = prop_oneof![
        Just("-0.5".to_string()),
        Just("NaN".to_string()),
        Just("inf".to_string()),
        Just("1e308".to_string()),
        Just("0".to_string()),
        Just("max_ef: 1, ".to_string()),
        any::<f64>().prop_map(|x| format!("{x:e}")),
    ];
    (prop::sample::select(numbers), odd).prop_map(move |(at, v)| {
        // The mutated value goes before the old digits, which `// ` comments out up to the
        // end of the line.
        format!("{}{v}, // {}", &good[..at], &good[at..])
    })
}

fn check_calibration(dir: &Path, text: &str) {
    let path = write_tmp(dir, "fuzz-cal.ron", text.as_bytes());
    if let Ok(c) = copus::validate::profile::load_calibration(&path) {
        let p = &c.params;
        assert!(p.max_eff > 0.0 && p.max_eff <= 1.0, "{p:?}");
        assert!(
            p.microbatch_overhead_s.is_finite() && p.microbatch_overhead_s >= 0.0,
            "{p:?}"
        );
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn calibration_csv_arbitrary_text(s in any::<String>()) {
        check_csv(&s);
    }

    #[test]
    fn calibration_csv_mutated(s in mutated_csv()) {
        check_csv(&s);
    }

    #[test]
    fn calibration_file_mutated(s in mutated_calibration()) {
        check_calibration(&scratch(), &s);
    }

    #[test]
    fn nccl_tests_output_arbitrary_text(s in any::<String>(), lines in prop::collection::vec(
        prop_oneof![
            Just("# nThread 1 nGpus 1 minBytes 8 maxBytes 128 step: 2(factor)".to_string()),
            Just("#  Rank  0 Group  0 Pid 1 on host0 device  0 [0x1] NVIDIA H100".to_string()),
            Just("#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong".to_string()),
            "[ 0-9.e+-]{0,80}",
        ], 0..12)) {
        let text = format!("{}\n{s}", lines.join("\n"));
        let _ = copus::perf::nccl::parse(&text, "all_reduce_perf.txt", None);
    }
}

// ---- branch records (copus cbs) and advice-loop events --------------------------------------

const BRANCH: &str = r#"{"v":1,"branch":{"from_step":300,"batch":64,"seed":1},"step":16,"samples":1024,"tokens":1024,"loss":2.0417,"lr":0.0354}"#;

/// A small branched experiment (3 batches × 2 seeds × 3 evaluations) with one line mutated.
fn mutated_branch_file() -> impl Strategy<Value = String> {
    let mut lines = Vec::new();
    for batch in [8u64, 32, 128] {
        for seed in 0..2u64 {
            for (k, samples) in [0u64, 512, 1024].iter().enumerate() {
                let loss = 3.0 - 0.1 * k as f64 * (1.0 + 8.0 / batch as f64) + 0.001 * seed as f64;
                lines.push(format!(
                    r#"{{"v":1,"branch":{{"from_step":5,"batch":{batch},"seed":{seed}}},"step":{k},"samples":{samples},"loss":{loss}}}"#
                ));
            }
        }
    }
    let n = lines.len();
    (0..n, json_value(), 0..BRANCH.len()).prop_map(move |(i, v, cut)| {
        let mut l = lines.clone();
        l[i] = match cut % 4 {
            0 => l[i].replace("\"loss\":", &format!("\"loss\":{v},\"x\":")),
            1 => l[i].replace("\"batch\":", &format!("\"batch\":{v},\"b\":")),
            2 => l[i].replace("\"samples\":", &format!("\"samples\":{v},\"s\":")),
            _ => BRANCH[..cut].to_string(),
        };
        l.join("\n")
    })
}

fn check_branches(text: &str) {
    let Ok(records) = copus::stats::estimate::cbs::parse(text) else {
        return;
    };
    for r in &records {
        assert!(r.branch.batch >= 1 && r.samples.is_finite() && r.samples >= 0.0);
        assert!(r.loss.is_finite());
    }
    if let Ok(report) = copus::stats::estimate::cbs::measure(&records, 0.01, 0.9, 20) {
        for p in &report.points {
            let t = &p.threshold_cbs;
            assert!(t.ci[0] <= t.batch && t.batch <= t.ci[1], "{p:?}");
            if let Some(f) = p.b_noise_fit {
                assert!(f.value.is_finite() && f.value > 0.0, "{p:?}");
            } else {
                assert!(p.b_noise_note.is_some(), "{p:?}");
            }
        }
    }
}

const ADVICE: &str = r#"{"v":1,"advice":{"at_step":433,"batch":64,"micro_batch":2,"accumulation":1,"layout":{"dp":32,"tp":2,"pp":1},"expected_gain":0.05,"reason":"B_crit 400","apply":"batch","dry_run":false}}"#;
const APPLIED: &str = r#"{"v":1,"applied":{"at_step":434,"batch":64,"accumulation":1}}"#;

/// An advice or applied line with one value replaced, or cut short.
fn mutated_event() -> impl Strategy<Value = String> {
    let keys = [
        "at_step",
        "batch",
        "micro_batch",
        "accumulation",
        "dp",
        "expected_gain",
        "apply",
        "v",
    ];
    (
        prop::bool::ANY,
        prop::sample::select(keys.to_vec()),
        json_value(),
        0..ADVICE.len(),
    )
        .prop_map(|(advice, key, v, cut)| {
            let base = if advice { ADVICE } else { APPLIED };
            let needle = format!("\"{key}\":");
            match base.find(&needle) {
                Some(at) if cut % 5 != 0 => {
                    let start = at + needle.len();
                    let end = base[start..]
                        .find([',', '}'])
                        .map_or(base.len(), |e| start + e);
                    format!("{}{v}{}", &base[..start], &base[end..])
                }
                _ => base[..cut.min(base.len())].to_string(),
            }
        })
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn branch_records_arbitrary_text(s in any::<String>()) {
        check_branches(&s);
    }

    #[test]
    fn branch_records_mutated(s in mutated_branch_file()) {
        check_branches(&s);
    }

    /// An advice-loop line is an event (counted apart), malformed, or — if the mutation made
    /// it a valid step record — a record; never a panic, and the stream reader's counts add up.
    #[test]
    fn advice_events_mutated(line in mutated_event()) {
        // One line: a raw newline inside a replaced value would make it two.
        let line = line.replace(['\n', '\r'], " ");
        let _ = parse_line(&line);
        let next = VALID.replace("\"step\":7", "\"step\":8");
        let text = format!("{VALID}\n{line}\n{next}\n");
        let outcome = read_ndjson(std::io::Cursor::new(text.into_bytes())).expect("in-memory read");
        prop_assert_eq!(outcome.records.len(), 2);
        prop_assert!(outcome.malformed + outcome.event_lines + outcome.non_finite <= 1);
    }
}
