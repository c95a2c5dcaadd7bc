//! `copus lesson`: the explorer running one of the embedded lessons (`sessions/lessons/*.ron`),
//! or `--list` of them. Lessons on the demo need nothing from disk; a lesson on a trainer run
//! trains it first (a few seconds) into a temporary directory removed on exit; its `s` saves
//! the session and the run into the working directory.

use crate::app::lessons::{self, Lesson, LessonData};
use crate::app::{App, Msg, update};
use crate::session::{DataSource, Session};
use anyhow::Context;
use clap::Args;
use std::path::{Path, PathBuf};

/// Arguments of `copus lesson`.
#[derive(Debug, Args)]
pub struct LessonArgs {
    /// The lesson to run (see --list).
    pub name: Option<String>,
    /// List the lessons and exit.
    #[arg(long)]
    pub list: bool,
    /// The explorer's configuration file and theme.
    #[command(flatten)]
    pub explorer: super::ExplorerArgs,
}

/// The lesson list, one per line: name, title, steps.
pub fn list_text() -> anyhow::Result<String> {
    let all = lessons::builtin()?;
    let width = all
        .iter()
        .map(|l| l.name.chars().count())
        .max()
        .unwrap_or(0);
    let mut o = String::new();
    for l in all {
        o.push_str(&format!(
            "{:<width$}  {} ({} steps)\n",
            l.name,
            l.title,
            l.steps.len()
        ));
    }
    Ok(o)
}

/// Write the trainer run of a lesson (`steps` steps of `copus demo-train`, seed 0) to `path`.
fn train(path: &Path, steps: u64) -> anyhow::Result<()> {
    use crate::trainer::{FileSink, RecordSink, Trainer, TrainerConfig};
    let mut trainer = Trainer::new(TrainerConfig::default())?;
    let mut sink = FileSink::create(path, false)?;
    for _ in 0..steps {
        sink.write_record(&trainer.step())?;
    }
    Ok(())
}

/// The explorer prepared for `lesson` (its data under `dir` when it needs a file), at its
/// first step. A lesson on a trainer run saves (`s`) into `save_dir` with its run beside it,
/// so that what is saved outlives the temporary `dir`; exports go there too.
pub fn lesson_app(lesson: &Lesson, dir: &Path) -> anyhow::Result<App> {
    lesson_app_saving_to(lesson, dir, dir)
}

/// [`lesson_app`] with saves and exports into `save_dir`.
pub fn lesson_app_saving_to(lesson: &Lesson, dir: &Path, save_dir: &Path) -> anyhow::Result<App> {
    let mut resolved = match &lesson.data {
        LessonData::Demo => super::open::demo_session(dir)?,
        LessonData::TrainerRun { steps, .. } => {
            let data = lessons::data_path(dir, lesson);
            train(&data, *steps)
                .with_context(|| format!("training the lesson's run into {}", data.display()))?;
            let name = data
                .file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
            let mut s = Session::adhoc(
                format!("{} steps of copus demo-train", steps),
                // Each sample of the character model read as one 4096-token sequence.
                DataSource::Stats {
                    path: name,
                    seq_len: Some(4096),
                },
                "llama-7b",
                "h100-sxm",
                1,
                8,
            );
            s.current_batch = Some(128);
            s.resolve(&dir.join(format!("lesson-{}.ron", lesson.name)))?
        }
    };
    resolved.session.name = format!("lesson: {} · {}", lesson.title, resolved.session.name);
    // What a saved lesson is (the ad-hoc session's "opened without a session file" was kept).
    resolved.session.description = format!(
        "the lesson `{}` ({}), saved from `copus lesson {}`: its steps are the tour (n)",
        lesson.name, lesson.title, lesson.name
    );
    resolved.session.tour = lesson.tour();
    let mut app = match lesson.data {
        // Saved under the lesson's name, as a lesson on a trainer run is: not over a
        // `copus-demo.ron` the user saved from the demo itself.
        LessonData::Demo => {
            let mut app = super::open::prepared(resolved, crate::compute::Device::Cpu)?;
            app.save_path = save_dir.join(format!("copus-lesson-{}.ron", lesson.name));
            app
        }
        // A small file: loaded now, so that the first step finds its data.
        LessonData::TrainerRun { .. } => {
            let loaded = crate::pipeline::load(&resolved).context("loading the lesson's run")?;
            let data = lessons::data_path(dir, lesson);
            let name = data
                .file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
            let text = std::fs::read_to_string(&data)
                .with_context(|| format!("reading the lesson's run {}", data.display()))?;
            let mut save_with = vec![(name, text)];
            let mut branches = None;
            if let LessonData::TrainerRun { branch_at, .. } = &lesson.data
                && !branch_at.is_empty()
            {
                let (report, records) =
                    lesson_branches(branch_at).context("the lesson's branched run")?;
                // Saved beside the session and named in it, so that the saved lesson still
                // shows the measurements its steps talk about.
                let file = format!("lesson-{}-branches.ndjson", lesson.name);
                resolved.session.branches = Some(file.clone());
                save_with.push((file, records));
                branches = Some(std::sync::Arc::new(report));
            }
            let mut app = App::new(resolved, loaded);
            app.save_path = save_dir.join(format!("copus-lesson-{}.ron", lesson.name));
            app.save_with = save_with;
            app.branches = branches;
            app
        }
    };
    update(&mut app, Msg::Tour(1));
    Ok(app)
}

