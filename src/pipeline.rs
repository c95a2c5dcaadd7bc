//! Running a resolved session through the layers below it: its data source loaded
//! ([`crate::source`]) and planned ([`crate::plan`]). This is the one place that reads a
//! [`Resolved`] session's fields for loading and planning, so that `source` and `plan` take
//! plain values and do not depend on [`crate::session`].

use crate::goodput::{self, ThroughputTable};
use crate::perf;
use crate::plan::costs::ReconfigCosts;
use crate::plan::objective::{Efficiency, Objective};
use crate::plan::problem::Problem;
use crate::plan::problem::ProblemError;
use crate::plan::progress::ProgressError;
use crate::plan::progress::{self, TokenAxis};
use crate::plan::report::{
    BCritConversion, PlanReport, ScheduleRun, StrategyRow, SwitchRow, state_json, state_label,
};
use crate::plan::strategies::{self, StrategyParams, StrategyResult};
use crate::plan::{horizon, shares};
use crate::session::{DataSource, Resolved};
use crate::source::scenario::BCritKind;
use crate::source::{Loaded, SourceError, dump, measured};
use crate::trajectory::Trajectory;
use std::path::Path;
use std::path::PathBuf;

/// Load a resolved session's data source on the CPU, without progress reports.
pub fn load(resolved: &Resolved) -> Result<Loaded, SourceError> {
    load_with(resolved, crate::compute::Device::Cpu, &|_| {})
}

/// Load a resolved session's data source; gradient dumps are reduced on `device` (auto falls
/// back to the CPU with a note) and report their progress.
pub fn load_with(
    resolved: &Resolved,
    device: crate::compute::Device,
    progress: &dyn Fn(dump::Progress),
) -> Result<Loaded, SourceError> {
    let loaded = load_source(resolved, device, progress)?;
    check_scaled_b_crit(resolved, &loaded)?;
    Ok(loaded)
}

/// Smallest median B_crit × `b_crit_scale` accepted, samples: below it every efficiency
/// of the grid rounds to 0 and the planner ranks nothing but the smallest batch.
pub const MIN_SCALED_B_CRIT: f64 = 1e-2;
/// Largest median B_crit × `b_crit_scale` accepted, samples.
pub const MAX_SCALED_B_CRIT: f64 = 1e15;

/// The session's `b_crit_scale` must leave the trajectory's median B_crit (in the model's
/// sequences) within [`MIN_SCALED_B_CRIT`, `MAX_SCALED_B_CRIT`]; a single odd point of a
/// measured run does not count, the median does.
fn check_scaled_b_crit(resolved: &Resolved, loaded: &Loaded) -> Result<(), SourceError> {
    let traj = &loaded.trajectory;
    let scale = resolved.session.b_crit_scale;
    let in_seqs = traj.in_sequences_of(resolved.model.seq_len);
    let mut b: Vec<f64> = in_seqs
        .points
        .iter()
        .map(|p| p.b_crit)
        .filter(|b| b.is_finite() && *b > 0.0)
        .collect();
    b.sort_by(f64::total_cmp);
    let median = b.get(b.len() / 2).map(|m| m * scale);
    if median.is_none_or(|m| (MIN_SCALED_B_CRIT..=MAX_SCALED_B_CRIT).contains(&m)) && !b.is_empty()
    {
        return Ok(());
    }
    // A measured run whose analysis found no noise (one gradient in every set, say) says why
    // better than the conversion factor or an empty timeline does.
    if let Some(reason) = loaded
        .analysis
        .as_ref()
        .filter(|a| a.summary.verdict == crate::stats::Verdict::Unreliable)
        .and_then(|a| a.summary.reasons.first())
    {
        let median = median.map_or_else(
            || "no positive B_simple at any step".to_string(),
            |m| format!("median {m:.3e} samples"),
        );
        return Err(SourceError::Unsupported(format!(
            "{}: no step gives a usable B_crit ({median}): {}; {}",
            resolved.session.source.path_label(),
            reason.message,
            reason.action
        )));
    }
    let Some(median) = median else {
        return Ok(());
    };
    Err(SourceError::Unsupported(format!(
        "{}: b_crit_scale {scale}: the median B_crit becomes {median:.3e} samples, outside \
         {MIN_SCALED_B_CRIT}..{MAX_SCALED_B_CRIT:.0e}: every batch's efficiency would round to \
         {} and the plan would mean nothing; check the conversion factor",
        resolved.error_path().display(),
        if median < MIN_SCALED_B_CRIT { 0 } else { 1 }
    )))
}

