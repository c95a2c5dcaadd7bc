//! Process-wide signal handling that must work from inside a signal handler: restoring the
//! terminal the explorer took over (raw mode, alternate screen, mouse capture, hidden cursor),
//! stopping the explorer cleanly on SIGTERM, SIGINT and SIGHUP, and turning the SIGBUS of a
//! memory-mapped dump file that shrank under the reader into a message naming the file.
//!
//! Everything called from a handler here is async-signal-safe: atomic loads and stores,
//! `write(2)`, `tcsetattr(3)` and `_exit(2)`.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, Ordering};

/// Exit status after a fatal signal that the program turned into an error (SIGBUS on a dump
/// that changed, where the data, not the user, stopped it). A termination signal the user
/// sent (SIGTERM, SIGINT, SIGHUP, …) exits with 128 + its number, as a shell reports it.
pub const SIGNAL_EXIT: i32 = 3;

/// Whether the explorer currently owns the terminal (raw mode, alternate screen).
static TUI_ACTIVE: AtomicBool = AtomicBool::new(false);
/// The terminal's file descriptor whose settings were saved (-1: none).
static TTY_FD: AtomicI32 = AtomicI32::new(-1);
/// The terminal settings before raw mode.
#[cfg(unix)]
static SAVED_TERMIOS: OnceLock<libc::termios> = OnceLock::new();
#[cfg(not(unix))]
static SAVED_TERMIOS: OnceLock<()> = OnceLock::new();

/// What SIGBUS should report: a leaked message, swapped in one atomic store.
static BUS_MSG: AtomicPtr<&'static [u8]> = AtomicPtr::new(std::ptr::null_mut());

/// The escape sequences that undo the explorer's terminal modes: mouse capture (all the
/// modes crossterm enables), the alternate screen, and the hidden cursor.
const RESTORE_SEQ: &[u8] =
    b"\x1b[?1006l\x1b[?1015l\x1b[?1003l\x1b[?1002l\x1b[?1000l\x1b[?1049l\x1b[?25h";

/// Save the terminal's settings so that a signal handler can restore them. Call before raw
/// mode is enabled; the first call wins.
pub fn save_terminal() {
    #[cfg(unix)]
    {
        if SAVED_TERMIOS.get().is_some() {
            return;
        }
        // SAFETY: isatty/open/tcgetattr on a valid descriptor with a zeroed termios out-param.
        unsafe {
            let fd = if libc::isatty(libc::STDIN_FILENO) == 1 {
                libc::STDIN_FILENO
            } else {
                libc::open(c"/dev/tty".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC)
            };
            if fd < 0 {
                return;
            }
            let mut t: libc::termios = std::mem::zeroed();
            if libc::tcgetattr(fd, &mut t) == 0 {
                let _ = SAVED_TERMIOS.set(t);
                TTY_FD.store(fd, Ordering::SeqCst);
            }
        }
    }
}

/// Mark whether the explorer owns the terminal (so that a fatal signal restores it).
pub fn set_tui_active(active: bool) {
    TUI_ACTIVE.store(active, Ordering::SeqCst);
}

/// Whether the explorer owns the terminal.
pub fn tui_active() -> bool {
    TUI_ACTIVE.load(Ordering::SeqCst)
}

/// Restore the terminal from anywhere, including a signal handler: leave the alternate
/// screen, stop mouse capture, show the cursor and put back the saved settings. Does nothing
/// when the explorer does not own the terminal.
pub fn emergency_restore() {
    if !TUI_ACTIVE.swap(false, Ordering::SeqCst) {
        return;
    }
    #[cfg(unix)]
    // SAFETY: write(2) and tcsetattr(3) are async-signal-safe; the termios was written once
    // before TUI_ACTIVE was set.
    unsafe {
        let _ = libc::write(
            libc::STDOUT_FILENO,
            RESTORE_SEQ.as_ptr().cast(),
            RESTORE_SEQ.len(),
        );
        let fd = TTY_FD.load(Ordering::SeqCst);
        if let (true, Some(t)) = (fd >= 0, SAVED_TERMIOS.get()) {
            let _ = libc::tcsetattr(fd, libc::TCSANOW, t);
        }
    }
}

