//! `copus calibrate`: fit the performance model's efficiencies to measured step times.

use super::model_args::ModelArgs;
use crate::fsutil;
use crate::perf::Recompute;
use crate::perf::calibrate::{CalibrationError, Knob, Target, calibrate};
use crate::perf::calibration_file::CalibrationFile;
use crate::perf::crossval::{cross_validate, rel_errors, rms};
use crate::perf::knob_selection::{CANDIDATES, KnobSelection, select_knobs};
use crate::perf::measurements::{
    CsvDefaults, MAX_MEASUREMENT_BYTES, MAX_MEASUREMENTS, Measurement, from_step_stats,
    parse_csv_lines, per_configuration,
};
use crate::profiles;
use crate::stats::ingest::protocol::parse_line;
use anyhow::{Context, bail};
use clap::Args;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Arguments of `copus calibrate`.
#[derive(Debug, Args)]
#[command(mut_arg("stack", |a| a.help(
    "Training stack preset the measurements ran under: the framework's defaults [default: the\n\
     stack of the --calibration file started from, else the hardware file's: megatron-core for\n\
     the shipped profiles]. A setting flag without --stack changes that setting of it"
)))]
pub struct CalibrateArgs {
    /// Measured step times: a CSV (`dp,tp,pp,mbs,batch,step_time_s`, optional
    /// `zero,recompute,vpp,cp,ep`) or a stats .ndjson whose records carry `step_time_s` and
    /// `config`.
    #[arg(required_unless_present = "nccl")]
    pub measurements: Option<PathBuf>,
    /// nccl-tests outputs (`all_reduce_perf`, `all_gather_perf`, `reduce_scatter_perf`,
    /// `sendrecv_perf`: the program from its "# Collective test starting" line, else from the
    /// file's name; repeat for several): fit the collective
    /// model's bandwidths and latencies to the cluster's own links instead of step times.
    #[arg(long, value_name = "FILE", conflicts_with = "measurements")]
    pub nccl: Vec<PathBuf>,
    /// Hardware profile the measurements ran on: a built-in name or a .ron file.
    #[arg(long)]
    pub hardware: String,
    /// The model: a profile or an inline shape.
    #[command(flatten)]
    pub model: ModelArgs,
    /// GPUs per node.
    #[arg(long, default_value_t = 8)]
    pub gpus_per_node: u32,
    /// ZeRO stage the measurements ran with where they do not say (stats-file records never
    /// do; a CSV row without a `zero` value) [default: the stack's, as for `predict`]
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..=3))]
    pub zero: Option<u8>,
    /// Recompute policy the measurements ran with where they do not say (stats-file records;
    /// CSV rows without `recompute`): none, selective, op or full [default: the stack's
    /// framework's own: selective for Megatron-Core and NeMo, op for torchtitan, full for the
    /// others]
    #[arg(long, value_enum, hide_possible_values = true)]
    pub recompute: Option<super::stack_args::RecomputePolicy>,
    /// Parameters to fit, comma-separated (default: chosen by cross-validation over the
    /// measured configurations, one per three configurations at most, from max_eff,
    /// microbatch_overhead_s, gemm_overhead_s, the link scales, coll_chunk_half_bytes,
    /// overlap_cost, the attention efficiencies, mem_eff and fsdp_overlap).
    #[arg(long, value_delimiter = ',')]
    pub fit: Vec<String>,
    /// Folds of the cross-validation (leave-one-out when ≥ the measurements).
    #[arg(long, default_value_t = 5)]
    pub folds: usize,
    /// Write the calibration here (RON; use with `--calibration` or a session's `calibration`).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Start from this calibration instead of the hardware profile: the parameters it fitted
    /// (a `calibrate --nccl` file's link bandwidths and latencies, say) stay as it set them and
    /// the step times fit the rest; the file written carries both.
    #[arg(long, value_name = "FILE", conflicts_with = "nccl")]
    pub calibration: Option<PathBuf>,
    /// Replace `--out` if it exists (a regular file, or the file a symlink names).
    #[arg(long)]
    pub force: bool,
    /// The training stack the measurements ran on.
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

/// One measured row with the profile's and the calibrated model's predictions.
#[derive(Debug, Serialize)]
struct RowOut {
    /// The configuration measured.
    config: crate::perf::config::ConfigJson,
    /// Global batch, samples.
    batch: u64,
    /// Measured seconds per step.
    measured_s: f64,
    /// The uncalibrated profile model's seconds per step.
    profile_s: f64,
    /// The calibrated model's seconds per step.
    calibrated_s: f64,
    /// calibrated / measured − 1.
    rel_error: f64,
}

/// What `copus calibrate --json` prints.
#[derive(Debug, Serialize)]
struct Output {
    /// The stack assumed for every measurement.
    /// The model the measurements ran.
    model: String,
    /// The hardware profile they ran on.
    hardware: String,
    stack: crate::perf::stack::StackJson,
    /// Recompute policy assumed where the measurements do not state it.
    assumed_recompute: String,
    /// ZeRO stage assumed where the measurements do not state it.
    assumed_zero: u8,
    /// The parameters `--calibration` fixed, as that file fitted them (empty without it).
    kept_from_calibration: Vec<String>,
    /// What the fit should be read with: rows copus puts over the GPU's memory, and fitted
    /// values at the edge of their range or far from the profile (the text's notes and flags).
    caveats: Vec<String>,
    /// Per-row residuals.
    rows: Vec<RowOut>,
    /// Measurements fitted: CSV rows, or the configurations of a stats file (each its median
    /// step time).
    n: usize,
    /// Whether the measurements are a stats file's configurations (each the median of its
    /// steps), not rows of a CSV.
    medians_of_configurations: bool,
    rms_rel_error: f64,
    /// Rms relative error on held-out configurations (the median step time of each distinct
    /// configuration, whole configurations held out, as the selection holds them out); with
    /// nothing freed, the profile's own error over them. `null` when too few to hold out.
    cv_rel_error: f64,
    profile_rms_rel_error: f64,
    params: BTreeMap<String, f64>,
    /// How the fitted parameters were chosen when `--fit` was not given: forward selection
    /// by cross-validation over the distinct configurations.
    selection: Option<KnobSelection>,
    out: Option<String>,
}

