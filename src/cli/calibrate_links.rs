//! `copus calibrate --nccl FILE…`: the collective model fitted to the cluster's own links,
//! measured with nccl-tests (`crates/copus-model/src/perf/nccl.rs`, docs/MODEL.md "Calibrating on your own step
//! times").

use super::calibrate::CalibrateArgs;
use crate::fsutil;
use crate::perf::HardwareProfile;
use crate::perf::calibration_file::CalibrationFile;
use crate::perf::nccl::{self, NcclRun};
use anyhow::{Context, bail};
use serde::Serialize;
use std::io::Read;
use std::path::Path;

/// One measured size with the model's time before and after the fit.
#[derive(Debug, Serialize)]
struct RowOut {
    /// The file.
    file: String,
    /// The collective's program name.
    collective: &'static str,
    /// Ranks and hosts of the run.
    ranks: u32,
    nodes: u32,
    /// Message size, bytes.
    bytes: f64,
    /// Measured out-of-place seconds.
    measured_s: f64,
    /// The profile's prediction, seconds.
    profile_s: f64,
    /// The fitted prediction, seconds.
    calibrated_s: f64,
}

/// The smallest size one file measured, with the model's times before and after the fit.
#[derive(Debug, Serialize)]
struct SmallMessage {
    /// The file.
    file: String,
    /// Ranks and hosts of the run.
    ranks: u32,
    nodes: u32,
    /// Message size, bytes.
    bytes: f64,
    /// Measured out-of-place time, µs.
    measured_us: f64,
    /// The profile's prediction, µs.
    profile_us: f64,
    /// The fitted prediction, µs.
    calibrated_us: f64,
}

/// The smallest size of each file among `rows` (in the files' order).
fn small_messages(rows: &[RowOut]) -> Vec<SmallMessage> {
    let mut out: Vec<SmallMessage> = Vec::new();
    for r in rows {
        let small = SmallMessage {
            file: r.file.clone(),
            ranks: r.ranks,
            nodes: r.nodes,
            bytes: r.bytes,
            measured_us: r.measured_s * 1e6,
            profile_us: r.profile_s * 1e6,
            calibrated_us: r.calibrated_s * 1e6,
        };
        match out.iter_mut().find(|m| m.file == r.file) {
            Some(m) if r.bytes < m.bytes => *m = small,
            Some(_) => {}
            None => out.push(small),
        }
    }
    out
}

/// What `copus calibrate --nccl --json` prints.
#[derive(Debug, Serialize)]
struct Output {
    /// RMS of ln(predicted/measured), profile and fitted.
    profile_rms_log_error: f64,
    rms_log_error: f64,
    /// Fitted parameters and their values.
    params: std::collections::BTreeMap<&'static str, f64>,
    /// The links the profile gives and the fitted ones, GB/s a GPU and µs.
    profile_links: nccl::LinkSummary,
    links: nccl::LinkSummary,
    /// Per-size residuals.
    rows: Vec<RowOut>,
    /// The smallest size of each file, measured and predicted: the collective's fixed time,
    /// the latency the fit reproduces (the link lines' per-phase latencies are one share of
    /// it; the per-step hop latencies and the small-chunk fall-off carry the rest).
    small_messages: Vec<SmallMessage>,
    /// Where the calibration was written.
    out: Option<String>,
    /// What the files cannot tell apart, one sentence each (empty when they pin every
    /// fitted parameter down).
    caveats: Vec<String>,
}

/// The caveat of runs that all span several hosts: each time mixes the scale-up and the
/// scale-out link, so the scale-up link is kept at the profile's and a slow one would be
/// read as a slow network (`None` when a single-host run, or no multi-host one, is among
/// them).
fn links_not_separated(runs: &[nccl::NcclRun]) -> Option<String> {
    let all_multi_host = runs.iter().all(|r| r.nodes > 1);
    let intra_too = runs.iter().any(|r| r.ranks / r.nodes > 1);
    (all_multi_host && intra_too).then(|| {
        "every file spans several hosts: each measured time mixes the scale-up link inside a \
         host and the scale-out link across hosts, which these files cannot tell apart, so \
         the scale-up link is kept at the profile's and fitted only on the scale-out one (a \
         slow scale-up link would show as a slow network); add the same test run on one host \
         to fit the scale-up link too"
            .to_string()
    })
}

