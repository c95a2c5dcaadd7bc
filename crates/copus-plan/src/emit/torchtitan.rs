//! `--emit torchtitan`: one torchtitan job TOML per phase, each headed by a comment line
//! `# ==== phase K of N ====`; a phase resumes from the previous phase's checkpoint and runs to
//! its `training.steps`.

use super::{EmitContext, EmitEnd, EmitError, EmitPhase, EmitTarget, stage_split};
use crate::report::PlanReport;
use serde::Serialize;
use std::fmt::Write as _;

const TARGET: EmitTarget = EmitTarget::Torchtitan;

/// The marker line that starts each phase's document.
pub const PHASE_MARKER: &str = "# ==== phase ";

#[derive(Serialize)]
struct Job {
    training: Training,
    parallelism: Parallelism,
    activation_checkpoint: ActivationCheckpoint,
    checkpoint: Checkpoint,
    lr_scheduler: LrScheduler,
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<Model>,
    #[serde(skip_serializing_if = "Option::is_none")]
    compile: Option<Compile>,
}

/// `torch.compile` of the model and the loss, where the plan was costed with fused elementwise
/// kernels (an eager job runs the norms and activations as separate kernels: about 14 %
/// slower on the torchtitan rows copus is checked against).
#[derive(Serialize)]
struct Compile {
    enable: bool,
    components: Vec<&'static str>,
}

/// torchtitan's learning-rate schedule spans `training.steps`, which ends each phase: a
/// warmup-stable-decay schedule holds the rate in every phase but the last (`decay_ratio`
/// 0) and decays in the last one only, so the phases join into one schedule.
#[derive(Serialize)]
struct LrScheduler {
    decay_ratio: f64,
}

/// Share of the plan's steps the learning rate decays over at its end, within the last
/// phase: the 20 % cooldown of a warmup-stable-decay schedule that matched a cosine schedule
/// in Hägele et al. 2024 (arXiv 2405.18392).
const DECAY_SHARE: f64 = 0.2;

/// `lr_scheduler.decay_ratio` of `p` (of `phases` phases in all): 0 before the last phase;
/// in the last, the final [`DECAY_SHARE`] of the plan's steps, or the whole last phase where
/// that is shorter, as a share of its `training.steps`.
fn decay_ratio(p: &EmitPhase, phases: usize) -> f64 {
    if p.phase < phases || p.until_step == 0 {
        return 0.0;
    }
    let last_phase = p.until_step.saturating_sub(p.from_step) as f64 / p.until_step as f64;
    DECAY_SHARE.min(last_phase)
}

#[derive(Serialize)]
struct Training {
    local_batch_size: u64,
    global_batch_size: u64,
    seq_len: u32,
    steps: u64,
    mixed_precision_param: &'static str,
    mixed_precision_reduce: &'static str,
}

#[derive(Serialize)]
struct Parallelism {
    data_parallel_replicate_degree: u32,
    data_parallel_shard_degree: u32,
    fsdp_reshard_after_forward: &'static str,
    tensor_parallel_degree: u32,
    context_parallel_degree: u32,
    /// How context parallelism exchanges keys and values, as the plan costed it: "alltoall"
    /// (torchtitan's ring rotation of the shards) or "allgather"; left out without CP.
    #[serde(skip_serializing_if = "Option::is_none")]
    context_parallel_rotate_method: Option<&'static str>,
    /// torchtitan's `expert_parallel_degree` (MoE models; 1: none).
    expert_parallel_degree: u32,
    pipeline_parallel_degree: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pipeline_parallel_microbatch_size: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pipeline_parallel_schedule: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pipeline_parallel_layers_per_stage: Option<u32>,
    /// torchtitan counts `layers + first_less + last_less` layers into stages of
    /// `layers_per_stage` (both default to 1, for the embedding and the output layer): the
    /// layers the plan's split leaves off the first stage (0 when even), so that it gives
    /// exactly pp·vpp stages (with the defaults, 80 layers in stages of 40 made 3 stages for
    /// PP 2, which torchtitan refuses).
    #[serde(skip_serializing_if = "Option::is_none")]
    pipeline_parallel_first_stage_less_layers: Option<u32>,
    /// The same for the last stage.
    #[serde(skip_serializing_if = "Option::is_none")]
    pipeline_parallel_last_stage_less_layers: Option<u32>,
}

