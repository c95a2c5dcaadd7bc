//! Update and render tests of the explorer on the demo session: key sequences drive the state,
//! and every panel draws at 80×24 and 200×60 without panicking.

use crate::render_support;
use copus::app::OverlayKind;
use copus::app::{App, Effect, Msg, WriteJob, update};
use copus::cli::open::{app_for_session, demo_path};
use copus::config::keys::{Chord, Key, Scope};
use copus::runtime::{keys, table_job};
use copus::session::Panel;
use copus::source::live::{LinkState, LinkStatus};
use copus::ui::palette::ColorMode;
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
    let table = Arc::new(table_job(&app).compute());
    let effects = update(&mut app, Msg::TableReady { generation, table });
    assert!(matches!(effects.as_slice(), [Effect::ComputePlan { .. }]));
    app
}

fn render(app: &App, w: u16, h: u16, mode: ColorMode) -> String {
    render_support::screen(app, w, h, mode)
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
    let grid = app.grid.clone();
    let Effect::ComputeTable { generation } = copus::app::update::request_table(&mut app) else {
        panic!("request_table asks for a table");
    };
    update(
        &mut app,
        Msg::TableReady {
            generation: generation - 1,
            table: table.clone(),
        },
    );
    assert!(
        app.table.is_none() && app.grid.is_none(),
        "a stale answer is dropped"
    );
    update(&mut app, Msg::TableReady { generation, table });
    assert_eq!(app.grid, grid, "the awaited answer is used");
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
    update(&mut app, Msg::Select(0, 0));
    for code in [KeyCode::Down, KeyCode::Down, KeyCode::Right] {
        let msg = keys::key_to_msg(&app, key(code, KeyModifiers::NONE)).expect("bound");
        update(&mut app, msg);
    }
    assert_eq!(app.selected, (2, 1));
    assert_eq!(app.cursor, 0, "arrows in the heatmap do not scrub");
    let effects = update(&mut app, Msg::Save);
    match effects.as_slice() {
        [Effect::Write(WriteJob { files, .. })] => {
            assert_eq!(files.len(), 1);
            let session = copus::session::Session::from_ron(&files[0].1, &files[0].0)
                .expect("saved text is a session");
            assert_eq!(session.view.selected, Some((2, 1)));
            assert_eq!(session.view.focus, Panel::Heatmap);
        }
        other => panic!("expected one write effect, got {other:?}"),
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
            for panel in ["· step ", "Goodput", "Recommendation", "best: batch"] {
                assert!(screen.contains(panel), "{w}×{h} lacks {panel:?}:\n{screen}");
            }
        }
    }
    update(&mut app, Msg::ToggleHelp);
    let screen = render(&app, 80, 24, ColorMode::Indexed);
    // The whole key list, or its top with the scroll marker (scrolling is tested below).
    assert!(
        screen.contains("Help") && (screen.contains("quit") || screen.contains("↓ more")),
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

fn table_for(app: &App) -> Arc<copus::goodput::ThroughputTable> {
    Arc::new(table_job(app).compute())
}

#[test]
fn what_if_changes_recompute_the_table_and_the_recommendation() {
    let mut app = demo_with_table();
    update(&mut app, Msg::ShowSide(Panel::WhatIf));
    assert_eq!(app.focus, Panel::WhatIf);
    let before = app.table.as_ref().expect("table").layouts.len();
    let gpus_before = app.resolved.cluster().gpus();
    let per_node = app.resolved.cluster().gpus_per_node;
    // Row 0 is the node count: one more node.
    let effects = update(&mut app, Msg::WhatIfChange(1));
    let generation = match effects.as_slice() {
        [Effect::ComputeTable { generation }] => *generation,
        other => panic!("a cluster change must request a table, got {other:?}"),
    };
    assert_eq!(app.resolved.cluster().gpus(), gpus_before + per_node);
    assert!(
        app.table.is_none(),
        "the old table is dropped while recomputing"
    );
    let table = table_for(&app);
    update(&mut app, Msg::TableReady { generation, table });
    let after = app.table.as_ref().expect("new table").layouts.len();
    assert_ne!(before, after, "one more node allows other layouts");

    // The B_crit scale changes efficiency only: no new table, but the grid moves.
    let b_before = app.grid.as_ref().expect("grid").b_crit;
    update(&mut app, Msg::WhatIfRow(6));
    let effects = update(&mut app, Msg::WhatIfChange(1));
    assert!(
        effects
            .iter()
            .all(|e| matches!(e, Effect::ComputePlan { .. })),
        "{effects:?}"
    );
    let b_after = app.grid.as_ref().expect("grid").b_crit;
    assert!(
        (b_after / b_before - 2.0).abs() < 1e-9,
        "{b_before} → {b_after}"
    );
}

#[test]
fn export_writes_csv_and_json_of_every_cell() {
    let mut app = demo_with_table();
    let effects = update(&mut app, Msg::Export);
    let [Effect::Write(WriteJob { files, .. })] = effects.as_slice() else {
        panic!("expected a write, got {effects:?}");
    };
    let csv = &files
        .iter()
        .find(|f| f.0.extension().is_some_and(|e| e == "csv"))
        .expect("csv")
        .1;
    let json = &files
        .iter()
        .find(|f| f.0.extension().is_some_and(|e| e == "json"))
        .expect("json")
        .1;
    let table = app.table.as_ref().expect("table");
    assert_eq!(
        csv.lines().filter(|l| !l.starts_with('#')).count(),
        1 + table.cells.len()
    );
    let v: serde_json::Value = serde_json::from_str(json).expect("valid json");
    assert_eq!(
        v["cells"].as_array().expect("cells").len(),
        table.cells.len()
    );
    let best: Vec<_> = v["cells"]
        .as_array()
        .expect("cells")
        .iter()
        .filter(|c| c["best"] == true)
        .collect();
    assert_eq!(best.len(), 1, "exactly one best cell");
    // The best cell carries its whole configuration, in grid --json's shape, and the CSV the
    // CP, EP and interleave columns (last, so that readers by position keep theirs).
    let config = &best[0]["config"];
    assert_eq!(config["dp"], best[0]["dp"], "{config}");
    assert_eq!(config["mbs"], best[0]["mbs"], "{config}");
    assert!(
        config["ep"].is_number() && config["vpp"].is_number(),
        "{config}"
    );
    assert!(csv.lines().any(|l| l.ends_with(",best,cp,ep,vpp")), "{csv}");
    // The stack's choices are named as grid and plan name them (the export said "Cudnn",
    // "Fsdp2", "VocabParallel", the session files' spelling).
    let cal = &v["context"]["calibration"];
    let stack = app.resolved.stack().to_json().settings;
    assert_eq!(cal["attention"], stack.attention, "{cal}");
    assert_eq!(cal["sharding"], stack.sharding, "{cal}");
    assert_eq!(cal["cross_entropy"], stack.cross_entropy, "{cal}");
    assert!(cal["max_eff"].is_number(), "{cal}");
    // The stack itself, as grid and plan give it (the export had only the efficiencies).
    let named = app.resolved.stack().to_json();
    assert_eq!(v["context"]["stack"]["preset"], named.preset);
    assert_eq!(v["context"]["stack"]["label"], named.label);
    assert!(
        csv.lines()
            .any(|l| l == format!("# stack: {}", named.label)),
        "{csv}"
    );
    let comment = csv
        .lines()
        .find(|l| l.starts_with("# calibration: "))
        .expect("the calibration comment");
    assert!(
        comment.contains(&format!("\"attention\":\"{}\"", stack.attention)),
        "{comment}"
    );
}

#[test]
fn tour_steps_move_focus_and_cursor() {
    let mut app = demo_with_table();
    update(&mut app, Msg::Tour(1));
    if app.resolved.session.tour.is_empty() {
        assert!(app.status.contains("no guided tour"));
        return;
    }
    assert_eq!(app.tour_step, Some(0));
    let first = app.resolved.session.tour[0].clone();
    assert_eq!(app.focus, first.panel);
    if let Some(c) = first.cursor {
        assert_eq!(app.cursor, c);
    }
    // "previous step" from the first stays there and says so (it ended the tour; Esc does).
    update(&mut app, Msg::Tour(-1));
    assert_eq!(app.tour_step, Some(0), "{}", app.status);
    assert!(
        app.status.contains("already the first step"),
        "{}",
        app.status
    );
    update(&mut app, Msg::Escape);
    assert_eq!(app.tour_step, None, "Esc ends the tour");
}

#[test]
fn mouse_clicks_select_cells_and_scrub() {
    use copus::ui::geometry::areas;
    use ratatui::crossterm::event::{MouseButton, MouseEvent, MouseEventKind};
    use ratatui::layout::Rect;
    let mut app = demo_with_table();
    let a = areas(Rect::new(0, 0, 120, 40));
    let click = |x, y| MouseEvent {
        kind: MouseEventKind::Down(MouseButton::Left),
        column: x,
        row: y,
        modifiers: KeyModifiers::NONE,
    };
    // First data row, second column of the heatmap (border + 2 header lines; label 13 wide).
    let ev = click(a.heatmap.x + 1 + 13 + 9 + 2, a.heatmap.y + 3);
    let msg = keys::mouse_to_msg(&app, &a, ev).expect("hits a cell");
    update(&mut app, msg);
    assert_eq!(app.selected, (0, 1));
    assert_eq!(app.focus, Panel::Heatmap);
    let ev = click(a.timeline.x + a.timeline.width - 2, a.timeline.y + 3);
    let msg = keys::mouse_to_msg(&app, &a, ev).expect("hits the timeline");
    update(&mut app, msg);
    assert_eq!(
        app.cursor,
        app.trajectory.points.len() - 1,
        "a click at the right edge scrubs to the end"
    );
}

#[test]
fn the_plan_arrives_and_brackets_jump_between_switch_points() {
    let mut app = demo_with_table();
    let effects = update(&mut app, Msg::Home);
    assert!(effects.is_empty());
    let generation = match copus::app::update::request_plan(&mut app) {
        Some(Effect::ComputePlan { generation }) => generation,
        other => panic!("a table and a trajectory ask for a plan, got {other:?}"),
    };
    let table = app.table.clone().expect("table");
    let plan = copus::pipeline::plan_with(&app.resolved, &app.raw_trajectory, &table);
    let switches = plan.as_ref().expect("the demo plans").switches.len();
    update(
        &mut app,
        Msg::PlanReady {
            generation,
            plan: Box::new(plan),
        },
    );
    let plan = app.plan.clone().expect("plan installed");
    let names: Vec<_> = plan.strategies.iter().map(|s| s.name.as_str()).collect();
    for n in [
        "static",
        "batch-adaptive",
        "config-adaptive",
        "greedy-joint",
        "optimal-joint",
    ] {
        assert!(names.contains(&n), "{names:?}");
    }
    assert!(app.switch_points.len() <= switches);
    if let Some(&first) = app.switch_points.first() {
        update(&mut app, Msg::JumpSwitch(1));
        assert_eq!(app.cursor, first);
        // The status line names the switch at the trajectory's step, as `plan` prints it,
        // and the step a trainer following the plan is at, as `plan --emit` writes it.
        let s = &plan.switches[0];
        let step = app.trajectory.points[first].step;
        assert_eq!(s.at_step, step);
        assert!(
            app.status.starts_with("switch 1/")
                && app.status.contains(&format!(", step {step} ("))
                && app
                    .status
                    .contains(&format!(") = trainer {} (", s.plan_steps))
                && app.status.contains(&format!(
                    "batch {}→{}",
                    s.from_state.batch, s.to_state.batch
                ))
                && app
                    .status
                    .contains(&format!("· {} costs {:.0} s ·", s.kind, s.cost_s))
                && app.status.contains(&format!(
                    "mbs{}",
                    s.from_state.config.as_ref().expect("config").mbs
                )),
            "{}",
            app.status
        );
        assert_eq!(
            plan.schedule.get(1).map(|r| r.from_step),
            Some(s.plan_steps),
            "the trainer step is the emitted schedule's"
        );
        // Both steps and their tokens fit an 80-column status line (the tokens, the one
        // thing that explains the two step counts, were cut off there), for every switch
        // (the second's six-digit steps were cut).
        let mut walk = app.clone();
        for _ in 0..walk.switch_points.len() {
            let both = walk.status.find(" · ").expect("a separator");
            assert!(
                walk.status[..both].chars().count() <= 78,
                "{}",
                &walk.status[..both]
            );
            update(&mut walk, Msg::JumpSwitch(1));
        }
        // Revealing a lesson's answer ("the status line names the switch") keeps it there.
        let said = app.status.clone();
        update(&mut app, Msg::Reveal);
        update(&mut app, Msg::TourScroll(1));
        assert_eq!(app.status, said);
        update(&mut app, Msg::JumpSwitch(-1));
        assert!(app.cursor < first || app.status == "no earlier switch point");
        update(&mut app, Msg::Home);
        update(&mut app, Msg::JumpSwitch(-1));
        assert_eq!(app.status, "no earlier switch point");
        update(&mut app, Msg::End);
        update(&mut app, Msg::JumpSwitch(1));
        if app.switch_points.last() < Some(&app.cursor) {
            assert_eq!(app.status, "no later switch point");
        }
    } else {
        update(&mut app, Msg::JumpSwitch(1));
        assert!(app.status.contains("no planned switch"));
    }
    // A B_crit-scale what-if re-plans without recomputing the table.
    update(&mut app, Msg::ShowSide(Panel::WhatIf));
    update(&mut app, Msg::WhatIfRow(6));
    let effects = update(&mut app, Msg::WhatIfChange(1));
    assert!(
        matches!(effects.as_slice(), [Effect::ComputePlan { .. }]),
        "{effects:?}"
    );
}

#[test]
fn efficiency_and_switch_cost_what_ifs() {
    use copus::app::whatif::{FIELDS, Field};
    let mut app = demo_with_table();
    let row = |f: Field| FIELDS.iter().position(|x| *x == f).expect("field listed") as i64;
    update(&mut app, Msg::ShowSide(Panel::WhatIf));
    let plateau = app.resolved.efficiency().max_eff;
    update(&mut app, Msg::WhatIfRow(row(Field::GemmPlateau)));
    let effects = update(&mut app, Msg::WhatIfChange(-1));
    assert!(app.resolved.efficiency().max_eff < plateau);
    assert!(
        matches!(effects.as_slice(), [Effect::ComputeTable { .. }]),
        "the efficiency model changes throughput: {effects:?}"
    );
    let restart = app.resolved.session.costs.restart_s;
    update(
        &mut app,
        Msg::WhatIfRow(row(Field::RestartCost) - row(Field::GemmPlateau)),
    );
    let effects = update(&mut app, Msg::WhatIfChange(1));
    assert!(app.resolved.session.costs.restart_s > restart);
    assert!(
        effects
            .iter()
            .all(|e| !matches!(e, Effect::ComputeTable { .. })),
        "switch costs only re-plan: {effects:?}"
    );
}

/// A message as its debug text (messages are not comparable).
fn dbg_msg(m: Option<Msg>) -> String {
    format!("{m:?}")
}

/// A crossterm key press for a chord of the key table.
fn press(c: Chord) -> KeyEvent {
    let code = match c.key {
        Key::Char(ch) => KeyCode::Char(ch),
        Key::Left => KeyCode::Left,
        Key::Right => KeyCode::Right,
        Key::Up => KeyCode::Up,
        Key::Down => KeyCode::Down,
        Key::Home => KeyCode::Home,
        Key::End => KeyCode::End,
        Key::PageUp => KeyCode::PageUp,
        Key::PageDown => KeyCode::PageDown,
        Key::Tab => KeyCode::Tab,
        Key::Enter => KeyCode::Enter,
        Key::Esc => KeyCode::Esc,
        Key::Backspace => KeyCode::Backspace,
        Key::F(n) => KeyCode::F(n),
    };
    let mut mods = KeyModifiers::NONE;
    if c.ctrl {
        mods |= KeyModifiers::CONTROL;
    }
    if c.alt {
        mods |= KeyModifiers::ALT;
    }
    if c.shift {
        mods |= KeyModifiers::SHIFT;
    }
    key(code, mods)
}

/// `app` with what makes `scope`'s keys apply.
fn in_scope(app: &App, scope: Scope) -> App {
    let mut a = app.clone();
    match scope {
        Scope::Global | Scope::Timeline | Scope::Mouse => a.focus = Panel::Timeline,
        Scope::Heatmap => a.focus = Panel::Heatmap,
        Scope::WhatIf => a.focus = Panel::WhatIf,
        Scope::Side => a.focus = Panel::Estimators,
        Scope::Tour => a.tour_step = Some(0),
        Scope::Popup => a.open(copus::app::Overlay::Confirm(copus::app::Confirm::Quit)),
    }
    a
}

#[test]
fn the_key_map_drives_help_and_hints_and_every_listed_key_works() {
    let mut app = demo_with_table();
    for b in &app.keymap.bindings {
        for c in b.chords() {
            let a = in_scope(&app, b.scope);
            assert!(
                keys::key_to_msg(&a, press(c)).is_some(),
                "{} ({c}) does nothing in {:?}",
                b.label,
                b.scope
            );
        }
    }
    update(&mut app, Msg::ToggleHelp);
    let screen = render(&app, 200, 60, ColorMode::Indexed);
    for b in &app.keymap.bindings {
        assert!(
            screen.contains(&b.label),
            "help lacks {}:\n{screen}",
            b.label
        );
    }
    // The hint line shows once a key replaces a stale status.
    update(&mut app, Msg::ToggleHelp);
    app.status = "saved somewhere".into();
    update(&mut app, Msg::Scrub(1));
    let screen = render(&app, 200, 60, ColorMode::Indexed);
    assert!(
        screen.contains(&copus::ui::keymap::hints(&app.keymap)),
        "{screen}"
    );
}

#[test]
fn every_action_dispatches_what_the_built_in_keys_did() {
    // The table's dispatch against the messages the keys meant before the table carried them.
    let app = demo_with_table();
    let timeline = in_scope(&app, Scope::Timeline);
    let heat = in_scope(&app, Scope::Heatmap);
    let whatif = in_scope(&app, Scope::WhatIf);
    let side = in_scope(&app, Scope::Side);
    let tour = in_scope(&heat, Scope::Tour);
    let cases: Vec<(&App, KeyEvent, Option<Msg>)> = vec![
        (
            &timeline,
            key(KeyCode::Left, KeyModifiers::NONE),
            Some(Msg::Scrub(-1)),
        ),
        (
            &timeline,
            key(KeyCode::Right, KeyModifiers::SHIFT),
            Some(Msg::Scrub(10)),
        ),
        (
            &heat,
            key(KeyCode::Left, KeyModifiers::SHIFT),
            Some(Msg::MoveSelection(0, -1)),
        ),
        (
            &heat,
            key(KeyCode::Enter, KeyModifiers::NONE),
            Some(Msg::DrillIn),
        ),
        (
            &whatif,
            key(KeyCode::Char('-'), KeyModifiers::NONE),
            Some(Msg::WhatIfChange(-1)),
        ),
        (
            &whatif,
            key(KeyCode::Up, KeyModifiers::SHIFT),
            Some(Msg::WhatIfRow(-1)),
        ),
        (
            &side,
            key(KeyCode::Down, KeyModifiers::NONE),
            Some(Msg::ScrollSide(1)),
        ),
        (
            &side,
            key(KeyCode::Left, KeyModifiers::NONE),
            Some(Msg::Scrub(-1)),
        ),
        (
            &tour,
            key(KeyCode::Down, KeyModifiers::SHIFT),
            Some(Msg::TourScroll(1)),
        ),
        (
            &tour,
            key(KeyCode::Down, KeyModifiers::NONE),
            Some(Msg::MoveSelection(1, 0)),
        ),
        (
            &tour,
            key(KeyCode::Char('r'), KeyModifiers::NONE),
            Some(Msg::Reveal),
        ),
        (&timeline, key(KeyCode::Char('r'), KeyModifiers::NONE), None),
        (
            &timeline,
            key(KeyCode::Char('S'), KeyModifiers::SHIFT),
            Some(Msg::SaveAs),
        ),
        (
            &timeline,
            key(KeyCode::Char('3'), KeyModifiers::NONE),
            Some(Msg::ShowSide(Panel::SIDE[2])),
        ),
        (
            &timeline,
            key(KeyCode::Char('c'), KeyModifiers::CONTROL),
            Some(Msg::Quit),
        ),
        (&timeline, key(KeyCode::Up, KeyModifiers::NONE), None),
    ];
    for (i, (a, k, want)) in cases.into_iter().enumerate() {
        assert_eq!(
            dbg_msg(keys::key_to_msg(a, k)),
            dbg_msg(want),
            "case {i}: {k:?}"
        );
    }
}

#[test]
fn quit_rebound_from_a_configuration_file_quits_and_the_help_and_footer_say_so() {
    let config = copus::config::parse("(keys: { quit: [\"Q\"], help: [\"f1\"] })").expect("config");
    let mut app = demo_with_table();
    app.keymap = config.keymap;
    let timeline = in_scope(&app, Scope::Timeline);
    let q = key(KeyCode::Char('q'), KeyModifiers::NONE);
    let big_q = key(KeyCode::Char('Q'), KeyModifiers::SHIFT);
    assert_eq!(
        dbg_msg(keys::key_to_msg(&timeline, q)),
        "None",
        "q no longer quits"
    );
    assert_eq!(dbg_msg(keys::key_to_msg(&timeline, big_q)), "Some(Quit)");
    let f1 = key(KeyCode::F(1), KeyModifiers::NONE);
    assert_eq!(dbg_msg(keys::key_to_msg(&timeline, f1)), "Some(ToggleHelp)");
    let mut help = timeline.clone();
    update(&mut help, Msg::ToggleHelp);
    assert_eq!(
        dbg_msg(keys::key_to_msg(&help, big_q)),
        "Some(Quit)",
        "also from the help page"
    );
    let screen = render(&help, 200, 60, ColorMode::Indexed);
    assert!(screen.contains("Q               quit"), "{screen}");
    let footer = render(&timeline, 80, 24, ColorMode::Indexed);
    let last = footer
        .lines()
        .last()
        .unwrap_or_default()
        .trim_end()
        .to_string();
    assert!(last.ends_with("F1 help · Q quit"), "{last:?}");
}

#[test]
fn selection_starts_on_the_best_cell_and_star_jumps_back() {
    let mut app = demo_with_table();
    let best = app.grid.as_ref().and_then(|g| g.best).expect("a best cell");
    assert_eq!(app.selected, best, "not an infeasible corner");
    update(&mut app, Msg::Select(0, 0));
    update(&mut app, Msg::End);
    assert_eq!(app.selected, (0, 0), "the user's choice stays");
    let msg = keys::key_to_msg(&app, key(KeyCode::Char('*'), KeyModifiers::NONE)).expect("bound");
    update(&mut app, msg);
    assert_eq!(Some(app.selected), app.grid.as_ref().and_then(|g| g.best));
}

#[test]
fn mouse_drag_scrubs_and_the_wheel_moves() {
    use copus::ui::geometry::areas;
    use ratatui::crossterm::event::{MouseButton, MouseEvent, MouseEventKind};
    use ratatui::layout::Rect;
    let mut app = demo_with_table();
    let a = areas(Rect::new(0, 0, 120, 40));
    let ev = |kind, x, y| MouseEvent {
        kind,
        column: x,
        row: y,
        modifiers: KeyModifiers::NONE,
    };
    let mid = a.timeline.x + a.timeline.width / 2;
    let msg = keys::mouse_to_msg(
        &app,
        &a,
        ev(
            MouseEventKind::Drag(MouseButton::Left),
            mid,
            a.timeline.y + 3,
        ),
    )
    .expect("a drag on the timeline scrubs");
    update(&mut app, msg);
    let n = app.trajectory.points.len();
    assert!(
        app.cursor > n / 4 && app.cursor < 3 * n / 4,
        "{}",
        app.cursor
    );
    let before = app.cursor;
    let msg = keys::mouse_to_msg(
        &app,
        &a,
        ev(MouseEventKind::ScrollDown, mid, a.timeline.y + 3),
    )
    .expect("wheel");
    update(&mut app, msg);
    assert_eq!(app.cursor, before + 1);
    let row = app.selected.0;
    let msg = keys::mouse_to_msg(
        &app,
        &a,
        ev(
            MouseEventKind::ScrollDown,
            a.heatmap.x + 20,
            a.heatmap.y + 5,
        ),
    )
    .expect("wheel over the heatmap");
    update(&mut app, msg);
    assert_eq!(app.selected.0, row + 1);
}

#[test]
fn a_tiny_terminal_says_so_and_focus_shows_without_colour() {
    let app = demo_with_table();
    let screen = render(&app, 40, 10, ColorMode::Monochrome);
    assert!(screen.contains("terminal too small"), "{screen}");
    let screen = render(&app, 80, 24, ColorMode::Monochrome);
    assert!(
        screen.contains('┏'),
        "the focused panel has a thick border:\n{screen}"
    );
}

#[test]
fn the_live_connection_stays_in_the_title() {
    let mut app = demo_with_table();
    update(
        &mut app,
        Msg::LiveStatus(LinkStatus::new(
            LinkState::Waiting,
            "reconnecting to tcp://x:1 in 2 s",
        )),
    );
    update(
        &mut app,
        Msg::Live {
            update: Box::new(Err(
                copus::source::live::aggregate::NoLiveEstimate::NoUsableStep,
            )),
            steps: 3,
            malformed: 0,
            non_finite: 0,
            dropped: 0,
        },
    );
    assert!(app.status.starts_with("live: 3 steps"), "{}", app.status);
    let screen = render(&app, 200, 60, ColorMode::Monochrome);
    let title = screen.lines().next().expect("title");
    assert!(title.contains("◌ reconnecting to tcp://x:1"), "{title}");
}

#[test]
fn models_step_by_size_and_a_cluster_where_nothing_runs_says_what_to_try() {
    use copus::app::whatif::{FIELDS, Field, models_by_size};
    let sizes: Vec<f64> = models_by_size(std::path::Path::new("."))
        .iter()
        .map(|(n, _)| {
            let m = copus::profiles::model(n, std::path::Path::new(".")).expect("built-in");
            copus::perf::parameter_count(&m)
        })
        .collect();
    assert!(sizes.windows(2).all(|w| w[0] <= w[1]), "{sizes:?}");
    // The largest model on one GPU: nothing fits, and the panel says why and what to try.
    let mut app = demo_with_table();
    app.resolved.session.cluster.nodes = 1;
    app.resolved.session.cluster.gpus_per_node = 1;
    let row = FIELDS
        .iter()
        .position(|f| *f == Field::Model)
        .expect("model row");
    update(&mut app, Msg::ShowSide(Panel::WhatIf));
    update(&mut app, Msg::WhatIfRow(row as i64));
    let effects = update(&mut app, Msg::WhatIfChange(-1));
    let size = |m: &copus::perf::ModelProfile| copus::perf::parameter_count(m);
    let demo_model = copus::profiles::model("llama-7b", std::path::Path::new(".")).expect("7b");
    assert!(
        size(&app.resolved.model) < size(&demo_model),
        "← steps to a smaller model, got {}",
        app.resolved.model.name
    );
    assert!(matches!(effects.as_slice(), [Effect::ComputeTable { .. }]));
    let largest = models_by_size(std::path::Path::new("."))
        .last()
        .expect("models")
        .0;
    let mut generation = 0;
    for _ in 0..sizes.len() {
        if app.resolved.model.name == largest {
            break;
        }
        if let [Effect::ComputeTable { generation: g }] =
            update(&mut app, Msg::WhatIfChange(1)).as_slice()
        {
            generation = *g;
        }
    }
    assert_eq!(app.resolved.model.name, largest);
    let table = Arc::new(table_job(&app).compute());
    let why = copus::app::recommend::nothing_runs(&table, 1).expect("nothing runs");
    assert!(why.contains("Try "), "{why}");
    update(&mut app, Msg::TableReady { generation, table });
    update(&mut app, Msg::ShowSide(Panel::Recommendation));
    let screen = render(&app, 200, 60, ColorMode::Indexed);
    assert!(screen.contains("no configuration runs"), "{screen}");
    assert!(screen.contains("Try "), "{screen}");
}

#[test]
fn a_long_side_panel_scrolls_at_80x24() {
    let mut app = demo_with_table();
    update(&mut app, Msg::ShowSide(Panel::Estimators));
    let top = render(&app, 80, 24, ColorMode::Indexed);
    assert!(top.contains("↓ more"), "{top}");
    for _ in 0..3 {
        let msg = keys::key_to_msg(&app, key(KeyCode::Down, KeyModifiers::NONE)).expect("bound");
        update(&mut app, msg);
    }
    assert_eq!(app.side_scroll, 3);
    assert_ne!(
        render(&app, 80, 24, ColorMode::Indexed),
        top,
        "the text moved"
    );
    update(&mut app, Msg::ShowSide(Panel::Recommendation));
    assert_eq!(app.side_scroll, 0, "a new panel starts at its top");
}

#[test]
fn the_help_page_fits_or_scrolls_at_80x24() {
    let mut app = demo_with_table();
    update(&mut app, Msg::ToggleHelp);
    let screen = render(&app, 80, 24, ColorMode::Monochrome);
    let last = app.keymap.bindings.last().expect("bindings").label.clone();
    if !screen.contains(&last) {
        assert!(screen.contains("↓ more"), "{screen}");
        for _ in 0..30 {
            let msg = keys::key_to_msg(&app, key(KeyCode::Down, KeyModifiers::NONE)).expect("↓");
            update(&mut app, msg);
        }
        let screen = render(&app, 80, 24, ColorMode::Monochrome);
        assert!(screen.contains(&last), "scrolled to the end:\n{screen}");
    }
}

#[test]
fn planner_what_ifs_replan_without_a_new_table() {
    use copus::app::whatif::{FIELDS, Field, value};
    use copus::plan::{Objective, ReshardMode};
    let mut app = demo_with_table();
    let row = |f: Field| FIELDS.iter().position(|x| *x == f).expect("field listed") as i64;
    update(&mut app, Msg::ShowSide(Panel::WhatIf));
    update(&mut app, Msg::WhatIfRow(row(Field::Objective)));
    let before = app.resolved.session.planner.objective;
    let effects = update(&mut app, Msg::WhatIfChange(1));
    assert_ne!(app.resolved.session.planner.objective, before);
    assert!(
        matches!(effects.as_slice(), [Effect::ComputePlan { .. }]),
        "{effects:?}"
    );
    assert_eq!(
        value(&app.resolved, Field::Objective),
        if before == Objective::McCandlish {
            "lr-sqrt"
        } else {
            "mccandlish"
        }
    );
    // The heatmap weights by the objective's efficiency, as the plan does.
    let grid = app.grid.as_ref().expect("grid");
    let table = app.table.as_ref().expect("table");
    let eff = copus::pipeline::heatmap_efficiency(&app.resolved);
    let mccandlish = |b: f64| grid.b_crit / (b + grid.b_crit);
    for (i, &b) in table.batches.iter().enumerate() {
        let want = match eff {
            Some(e) => e.stat_eff(b as f64, grid.b_crit),
            None => mccandlish(b as f64),
        };
        assert!((grid.stat_eff[i] - want).abs() < 1e-12, "batch {b}");
    }
    if app.resolved.session.planner.objective == Objective::LrSqrt {
        assert!(
            eff.is_some(),
            "the demo has a current batch to tune the rate at"
        );
        let b = table.batches[0] as f64;
        assert!(
            grid.stat_eff[0] < mccandlish(b),
            "off the reference batch lr-sqrt loses"
        );
    }
    let mut term = Terminal::new(TestBackend::new(200, 60)).expect("terminal");
    term.draw(|f| copus::ui::view::draw(f, &app, ColorMode::Indexed))
        .expect("draws");
    let screen: String = term
        .backend()
        .buffer()
        .content()
        .iter()
        .map(|c| c.symbol())
        .collect();
    assert!(
        screen.contains(&format!(
            "objective {}",
            app.resolved.session.planner.objective.name()
        )),
        "heatmap title names the objective"
    );
    // Row moves are relative to the selected row.
    update(
        &mut app,
        Msg::WhatIfRow(row(Field::Reshard) - row(Field::Objective)),
    );
    let was_in_place = matches!(
        app.resolved.session.costs.reshard,
        ReshardMode::InPlace { .. }
    );
    update(&mut app, Msg::WhatIfChange(1));
    assert_ne!(
        matches!(
            app.resolved.session.costs.reshard,
            ReshardMode::InPlace { .. }
        ),
        was_in_place
    );
    update(
        &mut app,
        Msg::WhatIfRow(row(Field::SwitchThreshold) - row(Field::Reshard)),
    );
    let t = app.resolved.session.costs.switch_threshold;
    update(&mut app, Msg::WhatIfChange(1));
    assert!(app.resolved.session.costs.switch_threshold > t);
}

#[test]
fn the_footer_keeps_help_and_quit_whole_at_any_width() {
    let app = demo_with_table();
    for (w, h) in [(80u16, 24u16), (100, 30), (200, 60)] {
        let screen = render(&app, w, h, ColorMode::Indexed);
        let footer = screen.lines().last().unwrap_or_default().trim_end();
        assert!(
            footer.ends_with("? help · q quit"),
            "{w}×{h}: footer cut or missing help/quit: {footer:?}"
        );
        // Only whole hints: every part is one of the key map's hints.
        let all = copus::ui::keymap::hints(&app.keymap);
        for part in footer.trim().split(" · ") {
            assert!(all.contains(part), "{w}×{h}: {part:?} is not a whole hint");
        }
    }
    // Wide enough for all of them: nothing is left out.
    let screen = render(&app, 200, 60, ColorMode::Indexed);
    assert!(
        screen.contains(&copus::ui::keymap::hints(&app.keymap)),
        "{screen}"
    );
}

#[test]
fn the_live_link_glyph_tells_connected_reconnecting_and_ended_apart() {
    let mut app = demo_with_table();
    let cases = [
        ("connected to tcp://127.0.0.1:5000", LinkState::Flowing, "◉"),
        (
            "connection to tcp://127.0.0.1:5000 lost (reset); reconnecting",
            LinkState::Waiting,
            "◌",
        ),
        (
            "no new records for 30 s: the run ended or is paused",
            LinkState::Quiet,
            "○",
        ),
    ];
    for (status, state, glyph) in cases {
        app.live_link = Some(LinkStatus::new(state, status));
        let screen = render(&app, 200, 60, ColorMode::Monochrome);
        let title = screen.lines().next().unwrap_or_default();
        assert!(
            title.contains(&format!("{glyph} {}", &status[..20])),
            "{status}: {title}"
        );
    }
}

/// An advice loop writing to `out`: 5 % threshold, no dwell, no minimum of steps.
fn advice_loop(out: std::path::PathBuf) -> copus::app::advice::AdviceLoop {
    use copus::plan::advice::{AdviceSettings, Advisor};
    copus::app::advice::AdviceLoop::new(
        Advisor::new(AdviceSettings {
            threshold: 0.05,
            min_dwell_steps: 0,
            min_steps: 0,
            b_crit_scale: 1.0,
            form: copus::goodput::StatEffForm::McCandlish,
            dry_run: false,
            seq_len: 1,
        }),
        out,
    )
}

/// The trajectory's last two points as a live run at batch 32 (its tokens grow by 32
/// sequences a step) at steps `first` and `first + 1`, with `b_crit`.
fn live_tail(app: &mut App, first: u64, b_crit: f64) {
    let seq = f64::from(app.trajectory.seq_len);
    let n = app.trajectory.points.len();
    let trajectory = Arc::make_mut(&mut app.trajectory);
    for (k, p) in trajectory.points[n - 2..].iter_mut().enumerate() {
        p.step = first + k as u64;
        p.tokens = (first + k as u64) as f64 * 32.0 * seq;
        p.b_crit = b_crit;
    }
}

/// The advice pending in `app`'s loop.
fn pending_of(app: &App) -> Option<copus::plan::advice::Advice> {
    app.advice.as_ref().and_then(|a| a.pending.clone())
}

#[test]
fn live_advice_waits_for_approval_and_a_appends_it_to_the_advice_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("advice.ndjson");
    std::fs::write(&out, "").expect("create");
    let mut app = demo_with_table();
    app.advice = Some(advice_loop(out.clone()));
    // Nothing pending: A says so and writes nothing.
    let effects = update(&mut app, Msg::ApproveAdvice);
    assert!(
        effects.is_empty() && app.status.contains("no advice pending"),
        "{}",
        app.status
    );
    // A live run at batch 32 (its tokens grow by 32 sequences a step) with B_crit 5000.
    live_tail(&mut app, 1000, 5000.0);
    copus::app::advice::observe(&mut app);
    let pending = pending_of(&app).expect("pending advice");
    assert!(pending.batch > 32, "{pending:?}");
    let note = copus::app::advice::pending_note(&app).expect("note");
    assert!(note.starts_with("A approves: "), "{note}");
    // The key A names the switch it would write (advice can change several times a second in
    // a live run: one press wrote whichever was pending at that instant); the second writes it.
    let msg = copus::runtime::keys::key_to_msg(&app, key(KeyCode::Char('A'), KeyModifiers::SHIFT));
    assert!(matches!(msg, Some(Msg::ApproveAdvice)), "{msg:?}");
    let effects = update(&mut app, Msg::ApproveAdvice);
    assert!(effects.is_empty(), "{effects:?}");
    assert!(
        app.status
            .starts_with(&format!("A again writes: batch {} on", pending.batch))
            && app.status.ends_with(&format!("→ {}", out.display())),
        "{}",
        app.status
    );
    let effects = update(&mut app, Msg::ApproveAdvice);
    let [Effect::AppendLine { path, line }] = effects.as_slice() else {
        panic!("{effects:?}");
    };
    assert_eq!(path, &out);
    let answer = copus::runtime::worker::append(path.clone(), line);
    assert!(
        matches!(answer, Msg::Appended { result: Ok(()), .. }),
        "{answer:?}"
    );
    let written: serde_json::Value =
        serde_json::from_str(std::fs::read_to_string(&out).expect("read").trim()).expect("JSON");
    assert_eq!(written["advice"]["batch"].as_u64(), Some(pending.batch));
    assert!(app.advice.as_ref().expect("loop").pending.is_none());
    // The same advice is not offered again, and what was written stays said (it was on the
    // status line for one frame, until the next live update replaced it).
    copus::app::advice::observe(&mut app);
    assert!(app.advice.as_ref().expect("loop").pending.is_none());
    let note = copus::app::advice::pending_note(&app).expect("approval note");
    assert!(
        note.starts_with(&format!("approved: batch {} on", pending.batch)),
        "{note}"
    );
}

