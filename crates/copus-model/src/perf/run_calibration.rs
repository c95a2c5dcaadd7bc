//! Calibration from a measured run: the step times that a stats file or live run already
//! carries (`step_time_s` with `config`) fitted in the background, and the run's own
//! configuration measured against predicted — what the explorer shows as "calibrated on N
//! steps, ±x %".

use super::calibrate::{Knob, Target, calibrate};
use super::calibration_file::CalibrationFile;
use super::crossval::{rel_errors, rms};
use super::measurements::{from_step_stats, group_by_configuration, group_medians, median};
use super::{ConfigCost, EfficiencyParams, ParallelConfig, PerfContext, Recompute};
use copus_stats::StepStats;

/// Fewest timed steps a run needs before it is calibrated.
pub const MIN_STEPS: usize = 3;

/// A run's calibration and how its own configuration compares.
#[derive(Debug, Clone, PartialEq)]
pub struct RunCalibration {
    /// The fitted calibration (knobs chosen by how many distinct configurations ran).
    pub file: CalibrationFile,
    /// The configuration the run spent most steps in.
    pub config: ParallelConfig,
    /// Its global batch, samples.
    pub batch: u64,
    /// Median measured step time of that configuration, seconds.
    pub measured_step_s: f64,
    /// The profile model's prediction for it, seconds.
    pub profile_step_s: f64,
    /// The calibrated model's prediction for it, seconds.
    pub calibrated_step_s: f64,
}

/// Calibrate on the timed records of a run (ZeRO stage and recompute as given: the protocol
/// does not carry them). `None` when fewer than [`MIN_STEPS`] records carry a step time and a
/// configuration, or when the run's configuration cannot run under the model.
pub fn calibrate_run(
    records: &[StepStats],
    target: &Target,
    start: &EfficiencyParams,
    zero: u8,
    recompute: Recompute,
) -> Option<RunCalibration> {
    let points = from_step_stats(records, zero, recompute);
    if points.len() < MIN_STEPS {
        return None;
    }
    // One median time per (configuration, batch), so a long run of one layout does not
    // outweigh the few steps of another.
    let groups = group_by_configuration(&points);
    let (&(config, batch), times) = groups.iter().max_by_key(|(_, t)| t.len())?;
    let measured_step_s = median(times);
    let summary = group_medians(&groups);
    // One distinct configuration determines one parameter (the GEMM plateau); more add the
    // per-micro-batch cost and the scale-out link.
    let knobs: &[Knob] = match summary.len() {
        1 => &[Knob::MaxEff],
        2..=3 => &[Knob::MaxEff, Knob::MicrobatchOverhead],
        _ => &[Knob::MaxEff, Knob::MicrobatchOverhead, Knob::InterLink],
    };
    let fit = calibrate(target, start, knobs, &summary, 60).ok()?;
    let profile = rel_errors(target, start, &points).ok()?;
    let calibrated = rel_errors(target, &fit.params, &points).ok()?;
    let predict = |eff: &EfficiencyParams| {
        let ctx = PerfContext {
            hw: target.hw,
            model: target.model,
            eff,
            gpus_per_node: target.gpus_per_node,
        };
        ConfigCost::new(&ctx, &config)
            .and_then(|c| c.at(&ctx, batch))
            .ok()
            .map(|p| p.step_time_s)
    };
    Some(RunCalibration {
        config,
        batch,
        measured_step_s,
        profile_step_s: predict(start)?,
        calibrated_step_s: predict(&fit.params)?,
        file: CalibrationFile {
            hardware: target.hw.name.clone(),
            model: target.model.name.clone(),
            n: points.len(),
            rms_rel_error: rms(&calibrated),
            cv_rel_error: f64::NAN,
            profile_rms_rel_error: rms(&profile),
            fitted: knobs.iter().map(|k| k.name().to_string()).collect(),
            params: fit.params,
            stack: None,
            recompute: Vec::new(),
            unwritten: Vec::new(),
        },
    })
}

impl RunCalibration {
    /// One line for the explorer: steps, error, and the run's configuration measured against
    /// predicted.
    pub fn summary(&self) -> String {
        format!(
            "calibrated on {} steps, ±{:.0} % (profile ±{:.0} %); {} @ {}: measured {:.3} s, predicted {:.3} s (profile {:.3} s)",
            self.file.n,
            self.file.rms_rel_error * 100.0,
            self.file.profile_rms_rel_error * 100.0,
            self.config.layout_label(),
            self.batch,
            self.measured_step_s,
            self.calibrated_step_s,
            self.profile_step_s
        )
    }
}
