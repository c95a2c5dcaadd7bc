//! Timeline panel: B_crit over training (log scale) with its interval, the current batch,
//! the loss and the scrub cursor.

use super::format::{si, tokens};
use crate::app::App;
use crate::ui::theme;
use ratatui::Frame;
use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Style;
use ratatui::symbols::Marker;
use ratatui::text::Span;
use ratatui::widgets::{Axis, Chart, Dataset, GraphType, Sparkline};

use super::polyline::{self, DotGrid};
use crate::app::measured_view as mv;

/// "22 sequences (90k tok)": B_crit in the trajectory's samples with its token equivalent at
/// `seq_len` tokens per sample (the run's own for a measured run).
pub fn b_crit_words(b_crit: f64, seq_len: u32) -> String {
    format!(
        "{} {} ({} tok)",
        si(b_crit),
        mv::sample_word(seq_len),
        crate::format::tokens(b_crit * seq_len as f64)
    )
}

/// B_crit at a point with its interval, as the timeline's title shows it: "38 [33–45]
/// sequences (77.8k tok)". An interval open above leads with what the data support, its
/// lower end: "≥1.2k sequences (≥4.9M tok; open above, point 529k)" (the point is a ratio over
/// a smoothed |G|² near zero there, 275× the last window's value on a finished run's last
/// steps, and it led the title). The number is not shown without its uncertainty where the
/// source has one (a measured run); without an interval, [`b_crit_words`].
pub fn b_crit_interval_words(b_crit: f64, ci: Option<(f64, f64)>, seq_len: u32) -> String {
    match ci {
        Some((lo, hi)) if !hi.is_finite() && lo.is_finite() => format!(
            "≥{} {} (≥{} tok; open above, point {})",
            si(lo),
            mv::sample_word(seq_len),
            crate::format::tokens(lo * f64::from(seq_len)),
            si(b_crit)
        ),
        Some((lo, hi)) => format!(
            "{} {} {} ({} tok)",
            si(b_crit),
            mv::interval_words([lo, hi]),
            mv::sample_word(seq_len),
            crate::format::tokens(b_crit * f64::from(seq_len))
        ),
        None => b_crit_words(b_crit, seq_len),
    }
}

/// The interval of `p` the chart draws as its band: bounded ones only (an interval unbounded
/// above is shown in the title, "[lo–∞]", and leaves a gap in the band).
fn drawn_interval(p: &crate::trajectory::TrajectoryPoint) -> Option<(f64, f64)> {
    p.ci.filter(|c| c.1.is_finite())
}

/// Panel heights (rows, borders included) below which the axis leaves out the intervals' ends.
const SHORT_PANEL_ROWS: u16 = 12;

/// Smallest and largest B_crit of `t` for the axis (samples): with `intervals`, the drawn
/// intervals' ends, else the point's B_crit ([`crate::trajectory::Trajectory::b_crit_range`]
/// gives no range at all once one interval is unbounded above).
fn axis_range(t: &crate::trajectory::Trajectory, intervals: bool) -> Option<(f64, f64)> {
    let ends = t.points.iter().map(|p| {
        drawn_interval(p)
            .filter(|_| intervals)
            .unwrap_or((p.b_crit, p.b_crit))
    });
    let (lo, hi) = ends.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), (a, b)| {
        (lo.min(a), hi.max(b))
    });
    (lo.is_finite() && hi.is_finite()).then_some((lo, hi))
}

/// The marks of the chart, each with its glyph (so it reads without colour).
fn legend(app: &App, y: Option<(f64, f64)>) -> Vec<String> {
    let mut parts = vec![match app.viewed_layer() {
        Some(name) => format!("⠤ layer {name}"),
        None => "⠤ B_crit".to_string(),
    }];
    let pts = &app.trajectory.points;
    if pts.iter().any(|p| drawn_interval(p).is_some()) {
        parts.push("• interval".into());
    }
    if let Some(b) = app.current_batch_in_run_samples() {
        let text = if b.fract() == 0.0 && b < 1e6 {
            format!("{b:.0}")
        } else {
            crate::format::count(b)
        };
        // In the run's own samples: their length said where it is not the model's (the
        // heatmap's ▼ counts the model's sequences).
        if app.samples_to_model_seqs() == 1.0 {
            parts.push(format!("▄ batch {text} now"));
        } else {
            parts.push(format!("▄ batch {text}×{} now", app.trajectory.seq_len));
        }
    }
    parts.push("█ cursor".into());
    if !app.switch_points.is_empty() {
        parts.push("⡇ switch ([ ])".into());
    }
    parts.extend(super::timeline_marks::legend_entries(app, y));
    parts
}

