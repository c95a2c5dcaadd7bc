//! The what-if editor: the settings a user can change in the explorer, each stepped up or down,
//! applied to the session so that the throughput table is recomputed at once.

use crate::goodput::StatEffForm;
use crate::perf::efficiency::{
    AttentionKind, CpComm, CrossEntropy, Elementwise, Precision, Sharding, StageSplit,
};
use crate::perf::stack::GradReduce;
use crate::perf::{Recompute, Stack, StackPreset};
use crate::plan::Objective;
use crate::plan::costs::ReshardMode;
use crate::profiles::{self, BUILTIN_HARDWARE, BUILTIN_MODELS};
use crate::session::{ProfileRef, Resolved};

/// An editable setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// Nodes in the cluster.
    Nodes,
    /// GPUs per node.
    GpusPerNode,
    /// Hardware profile (built-ins).
    Hardware,
    /// Model profile (built-ins).
    Model,
    /// ZeRO stage (searched: exactly this one).
    Zero,
    /// Recompute policy (searched: all, or exactly one).
    Recompute,
    /// Multiplier on B_crit.
    BCritScale,
    /// Statistical-efficiency form.
    StatEff,
    /// The batch the user runs now.
    CurrentBatch,
    /// Efficiency model: the GEMM plateau (fraction of peak reached by large GEMMs).
    GemmPlateau,
    /// Efficiency model: multiplier on the scale-out (inter-node) bandwidth.
    InterLinkScale,
    /// Switch cost: process-group restart on a TP/PP change, seconds.
    RestartCost,
    /// Switch cost: checkpoint storage bandwidth, bytes/s.
    CheckpointBandwidth,
    /// Performance model: calibrated on the run's step times, or the hardware profile's.
    PerfModel,
    /// Context-parallel degrees laid out on the heatmap.
    ContextParallel,
    /// Expert-parallel degree of a mixture-of-experts model (searched: any the layout allows,
    /// or exactly one).
    ExpertParallel,
    /// Training stack preset (docs/MODEL.md, "Stating your stack").
    Stack,
    /// GEMM precision of the stack (BF16 or FP8).
    Precision,
    /// Attention kernel of the stack.
    Attention,
    /// How context parallelism exchanges keys and values (ring, all-gather, all-to-all).
    CpComm,
    /// Where the pipeline puts the stages short of ⌈layers/pp⌉ layers (ends, balanced,
    /// greedy).
    StageSplit,
    /// Sequence parallelism beside TP (on, off).
    SequenceParallel,
    /// Dtype gradients are kept and reduced in (FP32, BF16).
    GradReduce,
    /// Data-parallel gradient reduction overlapped with the backward (on, off).
    DpOverlap,
    /// Tensor-parallel communication overlapped with its GEMMs (on, off).
    TpOverlap,
    /// Pipeline transfers overlapped with compute (on, off).
    PpOverlap,
    /// Cross-entropy implementation (fused, vocab-parallel, PyTorch's).
    CrossEntropy,
    /// Element-wise kernels (fused, eager).
    Elementwise,
    /// ZeRO-3-style sharding collectives (DeepSpeed, FSDP1, FSDP2, HSDP).
    Sharding,
    /// Planner objective (McCandlish or learning-rate-aware square-root scaling).
    Objective,
    /// How a TP/PP change is carried out: checkpoint-and-restart or in-place resharding.
    Reshard,
    /// Smallest predicted gain that makes the greedy strategies switch, 0–1.
    SwitchThreshold,
}

