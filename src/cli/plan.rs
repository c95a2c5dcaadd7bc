//! `copus plan`: switch-point planning and strategy comparison for a session.

use clap::Args;
use std::path::PathBuf;

/// Arguments of `copus plan`.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// Session file (.ron), or `demo` for the bundled demo session.
    pub session: PathBuf,
    /// Calibration file (`copus calibrate --out`) to use instead of the session's model.
    #[arg(long)]
    pub calibration: Option<PathBuf>,
    /// The training stack (changes the session's `stack`).
    #[command(flatten)]
    pub stack: super::stack_args::StackArgs,
    /// Objective: mccandlish (learning rate re-tuned per batch) or lr-sqrt (tuned at a
    /// reference batch, scaled by √B); default: the session's.
    #[arg(long, value_parser = crate::plan::Objective::parse)]
    pub objective: Option<crate::plan::Objective>,
    /// Print JSON.
    #[arg(long, conflicts_with = "emit")]
    pub json: bool,
    /// Write the optimal-joint plan as a schedule a trainer runs: `json` (phases with steps,
    /// batches and layouts), `megatron` (arguments per phase, or one --rampup-batch-size),
    /// `torchtitan` (TOML per phase) or `deepspeed` (JSON configurations per phase).
    #[arg(long, value_enum)]
    pub emit: Option<crate::plan::emit::EmitTarget>,
}

/// Run `copus plan`: load and resolve the session, plan every strategy, print the report.
pub fn run(args: &PlanArgs) -> anyhow::Result<()> {
    let p = &args.session;
    let mut resolved = super::model_args::resolve_session(
        p,
        args.calibration.as_deref(),
        args.stack.stack().as_ref(),
    )?;
    if let Some(o) = args.objective {
        resolved.session.planner.objective = o;
    }
    let report = crate::pipeline::plan_session(&resolved)?;
    if let Some(target) = args.emit {
        let c = &resolved.session.cluster;
        let ctx = crate::plan::emit::EmitContext {
            gpus: c.nodes.saturating_mul(c.gpus_per_node),
            seq_len: resolved.model.seq_len,
            layers: resolved.model.layers,
        };
        let text = crate::plan::emit::emit(&report, &ctx, target)
            .map_err(|e| anyhow::anyhow!("{}: --emit {}: {e}", p.display(), target.name()))?;
        print!("{}", super::escape_controls(&text));
    } else if args.json {
        super::write_json(&report)?;
    } else {
        print!(
            "{}",
            super::escape_controls(&crate::plan::render_text(&report))
        );
    }
    Ok(())
}
