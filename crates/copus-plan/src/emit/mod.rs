//! Schedules a trainer can run: the optimal-joint plan of a [`PlanReport`] as per-phase
//! settings for Megatron-LM, torchtitan or DeepSpeed, or as plain JSON (`copus plan --emit`).
//!
//! A *phase* here is one run of the plan's schedule ([`super::report::ScheduleRun`]): the
//! steps it holds one (layout, global batch) state for. Every phase is checked before anything
//! is written: the layout uses the cluster's GPUs (dp·tp·pp·cp), the global batch is a whole
//! number of micro-batches on every data-parallel rank (dp·micro_batch·accumulation), and the
//! framework can express the configuration; a phase it cannot express is named in the error.
//! docs/EMIT.md says how each setting is written and why.

mod deepspeed;
mod expressible;
mod megatron;
mod torchtitan;

pub use expressible::{ConfigShape, ModelFacts, shape_problem};
use expressible::{embedding_in_split, stage_split};

use super::report::{PlanReport, ScheduleRun};
use serde::Serialize;

/// What `--emit` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum EmitTarget {
    /// `{"phases":[...]}`: the schedule as plain JSON.
    Json,
    /// Megatron-LM command-line arguments per phase (one ramp where Megatron can express it).
    Megatron,
    /// torchtitan TOML, one document per phase.
    Torchtitan,
    /// DeepSpeed JSON configurations per phase, with the Megatron-DeepSpeed arguments for the
    /// layout.
    Deepspeed,
}

impl EmitTarget {
    /// The framework's name, as errors and comments write it.
    pub fn name(self) -> &'static str {
        match self {
            EmitTarget::Json => "json",
            EmitTarget::Megatron => "Megatron-LM",
            EmitTarget::Torchtitan => "torchtitan",
            EmitTarget::Deepspeed => "DeepSpeed",
        }
    }
}

/// The run's facts a schedule needs beyond the report.
#[derive(Debug, Clone, PartialEq)]
pub struct EmitContext {
    /// GPUs of the cluster (nodes × GPUs per node).
    pub gpus: u32,
    /// Tokens per sample (sequence length).
    pub seq_len: u32,
    /// Transformer layers of the model (for pipeline stages and virtual stages).
    pub layers: u32,
    /// Key/value heads of the model (DeepSpeed-Ulysses splits heads over its ranks).
    pub kv_heads: u32,
    /// Whether the model has mixture-of-experts layers (DeepSpeed runs no ZeRO-3 with them).
    pub moe: bool,
    /// GPUs of one HSDP shard group (the stack's `hsdp_shard_gpus`), read where the plan's
    /// stack shards with HSDP: the shard and replicate degrees a framework is given.
    pub hsdp_shard_gpus: f64,
    /// What the plan rests on beyond the session, one sentence each (a model or cluster
    /// replaced on the command line, a calibration and its caveats): written into the
    /// document (comments, or a `notes` field in JSON).
    pub notes: Vec<String>,
}

/// Why a plan cannot be written for a framework.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EmitError {
    /// The report holds no schedule (no optimal-joint plan).
    #[error("the plan has no schedule to emit")]
    Empty,
    /// A phase breaks a rule every framework shares (GPU count, divisibility).
    #[error("phase {phase} (from step {from_step}, {layout} batch {batch}): {why}")]
    Inconsistent {
        /// Phase number, from 1.
        phase: usize,
        /// Its first optimizer step.
        from_step: u64,
        /// Its layout label.
        layout: String,
        /// Its global batch, samples.
        batch: u64,
        /// What is wrong.
        why: String,
    },
    /// The framework has no setting for a phase's configuration.
    #[error(
        "phase {phase} (from step {from_step}, {layout} batch {batch}): {target} cannot express it: {why}"
    )]
    Inexpressible {
        /// The framework.
        target: &'static str,
        /// Phase number, from 1.
        phase: usize,
        /// Its first optimizer step.
        from_step: u64,
        /// Its layout label.
        layout: String,
        /// Its global batch, samples.
        batch: u64,
        /// What it cannot express.
        why: String,
    },
}