#[derive(Serialize)]
struct ActivationCheckpoint {
    mode: &'static str,
    selective_ac_option: &'static str,
}

#[derive(Serialize)]
struct Checkpoint {
    enable_checkpoint: bool,
    /// false: the checkpoint a phase ends with keeps the optimizer and training state the
    /// next phase resumes from (torchtitan's default keeps the model only at the last step).
    last_save_model_only: bool,
    /// What a phase does not load from the checkpoint it resumes from: the data loader after a
    /// change of the data-parallel degree, whose state torchtitan cannot reshard.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    exclude_from_loading: Vec<&'static str>,
}

#[derive(Serialize)]
struct Model {
    converters: Vec<&'static str>,
}

/// torchtitan's (replicate, shard) data-parallel degrees for an HSDP phase: the shard group
/// copus costed (`hsdp_shard_ranks` of the dp·cp ranks), whose CP ranks torchtitan's FSDP mesh
/// adds to the shard degree itself.
fn hsdp_degrees(p: &EmitPhase, ctx: &EmitContext) -> Result<(u32, u32), EmitError> {
    let ranks = p.dp.saturating_mul(p.cp.max(1));
    let group = copus_model::perf::memory::hsdp_shard_ranks(ctx.hsdp_shard_gpus, p.tp, ranks);
    let cp = p.cp.max(1);
    if !group.is_multiple_of(cp) || !p.dp.is_multiple_of(group / cp) {
        return Err(p.inexpressible(
            TARGET,
            format!(
                "an HSDP shard group of {group} ranks with CP {cp} (torchtitan shards over its \
                 data-parallel shard degree times CP)"
            ),
        ));
    }
    let shard = group / cp;
    Ok((p.dp / shard, shard))
}

