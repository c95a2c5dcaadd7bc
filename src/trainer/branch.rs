//! The built-in trainer's branched experiment (`copus branch`, docs/CBS.md): train the base
//! run to each branch point, then from a copy of its state (parameters, momentum) train each
//! batch of a list with several seeds for a common sample budget, and record every branch's
//! loss on a fixed evaluation set against the samples it has seen since the branch point.
//!
//! The evaluation set is the same for every branch, so differences between branches are not
//! blurred by evaluation noise; every branch is evaluated at the same sample counts (multiples
//! of `eval_every`, which the largest batch divides), so no loss has to be interpolated.

use super::{Trainer, TrainerConfig, TrainerError};
use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};
use serde::Serialize;

/// How a branch's learning rate follows its batch, relative to the base run's batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LrScaling {
    /// `lr · √(B / B_run)` (the usual rule for adaptive optimizers).
    Sqrt,
    /// `lr · B / B_run` (Goyal et al. 2017, for SGD).
    Linear,
    /// The base run's rate at every batch.
    None,
}

impl LrScaling {
    /// The factor on the base run's rate for a branch of `batch` samples.
    pub fn factor(self, batch: usize, run_batch: usize) -> f64 {
        let ratio = batch as f64 / run_batch as f64;
        match self {
            Self::Sqrt => ratio.sqrt(),
            Self::Linear => ratio,
            Self::None => 1.0,
        }
    }
}

/// Settings of a branched experiment.
#[derive(Debug, Clone, PartialEq)]
pub struct BranchPlan {
    /// Steps of the base run to branch from, ascending.
    pub at_steps: Vec<u64>,
    /// Global batches of the branches, samples.
    pub batches: Vec<usize>,
    /// Seeds per batch.
    pub seeds: u64,
    /// Samples each branch trains on.
    pub budget_samples: u64,
    /// Samples between evaluations (a multiple of every batch).
    pub eval_every: u64,
    /// Samples in the evaluation set.
    pub eval_samples: usize,
    /// How the learning rate follows the batch.
    pub lr_scaling: LrScaling,
}

/// Most branch points, batches or seeds a plan may name.
pub const MAX_BRANCH_LIST: usize = 64;
/// Most samples one branch may train on.
pub const MAX_BUDGET_SAMPLES: u64 = 1 << 26;
/// Most samples in the evaluation set.
pub const MAX_EVAL_SAMPLES: usize = 1 << 16;

impl BranchPlan {
    /// Why the plan cannot run, if it cannot.
    pub fn problem(&self) -> Option<String> {
        if self.at_steps.is_empty() || self.at_steps.len() > MAX_BRANCH_LIST {
            return Some(format!("--at: 1 to {MAX_BRANCH_LIST} branch steps"));
        }
        if self.at_steps.windows(2).any(|w| w[0] >= w[1]) {
            return Some("--at: branch steps must be strictly ascending".into());
        }
        if self.batches.len() < 3 || self.batches.len() > MAX_BRANCH_LIST {
            return Some(format!(
                "--batches: {} given, 3 to {MAX_BRANCH_LIST} wanted (the measurement needs at \
                 least 3 batch sizes)",
                self.batches.len()
            ));
        }
        if self.batches.windows(2).any(|w| w[0] >= w[1]) || self.batches[0] == 0 {
            return Some("--batches: batches must be ≥ 1 and strictly ascending".into());
        }
        if let Some(&b) = self
            .batches
            .iter()
            .find(|&&b| b > super::MAX_MICRO_BATCH_SIZE)
        {
            return Some(format!(
                "--batches: {b} is above the trainer's {} samples per step",
                super::MAX_MICRO_BATCH_SIZE
            ));
        }
        if !(2..=MAX_BRANCH_LIST as u64).contains(&self.seeds) {
            return Some(format!(
                "--seeds {}: from 2 to {MAX_BRANCH_LIST} (intervals need at least 2)",
                self.seeds
            ));
        }
        if self.eval_every == 0 {
            return Some("--eval-every 0: must be a multiple of every batch".to_string());
        }
        if let Some(b) = self
            .batches
            .iter()
            .find(|&&b| !self.eval_every.is_multiple_of(b as u64))
        {
            // The least common multiple of the batches is the smallest that works.
            let lcm = self
                .batches
                .iter()
                .try_fold(1u64, |l, &b| lcm(l, b as u64))
                .map_or(String::new(), |l| format!("; the smallest that is: {l}"));
            return Some(format!(
                "--eval-every {}: must be a multiple of every batch, and is not of {b}{lcm}",
                self.eval_every
            ));
        }
        if self.budget_samples < 2 * self.eval_every || self.budget_samples > MAX_BUDGET_SAMPLES {
            return Some(format!(
                "--budget-samples {}: must be from {} (two evaluations, --eval-every {} each) to \
                 {MAX_BUDGET_SAMPLES}",
                self.budget_samples,
                2 * self.eval_every,
                self.eval_every
            ));
        }
        if self.eval_samples == 0 || self.eval_samples > MAX_EVAL_SAMPLES {
            return Some(format!("--eval-samples: 1 to {MAX_EVAL_SAMPLES}"));
        }
        None
    }
}

