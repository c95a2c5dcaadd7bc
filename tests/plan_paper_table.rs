//! Every shipped session plans with all eight strategies (optimal-joint never slower), and the
//! README's comparison with the COPUS paper says what `copus plan --json` prints.

use copus::pipeline::plan_session;
use copus::plan::Objective;
use copus::session::{DataSource, Session};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

const STRATEGIES: [&str; 8] = [
    "static",
    "static-gbs",
    "cbs-fixed-small",
    "cbs-fixed-large",
    "batch-adaptive",
    "config-adaptive",
    "greedy-joint",
    "optimal-joint",
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The shipped plan sessions (every `sessions/*.ron` whose source is not a live run).
fn plan_sessions() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("sessions"))
        .expect("sessions/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "ron"))
        .filter(|p| {
            let s = Session::load(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            !matches!(s.source, DataSource::Live { .. })
        })
        .collect();
    files.sort();
    files
}

fn name_of(p: &Path) -> String {
    p.file_name().expect("name").to_string_lossy().into_owned()
}

#[test]
fn every_shipped_session_plans_with_all_eight_strategies_and_optimal_joint_is_fastest() {
    let files = plan_sessions();
    assert!(files.len() >= 9, "shipped sessions: {files:?}");
    let mut measured_with_horizon = 0;
    for file in &files {
        for objective in [Objective::McCandlish, Objective::LrSqrt] {
            let mut r = Session::load(file)
                .and_then(|s| s.resolve(file))
                .expect("resolves");
            r.session.planner.objective = objective;
            let rep = plan_session(&r).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            let names: Vec<&str> = rep.strategies.iter().map(|s| s.name.as_str()).collect();
            assert_eq!(
                names.iter().copied().collect::<BTreeSet<_>>(),
                STRATEGIES.iter().copied().collect::<BTreeSet<_>>(),
                "{}",
                file.display()
            );
            let time = |n: &str| {
                rep.strategies
                    .iter()
                    .find(|s| s.name == n)
                    .map(|s| s.time_s)
                    .expect("strategy")
            };
            let optimal = time("optimal-joint");
            for s in &rep.strategies {
                assert!(
                    optimal <= s.time_s * (1.0 + 1e-9),
                    "{} {}: optimal-joint {optimal} s slower than {} {} s",
                    file.display(),
                    objective.name(),
                    s.name,
                    s.time_s
                );
            }
            let fastest = ["static-gbs", "cbs-fixed-small", "cbs-fixed-large"]
                .into_iter()
                .map(time)
                .fold(f64::INFINITY, f64::min);
            assert!((rep.speedup_vs_fastest_baseline - fastest / optimal).abs() < 1e-9);
            assert!((rep.speedup_vs_hindsight_static - time("static") / optimal).abs() < 1e-9);
            assert_eq!(rep.objective, objective.name());
            if let Some(h) = &rep.horizon {
                assert!(h.reached_loss <= h.target_loss && h.points_kept < h.points_total);
                assert_eq!(
                    rep.phases + 1,
                    h.points_kept,
                    "the plan stops at the horizon"
                );
                measured_with_horizon += 1;
            }
        }
    }
    assert!(
        measured_with_horizon >= 6,
        "at least three measured sessions with a short horizon, under both objectives"
    );
}

/// A cell "+20.4 % (static-gbs)" → (20.4, Some("static-gbs")).
fn parse_percent(cell: &str) -> (f64, Option<String>) {
    let (num, rest) = cell.split_once('%').expect("a percentage");
    let value: f64 = num.trim().parse().unwrap_or_else(|_| panic!("{cell}"));
    let name = rest
        .trim()
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .map(str::to_string);
    (value, name)
}

#[test]
fn the_readme_table_says_what_copus_plan_json_prints() {
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README");
    let begin = readme
        .find("<!-- paper-table:begin")
        .expect("README has the paper-table markers");
    let end = readme.find("<!-- paper-table:end -->").expect("end marker");
    let rows: Vec<Vec<String>> = readme[begin..end]
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_string())
                .collect()
        })
        .collect();
    let mut seen = BTreeSet::new();
    for row in &rows {
        assert_eq!(row.len(), 8, "{row:?}");
        let file = row[0].trim_matches('`');
        let objective = &row[3];
        seen.insert((file.to_string(), objective.clone()));
        let out = Command::new(env!("CARGO_BIN_EXE_copus"))
            .args([
                "plan",
                &format!("sessions/{file}"),
                "--objective",
                objective,
            ])
            .arg("--json")
            .current_dir(root())
            .output()
            .expect("runs copus");
        assert!(
            out.status.success(),
            "{file}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        let ctx = format!("{file} {objective}: {row:?}");
        assert_eq!(json["objective"], objective.as_str(), "{ctx}");
        let (gain, baseline) = parse_percent(&row[4]);
        let speedup = json["speedup_vs_fastest_baseline"]
            .as_f64()
            .expect("speedup");
        assert!(
            ((speedup - 1.0) * 100.0 - gain).abs() <= 0.05 + 1e-9,
            "{ctx}: JSON {speedup}"
        );
        assert_eq!(
            baseline.as_deref(),
            json["fastest_baseline"].as_str(),
            "{ctx}"
        );
        let (gain, _) = parse_percent(&row[5]);
        let speedup = json["speedup_vs_hindsight_static"]
            .as_f64()
            .expect("speedup");
        assert!(
            ((speedup - 1.0) * 100.0 - gain).abs() <= 0.005 + 1e-9,
            "{ctx}: JSON {speedup}"
        );
        let switches: usize = row[6]
            .split_whitespace()
            .next()
            .and_then(|n| n.parse().ok())
            .expect("switch count");
        assert_eq!(
            Some(switches),
            json["switches"].as_array().map(Vec::len),
            "{ctx}"
        );
        match json["horizon"]["target_loss"].as_f64() {
            Some(l) => assert_eq!(row[2], format!("to loss {l}"), "{ctx}"),
            None => assert_eq!(row[2], "whole run", "{ctx}"),
        }
    }
    let expected: BTreeSet<(String, String)> = plan_sessions()
        .iter()
        .flat_map(|p| {
            ["mccandlish", "lr-sqrt"]
                .into_iter()
                .map(move |o| (name_of(p), o.to_string()))
        })
        .collect();
    assert_eq!(
        seen, expected,
        "the README table has one row per shipped session and objective"
    );
}
