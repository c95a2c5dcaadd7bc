//! `copus predict`: step time, throughput and memory of one parallel configuration.

use super::model_args::ModelArgs;
use crate::perf::memory::peak_memory;
use crate::perf::{
    ConfigCost, Invalid, ParallelConfig, PerfContext, Prediction, Recompute, StackPreset,
    enumerate, predict,
};
use crate::profiles;
use anyhow::Context;
use clap::{Args, ValueEnum};
use serde::Serialize;
use std::path::Path;

/// Recompute policy on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RecomputeArg {
    /// Keep all activations.
    None,
    /// Recompute the attention core.
    Selective,
    /// Recompute every layer.
    Full,
    /// Op-level selective checkpointing (torchtitan `selective op`).
    Op,
    /// The fastest that fits among the policies the stack's framework has (as `grid` and the
    /// explorer choose): none, selective or full for Megatron-Core and NeMo; none, op or full
    /// for torchtitan; none or full for the others.
    Auto,
}

impl RecomputeArg {
    /// The policies this choice allows under `stack`, in search order (`auto`: the stack's
    /// own, [`StackPreset::recompute_policies`]).
    pub fn policies(self, stack: StackPreset) -> Vec<Recompute> {
        match self {
            RecomputeArg::None => vec![Recompute::None],
            RecomputeArg::Selective => vec![Recompute::Selective],
            RecomputeArg::Full => vec![Recompute::Full],
            RecomputeArg::Op => vec![Recompute::Op],
            RecomputeArg::Auto => stack.recompute_policies().to_vec(),
        }
    }
}

impl From<RecomputeArg> for Recompute {
    /// The one policy of a choice (`auto` reads as selective, where one policy is needed).
    fn from(r: RecomputeArg) -> Self {
        match r {
            RecomputeArg::None => Recompute::None,
            RecomputeArg::Selective | RecomputeArg::Auto => Recompute::Selective,
            RecomputeArg::Full => Recompute::Full,
            RecomputeArg::Op => Recompute::Op,
        }
    }
}

/// Arguments of `copus predict`.
#[derive(Debug, Args)]
pub struct PredictArgs {
    /// Hardware profile: a built-in name (a100-80g, h100-sxm, h100-sxm-96g-500w, h100-pcie, h200,
    /// h800, mi210) or a .ron file.
    #[arg(long, default_value = "h100-sxm")]
    pub hardware: String,
    /// The model: a profile or an inline shape.
    #[command(flatten)]
    pub model: ModelArgs,
    /// Calibration file (`copus calibrate --out`) to use instead of the hardware profile's
    /// efficiencies.
    #[arg(long)]
    pub calibration: Option<std::path::PathBuf>,
    /// Total GPUs (dp = gpus / (tp·pp)); at most 1,048,576, as `grid` and `plan` take.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=i64::from(crate::validate::session::MAX_GPUS)))]
    pub gpus: u32,
    /// GPUs per node (at most 1,048,576, as a cluster may have); tensor parallelism beyond
    /// a node, or beyond the hardware's scale-up domain inside one, is named in a caveat.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=i64::from(crate::validate::session::MAX_GPUS)))]
    pub gpus_per_node: u32,
    /// Tensor-parallel degree.
    #[arg(long, default_value_t = 1, value_parser = super::at_least_one_u32)]
    pub tp: u32,
    /// Pipeline-parallel degree.
    #[arg(long, default_value_t = 1, value_parser = super::at_least_one_u32)]
    pub pp: u32,
    /// Context-parallel degree (each sequence split over this many GPUs; dp = gpus /
    /// (cp·tp·pp)).
    #[arg(long, default_value_t = 1, value_parser = super::at_least_one_u32)]
    pub cp: u32,
    /// Virtual pipeline stages per GPU (interleaved 1F1B when > 1), or `auto` (the fastest
    /// that fits, 1 to the layers per stage).
    #[arg(long, default_value = "1", value_parser = auto_or_positive)]
    pub vpp: String,
    /// Expert-parallel degree of a mixture-of-experts model (its experts split over this many
    /// data-parallel ranks, tokens exchanged by all-to-all), or `auto`: the fastest that fits
    /// among the common divisors of the experts and dp·cp, as `grid` chooses. A dense model
    /// has 1.
    #[arg(long, default_value = "auto", value_parser = auto_or_positive)]
    pub ep: String,
    /// Micro-batch size in samples, or `auto` (fastest that fits).
    #[arg(long, default_value = "auto", value_parser = auto_or_positive)]
    pub mbs: String,
    /// Global batch size in samples (sequences).
    #[arg(long, value_parser = super::at_least_one_u64)]
    pub batch: u64,
    /// Activation recomputation; `auto` takes the fastest that fits, as `grid` does.
    #[arg(long, value_enum, default_value = "auto")]
    pub recompute: RecomputeArg,
    /// ZeRO stage (0–3) [default: the stack's: 0 for megatron-lm-2021*, 1 for megatron-core
    /// and nemo, 3 for torchtitan-fsdp2, llm-foundry and the deepspeed presets]
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..=3))]
    pub zero: Option<u8>,
    /// The training stack.
    #[command(flatten)]
    pub stack: super::stack_args::StackArgs,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Indent the --json output (the default on a terminal; compact into a pipe or a
    /// file).
    #[arg(long, requires = "json")]
    pub pretty: bool,
}

/// What `copus predict --json` prints.
#[derive(Debug, Serialize)]
struct Output<'a> {
    model: &'a str,
    /// Tokens per sequence the prediction is for (the model's, or `--seq`).
    seq_len: u32,
    hardware: &'a str,
    stack: crate::perf::stack::StackJson,
    dp: u32,
    cp: u32,
    tp: u32,
    pp: u32,
    vpp: u32,
    /// Expert-parallel degree (1 for a dense model).
    ep: u32,
    mbs: u32,
    /// The micro-batch sizes (samples) `mbs` was chosen among: with `--mbs auto` every
    /// divisor of a replica's batch up to 64 (`grid` searches its session's
    /// `search.micro_batches`, often fewer), else the one given.
    micro_batches_searched: Vec<u32>,
    zero: u8,
    /// The ZeRO stage the configuration is sized and costed at under the stack: ZeRO-3 with
    /// pipeline parallelism under FSDP runs as ZeRO-1 (docs/MODEL.md).
    zero_effective: u8,
    recompute: String,
    /// Transformer layers of each pipeline stage, first to last, as the stack's stage split
    /// places them (`[layers]` without pipeline parallelism).
    stage_layers: Vec<u32>,
    batch: u64,
    #[serde(flatten)]
    prediction: Prediction,
    /// Share (0–1) of the FLOPs `mfu` counts that is the attention core's, counted in full
    /// (Megatron's convention): 80 % of them for Llama 3 8B at 128K tokens.
    attention_flop_share: f64,
    /// MFU over the FLOPs causal kernels execute (the attention's causal half only):
    /// `mfu · (1 − attention_flop_share/2)`; `null` where it does not fit, as `mfu`.
    mfu_causal: f64,
    memory: crate::perf::memory::MemoryBreakdown,
    /// The memory a GPU has, bytes (what `fits` compares with).
    #[serde(serialize_with = "crate::perf::memory::serialize_whole_bytes")]
    memory_capacity_bytes: f64,
    /// Why it does not fit (`None` when it fits).
    reason: Option<String>,
    /// For a configuration that does not fit: the fastest one on the same GPUs that does, as
    /// flags and its prediction (`None` when it fits or nothing fits).
    nearest_change: Option<NearestFit>,
    /// For a configuration that does not fit because of a stack setting given on the command
    /// line that costs memory (`--sharding hsdp`, `--sequence-parallel off`): that one flag
    /// changed so that the layout as given fits (`None` otherwise).
    stack_change: Option<StackFit>,
    /// For a configuration that does not fit when nothing on these GPUs does (no
    /// `nearest_change`): what to change instead (`None` otherwise).
    nothing_fits: Option<&'static str>,
    /// For a configuration that fits: a faster choice among the allowed micro-batches,
    /// recompute policies and interleaves that needs at most 5 % more memory than the GPU has
    /// (`None` when there is none): what a little memory would buy.
    faster_if_it_fit: Option<NearestFit>,
    /// For a configuration that fits: the fastest configuration on the same GPUs at this batch
    /// (another TP/PP/CP split, micro-batch, recompute the stack runs, ZeRO) where it is at
    /// least [`FASTER_LAYOUT_MIN_GAIN`] faster and fits with room for its logits; `None`
    /// otherwise (a what-if on one configuration said nothing of a split 23 % faster).
    faster_layout: Option<NearestFit>,
    /// What the prediction leaves out for this model, one sentence each (empty for most).
    caveats: Vec<String>,
    /// The calibration used instead of the profile's efficiencies (`None`: the profile's).
    calibration: Option<super::calibration_in_force::CalibrationUsed>,
}