/// The legend joined to fit `width` columns where it can (tighter separators when long).
fn legend_text(parts: &[String], width: usize) -> String {
    let full = format!(" {} ", parts.join(" · "));
    if full.chars().count() <= width {
        return full;
    }
    let tight = format!(" {} ", parts.join(" "));
    if tight.chars().count() <= width {
        return tight;
    }
    // Each entry cut to its glyph and first word ("─ plan's batch" to "─ plan"), and as many
    // entries from the first as fit whole: the border cut the last one in the middle of a
    // word ("─ plan's" at 80x24).
    let mut short = String::from(" ");
    for p in parts {
        let mut words = p.split(' ');
        let glyph = words.next().unwrap_or_default();
        let word = words.next().map_or("", |w| w.trim_end_matches("'s"));
        let entry = if word.is_empty() {
            glyph.to_string()
        } else {
            format!("{glyph} {word}")
        };
        if short.chars().count() + entry.chars().count() + 1 > width {
            break;
        }
        short.push_str(&entry);
        short.push(' ');
    }
    short
}

/// `segments` joined by " · " as a title of at most `width` columns: whole segments from the
/// first while they fit, never one cut in the middle of a number; the last (the source's
/// label, free text) is cut with "…" where at least a few of its characters fit.
pub fn fitted_title(segments: &[String], width: usize) -> String {
    let mut out = String::new();
    let cols = |s: &str| s.chars().count();
    for (i, seg) in segments.iter().enumerate() {
        let sep = if out.is_empty() { " " } else { " · " };
        let room = width.saturating_sub(cols(&out) + cols(sep) + 1);
        if cols(seg) <= room {
            out.push_str(sep);
            out.push_str(seg);
        } else {
            if i + 1 == segments.len() && room >= 8 {
                let kept: String = seg.chars().take(room - 1).collect();
                out.push_str(sep);
                out.push_str(&kept);
                out.push('…');
            }
            break;
        }
    }
    out.push(' ');
    out
}

