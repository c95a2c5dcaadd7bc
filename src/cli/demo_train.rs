//! `copus demo-train`: the built-in real trainer (a character-level MLP language model on
//! bundled public-domain text), streaming protocol v1 to a file, a TCP server, or stdout.

use crate::trainer::{FileSink, RecordSink, StatsServer, Trainer, TrainerConfig};
use clap::Args;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

/// Arguments of `copus demo-train`.
#[derive(Debug, Args)]
pub struct DemoTrainArgs {
    /// Optimizer steps to run (at least 1).
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..))]
    pub steps: u64,
    /// Write protocol v1 lines to this file or FIFO (created, flushed per line; an existing
    /// file only with --force); `-` (or no --out and no --serve) is standard output.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Replace `--out` if it exists.
    #[arg(long)]
    pub force: bool,
    /// Serve protocol v1 lines over TCP: tcp://HOST:PORT (tcp://:7000 is loopback, port 0
    /// picks a free port). Every client first receives the run so far.
    #[arg(long)]
    pub serve: Option<String>,
    /// The trainer's batch, seed and learning rate.
    #[command(flatten)]
    pub trainer: TrainerFlags,
    /// Learning-rate schedule: constant, cosine (linear warm-up over --warmup-steps, then a
    /// cosine decay to --min-lr-factor at the last step) or step (× --drop-factor from step
    /// --drop-at on). A changing rate moves B_simple (∝ 1/temperature): the lr diagnostic.
    #[arg(long, value_enum, default_value_t = ScheduleArg::Constant)]
    pub lr_schedule: ScheduleArg,
    /// cosine: warm-up steps (default: a tenth of --steps).
    #[arg(long)]
    pub warmup_steps: Option<u64>,
    /// cosine: the final factor on the base rate.
    #[arg(long, default_value_t = 0.1)]
    pub min_lr_factor: f64,
    /// step: the first step at the lower rate (default: half of --steps).
    #[arg(long)]
    pub drop_at: Option<u64>,
    /// step: the factor after the drop.
    #[arg(long, default_value_t = 0.1)]
    pub drop_factor: f64,
    /// Pause after each step, in milliseconds, to watch a run unfold at human speed.
    #[arg(long, default_value_t = 0)]
    pub step_delay_ms: u64,
    /// With --serve: keep serving this many seconds after the last step, so watchers that
    /// attach late (or reconnect) still receive the whole run.
    #[arg(long, default_value_t = 10.0)]
    pub linger_s: f64,
    /// No progress lines on stderr.
    #[arg(long)]
    pub quiet: bool,
}

/// The built-in trainer's flags that `demo-train` and `branch` share (the base run of a
/// branched experiment is the `demo-train` run with the same flags).
#[derive(Debug, Clone, Args)]
pub struct TrainerFlags {
    /// Micro-batches per step (K ≥ 2): the small batches of the two-batch estimator.
    #[arg(long, default_value_t = 8)]
    pub micro_batches: usize,
    /// Samples (context → next character pairs) per micro-batch.
    #[arg(long, default_value_t = 16)]
    pub micro_batch_size: usize,
    /// Seed of initialisation and data sampling (runs are reproducible, step times aside).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Base learning rate of momentum SGD.
    #[arg(long, default_value_t = 0.05)]
    pub lr: f64,
}

