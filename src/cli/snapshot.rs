//! `copus snapshot`: any explorer screen, after a list of keys, as text or SVG (for slides,
//! documents and bug reports), without a terminal.

use crate::ui::snapshot;
use anyhow::Context;
use clap::Args;
use std::path::PathBuf;

/// Arguments of `copus snapshot`.
#[derive(Debug, Args)]
pub struct SnapshotArgs {
    /// A session (.ron), stats file (.ndjson) or dump directory, as `copus open` takes;
    /// without it (and without --lesson) the bundled demo.
    pub path: Option<PathBuf>,
    /// A lesson instead (`copus lesson --list`), at its first step.
    #[arg(long, conflicts_with = "path")]
    pub lesson: Option<String>,
    /// Stats file or dump: model profile, as `copus open --model` [default: llama-7b].
    #[arg(long, requires = "path", conflicts_with = "lesson")]
    pub model: Option<String>,
    /// Stats file or dump: hardware profile, as `copus open --hardware` [default: h100-sxm].
    #[arg(long, requires = "path", conflicts_with = "lesson")]
    pub hardware: Option<String>,
    /// Stats file or dump: nodes in the cluster, as `copus open --nodes` [default: 1].
    #[arg(long, requires = "path", conflicts_with = "lesson", value_parser = super::at_least_one_u32)]
    pub nodes: Option<u32>,
    /// Stats file or dump: GPUs per node, as `copus open --gpus-per-node` [default: 8].
    #[arg(long, requires = "path", conflicts_with = "lesson", value_parser = super::at_least_one_u32)]
    pub gpus_per_node: Option<u32>,
    /// A calibration file instead of the session's or the profile's efficiencies, as `copus
    /// open --calibration` (on the bundled demo without PATH).
    #[arg(long, conflicts_with = "lesson")]
    pub calibration: Option<PathBuf>,
    /// Stats file or dump: tokens per sample of the run, as `copus open --seq-len` [default:
    /// inferred from the records' `tokens`/`b_big`, else the model's sequence length].
    #[arg(
        long,
        value_name = "TOKENS",
        requires = "path",
        conflicts_with = "lesson",
        value_parser = super::at_least_one_u32
    )]
    pub seq_len: Option<u32>,
    /// Dump: samples per gradient file, overriding the files' `samples` metadata, as `copus
    /// open --samples` (a dump without sample counts needs it).
    #[arg(
        long,
        value_name = "SAMPLES",
        requires = "path",
        conflicts_with = "lesson",
        value_parser = super::analyze::samples_per_file
    )]
    pub samples: Option<f64>,
    /// Stats file or dump: estimator settings (smoother, bandwidth, decay, …), as `copus open`
    /// takes them.
    #[command(flatten)]
    pub estimator: super::estimator_args::EstimatorArgs,
    /// Stats file or dump: the batch (sequences of the model) the run uses now, as `copus open
    /// --current-batch`.
    #[arg(
        long,
        value_name = "SAMPLES",
        requires = "path",
        conflicts_with = "lesson"
    )]
    pub current_batch: Option<u64>,
    /// Stats file: a second run laid over the timeline, as `copus open --compare` (the
    /// two-run view).
    #[arg(long, value_name = "B", requires = "path", conflicts_with = "lesson")]
    pub compare: Option<PathBuf>,
    /// Stats file: branch records laid over the timeline, as `copus open --branches`.
    #[arg(
        long,
        value_name = "FILE",
        requires = "path",
        conflicts_with = "lesson"
    )]
    pub branches: Option<PathBuf>,
    /// With --branches: the measured ratio as the B_crit conversion, as `copus open
    /// --b-crit-from`.
    #[arg(long, value_enum, requires = "branches", value_name = "KIND")]
    pub b_crit_from: Option<super::open::BCritFrom>,
    /// The training stack, as `copus open` takes it (a session, stats file or dump; the demo).
    #[command(flatten)]
    pub stack: super::stack_args::StackArgs,
    /// The theme of an SVG snapshot (text has no colours). The keys are always the default
    /// bindings, so that a list of keys gives the same screen on every machine.
    #[arg(long, value_enum)]
    pub theme: Option<crate::config::ThemeName>,
    /// Keys to press first, as tmux names them, separated by spaces: `"2 Left Left"`,
    /// `"End x"`, `"n n r"`, `"S-Right"`, `"Enter"`.
    #[arg(long, default_value = "")]
    pub keys: String,
    /// Screen size, columns×rows.
    #[arg(long, default_value = "120x40", value_parser = parse_size)]
    pub size: (u16, u16),
    /// Output format (default: svg for an --out ending in .svg, else text).
    #[arg(long, value_enum)]
    pub format: Option<SnapshotFormat>,
    /// Write here instead of standard output.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Replace --out if it exists.
    #[arg(long)]
    pub force: bool,
}

/// What `copus snapshot` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SnapshotFormat {
    /// The characters of the screen, one line per row.
    Text,
    /// An SVG picture with the screen's colours (NO_COLOR: without them).
    Svg,
}

/// Smallest and largest screen sizes accepted, cells: from below the explorer's own minimum
/// (60×16; smaller screens render its "too small" message, as a terminal would show it).
const SIZE_RANGE: std::ops::RangeInclusive<u16> = 10..=1000;

