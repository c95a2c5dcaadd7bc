//! The explorer's view of a drifting measured run (issue 14): the headline (now, drift,
//! run-wide), the causes the diagnostics locate placed on the timeline, the per-layer view and
//! a second run laid over the first (`open A --compare B`).

use crate::drift_support;
use crate::stats_support;

use copus::app::measured_view::{self as mv, CauseKind};
use copus::app::{Msg, update};
use copus::format::si;
use copus::stats::{EstimatorSettings, analyze};
use drift_support::{open, sample_run, write_compared};
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use stats_support::Model;

#[test]
fn the_sample_run_headline_leads_with_now_then_drift_then_run_wide() {
    let app = open(&sample_run(), None).expect("opens");
    let report = app.analysis.clone().expect("analysis");
    let s = &report.summary;
    let segs = mv::headline_segments(&report);
    let now = s.now.b_simple.expect("a bounded now");
    assert_eq!(
        segs[0],
        format!(
            "last {} steps {} samples {}",
            s.now.steps,
            si(now),
            mv::interval_words(s.now.ci)
        )
    );
    let d = s.drift.as_ref().expect("two windows");
    assert!(d.significant, "the sample run drifts: {d:?}");
    assert!(
        segs[1].starts_with(&format!("grew {}", mv::factor_words(d.factor))),
        "{segs:?}"
    );
    assert!(
        segs[2].starts_with(&format!("run-wide {}", si(s.b_simple.expect("run-wide")))),
        "{segs:?}"
    );
    // The run-wide value is not "now": on this run it sits well below the last window.
    assert!(s.b_simple.expect("run-wide") < now / 1.5);
    // It fits at 80 columns with now and drift whole.
    let line = mv::fit_segments(&segs, 76);
    assert!(
        line.starts_with(&format!("{} · {}", segs[0], segs[1])),
        "{line}"
    );
}

#[test]
fn a_steady_run_reads_steady_and_a_growing_run_grew() {
    let m = Model::power_law(400, 1.0, 1000.0, 4.0, 8);
    let steps = 2000u64;
    let steady = m.run(7, steps, |_| m.trace() / 64.0);
    let r = analyze(&steady, &EstimatorSettings::default()).expect("analysis");
    let segs = mv::headline_segments(&r);
    assert!(segs[1].starts_with("steady"), "{segs:?}");
    let grow = |t: u64| 16.0 * 16.0f64.powf(t as f64 / (steps - 1) as f64);
    let growing = m.run(7, steps, |t| m.trace() / grow(t));
    let r = analyze(&growing, &EstimatorSettings::default()).expect("analysis");
    let segs = mv::headline_segments(&r);
    let d = r.summary.drift.expect("drift");
    assert!(d.factor > 4.0, "{d:?}");
    assert!(segs[1].starts_with("grew ×"), "{segs:?}");
}

/// A window that is the whole run reads "all N steps" (the run-wide value again), a window
/// that is part of it "last N steps"; a live run's headline names the step its analysis
/// reaches (the title above shows the newest step, which runs ahead of it).
#[test]
fn the_headline_names_its_window_and_a_live_analysis_its_step() {
    let m = Model::power_law(400, 1.0, 1000.0, 4.0, 8);
    let long = analyze(
        &m.run(7, 2000, |_| m.trace() / 64.0),
        &EstimatorSettings::default(),
    )
    .expect("analysis");
    let segs = mv::headline_segments(&long);
    assert!(segs[0].starts_with("last "), "{segs:?}");
    let live = mv::live_headline_segments(&long);
    assert!(
        live[0].starts_with(&format!("to step {}: last ", long.summary.now.last_step)),
        "{live:?}"
    );
    let short = analyze(
        &m.run(7, 40, |_| m.trace() / 64.0),
        &EstimatorSettings::default(),
    )
    .expect("analysis");
    let segs = mv::headline_segments(&short);
    assert!(segs[0].starts_with("all 40 steps"), "{segs:?}");
}