fn load_source(
    resolved: &Resolved,
    device: crate::compute::Device,
    progress: &dyn Fn(dump::Progress),
) -> Result<Loaded, SourceError> {
    let seq_len = resolved.model.seq_len;
    match &resolved.session.source {
        DataSource::Scenario(s) => {
            let trajectory = s
                .trajectory(seq_len)
                .map_err(|source| SourceError::Scenario {
                    path: resolved.error_path(),
                    source,
                })?;
            Ok(Loaded {
                trajectory,
                analysis: None,
                seed_ema: Vec::new(),
                note: None,
                calibration: None,
                warning: None,
            })
        }
        DataSource::Stats {
            path,
            seq_len: given,
        } => {
            let file = resolved.resolve_path(path);
            missing_source(resolved, path, &file)?;
            wrong_kind_of_source(resolved, path, &file, false)?;
            let (trajectory, report, origin, timed) =
                measured::load_stats_file(&file, &resolved.session.estimator, *given, seq_len)
                    .map_err(|e| pipe_error(resolved, path, &file, e))?;
            let ratio = f64::from(trajectory.seq_len) / f64::from(seq_len.max(1));
            if origin == measured::SeqLenOrigin::Inferred
                && !(1.0 / crate::source::MAX_SEQ_LEN_MISMATCH
                    ..=crate::source::MAX_SEQ_LEN_MISMATCH)
                    .contains(&ratio)
            {
                return Err(SourceError::SeqLenMismatch {
                    path: file,
                    run: trajectory.seq_len,
                    model: resolved.model.name.clone(),
                    model_seq: seq_len,
                });
            }
            let mut note = measured::seq_len_note(trajectory.seq_len, origin);
            if origin == measured::SeqLenOrigin::Given
                && let Some(n) =
                    measured::token_rescale_note(trajectory.seq_len, report.summary.seq_len)
            {
                note = format!("{note} · {n}");
            }
            if !trajectory.counts_in(seq_len) {
                note = format!(
                    "{note} · B_crit counted in {}'s sequences of {seq_len} tokens at equal \
                     tokens",
                    resolved.model.name
                );
            }
            Ok(Loaded {
                trajectory,
                analysis: Some(report),
                seed_ema: Vec::new(),
                note: Some(note),
                calibration: calibrate_run(resolved, &timed),
                warning: None,
            })
        }
        DataSource::Dumps {
            path,
            samples,
            seed_ema,
            seq_len: given,
        } => {
            let dir = resolved.resolve_path(path);
            missing_source(resolved, path, &dir)?;
            wrong_kind_of_source(resolved, path, &dir, true)?;
            let selected = crate::compute::select(device)?;
            let d = measured::load_dump_dir(
                &dir,
                *samples,
                seed_ema.then_some(measured::SEED_EMA_DECAY),
                selected.backend.as_ref(),
                &resolved.session.estimator,
                given.unwrap_or(seq_len),
                progress,
            )?;
            let origin = if given.is_some() {
                measured::SeqLenOrigin::Given
            } else {
                measured::SeqLenOrigin::Assumed
            };
            let mut seq_note = measured::seq_len_note(d.trajectory.seq_len, origin);
            // First, so that a narrow source line still shows it.
            if let Some(s) = d.left_out.first() {
                seq_note = format!("newest step {} left out (incomplete) · {seq_note}", s.step);
            }
            if let Some(skipped) = crate::source::dump::skipped_note(&d.skipped_dirs) {
                seq_note = format!("{skipped} · {seq_note}");
            }
            Ok(Loaded {
                trajectory: d.trajectory,
                analysis: Some(d.report),
                seed_ema: d.seed_ema,
                note: Some(match selected.note {
                    Some(why) => format!(
                        "{seq_note} · reduced on {} · {why}",
                        selected.backend.name()
                    ),
                    None => format!("{seq_note} · reduced on {}", selected.backend.name()),
                }),
                calibration: None,
                warning: None,
            })
        }
        DataSource::Live { target, .. } => Err(SourceError::Unsupported(format!(
            "{}: source Live({target}): a live source is followed with `copus watch {target} \
             --session {}`, not opened or planned from the session",
            resolved.error_path().display(),
            resolved.error_path().display()
        ))),
    }
}

/// A session's `source.path` that names the wrong kind of thing (a directory as a stats file,
/// a file as a dump directory, a device): the error names the session and the field (it named
/// only the path: "copus: .: is a directory").
fn wrong_kind_of_source(
    resolved: &Resolved,
    written: &str,
    path: &std::path::Path,
    want_dir: bool,
) -> Result<(), SourceError> {
    let Ok(meta) = std::fs::metadata(path) else {
        return Ok(());
    };
    let kind = meta.file_type();
    let why = if want_dir && !kind.is_dir() {
        "not a directory: a dump is a directory of step_<N>/ folders (a stats file is \
         source: Stats(path: …))"
    } else if !want_dir && kind.is_dir() {
        "a directory, not a stats file (a gradient dump's directory is source: Dumps(path: …))"
    } else if !want_dir && !kind.is_file() && !is_fifo(&kind) {
        "not a regular file (a device or a socket cannot be read as a stats file)"
    } else {
        return Ok(());
    };
    Err(SourceError::Unsupported(format!(
        "{}: source.path \"{written}\": {why}",
        resolved.error_path().display()
    )))
}

