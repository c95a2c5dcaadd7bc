//! `copus predict`: step time, throughput and memory of one parallel configuration.

use super::model_args::{ModelArgs, efficiency};
use crate::perf::memory::peak_memory;
use crate::perf::{
    Invalid, ParallelConfig, PerfContext, Prediction, Recompute, enumerate, predict,
};
use crate::profiles;
use anyhow::{Context, bail};
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
}

impl From<RecomputeArg> for Recompute {
    fn from(r: RecomputeArg) -> Self {
        match r {
            RecomputeArg::None => Recompute::None,
            RecomputeArg::Selective => Recompute::Selective,
            RecomputeArg::Full => Recompute::Full,
        }
    }
}

/// Arguments of `copus predict`.
#[derive(Debug, Args)]
pub struct PredictArgs {
    /// Hardware profile: a built-in name (h100-sxm, h200, a100-80g, mi210) or a .ron file.
    #[arg(long, default_value = "h100-sxm")]
    pub hardware: String,
    /// The model: a profile or an inline shape.
    #[command(flatten)]
    pub model: ModelArgs,
    /// Calibration file (`copus calibrate --out`) to use instead of the hardware profile's
    /// efficiencies.
    #[arg(long)]
    pub calibration: Option<std::path::PathBuf>,
    /// Total GPUs (dp = gpus / (tp·pp)).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub gpus: u32,
    /// GPUs per node.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..))]
    pub gpus_per_node: u32,
    /// Tensor-parallel degree.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub tp: u32,
    /// Pipeline-parallel degree.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub pp: u32,
    /// Virtual pipeline stages per GPU (interleaved 1F1B when > 1).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub vpp: u32,
    /// Micro-batch size in samples, or `auto` (fastest that fits).
    #[arg(long, default_value = "auto")]
    pub mbs: String,
    /// Global batch size in samples (sequences).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub batch: u64,
    /// Activation recomputation.
    #[arg(long, value_enum, default_value = "selective")]
    pub recompute: RecomputeArg,
    /// ZeRO stage (0–3).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(0..=3))]
    pub zero: u8,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// What `copus predict --json` prints.
#[derive(Debug, Serialize)]
struct Output<'a> {
    model: &'a str,
    hardware: &'a str,
    dp: u32,
    tp: u32,
    pp: u32,
    vpp: u32,
    mbs: u32,
    zero: u8,
    recompute: String,
    batch: u64,
    #[serde(flatten)]
    prediction: Prediction,
    memory: crate::perf::memory::MemoryBreakdown,
}

/// Run `copus predict`.
pub fn run(a: &PredictArgs) -> anyhow::Result<()> {
    let hw = profiles::hardware(&a.hardware, Path::new("."))?;
    let model = a.model.profile()?;
    let eff = efficiency(&hw, a.calibration.as_deref())?;
    let ctx = PerfContext {
        hw: &hw,
        model: &model,
        eff: &eff,
        gpus_per_node: a.gpus_per_node.max(1),
    };
    crate::validate::profile::model(&model, "model")?;
    crate::validate::profile::hardware(&hw, "hardware")?;
    let flags = format!(
        "--gpus {} --tp {} --pp {} --batch {}",
        a.gpus, a.tp, a.pp, a.batch
    );
    let Some(used) = a.tp.checked_mul(a.pp) else {
        bail!("invalid configuration ({flags}): tp·pp overflows; it must divide --gpus");
    };
    if !a.gpus.is_multiple_of(used) {
        bail!(
            "invalid configuration ({flags}): tp·pp = {used} does not divide {} GPUs into whole data-parallel replicas",
            a.gpus
        );
    }
    if a.tp > a.gpus_per_node {
        eprintln!(
            "warning: --tp {} spans {} nodes of {} GPUs (--gpus-per-node): its all-reduces cross \
             the inter-node network, which is slow (grids and plans leave such layouts out \
             unless the session sets allow_cross_node_tp)",
            a.tp,
            a.tp.div_ceil(a.gpus_per_node),
            a.gpus_per_node
        );
    }
    let mut cfg = ParallelConfig {
        dp: a.gpus / used,
        tp: a.tp,
        pp: a.pp,
        mbs: 1,
        zero: a.zero,
        recompute: a.recompute.into(),
        vpp: a.vpp,
    };
    let invalid = |e: Invalid| anyhow::anyhow!("invalid configuration ({flags}): {e}");
    crate::perf::validate::structure(&model, &cfg).map_err(invalid)?;
    let p = if a.mbs == "auto" {
        match enumerate::auto(&ctx, &cfg, a.batch, &[cfg.recompute], &[cfg.vpp]) {
            Ok((c, p)) => {
                cfg = c;
                p
            }
            // Nothing fits: show the smallest micro-batch's breakdown (memory by component)
            // and what would fit instead.
            Err(Invalid::OutOfMemory { .. }) => predict(&ctx, &cfg, a.batch).map_err(invalid)?,
            Err(e) => return Err(invalid(e)),
        }
    } else {
        cfg.mbs = a.mbs.parse().ok().filter(|m| *m > 0).with_context(|| {
            format!(
                "--mbs must be a positive whole number or 'auto', got '{}'",
                a.mbs
            )
        })?;
        predict(&ctx, &cfg, a.batch).map_err(invalid)?
    };
    let mb = a.batch / (cfg.dp as u64 * cfg.mbs as u64);
    let memory = peak_memory(&model, &cfg, mb, hw.reserved_bytes, &eff);
    let out = Output {
        model: &model.name,
        hardware: &hw.name,
        dp: cfg.dp,
        tp: cfg.tp,
        pp: cfg.pp,
        vpp: cfg.vpp,
        mbs: cfg.mbs,
        zero: cfg.zero,
        recompute: cfg.recompute.to_string(),
        batch: a.batch,
        prediction: p,
        memory,
    };
    if a.json {
        super::write_json(&out)?;
    } else {
        print_text(&out);
    }
    if !p.fits {
        let oom = Invalid::OutOfMemory {
            need_gb: p.memory_per_gpu_bytes / 1e9,
            have_gb: hw.hbm_bytes / 1e9,
        };
        let hint = match what_fits(&ctx, a.gpus, a.batch, &cfg) {
            Some((c, fit)) => format!(
                "; fits instead: --tp {} --pp {} --mbs {} --zero {} --recompute {}{} ({:.0} tokens/s, {:.1} GB per GPU)",
                c.tp,
                c.pp,
                c.mbs,
                c.zero,
                c.recompute,
                if c.vpp > 1 {
                    format!(" --vpp {}", c.vpp)
                } else {
                    String::new()
                },
                fit.tokens_per_s,
                fit.memory_per_gpu_bytes / 1e9
            ),
            None => format!(
                "; no configuration of {} GPUs fits batch {}: try more GPUs (--gpus)",
                a.gpus, a.batch
            ),
        };
        bail!("{oom}{hint}");
    }
    Ok(())
}

