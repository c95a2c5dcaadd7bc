//! The explorer's numbers and words: a measured run's B_crit is read in the run's own tokens
//! per sample and converted explicitly to the model's sequences for the heatmap; "past B_crit"
//! only when the batch is; the Pollux efficiency is shown relative to B0.

use crate::render_support;
use copus::app::recommend::{Units, recommend};
use copus::app::{App, Msg, update};
use copus::cli::open::{OpenArgs, adhoc_session, app_for_session, demo_path};
use copus::goodput::StatEffForm;
use copus::session::Panel;
use copus::ui::palette::ColorMode;
use std::path::Path;

fn render(app: &App, w: u16, h: u16) -> String {
    render_support::screen(app, w, h, ColorMode::Indexed)
}

fn sample_run(args: OpenArgs) -> App {
    let resolved = adhoc_session(&args).expect("ad-hoc session");
    let mut app = App::loading(resolved.clone());
    let loaded = copus::pipeline::load(&resolved);
    update(&mut app, Msg::SourceLoaded(Box::new(loaded)));
    render_support::with_table(app)
}

fn sample_path() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/data/sample-run.ndjson")
}

#[test]
fn a_measured_run_counts_its_own_tokens_per_sample_and_the_heatmap_converts() {
    // The sample run records 65536 tokens per step of b_big 32: 2048 tokens per sample; the
    // default model (llama-7b) has 4096-token sequences.
    let mut app = sample_run(OpenArgs::for_path(&sample_path()));
    assert_eq!(app.trajectory.seq_len, 2048, "inferred from tokens/b_big");
    assert_eq!(app.resolved.model.seq_len, 4096);
    assert!(
        app.status.contains("2048 tokens per sample"),
        "{}",
        app.status
    );
    let point = app.trajectory.points[app.cursor];
    let grid = app.grid.as_ref().expect("grid");
    assert!(
        (grid.b_crit - point.b_crit * 2048.0 / 4096.0).abs() < 1e-9 * point.b_crit,
        "the heatmap counts the model's sequences: {} run samples → {} sequences",
        point.b_crit,
        grid.b_crit
    );
    update(&mut app, Msg::ShowSide(Panel::Estimators));
    let screen = render(&app, 200, 60);
    assert!(screen.contains("sequences × 2048 tok"), "{screen}");
    assert!(
        screen.contains("×4096 tok = ") && screen.contains("×2048 "),
        "heatmap title:\n{screen}"
    );
}

#[test]
fn a_given_seq_len_overrides_the_inferred_one() {
    let args = OpenArgs {
        seq_len: Some(4096),
        ..OpenArgs::for_path(&sample_path())
    };
    let app = sample_run(args);
    assert_eq!(app.trajectory.seq_len, 4096);
    let point = app.trajectory.points[app.cursor];
    let grid = app.grid.as_ref().expect("grid");
    assert!((grid.b_crit - point.b_crit).abs() < 1e-9 * point.b_crit);
    assert!(app.status.contains("(given)"), "{}", app.status);
}

#[test]
fn the_planner_and_grid_cli_get_the_trajectory_in_model_sequences() {
    let args = OpenArgs::for_path(&sample_path());
    let resolved = adhoc_session(&args).expect("ad-hoc session");
    let raw = copus::pipeline::load(&resolved).expect("loads").trajectory;
    let model = copus::pipeline::load_trajectory(&resolved).expect("loads");
    assert_eq!(model.seq_len, 4096);
    assert!((model.points[0].b_crit * 2.0 - raw.points[0].b_crit).abs() < 1e-9);
    assert_eq!(model.points[0].tokens, raw.points[0].tokens, "same tokens");
}

fn demo_at(cursor: usize) -> App {
    let mut app = render_support::with_table(app_for_session(&demo_path()).expect("demo"));
    update(&mut app, Msg::ScrubTo(cursor));
    app
}

fn units(app: &App) -> Units {
    Units {
        form: app.resolved.session.stat_eff,
        seq_len: app.resolved.model.seq_len,
    }
}

#[test]
fn past_b_crit_only_when_the_current_batch_is_above_it() {
    let mut seen_past = false;
    let mut seen_below = false;
    for cursor in [0, 10, 40, 80, 119] {
        let app = demo_at(cursor);
        let (table, grid) = (app.table.as_ref().unwrap(), app.grid.as_ref().unwrap());
        let r = recommend(table, grid, app.current_batch_column(), units(&app)).expect("rec");
        let current = r.current.as_ref().expect("batch 512 runs").batch as f64;
        for reason in &r.reasons {
            if reason.contains("past B_crit") {
                seen_past = true;
                assert!(current > grid.b_crit, "{reason} at B_crit {}", grid.b_crit);
            }
            if reason.contains("below B_crit") {
                seen_below = true;
                assert!(current <= grid.b_crit, "{reason} at B_crit {}", grid.b_crit);
            }
        }
    }
    assert!(
        seen_past && seen_below,
        "the demo crosses B_crit = 512 along the run"
    );
}