impl TrainerFlags {
    /// Each flag checked on its own, the error naming it (exit status 2): the trainer's own
    /// check said "micro-batches must be at least 2" and, of a NaN `--lr`, "lr must be > 0 and
    /// momentum in [0, 1)" (momentum is no flag).
    pub fn check(&self) -> anyhow::Result<()> {
        use crate::trainer::{MAX_MICRO_BATCH_SIZE, MAX_MICRO_BATCHES};
        if !(2..=MAX_MICRO_BATCHES).contains(&self.micro_batches) {
            super::flag_bail!(
                "--micro-batches {}: from 2 to {MAX_MICRO_BATCHES} (the two-batch estimator needs \
                 two batch sizes)",
                self.micro_batches
            );
        }
        if !(1..=MAX_MICRO_BATCH_SIZE).contains(&self.micro_batch_size) {
            super::flag_bail!(
                "--micro-batch-size {}: from 1 to {MAX_MICRO_BATCH_SIZE} samples",
                self.micro_batch_size
            );
        }
        if !(self.lr.is_finite() && self.lr > 0.0) {
            super::flag_bail!("--lr {}: must be a positive number", self.lr);
        }
        Ok(())
    }

    /// The trainer configuration of these flags with `schedule`.
    pub fn config(&self, schedule: crate::trainer::LrSchedule) -> TrainerConfig {
        TrainerConfig {
            micro_batches: self.micro_batches,
            micro_batch_size: self.micro_batch_size,
            seed: self.seed,
            lr: self.lr,
            schedule,
            ..TrainerConfig::default()
        }
    }

    /// Samples per step of the run (micro-batches × micro-batch size, saturating).
    pub fn batch(&self) -> usize {
        self.micro_batches.saturating_mul(self.micro_batch_size)
    }
}

/// `--lr-schedule`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ScheduleArg {
    /// The base rate throughout.
    Constant,
    /// Linear warm-up, then cosine decay.
    Cosine,
    /// One step drop.
    Step,
}

impl DemoTrainArgs {
    /// The schedule the flags describe.
    pub fn schedule(&self) -> crate::trainer::LrSchedule {
        use crate::trainer::LrSchedule;
        match self.lr_schedule {
            ScheduleArg::Constant => LrSchedule::Constant,
            ScheduleArg::Cosine => LrSchedule::WarmupCosine {
                warmup_steps: self.warmup_steps.unwrap_or(self.steps / 10),
                total_steps: self.steps,
                min_factor: self.min_lr_factor,
            },
            ScheduleArg::Step => LrSchedule::StepDrop {
                at_step: self.drop_at.unwrap_or(self.steps / 2),
                factor: self.drop_factor,
            },
        }
    }
}

/// Longest `--linger-s` accepted: a day.
const MAX_LINGER_S: f64 = 86_400.0;

/// Longest `--step-delay-ms` accepted: a minute a step (a run to watch at human speed needs
/// far less; 2^64 ms slept for ever).
const MAX_STEP_DELAY_MS: u64 = 60_000;