/// A session's named pipe that could not be read: the error names the session and the field
/// too (it named only the pipe: "copus: fifo: a named pipe that gave no data within 5 s").
/// Other errors pass as they are.
fn pipe_error(
    resolved: &Resolved,
    written: &str,
    path: &std::path::Path,
    e: measured::MeasuredError,
) -> SourceError {
    let fifo = std::fs::metadata(path).is_ok_and(|m| is_fifo(&m.file_type()));
    if fifo && resolved.path.exists() {
        SourceError::Unsupported(format!(
            "{}: source.path \"{written}\": {e}",
            resolved.path.display()
        ))
    } else {
        e.into()
    }
}

/// Whether `kind` is a named pipe (a stats stream may come through one).
fn is_fifo(kind: &std::fs::FileType) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        kind.is_fifo()
    }
    #[cfg(not(unix))]
    {
        let _ = kind;
        false
    }
}

/// A session's `source.path` that names nothing: the error names the session and the field,
/// and where a relative path was looked for (the session's directory), not only the path.
pub(crate) fn missing_source(
    resolved: &Resolved,
    written: &str,
    file: &std::path::Path,
) -> Result<(), SourceError> {
    if file.exists() {
        return Ok(());
    }
    let relative = if Path::new(written).is_relative() {
        " (a relative path is read from the session's directory)"
    } else {
        ""
    };
    Err(SourceError::Unsupported(format!(
        "{}: source.path \"{written}\": No such file or directory{relative}",
        resolved.error_path().display(),
    )))
}

/// Where a session names no calibration and no efficiency model of its own and its source is
/// a stats file whose records carry step times and configurations, the model calibrated on
/// them, adopted as the explorer adopts it on loading the run (so that `grid` and `plan` on
/// the run give the explorer's numbers; the calibration's line names the run); whether it
/// was. A file without a `step_time_s` key is not read again.
pub fn adopt_run_calibration(resolved: &mut Resolved) -> Result<bool, SourceError> {
    if resolved.calibration.is_some() || resolved.session.efficiency.is_some() {
        return Ok(false);
    }
    let DataSource::Stats { path, .. } = &resolved.session.source else {
        return Ok(false);
    };
    let file = resolved.resolve_path(path);
    if !mentions(&file, b"\"step_time_s\"") {
        return Ok(false);
    }
    let Some(run) = load(resolved)?.calibration else {
        return Ok(false);
    };
    resolved.calibration = Some(run.file);
    resolved.use_calibration = true;
    resolved.calibration_from_run = true;
    Ok(true)
}

/// Whether the regular file at `path` holds `needle` anywhere (read in blocks until found;
/// false where it cannot be read or is no regular file: a FIFO or a device is left to the
/// loader, which says what it is).
fn mentions(path: &Path, needle: &[u8]) -> bool {
    use std::io::Read;
    if !std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
        return false;
    }
    let Ok(mut f) = std::fs::File::open(path) else {
        return false;
    };
    let finder = memchr::memmem::Finder::new(needle);
    let keep = needle.len().saturating_sub(1);
    let mut buf = vec![0u8; 1 << 20];
    let mut held = 0usize;
    loop {
        let n = match f.read(&mut buf[held..]) {
            Ok(0) | Err(_) => return false,
            Ok(n) => n,
        };
        let end = held + n;
        if finder.find(&buf[..end]).is_some() {
            return true;
        }
        // The last bytes may begin the needle: kept before the next block.
        let tail = end.saturating_sub(keep);
        buf.copy_within(tail..end, 0);
        held = end - tail;
    }
}

/// The performance model calibrated on a run's timed records (`step_time_s` with `config`),
/// for the session's hardware and model; `None` when there are too few.
fn calibrate_run(
    resolved: &Resolved,
    timed: &[crate::stats::StepStats],
) -> Option<crate::perf::run_calibration::RunCalibration> {
    let target = crate::perf::calibrate::Target {
        hw: &resolved.hardware,
        model: &resolved.model,
        gpus_per_node: resolved.session.cluster.gpus_per_node,
    };
    let search = &resolved.session.search;
    crate::perf::run_calibration::calibrate_run(
        timed,
        &target,
        &resolved.hardware.efficiency,
        search.zero.first().copied().unwrap_or(1),
        search
            .recompute
            .first()
            .copied()
            .unwrap_or(crate::perf::Recompute::Selective),
    )
}

