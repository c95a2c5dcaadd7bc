//! End-to-end: the real binary in a pseudo-terminal (tmux). Opens a copy of the demo session,
//! checks the panels, scrubs, opens help, saves, quits, and checks that the terminal came back
//! and the saved session reopens where it was left.

use crate::tmux_support;
use copus::session::Session;
use std::path::Path;
use std::thread::sleep;
use std::time::Duration;
use tmux_support::Tmux;

fn best_line(screen: &str) -> String {
    screen
        .lines()
        .find_map(|l| l.find("best: batch").map(|i| l[i..].to_string()))
        .expect("a best line")
}

fn step_in_title(screen: &str) -> u64 {
    let at = screen.find("· step ").expect("title shows the step");
    screen[at + "· step ".len()..]
        .split_whitespace()
        .next()
        .and_then(|s| s.parse().ok())
        .expect("step number")
}

#[test]
fn demo_opens_scrubs_helps_saves_and_quits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let session = dir.path().join("demo.ron");
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("sessions/demo.ron");
    std::fs::copy(&demo, &session).expect("copy demo");
    let command = format!(
        "{} open {}; echo COPUS-EXITED $?; sleep 30",
        env!("CARGO_BIN_EXE_copus"),
        session.display()
    );
    let tmux = Tmux::start("e2e", 120, 36, &command);

    let first = tmux.wait_for("Recommendation");
    assert!(first.contains("· step "), "{first}");
    assert!(first.contains("Goodput"), "{first}");
    tmux.wait_for("best: batch");
    let step0 = step_in_title(&tmux.screen());

    tmux.keys(&["Right", "Right", "Right", "Right", "Right"]);
    sleep(Duration::from_millis(300));
    let step5 = step_in_title(&tmux.screen());
    assert!(
        step5 > step0,
        "scrubbing right advances the step: {step0} → {step5}"
    );

    tmux.keys(&["?"]);
    tmux.wait_for("this help");
    tmux.keys(&["?"]);

    // What-if: multiply B_crit by 8 and the recommended batch changes.
    let before = best_line(&tmux.wait_for("best: batch"));
    tmux.keys(&["2", "Down", "Down", "Down", "Down", "Down", "Down"]);
    tmux.keys(&["Right", "Right", "Right"]);
    tmux.wait_for("B_crit ×8");
    tmux.keys(&["1"]);
    let after = best_line(&tmux.wait_for("best: batch"));
    assert_ne!(before, after, "a what-if change moves the recommendation");
    tmux.keys(&["2", "Left", "Left", "Left", "1"]);
    tmux.wait_for("best: batch");

    // Too small to draw: only quitting acts (a scrub, the help and an explanation opened
    // unseen, to be found after resizing back).
    tmux.cmd(&["resize-window", "-t", "e2e", "-x", "40", "-y", "12"]);
    tmux.wait_for("terminal too small");
    tmux.keys(&["Right", "?", "x"]);
    sleep(Duration::from_millis(300));

    // Resize to 80×24: every panel still draws, and nothing opened while it was small.
    tmux.cmd(&["resize-window", "-t", "e2e", "-x", "80", "-y", "24"]);
    sleep(Duration::from_millis(300));
    let small = tmux.wait_for("Recommendation");
    assert!(
        small.contains("Goodput") && small.contains("· step "),
        "{small}"
    );
    assert!(!small.contains("this help"), "{small}");

    tmux.keys(&["s"]);
    tmux.wait_for("saved");
    tmux.keys(&["q"]);
    let after = tmux.wait_for("COPUS-EXITED 0");
    assert!(
        !after.contains("Recommendation"),
        "the alternate screen is left on quit:\n{after}"
    );

    // The demo is commented: it is saved beside, never rewritten.
    assert_eq!(
        std::fs::read_to_string(&session).expect("read"),
        std::fs::read_to_string(&demo).expect("read"),
        "the commented session is untouched"
    );
    let beside = dir.path().join("demo.saved.ron");
    let saved = Session::load(&beside).expect("saved session reloads");
    assert_eq!(
        saved.view.cursor, 5,
        "the saved session reopens where it was left"
    );
    let command = format!(
        "{} open {}; echo COPUS-EXITED $?; sleep 30",
        env!("CARGO_BIN_EXE_copus"),
        beside.display()
    );
    let tmux = Tmux::start("e2e-reopen", 120, 36, &command);
    tmux.wait_for("best: batch");
    assert_eq!(
        step_in_title(&tmux.screen()),
        step5,
        "reopened at the saved cursor"
    );
    tmux.keys(&["q"]);
    tmux.wait_for("COPUS-EXITED 0");
}

