use super::*;
use crate::estimate::per_step::two_batch;
use crate::record::step::{LayerSq, StepStats};

/// A two-batch record with two layers, loss, tokens, lr and step time, its norms varying
/// with `i`.
fn rec(i: u64) -> StepStats {
    let x = i as f64;
    let mut r = StepStats::new(
        i,
        4.0,
        32.0,
        1.0 + 0.37 * (x * 0.61).sin().abs(),
        0.2 + 0.11 * (x * 1.3).cos().abs(),
    );
    r.tokens = Some(32.0 * 1024.0 * (x + 1.0));
    r.loss = Some(3.0 - x * 1e-4);
    r.lr = Some(3e-4);
    r.step_time_s = Some(0.25 + 0.01 * (x * 0.7).sin());
    r.n_small = Some(8);
    for (name, k) in [("a", 0.3), ("b", 0.7)] {
        let l = LayerSq {
            sq_small: k * r.sq_small,
            sq_big: k * r.sq_big,
        };
        r.layers.insert(name.to_string(), l);
    }
    r
}

fn run(records: &[StepStats], max: usize) -> (Vec<StepStats>, Option<Coarsening>) {
    let mut c = Coarsener::new(max);
    for r in records {
        c.push(r.clone());
    }
    c.finish()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * a.abs().max(b.abs()).max(1e-300)
}

/// The two-batch estimate of a merged record is the mean of its steps' estimates.
#[test]
fn merged_estimate_is_the_mean_of_step_estimates() {
    let records: Vec<StepStats> = (0..1000).map(rec).collect();
    let (kept, c) = run(&records, 64);
    let c = c.expect("coarsened");
    assert_eq!((c.records_read, c.records_kept), (1000, kept.len() as u64));
    assert_eq!(c.steps_per_record, 16);
    let mut at = 0;
    for (k, r) in kept.iter().enumerate() {
        let next = kept.get(k + 1).map_or(u64::MAX, |n| n.step);
        let group: Vec<&StepStats> = records[at..].iter().take_while(|s| s.step < next).collect();
        at += group.len();
        assert_eq!(group[0].step, r.step);
        let est = |s: &StepStats| two_batch(s.b_small, s.b_big, s.sq_small, s.sq_big).expect("e");
        let n = group.len() as f64;
        let g2 = group.iter().map(|s| est(s).g2).sum::<f64>() / n;
        let tr = group.iter().map(|s| est(s).trace).sum::<f64>() / n;
        let m = est(r);
        assert!(
            close(m.g2, g2) && close(m.trace, tr),
            "{k}: {m:?} vs {g2} {tr}"
        );
        let loss = group.iter().filter_map(|s| s.loss).sum::<f64>() / n;
        assert!(close(r.loss.expect("loss"), loss));
        let la = group.iter().map(|s| s.layers["a"].sq_small).sum::<f64>() / n;
        assert!(close(r.layers["a"].sq_small, la));
        assert_eq!(r.tokens, group[group.len() - 1].tokens);
    }
    assert_eq!(at, records.len());
}

/// Records differing in batch size (or flagged, or single-gradient) are never merged: the
/// change point stays exact. A change of lr does not stop a merge (the estimators do not use
/// lr): each record carries the lr of its first step, so the change shows at the record
/// that holds it.
#[test]
fn incompatible_records_are_never_merged() {
    let mut records: Vec<StepStats> = (0..400).map(rec).collect();
    for r in &mut records[150..] {
        r.lr = Some(1e-4);
    }
    for r in &mut records[300..] {
        r.b_big = 64.0;
    }
    records[200].skipped = Some("loss-scale change".into());
    records[250].b_big = records[250].b_small;
    records[250].dot_prev = Some(0.1);
    let (kept, c) = run(&records, 32);
    assert!(c.is_some());
    let starts: Vec<u64> = kept.iter().map(|r| r.step).collect();
    for s in [200, 201, 250, 251, 300] {
        assert!(
            starts.contains(&s),
            "no record starts at step {s}: {starts:?}"
        );
    }
    let one = |s: u64| kept.iter().find(|r| r.step == s).expect("kept").clone();
    assert_eq!(one(200), records[200]);
    assert_eq!(one(250), records[250]);
    for r in &kept {
        assert_eq!(r.lr, records[r.step as usize].lr, "lr of step {}", r.step);
    }
    // The records around step 150 show the drop from one to the next.
    let at = kept.partition_point(|r| r.step <= 150);
    assert_eq!(kept[at - 1].lr, Some(3e-4));
    assert_eq!(kept[at].lr, Some(1e-4));
}

