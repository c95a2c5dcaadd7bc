//! Calibration files: the efficiency parameters `copus calibrate` fitted to a user's measured
//! step times, with the fit's quality, as RON. `--calibration FILE` on `predict`, `grid` and
//! `plan`, and a session's `calibration` field, use them in place of the hardware profile's.

use super::EfficiencyParams;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The `model` a calibration fitted on nccl-tests outputs names: its fit saw links, not a
/// model, and counts message sizes, not steps.
pub const LINKS_ONLY_MODEL: &str = "nccl-tests (links only)";

/// A saved calibration. Unknown fields are refused (a misspelt parameter would otherwise
/// silently keep its default).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CalibrationFile {
    /// Hardware profile the measurements ran on.
    pub hardware: String,
    /// Model the measurements ran.
    pub model: String,
    /// Measurements fitted.
    pub n: usize,
    /// Root-mean-square relative error of the fitted model on the measurements, 0–1.
    pub rms_rel_error: f64,
    /// Root-mean-square relative error on held-out measurements (k-fold cross-validation), 0–1.
    pub cv_rel_error: f64,
    /// The same for the uncalibrated profile model, for comparison, 0–1.
    pub profile_rms_rel_error: f64,
    /// Names of the fitted parameters.
    pub fitted: Vec<String>,
    /// The full parameter set (fitted and kept).
    pub params: EfficiencyParams,
    /// The training stack the measurements ran under (its label, as `predict` prints it);
    /// `None` in files written before it was recorded, and for fits that do not depend on it
    /// (links from nccl-tests, a run's own steps).
    #[serde(default)]
    pub stack: Option<String>,
    /// The recompute policies of the steps fitted (as their rows stated them, or as
    /// `calibrate` assumed where a row did not: `none`, `selective`, `op`, `full`); empty in
    /// files written before it was recorded and for fits without steps (links).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recompute: Vec<String>,
}

/// Why a calibration file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum CalibrationFileError {
    /// Reading or writing failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The text is not a calibration.
    #[error("{path}:{line}:{col}: {msg}")]
    Parse {
        /// The file.
        path: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        col: usize,
        /// What is wrong.
        msg: String,
    },
    /// Serialising failed.
    #[error("serialising calibration: {0}")]
    Serialize(String),
}

/// Largest calibration file read, bytes.
const MAX_BYTES: u64 = 1 << 20;

impl CalibrationFile {
    /// Read a calibration file.
    pub fn load(path: &Path) -> Result<Self, CalibrationFileError> {
        let io = |source| CalibrationFileError::Io {
            path: path.display().to_string(),
            source,
        };
        let text = copus_io::read_capped(path, MAX_BYTES).map_err(io)?;
        let file: Self = ron::from_str(&text).map_err(|e| CalibrationFileError::Parse {
            path: path.display().to_string(),
            line: e.span.start.line,
            col: e.span.start.col,
            msg: e.code.to_string(),
        })?;
        Ok(Self {
            params: file.params.upgrade_legacy(),
            ..file
        })
    }

    /// Pretty RON text of this calibration.
    pub fn to_ron(&self) -> Result<String, CalibrationFileError> {
        let cfg = ron::ser::PrettyConfig::new().struct_names(false);
        ron::ser::to_string_pretty(self, cfg)
            .map_err(|e| CalibrationFileError::Serialize(e.to_string()))
    }
}
