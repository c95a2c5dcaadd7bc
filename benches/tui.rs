//! Explorer speed: one frame of the demo at 200×60, and scrub-to-frame (update with the
//! goodput-grid recompute, then draw), beside a same-run baseline that draws an empty bordered
//! frame (the cost of the test backend itself).
//!
//! Run: `cargo bench --bench tui`

use copus::app::{App, Effect, Msg, update};
use copus::cli::open::{app_for_session, demo_path};
use copus::runtime::table_job;
use copus::ui::palette::ColorMode;
use copus::ui::view;
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::widgets::Block;
use std::sync::Arc;

fn main() {
    divan::main();
}

fn demo() -> App {
    let mut app = app_for_session(&demo_path()).expect("demo loads");
    let Effect::ComputeTable { generation } = copus::app::update::request_table(&mut app) else {
        panic!("table request");
    };
    let table = Arc::new(table_job(&app).compute());
    update(&mut app, Msg::TableReady { generation, table });
    app
}

#[divan::bench]
fn baseline_empty_frame_200x60(b: divan::Bencher) {
    let mut term = Terminal::new(TestBackend::new(200, 60)).expect("terminal");
    b.bench_local(|| {
        term.draw(|f| f.render_widget(Block::bordered(), f.area()))
            .expect("draw");
    });
}

#[divan::bench]
fn frame_200x60(b: divan::Bencher) {
    let app = demo();
    let mut term = Terminal::new(TestBackend::new(200, 60)).expect("terminal");
    b.bench_local(|| {
        term.draw(|f| view::draw(f, &app, ColorMode::Indexed))
            .expect("draw");
    });
}

#[divan::bench]
fn scrub_to_frame_200x60(b: divan::Bencher) {
    let mut app = demo();
    let n = app.trajectory.points.len() as i64;
    let mut term = Terminal::new(TestBackend::new(200, 60)).expect("terminal");
    let mut dir = 1;
    b.bench_local(|| {
        if app.cursor as i64 + dir >= n || app.cursor as i64 + dir < 0 {
            dir = -dir;
        }
        update(&mut app, Msg::Scrub(dir));
        term.draw(|f| view::draw(f, &app, ColorMode::Indexed))
            .expect("draw");
    });
}
