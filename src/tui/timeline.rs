//! Timeline panel: B_crit over training (log scale) with its interval, the current batch,
//! the loss and the scrub cursor.

use super::format::{si, tokens};
use crate::app::App;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Style, Stylize};
use ratatui::symbols::Marker;
use ratatui::text::Span;
use ratatui::widgets::{Axis, Chart, Dataset, GraphType, Sparkline};

/// "22 samples (45k tok)": B_crit in the trajectory's samples with its token equivalent at
/// `seq_len` tokens per sample (the run's own for a measured run).
pub fn b_crit_words(b_crit: f64, seq_len: u32) -> String {
    format!(
        "{} samples ({} tok)",
        si(b_crit),
        si(b_crit * seq_len as f64)
    )
}

/// The marks of the chart, each with its glyph (so it reads without colour).
fn legend(app: &App) -> String {
    let mut parts = vec!["⠤ B_crit".to_string()];
    if app.trajectory.points.iter().any(|p| p.ci.is_some()) {
        parts.push("• interval".into());
    }
    if let Some(b) = app.resolved.session.current_batch {
        parts.push(format!("▄ batch {b} now"));
    }
    parts.push("█ cursor".into());
    if !app.switch_points.is_empty() {
        parts.push("⡇ switch ([ ])".into());
    }
    format!(" {} ", parts.join(" · "))
}