/// The B_crit trajectory of a resolved session, before the session's B_crit scale, counted in
/// the model's sequences (what the goodput grid and the planner compare batches with; a
/// measured run's own samples may hold another number of tokens, see
/// [`Trajectory::in_sequences_of`]).
pub fn load_trajectory(resolved: &Resolved) -> Result<Trajectory, SourceError> {
    load_trajectory_noted(resolved).map(|(t, _)| t)
}

/// [`load_trajectory`] and, when the run's samples hold another number of tokens than the
/// model's sequences, [`sequence_conversion_note`] (a caveat for `grid` and `plan`).
pub fn load_trajectory_noted(
    resolved: &Resolved,
) -> Result<(Trajectory, Option<String>), SourceError> {
    let raw = load(resolved)?.trajectory;
    let note = sequence_conversion_note(&raw, &resolved.model);
    Ok((raw.in_sequences_of(resolved.model.seq_len), note))
}

/// What the grid and the planner do with a run whose samples are not the model's sequences:
/// its B_crit is carried over at equal tokens, which assumes the noise scale in tokens does
/// not depend on the sequence length. `None` when the lengths agree (or one is unknown).
pub fn sequence_conversion_note(
    raw: &Trajectory,
    model: &crate::perf::ModelProfile,
) -> Option<String> {
    if raw.counts_in(model.seq_len) {
        return None;
    }
    let ratio = f64::from(raw.seq_len) / f64::from(model.seq_len);
    Some(format!(
        "the run's samples are {} token{} and {}'s sequences {}: its B_crit is counted in the \
         model's sequences at equal tokens (× {}), which assumes the critical batch in tokens \
         does not change with the sequence length",
        raw.seq_len,
        if raw.seq_len == 1 { "" } else { "s" },
        model.name,
        model.seq_len,
        if ratio >= 0.01 {
            format!("{ratio:.3}")
        } else {
            format!("1/{:.0}", 1.0 / ratio)
        }
    ))
}

/// The per-sample efficiency the heatmap should weight by when the session's objective is not
/// McCandlish's: `lr-sqrt` at its reference batch (`planner.lr_reference_batch`, else
/// `current_batch`, else the scenario's `nominal_batch`); `None` for McCandlish (the session's
/// `stat_eff` form applies) or when no reference batch is known.
pub fn heatmap_efficiency(r: &Resolved) -> Option<Efficiency> {
    let planner = &r.session.planner;
    if planner.objective != Objective::LrSqrt {
        return None;
    }
    let nominal = match &r.session.source {
        DataSource::Scenario(s) => Some(s.nominal_batch),
        _ => None,
    };
    let b_ref = planner
        .lr_reference_batch
        .or(r.session.current_batch)
        .or(nominal)?;
    Some(Efficiency {
        objective: Objective::LrSqrt,
        reference_batch: b_ref as f64,
    })
}

/// The goodput grid of `table` at B_noise `b_noise` (the model's sequences), weighted as the
/// session asks: by [`heatmap_efficiency`] when the objective is not McCandlish's, else by the
/// session's `stat_eff` form. The one place the explorer and `copus grid` make this choice.
pub fn session_grid(r: &Resolved, table: &ThroughputTable, b_noise: f64) -> goodput::GoodputGrid {
    match heatmap_efficiency(r) {
        Some(e) => {
            goodput::GoodputGrid::with_efficiency(table, b_noise, &|x| e.stat_eff(x, b_noise))
        }
        None => goodput::GoodputGrid::at(table, b_noise, r.session.stat_eff),
    }
}

/// Why a session could not be planned.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The trajectory could not be produced.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// The trajectory could not be cut into phases.
    #[error("{path}: {source}")]
    Progress {
        /// Session file.
        path: PathBuf,
        /// What is wrong.
        source: ProgressError,
    },
    /// The planning instance is empty or malformed.
    #[error("{path}: {source}")]
    Problem {
        /// Session file.
        path: PathBuf,
        /// What is wrong.
        source: ProblemError,
    },
    /// No cell of the grid can run: nothing to plan, with why one of them cannot.
    #[error(
        "{path}: nothing to plan: no (layout, batch) cell of the grid can run (for example \
         {example}); more GPUs (--nodes), another model or a wider search (`copus grid` says why \
         each cell cannot)"
    )]
    NothingRuns {
        /// Session file.
        path: PathBuf,
        /// One cell's layout, batch and reason ("DP8·TP1·PP1 at batch 32: out of memory …").
        example: String,
    },
    /// The short horizon (`planner.target_loss`) cannot be applied.
    #[error("{path}: {source}")]
    Horizon {
        /// Session file.
        path: PathBuf,
        /// What is wrong.
        source: crate::plan::horizon::HorizonError,
    },
    /// A session value is out of range.
    #[error("{path}: {msg}")]
    Invalid {
        /// Session file.
        path: PathBuf,
        /// What is wrong.
        msg: String,
    },
}

