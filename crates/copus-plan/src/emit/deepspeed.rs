//! `--emit deepspeed`: a JSON document with, per phase, the DeepSpeed configuration
//! (`ds_config`, what `deepspeed.initialize(config=...)` takes) and the Megatron-DeepSpeed
//! arguments that set the model-parallel layout, which DeepSpeed's configuration does not hold.

use super::{EmitContext, EmitEnd, EmitError, EmitPhase, EmitTarget};
use crate::report::PlanReport;
use serde::Serialize;

const TARGET: EmitTarget = EmitTarget::Deepspeed;

#[derive(Serialize)]
struct Doc<'a> {
    session: &'a str,
    target: &'static str,
    gpus: u32,
    seq_len: u32,
    end: EmitEnd,
    how: &'static str,
    /// The stack the plan was costed for, in one line (preset and changed settings).
    stack: &'a str,
    /// Where the plan was costed for another framework's stack.
    #[serde(skip_serializing_if = "Option::is_none")]
    note: Option<String>,
    /// What the plan rests on beyond the session (`EmitContext::notes`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    notes: Vec<String>,
    phases: Vec<Phase>,
}

#[derive(Serialize)]
struct Phase {
    phase: usize,
    from_step: u64,
    from_samples: u64,
    until_step: u64,
    dp: u32,
    tp: u32,
    pp: u32,
    // The rest of the layout, as `--emit json`'s phases name it: a launcher reads the
    // phase's degrees here, not out of the arguments.
    cp: u32,
    ep: u32,
    vpp: u32,
    zero: u8,
    recompute: String,
    micro_batch: u32,
    accumulation: u64,
    megatron_deepspeed_args: Vec<String>,
    ds_config: DsConfig,
}

#[derive(Serialize)]
struct DsConfig {
    train_batch_size: u64,
    train_micro_batch_size_per_gpu: u32,
    gradient_accumulation_steps: u64,
    zero_optimization: Zero,
    bf16: Enabled,
    communication_data_type: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    activation_checkpointing: Option<Checkpointing>,
}

#[derive(Serialize)]
struct Zero {
    stage: u8,
}

#[derive(Serialize)]
struct Enabled {
    enabled: bool,
}

#[derive(Serialize)]
struct Checkpointing {
    partition_activations: bool,
    contiguous_memory_optimization: bool,
    cpu_checkpointing: bool,
}

/// Where the phases stop and what keeps their learning-rate schedule one: Megatron-DeepSpeed
/// takes Megatron-LM's arguments (`--train-samples`, `--lr-decay-samples`, `--exit-interval`).
struct Stop {
    /// `--train-samples` of every phase ([`super::megatron::train_samples`]).
    train_samples: u64,
    /// `--lr-decay-samples` of every phase: the plan's samples.
    decay_samples: u64,
}

/// The ds_config file a phase's argv names: `ds_config_phase{N}.json`.
fn ds_config_file(phase: usize) -> String {
    format!("ds_config_phase{phase}.json")
}

fn phase(
    p: &EmitPhase,
    before: Option<&EmitPhase>,
    ctx: &EmitContext,
    report: &PlanReport,
    stop: &Stop,
) -> Result<Phase, EmitError> {
    p.check_shape(TARGET, ctx, &report.stack.settings)?;
    // One argv item per flag and per value, as a launcher passes them; the batch flags must
    // agree with ds_config (Megatron-DeepSpeed checks them against it).
    let mut args: Vec<String> = [
        ("--tensor-model-parallel-size", p.tp.to_string()),
        ("--pipeline-model-parallel-size", p.pp.to_string()),
        ("--micro-batch-size", p.micro_batch.to_string()),
        ("--global-batch-size", p.global_batch.to_string()),
        ("--seq-length", ctx.seq_len.to_string()),
    ]
    .into_iter()
    .flat_map(|(flag, value)| [flag.to_string(), value])
    .collect();
    args.extend([
        "--train-samples".into(),
        stop.train_samples.to_string(),
        "--lr-decay-samples".into(),
        stop.decay_samples.to_string(),
    ]);
    if super::megatron::megatron_stop(p, stop.train_samples).exit_interval {
        args.extend(["--exit-interval".into(), p.until_step.to_string()]);
    }
    if p.pp == 1 {
        args.push("--no-pipeline-parallel".into());
    }
    let settings = &report.stack.settings;
    // The parallelisms beyond TP/PP/DP: DeepSpeed-Ulysses over the context-parallel ranks (the
    // all-to-all the plan costed), Megatron's sequence parallelism with TP where the stack has
    // it (never beside Ulysses: the shape check refuses both), and the experts' degree (the
    // number of experts is the model's, among the user's arguments).
    if p.cp > 1 {
        args.extend(["--ds-sequence-parallel-size".into(), p.cp.to_string()]);
    } else if p.tp > 1 && settings.sequence_parallel {
        args.push("--sequence-parallel".into());
    }
    if p.ep > 1 {
        args.extend(["--moe-expert-parallel-size".into(), p.ep.to_string()]);
    }
    // The model's parameters in BF16, as ds_config's bf16 block trains them.
    args.push("--bf16".into());
    // Megatron-DeepSpeed runs DeepSpeed's engine only with --deepspeed, reading the phase's
    // ds_config from the file named (the "how" says how to write it there).
    args.extend([
        "--deepspeed".into(),
        "--deepspeed_config".into(),
        ds_config_file(p.phase),
    ]);
    // Megatron-DeepSpeed builds the model under zero.Init only when its own --zero-stage says 3
    // (default 1), whatever ds_config says: the stage is given to both.
    args.extend(["--zero-stage".into(), p.zero.to_string()]);
    // A phase after a TP/PP or ZeRO-stage change loads the universal checkpoint
    // ds_to_universal.py made of the one before (a ZeRO checkpoint's optimizer state is
    // partitioned for its stage and data-parallel degree).
    if before.is_some_and(|b| (b.tp, b.pp, b.zero) != (p.tp, p.pp, p.zero)) {
        args.push("--universal-checkpoint".into());
    }
    let checkpointing = match p.recompute.as_str() {
        "none" => None,
        "selective" => {
            args.extend(["--recompute-granularity".into(), "selective".into()]);
            None
        }
        "full" => {
            // The activation_checkpointing block of ds_config is read only with
            // --deepspeed-activation-checkpointing, and Megatron-DeepSpeed then overrides its
            // partition_activations with its own --partition-activations (off unless given):
            // the checkpoints stay whole on every TP rank, as copus sizes them.
            args.push("--checkpoint-activations".into());
            args.push("--deepspeed-activation-checkpointing".into());
            Some(Checkpointing {
                partition_activations: false,
                contiguous_memory_optimization: false,
                cpu_checkpointing: false,
            })
        }
        other => return Err(p.inexpressible(TARGET, format!("recompute '{other}'"))),
    };
    Ok(Phase {
        phase: p.phase,
        from_step: p.from_step,
        from_samples: p.from_samples,
        until_step: p.until_step,
        dp: p.dp,
        tp: p.tp,
        pp: p.pp,
        cp: p.cp,
        ep: p.ep,
        vpp: p.vpp,
        zero: p.zero,
        recompute: p.recompute.clone(),
        micro_batch: p.micro_batch,
        accumulation: p.accumulation,
        megatron_deepspeed_args: args,
        ds_config: DsConfig {
            train_batch_size: p.global_batch,
            train_micro_batch_size_per_gpu: p.micro_batch,
            gradient_accumulation_steps: p.accumulation,
            zero_optimization: Zero { stage: p.zero },
            bf16: Enabled { enabled: true },
            communication_data_type: if report.stack.settings.grad_reduce == "bf16" {
                "bf16"
            } else {
                "fp32"
            },
            activation_checkpointing: checkpointing,
        },
    })
}