#[test]
fn the_now_line_says_what_it_compares() {
    let app = demo_at(119);
    let screen = render(&app, 200, 60);
    assert!(screen.contains("your batch 512"), "{screen}");
    assert!(screen.contains("goodput over yours"), "{screen}");
}

#[test]
fn pollux_efficiency_reads_relative_to_b0_never_as_a_fraction_of_samples() {
    let mut app = demo_at(119);
    app.resolved.session.stat_eff = StatEffForm::Pollux { b0: 512.0 };
    app.rescale();
    let (table, grid) = (app.table.as_ref().unwrap(), app.grid.as_ref().unwrap());
    assert!(
        grid.stat_eff.iter().any(|&e| e > 1.0),
        "Pollux exceeds 1 below B0: {:?}",
        grid.stat_eff
    );
    let r = recommend(table, grid, app.current_batch_column(), units(&app)).expect("rec");
    for reason in &r.reasons {
        assert!(!reason.contains("samples count"), "{reason}");
        assert!(!reason.contains("% statistical efficiency"), "{reason}");
    }
    let screen = render(&app, 200, 60);
    assert!(
        screen.contains("eff. vs B0"),
        "heatmap row label:\n{screen}"
    );
    assert!(screen.contains("vs B0 = 512"), "recommendation:\n{screen}");
    assert!(!screen.contains("stat. eff."), "{screen}");
}

#[test]
fn the_recommendation_counts_b_crit_tokens_in_token_units() {
    // A million tokens per sample puts the demo's B_crit past a billion tokens: "B", never the
    // SI "G" the title would contradict.
    let app = demo_at(119);
    let (table, grid) = (app.table.as_ref().unwrap(), app.grid.as_ref().unwrap());
    let units = Units {
        seq_len: 1_000_000,
        ..units(&app)
    };
    let r = recommend(table, grid, app.current_batch_column(), units).expect("rec");
    let want = copus::format::tokens(grid.b_crit * 1e6);
    assert!(want.ends_with('B'), "{want}");
    assert!(
        r.reasons[0].contains(&format!("({want} tokens)")),
        "{}",
        r.reasons[0]
    );
}

#[test]
fn the_footer_names_a_lesson_as_a_lesson() {
    let mut app = demo_at(0);
    let footer = |app: &App| {
        render(app, 200, 60)
            .lines()
            .last()
            .unwrap_or_default()
            .to_string()
    };
    let tour = footer(&app);
    assert!(tour.contains("n tour"), "{tour}");
    app.resolved.session.name = "lesson: a lesson".into();
    let lesson = footer(&app);
    assert!(lesson.contains("n lesson"), "{lesson}");
    assert!(!lesson.contains("n tour"), "{lesson}");
}

#[test]
fn snapshot_takes_seq_len_as_open_does() {
    use clap::Parser;
    use copus::cli::{Cli, Command};
    let cli = Cli::try_parse_from(["copus", "snapshot", "run.ndjson", "--seq-len", "4096"])
        .expect("snapshot --seq-len parses");
    match cli.command {
        Some(Command::Snapshot(a)) => assert_eq!(a.seq_len, Some(4096)),
        other => panic!("not a snapshot: {other:?}"),
    }
    assert!(
        Cli::try_parse_from(["copus", "snapshot", "--lesson", "x", "--seq-len", "4096"]).is_err(),
        "--seq-len is for a stats file or dump, not a lesson"
    );
}

#[test]
fn an_interval_unbounded_above_reads_as_such_in_the_title() {
    use copus::ui::timeline::b_crit_interval_words;
    let words = b_crit_interval_words(1300.0, Some((1200.0, f64::INFINITY)), 4096);
    assert_eq!(words, "≥1.2k sequences (≥4.9M tok; open above, point 1.3k)");
    let bounded = b_crit_interval_words(38.0, Some((33.0, 45.0)), 2048);
    assert_eq!(bounded, "38 [33–45] sequences (77.8k tok)");
    // One-token samples (the built-in trainer's) are no sequences.
    let single = b_crit_interval_words(38.0, Some((33.0, 45.0)), 1);
    assert_eq!(single, "38 [33–45] samples (38 tok)");
    assert_eq!(
        b_crit_interval_words(38.0, None, 2048),
        copus::ui::timeline::b_crit_words(38.0, 2048)
    );

    // The sample run's interval is unbounded above from step 399 to 409: the point keeps it
    // (for the title) and the timeline still draws its axis and band.
    let mut app = sample_run(OpenArgs::for_path(&sample_path()));
    let at = app
        .trajectory
        .points
        .iter()
        .position(|p| p.step == 400)
        .expect("step 400");
    let ci = app.trajectory.points[at].ci.expect("an interval");
    assert!(
        ci.0.is_finite() && ci.0 > 0.0 && ci.1 == f64::INFINITY,
        "{ci:?}"
    );
    update(&mut app, Msg::ScrubTo(at));
    let screen = render(&app, 200, 60);
    let title = screen
        .lines()
        .find(|l| l.contains("· step 400 ·"))
        .unwrap_or_default();
    assert!(title.contains("open above, point"), "{title}\n{screen}");
    assert!(screen.contains("• interval"), "{screen}");
}

