//! The whole screen: title, timeline, heatmap beside the side panel(s), key help, overlays.

use super::geometry::areas;
use super::palette::ColorMode;
use super::{estimators, heatmap, help, plan, recommendation, throughput, timeline, whatif};
use crate::app::{App, Confirm, Overlay};
use crate::session::Panel;
use crate::source::live::LinkState;
use crate::ui::theme;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Clear, Paragraph, Wrap};

fn draw_side(frame: &mut Frame, area: Rect, app: &App, panel: Panel) {
    let focused = app.focus == panel;
    match panel {
        Panel::WhatIf => whatif::draw(frame, area, app, focused),
        Panel::Throughput => throughput::draw(frame, area, app, focused),
        Panel::Estimators => estimators::draw(frame, area, app, focused),
        Panel::Plan => plan::draw(frame, area, app, focused),
        _ => recommendation::draw(frame, area, app, focused),
    }
}

fn title_line(app: &App, width: usize) -> Line<'static> {
    let r = &app.resolved;
    let cluster = r.cluster();
    let mut spans = vec![
        Span::styled(
            " copus ",
            Style::new()
                .add_modifier(Modifier::BOLD)
                .fg(theme::current().accent),
        ),
        // Model, cluster and stack first (the what-if editor changes them); the name last,
        // so a narrow terminal cuts the name rather than the facts.
        Span::raw(crate::format::escape_controls(&format!(
            "{} on {}×{} {} · {}",
            r.model.name,
            cluster.nodes,
            cluster.gpus_per_node,
            r.hardware.name,
            r.stack().label(),
        ))),
    ];
    if app.dirty() {
        // Before the name, so it survives truncation at 80 columns.
        spans.insert(
            1,
            Span::styled("[modified] ", Style::new().fg(theme::current().warning)),
        );
    }
    if let Some(link) = &app.live_link {
        let (glyph, colour) = link_look(link.state);
        spans.insert(
            1,
            Span::styled(format!("{glyph} {link} · "), Style::new().fg(colour)),
        );
    }
    if (r.session.b_crit_scale - 1.0).abs() > 1e-12 {
        let measured = crate::app::branches::is_measured_conversion(&r.session);
        // Three significant digits either way (a scale set by hand printed every digit:
        // "×0.3333333333333333").
        let factor = crate::format::factor(r.session.b_crit_scale);
        spans.push(Span::raw(if measured {
            format!(" · B_crit ×{factor} (measured by branching)")
        } else {
            format!(" · B_crit ×{factor}")
        }));
    }
    // The title's note first (the name is what gets cut), never part of the saved name.
    let note = r
        .title_note
        .as_deref()
        .map(|n| format!(" · {n}"))
        .unwrap_or_default();
    spans.push(Span::raw(format!(
        "{note} · {}",
        crate::format::escape_controls(&r.session.name)
    )));
    // The session's name goes last and is cut with "…" where the line is too long.
    let before: usize = spans[..spans.len() - 1].iter().map(Span::width).sum();
    if let Some(last) = spans.last_mut()
        && before + last.width() > width
    {
        let room = width.saturating_sub(before);
        if room >= 4 {
            last.content = super::panel::ellipsized(&last.content, room).into();
        }
    }
    Line::from(spans)
}

/// The glyph and colour of the live link's state: `◌` while it waits, retries or reconnects,
/// `○` once the stream went quiet, `◉` while records flow (the glyph tells them apart without
/// colour).
fn link_look(state: LinkState) -> (&'static str, Color) {
    match state {
        LinkState::Waiting => ("◌", theme::current().warning),
        LinkState::Quiet => ("○", theme::current().muted),
        LinkState::Flowing => ("◉", theme::current().good),
    }
}

/// Lines `text` takes when word-wrapped to `width` columns (greedy, as the paragraphs wrap;
/// every space counts, so it errs on the long side rather than hide text).
pub fn wrapped_lines(text: &str, width: usize) -> usize {
    let width = width.max(1);
    let mut lines = 1;
    let mut col = 0;
    for (i, word) in text.split(' ').enumerate() {
        let w = word.chars().count();
        let gap = usize::from(i > 0);
        if col > 0 && col + gap + w > width {
            lines += 1;
            col = w;
        } else {
            col += gap + w;
        }
        while col > width {
            lines += 1;
            col -= width;
        }
    }
    lines
}

/// Where the tour popup goes: over the panel the step names for it (`popup`), else away from
/// the panel the step describes (over the side panel for the timeline, over the timeline for
/// the heatmap and the side panels).
pub fn tour_area(screen: Rect, panel: Panel, popup: Option<Panel>) -> Rect {
    let a = areas(screen);
    match popup {
        Some(Panel::Timeline) => a.timeline,
        Some(Panel::Heatmap) => a.heatmap,
        Some(_) => a.side,
        None => match panel {
            Panel::Timeline => a.side,
            _ => a.timeline,
        },
    }
}

