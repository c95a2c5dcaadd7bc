//! Lessons in-process at 80×24: the state machine (pure `update`: step, reveal, close), and
//! every step of every embedded lesson, pressing the keys its instruction names and checking
//! the change it describes, with the panel it points at focused and the question on screen.

use crate::render_support;
use copus::app::lessons::{self, Change, Lesson};
use copus::app::{App, Msg, update};
use copus::cli::lesson::lesson_app;
use copus::runtime::keys;
use copus::ui::palette::ColorMode;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

fn render(app: &App, w: u16, h: u16) -> String {
    render_support::screen(app, w, h, ColorMode::Monochrome)
}

/// The app for a lesson with its data loaded and its table computed, as the explorer has it.
fn ready(lesson: &Lesson, dir: &std::path::Path) -> App {
    let mut app = lesson_app(lesson, dir).expect("lesson app");
    if app.loading {
        let loaded = copus::pipeline::load(&app.resolved);
        update(&mut app, Msg::SourceLoaded(Box::new(loaded)));
        // Loading resets the view: the lesson starts again at its first step.
        update(&mut app, Msg::Escape);
        update(&mut app, Msg::Tour(1));
    }
    // The table and the plan (switch points for `]`), as the explorer's worker computes them.
    render_support::with_table_and_plan(app)
}

/// A tmux key name as a key event.
fn key(name: &str) -> KeyEvent {
    let (code, mods) = match name {
        "End" => (KeyCode::End, KeyModifiers::NONE),
        "Home" => (KeyCode::Home, KeyModifiers::NONE),
        "Left" => (KeyCode::Left, KeyModifiers::NONE),
        "Right" => (KeyCode::Right, KeyModifiers::NONE),
        "Up" => (KeyCode::Up, KeyModifiers::NONE),
        "Down" => (KeyCode::Down, KeyModifiers::NONE),
        "S-Left" => (KeyCode::Left, KeyModifiers::SHIFT),
        "S-Right" => (KeyCode::Right, KeyModifiers::SHIFT),
        "PPage" => (KeyCode::PageUp, KeyModifiers::NONE),
        "NPage" => (KeyCode::PageDown, KeyModifiers::NONE),
        s if s.chars().count() == 1 => (
            KeyCode::Char(s.chars().next().expect("a char")),
            KeyModifiers::NONE,
        ),
        other => panic!("a lesson names key {other:?}, which this test does not know"),
    };
    KeyEvent::new(code, mods)
}

fn press(app: &mut App, k: KeyEvent) {
    if let Some(msg) = keys::key_to_msg(app, k) {
        update(app, msg);
    }
}

#[test]
fn the_lesson_state_machine_steps_reveals_and_closes() {
    let lesson = lessons::find("coupling").expect("lesson");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut app = lesson_app(&lesson, dir.path()).expect("app");
    assert_eq!(app.tour_step, Some(0), "a lesson opens at its first step");
    assert!(!app.tour_revealed);
    update(&mut app, Msg::Reveal);
    assert!(app.tour_revealed, "r reveals");
    update(&mut app, Msg::Reveal);
    assert!(!app.tour_revealed, "r again hides");
    update(&mut app, Msg::Reveal);
    update(&mut app, Msg::Tour(1));
    assert_eq!(app.tour_step, Some(1));
    assert!(!app.tour_revealed, "a new step starts hidden");
    update(&mut app, Msg::Tour(-1));
    assert_eq!(app.tour_step, Some(0));
    update(&mut app, Msg::Escape);
    assert_eq!(app.tour_step, None, "Esc closes the lesson");
    update(&mut app, Msg::Reveal);
    assert!(!app.tour_revealed, "nothing to reveal without a step");
    assert!(!app.dirty(), "running a lesson modifies nothing");
}