/// One phase of the schedule with every count a trainer needs, checked.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EmitPhase {
    /// Phase number, from 1.
    pub phase: usize,
    /// First optimizer step of the phase (the trainer's step counter; 0 for the first).
    pub from_step: u64,
    /// Samples consumed before the phase.
    pub from_samples: u64,
    /// Tokens consumed before the phase.
    pub from_tokens: f64,
    /// The step the phase ends before (the next phase's `from_step`; the plan's total steps
    /// for the last).
    pub until_step: u64,
    /// Global batch, samples.
    pub global_batch: u64,
    /// Micro-batch per data-parallel rank, samples.
    pub micro_batch: u32,
    /// Micro-batches per rank and step: global_batch / (dp · micro_batch).
    pub accumulation: u64,
    /// Data-parallel degree.
    pub dp: u32,
    /// Tensor-parallel degree.
    pub tp: u32,
    /// Pipeline-parallel degree.
    pub pp: u32,
    /// Context-parallel degree.
    pub cp: u32,
    /// ZeRO stage 0–3.
    pub zero: u8,
    /// Activation recomputation: "none", "selective", "op" or "full".
    pub recompute: String,
    /// Virtual pipeline stages per GPU (1: not interleaved).
    pub vpp: u32,
    /// Expert-parallel degree of a mixture-of-experts model (1: none).
    pub ep: u32,
    /// The trajectory's step where the phase starts (the explorer's timeline position).
    pub trajectory_step: u64,
}

impl EmitPhase {
    /// "DP32·TP2·PP1" (with CP where it is above 1, and " EP8" where experts are split).
    pub fn layout(&self) -> String {
        let label = crate::perf::config::layout_label_cp(self.dp, self.cp, self.tp, self.pp);
        if self.ep > 1 {
            format!("{label} EP{}", self.ep)
        } else {
            label
        }
    }

    /// The parts of the phase's configuration the frameworks' settings are checked on.
    pub fn shape(&self) -> ConfigShape<'_> {
        ConfigShape {
            tp: self.tp,
            pp: self.pp,
            vpp: self.vpp,
            cp: self.cp,
            ep: self.ep,
            zero: self.zero,
            recompute: &self.recompute,
        }
    }

    /// An error where `target` cannot express the phase's shape ([`shape_problem`]).
    fn check_shape(
        &self,
        target: EmitTarget,
        ctx: &EmitContext,
        settings: &crate::perf::stack::StackSettingsJson,
    ) -> Result<(), EmitError> {
        let model = ModelFacts {
            layers: ctx.layers,
            kv_heads: ctx.kv_heads,
            moe: ctx.moe,
        };
        match shape_problem(target, &self.shape(), model, settings) {
            Some(why) => Err(self.inexpressible(target, why)),
            None => Ok(()),
        }
    }

    fn inexpressible(&self, target: EmitTarget, why: impl Into<String>) -> EmitError {
        EmitError::Inexpressible {
            target: target.name(),
            phase: self.phase,
            from_step: self.from_step,
            layout: self.layout(),
            batch: self.global_batch,
            why: why.into(),
        }
    }
}

/// The end of the schedule.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct EmitEnd {
    /// Total optimizer steps.
    pub step: u64,
    /// Total samples.
    pub samples: u64,
    /// Total tokens.
    pub tokens: f64,
}

/// The `--emit json` document.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EmitJson {
    /// Session name.
    pub session: String,
    /// GPUs every phase uses.
    pub gpus: u32,
    /// Tokens per sample.
    pub seq_len: u32,
    /// The training stack the plan was made for (its preset name).
    pub stack: String,
    /// That stack in one line: the preset and every setting changed from it (what the plan
    /// was costed for; `stack` alone drops the changes).
    pub stack_label: String,
    /// Every resolved setting of that stack.
    pub stack_settings: crate::perf::stack::StackSettingsJson,
    /// What the plan rests on beyond the session ([`EmitContext::notes`]); absent when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Where the schedule ends.
    pub end: EmitEnd,
    /// The phases, in order.
    pub phases: Vec<EmitPhase>,
}