/// A tour step's text, with its question (lessons) and, once revealed, the answer;
/// `reveal_key` is the key that reveals it, as bound.
pub fn tour_text(step: &crate::session::TourStep, revealed: bool, reveal_key: &str) -> String {
    let mut text = step.text.clone();
    if let Some(q) = &step.question {
        text.push_str(&format!(" ▸ Predict: {q}"));
        match (&step.answer, revealed) {
            (Some(a), true) => text.push_str(&format!(" ▸ Answer: {a}")),
            (Some(_), false) => text.push_str(&format!(" ({reveal_key} reveals)")),
            (None, _) => {}
        }
    }
    text
}

/// The wrapped line (from 0, at `width` columns) on which a step's revealed answer starts.
fn answer_line(step: &crate::session::TourStep, width: usize) -> usize {
    let mut head = step.text.clone();
    if let Some(q) = &step.question {
        head.push_str(&format!(" ▸ Predict: {q} ▸"));
    }
    wrapped_lines(&head, width).saturating_sub(1)
}

fn draw_tour(frame: &mut Frame, area: Rect, app: &App) {
    let Some(i) = app.tour_step else { return };
    let Some(step) = app.resolved.session.tour.get(i) else {
        return;
    };
    let panel = tour_area(area, step.panel, step.popup);
    if panel.width < 4 || panel.height < 3 {
        return;
    }
    let inner_w = panel.width.saturating_sub(2) as usize;
    let reveal_key = app.keymap.key_label(crate::config::keys::Action::Reveal);
    let text = tour_text(step, app.tour_revealed, &reveal_key);
    let total = wrapped_lines(&text, inner_w);
    // As tall as the text, at the foot of the panel it covers: on a large screen a box the
    // panel's height held three lines and hid the whole chart; the panel's title (the value
    // the steps refer to) stays in view above it.
    let height = u16::try_from(total.saturating_add(2))
        .unwrap_or(u16::MAX)
        .clamp(3, panel.height);
    let r = Rect {
        y: panel.bottom().saturating_sub(height),
        height,
        ..panel
    };
    let visible = r.height.saturating_sub(2) as usize;
    let max_scroll = total.saturating_sub(visible);
    // Revealed, the answer's first line is the top of the box (or the text's end is in view)
    // and the scroll counts down from it.
    let base = if app.tour_revealed {
        answer_line(step, inner_w)
    } else {
        0
    };
    let scroll = base
        .saturating_add(app.tour_scroll as usize)
        .min(max_scroll);
    // A lesson opened with `copus lesson` names itself so; the demo's guided tour is a tour.
    let kind = match app.tour_kind() {
        "lesson" => "Lesson",
        _ => "Tour",
    };
    let (n, of) = (i + 1, app.resolved.session.tour.len());
    let next = if n == of { "n ends" } else { "n next" };
    let long = format!(" {kind} {n}/{of} · {next} · p back · Esc close ");
    // A narrow popup keeps every key in short: the title was cut at "p bac", losing Esc.
    let title = if long.chars().count() <= inner_w {
        long
    } else {
        format!(" {kind} {n}/{of} · n · p · Esc ")
    };
    let mut block = Block::bordered()
        .title(title)
        .border_style(Style::new().fg(theme::current().warning));
    if max_scroll > 0 {
        use crate::config::keys::Action;
        let more = if scroll < max_scroll {
            format!(" {} more ", app.keymap.key_label(Action::TourScrollDown))
        } else if app.tour_revealed && base > 0 && app.tour_scroll == 0 {
            format!(" {reveal_key} hides the answer ")
        } else {
            format!(" {} back ", app.keymap.key_label(Action::TourScrollUp))
        };
        block = block.title_bottom(more);
    }
    frame.render_widget(Clear, r);
    frame.render_widget(
        Paragraph::new(text)
            .wrap(Wrap { trim: true })
            .scroll((scroll as u16, 0))
            .block(block),
        r,
    );
}

/// The smallest terminal (columns, rows) the explorer draws in.
pub const MIN_SIZE: (u16, u16) = (60, 16);

/// Whether a terminal of `width` × `height` cells is below [`MIN_SIZE`] (the explorer then
/// shows only a "terminal too small" line, and acts only on quitting).
pub fn too_small(width: u16, height: u16) -> bool {
    width < MIN_SIZE.0 || height < MIN_SIZE.1
}

/// Draw the explorer for `app`, in the app's theme. Under NO_COLOR no cell carries a colour,
/// only attributes (bold, reverse video): the terminal library drops colour changes under
/// NO_COLOR by writing an SGR sequence with no parameter, which resets every attribute, so a
/// coloured cell beside the reverse-video selection would switch the selection off.
pub fn draw(frame: &mut Frame, app: &App, mode: ColorMode) {
    theme::draw_with(theme::Theme::builtin(app.theme), || {
        draw_themed(frame, app, mode)
    });
    if mode == ColorMode::Monochrome {
        for cell in frame.buffer_mut().content.iter_mut() {
            cell.fg = Color::Reset;
            cell.bg = Color::Reset;
        }
    }
}