/// Draw the timeline into `area`.
pub fn draw(frame: &mut Frame, area: Rect, app: &App, focused: bool) {
    let pts = &app.trajectory.points;
    let title = match pts.get(app.cursor) {
        Some(p) => format!(
            " B_crit {} · step {} · {} tokens{} · {} ",
            b_crit_words(p.b_crit, app.trajectory.seq_len),
            p.step,
            tokens(p.tokens),
            p.loss
                .map(|l| format!(" · loss {l:.3}"))
                .unwrap_or_default(),
            app.trajectory.label,
        ),
        None => " B_crit timeline (no data) ".to_string(),
    };
    let block = super::panel::block(title, focused).title_bottom(legend(app));
    let Some((lo, hi)) = app.trajectory.b_crit_range() else {
        frame.render_widget(block, area);
        return;
    };
    let current = app.resolved.session.current_batch.map(|b| b as f64);
    let y_lo = current.map_or(lo, |c| c.min(lo)).max(1e-9).log10().floor();
    let y_hi = current.map_or(hi, |c| c.max(hi)).max(1e-9).log10().ceil();
    let y_hi = if y_hi <= y_lo { y_lo + 1.0 } else { y_hi };
    let x_lo = pts.first().map_or(0.0, |p| p.tokens);
    let x_hi = pts.last().map_or(1.0, |p| p.tokens).max(x_lo + 1.0);

    let line: Vec<(f64, f64)> = pts.iter().map(|p| (p.tokens, p.b_crit.log10())).collect();
    let ci_lo: Vec<(f64, f64)> = pts
        .iter()
        .filter_map(|p| p.ci.map(|c| (p.tokens, c.0.max(1e-9).log10())))
        .collect();
    let ci_hi: Vec<(f64, f64)> = pts
        .iter()
        .filter_map(|p| p.ci.map(|c| (p.tokens, c.1.max(1e-9).log10())))
        .collect();
    let cursor_x = pts.get(app.cursor).map_or(x_lo, |p| p.tokens);
    let cursor: Vec<(f64, f64)> = (0..=20)
        .map(|i| (cursor_x, y_lo + (y_hi - y_lo) * i as f64 / 20.0))
        .collect();
    let current_line: Vec<(f64, f64)> = current
        .map(|c| {
            (0..=60)
                .map(|i| (x_lo + (x_hi - x_lo) * i as f64 / 60.0, c.log10()))
                .collect()
        })
        .unwrap_or_default();

    let switches: Vec<(f64, f64)> = app
        .switch_points
        .iter()
        .filter_map(|&i| pts.get(i))
        .flat_map(|p| (0..=8).map(move |k| (p.tokens, y_hi - (y_hi - y_lo) * k as f64 / 40.0)))
        .collect();
    let mut datasets = vec![];
    if !switches.is_empty() {
        datasets.push(
            Dataset::default()
                .marker(Marker::Braille)
                .graph_type(GraphType::Scatter)
                .style(Style::new().fg(Color::LightRed))
                .data(&switches),
        );
    }
    for band in [&ci_lo, &ci_hi] {
        if !band.is_empty() {
            datasets.push(
                Dataset::default()
                    .marker(Marker::Dot)
                    .graph_type(GraphType::Line)
                    .style(Style::new().fg(Color::DarkGray))
                    .data(band),
            );
        }
    }
    if !current_line.is_empty() {
        datasets.push(
            Dataset::default()
                .name("current batch")
                .marker(Marker::Bar)
                .graph_type(GraphType::Line)
                .style(Style::new().fg(Color::Magenta))
                .data(&current_line),
        );
    }
    datasets.push(
        Dataset::default()
            .name("B_crit")
            .marker(Marker::Braille)
            .graph_type(GraphType::Line)
            .style(Style::new().fg(Color::Yellow))
            .data(&line),
    );
    datasets.push(
        Dataset::default()
            .marker(Marker::Block)
            .graph_type(GraphType::Line)
            .style(Style::new().fg(Color::Cyan))
            .data(&cursor),
    );

    let y_labels: Vec<Span> = (y_lo as i32..=y_hi as i32)
        .map(|e| Span::raw(si(10f64.powi(e))))
        .collect();
    let x_labels = vec![
        Span::raw(tokens(x_lo)),
        Span::raw(tokens((x_lo + x_hi) / 2.0)),
        Span::raw(tokens(x_hi)),
    ];
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let losses: Vec<f64> = pts.iter().filter_map(|p| p.loss).collect();
    let chart_area = if losses.len() >= 2 && inner.height >= 8 {
        let [chart_area, loss_area] =
            Layout::vertical([Constraint::Min(4), Constraint::Length(1)]).areas(inner);
        draw_loss(frame, loss_area, &losses);
        chart_area
    } else {
        inner
    };
    let chart = Chart::new(datasets)
        .legend_position(None)
        .x_axis(
            Axis::default()
                .title("tokens".dark_gray())
                .bounds([x_lo, x_hi])
                .labels(x_labels),
        )
        .y_axis(
            Axis::default()
                .title("samples".dark_gray())
                .bounds([y_lo, y_hi])
                .labels(y_labels),
        );
    frame.render_widget(chart, chart_area);
}

/// One row under the chart: the loss over training as a sparkline, with its first and last
/// values (nats).
fn draw_loss(frame: &mut Frame, area: Rect, losses: &[f64]) {
    let first = losses[0];
    let last = losses[losses.len() - 1];
    let label = format!(" loss {first:.2}→{last:.2} ");
    let width = label.chars().count() as u16;
    let [l, r] = Layout::horizontal([Constraint::Length(width), Constraint::Min(1)]).areas(area);
    frame.render_widget(Span::styled(label, Style::new().fg(Color::DarkGray)), l);
    // Resample to the available width; the lowest loss draws the lowest bar, the highest a full one.
    let n = r.width.max(1) as usize;
    let (lo, hi) = losses
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| {
            (a.min(x), b.max(x))
        });
    let span = (hi - lo).max(1e-12);
    let data: Vec<u64> = (0..n)
        .map(|i| {
            let x = losses[i * (losses.len() - 1) / (n - 1).max(1)];
            13 + ((x - lo) / span * 87.0) as u64
        })
        .collect();
    frame.render_widget(
        Sparkline::default()
            .data(&data)
            .style(Style::new().fg(Color::DarkGray)),
        r,
    );
}
