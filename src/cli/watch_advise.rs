//! `copus watch --advise OUT --session S`: advice from the live estimate, written as
//! `{"v":1,"advice":{...}}` lines to a file (or FIFO) or served on `tcp://HOST:PORT` to every
//! client (a late client first receives the advice written so far).

use crate::plan::advice::{Advice, AdviceLine, AdviceSettings, Advisor, RunState};
use crate::stats::StepStats;
use std::io::Write;
use std::path::Path;

/// Where advice goes.
enum Sink {
    File(std::fs::File),
    Tcp(crate::trainer::serve::StatsServer),
}

/// The advisor of a watch and where it writes.
pub struct Advising {
    advisor: Advisor,
    table: crate::goodput::ThroughputTable,
    sink: Sink,
    shown: String,
    run: Option<RunState>,
    written: Vec<Advice>,
    /// GPUs of the session's cluster.
    gpus: u32,
    /// The session as given, for warnings ("--session FILE", or the flags).
    session: String,
    /// Whether the run was already said not to match the session.
    mismatch_warned: bool,
    /// What one of the run's samples is, against the session model's sequences.
    scale: SampleScale,
    /// The session's hardware, model, efficiencies and GPUs per node: to cost the run's own
    /// micro-batch where advice would keep it.
    model_in_force: (
        crate::perf::HardwareProfile,
        crate::perf::ModelProfile,
        crate::perf::EfficiencyParams,
        u32,
    ),
}

/// Tokens per sample of the run (given by `--seq-len`, else inferred from the records'
/// `tokens`/`b_big` as `copus analyze` does) against the session model's sequence length: the
/// live B_crit counts the run's samples, the advice's batches the model's sequences.
#[derive(Debug, Clone, Default)]
struct SampleScale {
    /// The model's tokens per sequence.
    model_seq_len: u32,
    /// `--seq-len`, when given.
    given: Option<u32>,
    /// The last record's (step, cumulative tokens).
    prev: Option<(u64, f64)>,
    /// Δtokens / b_big of the first consecutive records (at most [`SCALE_SAMPLES`]).
    ratios: Vec<f64>,
    /// Their median, once there are [`SCALE_MIN_SAMPLES`] (kept, not recomputed per record).
    inferred: Option<f64>,
    /// Whether the run was already said to count other samples than the model's.
    warned: bool,
}

/// Consecutive-record ratios the inferred tokens per sample rests on (its median).
const SCALE_SAMPLES: usize = 64;
/// Ratios needed before the inferred value is used.
const SCALE_MIN_SAMPLES: usize = 3;

impl SampleScale {
    fn note(&mut self, r: &StepStats) {
        if let Some(t) = r.tokens {
            if let Some((step, before)) = self.prev
                && step.checked_add(1) == Some(r.step)
                && self.ratios.len() < SCALE_SAMPLES
            {
                let x = (t - before) / r.b_big;
                if x.is_finite() && x > 0.0 {
                    self.ratios.push(x);
                    if self.ratios.len() >= SCALE_MIN_SAMPLES {
                        let mut v = self.ratios.clone();
                        v.sort_by(f64::total_cmp);
                        self.inferred = Some(v[v.len() / 2]);
                    }
                }
            }
            self.prev = Some((r.step, t));
        }
    }

    /// The run's tokens per sample: given, else inferred once enough records carry tokens.
    fn run_seq_len(&self) -> Option<f64> {
        self.given.map(f64::from).or(self.inferred)
    }

    /// How many of the model's sequences one of the run's samples is (1 when unknown).
    fn factor(&self) -> f64 {
        match self.run_seq_len() {
            Some(s) if self.model_seq_len > 0 => s / f64::from(self.model_seq_len),
            _ => 1.0,
        }
    }

    /// Whether the run's samples are too far from the model's sequences to advise on.
    fn too_far(&self) -> bool {
        let far = crate::source::MAX_SEQ_LEN_MISMATCH;
        !(1.0 / far..=far).contains(&self.factor())
    }
}

/// Where the model and cluster advised on come from.
pub enum AdviceSession<'a> {
    /// `--session FILE`.
    File(&'a Path),
    /// The command line's `--model`, `--hardware`, `--nodes` and `--gpus-per-node` (or
    /// copus's defaults): an ad-hoc session, and how to name it in warnings.
    Flags {
        /// The ad-hoc session.
        session: Box<crate::session::Session>,
        /// How warnings name it ("--model llama-7b --hardware h100-sxm, 1×8 GPUs").
        shown: String,
    },
}

/// Where an ad-hoc session's relative paths resolve from (as the explorer saves it).
pub const AD_HOC_SESSION_FILE: &str = "copus-live.ron";

