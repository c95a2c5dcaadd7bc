//! What-if editor panel: the settings that can be changed live, one per row.

use crate::app::App;
use crate::app::whatif::{FIELDS, Field, value};
use crate::ui::panel::ellipsized as fitted;
use crate::ui::theme;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

/// Columns of a row's label.
const LABEL_COLUMNS: usize = 16;

/// Draw the what-if editor into `area`. A value too long for its row is cut with "…" and,
/// on the selected row, written whole on a line of its own under it (on the bottom border it
/// shared the room with the scroll hint, which cut it again at 80 columns).
pub fn draw(frame: &mut Frame, area: Rect, app: &App, focused: bool) {
    let full_title = " What-if (↑/↓ field, ←/→ change) ";
    let title = if usize::from(area.width) >= full_title.chars().count() + 2 {
        full_title
    } else {
        " What-if (↑↓ ←→) "
    };
    let mut block = super::panel::block(title, focused);
    // Inner width less the row's leading space, label and the space before the value.
    let value_columns = usize::from(area.width.saturating_sub(2)).saturating_sub(LABEL_COLUMNS + 2);
    let inner = usize::from(area.width.saturating_sub(2));
    let mut lines: Vec<Line> = FIELDS
        .iter()
        .enumerate()
        .flat_map(|(i, f)| {
            let selected = i == app.whatif_row;
            let style = if selected && focused {
                Style::new().add_modifier(Modifier::REVERSED)
            } else if selected {
                Style::new().add_modifier(Modifier::BOLD)
            } else {
                Style::new()
            };
            let value = shown_value(app, *f);
            let cut = fitted(&value, value_columns);
            let whole = (selected && cut != value).then(|| {
                Line::styled(
                    format!("   = {}", fitted(&value, inner.saturating_sub(4))),
                    style,
                )
            });
            std::iter::once(Line::from(vec![
                Span::styled(format!(" {:<LABEL_COLUMNS$}", f.label()), style),
                Span::raw(format!(" {cut}")),
            ]))
            .chain(whole)
        })
        .collect();
    lines.push(Line::from(""));
    let gpus = app.resolved.cluster().gpus();
    let layouts = app.table.as_ref().map_or(0, |t| t.layouts.len());
    lines.push(Line::styled(
        format!(" {gpus} GPUs · {layouts} layouts on the heatmap"),
        Style::new().fg(theme::current().muted),
    ));
    let height = usize::from(area.height.saturating_sub(2));
    let offset = scroll_offset(lines.len(), height, app.whatif_row);
    // What is scrolled out of sight, on the bottom border as the other panels say it (eleven
    // rows hid below a plain border).
    if let Some(hint) = hidden_hint(lines.len(), height, offset) {
        block = block.title_bottom(Line::from(hint).right_aligned());
    }
    let offset = u16::try_from(offset).unwrap_or(u16::MAX);
    frame.render_widget(Paragraph::new(lines).block(block).scroll((offset, 0)), area);
}

/// First line to show of `total` lines in `height` rows so that line `selected` is visible:
/// 0 while everything fits, else the selection kept in the middle, never past the end.
fn scroll_offset(total: usize, height: usize, selected: usize) -> usize {
    if total <= height || height == 0 {
        return 0;
    }
    selected
        .saturating_sub(height / 2)
        .min(total.saturating_sub(height))
}

/// " ↑2 ↓11 more (↑/↓) ": the lines above and below the `height` shown from `offset` of
/// `total`, if any are hidden.
fn hidden_hint(total: usize, height: usize, offset: usize) -> Option<String> {
    let above = offset.min(total);
    let below = total.saturating_sub(offset.saturating_add(height));
    let part = |arrow: &str, n: usize| (n > 0).then(|| format!("{arrow}{n}"));
    let parts: Vec<String> = [part("↑", above), part("↓", below)]
        .into_iter()
        .flatten()
        .collect();
    (!parts.is_empty() && height > 0).then(|| format!(" {} more (↑/↓) ", parts.join(" ")))
}

/// A row's value as the editor shows it: the current batch a measured run implies, when the
/// session names none, with where it comes from.
fn shown_value(app: &App, f: Field) -> String {
    match (f, app.resolved.session.current_batch, app.current_batch()) {
        (Field::CurrentBatch, None, Some(b)) => format!("{b} (the run's)"),
        _ => value(&app.resolved, f),
    }
}

#[cfg(test)]
mod tests {
    use super::{fitted, hidden_hint, scroll_offset};

    #[test]
    fn hidden_rows_are_counted_on_the_border() {
        assert_eq!(hidden_hint(25, 40, 0), None);
        assert_eq!(hidden_hint(25, 14, 0).as_deref(), Some(" ↓11 more (↑/↓) "));
        assert_eq!(
            hidden_hint(25, 14, 5).as_deref(),
            Some(" ↑5 ↓6 more (↑/↓) ")
        );
        assert_eq!(hidden_hint(25, 14, 11).as_deref(), Some(" ↑11 more (↑/↓) "));
    }

    #[test]
    fn a_value_too_long_for_its_row_is_cut_with_an_ellipsis() {
        // After the last whole word (it read "fastest t…").
        assert_eq!(fitted("fastest that fits", 10), "fastest…");
        assert_eq!(fitted("fastest that fits", 17), "fastest that fits");
        assert_eq!(fitted("McCandlish Bc/(B+Bc)", 1), "…");
        assert_eq!(fitted("×1", 0), "…");
    }

    #[test]
    fn the_selected_row_is_always_on_screen() {
        for height in 1..30 {
            for selected in 0..23 {
                let total = 25;
                let off = scroll_offset(total, height, selected);
                assert!(
                    off <= selected && selected < off + height,
                    "{height} {selected}"
                );
                assert!(off + height <= total.max(height), "{height} {selected}");
            }
        }
        assert_eq!(scroll_offset(25, 40, 22), 0);
    }
}
