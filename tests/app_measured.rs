//! The explorer on a measured run: a stats file opened without a session file gets an ad-hoc
//! session, its trajectory carries intervals, and the estimator panel shows the analysis.

use copus::app::{App, Msg, update};
use copus::cli::open::{OpenArgs, adhoc_session};
use copus::session::Panel;
use copus::ui::palette::ColorMode;
use copus::ui::view;
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use std::path::Path;

fn open_args(path: &Path) -> OpenArgs {
    OpenArgs {
        device: copus::compute::Device::Cpu,
        ..OpenArgs::for_path(path)
    }
}

#[test]
fn a_stats_file_opens_with_intervals_and_estimators() {
    let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/data/sample-run.ndjson");
    let resolved = adhoc_session(&open_args(&sample)).expect("ad-hoc session");
    assert!(
        resolved.path.ends_with("sample-run.ndjson.copus.ron"),
        "{:?}",
        resolved.path
    );
    let mut app = App::loading(resolved.clone());
    assert!(app.loading && app.trajectory.points.is_empty());
    let loaded = copus::pipeline::load(&resolved);
    update(&mut app, Msg::SourceLoaded(Box::new(loaded)));
    assert!(!app.loading);
    let report = app
        .analysis
        .clone()
        .expect("a measured run carries its analysis");
    assert!(app.trajectory.points.len() > 100);
    assert!(app.trajectory.points.iter().any(|p| p.ci.is_some()));
    assert!(
        report.summary.malformed_lines >= 1,
        "the sample has a malformed line"
    );

    update(&mut app, Msg::ShowSide(Panel::Estimators));
    let mut term = Terminal::new(TestBackend::new(200, 60)).expect("terminal");
    term.draw(|f| view::draw(f, &app, ColorMode::Indexed))
        .expect("draws");
    let buf = term.backend().buffer().clone();
    let text: String = (0..60)
        .flat_map(|y| (0..200).map(move |x| (x, y)))
        .map(|(x, y)| buf[(x, y)].symbol().to_string())
        .collect();
    assert!(text.contains("run-wide: B_simple"), "{text}");
    // Diagnostics are listed, warnings first: the sample run drifts.
    assert!(
        text.contains("B_simple grows ×"),
        "diagnostics shown: {text}"
    );
}

#[test]
fn a_missing_stats_file_is_a_clear_error_not_a_panic() {
    let resolved = adhoc_session(&open_args(Path::new("/nonexistent/run.ndjson")))
        .expect("the session itself resolves");
    let err = copus::pipeline::load(&resolved).expect_err("missing file");
    assert!(err.to_string().contains("/nonexistent/run.ndjson"), "{err}");
}

#[test]
fn a_dump_directory_opens_with_the_seed_estimator_beside() {
    use copus::compute::DType;
    use copus::source::dump::synth::{SynthSpec, write_dump};
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("dump");
    let spec = SynthSpec {
        steps: 12,
        files: 4,
        samples: 8.0,
        dtype: DType::BF16,
        tensor_elems: vec![4096, 999, 17],
        seed: 3,
    };
    write_dump(&dir, &spec).expect("synthetic dump");
    let resolved = adhoc_session(&open_args(&dir)).expect("ad-hoc session for a directory");
    let progress = std::cell::Cell::new(0u64);
    let loaded = copus::pipeline::load_with(&resolved, copus::compute::Device::Cpu, &|p| {
        progress.set(p.bytes_done)
    })
    .expect("the dump loads");
    assert!(progress.get() > 0, "progress was reported");
    assert_eq!(loaded.seed_ema.len(), 12);
    assert!(loaded.analysis.is_some());
    let app = App::new(resolved, loaded);
    assert_eq!(app.seed_ema.len(), 12);
}