/// The report's schedule as checked phases, and where it ends.
pub fn phases(
    report: &PlanReport,
    ctx: &EmitContext,
) -> Result<(Vec<EmitPhase>, EmitEnd), EmitError> {
    let runs = &report.schedule;
    let last = runs.last().ok_or(EmitError::Empty)?;
    let end_step = last.from_step.saturating_add(last.steps);
    let end_samples = last
        .from_samples
        .saturating_add(last.steps.saturating_mul(last.state.batch));
    let out = runs
        .iter()
        .enumerate()
        .map(|(i, run)| {
            let until = runs.get(i + 1).map_or(end_step, |n| n.from_step);
            phase_of(i + 1, run, until, ctx)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let end = EmitEnd {
        step: end_step,
        samples: end_samples,
        tokens: end_samples as f64 * f64::from(ctx.seq_len),
    };
    Ok((out, end))
}

fn phase_of(
    phase: usize,
    run: &ScheduleRun,
    until_step: u64,
    ctx: &EmitContext,
) -> Result<EmitPhase, EmitError> {
    let st = &run.state;
    let bad = |why: String| EmitError::Inconsistent {
        phase,
        from_step: run.from_step,
        layout: crate::perf::config::layout_label_cp(st.dp, st.cp, st.tp, st.pp),
        batch: st.batch,
        why,
    };
    let config = st
        .config
        .as_ref()
        .ok_or_else(|| bad("the plan holds a configuration that cannot run".into()))?;
    let used = [st.dp, st.tp, st.pp, st.cp]
        .iter()
        .try_fold(1u32, |acc, &d| acc.checked_mul(d));
    if used != Some(ctx.gpus) {
        return Err(bad(format!(
            "dp·tp·pp·cp = {} but the cluster has {} GPUs",
            used.map_or("overflow".to_string(), |u| u.to_string()),
            ctx.gpus
        )));
    }
    let per_step = u64::from(st.dp) * u64::from(config.mbs.max(1));
    if config.mbs == 0 || st.batch == 0 || !st.batch.is_multiple_of(per_step) {
        return Err(bad(format!(
            "global batch {} is not a whole number of micro-batches: dp·micro_batch = {per_step}",
            st.batch
        )));
    }
    Ok(EmitPhase {
        phase,
        from_step: run.from_step,
        from_samples: run.from_samples,
        from_tokens: run.from_tokens,
        until_step,
        global_batch: st.batch,
        micro_batch: config.mbs,
        accumulation: st.batch / per_step,
        dp: st.dp,
        tp: st.tp,
        pp: st.pp,
        cp: st.cp,
        zero: config.zero,
        recompute: config.recompute.clone(),
        vpp: config.vpp.max(1),
        ep: config.ep.max(1),
        trajectory_step: run.at_step,
    })
}

/// The stack presets whose framework `target` writes for (none for JSON, which is any
/// launcher's).
fn target_stacks(target: EmitTarget) -> &'static [&'static str] {
    match target {
        EmitTarget::Json => &[],
        EmitTarget::Megatron => &[
            "megatron-core",
            "nemo",
            "megatron-lm-2021",
            "megatron-lm-2021-local",
        ],
        EmitTarget::Torchtitan => &["torchtitan-fsdp2"],
        EmitTarget::Deepspeed => &["deepspeed", "deepspeed-2021"],
    }
}

/// The stack preset a target's framework runs (its first: `megatron-core`, `torchtitan-fsdp2`,
/// `deepspeed`); none for JSON.
pub fn own_stack(target: EmitTarget) -> Option<&'static str> {
    target_stacks(target).first().copied()
}

/// `text` on one line (newlines and carriage returns as spaces): safe in a `#` comment.
pub fn one_line(text: &str) -> String {
    text.replace(['\n', '\r'], " ")
}

/// A note where the plan was costed for another framework's stack than `target` runs: its
/// layouts and times were predicted for that stack, not for this one.
pub fn stack_note(preset: &str, target: EmitTarget) -> Option<String> {
    let stacks = target_stacks(target);
    if stacks.is_empty() || stacks.contains(&preset) {
        return None;
    }
    Some(format!(
        "this plan was costed for the {preset} stack, not for {}: its layouts and times \
         are those {preset} would run; plan again with --stack {} for {}'s own",
        target.name(),
        stacks[0],
        target.name()
    ))
}

/// Write the report's schedule for `target`.
/// What the written schedule leaves to the user, from how the plan was costed: the learning
/// rate the objective assumes (no target sets it per phase), and a plan costed with in-place
/// TP/PP switches that every target writes as checkpoint-and-restart.
pub fn schedule_notes(
    report: &PlanReport,
    phases: &[EmitPhase],
    target: EmitTarget,
) -> Vec<String> {
    let mut notes = Vec::new();
    if phases.len() > 1 {
        // How a resumed run takes a new rate: Megatron-LM restores the checkpoint's scheduler
        // unless told; elsewhere the trainer's own way.
        let how = match target {
            EmitTarget::Megatron => {
                "with --override-opt_param-scheduler, which otherwise restores the checkpoint's"
            }
            _ => {
                "in your trainer: a resumed learning-rate scheduler restores the checkpoint's rate"
            }
        };
        notes.push(match report.objective.as_str() {
            "lr-sqrt" => format!(
                "the plan assumes the learning rate scales with the square root of the batch \
                 (tuned at a reference batch of {}): this schedule does not change it; give each \
                 phase its rate ({how})",
                report
                    .lr_reference_batch
                    .map_or_else(|| "the session's".to_string(), |b| format!("{b:.0}"))
            ),
            _ => format!(
                "the plan assumes the learning rate re-tuned for each batch (the McCandlish \
                 objective): this schedule keeps your rate; retune it per phase ({how})"
            ),
        });
    }
    if report.reshard_mode == "in-place" && megatron::reshards_model_parallel(phases) {
        notes.push(
            "the plan costed its TP/PP switches as in-place resharding; this schedule resumes \
             each from a checkpoint instead (no target here reshards in place): plan with \
             --reshard checkpoint-restart for switch points costed that way"
                .to_string(),
        );
    }
    notes.extend(sharding_note(report, phases, target));
    notes.extend(length_note(report, phases));
    notes
}

