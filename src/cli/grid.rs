//! `copus grid`: the Goodput grid of a session at one training point.

use crate::goodput::{TableCell, throughput_table};
use crate::perf::ParallelConfig;
use crate::pipeline::load_trajectory_noted;
use anyhow::Context;
use clap::Args;
use serde::Serialize;
use std::path::PathBuf;

/// Arguments of `copus grid`.
#[derive(Debug, Args)]
pub struct GridArgs {
    /// Session file (.ron), or `demo` for the bundled demo session.
    pub session: PathBuf,
    /// Where to evaluate: a training step (`1200`), tokens trained with a K/M/B/T suffix
    /// (`150B`) or a share of the run (`40%`), as the explorer's `g` takes them; the nearest
    /// trajectory point is used and a value outside the trajectory is an error [default: where
    /// the explorer opens: the point a session was saved at (the first unless it says), a
    /// stats file's or dump's latest].
    #[arg(long, value_parser = parse_at, value_name = "STEP|TOKENS|SHARE%")]
    pub at: Option<At>,
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
    /// B_crit converted by the run's own branched experiment.
    #[command(flatten)]
    pub branches: super::branch_args::BranchArgs,
    /// Instead of the grid: every layout at this batch (samples, a column of the grid) ranked
    /// by goodput, then those that cannot run and why (the explorer's `R`).
    #[arg(long, value_name = "BATCH")]
    pub rank: Option<u64>,
    /// Only the layouts meeting these conditions on dp, tp, pp and cp (`"tp<=4 pp=1"`; the
    /// explorer's `/`).
    #[arg(long, value_name = "CONDITIONS")]
    pub filter: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Indent the --json output (the default on a terminal; compact into a pipe or a
    /// file).
    #[arg(long, requires = "json")]
    pub pretty: bool,
}

/// A point of training given on the command line.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum At {
    /// An optimizer step.
    Step(u64),
    /// Tokens trained so far.
    Tokens(f64),
    /// A share of the run's points, 0–1 (0 the first point, 1 the last).
    Share(f64),
}

/// Parse `--at`: a whole step number, a token count with a K/M/B/T suffix (`150B`), or a share
/// of the run (`40%`, as the explorer's go-to takes it).
pub fn parse_at(s: &str) -> Result<At, String> {
    let t = s.trim();
    if let Ok(step) = t.parse::<u64>() {
        return Ok(At::Step(step));
    }
    if let Some(share) = t.strip_suffix('%') {
        return match share.trim().parse::<f64>() {
            Ok(p) if (0.0..=100.0).contains(&p) => Ok(At::Share(p / 100.0)),
            _ => Err(format!("'{s}': a share of the run lies in 0–100%")),
        };
    }
    let scale = match t.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => 1e3,
        Some('M') => 1e6,
        Some('B') | Some('G') => 1e9,
        Some('T') => 1e12,
        _ => {
            return Err(format!(
                "'{s}' is neither a step (a whole number), tokens with a K/M/B/T suffix (150B) \
                 nor a share of the run (40%)"
            ));
        }
    };
    let number: f64 = t[..t.len() - 1]
        .trim()
        .parse()
        .map_err(|_| format!("'{s}': tokens must be a number before the suffix, as in 150B"))?;
    let tokens = number * scale;
    if !tokens.is_finite() || tokens < 0.0 {
        return Err(format!("'{s}': tokens must be finite and not negative"));
    }
    Ok(At::Tokens(tokens))
}

/// The trajectory point nearest to `at`, or an error naming `--at` when it lies outside the
/// trajectory (beyond its first and last points).
pub fn point_at(
    points: &[crate::trajectory::TrajectoryPoint],
    at: At,
    measured: bool,
) -> anyhow::Result<&crate::trajectory::TrajectoryPoint> {
    let (Some(first), Some(last)) = (points.first(), points.last()) else {
        anyhow::bail!("the trajectory has no points");
    };
    match at {
        At::Share(f) => {
            let n = points.len() - 1;
            points.get(((n as f64) * f).round() as usize)
        }
        At::Step(step) => {
            if step < first.step || step > last.step {
                let why = if measured {
                    " (a measured run's trajectory holds the steps with an estimate: its last \
                     steps may have none)"
                } else {
                    ""
                };
                super::flag_bail!(
                    "--at {step}: outside the trajectory, which runs from step {} to {}{why}",
                    first.step,
                    last.step
                );
            }
            points.iter().min_by_key(|p| p.step.abs_diff(step))
        }
        At::Tokens(t) => {
            if t < first.tokens || t > last.tokens {
                super::flag_bail!(
                    "--at {} tokens: outside the trajectory, which runs from {} to {} tokens",
                    crate::format::tokens(t),
                    crate::format::tokens(first.tokens),
                    crate::format::tokens(last.tokens)
                );
            }
            points
                .iter()
                .min_by(|a, b| (a.tokens - t).abs().total_cmp(&(b.tokens - t).abs()))
        }
    }
    .ok_or_else(|| anyhow::anyhow!("the trajectory has no points"))
}

