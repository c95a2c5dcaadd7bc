//! `--emit megatron`: Megatron-LM (Megatron-Core) arguments per phase, as shell variables
//! (`PHASE_1="..."`), or one `--rampup-batch-size` where the whole plan is a ramp Megatron's
//! schedule reproduces.

use super::{
    EmitContext, EmitEnd, EmitError, EmitPhase, EmitTarget, embedding_in_split, stage_split,
};
use crate::report::PlanReport;
use std::fmt::Write as _;

const TARGET: EmitTarget = EmitTarget::Megatron;

/// How far (as a share of one ramp interval) a plan's switch may sit from where Megatron's
/// evenly spaced ramp puts it for the ramp to stand in for the plan.
pub const RAMP_TOLERANCE: f64 = 0.10;

/// A batch ramp Megatron's `--rampup-batch-size START INCREMENT SAMPLES` expresses.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ramp {
    /// First global batch, samples.
    pub start: u64,
    /// Batch added at each increment, samples.
    pub increment: u64,
    /// Samples over which the batch reaches the final one.
    pub samples: u64,
    /// Largest distance of a plan switch from Megatron's, as a share of one interval.
    pub worst_offset: f64,
}

/// The ramp that reproduces `phases`, if one does: one layout and micro-batch throughout,
/// batches growing by a constant increment, switches at evenly spaced sample counts (within
/// [`RAMP_TOLERANCE`] of an interval).
pub fn ramp(phases: &[EmitPhase]) -> Option<Ramp> {
    let (first, rest) = phases.split_first()?;
    if rest.is_empty() {
        return None;
    }
    let same = |p: &EmitPhase| {
        (
            p.dp,
            p.tp,
            p.pp,
            p.cp,
            p.micro_batch,
            p.zero,
            p.vpp,
            p.ep,
            &p.recompute,
        ) == (
            first.dp,
            first.tp,
            first.pp,
            first.cp,
            first.micro_batch,
            first.zero,
            first.vpp,
            first.ep,
            &first.recompute,
        )
    };
    if !rest.iter().all(same) {
        return None;
    }
    let increment = rest[0].global_batch.checked_sub(first.global_batch)?;
    let even = phases
        .windows(2)
        .all(|w| w[1].global_batch.checked_sub(w[0].global_batch) == Some(increment));
    if increment == 0 || !even {
        return None;
    }
    // Megatron switches k at k·Δ samples; fit Δ by least squares on the plan's switches.
    let (num, den) = rest.iter().enumerate().fold((0.0, 0.0), |(n, d), (k, p)| {
        let k = (k + 1) as f64;
        (n + k * p.from_samples as f64, d + k * k)
    });
    let delta = num / den;
    if delta.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) {
        return None;
    }
    let worst_offset = rest
        .iter()
        .enumerate()
        .map(|(k, p)| (p.from_samples as f64 - (k + 1) as f64 * delta).abs() / delta)
        .fold(0.0, f64::max);
    (worst_offset <= RAMP_TOLERANCE).then(|| Ramp {
        start: first.global_batch,
        increment,
        samples: (delta * rest.len() as f64).round() as u64,
        worst_offset,
    })
}

/// What Megatron-LM runs for `--rampup-batch-size START INCREMENT SAMPLES --global-batch-size
/// G --train-samples T`, by its own arithmetic (`update_train_iters` and the ramp's
/// `update_num_microbatches`): the batch grows by INCREMENT every SAMPLES / n consumed
/// samples (n = (G − START) / INCREMENT increments), the ramp's steps are counted one by one
/// while no more than SAMPLES (and T) samples are consumed, then (T − consumed) / G steps at G
/// (a partial last batch dropped).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MegatronRamp {
    /// Steps Megatron runs in all (`train_iters`).
    pub steps: u64,
    /// (global batch, the step it starts at), in order.
    pub starts: Vec<(u64, u64)>,
}