#[test]
fn the_demo_runs_from_an_empty_directory_and_saves_there() {
    let dir = tempfile::tempdir().expect("tempdir");
    let command = format!(
        "cd {} && {}; echo COPUS-EXITED $?; sleep 30",
        dir.path().display(),
        env!("CARGO_BIN_EXE_copus")
    );
    let tmux = Tmux::start("e2e-demo", 80, 24, &command);
    tmux.wait_for("best: batch");
    // Esc with nothing open does not quit.
    tmux.keys(&["Escape"]);
    sleep(Duration::from_millis(300));
    assert!(tmux.screen().contains("q quits"), "{}", tmux.screen());
    tmux.keys(&["s"]);
    tmux.wait_for("saved");
    assert!(dir.path().join("copus-demo.ron").is_file());
    // A what-if change, then q: asked, n stays, then y quits without saving.
    tmux.keys(&["2", "Right"]);
    tmux.wait_for("[modified]");
    tmux.keys(&["q"]);
    tmux.wait_for("unsaved changes");
    tmux.keys(&["n"]);
    sleep(Duration::from_millis(300));
    assert!(!tmux.screen().contains("COPUS-EXITED"));
    tmux.keys(&["q"]);
    tmux.wait_for("unsaved changes");
    tmux.keys(&["y"]);
    tmux.wait_for("COPUS-EXITED 0");
}

#[test]
fn the_whole_tour_works_at_80x24() {
    let dir = tempfile::tempdir().expect("tempdir");
    let command = format!(
        "cd {} && {}; echo COPUS-EXITED $?; sleep 30",
        dir.path().display(),
        env!("CARGO_BIN_EXE_copus")
    );
    let tmux = Tmux::start("e2e-tour", 80, 24, &command);
    tmux.wait_for("best: batch");
    let steps = Session::from_ron(copus::cli::open::DEMO_RON, Path::new("demo"))
        .expect("demo")
        .tour
        .len();
    for i in 1..=steps {
        tmux.keys(&["n"]);
        let screen = tmux.wait_for(&format!("Tour {i}/{steps}"));
        // What each step describes is on screen next to the popup.
        let expect = match i {
            1 | 6 => "· step ",
            2 | 5 => "★",
            3 => "best: batch",
            4 => "Throughput",
            _ => "nodes",
        };
        assert!(
            screen.contains(expect),
            "step {i} hides {expect:?}:\n{screen}"
        );
        if i == 6 {
            // "scrub back with ← (Shift+← jumps 10 points)"
            let before = step_in_title(&screen);
            tmux.keys(&["S-Left"]);
            sleep(Duration::from_millis(400));
            let after = step_in_title(&tmux.screen());
            assert!(after < before, "Shift+← scrubs back: {before} → {after}");
        }
        if i == steps {
            // "↑/↓ picks a row, ←/→ changes it"
            tmux.keys(&["Down", "Left"]);
            tmux.wait_for("[modified]");
        }
    }
    tmux.keys(&["n"]);
    tmux.wait_for("tour ended");
    tmux.keys(&["q"]);
    tmux.wait_for("unsaved changes");
    tmux.keys(&["y"]);
    tmux.wait_for("COPUS-EXITED 0");
    assert_eq!(
        std::fs::read_dir(dir.path()).expect("list").count(),
        0,
        "nothing written without asking"
    );
}