/// Plan a resolved session: every strategy and the optimal switch points.
pub fn plan_session(r: &Resolved) -> Result<PlanReport, PlanError> {
    plan_session_cautioned(r).map(|(report, _, _)| report)
}

/// [`plan_session`] with the note of [`sequence_conversion_note`] and the cautions of a
/// measured run's switches ([`switch_cautions`]), one sentence each.
pub fn plan_session_cautioned(
    r: &Resolved,
) -> Result<(PlanReport, Option<String>, Vec<String>), PlanError> {
    plan_session_where(r, &|_| None)
}

/// [`plan_session_cautioned`] over only the configurations `refuse` accepts
/// ([`goodput::throughput_table_where`]): `plan --emit` plans within what the framework can
/// express.
pub fn plan_session_where(
    r: &Resolved,
    refuse: &dyn Fn(&crate::perf::ParallelConfig) -> Option<String>,
) -> Result<(PlanReport, Option<String>, Vec<String>), PlanError> {
    let loaded = load(r)?;
    let note = sequence_conversion_note(&loaded.trajectory, &r.model);
    let traj = loaded.trajectory.in_sequences_of(r.model.seq_len);
    let eff = r.efficiency();
    let ctx = r.perf_context(&eff);
    let table = goodput::throughput_table_where(&ctx, &r.cluster(), &r.session.search, refuse);
    let report = plan_with(r, &traj, &table)?;
    let cautions = switch_cautions(&report, &traj, loaded.analysis.as_ref());
    Ok((report, note, cautions))
}

/// What a measured run's plan rests on that the estimate does not support: an estimate whose
/// verdict is against it ([`estimate_caution`], first), a switch where B_crit's interval is unbounded above (the data do not bound the estimate it
/// follows), and one within a few steps after a learning-rate jump (a decay inflates B_simple
/// as 1/temperature, so the switch may follow the schedule rather than the noise scale). Empty
/// for a published scenario.
pub fn switch_cautions(
    report: &PlanReport,
    traj: &Trajectory,
    analysis: Option<&crate::stats::AnalyzeReport>,
) -> Vec<String> {
    let Some(analysis) = analysis else {
        return Vec::new();
    };
    let jumps: Vec<u64> = analysis
        .summary
        .diagnostics
        .iter()
        .filter(|d| d.kind == crate::stats::DiagnosticKind::LrChange)
        .flat_map(|d| d.at.iter().filter(|r| r[0] == r[1]).map(|r| r[0]))
        .collect();
    let steps = traj.points.last().map_or(0, |p| p.step);
    let near = (steps / 20).max(10);
    let mut out: Vec<String> = estimate_caution(analysis).into_iter().collect();
    for (k, s) in report.switches.iter().enumerate() {
        let Some(p) = traj.points.get(traj.index_at_tokens(s.at_tokens)) else {
            continue;
        };
        if let Some((lo, hi)) = p.ci
            && !hi.is_finite()
        {
            out.push(format!(
                "switch {} at step {} rests on a B_crit whose interval is unbounded above there \
                 ({} [{}–∞] {}): the data do not bound the estimate it follows",
                k + 1,
                s.at_step,
                crate::format::si(p.b_crit),
                crate::format::si(lo),
                // The unit the plan's switch line and the explorer name it in.
                crate::format::sample_word(traj.seq_len)
            ));
        }
        if let Some(j) = jumps
            .iter()
            .copied()
            .filter(|&j| j <= s.at_step && s.at_step - j <= near)
            .max()
        {
            out.push(format!(
                "switch {} at step {} follows the learning-rate change at step {j}: B_simple \
                 scales as 1/temperature (lr/B), so a decay inflates it and the switch may follow \
                 the schedule rather than the noise scale",
                k + 1,
                s.at_step
            ));
        }
    }
    out
}

