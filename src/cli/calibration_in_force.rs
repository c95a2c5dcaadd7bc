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
    /// Fitted on the run's own timed steps when it was loaded (no calibration named; as the
    /// explorer does): `path` is then the run's stats file.
    pub run_steps: bool,
}

/// Where a calibration is used (the model crate's [`CalibrationUse`]).
pub use crate::perf::calibration_file::CalibrationUse as UsedFor;

/// Calibration `c` (read from `path`) as used for `to`, and the caveats of using it for
/// another model, stack or GPU than it was fitted on.
pub fn calibration_used(
    path: &Path,
    c: &CalibrationFile,
    to: &UsedFor<'_>,
) -> (CalibrationUsed, Vec<String>) {
    let caveats = c.caveats_for(to);
    let used = CalibrationUsed {
        path: path.display().to_string(),
        hardware: c.hardware.clone(),
        model: c.model.clone(),
        stack: c.stack.clone(),
        measurements: c.n,
        fitted: c.fitted.clone(),
        rms_rel_error: c.rms_rel_error,
        run_steps: false,
    };
    (used, caveats)
}

/// The calibration a resolved session's numbers use (`--calibration` over the session's own;
/// none where the session sets its own `efficiency`), with its caveats.
pub fn of_session(
    r: &crate::session::Resolved,
    cli_path: Option<&Path>,
) -> (Option<CalibrationUsed>, Vec<String>) {
    let run_file = match &r.session.source {
        crate::session::DataSource::Stats { path, .. } if r.calibration_from_run => {
            Some(r.resolve_path(path))
        }
        _ => None,
    };
    let path = cli_path
        .map(Path::to_path_buf)
        .or_else(|| r.session.calibration.as_deref().map(|p| r.resolve_path(p)))
        .or(run_file);
    match (r.calibration_in_force(), path) {
        (Some(c), Some(path)) => {
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
            let used = CalibrationUsed {
                run_steps: r.calibration_from_run,
                ..used
            };
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

/// The text naming a calibration in force, wrapped as notes are and with a newline (one line
/// of 230 characters broke mid-word in a terminal), control characters escaped.
pub fn text_lines(c: &CalibrationUsed) -> String {
    let line = text_line(c);
    let text = line.strip_prefix("calibration: ").unwrap_or(&line);
    super::escape_controls(&crate::format::wrap_labelled("calibration: ", text))
}

/// The line naming a calibration in force, unwrapped (the explorer's notes, JSON).
pub fn text_line(c: &CalibrationUsed) -> String {
    let named = if c.run_steps {
        format!("the run's timed steps ({})", c.path)
    } else {
        c.path.clone()
    };
    format!(
        "calibration: {named} ({} fitted on {} {} of {} on {}{}; rms {:.1} %)",
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
