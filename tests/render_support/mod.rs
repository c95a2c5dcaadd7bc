//! Shared by the explorer's in-process tests: draw the whole view into an in-memory terminal
//! and read it back as text, one line per terminal row; compute the throughput table (and
//! the plan that follows it) as the explorer's worker does.
#![allow(dead_code)]

use copus::app::{App, Effect, Msg, update};
use copus::runtime::table_job;
use copus::ui::palette::ColorMode;
use copus::ui::view;
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use std::sync::Arc;

/// The explorer's screen at `w`×`h` cells in colour `mode`, as text (each row ends in '\n').
pub fn screen(app: &App, w: u16, h: u16, mode: ColorMode) -> String {
    let mut term = Terminal::new(TestBackend::new(w, h)).expect("test terminal");
    term.draw(|f| view::draw(f, app, mode)).expect("draws");
    let buf = term.backend().buffer().clone();
    (0..h)
        .map(|y| (0..w).map(|x| buf[(x, y)].symbol()).collect::<String>() + "\n")
        .collect()
}

/// `app` with its throughput table computed and delivered, as the worker answers a request.
pub fn with_table(app: App) -> App {
    with_table_then(app, false)
}

/// [`with_table`], then the plan the table's arrival asks for (switch points), when it asks.
pub fn with_table_and_plan(app: App) -> App {
    with_table_then(app, true)
}

fn with_table_then(mut app: App, plan: bool) -> App {
    let Effect::ComputeTable { generation } = copus::app::update::request_table(&mut app) else {
        panic!("table request");
    };
    let table = Arc::new(table_job(&app).compute());
    let effects = update(&mut app, Msg::TableReady { generation, table });
    if let (true, [Effect::ComputePlan { generation }]) = (plan, effects.as_slice()) {
        let plan = copus::pipeline::plan_with(
            &app.resolved,
            &app.planning_trajectory(),
            app.table.as_ref().expect("table"),
        );
        update(
            &mut app,
            Msg::PlanReady {
                generation: *generation,
                plan: Box::new(plan),
            },
        );
    }
    app
}

/// `copus snapshot ARGS…` run as a user runs it: the screen it prints (it must succeed).
pub fn snapshot(args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_copus"))
        .arg("snapshot")
        .args(args)
        .output()
        .expect("snapshot");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}
