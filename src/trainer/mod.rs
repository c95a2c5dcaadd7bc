//! The built-in real trainer behind `copus demo-train`: a small character-level MLP language
//! model trained with momentum SGD on bundled public-domain text, measuring per-micro-batch
//! gradients so anyone can watch a live run (protocol v1) without Python or a GPU.
//!
//! Per step, K micro-batches of b samples each give gradients g_k (mean over their b
//! samples); the record carries `b_small = b`, `b_big = K·b`, `n_small = K`,
//! `sq_small = mean_k |g_k|²`, `sq_big = |mean_k g_k|²` (whole model and per layer). The
//! norms are of the **raw** gradients, measured before the optimizer touches them (no
//! momentum, clipping or preconditioning; docs/STATISTICS.md). A sample is one (context,
//! next-character) pair, so one sample is one predicted token.
//!
//! Everything in a record except `step_time_s` is a deterministic function of the config.

pub mod branch;
pub mod corpus;
pub mod mlp;
pub mod schedule;
pub mod serve;
pub mod sink;

pub use corpus::Corpus;
pub use mlp::{MlpShape, Workspace};
pub use schedule::LrSchedule;
pub use serve::StatsServer;
pub use sink::{FileSink, RecordSink};

use crate::stats::record::layer_map::{LayerMap, intern};
use crate::stats::record::step::{LayerSq, StepStats};
use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};
use std::time::Instant;

/// Errors of the built-in trainer.
#[derive(Debug, thiserror::Error)]
pub enum TrainerError {
    /// An impossible setting.
    #[error("trainer config: {0}")]
    Config(String),
    /// Writing or serving records failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done (names the file or address).
        context: String,
        /// The OS error.
        source: std::io::Error,
    },
}

/// Settings of the built-in trainer.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainerConfig {
    /// Micro-batches per step (K ≥ 2: the small batches of the two-batch estimator).
    pub micro_batches: usize,
    /// Samples per micro-batch (b ≥ 1).
    pub micro_batch_size: usize,
    /// Seed of initialisation and data sampling.
    pub seed: u64,
    /// Base learning rate (by default constant: lr decay inflates B_simple,
    /// docs/STATISTICS.md).
    pub lr: f64,
    /// The learning-rate schedule over the base rate.
    pub schedule: LrSchedule,
    /// Momentum of SGD (0 for plain SGD).
    pub momentum: f64,
    /// Characters of context.
    pub context: usize,
    /// Embedding width per character.
    pub embed: usize,
    /// Hidden units.
    pub hidden: usize,
}

impl Default for TrainerConfig {
    fn default() -> Self {
        Self {
            micro_batches: 8,
            micro_batch_size: 16,
            seed: 0,
            lr: 0.05,
            schedule: LrSchedule::Constant,
            momentum: 0.9,
            context: 4,
            embed: 10,
            hidden: 64,
        }
    }
}

/// A model being trained, one optimizer step per [`Trainer::step`].
#[derive(Clone)]
pub struct Trainer {
    cfg: TrainerConfig,
    corpus: Corpus,
    shape: MlpShape,
    params: Vec<f64>,
    velocity: Vec<f64>,
    grad_k: Vec<f64>,
    grad_sum: Vec<f64>,
    ws: Workspace,
    rng: Xoshiro256PlusPlus,
    step: u64,
    samples_seen: u64,
}

/// Most micro-batches per step the trainer accepts.
pub const MAX_MICRO_BATCHES: usize = 4096;
/// Most samples per micro-batch the trainer accepts (a CPU trainer: far beyond useful).
pub const MAX_MICRO_BATCH_SIZE: usize = 1 << 16;
/// Most context characters, embedding or hidden width the trainer accepts.
pub const MAX_WIDTH: usize = 1 << 14;

impl Trainer {
    /// A fresh model on the bundled text.
    pub fn new(cfg: TrainerConfig) -> Result<Self, TrainerError> {
        Self::with_corpus(cfg, Corpus::builtin()?)
    }