#[test]
fn fitting_keeps_the_first_segment_and_leaves_out_what_overflows() {
    let segs: Vec<String> = ["aaaa", "bbbbbbbbbb", "cc"].map(String::from).to_vec();
    assert_eq!(mv::fit_segments(&segs, 100), "aaaa · bbbbbbbbbb · cc");
    assert_eq!(mv::fit_segments(&segs, 11), "aaaa · cc");
    assert_eq!(mv::fit_segments(&segs, 3), "aa…");
}

#[test]
fn causes_sit_at_the_steps_the_diagnostics_name() {
    let app = open(&sample_run(), None).expect("opens");
    let report = app.analysis.clone().expect("analysis");
    let causes = mv::causes(&report, &app.trajectory);
    // Every located step of a marked diagnostic is on the timeline.
    let mut expected = 0;
    for d in &report.summary.diagnostics {
        let Some(kind) = CauseKind::of(d.kind) else {
            continue;
        };
        for at in &d.at {
            expected += 1;
            assert!(
                causes.iter().any(|c| c.kind == kind && c.steps == *at),
                "{kind:?} at {at:?} not marked: {causes:?}"
            );
        }
    }
    assert_eq!(causes.len(), expected);
    let kinds: Vec<CauseKind> = causes.iter().map(|c| c.kind).collect();
    assert!(kinds.contains(&CauseKind::LrChange), "{causes:?}");
    assert!(kinds.contains(&CauseKind::NonFinite), "{causes:?}");
    for c in &causes {
        // At the tokens of the step, or between its neighbours when the step was skipped.
        let before = app
            .trajectory
            .points
            .iter()
            .rev()
            .find(|p| p.step <= c.steps[0]);
        let after = app.trajectory.points.iter().find(|p| p.step >= c.steps[0]);
        let (lo, hi) = (
            before.map_or(f64::NEG_INFINITY, |p| p.tokens),
            after.map_or(f64::INFINITY, |p| p.tokens),
        );
        assert!(
            (lo..=hi).contains(&c.tokens[0]),
            "{c:?} not between {lo} and {hi}"
        );
    }
    let legend = copus::ui::timeline_marks::legend_entries(&app, None);
    for k in [CauseKind::LrChange, CauseKind::NonFinite] {
        let entry = format!("{} {}", k.glyph(), k.label());
        assert!(legend.contains(&entry), "{entry} not in {legend:?}");
    }
}

#[test]
fn a_loss_scale_jump_is_marked_where_it_happens() {
    let m = Model::power_law(200, 1.0, 1000.0, 4.0, 8);
    let mut records = m.run(3, 600, |_| m.trace() / 64.0);
    for r in records.iter_mut().filter(|r| r.step >= 300) {
        r.sq_small *= 1000.0;
        r.sq_big *= 1000.0;
    }
    let report = analyze(&records, &EstimatorSettings::default()).expect("analysis");
    let traj = copus::source::measured::trajectory_from_report(&report, 1, "synthetic".into());
    let jumps: Vec<_> = mv::causes(&report, &traj)
        .into_iter()
        .filter(|c| c.kind == CauseKind::LossScaleJump)
        .collect();
    assert_eq!(jumps.len(), 1, "{jumps:?}");
    assert!(jumps[0].steps[0].abs_diff(300) <= 5, "{jumps:?}");
}