#[test]
fn grid_at_outside_the_trajectory_counts_tokens_in_token_units() {
    use copus::cli::grid::{At, point_at};
    use copus::trajectory::TrajectoryPoint;
    let points: Vec<TrajectoryPoint> = [(0, 1e9), (100, 300e9)]
        .into_iter()
        .map(|(step, tokens)| TrajectoryPoint {
            step,
            tokens,
            b_crit: 100.0,
            ci: None,
            loss: None,
        })
        .collect();
    let err = point_at(&points, At::Tokens(900e12), false)
        .expect_err("past the end")
        .to_string();
    assert!(
        err.contains("--at 900.0T tokens") && err.contains("from 1.0B to 300.0B tokens"),
        "{err}"
    );
    assert!(!err.contains('G'), "{err}");
    assert!(point_at(&points, At::Tokens(150e9), false).is_ok());
}

/// A number as the screen prints it ("643k", "1.2M", "0.94", "+11.6%").
fn screen_number(s: &str) -> Option<f64> {
    let s = s
        .trim()
        .trim_start_matches('+')
        .trim_end_matches(['%', ',', '.']);
    let (num, mult) = match s.chars().last()? {
        'k' => (&s[..s.len() - 1], 1e3),
        'M' => (&s[..s.len() - 1], 1e6),
        'G' | 'B' => (&s[..s.len() - 1], 1e9),
        _ => (s, 1.0),
    };
    num.parse::<f64>().ok().map(|v| v * mult)
}

/// The recommendation's sentences against their own numbers, on the rendered screen at
/// several points of the demo: "goodput G tok/s = T × E stat. eff." (G = T × E within the
/// printed rounding, so that a hand check works) and "best has +P% goodput over yours" (P from the two goodputs shown).
#[test]
fn the_recommendation_sentences_add_up_on_screen() {
    for at in [0usize, 60, 119] {
        let app = demo_at(at);
        let screen = render(&app, 200, 60);
        // The panel wraps; join its column into one text.
        let text: String = screen
            .lines()
            .filter_map(|l| {
                let (_, right) = l.split_once("││").or_else(|| l.split_once("│┃"))?;
                Some(right.trim_end_matches(['│', '┃', ' ']).to_string())
            })
            .collect::<Vec<_>>()
            .join(" ");
        let (_, after) = text.split_once("goodput ").expect("a goodput sentence");
        let words: Vec<&str> = after.split_whitespace().collect();
        // goodput G tok/s = T × E stat.
        assert_eq!(
            (words[1], words[2], words[4]),
            ("tok/s", "=", "×"),
            "{text}"
        );
        let (g, t, e) = (
            screen_number(words[0]).unwrap(),
            screen_number(words[3]).unwrap(),
            screen_number(words[5]).unwrap(),
        );
        // Three significant digits on G and T and three decimals on E: within 0.5 % (two
        // decimals on E read 415k = 580k × 0.72, 0.7 % off, on the opening screen).
        let rel = (g - t * e).abs() / g;
        assert!(rel < 0.005, "at {at}: {g} vs {t} × {e}\n{text}");
        if let Some((before, _)) = text.split_once("% goodput over yours") {
            let p = screen_number(before.rsplit(' ').next().unwrap()).unwrap();
            let (_, yours) = text.split_once(", goodput ").expect("your goodput");
            let y = screen_number(yours.split_whitespace().next().unwrap()).unwrap();
            let want = 100.0 * (g / y - 1.0);
            assert!(
                (p - want).abs() <= 0.02 * want.abs().max(10.0),
                "at {at}: +{p}% vs {want}%\n{text}"
            );
        }
    }
}

/// The selection follows the ★ as the cursor moves until the user picks a cell; `*` (select
/// the best) makes it follow again (the tour's halfway step showed the early best's
/// throughput beside a ★ that had moved).
#[test]
fn the_selection_follows_the_star_until_a_cell_is_picked() {
    let mut app = demo_at(0);
    let last = app.trajectory.points.len() - 1;
    update(&mut app, Msg::ScrubTo(last));
    assert_eq!(Some(app.selected), app.best_visible(), "follows the ★");
    let start = demo_at(0).best_visible().expect("a best cell");
    assert_ne!(Some(start), app.best_visible(), "the ★ moves in the demo");
    // Picked by hand: scrubbing leaves it.
    update(&mut app, Msg::MoveSelection(1, 0));
    let picked = app.selected;
    update(&mut app, Msg::ScrubTo(0));
    assert_eq!(app.selected, picked);
    // `*`: the best again, and following again.
    update(&mut app, Msg::SelectBest);
    update(&mut app, Msg::ScrubTo(last));
    assert_eq!(Some(app.selected), app.best_visible());
}