/// Draw the timeline into `area`.
pub fn draw(frame: &mut Frame, area: Rect, app: &App, focused: bool) {
    // The per-layer view (l) shows one layer's B_simple in place of the whole model's.
    let layer = app.viewed_layer().and_then(|name| {
        let report = app.analysis.as_deref()?;
        Some((
            name.clone(),
            crate::app::measured_view::layer_trajectory(report, &name, &app.trajectory),
        ))
    });
    let shown: &crate::trajectory::Trajectory = layer.as_ref().map_or(&app.trajectory, |l| &l.1);
    let pts = &shown.points;
    let at_cursor = app.trajectory.points.get(app.cursor);
    let title = match (&layer, at_cursor) {
        (Some((name, lt)), Some(p)) => {
            let here = lt.points.iter().find(|q| q.step == p.step);
            format!(
                " layer {name}: B_simple {} · step {} · {} tokens · l next layer ",
                here.map_or("n/a".into(), |q| {
                    format!(
                        "{}{}",
                        b_crit_words(q.b_crit, app.trajectory.seq_len),
                        q.ci.map(|(lo, hi)| format!(" {}", mv::interval_words([lo, hi])))
                            .unwrap_or_default()
                    )
                }),
                p.step,
                tokens(p.tokens)
            )
        }
        (None, Some(p)) => {
            // The interval of the value at the cursor, where the source has one (a measured
            // run): the number is never shown without its uncertainty.
            let mut segments = vec![
                format!(
                    "B_crit {}",
                    b_crit_interval_words(p.b_crit, p.ci, app.trajectory.seq_len)
                ),
                format!("step {}", p.step),
                format!("{} tokens", tokens(p.tokens)),
            ];
            segments.extend(p.loss.map(|l| format!("loss {l:.3}")));
            segments.push(app.trajectory.label.clone());
            fitted_title(&segments, usize::from(area.width.saturating_sub(2)))
        }
        (_, None) => " B_crit timeline (no data) ".to_string(),
    };
    let width = area.width.saturating_sub(2) as usize;
    // A short panel (80×24: three rows of plot) spends its rows on B_crit and the marks, not
    // on the intervals' far ends (the band is clipped there): with them the axis ran over five
    // decades, the curve, ● and ▲ each in one row of it.
    let intervals = area.height >= SHORT_PANEL_ROWS;
    let Some((lo, hi)) = axis_range(shown, intervals) else {
        let legend = legend_text(&legend(app, None), width);
        frame.render_widget(
            super::panel::block(title, focused).title_bottom(legend),
            area,
        );
        return;
    };
    // A compared run shares the axis.
    let compared =
        super::timeline_marks::compare_trajectory(app).and_then(|b| axis_range(&b, intervals));
    let (lo, hi) = match compared {
        Some((blo, bhi)) => (lo.min(blo), hi.max(bhi)),
        None => (lo, hi),
    };
    // The branched experiment's marks share the axis too, and in a panel tall enough for the
    // intervals the plan's batch as well (a measured run's plan at batch 16–32 fell below an
    // axis from 100, its switches marked without their batches). In a short panel it is drawn
    // where it falls inside the range (widening the axis for it squeezed B_crit into one row
    // at 80×24), and the legend says where it is not.
    let plan_values = super::timeline_marks::planned_batches(app)
        .into_iter()
        .map(|(_, b)| b)
        .filter(|_| intervals);
    let (lo, hi) = super::timeline_marks::branch_values(app)
        .into_iter()
        .chain(plan_values)
        .filter(|v| v.is_finite() && *v > 0.0)
        .fold((lo, hi), |(lo, hi), v| (lo.min(v), hi.max(v)));
    let current = app.current_batch_in_run_samples();
    let y_lo = current.map_or(lo, |c| c.min(lo)).max(1e-9).log10().floor();
    let y_hi = current.map_or(hi, |c| c.max(hi)).max(1e-9).log10().ceil();
    let y_hi = if y_hi <= y_lo { y_lo + 1.0 } else { y_hi };
    // The legend names the plan's batch only where some of it is drawn (inside the axis).
    let legend = legend_text(&legend(app, Some((y_lo, y_hi))), width);
    let block = super::panel::block(title, focused).title_bottom(legend);
    let all = &app.trajectory.points;
    let x_lo = all.first().map_or(0.0, |p| p.tokens);
    let x_hi = all.last().map_or(1.0, |p| p.tokens).max(x_lo + 1.0);

    let cursor_x = at_cursor.map_or(x_lo, |p| p.tokens);
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

    // The decades' labels are drawn where the curve puts their values (`draw_y_labels`);
    // ratatui's own places rounded toward the bottom, a row below the value at 120x40 (the
    // plan's batch of 16-32 read as 100). The axis gets blanks as wide, for the column.
    let decades: Vec<(f64, String)> = (y_lo as i32..=y_hi as i32)
        .map(|e| (f64::from(e), si(10f64.powi(e))))
        .collect();
    let label_width = decades
        .iter()
        .map(|d| d.1.chars().count())
        .max()
        .unwrap_or(1);
    let y_labels: Vec<Span> = decades
        .iter()
        .map(|_| Span::raw(" ".repeat(label_width)))
        .collect();
    let x_labels = vec![
        Span::raw(tokens(x_lo)),
        Span::raw(tokens((x_lo + x_hi) / 2.0)),
        Span::raw(format!("{} tokens", tokens(x_hi))),
    ];
    let mut inner = block.inner(area);
    frame.render_widget(block, area);
    if inner.height >= 5
        && let Some(head) = super::timeline_marks::headline(app, inner.width as usize)
    {
        let [top, rest] =
            Layout::vertical([Constraint::Length(1), Constraint::Min(1)]).areas(inner);
        frame.render_widget(head, top);
        inner = rest;
    }
    let losses: Vec<f64> = all.iter().filter_map(|p| p.loss).collect();
    let chart_area = if losses.len() >= 2 && inner.height >= 8 {
        let [chart_area, loss_area] =
            Layout::vertical([Constraint::Min(4), Constraint::Length(1)]).areas(inner);
        draw_loss(frame, loss_area, &losses);
        chart_area
    } else {
        inner
    };
    let axes = |datasets| {
        Chart::new(datasets)
            .legend_position(None)
            // No axis titles: ratatui draws them inside the plot, over the curve, the cursor
            // and the switch markers. The units are in the labels (the x axis's last says
            // "tokens") and in the panel title (B_crit in samples).
            .x_axis(
                Axis::default()
                    .bounds([x_lo, x_hi])
                    .labels(x_labels.clone()),
            )
            .y_axis(
                Axis::default()
                    .bounds([y_lo, y_hi])
                    .labels(y_labels.clone()),
            )
    };
    // The axes alone first: where they put the plot area sets the dot grid the long lines
    // are thinned for (the same picture at a fraction of the segments; `polyline`). The
    // full chart then draws the same axes over them.
    frame.render_widget(axes(vec![]), chart_area);
    let plot_and_axis = super::timeline_marks::plot_area(frame.buffer_mut(), chart_area);
    let plot = plot_and_axis.map(|p| p.0);
    // Thinned on the raw values, mapped to the log axis only where kept: a live run's
    // timeline has 10⁴–10⁵ points and three series (polyline::thin_mapped).
    let series =
        |marker: Marker, values: &mut dyn Iterator<Item = (f64, f64)>, map: fn(f64) -> f64| {
            let grid = plot.and_then(|p| DotGrid::new(p, marker, [x_lo, x_hi], [y_lo, y_hi]));
            match grid {
                Some(g) => polyline::thin_mapped(values, map, |y| 10f64.powf(y), &g),
                None => values.map(|(x, y)| (x, map(y))).collect(),
            }
        };
    let floored_log = |v: f64| v.max(1e-9).log10();
    let line = series(
        Marker::Braille,
        &mut pts.iter().map(|p| (p.tokens, p.b_crit)),
        f64::log10,
    );
    let ci_lo = series(
        Marker::Dot,
        &mut pts
            .iter()
            .filter_map(|p| drawn_interval(p).map(|c| (p.tokens, c.0))),
        floored_log,
    );
    let ci_hi = series(
        Marker::Dot,
        &mut pts
            .iter()
            .filter_map(|p| drawn_interval(p).map(|c| (p.tokens, c.1))),
        floored_log,
    );
    let mut datasets = vec![];
    for band in [&ci_lo, &ci_hi] {
        if !band.is_empty() {
            datasets.push(
                Dataset::default()
                    .marker(Marker::Dot)
                    .graph_type(GraphType::Line)
                    .style(Style::new().fg(theme::current().muted))
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
                .style(Style::new().fg(theme::current().mark))
                .data(&current_line),
        );
    }
    datasets.push(
        Dataset::default()
            .name("B_crit")
            .marker(Marker::Braille)
            .graph_type(GraphType::Line)
            .style(Style::new().fg(theme::current().warning))
            .data(&line),
    );
    datasets.push(
        Dataset::default()
            .marker(Marker::Block)
            .graph_type(GraphType::Line)
            .style(Style::new().fg(theme::current().accent))
            .data(&cursor),
    );

    frame.render_widget(axes(datasets), chart_area);
    if let Some((plot, _)) = plot_and_axis {
        draw_y_labels(
            frame.buffer_mut(),
            plot,
            chart_area.x,
            &decades,
            [y_lo, y_hi],
        );
    }
    if let Some(plot_and_axis) = plot_and_axis {
        super::timeline_marks::draw(
            frame.buffer_mut(),
            plot_and_axis,
            app,
            [x_lo, x_hi],
            [y_lo, y_hi],
        );
    }
}

/// The row of `plot` where the chart draws a braille point of value `v` on the axis `y`
/// (ratatui's canvas: four dot rows a cell, the value's dot row rounded to the nearest).
pub(crate) fn braille_row(plot: Rect, y: [f64; 2], v: f64) -> u16 {
    let g = ((y[1] - v) / (y[1] - y[0]).max(f64::MIN_POSITIVE)).clamp(0.0, 1.0);
    let dots = f64::from(plot.height) * 4.0 - 1.0;
    plot.y + ((g * dots).round() as u16) / 4
}

/// The y labels (`(value, text)` from the bottom) left of `plot`, from column `left`, each on
/// the row where the curve draws its value: the top and bottom ones always, an inner one where
/// its row is below the last label placed and above the bottom one (two labels on one row
/// print over each other: "100kk").
fn draw_y_labels(buf: &mut Buffer, plot: Rect, left: u16, labels: &[(f64, String)], y: [f64; 2]) {
    let width = usize::from(plot.x.saturating_sub(1).saturating_sub(left));
    if width == 0 || labels.is_empty() {
        return;
    }
    let bottom = braille_row(plot, y, y[0]);
    let mut last: Option<u16> = None;
    for (i, (value, text)) in labels.iter().enumerate().rev() {
        let row = braille_row(plot, y, *value);
        let (is_top, is_bottom) = (i + 1 == labels.len(), i == 0);
        let free = last.is_none_or(|r| row > r);
        let inner_fits = free && row < bottom;
        if !(is_top || (is_bottom && free) || inner_fits) {
            continue;
        }
        last = Some(row);
        let shown: String = text.chars().take(width).collect();
        buf.set_string(left, row, format!("{shown:<width$}"), Style::new());
    }
}

/// One row under the chart: the loss over training as a sparkline, with its first and last
/// values (nats).
fn draw_loss(frame: &mut Frame, area: Rect, losses: &[f64]) {
    let first = losses[0];
    let last = losses[losses.len() - 1];
    let label = format!(" loss {first:.2}→{last:.2} ");
    let width = label.chars().count() as u16;
    let [l, r] = Layout::horizontal([Constraint::Length(width), Constraint::Min(1)]).areas(area);
    frame.render_widget(
        Span::styled(label, Style::new().fg(theme::current().muted)),
        l,
    );
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
            .style(Style::new().fg(theme::current().muted)),
        r,
    );
}