/// The throughput figures of a prediction, which mean nothing for a configuration that does
/// not fit: `null` then, as in `grid --json`'s cells that cannot run (the step time, its
/// breakdown and the memory stay: what it would take, and why it does not fit); their values
/// move into `if_it_fit`, as the text prints them marked "(if it fit)" (`null` when it fits).
const IF_IT_FIT: [&str; 6] = [
    "tokens_per_s",
    "tokens_per_s_per_gpu",
    "model_tflops_per_gpu",
    "hardware_tflops_per_gpu",
    "mfu",
    "mfu_causal",
];

/// `out` as the JSON `predict --json` prints.
fn json_of(out: &Output) -> anyhow::Result<serde_json::Value> {
    let mut v = serde_json::to_value(out)?;
    // The text prints it beside the ZeRO stage; the JSON among the caveats.
    if let Some(note) = zero_effective_note(out)
        && let Some(caveats) = v.get_mut("caveats").and_then(|c| c.as_array_mut())
    {
        caveats.insert(0, serde_json::Value::String(note));
    }
    if let Some(o) = v.as_object_mut() {
        let mut if_it_fit = serde_json::Map::new();
        if !out.prediction.fits {
            for key in IF_IT_FIT {
                if let Some(x) = o.get_mut(key) {
                    if_it_fit.insert(key.to_string(), x.take());
                }
            }
        }
        let moved = (!if_it_fit.is_empty()).then_some(serde_json::Value::Object(if_it_fit));
        o.insert("if_it_fit".into(), moved.unwrap_or(serde_json::Value::Null));
    }
    Ok(v)
}

/// Why the ZeRO stage costed is not the one asked for (DeepSpeed's engines, FSDP with
/// pipeline stages), if it is not: a line of the text and a caveat of the JSON.
fn zero_effective_note(o: &Output) -> Option<String> {
    if o.zero_effective == o.zero {
        return None;
    }
    Some(if o.stack.settings.sharding == "deepspeed" && o.pp > 1 {
        format!(
            "DeepSpeed's pipeline engine runs ZeRO stage 0 or 1 only and refuses ZeRO-{} with \
             pipeline stages: sized and costed as the ZeRO-{} it runs",
            o.zero, o.zero_effective
        )
    } else if o.stack.settings.sharding == "deepspeed" {
        format!(
            "DeepSpeed's engine runs no ZeRO-3 with mixture-of-experts layers, \"MoE not \
             supported with Stage 3\": sized and costed as the ZeRO-{} it runs",
            o.zero_effective
        )
    } else {
        format!(
            "FSDP's ZeRO-{} with pipeline stages keeps parameters gathered and gradients \
             unsharded until the last micro-batch and reduce-scatters them once, as PyTorch's \
             pipeline schedules run it: sized and costed as ZeRO-{}",
            o.zero, o.zero_effective
        )
    })
}

/// The nearest configuration that runs, as `predict` reports it.
#[derive(Debug, Serialize)]
struct NearestFit {
    /// The flags that select it.
    flags: String,
    /// Its configuration.
    config: crate::perf::config::ConfigJson,
    /// Its predicted tokens per second.
    tokens_per_s: f64,
    /// Its peak memory per GPU, bytes.
    #[serde(serialize_with = "crate::perf::memory::serialize_whole_bytes")]
    memory_per_gpu_bytes: f64,
}

/// One stack flag changed so that a layout that did not fit does.
#[derive(Debug, Serialize)]
struct StackFit {
    /// The flag, as the command line takes it.
    flags: &'static str,
    /// Its predicted tokens per second.
    tokens_per_s: f64,
    /// Its peak memory per GPU, bytes.
    #[serde(serialize_with = "crate::perf::memory::serialize_whole_bytes")]
    memory_per_gpu_bytes: f64,
}

/// A stack setting given on the command line that costs memory, changed to the one that saves
/// it, where the layout `cfg` then fits at `batch`: hybrid sharding (states replicated across
/// nodes) to full FSDP2 sharding, sequence parallelism off to on. `in_force` is the stack the
/// flags made, applied to `base`.
fn stack_change_that_fits(
    ctx: &PerfContext,
    (base, in_force): (&crate::perf::EfficiencyParams, Option<&crate::perf::Stack>),
    given: &super::stack_args::StackArgs,
    cfg: &ParallelConfig,
    batch: u64,
) -> Option<StackFit> {
    use super::stack_args::{OnOff, ShardingArg};
    let in_force = in_force?;
    let changes = [
        (
            given.sharding == Some(ShardingArg::Hsdp) && cfg.zero == 3,
            "--sharding fsdp2",
            crate::perf::Stack {
                sharding: Some(crate::perf::efficiency::Sharding::Fsdp2),
                ..crate::perf::Stack::default()
            },
        ),
        (
            given.sequence_parallel == Some(OnOff::Off) && cfg.tp > 1,
            "--sequence-parallel on",
            crate::perf::Stack {
                sequence_parallel: Some(true),
                ..crate::perf::Stack::default()
            },
        ),
    ];
    changes
        .into_iter()
        .filter(|(applies, _, _)| *applies)
        .find_map(|(_, flags, change)| {
            let eff = in_force.overlaid(&change).apply(base);
            let p = predict(&PerfContext { eff: &eff, ..*ctx }, cfg, batch).ok()?;
            p.fits.then_some(StackFit {
                flags,
                tokens_per_s: p.tokens_per_s,
                memory_per_gpu_bytes: p.memory_per_gpu_bytes,
            })
        })
}