/// A schedule with warmup, cosine decay and a drop merges into records of equal numbers of
/// steps (no record is left short by lr: the run-wide means are those of every step), each
/// with its first step's lr.
#[test]
fn an_lr_schedule_does_not_stop_merging() {
    let n = 20_000u64;
    let lr_at = |s: u64| {
        let warm = (s as f64 + 1.0) / 200.0;
        let cos = 0.1 + 0.45 * (1.0 + (std::f64::consts::PI * s as f64 / n as f64).cos());
        let base = 3e-4 * warm.min(1.0) * cos;
        if s >= 12_345 { base * 0.5 } else { base }
    };
    let records: Vec<StepStats> = (0..n)
        .map(|s| {
            let mut r = rec(s);
            r.lr = Some(lr_at(s));
            r
        })
        .collect();
    let (kept, c) = run(&records, 1000);
    let c = c.expect("coarsened");
    assert!(kept.len() <= 1000, "{} records kept", kept.len());
    let per = c.steps_per_record;
    assert!(per >= 16);
    for (i, r) in kept.iter().enumerate() {
        assert_eq!(r.step, i as u64 * per, "equal groups");
        assert_eq!(r.lr, Some(lr_at(r.step)));
    }
}

/// However long the run, the buffer holds at most the bound; steps stay increasing.
#[test]
fn buffer_never_exceeds_the_bound_and_steps_increase() {
    let mut c = Coarsener::new(100);
    for i in 0..20_000 {
        c.push(rec(i));
        assert!(c.len() <= 100, "{} records held after {i}", c.len());
    }
    let (kept, info) = c.finish();
    assert!(kept.len() <= 100 && kept.len() >= 50, "{}", kept.len());
    assert!(kept.windows(2).all(|w| w[0].step < w[1].step));
    let info = info.expect("coarsened");
    assert_eq!(info.records_read, 20_000);
    assert_eq!(info.steps_per_record, 256);
}

/// A run shorter than the bound comes back bit for bit, with no coarsening reported.
#[test]
fn a_short_run_passes_through_unchanged() {
    let records: Vec<StepStats> = (0..100).map(rec).collect();
    let (kept, c) = run(&records, 100);
    assert_eq!(c, None);
    assert_eq!(kept, records);
    let bits = |r: &StepStats| (r.sq_small.to_bits(), r.sq_big.to_bits());
    assert!(kept.iter().zip(&records).all(|(a, b)| bits(a) == bits(b)));
}

/// Records that cannot merge stay single even beyond the bound (and the buffer still works).
#[test]
fn unmergeable_records_are_kept_beyond_the_bound() {
    let records: Vec<StepStats> = (0..500)
        .map(|i| {
            let mut r = rec(i);
            r.b_big = r.b_small;
            r.dot_prev = Some(0.5);
            r
        })
        .collect();
    let (kept, c) = run(&records, 16);
    assert_eq!(c, None);
    assert_eq!(kept, records);
}