/// The ZeRO stage and recompute policy of measurements that do not state them: `--zero` and
/// `--recompute`, else the stack's own.
fn assumed(
    a: &CalibrateArgs,
    hardware: &crate::perf::EfficiencyParams,
) -> anyhow::Result<CsvDefaults> {
    // The flags over the stack the hardware profile describes (a hardware file may carry
    // another framework's choices).
    let framework = super::model_args::stack_over(hardware, None, a.stack.stack().as_ref())
        .unwrap_or_else(|| crate::perf::Stack::describing(hardware, None))
        .base();
    let recompute = match a.recompute {
        Some(r) => Recompute::from(r),
        None => framework_recompute(framework),
    };
    Ok(CsvDefaults {
        zero: a.zero.unwrap_or_else(|| framework.default_zero()),
        recompute,
    })
}

/// The measurements' recompute policies that `framework` does not have, as `predict` says of
/// one (`None` when every policy is one of its): the fit then learns a what-if's costs.
fn foreign_recompute(
    points: &[crate::perf::measurements::Measurement],
    framework: crate::perf::StackPreset,
) -> Option<String> {
    let policies = framework.recompute_policies();
    let mut foreign: Vec<String> = points
        .iter()
        .map(|m| m.config.recompute)
        .filter(|r| !policies.contains(r))
        .map(|r| r.to_string())
        .collect();
    foreign.sort();
    foreign.dedup();
    (!foreign.is_empty()).then(|| {
        let has: Vec<String> = policies.iter().map(ToString::to_string).collect();
        format!(
            "recompute {} is not a policy {framework} has (it has {}): rows with it are what-ifs \
             of this framework, and the parameters fitted to them are too",
            foreign.join(", "),
            has.join(", ")
        )
    })
}

/// The checkpointing a framework's runs use when they checkpoint at all and say no more: its
/// partial policy where it has one (Megatron's selective, torchtitan's op-level), else whole
/// layers.
fn framework_recompute(framework: crate::perf::StackPreset) -> Recompute {
    let policies = framework.recompute_policies();
    [Recompute::Selective, Recompute::Op]
        .into_iter()
        .find(|p| policies.contains(p))
        .unwrap_or(Recompute::Full)
}

/// The measurements of `path`, with the file line of each where there is one (CSV; a JSON
/// lines file is averaged per configuration, so it has none).
fn read_measurements(
    a: &CalibrateArgs,
    hardware: &crate::perf::EfficiencyParams,
    path: &Path,
) -> anyhow::Result<(Vec<Measurement>, Vec<usize>)> {
    let text = fsutil::read_capped(path, MAX_MEASUREMENT_BYTES)
        .with_context(|| format!("reading {}", path.display()))?;
    let origin = path.display().to_string();
    if crate::perf::nccl::looks_like_nccl_tests(&text) {
        anyhow::bail!(
            "{origin} is an nccl-tests output, not step times: give it as --nccl {origin}"
        );
    }
    if path
        .extension()
        .is_some_and(|e| e == "ndjson" || e == "jsonl")
    {
        let mut records = Vec::new();
        // As every reader of the protocol does, a bad line is skipped and counted, not the
        // end of the read (a trainer killed mid-line leaves one); the first is named.
        let mut skipped: (usize, Option<String>) = (0, None);
        // Keys of a record's `config` the protocol does not define (`zero`, `recompute`):
        // not read, and said (the fit assumed ZeRO-1 beside `"zero":3` without a word).
        let mut unread: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let r = match parse_line(line) {
                Ok(r) => r,
                Err(e) if e.is_event() => continue,
                Err(e) => {
                    skipped.0 += 1;
                    skipped
                        .1
                        .get_or_insert_with(|| format!("{origin}:{}: {e}", i + 1));
                    continue;
                }
            };
            if let (Some(t), Some(_)) = (r.step_time_s, r.config)
                && !crate::perf::measurements::plausible_step_time(t)
            {
                bail!(
                    "{origin}:{}: step_time_s = {t} is not a step time in seconds ({:e} to {:e})",
                    i + 1,
                    crate::perf::measurements::MIN_STEP_TIME_S,
                    crate::perf::measurements::MAX_STEP_TIME_S
                );
            }
            if r.config.is_some() {
                unread.extend(unread_config_keys(line));
            }
            if records.len() == MAX_MEASUREMENTS {
                bail!(
                    "{origin}:{}: more than {MAX_MEASUREMENTS} records; a calibration needs far fewer",
                    i + 1
                );
            }
            records.push(r);
        }
        if let (n, Some(first)) = &skipped {
            eprintln!(
                "copus calibrate: {n} line(s) that are not usable records skipped (first: {first})"
            );
        }
        let d = assumed(a, hardware)?;
        if !unread.is_empty() {
            eprintln!(
                "copus calibrate: note: the records' config carries {}, which copus does not \
                 read from a record (it reads dp, tp, pp, mbs): fitted at ZeRO-{} and recompute \
                 {} (--zero and --recompute set them)",
                unread.into_iter().collect::<Vec<_>>().join(", "),
                d.zero,
                d.recompute
            );
        }
        let steps = from_step_stats(&records, d.zero, d.recompute);
        // A run's steps are fitted as each configuration's median step time: one slow
        // warm-up step (compilation, the first collectives) moved a 20-step fit by 11 %.
        let m = crate::perf::measurements::per_configuration(&steps);
        if m.len() < steps.len() {
            eprintln!(
                "copus calibrate: {} steps of {} configuration(s): each fitted as its median step \
                 time (warm-up and outlier steps do not pull the fit)",
                steps.len(),
                m.len()
            );
        }
        if m.is_empty() {
            bail!(
                "{origin}: no record carries both step_time_s and config{}",
                skipped
                    .1
                    .map(|f| format!(" ({} line(s) skipped, first: {f})", skipped.0))
                    .unwrap_or_default()
            );
        }
        return Ok((m, Vec::new()));
    }
    check_csv_header(&text, &origin)?;
    let rows = parse_csv_lines(&text, &origin, assumed(a, hardware)?)?;
    if rows.is_empty() {
        bail!("{origin}: no measurement rows after the header");
    }
    if let Some(line) = unterminated_last_row(&text, &rows) {
        // A copy cut part-way ends without its newline, maybe mid-number ("6.6" of
        // "6.670"): said, as `analyze` says it of a stats file (hand-written files often
        // lack the newline too, so the row is used).
        eprintln!(
            "copus: {origin}:{line}: warning: the last line has no newline; if the file was cut \
             short, its step time may be cut mid-number (the row is used as it reads)"
        );
    }
    Ok(rows.into_iter().map(|(line, m)| (m, line)).unzip())
}