/// Where the schedule's token count differs from the trajectory's by more than 0.5 %: how
/// long it trains, and that its length rests on the efficiency model (a trainer that stops at
/// the schedule's count trains less than the measured run did).
fn length_note(report: &PlanReport, phases: &[EmitPhase]) -> Option<String> {
    // The schedule counts from the trajectory's start (its step 0 is there).
    let trajectory = report.trajectory_span_tokens()?;
    // The written schedule's own end (a framework's schedule may differ from the plan's).
    let last = phases.last()?;
    let steps = last.until_step.checked_sub(last.from_step)?;
    let plan = last.from_tokens
        + steps as f64 * last.global_batch as f64 * f64::from(report.seq_len.max(1));
    let change = plan / trajectory - 1.0;
    let ends = match report.trajectory_start_past_zero() {
        Some(start) => format!(
            "covers {} (from {} to {}; this schedule's step 0 is its {} tokens)",
            crate::format::tokens(trajectory),
            crate::format::tokens(start),
            crate::format::tokens(start + trajectory),
            crate::format::tokens(start),
        ),
        None => format!("ends at {}", crate::format::tokens(trajectory)),
    };
    (change.abs() > 0.005).then(|| {
        format!(
            "this schedule ends at {} tokens where the trajectory's axis ({}) {ends}: {:.1} % {} \
             tokens, the efficiency model's count of what its batches need for the same \
             progress; to reach the trajectory's end instead, run the last phase on to {} tokens \
             of this schedule",
            crate::format::tokens(plan),
            report.token_axis.words(report.seq_len),
            100.0 * change.abs(),
            if change < 0.0 { "fewer" } else { "more" },
            crate::format::tokens(trajectory),
        )
    })
}

/// A plan costed with another ZeRO-3 implementation than the target runs (`--sharding
/// deepspeed` written for torchtitan's FSDP2, FSDP written for DeepSpeed): its ZeRO-3 phases'
/// times are that implementation's. Only where a phase runs ZeRO-3 (the only stage the
/// setting changes).
fn sharding_note(report: &PlanReport, phases: &[EmitPhase], target: EmitTarget) -> Option<String> {
    let runs: &[&str] = match target {
        EmitTarget::Torchtitan => &["fsdp2", "hsdp"],
        EmitTarget::Deepspeed => &["deepspeed"],
        EmitTarget::Megatron | EmitTarget::Json => return None,
    };
    let sharding = report.stack.settings.sharding;
    // DeepSpeed's sharding also turns a pipelined ZeRO-2/3 into the ZeRO-1 its engine runs.
    let shaped =
        |p: &EmitPhase| p.zero >= 3 || (sharding == "deepspeed" && p.pp > 1 && p.zero >= 1);
    if runs.contains(&sharding) || !phases.iter().any(shaped) {
        return None;
    }
    Some(format!(
        "the sharded phases were costed with sharding {sharding}, which {} does not run (it runs \
         {}): their stages and times are {sharding}'s; plan with --sharding {} for its own",
        target.name(),
        runs.join(" or "),
        runs[0]
    ))
}

pub fn emit(
    report: &PlanReport,
    ctx: &EmitContext,
    target: EmitTarget,
) -> Result<String, EmitError> {
    let (phases, end) = phases(report, ctx)?;
    let mut with_notes = ctx.clone();
    with_notes
        .notes
        .extend(schedule_notes(report, &phases, target));
    let ctx = &with_notes;
    match target {
        EmitTarget::Json => {
            let doc = EmitJson {
                session: report.session.clone(),
                gpus: ctx.gpus,
                seq_len: ctx.seq_len,
                stack: report.stack.preset.to_string(),
                stack_label: report.stack.label.clone(),
                stack_settings: report.stack.settings.clone(),
                notes: ctx.notes.clone(),
                end,
                phases,
            };
            let mut s =
                serde_json::to_string_pretty(&doc).map_err(|e| EmitError::Inconsistent {
                    phase: 0,
                    from_step: 0,
                    layout: String::new(),
                    batch: 0,
                    why: e.to_string(),
                })?;
            s.push('\n');
            Ok(s)
        }
        EmitTarget::Megatron => megatron::write(report, ctx, &phases, end),
        EmitTarget::Torchtitan => torchtitan::write(report, ctx, &phases, end),
        EmitTarget::Deepspeed => deepspeed::write(report, ctx, &phases, end),
    }
}