/// Run `copus predict`.
pub fn run(a: &PredictArgs) -> anyhow::Result<()> {
    let hw = super::flag_profile(
        "--hardware",
        profiles::hardware(&a.hardware, Path::new(".")),
    )?;
    let model = a.model.profile()?;
    let stack_flags = a.stack.stack();
    // The calibration file, read once: its parameters, and what it was fitted on.
    let calibration_file = match &a.calibration {
        Some(path) => Some((path, super::model_args::load_calibration(path)?)),
        None => None,
    };
    let base = match &calibration_file {
        Some((path, c)) => super::model_args::calibrated(&hw, path, c),
        None => hw.efficiency.clone(),
    };
    // A flag changes that setting of the stack the calibration (or the hardware file) was
    // written for; `--stack` replaces it.
    let hint = calibration_file
        .as_ref()
        .and_then(|(_, c)| c.stack.as_deref())
        .and_then(super::model_args::preset_of_label);
    let in_force = super::model_args::stack_over(&base, hint, stack_flags.as_ref());
    let eff = super::model_args::with_stack(&hw, base.clone(), in_force.as_ref())?;
    let stack = crate::perf::Stack::describing(&eff, in_force.as_ref().map(|s| s.base()).or(hint));
    let stack_base = stack.base();
    let ctx = PerfContext {
        hw: &hw,
        model: &model,
        eff: &eff,
        gpus_per_node: a.gpus_per_node.max(1),
    };
    // A value out of range names the flag and file it came from, as `grid` and `plan` do.
    crate::validate::profile::model(&model, "model").map_err(|e| match &a.model.name {
        Some(name) => anyhow::anyhow!("--model {name}: {e}"),
        None => e.into(),
    })?;
    crate::validate::profile::hardware(&hw, "hardware")
        .map_err(|e| anyhow::anyhow!("--hardware {}: {e}", a.hardware))?;
    // The layout flags as given; --ep only for a mixture-of-experts model.
    let ep = if model.moe.is_some() {
        format!(" --ep {}", a.ep)
    } else {
        String::new()
    };
    // --mbs where one was given (its value is part of what cannot be formed).
    let mbs = if a.mbs == "auto" {
        String::new()
    } else {
        format!(" --mbs {}", a.mbs)
    };
    let flags = format!(
        "--gpus {} --tp {} --pp {} --vpp {} --cp {}{ep} --batch {}{mbs}",
        a.gpus, a.tp, a.pp, a.vpp, a.cp, a.batch
    );
    let Some(used) = a.tp.checked_mul(a.pp).and_then(|x| x.checked_mul(a.cp)) else {
        super::flag_bail!(
            "invalid configuration ({flags}): cp·tp·pp overflows; it must divide --gpus"
        );
    };
    if !a.gpus.is_multiple_of(used) {
        super::flag_bail!(
            "invalid configuration ({flags}): cp·tp·pp = {used} does not divide {} GPUs into whole data-parallel replicas",
            a.gpus
        );
    }
    let mut cfg = ParallelConfig {
        dp: a.gpus / used,
        tp: a.tp,
        pp: a.pp,
        mbs: 1,
        zero: a.zero.unwrap_or_else(|| stack_base.default_zero()),
        recompute: a.recompute.into(),
        vpp: 1,
        cp: a.cp,
        ep: 1,
    };
    let policies = a.recompute.policies(stack_base);
    let fixed_vpp = auto_or_count(&a.vpp, "--vpp")?;
    let interleave: Vec<u32> = match fixed_vpp {
        Some(v) => vec![v],
        None => crate::perf::validate::interleave_candidates(&model, cfg.pp),
    };
    cfg.vpp = interleave[0];
    let expert_parallel: Vec<u32> = match auto_or_count(&a.ep, "--ep")? {
        Some(ep) => vec![ep],
        None => crate::perf::validate::expert_candidates(&model, cfg.grad_ranks()),
    };
    cfg.ep = expert_parallel[0];
    // A configuration the flags ask for that cannot be formed is an error of the flags (exit
    // 2, docs/RELIABILITY.md); one that forms but does not fit is a result (`fits: false`).
    let invalid = |e: Invalid| {
        anyhow::Error::from(super::FlagValueError(format!(
            "invalid configuration ({flags}): {e}"
        )))
    };
    crate::perf::validate::structure(&model, &cfg).map_err(invalid)?;
    let dp = u64::from(cfg.dp);
    if !a.batch.is_multiple_of(dp) {
        // The nearest multiples: below always exists; above may not fit in 64 bits.
        let below = a.batch / dp * dp;
        let nearest = match a.batch.div_ceil(dp).checked_mul(dp) {
            Some(above) if below > 0 => format!("the nearest: {below} or {above}"),
            Some(above) => format!("the nearest: {above}"),
            None => format!("the nearest: {below}"),
        };
        super::flag_bail!(
            "invalid configuration ({flags}): --batch {} does not split over the {dp} \
             data-parallel replicas ({} GPUs / (cp·tp·pp = {used})): each replica takes whole \
             sequences, so the batch must be a multiple of {dp} ({nearest}), or more \
             --tp/--pp/--cp leave fewer replicas",
            a.batch,
            a.gpus,
        );
    }
    let fixed_mbs = auto_or_count(&a.mbs, "--mbs")?;
    // The fastest allowed recompute policy (and micro-batch, unless fixed) that fits, as
    // `grid` chooses.
    let mut costs = Vec::new();
    let found = match fixed_mbs {
        Some(mbs) => {
            cfg.mbs = mbs;
            // Every allowed (recompute, interleave) pair that can run; the first reason when
            // none can.
            let mut first_err = None;
            for &recompute in &policies {
                for &vpp in &interleave {
                    for &ep in &expert_parallel {
                        let c = ParallelConfig {
                            recompute,
                            vpp,
                            ep,
                            ..cfg
                        };
                        match ConfigCost::new(&ctx, &c) {
                            Ok(c) => costs.push(c),
                            Err(e) => {
                                first_err.get_or_insert(e);
                            }
                        }
                    }
                }
            }
            match (costs.is_empty(), first_err) {
                (true, Some(e)) => return Err(invalid(e)),
                _ => enumerate::fastest(&ctx, &costs, a.batch),
            }
        }
        None => {
            costs = enumerate::auto_choices(
                &ctx,
                &cfg,
                a.batch,
                &policies,
                (&interleave, &expert_parallel),
            )
            .map_err(invalid)?;
            enumerate::fastest(&ctx, &costs, a.batch)
        }
    };
    let p = match found {
        Ok((c, p)) => {
            cfg = c;
            p
        }
        // Nothing fits: show the choice (micro-batch, recompute, interleave, EP) that misses
        // the memory by the least, the one `grid` names for a cell that cannot run, and what
        // would fit instead. (The last policy at the first choices showed a MoE layout at EP 1
        // and 875 GB where grid's cell read EP 8 and 165 GB.)
        Err(Invalid::OutOfMemory { .. }) => {
            let least = costs
                .iter()
                .filter_map(|c| c.at(&ctx, a.batch).ok().map(|p| (c.cfg, p)))
                .min_by(|(_, p), (_, q)| {
                    p.memory_per_gpu_bytes
                        .total_cmp(&q.memory_per_gpu_bytes)
                        .then(p.step_time_s.total_cmp(&q.step_time_s))
                });
            match least {
                Some((c, p)) => {
                    cfg = c;
                    p
                }
                None => {
                    cfg.recompute = *policies.last().unwrap_or(&Recompute::Full);
                    predict(&ctx, &cfg, a.batch).map_err(invalid)?
                }
            }
        }
        Err(e) => return Err(invalid(e)),
    };
    // Only what the stack's framework runs as stated (DeepSpeed's Ulysses and pipeline limits:
    // it proposed CP 32 with a caveat that DeepSpeed cannot run it).
    // Nor pipeline stages on a stack without them (llm-foundry was proposed `--pp 32`).
    let runs = |c: &ParallelConfig| {
        deepspeed_emit_caveat(&stack, &eff, &model, c).is_none()
            && (c.pp <= 1 || stack.base().has_pipeline_parallel())
    };
    // A configuration proposed fits with room for its largest tensor first (one that fits with
    // the logits against almost nothing left is cautioned when predicted: it proposed such a
    // change), and with more than the share of the GPU below which memory is called tight
    // (it proposed 84.1 of 85.5 GB, which `predict` then called tight); the tight one only
    // where nothing roomier fits.
    let roomy = |c: &ParallelConfig| {
        let micro_batches = a.batch / (u64::from(c.dp) * u64::from(c.mbs)).max(1);
        let room = crate::perf::memory::logits_room(
            &model,
            c,
            (micro_batches, hw.reserved_bytes),
            &eff,
            hw.hbm_bytes,
        );
        let need = peak_memory(&model, c, micro_batches, hw.reserved_bytes, &eff).total();
        runs(c) && !room.risk && need <= hw.hbm_bytes * (1.0 - TIGHT_MEMORY_SHARE)
    };
    let as_fit = |(c, q): (ParallelConfig, Prediction)| NearestFit {
        flags: fit_flags(&c, &cfg),
        config: (&c).into(),
        tokens_per_s: q.tokens_per_s,
        memory_per_gpu_bytes: q.memory_per_gpu_bytes,
    };
    let search = (stack_base, &policies[..]);
    let (faster_if_it_fit, faster_layout) = if p.fits {
        (
            enumerate::faster_near_miss(&ctx, &costs, a.batch, p.step_time_s).map(as_fit),
            what_fits(&ctx, a.gpus, a.batch, &cfg, search, &roomy, Purpose::Faster)
                .filter(|(_, q)| q.tokens_per_s >= p.tokens_per_s * (1.0 + FASTER_LAYOUT_MIN_GAIN))
                .map(as_fit),
        )
    } else {
        (None, None)
    };
    let mb = a.batch / (cfg.dp as u64 * cfg.mbs as u64);
    let memory = peak_memory(&model, &cfg, mb, hw.reserved_bytes, &eff);
    let (reason, nearest_change) = if p.fits {
        (None, None)
    } else {
        let oom = Invalid::OutOfMemory {
            need_gb: p.memory_per_gpu_bytes / 1e9,
            have_gb: hw.hbm_bytes / 1e9,
        };
        let nearest = what_fits(&ctx, a.gpus, a.batch, &cfg, search, &roomy, Purpose::Fits)
            .or_else(|| what_fits(&ctx, a.gpus, a.batch, &cfg, search, &runs, Purpose::Fits))
            .map(as_fit);
        (Some(oom.to_string()), nearest)
    };
    let stack_change = if p.fits {
        None
    } else {
        stack_change_that_fits(&ctx, (&base, in_force.as_ref()), &a.stack, &cfg, a.batch)
    };
    let (calibration, calibration_caveats) = match calibration_file {
        Some((path, c)) => {
            let (used, caveats) = super::calibration_in_force::calibration_used(
                path,
                &c,
                &super::calibration_in_force::UsedFor {
                    recompute: Some(&cfg.recompute.to_string()),
                    model: &model.name,
                    stack: &stack,
                    hardware: &hw.name,
                },
            );
            (Some(used), caveats)
        }
        None => (None, Vec::new()),
    };
    let nothing_fits = (!p.fits && nearest_change.is_none()).then_some(NOTHING_FITS);
    let attention_flop_share = crate::perf::attention_flop_share(&model);
    let mut out = Output {
        model: &model.name,
        seq_len: model.seq_len,
        hardware: &hw.name,
        stack: stack.to_json(),
        dp: cfg.dp,
        cp: cfg.cp,
        tp: cfg.tp,
        pp: cfg.pp,
        vpp: cfg.vpp,
        ep: cfg.ep,
        mbs: cfg.mbs,
        micro_batches_searched: match fixed_mbs {
            Some(m) => vec![m],
            None => enumerate::auto_micro_batches(a.batch, cfg.dp),
        },
        zero: cfg.zero,
        zero_effective: crate::perf::memory::effective_zero(&eff, &model, &cfg),
        recompute: cfg.recompute.to_string(),
        stage_layers: crate::perf::memory::stage_layer_counts(&model, cfg.pp, eff.stage_split),
        batch: a.batch,
        attention_flop_share,
        mfu_causal: p.mfu * (1.0 - attention_flop_share / 2.0),
        prediction: p,
        memory,
        memory_capacity_bytes: hw.hbm_bytes,
        reason,
        nearest_change,
        stack_change,
        nothing_fits,
        faster_if_it_fit,
        faster_layout,
        caveats: layout_caveats(
            &model,
            &cfg,
            &a.stack,
            &stack.settings(),
            (stack_base, stack.settings().stage_split),
        )
        .into_iter()
        .chain(setting_caveats(
            stack_base,
            &eff,
            &cfg,
            &p,
            (a.gpus, a.gpus_per_node),
            a.stack.attention.is_some(),
            &hw,
        ))
        .chain(tp_domain_caveat(
            cfg.tp,
            a.gpus_per_node,
            (hw.fast_domain(a.gpus_per_node), &hw.name),
        ))
        .chain(fragmentation_caveat(
            (&model, &cfg, &eff),
            &p,
            mb,
            (hw.hbm_bytes, hw.reserved_bytes),
        ))
        .chain(host_bound_caveat(&eff, &p, &model, &cfg, mb))
        .chain(deepspeed_emit_caveat(&stack, &eff, &model, &cfg))
        .chain(calibration_caveats)
        .collect(),
        calibration,
    };
    // The fragmentation note says the little room left with the reason: the tight-memory note
    // beside it said the same twice.
    if out.caveats.iter().any(|c| c.starts_with("fits with ")) {
        out.caveats.retain(|c| !c.starts_with("memory is tight"));
    }
    // A configuration that does not fit is a result (`fits: false`, the reason and the
    // nearest change that runs), exit status 0; errors are for inputs that cannot be costed.
    if a.json {
        super::write_json(&json_of(&out)?)?;
    } else {
        print_text(&out);
    }
    Ok(())
}