#[cfg(test)]
mod tests {
    use super::{braille_row, fitted_title, legend_text};
    use ratatui::buffer::Buffer;
    use ratatui::layout::Rect;
    use ratatui::symbols::Marker;
    use ratatui::widgets::{Axis, Chart, Dataset, GraphType, Widget};

    /// A label sits on the row where ratatui's chart draws a braille point of its value, at
    /// every height (ratatui's own labels sat a row below it at some: the plan's batch of 16
    /// read as 100 at 120x40).
    #[test]
    fn a_decade_label_is_on_the_row_of_its_value() {
        for height in 3..40u16 {
            for decades in 1..7 {
                let y = [0.0, f64::from(decades)];
                for e in 0..=decades {
                    let v = f64::from(e);
                    let area = Rect::new(0, 0, 30, height);
                    let mut buf = Buffer::empty(area);
                    let point = [(0.5, v)];
                    Chart::new(vec![
                        Dataset::default()
                            .marker(Marker::Braille)
                            .graph_type(GraphType::Scatter)
                            .data(&point),
                    ])
                    .x_axis(Axis::default().bounds([0.0, 1.0]))
                    .y_axis(Axis::default().bounds(y))
                    .render(area, &mut buf);
                    let drawn = (0..height)
                        .find(|&r| (0..30).any(|c| buf[(c, r)].symbol() != " "))
                        .expect("the point is drawn");
                    let plot = Rect::new(0, 0, 30, height);
                    assert_eq!(
                        braille_row(plot, y, v),
                        drawn,
                        "{height} rows, 10^{e} of 10^{decades}"
                    );
                }
            }
        }
    }

