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
        let mut params = file.params.upgrade_legacy();
        // Files written before the stage split was a setting (2026-12-06) carry none: the split
        // of the preset they were fitted under, not the generic default.
        if !text.contains("stage_split")
            && let Some(preset) = file.stack.as_deref().and_then(preset_of_label)
        {
            params.stage_split = preset.settings().stage_split;
        }
        Ok(Self { params, ..file })
    }

    /// Pretty RON text of this calibration.
    pub fn to_ron(&self) -> Result<String, CalibrationFileError> {
        let cfg = ron::ser::PrettyConfig::new().struct_names(false);
        ron::ser::to_string_pretty(self, cfg)
            .map_err(|e| CalibrationFileError::Serialize(e.to_string()))
    }
}

/// The preset a stack label names ("deepspeed", "deepspeed (grad_reduce fp32)").
fn preset_of_label(label: &str) -> Option<super::stack::StackPreset> {
    let name = label.split(" (").next().unwrap_or(label).trim();
    super::stack::StackPreset::parse(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::efficiency::StageSplit;

    #[test]
    fn a_file_from_before_the_stage_split_takes_its_stacks_split() {
        let dir = std::env::temp_dir().join(format!("copus-cal-split-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let file = CalibrationFile {
            hardware: "h100-sxm".into(),
            model: "llama3-8b".into(),
            n: 6,
            rms_rel_error: 0.01,
            cv_rel_error: 0.02,
            profile_rms_rel_error: 0.1,
            fitted: vec!["max_eff".into()],
            params: EfficiencyParams::default(),
            stack: Some("deepspeed (grad_reduce fp32)".into()),
            recompute: Vec::new(),
        };
        let text = file.to_ron().expect("ron");
        assert!(text.contains("stage_split"));
        let old: String = text
            .lines()
            .filter(|l| !l.contains("stage_split"))
            .collect::<Vec<_>>()
            .join("\n");
        let path = dir.join("old.ron");
        std::fs::write(&path, old).expect("write");
        let read = CalibrationFile::load(&path).expect("load");
        assert_eq!(read.params.stage_split, StageSplit::Balanced);
        // A file that states its split keeps it.
        let path = dir.join("new.ron");
        std::fs::write(&path, text).expect("write");
        let read = CalibrationFile::load(&path).expect("load");
        assert_eq!(read.params.stage_split, StageSplit::Ends);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