/// Read one nccl-tests output: a regular file of at most [`nccl::MAX_BYTES`].
fn read(path: &Path) -> anyhow::Result<NcclRun> {
    let meta = std::fs::metadata(path).with_context(|| format!("{}", path.display()))?;
    if !meta.is_file() {
        bail!("{}: not a regular file", path.display());
    }
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .with_context(|| format!("{}", path.display()))?
        .take(nccl::MAX_BYTES + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("{}", path.display()))?;
    let text = String::from_utf8(bytes).map_err(|e| {
        // The line of the first byte that is not UTF-8, as the other readers name it.
        let at = e.utf8_error().valid_up_to();
        let line = e.as_bytes()[..at].iter().filter(|&&b| b == b'\n').count() + 1;
        anyhow::anyhow!("{}:{line}: not UTF-8 text", path.display())
    })?;
    if text.len() as u64 > nccl::MAX_BYTES {
        bail!(
            "{}: more than {} bytes: not an nccl-tests output",
            path.display(),
            nccl::MAX_BYTES
        );
    }
    // A byte-order mark (logs saved by Windows editors or PowerShell's Out-File) is not text
    // of the log: its first line is the program's, as the other readers take it.
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    let name = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into(),
    );
    // The collective from the program's own line, else the file's name; errors name the
    // path as given.
    let collective = nccl::started_collective(text).or_else(|| nccl::Collective::from_name(&name));
    Ok(nccl::parse(text, &path.display().to_string(), collective)?)
}

/// A fitted parameter far from the profile's value (outside 1/32–32×): the files do not pin
/// it down, or show what the link model lacks; a latency fitted to nearly nothing is said as
/// such (a fast fabric's may, by design). One sentence each, for `caveats` and the text.
fn far_from_the_profile(
    params: &std::collections::BTreeMap<&'static str, f64>,
    start: &crate::perf::EfficiencyParams,
) -> Vec<String> {
    let mut s = start.clone();
    params
        .iter()
        .filter_map(|(name, v)| {
            let k = nccl::LinkKnob::ALL
                .into_iter()
                .find(|k| k.name() == *name)?;
            let v0 = *k.slot(&mut s);
            let ratio = v / v0;
            let latency = matches!(
                k,
                nccl::LinkKnob::LatencyIntra
                    | nccl::LinkKnob::LatencyInter
                    | nccl::LinkKnob::HopIntra
                    | nccl::LinkKnob::HopInter
            );
            if latency && ratio.is_finite() && ratio < 1.0 / 32.0 {
                // Fitted to (nearly) nothing: by design a fast fabric's may, but the files'
                // small messages are then carried by the other latencies and the fall-off.
                return Some(format!(
                    "{name} {v:.4e} is fitted to nearly nothing (1/{:.0} of the profile's \
                     {v0:.4e}): the small messages of these files are explained by the other \
                     latencies and the small-chunk fall-off instead; read the per-size times, \
                     not this value",
                    1.0 / ratio.max(f64::MIN_POSITIVE)
                ));
            }
            let far = !(1.0 / 32.0..=32.0).contains(&ratio);
            (ratio.is_finite() && far).then(|| {
                let how_far = if ratio < 1.0 {
                    format!("1/{:.0} of", 1.0 / ratio.max(f64::MIN_POSITIVE))
                } else {
                    format!("{ratio:.0}×")
                };
                format!(
                    "{name} {v:.4e} is {how_far} the profile's {v0:.4e}: far from the profile, \
                     so the files do not pin it down, or show what the link model lacks"
                )
            })
        })
        .collect()
}

