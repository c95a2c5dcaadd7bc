//! `copus branch`: the built-in trainer's branched experiment, writing branch records that
//! `copus cbs` measures the critical batch size from (docs/CBS.md).

use crate::trainer::TrainerError;
use crate::trainer::branch::{BranchPlan, LrScaling, run_branches};
use clap::Args;
use std::io::Write;
use std::path::PathBuf;

/// Arguments of `copus branch`.
#[derive(Debug, Args)]
pub struct BranchArgs {
    /// Base-run steps to branch from, comma-separated and ascending (e.g. 50,400,1500).
    #[arg(long, value_delimiter = ',', required = true)]
    pub at: Vec<u64>,
    /// Global batches of the branches, samples, comma-separated and ascending.
    #[arg(long, value_delimiter = ',', default_value = "8,16,32,64,128,256,512")]
    pub batches: Vec<usize>,
    /// Seeds per batch (≥ 2: the intervals are a bootstrap over seeds).
    #[arg(long, default_value_t = 3)]
    pub seeds: u64,
    /// Samples each branch trains on after its branch point.
    #[arg(long, default_value_t = 32_768)]
    pub budget_samples: u64,
    /// Samples between loss evaluations (a multiple of every batch; default: the largest
    /// batch times the smallest whole number giving at most 32 evaluations per branch).
    #[arg(long)]
    pub eval_every: Option<u64>,
    /// Samples in the fixed evaluation set every branch's loss is measured on.
    #[arg(long, default_value_t = 2048)]
    pub eval_samples: usize,
    /// How a branch's learning rate follows its batch, relative to the base run's batch
    /// (micro-batches × micro-batch size).
    #[arg(long, value_enum, default_value_t = LrScalingArg::Sqrt)]
    pub lr_scaling: LrScalingArg,
    /// Write the branch records here (an existing file only with --force).
    #[arg(long)]
    pub out: PathBuf,
    /// Also write the base run's protocol v1 records here, for `copus analyze RUN --branches
    /// OUT`: up to the last branch point and a tenth of that (at least 50 steps) beyond, so
    /// that the run's estimate at the last branch point has steps on both sides.
    #[arg(long)]
    pub run_out: Option<PathBuf>,
    /// Replace --out and --run-out if they exist.
    #[arg(long)]
    pub force: bool,
    /// The base run: the trainer's flags as `demo-train` takes them (constant learning rate).
    #[command(flatten)]
    pub trainer: super::demo_train::TrainerFlags,
    /// No progress lines on stderr.
    #[arg(long)]
    pub quiet: bool,
}

/// `--lr-scaling`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LrScalingArg {
    /// lr · √(B / B_run).
    Sqrt,
    /// lr · B / B_run.
    Linear,
    /// The base run's rate.
    None,
}

impl From<LrScalingArg> for LrScaling {
    fn from(a: LrScalingArg) -> Self {
        match a {
            LrScalingArg::Sqrt => LrScaling::Sqrt,
            LrScalingArg::Linear => LrScaling::Linear,
            LrScalingArg::None => LrScaling::None,
        }
    }
}

/// Most evaluations per branch the default `--eval-every` aims at.
const DEFAULT_EVALS: u64 = 32;

impl BranchArgs {
    /// The experiment the flags describe.
    pub fn plan(&self) -> BranchPlan {
        // Evaluations fall on a whole step of every batch: a multiple of their least common
        // multiple (of the largest batch alone, 8, 24, 32 gave 64, not a step of 24).
        let step = self
            .batches
            .iter()
            .try_fold(1u64, |l, &b| {
                crate::trainer::branch::lcm(l, (b as u64).max(1))
            })
            .unwrap_or(u64::MAX)
            .max(1);
        let eval_every = self.eval_every.unwrap_or_else(|| {
            let per = self.budget_samples.div_ceil(DEFAULT_EVALS).max(1);
            per.div_ceil(step).saturating_mul(step)
        });
        BranchPlan {
            at_steps: self.at.clone(),
            batches: self.batches.clone(),
            seeds: self.seeds,
            budget_samples: self.budget_samples,
            eval_every,
            eval_samples: self.eval_samples,
            lr_scaling: self.lr_scaling.into(),
        }
    }
}

fn io_err(path: &std::path::Path, source: std::io::Error) -> TrainerError {
    TrainerError::Io {
        context: format!("cannot write {}", path.display()),
        source,
    }
}

/// Seconds between two progress lines of the base run.
const PROGRESS_EVERY_S: f64 = 5.0;

/// Progress of the base run toward the last branch point: a line every few seconds with the
/// time left at the pace so far, so that a far branch point (`--at 100000000`) says how long
/// it will take instead of running on in silence.
struct BaseProgress {
    /// The last branch point, steps.
    last_at: u64,
    started: std::time::Instant,
    /// Seconds since `started` of the last line written.
    last_line_s: f64,
}

impl BaseProgress {
    fn new(last_at: u64) -> Self {
        Self {
            last_at,
            started: std::time::Instant::now(),
            last_line_s: 0.0,
        }
    }