/// The job of one phase, with the comment lines that explain its mapping.
fn job(
    p: &EmitPhase,
    before: Option<&EmitPhase>,
    phases: usize,
    ctx: &EmitContext,
    report: &PlanReport,
) -> Result<(Job, Vec<String>), EmitError> {
    let mut notes = Vec::new();
    // torchtitan's dataloader refuses a state saved at another DP degree ("dp_degree is
    // inconsistent before and after checkpoint, dataloader resharding is not supported yet").
    let dp_changed = before.is_some_and(|b| b.dp != p.dp);
    if let Some(b) = before.filter(|_| dp_changed) {
        notes.push(format!(
            "the data-parallel degree changes from {} to {}, and torchtitan's data loader cannot \
             load a state saved at another one: it is excluded from loading \
             (checkpoint.exclude_from_loading), so the data loader starts again from the \
             beginning of its data; skip the {} samples the plan has trained on by then in your \
             dataset, or accept that they are seen again",
            b.dp, p.dp, p.from_samples
        ));
    }
    p.check_shape(TARGET, ctx, &report.stack.settings)?;
    let hsdp = report.stack.settings.sharding == "hsdp";
    let (replicate, shard, reshard) = match p.zero {
        0 => (p.dp, 1, "default"),
        3 if hsdp => {
            let (replicate, shard) = hsdp_degrees(p, ctx)?;
            notes.push(format!(
                "HSDP: parameters sharded over {shard} data-parallel ranks (a shard group of \
                 {} GPUs with TP {}) and replicated {replicate} times across them",
                ctx.hsdp_shard_gpus, p.tp
            ));
            (replicate, shard, "default")
        }
        3 => (1, p.dp, "default"),
        // With pipeline stages, torchtitan's FSDP keeps parameters gathered and gradients
        // unsharded until a step's last micro-batch (its pipeline schedules turn resharding and
        // gradient sync off until then): the ZeRO-1 the plan costed.
        1 if p.pp > 1 => {
            notes.push(
                "ZeRO-1 with pipeline stages is torchtitan's FSDP2 as its pipeline schedules run \
                 it: parameters gathered and gradients unsharded until a step's last \
                 micro-batch, reduce-scattered once"
                    .into(),
            );
            (1, p.dp, "default")
        }
        z => {
            notes.push(format!(
                "ZeRO-{z} is written as FSDP2 that keeps parameters gathered after the forward \
                 (fsdp_reshard_after_forward = \"never\"): gradients and optimizer state sharded, \
                 no more memory than ZeRO-{z}"
            ));
            if z == 1 && p.accumulation > 1 {
                // ZeRO-1 reduces a step's gradients once; FSDP2 reduce-scatters them at every
                // backward while gradient sync is on.
                notes.push(format!(
                    "the plan costed ZeRO-1's one gradient reduction a step; FSDP2 \
                     reduce-scatters at every backward, {} times a step here, unless your loop \
                     turns gradient sync off for all but the last micro-batch \
                     (model.set_requires_gradient_sync(False))",
                    p.accumulation
                ));
            }
            (1, p.dp, "never")
        }
    };
    let (mode, option) = match p.recompute.as_str() {
        "none" => ("none", "op"),
        "selective" => {
            notes.push(
                "selective recompute (attention core) is what torchtitan's fused SDPA attention \
                 already does in its backward: activation_checkpoint.mode = \"none\""
                    .into(),
            );
            ("none", "op")
        }
        "op" => ("selective", "op"),
        "full" => ("full", "op"),
        other => return Err(p.inexpressible(TARGET, format!("recompute '{other}'"))),
    };
    let pipelined = p.pp > 1;
    let layers = if pipelined {
        Some(
            stage_split(p.pp, p.vpp, ctx.layers, true)
                .map_err(|why| p.inexpressible(TARGET, why))?,
        )
    } else {
        None
    };
    let settings = &report.stack.settings;
    let fp8 = settings.precision == "fp8";
    let rotate = if p.cp > 1 {
        Some(match settings.cp_comm {
            "ring" => "alltoall",
            "all_gather" => "allgather",
            other => {
                return Err(p.inexpressible(TARGET, format!("context parallelism by '{other}'")));
            }
        })
    } else {
        None
    };
    // torchtitan splits a rank's local batch into pipeline micro-batches itself; without a
    // pipeline it accumulates gradients global / (local · dp) times.
    let local = if pipelined {
        u64::from(p.micro_batch).saturating_mul(p.accumulation)
    } else {
        u64::from(p.micro_batch)
    };
    let job = Job {
        training: Training {
            local_batch_size: local,
            global_batch_size: p.global_batch,
            seq_len: ctx.seq_len,
            steps: p.until_step,
            mixed_precision_param: "bfloat16",
            mixed_precision_reduce: if settings.grad_reduce == "bf16" {
                "bfloat16"
            } else {
                "float32"
            },
        },
        parallelism: Parallelism {
            data_parallel_replicate_degree: replicate,
            data_parallel_shard_degree: shard,
            fsdp_reshard_after_forward: reshard,
            tensor_parallel_degree: p.tp,
            context_parallel_degree: p.cp,
            context_parallel_rotate_method: rotate,
            expert_parallel_degree: p.ep,
            pipeline_parallel_degree: p.pp,
            pipeline_parallel_microbatch_size: pipelined.then_some(p.micro_batch),
            pipeline_parallel_schedule: pipelined.then_some(if p.vpp > 1 {
                "Interleaved1F1B"
            } else {
                "1F1B"
            }),
            pipeline_parallel_layers_per_stage: layers.map(|s| s.per_stage),
            pipeline_parallel_first_stage_less_layers: layers.map(|s| s.first_less),
            pipeline_parallel_last_stage_less_layers: layers.map(|s| s.last_less),
        },
        activation_checkpoint: ActivationCheckpoint {
            mode,
            selective_ac_option: option,
        },
        checkpoint: Checkpoint {
            enable_checkpoint: true,
            last_save_model_only: false,
            exclude_from_loading: if dp_changed {
                vec!["dataloader"]
            } else {
                Vec::new()
            },
        },
        lr_scheduler: LrScheduler {
            decay_ratio: decay_ratio(p, phases),
        },
        model: fp8.then(|| Model {
            converters: vec!["float8"],
        }),
        compile: (settings.elementwise == "fused").then(|| Compile {
            enable: true,
            components: vec!["model", "loss"],
        }),
    };
    Ok((job, notes))
}

