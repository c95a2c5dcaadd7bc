//! Goodput heatmap: batch sizes (columns) × 3D layouts (rows) at the scrubbed point, coloured
//! by goodput relative to the best cell, with the best (★), current batch (▼) and selected
//! cell marked, and a legend. NO_COLOR switches to shading glyphs.

use super::format::si;
use super::palette::{ColorMode, ramp_color, shade, text_on};
use crate::app::App;
use crate::goodput::TableCell;
use crate::ui::theme;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use std::ops::Range;

const LABEL_W: usize = 13;
/// Widest label column: longer layout labels are cut rather than squeeze out the cells.
const MAX_LABEL_W: usize = 20;

/// Width of the label column for `table`'s layouts: the longest label and a space (a layout
/// with context parallelism, `DP32·CP2·TP1·PP1`, is longer than the usual 13 columns: its
/// row sat three to four columns right of the batch headers), between [`LABEL_W`] and
/// [`MAX_LABEL_W`].
pub fn label_width(table: &crate::goodput::ThroughputTable) -> usize {
    table
        .layouts
        .iter()
        .map(|l| l.label().chars().count() + 1)
        .max()
        .unwrap_or(0)
        .clamp(LABEL_W, MAX_LABEL_W)
}
/// Lines above the first layout row inside the border: batch header and efficiency row.
const HEADER_LINES: u16 = 2;

/// First row to show so that `selected` is visible in `visible` rows.
pub fn scroll_offset(selected: usize, visible: usize, rows: usize) -> usize {
    if visible == 0 || rows <= visible {
        return 0;
    }
    selected.saturating_sub(visible - 1).min(rows - visible)
}

/// Which rows and columns are drawn where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Geometry {
    /// Width of the label column, characters.
    pub label_w: usize,
    /// Width of one cell, characters.
    pub cell_w: usize,
    /// Layout rows shown.
    pub rows: Range<usize>,
    /// Batch columns shown.
    pub cols: Range<usize>,
}

/// The geometry of the heatmap in `area` for `rows` × `cols` cells with `selected` visible,
/// labels `label_w` columns wide ([`label_width`]).
pub fn geometry(
    area: Rect,
    rows: usize,
    cols: usize,
    selected: (usize, usize),
    label_w: usize,
) -> Geometry {
    let inner_w = area.width.saturating_sub(2) as usize;
    let cell_w = (inner_w.saturating_sub(label_w) / cols.max(1)).clamp(7, 9);
    let visible_cols = (inner_w.saturating_sub(label_w) / cell_w).max(1);
    let first_col = scroll_offset(selected.1, visible_cols, cols);
    let visible_rows = (area.height as usize).saturating_sub(2 + HEADER_LINES as usize + 1);
    let first_row = scroll_offset(selected.0, visible_rows, rows);
    Geometry {
        label_w,
        cell_w,
        rows: first_row..(first_row + visible_rows).min(rows),
        cols: first_col..(first_col + visible_cols).min(cols),
    }
}

/// "↑2 ↓7 more rows · →4 more batches": what the selection can scroll to, if anything is hidden.
pub fn more_marker(g: &Geometry, rows: usize, cols: usize) -> Option<String> {
    let mut parts = Vec::new();
    let (above, below) = (g.rows.start, rows.saturating_sub(g.rows.end));
    if above + below > 0 {
        parts.push(format!(
            "{}{}more {}",
            if above > 0 {
                format!("↑{above} ")
            } else {
                String::new()
            },
            if below > 0 {
                format!("↓{below} ")
            } else {
                String::new()
            },
            if above.max(below) == 1 { "row" } else { "rows" }
        ));
    }
    let (left, right) = (g.cols.start, cols.saturating_sub(g.cols.end));
    if left + right > 0 {
        parts.push(format!(
            "{}{}more {}",
            if left > 0 {
                format!("←{left} ")
            } else {
                String::new()
            },
            if right > 0 {
                format!("→{right} ")
            } else {
                String::new()
            },
            if left.max(right) == 1 {
                "batch"
            } else {
                "batches"
            }
        ));
    }
    (!parts.is_empty()).then(|| format!(" {} ", parts.join(" · ")))
}

/// The (layout row, batch column) under screen position (x, y), if any.
pub fn hit(area: Rect, app: &App, x: u16, y: u16) -> Option<(usize, usize)> {
    let table = app.table.as_ref()?;
    let rows = app.visible_rows();
    let g = geometry(
        area,
        rows.len(),
        table.batches.len(),
        selected_position(app, &rows),
        label_width(table),
    );
    let top = area.y + 1 + HEADER_LINES;
    let left = area.x as usize + 1 + g.label_w;
    if y < top || (x as usize) < left {
        return None;
    }
    let row = g.rows.start + (y - top) as usize;
    let col = g.cols.start + (x as usize - left) / g.cell_w;
    (g.rows.contains(&row) && g.cols.contains(&col)).then(|| (rows[row], col))
}

