//! Sessions: everything needed to reopen an exploration, as RON (`sessions/*.ron`).
//! Paths inside a session are relative to the session file. Saving is atomic.

use crate::goodput::{Cluster, SearchSpace, StatEffForm};
use crate::perf::calibration_file::CalibrationFile;
use crate::perf::{EfficiencyParams, HardwareProfile, ModelProfile};
use crate::plan::ReconfigCosts;
use crate::plan::objective::PlannerSettings;
use crate::profiles::{self, ProfileError};
use crate::source::scenario::Scenario;
use crate::stats::EstimatorSettings;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// A hardware or model profile: a built-in name, a file, or written inline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ProfileRef<T> {
    /// A built-in name (e.g. "h100-sxm") or a path to a .ron file relative to the session.
    Named(String),
    /// The profile itself.
    Inline(T),
}

/// The cluster of a session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterSpec {
    /// Accelerator profile.
    pub hardware: ProfileRef<HardwareProfile>,
    /// Nodes.
    pub nodes: u32,
    /// GPUs per node.
    pub gpus_per_node: u32,
}

/// Where the B_crit trajectory comes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum DataSource {
    /// A published law sampled into phases.
    Scenario(Scenario),
    /// A stats protocol v1 file (.ndjson), relative to the session.
    Stats {
        /// Path of the file.
        path: String,
        /// Tokens per sample of the run; `None`: inferred from the records' `tokens` and
        /// `b_big`, else the model's sequence length (with a note).
        #[serde(default)]
        seq_len: Option<u32>,
    },
    /// A gradient dump directory, relative to the session.
    Dumps {
        /// Path of the directory.
        path: String,
        /// Samples per file, overriding the files' metadata.
        #[serde(default)]
        samples: Option<f64>,
        /// Also run the seed's temporal EMA estimator (a biased comparison; its state costs
        /// 8 bytes per parameter).
        #[serde(default)]
        seed_ema: bool,
        /// Tokens per sample of the run; `None`: the model's sequence length (with a note).
        #[serde(default)]
        seq_len: Option<u32>,
    },
    /// A live run: a growing file or `tcp://HOST:PORT`.
    Live {
        /// File path or TCP address.
        target: String,
        /// Tokens per sample of the run (`watch --seq-len`); `None`: inferred from the
        /// records' `tokens`/`b_big`, else the model's.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        seq_len: Option<u32>,
    },
}

impl DataSource {
    /// The data's path or address as written (`scenario` for a published law).
    pub fn path_label(&self) -> &str {
        match self {
            DataSource::Scenario(_) => "scenario",
            DataSource::Stats { path, .. } | DataSource::Dumps { path, .. } => path,
            DataSource::Live { target, .. } => target,
        }
    }

    /// What kind of source this is, in words (`a published scenario`, `a stats file`, …).
    pub fn kind_label(&self) -> &'static str {
        match self {
            DataSource::Scenario(_) => "a published scenario",
            DataSource::Stats { .. } => "a stats file",
            DataSource::Dumps { .. } => "a gradient dump directory",
            DataSource::Live { .. } => "a live run",
        }
    }
}

/// Panels of the explorer. The timeline and the heatmap are always shown; one of the side
/// panels (`Panel::SIDE`) is shown beside the heatmap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Panel {
    /// B_crit over training.
    #[default]
    Timeline,
    /// Goodput heatmap.
    Heatmap,
    /// Recommendation at the cursor.
    Recommendation,
    /// What-if editor (cluster, hardware, model, options).
    WhatIf,
    /// Throughput against batch size for the selected layout.
    Throughput,
    /// Estimators side by side, per-layer breakdown and diagnostics.
    Estimators,
    /// Switch plan and strategy comparison.
    Plan,
}

impl Panel {
    /// The side panels, in the order of the number keys 1–5.
    pub const SIDE: [Panel; 5] = [
        Panel::Recommendation,
        Panel::WhatIf,
        Panel::Throughput,
        Panel::Estimators,
        Panel::Plan,
    ];

    /// Whether this is one of the side panels.
    pub fn is_side(self) -> bool {
        Self::SIDE.contains(&self)
    }

    /// Title shown on the panel's border.
    pub fn title(self) -> &'static str {
        match self {
            Panel::Timeline => "B_crit timeline",
            Panel::Heatmap => "Goodput",
            Panel::Recommendation => "Recommendation",
            Panel::WhatIf => "What-if",
            Panel::Throughput => "Throughput vs batch",
            Panel::Estimators => "Estimators",
            Panel::Plan => "Plan",
        }
    }
}

fn default_side() -> Panel {
    Panel::Recommendation
}

/// Where the user was: restored when the session reopens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ViewState {
    /// Index of the scrubbed trajectory point.
    pub cursor: usize,
    /// Focused panel.
    pub focus: Panel,
    /// Selected heatmap cell (layout row, batch column), if any.
    pub selected: Option<(usize, usize)>,
    /// Side panel shown beside the heatmap.
    #[serde(default = "default_side")]
    pub side: Panel,
    /// Selected row of the what-if editor.
    pub whatif_row: usize,
    /// Current step of the guided tour, if one is running.
    pub tour_step: Option<usize>,
}

impl Default for ViewState {
    fn default() -> Self {
        Self {
            cursor: 0,
            focus: Panel::Timeline,
            selected: None,
            side: default_side(),
            whatif_row: 0,
            tour_step: None,
        }
    }
}

/// One step of a guided workshop tour.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TourStep {
    /// What to read at this step.
    pub text: String,
    /// The panel it points at.
    #[serde(default)]
    pub panel: Panel,
    /// Trajectory index to move the cursor to, if any.
    #[serde(default)]
    pub cursor: Option<usize>,
    /// A question to predict before revealing the answer (lessons, `crate::app::lessons`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question: Option<String>,
    /// The answer, shown on `r`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    /// Where the step's box goes when it must leave another panel visible than `panel` lets
    /// it (the default: over the side panel for the timeline, over the timeline otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub popup: Option<Panel>,
}