/// What the analysis's verdict says against planning on the run, if anything: an
/// `unreliable` estimate (too few steps, |G|² not resolved, …) and a `noisy` one for another
/// reason than drift (a drifting B_crit is what a plan follows; its run-wide number is what the
/// drift warning is about). `plan` on a 3-step run printed a 1.84× speed-up without a word.
fn estimate_caution(analysis: &crate::stats::AnalyzeReport) -> Option<String> {
    use crate::stats::{DiagnosticKind, Verdict};
    let s = &analysis.summary;
    let reasons: Vec<String> = s
        .reasons
        .iter()
        .filter(|r| s.verdict == Verdict::Unreliable || r.kind != DiagnosticKind::Drift)
        .map(|r| format!("{} ({})", r.message, r.action))
        .collect();
    let verdict = match s.verdict {
        Verdict::Stable => return None,
        Verdict::Noisy if reasons.is_empty() => return None,
        Verdict::Noisy => "noisy",
        Verdict::Unreliable => "unreliable",
    };
    Some(format!(
        "the run's B_crit estimate is {verdict}: {}; every figure of this plan rests on it \
         (`copus analyze` on the run says more)",
        reasons.join("; ")
    ))
}

/// Plan over an already loaded trajectory (before the session's B_crit scale) and throughput
/// table — what the explorer calls, so that nothing is loaded or tabulated twice.
pub fn plan_with(
    r: &Resolved,
    traj: &Trajectory,
    table: &ThroughputTable,
) -> Result<PlanReport, PlanError> {
    let path = r.error_path();
    let costs: &ReconfigCosts = &r.session.costs;
    costs.validate().map_err(|msg| PlanError::Invalid {
        path: path.clone(),
        msg,
    })?;
    let axis = match &r.session.source {
        DataSource::Scenario(s) => TokenAxis::ReferenceBatch(s.nominal_batch as f64),
        _ => TokenAxis::FromSteps,
    };
    let planner = &r.session.planner;
    let cut = match planner.target_loss {
        Some(target) => {
            let window = planner.loss_window.unwrap_or(horizon::DEFAULT_LOSS_WINDOW);
            let (t, h) = horizon::cut_at_loss(traj, target, window).map_err(|source| {
                PlanError::Horizon {
                    path: path.clone(),
                    source,
                }
            })?;
            Some((t, h))
        }
        None => None,
    };
    // A measured run's own batch (from its token counts), as the explorer marks it, when the
    // session names none: the fixed-batch baseline is the batch the run trains with.
    let measured_batch = r.measured_batch(traj);
    let (traj, horizon) = match &cut {
        Some((t, h)) => (t, Some(h.clone())),
        None => (traj, None),
    };
    let phases = progress::phases(traj, axis, r.session.b_crit_scale).map_err(|source| {
        PlanError::Progress {
            path: path.clone(),
            source,
        }
    })?;
    let best_along = shares::best_along(heatmap_efficiency(r), r.session.stat_eff, table, &phases);
    let switch_costs = costs.switch_costs_on(perf::parameter_count(&r.model), fast_network_bw(r));
    let dwell = costs.min_dwell_phases as usize;
    let nominal = match &r.session.source {
        DataSource::Scenario(s) => Some(s.nominal_batch),
        _ => None,
    };
    let gbs = r.session.current_batch.or(nominal).or(measured_batch);
    let efficiency = match planner.objective {
        Objective::McCandlish => Efficiency::MCCANDLISH,
        Objective::LrSqrt => {
            let b_ref = planner
                .lr_reference_batch
                .or(gbs)
                .ok_or_else(|| PlanError::Invalid {
                    path: path.clone(),
                    msg: "objective lr-sqrt needs planner.lr_reference_batch, current_batch or a \
                      scenario's nominal_batch"
                        .into(),
                })?;
            Efficiency {
                objective: Objective::LrSqrt,
                reference_batch: b_ref as f64,
            }
        }
    };
    let mut problem =
        Problem::from_table(table, phases, switch_costs, dwell).map_err(|source| match source {
            ProblemError::NoStates => PlanError::NothingRuns {
                path: path.clone(),
                example: nothing_runs_example(table),
            },
            source => PlanError::Problem {
                path: path.clone(),
                source,
            },
        })?;
    if efficiency != Efficiency::MCCANDLISH {
        problem = Problem::with_efficiency(
            problem.phases,
            problem.states,
            switch_costs,
            dwell,
            efficiency,
        )
        .map_err(|source| PlanError::Problem { path, source })?;
    }
    let params = StrategyParams {
        switch_threshold: costs.switch_threshold,
        greedy_every: costs.greedy_every_phases.map_or(dwell, |g| g as usize),
        gbs,
    };
    let results = strategies::compare(&problem, &params);
    let mut report = build_report(r, traj, axis, table, &problem, &results);
    report.best_along = best_along;
    report.horizon = horizon;
    let at_current = r
        .session
        .current_batch
        .or(measured_batch)
        .and_then(|b| strategies::static_at_batch(&problem, b).map(|s| (b, s)));
    let whose = if r.session.current_batch.is_some() {
        "the session's current batch"
    } else {
        "the run's batch (from its token counts)"
    };
    if let Some((batch, s)) = at_current {
        let static_time = report.strategies.first().map_or(f64::NAN, |s| s.time_s);
        report.current_batch_static = Some(StrategyRow {
            name: format!("static@{batch}"),
            how: format!("best layout at {whose}, whole run"),
            time_s: s.time_s,
            speedup_vs_static: static_time / s.time_s,
            switches: 0,
            start: state_label(table, &problem, s.states[0]),
            start_state: state_json(table, &problem, s.states[0]),
        });
    }
    Ok(report)
}