/// `label` cut to leave at least one space in `width` columns ("…" marks the cut).
fn cut_label(label: &str, width: usize) -> String {
    if label.chars().count() < width {
        return label.to_string();
    }
    let kept: String = label.chars().take(width.saturating_sub(2)).collect();
    format!("{kept}…")
}

/// The selection as (position among the visible `rows`, column).
fn selected_position(app: &App, rows: &[usize]) -> (usize, usize) {
    let at = rows.iter().position(|&r| r == app.selected.0).unwrap_or(0);
    (at, app.selected.1)
}

/// How one cell is drawn.
#[derive(Clone, Copy)]
struct CellStyle {
    max: f64,
    best: Option<(usize, usize)>,
    width: usize,
    focused: bool,
    mode: ColorMode,
    /// The session's objective when it is not McCandlish's (`lr-sqrt`), read once a frame.
    objective: Option<crate::plan::objective::Efficiency>,
    /// NO_COLOR: shade glyphs after each number, the same count in every cell (2 where the
    /// widest number leaves room, else 1).
    glyphs: usize,
}

fn cell_span(app: &App, r: usize, c: usize, cs: &CellStyle) -> Span<'static> {
    let CellStyle {
        max,
        best,
        width: w,
        focused,
        mode,
        objective,
        glyphs,
    } = *cs;
    let (Some(table), Some(grid)) = (&app.table, &app.grid) else {
        return Span::raw("");
    };
    let g = grid.goodput[r * table.batches.len() + c];
    let best = best == Some((r, c));
    // Under `lr-sqrt` a batch whose √-scaled learning rate diverges has no speed to show.
    let diverges = objective.is_some_and(|e| e.diverges(table.batches[c] as f64, grid.b_crit));
    let (text, mut style) = match (g, table.cell(r, c)) {
        (Some(_), TableCell::Feasible { .. }) if diverges => {
            ("div".to_string(), Style::new().fg(theme::current().muted))
        }
        (Some(g), TableCell::Feasible { .. }) => {
            let t = if max > 0.0 { g / max } else { 0.0 };
            let star = if best { "★" } else { "" };
            match mode {
                ColorMode::Indexed => (
                    format!("{star}{}", si(g)),
                    Style::new().bg(ramp_color(t)).fg(text_on(t)),
                ),
                ColorMode::Monochrome => {
                    // As many shade glyphs in every cell (two where each number's own
                    // room decided made "104k░░" beside "94.2k░" look like two shades). The
                    // best cell (always the top shade) ends in ★ where its neighbours end in
                    // a shade: a leading star had to drop the cell's glyphs to keep clear of
                    // the cell to its left, so the best cell looked the emptiest of its row.
                    let shades = shade(t).to_string().repeat(glyphs.saturating_sub(1));
                    let last = if best {
                        "★".to_string()
                    } else {
                        shade(t).to_string()
                    };
                    (format!("{}{shades}{last}", si(g)), Style::new())
                }
            }
        }
        _ => ("×".to_string(), Style::new().fg(theme::current().muted)),
    };
    if focused && app.selected == (r, c) {
        style = style.add_modifier(Modifier::REVERSED);
    }
    if best {
        style = style.add_modifier(Modifier::BOLD);
    }
    Span::styled(format!("{text:>w$}"), style)
}

/// The panel title: B_crit in the model's sequences (the batch axis's unit), converted from the
/// run's samples when a measured run counts another number of tokens per sample.
pub fn title(app: &App) -> String {
    title_within(app, usize::MAX)
}

/// [`title`] shortened to fit `width` columns of border whole: the objective goes first, then
/// the conversion, never a cut word.
pub fn title_within(app: &App, width: usize) -> String {
    let Some(b) = app.b_crit_model_seqs_at_cursor() else {
        return " Goodput = tokens/s × statistical efficiency ".into();
    };
    let model = app.resolved.model.seq_len;
    let run = app.run_seq_len();
    // "B_crit 35×4096 tok = 71×2048": sequences of the model = the run's samples × tokens.
    let conversion = if run != model {
        format!(" = {}×{run}", si(app.b_crit_at_cursor().unwrap_or(b)))
    } else {
        String::new()
    };
    let b = crate::format::count(b);
    let objective = app.resolved.session.planner.objective.name();
    let filter = app
        .layout_filter
        .as_ref()
        .map(|f| format!("· filter {} ", f.text))
        .unwrap_or_default();
    [
        format!(" Goodput · B_crit {b}×{model} tok{conversion} · objective {objective} {filter}"),
        format!(" Goodput · B_crit {b}×{model} tok{conversion} {filter}"),
        format!(" Goodput · B_crit {b}×{model} tok {filter}"),
        format!(" Goodput {filter}"),
        " Goodput ".to_string(),
    ]
    .into_iter()
    .find(|t| t.chars().count() + 2 <= width)
    .unwrap_or_default()
}