/// The first `A` names a switch; if the pending advice is another switch by the second `A`,
/// nothing is written and the new switch is named instead (a live run's advice flipped
/// between batch 64 and 128 within seconds, and `A` wrote the one the user had not read).
#[test]
fn a_second_a_writes_only_the_switch_the_first_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("advice.ndjson");
    let mut app = demo_with_table();
    app.advice = Some(advice_loop(out));
    live_tail(&mut app, 1000, 5000.0);
    copus::app::advice::observe(&mut app);
    let first = pending_of(&app).expect("pending advice");
    assert!(update(&mut app, Msg::ApproveAdvice).is_empty());
    // The advice moves on to another switch before the second press.
    let lp = app.advice.as_mut().expect("loop");
    let mut other = first.clone();
    other.batch = first.batch * 2;
    lp.pending = Some(other.clone());
    let effects = update(&mut app, Msg::ApproveAdvice);
    assert!(effects.is_empty(), "wrote a switch not named: {effects:?}");
    assert!(
        app.status
            .starts_with(&format!("A again writes: batch {} on", other.batch)),
        "{}",
        app.status
    );
    // Named now: the next press writes it.
    let effects = update(&mut app, Msg::ApproveAdvice);
    let [Effect::AppendLine { line, .. }] = effects.as_slice() else {
        panic!("{effects:?}");
    };
    let written: serde_json::Value = serde_json::from_str(line).expect("JSON");
    assert_eq!(written["advice"]["batch"].as_u64(), Some(other.batch));
}