/// The command line's check of a count flag that may be `auto` (a usage error, exit 2, as
/// for the other flags): the value as given.
fn auto_or_positive(value: &str) -> Result<String, String> {
    if value == "auto" || value.parse::<u32>().is_ok_and(|m| m > 0) {
        Ok(value.to_string())
    } else {
        Err(format!(
            "must be a positive whole number or 'auto', got '{value}'"
        ))
    }
}

/// A count flag that may be `auto`: `None` for auto, else the positive whole number.
fn auto_or_count(value: &str, flag: &str) -> anyhow::Result<Option<u32>> {
    if value == "auto" {
        return Ok(None);
    }
    value
        .parse::<u32>()
        .ok()
        .filter(|m| *m > 0)
        .map(Some)
        .with_context(|| format!("{flag} must be a positive whole number or 'auto', got '{value}'"))
}

/// The `predict` flags that select `c`.
/// The flags that turn `asked` into `c`: each degree the default would not give, and each one
/// the command set (`--cp 2` asked and CP 1 found is written `--cp 1`, or the `--cp 2` left on
/// the command line would still apply).
fn fit_flags(c: &ParallelConfig, asked: &ParallelConfig) -> String {
    let mut f = format!(
        "--tp {} --pp {} --mbs {} --zero {} --recompute {}",
        c.tp, c.pp, c.mbs, c.zero, c.recompute
    );
    for (flag, found, given) in [
        ("cp", c.cp, asked.cp),
        ("vpp", c.vpp, asked.vpp),
        ("ep", c.ep, asked.ep),
    ] {
        if found > 1 || given > 1 {
            f.push_str(&format!(" --{flag} {found}"));
        }
    }
    f
}

/// Largest context-parallel degree "fits instead" tries beside the one asked for (Llama 3's
/// 128K-token stage ran CP 16).
pub const MAX_SEARCHED_CP: u32 = 32;

/// What [`what_fits`] looks for, and so how far it strays from the configuration asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// A configuration that fits where the one asked for does not: the ZeRO stage and
    /// recompute policies asked for first, any the stack runs only where none fits so; no
    /// interleave (`nearest_change`).
    Fits,
    /// The fastest configuration of the same GPUs and batch (`faster_layout`): every ZeRO
    /// stage, the recompute policies allowed (the stack's when none of them is its), and
    /// every interleave the layout takes, whatever was asked (the search once stayed at the
    /// ZeRO stage asked for unless `--recompute` named a policy the stack lacks, and never
    /// tried interleaving: Llama 3 405B at vpp 1 read 21 % MFU without a word of vpp 8).
    Faster,
}

