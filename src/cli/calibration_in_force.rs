//! The calibration a command's numbers use, as `predict`, `grid` and `plan` report it: the
//! file, what it was fitted on, and a caveat for each way it is used outside that (another
//! model, stack or GPU).

use crate::perf::calibration_file::CalibrationFile;
use serde::Serialize;
use std::path::Path;

/// The calibration file a prediction used, and what it was fitted on.
#[derive(Debug, Serialize)]
pub struct CalibrationUsed {
    /// The file, as given.
    pub path: String,
    /// Hardware profile its measurements ran on.
    pub hardware: String,
    /// Model its measurements ran.
    pub model: String,
    /// The stack they ran under, where the file records it.
    pub stack: Option<String>,
    /// Measurements fitted.
    pub measurements: usize,
    /// Parameters fitted.
    pub fitted: Vec<String>,
    /// Root-mean-square relative error of the fit on its measurements, 0–1.
    pub rms_rel_error: f64,
}

/// Where a calibration is used: the model, stack and hardware of the prediction.
pub struct UsedFor<'a> {
    /// Model name.
    pub model: &'a str,
    /// The recompute policy predicted with, where one configuration is (`predict`).
    pub recompute: Option<&'a str>,
    /// The stack in force.
    pub stack: &'a crate::perf::Stack,
    /// Hardware profile name.
    pub hardware: &'a str,
}

/// Calibration `c` (read from `path`) as used for `to`, and the caveats of using it for
/// another model, stack or GPU than it was fitted on.
pub fn calibration_used(
    path: &Path,
    c: &CalibrationFile,
    to: &UsedFor<'_>,
) -> (CalibrationUsed, Vec<String>) {
    let mut caveats = Vec::new();
    let links_only = c.model.starts_with("nccl-tests");
    if !links_only && c.model != to.model {
        caveats.push(format!(
            "calibrated on {}'s steps, used here for {}: fitted efficiencies carry over to \
             another shape only as far as its kernels are alike",
            c.model, to.model
        ));
    }
    // The precision is said apart: an FP8 prediction from BF16 steps is no other stack (its
    // FP8 plateau moved with the fitted BF16 one).
    let without_precision = crate::perf::Stack {
        precision: None,
        ..to.stack.clone()
    };
    let fp8_here = to.stack.precision == Some(crate::perf::efficiency::Precision::Fp8);
    let same = |s: &str| s == to.stack.label() || (fp8_here && s == without_precision.label());
    if let Some(fitted_under) = c.stack.as_deref().filter(|s| !same(s)) {
        caveats.push(format!(
            "calibrated under {fitted_under}, predicted here under {}: the fit absorbed what \
             that stack does differently",
            to.stack.label()
        ));
    } else if fp8_here && c.stack.as_deref() == Some(without_precision.label().as_str()) {
        caveats.push(format!(
            "calibrated on BF16 steps, predicted here in FP8: the FP8 GEMM plateau is not fitted \
             (this calibration's: {:.3} of the FP8 peak)",
            c.params.fp8_max_eff
        ));
    }
    if let Some(r) = to.recompute
        && !c.recompute.is_empty()
        && !c.recompute.iter().any(|m| m == r)
    {
        caveats.push(format!(
            "calibrated on steps run with recompute {}, predicted here with recompute {r}: \
             give --recompute {} to predict the runs as they were measured",
            c.recompute.join(", "),
            c.recompute[0]
        ));
    }
    if c.hardware != to.hardware {
        caveats.push(format!(
            "calibrated on {}, used here for {}: its efficiencies describe the other GPU's \
             kernels and links",
            c.hardware, to.hardware
        ));
    }
    let used = CalibrationUsed {
        path: path.display().to_string(),
        hardware: c.hardware.clone(),
        model: c.model.clone(),
        stack: c.stack.clone(),
        measurements: c.n,
        fitted: c.fitted.clone(),
        rms_rel_error: c.rms_rel_error,
    };
    (used, caveats)
}

/// The calibration a resolved session's numbers use (`--calibration` over the session's own;
/// none where the session sets its own `efficiency`), with its caveats.
pub fn of_session(
    r: &crate::session::Resolved,
    cli_path: Option<&Path>,
) -> (Option<CalibrationUsed>, Vec<String>) {
    let in_force = r.use_calibration
        && (r.session.efficiency.is_none() || r.efficiency_edited_from_calibration);
    let path = cli_path
        .map(Path::to_path_buf)
        .or_else(|| r.session.calibration.as_deref().map(|p| r.resolve_path(p)));
    match (&r.calibration, path) {
        (Some(c), Some(path)) if in_force => {
            let stack = r.stack();
            let (used, caveats) = calibration_used(
                &path,
                c,
                &UsedFor {
                    recompute: None,
                    model: &r.model.name,
                    stack: &stack,
                    hardware: &r.hardware.name,
                },
            );
            let mut caveats = caveats;
            if r.efficiency_edited_from_calibration {
                caveats.push(format!(
                    "the calibration {} is in force with parameters the command line changed \
                     (named in the note 'the command line set …')",
                    used.path
                ));
            }
            (Some(used), caveats)
        }
        _ => (None, Vec::new()),
    }
}

/// The text line naming a calibration in force.
pub fn text_line(c: &CalibrationUsed) -> String {
    format!(
        "calibration: {} ({} fitted on {} {} of {} on {}{}; rms {:.1} %)",
        c.path,
        c.fitted.join(", "),
        c.measurements,
        if c.model == crate::perf::calibration_file::LINKS_ONLY_MODEL {
            "message sizes"
        } else {
            // CSV rows, or a stats file's configurations (each its median step).
            "measurements"
        },
        c.model,
        c.hardware,
        c.stack
            .as_deref()
            .map_or(String::new(), |s| format!(" under {s}")),
        c.rms_rel_error * 100.0
    )
}