/// A saved exploration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Session {
    /// Title shown in the explorer.
    pub name: String,
    /// What the session shows and where its numbers come from.
    #[serde(default)]
    pub description: String,
    /// Model profile.
    pub model: ProfileRef<ModelProfile>,
    /// Cluster and hardware.
    pub cluster: ClusterSpec,
    /// Source of the B_crit trajectory.
    pub source: DataSource,
    /// Estimator settings.
    #[serde(default)]
    pub estimator: EstimatorSettings,
    /// Efficiency curve, overlap and stack settings of the performance model, written as
    /// `efficiency: (max_eff: 0.6, ...)`; absent: the calibration's (if `calibration` is set),
    /// else the hardware profile's.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "plain_some::serialize",
        deserialize_with = "plain_some::deserialize"
    )]
    pub efficiency: Option<EfficiencyParams>,
    /// The training stack the job runs (`stack: (preset: Some(TorchtitanFsdp2), ...)`,
    /// docs/MODEL.md "Stating your stack"); absent: the choices of the efficiency in force
    /// (the hardware profile's are Megatron-Core's).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "plain_some::serialize",
        deserialize_with = "plain_some::deserialize"
    )]
    pub stack: Option<crate::perf::Stack>,
    /// A calibration file (`copus calibrate --out`), relative to the session.
    #[serde(default)]
    pub calibration: Option<String>,
    /// Branch records (`copus branch --out`), relative to the session and inside its
    /// directory, laid over a stats file's run as `copus open --branches` lays them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branches: Option<String>,
    /// Multiplier applied to estimated B_crit (GNS can underestimate the measured CBS).
    #[serde(default = "one")]
    pub b_crit_scale: f64,
    /// Statistical-efficiency form.
    #[serde(default)]
    pub stat_eff: StatEffForm,
    /// Batch sizes and options searched (a `zero` list left out: the stack's own stage).
    #[serde(default = "unstated_search")]
    pub search: SearchSpace,
    /// Reconfiguration costs.
    #[serde(default)]
    pub costs: ReconfigCosts,
    /// Planner objective and B_crit conversion source (`docs/PLANNER.md`).
    #[serde(default)]
    pub planner: PlannerSettings,
    /// The batch size (samples) the user runs now, marked on the heatmap.
    #[serde(default)]
    pub current_batch: Option<u64>,
    /// Guided tour for workshops.
    #[serde(default)]
    pub tour: Vec<TourStep>,
    /// View state.
    #[serde(default)]
    pub view: ViewState,
}

fn one() -> f64 {
    1.0
}

/// An optional section written without `Some(...)`: present means set.
mod plain_some {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    /// Write the value itself (the field is skipped when `None`).
    pub fn serialize<T: Serialize, S: Serializer>(v: &Option<T>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(x) => x.serialize(s),
            None => s.serialize_none(),
        }
    }

    /// Read the value itself as `Some`.
    pub fn deserialize<'de, T: Deserialize<'de>, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<T>, D::Error> {
        T::deserialize(d).map(Some)
    }
}

/// Whether a relative path leaves its base directory (absolute, or more `..` than names).
fn escapes(p: &Path) -> bool {
    use std::path::Component;
    let mut depth = 0i64;
    for c in p.components() {
        match c {
            Component::Prefix(_) | Component::RootDir => return true,
            Component::ParentDir => depth -= 1,
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
        }
        if depth < 0 {
            return true;
        }
    }
    false
}

/// Whether `rel`, joined to `base`, resolves (through symbolic links) to a file outside
/// `base`. A path that does not exist yet resolves nowhere and is not outside: reading it
/// fails later with an error naming it.
fn resolves_outside(base: &Path, rel: &Path) -> bool {
    let dir = if base.as_os_str().is_empty() {
        Path::new(".")
    } else {
        base
    };
    match (dir.canonicalize(), dir.join(rel).canonicalize()) {
        (Ok(b), Ok(p)) => !p.starts_with(b),
        _ => false,
    }
}

/// The search of a session file without a `search` section: the defaults, with the ZeRO
/// stages left to the stack ([`Session::resolve`]).
fn unstated_search() -> SearchSpace {
    SearchSpace {
        zero: Vec::new(),
        recompute: Vec::new(),
        ..SearchSpace::default()
    }
}

/// Largest session file read, bytes.
pub const MAX_SESSION_BYTES: u64 = 16 << 20;

/// Why a session could not be loaded, resolved or saved.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// Reading or writing the file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The RON text is not a valid session.
    #[error("{path}:{line}:{col}: {msg}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        col: usize,
        /// What is wrong.
        msg: String,
    },
    /// A profile the session names could not be loaded.
    #[error("{path}: {source}")]
    Profile {
        /// The session file.
        path: PathBuf,
        /// The profile error.
        source: ProfileError,
    },
    /// A value is out of range.
    #[error("{path}: {msg}")]
    Invalid {
        /// The session file.
        path: PathBuf,
        /// What is wrong.
        msg: String,
    },
    /// Serialising failed.
    #[error("serialising session: {0}")]
    Serialize(String),
}

