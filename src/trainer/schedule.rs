//! Learning-rate schedules of the built-in trainer, so that the learning-rate diagnostic (and
//! the drift it causes: B_simple ∝ 1/temperature) can be shown on a run made in seconds.

/// A learning-rate schedule: the factor on the base learning rate at each step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LrSchedule {
    /// The base rate throughout.
    Constant,
    /// Linear warm-up over `warmup_steps` from 0 to the base rate, then a cosine decay to
    /// `min_factor` × the base rate at `total_steps`.
    WarmupCosine {
        /// Steps of linear warm-up.
        warmup_steps: u64,
        /// Step at which the decay reaches `min_factor`.
        total_steps: u64,
        /// Final factor, 0–1.
        min_factor: f64,
    },
    /// The base rate, multiplied by `factor` from step `at_step` on.
    StepDrop {
        /// First step at the lower rate.
        at_step: u64,
        /// Factor after the drop, (0, 1].
        factor: f64,
    },
}

impl LrSchedule {
    /// The factor on the base learning rate at optimizer step `step` (0-based), in (0, 1].
    pub fn factor(&self, step: u64) -> f64 {
        match *self {
            LrSchedule::Constant => 1.0,
            LrSchedule::WarmupCosine {
                warmup_steps,
                total_steps,
                min_factor,
            } => {
                if step < warmup_steps {
                    // Never 0: the first step moves, as real warm-ups do.
                    (step + 1) as f64 / warmup_steps as f64
                } else {
                    let span = total_steps.saturating_sub(warmup_steps).max(1) as f64;
                    let t = ((step - warmup_steps) as f64 / span).min(1.0);
                    min_factor + (1.0 - min_factor) * 0.5 * (1.0 + (std::f64::consts::PI * t).cos())
                }
            }
            LrSchedule::StepDrop { at_step, factor } => {
                if step >= at_step {
                    factor
                } else {
                    1.0
                }
            }
        }
    }

    /// Why the schedule cannot run, if it cannot.
    pub fn problem(&self) -> Option<String> {
        match *self {
            LrSchedule::Constant => None,
            LrSchedule::WarmupCosine {
                warmup_steps,
                total_steps,
                min_factor,
            } => {
                if !(min_factor > 0.0 && min_factor <= 1.0) {
                    Some(format!(
                        "the cosine's final factor must lie in (0, 1], got {min_factor}"
                    ))
                } else if warmup_steps >= total_steps {
                    Some(format!(
                        "the warm-up ({warmup_steps} steps) must be shorter than the run ({total_steps})"
                    ))
                } else {
                    None
                }
            }
            LrSchedule::StepDrop { factor, .. } => (!(factor > 0.0 && factor <= 1.0))
                .then(|| format!("the drop factor must lie in (0, 1], got {factor}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warmup_rises_cosine_falls_and_a_drop_steps_down() {
        let s = LrSchedule::WarmupCosine {
            warmup_steps: 10,
            total_steps: 110,
            min_factor: 0.1,
        };
        assert!((s.factor(0) - 0.1).abs() < 1e-12);
        assert!((s.factor(9) - 1.0).abs() < 1e-12);
        assert!((s.factor(10) - 1.0).abs() < 1e-12);
        assert!(
            (s.factor(60) - 0.55).abs() < 1e-12,
            "half-way: {}",
            s.factor(60)
        );
        assert!((s.factor(110) - 0.1).abs() < 1e-12);
        assert!((s.factor(500) - 0.1).abs() < 1e-12);
        let d = LrSchedule::StepDrop {
            at_step: 5,
            factor: 0.25,
        };
        assert_eq!((d.factor(4), d.factor(5)), (1.0, 0.25));
        assert!(d.problem().is_none() && s.problem().is_none());
        let bad = LrSchedule::StepDrop {
            at_step: 5,
            factor: 0.0,
        };
        assert!(bad.problem().is_some());
    }
}