#[test]
fn l_cycles_the_timeline_through_the_layers_and_back() {
    let mut app = open(&sample_run(), None).expect("opens");
    let report = app.analysis.clone().expect("analysis");
    let names = mv::layer_names(&report);
    assert!(names.len() >= 2, "{names:?}");
    let key = KeyEvent::new(KeyCode::Char('l'), KeyModifiers::NONE);
    let msg = copus::runtime::keys::key_to_msg(&app, key).expect("l is bound");
    assert!(matches!(msg, Msg::CycleLayer));
    for name in &names {
        update(&mut app, Msg::CycleLayer);
        assert_eq!(app.viewed_layer().as_ref(), Some(name));
        assert!(app.status.contains(name.as_str()), "{}", app.status);
    }
    update(&mut app, Msg::CycleLayer);
    assert_eq!(app.viewed_layer(), None, "back to the whole model");

    // The layer's trajectory is steps[].layers of the analysis (its JSON counterpart).
    let json = serde_json::to_value(&*report).expect("json");
    let lt = mv::layer_trajectory(&report, &names[0], &app.trajectory);
    assert!(lt.points.len() > 100);
    for p in &lt.points {
        let row = json["steps"]
            .as_array()
            .and_then(|s| s.iter().find(|r| r["step"].as_u64() == Some(p.step)))
            .expect("row");
        let l = &row["layers"][names[0].as_str()];
        assert_eq!(l["b_simple"].as_f64(), Some(p.b_crit));
        if let Some((lo, hi)) = p.ci {
            assert_eq!(l["ci"][0].as_f64(), Some(lo));
            assert_eq!(l["ci"][1].as_f64(), Some(hi));
        }
    }

    // A run without layers says so and stays on the whole model.
    let mut demo = copus::cli::open::app_for_session(&copus::cli::open::demo_path()).expect("demo");
    update(&mut demo, Msg::CycleLayer);
    assert_eq!(demo.layer_view, None);
    assert!(demo.status.contains("no per-layer"), "{}", demo.status);
}

#[test]
fn compare_lays_b_over_a_and_finds_where_they_differ() {
    let dir = tempfile::tempdir().expect("tempdir");
    let b_path = write_compared(dir.path());
    let app = open(&sample_run(), Some(&b_path)).expect("opens with --compare");
    let a = app.analysis.clone().expect("analysis");
    let c = app.compare.clone().expect("compared run");
    // The same comparison as `analyze A --compare B --json`.
    let b_report = open(&b_path, None)
        .expect("B opens")
        .analysis
        .expect("B analysis");
    let settings = &app.resolved.session.estimator;
    assert_eq!(c.comparison, copus::stats::compare(&a, &b_report, settings));
    assert!(!c.comparison.differs.is_empty(), "B differs early");
    assert!(c.comparison.differs.iter().all(|d| d.b_higher));
    assert!(
        c.comparison.differs.iter().all(|d| d.steps_a[0] < 250),
        "only where B was changed: {:?}",
        c.comparison.differs
    );
    let stretches = mv::differ_stretches(&c, &app.trajectory);
    let (first, last) = (
        app.trajectory.points[0].tokens,
        app.trajectory.points[app.trajectory.points.len() - 1].tokens,
    );
    assert!(
        stretches
            .iter()
            .all(|r| first <= r[0] && r[0] <= r[1] && r[1] <= last)
    );
    let summary = mv::compare_summary(&c.comparison, &app.trajectory);
    assert!(
        summary.contains(&format!("{:.0}%", 100.0 * c.comparison.differs_share)),
        "{summary}"
    );

    // A run compared with itself never differs.
    let same = open(&sample_run(), Some(&sample_run())).expect("opens");
    let c = same.compare.clone().expect("compared run");
    assert!(c.comparison.differs.is_empty());
    assert_eq!(c.comparison.differs_share, 0.0);

    // Bad input names the place.
    let missing = dir.path().join("missing.ndjson");
    let err = open(&sample_run(), Some(&missing)).expect_err("no such file");
    assert!(err.to_string().contains("missing.ndjson"), "{err}");
    let mut demo = copus::cli::open::app_for_session(&copus::cli::open::demo_path()).expect("demo");
    let err = copus::cli::open_compare::attach(&mut demo, &b_path).expect_err("a scenario");
    assert!(err.to_string().contains("stats file"), "{err}");
}