/// The file line of the last measurement row when the text ends on it without a newline.
fn unterminated_last_row(text: &str, rows: &[(usize, Measurement)]) -> Option<usize> {
    let last = rows.last()?.0;
    (!text.ends_with('\n') && text.lines().count() == last).then_some(last)
}

/// The keys of `line`'s `config` object other than the protocol's `dp`, `tp`, `pp`, `mbs`.
fn unread_config_keys(line: &str) -> Vec<String> {
    let Ok(serde_json::Value::Object(record)) = serde_json::from_str::<serde_json::Value>(line)
    else {
        return Vec::new();
    };
    match record.get("config") {
        Some(serde_json::Value::Object(c)) => c
            .keys()
            .filter(|k| !["dp", "tp", "pp", "mbs"].contains(&k.as_str()))
            .cloned()
            .collect(),
        _ => Vec::new(),
    }
}

/// The columns a measurement CSV may have that copus reads.
const CSV_COLUMNS: [&str; 11] = [
    "dp",
    "tp",
    "pp",
    "mbs",
    "batch",
    "step_time_s",
    "zero",
    "recompute",
    "vpp",
    "cp",
    "ep",
];

/// A header naming a column twice (only the first was read), or a column a letter or two off
/// one copus reads (`recomput`: the row's recompute silently assumed), is an error at the
/// header's line; other columns (notes, a model name) are the user's and are left alone.
fn check_csv_header(text: &str, origin: &str) -> anyhow::Result<()> {
    let Some((line, header)) = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .find(|(_, l)| !l.is_empty() && !l.starts_with('#'))
    else {
        return Ok(());
    };
    let cols: Vec<String> = crate::perf::measurements::split_csv_line(header)
        .map_err(|e| anyhow::anyhow!("{origin}:{line}: {e}"))?
        .iter()
        .map(|c| c.to_ascii_lowercase())
        .collect();
    for (i, c) in cols.iter().enumerate() {
        if let Some(j) = cols[..i].iter().position(|d| d == c) {
            bail!(
                "{origin}:{line}: column '{c}' appears twice (columns {} and {}); only one can be \
                 read",
                j + 1,
                i + 1
            );
        }
        if CSV_COLUMNS.contains(&c.as_str()) {
            continue;
        }
        // One edit from a short name (`mbss`), two from a long one (`step_time`); a column
        // such as `step` is two edits from `tp` and is not taken for it.
        if let Some(near) = CSV_COLUMNS.iter().find(|k| {
            let limit = if k.len() <= 4 { 1 } else { 2 };
            c.len() > 2 && crate::validate::fields::edit_distance(c, k) <= limit
        }) {
            bail!(
                "{origin}:{line}: unknown column '{c}': did you mean '{near}'? (columns copus \
                 reads: {})",
                CSV_COLUMNS.join(", ")
            );
        }
    }
    Ok(())
}

/// A measurement the model cannot cost, named by its file line where it has one.
fn locate(e: CalibrationError, origin: &Path, lines: &[usize]) -> anyhow::Error {
    match &e {
        CalibrationError::Invalid {
            index,
            config,
            reason,
        } => match lines.get(*index) {
            Some(line) => anyhow::anyhow!("{}:{line}: {config}: {reason}", origin.display()),
            None => anyhow::anyhow!("{}: {e}", origin.display()),
        },
        CalibrationError::TooFew { .. } => anyhow::anyhow!("{}: {e}", origin.display()),
    }
}

/// A note for each measurement copus predicts does not fit in memory: measured as running,
/// so the row or the model's memory is off (its time is fitted all the same).
fn note_measurements_that_do_not_fit(
    target: &Target,
    eff: &crate::perf::EfficiencyParams,
    points: &[Measurement],
    origin: &Path,
    lines: &[usize],
) -> Vec<String> {
    let ctx = crate::perf::PerfContext {
        hw: target.hw,
        model: target.model,
        eff,
        gpus_per_node: target.gpus_per_node,
    };
    let mut notes = Vec::new();
    for (i, m) in points.iter().enumerate() {
        let Ok(p) = crate::perf::predict(&ctx, &m.config, m.batch) else {
            continue;
        };
        if !p.fits {
            let at = lines.get(i).map(|l| format!(":{l}")).unwrap_or_default();
            let note = format!(
                "{}{at}: copus puts {} at {:.1} GB a GPU, over the {:.1} GB of {}: measured as \
                 running, so the row or copus's memory count is off (its step time is fitted \
                 all the same)",
                origin.display(),
                m.config,
                p.memory_per_gpu_bytes / 1e9,
                target.hw.hbm_bytes / 1e9,
                target.hw.name
            );
            eprintln!("note: {note}");
            notes.push(note);
        }
    }
    notes
}

