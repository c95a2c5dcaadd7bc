//! A tmux-driven pseudo-terminal for end-to-end tests of the real binary.
#![allow(dead_code)]

use std::process::Command;
use std::thread::sleep;
use std::time::{Duration, Instant};

/// One tmux server (own socket) running one window named `e2e`.
pub struct Tmux {
    pub socket: String,
}

impl Tmux {
    /// Start `command` in a new detached session of `w`×`h` on a socket named after `tag`.
    pub fn start(tag: &str, w: u16, h: u16, command: &str) -> Self {
        let t = Tmux {
            socket: format!("copus-{tag}-{}", std::process::id()),
        };
        let (w, h) = (w.to_string(), h.to_string());
        let out = t.cmd(&[
            "new-session",
            "-d",
            "-s",
            "e2e",
            "-x",
            &w,
            "-y",
            &h,
            command,
        ]);
        assert!(out.status.success(), "tmux new-session failed: {out:?}");
        t
    }

    pub fn cmd(&self, args: &[&str]) -> std::process::Output {
        Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("tmux runs (CI installs it; install tmux to run this test)")
    }

    pub fn screen(&self) -> String {
        String::from_utf8_lossy(&self.cmd(&["capture-pane", "-p", "-t", "e2e"]).stdout).into()
    }

    pub fn keys(&self, keys: &[&str]) {
        for k in keys {
            self.cmd(&["send-keys", "-t", "e2e", k]);
            sleep(Duration::from_millis(60));
        }
    }

    pub fn wait_for(&self, what: &str) -> String {
        self.wait_for_within(what, Duration::from_secs(20))
    }

    /// [`Tmux::wait_for`] with a longer limit, for screens that need work first (a lesson
    /// that trains and branches a run in the debug build).
    pub fn wait_for_within(&self, what: &str, limit: Duration) -> String {
        let start = Instant::now();
        loop {
            let s = self.screen();
            if s.contains(what) {
                return s;
            }
            assert!(
                start.elapsed() < limit,
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
