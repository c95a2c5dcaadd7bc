//! The explorer's plan panel shows the objective, the B_crit kind and conversion, and the
//! paper-style speedup of the plan it received.

use copus::app::{App, Effect, Msg, update};
use copus::cli::open::{app_for_session, demo_path};
use copus::runtime::table_job;
use copus::session::Panel;
use copus::ui::palette::ColorMode;
use copus::ui::view;
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use std::sync::Arc;

fn demo_with_plan() -> (App, copus::plan::PlanReport) {
    let mut app = app_for_session(&demo_path()).expect("demo loads");
    let Effect::ComputeTable { generation } = copus::app::update::request_table(&mut app) else {
        panic!("table request");
    };
    let table = Arc::new(table_job(&app).compute());
    let effects = update(&mut app, Msg::TableReady { generation, table });
    let [Effect::ComputePlan { generation }] = effects.as_slice() else {
        panic!("plan request");
    };
    let plan = copus::pipeline::plan_with(
        &app.resolved,
        &app.raw_trajectory,
        app.table.as_ref().expect("table"),
    )
    .expect("demo plans");
    update(
        &mut app,
        Msg::PlanReady {
            generation: *generation,
            plan: Box::new(Ok(plan.clone())),
        },
    );
    update(&mut app, Msg::ShowSide(Panel::Plan));
    (app, plan)
}

#[test]
fn plan_panel_shows_objective_b_crit_kind_and_paper_speedup() {
    let (app, plan) = demo_with_plan();
    let mut term = Terminal::new(TestBackend::new(200, 60)).expect("terminal");
    term.draw(|f| view::draw(f, &app, ColorMode::Indexed))
        .expect("draws");
    let buf = term.backend().buffer();
    let text: String = (0..buf.area.height)
        .map(|y| {
            (0..buf.area.width)
                .map(|x| buf[(x, y)].symbol().to_string())
                .collect::<String>()
                + "\n"
        })
        .collect();
    let head = format!(
        "{} · B_crit {} ×{}",
        plan.objective, plan.b_crit.kind, plan.b_crit.factor
    );
    assert!(text.contains(&head), "{head} in\n{text}");
    let pct = format!("{:+.1}%", (plan.speedup_vs_fastest_baseline - 1.0) * 100.0);
    let hindsight = format!("{:+.1}%", (plan.speedup_vs_hindsight_static - 1.0) * 100.0);
    let line = format!(
        "optimal {pct} vs {} (fastest paper baseline)",
        plan.fastest_baseline
    );
    let second = format!("optimal {hindsight} vs static (best single choice in hindsight)");
    assert!(text.contains(&second), "{second} in\n{text}");
    assert!(text.contains(&line), "{line} in\n{text}");
    assert!(text.contains("cbs-fixed-small"));
}

/// The screen's text, one line a row.
fn screen(app: &App, width: u16, height: u16) -> String {
    let mut term = Terminal::new(TestBackend::new(width, height)).expect("terminal");
    term.draw(|f| view::draw(f, app, ColorMode::Indexed))
        .expect("draws");
    let buf = term.backend().buffer();
    (0..buf.area.height)
        .map(|y| {
            (0..buf.area.width)
                .map(|x| buf[(x, y)].symbol().to_string())
                .collect::<String>()
                + "\n"
        })
        .collect()
}

#[test]
fn plan_panel_at_80_columns_gives_each_strategy_its_figures_unwrapped() {
    let (app, plan) = demo_with_plan();
    let text = screen(&app, 80, 24);
    // The one-line table needs 40 columns; the 80-column side panel holds 28: the name on
    // one line and its figures below (before, the header and rows wrapped mid-column).
    assert!(text.contains("strategy · time · vs static"), "{text}");
    let first = &plan.strategies[0];
    let figures = format!(
        "   {} · {:+.1}% · {} sw",
        copus::format::duration(first.time_s),
        (first.speedup_vs_static - 1.0) * 100.0,
        first.switches
    );
    assert!(text.contains(&figures), "{figures} in\n{text}");
    assert!(!text.contains("vs stat   sw"), "{text}");
    // Wide, the one-line table stays.
    let wide = screen(&app, 200, 60);
    assert!(wide.contains("vs stat   sw"), "{wide}");
}

