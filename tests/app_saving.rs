//! Nothing the user wrote is lost: the embedded demo saves to the working directory, a
//! commented session is never rewritten in place, an existing file is replaced only when the
//! user says so, Esc closes popups and never quits, quitting with unsaved changes asks, the
//! saved cursor is restored, exports are named as reported, and load failures are shown.

use crate::dump_support;
use crate::render_support;
use copus::app::OverlayKind;
use copus::app::{App, Confirm, Effect, Msg, PromptEdit, WriteJob, update};
use copus::cli::open::{
    DEMO_RON, OpenArgs, adhoc_session, demo_session, has_comments, prepared, save_target,
};
use copus::runtime::{keys, worker};
use copus::session::Session;
use copus::ui::palette::ColorMode;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use std::path::Path;

fn render(app: &App, w: u16, h: u16) -> String {
    render_support::screen(app, w, h, ColorMode::Monochrome)
}

fn demo_in(dir: &Path) -> App {
    let resolved = demo_session(dir).expect("the embedded demo resolves");
    render_support::with_table(prepared(resolved, copus::compute::Device::Cpu).expect("prepared"))
}

fn press(app: &mut App, code: KeyCode) -> Vec<Effect> {
    match keys::key_to_msg(app, KeyEvent::new(code, KeyModifiers::NONE)) {
        Some(msg) => update(app, msg),
        None => Vec::new(),
    }
}

fn the_write(effects: Vec<Effect>) -> WriteJob {
    match effects.as_slice() {
        [Effect::Write(job)] => job.clone(),
        other => panic!("expected one write, got {other:?}"),
    }
}

#[test]
fn the_embedded_demo_saves_to_the_working_directory_and_asks_before_replacing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut app = demo_in(dir.path());
    assert!(!app.trajectory.points.is_empty(), "the demo loaded");
    let job = the_write(press(&mut app, KeyCode::Char('s')));
    assert_eq!(job.files[0].0, dir.path().join("copus-demo.ron"));
    assert!(!job.overwrite, "a file there is not ours");
    // Something the user wrote is there: the write is held back and the user asked.
    std::fs::write(dir.path().join("copus-demo.ron"), "mine").expect("write");
    let msg = worker::write(job);
    assert!(matches!(msg, Msg::WouldOverwrite { .. }), "{msg:?}");
    update(&mut app, msg);
    assert!(matches!(app.confirm(), Some(Confirm::Overwrite { .. })));
    assert!(render(&app, 80, 24).contains("y replace it"));
    // n keeps the file.
    assert!(press(&mut app, KeyCode::Char('n')).is_empty());
    assert_eq!(
        std::fs::read_to_string(dir.path().join("copus-demo.ron")).expect("read"),
        "mine"
    );
    // Asked again, y replaces it; later saves go through without asking.
    let job = the_write(press(&mut app, KeyCode::Char('s')));
    update(&mut app, worker::write(job));
    let job = the_write(press(&mut app, KeyCode::Char('y')));
    assert!(job.overwrite);
    update(&mut app, worker::write(job));
    let saved = Session::load(&dir.path().join("copus-demo.ron")).expect("a session");
    assert_eq!(saved.name, app.resolved.session.name);
    let job = the_write(press(&mut app, KeyCode::Char('s')));
    assert!(job.overwrite, "this session wrote it");
    // Unless someone changed it since: a colleague's edit made while the explorer was open
    // is held back and asked about, not replaced.
    let path = dir.path().join("copus-demo.ron");
    let edited = format!(
        "// a colleague's note\n{}",
        std::fs::read_to_string(&path).expect("read")
    );
    std::fs::write(&path, &edited).expect("edit");
    let msg = worker::write(job);
    assert!(matches!(msg, Msg::WouldOverwrite { .. }), "{msg:?}");
    update(&mut app, msg);
    assert!(
        render(&app, 80, 24).contains("changed"),
        "{}",
        render(&app, 80, 24)
    );
    press(&mut app, KeyCode::Char('n'));
    assert_eq!(std::fs::read_to_string(&path).expect("read"), edited);
    // Asked, y replaces it; from then on it is this session's again.
    let job = the_write(press(&mut app, KeyCode::Char('s')));
    update(&mut app, worker::write(job));
    let job = the_write(press(&mut app, KeyCode::Char('y')));
    assert!(matches!(worker::write(job.clone()), Msg::Written { .. }));
    update(&mut app, worker::write(job));
    let job = the_write(press(&mut app, KeyCode::Char('s')));
    assert!(matches!(worker::write(job), Msg::Written { .. }));
}

