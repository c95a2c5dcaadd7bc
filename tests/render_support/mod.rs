//! Shared by the explorer's render tests: draw the whole view into an in-memory terminal and
//! read it back as text, one line per terminal row.

use copus::app::App;
use copus::tui::palette::ColorMode;
use copus::tui::view;
use ratatui::Terminal;
use ratatui::backend::TestBackend;

/// The explorer's screen at `w`×`h` cells in colour `mode`, as text (each row ends in '\n').
pub fn screen(app: &App, w: u16, h: u16, mode: ColorMode) -> String {
    let mut term = Terminal::new(TestBackend::new(w, h)).expect("test terminal");
    term.draw(|f| view::draw(f, app, mode)).expect("draws");
    let buf = term.backend().buffer().clone();
    (0..h)
        .map(|y| (0..w).map(|x| buf[(x, y)].symbol()).collect::<String>() + "\n")
        .collect()
}