/// One cell of `table` that cannot run, with why (the largest layout's at the largest batch:
/// the one most likely to run, so its reason is the binding one).
fn nothing_runs_example(table: &ThroughputTable) -> String {
    let nb = table.batches.len();
    // The last cell that cannot run and why, among those `keep` accepts.
    let example = |keep: &dyn Fn(&str) -> bool| {
        (0..table.layouts.len())
            .rev()
            .flat_map(|row| (0..nb).rev().map(move |col| (row, col)))
            .find_map(|(row, col)| match table.cells.get(row * nb + col)? {
                crate::goodput::TableCell::Infeasible(why) if keep(why) => Some(format!(
                    "{} at batch {}: {why}",
                    table.layouts[row].label(),
                    table.batches[col]
                )),
                _ => None,
            })
    };
    let Some(first) = example(&|_| true) else {
        return "the grid has no cells".to_string();
    };
    // A framework's limit on one cell can hide why the cells it does express fail (memory,
    // a batch that does not split): name one of those too.
    let limit = |why: &str| why.contains("cannot express");
    match example(&|why| !limit(why)) {
        Some(other) if limit(&first) => {
            format!("{first}; and where it can express the layout: {other}")
        }
        _ => first,
    }
}

/// Aggregate fast-network bandwidth of the cluster, bytes/s: every GPU at NVLink speed within
/// one node, at its inter-node NIC across nodes.
fn fast_network_bw(r: &Resolved) -> f64 {
    let c = &r.session.cluster;
    let per_gpu = if c.nodes > 1 {
        r.hardware.inter_bw_bytes_per_s
    } else {
        r.hardware.intra_bw_bytes_per_s
    };
    f64::from(c.nodes) * f64::from(c.gpus_per_node) * per_gpu
}

/// What the session's B_crit source measures and how it is converted.
fn b_crit_conversion(r: &Resolved) -> BCritConversion {
    let (kind, implied) = match &r.session.source {
        DataSource::Scenario(s) => (s.law.kind(), s.law.b_noise_factor()),
        _ => (BCritKind::NoiseScale, None),
    };
    let factor = r.session.b_crit_scale;
    let factor_source = r
        .session
        .planner
        .b_crit_scale_source
        .clone()
        .unwrap_or_else(|| {
            if (factor - 1.0).abs() < 1e-12 {
                "default: the source is used as B_noise unconverted".into()
            } else {
                "session b_crit_scale (no source given)".into()
            }
        });
    BCritConversion {
        kind: kind.name().into(),
        measures: kind.measures().into(),
        factor,
        factor_source,
        implied_factor: implied.map(|i| i.0),
        implied_because: implied.map(|i| i.1.to_string()),
    }
}