/// Pending advice is what the run should do now: judged again at every estimate from the last
/// approved advice, withdrawn when the estimate no longer supports it (advice from step 208
/// stayed pending at step 1499 beside a recommendation of another batch, and `A` wrote it
/// with its old gain), and said so on the status line.
#[test]
fn pending_advice_follows_the_estimate_and_is_withdrawn_when_it_no_longer_holds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut app = demo_with_table();
    app.advice = Some(advice_loop(dir.path().join("advice.ndjson")));
    // A run at batch 32 whose B_crit was 5000 for 30 steps, then 20 (the last 10 steps), after
    // the demo's own points.
    let seq = f64::from(app.trajectory.seq_len);
    let n = app.trajectory.points.len();
    let trajectory = Arc::make_mut(&mut app.trajectory);
    let base = trajectory.points[n - 41].step + 1;
    let tokens = trajectory.points[n - 41].tokens;
    for (k, p) in trajectory.points[n - 40..].iter_mut().enumerate() {
        p.step = base + k as u64;
        p.tokens = tokens + (k + 1) as f64 * 32.0 * seq;
        p.b_crit = if k < 30 { 5000.0 } else { 20.0 };
    }
    copus::app::advice::observe(&mut app);
    let lp = app.advice.as_ref().expect("loop");
    assert_eq!(lp.pending, None, "stale advice kept: {:?}", lp.pending);
    assert_eq!(lp.observed_step, Some(base + 39));
    let note = copus::app::advice::pending_note(&app).expect("a note");
    assert!(
        note.starts_with(&format!("advice withdrawn at step {}", base + 30))
            && note.contains("no switch is worth 5 % now (it was batch"),
        "{note}"
    );
    // B_crit back up: advice again, judged at the latest step, with the gain of now.
    let trajectory = Arc::make_mut(&mut app.trajectory);
    let last = *trajectory.points.last().expect("points");
    let mut next = last;
    next.step = last.step + 1;
    next.tokens = last.tokens + 32.0 * seq;
    next.b_crit = 5000.0;
    trajectory.points.push(next);
    copus::app::advice::observe(&mut app);
    let pending = app
        .advice
        .as_ref()
        .and_then(|a| a.pending.clone())
        .expect("advice again");
    assert_eq!(pending.at_step, base + 41, "{pending:?}");
    assert!(pending.batch > 32, "{pending:?}");
    let note = copus::app::advice::pending_note(&app).expect("note");
    assert!(
        // The step it applies at, as the file's `at_step` (it gave the step before).
        note.starts_with("A approves: ")
            && note.contains(&format!(") for step {}", pending.at_step))
            && (note.contains("apply: batch)") || note.contains("apply: restart)")),
        "{note}"
    );
    // Observed again with nothing new: nothing changes.
    copus::app::advice::observe(&mut app);
    assert_eq!(
        app.advice.as_ref().and_then(|a| a.pending.clone()),
        Some(pending)
    );
}