/// A dump written every 4 steps: each record stands for 4 steps of b_big samples, so the
/// batch the explorer reads as the run's (and its token axis) is b_big, not b_big / 4; the
/// newest step with fewer gradient sets than the one before is left out and said on the
/// source line, ahead of the rest.
#[test]
fn a_dump_every_few_steps_reads_its_batch_and_leaves_out_a_step_in_writing() {
    use copus::compute::DType;
    use copus::source::dump::synth::{SynthSpec, write_dump};
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("dump");
    let spec = SynthSpec {
        steps: 12,
        files: 4,
        samples: 8.0,
        dtype: DType::F32,
        tensor_elems: vec![512, 33],
        seed: 5,
    };
    write_dump(&dir, &spec).expect("synthetic dump");
    for step in (0..12u64).rev() {
        std::fs::rename(
            dir.join(format!("step_{step}")),
            dir.join(format!("step_{}", step * 4)),
        )
        .expect("renumber");
    }
    let newest = dir.join("step_44");
    let mut files: Vec<_> = std::fs::read_dir(&newest)
        .expect("newest step")
        .map(|e| e.expect("entry").path())
        .collect();
    files.sort();
    std::fs::remove_file(&files[3]).expect("a set still to come");
    let resolved = adhoc_session(&open_args(&dir)).expect("ad-hoc session");
    let loaded = copus::pipeline::load_with(&resolved, copus::compute::Device::Cpu, &|_| {})
        .expect("the dump loads");
    let note = loaded.note.clone().expect("a source note");
    assert!(
        note.starts_with("newest step 44 left out (incomplete)"),
        "{note}"
    );
    let app = App::new(resolved, loaded);
    assert_eq!(app.trajectory.points.last().map(|p| p.step), Some(40));
    assert_eq!(
        app.measured_batch(),
        Some(32),
        "b_big is 4 files x 8 samples"
    );
}

/// Gradients dumped after the all-reduce (every set of a step the same gradient) measure no
/// noise: the explorer says so with the analysis' reason, not as a conversion factor to check.
#[test]
fn a_dump_of_one_gradient_per_step_is_named_as_such_in_the_explorer() {
    use copus::compute::DType;
    use copus::source::dump::synth::{SynthSpec, write_dump};
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("dump");
    let spec = SynthSpec {
        steps: 8,
        files: 2,
        samples: 8.0,
        dtype: DType::F32,
        tensor_elems: vec![256],
        seed: 9,
    };
    write_dump(&dir, &spec).expect("synthetic dump");
    for step in 0..8 {
        let sdir = dir.join(format!("step_{step}"));
        let mut files: Vec<_> = std::fs::read_dir(&sdir)
            .expect("step")
            .map(|e| e.expect("entry").path())
            .collect();
        files.sort();
        std::fs::copy(&files[0], &files[1]).expect("one gradient in both sets");
    }
    let resolved = adhoc_session(&open_args(&dir)).expect("ad-hoc session");
    let err = copus::pipeline::load_with(&resolved, copus::compute::Device::Cpu, &|_| {})
        .expect_err("no noise, no B_crit")
        .to_string();
    assert!(
        err.contains("no step gives a usable B_crit") && err.contains("hold one gradient"),
        "{err}"
    );
    assert!(
        !err.contains("conversion factor") && !err.contains(".copus.ron"),
        "{err}"
    );
}

#[test]
fn a_long_load_shows_a_gauge_until_the_source_arrives() {
    let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/data/sample-run.ndjson");
    let resolved = adhoc_session(&open_args(&sample)).expect("ad-hoc session");
    let mut app = App::loading(resolved.clone());
    update(&mut app, Msg::Progress(0.42, "reducing the dump".into()));
    let mut term = Terminal::new(TestBackend::new(120, 40)).expect("terminal");
    term.draw(|f| view::draw(f, &app, ColorMode::Indexed))
        .expect("draws");
    let buf = term.backend().buffer().clone();
    let text: String = (0..40)
        .flat_map(|y| (0..120).map(move |x| (x, y)))
        .map(|(x, y)| buf[(x, y)].symbol().to_string())
        .collect();
    assert!(text.contains("reducing the dump: 42%"), "{text}");
    let loaded = copus::pipeline::load(&resolved);
    update(&mut app, Msg::SourceLoaded(Box::new(loaded)));
    assert!(app.progress.is_none() && !app.loading);
}