/// The `branch` object of a branch record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BranchId {
    /// Base-run step the branch starts from.
    pub from_step: u64,
    /// Global batch, samples.
    pub batch: u64,
    /// Seed.
    pub seed: u64,
}

/// One line of a branched experiment (docs/PROTOCOL.md, "Branch records").
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BranchLine {
    /// Protocol version, 1.
    pub v: u32,
    /// Which branch.
    pub branch: BranchId,
    /// Optimizer steps since the branch point.
    pub step: u64,
    /// Samples since the branch point.
    pub samples: u64,
    /// Tokens since the branch point (one predicted character per sample).
    pub tokens: u64,
    /// Mean cross-entropy on the evaluation set, nats.
    pub loss: f64,
    /// The branch's learning rate.
    pub lr: f64,
    /// The base run's record just before the branch point (its step and training loss), by
    /// which a branch file is told from another run's; `None` at step 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base: Option<crate::stats::estimate::cbs::BaseMark>,
}

impl Trainer {
    /// Mean loss (nats) of the current parameters over `starts` (corpus offsets of a context).
    pub fn eval_loss(&mut self, starts: &[usize]) -> f64 {
        let ids = self.corpus.ids();
        let ctx = self.cfg.context;
        let mut total = 0.0;
        for chunk in starts.chunks(1024) {
            let samples: Vec<(&[u8], u8)> = chunk
                .iter()
                .map(|&i| (&ids[i..i + ctx], ids[i + ctx]))
                .collect();
            self.grad_k.fill(0.0);
            let mean = super::mlp::accumulate_grad(
                &self.shape,
                &self.params,
                &samples,
                &mut self.grad_k,
                &mut self.ws,
            );
            total += mean * chunk.len() as f64;
        }
        total / starts.len().max(1) as f64
    }

    /// One momentum-SGD step on `batch` fresh samples at rate `lr`, without measuring the
    /// gradient noise (a branch only needs its loss). Returns the batch's mean loss.
    pub fn plain_step(&mut self, batch: usize, lr: f64) -> f64 {
        let ids = self.corpus.ids();
        let ctx = self.cfg.context;
        let samples: Vec<(&[u8], u8)> = (0..batch)
            .map(|_| {
                let i = self.rng.random_range(0..ids.len() - ctx);
                (&ids[i..i + ctx], ids[i + ctx])
            })
            .collect();
        self.grad_sum.fill(0.0);
        let loss = super::mlp::accumulate_grad(
            &self.shape,
            &self.params,
            &samples,
            &mut self.grad_sum,
            &mut self.ws,
        );
        if loss.is_finite() {
            let mu = self.cfg.momentum;
            for ((p, v), g) in self
                .params
                .iter_mut()
                .zip(&mut self.velocity)
                .zip(&self.grad_sum)
            {
                *v = mu * *v + g;
                *p -= lr * *v;
            }
        }
        self.step += 1;
        self.samples_seen += batch as u64;
        loss
    }

    /// A copy of this run that draws its samples from `seed` (a branch).
    fn branch_copy(&self, seed: u64) -> Trainer {
        let mut copy = self.clone();
        let mix = self.cfg.seed ^ self.step.rotate_left(24) ^ seed.rotate_left(48) ^ 0x000b_4ac4;
        copy.rng = Xoshiro256PlusPlus::seed_from_u64(mix);
        copy
    }

    /// The base run's rate at its current step.
    fn lr_now(&self) -> f64 {
        self.cfg.lr * self.cfg.schedule.factor(self.step)
    }
}

