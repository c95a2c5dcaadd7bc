//! Render snapshots of every panel of the explorer on the demo, and of the main view on a
//! measured run (stats file), a gradient dump and a live source, at 80×24 and 200×60, with the
//! buffer's styles (colours and modifiers of every cell run), so that a change to a panel's
//! layout, numbers or heatmap colours shows up in review. Regenerate with
//! `INSTA_UPDATE=always cargo test --test integration -- render_snapshots::` and review the diff.

use crate::render_support;

use copus::app::{App, Msg, update};
use copus::cli::open::{OpenArgs, adhoc_session, app_for_session, demo_path};
use copus::config::ThemeName;
use copus::session::Panel;
use copus::ui::palette::ColorMode;
use copus::ui::view;
use ratatui::Terminal;
use ratatui::backend::TestBackend;

fn demo_at(cursor: usize) -> App {
    let app = app_for_session(&demo_path()).expect("demo loads");
    let mut app = render_support::with_table_and_plan(app);
    update(&mut app, Msg::ScrubTo(cursor));
    app
}

fn render(app: &App, w: u16, h: u16, mode: ColorMode) -> ratatui::buffer::Buffer {
    let mut term = Terminal::new(TestBackend::new(w, h)).expect("terminal");
    term.draw(|f| view::draw(f, app, mode)).expect("draws");
    term.backend().buffer().clone()
}

#[test]
fn main_view_with_heatmap_colours() {
    let app = demo_at(40);
    insta::assert_debug_snapshot!("main_80x24", render(&app, 80, 24, ColorMode::Indexed));
    insta::assert_debug_snapshot!("main_200x60", render(&app, 200, 60, ColorMode::Indexed));
    insta::assert_debug_snapshot!(
        "main_80x24_no_color",
        render(&app, 80, 24, ColorMode::Monochrome)
    );
}

#[test]
fn the_light_and_colour_blind_themes() {
    for theme in [ThemeName::Light, ThemeName::Colorblind] {
        let mut app = demo_at(40);
        app.theme = theme;
        let name = format!("main_80x24_{theme:?}").to_lowercase();
        let buffer = render(&app, 80, 24, ColorMode::Indexed);
        let dark = render(&demo_at(40), 80, 24, ColorMode::Indexed);
        assert_eq!(buffer.content().len(), dark.content().len());
        let same_text = buffer
            .content()
            .iter()
            .zip(dark.content())
            .all(|(a, b)| a.symbol() == b.symbol());
        assert!(same_text, "{theme:?}: a theme changes colours, never text");
        assert_ne!(buffer, dark, "{theme:?} draws like the dark theme");
        insta::assert_debug_snapshot!(name, buffer);
    }
}

#[test]
fn every_side_panel() {
    for panel in Panel::SIDE {
        let mut app = demo_at(40);
        update(&mut app, Msg::ShowSide(panel));
        for (w, h) in [(80u16, 24u16), (200, 60)] {
            let name = format!("{panel:?}_{w}x{h}").to_lowercase();
            insta::assert_debug_snapshot!(name, render(&app, w, h, ColorMode::Indexed));
        }
    }
}

fn sample_run() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/data/sample-run.ndjson")
}

fn snapshot_both(name: &str, app: &App) {
    for (w, h) in [(80u16, 24u16), (200, 60)] {
        insta::assert_debug_snapshot!(
            format!("{name}_{w}x{h}"),
            render(app, w, h, ColorMode::Indexed)
        );
    }
}

#[test]
fn a_measured_run_in_its_own_tokens_per_sample() {
    let resolved = adhoc_session(&OpenArgs::for_path(&sample_run())).expect("ad-hoc session");
    let mut app = render_support::with_table(
        copus::cli::open::prepared(resolved, copus::compute::Device::Cpu).expect("loads"),
    );
    update(&mut app, Msg::ScrubTo(300));
    snapshot_both("measured", &app);
    update(&mut app, Msg::ShowSide(Panel::Estimators));
    snapshot_both("measured_estimators", &app);
}