#[test]
fn save_as_writes_where_the_user_says() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut app = demo_in(dir.path());
    let job = save_as(&mut app, &dir.path().join("mine"));
    assert_eq!(job.files[0].0, dir.path().join("mine.ron"));
    assert_eq!(app.save_path, dir.path().join("mine.ron"));
}

#[test]
fn a_commented_session_is_saved_beside_never_in_place() {
    assert!(has_comments(DEMO_RON), "the shipped demo is commented");
    let (path, replace) = save_target(Path::new("/x/demo.ron"), DEMO_RON);
    assert_eq!(path, Path::new("/x/demo.saved.ron"));
    assert!(!replace);
    let plain = "(name: \"x\")";
    let (path, replace) = save_target(Path::new("/x/plain.ron"), plain);
    assert_eq!(path, Path::new("/x/plain.ron"));
    assert!(replace, "a plain session the user opened is saved in place");
}

#[test]
fn esc_closes_popups_and_never_quits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut app = demo_in(dir.path());
    update(&mut app, Msg::Tour(1));
    update(&mut app, Msg::ToggleHelp);
    press(&mut app, KeyCode::Esc);
    assert!(
        !app.is_open(OverlayKind::Help) && app.tour_step.is_some(),
        "help first"
    );
    press(&mut app, KeyCode::Esc);
    assert!(app.tour_step.is_none(), "then the tour");
    press(&mut app, KeyCode::Esc);
    assert!(!app.quit, "Esc with nothing open does not quit");
}

#[test]
fn quitting_with_unsaved_changes_asks_and_the_title_marks_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut app = demo_in(dir.path());
    assert!(!render(&app, 80, 24).contains("[modified]"));
    update(&mut app, Msg::ShowSide(copus::session::Panel::WhatIf));
    update(&mut app, Msg::WhatIfChange(1));
    assert!(app.dirty());
    assert!(render(&app, 80, 24).contains("[modified]"));
    press(&mut app, KeyCode::Char('q'));
    assert!(!app.quit);
    assert_eq!(app.confirm(), Some(&Confirm::Quit));
    press(&mut app, KeyCode::Esc);
    assert!(!app.quit && app.confirm().is_none(), "Esc stays");
    // s saves, then quits once the save is written.
    press(&mut app, KeyCode::Char('q'));
    let job = the_write(press(&mut app, KeyCode::Char('s')));
    assert!(!app.quit, "not before the save is written");
    update(&mut app, worker::write(job));
    assert!(app.quit && !app.dirty());
    // Scrubbing alone is not an unsaved change.
    let mut app = demo_in(dir.path());
    update(&mut app, Msg::Scrub(5));
    press(&mut app, KeyCode::Char('q'));
    assert!(app.quit);
}

#[test]
fn the_saved_cursor_is_restored_when_the_source_loads() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut resolved = demo_session(dir.path()).expect("demo");
    resolved.session.view.cursor = 37;
    let app = prepared(resolved, copus::compute::Device::Cpu).expect("prepared");
    assert_eq!(app.cursor, 37);
}

