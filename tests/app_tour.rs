//! The demo's guided tour at 80×24: every step's instruction works from where the step leaves
//! the focus, the popup leaves what it describes visible, and the text reads without colour.

use crate::render_support;
use copus::app::{App, Effect, Msg, update};
use copus::cli::open::{demo_session, prepared};
use copus::runtime::{keys, table_job};
use copus::session::Panel;
use copus::ui::palette::ColorMode;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use std::sync::Arc;

fn render(app: &App, w: u16, h: u16) -> String {
    render_support::screen(app, w, h, ColorMode::Monochrome)
}

fn demo() -> App {
    let dir = std::env::temp_dir();
    let mut app = prepared(
        demo_session(&dir).expect("demo"),
        copus::compute::Device::Cpu,
    )
    .expect("prepared");
    let Effect::ComputeTable { generation } = copus::app::update::request_table(&mut app) else {
        panic!("table request");
    };
    let table = Arc::new(table_job(&app).compute());
    update(&mut app, Msg::TableReady { generation, table });
    app
}

fn press(app: &mut App, code: KeyCode, mods: KeyModifiers) {
    if let Some(msg) = keys::key_to_msg(app, KeyEvent::new(code, mods)) {
        update(app, msg);
    }
}

#[test]
fn every_tour_step_works_at_80x24() {
    let mut app = demo();
    let steps = app.resolved.session.tour.clone();
    assert!(steps.len() >= 5, "the demo has a tour");
    for (i, step) in steps.iter().enumerate() {
        press(&mut app, KeyCode::Char('n'), KeyModifiers::NONE);
        assert_eq!(app.tour_step, Some(i));
        assert_eq!(app.focus, step.panel, "step {} focuses its panel", i + 1);
        let text = step.text.to_lowercase();
        for colour in ["yellow", "magenta", "green", "cyan", " red", "blue"] {
            assert!(
                !text.contains(colour),
                "step {} names a colour: {text}",
                i + 1
            );
        }
        assert!(!text.contains("seed 0"), "internal names: {text}");
        let screen = render(&app, 80, 24);
        assert!(screen.contains(&format!("Tour {}/{}", i + 1, steps.len())));
        match step.panel {
            Panel::Heatmap => assert!(screen.contains('★'), "step {}:\n{screen}", i + 1),
            Panel::Timeline => assert!(screen.contains("· step "), "step {}:\n{screen}", i + 1),
            Panel::Recommendation => assert!(screen.contains("best: batch"), "{screen}"),
            Panel::WhatIf => assert!(screen.contains("nodes"), "{screen}"),
            _ => {}
        }
        // The text scrolls when it does not fit.
        let before = screen.clone();
        press(&mut app, KeyCode::Down, KeyModifiers::SHIFT);
        if before.contains("Shift+↓ more") {
            assert_ne!(render(&app, 80, 24), before, "step {} scrolls", i + 1);
        }
        // What the step tells the user to press does what it says.
        if step.text.contains("scrub back with ←") {
            let cursor = app.cursor;
            let best = app.grid.as_ref().and_then(|g| g.best);
            press(&mut app, KeyCode::Left, KeyModifiers::SHIFT);
            assert_eq!(app.cursor + 10, cursor, "Shift+← scrubs 10 points back");
            press(&mut app, KeyCode::Home, KeyModifiers::NONE);
            assert_ne!(app.grid.as_ref().and_then(|g| g.best), best, "the ★ moves");
            press(&mut app, KeyCode::End, KeyModifiers::NONE);
        }
        if step.text.contains("←/→ changes it") {
            press(&mut app, KeyCode::Down, KeyModifiers::NONE);
            assert_eq!(app.whatif_row, 1, "↓ picks a row");
            press(&mut app, KeyCode::Left, KeyModifiers::NONE);
            assert!(app.dirty(), "← changes the value");
        }
    }
    press(&mut app, KeyCode::Char('n'), KeyModifiers::NONE);
    assert_eq!(app.tour_step, None, "n after the last step ends the tour");
}

#[test]
fn esc_then_n_resumes_the_tour_where_it_was_closed() {
    let mut app = demo();
    for _ in 0..3 {
        update(&mut app, Msg::Tour(1));
    }
    assert_eq!(app.tour_step, Some(2));
    update(&mut app, Msg::Escape);
    assert_eq!(app.tour_step, None);
    assert!(app.status.contains("closed at step 3"), "{}", app.status);
    update(&mut app, Msg::Tour(1));
    assert_eq!(app.tour_step, Some(2), "n resumes at the step Esc closed");
    let last = app.resolved.session.tour.len();
    while app.tour_step.is_some_and(|i| i + 1 < last) {
        update(&mut app, Msg::Tour(1));
    }
    assert!(
        app.status.contains("the last step: n ends the tour"),
        "{}",
        app.status
    );
    update(&mut app, Msg::Tour(1));
    assert!(app.status.contains("tour ended"), "{}", app.status);
    update(&mut app, Msg::Tour(1));
    assert_eq!(app.tour_step, Some(0), "after the end, n starts again");
}
