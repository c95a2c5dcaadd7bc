//! Update and render tests of the explorer on the demo session: key sequences drive the state,
//! and every panel draws at 80×24 and 200×60 without panicking.

use copus::app::{App, Effect, Msg, update};
use copus::cli::open::{app_for_session, demo_path};
use copus::goodput::throughput_table;
use copus::perf::PerfContext;
use copus::session::Panel;
use copus::tui::palette::ColorMode;
use copus::tui::{keys, table_job, view};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use std::sync::Arc;

fn demo_with_table() -> App {
    let mut app = app_for_session(&demo_path()).expect("demo loads");
    let effects = update(&mut app, Msg::Home);
    assert!(effects.is_empty());
    let generation = match copus::app::update::request_table(&mut app) {
        Effect::ComputeTable { generation } => generation,
        other => panic!("unexpected effect {other:?}"),
    };
    let job = table_job(&app);
    let ctx = PerfContext {
        hw: &job.hardware,
        model: &job.model,
        eff: &job.efficiency,
        gpus_per_node: job.cluster.gpus_per_node,
    };
    let table = Arc::new(throughput_table(&ctx, &job.cluster, &job.search));
    update(&mut app, Msg::TableReady { generation, table });
    app
}

fn render(app: &App, w: u16, h: u16, mode: ColorMode) -> String {
    let mut term = Terminal::new(TestBackend::new(w, h)).expect("test terminal");
    term.draw(|f| view::draw(f, app, mode)).expect("draws");
    let buf = term.backend().buffer().clone();
    let mut out = String::new();
    for y in 0..h {
        for x in 0..w {
            out.push_str(buf[(x, y)].symbol());
        }
        out.push('\n');
    }
    out
}

fn key(code: KeyCode, mods: KeyModifiers) -> KeyEvent {
    KeyEvent::new(code, mods)
}

#[test]
fn scrubbing_moves_the_cursor_and_the_grid_follows_b_crit() {
    let mut app = demo_with_table();
    let b0 = app.grid.as_ref().expect("grid").b_crit;
    let msg = keys::key_to_msg(&app, key(KeyCode::Right, KeyModifiers::SHIFT)).expect("bound");
    update(&mut app, msg);
    assert_eq!(app.cursor, keys::BIG_STEP as usize);
    let b10 = app.grid.as_ref().expect("grid").b_crit;
    assert!(b10 > b0, "B_crit grows along the demo: {b0} → {b10}");
    update(&mut app, Msg::End);
    assert_eq!(app.cursor, app.trajectory.points.len() - 1);
    update(&mut app, Msg::Scrub(1_000));
    assert_eq!(
        app.cursor,
        app.trajectory.points.len() - 1,
        "clamped at the end"
    );
    update(&mut app, Msg::Scrub(-1_000_000));
    assert_eq!(app.cursor, 0, "clamped at the start");
}

#[test]
fn stale_tables_are_ignored_and_focus_cycles() {
    let mut app = demo_with_table();
    let table = app.table.clone().expect("table");
    let cursor_grid = app.grid.clone();
    copus::app::update::request_table(&mut app);
    update(
        &mut app,
        Msg::TableReady {
            generation: 0,
            table,
        },
    );
    assert_eq!(app.grid, cursor_grid, "a stale answer changes nothing");
    assert_eq!(app.focus, Panel::Timeline);
    for expected in [Panel::Heatmap, Panel::Recommendation, Panel::Timeline] {
        let msg = keys::key_to_msg(&app, key(KeyCode::Tab, KeyModifiers::NONE)).expect("tab");
        update(&mut app, msg);
        assert_eq!(app.focus, expected);
    }
}

#[test]
fn heatmap_focus_turns_arrows_into_selection_and_save_snapshots_the_view() {
    let mut app = demo_with_table();
    update(&mut app, Msg::FocusNext);
    for code in [KeyCode::Down, KeyCode::Down, KeyCode::Right] {
        let msg = keys::key_to_msg(&app, key(code, KeyModifiers::NONE)).expect("bound");
        update(&mut app, msg);
    }
    assert_eq!(app.selected, (2, 1));
    assert_eq!(app.cursor, 0, "arrows in the heatmap do not scrub");
    let effects = update(&mut app, Msg::Save);
    match effects.as_slice() {
        [Effect::Save { session, .. }] => {
            assert_eq!(session.view.selected, Some((2, 1)));
            assert_eq!(session.view.focus, Panel::Heatmap);
        }
        other => panic!("expected one save effect, got {other:?}"),
    }
    let quit = keys::key_to_msg(&app, key(KeyCode::Char('q'), KeyModifiers::NONE));
    update(&mut app, quit.expect("q is bound"));
    assert!(app.quit);
}

#[test]
fn every_panel_renders_at_80x24_and_200x60() {
    let mut app = demo_with_table();
    for (w, h) in [(80, 24), (200, 60)] {
        for mode in [ColorMode::Indexed, ColorMode::Monochrome] {
            let screen = render(&app, w, h, mode);
            for panel in [
                "B_crit timeline",
                "Goodput",
                "Recommendation",
                "best: batch",
            ] {
                assert!(screen.contains(panel), "{w}×{h} lacks {panel:?}:\n{screen}");
            }
        }
    }
    update(&mut app, Msg::ToggleHelp);
    let screen = render(&app, 80, 24, ColorMode::Indexed);
    assert!(
        screen.contains("Help") && screen.contains("quit"),
        "{screen}"
    );
}

#[test]
fn the_best_cell_is_starred_and_no_color_uses_glyphs() {
    let app = demo_with_table();
    let screen = render(&app, 200, 60, ColorMode::Monochrome);
    assert!(screen.contains('★'), "best cell marked:\n{screen}");
    assert!(screen.contains("░▒▓█"), "legend in glyphs:\n{screen}");
}