/// The timeline's legend names the plan's batch only where some of it falls inside the
/// axis's decades (the measured-run lesson listed "─ plan's batch" with none of it drawn).
#[test]
fn the_plans_batch_is_in_the_legend_only_where_it_is_drawn() {
    let (app, _) = demo_with_plan();
    let plan = copus::ui::timeline_marks::planned_batches(&app);
    assert!(!plan.is_empty());
    let entry = "─ plan's batch".to_string();
    let with = |y| copus::ui::timeline_marks::legend_entries(&app, Some(y));
    assert!(with((0.0, 6.0)).contains(&entry));
    assert!(
        !with((8.0, 9.0)).contains(&entry),
        "no plan batch near 10^8"
    );
    // Where none is drawn, the legend gives the batches and the side of the axis they lie on.
    let batches: Vec<String> = plan.iter().map(|p| copus::format::count(p.1)).collect();
    let mut distinct = batches.clone();
    distinct.dedup();
    let below = format!("↓{} plan's batch, below the axis", distinct.join("→"));
    assert!(with((8.0, 9.0)).contains(&below), "{:?}", with((8.0, 9.0)));
    assert!(with((-3.0, -2.0)).iter().any(|e| e.starts_with('↑')));
    assert!(!copus::ui::timeline_marks::legend_entries(&app, None).contains(&entry));
    // While the panels withhold goodput as read at the wrong scale (a live run of 1 token a
    // sample against a 4096-token model), the plan searched at that scale is not drawn
    // either: `watch` drew a 65.5k-sample plan line beside a run at batch 128.
    let mut wrong_scale = app.clone();
    wrong_scale.scale_warning = Some("the run counts 1 token per sample".into());
    assert!(copus::ui::timeline_marks::planned_batches(&wrong_scale).is_empty());
    assert!(
        !copus::ui::timeline_marks::legend_entries(&wrong_scale, Some((0.0, 6.0))).contains(&entry)
    );
}

/// At 80x24 a decade of the timeline is one row, and the plan's batches (64 → 128 → 256 in
/// the demo) fell on one flat line: each segment with room names its batch on the line.
#[test]
fn the_plans_line_names_its_batches_where_a_decade_is_one_row() {
    let (app, _) = demo_with_plan();
    let plan = copus::ui::timeline_marks::planned_batches(&app);
    assert!(plan.len() >= 2, "the demo's plan switches batch: {plan:?}");
    let text = screen(&app, 80, 24);
    let plan_line = text
        .lines()
        .find(|l| l.contains('─') && l.contains('│') && !l.contains('└'))
        .unwrap_or_else(|| panic!("a plan line in\n{text}"));
    // The last segment runs to the end of training: always wide enough for its label.
    let last = copus::format::count(plan.last().expect("segments").1);
    assert!(
        plan_line.contains(&format!("─{last}─")),
        "{last} on the plan's line: {plan_line}"
    );
    // The first segment (64, 1.0B to 26.2B tokens: three cells) names its batch too: without
    // it the line read "───128────256", a plan that seemed to start at 128.
    let first = copus::format::count(plan[0].1);
    assert!(
        plan_line.contains(&format!("{first}─")),
        "{first} on the plan's line: {plan_line}"
    );
    // Every label on the line is a batch of the plan (none invented, none of B_crit's).
    let labels: Vec<String> = plan_line
        .split(|c: char| !c.is_ascii_alphanumeric() && c != '.')
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect();
    let batches: Vec<String> = plan.iter().map(|p| copus::format::count(p.1)).collect();
    for l in labels
        .iter()
        .filter(|l| !["100", "10", "1.0k", "10.0k"].contains(&l.as_str()))
    {
        assert!(
            batches.contains(l),
            "{l} is not a plan batch {batches:?}: {plan_line}"
        );
    }
}
