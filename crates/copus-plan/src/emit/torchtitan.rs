//! `--emit torchtitan`: one torchtitan job TOML per phase, each headed by a comment line
//! `# ==== phase K of N ====`; a phase resumes from the previous phase's checkpoint and runs to
//! its `training.steps`.

use super::{EmitContext, EmitEnd, EmitError, EmitPhase, EmitTarget, layers_per_stage};
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
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<Model>,
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
    /// torchtitan's `expert_parallel_degree` (MoE models; 1: none).
    expert_parallel_degree: u32,
    pipeline_parallel_degree: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pipeline_parallel_microbatch_size: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pipeline_parallel_schedule: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pipeline_parallel_layers_per_stage: Option<u32>,
}

#[derive(Serialize)]
struct ActivationCheckpoint {
    mode: &'static str,
    selective_ac_option: &'static str,
}

#[derive(Serialize)]
struct Checkpoint {
    enable_checkpoint: bool,
}

#[derive(Serialize)]
struct Model {
    converters: Vec<&'static str>,
}

/// The job of one phase, with the comment lines that explain its mapping.
fn job(
    p: &EmitPhase,
    ctx: &EmitContext,
    report: &PlanReport,
) -> Result<(Job, Vec<String>), EmitError> {
    let mut notes = Vec::new();
    let (replicate, shard, reshard) = match p.zero {
        0 => (p.dp, 1, "default"),
        3 => (1, p.dp, "default"),
        z => {
            notes.push(format!(
                "ZeRO-{z} is written as FSDP2 that keeps parameters gathered after the forward \
                 (fsdp_reshard_after_forward = \"never\"): gradients and optimizer state sharded, \
                 the same communication volume, no more memory than ZeRO-{z}"
            ));
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
        Some(layers_per_stage(p, ctx.layers).map_err(|why| p.inexpressible(TARGET, why))?)
    } else {
        None
    };
    let settings = &report.stack.settings;
    let fp8 = settings.precision == "fp8";
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
            expert_parallel_degree: p.ep,
            pipeline_parallel_degree: p.pp,
            pipeline_parallel_microbatch_size: pipelined.then_some(p.micro_batch),
            pipeline_parallel_schedule: pipelined.then_some(if p.vpp > 1 {
                "Interleaved1F1B"
            } else {
                "1F1B"
            }),
            pipeline_parallel_layers_per_stage: layers,
        },
        activation_checkpoint: ActivationCheckpoint {
            mode,
            selective_ac_option: option,
        },
        checkpoint: Checkpoint {
            enable_checkpoint: true,
        },
        model: fp8.then(|| Model {
            converters: vec!["float8"],
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
         # training.steps and the next resumes from that checkpoint; the plan ends after {} steps.",
        report.session, report.stack.label, end.step
    );
    for p in phases {
        let (job, notes) = job(p, ctx, report)?;
        let toml = toml::to_string(&job).map_err(|e| p.inexpressible(TARGET, e.to_string()))?;
        let _ = writeln!(
            out,
            "\n{PHASE_MARKER}{} of {} ====\n# steps {}–{}, {}, global batch {} = {} dp × {} micro × {} accumulation",
            p.phase,
            phases.len(),
            p.from_step,
            p.until_step.saturating_sub(1),
            p.layout(),
            p.global_batch,
            p.dp,
            p.micro_batch,
            p.accumulation
        );
        for n in notes {
            let _ = writeln!(out, "# {n}");
        }
        out.push_str(&toml);
    }
    Ok(out)
}