#[test]
fn a_stretch_without_signal_is_marked_across_the_axis() {
    use ratatui::Terminal;
    use ratatui::backend::TestBackend;
    let m = Model::power_law(200, 1.0, 1000.0, 4.0, 8);
    // No gradient signal between steps 250 and 450: the smoothed |G|² falls to zero there.
    let records = m.run(5, 700, |t| {
        if (250..450).contains(&t) {
            0.0
        } else {
            m.trace() / 64.0
        }
    });
    let report = analyze(&records, &EstimatorSettings::default()).expect("analysis");
    let d = report
        .summary
        .diagnostics
        .iter()
        .find(|d| d.kind == copus::stats::DiagnosticKind::NonPositiveSmoothedG2)
        .expect("a stretch where |G|² is not positive");
    let traj = copus::source::measured::trajectory_from_report(&report, 1, "synthetic".into());
    let marked: Vec<_> = mv::causes(&report, &traj)
        .into_iter()
        .filter(|c| c.kind == CauseKind::NonPositiveG2)
        .collect();
    assert_eq!(marked.len(), d.at.len());
    assert!(
        marked
            .iter()
            .all(|c| c.steps[0] >= 200 && c.steps[1] <= 500),
        "{marked:?}"
    );

    let resolved =
        copus::cli::open::adhoc_session(&copus::cli::open::OpenArgs::for_path(&sample_run()))
            .expect("session");
    let app = copus::app::App::new(
        resolved,
        copus::source::Loaded {
            trajectory: traj,
            analysis: Some(report),
            seed_ema: Vec::new(),
            note: None,
            calibration: None,
            warning: None,
        },
    );
    let mut term = Terminal::new(TestBackend::new(120, 40)).expect("terminal");
    term.draw(|f| copus::ui::view::draw(f, &app, copus::ui::palette::ColorMode::Indexed))
        .expect("draws");
    let buf = term.backend().buffer();
    let axis = (0..40u16)
        .map(|y| {
            (0..120u16)
                .map(|x| buf[(x, y)].symbol())
                .collect::<String>()
        })
        .find(|row| row.contains('└'))
        .expect("the timeline's token axis");
    let glyph = CauseKind::NonPositiveG2.glyph();
    assert!(
        axis.matches(glyph).count() >= 2,
        "a stretch spans several columns: {axis}"
    );
}

/// Early in a live run the one-sided smoother lags a fast-growing noise scale: where its value
/// at the last step and the last window's disagree beyond both intervals, the headline says so
/// (a reviewer saw "B_crit 653 [511–893]" above "last 50 steps 1.4k [949–2.6k]" unexplained);
/// where they agree it says nothing.
#[test]
fn a_smoother_behind_the_last_window_is_named() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/data/demo-train-3000.ndjson");
    let text = std::fs::read_to_string(&path).expect("the bundled run");
    let records: Vec<copus::stats::StepStats> = text
        .lines()
        .take(92)
        .filter_map(|l| copus::stats::parse_line(l).ok())
        .collect();
    let one_sided = EstimatorSettings {
        smoother: copus::stats::SmootherKind::OneSided,
        ..EstimatorSettings::default()
    };
    let report = analyze(&records, &one_sided).expect("analysis");
    let (s, last) = (&report.summary, report.steps.last().expect("a last step"));
    let disjoint = s.now.ci[0] > last.ci[1] || last.ci[0] > s.now.ci[1];
    let named = mv::headline_segments(&report)
        .iter()
        .any(|seg| seg.contains("the smoother lags a fast change"));
    assert!(
        disjoint,
        "the run's first 92 steps show the lag: {:?} vs {:?}",
        s.now.ci, last.ci
    );
    assert!(named, "{:?}", mv::headline_segments(&report));
    let whole: Vec<copus::stats::StepStats> = text
        .lines()
        .filter_map(|l| copus::stats::parse_line(l).ok())
        .collect();
    let settled = analyze(&whole, &EstimatorSettings::default()).expect("analysis");
    let (s, last) = (&settled.summary, settled.steps.last().expect("a last step"));
    let disjoint = s.now.ci[0] > last.ci[1] || last.ci[0] > s.now.ci[1];
    let named = mv::headline_segments(&settled)
        .iter()
        .any(|seg| seg.contains("the smoother lags a fast change"));
    assert_eq!(named, disjoint);
}