#[test]
fn quit_rebound_in_a_configuration_file_quits_the_explorer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("config.ron");
    std::fs::write(&config, "(theme: light, keys: { quit: [\"Q\"] })").expect("config");
    let command = format!(
        "cd {} && {} --config {}; echo COPUS-EXITED $?; sleep 30",
        dir.path().display(),
        env!("CARGO_BIN_EXE_copus"),
        config.display()
    );
    let tmux = Tmux::start("e2e-config", 80, 24, &command);
    tmux.wait_for("best: batch");
    tmux.keys(&["Escape"]);
    tmux.wait_for("Q quits");
    quit_is_rebound_to_capital_q(&tmux);
}

#[test]
fn watch_uses_the_configuration_file_as_open_does() {
    // `copus watch` opens the same explorer: a rebound quit key and the theme apply there too
    // (they were ignored before), given after the subcommand.
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("config.ron");
    std::fs::write(&config, "(theme: light, keys: { quit: [\"Q\"] })").expect("config");
    let run = dir.path().join("run.ndjson");
    let lines: String = (0..50)
        .map(|i| {
            format!(
                "{{\"v\":1,\"step\":{i},\"b_small\":8,\"b_big\":64,\"sq_small\":{},\"sq_big\":1.2}}\n",
                2.0 + f64::from(i % 3) * 0.1
            )
        })
        .collect();
    std::fs::write(&run, lines).expect("stats");
    let command = format!(
        "cd {} && {} watch {} --config {}; echo COPUS-EXITED $?; sleep 30",
        dir.path().display(),
        env!("CARGO_BIN_EXE_copus"),
        run.display(),
        config.display()
    );
    let tmux = Tmux::start("e2e-watch-config", 100, 30, &command);
    tmux.wait_for("50 steps");
    quit_is_rebound_to_capital_q(&tmux);
}

/// `watch --session S --advise OUT` reads the run's samples as S's live source says: the
/// explorer's title says so (headless said it on stderr, the explorer showed 64× the file's
/// tokens without a word); `--seq-len` given, the note goes.
#[test]
fn watch_says_in_its_title_that_the_session_sets_the_tokens_a_sample() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = dir.path().join("g.ndjson");
    let lines: String = (0..50)
        .map(|i| {
            format!(
                "{{\"v\":1,\"step\":{i},\"b_small\":8,\"b_big\":16,\"sq_small\":{},\"sq_big\":1.2,\"tokens\":{}}}\n",
                2.0 + f64::from(i % 3) * 0.1,
                16 * (i + 1)
            )
        })
        .collect();
    std::fs::write(&run, lines).expect("stats");
    let session = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/advised_run/session.ron");
    let title = |tag: &str, extra: &str| {
        let command = format!(
            "cd {} && {} watch g.ndjson --session {} --advise {tag}.ndjson {extra}; sleep 30",
            dir.path().display(),
            env!("CARGO_BIN_EXE_copus"),
            session.display()
        );
        let tmux = Tmux::start(tag, 140, 30, &command);
        let screen = tmux.wait_for("50 steps");
        tmux.keys(&["q"]);
        screen.lines().next().unwrap_or_default().to_string()
    };
    let from_session = title("e2e-watch-seq", "");
    assert!(
        from_session.contains("64 tokens a sample, from --session"),
        "{from_session}"
    );
    let given = title("e2e-watch-seq-given", "--seq-len 1");
    assert!(!given.contains("tokens a sample"), "{given}");
}

/// With quit rebound to "Q" in the configuration file: q leaves the explorer running, Q quits
/// it with status 0.
fn quit_is_rebound_to_capital_q(tmux: &Tmux) {
    tmux.keys(&["q"]);
    sleep(Duration::from_millis(500));
    assert!(!tmux.screen().contains("COPUS-EXITED"), "q no longer quits");
    tmux.keys(&["Q"]);
    let end = tmux.wait_for("COPUS-EXITED");
    assert!(end.contains("COPUS-EXITED 0"), "{end}");
}