/// The editor's rows, top to bottom.
pub const FIELDS: [Field; 32] = [
    Field::Nodes,
    Field::GpusPerNode,
    Field::Hardware,
    Field::Model,
    Field::Zero,
    Field::Recompute,
    Field::BCritScale,
    Field::StatEff,
    Field::CurrentBatch,
    Field::GemmPlateau,
    Field::InterLinkScale,
    Field::RestartCost,
    Field::CheckpointBandwidth,
    Field::PerfModel,
    Field::Stack,
    Field::Precision,
    Field::Attention,
    Field::SequenceParallel,
    Field::GradReduce,
    Field::DpOverlap,
    Field::TpOverlap,
    Field::PpOverlap,
    Field::CrossEntropy,
    Field::Elementwise,
    Field::Sharding,
    Field::ContextParallel,
    Field::CpComm,
    Field::StageSplit,
    Field::ExpertParallel,
    Field::Objective,
    Field::Reshard,
    Field::SwitchThreshold,
];
const PLATEAUS: [f64; 13] = [
    0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9,
];
const LINK_SCALES: [f64; 7] = [0.125, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0];
const RESTARTS_S: [f64; 9] = [0.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0];
const CHECKPOINT_BW: [f64; 7] = [0.5e9, 1e9, 2e9, 5e9, 10e9, 20e9, 50e9];

const GPUS_PER_NODE: [u32; 4] = [1, 2, 4, 8];
const CP_DEGREES: [u32; 4] = [1, 2, 4, 8];
/// The expert-parallel choices the editor cycles through: any degree the layout allows, then
/// exactly one.
const EP_CHOICES: [Option<u32>; 8] = [
    None,
    Some(1),
    Some(2),
    Some(4),
    Some(8),
    Some(16),
    Some(32),
    Some(64),
];
const THRESHOLDS: [f64; 6] = [0.0, 0.01, 0.02, 0.05, 0.1, 0.2];
const SCALES: [f64; 11] = [
    0.125, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0,
];

impl Field {
    /// Row label.
    pub fn label(self) -> &'static str {
        match self {
            Field::Nodes => "nodes",
            Field::GpusPerNode => "GPUs per node",
            Field::Hardware => "hardware",
            Field::Model => "model",
            Field::Zero => "ZeRO stage",
            Field::Recompute => "recompute",
            Field::ContextParallel => "CP degrees",
            Field::ExpertParallel => "EP degree",
            Field::BCritScale => "B_crit scale",
            Field::StatEff => "efficiency form",
            Field::CurrentBatch => "current batch",
            Field::GemmPlateau => "GEMM plateau",
            Field::InterLinkScale => "scale-out bw",
            Field::RestartCost => "TP/PP restart",
            Field::CheckpointBandwidth => "checkpoint bw",
            Field::PerfModel => "perf model",
            Field::Stack => "stack",
            Field::Precision => "precision",
            Field::Attention => "attention",
            Field::CpComm => "CP exchange",
            Field::StageSplit => "stage split",
            Field::SequenceParallel => "seq. parallel",
            Field::GradReduce => "grad reduce",
            Field::DpOverlap => "DP overlap",
            Field::TpOverlap => "TP overlap",
            Field::PpOverlap => "PP overlap",
            Field::CrossEntropy => "cross-entropy",
            Field::Elementwise => "elementwise",
            Field::Sharding => "sharding",
            Field::Objective => "plan objective",
            Field::Reshard => "TP/PP switch",
            Field::SwitchThreshold => "switch threshold",
        }
    }

    /// Whether a change to this field changes throughput (and so needs a new table).
    pub fn affects_throughput(self) -> bool {
        !matches!(
            self,
            Field::BCritScale
                | Field::StatEff
                | Field::CurrentBatch
                | Field::RestartCost
                | Field::CheckpointBandwidth
                | Field::Objective
                | Field::Reshard
                | Field::SwitchThreshold
        )
    }
}

/// Step through a two-valued list: either key flips it (as the precision row does), rather
/// than doing nothing at one end.
fn flip<T: PartialEq + Copy>(pair: &[T; 2], current: T) -> T {
    if current == pair[0] { pair[1] } else { pair[0] }
}

fn step_in<T: PartialEq + Copy>(items: &[T], current: T, delta: i32) -> T {
    let i = items.iter().position(|x| *x == current).unwrap_or(0) as i64;
    let n = items.len() as i64;
    items[(i + delta as i64).clamp(0, n - 1) as usize]
}

