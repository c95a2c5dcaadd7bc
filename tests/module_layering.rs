//! Layering guard: `source` and `plan` are below `session` (a session refers to their types) and
//! `pipeline` (which runs a resolved session through them), so neither may import those.

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
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    for dir in ["source", "plan"] {
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
