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
    /// Another model, GPU or cluster than the session's ("what if 128 H100s?").
    #[command(flatten)]
    pub scenario: super::scenario_args::ScenarioArgs,
    /// The explorer's what-if settings (ZeRO, CP/EP degrees, B_crit scale, efficiency form,
    /// current batch, GEMM plateau, scale-out bandwidth, objective).
    #[command(flatten)]
    pub whatif: super::whatif_args::WhatIfArgs,
    /// The what-if's switch costs.
    #[command(flatten)]
    pub switch_costs: super::whatif_args::SwitchCostArgs,
    /// B_crit converted by the run's own branched experiment.
    #[command(flatten)]
    pub branches: super::branch_args::BranchArgs,
    /// Print JSON.
    #[arg(long, conflicts_with = "emit")]
    pub json: bool,
    /// Indent the --json output (the default on a terminal; compact into a pipe or a
    /// file).
    #[arg(long, requires = "json")]
    pub pretty: bool,
    /// Write the optimal-joint plan as a schedule a trainer runs: `json` (phases with steps,
    /// batches and layouts), `megatron` (arguments per phase, or one --rampup-batch-size),
    /// `torchtitan` (TOML per phase) or `deepspeed` (JSON configurations per phase).
    #[arg(long, value_enum)]
    pub emit: Option<crate::plan::emit::EmitTarget>,
    /// Plan only what this framework can express, and print that plan (text or --json) as
    /// `--emit` would write it: the plan a framework actually runs where it cannot run the
    /// unlimited one (`megatron`, `torchtitan` or `deepspeed`).
    #[arg(long, value_enum, value_name = "FRAMEWORK")]
    pub within: Option<Framework>,
}

/// A framework whose limits `plan --within` plans inside (the JSON schedule has none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Framework {
    /// Megatron-LM (what `--emit megatron` writes).
    Megatron,
    /// torchtitan (what `--emit torchtitan` writes).
    Torchtitan,
    /// DeepSpeed with Megatron-DeepSpeed (what `--emit deepspeed` writes).
    Deepspeed,
}

impl Framework {
    /// The `--emit` target of the framework.
    pub fn target(self) -> crate::plan::emit::EmitTarget {
        match self {
            Framework::Megatron => crate::plan::emit::EmitTarget::Megatron,
            Framework::Torchtitan => crate::plan::emit::EmitTarget::Torchtitan,
            Framework::Deepspeed => crate::plan::emit::EmitTarget::Deepspeed,
        }
    }
}

