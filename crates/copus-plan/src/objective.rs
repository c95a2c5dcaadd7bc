//! What the planner minimises: time to the target under a statistical-efficiency model.
//!
//! Both objectives count a phase's work in *minimal samples* ΔS_min (samples at B → 0 with the
//! best learning rate) and convert it to optimizer steps at global batch B, given the phase's
//! noise scale B_noise (samples). Time is steps × step time. See `docs/PLANNER.md` for the
//! derivation.
//!
//! - [`Objective::McCandlish`]: the learning rate is re-tuned for every batch (McCandlish et
//!   al. 2018, arXiv 1812.06162): steps = ΔS_min · (1/B + 1/B_noise).
//! - [`Objective::LrSqrt`]: the learning rate is tuned once for a reference batch B_ref and
//!   scaled by √(B/B_ref) (square-root scaling for Adam, Malladi et al. 2022, arXiv
//!   2205.10287). In McCandlish's quadratic model a step with learning rate r·ε_max gains
//!   ΔL_max·(2r − r²(1 + B_noise/B)); with r = √(B/B_ref)/(1 + B_noise/B_ref) this gives
//!   steps = ΔS_min / (B_noise · p(B)), p(B) = 2r − r²(1 + B_noise/B). At B = B_ref it equals
//!   the McCandlish count; elsewhere it is larger (the learning rate is off its optimum).

use serde::{Deserialize, Serialize};

/// The statistical-efficiency model the planner minimises time under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Objective {
    /// McCandlish et al. 2018: learning rate optimal at every batch.
    #[default]
    McCandlish,
    /// Learning rate tuned at a reference batch, scaled by √(B/B_ref) elsewhere.
    LrSqrt,
}

impl Objective {
    /// Name as written on the command line and in reports ("mccandlish", "lr-sqrt").
    pub fn name(self) -> &'static str {
        match self {
            Objective::McCandlish => "mccandlish",
            Objective::LrSqrt => "lr-sqrt",
        }
    }

    /// Parse a command-line name.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "mccandlish" => Ok(Objective::McCandlish),
            "lr-sqrt" => Ok(Objective::LrSqrt),
            _ => Err(format!(
                "unknown objective '{s}': expected mccandlish or lr-sqrt"
            )),
        }
    }
}

/// Per-step progress (fraction of the best possible, ΔL_max) below which a state is treated
/// as not converging: it is scored at this progress (a very long time) instead of ∞, so that
/// sums stay finite.
pub const MIN_PROGRESS: f64 = 1e-6;

/// An objective with its parameters, as the planner evaluates it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Efficiency {
    /// The objective.
    pub objective: Objective,
    /// Reference batch B_ref of [`Objective::LrSqrt`], samples (ignored by McCandlish).
    pub reference_batch: f64,
}

impl Efficiency {
    /// The McCandlish objective.
    pub const MCCANDLISH: Efficiency = Efficiency {
        objective: Objective::McCandlish,
        reference_batch: 1.0,
    };

    /// Optimizer steps per minimal sample at global batch `batch` and noise scale `b_noise`
    /// (both samples; both must be positive).
    pub fn steps_per_min_sample(&self, batch: f64, b_noise: f64) -> f64 {
        match self.objective {
            Objective::McCandlish => 1.0 / batch + 1.0 / b_noise,
            Objective::LrSqrt => 1.0 / (b_noise * self.progress(batch, b_noise)),
        }
    }

    /// Progress per step as a fraction of ΔL_max (the best a step can do at infinite batch),
    /// floored at [`MIN_PROGRESS`].
    pub fn progress(&self, batch: f64, b_noise: f64) -> f64 {
        match self.objective {
            Objective::McCandlish => batch / (batch + b_noise),
            Objective::LrSqrt => {
                let b_ref = self.reference_batch;
                let r = (batch / b_ref).sqrt() / (1.0 + b_noise / b_ref);
                (2.0 * r - r * r * (1.0 + b_noise / batch)).max(MIN_PROGRESS)
            }
        }
    }

    /// Whether training diverges at `batch` under this objective (`lr-sqrt` only: the √-scaled
    /// learning rate is too high for the noise, progress ≤ [`MIN_PROGRESS`]); such a state is
    /// scored at the floor, not run.
    pub fn diverges(&self, batch: f64, b_noise: f64) -> bool {
        match self.objective {
            Objective::McCandlish => false,
            Objective::LrSqrt => {
                let b_ref = self.reference_batch;
                let r = (batch / b_ref).sqrt() / (1.0 + b_noise / b_ref);
                2.0 * r - r * r * (1.0 + b_noise / batch) <= MIN_PROGRESS
            }
        }
    }

    /// Statistical efficiency relative to B → 0 with the best learning rate (1 at best):
    /// minimal samples per sample consumed.
    pub fn stat_eff(&self, batch: f64, b_noise: f64) -> f64 {
        1.0 / (batch * self.steps_per_min_sample(batch, b_noise))
    }
}

/// Planner settings of a session.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct PlannerSettings {
    /// Objective (`copus plan --objective` overrides it).
    pub objective: Objective,
    /// Reference batch B_ref of `lr-sqrt` (the batch the learning rate was tuned at), samples;
    /// `None`: the session's `current_batch`, else the scenario's `nominal_batch`.
    pub lr_reference_batch: Option<u64>,
    /// Where the session's `b_crit_scale` (the factor converting its B_crit source to the
    /// noise scale B_noise the efficiency formula needs) comes from, e.g. a paper and figure.
    pub b_crit_scale_source: Option<String>,
    /// The range of `b_crit_scale` where it was measured (lower, upper; dimensionless), e.g.
    /// the branch points' ratio intervals (`open --b-crit-from`): B_crit's interval is then
    /// B_simple's lower end times the lower factor and its upper end times the upper one, so
    /// the conversion's own uncertainty shows. `None`: B_simple's interval times the factor.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub b_crit_scale_range: Option<[f64; 2]>,
    /// Short horizon: plan only until the run's loss (mean over `loss_window` trajectory
    /// points) reaches this value, nats (`super::horizon`); `None`: the whole trajectory.
    /// Needs a source that carries a loss (a measured run).
    pub target_loss: Option<f64>,
    /// Trailing trajectory points the loss is averaged over for `target_loss`; `None`:
    /// [`super::horizon::DEFAULT_LOSS_WINDOW`].
    pub loss_window: Option<u32>,
}