/// Where `--at` fell between the trajectory's points and the grid is the nearest one's: said
/// (as the explorer's `g` says it), not done silently: a step just before a planned switch
/// showed the grid after it.
fn snapped_note(at: At, p: &crate::trajectory::TrajectoryPoint) -> Option<String> {
    let asked = match at {
        At::Step(step) if step != p.step => format!("step {step}"),
        At::Tokens(t) if (t - p.tokens).abs() > 0.005 * t.abs().max(1.0) => {
            format!("{} tokens", crate::format::tokens(t))
        }
        _ => return None,
    };
    Some(format!(
        "--at {asked}: the trajectory has no point there; this is the nearest, step {} ({} \
         tokens)",
        p.step,
        crate::format::tokens(p.tokens)
    ))
}

/// One cell of `copus grid --json`.
#[derive(Debug, Serialize)]
struct CellOut {
    layout: String,
    batch: u64,
    feasible: bool,
    tokens_per_s: Option<f64>,
    mfu: Option<f64>,
    stat_eff: f64,
    goodput: Option<f64>,
    /// Whether training diverges at this batch under the session's objective (`lr-sqrt`: the
    /// √-scaled learning rate too high for the noise); its goodput is the planner's floor, not
    /// a speed (false under `mccandlish`).
    diverges: bool,
    config: Option<crate::perf::config::ConfigJson>,
    #[serde(skip)]
    parallel: Option<ParallelConfig>,
    step_time_s: Option<f64>,
    /// Where the step time goes (seconds), the same fields as `copus predict --json`.
    breakdown: Option<crate::perf::Breakdown>,
    #[serde(serialize_with = "crate::perf::memory::serialize_whole_bytes_opt")]
    memory_per_gpu_bytes: Option<f64>,
    /// Peak memory per GPU by component (bytes).
    memory: Option<crate::perf::memory::MemoryBreakdown>,
    /// The same memory with the model states split by the ZeRO stage into weights, gradients
    /// and optimizer state (bytes; keys `weights`, `gradients`, `optimizer_state`,
    /// `activations`, `output`, `reserved`), as the explorer's `x` shows it.
    memory_parts: Option<std::collections::BTreeMap<&'static str, crate::perf::memory::WholeBytes>>,
    reason: Option<String>,
    /// Exposed TP, PP and DP communication as a share of the step (0–1).
    exposed_comm_share: Option<f64>,
    /// The pipeline bubble as a share of the step (0–1).
    bubble_share: Option<f64>,
    /// Whether one tensor of the step (the loss's logits) is over half of the memory left
    /// free, so that the caching allocator's fragmentation can stop it (the explorer's
    /// caution line).
    fragmentation_risk: Option<bool>,
    /// Whether the micro-batches are short enough, on an eager stack, to be bound by the host
    /// launching kernels, so that the step time is a lower bound (the explorer's caution line).
    host_bound_risk: Option<bool>,
    /// For a cell that cannot run: the nearest configuration on the same GPUs that runs (the
    /// explorer's `x`; docs/MODEL.md, "Explaining a cell").
    nearest_change: Option<crate::perf::explain::NearestChange>,
    /// For a cell that runs out of memory: bytes per GPU over the hardware's memory, of the
    /// searched configuration that comes closest (least memory), whose `config`, step time,
    /// breakdown and memory the cell then carries as the explorer's `x` shows them
    /// (`tokens_per_s`, `mfu` and `goodput` stay null: it does not run).
    #[serde(serialize_with = "crate::perf::memory::serialize_whole_bytes_opt")]
    over_by_bytes: Option<f64>,
}