/// The fastest configuration of `gpus` GPUs that fits at `batch`: first with `base`'s ZeRO
/// stage and the recompute policies the command allowed that the stack has (`allowed`: every
/// policy of the stack under `--recompute auto`, the one given otherwise) on every (tp, pp) layout within a
/// node and every context-parallel degree the sequence allows (`base`'s, and 2 to
/// [`MAX_SEARCHED_CP`] in powers of two where the stack's framework has CP: at 128K tokens CP
/// is what lets a layout fit), then
/// with any ZeRO stage and any recompute policy `stack` has; only configurations `runs`
/// accepts (what the stack's framework runs as stated); for [`Purpose::Faster`] every ZeRO
/// stage and interleave at once. `None` when nothing fits.
pub fn what_fits(
    ctx: &PerfContext,
    gpus: u32,
    batch: u64,
    base: &ParallelConfig,
    (stack, allowed): (StackPreset, &[Recompute]),
    runs: &dyn Fn(&ParallelConfig) -> bool,
    purpose: Purpose,
) -> Option<(ParallelConfig, Prediction)> {
    let all = stack.recompute_policies();
    // Only policies the stack's framework has: a what-if policy (`--recompute op` on
    // Megatron-Core) was proposed back as flags to run.
    let allowed: Vec<Recompute> = allowed
        .iter()
        .copied()
        .filter(|p| all.contains(p))
        .collect();
    let allowed_or_all: &[Recompute] = if allowed.is_empty() { all } else { &allowed };
    const EVERY_ZERO: [u8; 4] = [0, 1, 2, 3];
    let tries: Vec<(&[u8], &[Recompute])> = match purpose {
        Purpose::Fits => vec![
            (std::slice::from_ref(&base.zero), &allowed),
            (&EVERY_ZERO, all),
        ],
        Purpose::Faster => vec![(&EVERY_ZERO, allowed_or_all)],
    };
    let mut cps = vec![base.cp.max(1)];
    if stack.has_context_parallel() {
        cps.extend(
            (1..)
                .map(|k| 1u32 << k)
                .take_while(|&cp| cp <= MAX_SEARCHED_CP)
                .filter(|&cp| cp != base.cp && gpus.is_multiple_of(cp)),
        );
    }
    let asked_cp = base.cp.max(1);
    for (zeros, recomputes) in tries {
        // The fastest with the CP asked for, and the fastest with any.
        let mut best: Option<(ParallelConfig, Prediction)> = None;
        let mut best_asked: Option<(ParallelConfig, Prediction)> = None;
        let layouts = cps.iter().flat_map(|&cp| {
            enumerate::factorisations(gpus / cp)
                .into_iter()
                .map(move |(dp, tp, pp)| (dp, tp, pp, cp))
        });
        for (dp, tp, pp, cp) in layouts {
            if tp > ctx.gpus_per_node
                || enumerate::layout_problem(
                    ctx,
                    crate::perf::config::Layout { dp, tp, pp, cp },
                    false,
                )
                .is_some()
            {
                continue;
            }
            for &zero in zeros {
                let cfg = ParallelConfig {
                    dp,
                    tp,
                    pp,
                    mbs: 1,
                    zero,
                    recompute: base.recompute,
                    vpp: 1,
                    cp,
                    ep: 1,
                };
                let eps = crate::perf::validate::expert_candidates(ctx.model, dp * cp);
                let vpps = match purpose {
                    Purpose::Fits => vec![1],
                    Purpose::Faster => crate::perf::validate::interleave_candidates(ctx.model, pp),
                };
                // The fastest choice of the layout that runs (a micro-batch, a recompute, an
                // interleave), not the layout's fastest only when that one runs.
                let Ok(costs) =
                    enumerate::auto_choices(ctx, &cfg, batch, recomputes, (&vpps, &eps))
                else {
                    continue;
                };
                let running = costs.iter().filter(|cost| runs(&cost.cfg));
                let Ok((c, p)) = enumerate::fastest(ctx, running, batch) else {
                    continue;
                };
                let faster = |held: &Option<(ParallelConfig, Prediction)>| {
                    held.as_ref()
                        .is_none_or(|(_, b)| p.step_time_s < b.step_time_s)
                };
                if cp == asked_cp && faster(&best_asked) {
                    best_asked = Some((c, p));
                }
                if faster(&best) {
                    best = Some((c, p));
                }
            }
        }
        // Another CP only where it is clearly faster: the change nearest to what was asked.
        match (best_asked, best) {
            (Some(asked), Some(any))
                if any.1.step_time_s * (1.0 + OTHER_CP_MIN_GAIN) >= asked.1.step_time_s =>
            {
                return Some(asked);
            }
            (_, Some(any)) => return Some(any),
            _ => {}
        }
    }
    None
}

/// How much more throughput the fastest configuration on the same GPUs must have for
/// `predict` to name it beside one that fits (`faster_layout`).
const FASTER_LAYOUT_MIN_GAIN: f64 = 0.05;

/// How much faster (a share of the step time) a configuration with another context-parallel
/// degree must be for "fits instead" to propose it over one with the degree asked for.
const OTHER_CP_MIN_GAIN: f64 = 0.05;

/// Share of the counted FLOPs above which the attention's is said beside the MFU, with the MFU
/// of what causal kernels execute (a fifth: Llama 3 8B from about 24K tokens).
const ATTENTION_SHARE_SAID: f64 = 0.2;