/// Where the BF16 GEMM plateau was fitted and the FP8 one was not, move the FP8 plateau by the
/// same factor ([`crate::perf::EfficiencyParams::set_gemm_plateau`]) and say so: an FP8
/// prediction with this calibration kept the profile's FP8 plateau, and its gain over BF16
/// grew from 1.31× to 1.49×.
fn scale_fp8_with_bf16(
    knobs: &[Knob],
    start: &crate::perf::EfficiencyParams,
    fitted: &mut crate::perf::EfficiencyParams,
) -> Option<String> {
    if !knobs.contains(&Knob::MaxEff) || knobs.contains(&Knob::Fp8MaxEff) {
        return None;
    }
    let bf16 = fitted.max_eff;
    let mut moved = fitted.clone();
    moved.max_eff = start.max_eff;
    moved.set_gemm_plateau(bf16);
    let (from, to) = (fitted.fp8_max_eff, moved.fp8_max_eff);
    if from == to {
        return None;
    }
    fitted.fp8_max_eff = to;
    Some(format!(
        "fp8_max_eff {from:.3} → {to:.3}: no FP8 plateau was fitted, so it moves with the BF16 \
         one (max_eff {:.3} → {bf16:.3}); what slows BF16 GEMMs on this cluster (clocks, power, \
         software) slows FP8 ones alike",
        start.max_eff
    ))
}

/// What a fitted value `v` of `k` (profile `v0`) should be read with, if anything: at the edge
/// of its range, a link faster than its datasheet, or far from the profile.
fn param_flag(k: Knob, v: f64, v0: f64) -> Option<&'static str> {
    let bound = crate::perf::calibrate::BOUND;
    let at_bound = (v / v0 - bound).abs() < 1e-6 * bound
        || (v0 / v - bound).abs() < 1e-6 * bound
        || (v - k.upper()).abs() < 1e-9;
    if at_bound {
        Some("at the edge of its range: the measurements want more; a cost the model lacks?")
    } else if k.name().ends_with("link_scale") && v > 1.0 {
        Some("a link faster than its datasheet: the fit absorbs a cost elsewhere; check the rows")
    } else if !(0.5..=2.0).contains(&(v / v0)) {
        Some(
            "far from the profile: a value this far usually absorbs what the model lacks; check \
             the rows",
        )
    } else {
        None
    }
}

/// A measurement faster than the GPU can run the model's own FLOPs (model FLOP utilisation
/// above 100 % of the peak of the precision in force), or [`SLOWER_THAN_ANY_MISS`] times
/// slower than predicted, is an error naming its row: a step time in the wrong unit
/// (milliseconds read as seconds), a batch or sequence other than the one measured, or
/// another model.
/// How many times slower than predicted a measured step may be before it is refused as a unit
/// mistake: the model's worst published miss is under 2×; a step time in milliseconds read as
/// seconds is 1000×.
const SLOWER_THAN_ANY_MISS: f64 = 50.0;

fn refuse_faster_than_peak(
    target: &Target,
    eff: &crate::perf::EfficiencyParams,
    points: &[Measurement],
    origin: &Path,
    lines: &[usize],
) -> anyhow::Result<()> {
    let ctx = crate::perf::PerfContext {
        hw: target.hw,
        model: target.model,
        eff,
        gpus_per_node: target.gpus_per_node,
    };
    // MFU counts against the BF16 peak; FP8 GEMMs may run past it, up to the FP8 peak.
    let bound = if eff.precision == crate::perf::efficiency::Precision::Fp8 {
        (target.hw.fp8_peak_flops / target.hw.peak_flops).max(1.0)
    } else {
        1.0
    };
    for (i, m) in points.iter().enumerate() {
        let Ok(p) = crate::perf::predict(&ctx, &m.config, m.batch) else {
            continue;
        };
        let measured_mfu = p.mfu * p.step_time_s / m.step_time_s;
        let slower = m.step_time_s / p.step_time_s;
        if slower > SLOWER_THAN_ANY_MISS {
            let at = lines.get(i).map(|l| format!(":{l}")).unwrap_or_default();
            bail!(
                "{}{at}: {} at batch {} in {} s is {slower:.0}× the {:.4} s copus predicts for \
                 it ({:.2} % of peak): slower than any model error explains; check the step \
                 time's unit (seconds, not milliseconds), the batch (samples of {} tokens) and \
                 the model",
                origin.display(),
                m.config,
                m.batch,
                m.step_time_s,
                p.step_time_s,
                measured_mfu * 100.0,
                target.model.seq_len
            );
        }
        if measured_mfu > bound {
            let at = lines.get(i).map(|l| format!(":{l}")).unwrap_or_default();
            bail!(
                "{}{at}: {} at batch {} in {} s is {:.0} TFLOP/s a GPU of {}'s own FLOPs, {:.0} % \
                 of the {:.0} TFLOP/s peak of {}: faster than the GPU can run; check the step \
                 time's unit (seconds), the batch (samples of {} tokens) and the model",
                origin.display(),
                m.config,
                m.batch,
                m.step_time_s,
                p.model_tflops_per_gpu * p.step_time_s / m.step_time_s,
                target.model.name,
                measured_mfu * 100.0,
                target.hw.peak_flops / 1e12,
                target.hw.name,
                target.model.seq_len
            );
        }
    }
    Ok(())
}