/// What `copus grid --json` prints.
#[derive(Debug, Serialize)]
struct GridOut {
    session: String,
    /// Tokens per sequence of the model: the unit of every batch here (`batch`,
    /// `current_batch`, `b_crit`).
    seq_len: u32,
    /// The training stack the throughputs are predicted for.
    stack: crate::perf::stack::StackJson,
    step: u64,
    tokens: f64,
    b_crit_estimate: f64,
    b_crit_scale: f64,
    /// Where `b_crit_scale` comes from, where the session says (a measured conversion:
    /// "measured B_noise ÷ B_simple by branched training, …"); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    b_crit_scale_source: Option<String>,
    /// The range of a measured `b_crit_scale` (the ratios' interval ends), where it has one;
    /// absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    b_crit_scale_range: Option<[f64; 2]>,
    b_crit: f64,
    /// The interval of `b_crit` at this point (the estimate's confidence interval times
    /// `b_crit_scale`, or its ends times the ends of `b_crit_scale_range` where there is one,
    /// as the explorer's title gives it; in `b_crit`'s units: the model's sequences; the upper
    /// end `null` when unbounded); `null` for a published law.
    b_crit_interval: Option<(f64, Option<f64>)>,
    /// The training loss the run recorded at this point (`null` when none).
    loss: Option<f64>,
    /// The batch the run uses now (samples): the session's `current_batch`, else the batch a
    /// measured run's last two points imply (`current_batch_inferred`); the explorer's ▼.
    current_batch: Option<u64>,
    /// Whether `current_batch` was inferred from the run rather than written in the session.
    current_batch_inferred: bool,
    /// The best cell at `current_batch` (the fastest layout there), when that batch is on the
    /// grid and runs: the explorer's "your batch … goodput …".
    current: Option<CellOut>,
    /// Goodput of `best_overall` over `current`, minus 1 (0.12: 12 % more; the explorer's
    /// "best has +12 % goodput over yours").
    gain_over_current: Option<f64>,
    /// The Recommendation panel's reasons, as it words them.
    reasons: Vec<String>,
    /// The best cell among those listed (the layouts `--filter` keeps; every layout without
    /// one).
    best: Option<CellOut>,
    /// The best cell of every layout, filtered out or not.
    best_overall: Option<CellOut>,
    /// The `--filter` the cells were chosen by, as given.
    filter: Option<String>,
    cells: Vec<CellOut>,
    /// What the predictions leave out for this model, one sentence each (empty for most),
    /// and the caveats of the calibration and of command-line overrides.
    caveats: Vec<String>,
    /// The calibration the throughputs use (`null`: the hardware profile's efficiencies).
    calibration: Option<super::calibration_in_force::CalibrationUsed>,
    /// The micro-batch sizes (samples) each cell's fastest choice is taken among: the
    /// session's `search.micro_batches` (`predict --mbs auto` searches every divisor of a
    /// replica's batch up to 64, so it can find a faster one).
    micro_batches_searched: Vec<u32>,
    /// Batches (samples) on the grid that the session's `search.batch_sizes` does not list:
    /// the nearest multiples of the GPU count, added so that a batch divides over the
    /// data-parallel ranks (as `plan`'s `added_batches`); empty when none was added.
    added_batches: Vec<u64>,
}