/// Pending advice has hysteresis: an estimate under which the same switch predicts less than
/// the threshold but more than half of it keeps the advice pending, with the gain of now and
/// a note that it is under the threshold; under half it is withdrawn (at the threshold the
/// advice came and went twice in a live run).
#[test]
fn pending_advice_is_withdrawn_only_under_half_the_threshold() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut app = demo_with_table();
    app.advice = Some(advice_loop(dir.path().join("advice.ndjson")));
    let seq = f64::from(app.trajectory.seq_len);
    let n = app.trajectory.points.len();
    let trajectory = Arc::make_mut(&mut app.trajectory);
    // The last two points after the demo's own (steps in order), B_crit 5000, batch 32.
    let (base, tokens) = (
        trajectory.points[n - 3].step + 1,
        trajectory.points[n - 3].tokens,
    );
    for (k, p) in trajectory.points[n - 2..].iter_mut().enumerate() {
        p.step = base + k as u64;
        p.tokens = tokens + (k + 1) as f64 * 32.0 * seq;
        p.b_crit = 5000.0;
    }
    copus::app::advice::observe(&mut app);
    let first = app
        .advice
        .as_ref()
        .and_then(|a| a.pending.clone())
        .expect("pending advice");
    let gain = first.expected_gain;
    assert!(gain > 0.05, "{first:?}");
    // The next estimate, the same B_crit, judged with a threshold a fifth above that gain: the
    // switch predicts 83 % of the threshold, over half of it: kept, with a note.
    let push_point = |app: &mut App| {
        let trajectory = Arc::make_mut(&mut app.trajectory);
        let last = *trajectory.points.last().expect("points");
        let mut next = last;
        next.step = last.step + 1;
        next.tokens = last.tokens + 32.0 * seq;
        trajectory.points.push(next);
        next.step
    };
    let set_threshold = |app: &mut App, t: f64| {
        let lp = app.advice.as_mut().expect("loop");
        lp.advisor = lp.advisor.with_threshold(t);
    };
    set_threshold(&mut app, gain * 1.2);
    let step = push_point(&mut app);
    copus::app::advice::observe(&mut app);
    let lp = app.advice.as_ref().expect("loop");
    let kept = lp.pending.clone().expect("kept over half the threshold");
    assert_eq!(
        (kept.batch, kept.layout, kept.at_step),
        (first.batch, first.layout, step + 1),
        "{kept:?}"
    );
    assert!((kept.expected_gain - gain).abs() < 1e-9, "{kept:?}");
    // Its advisor keeps the approved advisor's threshold, not the lower one it was judged by.
    let approved_threshold = lp.advisor.threshold();
    assert_eq!(
        lp.pending_advisor.as_ref().map(|a| a.threshold()),
        Some(approved_threshold)
    );
    let note = copus::app::advice::pending_note(&app).expect("note");
    assert!(
        note.contains("under the") && note.contains("threshold now; withdrawn under"),
        "{note}"
    );
    // A threshold over twice the gain: under half of it, withdrawn.
    set_threshold(&mut app, gain * 2.5);
    let step = push_point(&mut app);
    copus::app::advice::observe(&mut app);
    let lp = app.advice.as_ref().expect("loop");
    assert_eq!(lp.pending, None, "{:?}", lp.pending);
    assert!(lp.pending_advisor.is_none());
    let note = copus::app::advice::pending_note(&app).expect("note");
    assert!(
        note.starts_with(&format!("advice withdrawn at step {step}")),
        "{note}"
    );
}

