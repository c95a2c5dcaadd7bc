//! Headless ingest of protocol v1 lines: parse + check + count, against a same-run baseline
//! that only splits the bytes into lines. Target: ≥ 100,000 lines/s.
//!
//! Run: `cargo bench --bench ingest`. Lines look like the built-in trainer's (three layers,
//! loss, lr, tokens, step time) with 1 % garbage mixed in.

use copus::source::live::{LineIngest, LiveEvent, parse_record};
use copus::stats::{LayerSq, StepStats};
use divan::Bencher;
use divan::counter::ItemsCount;
use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};
use std::sync::LazyLock;

const LINES: usize = 100_000;
const CHUNK: usize = 64 * 1024;

/// The stream (as a file or socket would deliver it) and the number of valid records in it.
static STREAM: LazyLock<(Vec<u8>, usize)> = LazyLock::new(|| {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(1);
    let (mut text, mut valid) = (String::new(), 0);
    for step in 0..LINES as u64 {
        if step % 100 == 99 {
            text.push_str("{\"v\":1,\"step\": garbage\n");
            continue;
        }
        let mut r = StepStats::new(
            step,
            16.0,
            128.0,
            rng.random_range(0.5..2.0),
            rng.random_range(0.01..0.5),
        );
        r.n_small = Some(8);
        r.tokens = Some(128.0 * (step + 1) as f64);
        r.loss = Some(rng.random_range(2.0..4.0));
        r.lr = Some(0.05);
        r.step_time_s = Some(rng.random_range(0.001..0.01));
        for name in ["embedding", "hidden", "output"] {
            let l = LayerSq {
                sq_small: rng.random_range(0.0..1.0),
                sq_big: rng.random_range(0.0..0.1),
            };
            r.layers.insert(name.to_owned(), l);
        }
        text.push_str(&serde_json::to_string(&r).expect("serialise"));
        text.push('\n');
        valid += 1;
    }
    (text.into_bytes(), valid)
});

fn main() {
    LazyLock::force(&STREAM);
    divan::main();
}

/// Baseline: split the stream into lines and count them, nothing else.
#[divan::bench(sample_count = 10)]
fn split_lines_only(bencher: Bencher) {
    let (bytes, _) = &*STREAM;
    bencher.counter(ItemsCount::new(LINES)).bench(|| {
        let n = bytes
            .chunks(CHUNK)
            .map(|c| c.iter().filter(|&&b| b == b'\n').count())
            .sum::<usize>();
        assert_eq!(n, LINES);
        n
    });
}

/// The follower's path: chunks → complete lines → `parse_record` → counted events.
#[divan::bench(sample_count = 10)]
fn ingest_parse_and_count(bencher: Bencher) {
    let (bytes, valid) = &*STREAM;
    bencher.counter(ItemsCount::new(LINES)).bench(|| {
        let mut ingest = LineIngest::new(parse_record);
        let (mut records, mut malformed) = (0usize, 0usize);
        for chunk in bytes.chunks(CHUNK) {
            ingest.feed(chunk, &mut |ev| match ev {
                LiveEvent::Record(_) => records += 1,
                LiveEvent::Malformed { .. } | LiveEvent::NonFinite { .. } => malformed += 1,
                LiveEvent::Status(_)
                | LiveEvent::Event { .. }
                | LiveEvent::Duplicate { .. }
                | LiveEvent::Restarted { .. } => {}
            });
        }
        assert_eq!((records, records + malformed), (*valid, LINES));
        records
    });
}