fn draw_themed(frame: &mut Frame, app: &App, mode: ColorMode) {
    let area = frame.area();
    if too_small(area.width, area.height) {
        let text = format!(
            "terminal too small: {}×{}, copus needs {}×{} ({} quits)",
            area.width,
            area.height,
            MIN_SIZE.0,
            MIN_SIZE.1,
            app.keymap.key_label(crate::config::keys::Action::Quit)
        );
        frame.render_widget(Paragraph::new(text).wrap(Wrap { trim: true }), area);
        return;
    }
    let a = areas(area);
    frame.render_widget(title_line(app, usize::from(a.title.width)), a.title);
    timeline::draw(frame, a.timeline, app, app.focus == Panel::Timeline);
    heatmap::draw(frame, a.heatmap, app, app.focus == Panel::Heatmap, mode);
    if app.side != Panel::Recommendation && a.side.height >= 30 {
        let [top, bottom] =
            Layout::vertical([Constraint::Percentage(45), Constraint::Percentage(55)])
                .areas(a.side);
        draw_side(frame, top, app, Panel::Recommendation);
        draw_side(frame, bottom, app, app.side);
    } else {
        draw_side(frame, a.side, app, app.side);
    }
    let key_line = if app.status.is_empty() {
        // Without guided steps the `n` hint has nothing to step through: left out.
        let kind = if app.resolved.session.tour.is_empty() {
            ""
        } else {
            app.tour_kind()
        };
        help::key_line(&app.keymap, a.keys.width, kind, &app.key_scopes())
    } else {
        // A status longer than the line is cut with "…", never mid-word without a sign.
        let room = usize::from(a.keys.width.saturating_sub(1));
        Line::styled(
            format!(" {}", super::panel::ellipsized(&app.status, room)),
            Style::new().fg(theme::current().warning),
        )
    };
    frame.render_widget(key_line, a.keys);
    draw_tour(frame, area, app);
    // The popups bottom first, so the one that gets the keys is drawn on top.
    for overlay in &app.overlays {
        match overlay {
            Overlay::Explain => super::explain::draw(frame, area, app, mode),
            Overlay::Ranked => super::ranked::draw(frame, area, app),
            Overlay::Help => help::draw_overlay(frame, area, &app.keymap, app.help_scroll),
            Overlay::Prompt(p) => draw_prompt(frame, area, p),
            Overlay::Confirm(c) => draw_confirm(frame, area, app, c),
        }
    }
}

/// A small centred box of `lines` titled `title`.
fn popup(frame: &mut Frame, area: Rect, title: &str, lines: Vec<Line<'static>>) {
    let width = 70.min(area.width);
    let inner = width.saturating_sub(2).max(1) as usize;
    let rows: usize = lines.iter().map(|l| l.width().div_ceil(inner).max(1)).sum();
    let height = (rows as u16 + 2).min(area.height);
    let r = Rect::new(
        area.x + (area.width - width) / 2,
        area.y + (area.height - height) / 2,
        width,
        height,
    );
    frame.render_widget(Clear, r);
    frame.render_widget(
        Paragraph::new(lines).wrap(Wrap { trim: false }).block(
            Block::bordered()
                .title(title.to_string())
                .border_style(Style::new().fg(theme::current().warning)),
        ),
        r,
    );
}

fn draw_confirm(frame: &mut Frame, area: Rect, app: &App, question: &Confirm) {
    let lines = match question {
        Confirm::Quit => vec![
            // Any setting the session saves (the what-if's, the smoother's, the B_crit
            // scale): not only the what-if's.
            Line::from("There are unsaved changes to this session's settings."),
            Line::from(format!("s save to {} and quit", app.save_path.display())),
            Line::from("y (or Ctrl+C again) quit without saving · n / Esc stay"),
        ],
        Confirm::Overwrite { existing, .. } => vec![
            Line::from(format!(
                "{} exists and holds what this session did not write (or it changed since \
                 this session read or wrote it).",
                existing.display()
            )),
            Line::from("y replace it · n / Esc keep it (S saves elsewhere)"),
        ],
    };
    popup(frame, area, " Confirm ", lines);
}

fn draw_prompt(frame: &mut Frame, area: Rect, p: &crate::app::Prompt) {
    let (title, help) = match p.kind {
        crate::app::PromptKind::SaveAs => (
            " Save as ",
            "Enter saves · Esc cancels · relative to the working directory",
        ),
        crate::app::PromptKind::GoTo => (
            " Go to ",
            "a step (1200), tokens (150B, 2.5M) or a share of the run (40%) · Enter · Esc",
        ),
        crate::app::PromptKind::Filter => (
            " Filter layouts ",
            "conditions on dp, tp, pp, cp: tp<=4 pp=1 · empty shows all · Enter · Esc",
        ),
    };
    popup(
        frame,
        area,
        title,
        vec![Line::from(format!("{}▏", p.text)), Line::from(help)],
    );
}