fn print_text(o: &Output) {
    let p = &o.prediction;
    let b = &p.breakdown;
    println!(
        "{} on {}: {} (global batch {} sequences of {} tokens)",
        o.model,
        o.hardware,
        crate::perf::config::layout_label_cp(o.dp, o.cp, o.tp, o.pp),
        o.batch,
        o.seq_len
    );
    println!("  stack            {}", o.stack.label);
    if let Some(c) = &o.calibration {
        let line = super::calibration_in_force::text_line(c);
        // Wrapped as the other notes are (one line of 230 characters).
        let text = line.strip_prefix("calibration: ").unwrap_or(&line);
        print!(
            "{}",
            super::escape_controls(&crate::format::wrap_labelled("  calibration      ", text))
        );
    }
    let ep = if o.ep > 1 {
        format!("  EP {}", o.ep)
    } else {
        String::new()
    };
    // The stage set (by --zero or the stack's default) and, where the stack runs another
    // (explained below), that one: "ZeRO-3 (runs as ZeRO-1 here)".
    let zero = if o.zero_effective == o.zero {
        format!("ZeRO-{}", o.zero)
    } else {
        format!("ZeRO-{} (runs as ZeRO-{} here)", o.zero, o.zero_effective)
    };
    let searched = if o.micro_batches_searched.len() > 1 {
        let list: Vec<String> = o
            .micro_batches_searched
            .iter()
            .map(u32::to_string)
            .collect();
        if o.prediction.fits {
            format!(" (the fastest that fits of {})", list.join(", "))
        } else {
            // Nothing searched fits: the smallest micro-batch is shown (see `run`).
            format!(" (none of {} fits: the smallest shown)", list.join(", "))
        }
    } else {
        String::new()
    };
    // On one line where it fits the terminal, else wrapped (as every line here).
    print!(
        "{}",
        crate::format::line_labelled(
            "  ",
            &format!(
                "micro-batch {}{searched}  {zero}  recompute {}  vpp {}{ep}",
                o.mbs, o.recompute, o.vpp
            )
        )
    );
    if let Some(note) = zero_effective_note(o) {
        print!(
            "{}",
            crate::format::wrap_labelled("  ", &format!("({note})"))
        );
    }
    // A configuration that does not fit: what it would run at (`null` in --json).
    let if_it_fit = if p.fits { "" } else { " (if it fit)" };
    // Far outside a training step's range (a batch of 2^64, a sequence of 2^32 tokens) in
    // scientific notation, as docs/RELIABILITY.md promises ("2440808767456474624.0000 s").
    let sci = |x: f64, fixed: std::ops::Range<f64>, digits: usize| {
        if x != 0.0 && !fixed.contains(&x.abs()) {
            format!("{x:.3e}")
        } else {
            format!("{x:.digits$}")
        }
    };
    println!(
        "  step time        {:>10} s{if_it_fit}",
        sci(p.step_time_s, 1e-3..1e9, 4)
    );
    println!(
        "  throughput       {:>10} tokens/s ({} per GPU){if_it_fit}",
        sci(p.tokens_per_s, 1.0..1e12, 0),
        sci(p.tokens_per_s_per_gpu, 1.0..1e12, 0)
    );
    // MFU is against the dense BF16 peak whatever the precision (NVIDIA's and torchtitan's
    // convention for FP8 runs): say so where FP8 could be read against its own peak.
    let peak = if o.stack.settings.precision == "fp8" {
        " of the BF16 peak"
    } else {
        ""
    };
    // The FLOP count is Megatron's (the attention scores in full, not halved for the causal
    // mask; docs/MODEL.md): a 6·N-per-token count reads lower, the more so at long sequences.
    // The figure stays in the column of the others above and below; the prose wraps after it.
    print!(
        "{}",
        crate::format::line_labelled(
            &format!("  model TFLOP/s    {:>10.1} ", p.model_tflops_per_gpu),
            &format!(
                "per GPU (MFU {:.1}%{peak}; Megatron's FLOP count: causal attention counted in \
                 full){if_it_fit}",
                p.mfu * 100.0
            )
        )
    );
    // Where the attention is a large share of that count (long sequences), the MFU of what
    // causal kernels execute beside it: at 128K tokens the headline read 1.7× that.
    if o.attention_flop_share >= ATTENTION_SHARE_SAID {
        print!(
            "{}",
            crate::format::line_labelled(
                "                   ",
                &format!(
                    "attention is {:.0}% of that count at {} tokens: MFU {:.1}% counting its causal \
                     half only, what the kernels execute{if_it_fit}",
                    o.attention_flop_share * 100.0,
                    o.seq_len,
                    o.mfu_causal * 100.0
                )
            )
        );
    }
    // The same count with recomputation added: above the GPU's own rate where the causal half
    // of the attention scores (which fused kernels skip) is a large share of the step.
    print!(
        "{}",
        crate::format::line_labelled(
            &format!("  hardware TFLOP/s {:>10.1} ", p.hardware_tflops_per_gpu),
            &format!(
                "per GPU (the same count with recomputation: causal attention in full, not what \
                 the kernels execute){if_it_fit}"
            )
        )
    );
    // With pipeline stages the figure is the fullest stage's: usually the first (most
    // micro-batches in flight) or the last (the output logits); with uneven stages maybe another.
    let stage = match o.memory.stage {
        _ if o.pp <= 1 => String::new(),
        0 => format!(" on the first of {} pipeline stages, the fullest", o.pp),
        s if s + 1 == o.pp => format!(" on the last of {} pipeline stages, the fullest", o.pp),
        s => format!(
            " on stage {} of {} (uneven stages), the fullest",
            s + 1,
            o.pp
        ),
    };
    // Uneven stages: how many layers each holds (runs of equal counts), and the split.
    let stage = if o.stage_layers.windows(2).any(|w| w[0] != w[1]) {
        format!(
            "{stage}; the {} split puts {} layers on the stages",
            o.stack.settings.stage_split,
            crate::format::runs(&o.stage_layers)
        )
    } else {
        stage
    };
    let output = if o.pp > 1 && o.memory.output == 0.0 {
        "output on the last stage only".to_string()
    } else {
        format!("output {:.1}", o.memory.output / 1e9)
    };
    let memory_text = format!(
        "{:>10.1} GB per GPU{stage} ({}; states {:.1}, activations {:.1}, {output}, reserved {:.1})",
        p.memory_per_gpu_bytes / 1e9,
        if p.fits {
            format!(
                "fits in {:.1} GB, {:.1} GiB",
                o.memory_capacity_bytes / 1e9,
                o.memory_capacity_bytes / f64::from(1u32 << 30)
            )
        } else {
            format!(
                "does NOT fit in {:.1} GB, {:.1} GiB",
                o.memory_capacity_bytes / 1e9,
                o.memory_capacity_bytes / f64::from(1u32 << 30)
            )
        },
        o.memory.model_states / 1e9,
        o.memory.activations / 1e9,
        o.memory.reserved / 1e9
    );
    print!(
        "{}",
        crate::format::line_labelled("  memory           ", &memory_text)
    );
    let pct = |x: f64| 100.0 * x / p.step_time_s;
    let ep = if b.ep_s > 0.0 {
        format!("  EP {:.1}%", pct(b.ep_s))
    } else {
        String::new()
    };
    let cp = if b.cp_s > 0.0 {
        format!("  CP {:.1}%", pct(b.cp_s))
    } else {
        String::new()
    };
    print!(
        "{}",
        crate::format::line_labelled(
            "  breakdown        ",
            &format!(
                "compute {:.1}%  bubble {:.1}%  TP {:.1}%{ep}{cp}  PP {:.1}%  DP {:.1}%  optimizer {:.1}%",
                pct(b.compute_s),
                pct(b.bubble_s),
                pct(b.tp_s),
                pct(b.pp_s),
                pct(b.dp_s),
                pct(b.optimizer_s)
            )
        )
    );
    for c in &o.caveats {
        print!("{}", crate::format::wrap_labelled("  note             ", c));
    }
    if let Some(n) = &o.faster_if_it_fit {
        println!(
            "  faster if it fit {} ({:.0} tokens/s, {:+.0}%; {:.1} GB per GPU, {:.1} GB over)",
            n.flags,
            n.tokens_per_s,
            100.0 * (n.tokens_per_s / p.tokens_per_s - 1.0),
            n.memory_per_gpu_bytes / 1e9,
            (n.memory_per_gpu_bytes - o.memory_capacity_bytes) / 1e9
        );
    }
    if let Some(n) = &o.faster_layout {
        print!(
            "{}",
            crate::format::wrap_labelled(
                "  faster here      ",
                &format!(
                    "{} ({:.0} tokens/s, {:+.0}%; {:.1} GB per GPU; on the same GPUs at this \
                     batch)",
                    n.flags,
                    n.tokens_per_s,
                    100.0 * (n.tokens_per_s / p.tokens_per_s - 1.0),
                    n.memory_per_gpu_bytes / 1e9
                )
            )
        );
    }
    if let Some(why) = &o.reason {
        println!("  cannot run       {why}");
        match &o.nearest_change {
            Some(n) => println!(
                "  fits instead     {} ({:.0} tokens/s, {:.1} GB per GPU; your other flags as \
                 given)",
                n.flags,
                n.tokens_per_s,
                n.memory_per_gpu_bytes / 1e9
            ),
            None => println!("  fits instead     {NOTHING_FITS}"),
        }
        if let Some(c) = &o.stack_change {
            println!(
                "  or               {} ({:.0} tokens/s, {:.1} GB per GPU; the layout as given)",
                c.flags,
                c.tokens_per_s,
                c.memory_per_gpu_bytes / 1e9
            );
        }
    }
}

/// What to change when no configuration of these GPUs fits at this batch.
const NOTHING_FITS: &str = "nothing on these GPUs at this batch: try more GPUs (--gpus)";

/// A caveat when the configuration fits but one tensor of it (the loss's logits) takes more
/// than [`FRAGMENTATION_FREE_SHARE`](crate::perf::memory::FRAGMENTATION_FREE_SHARE) of the
/// memory left free: PyTorch's caching allocator can fail it through fragmentation.
fn fragmentation_caveat(
    (model, cfg, eff): (
        &crate::perf::ModelProfile,
        &ParallelConfig,
        &crate::perf::EfficiencyParams,
    ),
    p: &Prediction,
    micro_batches: u64,
    (device_bytes, reserved): (f64, f64),
) -> Option<String> {
    // The logits live on the last pipeline stage: its room counts, not the fullest stage's.
    let room =
        crate::perf::memory::logits_room(model, cfg, (micro_batches, reserved), eff, device_bytes);
    let (total, largest) = (room.stage_bytes, room.largest_bytes);
    let stage = if cfg.pp > 1 {
        " on the last pipeline stage"
    } else {
        ""
    };
    (p.fits && room.risk).then(|| {
        format!(
            "fits with {:.1} GB to spare{stage}, counting the loss's logits ({:.1} GB in one \
             tensor) in the peak: one tensor over half the room left can fail to allocate through \
             the caching allocator's fragmentation \
             (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, a smaller micro-batch or a fused \
             loss leave more room)",
            (device_bytes - total) / 1e9,
            largest / 1e9
        )
    })
}