/// Samples between two increments of ramp `r` up to `global_batch` (Megatron's
/// `rampup_samples_per_increment`).
fn per_increment(r: &Ramp, global_batch: u64) -> f64 {
    let increments = global_batch.saturating_sub(r.start) / r.increment.max(1);
    r.samples as f64 / increments.max(1) as f64
}

/// The global batch Megatron's ramp `r` runs after `consumed` samples (its
/// `update_num_microbatches`): the start plus one increment per `per_increment` samples, the
/// final batch once the ramp's samples are consumed.
fn ramp_batch_at(r: &Ramp, global_batch: u64, per_increment: f64, consumed: u64) -> u64 {
    if consumed > r.samples {
        global_batch
    } else {
        let k = (consumed as f64 / per_increment) as u64;
        r.start
            .saturating_add(k.saturating_mul(r.increment))
            .min(global_batch)
    }
}

/// Megatron's run of ramp `r` up to `global_batch` over `train_samples` ([`MegatronRamp`]).
/// The steps at one batch are counted together (the arithmetic of Megatron's step-by-step
/// loop, checked against that loop in the tests), so a ramp over any number of samples costs
/// one pass per batch size, not one per step.
pub fn megatron_ramp(r: &Ramp, global_batch: u64, train_samples: u64) -> MegatronRamp {
    let per_increment = per_increment(r, global_batch);
    let batch_at = |consumed: u64| ramp_batch_at(r, global_batch, per_increment, consumed);
    let limit = r.samples.min(train_samples);
    let (mut steps, mut consumed) = (0u64, 0u64);
    let mut starts: Vec<(u64, u64)> = Vec::new();
    while consumed <= limit {
        let b = batch_at(consumed);
        if starts.last().is_none_or(|&(last, _)| last != b) {
            starts.push((b, steps));
        }
        let b = b.max(1);
        // Steps at `b` while the consumed samples stay within the limit…
        let to_limit = ((limit - consumed) / b).saturating_add(1);
        let after = |j: u64| consumed.saturating_add(j.saturating_mul(b));
        let same = |j: u64| batch_at(after(j)).max(1) == b;
        // …and before the batch grows: estimated from the next increment's threshold, then
        // settled on the exact rule (the batch never shrinks as samples are consumed).
        let mut j = if b >= global_batch {
            to_limit
        } else {
            let k = (consumed as f64 / per_increment) as u64;
            let threshold = k.saturating_add(1) as f64 * per_increment;
            let estimate = ((threshold - consumed as f64) / b as f64).ceil();
            (estimate.max(1.0).min(to_limit as f64) as u64).max(1)
        };
        while j > 1 && !same(j - 1) {
            j -= 1;
        }
        while j < to_limit && same(j) {
            j += 1;
        }
        steps = steps.saturating_add(j);
        if after(j) == consumed || after(j) == u64::MAX {
            // Nothing more can be consumed (the count saturated): stop rather than spin.
            consumed = after(j);
            break;
        }
        consumed = after(j);
    }
    if train_samples > consumed {
        if starts.last().is_none_or(|&(last, _)| last != global_batch) {
            starts.push((global_batch, steps));
        }
        steps = steps.saturating_add((train_samples - consumed) / global_batch.max(1));
    }
    MegatronRamp { steps, starts }
}

/// Megatron's interleaved schedule runs only with the micro-batches per step a multiple of pp.
fn interleave_accumulation(p: &EmitPhase) -> Result<(), EmitError> {
    if p.accumulation.is_multiple_of(u64::from(p.pp)) {
        return Ok(());
    }
    Err(p.inexpressible(
        TARGET,
        format!(
            "the interleaved schedule needs the micro-batches per step ({}) to be a multiple of pp ({})",
            p.accumulation, p.pp
        ),
    ))
}