/// `delta` steps through the ascending `items` from `current`, which need not be on the list:
/// up, to the next entry above it; down, to the next below (a measured 0.384 steps to 0.5 and
/// 0.25, not from whichever entry it happens to be nearest).
/// `items` (ascending) with the values the session had before any edit: the hardware
/// profile's and the calibration's (`value` of each), so that stepping away from a fitted
/// 0.6615 can step back to it.
fn with_unedited(
    items: &[f64],
    r: &Resolved,
    value: impl Fn(&crate::perf::EfficiencyParams) -> f64,
) -> Vec<f64> {
    let mut stops: Vec<f64> = items.to_vec();
    stops.push(value(&r.hardware.efficiency));
    stops.extend(
        r.calibration
            .as_ref()
            .map(|c| value(&c.params_on(&r.hardware.efficiency))),
    );
    stops.retain(|x| x.is_finite());
    stops.sort_by(f64::total_cmp);
    stops.dedup();
    stops
}

fn step_ordered(items: &[f64], current: f64, delta: i32) -> f64 {
    let mut value = current;
    for _ in 0..delta.unsigned_abs() {
        value = if delta > 0 {
            items.iter().copied().find(|&x| x > value).unwrap_or(value)
        } else {
            items
                .iter()
                .rev()
                .copied()
                .find(|&x| x < value)
                .unwrap_or(value)
        };
    }
    value
}

/// The built-in models' names, smallest first (by parameter count).
pub fn models_by_size(base: &std::path::Path) -> Vec<(&'static str, &'static str)> {
    let mut models: Vec<(f64, (&str, &str))> = BUILTIN_MODELS
        .iter()
        .map(|&(n, text)| {
            let size = profiles::model(n, base)
                .map_or(f64::INFINITY, |m| crate::perf::parameter_count(&m));
            (size, (n, text))
        })
        .collect();
    models.sort_by(|a, b| a.0.total_cmp(&b.0));
    models.into_iter().map(|(_, m)| m).collect()
}

fn step_name(table: &[(&str, &str)], current: &str, delta: i32) -> String {
    let names: Vec<&str> = table.iter().map(|(n, _)| *n).collect();
    let i = names.iter().position(|n| *n == current).unwrap_or(0) as i64;
    let n = names.len() as i64;
    names[(i + delta as i64).rem_euclid(n) as usize].to_string()
}