/// Run `copus plan`: load and resolve the session, plan every strategy, print the report.
pub fn run(args: &PlanArgs) -> anyhow::Result<()> {
    let p = &args.session;
    let mut resolved = super::scenario_args::resolve(
        p,
        args.calibration.as_deref(),
        args.stack.stack().as_ref(),
        &args.scenario,
    )?;
    args.whatif
        .apply(&mut resolved, super::whatif_args::Command::Plan)?;
    let converted = args
        .branches
        .apply(&mut resolved, args.whatif.b_crit_scale.is_some())?;
    resolved.override_notes.extend(converted);
    args.switch_costs.apply(&mut resolved)?;
    crate::pipeline::adopt_run_calibration(&mut resolved)?;
    let within = args.within.map(Framework::target);
    // `--emit json` writes the schedule of any plan, one made within a framework's limits too.
    if let (Some(e), Some(w)) = (args.emit, within)
        && e != w
        && e != crate::plan::emit::EmitTarget::Json
    {
        // The values as the flags spell them (a command-line error: exit 2).
        let spelled = |v: Option<clap::builder::PossibleValue>| {
            v.map_or_else(String::new, |v| v.get_name().to_string())
        };
        super::flag_bail!(
            "--within {} and --emit {}: one framework (--emit plans within its own limits)",
            spelled(
                args.within
                    .and_then(|f| clap::ValueEnum::to_possible_value(&f))
            ),
            spelled(clap::ValueEnum::to_possible_value(&e))
        );
    }
    let limits = match (args.emit, within) {
        (Some(crate::plan::emit::EmitTarget::Json), Some(w)) => Some(w),
        (e, w) => e.or(w),
    }
    .map(|target| EmitLimits::new(target, &resolved));
    let (report, sequence_note, cautions) = match &limits {
        Some(l) => crate::pipeline::plan_session_where(&resolved, &|c| l.refuse(c)).map_err(
            |e| match (&e, l.note(None)) {
                // Nothing runs even without the limits (out of memory everywhere): that, not
                // the framework, is what to say ("plan without --emit" failed the same way).
                (crate::pipeline::PlanError::NothingRuns { .. }, Some(_))
                    if let Err(free @ crate::pipeline::PlanError::NothingRuns { .. }) =
                        crate::pipeline::plan_session_cautioned(&resolved) =>
                {
                    free.into()
                }
                // The framework's limits, not the cluster, left nothing to plan.
                (crate::pipeline::PlanError::NothingRuns { path, example }, Some(note)) => {
                    // Costed for another framework's stack, its own may fit in the limits.
                    let preset = resolved.stack().base().name();
                    let own = crate::plan::emit::own_stack(l.target)
                        .filter(|_| crate::plan::emit::stack_note(preset, l.target).is_some())
                        .map(|own| {
                            format!(
                                "; --stack {own} costs the search as {} runs it, which may \
                                 leave other configurations",
                                l.target.name()
                            )
                        })
                        .unwrap_or_default();
                    anyhow::anyhow!(
                        "{}: nothing to plan for {}: no (layout, batch) cell runs within what it \
                         can express (for example {example}); {note}; plan without --emit, or \
                         for another framework, to see what runs otherwise{own}",
                        path.display(),
                        l.target.name()
                    )
                }
                _ => e.into(),
            },
        )?,
        None => crate::pipeline::plan_session_cautioned(&resolved)?,
    };
    let (calibration, mut caveats) =
        super::calibration_in_force::of_session(&resolved, args.calibration.as_deref());
    caveats.extend(resolved.notes());
    // What the model leaves out for this shape (MoE routing and imbalance), as predict and
    // grid say it: the plan's hours inherit it.
    caveats.extend(crate::perf::caveats(&resolved.model));
    caveats.extend(resolved.framework_caveats());
    caveats.extend(super::cbs::session_branches_problem(&resolved));
    caveats.extend(sequence_note);
    caveats.extend(tight_phases(&report, &resolved));
    // What the plan rests on comes first: an unreliable estimate outweighs every other note.
    caveats.splice(0..0, cautions);
    if let Some(l) = &limits
        && l.refused()
    {
        // What the limits cost: the same plan without them (fast: one more table).
        let free = crate::pipeline::plan_session_cautioned(&resolved).ok();
        caveats.extend(l.note(free.as_ref().map(|(r, _, _)| r).zip(Some(&report))));
    }
    if let Some(target) = args.emit {
        let c = &resolved.session.cluster;
        // What the plan rests on beyond the session goes into the document.
        let notes = calibration
            .iter()
            .map(super::calibration_in_force::text_line)
            .chain(caveats.iter().cloned())
            .chain(experts_note(target, &resolved.model))
            .collect();
        let ctx = crate::plan::emit::EmitContext {
            gpus: c.nodes.saturating_mul(c.gpus_per_node),
            seq_len: resolved.model.seq_len,
            layers: resolved.model.layers,
            kv_heads: resolved.model.kv_heads,
            moe: resolved.model.moe.is_some(),
            hsdp_shard_gpus: resolved.efficiency().hsdp_shard_gpus,
            notes,
        };
        let text = crate::plan::emit::emit(&report, &ctx, target)
            .map_err(|e| anyhow::anyhow!("{}: --emit {}: {e}", p.display(), target.name()))?;
        print!("{}", super::escape_controls(&text));
    } else if args.json {
        super::write_json(&PlanOut {
            report: &report,
            calibration,
            caveats,
            emit_targets: emit_fits(&report, &resolved),
            within: within.map(emit_flag),
        })?;
    } else {
        let mut text = crate::plan::render_text(&report);
        if let Some(t) = within {
            text.push_str(&crate::format::wrap_labelled(
                "within: ",
                &format!(
                    "only what {} can express was planned (--within): the plan its --emit \
                     writes",
                    t.name()
                ),
            ));
        }
        text.push_str(&crate::format::wrap_labelled(
            "frameworks: ",
            &emit_fits_text(&emit_fits(&report, &resolved), report.stack.preset),
        ));
        if let Some(c) = &calibration {
            text.push_str(&super::calibration_in_force::text_lines(c));
        }
        for c in &caveats {
            text.push_str(&crate::format::wrap_labelled("note: ", c));
        }
        print!("{}", super::escape_controls(&text));
    }
    Ok(())
}