#[test]
fn a_compared_run_shares_the_token_axis_when_seq_len_is_given() {
    // `open A --compare B --seq-len 4096`: B is read with A's tokens per sample, so both lines
    // lie on one token axis (B used to be laid at its own 1 token per sample, off the chart).
    use copus::session::{DataSource, Session};
    use copus::trainer::{FileSink, RecordSink, Trainer, TrainerConfig};
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, seed) in [("a.ndjson", 0), ("b.ndjson", 1)] {
        let mut t = Trainer::new(TrainerConfig {
            seed,
            ..TrainerConfig::default()
        })
        .expect("trainer");
        let mut sink = FileSink::create(&dir.path().join(name), false).expect("sink");
        for _ in 0..120 {
            sink.write_record(&t.step()).expect("write");
        }
    }
    let session = Session::adhoc(
        "a".into(),
        DataSource::Stats {
            path: "a.ndjson".into(),
            seq_len: Some(4096),
        },
        "llama-7b",
        "h100-sxm",
        1,
        8,
    );
    let resolved = session.resolve(&dir.path().join("a.ron")).expect("resolve");
    let mut app =
        copus::cli::open::prepared(resolved, copus::compute::Device::Cpu).expect("prepared");
    copus::cli::open_compare::attach(&mut app, &dir.path().join("b.ndjson")).expect("compare");
    let last = |t: &copus::trajectory::Trajectory| t.points.last().expect("points").tokens;
    let a = last(&app.trajectory);
    let b = last(&app.compare.as_ref().expect("compared").trajectory);
    assert!((b / a - 1.0).abs() < 0.05, "A ends at {a} tokens, B at {b}");
}

#[test]
fn the_smoother_widens_and_narrows_on_keys_and_the_run_is_analysed_again() {
    let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/data/sample-run.ndjson");
    let resolved = adhoc_session(&open_args(&sample)).expect("ad-hoc session");
    let loaded = copus::pipeline::load(&resolved).expect("loads");
    let mut app = App::new(resolved, loaded);
    let summary = &app.analysis.as_ref().expect("analysis").summary;
    let auto = app
        .resolved
        .session
        .estimator
        .bandwidth_for(summary.steps, 1.0);
    assert_eq!(
        summary.bandwidth_steps, auto,
        "every step of the sample is logged"
    );
    let effects = update(&mut app, Msg::Smoothing(1));
    assert_eq!(effects, vec![copus::app::Effect::LoadSource]);
    let wider = app.resolved.session.estimator.bandwidth_steps.expect("set");
    assert!((wider / auto - 1.5).abs() < 1e-9, "{wider} vs {auto}");
    let loaded = copus::pipeline::load(&app.resolved);
    update(&mut app, Msg::SourceLoaded(Box::new(loaded)));
    let smoother = &app.analysis.as_ref().expect("analysis").summary.smoother;
    assert!(
        smoother.contains(&format!(
            "sigma={} steps",
            if wider >= 100.0 {
                format!("{wider:.0}")
            } else {
                format!("{wider:.1}")
                    .trim_end_matches('0')
                    .trim_end_matches('.')
                    .to_string()
            }
        )),
        "{smoother}"
    );
    update(&mut app, Msg::Smoothing(-1));
    update(&mut app, Msg::Smoothing(-1));
    let narrower = app.resolved.session.estimator.bandwidth_steps.expect("set");
    assert!(
        (narrower * 1.5 / auto - 1.0).abs() < 1e-9,
        "{narrower} vs {auto}"
    );
}

#[test]
fn a_stats_file_opened_with_a_stack_searches_that_stacks_zero_stage() {
    // A stats file states no ZeRO stage: the explorer searches the stated stack's own (FSDP:
    // 3, Megatron-LM 2021: 0); without a stack, the distributed optimizer's 1.
    use copus::cli::stack_args::{PresetArg, StackArgs};
    let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/data/sample-run.ndjson");
    for (preset, want) in [
        (None, 1u8),
        (Some(PresetArg::TorchtitanFsdp2), 3),
        (Some(PresetArg::MegatronLm2021), 0),
    ] {
        let args = OpenArgs {
            stack: StackArgs {
                stack: preset,
                ..StackArgs::default()
            },
            ..open_args(&sample)
        };
        let app = copus::cli::open::explorer_app(&args).expect("opens");
        assert_eq!(app.resolved.session.search.zero, vec![want], "{preset:?}");
    }
}

/// `copus open demo` opens the bundled demo from any directory, as `copus` alone and
/// `grid demo` do (it said "demo: no such file or directory"); a stats file's flags are
/// refused for it, naming them.
#[test]
fn open_demo_opens_the_bundled_demo() {
    let app = copus::cli::open::explorer_app(&open_args(Path::new("demo"))).expect("opens");
    assert!(
        app.resolved.session.name.contains("demo"),
        "{}",
        app.resolved.session.name
    );
    let args = OpenArgs {
        model: Some("llama3-8b".into()),
        ..open_args(Path::new("demo"))
    };
    let Err(err) = copus::cli::open::explorer_app(&args) else {
        panic!("--model with demo was accepted");
    };
    let err = err.to_string();
    assert!(err.contains("--model") && err.contains("demo"), "{err}");
}