/// A session with its profiles loaded and its base directory known.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The session as written.
    pub session: Session,
    /// The file it came from.
    pub path: PathBuf,
    /// Directory relative paths resolve against.
    pub base: PathBuf,
    /// Loaded hardware profile.
    pub hardware: HardwareProfile,
    /// Loaded model profile.
    pub model: ModelProfile,
    /// Loaded calibration, if the session names one.
    pub calibration: Option<CalibrationFile>,
    /// Use the calibration (true) or the profile model (false) when both exist.
    pub use_calibration: bool,
    /// The session lists no ZeRO stages: the stack's own is searched, and follows a change
    /// of stack ([`Resolved::fill_zero_from_stack`]).
    pub zero_from_stack: bool,
    /// The session lists no recompute policies: the stack's own are searched
    /// (`StackPreset::recompute_policies`), and follow a change of stack.
    pub recompute_from_stack: bool,
    /// The session file lists ZeRO stages (written for its stack's framework) and none was
    /// chosen in the what-if since: a stack of another framework replaces them with its own
    /// ([`Resolved::switch_stack`]).
    pub zero_from_file: bool,
    /// The same for the session file's recompute policies.
    pub recompute_from_file: bool,
    /// A note the explorer's title shows before the session's name and that is never saved
    /// with it ("model and cluster: copus's defaults …" for a run opened without them).
    pub title_note: Option<String>,
    /// What command-line overrides changed beyond what they name, one sentence each (a
    /// `--stack` of another framework replacing the session's ZeRO and recompute search).
    pub override_notes: Vec<String>,
    /// Stack flags given on the command line that apply only to some layouts (the flag as
    /// written, and its setting): [`Resolved::notes`] says, after every edit, which of them
    /// the search leaves without effect.
    pub flags_bound_to_search: Vec<(&'static str, SearchBoundSetting)>,
    /// The stack as the session (and the command line) set it when it was opened: cycling
    /// the what-if's framework back to its preset restores its single settings, which
    /// another framework's defaults replaced on the way.
    pub stack_as_opened: Option<crate::perf::Stack>,
    /// The calibration file given on the command line (`--calibration`), as given, when it
    /// replaced the session's: a save copies it beside the session and names it there.
    pub calibration_from_flag: Option<PathBuf>,
    /// The session's own efficiency model is the calibration's with parameters changed in
    /// the what-if or on the command line (`Resolved::edit_efficiency`): outputs still name
    /// the calibration, as edited.
    pub efficiency_edited_from_calibration: bool,
    /// The calibration in force was fitted on the run's own timed steps (`step_time_s` with
    /// `config`) when it was loaded, no calibration being named
    /// ([`crate::pipeline::adopt_run_calibration`]; the explorer does the same on loading).
    pub calibration_from_run: bool,
}

/// The note where a stack asks for TP overlap without sequence parallelism: the model costs
/// TP communication unoverlapped there, as the frameworks run it.
pub const TP_OVERLAP_NEEDS_SP: &str = "TP communication is costed without overlap: it overlaps \
its GEMMs only with sequence parallelism (Megatron's --tp-comm-overlap requires \
--sequence-parallel; torchtitan's async TP runs on its sequence-parallel plan)";

/// The what-if note of TP overlap switched on under a stack without it
/// ([`crate::perf::StackPreset::has_tp_overlap`]).
pub fn no_tp_overlap_note(stack: crate::perf::StackPreset) -> String {
    format!(
        "tp_overlap on: {stack} has no overlap of TP communication with GEMMs (Megatron-Core's \
         --tp-comm-overlap came after it): a what-if"
    )
}

/// What the attention kernel in force is costed as where `eff`'s profile (of `hardware`, named
/// in the note) has no figure of its own: `cudnn` (when `given`, stated rather than the preset's) without a Hopper-native
/// speed-up, and Triton without a fitted slowdown, are both costed as the fused
/// (FlashAttention-2) kernel, which is said rather than silent. `stack` names whose choice a
/// preset's kernel was.
pub fn attention_cost_note(
    stack: crate::perf::StackPreset,
    eff: &EfficiencyParams,
    (given, hardware): (bool, &str),
) -> Option<String> {
    use crate::perf::efficiency::AttentionKind;
    match eff.attention {
        AttentionKind::Cudnn if given && eff.attn_native_speedup == 1.0 => Some(format!(
            "attention cudnn: {hardware}'s profile gives the Hopper-native kernel no \
                 speed-up over FlashAttention-2 (attn_native_speedup 1): costed as fused"
        )),
        // Also where the preset chose it (llm-foundry's tables ran it): its help says the
        // kernel is slower, and this profile costs it as the fused one.
        AttentionKind::Triton if eff.attn_triton_slowdown == 1.0 => {
            let whose = if given {
                String::new()
            } else {
                format!(" ({stack}'s)")
            };
            Some(format!(
                "attention triton{whose}: {hardware}'s profile has no fitted slowdown of the \
                 Triton flash-attention kernel against FlashAttention-2 (attn_triton_slowdown 1): \
                 costed as fused"
            ))
        }
        _ => None,
    }
}

impl Resolved {
    /// The file an error about this session names: the session file, or, for a session built
    /// in memory from a data file (`copus plan run.ndjson` resolves it as
    /// `run.ndjson.copus.ron`, the name it would be saved as), that data file while no such
    /// session file exists (errors named a file the user never gave).
    pub fn error_path(&self) -> PathBuf {
        if self.path.exists() {
            return self.path.clone();
        }
        self.path
            .to_str()
            .and_then(|p| p.strip_suffix(".copus.ron"))
            .map_or_else(|| self.path.clone(), PathBuf::from)
    }

    /// The cluster shape.
    pub fn cluster(&self) -> Cluster {
        Cluster {
            nodes: self.session.cluster.nodes,
            gpus_per_node: self.session.cluster.gpus_per_node,
        }
    }

    /// The performance model's context for this session: its hardware, model and GPUs per
    /// node, with `eff` (usually [`Self::efficiency`], which the caller keeps alive).
    pub fn perf_context<'a>(&'a self, eff: &'a EfficiencyParams) -> crate::perf::PerfContext<'a> {
        crate::perf::PerfContext {
            hw: &self.hardware,
            model: &self.model,
            eff,
            gpus_per_node: self.session.cluster.gpus_per_node,
        }
    }

    /// The efficiency parameters in force: the session's own, else the calibration's (when
    /// loaded and in use), else the hardware profile's.
    pub fn efficiency(&self) -> EfficiencyParams {
        let base = self.base_efficiency();
        match &self.session.stack {
            Some(stack) => stack.apply(&base),
            None => base,
        }
    }