#[test]
fn every_step_of_every_lesson_does_what_it_says_at_80x24() {
    let dir = tempfile::tempdir().expect("tempdir");
    for lesson in lessons::builtin().expect("lessons") {
        let mut app = ready(&lesson, dir.path());
        let n = lesson.steps.len();
        for (i, step) in lesson.steps.iter().enumerate() {
            let at = format!("{} step {}", lesson.name, i + 1);
            assert_eq!(app.tour_step, Some(i), "{at}");
            assert_eq!(app.focus, step.panel, "{at}: its panel is focused");
            let screen = render(&app, 80, 24);
            assert!(
                screen.contains(&format!("Lesson {}/{n}", i + 1)),
                "{at}\n{screen}"
            );
            // The popup's title keeps every key whole, Esc included, however narrow.
            let title = screen
                .lines()
                .find(|l| l.contains(&format!("Lesson {}/{n}", i + 1)))
                .expect("the title line");
            assert!(
                title.contains(" · p") && title.contains("Esc"),
                "{at}: {title}"
            );
            assert!(
                screen.contains("Predict"),
                "{at}: the question shows\n{screen}"
            );
            assert!(!screen.contains("Answer:"), "{at}: hidden before r");
            // A step that sends the reader to the side panel on screen keeps its box off it
            // (estimate-right's step 2 covered the Estimators panel it asked to read).
            let side_word = app.side.title().split_whitespace().next().expect("a title");
            if step.text.contains(&format!("{side_word} panel")) {
                let screen_rect = ratatui::layout::Rect::new(0, 0, 80, 24);
                let side = copus::ui::geometry::areas(screen_rect).side;
                let popup = copus::ui::view::tour_area(screen_rect, step.panel, step.popup);
                assert!(
                    !popup.intersects(side),
                    "{at}: the box covers the {side_word} panel the step reads\n{screen}"
                );
            }
            press(&mut app, key("r"));
            assert!(app.tour_revealed, "{at}: r reveals");
            // The answer is in view as r reveals it, however long the step's text (the
            // estimate-right step's answer was below the popup's fold: r changed nothing).
            let revealed = render(&app, 80, 24);
            assert!(
                revealed.contains("Answer:"),
                "{at}: the answer shows\n{revealed}"
            );
            // Shift+↓ reads on, Shift+↑ comes back to the answer's first line.
            press(&mut app, KeyEvent::new(KeyCode::Down, KeyModifiers::SHIFT));
            press(&mut app, KeyEvent::new(KeyCode::Up, KeyModifiers::SHIFT));
            assert_eq!(render(&app, 80, 24), revealed, "{at}: back at the answer");
            let (cursor, best) = (app.cursor, app.grid.as_ref().and_then(|g| g.best));
            for k in &step.keys {
                press(&mut app, key(k));
            }
            match step.change {
                Change::Cursor => assert_ne!(app.cursor, cursor, "{at}: the cursor moves"),
                Change::Best => assert_ne!(
                    app.grid.as_ref().and_then(|g| g.best),
                    best,
                    "{at}: the best cell moves"
                ),
                Change::Side(p) => {
                    assert_eq!(app.side, p, "{at}: shows {p:?}");
                    let screen = render(&app, 80, 24);
                    let word = p.title().split_whitespace().next().expect("a title");
                    assert!(screen.contains(&format!("┏ {word}")), "{at}\n{screen}");
                }
                Change::Modified => assert!(app.dirty(), "{at}: the session is modified"),
            }
            press(&mut app, key("n"));
        }
        assert_eq!(
            app.tour_step, None,
            "{}: n after the last step ends",
            lesson.name
        );
    }
}