/// The arguments of one phase's layout and configuration (not its batch or length).
fn layout_args(
    p: &EmitPhase,
    ctx: &EmitContext,
    report: &PlanReport,
) -> Result<Vec<String>, EmitError> {
    let settings = &report.stack.settings;
    p.check_shape(TARGET, ctx, settings)?;
    let mut a = vec![
        format!("--tensor-model-parallel-size {}", p.tp),
        format!("--pipeline-model-parallel-size {}", p.pp),
    ];
    if p.cp > 1 {
        // The exchange the plan costed: Megatron's p2p ring is its default, all-gather and
        // all-to-all (Ulysses) are named.
        let kind = match report.stack.settings.cp_comm {
            "all_gather" => "allgather",
            "all_to_all" => "a2a",
            _ => "p2p",
        };
        a.push(format!(
            "--context-parallel-size {} --cp-comm-type {kind}",
            p.cp
        ));
    }
    if p.ep > 1 {
        a.push(format!("--expert-model-parallel-size {}", p.ep));
    }
    if let Some((per, short)) = embedding_in_split(p.pp, p.vpp, ctx.layers) {
        interleave_accumulation(p)?;
        // The end stages a layer short: the embedding (and the output layer) counted as a
        // layer of the split, so every virtual stage holds `per`.
        a.push("--account-for-embedding-in-pipeline-split".into());
        if short == 2 {
            a.push("--account-for-loss-in-pipeline-split".into());
        }
        a.push(format!("--num-layers-per-virtual-pipeline-stage {per}"));
    } else if p.pp > 1 || p.vpp > 1 {
        let split = stage_split(p.pp, p.vpp, ctx.layers, false)
            .map_err(|why| p.inexpressible(TARGET, why))?;
        let per = split.per_stage;
        // Uneven stages: the ends hold fewer layers; Megatron splits the rest evenly over the
        // stages between (over the other pp − 1 when only the first is given).
        if split.first_less > 0 {
            a.push(format!(
                "--decoder-first-pipeline-num-layers {}",
                per - split.first_less
            ));
        }
        if split.last_less > 0 {
            a.push(format!(
                "--decoder-last-pipeline-num-layers {}",
                per - split.last_less
            ));
        }
        if p.vpp > 1 {
            interleave_accumulation(p)?;
            a.push(format!("--num-layers-per-virtual-pipeline-stage {per}"));
        }
    }
    if p.tp > 1 && settings.sequence_parallel {
        a.push("--sequence-parallel".into());
    }
    a.push(format!("--micro-batch-size {}", p.micro_batch));
    a.push(format!("--seq-length {}", ctx.seq_len));
    match p.zero {
        0 => {}
        1 => a.push("--use-distributed-optimizer".into()),
        z => a.push(format!(
            "--use-megatron-fsdp --data-parallel-sharding-strategy {} --use-distributed-optimizer --no-gradient-accumulation-fusion --ckpt-format fsdp_dtensor",
            if z == 2 { "optim_grads" } else { "optim_grads_params" }
        )),
    }
    match p.recompute.as_str() {
        "none" => {}
        "selective" => a.push("--recompute-granularity selective".into()),
        "full" => a.push(
            "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
                .into(),
        ),
        other => return Err(p.inexpressible(TARGET, format!("recompute '{other}'"))),
    }
    if settings.dp_overlap && p.dp > 1 {
        a.push("--overlap-grad-reduce".into());
        if p.zero >= 1 {
            a.push("--overlap-param-gather".into());
        }
    }
    if settings.tp_overlap && p.tp > 1 && settings.sequence_parallel {
        a.push("--tp-comm-overlap".into());
    }
    // Megatron overlaps the interleaved schedule's transfers by default.
    if !settings.pp_overlap && p.vpp > 1 {
        a.push("--no-overlap-p2p-communication".into());
    }
    a.push(match settings.precision {
        "fp8" => "--bf16 --fp8-format hybrid".into(),
        _ => "--bf16".into(),
    });
    // Under --bf16 Megatron accumulates and reduces gradients in FP32 unless told otherwise;
    // a plan costed with BF16 reduction (NeMo's recipes) counts 2 bytes a gradient, and its
    // layouts may only fit so.
    if settings.grad_reduce == "bf16" {
        a.push("--grad-reduce-in-bf16".into());
    }
    Ok(a)
}

