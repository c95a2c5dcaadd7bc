//! Signals and background failures, through the real binary: a dump file truncated while it
//! is memory-mapped (SIGBUS), every catchable terminating signal sent to the explorer from
//! outside, Ctrl+Z and SIGTSTP (suspend with the terminal given back, redraw on SIGCONT), and a
//! panic on the explorer's worker thread. The terminal (raw mode, alternate screen, mouse
//! capture, cursor) must be restored and the exit status must say what happened. The explorer
//! cases run in tmux, whose pane flags show the terminal modes the program left behind.
#![cfg(target_os = "linux")]

use crate::reliability_support;
use crate::tmux_support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tmux_support::Tmux;

#[test]
fn a_dump_truncated_while_mapped_is_reported_not_a_silent_sigbus() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Two ranks of one 96 MB F32 tensor each: the reduction takes long enough to truncate a
    // file after it is mapped and before it is read to the end.
    let elems = 24 << 20;
    let zeros = vec![0u8; elems * 4];
    for k in 0..2 {
        let part = dir.path().join(format!("step_1/p{k}"));
        std::fs::create_dir_all(&part).expect("mkdir");
        reliability_support::write_npy_raw(
            &part.join("w.npy"),
            "<f4",
            &format!("({elems},)"),
            &zeros,
        );
        std::fs::write(part.join("samples.txt"), "4").expect("samples");
    }
    drop(zeros);
    let victim = dir.path().join("step_1/p1/w.npy");
    let child = Command::new(env!("CARGO_BIN_EXE_copus"))
        .args(["analyze", "--device", "cpu", "--samples", "4"])
        .arg(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    // Wait until the reducer has mapped the file, then cut it short.
    let maps = format!("/proc/{}/maps", child.id());
    let start = Instant::now();
    loop {
        let m = std::fs::read_to_string(&maps).unwrap_or_default();
        if m.contains("p1/w.npy") {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "never mapped");
        std::thread::sleep(Duration::from_millis(1));
    }
    std::fs::OpenOptions::new()
        .write(true)
        .open(&victim)
        .expect("open")
        .set_len(128)
        .expect("truncate");
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(3),
        "status {:?}: {stderr}",
        out.status
    );
    assert!(
        stderr.contains("step_1") && stderr.contains("SIGBUS"),
        "{stderr}"
    );
}

/// The pane's terminal modes after the program ended, and what the shell printed.
struct After {
    alternate: bool,
    mouse: bool,
    cursor_visible: bool,
    screen: String,
}

fn pane_after(t: &Tmux) -> After {
    let f = String::from_utf8_lossy(
        &t.cmd(&[
            "display-message",
            "-p",
            "-t",
            "e2e",
            "#{alternate_on} #{mouse_any_flag}#{mouse_button_flag}#{mouse_standard_flag}#{mouse_all_flag} #{cursor_flag}",
        ])
        .stdout,
    )
    .trim()
    .to_owned();
    let parts: Vec<&str> = f.split(' ').collect();
    After {
        alternate: parts.first() == Some(&"1"),
        mouse: parts.get(1).is_some_and(|m| m.contains('1')),
        cursor_visible: parts.get(2) == Some(&"1"),
        screen: t.screen(),
    }
}

/// Start the explorer on the demo in tmux, under a shell that prints its exit status and the
/// tty's line discipline afterwards.
fn explorer(tag: &str, env: &str) -> (Tmux, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let pid = dir.path().join("pid");
    let bin = env!("CARGO_BIN_EXE_copus");
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("sessions/demo.ron");
    let script = format!(
        "sh -c 'echo $$ > {pid}; {env} exec {bin} open {demo}'; echo \"rc=$?\"; \
         stty -a | tr \" ;\" \"\\n\\n\" | grep -xE -- \"-?(icanon|echo)\" | tr \"\\n\" \" \"; echo END; sleep 60",
        pid = pid.display(),
        demo = demo.display(),
    );
    let t = Tmux::start(
        tag,
        120,
        40,
        &format!("bash -c '{}'", script.replace('\'', "'\\''")),
    );
    (t, dir)
}

fn send(dir: &Path, sig: &str) {
    let start = Instant::now();
    let pid = loop {
        if let Ok(p) = std::fs::read_to_string(dir.join("pid"))
            && !p.trim().is_empty()
        {
            break p.trim().to_owned();
        }
        assert!(start.elapsed() < Duration::from_secs(10), "no pid");
        std::thread::sleep(Duration::from_millis(50));
    };
    let ok = Command::new("kill")
        .args([&format!("-{sig}"), &pid])
        .status()
        .expect("kill");
    assert!(ok.success());
}

fn assert_restored(t: &Tmux, code: &str) {
    let s = t.wait_for("END");
    let a = pane_after(t);
    assert!(!a.alternate, "alternate screen left on:\n{s}");
    assert!(!a.mouse, "mouse capture left on:\n{s}");
    assert!(a.cursor_visible, "cursor left hidden:\n{s}");
    assert!(a.screen.contains(&format!("rc={code}")), "{}", a.screen);
    assert!(
        a.screen.contains("icanon echo") && !a.screen.contains("-icanon"),
        "tty left raw:\n{}",
        a.screen
    );
}