    /// A fresh model on `corpus`.
    pub fn with_corpus(cfg: TrainerConfig, corpus: Corpus) -> Result<Self, TrainerError> {
        let bad = |m: &str| Err(TrainerError::Config(m.to_owned()));
        if cfg.micro_batches < 2 {
            return bad("micro-batches must be at least 2 (two batch sizes are needed)");
        }
        if cfg.micro_batch_size == 0 || cfg.context == 0 || cfg.embed == 0 || cfg.hidden == 0 {
            return bad("micro-batch size, context, embedding and hidden sizes must be >= 1");
        }
        if !(cfg.lr.is_finite() && cfg.lr > 0.0 && (0.0..1.0).contains(&cfg.momentum)) {
            return bad("lr must be > 0 and momentum in [0, 1)");
        }
        if cfg.micro_batches > MAX_MICRO_BATCHES {
            return bad(&format!(
                "micro-batches must be at most {MAX_MICRO_BATCHES}"
            ));
        }
        if cfg.micro_batch_size > MAX_MICRO_BATCH_SIZE {
            return bad(&format!(
                "micro-batch size must be at most {MAX_MICRO_BATCH_SIZE} samples"
            ));
        }
        if cfg.context > MAX_WIDTH || cfg.embed > MAX_WIDTH || cfg.hidden > MAX_WIDTH {
            return bad(&format!(
                "context, embedding and hidden sizes must be at most {MAX_WIDTH}"
            ));
        }
        if let Some(why) = cfg.schedule.problem() {
            return bad(&why);
        }
        if corpus.ids().len() <= cfg.context + 1 {
            return bad("the text is shorter than the context");
        }
        let shape = MlpShape {
            vocab: corpus.vocab_size(),
            context: cfg.context,
            embed: cfg.embed,
            hidden: cfg.hidden,
        };
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(cfg.seed);
        let params = shape.init(&mut rng);
        let n = params.len();
        Ok(Self {
            ws: Workspace::new(),
            cfg,
            corpus,
            shape,
            params,
            velocity: vec![0.0; n],
            grad_k: vec![0.0; n],
            grad_sum: vec![0.0; n],
            rng,
            step: 0,
            samples_seen: 0,
        })
    }

    /// The model's sizes.
    pub fn shape(&self) -> MlpShape {
        self.shape
    }

    /// Measure the step's gradients, then take one optimizer step; returns the step's record.
    pub fn step(&mut self) -> StepStats {
        let t0 = Instant::now();
        let (k, b) = (self.cfg.micro_batches, self.cfg.micro_batch_size);
        let groups = self.shape.layer_groups();
        let mut sq_small = [0.0f64; 3];
        let mut loss = 0.0;
        self.grad_sum.fill(0.0);
        let ids = self.corpus.ids();
        let ctx = self.cfg.context;
        for _ in 0..k {
            let samples: Vec<(&[u8], u8)> = (0..b)
                .map(|_| {
                    let i = self.rng.random_range(0..ids.len() - ctx);
                    (&ids[i..i + ctx], ids[i + ctx])
                })
                .collect();
            self.grad_k.fill(0.0);
            loss += mlp::accumulate_grad(
                &self.shape,
                &self.params,
                &samples,
                &mut self.grad_k,
                &mut self.ws,
            );
            for (sq, (_, r)) in sq_small.iter_mut().zip(&groups) {
                *sq += self.grad_k[r.clone()].iter().map(|g| g * g).sum::<f64>();
            }
            axpy(&mut self.grad_sum, 1.0, &self.grad_k);
        }
        let inv_k = 1.0 / k as f64;
        self.grad_sum.iter_mut().for_each(|g| *g *= inv_k); // now the big-batch mean gradient
        let mut layers = LayerMap::with_capacity(groups.len());
        let (mut tot_small, mut tot_big) = (0.0, 0.0);
        for (sq, (name, r)) in sq_small.iter().zip(&groups) {
            let big: f64 = self.grad_sum[r.clone()].iter().map(|g| g * g).sum();
            let small = sq * inv_k;
            tot_small += small;
            tot_big += big;
            layers.insert(
                intern(name),
                LayerSq {
                    sq_small: small,
                    sq_big: big,
                },
            );
        }
        loss *= inv_k;
        self.samples_seen += (k * b) as u64;
        let mut rec = StepStats::new(self.step, b as f64, (k * b) as f64, tot_small, tot_big);
        rec.n_small = Some(k as u32);
        rec.tokens = Some(self.samples_seen as f64);
        let lr_now = self.cfg.lr * self.cfg.schedule.factor(self.step);
        rec.lr = Some(lr_now);
        rec.layers = layers;
        if tot_small.is_finite() && tot_big.is_finite() && loss.is_finite() {
            rec.loss = Some(loss);
            // Momentum SGD on the raw mean gradient, after measuring it.
            let (lr, mu) = (lr_now, self.cfg.momentum);
            for ((p, v), g) in self
                .params
                .iter_mut()
                .zip(&mut self.velocity)
                .zip(&self.grad_sum)
            {
                *v = mu * *v + g;
                *p -= lr * *v;
            }
        } else {
            rec.skipped = Some("non-finite gradient or loss: update skipped".into());
            rec.sq_small = 0.0;
            rec.sq_big = 0.0;
            rec.layers.clear();
        }
        self.step += 1;
        rec.step_time_s = Some(t0.elapsed().as_secs_f64());
        rec
    }
}

fn axpy(y: &mut [f64], alpha: f64, x: &[f64]) {
    y.iter_mut().zip(x).for_each(|(y, x)| *y += alpha * x);
}