    /// The legend fits the border at every width, its entries whole: a glyph with its first
    /// word at least, never a word cut by the border ("─ plan's" at 80x24).
    #[test]
    fn the_legend_keeps_whole_entries_at_every_width() {
        let parts: Vec<String> = [
            "⠤ B_crit",
            "• interval",
            "▄ batch 128 now",
            "█ cursor",
            "⡇ switch ([ ])",
            "● measured B_noise",
            "▲ threshold CBS",
            "─ plan's batch",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(legend_text(&parts, 200), format!(" {} ", parts.join(" · ")));
        let short = legend_text(&parts, 78);
        assert!(
            short.ends_with("▲ threshold ") || short.ends_with("─ plan "),
            "{short}"
        );
        assert!(!short.contains("plan's"), "{short}");
        for width in 12..120 {
            let t = legend_text(&parts, width);
            assert!(t.chars().count() <= width, "{width}: {t}");
            let words: Vec<&str> = t.split_whitespace().collect();
            for w in words {
                let whole = parts.iter().any(|p| {
                    p.split(' ')
                        .any(|x| x == w || x.trim_end_matches("'s") == w)
                });
                assert!(whole, "{width}: a cut word {w:?} in {t:?}");
            }
        }
    }

    #[test]
    fn a_title_keeps_whole_segments_and_cuts_only_the_label() {
        let segs: Vec<String> = [
            "B_crit 3.7k [1.5k–∞]",
            "step 299",
            "loss 2.207",
            "measured: a long label",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let wide = fitted_title(&segs, 200);
        assert_eq!(
            wide,
            " B_crit 3.7k [1.5k–∞] · step 299 · loss 2.207 · measured: a long label "
        );
        for width in 10..80 {
            let t = fitted_title(&segs, width);
            assert!(t.chars().count() <= width.max(2), "{width}: {t}");
            // Never a number cut: loss appears whole or not at all.
            assert!(
                !t.contains("loss") || t.contains("loss 2.207"),
                "{width}: {t}"
            );
        }
        let cut = fitted_title(&segs, 60);
        assert!(cut.ends_with("… "), "{cut}");
    }
}