#[test]
fn exports_are_named_as_reported_and_carry_their_context() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut app = demo_in(dir.path());
    app.save_path = dir.path().join("sample-run.ndjson.copus.ron");
    update(&mut app, Msg::End);
    let step = app.trajectory.points[app.cursor].step;
    let job = the_write(update(&mut app, Msg::Export));
    let names: Vec<String> = job
        .files
        .iter()
        .map(|(p, _)| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        [
            format!("sample-run.ndjson.copus-step{step}.csv"),
            format!("sample-run.ndjson.copus-step{step}.json")
        ]
    );
    assert!(job.what.contains(&names[0]), "{}", job.what);
    let csv = &job.files[0].1;
    for key in [
        "# model: llama-7b",
        "# hardware:",
        "# b_crit_kind: scenario",
        "# stat_eff_form:",
        "# calibration:",
    ] {
        assert!(
            csv.contains(key),
            "{key} missing:\n{}",
            &csv[..600.min(csv.len())]
        );
    }
    assert!(
        csv.contains("\nlayout,dp,tp,pp,batch,"),
        "structured layout columns"
    );
    let json: serde_json::Value = serde_json::from_str(&job.files[1].1).expect("json");
    assert_eq!(json["context"]["nodes"], 8);
    assert_eq!(json["context"]["model_seq_len"], 4096);
    assert!(json["cells"][0]["dp"].as_u64().is_some());
}

#[test]
fn a_load_failure_is_an_error_before_the_terminal_or_a_panel() {
    // A directory without dumps: refused before the terminal is taken over.
    let dir = tempfile::tempdir().expect("tempdir");
    let resolved = adhoc_session(&OpenArgs::for_path(dir.path())).expect("session");
    let err = prepared(resolved, copus::compute::Device::Cpu).expect_err("no dumps");
    assert!(
        err.to_string().contains(&dir.path().display().to_string()),
        "{err}"
    );
    // A failure in the worker is shown in full instead of "computing throughput…".
    let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/data/sample-run.ndjson");
    let resolved = adhoc_session(&OpenArgs::for_path(&sample)).expect("session");
    let mut app = render_support::with_table(App::loading(resolved));
    let why = copus::source::SourceError::Unsupported(
        "run.ndjson: no step gives a usable estimate (samples missing)".to_string(),
    );
    update(&mut app, Msg::SourceLoaded(Box::new(Err(why))));
    let screen = render(&app, 120, 40);
    assert!(screen.contains("could not be loaded"), "{screen}");
    assert!(screen.contains("samples missing"), "{screen}");
    assert!(!screen.contains("computing throughput"), "{screen}");
}

#[test]
fn open_refuses_flags_it_would_ignore() {
    let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/data/sample-run.ndjson");
    let args = OpenArgs {
        samples: Some(8.0),
        ..OpenArgs::for_path(&sample)
    };
    let err = adhoc_session(&args).expect_err("--samples on a stats file");
    assert!(err.to_string().contains("--samples"), "{err}");
    let args = OpenArgs {
        current_batch: Some(256),
        nodes: Some(2),
        ..OpenArgs::for_path(&sample)
    };
    let r = adhoc_session(&args).expect("session");
    assert_eq!(r.session.current_batch, Some(256));
    assert_eq!(r.session.cluster.nodes, 2);
}

#[test]
fn open_passes_estimator_flags_and_names_a_bad_one_once() {
    let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/data/sample-run.ndjson");
    let args = OpenArgs {
        estimator: copus::cli::estimator_args::EstimatorArgs {
            confidence: Some(7.0),
            ..Default::default()
        },
        ..OpenArgs::for_path(&sample)
    };
    // Refused when the ad-hoc session is validated, or at the latest when the source is
    // prepared, before the terminal is taken over; named once either way.
    let err = match adhoc_session(&args) {
        Err(e) => e,
        Ok(resolved) => {
            prepared(resolved, copus::compute::Device::Cpu).expect_err("bad confidence")
        }
    };
    // The place at fault is the flag, named as given.
    let text = format!("{err:#}");
    assert_eq!(text.matches("confidence").count(), 1, "{text}");
    assert!(text.contains("--confidence 7"), "{text}");
}

