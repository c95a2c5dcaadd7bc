//! Goodput heatmap: batch sizes (columns) × 3D layouts (rows) at the scrubbed point, coloured
//! by goodput relative to the best cell, with the best (★), current batch (▼) and selected
//! cell marked, and a legend. NO_COLOR switches to shading glyphs.

use super::format::si;
use super::palette::{ColorMode, ramp_color, shade, text_on};
use crate::app::App;
use crate::goodput::TableCell;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph};

const LABEL_W: usize = 13;

/// First row to show so that `selected` is visible in `visible` rows.
pub fn scroll_offset(selected: usize, visible: usize, rows: usize) -> usize {
    if visible == 0 || rows <= visible {
        return 0;
    }
    selected.saturating_sub(visible - 1).min(rows - visible)
}

/// Draw the heatmap into `area`.
pub fn draw(frame: &mut Frame, area: Rect, app: &App, focused: bool, mode: ColorMode) {
    let border = if focused {
        Color::Cyan
    } else {
        Color::DarkGray
    };
    let block = Block::bordered()
        .title(" Goodput = tokens/s × statistical efficiency ")
        .border_style(Style::new().fg(border));
    let (Some(table), Some(grid)) = (&app.table, &app.grid) else {
        frame.render_widget(
            Paragraph::new("computing throughput of every configuration…").block(block),
            area,
        );
        return;
    };
    let nb = table.batches.len();
    let inner_w = area.width.saturating_sub(2) as usize;
    let cell_w = (inner_w.saturating_sub(LABEL_W) / nb.max(1)).clamp(7, 9);
    let visible_cols = (inner_w.saturating_sub(LABEL_W) / cell_w).max(1);
    let first_col = scroll_offset(app.selected.1, visible_cols, nb);
    let cols = first_col..(first_col + visible_cols).min(nb);
    let max = grid.goodput.iter().flatten().copied().fold(0.0, f64::max);
    let current_col = app.current_batch_column();

    let mut lines = Vec::new();
    let mut header = vec![Span::raw(format!("{:<LABEL_W$}", "layout\\batch"))];
    for c in cols.clone() {
        let b = table.batches[c];
        let mark = if Some(c) == current_col { "▼" } else { "" };
        header.push(Span::styled(
            format!("{:>cell_w$}", format!("{mark}{b}")),
            Style::new().add_modifier(Modifier::BOLD),
        ));
    }
    lines.push(Line::from(header));
    let mut eff = vec![Span::styled(
        format!("{:<LABEL_W$}", "stat. eff."),
        Style::new().fg(Color::DarkGray),
    )];
    for e in &grid.stat_eff[cols.clone()] {
        eff.push(Span::styled(
            format!("{:>cell_w$}", format!("{:.2}", e)),
            Style::new().fg(Color::DarkGray),
        ));
    }
    lines.push(Line::from(eff));

    let visible = (area.height as usize).saturating_sub(2 + 2 + 1);
    let rows = table.layouts.len();
    let first = scroll_offset(app.selected.0, visible, rows);
    for r in first..(first + visible).min(rows) {
        let label_style = if r == app.selected.0 {
            Style::new().add_modifier(Modifier::BOLD)
        } else {
            Style::new()
        };
        let mut spans = vec![Span::styled(
            format!("{:<LABEL_W$}", table.layouts[r].label()),
            label_style,
        )];
        for c in cols.clone() {
            let g = grid.goodput[r * nb + c];
            let best = grid.best == Some((r, c));
            let selected = focused && app.selected == (r, c);
            let (text, mut style) = match (g, table.cell(r, c)) {
                (Some(g), TableCell::Feasible { .. }) => {
                    let t = if max > 0.0 { g / max } else { 0.0 };
                    let star = if best { "★" } else { "" };
                    match mode {
                        ColorMode::Indexed => (
                            format!("{star}{}", si(g)),
                            Style::new().bg(ramp_color(t)).fg(text_on(t)),
                        ),
                        ColorMode::Monochrome => {
                            let s = shade(t).to_string().repeat(2);
                            (format!("{star}{}{s}", si(g)), Style::new())
                        }
                    }
                }
                _ => ("×".to_string(), Style::new().fg(Color::DarkGray)),
            };
            if selected {
                style = style.add_modifier(Modifier::REVERSED);
            }
            if best {
                style = style.add_modifier(Modifier::BOLD);
            }
            spans.push(Span::styled(format!("{text:>cell_w$}"), style));
        }
        lines.push(Line::from(spans));
    }
    let legend = match mode {
        ColorMode::Indexed => {
            let mut l = vec![Span::raw("low ")];
            for i in 0..6 {
                l.push(Span::styled(
                    "  ",
                    Style::new().bg(ramp_color(i as f64 / 5.0)),
                ));
            }
            l.push(Span::raw(" high · ★ best · ▼ current batch · × cannot run"));
            l
        }
        ColorMode::Monochrome => vec![Span::raw(
            "low ·░▒▓█ high · ★ best · ▼ current batch · × cannot run",
        )],
    };
    let shown = format!(
        "  rows {}–{}/{} · cols {}–{}/{}",
        first + 1,
        (first + visible).min(rows),
        rows,
        cols.start + 1,
        cols.end,
        nb
    );
    let mut legend_line = legend;
    if rows > visible || cols.len() < nb {
        legend_line.push(Span::styled(shown, Style::new().fg(Color::DarkGray)));
    }
    lines.push(Line::from(legend_line));
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
}