/// The parameters named by `--fit`, each once.
fn named_knobs(a: &CalibrateArgs) -> anyhow::Result<Vec<Knob>> {
    let mut knobs: Vec<Knob> = Vec::new();
    for name in &a.fit {
        let Some(k) = Knob::from_name(name) else {
            let names: Vec<&str> = Knob::ALL.iter().map(|k| k.name()).collect();
            super::flag_bail!(
                "--fit: unknown parameter '{name}' (one of {})",
                names.join(", ")
            );
        };
        if knobs.contains(&k) {
            super::flag_bail!("--fit: '{name}' is named twice");
        }
        knobs.push(k);
    }
    Ok(knobs)
}

/// The parameters of `--fit` some row depends on; one none does (the scale-out link on rows
/// inside one node, say) is kept at its start with a note rather than reported as fitted.
fn informed_knobs(
    target: &Target,
    start: &crate::perf::EfficiencyParams,
    knobs: Vec<Knob>,
    points: &[Measurement],
) -> anyhow::Result<Vec<Knob>> {
    let base = rel_errors(target, start, points)?;
    let mut kept = Vec::new();
    for k in knobs {
        let mut moved = start.clone();
        let v = k.slot(&mut moved);
        *v = if *v == 0.0 { 1e-3 } else { *v * 0.5 };
        let errors = rel_errors(target, &moved, points)?;
        let informs = errors
            .iter()
            .zip(&base)
            .any(|(e, b)| ((1.0 + e) / (1.0 + b) - 1.0).abs() > 1e-9);
        if informs {
            kept.push(k);
        } else {
            eprintln!(
                "copus calibrate: note: --fit {}: no measured row depends on it (rows inside one \
                 node and the scale-out link, say): kept at the profile's value, not fitted",
                k.name()
            );
        }
    }
    if kept.is_empty() {
        bail!(
            "--fit: none of the parameters named changes any measured row's time; nothing to fit"
        );
    }
    Ok(kept)
}

/// The fitted parameters as a profile would hold them, or why they cannot be used: a value
/// the fit drove outside the range every profile is held to is reported, not written; `why`
/// says what the inputs then likely hold (the step-time and the link calibrations share it).
pub(super) fn check_fitted(
    params: &crate::perf::EfficiencyParams,
    why: &str,
) -> anyhow::Result<()> {
    crate::validate::profile::efficiency(params, "calibrated")
        .map_err(|e| anyhow::anyhow!("the fit gives {e}: {why}; nothing written"))
}

/// `start` with the parameters calibration file `path` fitted laid over it, and their names:
/// what `--calibration` keeps while the step times fit the rest. The file must be for the same
/// hardware.
fn started_from(
    path: &Path,
    hardware: &str,
    start: crate::perf::EfficiencyParams,
) -> anyhow::Result<(crate::perf::EfficiencyParams, Vec<String>)> {
    let file = super::model_args::load_calibration(path)?;
    if file.hardware != hardware {
        bail!(
            "--calibration {}: fitted for {}, calibrating {hardware}: give the same --hardware",
            path.display(),
            file.hardware
        );
    }
    let (mut from, mut to) = (
        serde_json::to_value(&file.params)?,
        serde_json::to_value(&start)?,
    );
    let (Some(from), Some(to_map)) = (from.as_object_mut(), to.as_object_mut()) else {
        bail!(
            "--calibration {}: its parameters are not a record",
            path.display()
        );
    };
    for name in &file.fitted {
        let Some(v) = from.remove(name) else {
            bail!(
                "--calibration {}: it lists '{name}' as fitted, which is no parameter",
                path.display()
            );
        };
        to_map.insert(name.clone(), v);
    }
    Ok((serde_json::from_value(to)?, file.fitted))
}