#[test]
fn a_gradient_dump() {
    use copus::compute::DType;
    use copus::source::dump::synth::{SynthSpec, write_dump};
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("dump");
    let spec = SynthSpec {
        steps: 12,
        files: 4,
        samples: 8.0,
        dtype: DType::F32,
        tensor_elems: vec![4096, 999, 17],
        seed: 3,
    };
    write_dump(&dir, &spec).expect("synthetic dump");
    let args = OpenArgs {
        seq_len: Some(1024),
        ..OpenArgs::for_path(&dir)
    };
    let resolved = adhoc_session(&args).expect("ad-hoc session");
    let loaded = copus::pipeline::load(&resolved);
    let mut app = App::loading(resolved);
    update(&mut app, Msg::SourceLoaded(Box::new(loaded)));
    let mut app = render_support::with_table(app);
    update(&mut app, Msg::End);
    update(&mut app, Msg::ShowSide(Panel::Estimators));
    snapshot_both("dump", &app);
}

#[test]
fn a_live_source() {
    use copus::session::DataSource;
    let resolved = adhoc_session(&OpenArgs::for_path(&sample_run())).expect("ad-hoc session");
    let mut resolved = resolved;
    resolved.session.source = DataSource::Live {
        seq_len: None,
        target: "run.ndjson".into(),
    };
    let mut app = render_support::with_table(App::loading(resolved.clone()));
    app.loading = false;
    app.live_target = Some("run.ndjson".into());
    // What the live aggregator sends: the records re-estimated with the one-sided smoother.
    let file = std::fs::File::open(sample_run()).expect("sample");
    let outcome = copus::stats::read_ndjson(std::io::BufReader::new(file)).expect("reads");
    let settings = copus::stats::EstimatorSettings {
        smoother: copus::stats::SmootherKind::OneSided,
        ..Default::default()
    };
    let report = copus::stats::analyze(
        &outcome.records,
        copus::stats::AnalyzeOptions::read(&outcome, &settings),
    )
    .expect("analyses");
    let (seq, origin) = copus::source::measured::run_seq_len(&report, None, 4096);
    let loaded = copus::source::Loaded {
        trajectory: copus::source::measured::trajectory_from_report(
            &report,
            seq,
            "live: run.ndjson".into(),
        ),
        analysis: Some(report),
        seed_ema: Vec::new(),
        note: Some(copus::source::measured::seq_len_note(seq, origin)),
        calibration: None,
        warning: None,
    };
    update(
        &mut app,
        Msg::Live {
            update: Box::new(Ok(loaded)),
            steps: 600,
            malformed: 1,
            non_finite: 0,
            dropped: 0,
        },
    );
    assert_eq!(app.trajectory.seq_len, 2048);
    snapshot_both("live", &app);
}

/// The first cell of `app`'s table that satisfies `want` (row-major).
fn find_cell(app: &App, want: impl Fn(&copus::goodput::TableCell) -> bool) -> (usize, usize) {
    let t = app.table.as_ref().expect("table");
    let i = t.cells.iter().position(want).expect("such a cell");
    (i / t.batches.len(), i % t.batches.len())
}

#[test]
fn the_explanation_of_a_cell_and_two_cells_side_by_side() {
    use copus::goodput::TableCell;
    let mut app = demo_at(40);
    // The best cell explained.
    update(&mut app, Msg::SelectBest);
    update(&mut app, Msg::Explain);
    snapshot_both("explain_best", &app);
    insta::assert_debug_snapshot!(
        "explain_best_80x24_no_color",
        render(&app, 80, 24, ColorMode::Monochrome)
    );
    // An infeasible cell: the reason and the nearest change.
    update(&mut app, Msg::Escape);
    let (r, c) = find_cell(&app, |c| matches!(c, TableCell::Infeasible(_)));
    update(&mut app, Msg::Select(r, c));
    update(&mut app, Msg::Explain);
    snapshot_both("explain_infeasible", &app);
    // Mark the best cell, select another runnable layout at the same batch: side by side.
    update(&mut app, Msg::Escape);
    update(&mut app, Msg::SelectBest);
    update(&mut app, Msg::Mark);
    let best = app.selected;
    let t = app.table.clone().expect("table");
    let other = (0..t.layouts.len())
        .find(|&l| {
            l != best.0
                && t.layouts[l].dp != t.layouts[best.0].dp
                && matches!(t.cell(l, best.1), TableCell::Feasible { .. })
        })
        .expect("another runnable layout at the best batch");
    update(&mut app, Msg::Select(other, best.1));
    update(&mut app, Msg::Explain);
    snapshot_both("compare", &app);
}