/// The plan's configurations that fit with little memory to spare (`predict`'s
/// [`super::predict::tight_memory`], at the fullest of the runs holding it), one note each
/// naming its phases: a 405B plan ran every phase at 85.5 of 85.9 GB and `--emit` wrote it
/// without a word.
fn tight_phases(
    report: &crate::plan::PlanReport,
    resolved: &crate::session::Resolved,
) -> Vec<String> {
    use crate::perf::{ParallelConfig, Prediction, Recompute};
    let eff = resolved.efficiency();
    let ctx = resolved.perf_context(&eff);
    // Each configuration, the phases (1-based) that hold it and its fullest prediction.
    let mut held: Vec<(ParallelConfig, Vec<usize>, Prediction)> = Vec::new();
    for (k, run) in report.schedule.iter().enumerate() {
        let Some(c) = &run.state.config else { continue };
        let Some(recompute) = [
            Recompute::None,
            Recompute::Selective,
            Recompute::Full,
            Recompute::Op,
        ]
        .into_iter()
        .find(|r| r.to_string() == c.recompute) else {
            continue;
        };
        let cfg = ParallelConfig {
            dp: c.dp,
            tp: c.tp,
            pp: c.pp,
            mbs: c.mbs,
            zero: c.zero,
            recompute,
            vpp: c.vpp,
            cp: c.cp,
            ep: c.ep,
        };
        let Ok(p) = crate::perf::predict(&ctx, &cfg, run.state.batch) else {
            continue;
        };
        match held.iter_mut().find(|h| h.0 == cfg) {
            Some(h) => {
                h.1.push(k + 1);
                if p.memory_per_gpu_bytes > h.2.memory_per_gpu_bytes {
                    h.2 = p;
                }
            }
            None => held.push((cfg, vec![k + 1], p)),
        }
    }
    held.iter()
        .filter_map(|(cfg, phases, p)| {
            let note = super::predict::tight_memory(p, resolved.hardware.hbm_bytes)?;
            let list: Vec<String> = phases.iter().map(ToString::to_string).collect();
            let which = if phases.len() == 1 { "phase" } else { "phases" };
            Some(format!("{which} {} ({cfg}): {note}", list.join(", ")))
        })
        .collect()
}

/// `plan --json`: the report, the calibration it used and the caveats.
#[derive(serde::Serialize)]
struct PlanOut<'a> {
    #[serde(flatten)]
    report: &'a crate::plan::PlanReport,
    /// The calibration the throughputs use (`null`: the hardware profile's efficiencies).
    calibration: Option<super::calibration_in_force::CalibrationUsed>,
    /// The calibration's caveats and those of command-line overrides, one sentence each.
    caveats: Vec<String>,
    /// Whether each framework `--emit` writes for runs the plan as made.
    emit_targets: Vec<EmitFit>,
    /// The framework whose limits the plan was made within (`--within`: "megatron",
    /// "torchtitan" or "deepspeed"), else `null`.
    within: Option<&'static str>,
}

