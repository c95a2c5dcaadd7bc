//! The explanation popup (`x`), the marked cell (`m`) and the comparison, and the best cell's
//! step shares along training, on the demo session.

use crate::render_support;
use copus::app::OverlayKind;
use copus::app::explain::{CellKind, cell_view, compare};
use copus::app::{App, Effect, Msg, update};
use copus::cli::open::{app_for_session, demo_path};
use copus::goodput::{GoodputGrid, TableCell};
use copus::perf::{PerfContext, predict};
use copus::runtime::{keys, table_job};
use copus::ui::palette::ColorMode;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use std::sync::Arc;

fn demo() -> App {
    let mut app = app_for_session(&demo_path()).expect("demo loads");
    let Effect::ComputeTable { generation } = copus::app::update::request_table(&mut app) else {
        panic!("table request");
    };
    let table = Arc::new(table_job(&app).compute());
    update(&mut app, Msg::TableReady { generation, table });
    app
}

fn with_plan(mut app: App) -> App {
    let plan = copus::pipeline::plan_with(
        &app.resolved,
        &app.planning_trajectory(),
        app.table.as_ref().expect("table"),
    );
    let generation = app.plan_generation;
    update(
        &mut app,
        Msg::PlanReady {
            generation,
            plan: Box::new(plan),
        },
    );
    app
}

fn press(app: &mut App, code: KeyCode) {
    let msg = keys::key_to_msg(app, KeyEvent::new(code, KeyModifiers::NONE))
        .unwrap_or_else(|| panic!("{code:?} is bound"));
    update(app, msg);
}

fn screen(app: &App, w: u16, h: u16) -> String {
    render_support::screen(app, w, h, ColorMode::Monochrome)
}

#[test]
fn x_opens_the_explanation_esc_closes_it_and_it_scrolls() {
    let mut app = demo();
    press(&mut app, KeyCode::Char('x'));
    assert!(app.is_open(OverlayKind::Explain));
    let s = screen(&app, 80, 24);
    assert!(s.contains("Step time") && s.contains("C compute"), "{s}");
    // Modal: arrows scroll the popup, not the selection.
    let selected = app.selected;
    press(&mut app, KeyCode::Down);
    assert_eq!((app.selected, app.explain_scroll), (selected, 1));
    // Help over the explanation: Esc closes the help first, then the explanation.
    press(&mut app, KeyCode::Char('?'));
    assert!(app.is_open(OverlayKind::Help));
    press(&mut app, KeyCode::Esc);
    assert!(!app.is_open(OverlayKind::Help) && app.is_open(OverlayKind::Explain));
    press(&mut app, KeyCode::Esc);
    assert!(!app.is_open(OverlayKind::Explain));
    assert!(!app.quit, "Esc never quits");
    // Everything in the popup is reachable at 80×24.
    press(&mut app, KeyCode::Char('x'));
    for _ in 0..40 {
        press(&mut app, KeyCode::Down);
    }
    let s = screen(&app, 80, 24);
    assert!(s.contains("R runtime reserve"), "scrolled to the end:\n{s}");
    press(&mut app, KeyCode::Char('x'));
    assert!(!app.is_open(OverlayKind::Explain), "x toggles");
}

#[test]
fn m_marks_and_unmarks_and_a_new_table_keeps_a_valid_mark() {
    let mut app = demo();
    update(&mut app, Msg::SelectBest);
    press(&mut app, KeyCode::Char('m'));
    assert_eq!(app.marked, Some(app.selected));
    assert!(app.status.contains("marked"), "{}", app.status);
    let s = screen(&app, 120, 40);
    assert!(s.contains("marked (m)"), "{s}");
    press(&mut app, KeyCode::Char('m'));
    assert_eq!(app.marked, None);
    // A mark outside a new (smaller) table is dropped.
    app.marked = Some((10_000, 0));
    let Effect::ComputeTable { generation } = copus::app::update::request_table(&mut app) else {
        panic!("table request");
    };
    let table = Arc::new(table_job(&app).compute());
    update(&mut app, Msg::TableReady { generation, table });
    assert_eq!(app.marked, None);
}

#[test]
fn the_cell_view_carries_the_grids_numbers_and_the_comparison_is_consistent() {
    let mut app = demo();
    update(&mut app, Msg::SelectBest);
    let best = app.selected;
    let a = cell_view(&app, best).expect("best cell");
    let grid = app.grid.as_ref().expect("grid");
    let table = app.table.clone().expect("table");
    let i = best.0 * table.batches.len() + best.1;
    assert_eq!(a.goodput, grid.goodput[i]);
    assert_eq!(a.stat_eff, grid.stat_eff[best.1]);
    let TableCell::Feasible { prediction, .. } = table.cell(best.0, best.1) else {
        panic!("the best cell runs");
    };
    let ea = a.runs().expect("runs");
    assert_eq!(&ea.prediction, prediction);
    // Compare with every other runnable cell: ratios agree with the parts.
    let mut compared = 0;
    for (j, cell) in table.cells.iter().enumerate() {
        let at = (j / table.batches.len(), j % table.batches.len());
        let b = cell_view(&app, at).expect("cell");
        match (cell, compare(&a, &b)) {
            (TableCell::Feasible { prediction: pb, .. }, Some(c)) => {
                let rel = |x: f64, y: f64| (x / y - 1.0).abs() < 1e-9;
                assert!(rel(c.goodput_ratio, c.throughput_ratio * c.stat_eff_ratio));
                assert!(rel(c.step_ratio, pb.step_time_s / prediction.step_time_s));
                let step_b: f64 = c.step.iter().map(|d| d.b).sum();
                assert!(rel(step_b, pb.step_time_s));
                // The best cell has the highest goodput: nothing compares above it.
                assert!(
                    c.goodput_ratio <= 1.0 + 1e-12,
                    "{at:?}: {}",
                    c.goodput_ratio
                );
                assert!(!c.summary.is_empty());
                compared += 1;
            }
            (TableCell::Infeasible(_), None) => {
                let CellKind::Infeasible { nearest, .. } = &b.kind else {
                    panic!("infeasible cell explained as running");
                };
                if let Some(n) = nearest {
                    assert!(n.prediction.fits && n.distance > 0);
                }
            }
            (cell, c) => panic!("{at:?}: {cell:?} compared as {c:?}"),
        }
    }
    assert!(compared > 10);
}