/// The optimal plan's runs (consecutive phases in one state) and its switches, counted in
/// whole optimizer steps per run so that a run's samples are exactly steps × batch.
fn optimal_runs(
    r: &Resolved,
    traj: &Trajectory,
    table: &ThroughputTable,
    p: &Problem,
    best: &crate::plan::Schedule,
) -> (Vec<SwitchRow>, Vec<ScheduleRun>) {
    let seq = f64::from(r.model.seq_len);
    let mut runs: Vec<ScheduleRun> = Vec::new();
    let mut run_start_phase: Vec<usize> = Vec::new();
    let mut run_steps = 0.0;
    let close = |runs: &mut Vec<ScheduleRun>, run_steps: f64| -> (u64, u64) {
        let Some(last) = runs.last_mut() else {
            return (0, 0);
        };
        last.steps = (run_steps.round() as u64).max(1);
        let samples = last.steps.saturating_mul(last.state.batch);
        (
            last.from_step.saturating_add(last.steps),
            last.from_samples.saturating_add(samples),
        )
    };
    for (i, &s) in best.states.iter().enumerate() {
        if i == 0 || best.states[i - 1] != s {
            let (steps_before, samples_before) = match i {
                0 => (0, 0),
                _ => close(&mut runs, run_steps),
            };
            run_steps = 0.0;
            run_start_phase.push(i);
            let at_tokens = p.phases[i].start_tokens;
            let point = traj.points.get(traj.index_at_tokens(at_tokens));
            runs.push(ScheduleRun {
                from_step: steps_before,
                from_samples: samples_before,
                from_tokens: samples_before as f64 * seq,
                steps: 0,
                at_tokens,
                at_step: point.map_or(0, |q| q.step),
                state: state_json(table, p, s),
            });
        }
        run_steps += p.steps(i, s);
    }
    close(&mut runs, run_steps);
    let switches = best
        .switches
        .iter()
        .map(|sw| {
            let at_tokens = p.phases[sw.phase].start_tokens;
            let point = traj.points.get(traj.index_at_tokens(at_tokens));
            let run = run_start_phase
                .iter()
                .position(|&i| i == sw.phase)
                .and_then(|k| runs.get(k));
            SwitchRow {
                at_tokens,
                at_step: point.map_or(0, |q| q.step),
                plan_steps: run.map_or(0, |run| run.from_step),
                consumed_tokens: run.map_or(f64::NAN, |run| run.from_tokens),
                phase: sw.phase,
                b_crit: point.map_or(f64::NAN, |q| q.b_crit * r.session.b_crit_scale),
                phase_b_noise: p.phases[sw.phase].b_crit,
                from: state_label(table, p, sw.from),
                to: state_label(table, p, sw.to),
                from_state: state_json(table, p, sw.from),
                to_state: state_json(table, p, sw.to),
                cost_s: sw.cost_s,
                kind: sw.kind.name().to_string(),
                gain_s: sw.gain_s,
            }
        })
        .collect();
    (switches, runs)
}

fn build_report(
    r: &Resolved,
    traj: &Trajectory,
    axis: TokenAxis,
    table: &ThroughputTable,
    p: &Problem,
    results: &[StrategyResult],
) -> PlanReport {
    let static_time = results
        .iter()
        .find(|s| s.name == "static")
        .map_or(f64::NAN, |s| s.schedule.time_s);
    let time_of = |name: &str| {
        results
            .iter()
            .find(|s| s.name == name)
            .map_or(f64::NAN, |s| s.schedule.time_s)
    };
    let optimal = time_of("optimal-joint");
    let (fastest_baseline, baseline_time) = strategies::PAPER_BASELINES
        .iter()
        .map(|&n| (n, time_of(n)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .unwrap_or(("static-gbs", f64::NAN));
    let eff = p.efficiency;
    let strategies = results
        .iter()
        .map(|s| StrategyRow {
            name: s.name.to_string(),
            how: s.how.to_string(),
            time_s: s.schedule.time_s,
            speedup_vs_static: static_time / s.schedule.time_s,
            switches: s.schedule.switches.len(),
            start: state_label(table, p, s.schedule.states[0]),
            start_state: state_json(table, p, s.schedule.states[0]),
        })
        .collect();
    let (switches, schedule) = match results.iter().find(|s| s.name == "optimal-joint") {
        Some(best) => optimal_runs(r, traj, table, p, &best.schedule),
        None => (Vec::new(), Vec::new()),
    };
    let costs = &r.session.costs;
    let cluster = &r.session.cluster;
    PlanReport {
        session: r.session.name.clone(),
        scenario: format!(
            "{} on {}×{} {}",
            r.model.name, cluster.nodes, cluster.gpus_per_node, r.hardware.name
        ),
        stack: r.stack().to_json(),
        objective: eff.objective.name().into(),
        lr_reference_batch: (eff.objective == Objective::LrSqrt).then_some(eff.reference_batch),
        trajectory: traj.label.clone(),
        b_crit: b_crit_conversion(r),
        reshard_mode: costs.reshard.name().into(),
        switch_threshold: costs.switch_threshold,
        fastest_baseline: fastest_baseline.into(),
        speedup_vs_fastest_baseline: baseline_time / optimal,
        speedup_vs_hindsight_static: static_time / optimal,
        token_axis: axis,
        seq_len: r.model.seq_len,
        added_batches: table
            .batches
            .iter()
            .copied()
            .filter(|b| !r.session.search.batch_sizes.contains(b))
            .collect(),
        horizon: None,
        phases: p.phases.len(),
        states: p.states.len(),
        costs: p.costs,
        min_dwell_phases: p.min_dwell,
        strategies,
        end: crate::plan::report::schedule_end(&schedule, r.model.seq_len),
        trajectory_end_tokens: p.phases.last().map(|ph| ph.end_tokens),
        trajectory_start_tokens: p.phases.first().map(|ph| ph.start_tokens),
        switches,
        schedule,
        current_batch_static: None,
        best_along: Vec::new(),
    }
}
