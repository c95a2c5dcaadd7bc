//! Live attach in the explorer: a follower thread reads the run's protocol lines, and this
//! aggregator updates the one-sided (live) estimate incrementally as each record arrives
//! (O(1) per record, [`crate::stats::estimate::incremental`]), keeps a bounded history (recent steps in
//! full, older ones binned, [`History`]), and sends the trajectory to the UI at most every
//! [`REFRESH`] when something changed. The full analysis (run summary, diagnostics, layers,
//! and the variance inflation of the intervals) is re-run on the kept records at a pace that
//! bounds its share of a core: at most every [`FULL_MIN`], and never more often than
//! [`FULL_DUTY`]⁻¹ times its own duration.

use crate::app::Msg;
use crate::source::Loaded;
use crate::source::live::aggregate::{LiveCore, NoLiveEstimate};
use crate::source::live::{FollowerHandle, LiveEvent, Target, spawn_default_follower_batched};
use crate::source::live::{LinkState, LinkStatus};
use crate::source::measured::{run_seq_len, seq_len_note};
use crate::stats::estimate::incremental::LivePoint;
use crate::stats::{
    AnalyzeOptions, AnalyzeReport, EstimatorSettings, InputCounts, SmootherKind, analyze,
    analyze_parts,
};
use crate::trajectory::{Trajectory, TrajectoryPoint};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::time::{Duration, Instant};

/// How often, at most, the trajectory is sent to the UI while records arrive.
pub const REFRESH: Duration = Duration::from_millis(300);

/// Shortest interval between two full analyses.
pub const FULL_MIN: Duration = Duration::from_secs(2);

/// Most of the aggregator's time the full analysis may take (its pace adapts to its cost).
pub const FULL_DUTY: f64 = 0.2;

/// Records the live estimate can place behind the newest (out-of-order arrivals).
pub use crate::source::live::aggregate::REPLAY_RECORDS;

/// Most steps of non-finite records the live view keeps to mark on the timeline (later ones
/// are still counted).
pub const MAX_NON_FINITE_STEPS: usize = 100_000;

/// After this long without a record the run is reported as ended or paused.
pub const IDLE: Duration = Duration::from_secs(10);

/// What the live view knows besides the trajectory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LiveCounts {
    /// Valid records received.
    pub steps: u64,
    /// Lines that were not valid records.
    pub malformed: u64,
    /// Records skipped for a NaN or ±Inf value.
    pub non_finite: u64,
    /// Records dropped as duplicates, plus records superseded by a restarted run.
    pub dropped: u64,
}

/// Follow `target`, update the estimate as records arrive, and send `Msg::Live` to `ui` until
/// the UI goes away. Returns the follower (stopped when dropped).
pub fn spawn(
    target: Target,
    settings: EstimatorSettings,
    (seq_len, given): (u32, Option<u32>),
    ui: Sender<Msg>,
) -> Result<FollowerHandle, crate::source::live::LiveError> {
    let (tx, rx) = channel();
    let label = format!("live: {target}");
    let follower = spawn_default_follower_batched(target, tx)?;
    let settings = EstimatorSettings {
        smoother: SmootherKind::OneSided,
        ..settings
    };
    std::thread::spawn(move || {
        super::priority::lower_current_thread();
        let mut agg = Aggregator::new(settings, seq_len, label);
        agg.given_seq_len = given;
        agg.run(rx, ui);
    });
    Ok(follower)
}