#[test]
fn marking_then_x_shows_both_cells_side_by_side() {
    let mut app = demo();
    update(&mut app, Msg::SelectBest);
    press(&mut app, KeyCode::Char('m'));
    let (row, col) = app.selected;
    let t = app.table.clone().expect("table");
    let other = (0..t.layouts.len())
        .find(|&l| l != row && matches!(t.cell(l, col), TableCell::Feasible { .. }))
        .expect("another runnable layout");
    update(&mut app, Msg::Select(other, col));
    press(&mut app, KeyCode::Char('x'));
    for (w, h) in [(80u16, 24u16), (200, 60)] {
        let s = screen(&app, w, h);
        assert!(
            s.contains("A (marked)") && s.contains("B (selected)"),
            "{s}"
        );
        assert!(s.contains(&t.layouts[other].label()), "{s}");
    }
    let s = screen(&app, 200, 60);
    for row in ["goodput", "stat. eff.", "tokens/s", "B − A"] {
        assert!(s.contains(row), "{row}:\n{s}");
    }
}

#[test]
fn the_best_cell_along_training_is_the_heatmaps_best_at_each_phase() {
    let app = with_plan(demo());
    let plan = app.plan.clone().expect("plan");
    assert_eq!(plan.best_along.len(), plan.phases, "one entry per phase");
    let r = &app.resolved;
    let eff = r.efficiency();
    let ctx = PerfContext {
        hw: &r.hardware,
        model: &r.model,
        eff: &eff,
        gpus_per_node: r.cluster().gpus_per_node,
    };
    let table = app.table.clone().expect("table");
    for b in &plan.best_along {
        let p = predict(&ctx, &b.config, b.batch).expect("runs");
        let step = p.step_time_s;
        let br = &p.breakdown;
        let rel = |x: f64, y: f64| (x - y).abs() < 1e-9;
        assert!(rel(
            b.exposed_comm_share,
            (br.tp_s + br.pp_s + br.dp_s) / step
        ));
        assert!(rel(b.bubble_share, br.bubble_s / step));
        let parts = b.compute_share + b.exposed_comm_share + b.bubble_share;
        assert!(parts <= 1.0 + 1e-12 && parts > 0.5, "{parts}");
        let grid = GoodputGrid::at(&table, b.b_crit, r.session.stat_eff);
        let (l, c) = grid.best.expect("a best cell");
        assert_eq!(
            (table.layouts[l].label(), table.batches[c]),
            (b.layout.clone(), b.batch)
        );
    }
    // The strips are drawn in the plan panel.
    let mut app = app;
    update(&mut app, Msg::ShowSide(copus::session::Panel::Plan));
    let s = screen(&app, 200, 60);
    assert!(s.contains("★ per phase") && s.contains(" comm "), "{s}");
    // Its line names the phase's B_crit: the heatmap's ★ is at the cursor's own (below the
    // fold: the panel focused and scrolled).
    update(&mut app, Msg::ScrollSide(8));
    let s = screen(&app, 200, 60);
    assert!(s.contains("★ of this phase (mean B_crit"), "{s}");
}

#[test]
fn bar_cells_are_proportional_and_add_up_to_the_rounded_total() {
    use copus::ui::explain::bar_cells;
    let mut seed = 7u64;
    let mut next = || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 11) as f64 / (1u64 << 53) as f64
    };
    for width in [1usize, 7, 40, 60] {
        for _ in 0..200 {
            let values: Vec<f64> = (0..6).map(|_| next() * next() * 10.0).collect();
            let total: f64 = values.iter().sum();
            let scale = total * (0.5 + next());
            let cells = bar_cells(&values, scale, width);
            // Parts adding up to more than the scale fill the bar.
            let scale = scale.max(total);
            let want = ((total / scale * width as f64).round() as usize).min(width);
            assert_eq!(
                cells.iter().sum::<usize>(),
                want,
                "{values:?} {scale} {width}"
            );
            for (v, &c) in values.iter().zip(&cells) {
                let exact = (v / scale * width as f64).min(width as f64);
                assert!(
                    (c as f64 - exact).abs() < 1.0 + 1e-9,
                    "{v} → {c} of {exact}"
                );
            }
        }
    }
    assert_eq!(bar_cells(&[1.0, 2.0], 0.0, 10), vec![0, 0]);
}