/// Steps the base run goes on past its last branch point, at least [`BASE_TAIL_MIN_STEPS`]
/// and a tenth of the run: the run's two-sided B_simple at that point then has steps on both
/// sides (at the run's last step it is one-sided, its interval often open above), so the
/// measured/estimated ratio there does not depend on where the run happened to stop.
pub fn base_tail_steps(last_branch: u64) -> u64 {
    (last_branch / 10).max(BASE_TAIL_MIN_STEPS)
}

/// Fewest steps the base run goes on past its last branch point.
pub const BASE_TAIL_MIN_STEPS: u64 = 50;

/// Run the branched experiment of `plan` on the trainer `cfg` describes. `on_base` receives
/// each base-run record up to the last branch point and [`base_tail_steps`] after it;
/// `on_branch` each branch record, branch by branch. Deterministic given the settings.
pub fn run_branches(
    cfg: TrainerConfig,
    plan: &BranchPlan,
    mut on_base: impl FnMut(&crate::stats::record::step::StepStats) -> Result<(), TrainerError>,
    mut on_branch: impl FnMut(&BranchLine) -> Result<(), TrainerError>,
) -> Result<(), TrainerError> {
    if let Some(why) = plan.problem() {
        return Err(TrainerError::Config(why));
    }
    let run_batch = cfg.micro_batches * cfg.micro_batch_size;
    let mut base = Trainer::new(cfg)?;
    let ids_len = base.corpus.ids().len();
    let ctx = base.cfg.context;
    let mut eval_rng = Xoshiro256PlusPlus::seed_from_u64(0xe7a1);
    let eval: Vec<usize> = (0..plan.eval_samples)
        .map(|_| eval_rng.random_range(0..ids_len - ctx))
        .collect();
    let mut last_base: Option<crate::stats::estimate::cbs::BaseMark> = None;
    for &at in &plan.at_steps {
        while base.step < at {
            let rec = base.step();
            on_base(&rec)?;
            last_base = rec.loss.map(|loss| crate::stats::estimate::cbs::BaseMark {
                step: rec.step,
                loss,
            });
        }
        let lr0 = base.lr_now();
        for &batch in &plan.batches {
            let lr = lr0 * plan.lr_scaling.factor(batch, run_batch);
            for seed in 0..plan.seeds {
                let mut br = base.branch_copy(seed);
                let id = BranchId {
                    from_step: at,
                    batch: batch as u64,
                    seed,
                };
                let mut samples = 0u64;
                let mut step = 0u64;
                loop {
                    if samples.is_multiple_of(plan.eval_every) {
                        let loss = br.eval_loss(&eval);
                        on_branch(&BranchLine {
                            v: 1,
                            branch: id,
                            step,
                            samples,
                            tokens: samples,
                            loss,
                            lr,
                            base: last_base,
                        })?;
                        if !loss.is_finite() {
                            break;
                        }
                    }
                    if samples >= plan.budget_samples {
                        break;
                    }
                    br.plain_step(batch, lr);
                    samples += batch as u64;
                    step += 1;
                }
            }
        }
    }
    if let Some(&last) = plan.at_steps.last() {
        let end = last.saturating_add(base_tail_steps(last));
        while base.step < end {
            let rec = base.step();
            on_base(&rec)?;
        }
    }
    Ok(())
}

/// Least common multiple of `a` and `b`; `None` when it overflows.
pub fn lcm(a: u64, b: u64) -> Option<u64> {
    let (mut x, mut y) = (a, b);
    while y != 0 {
        (x, y) = (y, x % y);
    }
    if x == 0 {
        return Some(0);
    }
    (a / x).checked_mul(b)
}

#[cfg(test)]
mod eval_every_tests {
    use super::*;

    fn plan(batches: &[usize], eval_every: u64) -> BranchPlan {
        BranchPlan {
            at_steps: vec![20],
            batches: batches.to_vec(),
            seeds: 2,
            budget_samples: 4096,
            eval_every,
            eval_samples: 256,
            lr_scaling: LrScaling::Sqrt,
        }
    }

    #[test]
    fn names_the_batch_it_is_not_a_multiple_of_and_the_smallest_that_works() {
        let why = plan(&[8, 24, 32], 64)
            .problem()
            .expect("64 is not a multiple of 24");
        assert!(why.contains("not of 24") && why.contains("96"), "{why}");
        assert_eq!(plan(&[8, 24, 32], 96).problem(), None);
        assert_eq!(lcm(4, 6), Some(12));
        assert_eq!(lcm(u64::MAX, u64::MAX - 1), None);
    }
}