/// The live view's state off the UI thread: kept records, the incremental estimate and its
/// bounded history, the latest full analysis.
pub struct Aggregator {
    settings: EstimatorSettings,
    seq_len: u32,
    label: String,
    core: LiveCore,
    counts: LiveCounts,
    /// Steps of the non-finite records received (at most [`MAX_NON_FINITE_STEPS`]), and how
    /// many more there were (without a readable step, or beyond the bound): handed to the full
    /// analysis as `open` hands its reader's, so that the timeline marks them (✕).
    non_finite_steps: Vec<u64>,
    non_finite_other: usize,
    /// Variance inflation φ of the latest full analysis (1 before the first).
    phi: f64,
    /// Tokens per sample of the trajectory and the note saying where it comes from.
    run_seq: (u32, String),
    /// Tokens per sample the user gave (`watch --seq-len`), used instead of the records'.
    pub given_seq_len: Option<u32>,
    /// Factor on the records' token counts when the given tokens per sample differs from
    /// theirs (1 otherwise).
    token_scale: f64,
    /// Why the numbers shown cannot be trusted as they stand (tokens per sample far from the
    /// model's), kept on the status line until the user acts.
    seq_warning: Option<String>,
    /// Records changed since the last full analysis / the last update sent.
    stale_full: bool,
    stale_view: bool,
    last_full: Option<(Instant, Duration)>,
}

impl Aggregator {
    /// Nothing received yet; `seq_len` is the model's tokens per sample (used until the
    /// records' token counts give the run's own).
    pub fn new(settings: EstimatorSettings, seq_len: u32, label: String) -> Self {
        let core = LiveCore::new(&settings);
        Self {
            settings,
            seq_len,
            label,
            core,
            counts: LiveCounts::default(),
            non_finite_steps: Vec::new(),
            non_finite_other: 0,
            phi: 1.0,
            run_seq: (seq_len, String::new()),
            given_seq_len: None,
            token_scale: 1.0,
            seq_warning: None,
            stale_full: false,
            stale_view: false,
            last_full: None,
        }
    }

    /// Counts so far.
    pub fn counts(&self) -> &LiveCounts {
        &self.counts
    }

    /// Entries held by the history (bounded whatever the run's length).
    pub fn history_len(&self) -> usize {
        self.core.history().len()
    }

    /// Take one event; returns a status line for the UI, if any.
    pub fn event(&mut self, ev: LiveEvent) -> Option<LinkStatus> {
        match ev {
            LiveEvent::Record(r) => {
                self.core.push(r);
                self.counts.steps += 1;
                self.stale_full = true;
                self.stale_view = true;
                None
            }
            LiveEvent::Malformed { .. } => {
                self.counts.malformed += 1;
                self.stale_view = true;
                None
            }
            nf @ LiveEvent::NonFinite { .. } => {
                match nf.non_finite_step() {
                    Some(step) if self.non_finite_steps.len() < MAX_NON_FINITE_STEPS => {
                        self.non_finite_steps.push(step);
                    }
                    _ => self.non_finite_other += 1,
                }
                self.counts.non_finite += 1;
                // The full analysis locates the skipped steps (the timeline's ✕).
                self.stale_full = true;
                self.stale_view = true;
                None
            }
            LiveEvent::Event { kind, at_step, .. } => Some(LinkStatus::new(
                LinkState::Flowing,
                format!(
                    "{kind}{}",
                    at_step.map(|s| format!(" at step {s}")).unwrap_or_default()
                ),
            )),
            LiveEvent::Duplicate { .. } => {
                self.counts.dropped += 1;
                self.stale_view = true;
                None
            }
            LiveEvent::Restarted { step } => {
                let gone = self.core.restart_from(step);
                self.non_finite_steps.retain(|&s| s < step);
                self.counts.dropped += gone;
                self.counts.steps = self.counts.steps.saturating_sub(gone);
                self.stale_full = true;
                self.stale_view = true;
                Some(LinkStatus::new(
                    LinkState::Flowing,
                    format!(
                        "the run restarted at step {step}: {gone} earlier record(s) from that step on replaced"
                    ),
                ))
            }
            LiveEvent::Status(s) => Some(s),
        }
    }

    /// Whether a full analysis is due at `now` (records changed, and its pace allows it).
    pub fn full_due(&self, now: Instant) -> bool {
        self.stale_full
            && self.last_full.is_none_or(|(at, took)| {
                let pace = FULL_MIN.max(took.mul_f64(1.0 / FULL_DUTY));
                now.duration_since(at) >= pace
            })
    }

