//! Command-line model shape (a profile or inline dimensions) and calibration file, shared by
//! `predict` and `calibrate`.

use crate::perf::calibration_file::CalibrationFile;
use crate::perf::{EfficiencyParams, HardwareProfile, ModelProfile};
use crate::profiles;
use crate::session::SearchBoundSetting;
use clap::Args;
use std::path::Path;

/// A model on the command line.
#[derive(Debug, Args)]
pub struct ModelArgs {
    /// Model profile: a built-in name (deepseek-moe-16b, gpt-1.7b, gpt-7.1b, gpt-16b, gpt-32b,
    /// gpt-70b, gpt-119b, gpt-177b, gpt-314b, gpt-462b, llama-3b, llama-7b, llama-32b,
    /// llama3-8b, llama3-70b, llama3-405b, mixtral-8x7b) or a .ron file (or give the shape
    /// inline).
    #[arg(long = "model", conflicts_with_all = ["layers", "hidden", "heads", "vocab", "ffn", "kv_heads", "swiglu", "tied_embeddings"])]
    pub name: Option<String>,
    /// Inline model: transformer layers.
    #[arg(long, value_parser = super::at_least_one_u32)]
    pub layers: Option<u32>,
    /// Inline model: hidden size.
    #[arg(long, value_parser = super::at_least_one_u32)]
    pub hidden: Option<u32>,
    /// Inline model: attention heads.
    #[arg(long, value_parser = super::at_least_one_u32)]
    pub heads: Option<u32>,
    /// Inline model: vocabulary size.
    #[arg(long, value_parser = super::at_least_one_u32)]
    pub vocab: Option<u32>,
    /// Sequence length in tokens (inline model; overrides a profile's).
    #[arg(long, value_parser = super::at_least_one_u32)]
    pub seq: Option<u32>,
    /// Inline model: feed-forward size (default 4·hidden).
    #[arg(long, value_parser = super::at_least_one_u32)]
    pub ffn: Option<u32>,
    /// Inline model: key/value heads (default: heads).
    #[arg(long, value_parser = super::at_least_one_u32)]
    pub kv_heads: Option<u32>,
    /// Inline model: gated (SwiGLU) MLP.
    #[arg(long)]
    pub swiglu: bool,
    /// Inline model: the input embedding and the output layer share one matrix.
    #[arg(long)]
    pub tied_embeddings: bool,
    /// Trained with dropout, whose masks the backward keeps (overrides a profile's; default: on
    /// for a GELU MLP as in Megatron's GPT recipes, off with --swiglu as in Llama's).
    #[arg(long, value_enum)]
    pub dropout: Option<crate::cli::stack_args::OnOff>,
}

impl ModelArgs {
    /// The first model flag given, if any (`--model`, or a flag of the inline shape).
    pub fn first_given(&self) -> Option<&'static str> {
        let numbers = [
            (self.layers, "--layers"),
            (self.hidden, "--hidden"),
            (self.heads, "--heads"),
            (self.vocab, "--vocab"),
            (self.seq, "--seq"),
            (self.ffn, "--ffn"),
            (self.kv_heads, "--kv-heads"),
        ];
        if self.name.is_some() {
            return Some("--model");
        }
        numbers
            .into_iter()
            .find_map(|(v, flag)| v.map(|_| flag))
            .or(self.swiglu.then_some("--swiglu"))
            .or(self.tied_embeddings.then_some("--tied-embeddings"))
            .or(self.dropout.map(|_| "--dropout"))
    }

    /// The model profile these arguments name or describe.
    pub fn profile(&self) -> anyhow::Result<ModelProfile> {
        if let Some(name) = &self.name {
            let mut m = super::flag_profile("--model", profiles::model(name, Path::new(".")))?;
            if let Some(s) = self.seq {
                m.seq_len = s;
            }
            if let Some(d) = self.dropout {
                m.dropout = Some(d.into());
            }
            return Ok(m);
        }
        // A missing flag is a command-line error (exit 2), as clap's own are.
        let need = |v: Option<u32>, flag: &str| {
            v.ok_or_else(|| {
                anyhow::Error::from(super::FlagValueError(format!(
                    "give --model NAME|FILE or the inline shape (missing --{flag})"
                )))
            })
        };
        let (layers, hidden, heads) = (
            need(self.layers, "layers")?,
            need(self.hidden, "hidden")?,
            need(self.heads, "heads")?,
        );
        let m = ModelProfile {
            name: "inline".into(),
            layers,
            hidden,
            heads,
            kv_heads: self.kv_heads.unwrap_or(heads),
            ffn_hidden: self
                .ffn
                .map_or_else(|| hidden.checked_mul(4), Some)
                .ok_or_else(|| {
                    super::FlagValueError(format!(
                        "--hidden {hidden}: too large for its default --ffn (4 × hidden); give \
                         --ffn"
                    ))
                })?,
            vocab: need(self.vocab, "vocab")?,
            seq_len: need(self.seq, "seq")?,
            swiglu: self.swiglu,
            tied_embeddings: self.tied_embeddings,
            dropout: self.dropout.map(Into::into),
            moe: None,
            source: "command line".into(),
        };
        // A shape the flags describe that cannot be split is a command-line error (exit 2)
        // naming the flags, not a profile's fields.
        crate::validate::profile::model(&m, "inline").map_err(|e| {
            let flag = match e.field.trim_start_matches("inline.") {
                "hidden" => "--hidden/--heads",
                "kv_heads" => "--kv-heads",
                "ffn_hidden" => "--ffn",
                "seq_len" => "--seq",
                other => other,
            };
            let flag = if flag.starts_with("--") {
                flag.to_string()
            } else {
                format!("--{flag}")
            };
            super::FlagValueError(format!("{flag}: {}", e.msg))
        })?;
        Ok(m)
    }
}