/// The what-if lesson's second answer, read against the screen it describes: after ← (8 → 7
/// nodes) the best goodput is "about 7/8" of the 8-node one, and every batch the answer lists
/// is a column of the recomputed heatmap.
#[test]
fn the_what_if_answer_matches_the_recomputed_heatmap() {
    let dir = tempfile::tempdir().expect("tempdir");
    let lesson = lessons::find("what-if").expect("lesson");
    let mut app = ready(&lesson, dir.path());
    press(&mut app, key("2"));
    press(&mut app, key("n"));
    assert_eq!(app.tour_step, Some(1));
    let best = |app: &App| {
        let (r, c) = app.grid.as_ref().and_then(|g| g.best).expect("a best cell");
        let nb = app.table.as_ref().expect("table").batches.len();
        app.grid.as_ref().expect("grid").goodput[r * nb + c].expect("runs")
    };
    let eight = best(&app);
    press(&mut app, key("Left"));
    assert_eq!(app.resolved.cluster().gpus(), 56);
    let app = render_support::with_table_and_plan(app);
    let seven = best(&app);
    let ratio = seven / eight;
    assert!(
        (0.8..=0.95).contains(&ratio),
        "7 nodes / 8 nodes = {ratio:.3}, not about 7/8"
    );
    // The ★ cell's number is on screen.
    let screen = render(&app, 200, 60);
    // (Without colour the star ends the cell, after the top shade where there is room.)
    let number = copus::ui::format::si(seven);
    assert!(
        screen.contains(&format!("{number}★")) || screen.contains(&format!("{number}█★")),
        "{number}\n{screen}"
    );
    let answer = &lesson.steps[1].answer;
    let listed = answer
        .split_once("(56,")
        .and_then(|(_, rest)| rest.split_once(" and larger"))
        .map(|(nums, _)| format!("56,{nums}"))
        .expect("the answer lists the batches");
    let batches = &app.table.as_ref().expect("table").batches;
    for n in listed.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let n: u64 = n.parse().expect("a batch");
        assert!(batches.contains(&n), "{n} is not a column: {batches:?}");
        assert_eq!(n % 56, 0);
    }
}

/// A student who explored the what-if editor at the first step (moved down two rows, changed
/// the hardware) still lowers the nodes with the second step's ←, and is told that the
/// answer is for the lesson's own settings.
#[test]
fn the_what_if_step_reads_from_its_first_row_after_exploring() {
    let dir = tempfile::tempdir().expect("tempdir");
    let lesson = lessons::find("what-if").expect("lesson");
    let mut app = ready(&lesson, dir.path());
    for k in ["2", "Down", "Down", "Left", "n"] {
        press(&mut app, key(k));
    }
    assert_eq!(app.tour_step, Some(1));
    assert_eq!(app.whatif_row, 0, "the step starts on the nodes row");
    assert!(
        app.status.contains("settings changed earlier"),
        "{}",
        app.status
    );
    press(&mut app, key("Left"));
    assert_eq!(app.resolved.session.cluster.nodes, 7, "← lowers the nodes");
    // Without exploring, no such note.
    let mut fresh = ready(&lesson, dir.path());
    press(&mut fresh, key("2"));
    press(&mut fresh, key("n"));
    assert!(
        !fresh.status.contains("changed earlier"),
        "{}",
        fresh.status
    );
}