    /// Run the full analysis on the kept records; returns it (or why there is none).
    pub fn full(&mut self) -> Result<AnalyzeReport, NoLiveEstimate> {
        let start = Instant::now();
        self.stale_full = false;
        let detail = crate::stats::analysis::layers::LayerDetail::Full;
        let analysed = if self.non_finite_steps.is_empty() && self.non_finite_other == 0 {
            analyze_parts(
                self.core.records(),
                AnalyzeOptions::from(&self.settings).with_layers(detail),
            )
            .map(|parts| {
                let phi = parts.inflation;
                (parts.into_report(), phi)
            })
        } else {
            // The non-finite lines never became records: counted and located as `open`
            // counts its reader's, so the run's diagnostics (and the timeline's ✕) match.
            let counts = InputCounts {
                non_finite: self.non_finite_steps.len() + self.non_finite_other,
                non_finite_steps: self.non_finite_steps.clone(),
                ..InputCounts::default()
            };
            analyze(
                self.core.records(),
                AnalyzeOptions::from(&self.settings).with_counts(counts),
            )
            .map(|report| {
                let phi = crate::stats::estimate::incremental::inflation_of_rows(
                    &report.steps,
                    &self.settings,
                );
                (report, phi)
            })
        };
        let out = analysed
            .map(|(report, phi)| {
                self.phi = phi;
                report
            })
            .map_err(NoLiveEstimate::from);
        if let Ok(report) = &out {
            let (s, origin) = run_seq_len(report, self.given_seq_len, self.seq_len);
            let note = seq_len_note(s, origin);
            self.seq_warning = None;
            let ratio = f64::from(s) / f64::from(self.seq_len.max(1));
            let far = crate::source::MAX_SEQ_LEN_MISMATCH;
            if origin == crate::source::measured::SeqLenOrigin::Inferred
                && !(1.0 / far..=far).contains(&ratio)
            {
                // Not guessed: the heatmap would read B_crit at the wrong scale.
                self.seq_warning = Some(format!(
                    "⚠ the run counts {s} {} per sample, the model {}: B_crit is read at \
                     the wrong scale; rerun with --seq-len {} (each sample one of the model's \
                     sequences) or a --model matching the run",
                    if s == 1 { "token" } else { "tokens" },
                    self.seq_len,
                    self.seq_len
                ));
            }
            self.run_seq = (s, note);
            // A given tokens-per-sample counts the token axis too (as for a stats file).
            self.token_scale = self
                .given_seq_len
                .and_then(|g| crate::source::measured::token_rescale(g, report.summary.seq_len))
                .unwrap_or(1.0);
        }
        self.last_full = Some((Instant::now(), start.elapsed()));
        out
    }

    /// The trajectory of the incremental estimate: one point per older bin (its last step),
    /// then every recent step; points without a positive B_simple are left out.
    pub fn trajectory(&self) -> Trajectory {
        let seq = f64::from(self.run_seq.0);
        let confidence = self.settings.confidence;
        let mut tokens = 0.0;
        let mut points = Vec::with_capacity(self.core.history().len());
        let add = |p: &LivePoint, tokens: f64, points: &mut Vec<TrajectoryPoint>| {
            let Some(b) = p.b_simple().filter(|b| b.is_finite() && *b > 0.0) else {
                return;
            };
            let [lo, hi] = p.ci(self.phi, confidence);
            points.push(TrajectoryPoint {
                step: p.step,
                tokens,
                b_crit: b,
                ci: crate::source::measured::point_interval(lo, hi),
                loss: p.loss,
            });
        };
        for bin in self.core.history().bins() {
            tokens = bin
                .last
                .tokens
                .map_or(tokens + bin.b_big_sum * seq, |t| t * self.token_scale);
            add(&bin.last, tokens, &mut points);
        }
        for p in self.core.history().recent() {
            tokens = p
                .tokens
                .map_or(tokens + p.b_big * seq, |t| t * self.token_scale);
            add(p, tokens, &mut points);
        }
        Trajectory {
            label: self.label.clone(),
            seq_len: self.run_seq.0,
            points,
        }
    }

