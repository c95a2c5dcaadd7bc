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
    /// The session as given, for warnings.
    session: String,
    /// Whether the run was already said not to match the session.
    mismatch_warned: bool,
}

/// The options of `--advise`.
pub struct AdviseOptions<'a> {
    /// OUT: a path or tcp://HOST:PORT.
    pub out: &'a str,
    /// The session whose model and cluster are advised on.
    pub session: &'a Path,
    /// Write advice marked not to apply.
    pub dry_run: bool,
    /// Steps between two pieces of advice.
    pub min_dwell_steps: u64,
    /// Gain a switch must predict (fraction); `None`: the session's `switch_threshold`.
    pub threshold: Option<f64>,
    /// Replace an existing OUT file.
    pub force: bool,
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

impl Advising {
    /// Resolve the session, tabulate its throughput, open OUT.
    pub fn open(o: &AdviseOptions) -> anyhow::Result<Self> {
        let r = super::model_args::resolve_session(o.session, None, None)?;
        let eff = r.efficiency();
        let ctx = crate::perf::PerfContext {
            hw: &r.hardware,
            model: &r.model,
            eff: &eff,
            gpus_per_node: r.session.cluster.gpus_per_node,
        };
        let table = crate::goodput::throughput_table(&ctx, &r.cluster(), &r.session.search);
        let threshold = o.threshold.unwrap_or(r.session.costs.switch_threshold);
        if !(threshold.is_finite() && threshold >= 0.0) {
            anyhow::bail!("--advise-threshold {threshold}: must be a fraction ≥ 0 (0.05 is 5 %)");
        }
        let settings = AdviceSettings {
            threshold,
            min_dwell_steps: o.min_dwell_steps,
            b_crit_scale: r.session.b_crit_scale,
            form: r.session.stat_eff,
            dry_run: o.dry_run,
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
            session: o.session.display().to_string(),
            mismatch_warned: false,
        })
    }

    /// Note what the run does at record `r` (its batch and layout).
    pub fn record(&mut self, r: &StepStats) {
        if r.skipped.is_some() || !(r.b_big.is_finite() && r.b_big >= 1.0) {
            return;
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
                "copus watch: warning: the run does not match --session {} ({why}): advice \
                 is for the session's cluster and model, and none is given while the run's \
                 batch or layout is not one of its cells",
                self.session
            );
        }
        self.run = Some(run);
    }

    /// Observe the live estimate at `step` (`bounded`: its 95 % interval is bounded above);
    /// write advice if there is some.
    pub fn observe(&mut self, step: u64, b_simple: f64, bounded: bool) -> anyhow::Result<()> {
        let Some(run) = self.run else {
            return Ok(());
        };
        let estimate = crate::plan::advice::LiveB {
            step,
            b_simple,
            bounded,
        };
        let Some(advice) = self.advisor.observe(&self.table, estimate, &run) else {
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
            "copus watch: advice at step {}: {}",
            advice.at_step, advice.reason
        );
        self.written.push(advice);
        Ok(())
    }

    /// The advice written so far.
    pub fn written(&self) -> &[Advice] {
        &self.written
    }
}
