//! Render snapshots of every panel of the explorer on the demo, at 80×24 and 200×60, with the
//! buffer's styles (colours and modifiers of every cell run), so that a change to a panel's
//! layout, numbers or heatmap colours shows up in review. Regenerate with
//! `INSTA_UPDATE=always cargo test --test render_snapshots` and review the diff.

use copus::app::{App, Effect, Msg, update};
use copus::cli::open::{app_for_session, demo_path};
use copus::session::Panel;
use copus::tui::palette::ColorMode;
use copus::tui::{table_job, view};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use std::sync::Arc;

fn demo_at(cursor: usize) -> App {
    let mut app = app_for_session(&demo_path()).expect("demo loads");
    let Effect::ComputeTable { generation } = copus::app::update::request_table(&mut app) else {
        panic!("table request");
    };
    let table = Arc::new(table_job(&app).compute());
    let effects = update(&mut app, Msg::TableReady { generation, table });
    if let [Effect::ComputePlan { generation }] = effects.as_slice() {
        let plan = copus::plan::plan_with(
            &app.resolved,
            &app.raw_trajectory,
            app.table.as_ref().expect("table"),
        )
        .map_err(|e| e.to_string());
        update(
            &mut app,
            Msg::PlanReady {
                generation: *generation,
                plan: Box::new(plan),
            },
        );
    }
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