/// Run `copus grid`.
pub fn run(a: &GridArgs) -> anyhow::Result<()> {
    let mut resolved = super::scenario_args::resolve(
        &a.session,
        a.calibration.as_deref(),
        a.stack.stack().as_ref(),
        &a.scenario,
    )?;
    a.whatif
        .apply(&mut resolved, super::whatif_args::Command::Grid)?;
    let converted = a
        .branches
        .apply(&mut resolved, a.whatif.b_crit_scale.is_some())?;
    resolved.override_notes.extend(converted);
    crate::pipeline::adopt_run_calibration(&mut resolved)?;
    let (calibration, calibration_caveats) =
        super::calibration_in_force::of_session(&resolved, a.calibration.as_deref());
    let (traj, sequence_note) = load_trajectory_noted(&resolved)?;
    let measured = matches!(
        resolved.session.source,
        crate::session::DataSource::Stats { .. } | crate::session::DataSource::Dumps { .. }
    );
    let mut opening_note = None;
    let point = match a.at {
        // Where the explorer opens: the session's saved cursor (the first point unless saved
        // elsewhere), a recorded run's latest point with a bounded interval.
        None => {
            let cursor = resolved.session.view.cursor;
            let last = traj.points.len().saturating_sub(1);
            let at = match traj.latest_bounded() {
                Some(b) if measured && cursor == usize::MAX && b < last => {
                    opening_note = Some(format!(
                        "step {}: the run's latest point whose B_crit interval is bounded, \
                         where the explorer opens (the {} points after it are open above; \
                         --at {} for the last)",
                        traj.points[b].step,
                        last - b,
                        traj.points[last].step
                    ));
                    b
                }
                _ => cursor.min(last),
            };
            traj.points.get(at)
        }
        Some(at) => {
            let measured = !matches!(
                resolved.session.source,
                crate::session::DataSource::Scenario(_)
            );
            let p = point_at(&traj.points, at, measured)?;
            opening_note = snapped_note(at, p);
            Some(p)
        }
    }
    .with_context(|| format!("{}: the trajectory has no points", a.session.display()))?;
    let s = &resolved.session;
    let cluster = resolved.cluster();
    let eff = resolved.efficiency();
    let ctx = resolved.perf_context(&eff);
    let table = throughput_table(&ctx, &cluster, &s.search);
    let b_noise = point.b_crit * s.b_crit_scale;
    // A critical batch below one sequence (a data-scaling law at 0 tokens) rates every batch
    // at an efficiency of about 0: the "best" cell then means nothing, and the user is told.
    let zero_b_crit = (!(b_noise.is_finite() && b_noise >= 1.0)).then(|| {
        format!(
            "B_crit is {} of the model's sequences ({} tokens) at step {} ({} tokens), below \
             one sequence: every batch's statistical efficiency is about 0 there, so the best \
             cell means little; choose a later point with --at",
            crate::format::count(b_noise),
            crate::format::tokens(b_noise * f64::from(resolved.model.seq_len)),
            point.step,
            crate::format::tokens(point.tokens)
        )
    });
    // A measured run's estimate with no upper bound at this step (|G|² lost in the noise) can
    // read any B_crit: the grid is computed on it, but the user is told.
    // In the unit of the B_crit line below it (the model's sequences).
    let word = crate::format::sample_word(resolved.model.seq_len);
    let unbounded = point.ci.filter(|(_, hi)| !hi.is_finite()).map(|(lo, _)| {
        format!(
            "B_crit at step {} has a 95 % interval [{}, ∞) {word}: |G|² is not told apart from \
             zero there, so the estimate ({}) can read anything and the best cell with it; \
             choose a step where it is bounded with --at, or read the run-wide value (`copus \
             analyze`)",
            point.step,
            whole_or_count(lo),
            whole_or_count(point.b_crit)
        )
    });
    // A measured point without any interval (one record, or too few for one) cannot be
    // judged either: said as the unbounded one is (a one-record file gave a best cell and
    // only the default-model caveat).
    let unbounded = unbounded.or_else(|| {
        (measured && point.ci.is_none()).then(|| {
            let last = traj.points.last().is_none_or(|p| p.step <= point.step);
            format!(
                "B_crit at step {} has no interval: the steps up to it are too few to bound \
                 it, so the estimate ({}) can read anything and the best cell with it; {}",
                point.step,
                whole_or_count(point.b_crit),
                if last {
                    "the run needs more steps before its estimate can be read"
                } else {
                    "choose a later step with --at, or read the run-wide value (`copus analyze`)"
                }
            )
        })
    });
    let grid = crate::pipeline::session_grid(&resolved, &table, b_noise);
    let nb = table.batches.len();
    let filter = match &a.filter {
        Some(text) => crate::app::filter::parse(text)
            .map_err(|e| super::FlagValueError(format!("--filter: {e}")))?,
        None => None,
    };
    let keep: Vec<usize> = (0..table.layouts.len())
        .filter(|&r| filter.as_ref().is_none_or(|f| f.matches(&table.layouts[r])))
        .collect();
    if keep.is_empty() {
        anyhow::bail!(
            "--filter '{}': none of the grid's {} layouts matches (they are {})",
            a.filter.as_deref().unwrap_or_default(),
            table.layouts.len(),
            table
                .layouts
                .iter()
                .map(|l| l.label())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let best_kept = grid.best_among(&keep);
    let caveats: Vec<String> = crate::perf::caveats(&resolved.model)
        .into_iter()
        .chain(calibration_caveats)
        .chain(resolved.notes())
        .chain(resolved.framework_caveats())
        .chain(super::cbs::session_branches_problem(&resolved))
        .chain(sequence_note)
        .chain(zero_b_crit)
        .chain(unbounded)
        .collect();
    let choices = crate::perf::enumerate::Choices {
        micro_batches: &s.search.micro_batches,
        zero: &s.search.zero,
        recompute: &s.search.recompute,
        interleave: &s.search.interleave,
        expert_parallel: &s.search.expert_parallel,
    };
    if let Some(batch) = a.rank {
        let col = table
            .batches
            .iter()
            .position(|&b| b == batch)
            .ok_or_else(|| {
                super::FlagValueError(format!(
                    "--rank {batch}: not a batch of the grid; its batches are {}",
                    list_of(&table.batches)
                ))
            })?;
        let ranked = crate::app::ranked::ranked_at(&table, &grid, col, Some(&keep))
            .context("--rank: no such column")?;
        let stack = resolved.stack().to_json();
        // For each layout that cannot run, the nearest configuration on the same GPUs that
        // does (as `predict`'s "fits instead" and the grid's JSON cells give it).
        let nearest: Vec<Option<crate::perf::explain::NearestChange>> = ranked
            .cannot_run
            .iter()
            .map(|r| {
                crate::goodput::moe_floor_problem(&ctx, batch)
                    .is_none()
                    .then(|| {
                        crate::perf::explain::nearest_change(
                            &ctx,
                            r.layout,
                            batch,
                            &choices,
                            s.search.allow_cross_node_tp,
                        )
                    })
                    .flatten()
            })
            .collect();
        if a.json {
            // The ranking's fields with what every other output has beside them: the stack,
            // the calibration in force, the caveats and the trajectory point.
            let mut v = serde_json::to_value(&ranked)?;
            if let Some(refused) = v.get_mut("cannot_run").and_then(|c| c.as_array_mut()) {
                for (r, n) in refused.iter_mut().zip(&nearest) {
                    if let Some(o) = r.as_object_mut() {
                        o.insert("nearest_change".into(), serde_json::to_value(n)?);
                    }
                }
            }
            if let Some(o) = v.as_object_mut() {
                o.insert("stack".into(), serde_json::to_value(&stack)?);
                o.insert("calibration".into(), serde_json::to_value(&calibration)?);
                o.insert("caveats".into(), serde_json::to_value(&caveats)?);
                o.insert("step".into(), point.step.into());
                o.insert("b_crit".into(), grid.b_crit.into());
                o.insert("seq_len".into(), resolved.model.seq_len.into());
                // As the grid's JSON: the filter the layouts were chosen by (`null`: all).
                o.insert("filter".into(), serde_json::to_value(&a.filter)?);
            }
            return super::write_json(&v);
        }
        let mut text = format!("stack: {}\n", stack.label);
        if let Some(c) = &calibration {
            text.push_str(&super::calibration_in_force::text_lines(c));
        }
        for c in &caveats {
            text.push_str(&crate::format::wrap_labelled("note: ", c));
        }
        // The layouts the filter keeps, said as the grid says it (the counts below are theirs).
        let which = match &a.filter {
            Some(f) => format!(
                "the layouts matching '{}' ({} of {})",
                super::escape_controls(f),
                keep.len(),
                table.layouts.len()
            ),
            None => "layouts".to_string(),
        };
        text.push_str(&format!(
            "step {} ({} tokens): B_crit {:.0} {}{}; {which} at batch {batch}, fastest first\n",
            point.step,
            crate::format::tokens(point.tokens),
            grid.b_crit,
            crate::format::sample_word(resolved.model.seq_len),
            match resolved.model.seq_len {
                0 | 1 => String::new(),
                seq => format!(" of {seq} tokens"),
            },
        ));
        for (_, line) in crate::app::ranked::text_lines(&ranked, crate::app::ranked::WIDE_COLUMNS) {
            text.push_str(&line);
            text.push('\n');
        }
        let fixes: Vec<String> = ranked
            .cannot_run
            .iter()
            .zip(&nearest)
            .filter_map(|(r, n)| {
                let n = n.as_ref()?;
                Some(format!(
                    "  {:<20} {} ({} tokens/s)",
                    r.layout.label(),
                    n.changes.join(", "),
                    crate::format::si(n.prediction.tokens_per_s)
                ))
            })
            .collect();
        if !fixes.is_empty() {
            text.push_str("nearest change that runs, on the same GPUs:\n");
            for f in fixes {
                text.push_str(&f);
                text.push('\n');
            }
        }
        return super::write_stdout(&text);
    }
    let objective = crate::pipeline::heatmap_efficiency(&resolved);
    let cell_out = |i: usize| {
        let (l, b) = (i / nb, i % nb);
        let base = CellOut {
            layout: table.layouts[l].label(),
            batch: table.batches[b],
            feasible: false,
            tokens_per_s: None,
            mfu: None,
            stat_eff: grid.stat_eff[b],
            goodput: grid.goodput[i],
            diverges: objective.is_some_and(|e| e.diverges(table.batches[b] as f64, grid.b_crit)),
            config: None,
            parallel: None,
            step_time_s: None,
            breakdown: None,
            memory_per_gpu_bytes: None,
            memory: None,
            memory_parts: None,
            reason: None,
            exposed_comm_share: None,
            bubble_share: None,
            fragmentation_risk: None,
            host_bound_risk: None,
            nearest_change: None,
            over_by_bytes: None,
        };
        match &table.cells[i] {
            TableCell::Feasible { config, prediction } => {
                let micro_batches =
                    table.batches[b] / (config.dp as u64 * config.mbs as u64).max(1);
                let memory = crate::perf::memory::peak_memory(
                    &resolved.model,
                    config,
                    micro_batches,
                    resolved.hardware.reserved_bytes,
                    &eff,
                );
                CellOut {
                    feasible: true,
                    tokens_per_s: Some(prediction.tokens_per_s),
                    mfu: Some(prediction.mfu),
                    config: Some(config.into()),
                    parallel: Some(*config),
                    step_time_s: Some(prediction.step_time_s),
                    exposed_comm_share: Some(crate::perf::explain::comm_share(prediction)),
                    bubble_share: Some(crate::perf::explain::bubble_share(prediction)),
                    fragmentation_risk: Some(
                        crate::perf::memory::logits_room(
                            &resolved.model,
                            config,
                            (micro_batches, resolved.hardware.reserved_bytes),
                            &eff,
                            resolved.hardware.hbm_bytes,
                        )
                        .risk,
                    ),
                    host_bound_risk: Some(crate::perf::may_be_host_bound(
                        &eff,
                        prediction,
                        micro_batches,
                        crate::perf::memory::stage_layers(&resolved.model, config.pp).0,
                    )),
                    breakdown: Some(prediction.breakdown),
                    memory_per_gpu_bytes: Some(prediction.memory_per_gpu_bytes),
                    memory: Some(memory),
                    memory_parts: Some(
                        crate::perf::explain::memory_parts(config, &eff, &resolved.model, &memory)
                            .into_iter()
                            .map(|p| (p.key, crate::perf::memory::WholeBytes(p.value)))
                            .collect(),
                    ),
                    ..base
                }
            }
            TableCell::Infeasible(why) => {
                let layout = table.layouts[l];
                // Below the MoE batch floor no layout helps (the reason names the floor).
                let nearest_change = crate::goodput::moe_floor_problem(&ctx, table.batches[b])
                    .is_none()
                    .then(|| {
                        crate::perf::explain::nearest_change(
                            &ctx,
                            layout,
                            table.batches[b],
                            &choices,
                            s.search.allow_cross_node_tp,
                        )
                    })
                    .flatten();
                // What the explorer's `x` shows for it: the searched configuration that comes
                // closest, its step time and memory by part.
                let closest =
                    crate::perf::explain::closest_miss(&ctx, layout, table.batches[b], &choices);
                let base = match closest {
                    Some(x) => {
                        let memory = crate::perf::memory::peak_memory(
                            &resolved.model,
                            &x.config,
                            x.micro_batches,
                            resolved.hardware.reserved_bytes,
                            &eff,
                        );
                        CellOut {
                            config: Some((&x.config).into()),
                            step_time_s: Some(x.prediction.step_time_s),
                            breakdown: Some(x.prediction.breakdown),
                            memory_per_gpu_bytes: Some(x.prediction.memory_per_gpu_bytes),
                            memory: Some(memory),
                            memory_parts: Some(
                                x.memory
                                    .iter()
                                    .map(|p| (p.key, crate::perf::memory::WholeBytes(p.value)))
                                    .collect(),
                            ),
                            over_by_bytes: Some(
                                (x.prediction.memory_per_gpu_bytes - x.capacity_bytes).max(0.0),
                            ),
                            ..base
                        }
                    }
                    None => base,
                };
                CellOut {
                    reason: Some(why.clone()),
                    nearest_change,
                    ..base
                }
            }
        }
    };
    // The Recommendation panel's figures: the current batch's best cell and the gain over it.
    let written_batch = s.current_batch;
    let current_batch = resolved.current_batch(&traj);
    let current_col = current_batch.and_then(|c| table.batches.iter().position(|&b| b == c));
    let mut caveats = caveats;
    caveats.extend(opening_note);
    if let (Some(b), None) = (current_batch, current_col) {
        // Said rather than dropped: no cell to compare the best with.
        let whose = if written_batch.is_some() {
            "the session's current batch"
        } else {
            "the run's batch"
        };
        caveats.push(format!(
            "{whose} {b} (sequences of {} tokens) is not one of the grid's batches ({}): no \
             current cell to compare with; --current-batch picks one of them",
            resolved.model.seq_len,
            list_of(&table.batches)
        ));
    }
    let units = crate::app::recommend::Units::of(&resolved);
    let recommendation = crate::app::recommend::recommend(&table, &grid, current_col, units);
    let current = current_col.and_then(|col| {
        crate::app::recommend::best_in_column(&grid, nb, col).map(|row| cell_out(row * nb + col))
    });
    let out = GridOut {
        session: s.name.clone(),
        seq_len: resolved.model.seq_len,
        stack: resolved.stack().to_json(),
        step: point.step,
        tokens: point.tokens,
        b_crit_estimate: point.b_crit,
        b_crit_scale: s.b_crit_scale,
        b_crit_scale_source: s.planner.b_crit_scale_source.clone(),
        b_crit_scale_range: s.planner.b_crit_scale_range,
        b_crit: grid.b_crit,
        // The factor's range widens the interval, as the explorer's title (it was B_simple's
        // interval times the factor alone: about 5× too narrow on each side for a measured
        // conversion).
        b_crit_interval: point.ci.map(|(lo, hi)| {
            let [lo_f, hi_f] = s
                .planner
                .b_crit_scale_range
                .unwrap_or([s.b_crit_scale, s.b_crit_scale]);
            (lo * lo_f, hi.is_finite().then_some(hi * hi_f))
        }),
        loss: point.loss,
        current_batch,
        current_batch_inferred: written_batch.is_none() && current_batch.is_some(),
        current,
        gain_over_current: recommendation.as_ref().and_then(|r| r.gain),
        reasons: recommendation.map(|r| r.reasons).unwrap_or_default(),
        best: best_kept.map(|(l, b)| cell_out(l * nb + b)),
        best_overall: grid.best.map(|(l, b)| cell_out(l * nb + b)),
        filter: a.filter.clone(),
        cells: keep
            .iter()
            .flat_map(|&l| (0..nb).map(move |b| l * nb + b))
            .map(cell_out)
            .collect(),
        caveats,
        calibration,
        micro_batches_searched: s.search.micro_batches.clone(),
        added_batches: table
            .batches
            .iter()
            .copied()
            .filter(|b| !s.search.batch_sizes.contains(b))
            .collect(),
    };
    if a.json {
        super::write_json(&out)?;
    } else {
        print_text(&out, resolved.model.seq_len);
    }
    Ok(())
}

/// The grid as text; `seq_len` is the model's tokens per sequence (the unit of `b_crit` and of
/// the batches).
fn print_text(o: &GridOut, seq_len: u32) {
    println!("{}", super::escape_controls(&o.session));
    println!(
        "stack: {} · micro-batches searched: {}",
        o.stack.label,
        list_of(&o.micro_batches_searched)
    );
    if let Some(c) = &o.calibration {
        print!("{}", super::calibration_in_force::text_lines(c));
    }
    for c in &o.caveats {
        print!("{}", crate::format::wrap_labelled("note: ", c));
    }
    if !o.added_batches.is_empty() {
        // As `plan` says it.
        print!(
            "{}",
            crate::format::line_labelled(
                "batch axis: ",
                &format!(
                    "the session's batch_sizes and {} (samples), the nearest multiples of the \
                     GPU count, so that a batch divides over the data-parallel ranks",
                    list_of(&o.added_batches)
                ),
            )
        );
    }
    // In the model's sequences (a run's samples may be shorter: the explorer's title counts
    // those, and the tokens agree).
    print!(
        "{}",
        crate::format::wrap_labelled(
            "",
            &format!(
                "step {} ({} tokens): B_crit {} sequences of {seq_len} tokens ({} tokens; \
                 estimate {} × scale {})",
                o.step,
                crate::format::tokens(o.tokens),
                whole_or_count(o.b_crit),
                crate::format::tokens(o.b_crit * f64::from(seq_len)),
                whole_or_count(o.b_crit_estimate),
                scale_words(o.b_crit_scale, o.b_crit_scale_range)
            )
        )
    );
    if let Some(source) = &o.b_crit_scale_source {
        print!("{}", crate::format::wrap_labelled("B_crit scale: ", source));
    }
    let shown = |label: &str, b: &CellOut| {
        let text = format!(
            "{} at batch {}: {:.0} tokens/s × efficiency {:.3} = goodput {:.0} tokens/s ({})",
            b.layout,
            b.batch,
            b.tokens_per_s.unwrap_or(0.0),
            b.stat_eff,
            b.goodput.unwrap_or(0.0),
            b.parallel.map(|c| c.to_string()).unwrap_or_default()
        );
        print!(
            "{}",
            crate::format::line_labelled(&format!("{label}: "), &text)
        );
    };
    let label = match &o.filter {
        Some(f) => format!(
            "best of the layouts matching '{}'",
            super::escape_controls(f)
        ),
        None => "best".to_string(),
    };
    match &o.best {
        Some(b) => shown(&label, b),
        None => println!(
            "{label}: none: no configuration has a positive finite goodput at any batch size"
        ),
    }
    if let (Some(_), Some(all)) = (&o.filter, &o.best_overall)
        && o.best
            .as_ref()
            .is_none_or(|b| b.layout != all.layout || b.batch != all.batch)
    {
        shown("best of every layout", all);
    }
    if let Some(c) = &o.current {
        let whose = if o.current_batch_inferred {
            "the run's batch"
        } else {
            "current batch"
        };
        shown(whose, c);
        if let Some(g) = o.gain_over_current {
            println!("best has {:+.1}% goodput over it", g * 100.0);
        }
    }
    if o.cells.iter().any(|c| c.mfu.is_some_and(|m| m > 1.0)) {
        println!(
            "MFU is against the dense BF16 peak whatever the precision: FP8 GEMMs take it past \
             100 %"
        );
    }
    print!("{}", cell_table(&o.cells));
}

/// The table of cells: one row each (layout, batch, tokens/s, MFU, statistical efficiency,
/// goodput, and the configuration or why none runs). On a terminal narrower than the usual
/// text width the number columns are narrower, the configuration leaves out the layout the
/// row starts with, and an infeasible cell's reason goes on lines of its own under the row.
fn cell_table(cells: &[CellOut]) -> String {
    use std::fmt::Write as _;
    let narrow = crate::format::narrow_text();
    let w = if narrow { 9 } else { 12 };
    let mut out = String::new();
    let last = if narrow {
        "options / reason"
    } else {
        "configuration / reason"
    };
    let _ = writeln!(
        out,
        "{:<16} {:>6} {:>w$} {:>6} {:>7} {:>w$}  {last}",
        "layout", "batch", "tokens/s", "MFU", "eff", "goodput"
    );
    for c in cells {
        let configuration = |cfg: crate::perf::ParallelConfig| {
            let text = cfg.to_string();
            match text.strip_prefix(&format!("{} ", c.layout)) {
                Some(rest) if narrow => rest.to_string(),
                _ => text,
            }
        };
        match (c.tokens_per_s, c.goodput, c.parallel) {
            (Some(t), Some(_), Some(cfg)) if c.diverges => {
                let row = format!(
                    "{:<16} {:>6} {:>w$.0} {:>5.1}% {:>7.3} {:>w$}  {}",
                    c.layout,
                    c.batch,
                    t,
                    c.mfu.unwrap_or(0.0) * 100.0,
                    c.stat_eff,
                    "diverges",
                    configuration(cfg)
                );
                let why = "(the √-scaled learning rate diverges at this batch: scored at the \
                           planner's floor)";
                if narrow {
                    let _ = writeln!(out, "{row}");
                    out.push_str(&crate::format::wrap_labelled("    ", why));
                } else {
                    let _ = writeln!(out, "{row} {why}");
                }
            }
            (Some(t), Some(g), Some(cfg)) => {
                let _ = writeln!(
                    out,
                    "{:<16} {:>6} {:>w$.0} {:>5.1}% {:>7.3} {:>w$.0}  {}",
                    c.layout,
                    c.batch,
                    t,
                    c.mfu.unwrap_or(0.0) * 100.0,
                    c.stat_eff,
                    g,
                    configuration(cfg)
                );
            }
            _ => {
                let row = format!(
                    "{:<16} {:>6} {:>w$} {:>6} {:>7.3} {:>w$}  infeasible",
                    c.layout, c.batch, "-", "-", c.stat_eff, "-",
                );
                let reason = c.reason.as_deref().unwrap_or("");
                if narrow {
                    let _ = writeln!(out, "{row}");
                    out.push_str(&crate::format::wrap_labelled("    ", reason));
                } else {
                    let _ = writeln!(out, "{row}: {reason}");
                }
            }
        }
    }
    out
}

/// `1, 2, 4` for a list of sizes (micro-batches, batches).
fn list_of<T: std::fmt::Display>(sizes: &[T]) -> String {
    sizes
        .iter()
        .map(T::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// `x` as a whole number where it is at least 10 (`1342`), else to two decimals (`0.33`):
/// a B_crit below one sequence is not printed as 0.
fn whole_or_count(x: f64) -> String {
    if x.abs() >= 10.0 {
        format!("{x:.0}")
    } else {
        crate::format::count(x)
    }
}

/// A B_crit scale as text: three digits, with its range where it was measured with one
/// ("0.360 [0.159–0.926]"; it printed 0.3602868644075818).
fn scale_words(factor: f64, range: Option<[f64; 2]>) -> String {
    let factor_text = crate::format::factor(factor);
    match range {
        Some([lo, hi]) => format!(
            "{factor_text} [{}–{}]",
            crate::format::significant(lo, 3),
            crate::format::significant(hi, 3)
        ),
        None => factor_text,
    }
}
