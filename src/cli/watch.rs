//! `copus watch`: follow a live training run (a growing protocol file or `tcp://HOST:PORT`).
//! Headless mode collects records until enough steps arrived (or a timeout) and prints a
//! summary; the interactive explorer view is wired by the lead.

use crate::source::live::{LiveEvent, Target, spawn_default_follower};
use crate::stats::StepStats;
use clap::Args;
use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

/// Arguments of `copus watch`.
#[derive(Debug, Args)]
pub struct WatchArgs {
    /// A growing stats file or tcp://HOST:PORT (tcp://:PORT is 127.0.0.1).
    pub target: String,
    /// Do not open the explorer; print a summary.
    #[arg(long)]
    pub headless: bool,
    /// With --headless: stop after this many valid steps.
    #[arg(long)]
    pub until_steps: Option<u64>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Give up after this many seconds (non-zero exit if --until-steps was not reached).
    #[arg(long)]
    pub timeout_s: Option<f64>,
}

/// How many malformed lines are quoted in the summary.
const MALFORMED_EXAMPLES: usize = 5;
/// How many malformed lines are printed to stderr as they arrive.
const MALFORMED_PRINTED: u64 = 20;

/// What a headless watch saw.
#[derive(Debug, Serialize)]
pub struct WatchSummary {
    /// The target followed.
    pub target: String,
    /// Valid records received (including ones the producer flagged `skipped`).
    pub steps_ingested: u64,
    /// Records flagged `skipped` by the producer (excluded from the estimate).
    pub steps_skipped: u64,
    /// Complete lines that were not valid records.
    pub malformed_lines: u64,
    /// Up to 5 malformed lines: `(line number, reason)`.
    pub malformed_examples: Vec<(u64, String)>,
    /// Step index of the first and last record.
    pub steps: Option<[u64; 2]>,
    /// Loss (nats) of the last record that has one.
    pub last_loss: Option<f64>,
    /// Whether --until-steps was reached (true when it was not asked for).
    pub complete: bool,
    /// Seconds spent watching.
    pub elapsed_s: f64,
    /// The noise-scale estimate over every unflagged record; its fields are flattened in.
    #[serde(flatten)]
    pub estimate: SummedBSimple,
}

/// B_simple (samples) from the two-batch estimator, numerator and denominator summed over
/// steps separately, with a block-bootstrap interval.
#[derive(Debug, Clone, Serialize)]
pub struct SummedBSimple {
    /// Name of the estimator, for the reader of the JSON.
    pub estimator: &'static str,
    /// Steps used (unflagged records).
    pub steps_used: usize,
    /// mean tr Σ / mean |G|², in samples; `None` when mean |G|² ≤ 0 (noise dominates).
    pub b_simple: Option<f64>,
    /// 90 % moving-block-bootstrap interval of `b_simple`; an upper end of `null` means
    /// unbounded (some resamples had mean |G|² ≤ 0).
    pub ci: Option<[Option<f64>; 2]>,
    /// Mean over steps of the unbiased |G|² estimate (`None` without steps).
    pub mean_g2: Option<f64>,
    /// Mean over steps of the unbiased tr Σ estimate (per-sample covariance trace).
    pub mean_trace_sigma: Option<f64>,
    /// The same ratio per layer (no interval).
    pub layers_b_simple: BTreeMap<String, Option<f64>>,
}

/// Unbiased per-step estimates `(|G|², tr Σ)` from squared norms at two batch sizes
/// (McCandlish et al. 2018, App. A.1).
fn two_batch_terms(b_small: f64, b_big: f64, sq_small: f64, sq_big: f64) -> (f64, f64) {
    let g2 = (b_big * sq_big - b_small * sq_small) / (b_big - b_small);
    let trace = (sq_small - sq_big) / (1.0 / b_small - 1.0 / b_big);
    (g2, trace)
}

fn ratio(trace: f64, g2: f64) -> Option<f64> {
    (g2 > 0.0).then(|| trace / g2)
}