/// Run `copus calibrate`.
pub fn run(a: &CalibrateArgs) -> anyhow::Result<()> {
    let hw = super::flag_profile(
        "--hardware",
        profiles::hardware(&a.hardware, Path::new(".")),
    )?;
    if a.folds < 2 {
        super::flag_bail!(
            "--folds {}: a cross-validation needs at least 2 folds",
            a.folds
        );
    }
    // The link fit uses no model: a --model given with --nccl alone was silently ignored.
    if !a.nccl.is_empty()
        && a.measurements.is_none()
        && let Some(flag) = a.model.first_given()
    {
        super::flag_bail!(
            "{flag}: the link fit (--nccl without step times) uses no model; drop {flag}, or \
             give step times to fit with it"
        );
    }
    if !a.nccl.is_empty() && a.measurements.is_none() && !a.fit.is_empty() {
        anyhow::bail!(
            "--fit chooses the parameters of a step-time calibration; with --nccl alone the \
             links' bandwidths and latencies are fitted (drop --fit, or give step times)"
        );
    }
    for (i, p) in a.nccl.iter().enumerate() {
        if let Some(q) = a.nccl[..i].iter().find(|q| fsutil::same_file(p, q)) {
            anyhow::bail!(
                "--nccl {} is given twice (also as {}): its sizes would count twice",
                p.display(),
                q.display()
            );
        }
    }
    if let Some(out) = &a.out {
        let mut read: Vec<(&str, &Path)> = a
            .nccl
            .iter()
            .map(|p| ("an --nccl file", p.as_path()))
            .collect();
        if let Some(m) = &a.measurements {
            read.push(("the measurements read", m));
        }
        if let Some(c) = &a.calibration {
            read.push(("the --calibration started from", c));
        }
        // A profile given as a file (not a built-in name) is an input too.
        let hardware_file = Path::new(&a.hardware);
        if !profiles::is_builtin_hardware(&a.hardware) {
            read.push(("the --hardware profile", hardware_file));
        }
        let model_file = a.model.name.as_deref().map(Path::new);
        if let Some(m) = model_file
            && !profiles::is_builtin_model(&m.to_string_lossy())
        {
            read.push(("the --model profile", m));
        }
        fsutil::check_distinct("--out", out, &read)?;
        fsutil::check_output(out, a.force).with_context(|| format!("--out {}", out.display()))?;
    }
    let Some(measurements) = &a.measurements else {
        return super::calibrate_links::run(a, &hw);
    };
    let model = a.model.profile()?;
    if a.gpus_per_node == 0 {
        super::flag_bail!("--gpus-per-node must be at least 1");
    }
    let (points, lines) = read_measurements(a, &hw.efficiency, measurements)?;
    let target = Target {
        hw: &hw,
        model: &model,
        gpus_per_node: a.gpus_per_node,
    };
    let start = super::model_args::efficiency_with_stack(&hw, None, a.stack.stack().as_ref())?;
    let (start, kept) = match &a.calibration {
        Some(path) => started_from(path, &hw.name, start)?,
        None => (start, Vec::new()),
    };
    let candidates: Vec<Knob> = CANDIDATES
        .iter()
        .copied()
        .filter(|k| !kept.iter().any(|n| n == k.name()))
        .collect();
    // Every row costed first, so that a configuration the model cannot run is named by its
    // own row (selection works on the distinct configurations, in another order).
    let profile_errors =
        rel_errors(&target, &start, &points).map_err(|e| locate(e, measurements, &lines))?;
    refuse_faster_than_peak(&target, &start, &points, measurements, &lines)?;
    let row_notes =
        note_measurements_that_do_not_fit(&target, &start, &points, measurements, &lines);
    let (knobs, selection) = if a.fit.is_empty() {
        let s = select_knobs(&target, &start, &candidates, &points, a.folds)?;
        (s.knobs.clone(), Some(s))
    } else {
        (
            informed_knobs(&target, &start, named_knobs(a)?, &points)?,
            None,
        )
    };
    let in_force = super::model_args::stack_over(&hw.efficiency, None, a.stack.stack().as_ref());
    let stack = crate::perf::Stack::describing(&start, in_force.map(|s| s.base()));
    let foreign = foreign_recompute(&points, stack.base());
    // Nothing freed (the profile predicts these rows as well as any calibration would):
    // the calibration is the profile's values.
    let mut fitted_params = if knobs.is_empty() {
        start.clone()
    } else {
        calibrate(&target, &start, &knobs, &points, 100)?.params
    };
    let fp8_scaled = scale_fp8_with_bf16(&knobs, &start, &mut fitted_params);
    let fitted_errors = rel_errors(&target, &fitted_params, &points)?;
    // Held out as the selection holds out: whole configurations (the median of each), so that
    // no fold predicts a step of a configuration it trained on, and the figure is the
    // selection's own where it cross-validated the same parameters.
    let configurations = per_configuration(&points);
    let cv = if knobs.is_empty() {
        rms(&rel_errors(&target, &start, &configurations)?)
    } else if configurations.len() > knobs.len() + 1 {
        rms(&cross_validate(
            &target,
            &start,
            &knobs,
            &configurations,
            a.folds,
        )?)
    } else {
        f64::NAN
    };
    let mut params = BTreeMap::new();
    let mut p = fitted_params.clone();
    for k in &knobs {
        params.insert(k.name().to_string(), *k.slot(&mut p));
    }
    let file = CalibrationFile {
        hardware: hw.name.clone(),
        model: model.name.clone(),
        n: points.len(),
        rms_rel_error: rms(&fitted_errors),
        cv_rel_error: cv,
        profile_rms_rel_error: rms(&profile_errors),
        fitted: kept
            .iter()
            .cloned()
            .chain(
                knobs
                    .iter()
                    .map(|k| k.name().to_string())
                    .filter(|n| !kept.contains(n)),
            )
            .collect(),
        params: fitted_params.clone(),
        stack: Some(stack.label()),
        recompute: {
            let mut r: Vec<String> = points
                .iter()
                .map(|m| m.config.recompute.to_string())
                .collect();
            r.sort();
            r.dedup();
            r
        },
        unwritten: Vec::new(),
    };
    check_fitted(
        &file.params,
        "the measurements want a value the model cannot hold (rows in the wrong unit, or a \
         cost the model lacks)",
    )?;
    if !(file.rms_rel_error.is_finite() && file.profile_rms_rel_error.is_finite()) {
        anyhow::bail!(
            "the model gives no finite step time for these rows with this profile; nothing written"
        );
    }
    if let Some(out) = &a.out {
        fsutil::write_atomic(out, file.to_ron()?.as_bytes())
            .with_context(|| format!("writing {}", out.display()))?;
    }
    let rows: Vec<RowOut> = points
        .iter()
        .zip(profile_errors.iter().zip(&fitted_errors))
        .map(|(m, (e0, e1))| RowOut {
            config: (&m.config).into(),
            batch: m.batch,
            measured_s: m.step_time_s,
            profile_s: m.step_time_s * (1.0 + e0),
            calibrated_s: m.step_time_s * (1.0 + e1),
            rel_error: *e1,
        })
        .collect();
    let out = Output {
        model: model.name.clone(),
        hardware: hw.name.clone(),
        stack: stack.to_json(),
        assumed_recompute: assumed(a, &hw.efficiency)?.recompute.to_string(),
        assumed_zero: assumed(a, &hw.efficiency)?.zero,
        kept_from_calibration: kept.clone(),
        caveats: row_notes
            .into_iter()
            .chain(foreign)
            .chain(selection.as_ref().and_then(selection_caveat))
            .chain(fp8_scaled.clone())
            .chain(poor_fit(rms(&fitted_errors)))
            .chain(knobs.iter().filter_map(|k| {
                let (mut fitted, mut profile) = (fitted_params.clone(), start.clone());
                let (v, v0) = (*k.slot(&mut fitted), *k.slot(&mut profile));
                param_flag(*k, v, v0)
                    .map(|f| format!("{} {v:.4e} (profile {v0:.4e}): {f}", k.name()))
            }))
            .collect(),
        rows,
        n: file.n,
        medians_of_configurations: lines.is_empty(),
        rms_rel_error: file.rms_rel_error,
        cv_rel_error: file.cv_rel_error,
        profile_rms_rel_error: file.profile_rms_rel_error,
        params,
        selection,
        out: a.out.as_ref().map(|p| p.display().to_string()),
    };
    if a.json {
        super::write_json(&out)?;
        return Ok(());
    }
    let plural =
        |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    // A stats file's steps are fitted as each configuration's median: counted so.
    let measured = if out.medians_of_configurations {
        plural(
            out.n,
            "configuration (its median step time)",
            "configurations (the median step time of each)",
        )
    } else {
        plural(out.n, "measured step", "measured steps")
    };
    if knobs.is_empty() {
        println!(
            "nothing calibrated on {measured}: the profile's values stand ({} on {})",
            model.name, hw.name
        );
    } else {
        println!(
            "calibrated {} on {measured} ({} on {})",
            plural(knobs.len(), "parameter", "parameters"),
            model.name,
            hw.name
        );
    }
    print!(
        "{}",
        crate::format::line_labelled(
            "  assumed: ",
            &format!(
                "stack {}; ZeRO-{} and recompute {} where the measurements do not say",
                out.stack.label, out.assumed_zero, out.assumed_recompute
            )
        )
    );
    if let Some(c) = &a.calibration {
        println!(
            "  started from {}: kept as it fitted them: {}",
            super::escape_controls(&c.display().to_string()),
            out.kept_from_calibration.join(", ")
        );
    }
    // What the fit started from: the profile, or the calibration file given (its links fitted
    // on nccl-tests); "profile model" named the file's model as the profile's.
    let start_name = a.calibration.as_ref().map_or_else(
        || "profile".to_string(),
        |c| {
            super::escape_controls(
                &c.file_name()
                    .map_or_else(|| c.display().to_string(), |f| f.to_string_lossy().into()),
            )
        },
    );
    let rms_line = format!(
        "{start_name} model {:.1}% → calibrated {:.1}% ({})",
        out.profile_rms_rel_error * 100.0,
        out.rms_rel_error * 100.0,
        match (
            out.cv_rel_error.is_finite(),
            selection_cv(out.selection.as_ref())
        ) {
            (true, _) if knobs.is_empty() => format!(
                "nothing freed; {:.1}% over the distinct configurations",
                out.cv_rel_error * 100.0
            ),
            (true, _) => format!("cross-validated {:.1}%", out.cv_rel_error * 100.0),
            // Too few rows to hold any out of the fit itself, but the selection held out
            // whole configurations: its figure is the one there is.
            (false, Some((cv, n))) => format!(
                "cross-validated {:.1}% over {n} configurations, by the selection below",
                cv * 100.0
            ),
            (false, None) => "too few measurements to cross-validate".to_string(),
        }
    );
    print!(
        "{}",
        crate::format::line_labelled("  rms relative error: ", &rms_line)
    );
    if out.rms_rel_error > out.profile_rms_rel_error {
        println!(
            "  note: the calibrated model fits these rows worse than the profile: rows that \
             contradict each other (one configuration at very different times?) or a cost the \
             fitted parameters cannot express"
        );
    }
    if let Some(sel) = &out.selection {
        println!("{}", selection_text(sel, &start_name));
        if let Some(note) = selection_caveat(sel) {
            print!("{}", crate::format::wrap_labelled("  note: ", &note));
        }
    }
    let mut s0 = start.clone();
    for k in &knobs {
        let v = out.params[k.name()];
        let v0 = *k.slot(&mut s0);
        let note = param_flag(*k, v, v0).map_or(String::new(), |f| format!("  ({f})"));
        println!("  {:24} {v:.4e}  ({start_name} {v0:.4e}){note}", k.name());
    }
    if let Some(note) = &fp8_scaled {
        print!("{}", crate::format::wrap_labelled("  note: ", note));
    }
    if let Some(note) = poor_fit(out.rms_rel_error) {
        print!("{}", crate::format::wrap_labelled("  note: ", &note));
    }
    println!("  per row: measured s, {start_name} model s, calibrated s, error");
    for r in &out.rows {
        println!(
            "    {:38} batch {:>6}  {:>9.4}  {:>9.4}  {:>9.4}  {:+6.1}%",
            r.config.label(),
            r.batch,
            r.measured_s,
            r.profile_s,
            r.calibrated_s,
            r.rel_error * 100.0
        );
    }
    if let Some(o) = &out.out {
        println!("  written to {o} (use --calibration {o})");
    }
    Ok(())
}

