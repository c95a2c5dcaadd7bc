//! The trainer's hand-written backward pass and its records.

use copus::stats::StepStats;
use copus::trainer::mlp::accumulate_grad;
use copus::trainer::{MlpShape, Trainer, TrainerConfig, Workspace};
use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};

/// Worst relative error between the backward pass and central finite differences.
fn gradient_error(shape: MlpShape, n_samples: usize, seed: u64) -> f64 {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    let mut params = shape.init(&mut rng);
    // Larger weights than at init, so every gradient entry is well away from zero.
    params.iter_mut().for_each(|p| *p *= 2.0);
    let v = shape.vocab as u8;
    let ctx: Vec<Vec<u8>> = (0..n_samples)
        .map(|_| (0..shape.context).map(|_| rng.random_range(0..v)).collect())
        .collect();
    let samples: Vec<(&[u8], u8)> = ctx
        .iter()
        .map(|c| (&c[..], rng.random_range(0..v)))
        .collect();
    let mut ws = Workspace::new();
    let mut grad = vec![0.0; shape.n_params()];
    accumulate_grad(&shape, &params, &samples, &mut grad, &mut ws);
    let mut scratch = vec![0.0; shape.n_params()];
    let h = 1e-5;
    let mut worst: f64 = 0.0;
    for i in 0..params.len() {
        let orig = params[i];
        params[i] = orig + h;
        let up = accumulate_grad(&shape, &params, &samples, &mut scratch, &mut ws);
        params[i] = orig - h;
        let down = accumulate_grad(&shape, &params, &samples, &mut scratch, &mut ws);
        params[i] = orig;
        let numeric = (up - down) / (2.0 * h);
        worst = worst.max((numeric - grad[i]).abs() / (1e-6 + numeric.abs() + grad[i].abs()));
    }
    worst
}

#[test]
fn backward_pass_matches_finite_differences() {
    // Large enough for the GEMM path, and small enough for the plain-loop path.
    let big = MlpShape {
        vocab: 7,
        context: 2,
        embed: 3,
        hidden: 8,
    };
    let small = MlpShape {
        vocab: 5,
        context: 2,
        embed: 2,
        hidden: 3,
    };
    for (shape, n, seed) in [(big, 9, 11), (small, 3, 12)] {
        let worst = gradient_error(shape, n, seed);
        assert!(
            worst < 1e-5,
            "{shape:?}, {n} samples: worst relative error {worst}"
        );
    }
}

fn run(cfg: TrainerConfig, steps: usize) -> Vec<StepStats> {
    let mut t = Trainer::new(cfg).expect("trainer");
    (0..steps).map(|_| t.step()).collect()
}

#[test]
fn records_describe_the_micro_batches_and_are_consistent() {
    let cfg = TrainerConfig {
        micro_batches: 4,
        micro_batch_size: 8,
        ..TrainerConfig::default()
    };
    let recs = run(cfg, 3);
    for (i, r) in recs.iter().enumerate() {
        assert_eq!((r.v, r.step), (1, i as u64));
        assert_eq!((r.b_small, r.b_big, r.n_small), (8.0, 32.0, Some(4)));
        assert_eq!(r.tokens, Some(32.0 * (i + 1) as f64));
        assert!(r.step_time_s.is_some_and(|t| t >= 0.0));
        // Mean of K squared norms is at least the squared norm of the mean (Jensen).
        assert!(r.sq_small > r.sq_big && r.sq_big > 0.0);
        let names: Vec<&str> = r.layers.keys().collect();
        assert_eq!(names, ["embedding", "hidden", "output"]);
        let small: f64 = r.layers.values().map(|l| l.sq_small).sum();
        let big: f64 = r.layers.values().map(|l| l.sq_big).sum();
        assert!((small - r.sq_small).abs() <= 1e-12 * r.sq_small);
        assert!((big - r.sq_big).abs() <= 1e-12 * r.sq_big);
        copus::source::live::check_record(r).expect("the trainer writes valid protocol records");
    }
}

#[test]
fn runs_are_deterministic_given_the_seed() {
    let strip = |mut v: Vec<StepStats>| {
        v.iter_mut().for_each(|r| r.step_time_s = None);
        v
    };
    let cfg = |seed| TrainerConfig {
        seed,
        ..TrainerConfig::default()
    };
    let a = strip(run(cfg(3), 5));
    assert_eq!(a, strip(run(cfg(3), 5)));
    assert_ne!(a, strip(run(cfg(4), 5)));
}

#[test]
fn impossible_settings_are_errors() {
    for cfg in [
        TrainerConfig {
            micro_batches: 1,
            ..TrainerConfig::default()
        },
        TrainerConfig {
            micro_batch_size: 0,
            ..TrainerConfig::default()
        },
        TrainerConfig {
            lr: f64::NAN,
            ..TrainerConfig::default()
        },
    ] {
        assert!(Trainer::new(cfg).is_err());
    }
}