    /// The update for the UI: the trajectory, with the full analysis when a new one is given.
    pub fn update(&mut self, report: Option<Result<AnalyzeReport, NoLiveEstimate>>) -> Msg {
        self.stale_view = false;
        let update = match report {
            Some(Err(e)) => Err(e),
            _ if self.core.history().is_empty() => Err(NoLiveEstimate::NoUsableStep),
            Some(Ok(report)) => Ok((Some(report), self.trajectory())),
            None => Ok((None, self.trajectory())),
        }
        .map(|(analysis, trajectory)| Loaded {
            trajectory,
            analysis,
            seed_ema: Vec::new(),
            note: Some(self.run_seq.1.clone()).filter(|n| !n.is_empty()),
            calibration: None,
            warning: self.seq_warning.clone(),
        });
        Msg::Live {
            update: Box::new(update),
            steps: self.counts.steps,
            malformed: self.counts.malformed,
            non_finite: self.counts.non_finite,
            dropped: self.counts.dropped,
        }
    }

    fn run(&mut self, rx: Receiver<Vec<LiveEvent>>, ui: Sender<Msg>) {
        let mut last_sent = Instant::now();
        let mut last_record: Option<Instant> = None;
        let mut told_idle = false;
        // The link's latest state: while it is down (waiting, retrying), that is what the
        // status line keeps saying (after 10 s it said "the run ended or is paused" over a
        // refused connection).
        let mut link_down = false;
        loop {
            match rx.recv_timeout(REFRESH) {
                Ok(batch) => {
                    for ev in batch {
                        if matches!(ev, LiveEvent::Record(_)) {
                            last_record = Some(Instant::now());
                            told_idle = false;
                        }
                        if let LiveEvent::Status(st) = &ev {
                            link_down = st.state == LinkState::Waiting;
                        }
                        if let Some(note) = self.event(ev)
                            && ui.send(Msg::LiveStatus(note)).is_err()
                        {
                            return;
                        }
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    if idle_note_due(told_idle, link_down, last_record, Instant::now()) {
                        told_idle = true;
                        let note = LinkStatus::new(
                            LinkState::Quiet,
                            format!(
                                "no new records for {} s: the run ended or is paused",
                                IDLE.as_secs()
                            ),
                        );
                        if ui.send(Msg::LiveStatus(note)).is_err() {
                            return;
                        }
                    }
                }
                Err(RecvTimeoutError::Disconnected) => return,
            }
            let now = Instant::now();
            let full = self.full_due(now).then(|| self.full());
            if full.is_some() || (self.stale_view && last_sent.elapsed() >= REFRESH) {
                last_sent = now;
                if ui.send(self.update(full)).is_err() {
                    return;
                }
            }
        }
    }
}

/// Whether the status line should now say that no records came for [`IDLE`]: not twice, not
/// before any record, and not while the link is down (its own status, "cannot connect …
/// retrying", says more than "the run ended or is paused").
fn idle_note_due(told: bool, link_down: bool, last_record: Option<Instant>, now: Instant) -> bool {
    !told && !link_down && last_record.is_some_and(|t| now.saturating_duration_since(t) >= IDLE)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_idle_note_leaves_a_down_links_status_in_place() {
        let t = std::time::Instant::now();
        let later = t + super::IDLE;
        assert!(super::idle_note_due(false, false, Some(t), later));
        assert!(
            !super::idle_note_due(false, true, Some(t), later),
            "link down"
        );
        assert!(
            !super::idle_note_due(true, false, Some(t), later),
            "told once"
        );
        assert!(
            !super::idle_note_due(false, false, None, later),
            "no record yet"
        );
        assert!(
            !super::idle_note_due(false, false, Some(later), later),
            "not yet"
        );
    }

    use super::*;

    fn rec(step: u64) -> crate::stats::StepStats {
        let mut r = crate::stats::StepStats::new(step, 4.0, 32.0, 10.0 + (step % 7) as f64, 2.0);
        r.tokens = Some(step as f64 * 32.0 * 128.0);
        r
    }

    #[test]
    fn the_trajectory_follows_the_records_and_the_full_analysis_agrees_at_the_head() {
        let settings = EstimatorSettings {
            smoother: SmootherKind::OneSided,
            ..EstimatorSettings::default()
        };
        let mut agg = Aggregator::new(settings, 128, "live: test".into());
        for s in 0..500 {
            assert_eq!(agg.event(LiveEvent::Record(rec(s))), None);
        }
        let report = agg.full().expect("an analysis");
        let traj = agg.trajectory();
        assert_eq!(traj.points.len(), report.steps.len());
        let (head, row) = (traj.points.last().expect("a point"), &report.steps[499]);
        assert_eq!(head.step, 499);
        let b = row.b_simple.expect("positive");
        assert!(
            (head.b_crit - b).abs() <= 1e-9 * b,
            "{} vs {b}",
            head.b_crit
        );
        let (lo, hi) = head.ci.expect("bounded");
        assert!((lo - row.ci[0]).abs() <= 1e-9 * lo && (hi - row.ci[1]).abs() <= 1e-9 * hi);
        // A restart drops the superseded records from the trajectory.
        let note = agg.event(LiveEvent::Restarted { step: 400 });
        assert!(note.is_some_and(|n| n.text.contains("400")));
        assert_eq!(agg.trajectory().points.last().map(|p| p.step), Some(399));
        assert_eq!(agg.counts().steps, 400);
    }

    #[test]
    fn a_non_finite_line_is_marked_on_the_live_timeline_as_open_marks_it() {
        use crate::app::measured_view::{CauseKind, causes};
        let mut agg = Aggregator::new(EstimatorSettings::default(), 128, "t".into());
        for s in (0..200).filter(|&s| s != 120) {
            agg.event(LiveEvent::Record(rec(s)));
        }
        let line = r#"{"v":1,"step":120,"b_small":4,"b_big":32,"sq_small":2.0,"sq_big":NaN}"#;
        let reason = crate::stats::parse_line(line)
            .expect_err("not a record")
            .to_string();
        assert_eq!(
            agg.event(LiveEvent::NonFinite {
                line_no: 121,
                reason
            }),
            None
        );
        assert_eq!(agg.counts().non_finite, 1);
        let report = agg.full().expect("an analysis");
        assert_eq!(report.summary.non_finite_skipped, 1);
        let marks = causes(&report, &agg.trajectory());
        let nan = |c: &&crate::app::measured_view::Cause| c.kind == CauseKind::NonFinite;
        assert_eq!(
            marks
                .iter()
                .filter(nan)
                .map(|c| c.steps)
                .collect::<Vec<_>>(),
            vec![[120, 120]],
            "{marks:?}"
        );
        // A restart before it takes the mark away with the records.
        agg.event(LiveEvent::Restarted { step: 100 });
        let report = agg.full().expect("an analysis");
        let marks = causes(&report, &agg.trajectory());
        assert_eq!(marks.iter().filter(nan).count(), 0, "{marks:?}");
    }

    #[test]
    fn the_full_analysis_paces_itself() {
        let mut agg = Aggregator::new(EstimatorSettings::default(), 128, "t".into());
        let t0 = Instant::now();
        assert!(!agg.full_due(t0), "nothing received");
        agg.event(LiveEvent::Record(rec(0)));
        assert!(agg.full_due(t0));
        let _ = agg.full();
        agg.event(LiveEvent::Record(rec(1)));
        assert!(!agg.full_due(Instant::now()), "not again before FULL_MIN");
        assert!(agg.full_due(Instant::now() + FULL_MIN));
    }
}
