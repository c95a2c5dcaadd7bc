//! End-to-end in tmux: the real binary on the demo, at 80×24 and 200×60, opens the explanation
//! of the selected cell (`x`), closes it with Esc, marks the best cell (`m`), selects another
//! layout and compares the two side by side, and quits.

use crate::tmux_support;
use std::thread::sleep;
use std::time::Duration;
use tmux_support::Tmux;

fn explain_and_compare(tag: &str, w: u16, h: u16) {
    let dir = tempfile::tempdir().expect("tempdir");
    let command = format!(
        "cd {} && {}; echo COPUS-EXITED $?; sleep 30",
        dir.path().display(),
        env!("CARGO_BIN_EXE_copus")
    );
    let tmux = Tmux::start(tag, w, h, &command);
    tmux.wait_for("best: batch");
    // The help lists the keys.
    tmux.keys(&["?"]);
    tmux.wait_for("explain the selected cell");
    tmux.keys(&["?"]);
    // The best cell explained: bars with their legend, chosen options.
    tmux.keys(&["*", "x"]);
    let s = tmux.wait_for("Step time");
    for want in ["C compute", "Memory per GPU", "ZeRO-", "recompute"] {
        assert!(s.contains(want), "{want}:\n{s}");
    }
    tmux.keys(&["Escape"]);
    sleep(Duration::from_millis(300));
    assert!(!tmux.screen().contains("Step time"), "Esc closes it");
    // Mark the best cell, move to another layout, compare.
    tmux.keys(&["m"]);
    tmux.wait_for("marked");
    // `*` focused the heatmap: ↓ selects the next layout at the same batch.
    tmux.keys(&["Down"]);
    tmux.keys(&["x"]);
    let s = tmux.wait_for("B (selected)");
    assert!(s.contains("A (marked)"), "{s}");
    assert!(s.contains("goodput"), "{s}");
    // ↓ scrolls the comparison down to the efficiency and goodput rows.
    for _ in 0..30 {
        tmux.keys(&["Down"]);
    }
    tmux.wait_for("stat. eff.");
    tmux.keys(&["Escape"]);
    sleep(Duration::from_millis(300));
    assert!(!tmux.screen().contains("B (selected)"), "Esc closes it");
    tmux.keys(&["q"]);
    tmux.wait_for("COPUS-EXITED 0");
}

#[test]
fn explanation_and_comparison_at_80x24() {
    explain_and_compare("explain-small", 80, 24);
}

#[test]
fn explanation_and_comparison_at_200x60() {
    explain_and_compare("explain-large", 200, 60);
}
