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
    /// Parameters the file's `params` does not write (a file from before they existed, or
    /// edited by hand): [`CalibrationFile::params_on`] takes them from the hardware profile
    /// in use and [`CalibrationFile::caveats_for`] says so. Never written.
    #[serde(skip)]
    pub unwritten: Vec<String>,
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
    /// The text reads, but says something no calibration says (a fitted parameter missing,
    /// a stack or recompute policy copus does not know).
    #[error("{path}: {msg}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong, naming the field.
        msg: String,
    },
    /// Serialising failed.
    #[error("serialising calibration: {0}")]
    Serialize(String),
}

/// Largest calibration file read, bytes.
const MAX_BYTES: u64 = 1 << 20;

/// Where a calibration is used: the model, stack and hardware of a prediction.
pub struct CalibrationUse<'a> {
    /// Model name.
    pub model: &'a str,
    /// The recompute policy predicted with, where one configuration is (`predict`).
    pub recompute: Option<&'a str>,
    /// The stack in force.
    pub stack: &'a super::stack::Stack,
    /// Hardware profile name.
    pub hardware: &'a str,
}

impl CalibrationFile {
    /// The caveats of using this calibration for `to`: another model, stack, precision,
    /// recompute policy or GPU than it was fitted on, one sentence each (what `predict`,
    /// `grid`, `plan` and the explorer say).
    pub fn caveats_for(&self, to: &CalibrationUse<'_>) -> Vec<String> {
        use super::efficiency::Precision;
        let c = self;
        let mut caveats = Vec::new();
        let links_only = c.model.starts_with("nccl-tests");
        if !links_only && c.model != to.model {
            caveats.push(format!(
                "calibrated on {}'s steps, used here for {}: fitted efficiencies carry over to \
                 another shape only as far as its kernels are alike",
                c.model, to.model
            ));
        }
        // The precision is said apart: an FP8 prediction from BF16 steps is no other stack
        // (its FP8 plateau moved with the fitted BF16 one).
        let without_precision = super::stack::Stack {
            precision: None,
            ..to.stack.clone()
        };
        let fp8_here = to.stack.precision == Some(Precision::Fp8);
        let same = |s: &str| s == to.stack.label() || (fp8_here && s == without_precision.label());
        if let Some(fitted_under) = c.stack.as_deref().filter(|s| !same(s)) {
            caveats.push(format!(
                "calibrated under {fitted_under}, predicted here under {}: the fit absorbed what \
                 that stack does differently",
                to.stack.label()
            ));
        } else if fp8_here && c.stack.as_deref() == Some(without_precision.label().as_str()) {
            caveats.push(format!(
                "calibrated on BF16 steps, predicted here in FP8: the FP8 GEMM plateau is not \
                 fitted (this calibration's: {:.3} of the FP8 peak)",
                c.params.fp8_max_eff
            ));
        }
        if let Some(r) = to.recompute
            && !c.recompute.is_empty()
            && !c.recompute.iter().any(|m| m == r)
        {
            // The hint names a policy the stack in force runs (a torchtitan fit's `op` is
            // no Megatron-Core flag).
            let base = to.stack.base();
            let runs = |m: &&String| {
                super::Recompute::parse(m).is_some_and(|p| base.recompute_policies().contains(&p))
            };
            let hint = match c.recompute.iter().find(runs) {
                Some(m) => {
                    format!("give --recompute {m} to predict the runs as they were measured")
                }
                None => format!(
                    "{} runs none of those, so the runs cannot be predicted as they were measured",
                    base.name()
                ),
            };
            caveats.push(format!(
                "calibrated on steps run with recompute {}, predicted here with recompute {r}: \
                 {hint}",
                c.recompute.join(", "),
            ));
        }
        if !c.unwritten.is_empty() {
            let (them, value) = if c.unwritten.len() == 1 {
                ("it", "value")
            } else {
                ("them", "values")
            };
            caveats.push(format!(
                "the calibration gives no {}: the {} profile's {value} {} used for {them} \
                 (a file from an older copus, or edited by hand)",
                c.unwritten.join(", "),
                to.hardware,
                if c.unwritten.len() == 1 { "is" } else { "are" },
            ));
        }
        if c.hardware != to.hardware {
            caveats.push(format!(
                "calibrated on {}, used here for {}: its efficiencies describe the other GPU's \
                 kernels and links",
                c.hardware, to.hardware
            ));
        }
        caveats
    }

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
            msg: cut_short(&text, e.span.start.line, e.code.to_string()),
        })?;
        file.check(&text)
            .map_err(|msg| CalibrationFileError::Invalid {
                path: path.display().to_string(),
                msg,
            })?;
        let mut params = file.params.clone().upgrade_legacy();
        let mut unwritten = file.unwritten_params(&text);
        // Files written before the stage split was a setting (2026-12-06) carry none: the split
        // of the preset they were fitted under, not the generic default.
        if !text.contains("stage_split")
            && let Some(preset) = file.stack.as_deref().and_then(preset_of_label)
        {
            params.stage_split = preset.settings().stage_split;
            unwritten.retain(|name| name != "stage_split");
        }
        Ok(Self {
            params,
            unwritten,
            ..file
        })
    }

    /// The known parameters `text`'s `params` does not write (a legacy field counts for the
    /// parameter it became); empty where the names cannot be read apart.
    fn unwritten_params(&self, text: &str) -> Vec<String> {
        let Some(written) = params_fields(text) else {
            return Vec::new();
        };
        let legacy_cross_entropy = written.iter().any(|n| n == "fused_cross_entropy");
        param_names()
            .into_iter()
            .filter(|name| !written.contains(name))
            .filter(|name| !(legacy_cross_entropy && name == "cross_entropy"))
            .collect()
    }

    /// The efficiency parameters to predict with on a GPU whose profile gives `profile`: this
    /// calibration's, with those its file does not write ([`CalibrationFile::unwritten`])
    /// taken from `profile` instead of copus's generic defaults.
    pub fn params_on(&self, profile: &EfficiencyParams) -> EfficiencyParams {
        if self.unwritten.is_empty() {
            return self.params.clone();
        }
        let (Ok(serde_json::Value::Object(mut ours)), Ok(serde_json::Value::Object(theirs))) = (
            serde_json::to_value(&self.params),
            serde_json::to_value(profile),
        ) else {
            return self.params.clone();
        };
        for name in &self.unwritten {
            if let Some(v) = theirs.get(name) {
                ours.insert(name.clone(), v.clone());
            }
        }
        serde_json::from_value(serde_json::Value::Object(ours))
            .unwrap_or_else(|_| self.params.clone())
    }

    /// What the file's `text` says that no calibration says: a fitted parameter absent from
    /// `params` (it would silently take the generic default, not the fitted value), a `stack`
    /// that names no preset, a `recompute` policy that is none of copus's.
    fn check(&self, text: &str) -> Result<(), String> {
        // The names written in `params`; `None` where they cannot be read apart (the text is
        // then checked by its parse alone).
        let written = params_fields(text);
        let known = param_names();
        for name in &self.fitted {
            // A fitted name is a parameter or, for a link fitted per collective, its path
            // (`inter_bw_bytes_per_s`); those that name a parameter must be written.
            if written.as_ref().is_some_and(|w| !w.contains(name)) && known.contains(name) {
                return Err(format!(
                    "`fitted` names {name}, but `params` has no {name}: the file was cut or \
                     edited (it would run with the generic default instead of the fitted value)"
                ));
            }
        }
        if let Some(label) = &self.stack
            && preset_of_label(label).is_none()
        {
            let names: Vec<&str> = super::stack::StackPreset::ALL
                .iter()
                .map(|p| p.name())
                .collect();
            return Err(format!(
                "stack: {label:?} names no stack preset (one of {})",
                names.join(", ")
            ));
        }
        if let Some(bad) = self
            .recompute
            .iter()
            .find(|r| super::Recompute::parse(r).is_none())
        {
            return Err(format!(
                "recompute: {bad:?} is no recompute policy (none, selective, op, full)"
            ));
        }
        Ok(())
    }

    /// Pretty RON text of this calibration.
    pub fn to_ron(&self) -> Result<String, CalibrationFileError> {
        let cfg = ron::ser::PrettyConfig::new().struct_names(false);
        ron::ser::to_string_pretty(self, cfg)
            .map_err(|e| CalibrationFileError::Serialize(e.to_string()))
    }
}