    /// A note naming the search's interleave degrees (above 1) that no pipeline depth of the
    /// cluster's GPUs can run for the model (an interleave must divide the layers of a stage):
    /// the grid leaves them out, which is said rather than silent.
    fn unusable_interleave(&self) -> Option<String> {
        let gpus = self
            .session
            .cluster
            .nodes
            .saturating_mul(self.session.cluster.gpus_per_node);
        let depths: Vec<u32> = (2..=gpus.min(self.model.layers))
            .filter(|pp| gpus.is_multiple_of(*pp))
            .collect();
        let unusable: Vec<String> = self
            .session
            .search
            .interleave
            .iter()
            .filter(|&&v| v > 1)
            .filter(|&&v| {
                !depths.iter().any(|&pp| {
                    crate::perf::validate::interleave_candidates(&self.model, pp).contains(&v)
                })
            })
            .map(u32::to_string)
            .collect();
        (!unusable.is_empty()).then(|| {
            format!(
                "the search's interleave {} suits no pipeline depth of {} layers on {gpus} GPUs (an \
                 interleave must divide a stage's layers): it is left out of the search",
                unusable.join(", "),
                self.model.layers
            )
        })
    }

    /// The efficiency parameters before the session's `stack` is applied.
    /// The calibration the numbers use, where one is in force: loaded, switched on, and not
    /// overridden by the session's own `efficiency` (unless what-if edits started from it).
    pub fn calibration_in_force(&self) -> Option<&CalibrationFile> {
        let in_force = self.use_calibration
            && (self.session.efficiency.is_none() || self.efficiency_edited_from_calibration);
        self.calibration.as_ref().filter(|_| in_force)
    }

    fn base_efficiency(&self) -> EfficiencyParams {
        if let Some(e) = &self.session.efficiency {
            return e.clone();
        }
        match &self.calibration {
            Some(c) if self.use_calibration => c.params_on(&self.hardware.efficiency),
            _ => self.hardware.efficiency.clone(),
        }
    }

    /// What the session's search asks of its framework that the framework does not run: a
    /// recompute policy its stack lacks, or ZeRO-1 under an FSDP framework (which shards
    /// parameters or keeps them gathered): each a what-if, as `predict` says of one cell. And
    /// an interleave no pipeline layout of the cluster can run, which the search leaves out.
    pub fn framework_caveats(&self) -> Vec<String> {
        use crate::perf::StackPreset;
        let preset = self.stack().base();
        let mut out: Vec<String> = self.unusable_interleave().into_iter().collect();
        let policies = preset.recompute_policies();
        let foreign: Vec<String> = self
            .session
            .search
            .recompute
            .iter()
            .filter(|r| !policies.contains(r))
            .map(ToString::to_string)
            .collect();
        if !foreign.is_empty() {
            out.push(format!(
                "the search's recompute {} is not a policy {preset} has: cells that use it are \
                 what-ifs, not configurations this framework runs",
                foreign.join(", ")
            ));
        }
        let fsdp = matches!(
            preset,
            StackPreset::TorchtitanFsdp2 | StackPreset::LlmFoundry
        );
        if fsdp && self.session.search.zero.contains(&1) {
            out.push(format!(
                "the search's ZeRO-1 is not something {preset} runs without pipeline stages \
                 (FSDP shards parameters, ZeRO-3, or keeps them gathered between forward and \
                 backward, ZeRO-2): a what-if there"
            ));
        }
        let fsdp_sharding = matches!(
            self.efficiency().sharding,
            crate::perf::efficiency::Sharding::Fsdp1 | crate::perf::efficiency::Sharding::Fsdp2
        );
        if fsdp_sharding && self.session.search.zero.contains(&3) {
            out.push(
                "FSDP's ZeRO-3 with pipeline stages keeps parameters gathered and gradients \
                 unsharded until a step's last micro-batch, as PyTorch's pipeline schedules run \
                 it: layouts with PP run the search's ZeRO-3 as ZeRO-1 (and are shown so)"
                    .to_string(),
            );
        }
        let split = self.stack().settings().stage_split;
        if !preset.stage_splits().contains(&split) {
            out.push(format!(
                "stage_split {} is not how {preset} splits uneven pipeline stages ({}): layouts \
                 whose PP does not divide the model's {} layers are what-ifs",
                split.name(),
                preset.stage_splits()[0].name(),
                self.model.layers
            ));
        }
        let deepspeed = self.efficiency().sharding == crate::perf::efficiency::Sharding::DeepSpeed;
        let sharded: Vec<String> = (self.session.search.zero.iter())
            .filter(|&&z| z >= 2)
            .map(|z| format!("ZeRO-{z}"))
            .collect();
        if deepspeed && !sharded.is_empty() {
            out.push(format!(
                "DeepSpeed's pipeline engine runs ZeRO-0 or ZeRO-1 only: layouts with PP run the \
                 search's {} as ZeRO-1 (and are shown so)",
                sharded.join(", ")
            ));
        }
        let fp8 = self.efficiency().precision == crate::perf::efficiency::Precision::Fp8;
        if deepspeed && fp8 {
            out.push(format!(
                "FP8 GEMMs are no setting of {preset}'s configuration (they come from the \
                 model's own Transformer Engine layers, if any): a what-if, which `plan --emit \
                 deepspeed` does not write"
            ));
        }
        if deepspeed && self.model.moe.is_some() && self.session.search.zero.contains(&3) {
            out.push(
                "DeepSpeed's engine runs no ZeRO-3 with mixture-of-experts layers (\"MoE not \
                 supported with Stage 3\"): the search's ZeRO-3 runs as ZeRO-2 (and is shown so)"
                    .to_string(),
            );
        }
        out
    }

    /// A measured run's own global batch in the model's sequences (tokens per step, from the
    /// last two points of `traj`, over the model's sequence length), if it makes at least one;
    /// none for a scenario, whose trajectory is a law, not a run.
    pub fn measured_batch(&self, traj: &crate::trajectory::Trajectory) -> Option<u64> {
        match self.session.source {
            DataSource::Scenario(_) => None,
            _ => traj.implied_batch_in(self.model.seq_len),
        }
    }

    /// The batch the run uses now, in the model's sequences: the session's `current_batch`,
    /// else [`Resolved::measured_batch`]. What `grid`, `plan` and the explorer's ▼ compare with.
    pub fn current_batch(&self, traj: &crate::trajectory::Trajectory) -> Option<u64> {
        self.session
            .current_batch
            .or_else(|| self.measured_batch(traj))
    }