/// The estimate-right lesson's answers, read against its own branched experiment: at step 30
/// the measured B_noise ÷ B_simple and its interval lie below 1; at step 150 the interval is
/// several times wider and reaches past 1, with B_noise beyond the largest batch run; the ▲
/// at 150 lies far below B_simple. (At step 300 this experiment measured no threshold, and
/// the lesson asked about a ratio its screen did not show.)
#[test]
fn the_estimate_right_answers_match_the_measurement() {
    let dir = tempfile::tempdir().expect("tempdir");
    let lesson = lessons::find("estimate-right").expect("lesson");
    let app = ready(&lesson, dir.path());
    let report = app.branches.clone().expect("the lesson's branches");
    let marks = copus::app::branches::marks(&report, &app.raw_trajectory);
    assert_eq!(
        marks.iter().map(|m| m.from_step).collect::<Vec<_>>(),
        [30, 150]
    );
    let r30 = marks[0].comparison.b_noise_ratio.expect("a fit at 30");
    assert!(
        r30.value < 1.0 && r30.ci[1].is_some_and(|hi| hi < 1.0),
        "{r30:?}"
    );
    let head = copus::ui::timeline_marks::headline(&app, 200).expect("a headline");
    let head: String = head.spans.iter().map(|s| s.content.as_ref()).collect();
    assert!(
        head.contains("measured B_noise ÷ B_simple ×") && head.contains("at step 30"),
        "{head}"
    );
    // At 150 what the answer says: a ratio with an interval several times wider, past 1,
    // from a B_noise beyond the batches run; the End row shows it.
    assert!(marks[1].threshold_measured(), "{:?}", marks[1]);
    let r150 = marks[1].comparison.b_noise_ratio.expect("a fit at 150");
    let width = |r: &copus::stats::estimate::cbs::WithCi| {
        r.ci[1].unwrap_or(f64::INFINITY) / r.ci[0].unwrap_or(0.0).max(1e-12)
    };
    assert!(width(&r150) > 3.0 * width(&r30), "{r30:?} {r150:?}");
    assert!(r150.ci[1].is_none_or(|hi| hi > 1.0), "{r150:?}");
    let point = report
        .points
        .iter()
        .find(|p| p.from_step == 150)
        .expect("the step-150 point");
    let largest = point
        .branches
        .iter()
        .map(|b| b.batch)
        .max()
        .expect("batches");
    assert!(
        point
            .b_noise_fit
            .as_ref()
            .is_some_and(|b| b.value > largest as f64),
        "{point:?}"
    );
    let row = copus::app::branches::headline_segment(&marks, 599).expect("a row");
    assert!(row.contains("at step 150"), "{row}");
    // Panel 4 says what the answer says: an interval holding 1 supports no correction (it
    // advised scaling by the ratio), in the panel's unit.
    let panel =
        copus::app::branches::estimator_lines(&marks, 599, None, false, "sequences").join("\n");
    assert!(panel.contains("supports no correction"), "{panel}");
    assert!(
        !panel.contains("scale B_crit by the measured ratio"),
        "{panel}"
    );
    let first = panel.lines().next().unwrap_or_default();
    assert!(
        first.contains(" sequences") && !first.contains(" samples"),
        "{first}"
    );
    // On screen the experiment's cautions (from `cbs`, in samples) are in the panel's unit too.
    let mut shown = app.clone();
    update(&mut shown, Msg::ShowSide(copus::session::Panel::Estimators));
    update(&mut shown, Msg::End);
    let screen = render(&shown, 200, 90);
    let cautions: Vec<&str> = screen.lines().filter(|l| l.contains("caution:")).collect();
    assert!(!cautions.is_empty(), "{screen}");
    assert!(
        cautions.iter().all(|l| !l.contains(" samples")),
        "{cautions:?}"
    );
    let at30 =
        copus::app::branches::estimator_lines(&marks, 30, None, false, "sequences").join("\n");
    assert!(
        at30.contains("scale B_crit by the measured ratio"),
        "{at30}"
    );
    let b150 = marks[1].comparison.b_simple.expect("B_simple at 150");
    assert!(
        marks[1].threshold < 0.25 * b150,
        "{} vs {b150}",
        marks[1].threshold
    );
    // Every mark is within the chart's axis: the values the axis takes in hold each one
    // (the step-30 threshold fell under an axis that started at the run's own curve).
    let values = copus::ui::timeline_marks::branch_values(&app);
    for m in marks.iter().filter(|m| m.threshold_measured()) {
        assert!(values.contains(&m.threshold), "{values:?}");
    }
    // Saved, the lesson keeps its measurements: the branch records go beside the session,
    // which names them, and the saved session reopens with the marks its steps talk about.
    let mut saving = app.clone();
    let save_dir = tempfile::tempdir().expect("tempdir");
    saving.save_path = save_dir.path().join("copus-lesson-estimate-right.ron");
    let effects = copus::app::update(&mut saving, copus::app::Msg::Save);
    let [copus::app::Effect::Write(job)] = effects.as_slice() else {
        panic!("expected one write, got {effects:?}");
    };
    let names: Vec<_> = job.files.iter().map(|(p, _)| p.clone()).collect();
    let branch_file = save_dir
        .path()
        .join("lesson-estimate-right-branches.ndjson");
    assert!(names.contains(&branch_file), "{names:?}");
    assert!(
        job.files[0]
            .1
            .contains("branches: Some(\"lesson-estimate-right-branches.ndjson\")"),
        "{}",
        job.files[0].1
    );
    assert!(matches!(
        copus::runtime::worker::write(job.clone()),
        copus::app::Msg::Written { .. }
    ));
    let reopened = copus::cli::open::explorer_app(&copus::cli::open::OpenArgs {
        device: copus::compute::Device::Cpu,
        ..copus::cli::open::OpenArgs::for_path(&job.files[0].0)
    })
    .expect("the saved lesson opens");
    let again = reopened.branches.expect("the saved lesson's branches");
    assert_eq!(again.points.len(), report.points.len());

    // A branch file none of whose points lies in the run says so in the headline.
    let mut far = app.clone();
    let mut report = (*report).clone();
    for p in &mut report.points {
        p.from_step += 1_000_000;
    }
    far.branches = Some(std::sync::Arc::new(report));
    let head = copus::ui::timeline_marks::headline(&far, 300).expect("a headline");
    let head: String = head.spans.iter().map(|s| s.content.as_ref()).collect();
    assert!(
        head.contains("no branch point (1000030, 1000150)"),
        "{head}"
    );
}

