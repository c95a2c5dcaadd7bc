//! However a stream is cut into reads, the line ingest produces the same events.

use copus::source::live::{LineIngest, LiveEvent, parse_record};
use copus::stats::StepStats;
use proptest::prelude::*;

fn stream(n: u64, garbage_every: u64) -> String {
    let mut s = String::new();
    for step in 0..n {
        s.push_str(
            &serde_json::to_string(&StepStats::new(step, 2.0, 8.0, 1.5, 0.5)).expect("json"),
        );
        s.push_str(if step % 2 == 0 { "\n" } else { "\r\n" });
        if garbage_every > 0 && step % garbage_every == 0 {
            s.push_str("{\"v\":1,\"ste\n\n");
        }
    }
    s
}

fn events(bytes: &[u8], cuts: &[usize]) -> Vec<LiveEvent> {
    let mut ingest = LineIngest::new(parse_record);
    let mut out = Vec::new();
    let mut at = 0;
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    points.sort_unstable();
    for p in points.into_iter().chain([bytes.len()]) {
        ingest.feed(&bytes[at..p], &mut |e| out.push(e));
        at = p;
    }
    out
}

proptest! {
    #[test]
    fn chunking_does_not_change_the_events(
        n in 1u64..40,
        garbage_every in 0u64..5,
        cuts in proptest::collection::vec(0usize..100_000, 0..30),
    ) {
        let text = stream(n, garbage_every);
        let whole = events(text.as_bytes(), &[]);
        prop_assert_eq!(&events(text.as_bytes(), &cuts), &whole);
        let records = whole.iter().filter(|e| matches!(e, LiveEvent::Record(_))).count() as u64;
        prop_assert_eq!(records, n);
        let expected_bad = (n - 1).checked_div(garbage_every).map_or(0, |k| k + 1);
        prop_assert_eq!(whole.len() as u64 - records, expected_bad);
    }
}