    /// What the command line's overrides changed ([`Resolved::override_notes`]), then one
    /// note for each stack flag of [`Resolved::flags_bound_to_search`] that the search, as it
    /// stands when this is called, leaves without effect: computed at output time, so that a
    /// later edit giving the flag an effect (`--cp 1,2`, `--zero 3`) leaves no stale note.
    pub fn notes(&self) -> Vec<String> {
        let mut notes = self.override_notes.clone();
        let settings = self.stack().settings();
        if settings.tp_overlap && !settings.sequence_parallel {
            notes.push(TP_OVERLAP_NEEDS_SP.to_string());
        } else if settings.tp_overlap && !self.stack().base().has_tp_overlap() {
            notes.push(no_tp_overlap_note(self.stack().base()));
        }
        notes.extend(self.attention_note());
        for &(flag, setting) in &self.flags_bound_to_search {
            if let Some(why) = self.setting_without_effect(setting) {
                notes.push(format!("{flag} has no effect on this grid: {why}"));
            }
        }
        notes
    }

    /// [`attention_cost_note`] for this session's stack, efficiencies and hardware (the
    /// kernel stated where the session's stack names one, else its preset's).
    pub fn attention_note(&self) -> Option<String> {
        let given = self
            .session
            .stack
            .as_ref()
            .is_some_and(|s| s.attention.is_some());
        attention_cost_note(
            self.stack().base(),
            &self.efficiency(),
            (given, &self.hardware.name),
        )
    }