/// A note when the plan moves between DeepSpeed's plain engine (PP 1) and its pipeline engine
/// (a `PipelineModule`, checkpointed per layer): copus has not checked that a universal
/// checkpoint carries a run from one to the other.
fn engine_switch_note(phases: &[EmitPhase]) -> Option<String> {
    phases
        .windows(2)
        .any(|w| (w[0].pp > 1) != (w[1].pp > 1))
        .then(|| {
            "the plan moves between DeepSpeed's plain engine (PP 1) and its pipeline engine \
             (PP > 1), which build and checkpoint the model differently: copus has not checked \
             that a universal checkpoint carries a run across; keep PP above 1 or at 1 \
             throughout if it does not"
                .to_string()
        })
}

/// A note for each distinct pipeline of the plan whose stages cannot hold equal layers: how
/// DeepSpeed's pipeline engine splits them (Megatron-DeepSpeed's GPT model partitions its
/// transformer layers balanced, `partition_method='type:transformer'`, the full stages
/// first), the split the plan was costed with (the shape check refuses another).
fn uneven_stages_notes(phases: &[EmitPhase], layers: u32) -> Vec<String> {
    let mut pps: Vec<u32> = phases
        .iter()
        .map(|p| p.pp)
        .filter(|&pp| pp > 1 && !layers.is_multiple_of(pp))
        .collect();
    pps.sort_unstable();
    pps.dedup();
    pps.into_iter()
        .map(|pp| {
            let full = layers % pp;
            format!(
                "{layers} layers on {pp} pipeline stages: DeepSpeed's pipeline engine partitions \
                 them balanced (Megatron-DeepSpeed's partition_method='type:transformer'), {} \
                 layers on the first {full} stages and {} on the other {}, as copus costs them",
                layers.div_ceil(pp),
                layers / pp,
                pp - full
            )
        })
        .collect()
}

/// The DeepSpeed document for `phases`.
pub fn write(
    report: &PlanReport,
    ctx: &EmitContext,
    phases: &[EmitPhase],
    end: EmitEnd,
) -> Result<String, EmitError> {
    let stop = Stop {
        train_samples: super::megatron::train_samples(phases, end.samples),
        decay_samples: end.samples,
    };
    let doc = Doc {
        session: &report.session,
        target: "deepspeed",
        gpus: ctx.gpus,
        seq_len: ctx.seq_len,
        end,
        how: "one DeepSpeed run per phase with ds_config and the Megatron-DeepSpeed arguments \
              (write each phase's ds_config to the file its --deepspeed_config names, e.g. jq \
              '.phases[0].ds_config' plan.json > ds_config_phase1.json), resumed from the checkpoint of the phase before (a TP/PP or ZeRO-stage change needs a \
              universal checkpoint: ds_to_universal.py, then --universal-checkpoint): the same \
              --train-samples and --lr-decay-samples in every phase keep the learning-rate \
              schedule that of the whole plan and let each phase reach until_step, and \
              --exit-interval stops a phase there (saving a checkpoint) where it would run on",
        stack: &report.stack.label,
        note: super::stack_note(report.stack.preset, TARGET),
        notes: ctx
            .notes
            .iter()
            .cloned()
            .chain(engine_switch_note(phases))
            .chain(uneven_stages_notes(phases, ctx.layers))
            .collect(),
        phases: phases
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let before = i.checked_sub(1).and_then(|j| phases.get(j));
                phase(p, before, ctx, report, &stop)
            })
            .collect::<Result<_, _>>()?,
    };
    let mut s = serde_json::to_string_pretty(&doc)
        .map_err(|e| phases[0].inexpressible(TARGET, e.to_string()))?;
    s.push('\n');
    Ok(s)
}
