//! Throughput against batch size for the selected layout: the overhead-bound rise at small
//! batches and the compute-bound plateau, from the throughput table.

use super::format::si;
use crate::app::App;
use crate::goodput::TableCell;
use crate::ui::theme;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::{Style, Stylize};
use ratatui::symbols::Marker;
use ratatui::text::Span;
use ratatui::widgets::{Axis, Chart, Dataset, GraphType, Paragraph};

/// Fraction of the row's best throughput from which a batch counts as compute-bound.
pub const PLATEAU: f64 = 0.9;

/// (batch, tokens/s) of the feasible cells of layout row `row`.
pub fn curve(app: &App, row: usize) -> Vec<(u64, f64)> {
    let Some(t) = &app.table else {
        return Vec::new();
    };
    if row >= t.layouts.len() {
        return Vec::new();
    }
    (0..t.batches.len())
        .filter_map(|c| match t.cell(row, c) {
            TableCell::Feasible { prediction, .. } => Some((t.batches[c], prediction.tokens_per_s)),
            TableCell::Infeasible(_) => None,
        })
        .collect()
}

/// The smallest batch reaching [`PLATEAU`] of the curve's maximum.
pub fn plateau_start(points: &[(u64, f64)]) -> Option<u64> {
    let max = points.iter().map(|p| p.1).fold(0.0, f64::max);
    points.iter().find(|p| p.1 >= PLATEAU * max).map(|p| p.0)
}

/// Draw the panel into `area`.
pub fn draw(frame: &mut Frame, area: Rect, app: &App, focused: bool) {
    let row = app.selected.0;
    let label = app
        .table
        .as_ref()
        .and_then(|t| t.layouts.get(row))
        .map_or(String::new(), |l| l.label());
    let pts = curve(app, row);
    // The longest title that fits the border whole (a cut word such as "plateau from ba"
    // reads as a different statement).
    let fits = |t: &String| t.chars().count() + 2 <= area.width as usize;
    let title = match plateau_start(&pts) {
        Some(b) => [
            format!(" Throughput · {label} · plateau from batch {b} "),
            format!(" Throughput · {label} "),
            " Throughput ".to_string(),
        ]
        .into_iter()
        .find(fits)
        .unwrap_or_default(),
        None => [
            format!(" Throughput · {label} "),
            " Throughput ".to_string(),
        ]
        .into_iter()
        .find(fits)
        .unwrap_or_default(),
    };
    // The legend as long as the border holds it whole (it was cut to "• 90% of the best (").
    let share = PLATEAU * 100.0;
    let legend = [
        format!(" ⠤ tok/s at each batch · • {share:.0}% of the best (plateau) "),
        format!(" ⠤ tok/s · • {share:.0}% of the best (plateau) "),
        format!(" • plateau: {share:.0}% of the best "),
    ]
    .into_iter()
    .find(fits)
    .unwrap_or_default();
    let block = super::panel::block(title, focused).title_bottom(legend);
    if pts.is_empty() {
        frame.render_widget(
            Paragraph::new("no batch size runs on this layout").block(block),
            area,
        );
        return;
    }
    let data: Vec<(f64, f64)> = pts.iter().map(|&(b, t)| ((b as f64).log2(), t)).collect();
    let x_lo = data.first().map_or(0.0, |p| p.0);
    let x_hi = data.last().map_or(1.0, |p| p.0).max(x_lo + 1.0);
    let y_hi = data.iter().map(|p| p.1).fold(0.0, f64::max) * 1.1;
    let plateau: Vec<(f64, f64)> = (0..=40)
        .map(|i| (x_lo + (x_hi - x_lo) * i as f64 / 40.0, y_hi / 1.1 * PLATEAU))
        .collect();
    let datasets = vec![
        Dataset::default()
            .marker(Marker::Dot)
            .graph_type(GraphType::Line)
            .style(Style::new().fg(theme::current().muted))
            .data(&plateau),
        Dataset::default()
            .marker(Marker::Braille)
            .graph_type(GraphType::Line)
            .style(Style::new().fg(theme::current().good))
            .data(&data),
    ];
    let chart = Chart::new(datasets)
        .block(block)
        .x_axis(
            Axis::default()
                .title("batch".dark_gray())
                .bounds([x_lo, x_hi])
                .labels([
                    Span::raw(pts[0].0.to_string()),
                    Span::raw(pts[pts.len() - 1].0.to_string()),
                ]),
        )
        .y_axis(
            Axis::default()
                .title("tok/s".dark_gray())
                .bounds([0.0, y_hi])
                .labels([Span::raw("0"), Span::raw(si(y_hi))]),
        );
    frame.render_widget(chart, area);
}
