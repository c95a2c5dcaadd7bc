//! Render snapshots of the explorer on a drifting measured run (issue 14): the headline with
//! now and drift and the located causes on the timeline, the per-layer view, and a second run
//! laid over the first — at 80×24 and 200×60, with styles. Besides the snapshots, each test
//! checks that the essentials are on screen whole at 80 columns. Regenerate with
//! `INSTA_UPDATE=always cargo test --test integration -- render_drift::` and review the diff.

use crate::render_support;

use crate::drift_support;

use copus::app::measured_view as mv;
use copus::app::{App, Msg, update};
use copus::session::Panel;
use copus::ui::palette::ColorMode;
use copus::ui::view;
use drift_support::{open, sample_run, write_compared};
use ratatui::Terminal;
use ratatui::backend::TestBackend;

fn render(app: &App, w: u16, h: u16, mode: ColorMode) -> ratatui::buffer::Buffer {
    let mut term = Terminal::new(TestBackend::new(w, h)).expect("terminal");
    term.draw(|f| view::draw(f, app, mode)).expect("draws");
    term.backend().buffer().clone()
}

fn text(buf: &ratatui::buffer::Buffer) -> String {
    let a = buf.area;
    (a.y..a.bottom())
        .map(|y| {
            (a.x..a.right())
                .map(|x| buf[(x, y)].symbol().to_string())
                .collect::<String>()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn snapshot_both(name: &str, app: &App) -> [String; 2] {
    [(80u16, 24u16), (200, 60)].map(|(w, h)| {
        let buf = render(app, w, h, ColorMode::Indexed);
        insta::assert_debug_snapshot!(format!("{name}_{w}x{h}"), buf);
        text(&buf)
    })
}

#[test]
fn a_drifting_run_leads_with_now_and_drift_and_marks_its_causes() {
    let mut app = render_support::with_table(open(&sample_run(), None).expect("opens"));
    update(&mut app, Msg::ScrubTo(300));
    update(&mut app, Msg::ShowSide(Panel::Estimators));
    let [small, large] = snapshot_both("drift", &app);
    let report = app.analysis.clone().expect("analysis");
    let segs = mv::headline_segments_in(&report, mv::sample_word(app.trajectory.seq_len));
    for screen in [&small, &large] {
        // Now and drift whole, value first, on the timeline's first row.
        let row = screen.lines().nth(2).expect("row");
        assert!(
            row.contains(&format!("{} · {}", segs[0], segs[1])),
            "{row}\n{screen}"
        );
        for c in mv::causes(&report, &app.trajectory) {
            assert!(
                screen.contains(c.kind.glyph()),
                "{c:?} not drawn:\n{screen}"
            );
        }
    }
    assert!(
        large.contains(&segs[2]),
        "run-wide at 200 columns:\n{large}"
    );
    assert!(large.contains("verdict noisy"), "{large}");
    let action = &report.summary.reasons[0].action;
    assert!(
        large.contains(&action[..30]),
        "what to do is shown: {action}\n{large}"
    );
}

#[test]
fn the_per_layer_view() {
    let mut app = render_support::with_table(open(&sample_run(), None).expect("opens"));
    update(&mut app, Msg::ScrubTo(300));
    update(&mut app, Msg::ShowSide(Panel::Estimators));
    update(&mut app, Msg::CycleLayer);
    let name = app.viewed_layer().expect("a layer");
    let [small, large] = snapshot_both("drift_layer", &app);
    for screen in [&small, &large] {
        assert!(
            screen.contains(&format!("layer {name}: B_simple")),
            "{screen}"
        );
        assert!(screen.contains(&format!("⠤ layer {name}")), "{screen}");
    }
    // The layer at the cursor, with its interval, in the estimators panel.
    let report = app.analysis.clone().expect("analysis");
    let step = app.trajectory.points[app.cursor].step;
    let here = mv::layer_at(&report, step, &name).expect("layer at the cursor");
    let b = copus::format::si(here.b_simple.expect("bounded"));
    assert!(large.contains(&format!("▸ {name}")), "{large}");
    assert!(large.contains(&format!("· {b} [")), "{b}:\n{large}");
}

#[test]
fn a_compared_run_overlaid() {
    let dir = tempfile::tempdir().expect("tempdir");
    let b = write_compared(dir.path());
    let mut app = render_support::with_table(open(&sample_run(), Some(&b)).expect("opens"));
    update(&mut app, Msg::ScrubTo(100));
    update(&mut app, Msg::ShowSide(Panel::Estimators));
    let [small, large] = snapshot_both("drift_compare", &app);
    for screen in [&small, &large] {
        assert!(
            screen.contains(copus::ui::timeline_marks::DIFFERS_GLYPH),
            "{screen}"
        );
        assert!(
            screen.contains(copus::ui::timeline_marks::COMPARE_GLYPH),
            "{screen}"
        );
    }
    assert!(large.contains("+ B run-b.ndjson"), "{large}");
    let c = app.compare.clone().expect("compare");
    assert!(
        large.contains(&mv::compare_summary(&c.comparison, &app.trajectory)),
        "{large}"
    );
}