/// Write `msg` to stderr with `write(2)` (async-signal-safe).
fn write_stderr(msg: &[u8]) {
    #[cfg(unix)]
    // SAFETY: a valid buffer of `msg.len()` bytes.
    unsafe {
        let _ = libc::write(libc::STDERR_FILENO, msg.as_ptr().cast(), msg.len());
    }
    #[cfg(not(unix))]
    let _ = msg;
}

/// Say what a SIGBUS means right now: `what` names the memory-mapped file or directory being
/// read (e.g. "dump step directory runs/step_40"). The text is kept for the life of the
/// process (a few dozen bytes per step).
pub fn set_mapped_context(what: &str) {
    install_sigbus_handler();
    let msg = format!(
        "copus: {what}: a memory-mapped file shrank or vanished while it was read (SIGBUS); \
         rerun once the files are complete\n"
    );
    let text: &'static [u8] = Box::leak(msg.into_bytes().into_boxed_slice());
    // Never freed: a handler racing with this store reads the old message whole.
    BUS_MSG.store(Box::into_raw(Box::new(text)), Ordering::SeqCst);
}

#[cfg(unix)]
extern "C" fn on_sigbus(_sig: libc::c_int) {
    emergency_restore();
    let p = BUS_MSG.load(Ordering::SeqCst);
    if p.is_null() {
        write_stderr(b"copus: bus error (SIGBUS) reading a memory-mapped file\n");
    } else {
        // SAFETY: p comes from Box::into_raw of a leaked &'static [u8] and is never freed.
        write_stderr(unsafe { *p });
    }
    // SAFETY: _exit is async-signal-safe.
    unsafe { libc::_exit(SIGNAL_EXIT) }
}

/// Exit status after the process ran out of memory (an allocation failed and the runtime
/// aborted): within 1–100, unlike the 134 of a plain abort.
pub const OUT_OF_MEMORY_EXIT: i32 = 4;

/// The message SIGABRT prints, written once at start-up (it names the memory limit in force).
static ABORT_MSG: OnceLock<Vec<u8>> = OnceLock::new();

#[cfg(unix)]
extern "C" fn on_sigabrt(_sig: libc::c_int) {
    emergency_restore();
    match ABORT_MSG.get() {
        Some(m) => write_stderr(m),
        None => write_stderr(b"copus: aborted (out of memory?)\n"),
    }
    // SAFETY: _exit is async-signal-safe.
    unsafe { libc::_exit(OUT_OF_MEMORY_EXIT) }
}

/// Turn the abort that follows a failed allocation (Rust prints "memory allocation of N bytes
/// failed", then aborts) into a message that says what to do and exit status
/// [`OUT_OF_MEMORY_EXIT`], with the terminal restored if the explorer owned it. Call once at
/// start-up.
pub fn install_abort_handler() {
    #[cfg(unix)]
    {
        let limit = {
            let mut r = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            // SAFETY: getrlimit with a valid out-parameter.
            let ok = unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut r) } == 0;
            (ok && r.rlim_cur != libc::RLIM_INFINITY).then_some(r.rlim_cur)
        };
        let why = match limit {
            Some(bytes) => format!(
                "the address-space limit in force (ulimit -v) is {} MiB; raise it",
                bytes >> 20
            ),
            None => "free some memory".to_string(),
        };
        let msg = format!(
            "copus: out of memory (the allocation above failed): {why}, or give the command \
             less to hold (analyze --max-records, a shorter run for watch, a smaller search)\n"
        );
        let _ = ABORT_MSG.set(msg.into_bytes());
        // SAFETY: installing a handler that only calls async-signal-safe functions.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_sigabrt as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(libc::SIGABRT, &sa, std::ptr::null_mut());
        }
    }
}

/// Install the SIGBUS handler (once per process).
pub fn install_sigbus_handler() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    #[cfg(unix)]
    ONCE.call_once(|| {
        // SAFETY: installing a handler that only calls async-signal-safe functions.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_sigbus as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(libc::SIGBUS, &sa, std::ptr::null_mut());
        }
    });
    #[cfg(not(unix))]
    ONCE.call_once(|| {});
}