/// The fastest configuration of `gpus` GPUs that fits at `batch`: first with `base`'s ZeRO
/// stage and recompute policy on every (tp, pp) layout within a node, then with any ZeRO
/// stage and recompute policy. `None` when nothing fits.
pub fn what_fits(
    ctx: &PerfContext,
    gpus: u32,
    batch: u64,
    base: &ParallelConfig,
) -> Option<(ParallelConfig, Prediction)> {
    let all = [Recompute::None, Recompute::Selective, Recompute::Full];
    let tries: [(&[u8], &[Recompute]); 2] = [
        (
            std::slice::from_ref(&base.zero),
            std::slice::from_ref(&base.recompute),
        ),
        (&[0, 1, 2, 3], &all),
    ];
    for (zeros, recomputes) in tries {
        let mut best: Option<(ParallelConfig, Prediction)> = None;
        for (dp, tp, pp) in enumerate::factorisations(gpus) {
            if tp > ctx.gpus_per_node {
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
                };
                if let Ok((c, p)) = enumerate::auto(ctx, &cfg, batch, recomputes, &[1])
                    && best.is_none_or(|(_, b)| p.step_time_s < b.step_time_s)
                {
                    best = Some((c, p));
                }
            }
        }
        if best.is_some() {
            return best;
        }
    }
    None
}

fn print_text(o: &Output) {
    let p = &o.prediction;
    let b = &p.breakdown;
    println!(
        "{} on {}: {} (global batch {})",
        o.model,
        o.hardware,
        ParallelConfig {
            dp: o.dp,
            tp: o.tp,
            pp: o.pp,
            mbs: o.mbs,
            zero: o.zero,
            recompute: Recompute::None,
            vpp: o.vpp,
        }
        .layout_label(),
        o.batch
    );
    println!(
        "  micro-batch {}  ZeRO-{}  recompute {}  vpp {}",
        o.mbs, o.zero, o.recompute, o.vpp
    );
    println!("  step time        {:>10.4} s", p.step_time_s);
    println!(
        "  throughput       {:>10.0} tokens/s ({:.0} per GPU)",
        p.tokens_per_s, p.tokens_per_s_per_gpu
    );
    println!(
        "  model TFLOP/s    {:>10.1} per GPU (MFU {:.1}%)",
        p.model_tflops_per_gpu,
        p.mfu * 100.0
    );
    println!(
        "  hardware TFLOP/s {:>10.1} per GPU",
        p.hardware_tflops_per_gpu
    );
    println!(
        "  memory           {:>10.1} GB per GPU ({}; states {:.1}, activations {:.1}, output {:.1}, reserved {:.1})",
        p.memory_per_gpu_bytes / 1e9,
        if p.fits { "fits" } else { "does NOT fit" },
        o.memory.model_states / 1e9,
        o.memory.activations / 1e9,
        o.memory.output / 1e9,
        o.memory.reserved / 1e9
    );
    let pct = |x: f64| 100.0 * x / p.step_time_s;
    println!(
        "  breakdown        compute {:.1}%  bubble {:.1}%  TP {:.1}%  PP {:.1}%  DP {:.1}%  optimizer {:.1}%",
        pct(b.compute_s),
        pct(b.bubble_s),
        pct(b.tp_s),
        pct(b.pp_s),
        pct(b.dp_s),
        pct(b.optimizer_s)
    );
}