/// The names of every efficiency parameter (as a calibration's `params` writes them).
fn param_names() -> Vec<String> {
    ron::to_string(&EfficiencyParams::default())
        .ok()
        .and_then(|text| params_fields(&format!("(params: {text})")))
        .unwrap_or_default()
}

/// The field names of the `params` map in a calibration's RON `text`; `None` where the text
/// has no such map.
fn params_fields(text: &str) -> Option<Vec<String>> {
    let ron::Value::Map(top) = ron::from_str::<ron::Value>(text).ok()? else {
        return None;
    };
    let params = top.iter().find_map(|(k, v)| match k {
        ron::Value::String(name) if name == "params" => Some(v),
        _ => None,
    })?;
    let ron::Value::Map(fields) = params else {
        return None;
    };
    Some(
        fields
            .keys()
            .filter_map(|k| match k {
                ron::Value::String(name) => Some(name.clone()),
                _ => None,
            })
            .collect(),
    )
}

/// The preset a stack label names ("deepspeed", "deepspeed (grad_reduce fp32)").
fn preset_of_label(label: &str) -> Option<super::stack::StackPreset> {
    let name = label.split(" (").next().unwrap_or(label).trim();
    super::stack::StackPreset::parse(name)
}

/// `msg`, said to be where the file ends when the error is on its last line and the text
/// stops before its closing parenthesis (a file cut at 700 bytes read "Unexpected variant
/// named `Cud`" and nothing of the cut).
/// The cut comes first, and the parser's own words without the list of every field name
/// (41 names stood before the diagnosis).
fn cut_short(text: &str, line: usize, msg: String) -> String {
    let body = text.trim_end();
    if line >= body.lines().count().max(1) && !body.ends_with(')') {
        let read = msg.split(", expected one of").next().unwrap_or(&msg);
        format!(
            "the file ends there, before its closing parenthesis: cut short? (where it stops, \
             the parser read: {read})"
        )
    } else {
        msg
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::efficiency::StageSplit;

    /// A calibration of Llama 3 8B on H100 under `stack` with `fitted` and `recompute`, as RON.
    fn calibration_text(stack: &str, fitted: &[&str], recompute: &[&str]) -> String {
        let owned = |names: &[&str]| names.iter().map(|n| n.to_string()).collect();
        CalibrationFile {
            hardware: "h100-sxm".into(),
            model: "llama3-8b".into(),
            n: 6,
            rms_rel_error: 0.01,
            cv_rel_error: 0.02,
            profile_rms_rel_error: 0.1,
            fitted: owned(fitted),
            params: EfficiencyParams::default(),
            stack: Some(stack.into()),
            recompute: owned(recompute),
            unwritten: Vec::new(),
        }
        .to_ron()
        .expect("ron")
    }

    /// `text` without its lines that start (after indentation) with `field:`.
    fn without_field(text: &str, field: &str) -> String {
        let prefix = format!("{field}:");
        text.lines()
            .filter(|l| !l.trim_start().starts_with(&prefix))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// A file cut short says so where it ends; a whole file with a bad value does not.
    #[test]
    fn a_cut_file_is_said_to_end_early() {
        let dir = std::env::temp_dir().join(format!("copus-cal-cut-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let text = calibration_text("megatron-core", &["max_eff"], &[]);
        let path = dir.join("cut.ron");
        std::fs::write(&path, &text[..text.len() * 2 / 3]).expect("write");
        let e = CalibrationFile::load(&path).expect_err("cut").to_string();
        assert!(e.contains("the file ends there"), "{e}");
        assert!(!e.contains("expected one of"), "{e}");
        // Cut inside a field's name: the name read is not a field, said after the cut.
        let at = text.find("gemm_overhead").expect("a field") + 6;
        std::fs::write(&path, &text[..at]).expect("write");
        let e = CalibrationFile::load(&path).expect_err("cut").to_string();
        let cut = e.find("the file ends there").expect(&e);
        assert!(
            e[cut..].contains("gemm_o") && !e.contains("expected one of"),
            "{e}"
        );
        let path = dir.join("bad.ron");
        std::fs::write(&path, text.replacen("h100-sxm", "h100-sxm\", \"x", 1)).expect("write");
        let e = CalibrationFile::load(&path).expect_err("bad").to_string();
        assert!(!e.contains("the file ends there"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A parameter the file does not write comes from the hardware profile in use, not from
    /// copus's generic default, and the caveats say so: an A100 calibration missing its
    /// `mem_eff` line ran with the H100-class 0.8 and said nothing.
    #[test]
    fn an_unwritten_parameter_comes_from_the_profile_and_is_said() {
        let dir = std::env::temp_dir().join(format!("copus-cal-unwritten-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let text = calibration_text("megatron-core", &["max_eff"], &[]);
        let path = dir.join("edited.ron");
        std::fs::write(&path, without_field(&text, "mem_eff")).expect("write");
        let read = CalibrationFile::load(&path).expect("load");
        assert_eq!(read.unwritten, ["mem_eff"]);
        let profile = EfficiencyParams {
            mem_eff: 0.5,
            max_eff: 0.3,
            ..EfficiencyParams::default()
        };
        let used = read.params_on(&profile);
        assert_eq!(used.mem_eff, 0.5);
        assert_eq!(
            used.max_eff, read.params.max_eff,
            "written values are the file's"
        );
        let stack =
            super::super::stack::Stack::preset(super::super::stack::StackPreset::MegatronCore);
        let caveats = read.caveats_for(&CalibrationUse {
            model: "llama3-8b",
            recompute: None,
            stack: &stack,
            hardware: "a100-80g",
        });
        assert!(
            caveats
                .iter()
                .any(|c| c.contains("gives no mem_eff") && c.contains("a100-80g profile's value")),
            "{caveats:?}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_file_from_before_the_stage_split_takes_its_stacks_split() {
        let dir = std::env::temp_dir().join(format!("copus-cal-split-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let text = calibration_text("deepspeed (grad_reduce fp32)", &["max_eff"], &[]);
        assert!(text.contains("stage_split"));
        let old = without_field(&text, "stage_split");
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

    /// A file whose fitted parameter was cut, or that names a stack or a recompute policy
    /// copus does not know, is refused with the field named: read as it was, it ran with the
    /// generic default in place of the fitted value (or advised a policy no flag takes).
    #[test]
    fn a_cut_or_misnamed_calibration_is_refused_naming_the_field() {
        let dir = std::env::temp_dir().join(format!("copus-cal-check-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let text = calibration_text("megatron-core", &["max_eff", "mem_eff"], &["selective"]);
        let load = |name: &str, text: &str| {
            let path = dir.join(name);
            std::fs::write(&path, text).expect("write");
            CalibrationFile::load(&path).map_err(|e| e.to_string())
        };
        assert!(load("good.ron", &text).is_ok());
        let cut = without_field(&text, "mem_eff");
        let e = load("cut.ron", &cut).expect_err("cut");
        assert!(
            e.contains("`fitted` names mem_eff") && e.contains("cut.ron"),
            "{e}"
        );
        // A parameter that was not fitted may be missing (files older than the parameter).
        let old = without_field(&text, "fp8_max_eff");
        let read = load("old.ron", &old).expect("old");
        assert_eq!(read.unwritten, ["fp8_max_eff"]);
        assert!(load("good.ron", &text).expect("good").unwritten.is_empty());
        let e = load(
            "stack.ron",
            &text.replace("\"megatron-core\"", "\"megatron\""),
        )
        .expect_err("stack");
        assert!(
            e.contains("stack: \"megatron\" names no stack preset"),
            "{e}"
        );
        // A policy the stack in force does not run is not advised as a flag.
        let op = load("op.ron", &text.replace("\"selective\"", "\"op\"")).expect("op");
        let stack =
            super::super::stack::Stack::preset(super::super::stack::StackPreset::MegatronCore);
        let caveats = op.caveats_for(&CalibrationUse {
            model: "llama3-8b",
            recompute: Some("full"),
            stack: &stack,
            hardware: "h100-sxm",
        });
        let said = caveats.join("\n");
        assert!(
            said.contains("recompute op, predicted here with recompute full")
                && !said.contains("--recompute op")
                && said.contains("megatron-core runs none of those"),
            "{said}"
        );
        let e =
            load("rc.ron", &text.replace("\"selective\"", "\"sometimes\"")).expect_err("recompute");
        assert!(e.contains("\"sometimes\" is no recompute policy"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