/// The signals the explorer stops on, restoring the terminal: every catchable signal whose
/// default action ends the process (termination, hang-up, quit, the user signals, an alarm
/// and a broken pipe).
#[cfg(unix)]
pub const STOP_SIGNALS: [i32; 8] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGALRM,
    libc::SIGPIPE,
];
#[cfg(not(unix))]
pub const STOP_SIGNALS: [i32; 0] = [];

/// Set by SIGTSTP while [`StopSignals`] is registered: the event loop suspends (terminal
/// restored, process stopped) and redraws when continued.
static SUSPEND_REQUESTED: AtomicBool = AtomicBool::new(false);

/// Whether a SIGTSTP asked the explorer to suspend since the last call (taken once).
pub fn take_suspend_request() -> bool {
    SUSPEND_REQUESTED.swap(false, Ordering::SeqCst)
}

/// Stop the process as a shell's job control would (SIGSTOP cannot be caught, so the
/// explorer's own SIGTSTP handler does not run again); returns when the process is continued
/// (SIGCONT, e.g. `fg`). The caller restores the terminal before and takes it back after.
pub fn stop_process() {
    #[cfg(unix)]
    // SAFETY: raise(3) with a valid signal number.
    unsafe {
        libc::raise(libc::SIGSTOP);
    }
}

/// The last termination signal received while [`StopSignals`] was registered (0: none).
static STOP_SIGNAL: AtomicI32 = AtomicI32::new(0);

/// Name of a termination signal.
pub fn signal_name(sig: i32) -> &'static str {
    #[cfg(unix)]
    match sig {
        libc::SIGTERM => return "SIGTERM",
        libc::SIGINT => return "SIGINT",
        libc::SIGHUP => return "SIGHUP",
        libc::SIGQUIT => return "SIGQUIT",
        libc::SIGUSR1 => return "SIGUSR1",
        libc::SIGUSR2 => return "SIGUSR2",
        libc::SIGALRM => return "SIGALRM",
        libc::SIGPIPE => return "SIGPIPE",
        _ => {}
    }
    let _ = sig;
    "a termination signal"
}

/// Handlers for the explorer's lifetime: SIGTSTP asks it to suspend (see
/// [`take_suspend_request`]); of the [`STOP_SIGNALS`], the first signal asks the
/// event loop to stop (it restores the terminal on its way out); a second one, if the loop
/// does not get there, restores the terminal from the handler and exits with 128 + its
/// number, as the first does (a shell's convention). Dropping the value puts the previous handlers back.
pub struct StopSignals {
    #[cfg(unix)]
    ids: Vec<signal_hook::SigId>,
}

/// The signals a headless command (`watch --headless`) stops on, finishing its output first:
/// Ctrl+C, a terminal hang-up and `kill`'s default. A broken pipe keeps its default action.
#[cfg(unix)]
pub const HEADLESS_STOP_SIGNALS: [i32; 3] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP];
#[cfg(not(unix))]
pub const HEADLESS_STOP_SIGNALS: [i32; 0] = [];

/// A headless command stopped by a termination signal after writing what it had: exits with
/// 128 + the signal's number, as a shell reports it.
#[derive(Debug, thiserror::Error)]
#[error("stopped by {}", signal_name(*.0))]
pub struct StoppedBySignal(pub i32);

impl StopSignals {
    /// Register the handlers.
    pub fn register() -> std::io::Result<Self> {
        Self::register_for(&STOP_SIGNALS, true)
    }

    /// Register the handlers a headless command needs: the [`HEADLESS_STOP_SIGNALS`] ask it
    /// to stop (a second one ends the process at once, 128 + its number); job control
    /// (SIGTSTP) keeps its default.
    pub fn register_headless() -> std::io::Result<Self> {
        Self::register_for(&HEADLESS_STOP_SIGNALS, false)
    }