fn type_text(app: &mut App, text: &str) {
    for c in text.chars() {
        let msg = keys::key_to_msg(app, key(KeyCode::Char(c), KeyModifiers::NONE)).expect("typed");
        update(app, msg);
    }
}

/// `/tp<=2 pp=1`: the heatmap shows only those layouts (its rows on screen are exactly the
/// matching layouts), the selection and ★ stay on them, and an empty filter shows all again.
#[test]
fn the_layout_filter_hides_rows_and_the_best_follows_it() {
    let mut app = demo_with_table();
    let all = app.table.as_ref().unwrap().layouts.clone();
    let msg = keys::key_to_msg(&app, key(KeyCode::Char('/'), KeyModifiers::NONE)).expect("/");
    update(&mut app, msg);
    type_text(&mut app, "tp<=2 pp=1");
    update(&mut app, Msg::Prompt(copus::app::PromptEdit::Submit));
    let want: Vec<String> = all
        .iter()
        .filter(|l| l.tp <= 2 && l.pp == 1)
        .map(|l| l.label())
        .collect();
    assert!(!want.is_empty() && want.len() < all.len());
    assert!(
        app.status
            .contains(&format!("{} of {}", want.len(), all.len())),
        "{}",
        app.status
    );
    let screen = render(&app, 200, 60, ColorMode::Monochrome);
    for l in &all {
        let shown = screen
            .lines()
            .any(|line| line.contains(&format!("│{} ", l.label())));
        assert_eq!(shown, want.contains(&l.label()), "{}:\n{screen}", l.label());
    }
    assert!(screen.contains("filter tp<=2 pp=1"), "{screen}");
    // ★ is the best of the shown cells, and * selects it.
    let (r, c) = app.best_visible().expect("a shown cell runs");
    let grid = app.grid.as_ref().unwrap();
    let nb = app.table.as_ref().unwrap().batches.len();
    let best = grid.goodput[r * nb + c].unwrap();
    for &row in &app.visible_rows() {
        for col in 0..nb {
            assert!(grid.goodput[row * nb + col].unwrap_or(0.0) <= best);
        }
    }
    update(&mut app, Msg::SelectBest);
    assert_eq!(app.selected, (r, c));
    // Moving down stays on shown rows.
    for _ in 0..5 {
        update(&mut app, Msg::MoveSelection(1, 0));
        assert!(app.visible_rows().contains(&app.selected.0));
    }
    // A bad filter keeps the old one and says why; an empty one shows all.
    update(&mut app, Msg::Filter);
    update(&mut app, Msg::Prompt(copus::app::PromptEdit::Backspace));
    type_text(&mut app, "x");
    update(&mut app, Msg::Prompt(copus::app::PromptEdit::Submit));
    assert!(app.status.starts_with("filter:"), "{}", app.status);
    assert_eq!(app.visible_rows().len(), want.len());
    update(&mut app, Msg::Filter);
    for _ in 0..40 {
        update(&mut app, Msg::Prompt(copus::app::PromptEdit::Backspace));
    }
    update(&mut app, Msg::Prompt(copus::app::PromptEdit::Submit));
    assert_eq!(app.visible_rows().len(), all.len());
    assert_eq!(app.best_visible(), app.grid.as_ref().unwrap().best);
}