/// A caveat when the configuration fits and its `micro_batches` micro-batches are so short,
/// on an eager stack, that the host issuing kernels may bound them
/// ([`crate::perf::may_be_host_bound`]): the step time is then a lower bound.
fn host_bound_caveat(
    eff: &crate::perf::EfficiencyParams,
    p: &Prediction,
    model: &crate::perf::ModelProfile,
    cfg: &ParallelConfig,
    micro_batches: u64,
) -> Option<String> {
    let layers = crate::perf::memory::stage_layers(model, cfg.pp).0;
    (p.fits && crate::perf::may_be_host_bound(eff, p, micro_batches, layers)).then(|| {
        format!(
            "each micro-batch is {:.3} s of the predicted step; on an eager stack, micro-batches \
             under {:.2} s (for {} layers on a stage) ran 8-121 % slower than predicted in \
             copus's own H200 runs, bound by the host launching kernels: read the step time as \
             a lower bound (a larger micro-batch gives the GPU more work per launch)",
            crate::perf::micro_batch_time_s(p, micro_batches),
            crate::perf::host_bound_threshold_s(layers),
            layers
        )
    })
}

/// What the prediction should be read with: the model's caveats, and a stack setting given on
/// the command line that the layout leaves without effect (`--cp-comm` without `--cp` > 1,
/// `--pp-overlap` without an interleaved schedule, `--sequence-parallel` and `--tp-overlap`
/// without TP).
fn layout_caveats(
    model: &crate::perf::ModelProfile,
    cfg: &ParallelConfig,
    given: &super::stack_args::StackArgs,
    settings: &crate::perf::stack::StackSettings,
    (stack, split): (StackPreset, crate::perf::efficiency::StageSplit),
) -> Vec<String> {
    let mut caveats = crate::perf::caveats(model);
    if !stack.recompute_policies().contains(&cfg.recompute) {
        caveats.push(format!(
            "recompute {} is not a policy {stack} has (it has {}): a what-if, not a \
             configuration this framework runs",
            cfg.recompute,
            policy_list(stack.recompute_policies())
        ));
    }
    // Asked for, or the preset's: the resolved settings read it off after sequence
    // parallelism has switched it off.
    let wants_tp_overlap = given.tp_overlap.map_or_else(
        || crate::perf::Stack::preset(stack).settings().tp_overlap,
        bool::from,
    );
    let unused = [
        (
            given.cp_comm.is_some() && cfg.cp <= 1,
            "--cp-comm has no effect without context parallelism (--cp 2 or more)",
        ),
        (
            given.pp_overlap.is_some() && cfg.vpp <= 1,
            "--pp-overlap has no effect without an interleaved schedule (--vpp 2 or more)",
        ),
        (
            given.sequence_parallel.is_some() && cfg.tp <= 1,
            "--sequence-parallel has no effect without tensor parallelism (--tp 2 or more)",
        ),
        (
            given.tp_overlap.is_some() && cfg.tp <= 1,
            "--tp-overlap has no effect without tensor parallelism (--tp 2 or more)",
        ),
        (
            cfg.tp > 1 && !settings.sequence_parallel && wants_tp_overlap,
            crate::session::TP_OVERLAP_NEEDS_SP,
        ),
    ];
    caveats.extend(
        unused
            .into_iter()
            .filter(|(applies, _)| *applies)
            .map(|(_, why)| why.to_string()),
    );
    caveats.extend(uneven_chunks(model, cfg, split));
    caveats.extend(split_caveat(model, cfg, given, (stack, split)));
    caveats
}

/// Where the configuration's pipeline stages hold unequal layers, whether the stack's split is
/// one its framework runs, and where they hold equal layers, that `--stage-split` changes
/// nothing.
fn split_caveat(
    model: &crate::perf::ModelProfile,
    cfg: &ParallelConfig,
    given: &super::stack_args::StackArgs,
    (stack, split): (StackPreset, crate::perf::efficiency::StageSplit),
) -> Option<String> {
    let even = cfg.pp <= 1 || model.layers.is_multiple_of(cfg.pp);
    if even {
        return given.stage_split.is_some().then(|| {
            if cfg.pp <= 1 {
                "--stage-split has no effect without pipeline parallelism".to_string()
            } else {
                format!(
                    "--stage-split has no effect where the pipeline stages hold equal layers \
                     (PP {} divides the {} layers)",
                    cfg.pp, model.layers
                )
            }
        });
    }
    let own = stack.stage_splits();
    (!own.contains(&split)).then(|| {
        let counts =
            |s| crate::format::runs(&crate::perf::memory::split_layers(model.layers, cfg.pp, s));
        format!(
            "{stack}'s own split of uneven pipeline stages is {} ({} layers); the {} split \
             ({}) is a what-if, not how this framework runs",
            own[0].name(),
            counts(own[0]),
            split.name(),
            counts(split)
        )
    })
}

/// The caveat of an interleave that splits some pipeline stage into virtual stages of unequal
/// layers (uneven stages: vpp divides the full stages' layers, the rule `structure` applies,
/// but not the short ones'). Where the short stages are the ends, one layer short each, the
/// embedding and the output layer take that layer's place, as Megatron-Core places them with
/// `--account-for-embedding-in-pipeline-split` and `--account-for-loss-in-pipeline-split`
/// (Llama 3 405B: 126 layers on PP 16 × vpp 8); any other split needs an explicit
/// `--pipeline-model-parallel-layout`.
fn uneven_chunks(
    model: &crate::perf::ModelProfile,
    cfg: &ParallelConfig,
    split: crate::perf::efficiency::StageSplit,
) -> Option<String> {
    if cfg.vpp <= 1 || cfg.pp <= 1 {
        return None;
    }
    let mut counts: Vec<u32> = (0..cfg.pp)
        .map(|s| crate::perf::memory::layers_on_stage(model, cfg.pp, s, split))
        .collect();
    counts.sort_unstable();
    counts.dedup();
    let odd: Vec<String> = counts
        .iter()
        .filter(|&&n| !n.is_multiple_of(cfg.vpp))
        .map(u32::to_string)
        .collect();
    if odd.is_empty() {
        return None;
    }
    let full = model.layers.div_ceil(cfg.pp);
    let short = u64::from(cfg.pp) * u64::from(full) - u64::from(model.layers);
    let ends = split == crate::perf::efficiency::StageSplit::Ends
        && short <= 2
        && counts.iter().all(|&n| n + 1 >= full);
    Some(if ends {
        let flags = if short == 2 {
            "--account-for-embedding-in-pipeline-split and --account-for-loss-in-pipeline-split"
        } else {
            "--account-for-embedding-in-pipeline-split"
        };
        format!(
            "vpp {} on end stages of {} layers, one short of the others' {full}: the embedding \
             (and the output layer) takes the missing layer's place in their virtual stages, \
             costed as a full stage, as Megatron-Core places them with {flags}",
            cfg.vpp,
            odd.join(" and ")
        )
    } else {
        format!(
            "vpp {} does not divide the {} layers of some pipeline stages: their virtual stages \
             hold unequal layers (costed as if they split evenly); Megatron-Core runs that only \
             with an explicit --pipeline-model-parallel-layout, not with \
             --num-layers-per-virtual-pipeline-stage",
            cfg.vpp,
            odd.join(" and ")
        )
    })
}

/// Headroom below which a configuration that fits is said to be tight, as a share of the
/// GPU's memory (beyond the profile's reserve, which is counted in the prediction).
const TIGHT_MEMORY_SHARE: f64 = 0.02;

/// A configuration that fits with less than [`TIGHT_MEMORY_SHARE`] of the GPU to spare: the
/// model's memory count is not that exact (405B at PP 64 was chosen at 85.5 of 85.9 GB
/// without a word).
pub fn tight_memory(p: &Prediction, capacity_bytes: f64) -> Option<String> {
    let spare = capacity_bytes - p.memory_per_gpu_bytes;
    (p.fits && capacity_bytes > 0.0 && spare < TIGHT_MEMORY_SHARE * capacity_bytes).then(|| {
        format!(
            "memory is tight: {:.1} GB per GPU of {:.1} GB leaves {:.1} GB beyond copus's \
             reserve, within the memory model's error (allocator caching and fragmentation \
             vary by stack): measure it, or take a configuration with more room",
            p.memory_per_gpu_bytes / 1e9,
            capacity_bytes / 1e9,
            spare / 1e9
        )
    })
}