/// The efficiency parameters to use on `hw` with `stack` applied (when given): a
/// calibration file's, else the profile's.
pub fn efficiency_with_stack(
    hw: &HardwareProfile,
    calibration: Option<&Path>,
    stack: Option<&crate::perf::Stack>,
) -> anyhow::Result<EfficiencyParams> {
    let base = efficiency(hw, calibration)?;
    let stack = stack_over(&base, None, stack);
    with_stack(hw, base, stack.as_ref())
}

/// The stack in force when the command-line stack flags `flags` are laid over `base`'s own
/// choices (a calibration's or a hardware file's efficiencies carry the stack they were
/// written for; `hint` names its preset where known): a flag without `--stack` changes that
/// one setting of it, `--stack` replaces it. `None` without flags (`base` as it is).
pub fn stack_over(
    base: &EfficiencyParams,
    hint: Option<crate::perf::StackPreset>,
    flags: Option<&crate::perf::Stack>,
) -> Option<crate::perf::Stack> {
    flags.map(|f| crate::perf::Stack::describing(base, hint).overlaid(f))
}

/// The preset a stack label names ("torchtitan-fsdp2 (attention cudnn)" → torchtitan-fsdp2),
/// as calibration files record it.
pub fn preset_of_label(label: &str) -> Option<crate::perf::StackPreset> {
    let name = label.split_whitespace().next()?;
    crate::perf::StackPreset::ALL
        .into_iter()
        .find(|p| p.name() == name)
}

/// `base` with `stack` applied, checked against what `hw` can run (FP8 without FP8 tensor
/// cores is an error).
pub fn with_stack(
    hw: &HardwareProfile,
    base: EfficiencyParams,
    stack: Option<&crate::perf::Stack>,
) -> anyhow::Result<EfficiencyParams> {
    let e = match stack {
        Some(s) => s.apply(&base),
        None => base,
    };
    if let Some(why) = crate::perf::stack::hardware_problem(hw, &e) {
        // The flags asked for what the hardware cannot run: a configuration that cannot be
        // formed (exit 2, as docs/RELIABILITY.md says), unless the file's own settings did.
        if stack.is_some() {
            super::flag_bail!("{why}");
        }
        anyhow::bail!("{why}");
    }
    Ok(e)
}

/// The efficiency parameters to use on `hw`: a calibration file's, else the profile's.
pub fn efficiency(
    hw: &HardwareProfile,
    calibration: Option<&Path>,
) -> anyhow::Result<EfficiencyParams> {
    match calibration {
        Some(p) => Ok(calibrated(hw, p, &load_calibration(p)?)),
        None => Ok(hw.efficiency.clone()),
    }
}

/// The calibration file at `p`, given by `--calibration` (its errors name the flag).
pub fn load_calibration(p: &Path) -> anyhow::Result<CalibrationFile> {
    crate::validate::profile::load_calibration(p).map_err(|e| anyhow::anyhow!("--calibration {e}"))
}

/// The efficiency parameters of calibration `c` to use on `hw` (a calibration fitted on other
/// hardware is a caveat of the output that uses it: `calibration_in_force`).
/// Parameters the file does not write come from `hw`'s profile.
pub fn calibrated(hw: &HardwareProfile, _p: &Path, c: &CalibrationFile) -> EfficiencyParams {
    c.params_on(&hw.efficiency)
}

/// Whether `path` is a run's data (a stats file or a dump directory), not a session.
pub fn is_data_path(path: &Path) -> bool {
    path.is_dir()
        || path
            .extension()
            .is_some_and(|e| e == "ndjson" || e == "jsonl" || e == "json")
}

/// Why `path` cannot be a session for `grid` or `plan`: a stats file or a dump directory
/// (which carry no model or cluster) gets an explanation of what to do instead.
pub fn check_session_path(path: &Path) -> anyhow::Result<()> {
    if is_data_path(path) {
        anyhow::bail!(
            "{}: this command needs a session (.ron) naming the model and cluster, not a {}; \
             `copus open {}` builds one (with --model, --nodes, …), or write a session whose \
             source is Stats(path: \"…\") or Dumps(path: \"…\")",
            path.display(),
            if path.is_dir() {
                "dump directory"
            } else {
                "stats file"
            },
            path.display()
        );
    }
    Ok(())
}