/// Rms relative error of a calibration above which it is said to be a poor fit.
const POOR_FIT: f64 = 0.10;

/// What a calibration still this far off its own rows should be read with (a 6-row fit left at
/// 27.7 % was written and used without a word).
fn poor_fit(rms_rel_error: f64) -> Option<String> {
    (rms_rel_error > POOR_FIT).then(|| {
        format!(
            "the calibrated model is still {:.1}% off its own rows (rms): the rows contradict \
             each other, or the step has a cost the fitted parameters cannot express; its \
             predictions inherit that error (predict and grid name it as 'rms')",
            rms_rel_error * 100.0
        )
    })
}

/// Rms relative error of the uncalibrated profile above which a selection that frees nothing
/// says to check the inputs rather than that the profile already fits.
const FAR_OFF: f64 = 0.25;

/// What a selection that freed nothing, or nothing that predicts better than the profile,
/// means for the calibration: the same sentence in the text (`note:`) and in `caveats`.
fn selection_caveat(sel: &KnobSelection) -> Option<String> {
    let uncalibrated = sel.uncalibrated_rms_rel_error * 100.0;
    if sel.knobs.is_empty() {
        let best = sel.next_best.map_or(String::new(), |b| {
            format!(
                " (the best, {}, {:.1}% against {uncalibrated:.1}% uncalibrated)",
                b.knob.name(),
                b.cv_rms_rel_error * 100.0
            )
        });
        // Far off and nothing that stays in range helps: the rows or the profile are not
        // what they say, more likely than a cluster that fast or slow.
        if sel.uncalibrated_rms_rel_error > FAR_OFF {
            return Some(format!(
                "the profile is {uncalibrated:.0}% off on these rows and no parameter fitted \
                 within its range predicts the held-out configurations {:.0}% better{best}: \
                 nothing is freed; check that --model, --hardware and --stack describe the run \
                 and that the rows hold seconds a step and batches in samples (`--fit NAME` \
                 forces a parameter)",
                crate::perf::knob_selection::MIN_CV_GAIN * 100.0
            ));
        }
        return Some(format!(
            "no parameter predicts the held-out configurations at least {:.0}% better than the \
             profile{best}: nothing is freed and the calibration is the profile's values; the \
             profile already predicts these measurements as well as they allow, or rows that \
             disagree with each other hide what is off (see the per-row errors)",
            crate::perf::knob_selection::MIN_CV_GAIN * 100.0
        ));
    }
    let (cv, _) = selection_cv(Some(sel))?;
    (cv >= sel.uncalibrated_rms_rel_error).then(|| {
        format!(
            "no parameter predicts the held-out configurations better than the profile \
             ({:.1}% against {uncalibrated:.1}% uncalibrated): these measurements do not support \
             a calibration; rows that disagree with each other or with the model (see the \
             per-row errors) are the likely cause",
            cv * 100.0
        )
    })
}