#[test]
fn a_dump_without_sample_counts_is_refused_before_the_terminal() {
    use copus::compute::DType;
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("dump");
    for (step, k) in [(1, 0), (1, 1), (2, 0), (2, 1)] {
        let t = dump_support::T {
            name: "w".into(),
            dtype: DType::F32,
            shape: vec![4],
            vals: vec![0.1, 0.2, 0.3, 0.4 + k as f64],
        };
        let part = dir.join(format!("step_{step}/rank{k}"));
        dump_support::write_npy(&part.join("w.npy"), &t);
    }
    let resolved = adhoc_session(&OpenArgs::for_path(&dir)).expect("session");
    let err = prepared(resolved, copus::compute::Device::Cpu).expect_err("no samples");
    let text = format!("{err:#}");
    assert!(
        text.contains("no sample count") && text.contains("--samples"),
        "{text}"
    );
    // With --samples it opens.
    let args = OpenArgs {
        samples: Some(4.0),
        ..OpenArgs::for_path(&dir)
    };
    let resolved = adhoc_session(&args).expect("session");
    prepared(resolved, copus::compute::Device::Cpu).expect("opens with --samples");
}

#[test]
fn a_session_saved_after_a_what_if_change_of_its_cluster_says_what_it_now_is() {
    // The demo's name says "8×8 H100": saved with another node count it would describe the
    // session it was. The saved name keeps the original and says what it now describes;
    // saving again does not pile the note up.
    let dir = tempfile::tempdir().expect("tempdir");
    let mut app = demo_in(dir.path());
    let before = app.resolved.session.name.clone();
    press(&mut app, KeyCode::Char('2'));
    assert_eq!(app.whatif_row, 0, "the nodes row");
    press(&mut app, KeyCode::Right);
    let nodes = app.resolved.session.cluster.nodes;
    assert_ne!(nodes, 8, "the what-if changed the node count");
    let job = the_write(press(&mut app, KeyCode::Char('s')));
    let saved = Session::from_ron(&job.files[0].1, Path::new("x.ron")).expect("parses");
    let want = format!("{before} · edited: llama-7b on {nodes}×8 h100-sxm");
    assert_eq!(saved.name, want);
    update(&mut app, worker::write(job));
    assert!(!app.dirty(), "saved");
    press(&mut app, KeyCode::Right);
    let nodes = app.resolved.session.cluster.nodes;
    let job = the_write(press(&mut app, KeyCode::Char('s')));
    let saved = Session::from_ron(&job.files[0].1, Path::new("x.ron")).expect("parses");
    assert_eq!(
        saved.name,
        format!("{before} · edited: llama-7b on {nodes}×8 h100-sxm")
    );
}

/// Branch records from step 30 for `batches`, `seeds` seeds each, evaluated every 512
/// samples `evals` times: a loss falling as samples / (4096 + 64·batch) (B_noise 64), plus
/// `noise(batch, seed, k)` at the k-th evaluation.
fn branch_records(
    batches: &[u64],
    seeds: u64,
    evals: u64,
    noise: impl Fn(u64, u64, u64) -> f64,
) -> String {
    let mut records = String::new();
    for &batch in batches {
        for seed in 0..seeds {
            for k in 0..=evals {
                let samples = k * 512;
                let loss =
                    3.0 - samples as f64 / (4096.0 + 64.0 * batch as f64) + noise(batch, seed, k);
                records.push_str(&format!(
                    "{{\"v\":1,\"branch\":{{\"from_step\":30,\"batch\":{batch},\"seed\":{seed}}},\"step\":{},\"samples\":{samples},\"loss\":{loss}}}\n",
                    samples / batch
                ));
            }
        }
    }
    records
}