/// The field's value as text.
pub fn value(r: &Resolved, field: Field) -> String {
    let s = &r.session;
    match field {
        Field::Nodes => s.cluster.nodes.to_string(),
        Field::GpusPerNode => s.cluster.gpus_per_node.to_string(),
        Field::Hardware => r.hardware.name.clone(),
        Field::Model => r.model.name.clone(),
        Field::Zero => match s.search.zero.as_slice() {
            [one] => one.to_string(),
            many => many
                .iter()
                .map(u8::to_string)
                .collect::<Vec<_>>()
                .join(", "),
        },
        Field::Recompute => match s.search.recompute.as_slice() {
            [one] => one.to_string(),
            _ => "fastest that fits".into(),
        },
        Field::ContextParallel => match s.search.context_parallel.as_slice() {
            [1] => "CP 1 (off)".into(),
            many => format!(
                "CP {}",
                many.iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        },
        Field::ExpertParallel => match (s.search.expert_parallel.as_slice(), &r.model.moe) {
            (_, None) => "none (dense model)".into(),
            ([], Some(_)) => "any that fits".into(),
            (many, Some(_)) => format!(
                "EP {}",
                many.iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        },
        // A measured conversion (e.g. 0.6344722…) to three decimals, as the title gives it.
        Field::BCritScale => factor(s.b_crit_scale),
        // Under the lr-sqrt objective the heatmap is weighted by that objective's efficiency
        // (not monotone in B: the learning rate grows with √B), whatever this form says.
        Field::StatEff if crate::pipeline::heatmap_efficiency(r).is_some() => {
            "lr-sqrt (the plan objective)".into()
        }
        Field::StatEff => match s.stat_eff {
            StatEffForm::McCandlish => "McCandlish Bc/(B+Bc)".into(),
            StatEffForm::Pollux { b0 } => format!("Pollux, B0 = {b0}"),
        },
        Field::CurrentBatch => s.current_batch.map_or("none".into(), |b| b.to_string()),
        Field::GemmPlateau => {
            // Under FP8 the projections and MLP run at the FP8 plateau (of the FP8 peak).
            let e = r.efficiency();
            if e.precision == Precision::Fp8 {
                format!(
                    "FP8 {:.0}%, BF16 {:.0}%",
                    e.fp8_max_eff * 100.0,
                    e.max_eff * 100.0
                )
            } else {
                format!("{:.0}% of peak", e.max_eff * 100.0)
            }
        }
        // A fitted scale (a links calibration's 0.2234280…) to three decimals.
        Field::InterLinkScale => factor(r.efficiency().inter_link_scale),
        Field::RestartCost => format!("{:.0} s", s.costs.restart_s),
        Field::CheckpointBandwidth => {
            format!("{:.1} GB/s", s.costs.checkpoint_bw_bytes_per_s / 1e9)
        }
        Field::Objective => s.planner.objective.name().into(),
        Field::Reshard => match &s.costs.reshard {
            ReshardMode::CheckpointRestart => "checkpoint + restart".into(),
            ReshardMode::InPlace { reinit_s, .. } => format!("in place, {reinit_s:.0} s re-init"),
        },
        Field::SwitchThreshold => format!("{:.0}% gain", s.costs.switch_threshold * 100.0),
        Field::Stack => r.stack().label(),
        Field::Precision => r.stack().settings().precision.name().into(),
        Field::Attention => r.stack().settings().attention.name().into(),
        Field::CpComm => r.stack().settings().cp_comm.name().replace('_', "-"),
        Field::StageSplit => r.stack().settings().stage_split.name().into(),
        Field::SequenceParallel => on_off(r.stack().settings().sequence_parallel),
        Field::GradReduce => r.stack().settings().grad_reduce.name().into(),
        Field::DpOverlap => on_off(r.stack().settings().dp_overlap),
        Field::TpOverlap => on_off(r.stack().settings().tp_overlap),
        Field::PpOverlap => on_off(r.stack().settings().pp_overlap),
        Field::CrossEntropy => r.stack().settings().cross_entropy.name().replace('_', "-"),
        Field::Elementwise => r.stack().settings().elementwise.name().into(),
        Field::Sharding => r.stack().settings().sharding.name().into(),
        Field::PerfModel => match (&r.calibration, r.use_calibration) {
            _ if s.efficiency.is_some() && !r.efficiency_edited_from_calibration => {
                "session's own".into()
            }
            (Some(c), true) if r.calibration_from_run => {
                format!(
                    "calibrated on the run (±{:.0}% on {})",
                    c.rms_rel_error * 100.0,
                    c.model
                )
            }
            (Some(c), true) => {
                // Which file: the one given on the command line, else the session's.
                let file = r
                    .calibration_from_flag
                    .as_deref()
                    .and_then(|p| p.file_name())
                    .map(|n| n.to_string_lossy().into_owned())
                    .or_else(|| {
                        s.calibration.as_deref().map(|p| {
                            std::path::Path::new(p)
                                .file_name()
                                .map_or_else(|| p.to_string(), |n| n.to_string_lossy().into_owned())
                        })
                    });
                let fitted = format!("±{:.0}% on {}", c.rms_rel_error * 100.0, c.model);
                // Edited here (a GEMM plateau or link scale changed): said first, the row is
                // narrow.
                let how = if s.efficiency.is_some() {
                    "edited"
                } else {
                    "calibrated"
                };
                match file {
                    Some(f) => format!("{how} {f} ({fitted})"),
                    None => format!("{how} ({fitted})"),
                }
            }
            (Some(_), false) => "profile (calibration off)".into(),
            (None, _) => "profile".into(),
        },
    }
}

/// Step `field` by `delta` (±1); returns an error text when the new value cannot be loaded.
pub fn apply(r: &mut Resolved, field: Field, delta: i32) -> Result<(), String> {
    let s = &mut r.session;
    match field {
        Field::Nodes => {
            let n = s.cluster.nodes as i64 + delta as i64;
            s.cluster.nodes = n.clamp(1, 256) as u32;
        }
        Field::GpusPerNode => {
            s.cluster.gpus_per_node = step_in(&GPUS_PER_NODE, s.cluster.gpus_per_node, delta)
        }
        Field::Hardware => {
            let name = step_name(BUILTIN_HARDWARE, &r.hardware.name, delta);
            let hardware = profiles::hardware(&name, &r.base).map_err(|e| e.to_string())?;
            // A stack this GPU cannot run (FP8 on a GPU without FP8 tensor cores) is refused
            // here, as the precision row refuses it: it drew BF16 numbers under an FP8 label
            // and saved a session copus then would not open.
            let before = std::mem::replace(&mut r.hardware, hardware);
            if let Some(why) = crate::perf::stack::hardware_problem(&r.hardware, &r.efficiency()) {
                r.hardware = before;
                return Err(format!(
                    "hardware {name}: {why} (change the precision first)"
                ));
            }
            r.session.cluster.hardware = ProfileRef::Named(name);
        }
        Field::Model => {
            let by_size = models_by_size(&r.base);
            let name = step_name(&by_size, &r.model.name, delta);
            r.model = profiles::model(&name, &r.base).map_err(|e| e.to_string())?;
            s.model = ProfileRef::Named(name);
        }
        Field::Zero => {
            let current = s.search.zero.first().copied().unwrap_or(1);
            r.search_zero(vec![step_in(&[0u8, 1, 2, 3], current, delta)]);
        }
        Field::Recompute => {
            // Cycle: all (the fastest that fits) → each policy the stack's framework has
            // (Megatron: none → selective → full; torchtitan: none → op-level → full).
            let policies = r.stack().base().recompute_policies();
            let s = &mut r.session;
            let options: Vec<Option<Recompute>> = std::iter::once(None)
                .chain(policies.iter().copied().map(Some))
                .collect();
            let current = match s.search.recompute.as_slice() {
                [one] => Some(*one),
                _ => None,
            };
            let chosen = step_in(&options, current, delta);
            s.search.recompute = match chosen {
                Some(one) => vec![one],
                None => policies.to_vec(),
            };
            // "All" follows the stack from now on; one policy chosen does not.
            r.recompute_from_stack = chosen.is_none();
            r.recompute_from_file = false;
        }
        Field::ContextParallel => {
            // none → CP 1, 2 → 1, 2, 4 → 1, 2, 4, 8.
            let current = s.search.context_parallel.len().clamp(1, CP_DEGREES.len());
            let n = step_in(&[1usize, 2, 3, 4], current, delta);
            s.search.context_parallel = CP_DEGREES[..n].to_vec();
        }
        Field::ExpertParallel => {
            let Some(moe) = &r.model.moe else {
                return Err(format!(
                    "{} is dense: expert parallelism splits a mixture of experts",
                    r.model.name
                ));
            };
            // Only degrees that divide the experts and the GPUs (EP 16 of 8 experts made
            // every cell ×, as `--ep 16` is refused on the command line).
            let gpus = s.cluster.nodes.saturating_mul(s.cluster.gpus_per_node);
            let options: Vec<Option<u32>> = EP_CHOICES
                .iter()
                .copied()
                .filter(|c| {
                    c.is_none_or(|d| moe.experts.is_multiple_of(d) && gpus.is_multiple_of(d))
                })
                .collect();
            let current = match s.search.expert_parallel.as_slice() {
                [one] => Some(*one),
                _ => None,
            };
            s.search.expert_parallel = step_in(&options, current, delta).into_iter().collect();
        }
        Field::BCritScale => {
            let scale = step_ordered(&SCALES, s.b_crit_scale, delta);
            r.set_b_crit_scale(scale);
        }
        Field::StatEff => {
            let to_pollux = s.stat_eff == StatEffForm::McCandlish;
            r.session.stat_eff = if to_pollux {
                r.pollux_at_current_batch()
            } else {
                StatEffForm::McCandlish
            };
        }
        Field::CurrentBatch => {
            let batches = &s.search.batch_sizes;
            let current = s.current_batch.unwrap_or(batches[0]);
            s.current_batch = Some(step_in(batches, current, delta));
        }
        Field::GemmPlateau => {
            let stops = with_unedited(&PLATEAUS, r, |e| e.max_eff);
            r.edit_efficiency(|e| e.set_gemm_plateau(step_ordered(&stops, e.max_eff, delta)));
        }
        Field::InterLinkScale => {
            let stops = with_unedited(&LINK_SCALES, r, |e| e.inter_link_scale);
            r.edit_efficiency(|e| {
                e.inter_link_scale = step_ordered(&stops, e.inter_link_scale, delta)
            });
        }
        Field::RestartCost => {
            s.costs.restart_s = step_ordered(&RESTARTS_S, s.costs.restart_s, delta)
        }
        Field::CheckpointBandwidth => {
            s.costs.checkpoint_bw_bytes_per_s =
                step_ordered(&CHECKPOINT_BW, s.costs.checkpoint_bw_bytes_per_s, delta)
        }
        Field::Objective => {
            s.planner.objective = match s.planner.objective {
                Objective::McCandlish => Objective::LrSqrt,
                Objective::LrSqrt => Objective::McCandlish,
            }
        }
        Field::Reshard => {
            let in_place = matches!(s.costs.reshard, ReshardMode::InPlace { .. });
            r.set_reshard_in_place(!in_place);
        }
        Field::SwitchThreshold => {
            s.costs.switch_threshold = step_ordered(&THRESHOLDS, s.costs.switch_threshold, delta)
        }
        Field::Stack => {
            // Another framework's defaults; the precision chosen here is kept. Back at the
            // preset the session was opened with, its own settings come back with it.
            let current = r.stack();
            let next = step_in(&StackPreset::ALL, current.base(), delta);
            let stack = match r.stack_as_opened.clone() {
                Some(opened) if opened.base() == next => Stack {
                    precision: current.precision.or(opened.precision),
                    ..opened
                },
                _ => Stack {
                    precision: current.precision,
                    ..Stack::preset(next)
                },
            };
            set_stack(r, stack)?;
        }
        Field::Precision => {
            let precision = match r.stack().settings().precision {
                Precision::Bf16 => Precision::Fp8,
                Precision::Fp8 => Precision::Bf16,
            };
            change_stack(
                r,
                Stack {
                    precision: Some(precision),
                    ..Stack::default()
                },
            )?;
        }
        Field::Attention => {
            let attention = step_in(&AttentionKind::ALL, r.stack().settings().attention, delta);
            change_stack(
                r,
                Stack {
                    attention: Some(attention),
                    ..Stack::default()
                },
            )?;
        }
        Field::CpComm => {
            let cp_comm = step_in(&CpComm::ALL, r.stack().settings().cp_comm, delta);
            change_stack(
                r,
                Stack {
                    cp_comm: Some(cp_comm),
                    ..Stack::default()
                },
            )?;
        }
        Field::StageSplit => {
            let split = step_in(&StageSplit::ALL, r.stack().settings().stage_split, delta);
            change_stack(
                r,
                Stack {
                    stage_split: Some(split),
                    ..Stack::default()
                },
            )?;
        }
        Field::SequenceParallel
        | Field::GradReduce
        | Field::DpOverlap
        | Field::TpOverlap
        | Field::PpOverlap
        | Field::CrossEntropy
        | Field::Elementwise
        | Field::Sharding => {
            let change = stack_setting_step(field, &r.stack().settings(), delta);
            change_stack(r, change)?;
        }
        Field::PerfModel => {
            if r.calibration.is_none() {
                // Both ways to one: a file (it named only `copus calibrate`).
                return Err(
                    "no calibration: open with --calibration FILE (copus calibrate --out \
                     writes one); the source carries no step times"
                        .into(),
                );
            }
            if r.efficiency_edited_from_calibration {
                // The calibration as edited here, switched off: the profile, without the edits
                // (they were made to the calibration's values).
                r.session.efficiency = None;
                r.efficiency_edited_from_calibration = false;
                r.use_calibration = false;
                return Ok(());
            }
            if r.session.efficiency.is_some() {
                return Err(
                    "the session sets its own efficiency model, which takes precedence".into(),
                );
            }
            r.use_calibration = !r.use_calibration;
        }
    }
    Ok(())
}

/// A note for the status line after `field` changed, when the change cannot show on the
/// heatmap (a setting of an interleaved schedule with none searched, of ZeRO-3 without ZeRO-3,
/// of context parallelism without CP) or the search asks what the stack's framework lacks (a
/// recompute policy it has not); empty otherwise.
pub fn no_effect_note(r: &Resolved, field: Field) -> String {
    let search = &r.session.search;
    let mut note = without_effect(r, field)
        .map(|why| format!(" · no effect here: {why}"))
        .unwrap_or_default();
    let framework = r.stack().base();
    let lacking: Vec<String> = search
        .recompute
        .iter()
        .filter(|p| !framework.recompute_policies().contains(p))
        .map(|p| p.to_string())
        .collect();
    if !lacking.is_empty() {
        note.push_str(&format!(
            " · recompute {} is not a policy {} runs: costed as asked",
            lacking.join("/"),
            framework.name()
        ));
    }
    note
}

/// Why `field`'s value cannot change the heatmap of `r`, when it cannot: a setting of an
/// interleaved schedule with none searched, of ZeRO-3 without ZeRO-3, of context parallelism
/// without CP, or the efficiency form under the lr-sqrt objective (whose own efficiency is
/// drawn).
pub fn without_effect(r: &Resolved, field: Field) -> Option<&'static str> {
    use crate::session::SearchBoundSetting as S;
    match field {
        Field::PpOverlap => r.setting_without_effect(S::PpOverlap),
        Field::Sharding => r.setting_without_effect(S::Sharding),
        Field::CpComm => r.setting_without_effect(S::CpComm),
        Field::TpOverlap if !r.stack().settings().sequence_parallel => Some(
            "sequence parallelism is off, and TP communication overlaps its GEMMs only with it \
             (Megatron's --tp-comm-overlap requires --sequence-parallel)",
        ),
        Field::ExpertParallel if r.model.moe.is_none() => {
            Some("the model is dense (expert parallelism splits a mixture of experts)")
        }
        Field::RestartCost | Field::CheckpointBandwidth
            if matches!(r.session.costs.reshard, ReshardMode::InPlace { .. }) =>
        {
            Some(
                "an in-place TP/PP switch pays its re-initialisation, not a checkpoint and a \
                 restart (the what-if's TP/PP switch row)",
            )
        }
        Field::InterLinkScale if r.session.cluster.nodes <= 1 => {
            Some("the cluster is one node: nothing crosses the scale-out link")
        }
        Field::StatEff if crate::pipeline::heatmap_efficiency(r).is_some() => Some(
            "the lr-sqrt objective's efficiency replaces the form (the what-if's plan \
             objective row)",
        ),
        _ => None,
    }
}

/// "on" or "off".
fn on_off(b: bool) -> String {
    if b { "on" } else { "off" }.into()
}

const ON_OFF: [bool; 2] = [true, false];
const GRAD_REDUCE: [GradReduce; 2] = [GradReduce::Fp32, GradReduce::Bf16];
const CROSS_ENTROPY: [CrossEntropy; 3] = [
    CrossEntropy::Fused,
    CrossEntropy::VocabParallel,
    CrossEntropy::Pytorch,
];
const ELEMENTWISE: [Elementwise; 2] = [Elementwise::Fused, Elementwise::Eager];
const SHARDING: [Sharding; 4] = [
    Sharding::DeepSpeed,
    Sharding::Fsdp1,
    Sharding::Fsdp2,
    Sharding::Hsdp,
];

/// The one-setting change that steps `field` (one of the stack's on/off and kind settings)
/// from its value in `now` by `delta`.
fn stack_setting_step(field: Field, now: &crate::perf::stack::StackSettings, delta: i32) -> Stack {
    let none = Stack::default();
    match field {
        Field::SequenceParallel => Stack {
            sequence_parallel: Some(flip(&ON_OFF, now.sequence_parallel)),
            ..none
        },
        Field::GradReduce => Stack {
            grad_reduce: Some(flip(&GRAD_REDUCE, now.grad_reduce)),
            ..none
        },
        Field::DpOverlap => Stack {
            dp_overlap: Some(flip(&ON_OFF, now.dp_overlap)),
            ..none
        },
        Field::TpOverlap => Stack {
            tp_overlap: Some(flip(&ON_OFF, now.tp_overlap)),
            ..none
        },
        Field::PpOverlap => Stack {
            pp_overlap: Some(flip(&ON_OFF, now.pp_overlap)),
            ..none
        },
        Field::CrossEntropy => Stack {
            cross_entropy: Some(step_in(&CROSS_ENTROPY, now.cross_entropy, delta)),
            ..none
        },
        Field::Elementwise => Stack {
            elementwise: Some(flip(&ELEMENTWISE, now.elementwise)),
            ..none
        },
        Field::Sharding => Stack {
            sharding: Some(step_in(&SHARDING, now.sharding, delta)),
            ..none
        },
        _ => none,
    }
}

/// Lay the settings `change` sets over the stack in force and put the result in force (see
/// [`set_stack`]).
fn change_stack(r: &mut Resolved, change: Stack) -> Result<(), String> {
    let stack = r.stack().overlaid(&change);
    set_stack(r, stack)
}

/// Put `stack` in force, unless the hardware cannot run it (FP8 without FP8 tensor cores):
/// then the session keeps its stack and the reason is returned.
fn set_stack(r: &mut Resolved, stack: Stack) -> Result<(), String> {
    let before = r.session.stack.replace(stack.clone());
    if let Some(why) = crate::perf::stack::hardware_problem(&r.hardware, &r.efficiency()) {
        r.session.stack = before;
        return Err(why);
    }
    r.session.stack = before;
    r.switch_stack(stack);
    Ok(())
}

/// A multiplier as "×0.634": three decimals, trailing zeros dropped ("×1", "×0.25").
fn factor(x: f64) -> String {
    let text = format!("{x:.3}");
    format!("×{}", text.trim_end_matches('0').trim_end_matches('.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A value off the list steps to its neighbours on the list, up and down.
    #[test]
    fn a_measured_scale_steps_to_its_neighbours() {
        assert_eq!(step_ordered(&SCALES, 0.384, 1), 0.5);
        assert_eq!(step_ordered(&SCALES, 0.384, -1), 0.25);
        assert_eq!(step_ordered(&SCALES, 0.384, 2), 1.0);
        assert_eq!(step_ordered(&SCALES, 1.0, 1), 2.0);
        assert_eq!(step_ordered(&SCALES, 128.0, 1), 128.0);
        assert_eq!(step_ordered(&SCALES, 0.125, -1), 0.125);
        // A calibrated link scale steps to its neighbours too (×0.223 → ×0.25, not ×0.5).
        assert_eq!(step_ordered(&LINK_SCALES, 0.2234, 1), 0.25);
        assert_eq!(step_ordered(&LINK_SCALES, 0.2234, -1), 0.125);
    }

    /// A fitted factor reads to three decimals; list values read as written.
    #[test]
    fn factors_read_to_three_decimals() {
        assert_eq!(factor(0.2234280026427495), "×0.223");
        assert_eq!(factor(1.0), "×1");
        assert_eq!(factor(0.25), "×0.25");
    }
}
