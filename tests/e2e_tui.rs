//! End-to-end: the real binary in a pseudo-terminal (tmux). Opens a copy of the demo session,
//! checks the panels, scrubs, opens help, saves, quits, and checks that the terminal came back
//! and the saved session reopens where it was left.

use copus::session::Session;
use std::path::Path;
use std::process::Command;
use std::thread::sleep;
use std::time::{Duration, Instant};

struct Tmux {
    socket: String,
}

impl Tmux {
    fn cmd(&self, args: &[&str]) -> std::process::Output {
        Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("tmux runs (CI installs it; install tmux to run this test)")
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.cmd(&["capture-pane", "-p", "-t", "e2e"]).stdout).into()
    }

    fn keys(&self, keys: &[&str]) {
        for k in keys {
            self.cmd(&["send-keys", "-t", "e2e", k]);
            sleep(Duration::from_millis(60));
        }
    }

    fn wait_for(&self, what: &str) -> String {
        let start = Instant::now();
        loop {
            let s = self.screen();
            if s.contains(what) {
                return s;
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "timed out waiting for {what:?}; screen:\n{s}"
            );
            sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .output();
    }
}

fn step_in_title(screen: &str) -> u64 {
    let at = screen.find("· step ").expect("title shows the step");
    screen[at + "· step ".len()..]
        .split_whitespace()
        .next()
        .and_then(|s| s.parse().ok())
        .expect("step number")
}

#[test]
fn demo_opens_scrubs_helps_saves_and_quits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let session = dir.path().join("demo.ron");
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("sessions/demo.ron");
    std::fs::copy(&demo, &session).expect("copy demo");
    let tmux = Tmux {
        socket: format!("copus-e2e-{}", std::process::id()),
    };
    let command = format!(
        "{} open {}; echo COPUS-EXITED $?; sleep 30",
        env!("CARGO_BIN_EXE_copus"),
        session.display()
    );
    let out = tmux.cmd(&[
        "new-session",
        "-d",
        "-s",
        "e2e",
        "-x",
        "120",
        "-y",
        "36",
        &command,
    ]);
    assert!(out.status.success(), "tmux new-session failed: {out:?}");

    let first = tmux.wait_for("Recommendation");
    assert!(first.contains("B_crit timeline"), "{first}");
    assert!(first.contains("Goodput"), "{first}");
    tmux.wait_for("best: batch");
    let step0 = step_in_title(&tmux.screen());

    tmux.keys(&["Right", "Right", "Right", "Right", "Right"]);
    sleep(Duration::from_millis(300));
    let step5 = step_in_title(&tmux.screen());
    assert!(
        step5 > step0,
        "scrubbing right advances the step: {step0} → {step5}"
    );

    tmux.keys(&["?"]);
    tmux.wait_for("this help");
    tmux.keys(&["?"]);

    tmux.keys(&["s"]);
    tmux.wait_for("saved");
    tmux.keys(&["q"]);
    let after = tmux.wait_for("COPUS-EXITED 0");
    assert!(
        !after.contains("Recommendation"),
        "the alternate screen is left on quit:\n{after}"
    );

    let saved = Session::load(&session).expect("saved session reloads");
    assert_eq!(
        saved.view.cursor, 5,
        "the saved session reopens where it was left"
    );
}