    /// Why a stack setting leaves this session's grid unchanged, if it does: one that applies
    /// to layouts the search does not hold (an interleaved schedule, ZeRO-3, context
    /// parallelism), named with the search row that would hold them.
    pub fn setting_without_effect(&self, setting: SearchBoundSetting) -> Option<&'static str> {
        let search = &self.session.search;
        match setting {
            SearchBoundSetting::PpOverlap if search.interleave.iter().all(|&v| v <= 1) => {
                Some("no layout here interleaves (the session's search.interleave is [1])")
            }
            SearchBoundSetting::Sharding if !search.zero.contains(&3) => Some(
                "it applies at ZeRO-3, which the search does not hold (the session's \
                     search.zero; the what-if's ZeRO row)",
            ),
            SearchBoundSetting::CpComm if search.context_parallel.iter().all(|&c| c <= 1) => Some(
                "no layout here splits sequences (the session's search.context_parallel; \
                     the what-if's CP degrees row)",
            ),
            _ => None,
        }
    }

    /// The stack in force: the session's `stack`, else the one the efficiency's choices
    /// describe.
    pub fn stack(&self) -> crate::perf::Stack {
        match &self.session.stack {
            Some(s) => s.clone(),
            None => crate::perf::Stack::describing(&self.efficiency(), None),
        }
    }

    /// Put `stack` in force as the session's stack. When it is another framework than the
    /// one in force (another preset), the ZeRO stages and recompute policies the session file
    /// lists, written for that framework, give way to the new framework's (a choice made in
    /// the what-if since is kept)
    /// ([`Self::fill_zero_from_stack`]); returns what was replaced, as a sentence, when a
    /// listed search changed.
    pub fn switch_stack(&mut self, stack: crate::perf::Stack) -> Option<String> {
        let before = self.stack().base();
        let after = stack.base();
        self.session.stack = Some(stack);
        let mut replaced = None;
        if before != after && (self.zero_from_file || self.recompute_from_file) {
            let (zero, recompute) = (
                self.session.search.zero.clone(),
                self.session.search.recompute.clone(),
            );
            // Each list the file wrote for the other framework now follows the new one; a
            // list chosen in the what-if stays as chosen.
            if std::mem::take(&mut self.zero_from_file) {
                self.zero_from_stack = true;
            }
            if std::mem::take(&mut self.recompute_from_file) {
                self.recompute_from_stack = true;
            }
            self.fill_zero_from_stack();
            let s = &self.session.search;
            if s.zero != zero || s.recompute != recompute {
                let list = |r: &[crate::perf::Recompute]| {
                    r.iter()
                        .map(|p| p.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                replaced = Some(format!(
                    "the session's ZeRO stages {zero:?} and recompute policies [{}] were \
                     listed for its {before} stack; searching {after}'s own: ZeRO {:?}, \
                     recompute [{}] (--zero and --recompute search others)",
                    list(&recompute),
                    s.zero,
                    list(&s.recompute)
                ));
            }
            return replaced;
        }
        self.fill_zero_from_stack();
        replaced
    }

    /// When the session lists no ZeRO stages, search the stack's own
    /// (`StackPreset::default_zero`): 0 for Megatron-LM 2021, 1 for Megatron-Core and NeMo, 3
    /// for the FSDP and DeepSpeed presets.
    ///
    /// The same for recompute: a session that lists no policies searches those its stack's
    /// framework has (`StackPreset::recompute_policies`).
    pub fn fill_zero_from_stack(&mut self) {
        if self.zero_from_stack {
            self.session.search.zero = vec![self.stack().base().default_zero()];
        }
        if self.recompute_from_stack {
            self.session.search.recompute = self.stack().base().recompute_policies().to_vec();
        }
    }

    /// A session-relative path made absolute.
    pub fn resolve_path(&self, p: &str) -> PathBuf {
        self.base.join(p)
    }
}

impl Session {
    /// A session for a data source opened without a session file: default settings, the
    /// named built-in (or file) profiles, and a cluster of `nodes` × `gpus_per_node`.
    pub fn adhoc(
        name: String,
        source: DataSource,
        model: &str,
        hardware: &str,
        nodes: u32,
        gpus_per_node: u32,
    ) -> Self {
        Self {
            name,
            description: "opened without a session file; `s` saves one beside the data".into(),
            model: ProfileRef::Named(model.to_string()),
            cluster: ClusterSpec {
                hardware: ProfileRef::Named(hardware.to_string()),
                nodes,
                gpus_per_node,
            },
            source,
            estimator: EstimatorSettings::default(),
            efficiency: None,
            stack: None,
            calibration: None,
            branches: None,
            b_crit_scale: 1.0,
            stat_eff: StatEffForm::default(),
            search: unstated_search(),
            costs: ReconfigCosts::default(),
            planner: PlannerSettings::default(),
            current_batch: None,
            tour: Vec::new(),
            view: ViewState::default(),
        }
    }

    /// Parse a session from RON text; `path` is only used in error messages.
    /// A RON error names its place and quotes the line with a caret; a required field that is
    /// missing because it was misspelled names the misspelling, and a negative number where
    /// a count is expected says so (RON says only "missing field" at the closing bracket, or
    /// "Integer is out of bounds").
    /// A field the session type does not have is an error naming the nearest known field
    /// (serde would otherwise ignore a typo and keep the default). A leading UTF-8
    /// byte-order mark is ignored.
    pub fn from_ron(text: &str, path: &Path) -> Result<Self, SessionError> {
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let session: Self = ron::from_str(text).map_err(|e| parse_error(text, path, &e))?;
        if let Some(u) = crate::validate::fields::unknown_field(text, &session) {
            let (line, col) = u.position.unwrap_or((1, 1));
            // The line and a caret, as every other parse error of a session shows them.
            let excerpt = u
                .position
                .map(|(l, c)| crate::validate::fields::excerpt(text, l, c))
                .unwrap_or_default();
            return Err(SessionError::Parse {
                path: path.to_path_buf(),
                line,
                col,
                msg: format!("{u}{excerpt}"),
            });
        }
        Ok(session)
    }

    /// Read and parse a session file (a regular file of at most [`MAX_SESSION_BYTES`]).
    pub fn load(path: &Path) -> Result<Self, SessionError> {
        Self::load_with_text(path).map(|(session, _)| session)
    }

    /// [`Session::load`], with the file's text (the explorer keeps it to decide where `s`
    /// saves). Every command reads a session through here: the size cap and the rule on
    /// profile paths hold for the explorer as for `grid` and `plan`.
    pub fn load_with_text(path: &Path) -> Result<(Self, String), SessionError> {
        let io = |source| SessionError::Io {
            path: path.to_path_buf(),
            source,
        };
        let text = crate::fsutil::read_capped(path, MAX_SESSION_BYTES).map_err(io)?;
        let session = Self::from_ron(&text, path)?;
        session.check_profile_paths(path)?;
        Ok((session, text))
    }

    /// A session file may name profile files only beside or below itself: a profile is
    /// parsed and quoted in errors, so `Named("../../etc/passwd")` must not read an
    /// arbitrary file. (Data sources may live elsewhere; their readers do not quote them.)
    fn check_profile_paths(&self, path: &Path) -> Result<(), SessionError> {
        let names = [
            ("model", self.model_name(), profiles::BUILTIN_MODELS),
            (
                "cluster.hardware",
                self.hardware_name(),
                profiles::BUILTIN_HARDWARE,
            ),
        ];
        for (field, name, builtins) in names {
            let Some(name) = name else { continue };
            let base = path.parent().unwrap_or(Path::new(""));
            if builtins.iter().any(|(n, _)| *n == name)
                || !(escapes(Path::new(&name)) || resolves_outside(base, Path::new(&name)))
            {
                continue;
            }
            return Err(SessionError::Invalid {
                path: path.to_path_buf(),
                msg: format!(
                    "{field}: the profile file {name:?} lies outside the session's directory; a session may name profile files only beside or below it (copy the file there, or use a built-in name: {})",
                    builtins
                        .iter()
                        .map(|(n, _)| *n)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            });
        }
        Ok(())
    }

    fn model_name(&self) -> Option<String> {
        match &self.model {
            ProfileRef::Named(n) => Some(n.clone()),
            ProfileRef::Inline(_) => None,
        }
    }

    fn hardware_name(&self) -> Option<String> {
        match &self.cluster.hardware {
            ProfileRef::Named(n) => Some(n.clone()),
            ProfileRef::Inline(_) => None,
        }
    }

    /// Check ranges and load the profiles it names.
    pub fn resolve(self, path: &Path) -> Result<Resolved, SessionError> {
        let base = path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."));
        let invalid = |msg: String| SessionError::Invalid {
            path: path.to_path_buf(),
            msg,
        };
        let c = &self.cluster;
        // Cheap checks first, so that a huge cluster or list fails before profiles load.
        crate::validate::session::cluster(c.nodes, c.gpus_per_node)
            .map_err(|e| invalid(e.to_string()))?;
        let profile_err = |source| SessionError::Profile {
            path: path.to_path_buf(),
            source,
        };
        let hardware = match &c.hardware {
            ProfileRef::Named(n) => profiles::hardware(n, &base).map_err(profile_err)?,
            ProfileRef::Inline(h) => h.clone(),
        };
        let model = match &self.model {
            ProfileRef::Named(n) => profiles::model(n, &base).map_err(profile_err)?,
            ProfileRef::Inline(m) => m.clone(),
        };
        let calibration = match &self.calibration {
            Some(p) => Some(
                calibration_in(&base, p)
                    .and_then(|file| crate::validate::profile::load_calibration(&file))
                    .map_err(|e| SessionError::Invalid {
                        path: path.to_path_buf(),
                        msg: format!("calibration: {e}"),
                    })?,
            ),
            None => None,
        };
        if let Some(b) = &self.branches {
            if !matches!(self.source, DataSource::Stats { .. }) {
                return Err(invalid(format!(
                    "branches: '{b}' lays a branched experiment over a stats file's run; this \
                     session's source is {}",
                    self.source.kind_label()
                )));
            }
            branches_in(&base, b).map_err(|e| invalid(format!("branches: {e}")))?;
        }
        let zero_from_stack = self.search.zero.is_empty();
        let recompute_from_stack = self.search.recompute.is_empty();
        let mut resolved = Resolved {
            session: self,
            path: path.to_path_buf(),
            base,
            hardware,
            model,
            calibration,
            use_calibration: true,
            zero_from_stack,
            recompute_from_stack,
            title_note: None,
            override_notes: Vec::new(),
            flags_bound_to_search: Vec::new(),
            zero_from_file: !zero_from_stack,
            recompute_from_file: !recompute_from_stack,
            stack_as_opened: None,
            calibration_from_flag: None,
            efficiency_edited_from_calibration: false,
            calibration_from_run: false,
        };
        resolved.stack_as_opened = Some(resolved.stack());
        resolved.fill_zero_from_stack();
        crate::validate::session::check(&resolved).map_err(|e| invalid(e.to_string()))?;
        Ok(resolved)
    }

    /// Serialise to pretty RON.
    pub fn to_ron(&self) -> Result<String, SessionError> {
        let cfg = ron::ser::PrettyConfig::new().struct_names(false);
        ron::ser::to_string_pretty(self, cfg).map_err(|e| SessionError::Serialize(e.to_string()))
    }

    /// Write atomically: a temporary file beside `path`, flushed, then renamed over it.
    pub fn save_atomic(&self, path: &Path) -> Result<(), SessionError> {
        let text = self.to_ron()?;
        crate::fsutil::write_atomic(path, text.as_bytes()).map_err(|source| SessionError::Io {
            path: path.to_path_buf(),
            source,
        })
    }
}

/// A session's `calibration:` path, relative to the session's directory and inside it (no
/// absolute path, no `..`): a session shared with others cannot make copus read files
/// elsewhere. A calibration kept elsewhere is given with `--calibration FILE`.
fn calibration_in(base: &Path, rel: &str) -> Result<PathBuf, String> {
    file_in(base, rel, "a calibration", "--calibration FILE")
}

/// A session's `branches:` path, inside the session's directory as [`calibration_in`].
pub fn branches_in(base: &Path, rel: &str) -> Result<PathBuf, String> {
    file_in(base, rel, "a branch file", "copus open RUN --branches FILE")
}

/// A file a session names (`what`, given elsewhere with `flag`), relative to the session's
/// directory and inside it.
fn file_in(base: &Path, rel: &str, what: &str, flag: &str) -> Result<PathBuf, String> {
    use std::path::Component;
    let p = Path::new(rel);
    if p.components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(format!(
            "'{rel}' must be a path inside the session's directory (no absolute path, no '..'); \
             give {what} kept elsewhere with {flag}"
        ));
    }
    if resolves_outside(base, p) {
        return Err(format!(
            "'{rel}' is a link to a file outside the session's directory; give {what} kept \
             elsewhere with {flag}"
        ));
    }
    Ok(base.join(p))
}

/// The parse error `e` of session `text` as the message a user reads.
fn parse_error(text: &str, path: &Path, e: &ron::error::SpannedError) -> SessionError {
    use crate::validate::fields::{excerpt, misspelled};
    let (mut line, mut col) = (e.span.start.line, e.span.start.col);
    let mut msg = e.code.to_string();
    match &e.code {
        ron::Error::MissingStructField { field, .. } => {
            if let Some((written, l, c)) = misspelled(text, field, (line, col)) {
                msg = format!("'{written}' is not a field here: did you mean '{field}'? ({msg})");
                (line, col) = (l, c);
            }
        }
        ron::Error::IntegerOutOfBounds => {
            // RON's span starts at the digits or at the sign before them.
            let at = text
                .lines()
                .nth(line.saturating_sub(1))
                .and_then(|l| l.get(col.saturating_sub(2)..))
                .unwrap_or("");
            if at.trim_start().starts_with('-') || at.get(1..).is_some_and(|a| a.starts_with('-')) {
                msg.push_str(": a negative number where a count or a size is expected");
            }
        }
        ron::Error::ExpectedOption => {
            msg.push_str(": an optional value is written Some(…) or None, e.g. Some(512)");
        }
        ron::Error::ExpectedComma => {
            // Just after a number: a fraction where a whole number belongs, or a unit suffix.
            let before: String = text
                .lines()
                .nth(line.saturating_sub(1))
                .map(|l| l.chars().take(col.saturating_sub(1)).collect())
                .unwrap_or_default();
            let rest = text
                .lines()
                .nth(line.saturating_sub(1))
                .and_then(|l| l.chars().nth(col.saturating_sub(1)));
            if before.ends_with(|c: char| c.is_ascii_digit()) {
                match rest {
                    Some('.') => {
                        msg.push_str(": a whole number is expected here (a count, not a fraction)")
                    }
                    Some(c) if c.is_ascii_alphabetic() => msg.push_str(
                        ": numbers are written without units or suffixes (600B tokens is \
                         600e9)",
                    ),
                    _ => {}
                }
            }
        }
        _ if text.trim().is_empty() => {
            msg = "the file is empty: a session is a RON \
             record `(name: …, model: …, cluster: …, source: …)` (docs: README, `copus open \
             demo` then `s` writes one)"
                .into()
        }
        _ => {}
    }
    msg.push_str(&excerpt(text, line, col));
    SessionError::Parse {
        path: path.to_path_buf(),
        line,
        col,
        msg,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn demo_path() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("sessions/demo.ron")
    }

    #[test]
    fn demo_session_loads_resolves_and_round_trips() {
        let s = Session::load(&demo_path()).expect("demo parses");
        let text = s.to_ron().expect("serialises");
        let back = Session::from_ron(&text, Path::new("x.ron")).expect("reparses");
        assert_eq!(s, back);
        let r = s.resolve(&demo_path()).expect("demo resolves");
        assert_eq!(r.hardware.name, "h100-sxm");
        assert_eq!(r.cluster().gpus(), 64);
    }

    #[test]
    fn a_misspelled_required_field_and_a_negative_count_are_named_with_their_line() {
        let demo = std::fs::read_to_string(demo_path()).expect("demo");
        let typo = demo.replacen("nominal_batch:", "nominal_bacth:", 1);
        let err = Session::from_ron(&typo, Path::new("t.ron"))
            .expect_err("missing field")
            .to_string();
        let line = demo
            .lines()
            .position(|l| l.contains("nominal_batch:"))
            .expect("demo has it")
            + 1;
        assert!(err.starts_with(&format!("t.ron:{line}:")), "{err}");
        assert!(
            err.contains("'nominal_bacth' is not a field here: did you mean 'nominal_batch'?"),
            "{err}"
        );
        assert!(
            err.contains("nominal_bacth: ") && err.contains('^'),
            "{err}"
        );
        let negative = demo.replacen("nodes: 8,", "nodes: -8,", 1);
        let err = Session::from_ron(&negative, Path::new("n.ron"))
            .expect_err("negative")
            .to_string();
        assert!(
            err.contains("a negative number where a count or a size is expected"),
            "{err}"
        );
        assert!(err.contains("nodes: -8"), "{err}");
    }

    #[test]
    fn common_hand_edits_get_a_hint() {
        let demo = std::fs::read_to_string(demo_path()).expect("demo");
        let err = |text: String| {
            Session::from_ron(&text, Path::new("h.ron"))
                .expect_err("refused")
                .to_string()
        };
        let fraction = err(demo.replacen("nodes: 8,", "nodes: 8.5,", 1));
        assert!(
            fraction.contains("a whole number is expected here"),
            "{fraction}"
        );
        let option = err(demo.replacen("current_batch: Some(512)", "current_batch: 512", 1));
        assert!(option.contains("written Some(…) or None"), "{option}");
        let suffix = err(demo.replacen("total_tokens: 600e9", "total_tokens: 600B", 1));
        assert!(suffix.contains("without units or suffixes"), "{suffix}");
        let empty = err(String::new());
        assert!(empty.contains("the file is empty"), "{empty}");
    }

    #[test]
    fn wrong_sessions_name_file_and_position() {
        let err = Session::from_ron("(name: \"x\",\n model: 7)", Path::new("bad.ron"))
            .expect_err("wrong type");
        assert!(err.to_string().starts_with("bad.ron:2:"), "{err}");
        let mut s = Session::load(&demo_path()).expect("demo");
        s.cluster.nodes = 0;
        let err = s.resolve(Path::new("z.ron")).expect_err("zero nodes");
        assert!(err.to_string().contains("z.ron") && err.to_string().contains("nodes"));
    }

    #[test]
    fn a_session_without_zero_stages_searches_its_stacks_own() {
        let demo = std::fs::read_to_string(demo_path()).expect("demo");
        let with = |edit: &dyn Fn(&str) -> String| {
            Session::from_ron(&edit(&demo), &demo_path())
                .expect("parses")
                .resolve(&demo_path())
                .expect("resolves")
        };
        // Listed: kept, whatever the stack.
        let listed = with(&|t| {
            t.replacen(
                "stat_eff:",
                "stack: (preset: Some(TorchtitanFsdp2)),\n    stat_eff:",
                1,
            )
        });
        assert!(!listed.zero_from_stack);
        assert_eq!(listed.session.search.zero, vec![1]);
        // Left out: the stack's own (FSDP2: 3; no stack: Megatron-Core's 1).
        let unlisted = |stack: &str| {
            with(&|t| {
                t.replacen("        zero: [1],\n", "", 1).replacen(
                    "stat_eff:",
                    &format!("{stack}stat_eff:"),
                    1,
                )
            })
        };
        let mut fsdp = unlisted("stack: (preset: Some(TorchtitanFsdp2)),\n    ");
        assert!(fsdp.zero_from_stack);
        assert_eq!(fsdp.session.search.zero, vec![3]);
        assert_eq!(unlisted("").session.search.zero, vec![1]);
        // A change of stack moves it along; saved, the list is stated.
        fsdp.session.stack = Some(crate::perf::Stack {
            preset: Some(crate::perf::stack::StackPreset::MegatronLm2021),
            ..crate::perf::Stack::default()
        });
        fsdp.fill_zero_from_stack();
        assert_eq!(fsdp.session.search.zero, vec![0]);
        let text = fsdp.session.to_ron().expect("serialises");
        let back = Session::from_ron(&text, Path::new("x.ron")).expect("reparses");
        assert_eq!(back.search.zero, vec![0]);
    }

    #[test]
    fn a_session_without_recompute_policies_searches_those_its_stack_has() {
        use crate::perf::Recompute;
        let demo = std::fs::read_to_string(demo_path()).expect("demo");
        let unlisted = |stack: &str| {
            let text = demo
                .replacen("        recompute: [None, Selective, Full],\n", "", 1)
                .replacen("stat_eff:", &format!("{stack}stat_eff:"), 1);
            assert_ne!(text, demo);
            Session::from_ron(&text, &demo_path())
                .expect("parses")
                .resolve(&demo_path())
                .expect("resolves")
        };
        let mut titan = unlisted("stack: (preset: Some(TorchtitanFsdp2)),\n    ");
        assert!(titan.recompute_from_stack);
        assert_eq!(
            titan.session.search.recompute,
            vec![Recompute::None, Recompute::Op, Recompute::Full]
        );
        assert_eq!(
            unlisted("").session.search.recompute,
            vec![Recompute::None, Recompute::Selective, Recompute::Full]
        );
        titan.session.stack = Some(crate::perf::Stack {
            preset: Some(crate::perf::stack::StackPreset::DeepSpeed),
            ..crate::perf::Stack::default()
        });
        titan.fill_zero_from_stack();
        assert_eq!(
            titan.session.search.recompute,
            vec![Recompute::None, Recompute::Full]
        );
    }

    #[test]
    fn save_is_atomic_and_reloads() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s.ron");
        let mut s = Session::load(&demo_path()).expect("demo");
        s.view.cursor = 17;
        s.save_atomic(&path).expect("save");
        let back = Session::load(&path).expect("reload");
        assert_eq!(back.view.cursor, 17);
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .expect("list")
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty());
    }
}

/// A stack setting that applies only to some layouts of a search (see
/// [`Resolved::setting_without_effect`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SearchBoundSetting {
    /// The interleaved schedule's transfer overlap (`pp_overlap`).
    PpOverlap,
    /// The ZeRO-3 / FSDP implementation (`sharding`).
    Sharding,
    /// Context parallelism's key/value exchange (`cp_comm`).
    CpComm,
}
