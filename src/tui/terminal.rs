//! Terminal set-up and guaranteed restoration: raw mode, alternate screen and mouse capture
//! are undone on normal exit, on error (the guard's `Drop`) and on panic (a chained hook).

use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::event::{DisableMouseCapture, EnableMouseCapture};
use ratatui::crossterm::execute;
use ratatui::crossterm::terminal::{
    EnterAlternateScreen, LeaveAlternateScreen, disable_raw_mode, enable_raw_mode,
};
use std::io::{Stdout, stdout};

/// The terminal type the explorer draws on.
pub type Tui = Terminal<CrosstermBackend<Stdout>>;

/// Owns the terminal while the explorer runs; restores it when dropped.
pub struct TerminalGuard {
    /// The ratatui terminal.
    pub terminal: Tui,
}

/// Undo everything `enter` did. Safe to call more than once.
pub fn restore() {
    let _ = disable_raw_mode();
    let _ = execute!(stdout(), LeaveAlternateScreen, DisableMouseCapture);
    let _ = execute!(stdout(), ratatui::crossterm::cursor::Show);
}

impl TerminalGuard {
    /// Enter raw mode and the alternate screen, capture the mouse, and install a panic hook
    /// that restores the terminal before the panic message is printed.
    pub fn enter() -> std::io::Result<Self> {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore();
            previous(info);
        }));
        enable_raw_mode()?;
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

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        restore();
    }
}
