//! Snapshots of the explorer for slides and documents (`copus snapshot`): the effects an
//! update asks for are carried out synchronously (what the worker threads do), keys are fed
//! as the terminal would send them, and the screen is drawn into memory and written as text
//! or as SVG with the cells' colours.

use super::palette::ColorMode;
use crate::app::{App, Effect, Msg, update};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::buffer::Buffer;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::style::{Color, Modifier};
use std::sync::Arc;

/// Most rounds of effects one key may cause (each answer may ask for more work).
const MAX_ROUNDS: usize = 64;

/// Carry out `effects` and everything their answers ask for, as the worker would.
pub fn settle(app: &mut App, effects: Vec<Effect>) {
    let mut pending = effects;
    for _ in 0..MAX_ROUNDS {
        if pending.is_empty() {
            return;
        }
        let mut next = Vec::new();
        for effect in pending {
            let msg = match effect {
                Effect::ComputeTable { generation } => Msg::TableReady {
                    generation,
                    table: Arc::new(crate::runtime::table_job(app).compute()),
                },
                Effect::ComputePlan { generation } => {
                    let Some(table) = app.table.clone() else {
                        continue;
                    };
                    let plan = crate::pipeline::plan_with(
                        &app.resolved,
                        &app.planning_trajectory(),
                        &table,
                    );
                    Msg::PlanReady {
                        generation,
                        plan: Box::new(plan),
                    }
                }
                Effect::LoadSource => {
                    Msg::SourceLoaded(Box::new(crate::pipeline::load(&app.resolved)))
                }
                // A snapshot draws; it writes nothing (a save or an export would leave files
                // beside the session). The status line says what the explorer would write.
                Effect::Write(job) => {
                    let paths: Vec<String> = job
                        .files
                        .iter()
                        .map(|(p, _)| p.display().to_string())
                        .collect();
                    app.status = format!(
                        "snapshot: nothing written (the explorer would write {})",
                        paths.join(", ")
                    );
                    continue;
                }
                Effect::AppendLine { path, .. } => {
                    app.status = format!(
                        "snapshot: nothing written (the explorer would append to {})",
                        path.display()
                    );
                    continue;
                }
            };
            next.extend(update(app, msg));
        }
        pending = next;
    }
}

/// The app with its first table (and the plan that follows) computed, as on opening.
pub fn opened(mut app: App) -> App {
    let first = crate::app::update::request_table(&mut app);
    let mut effects = vec![first];
    if app.loading {
        effects.push(Effect::LoadSource);
    }
    settle(&mut app, effects);
    app
}

/// A key by its tmux-style name: a character (`2`, `n`, `S`), `Left` `Right` `Up` `Down`
/// `Home` `End` `PageUp` `PageDown` `Enter` `Esc` `Tab` `BTab` `Space` `BSpace`, with `S-`
/// (Shift) or `C-` (Ctrl) in front.
pub fn parse_key(name: &str) -> Result<KeyEvent, String> {
    let (mods, base) = match name {
        n if n.len() > 2 && n.starts_with("S-") => (KeyModifiers::SHIFT, &n[2..]),
        n if n.len() > 2 && n.starts_with("C-") => (KeyModifiers::CONTROL, &n[2..]),
        n => (KeyModifiers::NONE, n),
    };
    let code = match base {
        "Left" => KeyCode::Left,
        "Right" => KeyCode::Right,
        "Up" => KeyCode::Up,
        "Down" => KeyCode::Down,
        "Home" => KeyCode::Home,
        "End" => KeyCode::End,
        "PageUp" | "PPage" => KeyCode::PageUp,
        "PageDown" | "NPage" => KeyCode::PageDown,
        "Enter" => KeyCode::Enter,
        "Esc" | "Escape" => KeyCode::Esc,
        "Tab" => KeyCode::Tab,
        "BTab" => KeyCode::BackTab,
        "Space" => KeyCode::Char(' '),
        "BSpace" => KeyCode::Backspace,
        s if s.chars().count() == 1 => s.chars().next().map_or(KeyCode::Null, KeyCode::Char),
        _ => {
            return Err(format!(
                "unknown key '{name}' (a character, Left, Enter, Esc, S-Left, C-z…)"
            ));
        }
    };
    let mods = match code {
        KeyCode::Char(c) if c.is_ascii_uppercase() => mods | KeyModifiers::SHIFT,
        _ => mods,
    };
    Ok(KeyEvent::new(code, mods))
}

/// Press `key` in `app` and carry out what it asks for.
pub fn press(app: &mut App, key: KeyEvent) {
    if let Some(msg) = crate::runtime::keys::key_to_msg(app, key) {
        let effects = update(app, msg);
        settle(app, effects);
    }
}