/// A branch file given with `--branches` from another directory is copied beside the saved
/// session and named in it; the saved session reopens with the measurements laid over the run.
/// Opening with the records alone changes nothing to save.
#[test]
fn branch_records_given_with_a_run_are_saved_with_the_session() {
    let dir = tempfile::tempdir().expect("tempdir");
    let elsewhere = tempfile::tempdir().expect("tempdir");
    let run = sample_run_in(dir.path());
    let records = branch_records(&[8, 16, 32], 2, 8, |_, seed, _| 0.001 * seed as f64);
    let branch_file = elsewhere.path().join("br.ndjson");
    std::fs::write(&branch_file, &records).expect("write");
    let args = OpenArgs {
        device: copus::compute::Device::Cpu,
        branches: Some(branch_file.clone()),
        ..OpenArgs::for_path(&run)
    };
    let mut app = copus::cli::open::explorer_app(&args).expect("opens");
    assert!(app.branches.is_some());
    assert!(
        !app.dirty(),
        "laying records over the run is not a change to save"
    );
    let job = the_write(update(&mut app, Msg::Save));
    let copy = dir.path().join("br.ndjson");
    assert_eq!(job.files.len(), 2, "{:?}", job.files);
    assert_eq!(job.files[1], (copy.clone(), records.clone()));
    assert!(
        job.files[0].1.contains("branches: Some(\"br.ndjson\")"),
        "{}",
        job.files[0].1
    );
    let saved = job.files[0].0.clone();
    assert!(matches!(worker::write(job), Msg::Written { .. }));
    let reopened = copus::cli::open::explorer_app(&OpenArgs {
        device: copus::compute::Device::Cpu,
        ..OpenArgs::for_path(&saved)
    })
    .expect("the saved session opens");
    assert!(
        reopened.branches.is_some(),
        "the saved session lost its branches"
    );

    // Records already beside the save are named, not copied; a session may not reach outside
    // its directory for them.
    let mut app = copus::cli::open::explorer_app(&OpenArgs {
        device: copus::compute::Device::Cpu,
        branches: Some(copy),
        ..OpenArgs::for_path(&run)
    })
    .expect("opens");
    let job = the_write(update(&mut app, Msg::Save));
    assert_eq!(job.files.len(), 1, "{:?}", job.files);
    let text = std::fs::read_to_string(&saved)
        .expect("read")
        .replace("Some(\"br.ndjson\")", "Some(\"../br.ndjson\")");
    std::fs::write(&saved, text).expect("write");
    let Err(e) = copus::cli::open::explorer_app(&OpenArgs {
        device: copus::compute::Device::Cpu,
        ..OpenArgs::for_path(&saved)
    }) else {
        panic!("a branches path outside the session was accepted");
    };
    assert!(
        format!("{e:#}")
            .contains("branches: '../br.ndjson' must be a path inside the session's directory"),
        "{e:#}"
    );
}