fn parse_size(s: &str) -> Result<(u16, u16), String> {
    let (w, h) = s
        .split_once(['x', 'X', '×'])
        .ok_or_else(|| format!("'{s}': expected COLUMNSxROWS, as in 120x40"))?;
    // The side at fault is named ("10x5" said "each side" of a width that was fine).
    let num = |v: &str, side: &str| {
        v.trim()
            .parse::<u16>()
            .ok()
            .filter(|n| SIZE_RANGE.contains(n))
            .ok_or_else(|| {
                format!(
                    "'{s}': the {side} '{}' must be a whole number from 10 to 1000",
                    v.trim()
                )
            })
    };
    Ok((num(w, "width")?, num(h, "height")?))
}

/// Run `copus snapshot`.
pub fn run(a: &SnapshotArgs) -> anyhow::Result<()> {
    let format = a
        .format
        .unwrap_or(match a.out.as_ref().and_then(|p| p.extension()) {
            Some(e) if e == "svg" => SnapshotFormat::Svg,
            _ => SnapshotFormat::Text,
        });
    if let Some(out) = &a.out {
        let read: Vec<(&str, &std::path::Path)> = [
            ("the session or run drawn", a.path.as_deref()),
            ("--calibration", a.calibration.as_deref()),
            ("--branches", a.branches.as_deref()),
            ("--compare", a.compare.as_deref()),
        ]
        .into_iter()
        .filter_map(|(role, p)| p.map(|p| (role, p)))
        .collect();
        crate::fsutil::check_distinct("--out", out, &read)?;
        crate::fsutil::check_output(out, a.force)
            .with_context(|| format!("--out {}", out.display()))?;
    }
    let keys = a
        .keys
        .split_whitespace()
        .map(snapshot::parse_key)
        .collect::<Result<Vec<_>, _>>()
        // A key it does not know is a flag value it does not take: exit status 2.
        .map_err(|e| super::FlagValueError(format!("--keys: {e}")))?;
    let cwd = std::env::current_dir().context("the working directory")?;
    let stack = a.stack.stack();
    if a.lesson.is_some() && stack.is_some() {
        anyhow::bail!(
            "--lesson: a lesson sets its own stack; --stack and its settings are for a session, \
             a stats file, a dump or the demo"
        );
    }
    // The bundled demo with a calibration file is opened as `copus open demo` opens it.
    let demo = std::path::PathBuf::from("demo");
    let path = a
        .path
        .as_ref()
        .or_else(|| (a.lesson.is_none() && a.calibration.is_some()).then_some(&demo));
    let app = match (path, &a.lesson) {
        (Some(p), _) => super::open::explorer_app(&super::open::OpenArgs {
            device: crate::compute::Device::Cpu,
            seq_len: a.seq_len,
            model: a.model.clone(),
            hardware: a.hardware.clone(),
            nodes: a.nodes,
            gpus_per_node: a.gpus_per_node,
            calibration: a.calibration.clone(),
            branches: a.branches.clone(),
            b_crit_from: a.b_crit_from,
            stack: a.stack.clone(),
            samples: a.samples,
            estimator: a.estimator.clone(),
            current_batch: a.current_batch,
            compare: a.compare.clone(),
            ..super::open::OpenArgs::for_path(p)
        })?,
        (None, Some(name)) => {
            let lesson = crate::app::lessons::find(name)?;
            // A lesson on a trainer run trains into a directory of its own, removed after.
            let dir = std::env::temp_dir().join(format!("copus-snapshot-{}", std::process::id()));
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            let app = super::lesson::lesson_app_saving_to(&lesson, &dir, &cwd);
            let app = app.map(snapshot::opened);
            let _ = std::fs::remove_dir_all(&dir);
            app?
        }
        (None, None) => {
            let mut demo = super::open::demo_session(&cwd)?;
            super::model_args::apply_overrides(&mut demo, None, stack.as_ref())?;
            for n in demo.notes() {
                eprintln!("note: {n}");
            }
            super::open::prepared(demo, crate::compute::Device::Cpu)?
        }
    };
    let mut app = if a.lesson.is_some() {
        app
    } else {
        snapshot::opened(app)
    };
    if let Some(theme) = a.theme {
        app.theme = theme;
    }
    for key in keys {
        snapshot::press(&mut app, key);
    }
    let mode = match (format, crate::ui::palette::ColorMode::from_env()) {
        (SnapshotFormat::Svg, m) => m,
        (SnapshotFormat::Text, _) => crate::ui::palette::ColorMode::Monochrome,
    };
    let buf = snapshot::draw(&app, a.size.0, a.size.1, mode).map_err(anyhow::Error::msg)?;
    let body = match format {
        SnapshotFormat::Text => snapshot::text(&buf),
        SnapshotFormat::Svg => snapshot::svg(&buf),
    };
    match &a.out {
        Some(out) => crate::fsutil::write_atomic(out, body.as_bytes())
            .with_context(|| format!("writing {}", out.display()))?,
        None => super::write_stdout(&body)?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    /// The side out of range is named ("10x5" said "each side" of a width that was fine).
    #[test]
    fn a_size_names_the_side_at_fault() {
        assert_eq!(super::parse_size("120x40"), Ok((120, 40)));
        let e = super::parse_size("10x5").expect_err("height");
        assert!(e.contains("the height '5'"), "{e}");
        let e = super::parse_size("9x40").expect_err("width");
        assert!(e.contains("the width '9'"), "{e}");
    }
}