/// The screen of `app` at `w`×`h` cells.
pub fn draw(app: &App, w: u16, h: u16, mode: ColorMode) -> Result<Buffer, String> {
    let mut term = Terminal::new(TestBackend::new(w, h)).map_err(|e| e.to_string())?;
    term.draw(|f| super::view::draw(f, app, mode))
        .map_err(|e| e.to_string())?;
    Ok(term.backend().buffer().clone())
}

/// The screen as text, one line per row (trailing spaces kept, so columns line up).
pub fn text(buf: &Buffer) -> String {
    let area = buf.area;
    (0..area.height)
        .map(|y| {
            (0..area.width)
                .map(|x| buf[(x, y)].symbol())
                .collect::<String>()
                + "\n"
        })
        .collect()
}

/// Default foreground and background of an SVG snapshot (a dark terminal).
const DEFAULT_FG: (u8, u8, u8) = (0xd0, 0xd0, 0xd0);
const DEFAULT_BG: (u8, u8, u8) = (0x1c, 0x1c, 0x1c);

/// RGB of a terminal colour (`None`: the terminal's default).
fn rgb(c: Color) -> Option<(u8, u8, u8)> {
    const BASE: [(u8, u8, u8); 16] = [
        (0x00, 0x00, 0x00),
        (0xcd, 0x31, 0x31),
        (0x0d, 0xbc, 0x79),
        (0xe5, 0xe5, 0x10),
        (0x24, 0x72, 0xc8),
        (0xbc, 0x3f, 0xbc),
        (0x11, 0xa8, 0xcd),
        (0xe5, 0xe5, 0xe5),
        (0x66, 0x66, 0x66),
        (0xf1, 0x4c, 0x4c),
        (0x23, 0xd1, 0x8b),
        (0xf5, 0xf5, 0x43),
        (0x3b, 0x8e, 0xea),
        (0xd6, 0x70, 0xd6),
        (0x29, 0xb8, 0xdb),
        (0xff, 0xff, 0xff),
    ];
    let indexed = |i: u8| -> (u8, u8, u8) {
        match i {
            0..=15 => BASE[i as usize],
            16..=231 => {
                let i = i - 16;
                let level = |v: u8| if v == 0 { 0 } else { 55 + 40 * v };
                (level(i / 36), level((i / 6) % 6), level(i % 6))
            }
            _ => {
                let g = 8 + 10 * (i - 232);
                (g, g, g)
            }
        }
    };
    Some(match c {
        Color::Reset => return None,
        Color::Black => BASE[0],
        Color::Red => BASE[1],
        Color::Green => BASE[2],
        Color::Yellow => BASE[3],
        Color::Blue => BASE[4],
        Color::Magenta => BASE[5],
        Color::Cyan => BASE[6],
        Color::Gray => BASE[7],
        Color::DarkGray => BASE[8],
        Color::LightRed => BASE[9],
        Color::LightGreen => BASE[10],
        Color::LightYellow => BASE[11],
        Color::LightBlue => BASE[12],
        Color::LightMagenta => BASE[13],
        Color::LightCyan => BASE[14],
        Color::White => BASE[15],
        Color::Rgb(r, g, b) => (r, g, b),
        Color::Indexed(i) => indexed(i),
    })
}

fn hex((r, g, b): (u8, u8, u8)) -> String {
    format!("#{r:02x}{g:02x}{b:02x}")
}

fn escape_xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The screen as an SVG picture: a monospace grid, each cell's background and glyph in its
/// colours (reversed cells swapped, bold kept), for slides. Glyphs of one colour and weight
/// in a row are one `<text>` element (each glyph placed at its cell by an `x` list), and a
/// row's cells of one background one `<rect>`, so that a label is a word to select and edit.
pub fn svg(buf: &Buffer) -> String {
    use std::fmt::Write;
    let area = buf.area;
    let (w, h) = (
        f64::from(area.width) * CELL_W,
        f64::from(area.height) * CELL_H,
    );
    let mut o = String::new();
    let _ = writeln!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w:.0}" height="{h:.0}" viewBox="0 0 {w:.0} {h:.0}" font-family="DejaVu Sans Mono, Menlo, Consolas, monospace" font-size="14" xml:space="preserve">"#
    );
    let _ = writeln!(
        o,
        r#"<rect width="100%" height="100%" fill="{}"/>"#,
        hex(DEFAULT_BG)
    );
    for y in 0..area.height {
        let cells: Vec<SvgCell> = (0..area.width).map(|x| svg_cell(&buf[(x, y)])).collect();
        backgrounds(&mut o, &cells, y);
        glyph_runs(&mut o, &cells, y);
    }
    o.push_str("</svg>\n");
    o
}

/// Width and height of one cell in the SVG picture, pixels.
const CELL_W: f64 = 8.4;
const CELL_H: f64 = 17.0;