/// The torchtitan documents for `phases`.
pub fn write(
    report: &PlanReport,
    ctx: &EmitContext,
    phases: &[EmitPhase],
    end: EmitEnd,
) -> Result<String, EmitError> {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# copus plan '{}': torchtitan job settings for the optimal-joint plan (stack {}).\n\
         # One TOML document per phase, each after a '{PHASE_MARKER}K of N ====' line: merge it into\n\
         # your job file ([model], [optimizer], [job] stay yours). Each phase runs to its\n\
         # training.steps and the next resumes from that checkpoint; the plan ends after {} steps.\n\
         # torchtitan's learning-rate schedule spans training.steps, so the phases join into one\n\
         # warmup-stable-decay schedule: lr_scheduler.decay_ratio 0 (warmup, then a constant rate)\n\
         # before the last phase, the decay over the plan's last {:.0} % of steps (or its whole last\n\
         # phase, if shorter) in the last. A schedule that decays from the start (cosine over the\n\
         # whole run) cannot be split at phases this way.",
        report.session,
        report.stack.label,
        end.step,
        DECAY_SHARE * 100.0
    );
    if let Some(note) = super::stack_note(report.stack.preset, TARGET) {
        let _ = writeln!(out, "# note: {note}");
    }
    if phases.len() > 1 {
        // torchtitan's warmup is min(warmup_steps, training.steps) of each run: a warmup
        // longer than the first phase ends with it, and the next phase warms up again from
        // where its own ramp stands (the rate drops at the switch).
        let _ = writeln!(
            out,
            "# note: keep lr_scheduler.warmup_steps within the first phase ({} steps): torchtitan \
             cuts the warmup to a phase's training.steps, and the next phase would start lower \
             on its own warmup",
            phases[0].until_step
        );
    }
    for note in &ctx.notes {
        let _ = writeln!(out, "# note: {}", super::one_line(note));
    }
    for (i, p) in phases.iter().enumerate() {
        let before = i.checked_sub(1).and_then(|j| phases.get(j));
        let (job, notes) = job(p, before, phases.len(), ctx, report)?;
        let toml = toml::to_string(&job).map_err(|e| p.inexpressible(TARGET, e.to_string()))?;
        let _ = writeln!(
            out,
            "\n{PHASE_MARKER}{} of {} ====\n# steps {}–{}, {}, global batch {} = {} dp × {} micro × {} {}",
            p.phase,
            phases.len(),
            p.from_step,
            p.until_step.saturating_sub(1),
            p.layout(),
            p.global_batch,
            p.dp,
            p.micro_batch,
            p.accumulation,
            // With a pipeline the micro-batches are the schedule's (local_batch_size holds them),
            // without one torchtitan accumulates gradients over them.
            if p.pp > 1 {
                "pipeline micro-batches"
            } else {
                "accumulation"
            }
        );
        for n in notes {
            let _ = writeln!(out, "# {n}");
        }
        out.push_str(&toml);
    }
    Ok(out)
}