fn header(out: &mut String, report: &PlanReport, ctx: &EmitContext, end: EmitEnd) {
    let _ = writeln!(
        out,
        "# copus plan '{}': Megatron-LM arguments for the optimal-joint plan (stack {})",
        report.session, report.stack.label
    );
    let _ = writeln!(
        out,
        "# {} GPUs: Megatron sets DP = GPUs / (TP·PP·CP). Add your own model, data, optimizer and\n\
         # --save/--load arguments. The plan ends after {} steps, {} samples ({} tokens).",
        ctx.gpus,
        end.step,
        end.samples,
        crate::format::tokens(end.tokens)
    );
    if let Some(note) = super::stack_note(report.stack.preset, super::EmitTarget::Megatron) {
        let _ = writeln!(out, "# note: {note}");
    }
    for note in &ctx.notes {
        let _ = writeln!(out, "# note: {}", super::one_line(note));
    }
}

/// How one phase of a per-phase Megatron schedule stops at its last step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MegatronStop {
    /// `--train-samples`, the same in every phase ([`train_samples`]).
    pub train_samples: u64,
    /// Whether `--exit-interval until_step` is needed: Megatron would run past the phase's
    /// last step.
    pub exit_interval: bool,
}

/// The `--train-samples` of every phase: the plan's samples, or more where a phase needs
/// them to reach its last step. Megatron runs `train_samples / global_batch` steps (rounded
/// down), so a phase whose batch is larger than the plan's average would otherwise stop
/// before its end; and it must be one value for all phases, since a resumed run's scheduler is
/// checked against its checkpoint's and in sample-based training the weight-decay increment
/// spans `--train-samples` ("total number of weight decay iterations do not match").
pub fn train_samples(phases: &[EmitPhase], plan_samples: u64) -> u64 {
    phases
        .iter()
        .map(|p| p.until_step.saturating_mul(p.global_batch))
        .fold(plan_samples, u64::max)
}

/// The `--train-samples` and `--exit-interval` that make Megatron-LM stop phase `p` exactly
/// at its `until_step`, with `train_samples` (from [`train_samples`]) in every phase.
pub fn megatron_stop(p: &EmitPhase, train_samples: u64) -> MegatronStop {
    let steps = train_samples / p.global_batch.max(1);
    MegatronStop {
        train_samples,
        exit_interval: steps != p.until_step,
    }
}

/// Megatron's flag that saves the distributed optimizer's state in a form another TP/PP/EP
/// layout loads (its default, DP-reshardable, loads only into the layout that saved it).
pub const FULLY_RESHARDABLE: &str = "--dist-ckpt-optim-fully-reshardable";

/// Whether two consecutive phases differ in TP, PP, interleave or EP: a checkpoint must then
/// load into another model-parallel layout.
pub fn reshards_model_parallel(phases: &[EmitPhase]) -> bool {
    phases
        .windows(2)
        .any(|w| (w[0].tp, w[0].pp, w[0].vpp, w[0].ep) != (w[1].tp, w[1].pp, w[1].vpp, w[1].ep))
}