// LEAD: placeholder estimator for the headless summary; replace with the stats engine's
// one-sided live smoother (and its interval) at merge time.
/// B_simple over `records` with the summed two-batch estimator: per step |G|² and tr Σ from
/// the two batch sizes, B_simple = mean tr Σ / mean |G|² (never a mean of per-step ratios),
/// and a 90 % interval from a moving-block bootstrap over steps (block length ⌈n^(1/3)⌉,
/// 400 resamples, fixed seed). Records flagged `skipped` are left out.
pub fn summed_two_batch_b_simple(records: &[StepStats]) -> SummedBSimple {
    let used: Vec<&StepStats> = records.iter().filter(|r| r.skipped.is_none()).collect();
    let n = used.len();
    let terms: Vec<(f64, f64)> = used
        .iter()
        .map(|r| two_batch_terms(r.b_small, r.b_big, r.sq_small, r.sq_big))
        .collect();
    let mean =
        |f: fn(&(f64, f64)) -> f64| (n > 0).then(|| terms.iter().map(f).sum::<f64>() / n as f64);
    let (mean_g2, mean_trace) = (mean(|t| t.0), mean(|t| t.1));
    let b_simple = mean_trace.zip(mean_g2).and_then(|(tr, g2)| ratio(tr, g2));
    let ci = (n >= 3 && b_simple.is_some()).then(|| block_bootstrap_ci(&terms));
    let mut per_layer: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    for r in &used {
        for (name, l) in &r.layers {
            let (g2, tr) = two_batch_terms(r.b_small, r.b_big, l.sq_small, l.sq_big);
            let e = per_layer.entry(name.clone()).or_default();
            e.0 += g2;
            e.1 += tr;
        }
    }
    SummedBSimple {
        estimator: "two-batch unbiased |G|^2 and tr(Sigma), summed over steps (placeholder)",
        steps_used: n,
        b_simple,
        ci,
        mean_g2,
        mean_trace_sigma: mean_trace,
        layers_b_simple: per_layer
            .into_iter()
            .map(|(k, (g2, tr))| (k, ratio(tr, g2)))
            .collect(),
    }
}

/// 5 % and 95 % quantiles of the resampled ratio; a resample with mean |G|² ≤ 0 counts as
/// +∞, and an upper quantile of +∞ is reported as `None` (unbounded).
fn block_bootstrap_ci(terms: &[(f64, f64)]) -> [Option<f64>; 2] {
    const RESAMPLES: usize = 400;
    let n = terms.len();
    let block = ((n as f64).cbrt().ceil() as usize).clamp(1, n);
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(0x0c09);
    let mut ratios: Vec<f64> = (0..RESAMPLES)
        .map(|_| {
            let (mut g2, mut tr, mut taken) = (0.0, 0.0, 0);
            while taken < n {
                let start = rng.random_range(0..=n - block);
                for t in &terms[start..start + block.min(n - taken)] {
                    g2 += t.0;
                    tr += t.1;
                }
                taken += block.min(n - taken);
            }
            ratio(tr, g2).unwrap_or(f64::INFINITY)
        })
        .collect();
    ratios.sort_by(f64::total_cmp);
    let q = |p: f64| ratios[((p * (RESAMPLES - 1) as f64).round() as usize).min(RESAMPLES - 1)];
    let finite = |x: f64| x.is_finite().then_some(x);
    [finite(q(0.05)), finite(q(0.95))]
}

/// Run `copus watch`.
pub fn run(args: &WatchArgs) -> anyhow::Result<()> {
    let target = Target::parse(&args.target)?;
    if !args.headless {
        anyhow::bail!(
            "the live explorer view is not available yet; use `copus watch {} --headless \
             --until-steps N` for a summary",
            args.target
        );
    }
    if args.until_steps.is_none() && args.timeout_s.is_none() {
        anyhow::bail!("--headless needs --until-steps N or --timeout-s S, so that it stops");
    }
    let timeout = match args.timeout_s {
        Some(t) if t.is_finite() && t >= 0.0 => Some(Duration::from_secs_f64(t)),
        Some(t) => anyhow::bail!("--timeout-s must be a non-negative number of seconds, not {t}"),
        None => None,
    };
    let summary = watch_headless(target, args.until_steps, timeout);
    if args.json {
        println!("{}", serde_json::json!({ "summary": &summary }));
    } else {
        print_summary(&summary);
    }
    match args.until_steps {
        Some(n) if !summary.complete => anyhow::bail!(
            "timed out after {:.1} s with {} of {n} steps",
            summary.elapsed_s,
            summary.steps_ingested
        ),
        _ => Ok(()),
    }
}