#[test]
fn termination_signals_restore_the_terminal() {
    // The exit status a shell gives a process the signal ended: 128 + its number.
    for (sig, number) in [
        ("TERM", libc::SIGTERM),
        ("INT", libc::SIGINT),
        ("HUP", libc::SIGHUP),
        ("QUIT", libc::SIGQUIT),
        ("USR1", libc::SIGUSR1),
        ("USR2", libc::SIGUSR2),
        ("ALRM", libc::SIGALRM),
        ("PIPE", libc::SIGPIPE),
    ] {
        let (t, dir) = explorer(&format!("sig{sig}"), "");
        t.wait_for("Goodput");
        send(dir.path(), sig);
        assert_restored(&t, &(128 + number).to_string());
        let s = t.screen();
        assert!(s.contains(&format!("stopped by SIG{sig}")), "{s}");
        assert!(!s.contains("unsaved"), "{s}");
    }
}

/// A signal cannot ask before dropping unsaved changes: the explorer says it dropped them (it
/// said only "stopped by SIGTERM; terminal restored"), and says nothing of the kind when
/// there were none (above).
#[test]
fn a_signal_names_the_unsaved_changes_it_dropped() {
    let (t, dir) = explorer("sigdirty", "");
    t.wait_for("Goodput");
    t.keys(&["2", "Right"]);
    t.wait_for("[modified]");
    send(dir.path(), "TERM");
    assert_restored(&t, &(128 + libc::SIGTERM).to_string());
    let s = t.screen();
    assert!(
        s.contains("unsaved changes were lost (save with s before"),
        "{s}"
    );
}

#[test]
fn a_worker_panic_ends_the_explorer_with_a_message_and_status_1() {
    let (t, _dir) = explorer("panic", "COPUS_TEST_WORKER_PANIC=1");
    assert_restored(&t, "1");
    let s = t.screen();
    assert!(s.contains("deliberate worker panic"), "{s}");
    assert!(s.contains("internal error"), "{s}");
}

/// Whether process `pid` has ended (gone, or a zombie waiting for its parent).
fn ended(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

#[test]
fn the_explorer_ends_when_its_terminal_goes_away() {
    // Closing the pseudo-terminal (the tmux server killed, an SSH connection dropped) makes
    // terminal reads return end-of-file; the explorer must end, not spin on them forever.
    let (t, dir) = explorer("hangup", "");
    t.wait_for("Goodput");
    let pid = std::fs::read_to_string(dir.path().join("pid")).expect("pid");
    let pid = pid.trim().to_owned();
    assert!(!ended(&pid), "the explorer is not running");
    drop(t); // kills the tmux server and with it the terminal
    let start = Instant::now();
    while !ended(&pid) {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the explorer (pid {pid}) still runs 5 s after its terminal went away"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The process state letter of `pid` ('T': stopped).
fn state(pid: &str) -> char {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, r)| r.trim_start().chars().next())
        })
        .flatten()
        .unwrap_or('?')
}

/// Wait until `pred` holds, at most 10 s; the message says what never happened.
fn wait_until(what: &str, mut pred: impl FnMut() -> bool) {
    let start = Instant::now();
    while !pred() {
        assert!(start.elapsed() < Duration::from_secs(10), "{what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The line discipline of the pane's terminal, read from outside (`stty -F`).
fn pane_tty_modes(t: &Tmux) -> String {
    let tty = String::from_utf8_lossy(
        &t.cmd(&["display-message", "-p", "-t", "e2e", "#{pane_tty}"])
            .stdout,
    )
    .trim()
    .to_owned();
    let out = Command::new("stty")
        .args(["-F", &tty, "-a"])
        .output()
        .expect("stty");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn has_mode(modes: &str, mode: &str) -> bool {
    modes
        .split(|c: char| c.is_whitespace() || c == ';')
        .any(|w| w == mode)
}

#[test]
fn suspend_gives_the_terminal_back_and_continue_redraws() {
    // Ctrl+Z arrives as a key in raw mode; SIGTSTP from outside (kill -TSTP) as a signal.
    for how in ["key", "signal"] {
        let (t, dir) = explorer(&format!("tstp{how}"), "");
        t.wait_for("Goodput");
        let pid = std::fs::read_to_string(dir.path().join("pid")).expect("pid");
        let pid = pid.trim().to_owned();
        match how {
            "key" => t.keys(&["C-z"]),
            _ => send(dir.path(), "TSTP"),
        }
        wait_until(&format!("{how}: the explorer did not stop"), || {
            state(&pid) == 'T'
        });
        let a = pane_after(&t);
        assert!(!a.alternate, "{how}: alternate screen kept while stopped");
        assert!(!a.mouse, "{how}: mouse capture kept while stopped");
        assert!(a.cursor_visible, "{how}: cursor hidden while stopped");
        let modes = pane_tty_modes(&t);
        assert!(
            has_mode(&modes, "icanon") && has_mode(&modes, "echo"),
            "{how}: tty raw while stopped: {modes}"
        );
        send(dir.path(), "CONT");
        wait_until(&format!("{how}: no redraw after SIGCONT"), || {
            pane_after(&t).alternate && t.screen().contains("Goodput")
        });
        assert!(
            !has_mode(&pane_tty_modes(&t), "icanon"),
            "{how}: not raw again"
        );
        t.keys(&["q"]);
        assert_restored(&t, "0");
    }
}