#[test]
fn the_readme_capture_is_what_its_command_draws() {
    // README.md opens with a capture of the demo and names the command that drew it: the two
    // stay the same (rerun the command and paste its output when the screen changes).
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).expect("README");
    let capture: Vec<&str> = readme
        .split("```\n")
        .nth(1)
        .expect("a first code block")
        .lines()
        .collect();
    let command = readme
        .split("drawn by `copus snapshot ")
        .nth(1)
        .and_then(|rest| rest.split('`').next())
        .expect("the README names the snapshot command");
    // `--keys "A B C" --size WxH`
    let keys = command.split('"').nth(1).expect("quoted keys");
    let size = command.split("--size ").nth(1).expect("size").trim();
    let drawn = render_support::snapshot(&["--keys", keys, "--size", size]);
    let drawn: Vec<&str> = drawn.lines().map(str::trim_end).collect();
    let capture: Vec<&str> = capture.iter().map(|l| l.trim_end()).collect();
    assert_eq!(
        capture, drawn,
        "README.md's capture is not what `copus snapshot {command}` draws"
    );
}

#[test]
fn the_selected_heatmap_cell_is_marked_without_colour_too() {
    // NO_COLOR: the selection is reverse video, an attribute, not a colour; it must be there
    // in both modes when the heatmap has the focus.
    for mode in [ColorMode::Indexed, ColorMode::Monochrome] {
        let mut app = demo_at(40);
        app.focus = Panel::Heatmap;
        let buffer = render(&app, 120, 40, mode);
        let reversed = buffer
            .content()
            .iter()
            .filter(|c| c.modifier.contains(ratatui::style::Modifier::REVERSED))
            .count();
        assert!(reversed >= 4, "{mode:?}: {reversed} reversed cells");
        if mode == ColorMode::Monochrome {
            // No colour at all: a colour change is written under NO_COLOR as a bare SGR reset,
            // which would switch the reverse video off.
            let reset = ratatui::style::Color::Reset;
            assert!(
                buffer
                    .content()
                    .iter()
                    .all(|c| c.fg == reset && c.bg == reset)
            );
        }
    }
}

#[test]
fn under_no_color_the_best_cells_star_never_touches_its_neighbour() {
    // The built-in trainer's run at 120x40: the ★ cell's number and glyphs filled its width,
    // so the star joined the cell to its left ("92.5k█★92.9k█").
    let dir = tempfile::tempdir().expect("tempdir");
    let run = dir.path().join("run.ndjson");
    let copus = env!("CARGO_BIN_EXE_copus");
    let trained = std::process::Command::new(copus)
        .args(["demo-train", "--steps", "300", "--quiet", "--out"])
        .arg(&run)
        .status()
        .expect("demo-train");
    assert!(trained.success());
    let out = std::process::Command::new(copus)
        .arg("snapshot")
        .arg(&run)
        .args(["--seq-len", "4096", "--size", "120x40"])
        .env("NO_COLOR", "1")
        .output()
        .expect("snapshot");
    let screen = String::from_utf8_lossy(&out.stdout);
    assert!(screen.contains('★'), "{screen}");
    for line in screen
        .lines()
        .filter(|l| l.contains('★') && !l.contains("★ best"))
    {
        // The star ends the best cell where its neighbours end in a shade (a leading star
        // dropped the cell's glyphs: the best cell looked the emptiest of its row), with a
        // space or the panel's edge after it.
        let (cell, after) = line.split_once('★').expect("a star");
        assert!(
            cell.chars()
                .last()
                .is_some_and(|c| c.is_ascii_alphanumeric() || "░▒▓█".contains(c)),
            "{line}"
        );
        assert!(
            after
                .chars()
                .next()
                .is_none_or(|c| c == ' ' || c == '│' || c == '┃'),
            "{line}"
        );
    }
}