/// The text lines of a knob selection: what was freed, the cross-validated error after each,
/// and why it stopped.
/// The cross-validated error of the parameters the selection freed and the configurations it
/// held out (`None` without a selection or when it could hold none out).
fn selection_cv(sel: Option<&KnobSelection>) -> Option<(f64, usize)> {
    let sel = sel?;
    sel.steps
        .last()
        .map(|s| (s.cv_rms_rel_error, sel.configurations))
}

/// `start`: what the fit started from, as the error line names it ("profile", or the
/// calibration file given).
fn selection_text(sel: &KnobSelection, start: &str) -> String {
    let before = if start == "profile" {
        "uncalibrated".to_string()
    } else {
        format!("{start} model")
    };
    let mut out = if sel.steps.is_empty() && !sel.knobs.is_empty() {
        format!(
            "  chosen without cross-validation: {} configuration{} ({before} {:.1}%):",
            sel.configurations,
            if sel.configurations == 1 { "" } else { "s" },
            sel.uncalibrated_rms_rel_error * 100.0
        )
    } else {
        format!(
            "  chosen by cross-validation over {} configurations ({before} {:.1}%):",
            sel.configurations,
            sel.uncalibrated_rms_rel_error * 100.0
        )
    };
    if sel.steps.is_empty() && !sel.knobs.is_empty() {
        out.push_str(&format!(
            "\n    {} (too few configurations to hold any out)",
            sel.knobs
                .iter()
                .map(|k| k.name())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    for step in &sel.steps {
        out.push_str(&format!(
            "\n    + {:24} cross-validated {:.1}%",
            step.knob.name(),
            step.cv_rms_rel_error * 100.0
        ));
    }
    // The error it would be compared with: the last step's, else the uncalibrated one.
    let now = sel
        .steps
        .last()
        .map_or(sel.uncalibrated_rms_rel_error, |s| s.cv_rms_rel_error);
    // "less than 5 % better" read beside a figure worse than the current one.
    let how = |next: &crate::perf::knob_selection::SelectionStep| {
        if next.cv_rms_rel_error >= now {
            format!("no better than {:.1}%", now * 100.0)
        } else {
            format!(
                "less than {:.0}% better",
                crate::perf::knob_selection::MIN_CV_GAIN * 100.0
            )
        }
    };
    match &sel.next_best {
        Some(next) if sel.knobs.is_empty() => out.push_str(&format!(
            "\n    nothing freed: the best, {}, would give {:.1}% ({})",
            next.knob.name(),
            next.cv_rms_rel_error * 100.0,
            how(next)
        )),
        Some(next) => out.push_str(&format!(
            "\n    stopped: the next best, {}, would give {:.1}% ({})",
            next.knob.name(),
            next.cv_rms_rel_error * 100.0,
            how(next)
        )),
        None if sel.knobs.is_empty() => out.push_str(
            "\n    nothing freed: no parameter predicts the held-out configurations better while \
             its value stays within 0.5–2× of the profile's, nor twice as well moving further",
        ),
        None if !sel.steps.is_empty() => out.push_str(&format!(
            "\n    stopped: at most one parameter per {} configurations (one at least)",
            crate::perf::knob_selection::CONFIGS_PER_KNOB
        )),
        None => {}
    }
    out
}