/// Run `copus demo-train`. Without --out or --serve the lines go to stdout.
pub fn run(args: &DemoTrainArgs) -> anyhow::Result<()> {
    args.trainer.check()?;
    let cfg = args.trainer.config(args.schedule());
    if !(args.linger_s.is_finite() && (0.0..=MAX_LINGER_S).contains(&args.linger_s)) {
        super::flag_bail!("--linger-s must be between 0 and {MAX_LINGER_S} seconds");
    }
    if args.step_delay_ms > MAX_STEP_DELAY_MS {
        super::flag_bail!(
            "--step-delay-ms {}: at most {MAX_STEP_DELAY_MS} (a minute a step)",
            args.step_delay_ms
        );
    }
    let mut trainer = Trainer::new(cfg)?;
    // `-` is standard output, as `watch -` reads standard input (it created a file named `-`).
    let mut file = args
        .out
        .as_deref()
        .filter(|p| *p != std::path::Path::new("-"))
        .map(|p| FileSink::create(p, args.force))
        .transpose()?;
    let mut server = args
        .serve
        .as_deref()
        .map(|a| {
            StatsServer::bind(a).map_err(|e| match e {
                // An address that is no TCP address is the flag's value, said as such.
                crate::trainer::TrainerError::Config(why) => {
                    anyhow::Error::from(super::FlagValueError(format!(
                        "--serve: {}",
                        why.trim_start_matches("bad live target ")
                    )))
                }
                other => other.into(),
            })
        })
        .transpose()?;
    if let Some(s) = &server {
        if !s.is_loopback() {
            eprintln!(
                "copus demo-train: warning: serving on a non-loopback address ({})",
                s.local_addr()
            );
        }
        // Scripts read this line to learn the port when they asked for port 0.
        eprintln!(
            "copus demo-train: serving protocol v1 on tcp://{}",
            s.local_addr()
        );
    }
    let shape = trainer.shape();
    if !args.quiet {
        eprintln!(
            "copus demo-train: char MLP (vocab {}, context {}, embed {}, hidden {}; {} parameters), \
             {} micro-batches x {} samples per step, {} steps",
            shape.vocab,
            shape.context,
            shape.embed,
            shape.hidden,
            shape.n_params(),
            args.trainer.micro_batches,
            args.trainer.micro_batch_size,
            args.steps
        );
    }
    let stdout = std::io::stdout();
    let to_stdout = args.out.as_deref() == Some(std::path::Path::new("-"))
        || (args.out.is_none() && args.serve.is_none());
    let progress_every = (args.steps / 10).max(1);
    // Ctrl+C or SIGTERM ends the run after its current step (every record written is whole)
    // and says where; the exit status is then 128 + the signal's number.
    let signals = crate::signals::StopSignals::register_headless()?;
    // Steps whose loss was not finite, and whether the last one's was (a diverged run).
    let (mut non_finite, mut ended_non_finite) = (0u64, false);
    for i in 0..args.steps {
        if let Some(sig) = signals.received() {
            if !args.quiet {
                eprintln!(
                    "copus demo-train: stopped after {i} of {} steps",
                    args.steps
                );
            }
            return Err(crate::signals::StoppedBySignal(sig).into());
        }
        let rec = trainer.step();
        ended_non_finite = !rec.loss.is_some_and(f64::is_finite);
        non_finite += u64::from(ended_non_finite);
        if let Some(f) = file.as_mut() {
            f.write_record(&rec)?;
        }
        if let Some(s) = server.as_mut() {
            s.write_record(&rec)?;
        }
        if to_stdout {
            let mut out = stdout.lock();
            let line = crate::trainer::sink::protocol_line(&rec);
            match writeln!(out, "{line}").and_then(|()| out.flush()) {
                Ok(()) => {}
                // The reader went away (`| head`): stop quietly, like other Unix filters.
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
                Err(e) => return Err(anyhow::Error::new(e).context("cannot write to stdout")),
            }
        }
        if !args.quiet && ((i + 1) % progress_every == 0 || i + 1 == args.steps) {
            // The step as the records number it (from 0), and how many of the run are done.
            eprintln!(
                "copus demo-train: step {i} ({}/{} done)  loss {:.3} nats",
                i + 1,
                args.steps,
                rec.loss.unwrap_or(f64::NAN)
            );
        }
        if args.step_delay_ms > 0 {
            std::thread::sleep(Duration::from_millis(args.step_delay_ms));
        }
    }
    if server.is_some() && args.linger_s > 0.0 {
        if !args.quiet {
            eprintln!(
                "copus demo-train: done; serving the run for {} s more",
                args.linger_s
            );
        }
        // The linger ends early on a stop signal too.
        let until = std::time::Instant::now() + Duration::from_secs_f64(args.linger_s);
        while std::time::Instant::now() < until && signals.received().is_none() {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    match signals.received() {
        Some(sig) => Err(crate::signals::StoppedBySignal(sig).into()),
        // A run that ends with a loss that is not finite diverged: said, exit status 1 (it
        // exited 0 after every step but the first read "loss NaN"). Its records are whole.
        None if ended_non_finite => anyhow::bail!(
            "the run diverged: {non_finite} of {} steps had a loss that is not finite, the last \
             included (their records are marked skipped); lower --lr",
            args.steps
        ),
        None => Ok(()),
    }
}
