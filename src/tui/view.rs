//! The whole screen: title, timeline, heatmap beside the recommendation, key help, overlays.

use super::palette::ColorMode;
use super::{heatmap, help, recommendation, timeline};
use crate::app::App;
use crate::session::Panel;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};

/// Draw the explorer for `app`.
pub fn draw(frame: &mut Frame, app: &App, mode: ColorMode) {
    let area = frame.area();
    let [title, top, bottom, keys] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Percentage(35),
        Constraint::Min(8),
        Constraint::Length(1),
    ])
    .areas(area);
    let cluster = app.resolved.cluster();
    let mut title_spans = vec![
        Span::styled(
            " copus ",
            Style::new().add_modifier(Modifier::BOLD).fg(Color::Cyan),
        ),
        Span::raw(format!(
            "{} · {} on {}×{} {}",
            app.resolved.session.name,
            app.resolved.model.name,
            cluster.nodes,
            cluster.gpus_per_node,
            app.resolved.hardware.name
        )),
    ];
    if (app.resolved.session.b_crit_scale - 1.0).abs() > 1e-12 {
        title_spans.push(Span::raw(format!(
            " · B_crit ×{}",
            app.resolved.session.b_crit_scale
        )));
    }
    frame.render_widget(Line::from(title_spans), title);
    timeline::draw(frame, top, app, app.focus == Panel::Timeline);
    let [left, right] =
        Layout::horizontal([Constraint::Percentage(62), Constraint::Percentage(38)]).areas(bottom);
    heatmap::draw(frame, left, app, app.focus == Panel::Heatmap, mode);
    recommendation::draw(frame, right, app, app.focus == Panel::Recommendation);
    let key_line = if app.status.is_empty() {
        help::key_line()
    } else {
        Line::styled(format!(" {}", app.status), Style::new().fg(Color::Yellow))
    };
    frame.render_widget(key_line, keys);
    if app.show_help {
        help::draw_overlay(frame, area);
    }
}