    fn register_for(signals: &[i32], suspend: bool) -> std::io::Result<Self> {
        STOP_SIGNAL.store(0, Ordering::SeqCst);
        #[cfg(unix)]
        {
            let mut ids = Vec::new();
            for &sig in signals {
                // SAFETY: the closure only uses atomics, write(2), tcsetattr(3) and _exit(2).
                let id = unsafe {
                    signal_hook::low_level::register(sig, move || {
                        if STOP_SIGNAL.swap(sig, Ordering::SeqCst) != 0 {
                            emergency_restore();
                            write_stderr(b"copus: stopped by a second signal\n");
                            libc::_exit(128 + sig);
                        }
                    })
                }?;
                ids.push(id);
            }
            if suspend {
                SUSPEND_REQUESTED.store(false, Ordering::SeqCst);
                // SAFETY: the closure only stores an atomic.
                let id = unsafe {
                    signal_hook::low_level::register(libc::SIGTSTP, || {
                        SUSPEND_REQUESTED.store(true, Ordering::SeqCst);
                    })
                }?;
                ids.push(id);
            }
            Ok(Self { ids })
        }
        #[cfg(not(unix))]
        {
            let _ = (signals, suspend);
            Ok(Self {})
        }
    }

    /// The signal received since registration, if any.
    pub fn received(&self) -> Option<i32> {
        match STOP_SIGNAL.load(Ordering::SeqCst) {
            0 => None,
            s => Some(s),
        }
    }
}

impl Drop for StopSignals {
    fn drop(&mut self) {
        #[cfg(unix)]
        for id in self.ids.drain(..) {
            signal_hook::low_level::unregister(id);
        }
    }
}

/// How often the hang-up watch looks at the terminal, in milliseconds.
const HANGUP_POLL_MS: i32 = 200;
/// How long a received stop signal may wait for the event loop before the watch ends the
/// process itself, in milliseconds.
const STOP_GRACE_MS: u64 = 2_000;

/// Whether the terminal the explorer owns has hung up (its pseudo-terminal closed, e.g. the
/// tmux session or the SSH connection went away). A terminal reading end-of-file makes the
/// terminal library's reader spin without returning, so the event loop cannot notice it.
#[cfg(unix)]
fn terminal_hung_up() -> bool {
    let fd = TTY_FD.load(Ordering::SeqCst);
    if fd < 0 {
        return false;
    }
    // events = 0: only POLLHUP, POLLERR and POLLNVAL are reported, never pending input.
    let mut pfd = libc::pollfd {
        fd,
        events: 0,
        revents: 0,
    };
    // SAFETY: one valid pollfd; poll(2) with a bounded timeout.
    let n = unsafe { libc::poll(&mut pfd, 1, HANGUP_POLL_MS) };
    n > 0 && pfd.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0
}

/// A background thread for the explorer's lifetime that ends the process when the terminal
/// hangs up (exit status [`SIGNAL_EXIT`]; there is no terminal left to restore or to ask
/// about unsaved changes), and when a stop signal was received but the event loop has not
/// left within two seconds (terminal restored first; 128 + the signal's number). Dropping the value stops the thread.
pub struct HangupWatch {
    stop: std::sync::Arc<AtomicBool>,
}

impl HangupWatch {
    /// Start watching the terminal saved by [`save_terminal`].
    pub fn spawn() -> Self {
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        #[cfg(unix)]
        {
            let flag = stop.clone();
            let _ = std::thread::Builder::new()
                .name("copus-hangup".into())
                .spawn(move || {
                    let mut signalled_at: Option<std::time::Instant> = None;
                    while !flag.load(Ordering::SeqCst) {
                        if terminal_hung_up() {
                            TUI_ACTIVE.store(false, Ordering::SeqCst);
                            write_stderr(b"copus: the terminal hung up; stopped\n");
                            // SAFETY: _exit ends the process without running destructors
                            // that could block on the dead terminal.
                            unsafe { libc::_exit(SIGNAL_EXIT) }
                        }
                        let sig = STOP_SIGNAL.load(Ordering::SeqCst);
                        if sig != 0 {
                            let since = *signalled_at.get_or_insert_with(std::time::Instant::now);
                            if since.elapsed().as_millis() > u128::from(STOP_GRACE_MS)
                                && !flag.load(Ordering::SeqCst)
                            {
                                emergency_restore();
                                write_stderr(b"copus: stopped by a signal\n");
                                // SAFETY: as above; the terminal was restored first.
                                unsafe { libc::_exit(128 + sig) }
                            }
                        }
                    }
                });
        }
        Self { stop }
    }
}

impl Drop for HangupWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}