/// `R`: the ranked list on screen gives, line by line, the layouts in goodput order with the
/// goodput, its share of the best and the throughput the grid holds for them.
#[test]
fn the_ranked_list_reads_the_grid_in_goodput_order() {
    let mut app = demo_with_table();
    update(&mut app, Msg::SelectBest);
    let msg = keys::key_to_msg(&app, key(KeyCode::Char('R'), KeyModifiers::NONE)).expect("R");
    update(&mut app, msg);
    assert!(app.is_open(OverlayKind::Ranked));
    let screen = render(&app, 200, 60, ColorMode::Monochrome);
    let table = app.table.clone().unwrap();
    let grid = app.grid.clone().unwrap();
    let col = app.selected.1;
    let ranked = copus::app::ranked::ranked_at(&table, &grid, col, None).expect("ranked");
    assert!(screen.contains(&format!("Layouts at batch {} ranked", table.batches[col])));
    let mut last = f64::INFINITY;
    let mut shown = 0;
    for row in &ranked.runs {
        assert!(row.goodput <= last);
        last = row.goodput;
        let r = table.layouts.iter().position(|l| *l == row.layout).unwrap();
        assert_eq!(
            Some(row.goodput),
            grid.goodput[r * table.batches.len() + col]
        );
        let line = screen
            .lines()
            .find(|l| l.contains(&format!(" {}  {} ", row.rank, row.layout.label())));
        if let Some(line) = line {
            shown += 1;
            let g = copus::ui::format::si(row.goodput);
            let share = format!("{:.1}%", 100.0 * row.goodput / ranked.runs[0].goodput);
            assert!(line.contains(&g) && line.contains(&share), "{line}");
        }
    }
    assert!(shown >= 10, "{screen}");
    assert_eq!(ranked.runs[0].layout, table.layouts[app.selected.0]);
    for refused in &ranked.cannot_run {
        assert!(screen.contains(&refused.reason), "{}", refused.reason);
    }
    // ←/→ move to another batch; Esc closes.
    update(&mut app, Msg::MoveSelection(0, 1));
    let screen = render(&app, 200, 60, ColorMode::Monochrome);
    assert!(screen.contains(&format!(
        "Layouts at batch {} ranked",
        table.batches[col + 1]
    )));
    update(&mut app, Msg::Escape);
    assert!(!app.is_open(OverlayKind::Ranked));
}

/// A live run whose samples are far from the model's (the built-in trainer's 1-token samples
/// on llama-7b): the heatmap and the recommendation say why no goodput is shown instead of
/// printing numbers at the wrong scale; a run on the right scale shows them again.
#[test]
fn a_live_run_on_the_wrong_scale_shows_no_goodput() {
    let mut app = demo_with_table();
    let loaded = demo_loaded;
    let live = |l| live_msg(l, 300);
    let w = "⚠ the run counts 1 token per sample, the model 4096: rerun with --seq-len 4096";
    update(&mut app, live(loaded(Some(w))));
    let screen = render(&app, 200, 60, ColorMode::Monochrome);
    assert_eq!(screen.matches("No goodput shown").count(), 2, "{screen}");
    assert!(screen.contains("--seq-len 4096"), "{screen}");
    assert!(
        !screen.contains('★') && !screen.contains("best: batch"),
        "{screen}"
    );
    update(&mut app, live(loaded(None)));
    let screen = render(&app, 200, 60, ColorMode::Monochrome);
    assert!(
        !screen.contains("No goodput shown") && screen.contains('★'),
        "{screen}"
    );
}