/// A link scale the fit drove to the floor of its range ([`nccl::LINK_SCALE_FLOOR`] of the
/// profile's): the files measured a link slower than the model can hold, so the fitted value
/// is a bound, not a measurement.
fn at_the_floor(
    params: &crate::perf::EfficiencyParams,
    start: &crate::perf::EfficiencyParams,
) -> Vec<String> {
    [
        (
            "intra_link_scale",
            params.intra_link_scale,
            start.intra_link_scale,
        ),
        (
            "inter_link_scale",
            params.inter_link_scale,
            start.inter_link_scale,
        ),
    ]
    .into_iter()
    .filter(|(_, v, v0)| *v0 > 0.0 && *v <= v0 * nccl::LINK_SCALE_FLOOR * (1.0 + 1e-3))
    .map(|(name, v, _)| {
        format!(
            "{name} {v:.4e} is at the edge of its range ({:.0}× below the profile's): the \
             files measured a link slower than the model holds, so the value is a bound",
            1.0 / nccl::LINK_SCALE_FLOOR
        )
    })
    .collect()
}

/// A link scale the fit drove to its roof (the datasheet's bandwidth, 1 / the profile's link
/// efficiency): the files measured a link faster than the profile allows, so the fitted value
/// is a bound, not a measurement. Within a node that is what NVLink SHARP does (NCCL's NVLS
/// reduces inside the NVSwitch, and its bus bandwidth passes the link's), so a one-node
/// collective that NVLS runs is named as the likelier cause than the wrong `--hardware`.
fn at_the_roof(
    params: &crate::perf::EfficiencyParams,
    hw: &HardwareProfile,
    runs: &[nccl::NcclRun],
) -> Vec<String> {
    // NVLS needs third-generation NVSwitch: the SXM boards of H100, H800 and H200.
    let nvls_gpu = ["h100-sxm", "h200", "h800"]
        .iter()
        .any(|g| hw.name.starts_with(g));
    let in_switch = nvls_gpu
        && runs
            .iter()
            .any(|r| r.nodes == 1 && r.collective != nccl::Collective::SendRecv);
    [
        (
            "intra_link_scale",
            params.intra_link_scale,
            hw.intra_link_eff,
            "scale-up",
        ),
        (
            "inter_link_scale",
            params.inter_link_scale,
            hw.inter_link_eff,
            "scale-out",
        ),
    ]
    .into_iter()
    .filter(|(_, v, eff, _)| *eff > 0.0 && (v * eff - 1.0).abs() < 1e-6)
    .map(|(name, v, _, link)| {
        let why = if in_switch && link == "scale-up" {
            ". On NVSwitch nodes of this GPU a one-node collective runs NVLink SHARP, reduced \
             inside the switch, which the model does not hold: measure with \
             NCCL_NVLS_ENABLE=0 to fit the links themselves, else check --hardware"
        } else {
            " (check --hardware)"
        };
        format!(
            "{name} {v:.4} is the datasheet's {link} bandwidth, the most the model allows, so \
             the value is a bound: the files measured a faster link than the {} profile's \
             peak{why}",
            hw.name
        )
    })
    .collect()
}