/// The Megatron-LM text for `phases`.
pub fn write(
    report: &PlanReport,
    ctx: &EmitContext,
    phases: &[EmitPhase],
    end: EmitEnd,
) -> Result<String, EmitError> {
    let mut out = String::new();
    header(&mut out, report, ctx, end);
    let mut layouts = phases
        .iter()
        .map(|p| layout_args(p, ctx, report))
        .collect::<Result<Vec<_>, _>>()?;
    // Megatron's distributed optimizer saves its state DP-reshardable by default, which loads
    // only into the same TP/PP/EP: a plan that changes them saves the fully reshardable form
    // from its first phase on (Megatron-Core's dist_ckpt_optim_fully_reshardable).
    let reshards = reshards_model_parallel(phases);
    if reshards {
        for (p, layout) in phases.iter().zip(layouts.iter_mut()) {
            if p.zero == 1 {
                layout.push(FULLY_RESHARDABLE.into());
            }
        }
    }
    let total = format!("--train-samples {}", end.samples);
    if let Some(r) = ramp(phases) {
        let last = &phases[phases.len() - 1];
        let _ = writeln!(
            out,
            "# One run: the plan only grows the batch, by {} samples at evenly spaced points, so\n\
             # --rampup-batch-size reproduces it (Megatron switches every {} samples; the plan's\n\
             # switches sit within {:.1} % of an interval of those).",
            r.increment,
            r.samples / (phases.len() as u64 - 1).max(1),
            r.worst_offset * 100.0
        );
        // Megatron's own count of the run: its switches are not the plan's, so neither are
        // its steps.
        let m = megatron_ramp(&r, last.global_batch, end.samples);
        let starts: Vec<String> = m
            .starts
            .iter()
            .zip(phases)
            .skip(1)
            .map(|(&(b, at), p)| format!("batch {b} from step {at} (plan {})", p.from_step))
            .collect();
        let _ = writeln!(
            out,
            "# By Megatron's ramp arithmetic this run takes {} steps (the plan {}): {}.",
            m.steps,
            end.step,
            starts.join(", ")
        );
        let _ = writeln!(
            out,
            "MEGATRON_ARGS=\"{} --rampup-batch-size {} {} {} --global-batch-size {} {total}\"",
            layouts[0].join(" "),
            r.start,
            r.increment,
            r.samples,
            last.global_batch
        );
        return Ok(out);
    }
    let samples = train_samples(phases, end.samples);
    let fsdp = phases.iter().filter(|p| p.zero >= 2).count();
    if fsdp > 0 {
        let _ = writeln!(
            out,
            "# {} of the phases run Megatron-FSDP (ZeRO-{}), which Megatron requires to save\n\
             # --ckpt-format fsdp_dtensor checkpoints, not torch_dist: copus has not checked that\n\
             # Megatron loads one into another TP/PP layout or into a phase without\n\
             # Megatron-FSDP, or a torch_dist checkpoint into a Megatron-FSDP phase; where a\n\
             # phase changes layout or ZeRO stage from or to Megatron-FSDP, convert the\n\
             # checkpoint first (copus prices such a switch as a reshard) or keep the layout.",
            if fsdp == phases.len() {
                "All".to_string()
            } else {
                fsdp.to_string()
            },
            phases
                .iter()
                .filter(|p| p.zero >= 2)
                .map(|p| p.zero.to_string())
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect::<Vec<_>>()
                .join("/")
        );
    }
    let checkpoints = if fsdp == 0 && reshards {
        "a\n# TP/PP change needs a distributed checkpoint (--ckpt-format torch_dist), which loads\n# into another layout, with the optimizer saved fully reshardable\n# (--dist-ckpt-optim-fully-reshardable, in every phase below that uses the distributed\n# optimizer: its default form loads only into the layout that saved it)."
    } else if fsdp == 0 {
        "a\n# TP/PP change needs a distributed checkpoint (--ckpt-format torch_dist), which loads\n# into another layout."
    } else if fsdp == phases.len() {
        "for\n# their checkpoints, see the Megatron-FSDP note above."
    } else {
        "a\n# TP/PP change between phases without Megatron-FSDP needs a distributed checkpoint\n# (--ckpt-format torch_dist); for the others, see the Megatron-FSDP note above."
    };
    if phases.len() == 1 {
        // One run: no resumes, no phase boundary to stop at.
        let _ = writeln!(
            out,
            "# 1 phase, one Megatron run to the plan's end: --train-samples and\n# \
             --lr-decay-samples {} (the plan's samples). Use it as:\n# pretrain_gpt.py \
             $PHASE_1 <your args>",
            end.samples
        );
    } else {
        let _ = writeln!(
            out,
            "# {} phases, one Megatron run each, resumed from the checkpoint of the one before; \
             {checkpoints}\n# Megatron runs --train-samples / --global-batch-size steps: every\n\
             # phase's --train-samples {} (the plan's {} samples, or more where a phase's batch\n\
             # would stop it sooner) lets it reach its last step, and --exit-interval stops it\n\
             # there (saving a checkpoint) when it would run on. The same --train-samples and\n\
             # --lr-decay-samples {} in every phase keep the learning-rate and weight-decay \
             schedule\n# that of the whole plan, as Megatron checks on resuming. Use them as:\n\
             # pretrain_gpt.py $PHASE_1 <your args>",
            phases.len(),
            samples,
            end.samples,
            end.samples
        );
    }
    for (p, layout) in phases.iter().zip(&layouts) {
        let _ = writeln!(
            out,
            "\n# phase {} of {}: steps {}–{} (from {} samples), {}, global batch {} = {} dp × {} micro × {} accumulation",
            p.phase,
            phases.len(),
            p.from_step,
            p.until_step.saturating_sub(1),
            p.from_samples,
            p.layout(),
            p.global_batch,
            p.dp,
            p.micro_batch,
            p.accumulation
        );
        let stop = megatron_stop(p, samples);
        let exit = if stop.exit_interval {
            format!(" --exit-interval {}", p.until_step)
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "PHASE_{}=\"{} --global-batch-size {} --train-samples {} --lr-decay-samples {}{exit}\"",
            p.phase,
            layout.join(" "),
            p.global_batch,
            stop.train_samples,
            end.samples
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Megatron's own loop, one step at a time (what `megatron_ramp` counted before it
    /// counted a batch's steps together), on the same batch rule: the oracle of the counting.
    fn step_by_step(r: &Ramp, global_batch: u64, train_samples: u64) -> MegatronRamp {
        let per_increment = per_increment(r, global_batch);
        let batch_at = |consumed: u64| ramp_batch_at(r, global_batch, per_increment, consumed);
        let (mut steps, mut consumed) = (0u64, 0u64);
        let mut starts: Vec<(u64, u64)> = Vec::new();
        while consumed <= r.samples && consumed <= train_samples {
            let b = batch_at(consumed);
            if starts.last().is_none_or(|&(last, _)| last != b) {
                starts.push((b, steps));
            }
            consumed = consumed.saturating_add(b.max(1));
            steps += 1;
        }
        if train_samples > consumed {
            if starts.last().is_none_or(|&(last, _)| last != global_batch) {
                starts.push((global_batch, steps));
            }
            steps += (train_samples - consumed) / global_batch.max(1);
        }
        MegatronRamp { steps, starts }
    }

    fn ramp(start: u64, increment: u64, samples: u64) -> Ramp {
        Ramp {
            start,
            increment,
            samples,
            worst_offset: 0.0,
        }
    }

    proptest! {
        #[test]
        fn counting_a_batch_at_a_time_is_megatrons_loop(
            // A ramp starts at its first phase's global batch, never 0 (a session's batches are
            // at least 1; Megatron's --rampup-batch-size refuses 0). With start 0 the oracle's
            // `b.max(1)` counts a step Megatron's own loop would not make: CI's random seed
            // found `start 0, increment 1, samples 1` on 2026-12-07.
            start in 1u64..300,
            increment in 0u64..64,
            extra in 0u64..2000,
            samples in 0u64..200_000,
            train in 0u64..400_000,
        ) {
            let r = ramp(start, increment, samples);
            let global = start + extra;
            prop_assert_eq!(megatron_ramp(&r, global, train), step_by_step(&r, global, train));
        }
    }

    #[test]
    fn a_ramp_over_an_astronomical_sample_count_returns_at_once() {
        // A session's token budget of 1.8e19 made the loop run one iteration per step
        // (about 10^13): `plan --emit megatron` never returned.
        let t = std::time::Instant::now();
        let r = ramp(64, 64, u64::MAX / 2);
        let m = megatron_ramp(&r, 4096, u64::MAX);
        assert!(m.steps > 1 << 40, "{m:?}");
        assert_eq!(m.starts.len(), 64, "{:?}", m.starts);
        let r = ramp(1, 1, u64::MAX);
        let m = megatron_ramp(&r, 1 << 20, u64::MAX);
        assert_eq!(m.starts.first(), Some(&(1, 0)));
        assert!(t.elapsed() < std::time::Duration::from_secs(5));
    }
}