/// The options of `--advise`.
pub struct AdviseOptions<'a> {
    /// OUT: a path or tcp://HOST:PORT.
    pub out: &'a str,
    /// The session whose model and cluster are advised on.
    pub session: AdviceSession<'a>,
    /// Write advice marked not to apply.
    pub dry_run: bool,
    /// Steps between two pieces of advice.
    pub min_dwell_steps: u64,
    /// Gain a switch must predict (fraction); `None`: the session's `switch_threshold`.
    pub threshold: Option<f64>,
    /// Replace an existing OUT file.
    pub force: bool,
    /// The run's tokens per sample, when `--seq-len` gives it.
    pub seq_len: Option<u32>,
    /// `--calibration`: the efficiencies in force instead of the profile's.
    pub calibration: Option<&'a Path>,
    /// The stack flags, laid over the session's stack.
    pub stack: Option<crate::perf::Stack>,
}

/// Why the records of `run` cannot be the session's run (a cluster of `gpus` GPUs searched at
/// `batches`), if they cannot.
pub fn session_mismatch(run: &RunState, gpus: u32, batches: &[u64]) -> Option<String> {
    if let Some((dp, tp, pp)) = run.layout {
        let run_gpus = u64::from(dp) * u64::from(tp) * u64::from(pp);
        if run_gpus != u64::from(gpus) {
            return Some(format!(
                "its records say DP{dp}·TP{tp}·PP{pp}, {run_gpus} GPU(s); the session has {gpus}"
            ));
        }
    }
    match batches.first() {
        Some(&smallest) if run.batch < smallest => Some(format!(
            "its batch of {} samples is below the session's smallest, {smallest}",
            run.batch
        )),
        _ => None,
    }
}

/// The tokens per sample a session states for its live source (`source: Live(seq_len:
/// Some(N))`), if it does.
pub fn live_seq_len(session: &crate::session::Session) -> Option<u32> {
    match &session.source {
        crate::session::DataSource::Live { seq_len, .. } => *seq_len,
        _ => None,
    }
}

impl Advising {
    /// Resolve the session, tabulate its throughput, open OUT.
    pub fn open(o: &AdviseOptions) -> anyhow::Result<Self> {
        let (mut r, shown) = match &o.session {
            AdviceSession::File(path) => (
                super::model_args::resolve_session(path, None, None)
                    .map_err(|e| anyhow::anyhow!("--session {e}"))?,
                format!("--session {}", path.display()),
            ),
            AdviceSession::Flags { session, shown } => (
                session
                    .as_ref()
                    .clone()
                    .resolve(Path::new(AD_HOC_SESSION_FILE))?,
                shown.clone(),
            ),
        };
        super::model_args::apply_overrides_noted(&mut r, o.calibration, o.stack.as_ref())?;
        let eff = r.efficiency();
        let ctx = r.perf_context(&eff);
        let table = crate::goodput::throughput_table(&ctx, &r.cluster(), &r.session.search);
        let threshold = o.threshold.unwrap_or(r.session.costs.switch_threshold);
        if !(threshold.is_finite() && threshold >= 0.0) {
            super::flag_bail!(
                "--advise-threshold {threshold}: must be a fraction ≥ 0 (0.05 is 5 %)"
            );
        }
        let settings = AdviceSettings {
            threshold,
            min_dwell_steps: o.min_dwell_steps,
            min_steps: r.session.estimator.min_steps as u64,
            b_crit_scale: r.session.b_crit_scale,
            form: r.session.stat_eff,
            dry_run: o.dry_run,
            seq_len: r.model.seq_len,
        };
        let sink = if o.out.starts_with("tcp://") {
            let server = crate::trainer::serve::StatsServer::bind(o.out)
                .map_err(|e| anyhow::anyhow!("--advise {}: {e}", o.out))?;
            eprintln!(
                "copus watch: serving advice on tcp://{}",
                server.local_addr()
            );
            Sink::Tcp(server)
        } else {
            if std::fs::metadata(o.out).is_ok_and(|m| crate::fsutil::is_fifo(&m.file_type())) {
                eprintln!(
                    "copus watch: --advise {} is a FIFO: waiting up to {} s for its reader",
                    o.out,
                    crate::fsutil::FIFO_READER_WAIT.as_secs()
                );
            }
            let f = crate::fsutil::create_stream_output(Path::new(o.out), o.force)
                .map_err(|e| anyhow::anyhow!("--advise {}: {e}", o.out))?;
            Sink::File(f)
        };
        Ok(Self {
            advisor: Advisor::new(settings),
            table,
            sink,
            shown: o.out.to_string(),
            run: None,
            written: Vec::new(),
            gpus: r.cluster().gpus(),
            session: shown.clone(),
            mismatch_warned: false,
            scale: SampleScale {
                model_seq_len: r.model.seq_len,
                // The flag, else the session's own statement for its live source (`plan`
                // sends a Live session here without the flag): said, since the session's
                // live source may be another file than the one followed.
                given: o
                    .seq_len
                    .or_else(|| {
                        let from_session = live_seq_len(&r.session)?;
                        eprintln!(
                            "copus watch: reading each sample as {from_session} tokens, as \
                             {shown}'s live source says (--seq-len sets another)"
                        );
                        Some(from_session)
                    })
                    .filter(|&s| s > 0),
                ..SampleScale::default()
            },
            model_in_force: (
                r.hardware.clone(),
                r.model.clone(),
                eff.clone(),
                r.session.cluster.gpus_per_node,
            ),
        })
    }