/// `--b-crit-from` converts B_crit by the measured ratio and carries the ratio's range into
/// B_crit's interval (each end times its end of the range: the interval was B_simple's times
/// the factor, as precise as if the conversion were exact); the save keeps the range, and a
/// scale set by hand afterwards drops it with the source.
#[test]
fn a_measured_conversion_widens_b_crits_interval_by_its_range() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = sample_run_in(dir.path());
    let records = branch_records(&[8, 16, 32, 64], 3, 12, |batch, seed, k| {
        0.004 * ((seed * 7 + batch + k) % 5) as f64
    });
    let branch_file = dir.path().join("br.ndjson");
    std::fs::write(&branch_file, &records).expect("write");
    let mut app = copus::cli::open::explorer_app(&OpenArgs {
        device: copus::compute::Device::Cpu,
        branches: Some(branch_file),
        b_crit_from: Some(copus::cli::open::BCritFrom::BNoise),
        ..OpenArgs::for_path(&run)
    })
    .expect("opens");
    let s = &app.resolved.session;
    let [lo_f, hi_f] = s
        .planner
        .b_crit_scale_range
        .unwrap_or_else(|| panic!("no range: {}", app.status));
    let f = s.b_crit_scale;
    assert!(lo_f < f && f < hi_f, "{lo_f} {f} {hi_f}");
    let notice = app.status.clone();
    assert!(
        notice.contains("B_crit's interval is B_simple's times that range"),
        "{notice}"
    );
    let mut checked = 0;
    for (raw, p) in app.raw_trajectory.points.iter().zip(&app.trajectory.points) {
        assert!((p.b_crit - raw.b_crit * f).abs() <= 1e-9 * p.b_crit);
        if let (Some((rl, rh)), Some((l, h))) = (raw.ci, p.ci) {
            // An open upper end stays open.
            let close = |a: f64, b: f64| a == b || (a - b).abs() <= 1e-9 * a.abs();
            assert!(
                close(l, rl * lo_f) && close(h, rh * hi_f),
                "{l} {h} from {rl} {rh} by {lo_f} {hi_f} (factor {f})"
            );
            assert!(l < rl * f, "not wider than the factor's scaling");
            checked += 1;
        }
    }
    assert!(checked > 0, "no interval to check");
    let job = the_write(update(&mut app, Msg::Save));
    assert!(
        job.files[0].1.contains("b_crit_scale_range"),
        "{}",
        job.files[0].1
    );
    let saved = Session::from_ron(&job.files[0].1, Path::new("x.ron")).expect("parses");
    assert_eq!(saved.planner.b_crit_scale_range, Some([lo_f, hi_f]));
    // A factor typed by hand is not the measured one: the range goes, the source says so.
    let mut r = app.resolved.clone();
    r.set_b_crit_scale(2.0);
    assert!(r.session.planner.b_crit_scale_range.is_none());
    assert!(
        r.session
            .planner
            .b_crit_scale_source
            .as_deref()
            .is_some_and(|s| s.starts_with("set by hand")),
        "{:?}",
        r.session.planner.b_crit_scale_source
    );
}

/// Ctrl+C quits from a text prompt as it does everywhere (it did nothing there); with a change
/// unsaved it asks first.
#[test]
fn ctrl_c_in_a_prompt_quits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut app = demo_in(dir.path());
    press(&mut app, KeyCode::Char('S'));
    assert!(app.prompt().is_some());
    let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
    let msg = keys::key_to_msg(&app, ctrl_c).expect("Ctrl+C means something in a prompt");
    update(&mut app, msg);
    assert!(app.quit, "Ctrl+C in a prompt quits a clean session");
    let mut dirty = demo_in(dir.path());
    dirty.resolved.session.b_crit_scale = 2.0;
    press(&mut dirty, KeyCode::Char('/'));
    let msg = keys::key_to_msg(&dirty, ctrl_c).expect("Ctrl+C");
    update(&mut dirty, msg);
    assert!(!dirty.quit);
    assert!(
        matches!(dirty.confirm(), Some(Confirm::Quit)),
        "asks before losing a change"
    );
}

/// A live run that has sent nothing yet: the throughputs are ready, the heatmap and the
/// recommendation say they wait for the run's records (they said "computing throughput…",
/// indefinitely, while nothing listened).
#[test]
fn a_run_without_records_yet_is_waited_for_not_computed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let resolved = demo_session(dir.path()).expect("the embedded demo resolves");
    let mut app = App::loading(resolved);
    app.loading = false;
    let app = render_support::with_table(app);
    assert!(app.table.is_some() && app.trajectory.points.is_empty());
    let screen = render(&app, 120, 40);
    assert_eq!(
        screen
            .matches("waiting for the run's first records")
            .count(),
        2,
        "{screen}"
    );
    assert!(!screen.contains("computing throughput"), "{screen}");
}

