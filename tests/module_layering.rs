//! Layering guards: the engine crates (`crates/`) never import the app and depend only on the
//! engines below them; `source` and `plan` are below `session` (a session refers to their
//! types) and `pipeline` (which runs a resolved session through them), so neither may import
//! those.

use std::path::Path;

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn source_and_plan_do_not_depend_on_session_or_pipeline() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["src/source", "crates/copus-plan/src"] {
        rust_files(&root.join(dir), &mut files);
    }
    assert!(
        files.len() > 5,
        "expected the source and plan modules, found {files:?}"
    );
    let mut offending = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("readable source file");
        for (i, line) in text.lines().enumerate() {
            if line.contains("crate::session") || line.contains("crate::pipeline") {
                // Doc comments may name the modules above; code may not use them.
                if !line.trim_start().starts_with("//") {
                    offending.push(format!("{}:{}: {}", file.display(), i + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        offending.is_empty(),
        "source and plan must not depend on session or pipeline:\n{}",
        offending.join("\n")
    );
}

/// The engine crates under `crates/` and the workspace crates each may depend on (engines
/// below it only; never the app).
const ENGINES: &[(&str, &[&str])] = &[
    ("copus-io", &[]),
    ("copus-stats", &[]),
    ("copus-compute", &[]),
    ("copus-model", &["copus-io", "copus-stats"]),
    ("copus-plan", &["copus-model"]),
];

/// Crates only the app may use: the terminal and the command line belong to it.
const APP_ONLY: &[&str] = &["ratatui", "crossterm", "signal-hook"];

#[test]
fn engines_depend_only_on_engines_below_them() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates");
    for (engine, allowed) in ENGINES {
        let manifest = root.join(engine).join("Cargo.toml");
        let text = std::fs::read_to_string(&manifest)
            .unwrap_or_else(|e| panic!("{}: {e}", manifest.display()));
        let table: toml::Table = text
            .parse()
            .unwrap_or_else(|e| panic!("{}: {e}", manifest.display()));
        let deps = table
            .get("dependencies")
            .and_then(|d| d.as_table())
            .expect("a [dependencies] table");
        for name in deps.keys() {
            let workspace_crate = name == "copus" || name.starts_with("copus-");
            assert!(
                !workspace_crate || allowed.contains(&name.as_str()),
                "{engine} may not depend on {name} (allowed: {allowed:?})"
            );
            assert!(
                !APP_ONLY.contains(&name.as_str()),
                "{engine} may not depend on the app-only crate {name}"
            );
        }
    }
}

#[test]
fn engines_never_name_the_app() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates");
    let mut files = Vec::new();
    for (engine, _) in ENGINES {
        rust_files(&root.join(engine).join("src"), &mut files);
    }
    assert!(
        files.len() > 40,
        "expected the engine sources, found {}",
        files.len()
    );
    let app_paths = [
        "copus::",
        "crate::app",
        "crate::tui",
        "crate::cli",
        "crate::session",
        "crate::pipeline",
        "crate::source",
        "crate::trainer",
    ];
    let mut offending = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("readable source file");
        for (i, line) in text.lines().enumerate() {
            let code = !line.trim_start().starts_with("//");
            if code && app_paths.iter().any(|p| line.contains(p)) {
                offending.push(format!("{}:{}: {}", file.display(), i + 1, line.trim()));
            }
        }
    }
    assert!(
        offending.is_empty(),
        "engines must not name the app:\n{}",
        offending.join("\n")
    );
}