    /// Tokens in one of the run's samples as the advice reads them (`--seq-len`, else the
    /// session's live source), where stated: the summary counts tokens with the same.
    pub fn seq_len(&self) -> Option<u32> {
        self.scale.given
    }

    /// Note what the run does at record `r` (its batch and layout).
    pub fn record(&mut self, r: &StepStats) {
        if r.skipped.is_some() || !(r.b_big.is_finite() && r.b_big >= 1.0) {
            return;
        }
        self.scale.note(r);
        if self.scale.too_far() && !self.scale.warned {
            self.scale.warned = true;
            let run = self.scale.run_seq_len().unwrap_or(0.0).round();
            let model = self.scale.model_seq_len;
            eprintln!(
                "copus watch: warning: the run counts {run} token(s) per sample (tokens/b_big), \
                 where the model of {} trains sequences of {model} tokens: its B_crit would be \
                 read at the wrong scale, so no advice is given; pass --seq-len {model} to read \
                 each sample as one of the model's sequences, or a session whose model matches \
                 the run",
                self.session
            );
        }
        let run = RunState {
            batch: r.b_big.round() as u64,
            layout: r.config.map(|c| (c.dp, c.tp, c.pp)),
            micro_batch: r.config.map(|c| c.mbs),
        };
        if !self.mismatch_warned
            && let Some(why) = session_mismatch(&run, self.gpus, &self.table.batches)
        {
            self.mismatch_warned = true;
            eprintln!(
                "copus watch: warning: the run does not match {} ({why}): advice \
                 is for the session's cluster and model, and none is given while the run's \
                 batch or layout is not one of its cells",
                self.session
            );
        }
        self.run = Some(run);
    }

    /// Observe the live estimate at `step` (`ci`: its 95 % interval, samples, bounded above
    /// where its upper end is finite; `steps`: the usable steps it rests on); write advice if
    /// there is some.
    pub fn observe(
        &mut self,
        step: u64,
        b_simple: f64,
        ci: Option<[f64; 2]>,
        steps: u64,
    ) -> anyhow::Result<()> {
        let bounded = ci.is_some_and(|c| c[1].is_finite());
        let Some(run) = self.run else {
            return Ok(());
        };
        if self.scale.too_far() {
            return Ok(());
        }
        // B_crit in the model's sequences, as the heatmap's batch axis counts them.
        let factor = self.scale.factor();
        let estimate = crate::plan::advice::LiveB {
            step,
            b_simple: b_simple * factor,
            bounded,
            ci: ci.map(|[lo, hi]| (lo * factor, hi * factor)),
            steps,
        };
        let (hw, model, eff, gpus_per_node) = &self.model_in_force;
        let ctx = crate::perf::PerfContext {
            hw,
            model,
            eff,
            gpus_per_node: *gpus_per_node,
        };
        let in_place = |cfg: &crate::perf::ParallelConfig, batch: u64| {
            crate::perf::ConfigCost::new(&ctx, cfg)
                .and_then(|c| c.at(&ctx, batch))
                .ok()
                .map(|p| p.tokens_per_s)
        };
        let Some(advice) = self
            .advisor
            .observe_with(&self.table, estimate, &run, Some(&in_place))
        else {
            return Ok(());
        };
        let line = serde_json::to_string(&AdviceLine {
            v: 1,
            advice: &advice,
        })?;
        match &mut self.sink {
            Sink::File(f) => {
                writeln!(f, "{line}")
                    .map_err(|e| anyhow::anyhow!("--advise {}: {e}", self.shown))?;
                f.flush()
                    .map_err(|e| anyhow::anyhow!("--advise {}: {e}", self.shown))?;
            }
            Sink::Tcp(server) => server.publish(&line),
        }
        eprintln!(
            "copus watch: advice for step {}: {}",
            advice.at_step, advice.reason
        );
        self.written.push(advice);
        Ok(())
    }

    /// The advice written so far.
    pub fn written(&self) -> &[Advice] {
        &self.written
    }

    /// Why no advice was written, when none was: the run's batch never told, its samples not
    /// the model's, or what the advisor said of the last estimate (the threshold, the dwell,
    /// the best cell already held) and how many estimates each reason kept quiet.
    pub fn why_none(&self) -> Option<String> {
        if !self.written.is_empty() {
            return None;
        }
        if self.run.is_none() {
            return Some("no record told the run's batch (its b_big and tokens)".into());
        }
        if self.scale.too_far() {
            return Some(
                "the run's samples are not the model's sequences (give --seq-len): its B_crit \
                 would be read at the wrong scale"
                    .into(),
            );
        }
        let last = self
            .advisor
            .why_no_advice()
            .unwrap_or("no estimate was observed");
        // What kept every estimate quiet, not only the last (an unbounded last step hid
        // 1199 steps whose best cell was smaller than the run's batch).
        Some(match self.advisor.quiet_tally() {
            Some(tally) => format!("{last}; estimates without advice: {tally}"),
            None => last.to_string(),
        })
    }
}