/// What the heatmap and the recommendation show instead of numbers when the live run's
/// samples are far from the model's: the warning, whole, and what to do.
pub fn scale_warning(w: &str) -> Paragraph<'static> {
    Paragraph::new(vec![
        Line::styled(
            "No goodput shown: it would be read at the wrong scale.",
            Style::new()
                .fg(theme::current().warning)
                .add_modifier(Modifier::BOLD),
        ),
        Line::from(w.trim_start_matches("⚠ ").to_string()),
        Line::from(""),
        Line::from("The timeline above is the run's own, in its samples."),
    ])
    .wrap(ratatui::widgets::Wrap { trim: false })
}

/// Draw the heatmap into `area`.
pub fn draw(frame: &mut Frame, area: Rect, app: &App, focused: bool, mode: ColorMode) {
    let block = super::panel::block(title_within(app, area.width as usize), focused);
    if let (true, Some((f, what))) = (app.loading, &app.progress) {
        let gauge = ratatui::widgets::Gauge::default()
            .block(block)
            .gauge_style(Style::new().fg(theme::current().accent))
            .ratio(*f)
            .label(format!("{what}: {:.0}%", f * 100.0));
        frame.render_widget(gauge, area);
        return;
    }
    if let Some(e) = &app.load_error {
        let text = vec![
            Line::styled(
                "The data source could not be loaded:",
                Style::new().fg(theme::current().error),
            ),
            Line::from(e.clone()),
            Line::from(""),
            Line::from(format!(
                "{} quits; fix the path or the flags and open it again.",
                app.keymap.key_label(crate::config::keys::Action::Quit)
            )),
        ];
        frame.render_widget(
            Paragraph::new(text)
                .wrap(ratatui::widgets::Wrap { trim: false })
                .block(block),
            area,
        );
        return;
    }
    if let Some(w) = &app.scale_warning {
        frame.render_widget(scale_warning(w).block(block), area);
        return;
    }
    let (Some(table), Some(grid)) = (&app.table, &app.grid) else {
        let text = if app.loading {
            "loading the data source…"
        } else if app.table.is_some() && app.trajectory.points.is_empty() {
            // The throughputs are ready; a live run has sent no record yet.
            "waiting for the run's first records…"
        } else {
            "computing throughput of every configuration…"
        };
        frame.render_widget(Paragraph::new(text).block(block), area);
        return;
    };
    let nb = table.batches.len();
    let rows = app.visible_rows();
    let g = geometry(
        area,
        rows.len(),
        nb,
        selected_position(app, &rows),
        label_width(table),
    );
    let label_w = g.label_w;
    let cell_w = g.cell_w;
    let cs = CellStyle {
        max: grid.goodput.iter().flatten().copied().fold(0.0, f64::max),
        best: app.best_visible(),
        width: cell_w,
        focused,
        mode,
        objective: crate::pipeline::heatmap_efficiency(&app.resolved),
        glyphs: {
            let widest = grid
                .goodput
                .iter()
                .flatten()
                .map(|g| si(*g).chars().count())
                .max()
                .unwrap_or(0);
            cell_w.saturating_sub(1 + widest).clamp(1, 2)
        },
    };
    let current_col = app.current_batch_column();
    let bold = Style::new().add_modifier(Modifier::BOLD);
    let dim = Style::new().fg(theme::current().muted);

    let mut header = vec![Span::raw(format!("{:<label_w$}", "layout\\batch"))];
    // Under the lr-sqrt objective the row is that objective's efficiency (the learning rate
    // grows with √B, so it need not fall monotonically with the batch): say so in its label.
    let eff_label = if cs.objective.is_some() {
        "lr-sqrt eff."
    } else {
        crate::app::recommend::eff_label(app.resolved.session.stat_eff)
    };
    let mut eff = vec![Span::styled(format!("{eff_label:<label_w$}"), dim)];
    for c in g.cols.clone() {
        let mark = if Some(c) == current_col { "▼" } else { "" };
        let label = format!("{mark}{}", table.batches[c]);
        header.push(Span::styled(format!("{label:>cell_w$}"), bold));
        let e = format!("{:.2}", grid.stat_eff[c]);
        eff.push(Span::styled(format!("{e:>cell_w$}"), dim));
    }
    let mut lines = vec![Line::from(header), Line::from(eff)];
    if let (true, Some(f)) = (rows.is_empty(), &app.layout_filter) {
        lines.push(Line::styled(
            format!("no layout matches the filter '{}' (/ changes it)", f.text),
            Style::new().fg(theme::current().warning),
        ));
    }
    for r in g.rows.clone().map(|i| rows[i]) {
        let label_style = if r == app.selected.0 {
            bold
        } else {
            Style::new()
        };
        let mut spans = vec![Span::styled(
            format!(
                "{:<label_w$}",
                cut_label(&table.layouts[r].label(), label_w)
            ),
            label_style,
        )];
        spans.extend(g.cols.clone().map(|c| cell_span(app, r, c, &cs)));
        lines.push(Line::from(spans));
    }
    // The marks in use, each in a long and a short form: the long ones where they fit the
    // panel, else the short ones (a narrow terminal cut the last marks off).
    let mut wanted: Vec<(&str, &str)> = Vec::new();
    if current_col.is_some() {
        wanted.push((" · ▼ current batch", " · ▼ now"));
    }
    if grid.goodput.iter().any(Option::is_none) {
        wanted.push((" · × cannot run", " · × can't run"));
    }
    if let Some(e) = cs.objective
        && table
            .batches
            .iter()
            .any(|&b| e.diverges(b as f64, grid.b_crit))
    {
        wanted.push((" · div: lr diverges", " · div diverges"));
    }
    let long: String = wanted.iter().map(|w| w.0).collect();
    // Columns before the marks: "low ·░▒▓█ high · ★ best", or "low ", a six-cell colour ramp
    // and " high · ★ best".
    let before = match mode {
        ColorMode::Indexed => 30,
        ColorMode::Monochrome => 23,
    };
    let room = usize::from(area.width.saturating_sub(2)).saturating_sub(before);
    let marks = if long.chars().count() <= room {
        long
    } else {
        // As many marks as fit in their short forms, in order; then each of those in its
        // long form where the whole still fits.
        let width = |forms: &[&str]| forms.iter().map(|f| f.chars().count()).sum::<usize>();
        let mut forms: Vec<&str> = Vec::new();
        for w in &wanted {
            if width(&forms) + w.1.chars().count() > room {
                break;
            }
            forms.push(w.1);
        }
        for (i, w) in wanted.iter().enumerate().take(forms.len()) {
            let mut longer = forms.clone();
            longer[i] = w.0;
            if width(&longer) <= room {
                forms = longer;
            }
        }
        forms.concat()
    };
    let legend = match mode {
        ColorMode::Indexed => {
            let mut l = vec![Span::raw("low ")];
            for i in 0..6 {
                l.push(Span::styled(
                    "  ",
                    Style::new().bg(ramp_color(i as f64 / 5.0)),
                ));
            }
            l.push(Span::raw(format!(" high · ★ best{marks}")));
            l
        }
        ColorMode::Monochrome => vec![Span::raw(format!("low ·░▒▓█ high · ★ best{marks}"))],
    };
    lines.push(Line::from(legend));
    let block = match more_marker(&g, rows.len(), nb) {
        Some(m) => block.title_bottom(Line::from(m).right_aligned()),
        None => block,
    };
    frame.render_widget(Paragraph::new(lines).block(block), area);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scroll_keeps_selection_visible() {
        assert_eq!(scroll_offset(0, 5, 18), 0);
        assert_eq!(scroll_offset(4, 5, 18), 0);
        assert_eq!(scroll_offset(5, 5, 18), 1);
        assert_eq!(scroll_offset(17, 5, 18), 13);
        assert_eq!(scroll_offset(3, 20, 18), 0);
    }

    #[test]
    fn hidden_rows_and_columns_are_announced() {
        let g = geometry(Rect::new(0, 0, 50, 14), 18, 8, (0, 0), LABEL_W);
        let m = more_marker(&g, 18, 8).expect("rows and columns hidden");
        assert!(
            m.contains("↓9 more rows") && m.contains("→3 more batches"),
            "{m}"
        );
        let g = geometry(Rect::new(0, 0, 200, 60), 18, 8, (0, 0), LABEL_W);
        assert_eq!(more_marker(&g, 18, 8), None);
    }

    #[test]
    fn geometry_fits_the_area() {
        let g = geometry(Rect::new(0, 0, 50, 14), 18, 8, (0, 0), LABEL_W);
        assert!(LABEL_W + g.cols.len() * g.cell_w <= 48);
        assert_eq!(g.rows, 0..9);
        let g = geometry(Rect::new(0, 0, 50, 14), 18, 8, (17, 7), LABEL_W);
        assert_eq!(g.rows.end, 18);
        assert_eq!(g.cols.end, 8);
    }
}
