//! End-to-end: the explorer follows a live run. The built-in trainer writes protocol lines to
//! a file while `copus watch FILE` runs in a tmux pseudo-terminal: the step count grows, follow
//! mode keeps the cursor at the head, scrubbing away leaves it, and `q` restores the terminal.

use crate::tmux_support;
use std::process::{Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};
use tmux_support::Tmux;

/// N of the status line's "live: N steps, M malformed".
fn live_steps(screen: &str) -> Option<u64> {
    screen
        .match_indices("live: ")
        .filter_map(|(at, _)| {
            let mut words = screen[at + 6..].split_whitespace();
            let n = words.next()?.parse().ok()?;
            (words.next()? == "steps,").then_some(n)
        })
        .next()
}

#[test]
fn watch_follows_a_growing_run_in_the_explorer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("run.ndjson");
    let mut train = Command::new(env!("CARGO_BIN_EXE_copus"))
        .args([
            "demo-train",
            "--steps",
            "400",
            "--step-delay-ms",
            "25",
            "--out",
        ])
        .arg(&file)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start demo-train");
    let command = format!(
        "{} watch {}; echo COPUS-EXITED $?; sleep 30",
        env!("CARGO_BIN_EXE_copus"),
        file.display()
    );
    let tmux = Tmux::start("live", 120, 36, &command);
    let first = tmux.wait_for("following the head");
    let n1 = live_steps(&first).expect("step count on the status line");
    // Opened without --model or a cluster: the title says the heatmap's model and cluster
    // are copus's defaults, not the run's.
    assert!(first.contains("model and cluster: copus's"), "{first}");
    // The built-in trainer's samples are 1 token, llama-7b's 4096: said, not laid silently.
    tmux.wait_for("⚠ the run counts 1 token per sample");
    let start = Instant::now();
    let n2 = loop {
        sleep(Duration::from_millis(200));
        let n = live_steps(&tmux.screen()).unwrap_or(0);
        if n > n1 || start.elapsed() > Duration::from_secs(20) {
            break n;
        }
    };
    assert!(n2 > n1, "the run grows on screen: {n1} → {n2}");
    assert!(tmux.screen().contains("· step "));
    tmux.keys(&["Home"]);
    tmux.wait_for("End resumes following");
    tmux.keys(&["End"]);
    tmux.wait_for("following the head");
    tmux.keys(&["q"]);
    let after = tmux.wait_for("COPUS-EXITED 0");
    assert!(
        !after.contains("Goodput"),
        "alternate screen left:\n{after}"
    );
    let _ = train.kill();
    let _ = train.wait();
}