/// Whether one framework can write the plan as made (`plan --json` `emit_targets[]`).
#[derive(Debug, serde::Serialize)]
struct EmitFit {
    /// The `--emit` value: "megatron", "torchtitan" or "deepspeed".
    target: &'static str,
    /// The target itself.
    #[serde(skip)]
    emit: crate::plan::emit::EmitTarget,
    /// The framework's name.
    name: &'static str,
    /// Every phase of the plan is one it writes: `--emit` writes this plan's phases.
    writes_as_planned: bool,
    /// The plan was costed for this framework's own stack (else its times are the stack's,
    /// and `--emit` says so).
    costed_for_it: bool,
    /// Where it cannot write the plan, the first phase it cannot run and why.
    why: Option<String>,
    /// Where it cannot write the plan: whether a plan within its limits exists (what `--emit`
    /// then writes, with a note of what it costs); `null` where it writes this one.
    plannable_within_limits: Option<bool>,
}

/// The `--emit` / `--within` value of `target` ("megatron", "torchtitan", "deepspeed").
fn emit_flag(target: crate::plan::emit::EmitTarget) -> &'static str {
    use crate::plan::emit::EmitTarget;
    match target {
        EmitTarget::Megatron => "megatron",
        EmitTarget::Torchtitan => "torchtitan",
        EmitTarget::Deepspeed => "deepspeed",
        EmitTarget::Json => "json",
    }
}

/// [`EmitFit`] of every framework target for `report`'s schedule.
fn emit_fits(
    report: &crate::plan::PlanReport,
    resolved: &crate::session::Resolved,
) -> Vec<EmitFit> {
    use crate::plan::emit::{ConfigShape, EmitTarget, ModelFacts, shape_problem};
    let model = ModelFacts::of(&resolved.model);
    let settings = &report.stack.settings;
    [
        EmitTarget::Megatron,
        EmitTarget::Torchtitan,
        EmitTarget::Deepspeed,
    ]
    .into_iter()
    .map(|target| {
        let flag = emit_flag(target);
        let why = report.schedule.iter().enumerate().find_map(|(i, run)| {
            let st = &run.state;
            let c = st.config.as_ref()?;
            let shape = ConfigShape {
                tp: st.tp,
                pp: st.pp,
                vpp: c.vpp.max(1),
                cp: st.cp.max(1),
                ep: c.ep.max(1),
                zero: c.zero,
                recompute: &c.recompute,
            };
            shape_problem(target, &shape, model, settings)
                .map(|why| format!("phase {} ({}): {why}", i + 1, c.label()))
        });
        let plannable_within_limits = why.as_ref().map(|_| {
            let limits = EmitLimits::new(target, resolved);
            crate::pipeline::plan_session_where(resolved, &|c| limits.refuse(c)).is_ok()
        });
        EmitFit {
            target: flag,
            emit: target,
            name: target.name(),
            writes_as_planned: why.is_none(),
            costed_for_it: crate::plan::emit::stack_note(report.stack.preset, target).is_none(),
            why,
            plannable_within_limits,
        }
    })
    .collect()
}

/// The frameworks line of `plan`'s text: which write the plan as made, which stack it was
/// costed for, and why not the others.
fn emit_fits_text(fits: &[EmitFit], preset: &str) -> String {
    let (run, not): (Vec<&EmitFit>, Vec<&EmitFit>) = fits.iter().partition(|f| f.writes_as_planned);
    let mut parts = Vec::new();
    if !run.is_empty() {
        let names: Vec<&str> = run.iter().map(|f| f.name).collect();
        let flags: Vec<&str> = run.iter().map(|f| f.target).collect();
        let foreign: Vec<&EmitFit> = run.iter().copied().filter(|f| !f.costed_for_it).collect();
        let costed = if foreign.is_empty() {
            String::new()
        } else {
            let stacks: Vec<&str> = foreign
                .iter()
                .filter_map(|f| crate::plan::emit::own_stack(f.emit))
                .collect();
            format!(
                ", costed for the {preset} stack (--stack {} costs it as {} runs it)",
                stacks.join(" or "),
                foreign
                    .iter()
                    .map(|f| f.name)
                    .collect::<Vec<_>>()
                    .join(" or ")
            )
        };
        parts.push(format!(
            "{} can write this plan's phases as they are (--emit {}){costed}",
            names.join(", "),
            flags.join("|")
        ));
    }
    for f in not {
        let then = if f.plannable_within_limits == Some(false) {
            "; nothing within its limits runs here"
        } else {
            "; --emit plans again within its limits"
        };
        parts.push(format!(
            "{} cannot run {}{then}",
            f.name,
            f.why.as_deref().unwrap_or("it"),
        ));
    }
    parts.join("; ")
}

