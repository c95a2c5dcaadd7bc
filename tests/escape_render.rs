//! Names read from files (layer names, run and session names) reach the terminal escaped: a
//! name holding ESC and a CSI sequence is shown as `\u{1b}[…`, never as a raw ESC byte that
//! would drive the terminal, in the explorer's rendered buffer and in text CLI output.

use crate::render_support;
use copus::app::{Msg, update};
use copus::cli::open::{OpenArgs, adhoc_session, prepared};
use copus::session::Panel;
use copus::ui::palette::ColorMode;
use std::path::{Path, PathBuf};
use std::process::Command;

const EVIL_LAYER: &str = "blk\u{1b}[2J\u{1b}]0;pwned\u{7}";

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("copus-escape-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// The bundled sample run with one layer renamed to `EVIL_LAYER`, in a file whose own name
/// holds an escape sequence too.
fn evil_stats(dir: &Path) -> PathBuf {
    let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/data/sample-run.ndjson");
    let text = std::fs::read_to_string(sample).expect("sample run");
    let json_name = serde_json::to_string(EVIL_LAYER).expect("json string");
    let text = text.replace("\"blocks\"", &json_name);
    let path = dir.join("run\u{1b}[31m.ndjson");
    std::fs::write(&path, text).expect("write");
    path
}

fn screen(app: &copus::app::App, w: u16, h: u16) -> String {
    render_support::screen(app, w, h, ColorMode::Indexed)
}

#[test]
fn the_explorer_shows_layer_and_run_names_escaped() {
    let dir = scratch("tui");
    let path = evil_stats(&dir);
    let args = OpenArgs {
        device: copus::compute::Device::Cpu,
        ..OpenArgs::for_path(&path)
    };
    let resolved = adhoc_session(&args).expect("ad-hoc session");
    let mut app = prepared(resolved, copus::compute::Device::Cpu).expect("prepared");
    update(&mut app, Msg::ShowSide(Panel::Estimators));
    // Tall enough that the estimators panel reaches its layer table below the diagnostics.
    let text = screen(&app, 200, 90);
    assert!(
        !text.contains('\u{1b}') && !text.contains('\u{7}'),
        "a raw control character reached the screen:\n{text}"
    );
    assert!(
        text.contains("blk\\u{1b}[2J"),
        "the layer is shown, escaped:\n{text}"
    );
    assert!(
        text.contains("run\\u{1b}[31m"),
        "the run is named, escaped:\n{text}"
    );
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn text_cli_output_escapes_layer_and_session_names() {
    let dir = scratch("cli");
    let stats = evil_stats(&dir);
    let bin = env!("CARGO_BIN_EXE_copus");
    let out = Command::new(bin)
        .arg("analyze")
        .arg(&stats)
        .output()
        .expect("runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        !out.stdout.contains(&0x1b),
        "raw ESC in analyze output:\n{text}"
    );
    assert!(text.contains("blk\\u{1b}[2J"), "{text}");
    // A session whose name holds an escape sequence: grid and plan print it escaped.
    let demo =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("sessions/demo.ron"))
            .expect("demo");
    let name_start = demo.find("name: \"").expect("a name field") + "name: \"".len();
    let evil = format!(
        "{}\\u{{1b}}[31mred {}",
        &demo[..name_start],
        &demo[name_start..]
    );
    let session = dir.join("evil.ron");
    std::fs::write(&session, evil).expect("write session");
    for cmd in ["grid", "plan"] {
        let out = Command::new(bin)
            .arg(cmd)
            .arg(&session)
            .output()
            .expect("runs");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{cmd}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            !out.stdout.contains(&0x1b),
            "{cmd}: raw ESC in output:\n{text}"
        );
        assert!(
            text.contains("\\u{1b}[31mred"),
            "{cmd}: the name is shown:\n{text}"
        );
    }
    std::fs::remove_dir_all(dir).ok();
}