/// Run the link calibration.
pub fn run(a: &CalibrateArgs, hw: &HardwareProfile) -> anyhow::Result<()> {
    let runs = a
        .nccl
        .iter()
        .map(|p| read(p))
        .collect::<anyhow::Result<Vec<_>>>()?;
    // What the fit should be read with: in `caveats` (`--json`) and as `note:` lines.
    let mut caveats: Vec<String> = runs
        .iter()
        .filter(|r| !r.ran_on(&hw.name))
        .map(|run| {
            format!(
                "{} ran on {}, fitted here for the {} profile (--hardware)",
                run.origin,
                run.device.as_deref().unwrap_or("another GPU"),
                hw.name
            )
        })
        .collect();
    let start = super::model_args::efficiency_with_stack(hw, None, a.stack.stack().as_ref())?;
    let fit = nccl::fit(&runs, hw, &start)?;
    let mut rows = Vec::new();
    for run in &runs {
        let before = nccl::predicted(run, hw, &start);
        let after = nccl::predicted(run, hw, &fit.params);
        for ((r, b), f) in run.rows.iter().zip(before).zip(after) {
            rows.push(RowOut {
                file: run.origin.clone(),
                collective: run.collective.name(),
                ranks: run.ranks,
                nodes: run.nodes,
                bytes: r.bytes,
                measured_s: r.time_s,
                profile_s: b,
                calibrated_s: f,
            });
        }
    }
    let mut fitted = fit.params.clone();
    let params = fit
        .fitted
        .iter()
        .map(|k| (k.name(), *k.slot(&mut fitted)))
        .collect();
    super::calibrate::check_fitted(
        &fit.params,
        "the files want a link the model cannot hold (times in another unit?)",
    )?;
    if !(fit.rms.is_finite() && fit.initial_rms.is_finite()) {
        bail!("the link model gives no finite time for these sizes; nothing written");
    }
    if let Some(out) = &a.out {
        let file = CalibrationFile {
            hardware: hw.name.clone(),
            model: crate::perf::calibration_file::LINKS_ONLY_MODEL.into(),
            n: rows.len(),
            rms_rel_error: fit.rms.exp_m1(),
            cv_rel_error: f64::NAN,
            profile_rms_rel_error: fit.initial_rms.exp_m1(),
            fitted: fit.fitted.iter().map(|k| k.name().to_string()).collect(),
            params: fit.params.clone(),
            stack: None,
            recompute: Vec::new(),
            unwritten: Vec::new(),
        };
        fsutil::write_atomic(out, file.to_ron()?.as_bytes())
            .with_context(|| format!("writing {}", out.display()))?;
    }
    let out = Output {
        small_messages: small_messages(&rows),
        profile_rms_log_error: fit.initial_rms,
        rms_log_error: fit.rms,
        rows,
        out: a.out.as_ref().map(|p| p.display().to_string()),
        profile_links: nccl::LinkSummary::of(hw, &start),
        links: nccl::LinkSummary::of(hw, &fit.params),
        caveats: {
            caveats.extend(links_not_separated(&runs));
            caveats.extend(at_the_roof(&fit.params, hw, &runs));
            caveats.extend(at_the_floor(&fit.params, &start));
            caveats.extend(far_from_the_profile(&params, &start));
            caveats
        },
        params,
    };
    if a.json {
        return super::write_json(&out);
    }
    print_text(&out, hw, &start);
    Ok(())
}

fn print_text(o: &Output, hw: &HardwareProfile, start: &crate::perf::EfficiencyParams) {
    println!(
        "links of {} fitted on {} measured sizes: rms log error {:.3} → {:.3}",
        hw.name,
        o.rows.len(),
        o.profile_rms_log_error,
        o.rms_log_error
    );
    let (p, l) = (&o.profile_links, &o.links);
    println!(
        "  scale-up link   {:8.1} GB/s a GPU  (profile {:.1} GB/s)",
        l.intra_gb_per_s, p.intra_gb_per_s
    );
    println!(
        "  scale-out link  {:8.2} GB/s a GPU  (profile {:.2} GB/s)",
        l.inter_gb_per_s, p.inter_gb_per_s
    );
    // The latency a user compares is a file's small-message time: the model splits it among
    // a per-phase latency, per-step hop latencies and the small-chunk fall-off, and one group
    // size cannot tell those apart, so no single term is printed as "the" latency.
    for m in &o.small_messages {
        println!(
            "  latency: {} ({} ranks, {} host{}) at {:.0} B: {:.1} µs measured, {:.1} calibrated \
             (profile {:.1})",
            m.file,
            m.ranks,
            m.nodes,
            if m.nodes == 1 { "" } else { "s" },
            m.bytes,
            m.measured_us,
            m.calibrated_us,
            m.profile_us
        );
    }
    let mut s = start.clone();
    for (name, v) in &o.params {
        let k = nccl::LinkKnob::ALL.into_iter().find(|k| k.name() == *name);
        let v0 = k.map_or(f64::NAN, |k| *k.slot(&mut s));
        println!("  {name:24} {v:.4e}  (profile {v0:.4e})");
    }
    println!("  per size: file, ranks/hosts, bytes, measured µs, profile µs, calibrated µs");
    for r in &o.rows {
        println!(
            "    {:28} {:>4}/{:<3} {:>12.0} {:>10.1} {:>10.1} {:>10.1}",
            r.file,
            r.ranks,
            r.nodes,
            r.bytes,
            r.measured_s * 1e6,
            r.profile_s * 1e6,
            r.calibrated_s * 1e6
        );
    }
    if let Some(out) = &o.out {
        println!("  written to {out} (use --calibration {out})");
    }
    for c in &o.caveats {
        println!("note: {c}");
    }
}