/// The limits of the framework `plan --emit` writes for, applied to the search: the plan is
/// made only of configurations it can express ([`crate::plan::emit::shape_problem`]), and
/// what was left out is said.
struct EmitLimits {
    target: crate::plan::emit::EmitTarget,
    model: crate::plan::emit::ModelFacts,
    settings: crate::perf::stack::StackSettingsJson,
    /// Configurations looked at, and those refused with the first refusal's reason.
    seen: std::cell::Cell<usize>,
    refused: std::cell::RefCell<(usize, Option<String>)>,
}

impl EmitLimits {
    fn new(target: crate::plan::emit::EmitTarget, resolved: &crate::session::Resolved) -> Self {
        Self {
            target,
            model: crate::plan::emit::ModelFacts::of(&resolved.model),
            settings: resolved.stack().settings().into(),
            seen: std::cell::Cell::new(0),
            refused: std::cell::RefCell::new((0, None)),
        }
    }

    /// Why the target cannot run `config`, as a table cell says it.
    fn refuse(&self, config: &crate::perf::ParallelConfig) -> Option<String> {
        self.seen.set(self.seen.get().saturating_add(1));
        let shape = crate::plan::emit::ConfigShape::of(config);
        let why =
            crate::plan::emit::shape_problem(self.target, &shape, self.model, &self.settings)?;
        let mut refused = self.refused.borrow_mut();
        refused.0 = refused.0.saturating_add(1);
        refused.1.get_or_insert_with(|| format!("{config}: {why}"));
        Some(format!("{} cannot express it: {why}", self.target.name()))
    }

    /// Whether the target's limits left any configuration out.
    fn refused(&self) -> bool {
        self.refused.borrow().0 > 0
    }

    /// What the search lost to the target's limits, one sentence; `None` where nothing.
    /// `plans`: the plan made without the limits and the one made with them, whose times
    /// the sentence compares.
    fn note(
        &self,
        plans: Option<(&crate::plan::PlanReport, &crate::plan::PlanReport)>,
    ) -> Option<String> {
        let (count, example) = self.refused.borrow().clone();
        let example = example?;
        let cost = plans
            .and_then(|(free, limited)| Some((joint_time_s(free)?, joint_time_s(limited)?)))
            .map(|(free, limited)| {
                format!(
                    "; within them the plan takes {} against {} without them ({:+.1} %)",
                    crate::format::duration(limited),
                    crate::format::duration(free),
                    100.0 * (limited / free - 1.0)
                )
            })
            .unwrap_or_default();
        Some(format!(
            "the plan searched only the configurations {} can express: {count} of the {} \
             configurations looked at were left out (some might not fit in memory anyway), e.g. \
             {example}{cost}",
            self.target.name(),
            self.seen.get(),
        ))
    }
}

/// The optimal-joint plan's predicted time, seconds.
fn joint_time_s(report: &crate::plan::PlanReport) -> Option<f64> {
    report
        .strategies
        .iter()
        .find(|s| s.name == "optimal-joint")
        .map(|s| s.time_s)
        .filter(|t| t.is_finite() && *t > 0.0)
}

/// What a DeepSpeed schedule of a mixture-of-experts model leaves to the user's model
/// arguments: the experts themselves (Megatron-DeepSpeed's default is a dense model, and the
/// expert-parallel degree alone changes nothing).
fn experts_note(
    target: crate::plan::emit::EmitTarget,
    model: &crate::perf::ModelProfile,
) -> Option<String> {
    let moe = model.moe.as_ref()?;
    (target == crate::plan::emit::EmitTarget::Deepspeed).then(|| {
        format!(
            "the phases write the expert-parallel degree only: give Megatron-DeepSpeed the \
             model's experts among your arguments (--num-experts {} --topk {}; its default is a \
             dense model)",
            moe.experts, moe.top_k
        )
    })
}