/// A recorded run opens at its latest point with a bounded B_crit interval: the shipped
/// sample's last 16 smoothed points are open above (its |G|² falls toward zero at the end),
/// and the explorer opened on one of them, reading "B_crit 296 [147–14.0k]" and every
/// statistical efficiency near 1. The status says where it opened and that End goes on.
#[test]
fn a_recorded_run_opens_at_its_latest_bounded_point() {
    let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/data/sample-run.ndjson");
    let resolved = adhoc_session(&open_args(&sample)).expect("ad-hoc session");
    let loaded = copus::pipeline::load(&resolved).expect("loads");
    let mut app = App::loading(resolved);
    update(&mut app, Msg::SourceLoaded(Box::new(Ok(loaded))));
    let points = &app.trajectory.points;
    let bounded = |i: usize| points[i].ci.is_some_and(|(_, hi)| hi.is_finite());
    assert!(
        !bounded(points.len() - 1),
        "the sample's last point is open above"
    );
    assert!(bounded(app.cursor), "opened at {}", app.cursor);
    assert!((app.cursor + 1..points.len()).all(|i| !bounded(i)));
    assert!(
        app.status.starts_with(&format!(
            "opened at step {} (last bounded B_crit) · {} later points open above",
            points[app.cursor].step,
            points.len() - 1 - app.cursor
        )),
        "{}",
        app.status
    );
    // Steps without an estimate have no point; the status counts them (they were dropped
    // without a word).
    let analysed = app.analysis.as_ref().expect("analysis").steps.len();
    let missing = analysed - points.len();
    assert_eq!(
        app.status
            .contains(&format!(" · {missing} steps with no estimate")),
        missing > 0,
        "{missing}: {}",
        app.status
    );
    let last = points.len() - 1;
    update(&mut app, Msg::End);
    assert_eq!(app.cursor, last);
}

/// A run whose last steps' |G|² estimates fall below zero: those steps have no B_crit and no
/// point on the timeline, and the status says how many (393 of 400 points were shown with
/// nothing said).
#[test]
fn steps_without_an_estimate_are_counted_in_the_status() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("run.ndjson");
    let mut text = String::new();
    for s in 0..400u64 {
        // |G|² = (32·sq_big − 4·sq_small)/28: 1 until step 300, then below zero.
        let sq_big = if s < 300 { 1.0 + 60.0 / 32.0 } else { 0.02 };
        let wobble = 0.05 * ((s * 7919) % 13) as f64 / 13.0;
        text.push_str(&format!(
            "{{\"v\":1,\"step\":{s},\"b_small\":4,\"b_big\":32,\"n_small\":8,\"sq_small\":{},\"sq_big\":{}}}\n",
            1.0 + 60.0 / 4.0 + wobble,
            sq_big + wobble / 8.0
        ));
    }
    std::fs::write(&path, text).expect("write");
    let resolved = adhoc_session(&open_args(&path)).expect("ad-hoc session");
    let loaded = copus::pipeline::load(&resolved).expect("loads");
    let mut app = App::loading(resolved);
    update(&mut app, Msg::SourceLoaded(Box::new(Ok(loaded))));
    let analysed = app.analysis.as_ref().expect("analysis").steps.len();
    let missing = analysed - app.trajectory.points.len();
    assert!(missing > 0, "every step has an estimate");
    let said = format!(
        "{missing} step{} with no estimate",
        if missing == 1 { "" } else { "s" }
    );
    let at = app.status.find(&said);
    assert!(
        app.status.contains(&format!("{said} (|G|² ≤ 0)")),
        "{missing}: {}",
        app.status
    );
    // End goes to the last step with an estimate and says that the run goes on (the
    // timeline, its axis and End stopped before the run's end without a word).
    let mut ended = app.clone();
    update(&mut ended, Msg::End);
    assert!(
        ended.status.contains("the run goes on to step 399"),
        "{}",
        ended.status
    );
    // The count within a 100-column status line (it was cut off there).
    let through = app.status[..at.unwrap_or(0) + said.len()].chars().count();
    assert!(through <= 98, "{through}: {}", app.status);
}