/// Follow `target` until `until_steps` records arrived or `timeout` passed; statuses and
/// malformed lines go to stderr as they happen.
pub fn watch_headless(
    target: Target,
    until_steps: Option<u64>,
    timeout: Option<Duration>,
) -> WatchSummary {
    let start = Instant::now();
    let shown = target.to_string();
    let (tx, rx) = std::sync::mpsc::channel();
    let mut records: Vec<StepStats> = Vec::new();
    let (mut malformed, mut examples) = (0u64, Vec::new());
    let follower = match spawn_default_follower(target, tx) {
        Ok(f) => Some(f),
        Err(e) => {
            eprintln!("copus watch: {e}");
            None
        }
    };
    let reached = |records: &Vec<StepStats>| until_steps.is_some_and(|n| records.len() as u64 >= n);
    while follower.is_some() && !reached(&records) {
        let left = timeout.map(|t| t.saturating_sub(start.elapsed()));
        if left == Some(Duration::ZERO) {
            break;
        }
        match rx.recv_timeout(
            left.unwrap_or(Duration::from_secs(1))
                .min(Duration::from_millis(200)),
        ) {
            Ok(LiveEvent::Record(r)) => records.push(r),
            Ok(LiveEvent::Malformed { line_no, reason }) => {
                malformed += 1;
                if malformed <= MALFORMED_PRINTED {
                    eprintln!("copus watch: {shown}: line {line_no}: {reason}");
                } else if malformed == MALFORMED_PRINTED + 1 {
                    eprintln!("copus watch: further malformed lines are counted, not shown");
                }
                if examples.len() < MALFORMED_EXAMPLES {
                    examples.push((line_no, reason));
                }
            }
            Ok(LiveEvent::Status(s)) => eprintln!("copus watch: {s}"),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    if let Some(f) = follower {
        f.stop();
    }
    WatchSummary {
        target: shown,
        steps_ingested: records.len() as u64,
        steps_skipped: records.iter().filter(|r| r.skipped.is_some()).count() as u64,
        malformed_lines: malformed,
        malformed_examples: examples,
        steps: records
            .first()
            .zip(records.last())
            .map(|(a, b)| [a.step, b.step]),
        last_loss: records.iter().rev().find_map(|r| r.loss),
        complete: until_steps.is_none() || reached(&records),
        elapsed_s: start.elapsed().as_secs_f64(),
        estimate: summed_two_batch_b_simple(&records),
    }
}

fn print_summary(s: &WatchSummary) {
    println!("target           {}", s.target);
    println!(
        "steps ingested   {} ({} flagged skipped)",
        s.steps_ingested, s.steps_skipped
    );
    println!("malformed lines  {}", s.malformed_lines);
    if let Some([a, b]) = s.steps {
        println!("step range       {a}..={b}");
    }
    let fmt = |x: Option<f64>| x.map_or("unbounded".to_owned(), |x| format!("{x:.1}"));
    let e = &s.estimate;
    if e.steps_used == 0 {
        println!("B_simple         no usable steps");
        return;
    }
    let b = e
        .b_simple
        .map_or("undefined (mean |G|^2 <= 0)".to_owned(), |x| {
            format!("{x:.1} samples")
        });
    println!(
        "B_simple         {b} over {} steps ({})",
        e.steps_used, e.estimator
    );
    if let Some([lo, hi]) = e.ci {
        println!("90% interval     {} .. {}", fmt(lo), fmt(hi));
    }
}