/// Every kept record is the mean of exactly the records read whose steps fall between its
/// step and the next kept record's, whatever order they came in.
fn assert_bins_of_steps(records: &[StepStats], kept: &[StepStats]) {
    assert!(
        kept.windows(2).all(|w| w[0].step < w[1].step),
        "kept in step order"
    );
    for (k, r) in kept.iter().enumerate() {
        let next = kept.get(k + 1).map_or(u64::MAX, |n| n.step);
        let bin: Vec<&StepStats> = records
            .iter()
            .filter(|s| s.step >= r.step && s.step < next)
            .collect();
        let n = bin.len() as f64;
        assert!(n >= 1.0, "{k}: empty bin at step {}", r.step);
        let mean = |f: &dyn Fn(&StepStats) -> f64| bin.iter().map(|s| f(s)).sum::<f64>() / n;
        assert!(
            close(r.sq_small, mean(&|s| s.sq_small)),
            "{k} at {}",
            r.step
        );
        assert!(close(r.sq_big, mean(&|s| s.sq_big)), "{k} at {}", r.step);
        assert!(close(r.layers["b"].sq_big, mean(&|s| s.layers["b"].sq_big)));
    }
    let first = records.iter().map(|r| r.step).min();
    assert_eq!(kept.first().map(|r| r.step), first, "the first step read");
}

/// A restarted run writes steps 10..73 again after 0..63: the second attempt's records merge
/// into the records of their steps (the mean of both attempts there), never into a record of
/// the first attempt's last steps, and the buffer stays in step order.
#[test]
fn steps_written_again_merge_into_the_records_of_their_steps() {
    let mut records: Vec<StepStats> = (0..64).map(rec).collect();
    records.extend((10..74).map(rec));
    let (kept, c) = run(&records, 8);
    assert_bins_of_steps(&records, &kept);
    let c = c.expect("coarsened");
    assert_eq!(c.records_out_of_order, 54);
    assert!(
        c.diagnostic()
            .message
            .contains("54 records came at or below")
    );
}

/// Lines a little out of order (neighbours swapped, as writers racing each other leave them)
/// and a file in random order: the same bins of steps as in step order, within the bound.
#[test]
fn records_out_of_order_merge_by_step_within_the_bound() {
    let mut jittered: Vec<StepStats> = (0..5000).map(rec).collect();
    for i in (0..4998).step_by(3) {
        jittered.swap(i, i + 1);
    }
    let mut shuffled: Vec<StepStats> = (0..5000).map(rec).collect();
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    for i in (1..shuffled.len()).rev() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        shuffled.swap(i, (state % (i as u64 + 1)) as usize);
    }
    for (records, far) in [(&jittered, false), (&shuffled, true)] {
        let mut c = Coarsener::new(100);
        for r in records.iter() {
            c.push(r.clone());
            assert!(c.len() <= 100, "{} records held", c.len());
        }
        let (kept, info) = c.finish();
        assert!(kept.len() >= 20, "{}", kept.len());
        assert_bins_of_steps(records, &kept);
        let info = info.expect("coarsened");
        assert!(info.records_out_of_order > 1000);
        // Far from step order, the merged records are unequal: said as a warning.
        let d = info.diagnostic();
        let warned = d.severity == Severity::Warning;
        assert_eq!(warned, far, "{}", d.message);
        assert_eq!(d.message.contains("sort the file by step"), far);
    }
}

/// The default bound keeps 2^18 records of a few layers and fewer of many, within its memory.
#[test]
fn the_default_bound_shrinks_with_many_layers() {
    assert_eq!(default_bound(0), MAX_ANALYSED_RECORDS);
    assert_eq!(default_bound(4), MAX_ANALYSED_RECORDS);
    let b = default_bound(32);
    assert!(b < MAX_ANALYSED_RECORDS / 4 && b > 50_000, "{b}");
    assert_eq!(default_bound(usize::MAX), MIN_DEFAULT_RECORDS);
    assert!(RecordBound::All.coarsener().is_none());
    let mut c = RecordBound::Default.coarsener().expect("bounded");
    let mut r = rec(0);
    for i in 0..200 {
        r.layers.insert(
            format!("l{i}"),
            LayerSq {
                sq_small: 1.0,
                sq_big: 0.5,
            },
        );
    }
    c.push(r);
    assert_eq!(c.max_records, default_bound(202));
}