/// A reveal key rebound in the configuration is the one the lesson box names (it said
/// "(r reveals)" while r did nothing and v revealed).
#[test]
fn the_lesson_box_names_the_reveal_key_as_bound() {
    let dir = tempfile::tempdir().expect("tempdir");
    let lesson = lessons::builtin()
        .expect("lessons")
        .into_iter()
        .find(|l| l.name == "noise-scale")
        .expect("noise-scale");
    let mut app = ready(&lesson, dir.path());
    assert!(render(&app, 80, 24).contains("(r reveals)"));
    app.keymap = copus::config::parse("(keys: { reveal: [\"v\"] })")
        .expect("config")
        .keymap;
    let screen = render(&app, 80, 24);
    assert!(
        screen.contains("(v reveals)") && !screen.contains("(r reveals)"),
        "{screen}"
    );
    press(&mut app, key("v"));
    assert!(app.tour_revealed);
}

#[test]
fn every_lesson_saves_under_its_own_name_not_over_the_demo() {
    // A lesson on the bundled demo saved to `copus-demo.ron` (asking to replace the user's own
    // demo save); every lesson now saves as `copus-lesson-<name>.ron`.
    for lesson in lessons::builtin().expect("lessons") {
        if !matches!(lesson.data, lessons::LessonData::Demo) {
            continue;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let app = lesson_app(&lesson, dir.path()).expect("app");
        assert_eq!(
            app.save_path,
            dir.path().join(format!("copus-lesson-{}.ron", lesson.name)),
            "{}",
            lesson.name
        );
        // What the saved file says it is: the lesson, not the ad-hoc session it was built on.
        let description = &app.resolved.session.description;
        assert!(
            description.contains(&format!("copus lesson {}", lesson.name)),
            "{description}"
        );
    }
}

/// The measured-run lesson's plan runs at batches (16 → 32) below its B_crit: a panel tall
/// enough for the intervals widens its axis to draw them; a short one says where they are
/// (its switches were marked with no batch drawn and no word in the legend).
#[test]
fn a_plan_below_the_measured_b_crit_is_drawn_or_said() {
    let dir = tempfile::tempdir().expect("tempdir");
    let lesson = lessons::find("measured-run").expect("lesson");
    let app = ready(&lesson, dir.path());
    let plan = copus::ui::timeline_marks::planned_batches(&app);
    let lowest = plan.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
    let b_crit_low = app
        .trajectory
        .points
        .iter()
        .map(|p| p.b_crit)
        .fold(f64::INFINITY, f64::min);
    assert!(lowest < 100.0 && lowest < b_crit_low / 2.0, "{plan:?}");
    let tall = render(&app, 200, 60);
    assert!(tall.contains("─ plan's batch"), "{tall}");
    let label = copus::format::count(lowest);
    assert!(tall.contains(&format!("{label}───")), "{tall}");
    let short = render(&app, 80, 24);
    assert!(short.contains(&format!("↓{label}→")), "{short}");
}