    /// The line to print after base-run step `step` (0-based), if one is due.
    fn line(&mut self, step: u64) -> Option<String> {
        let done = step.saturating_add(1);
        let elapsed = self.started.elapsed().as_secs_f64();
        if done >= self.last_at || elapsed - self.last_line_s < PROGRESS_EVERY_S {
            return None;
        }
        self.last_line_s = elapsed;
        Some(base_progress_text(done, self.last_at, elapsed))
    }
}

/// "base run at step D of L (about T left at this pace; Ctrl-C stops it)".
fn base_progress_text(done: u64, last_at: u64, elapsed_s: f64) -> String {
    let left_s = elapsed_s / done.max(1) as f64 * last_at.saturating_sub(done) as f64;
    let left = if left_s > 365.0 * 86_400.0 {
        "over a year".to_string()
    } else {
        format!("about {}", crate::format::duration(left_s))
    };
    format!(
        "copus branch: base run at step {done} of {last_at}, the last branch point ({left} \
         left at this pace; Ctrl-C stops it)"
    )
}

/// Run `copus branch`.
pub fn run(args: &BranchArgs) -> anyhow::Result<()> {
    let plan = args.plan();
    if let Some(why) = plan.problem() {
        super::flag_bail!("{why}");
    }
    if let Some(p) = &args.run_out {
        // One file for both streams: without --force it was created and then refused as
        // "exists"; with it, the two interleaved into torn lines.
        crate::fsutil::check_distinct("--run-out", p, &[("--out", &args.out)])?;
    }
    args.trainer.check()?;
    // Both outputs checked before either is created: a refused --run-out left an empty --out
    // behind, which the rerun then refused as "exists".
    for p in std::iter::once(&args.out).chain(args.run_out.as_ref()) {
        crate::fsutil::check_stream_output(p, args.force).map_err(|e| io_err(p, e))?;
    }
    let cfg = args.trainer.config(crate::trainer::LrSchedule::Constant);
    // A --run-out that cannot be created (a missing directory) removes the --out this run
    // created, so that nothing is left behind.
    let out_existed = args.out.exists();
    let mut out = std::io::BufWriter::new(
        crate::fsutil::create_stream_output(&args.out, args.force)
            .map_err(|e| io_err(&args.out, e))?,
    );
    let mut run_out = match &args.run_out {
        Some(p) => match crate::fsutil::create_stream_output(p, args.force) {
            Ok(f) => Some((std::io::BufWriter::new(f), p.clone())),
            Err(e) => {
                drop(out);
                if !out_existed {
                    let _ = std::fs::remove_file(&args.out);
                }
                return Err(io_err(p, e).into());
            }
        },
        None => None,
    };
    let total = plan.at_steps.len() * plan.batches.len();
    let mut done = 0usize;
    let mut last = None;
    if !args.quiet {
        eprintln!(
            "copus branch: {} branch points × {} batches × {} seeds, {} samples each, lr {}-scaled from batch {}",
            plan.at_steps.len(),
            plan.batches.len(),
            plan.seeds,
            plan.budget_samples,
            super::json_name(&plan.lr_scaling),
            args.trainer.batch()
        );
    }
    let mut progress = BaseProgress::new(plan.at_steps.last().copied().unwrap_or(0));
    run_branches(
        cfg,
        &plan,
        |rec| {
            if !args.quiet
                && let Some(line) = progress.line(rec.step)
            {
                eprintln!("{line}");
            }
            if let Some((w, p)) = run_out.as_mut() {
                let line = crate::trainer::sink::protocol_line(rec);
                writeln!(w, "{line}").map_err(|e| io_err(p, e))?;
            }
            Ok(())
        },
        |line| {
            let key = (line.branch.from_step, line.branch.batch);
            if !args.quiet && last != Some(key) && line.branch.seed == 0 && line.step == 0 {
                done += 1;
                eprintln!(
                    "copus branch: [{done}/{total}] step {} batch {} (lr {:.4})",
                    key.0, key.1, line.lr
                );
                last = Some(key);
            }
            let text = serde_json::to_string(line).unwrap_or_default();
            writeln!(out, "{text}").map_err(|e| io_err(&args.out, e))
        },
    )?;
    out.flush().map_err(|e| io_err(&args.out, e))?;
    let run_written = match run_out {
        Some((mut w, p)) => {
            w.flush().map_err(|e| io_err(&p, e))?;
            Some(p)
        }
        None => None,
    };
    if !args.quiet {
        eprintln!(
            "copus branch: wrote {}; measure it with: copus cbs {}",
            args.out.display(),
            args.out.display()
        );
        // The base run too, with the command that sets the two side by side.
        if let Some(p) = run_written {
            eprintln!(
                "copus branch: wrote the base run to {}; its noise scale beside the measured \
                 critical batch: copus analyze {} --branches {}",
                p.display(),
                p.display(),
                args.out.display()
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_progress_says_the_time_left_at_the_pace_so_far() {
        // 100 of 1000 steps in 10 s: 900 steps left, 90 s.
        let t = base_progress_text(100, 1000, 10.0);
        assert!(t.contains("step 100 of 1000"), "{t}");
        assert!(t.contains("about 1.5 min left"), "{t}");
        // A branch point no run reaches says so instead of a number of hours.
        let t = base_progress_text(1000, u64::MAX, 10.0);
        assert!(t.contains("over a year left"), "{t}");
    }
}