/// A measured session in `root/sessions` reading `root/data/run.ndjson` (`../data/…`).
fn measured_project(root: &Path) -> std::path::PathBuf {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    std::fs::create_dir_all(root.join("sessions")).expect("mkdir");
    std::fs::create_dir_all(root.join("data")).expect("mkdir");
    std::fs::copy(
        repo.join("assets/data/sample-run.ndjson"),
        root.join("data/run.ndjson"),
    )
    .expect("data");
    let text = std::fs::read_to_string(repo.join("sessions/measured-sample.ron"))
        .expect("session")
        .replace("../assets/data/sample-run.ndjson", "../data/run.ndjson");
    let path = root.join("sessions/measured.ron");
    std::fs::write(&path, text).expect("session");
    path
}

/// `S`, the proposed path replaced by `target`, Enter: the write it asks for.
fn save_as(app: &mut App, target: &Path) -> WriteJob {
    press(app, KeyCode::Char('S'));
    assert!(app.prompt().is_some());
    for _ in 0..app.prompt_text().map_or(0, |p| p.chars().count()) {
        press(app, KeyCode::Backspace);
    }
    for c in target.display().to_string().chars() {
        update(app, Msg::Prompt(PromptEdit::Char(c)));
    }
    the_write(press(app, KeyCode::Enter))
}

#[test]
fn save_as_elsewhere_keeps_the_data_path_and_the_command_line_calibration() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let session = measured_project(root);
    let hw = copus::profiles::hardware("h100-sxm", Path::new(".")).expect("hw");
    let calibration = crate::perf_stack::calibration_file(copus::perf::EfficiencyParams {
        max_eff: 0.4,
        ..hw.efficiency.clone()
    });
    std::fs::create_dir_all(root.join("cal")).expect("mkdir");
    let cal = root.join("cal/fitted.ron");
    std::fs::write(&cal, calibration.to_ron().expect("ron")).expect("calibration");
    let mut app = copus::cli::open::explorer_app(&OpenArgs {
        calibration: Some(cal.clone()),
        ..OpenArgs::for_path(&session)
    })
    .expect("opens");
    // The what-if says which calibration file is in force and what it was fitted on.
    let perf_model = copus::app::whatif::value(&app.resolved, copus::app::whatif::Field::PerfModel);
    assert_eq!(perf_model, "calibrated fitted.ron (±1% on llama-7b)");
    std::fs::create_dir_all(root.join("other/deeper")).expect("mkdir");
    let target = root.join("other/deeper/mine.ron");
    let job = save_as(&mut app, &target);
    let msg = worker::write(job);
    assert!(
        matches!(msg, Msg::Written { result: Ok(()), .. }),
        "{msg:?}"
    );
    update(&mut app, msg);
    // The saved session finds the same run from its new place, and names the calibration
    // it was explored with, copied beside it (a session may only name one there).
    let saved = Session::load(&target).expect("saved session");
    let copus::session::DataSource::Stats { path, .. } = &saved.source else {
        panic!("{:?}", saved.source);
    };
    assert_eq!(path, "../../data/run.ndjson");
    assert_eq!(saved.calibration.as_deref(), Some("fitted.ron"));
    assert!(root.join("other/deeper/fitted.ron").is_file());
    let reopened = copus::cli::open::explorer_app(&OpenArgs::for_path(&target)).expect("reopens");
    assert_eq!(
        reopened
            .resolved
            .calibration
            .as_ref()
            .map(|c| c.params.max_eff),
        Some(0.4)
    );
    assert!(reopened.resolved.use_calibration);
    // The explorer continues as the session it saved: clean, and a second save writes the
    // same paths again.
    assert!(!app.dirty());
    let again = the_write(press(&mut app, KeyCode::Char('s')));
    assert_eq!(again.files[0].0, target);
    assert!(
        again.files[0].1.contains("../../data/run.ndjson"),
        "{}",
        again.files[0].1
    );
}