/// One cell as the SVG draws it: its symbol, glyph colour and weight, and background.
struct SvgCell<'a> {
    symbol: &'a str,
    fg: (u8, u8, u8),
    bold: bool,
    bg: Option<(u8, u8, u8)>,
}

fn svg_cell(cell: &ratatui::buffer::Cell) -> SvgCell<'_> {
    let (mut fg, mut bg) = (rgb(cell.fg), rgb(cell.bg));
    if cell.modifier.contains(Modifier::REVERSED) {
        (fg, bg) = (bg.or(Some(DEFAULT_BG)), fg.or(Some(DEFAULT_FG)));
    }
    SvgCell {
        symbol: cell.symbol(),
        fg: fg.unwrap_or(DEFAULT_FG),
        bold: cell.modifier.contains(Modifier::BOLD),
        bg,
    }
}

/// One `<rect>` per run of cells of one background in row `y`.
fn backgrounds(o: &mut String, cells: &[SvgCell<'_>], y: u16) {
    use std::fmt::Write;
    let py = f64::from(y) * CELL_H;
    let mut x = 0;
    while x < cells.len() {
        let Some(bg) = cells[x].bg else {
            x += 1;
            continue;
        };
        let run = cells[x..].iter().take_while(|c| c.bg == Some(bg)).count();
        let _ = writeln!(
            o,
            r#"<rect x="{:.1}" y="{py:.1}" width="{:.1}" height="{CELL_H:.1}" fill="{}"/>"#,
            x as f64 * CELL_W,
            run as f64 * CELL_W,
            hex(bg)
        );
        x += run;
    }
}

/// Glyphs of one colour and weight in a row, as one `<text>` draws them.
struct GlyphRun {
    fg: (u8, u8, u8),
    bold: bool,
    /// Each character's x position, pixels, as written.
    xs: Vec<String>,
    text: String,
}

/// One `<text>` per run of glyphs of one colour and weight in row `y`: blank cells inside a
/// run stay in it (as spaces), a glyph of another style starts the next.
fn glyph_runs(o: &mut String, cells: &[SvgCell<'_>], y: u16) {
    use std::fmt::Write;
    let baseline = f64::from(y) * CELL_H + CELL_H * 0.78;
    // The open run; blanks after its last glyph wait aside.
    let mut run: Option<GlyphRun> = None;
    let mut blanks: Vec<usize> = Vec::new();
    let close = |o: &mut String, run: &mut Option<GlyphRun>| {
        if let Some(GlyphRun { fg, bold, xs, text }) = run.take() {
            let weight = if bold { r#" font-weight="bold""# } else { "" };
            let _ = writeln!(
                o,
                r#"<text x="{}" y="{baseline:.1}" fill="{}"{weight}>{}</text>"#,
                xs.join(" "),
                hex(fg),
                escape_xml(&text)
            );
        }
    };
    for (x, cell) in cells.iter().enumerate() {
        if cell.symbol.is_empty() {
            continue; // the second half of a wide glyph
        }
        if cell.symbol.trim().is_empty() {
            if run.is_some() {
                blanks.push(x);
            }
            continue;
        }
        let same = run
            .as_ref()
            .is_some_and(|r| (r.fg, r.bold) == (cell.fg, cell.bold));
        if !same {
            close(o, &mut run);
            blanks.clear();
            run = Some(GlyphRun {
                fg: cell.fg,
                bold: cell.bold,
                xs: Vec::new(),
                text: String::new(),
            });
        }
        if let Some(GlyphRun { xs, text, .. }) = run.as_mut() {
            for b in blanks.drain(..) {
                xs.push(format!("{:.1}", b as f64 * CELL_W));
                text.push(' ');
            }
            // One position per character: a cell's symbol is one grapheme, usually one char.
            for _ in cell.symbol.chars() {
                xs.push(format!("{:.1}", x as f64 * CELL_W));
            }
            text.push_str(cell.symbol);
        }
    }
    close(o, &mut run);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_parse_as_tmux_names_them() {
        assert_eq!(parse_key("2").map(|k| k.code), Ok(KeyCode::Char('2')));
        let s = parse_key("S-Left").expect("shift left");
        assert_eq!((s.code, s.modifiers), (KeyCode::Left, KeyModifiers::SHIFT));
        let big = parse_key("S").expect("S");
        assert!(big.modifiers.contains(KeyModifiers::SHIFT));
        assert!(parse_key("Nope").is_err());
    }

    #[test]
    fn xterm_colours_map_to_their_rgb() {
        assert_eq!(rgb(Color::Indexed(16)), Some((0, 0, 0)));
        assert_eq!(rgb(Color::Indexed(231)), Some((255, 255, 255)));
        assert_eq!(rgb(Color::Indexed(232)), Some((8, 8, 8)));
        assert_eq!(rgb(Color::Reset), None);
    }
}