/// A stack flag, whether the stack given sets it, and the search it needs to have an effect.
type SearchBoundFlag = (
    fn(&crate::perf::Stack) -> bool,
    &'static str,
    SearchBoundSetting,
);

/// The stack flags that change nothing unless the search holds what they apply to.
const SEARCH_BOUND_FLAGS: [SearchBoundFlag; 3] = [
    (
        |s| s.pp_overlap.is_some(),
        "--pp-overlap",
        SearchBoundSetting::PpOverlap,
    ),
    (
        |s| s.sharding.is_some(),
        "--sharding",
        SearchBoundSetting::Sharding,
    ),
    (
        |s| s.cp_comm.is_some(),
        "--cp-comm",
        SearchBoundSetting::CpComm,
    ),
];

/// [`apply_overrides`], then each of its notes on standard error (`note: …`), as the
/// commands that open the explorer or advise say them before they start.
pub fn apply_overrides_noted(
    r: &mut crate::session::Resolved,
    calibration: Option<&Path>,
    stack: Option<&crate::perf::Stack>,
) -> anyhow::Result<()> {
    apply_overrides(r, calibration, stack)?;
    for n in r.notes() {
        eprintln!("note: {n}");
    }
    Ok(())
}

/// Put a command line's `--calibration` and stack flags in force on a resolved session: the
/// calibration instead of the session's own, the stack flags over the session's stack (or the
/// one its efficiency describes), then the session checked again.
pub fn apply_overrides(
    r: &mut crate::session::Resolved,
    calibration: Option<&Path>,
    stack: Option<&crate::perf::Stack>,
) -> anyhow::Result<()> {
    if let Some(c) = calibration {
        // The calibration's efficiencies carry the stack it was fitted under; a session that
        // names no stack keeps the one it described, and the calibration's is a caveat.
        let before = r.stack();
        r.calibration = Some(load_calibration(c)?);
        r.use_calibration = true;
        r.calibration_from_flag = Some(c.to_path_buf());
        if r.session.stack.is_none() && r.session.efficiency.is_none() {
            r.session.stack = Some(before);
        }
        if r.session.efficiency.is_some() {
            eprintln!(
                "note: {} sets its own efficiency, which takes precedence over --calibration",
                r.path.display()
            );
        }
    }
    if let Some(s) = stack {
        let session_stack = r.stack();
        let overlaid = session_stack.overlaid(s);
        // A named preset replaces the session's stack with its own settings; say which of
        // the session's single settings that drops (they were dropped without a word).
        if s.preset.is_some() && session_stack != crate::perf::Stack::preset(session_stack.base()) {
            let dropped = session_stack.label();
            r.override_notes.push(format!(
                "--stack {} replaces the session's stack {dropped}: its settings are not kept \
                 (give them as flags, e.g. --attention, to keep them)",
                s.base()
            ));
        }
        // A setting given on the command line that the hardware cannot run is the flag's
        // problem, not the session's (it was reported as the session's stack.precision).
        let eff = overlaid.apply(&r.hardware.efficiency);
        if s.precision.is_some()
            && let Some(why) = crate::perf::stack::hardware_problem(&r.hardware, &eff)
        {
            super::flag_bail!("--precision: {why}");
        }
        if let Some(replaced) = r.switch_stack(overlaid) {
            r.override_notes.push(format!("--stack: {replaced}"));
        }
        // Whether they change anything is said at output time (`Resolved::notes`), after
        // every later edit of the search.
        r.flags_bound_to_search = SEARCH_BOUND_FLAGS
            .iter()
            .filter(|(given, _, _)| given(s))
            .map(|&(_, flag, setting)| (flag, setting))
            .collect();
    }
    if calibration.is_some() || stack.is_some() {
        // What the explorer's what-if returns to is the stack as the command line opened it.
        r.stack_as_opened = Some(r.stack());
    }
    if calibration.is_some() || stack.is_some() {
        crate::validate::session::check(r)
            .map_err(|e| anyhow::anyhow!("{}: {e}", r.path.display()))?;
    }
    Ok(())
}

/// Load a session and resolve it, with `calibration` (when given) in force instead of the
/// session's own.
pub fn resolve_session(
    path: &Path,
    calibration: Option<&Path>,
    stack: Option<&crate::perf::Stack>,
) -> anyhow::Result<crate::session::Resolved> {
    // `demo` names the bundled demo session (as `copus` alone opens it) unless a file of
    // that name is here: `copus grid demo` and `copus plan demo` work from any directory.
    let mut r = if path == Path::new(super::open::DEMO_NAME) && !path.exists() {
        super::open::demo_session_named()?
    } else {
        check_session_path(path)?;
        let mut session = crate::session::Session::load(path)?;
        if calibration.is_some() {
            // The command line's calibration replaces the session's: its file is not read
            // (a session whose calibration file is missing still runs with another one).
            session.calibration = None;
        }
        session.resolve(path)?
    };
    apply_overrides(&mut r, calibration, stack)?;
    Ok(r)
}