/// Samples each branch of a lesson's branched experiment trains on.
pub const LESSON_BRANCH_BUDGET: u64 = 16_384;

/// The small branched experiment a lesson runs on the built-in trainer's default run: batches
/// 8 to 256, two seeds each, [`LESSON_BRANCH_BUDGET`] samples, the rate scaled by √B.
pub fn lesson_branches(
    at: &[u64],
) -> anyhow::Result<(crate::stats::estimate::cbs::CbsReport, String)> {
    use crate::trainer::branch::{BranchPlan, LrScaling, run_branches};
    let plan = BranchPlan {
        at_steps: at.to_vec(),
        batches: vec![8, 16, 32, 64, 128, 256],
        seeds: 2,
        budget_samples: LESSON_BRANCH_BUDGET,
        eval_every: 1024,
        eval_samples: 512,
        lr_scaling: LrScaling::Sqrt,
    };
    let mut text = String::new();
    run_branches(
        crate::trainer::TrainerConfig::default(),
        &plan,
        |_| Ok(()),
        |line| {
            text.push_str(&serde_json::to_string(line).unwrap_or_default());
            text.push('\n');
            Ok(())
        },
    )?;
    let records = crate::stats::estimate::cbs::parse(&text)?;
    let report = crate::stats::estimate::cbs::measure(
        &records,
        super::cbs::DEFAULT_TOLERANCE,
        0.95,
        super::cbs::DEFAULT_RESAMPLES,
    )?;
    Ok((report, text))
}

/// Prefix of a lesson's scratch directory; the process id follows.
const SCRATCH_PREFIX: &str = "copus-lesson-";

/// A fresh directory for a lesson's data, under the system's temporary directory. The
/// directories of earlier lessons whose process is gone (closed with their terminal, which
/// ends the process before it can clean up) are removed first.
fn scratch_dir() -> anyhow::Result<PathBuf> {
    remove_stale_scratch_dirs(&std::env::temp_dir());
    let dir = std::env::temp_dir().join(format!("{SCRATCH_PREFIX}{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// Run `copus lesson`.
pub fn run(args: &LessonArgs, config: &crate::config::Config) -> anyhow::Result<()> {
    let Some(name) = args.name.as_deref().filter(|_| !args.list) else {
        print!("{}", list_text()?);
        if !args.list {
            println!("run one with: copus lesson NAME");
        }
        return Ok(());
    };
    let lesson = lessons::find(name)?;
    match lesson.data {
        LessonData::Demo => {
            let cwd = std::env::current_dir().context("the working directory")?;
            let mut app = lesson_app(&lesson, &cwd)?;
            app.configure(config);
            crate::runtime::run(app)?;
        }
        LessonData::TrainerRun { ref branch_at, .. } => {
            if !branch_at.is_empty() {
                eprintln!(
                    "copus lesson: training the run and a small branched experiment on it \
                     (a few seconds)…"
                );
            }
            let dir = scratch_dir()?;
            let cwd = std::env::current_dir().context("the working directory")?;
            let result = lesson_app_saving_to(&lesson, &dir, &cwd).and_then(|mut app| {
                app.configure(config);
                Ok(crate::runtime::run(app)?)
            });
            let _ = std::fs::remove_dir_all(&dir);
            result?;
        }
    }
    Ok(())
}

/// Remove the lesson scratch directories in `tmp` whose process no longer runs.
fn remove_stale_scratch_dirs(tmp: &Path) {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(SCRATCH_PREFIX))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !process_runs(pid) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// Whether a process with this id runs (signal 0: ESRCH when there is none).
fn process_runs(pid: u32) -> bool {
    #[cfg(unix)]
    {
        let Ok(pid) = libc::pid_t::try_from(pid) else {
            return false;
        };
        // SAFETY: kill(2) with signal 0 sends nothing; it only checks that the process exists.
        let r = unsafe { libc::kill(pid, 0) };
        r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
    }
    #[cfg(not(unix))]
    {
        let _ = pid;
        true
    }
}

#[cfg(test)]
mod scratch_tests {
    use super::*;

    #[test]
    fn stale_lesson_directories_are_removed_and_live_ones_kept() {
        let tmp = tempfile::tempdir().expect("tempdir");
        // A pid far above any pid_max (4194304 on Linux) runs nowhere.
        let stale = tmp.path().join(format!("{SCRATCH_PREFIX}999999999"));
        let live = tmp
            .path()
            .join(format!("{SCRATCH_PREFIX}{}", std::process::id()));
        let other = tmp.path().join("copus-lesson-notapid");
        for d in [&stale, &live, &other] {
            std::fs::create_dir_all(d).expect("mkdir");
        }
        std::fs::write(stale.join("lesson.ndjson"), "x").expect("write");
        remove_stale_scratch_dirs(tmp.path());
        assert!(!stale.exists());
        assert!(live.exists() && other.exists());
    }
}