/// What a live update replaces is handed over to be freed off the drawing thread (the runtime
/// sends it to the worker), not freed inside `update`; at scale 1 the scaled trajectory is the
/// loaded one, shared, and the plan is given the same trajectory without a copy.
#[test]
fn a_live_update_retires_what_it_replaces_and_shares_the_trajectory() {
    let mut app = demo_with_table();
    drop(app.take_retired());
    assert_eq!(app.resolved.session.b_crit_scale, 1.0);
    let before = Arc::clone(&app.raw_trajectory);
    let loaded = copus::source::Loaded {
        trajectory: copus::trajectory::Trajectory::clone(&app.raw_trajectory),
        analysis: None,
        seed_ema: Vec::new(),
        note: None,
        calibration: None,
        warning: None,
    };
    update(&mut app, live_msg(loaded, 300));
    assert!(Arc::ptr_eq(&app.raw_trajectory, &app.trajectory));
    assert!(!Arc::ptr_eq(&app.raw_trajectory, &before));
    let retired = app.take_retired();
    assert!(!retired.is_empty(), "the replaced trajectory is retired");
    assert!(app.take_retired().is_empty());
    // The old trajectory (raw and scaled: one, shared) lives until the retired values are
    // dropped (on the worker).
    assert_eq!(Arc::strong_count(&before), 3);
    drop(retired);
    assert_eq!(Arc::strong_count(&before), 1);
    if app.resolved.model.seq_len == app.raw_trajectory.seq_len {
        assert!(Arc::ptr_eq(&app.planning_trajectory(), &app.raw_trajectory));
    }
    // Driven without the runtime, retired values stay bounded.
    for _ in 0..100 {
        app.rescale();
    }
    assert!(app.take_retired().len() <= 16);
}

/// A live update carrying `loaded` after `steps` clean records.
fn live_msg(loaded: copus::source::Loaded, steps: u64) -> Msg {
    Msg::Live {
        update: Box::new(Ok(loaded)),
        steps,
        malformed: 0,
        non_finite: 0,
        dropped: 0,
    }
}

#[test]
fn the_what_if_recompute_row_cycles_through_the_policies_of_the_stack() {
    use copus::perf::{Recompute, Stack, StackPreset};
    let cycle = |stack: Option<StackPreset>| -> Vec<Vec<Recompute>> {
        let mut app = demo_with_table();
        if let Some(p) = stack {
            app.resolved.session.stack = Some(Stack {
                preset: Some(p),
                ..Stack::default()
            });
        }
        update(&mut app, Msg::ShowSide(Panel::WhatIf));
        // Row 5 is recompute (nodes, GPUs a node, hardware, model, ZeRO, recompute).
        update(&mut app, Msg::WhatIfRow(5));
        (0..4)
            .map(|_| {
                update(&mut app, Msg::WhatIfChange(1));
                app.resolved.session.search.recompute.clone()
            })
            .collect()
    };
    use Recompute::{Full, None as Keep, Op, Selective};
    assert_eq!(
        cycle(None),
        vec![vec![Keep], vec![Selective], vec![Full], vec![Full]],
        "Megatron-Core: none, selective, full"
    );
    assert_eq!(
        cycle(Some(StackPreset::TorchtitanFsdp2)),
        vec![vec![Keep], vec![Op], vec![Full], vec![Full]],
        "torchtitan: none, op-level, full"
    );
}

#[test]
fn reopening_the_layout_filter_adds_what_is_typed_as_another_condition() {
    let mut app = demo_with_table();
    update(&mut app, Msg::Filter);
    type_text(&mut app, "tp=4");
    update(&mut app, Msg::Prompt(copus::app::PromptEdit::Submit));
    update(&mut app, Msg::Filter);
    type_text(&mut app, "pp=1");
    update(&mut app, Msg::Prompt(copus::app::PromptEdit::Submit));
    let f = app.layout_filter.as_ref().expect("a filter");
    assert_eq!(f.text, "tp=4 pp=1", "{}", app.status);
    let rows = app.visible_rows();
    let table = app.table.as_ref().expect("table");
    assert!(!rows.is_empty());
    assert!(
        rows.iter()
            .all(|&r| table.layouts[r].tp == 4 && table.layouts[r].pp == 1)
    );
}

#[test]
fn a_what_if_stack_of_another_framework_says_it_searches_that_frameworks_stages() {
    let mut app = demo_with_table();
    update(&mut app, Msg::ShowSide(Panel::WhatIf));
    let stack_row = copus::app::whatif::FIELDS
        .iter()
        .position(|f| *f == copus::app::whatif::Field::Stack)
        .expect("a stack row");
    update(&mut app, Msg::WhatIfRow(stack_row as i64));
    // megatron-core → nemo (the same framework's stages: nothing to say) → torchtitan-fsdp2.
    update(&mut app, Msg::WhatIfChange(1));
    assert!(!app.status.contains("searching"), "{}", app.status);
    update(&mut app, Msg::WhatIfChange(1));
    assert!(
        app.status.starts_with("stack = torchtitan-fsdp2")
            && app.status.contains("searching its own ZeRO [3]"),
        "{}",
        app.status
    );
    assert_eq!(app.resolved.session.search.zero, vec![3]);
}

#[test]
fn every_stack_setting_is_a_what_if_row_that_changes_the_stack_in_force() {
    // The what-if edited 5 of the 11 settings a stack has; each of the others came only from
    // the session or a flag of `open`.
    use copus::app::whatif::{FIELDS, Field, value};
    let settings = [
        Field::Precision,
        Field::Attention,
        Field::SequenceParallel,
        Field::GradReduce,
        Field::DpOverlap,
        Field::TpOverlap,
        Field::PpOverlap,
        Field::CrossEntropy,
        Field::Elementwise,
        Field::Sharding,
        Field::CpComm,
    ];
    let mut app = demo_with_table();
    update(&mut app, Msg::ShowSide(Panel::WhatIf));
    for field in settings {
        let row = FIELDS.iter().position(|f| *f == field).expect("a row");
        let delta = row as i64 - app.whatif_row as i64;
        update(&mut app, Msg::WhatIfRow(delta));
        assert_eq!(FIELDS[app.whatif_row], field);
        let (before, words_before) = (
            value(&app.resolved, field),
            app.resolved.stack().settings().words(),
        );
        // One step up, or down where the value is the last of its list.
        update(&mut app, Msg::WhatIfChange(1));
        if value(&app.resolved, field) == before {
            update(&mut app, Msg::WhatIfChange(-1));
        }
        let after = value(&app.resolved, field);
        assert_ne!(after, before, "{field:?}: {}", app.status);
        let words_after = app.resolved.stack().settings().words();
        let changed: Vec<_> = words_before
            .iter()
            .zip(&words_after)
            .filter(|(a, b)| a != b)
            .collect();
        assert_eq!(changed.len(), 1, "{field:?} changed {changed:?}");
        assert!(app.dirty(), "{field:?}: the session is modified");
    }
}

#[test]
fn context_parallel_rows_line_up_with_the_batch_columns() {
    // `DP32·CP2·TP1·PP1` is longer than the 13-column label field: its cells sat three to
    // four columns right of the batch headers.
    let mut app = app_for_session(&demo_path()).expect("demo loads");
    app.resolved.session.search.context_parallel = vec![1, 2];
    let app = render_support::with_table_and_plan(app);
    let screen = render(&app, 200, 60, ColorMode::Monochrome);
    let lines: Vec<Vec<char>> = screen.lines().map(|l| l.chars().collect()).collect();
    // The end column of the first token after the label field, in a line starting at `start`.
    let first_cell_end = |line: &[char], start: usize, label_len: usize| {
        let mut i = start + label_len;
        while line.get(i) == Some(&' ') {
            i += 1;
        }
        while line.get(i).is_some_and(|c| *c != ' ') {
            i += 1;
        }
        i
    };
    let find = |needle: &str| {
        let n: Vec<char> = needle.chars().collect();
        lines.iter().find_map(|l| {
            l.windows(n.len())
                .position(|w| w == n.as_slice())
                .map(|p| (l.clone(), p, n.len()))
        })
    };
    let (header, h0, hl) = find("layout\\batch").expect("the header");
    let (cp, c0, cl) = find("DP32·CP2·TP1·PP1").expect("a CP row");
    let (plain, p0, pl) = find("DP64·TP1·PP1").expect("a plain row");
    assert_eq!(h0, c0, "labels start in one column");
    let end = first_cell_end(&header, h0, hl);
    assert_eq!(first_cell_end(&cp, c0, cl), end, "{screen}");
    assert_eq!(first_cell_end(&plain, p0, pl), end, "{screen}");
}

/// Move the what-if selection to `field`.
fn select_row(app: &mut App, field: copus::app::whatif::Field) {
    let row = copus::app::whatif::FIELDS
        .iter()
        .position(|f| *f == field)
        .expect("a row");
    let delta = row as i64 - app.whatif_row as i64;
    update(app, Msg::WhatIfRow(delta));
}

#[test]
fn choosing_recompute_leaves_zero_following_a_change_of_framework() {
    // Touching the recompute row stopped the demo's ZeRO stage (written for Megatron) from
    // following a switch to torchtitan: the heatmap searched ZeRO-1 under FSDP2.
    use copus::app::whatif::Field;
    let mut app = demo_with_table();
    update(&mut app, Msg::ShowSide(Panel::WhatIf));
    select_row(&mut app, Field::Recompute);
    update(&mut app, Msg::WhatIfChange(1));
    update(&mut app, Msg::WhatIfChange(-1));
    select_row(&mut app, Field::Stack);
    while app.resolved.stack().base() != copus::perf::StackPreset::TorchtitanFsdp2 {
        update(&mut app, Msg::WhatIfChange(1));
    }
    assert_eq!(app.resolved.session.search.zero, vec![3], "{}", app.status);
    // A policy chosen there that the framework lacks is said, not silently costed.
    select_row(&mut app, Field::Stack);
    update(&mut app, Msg::WhatIfChange(-1));
    update(&mut app, Msg::WhatIfChange(-1));
    select_row(&mut app, Field::Recompute);
    while app.resolved.session.search.recompute != vec![copus::perf::Recompute::Selective] {
        update(&mut app, Msg::WhatIfChange(1));
    }
    select_row(&mut app, Field::Stack);
    while app.resolved.stack().base() != copus::perf::StackPreset::TorchtitanFsdp2 {
        update(&mut app, Msg::WhatIfChange(1));
    }
    assert!(
        app.status
            .contains("recompute selective is not a policy torchtitan-fsdp2 runs"),
        "{}",
        app.status
    );
}