/// Text output on an 80-column terminal wraps at 80 (it wrapped at 100, so the terminal broke
/// lines mid-word): with tmux's wrapped lines joined back (`capture-pane -J`), no line of
/// `predict` with a calibration in force is longer than the terminal.
#[test]
fn text_output_wraps_at_the_terminals_width() {
    let dir = tempfile::tempdir().expect("tempdir");
    let csv = dir.path().join("steps.csv");
    std::fs::write(
        &csv,
        "dp,tp,pp,mbs,batch,step_time_s\n8,1,1,1,64,30\n4,2,1,1,64,33\n2,4,1,1,64,38\n",
    )
    .expect("csv");
    let cal = dir.path().join("cal.ron");
    let bin = env!("CARGO_BIN_EXE_copus");
    let made = std::process::Command::new(bin)
        .args([
            "calibrate",
            "--hardware",
            "h100-sxm",
            "--model",
            "llama3-8b",
            "--out",
        ])
        .arg(&cal)
        .arg(&csv)
        .output()
        .expect("calibrate");
    assert!(made.status.success(), "{made:?}");
    let command = format!(
        "{bin} predict --model llama3-8b --gpus 8 --batch 64 --hardware a100-80g \
         --calibration {}; echo PREDICT-DONE; sleep 30",
        cal.display()
    );
    let t = Tmux::start("wrap80", 80, 60, &command);
    t.wait_for("PREDICT-DONE");
    let joined = String::from_utf8_lossy(&t.cmd(&["capture-pane", "-p", "-J", "-t", "e2e"]).stdout)
        .into_owned();
    assert!(joined.contains("calibration"), "{joined}");
    for line in joined.lines() {
        assert!(line.trim_end().chars().count() <= 80, "{line:?}\n{joined}");
    }
}

/// `grid`'s table and `plan`'s strategy table and switch lines on an 80-column terminal: no
/// line longer than the terminal (the table rows were 93–136 columns), an infeasible cell's
/// reason still said, and each switch's net gain with what it is measured against.
#[test]
fn grid_and_plan_tables_fit_an_80_column_terminal() {
    let bin = env!("CARGO_BIN_EXE_copus");
    // And `cbs`, whose notes ran to 259 columns.
    let dir = tempfile::tempdir().expect("tempdir");
    let branches = dir.path().join("b.ndjson");
    let made = std::process::Command::new(bin)
        .args([
            "branch",
            "--at",
            "30",
            "--batches",
            "8,16,32",
            "--seeds",
            "2",
        ])
        .args([
            "--budget-samples",
            "512",
            "--eval-samples",
            "128",
            "--quiet",
        ])
        .arg("--out")
        .arg(&branches)
        .arg("--run-out")
        .arg(dir.path().join("run.ndjson"))
        .output()
        .expect("branch");
    assert!(made.status.success(), "{made:?}");
    // And `analyze --branches`, whose comparison table ran to 106 columns.
    let command = format!(
        "{bin} grid sessions/paper-32b-32xh100.ron; {bin} plan sessions/paper-7b-16xh100.ron; \
         {bin} cbs {b}; {bin} analyze assets/data/sample-run.ndjson; \
         {bin} analyze {run} --branches {b}; echo TABLES-DONE; sleep 30",
        b = branches.display(),
        run = dir.path().join("run.ndjson").display()
    );
    let t = Tmux::start("tables80", 80, 60, &command);
    t.wait_for_within("TABLES-DONE", std::time::Duration::from_secs(60));
    let out = t.cmd(&["capture-pane", "-p", "-J", "-S", "-", "-t", "e2e"]);
    let joined = String::from_utf8_lossy(&out.stdout).into_owned();
    for want in [
        "options / reason",
        "infeasible",
        "out of memory",
        "net gain",
        "keeping the layout and batch before it",
        "optimal-joint",
        "threshold CBS",
        "caution:",
        "ratio-EMA*",
        "B_noise/B_s",
    ] {
        assert!(joined.contains(want), "{want:?} missing:\n{joined}");
    }
    // The sample's bad lines go to stderr as `FILE:LINE: why`, one a line, as compilers write
    // them (tools read them so): not wrapped.
    let located = |l: &str| {
        l.split_once(": ").is_some_and(|(place, _)| {
            place
                .rsplit_once(':')
                .is_some_and(|(_, n)| n.parse::<u64>().is_ok())
        })
    };
    for line in joined.lines().filter(|l| !located(l)) {
        assert!(line.trim_end().chars().count() <= 80, "{line:?}\n{joined}");
    }
}
