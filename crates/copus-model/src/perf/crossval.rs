//! How well a calibration predicts step times it was not fitted on: k-fold cross-validation,
//! and the relative error of a parameter set on measurements.

use super::calibrate::{CalibrationError, Knob, Target, calibrate};
use super::measurements::Measurement;
use super::{ConfigCost, EfficiencyParams, PerfContext};

/// Relative errors `predicted/measured − 1` of `eff` on `points` (a point that cannot run is
/// an error naming it).
pub fn rel_errors(
    target: &Target,
    eff: &EfficiencyParams,
    points: &[Measurement],
) -> Result<Vec<f64>, CalibrationError> {
    let ctx = PerfContext {
        hw: target.hw,
        model: target.model,
        eff,
        gpus_per_node: target.gpus_per_node,
    };
    points
        .iter()
        .enumerate()
        .map(|(i, p)| {
            ConfigCost::new(&ctx, &p.config)
                .and_then(|c| c.at(&ctx, p.batch))
                .map(|pred| pred.step_time_s / p.step_time_s - 1.0)
                .map_err(|reason| CalibrationError::Invalid {
                    index: i,
                    config: p.config.to_string(),
                    reason,
                })
        })
        .collect()
}

/// Root-mean-square of relative errors, 0–1.
pub fn rms(errors: &[f64]) -> f64 {
    (errors.iter().map(|e| e * e).sum::<f64>() / errors.len().max(1) as f64).sqrt()
}

/// Mean absolute relative error, 0–1.
pub fn mean_abs(errors: &[f64]) -> f64 {
    errors.iter().map(|e| e.abs()).sum::<f64>() / errors.len().max(1) as f64
}

/// Relative errors on held-out points of `folds`-fold cross-validation (point i is in fold
/// i mod folds; leave-one-out when folds ≥ points): every point predicted by a calibration
/// fitted without it.
pub fn cross_validate(
    target: &Target,
    start: &EfficiencyParams,
    knobs: &[Knob],
    points: &[Measurement],
    folds: usize,
) -> Result<Vec<f64>, CalibrationError> {
    let k = folds.clamp(2, points.len().max(2));
    let mut errors = vec![0.0; points.len()];
    for fold in 0..k {
        let (test, train): (Vec<_>, Vec<_>) =
            points.iter().enumerate().partition(|(i, _)| i % k == fold);
        if test.is_empty() {
            continue;
        }
        let train: Vec<Measurement> = train.into_iter().map(|(_, m)| *m).collect();
        let fit = calibrate(target, start, knobs, &train, 50)?;
        let held: Vec<Measurement> = test.iter().map(|(_, m)| **m).collect();
        for ((i, _), e) in test.iter().zip(rel_errors(target, &fit.params, &held)?) {
            errors[*i] = e;
        }
    }
    Ok(errors)
}