#[test]
fn a_gpu_without_fp8_is_refused_while_the_stack_runs_fp8() {
    // FP8, then the hardware stepped to an A100: the heatmap drew BF16 numbers under an FP8
    // label, and `s` saved a session copus then refused to open.
    use copus::app::whatif::Field;
    let mut app = demo_with_table();
    update(&mut app, Msg::ShowSide(Panel::WhatIf));
    select_row(&mut app, Field::Precision);
    update(&mut app, Msg::WhatIfChange(1));
    assert_eq!(
        app.resolved.stack().settings().precision,
        copus::perf::efficiency::Precision::Fp8
    );
    select_row(&mut app, Field::Hardware);
    let mut refused = false;
    for _ in 0..copus::profiles::BUILTIN_HARDWARE.len() {
        update(&mut app, Msg::WhatIfChange(-1));
        if app.status.contains("FP8") || app.status.contains("fp8") {
            refused = true;
        }
        assert!(
            app.resolved.hardware.fp8_peak_flops > 0.0,
            "{} runs FP8: {}",
            app.resolved.hardware.name,
            app.status
        );
    }
    assert!(refused, "some built-in GPU lacks FP8 and was refused");
}

/// An analysis that arrives after the stream went down does not say "following the head":
/// the status line says the stream is down, as the title does.
#[test]
fn a_stream_that_went_down_is_not_said_to_be_followed() {
    let mut app = demo_with_table();
    let loaded = || demo_loaded(None);
    app.follow = true;
    update(&mut app, live_msg(loaded(), 300));
    assert!(app.status.contains("following the head"), "{}", app.status);
    update(
        &mut app,
        Msg::LiveStatus(LinkStatus::new(
            LinkState::Waiting,
            "cannot connect to tcp://x:1; retrying",
        )),
    );
    update(&mut app, live_msg(loaded(), 301));
    assert!(
        app.status.contains("the stream is down") && !app.status.contains("following the head"),
        "{}",
        app.status
    );
}

/// The demo's trajectory as a live update carries it, with `warning`.
fn demo_loaded(warning: Option<&str>) -> copus::source::Loaded {
    copus::source::Loaded {
        trajectory: copus::trajectory::Trajectory::clone(
            &app_for_session(&demo_path()).expect("demo").trajectory,
        ),
        analysis: None,
        seed_ema: Vec::new(),
        note: None,
        calibration: None,
        warning: warning.map(str::to_string),
    }
}

/// A what-if key at the end of its row's choices changes nothing, and the status says so
/// (it printed "GPUs per node = 8" as if it had set it).
#[test]
fn a_what_if_row_at_its_end_says_so() {
    use copus::app::whatif::{FIELDS, Field};
    let mut app = demo_with_table();
    let row = FIELDS
        .iter()
        .position(|x| *x == Field::GpusPerNode)
        .expect("field listed") as i64;
    update(&mut app, Msg::ShowSide(Panel::WhatIf));
    update(&mut app, Msg::WhatIfRow(row));
    assert_eq!(app.resolved.session.cluster.gpus_per_node, 8);
    update(&mut app, Msg::WhatIfChange(1));
    assert_eq!(app.resolved.session.cluster.gpus_per_node, 8);
    assert_eq!(app.status, "GPUs per node = 8 (the largest choice)");
    update(&mut app, Msg::WhatIfChange(-1));
    assert_eq!(app.status, "GPUs per node = 4");
}

/// The footer's first hint is what the arrows do where the focus is: scrub on the timeline,
/// select on the heatmap, edit in the what-if (after `2`, → changed a setting while the line
/// still said "←/→ scrub").
#[test]
fn the_footer_hints_follow_the_focus() {
    let mut app = demo_with_table();
    let footer = |app: &App| {
        let screen = render(app, 120, 40, ColorMode::Indexed);
        screen.lines().last().unwrap_or_default().trim().to_string()
    };
    assert!(footer(&app).starts_with("←/→ scrub"), "{}", footer(&app));
    update(&mut app, Msg::ShowSide(Panel::WhatIf));
    assert_eq!(app.focus, Panel::WhatIf);
    let f = footer(&app);
    assert!(f.starts_with("↑/↓ ←/→ edit") && !f.contains("scrub"), "{f}");
    while app.focus != Panel::Heatmap {
        update(&mut app, Msg::FocusNext);
    }
    let f = footer(&app);
    assert!(
        f.starts_with("arrows select") && !f.contains("scrub"),
        "{f}"
    );
}

/// `g` with a step between the trajectory's points lands on the nearest one and says so (the
/// demo went from `g 1200` to step 477 without a word); a step that is a point says nothing
/// more.
#[test]
fn go_to_a_step_between_points_names_the_nearest() {
    use copus::app::PromptEdit;
    let mut app = demo_with_table();
    let go = |app: &mut App, text: &str| {
        update(app, Msg::GoTo);
        for c in text.chars() {
            update(app, Msg::Prompt(PromptEdit::Char(c)));
        }
        update(app, Msg::Prompt(PromptEdit::Submit));
    };
    go(&mut app, "1200");
    let step = app.trajectory.points[app.cursor].step;
    assert_ne!(step, 1200);
    assert!(
        app.status.contains("(the nearest point to step 1200)"),
        "{}",
        app.status
    );
    go(&mut app, &step.to_string());
    assert!(!app.status.contains("nearest"), "{}", app.status);
}

/// A B_crit scale set by hand is shown in the title to three significant digits, as a
/// measured one is (it printed every digit of 1/3).
#[test]
fn the_title_shows_a_hand_set_b_crit_scale_to_three_digits() {
    let mut app = demo_with_table();
    app.resolved.session.b_crit_scale = 1.0 / 3.0;
    let screen = render(&app, 200, 60, ColorMode::Monochrome);
    assert!(
        screen.contains("B_crit ×0.333") && !screen.contains("0.3333"),
        "{screen}"
    );
}

/// A first `A` holds only while the advice stays the switch it named: advice that moves to
/// another switch and back asks for both presses again (it stayed armed, and one press later
/// wrote the switch when it came back).
#[test]
fn advice_that_moves_on_drops_the_first_press() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut app = demo_with_table();
    app.advice = Some(advice_loop(dir.path().join("advice.ndjson")));
    live_tail(&mut app, 1000, 5000.0);
    copus::app::advice::observe(&mut app);
    let first = pending_of(&app).expect("pending advice");
    assert!(update(&mut app, Msg::ApproveAdvice).is_empty());
    assert!(app.status.starts_with("A again writes: "), "{}", app.status);
    // A much smaller B_crit: another switch, or none.
    live_tail(&mut app, 1002, 200.0);
    copus::app::advice::observe(&mut app);
    let moved = pending_of(&app);
    assert!(
        moved.as_ref().is_none_or(|m| m.batch != first.batch),
        "{moved:?} vs {first:?}"
    );
    // Back to the first switch: a single press names it again, it does not write it.
    live_tail(&mut app, 1004, 5000.0);
    copus::app::advice::observe(&mut app);
    let back = pending_of(&app).expect("advice again");
    assert_eq!(back.batch, first.batch);
    let note = copus::app::advice::pending_note(&app).expect("note");
    assert!(note.starts_with("A approves: "), "{note}");
    assert!(update(&mut app, Msg::ApproveAdvice).is_empty());
    assert!(app.status.starts_with("A again writes: "), "{}", app.status);
}

/// At 80×24 a what-if value too long for its row is written whole on a line under the
/// selected row (on the bottom border, beside the scroll hint, it was cut again:
/// `┗ megatron ↑8 ↓14 more`).
#[test]
fn a_cut_what_if_value_is_written_whole_under_its_row() {
    use copus::app::whatif::{FIELDS, Field};
    let mut app = demo_with_table();
    update(&mut app, Msg::ShowSide(Panel::WhatIf));
    let row = FIELDS
        .iter()
        .position(|f| *f == Field::Stack)
        .expect("stack row");
    let by = row as i64 - app.whatif_row as i64;
    update(&mut app, Msg::WhatIfRow(by));
    assert_eq!(app.whatif_row, row);
    let screen = render(&app, 80, 24, ColorMode::Monochrome);
    let label = app.resolved.stack().label();
    assert!(screen.contains("megatron-…"), "{screen}");
    assert!(screen.contains(&format!("= {label}")), "{screen}");
}