/// Runs that end apart are compared at the latest point both reach, not at their own last
/// windows (A's last window over B's compared two points in training, and was shown as "B/A
/// now" without a word); a ratio without an interval says so; the export carries the
/// comparison and B_crit's interval as the screen shows them (review #12, findings 1 and 2).
#[test]
fn runs_that_end_apart_are_compared_where_both_reach_and_exported_as_shown() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = std::fs::read_to_string(sample_run()).expect("sample run");
    let lines: Vec<&str> = text.lines().collect();
    let half = dir.path().join("half.ndjson");
    std::fs::write(&half, lines[..lines.len() / 2].join("\n") + "\n").expect("write B");
    let app = open(&sample_run(), Some(&half)).expect("opens with --compare");
    let c = app
        .compare
        .clone()
        .expect("compared run")
        .comparison
        .clone();
    assert!(!c.now_windows_overlap, "{:?}", c.now_windows);
    let end = c.shared_end.clone().expect("a shared end");
    let b_now = open(&half, None)
        .expect("B opens")
        .analysis
        .expect("B")
        .summary
        .now
        .clone();
    assert_eq!(end.steps_b, [b_now.first_step, b_now.last_step]);
    let headline = mv::compare_headline(&c).join(" · ");
    assert!(
        headline.contains("at shared end") && !headline.contains("now"),
        "{headline}"
    );
    if end.ratio.ci.is_none() {
        assert!(headline.contains("(CI unbounded)"), "{headline}");
    }
    let summary = mv::compare_summary(&c, &app.trajectory);
    match end.ratio.ci {
        Some(_) => assert!(summary.contains(" ["), "{summary}"),
        None => assert!(summary.contains("(CI unbounded)"), "{summary}"),
    }

    // The export says what the screen says.
    let mut app = crate::render_support::with_table(app);
    let effects = update(&mut app, Msg::Export);
    let [copus::app::Effect::Write(job)] = effects.as_slice() else {
        panic!("expected a write, got {effects:?}");
    };
    let file = |ext: &str| {
        job.files
            .iter()
            .find(|f| f.0.extension().is_some_and(|e| e == ext))
            .expect("exported file")
            .1
            .clone()
    };
    let v: serde_json::Value = serde_json::from_str(&file("json")).expect("json");
    assert_eq!(v["comparison"]["summary"], summary.as_str());
    assert_eq!(v["comparison"]["now_windows_overlap"], false);
    assert_eq!(v["comparison"]["b"], "half.ndjson");
    let ci = &v["b_crit_interval"];
    let (lo, b) = (
        ci[0].as_f64().expect("lo"),
        v["b_crit"].as_f64().expect("b"),
    );
    assert!(lo > 0.0 && lo < b, "{ci} around {b}");
    let csv = file("csv");
    assert!(csv.contains(&format!("# comparison: {summary}\n")), "{csv}");
    assert!(csv.contains("# b_crit_interval_sequences: "), "{csv}");

    // Runs that end together are compared "now", with the interval.
    let same = open(&sample_run(), Some(&sample_run())).expect("opens");
    let c = same.compare.clone().expect("compared").comparison.clone();
    assert!(c.now_windows_overlap);
    let headline = mv::compare_headline(&c);
    assert!(headline[0].starts_with("B/A now ×1.00 ["), "{headline:?}");
    assert_eq!(headline[1], "B≠A on 0%");
}
