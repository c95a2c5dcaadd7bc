//! Terminal set-up and guaranteed restoration: raw mode, alternate screen and mouse capture
//! are undone on normal exit, on error (the guard's `Drop`), on a panic of the UI thread (a
//! chained hook), after a background thread's panic (the UI loop leaves and reports it), and
//! on every catchable terminating signal and SIGBUS (see [`crate::signals`]); Ctrl+Z and
//! SIGTSTP suspend with the terminal given back, SIGCONT takes it again.

use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::event::{DisableMouseCapture, EnableMouseCapture};
use ratatui::crossterm::execute;
use ratatui::crossterm::terminal::{
    EnterAlternateScreen, LeaveAlternateScreen, disable_raw_mode, enable_raw_mode,
};
use std::io::{Stdout, stdout};
use std::sync::{Mutex, Once};

/// The terminal type the explorer draws on.
pub type Tui = Terminal<CrosstermBackend<Stdout>>;

/// Owns the terminal while the explorer runs; restores it when dropped.
pub struct TerminalGuard {
    /// The ratatui terminal.
    pub terminal: Tui,
}

/// A panic message from a thread other than the UI thread while the explorer runs: the UI
/// loop picks it up, leaves, and reports it (the hook must not restore the terminal under a
/// running UI, nor print over the alternate screen).
static THREAD_PANIC: Mutex<Option<String>> = Mutex::new(None);
/// The thread that runs the explorer's event loop.
static UI_THREAD: Mutex<Option<std::thread::ThreadId>> = Mutex::new(None);

/// The message of a background thread's panic, if one happened (taken once).
pub fn take_thread_panic() -> Option<String> {
    THREAD_PANIC.lock().ok()?.take()
}

/// Undo everything `enter` did. Safe to call more than once.
pub fn restore() {
    crate::signals::set_tui_active(false);
    let _ = disable_raw_mode();
    let _ = execute!(stdout(), LeaveAlternateScreen, DisableMouseCapture);
    let _ = execute!(stdout(), ratatui::crossterm::cursor::Show);
}

impl TerminalGuard {
    /// Enter raw mode and the alternate screen, capture the mouse, and install a panic hook
    /// that restores the terminal before the panic message is printed.
    pub fn enter() -> std::io::Result<Self> {
        static HOOK: Once = Once::new();
        if let Ok(mut t) = UI_THREAD.lock() {
            *t = Some(std::thread::current().id());
        }
        HOOK.call_once(|| {
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                let ui = UI_THREAD.lock().ok().and_then(|t| *t);
                if crate::signals::tui_active() && Some(std::thread::current().id()) != ui {
                    let name = std::thread::current().name().unwrap_or("worker").to_owned();
                    if let Ok(mut slot) = THREAD_PANIC.lock() {
                        slot.get_or_insert_with(|| format!("thread '{name}' {info}"));
                    }
                    return;
                }
                restore();
                previous(info);
            }));
        });
        crate::signals::save_terminal();
        enable_raw_mode()?;
        crate::signals::set_tui_active(true);
        if let Err(e) = execute!(stdout(), EnterAlternateScreen, EnableMouseCapture) {
            restore();
            return Err(e);
        }
        match Terminal::new(CrosstermBackend::new(stdout())) {
            Ok(terminal) => Ok(Self { terminal }),
            Err(e) => {
                restore();
                Err(e)
            }
        }
    }
}

impl TerminalGuard {
    /// Suspend like `less` and `vim` on Ctrl+Z or SIGTSTP: give the terminal back (cooked
    /// mode, main screen, cursor), stop the process, and on SIGCONT take the terminal again
    /// and clear it so that the next draw repaints everything.
    pub fn suspend(&mut self) -> std::io::Result<()> {
        restore();
        crate::signals::stop_process();
        enable_raw_mode()?;
        crate::signals::set_tui_active(true);
        execute!(stdout(), EnterAlternateScreen, EnableMouseCapture)?;
        self.terminal.clear()
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        restore();
    }
}