/// The bundled sample run copied into `dir` as `run.ndjson` (a run the user owns there).
fn sample_run_in(dir: &Path) -> std::path::PathBuf {
    let run = dir.join("run.ndjson");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/data/sample-run.ndjson"),
        &run,
    )
    .expect("copy");
    run
}

/// A run opened without a model or cluster says in the title that both are copus's defaults;
/// saving it wrote that note into the session's name, which `plan` and `--emit` headers then
/// printed as the session's own.
#[test]
fn the_title_note_of_a_run_on_default_settings_is_not_saved_in_its_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = sample_run_in(dir.path());
    let args = OpenArgs {
        device: copus::compute::Device::Cpu,
        ..OpenArgs::for_path(&run)
    };
    let mut app = copus::cli::open::explorer_app(&args).expect("opens");
    let title = render(&app, 200, 40);
    assert!(
        title
            .lines()
            .next()
            .is_some_and(|l| l.contains("copus's defaults")),
        "{title}"
    );
    let job = the_write(update(&mut app, Msg::Save));
    let saved = &job.files[0].1;
    assert!(saved.contains("name: \"run.ndjson\""), "{saved}");
    assert!(!saved.contains("defaults"), "{saved}");
}

/// `open RUN` builds its session in memory: a flag's bad value is named as the flag's, not as
/// an error of "RUN.copus.ron", a file that does not exist.
#[test]
fn open_names_the_flag_not_a_session_file_that_does_not_exist() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = sample_run_in(dir.path());
    let open = |f: &dyn Fn(&mut OpenArgs)| {
        let mut args = OpenArgs {
            device: copus::compute::Device::Cpu,
            ..OpenArgs::for_path(&run)
        };
        f(&mut args);
        match adhoc_session(&args) {
            Ok(_) => String::from("opened"),
            Err(e) => format!("{e:#}"),
        }
    };
    let batch = open(&|a| a.current_batch = Some(100));
    assert!(
        batch.starts_with("--current-batch 100: not one of the batch sizes searched"),
        "{batch}"
    );
    let model = open(&|a| a.model = Some("nope".into()));
    assert!(
        model.starts_with("--model nope: unknown model profile"),
        "{model}"
    );
    let hardware = open(&|a| a.hardware = Some("h999".into()));
    assert!(hardware.starts_with("--hardware h999:"), "{hardware}");
    for e in [batch, model, hardware] {
        assert!(!e.contains("copus.ron"), "{e}");
    }
    // A batch of the grid is taken.
    assert_eq!(open(&|a| a.current_batch = Some(64)), "opened");
}

/// The save-as prompt comes pre-filled with the session's path: Ctrl+W deletes its last
/// word (up to a `/`) and Ctrl+U the whole line, as in a shell (typed text was appended to
/// it, and only Backspace, once a character, took it away).
#[test]
fn the_save_as_prompt_clears_with_ctrl_u_and_ctrl_w() {
    let dir = tempfile::tempdir().expect("tempdir");
    let session = measured_project(dir.path());
    let resolved = copus::session::Session::load(&session)
        .expect("loads")
        .resolve(&session)
        .expect("resolves");
    let mut app = App::loading(resolved);
    press(&mut app, KeyCode::Char('S'));
    let ctrl = |app: &mut App, c: char| {
        let msg = keys::key_to_msg(app, KeyEvent::new(KeyCode::Char(c), KeyModifiers::CONTROL))
            .expect("a prompt edit");
        update(app, msg);
    };
    let full = app.prompt_text().expect("prompt").to_string();
    assert!(full.ends_with("measured.ron"), "{full}");
    ctrl(&mut app, 'w');
    let cut = app.prompt_text().expect("prompt").to_string();
    assert!(
        cut.ends_with('/') && full.starts_with(&cut),
        "{full} -> {cut}"
    );
    ctrl(&mut app, 'u');
    assert_eq!(app.prompt_text(), Some(""));
    assert!(app.prompt().is_some(), "the prompt stays open");
}
