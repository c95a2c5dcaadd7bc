//! Estimator panel: where B_crit at the cursor comes from, its interval, and (for measured
//! runs) the estimators side by side with the per-layer breakdown and diagnostics.

use super::format::{si, tokens};
use crate::app::App;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::{Color, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Paragraph, Wrap};

/// Draw the panel into `area`.
pub fn draw(frame: &mut Frame, area: Rect, app: &App, focused: bool) {
    let border = if focused {
        Color::Cyan
    } else {
        Color::DarkGray
    };
    let block = Block::bordered()
        .title(" Estimators ")
        .border_style(Style::new().fg(border));
    let mut lines = vec![Line::from(format!("source: {}", app.trajectory.label))];
    if let Some(p) = app.trajectory.points.get(app.cursor) {
        lines.push(Line::from(format!(
            "at {} tokens: B_crit {} samples ({} tokens)",
            tokens(p.tokens),
            si(p.b_crit),
            si(p.b_crit * app.trajectory.seq_len as f64)
        )));
        match p.ci {
            Some((lo, hi)) => lines.push(Line::from(format!(
                "95% interval: {} – {} samples",
                si(lo),
                si(hi)
            ))),
            None => lines.push(Line::styled(
                "a published law: no sampling interval",
                Style::new().fg(Color::DarkGray),
            )),
        }
    }
    let scale = app.resolved.session.b_crit_scale;
    if (scale - 1.0).abs() > 1e-12 {
        lines.push(Line::from(format!("B_crit scaled ×{scale} (what-if)")));
    }
    lines.push(Line::styled(
        "GNS can underestimate the measured critical batch size by orders of magnitude \
         (Merrill et al. 2025): try the B_crit scale in the what-if panel.",
        Style::new().fg(Color::Gray),
    ));
    frame.render_widget(
        Paragraph::new(lines)
            .block(block)
            .wrap(Wrap { trim: false }),
        area,
    );
}