/// What a stated setting or cluster leaves without effect or outside what runs: `--attention
/// cudnn` on a GPU without a Hopper-native kernel, HSDP below ZeRO-3, ZeRO-1 on an FSDP framework (torchtitan, llm-foundry), GPUs that are not whole nodes, and a step that
/// data-parallel communication dominates (more GPUs in DP alone slow it further).
fn setting_caveats(
    stack: StackPreset,
    eff: &crate::perf::EfficiencyParams,
    cfg: &ParallelConfig,
    p: &Prediction,
    (gpus, gpus_per_node): (u32, u32),
    attention_given: bool,
    hw: &crate::perf::HardwareProfile,
) -> Vec<String> {
    use crate::perf::efficiency::Sharding;
    let mut caveats = Vec::new();
    caveats.extend(crate::session::attention_cost_note(
        stack,
        eff,
        (attention_given, &hw.name),
    ));
    // The older Megatron and Megatron-DeepSpeed have no TP overlap: costed, but a what-if
    // (it was costed without a word).
    if !stack.has_tp_overlap() && eff.tp_overlap > 0.0 && cfg.tp > 1 {
        caveats.push(crate::session::no_tp_overlap_note(stack));
    }
    if eff.sharding == Sharding::Hsdp && cfg.zero < 3 {
        caveats.push(format!(
            "sharding hsdp changes ZeRO-3 only (shard inside a node, replicate across): no \
             effect at ZeRO-{}",
            cfg.zero
        ));
    }
    let fsdp_framework = matches!(
        stack,
        StackPreset::TorchtitanFsdp2 | StackPreset::LlmFoundry
    );
    // With pipeline stages, ZeRO-1 is what FSDP runs (its ZeRO-3 holds gradients until the
    // step's last micro-batch there).
    if fsdp_framework && cfg.zero == 1 && cfg.pp <= 1 {
        caveats.push(
            "FSDP has no ZeRO-1 (it shards parameters, ZeRO-3, or keeps them gathered between \
             forward and backward, ZeRO-2; ZeRO-0 is DDP): a what-if"
                .to_string(),
        );
    }
    if cfg.pp > 1 && !stack.has_pipeline_parallel() {
        caveats.push(format!(
            "{stack} has no pipeline parallelism (Composer's FSDP, no pipeline schedule): PP {} \
             is a what-if of its stack",
            cfg.pp
        ));
    }
    if let Some(note) = tight_memory(p, hw.hbm_bytes) {
        caveats.push(note);
    }
    if cfg.cp > 1 && !stack.has_context_parallel() {
        caveats.push(format!(
            "{stack} has no context parallelism (Megatron-Core, NeMo, torchtitan and DeepSpeed's \
             Ulysses brought it, 2023 on): CP {} is a what-if of its stack",
            cfg.cp
        ));
    }
    let before_fp8 = matches!(
        stack,
        StackPreset::MegatronLm2021 | StackPreset::MegatronLm2021Local | StackPreset::DeepSpeed2021
    );
    if before_fp8 && eff.precision == crate::perf::efficiency::Precision::Fp8 {
        caveats.push(format!(
            "{stack} had no FP8 training (Transformer Engine's FP8 came with Hopper, 2022): a \
             what-if of its stack with FP8 GEMMs"
        ));
    }
    if before_fp8 && eff.sequence_parallel && cfg.tp > 1 {
        caveats.push(format!(
            "{stack} had no sequence parallelism (Megatron-LM brought it in 2022, Korthikanti \
             et al., arXiv 2205.05198): a what-if of its stack with TP's activations sharded"
        ));
    }
    if !gpus.is_multiple_of(gpus_per_node.max(1)) {
        caveats.push(format!(
            "{gpus} GPUs are not whole nodes of {gpus_per_node}: placed as if every node were \
             full"
        ));
    }
    let dp_share = p.breakdown.dp_s / p.step_time_s;
    if p.step_time_s > 0.0 && dp_share > 0.5 {
        // ZeRO-1 moves 6 bytes a parameter (FP32 gradients reduce-scattered, BF16 parameters
        // gathered) against an all-reduce's 8; ZeRO-2 and -3 move more, not less.
        let remedies = if cfg.zero == 0 {
            "more TP or PP, ZeRO-1 or a larger batch move less per token"
        } else {
            "more TP or PP or a larger batch move less per token"
        };
        caveats.push(format!(
            "data-parallel communication is {:.0} % of the step: more GPUs in data parallelism \
             alone make it slower; {remedies} (`copus grid` compares the layouts)",
            dp_share * 100.0
        ));
    }
    caveats
}

/// Where tensor parallelism leaves the GPUs that share the fast link: across nodes of
/// `gpus_per_node`, or, in a node larger than the hardware's scale-up (NVLink) domain of
/// `domain` GPUs, across domains. Its all-reduces then take the slower link, as costed;
/// `grid` and `plan` leave such layouts out unless a session allows them.
fn tp_domain_caveat(
    tp: u32,
    gpus_per_node: u32,
    (domain, hardware): (u32, &str),
) -> Option<String> {
    if tp > gpus_per_node {
        Some(format!(
            "TP {tp} spans {} nodes of {gpus_per_node} GPUs (--gpus-per-node): its all-reduces \
             cross the inter-node network, which is slow, and are costed so (grids and plans \
             leave such layouts out unless the session sets allow_cross_node_tp)",
            tp.div_ceil(gpus_per_node.max(1))
        ))
    } else if !gpus_per_node.is_multiple_of(tp) {
        Some(format!(
            "TP {tp} does not divide the {gpus_per_node} GPUs of a node: some TP groups straddle \
             two nodes, costed as if each were inside one"
        ))
    } else if tp > domain {
        Some(format!(
            "TP {tp} spans {} scale-up domains of {domain} GPUs: {hardware}'s scale-up domain \
             (scale_up_domain: the GPUs one NVLink or Infinity Fabric group links) is smaller \
             than the {gpus_per_node} GPUs a node is given, so its all-reduces cross the slower \
             link between domains, and are costed so",
            tp.div_ceil(domain.max(1))
        ))
    } else {
        None
    }
}

/// `none, selective or full`: policies as a sentence lists them.
fn policy_list(policies: &[Recompute]) -> String {
    let names: Vec<String> = policies.iter().map(Recompute::to_string).collect();
    match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => names.concat(),
    }
}

/// Under a DeepSpeed stack, what of the configuration DeepSpeed (Megatron-DeepSpeed) does not
/// run ([`crate::plan::emit::shape_problem`], the check `plan --emit deepspeed` searches
/// under), at the ZeRO stage that runs (a pipelined or MoE ZeRO-3 is explained above).
fn deepspeed_emit_caveat(
    stack: &crate::perf::Stack,
    eff: &crate::perf::EfficiencyParams,
    model: &crate::perf::ModelProfile,
    cfg: &ParallelConfig,
) -> Option<String> {
    use crate::plan::emit::{ConfigShape, EmitTarget, ModelFacts, shape_problem};
    let base = stack.base();
    if !matches!(base, StackPreset::DeepSpeed | StackPreset::DeepSpeed2021) {
        return None;
    }
    let runs = ParallelConfig {
        zero: crate::perf::memory::effective_zero(eff, model, cfg),
        ..*cfg
    };
    let facts = ModelFacts::of(model);
    let mut settings: crate::perf::stack::StackSettingsJson = stack.settings().into();
    // The stage split has a caveat of its own, for every preset (`split_caveat`).
    settings.stage_split = crate::perf::efficiency::StageSplit::Balanced.name();
    let why = shape_problem(
        EmitTarget::Deepspeed,
        &ConfigShape::of(&runs),
        facts,
        &settings,
    )?;
    Some(format!(
        "{base} does not run this configuration as stated: {why}; a what-if (`plan --emit \
         deepspeed` leaves such configurations out)"
    ))
}
