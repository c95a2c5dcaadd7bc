//! Short horizons: plan only until training reaches a target loss (`planner.target_loss`),
//! as the COPUS paper measures time to a target loss rather than over a whole run.
//!
//! A measured run carries one (noisy) loss per step. The horizon ends at the first trajectory
//! point where the mean loss over the last `window` points that carry a loss is at or below
//! the target; the trajectory is cut there (that point kept).

use crate::trajectory::Trajectory;
use serde::Serialize;

/// Trailing points the loss is averaged over when the session does not say.
pub const DEFAULT_LOSS_WINDOW: u32 = 50;

/// Where a short horizon ends.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Horizon {
    /// Target loss, nats.
    pub target_loss: f64,
    /// Trailing points the loss is averaged over.
    pub window_points: u32,
    /// Mean loss over the window where the target is reached, nats (≤ `target_loss`).
    pub reached_loss: f64,
    /// Step of the run at which it is reached.
    pub reached_at_step: u64,
    /// Trajectory-axis tokens at which it is reached.
    pub reached_at_tokens: f64,
    /// Trajectory points kept (of `points_total`).
    pub points_kept: usize,
    /// Trajectory points of the whole run.
    pub points_total: usize,
}

/// Why a trajectory cannot be cut at a target loss.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum HorizonError {
    /// A setting is out of range.
    #[error("planner.target_loss: {0}")]
    Invalid(String),
    /// The trajectory carries no loss (scenarios from laws do not).
    #[error(
        "planner.target_loss: trajectory '{0}' carries no loss (only measured runs with a `loss` field do)"
    )]
    NoLoss(String),
    /// The run never reaches the target.
    #[error(
        "planner.target_loss: trajectory '{label}' never reaches loss {target} (mean over {window} points); its lowest is {lowest:.4}"
    )]
    NotReached {
        /// Trajectory label.
        label: String,
        /// Target loss, nats.
        target: f64,
        /// Window, points.
        window: u32,
        /// Lowest windowed mean loss of the run, nats.
        lowest: f64,
    },
}

/// Cut `traj` at the first point where the mean of the last `window` losses is ≤ `target`.
pub fn cut_at_loss(
    traj: &Trajectory,
    target: f64,
    window: u32,
) -> Result<(Trajectory, Horizon), HorizonError> {
    if !(target.is_finite() && target > 0.0) {
        return Err(HorizonError::Invalid(format!(
            "the target must be a positive loss in nats, got {target}"
        )));
    }
    if window == 0 {
        return Err(HorizonError::Invalid(
            "planner.loss_window must be at least 1 point".into(),
        ));
    }
    let w = window as usize;
    let losses = traj
        .points
        .iter()
        .filter(|p| p.loss.is_some_and(f64::is_finite))
        .count();
    if losses == 0 {
        return Err(HorizonError::NoLoss(traj.label.clone()));
    }
    if w > losses {
        return Err(HorizonError::Invalid(format!(
            "planner.loss_window is {window} points but trajectory '{}' has only {losses} finite losses",
            traj.label
        )));
    }
    let mut recent: std::collections::VecDeque<f64> = std::collections::VecDeque::with_capacity(w);
    let mut sum = 0.0;
    let mut lowest = f64::INFINITY;
    let mut any = false;
    for (i, p) in traj.points.iter().enumerate() {
        let Some(l) = p.loss.filter(|l| l.is_finite()) else {
            continue;
        };
        any = true;
        recent.push_back(l);
        sum += l;
        if recent.len() > w {
            sum -= recent.pop_front().unwrap_or(0.0);
        }
        if recent.len() < w {
            continue;
        }
        let mean = sum / w as f64;
        lowest = lowest.min(mean);
        if mean <= target {
            let mut cut = traj.clone();
            cut.points.truncate(i + 1);
            let horizon = Horizon {
                target_loss: target,
                window_points: window,
                reached_loss: mean,
                reached_at_step: p.step,
                reached_at_tokens: p.tokens,
                points_kept: i + 1,
                points_total: traj.points.len(),
            };
            return Ok((cut, horizon));
        }
    }
    if !any {
        return Err(HorizonError::NoLoss(traj.label.clone()));
    }
    Err(HorizonError::NotReached {
        label: traj.label.clone(),
        target,
        window,
        lowest,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trajectory::TrajectoryPoint;

    fn traj(losses: &[Option<f64>]) -> Trajectory {
        Trajectory {
            label: "t".into(),
            seq_len: 1,
            points: losses
                .iter()
                .enumerate()
                .map(|(i, &loss)| TrajectoryPoint {
                    step: i as u64 * 10,
                    tokens: (i + 1) as f64 * 100.0,
                    b_crit: 5.0,
                    ci: None,
                    loss,
                })
                .collect(),
        }
    }

    #[test]
    fn cuts_at_the_first_windowed_mean_at_or_below_the_target() {
        // Means over 2: 3.5, 2.5, 1.5 (first ≤ 2 at index 3), then lower.
        let t = traj(&[Some(4.0), Some(3.0), Some(2.0), Some(1.0), Some(0.5)]);
        let (cut, h) = cut_at_loss(&t, 2.0, 2).expect("reached");
        assert_eq!(cut.points.len(), 4);
        assert_eq!(h.reached_at_step, 30);
        assert!((h.reached_loss - 1.5).abs() < 1e-12);
        assert_eq!((h.points_kept, h.points_total), (4, 5));
        // A single noisy low point does not end the horizon when the window averages it out.
        let t = traj(&[Some(4.0), Some(1.0), Some(4.0), Some(4.0)]);
        assert!(matches!(
            cut_at_loss(&t, 2.0, 2),
            Err(HorizonError::NotReached { lowest, .. }) if (lowest - 2.5).abs() < 1e-12
        ));
        assert!(
            cut_at_loss(&t, 1.0, 1).is_ok(),
            "window 1 takes the point itself"
        );
    }

    #[test]
    fn refuses_missing_losses_and_bad_settings() {
        let t = traj(&[None, None, None]);
        assert!(matches!(
            cut_at_loss(&t, 2.0, 1),
            Err(HorizonError::NoLoss(_))
        ));
        let t = traj(&[Some(1.0), Some(1.0)]);
        assert!(matches!(
            cut_at_loss(&t, f64::NAN, 1),
            Err(HorizonError::Invalid(_))
        ));
        assert!(matches!(
            cut_at_loss(&t, 2.0, 0),
            Err(HorizonError::Invalid(_))
        ));
    }
}
