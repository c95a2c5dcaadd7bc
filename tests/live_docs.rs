//! docs/LIVE.md documents exactly what `copus watch --headless --json` emits: the field table
//! between the `watch-json-fields` markers and the example after `watch-json-example` have the
//! same keys as the real output of a run of `copus demo-train`.

use std::collections::BTreeSet;
use std::process::Command;

fn live_md() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/LIVE.md")).expect("LIVE.md")
}

/// The backquoted names in the first column of the field table.
fn documented_fields(doc: &str) -> BTreeSet<String> {
    let start = doc
        .find("<!-- watch-json-fields -->")
        .expect("the field table's start marker");
    let end = doc
        .find("<!-- /watch-json-fields -->")
        .expect("the field table's end marker");
    doc[start..end]
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .map(str::to_owned)
        .collect()
}

/// The JSON of the example block after its marker.
fn documented_example(doc: &str) -> serde_json::Value {
    let at = doc
        .find("<!-- watch-json-example")
        .expect("the example's marker");
    let rest = &doc[at..];
    let open = rest.find("```json\n").expect("a json block") + "```json\n".len();
    let close = rest[open..].find("```").expect("end of the block");
    serde_json::from_str(&rest[open..open + close]).expect("the example is valid JSON")
}

fn keys(v: &serde_json::Value) -> BTreeSet<String> {
    v.as_object().expect("an object").keys().cloned().collect()
}

#[test]
fn live_md_lists_exactly_the_fields_watch_json_emits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("run.ndjson");
    let bin = env!("CARGO_BIN_EXE_copus");
    let train = Command::new(bin)
        .args(["demo-train", "--steps", "60", "--out"])
        .arg(&file)
        .output()
        .expect("demo-train");
    assert!(
        train.status.success(),
        "{}",
        String::from_utf8_lossy(&train.stderr)
    );
    let out = Command::new(bin)
        .args(["watch"])
        .arg(&file)
        .args([
            "--headless",
            "--until-steps",
            "60",
            "--json",
            "--timeout-s",
            "60",
        ])
        .output()
        .expect("watch");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let real: serde_json::Value = serde_json::from_slice(&out.stdout).expect("watch --json");
    assert_eq!(keys(&real), BTreeSet::from(["summary".to_owned()]));
    let emitted = keys(&real["summary"]);

    let doc = live_md();
    let table = documented_fields(&doc);
    assert_eq!(
        table,
        emitted,
        "docs/LIVE.md's field table differs from `watch --headless --json`: \
         documented but not emitted {:?}, emitted but not documented {:?}",
        table.difference(&emitted).collect::<Vec<_>>(),
        emitted.difference(&table).collect::<Vec<_>>()
    );
    let example = documented_example(&doc);
    assert_eq!(keys(&example), BTreeSet::from(["summary".to_owned()]));
    assert_eq!(keys(&example["summary"]), emitted, "the example's fields");

    // Diagnostics carry the fields the table names.
    for d in real["summary"]["diagnostics"]
        .as_array()
        .expect("diagnostics")
    {
        let k = keys(d);
        let allowed: BTreeSet<String> = ["kind", "severity", "message", "steps"]
            .map(String::from)
            .into();
        assert!(k.is_subset(&allowed), "{k:?}");
        assert!(k.contains("kind") && k.contains("severity") && k.contains("message"));
    }
}
