//! What the timeline adds for a measured run: the headline row (where B_crit is now, how it
//! moved, the run-wide value), the located causes as glyphs on the token axis, the stretches
//! where a compared run differs, and the compared run's trajectory as a second glyph. The
//! logic (which causes, which numbers) lives in [`crate::app::measured_view`].

use crate::app::App;
use crate::app::measured_view::{self as mv, CauseKind};
use crate::trajectory::Trajectory;
use crate::ui::theme;
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};

/// Glyph of the compared run's trajectory on the chart.
pub const COMPARE_GLYPH: &str = "+";
/// Glyph on the token axis where the compared run differs beyond the intervals.
pub const DIFFERS_GLYPH: char = '≠';
/// Glyph of a branch point's fitted B_noise (measured by branched training).
pub const FITTED_GLYPH: &str = "●";
/// Glyph of a branch point's threshold CBS.
pub const THRESHOLD_GLYPH: &str = "▲";
/// The glyph of a switch point of the plan (the legend's "⡇ switch").
pub const SWITCH_GLYPH: &str = "⡇";
/// The glyph of the plan's batch (the optimal-joint schedule's batch over training).
pub const PLAN_GLYPH: &str = "─";

/// The optimal-joint plan's batch over training, in the run's samples (the timeline's axis):
/// `(from_tokens, batch)` in order, the first from the start. Empty without a plan, and
/// while the heatmap withholds goodput as read at the wrong scale (`scale_warning`): the plan
/// was searched at that scale (a 65.5k-sample line beside a run at batch 128).
pub fn planned_batches(app: &App) -> Vec<(f64, f64)> {
    let Some(plan) = app.plan.as_deref().filter(|_| app.scale_warning.is_none()) else {
        return Vec::new();
    };
    let Some(row) = plan.strategies.iter().find(|s| s.name == "optimal-joint") else {
        return Vec::new();
    };
    // The plan counts the model's sequences (the heatmap's axis).
    let per = app.samples_to_model_seqs();
    let to_run = |b: u64| b as f64 / per;
    std::iter::once((f64::NEG_INFINITY, to_run(row.start_state.batch)))
        .chain(
            plan.switches
                .iter()
                .map(|s| (s.at_tokens, to_run(s.to_state.batch))),
        )
        .filter(|(_, b)| b.is_finite() && *b > 0.0)
        .collect()
}

/// The plan's batch at `tokens` (see [`planned_batches`]).
fn planned_at(plan: &[(f64, f64)], tokens: f64) -> Option<f64> {
    plan.iter()
        .rev()
        .find(|(from, _)| *from <= tokens)
        .map(|p| p.1)
}

/// The branch marks of the run, if a branch file was given.
fn branch_marks(app: &App) -> Vec<crate::app::branches::BranchMark> {
    app.branches
        .as_deref()
        .map(|b| crate::app::branches::marks(b, &app.raw_trajectory))
        .unwrap_or_default()
}

/// The values the branch marks are drawn at (threshold CBS and fitted B_noise, samples): the
/// chart's axis takes them in, so that a mark below the run's own curve is drawn (the step-30
/// threshold of the built-in trainer, 32 samples, fell under an axis starting at 100).
pub fn branch_values(app: &App) -> Vec<f64> {
    branch_marks(app)
        .iter()
        .flat_map(|m| [m.threshold_measured().then_some(m.threshold), m.fitted])
        .flatten()
        .filter(|v| v.is_finite() && *v > 0.0)
        .collect()
}

/// The headline row for a measured run, fitted to `width` columns (value first), or `None`
/// when the source is not measured.
pub fn headline(app: &App, width: usize) -> Option<Line<'static>> {
    let report = app.analysis.as_deref()?;
    let live = matches!(
        app.resolved.session.source,
        crate::session::DataSource::Live { .. }
    );
    let unit = mv::sample_word(app.trajectory.seq_len);
    let mut segments = if live {
        mv::live_headline_segments_in(report, unit)
    } else {
        mv::headline_segments_in(report, unit)
    };
    if let Some(c) = &app.compare {
        // Right after now, before drift and the run-wide value: what a comparison is opened
        // for, so it is what a narrow screen keeps (at 80 columns it was left out for drift).
        for (k, seg) in mv::compare_headline(&c.comparison).into_iter().enumerate() {
            segments.insert((1 + k).min(segments.len()), seg);
        }
    }
    // Under one layer's title (`l`) these figures are still the whole model's: said.
    if app.viewed_layer().is_some()
        && let Some(first) = segments.first_mut()
    {
        *first = format!("whole model: {first}");
    }
    let cursor_step = app.trajectory.points.get(app.cursor).map_or(0, |p| p.step);
    let marks = branch_marks(app);
    if let Some(seg) = crate::app::branches::headline_segment(&marks, cursor_step) {
        // First: a run opened with its branched experiment is opened to compare the two.
        segments.insert(0, seg);
    } else if let (Some(b), true) = (app.branches.as_deref(), marks.is_empty()) {
        // Given, yet nothing drawn: say why rather than show the run alone.
        let steps: Vec<String> = b.points.iter().map(|p| p.from_step.to_string()).collect();
        let run = app.raw_trajectory.points.last().map_or(0, |p| p.step);
        segments.insert(
            0,
            format!(
                "no branch point ({}) lies within this run's steps (to {run}): is it this \
                 run's branched experiment?",
                steps.join(", ")
            ),
        );
    }
    let text = mv::fit_segments(&segments, width.saturating_sub(1));
    let drifting = report.summary.drift.as_ref().is_some_and(|d| d.significant);
    let style = if drifting {
        Style::new()
            .fg(theme::current().warning)
            .add_modifier(Modifier::BOLD)
    } else {
        Style::new().add_modifier(Modifier::BOLD)
    };
    Some(Line::from(Span::styled(format!(" {text}"), style)))
}

/// The legend entries this module adds (one per cause kind present, the compared run and its
/// differences, the plan's batch where it falls inside the axis's decades `y`), each led by
/// its glyph.
pub fn legend_entries(app: &App, y: Option<(f64, f64)>) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(report) = app.analysis.as_deref() {
        let mut kinds: Vec<CauseKind> = mv::causes(report, &app.trajectory)
            .iter()
            .map(|c| c.kind)
            .collect();
        kinds.dedup();
        out.extend(kinds.iter().map(|k| format!("{} {}", k.glyph(), k.label())));
    }
    let marks = branch_marks(app);
    if !marks.is_empty() {
        if marks.iter().any(|m| m.fitted.is_some()) {
            out.push(format!("{FITTED_GLYPH} measured B_noise"));
        }
        if marks.iter().any(|m| m.threshold_measured()) {
            out.push(format!("{THRESHOLD_GLYPH} threshold CBS"));
        }
    }
    // Where some of the plan's batch falls inside the axis's decades `y` (log10); where none
    // does, its batches and which side of the axis they lie on (its switches are marked).
    let planned = planned_batches(app);
    if let Some((lo, hi)) = y.filter(|_| !planned.is_empty()) {
        if planned.iter().any(|p| (lo..=hi).contains(&p.1.log10())) {
            out.push(format!("{PLAN_GLYPH} plan's batch"));
        } else {
            let mut batches: Vec<String> = Vec::new();
            for p in &planned {
                let b = crate::format::count(p.1);
                if batches.last() != Some(&b) {
                    batches.push(b);
                }
            }
            // Led by an arrow and the batches (the legend's short form keeps the first two
            // words: "↓16→32 plan").
            let (arrow, side) = if planned[0].1.log10() < lo {
                ("↓", "below")
            } else {
                ("↑", "above")
            };
            out.push(format!(
                "{arrow}{} plan's batch, {side} the axis",
                batches.join("→")
            ));
        }
    }
    if let Some(c) = &app.compare {
        out.push(format!("{COMPARE_GLYPH} B {}", c.label));
        if !c.comparison.differs.is_empty() {
            out.push(format!("{DIFFERS_GLYPH} B≠A"));
        }
    }
    out
}

/// The compared run's trajectory as the timeline draws it (A's samples, the session's B_crit
/// conversion applied as to A).
pub fn compare_trajectory(app: &App) -> Option<Trajectory> {
    let c = app.compare.as_ref()?;
    let mut t = c.trajectory.clone();
    crate::app::state::BCritScaling::of(&app.resolved.session).apply(&mut t);
    Some(t)
}

/// The plot area of a chart drawn in `chart_area`: right of the y axis, above the x axis, and
/// the row of the x axis (found from the axis corner `└` the chart drew).
pub fn plot_area(buf: &Buffer, chart_area: Rect) -> Option<(Rect, u16)> {
    for y in chart_area.y..chart_area.bottom() {
        for x in chart_area.x..chart_area.right() {
            if buf[(x, y)].symbol() == "└" {
                let left = x + 1;
                let width = chart_area.right().saturating_sub(left);
                let height = y.saturating_sub(chart_area.y);
                if width < 2 || height < 1 {
                    return None;
                }
                return Some((Rect::new(left, chart_area.y, width, height), y));
            }
        }
    }
    None
}

/// The row of `plot` where the plan's batch of log10 `v` is drawn: the row a braille dot of
/// the same value falls on, as the decade labels are placed (`timeline::braille_row`).
fn plan_row(plot: Rect, y: [f64; 2], v: f64) -> u16 {
    crate::ui::timeline::braille_row(plot, y, v)
}

/// Whether a cell shows nothing (a space or an empty braille pattern).
fn is_blank(symbol: &str) -> bool {
    symbol.chars().all(|ch| ch == ' ' || ch == '\u{2800}')
}

/// Write each plan segment's batch ("64", "128") on its line, just after where it starts,
/// where the segment is wide enough and the cells hold nothing but the plan's line: at 80×24
/// a decade is one row, and batches 64, 128 and 256 were drawn on one flat line.
fn label_plan_segments(
    buf: &mut Buffer,
    plot: Rect,
    plan: &[(f64, f64)],
    x: [f64; 2],
    y: [f64; 2],
    style: Style,
) {
    for (i, &(from, batch)) in plan.iter().enumerate() {
        let until = plan.get(i + 1).map_or(x[1], |next| next.0);
        if until <= x[0] || from >= x[1] {
            continue;
        }
        let v = batch.log10();
        if !(y[0]..=y[1]).contains(&v) {
            continue;
        }
        let start = column(plot, from.max(x[0]), x[0], x[1]);
        let end = column(plot, until.min(x[1]), x[0], x[1]);
        let label = crate::format::count(batch);
        let width = label.chars().count() as u16;
        // One cell of line before the label (after a switch marker); after it, the next
        // segment's first cell is line (at 80×24 the demo's first segment, 64, had room for
        // its label only without a cell of its own after it, and the line read "───128").
        let first = start.saturating_add(1);
        if first.saturating_add(width) > end.min(plot.right()) {
            continue;
        }
        let row = plan_row(plot, y, v);
        let cells = first..first + width;
        if !cells
            .clone()
            .all(|c| matches!(buf[(c, row)].symbol(), s if s == PLAN_GLYPH || is_blank(s)))
        {
            continue;
        }
        for (c, ch) in cells.zip(label.chars()) {
            buf[(c, row)].set_char(ch).set_style(style);
        }
    }
}

/// Column of position `x` in [`lo`, `hi`] across `plot`.
fn column(plot: Rect, x: f64, lo: f64, hi: f64) -> u16 {
    let f = ((x - lo) / (hi - lo).max(f64::MIN_POSITIVE)).clamp(0.0, 1.0);
    plot.x + (f * (plot.width - 1) as f64).round() as u16
}

/// Mark a token range on the axis row with `glyph` (at least one cell).
fn mark_range(
    buf: &mut Buffer,
    plot: Rect,
    axis: u16,
    range: [f64; 2],
    x: [f64; 2],
    glyph: char,
    style: Style,
) {
    let (a, b) = (
        column(plot, range[0], x[0], x[1]),
        column(plot, range[1], x[0], x[1]),
    );
    for c in a.min(b)..=a.max(b) {
        buf[(c, axis)].set_char(glyph).set_style(style);
    }
}

/// Draw the marks over a chart already rendered, whose plot area and x-axis row are
/// `(plot, axis)` (as [`plot_area`] finds them) and whose axes span tokens `x` and log10
/// samples `y`: the compared run's trajectory, the stretches where it differs, and the located
/// causes on the token axis (drawn last, so a cause is never hidden).
pub fn draw(buf: &mut Buffer, (plot, axis): (Rect, u16), app: &App, x: [f64; 2], y: [f64; 2]) {
    // The plan's batch first, on empty cells only: the curve, the interval and the current
    // batch stay in view where they cross it (the coupling lesson's plan 64 → 128 → 256 was
    // drawn nowhere).
    let plan = planned_batches(app);
    if !plan.is_empty() {
        let style = Style::new().fg(theme::current().info);
        for c in plot.x..plot.right() {
            let f = f64::from(c - plot.x) / f64::from((plot.width - 1).max(1));
            let Some(b) = planned_at(&plan, x[0] + f * (x[1] - x[0])) else {
                continue;
            };
            let v = b.log10();
            if !(y[0]..=y[1]).contains(&v) {
                continue;
            }
            let cell = &mut buf[(c, plan_row(plot, y, v))];
            if is_blank(cell.symbol()) {
                cell.set_symbol(PLAN_GLYPH).set_style(style);
            }
        }
        label_plan_segments(buf, plot, &plan, x, y, style);
    }
    if let Some(b) = compare_trajectory(app)
        && let (Some(first), Some(last)) = (b.points.first(), b.points.last())
    {
        let style = Style::new().fg(theme::current().mark_soft);
        for c in plot.x..plot.right() {
            let f = (c - plot.x) as f64 / (plot.width - 1).max(1) as f64;
            let t = x[0] + f * (x[1] - x[0]);
            if t < first.tokens || t > last.tokens {
                continue;
            }
            let p = &b.points[b.index_at_tokens(t)];
            let v = p.b_crit.max(1e-9).log10();
            if !(y[0]..=y[1]).contains(&v) {
                continue;
            }
            let g = (y[1] - v) / (y[1] - y[0]).max(f64::MIN_POSITIVE);
            let row = plot.y + (g * (plot.height - 1) as f64).round() as u16;
            let cell = &mut buf[(c, row)];
            // Never over the cursor or the axis titles.
            if cell.symbol() == "█" || cell.symbol().chars().any(char::is_alphanumeric) {
                continue;
            }
            cell.set_symbol(COMPARE_GLYPH).set_style(style);
        }
    }
    // The plan's switch points over the chart, in its top rows: drawn under the curve as a
    // series, the second of two switches was hidden by the B_crit curve at 80×24.
    let switch_style = Style::new().fg(theme::current().error_soft);
    for p in app
        .switch_points
        .iter()
        .filter_map(|&i| app.trajectory.points.get(i))
    {
        if p.tokens < x[0] || p.tokens > x[1] {
            continue;
        }
        let c = column(plot, p.tokens, x[0], x[1]);
        for row in plot.y..plot.y.saturating_add(plot.height.min(2)) {
            let cell = &mut buf[(c, row)];
            // Never over the cursor or the axis labels.
            if cell.symbol() == "█" || cell.symbol().chars().any(char::is_alphanumeric) {
                continue;
            }
            cell.set_symbol(SWITCH_GLYPH).set_style(switch_style);
        }
    }
    for m in branch_marks(app) {
        let c = column(plot, m.tokens, x[0], x[1]);
        let points = [
            (
                // Not measured (a reference that trained worse): no value to draw.
                m.threshold_measured().then_some(m.threshold),
                THRESHOLD_GLYPH,
                theme::current().good_soft,
            ),
            (m.fitted, FITTED_GLYPH, theme::current().accent_soft),
        ];
        for (value, glyph, color) in points {
            let Some(v) = value.filter(|v| *v > 0.0).map(f64::log10) else {
                continue;
            };
            if !(y[0]..=y[1]).contains(&v) || m.tokens < x[0] || m.tokens > x[1] {
                continue;
            }
            let g = (y[1] - v) / (y[1] - y[0]).max(f64::MIN_POSITIVE);
            let row = plot.y + (g * (plot.height - 1) as f64).round() as u16;
            buf[(c, row)]
                .set_symbol(glyph)
                .set_style(Style::new().fg(color).add_modifier(Modifier::BOLD));
        }
    }
    if let Some(c) = &app.compare {
        let style = Style::new().fg(theme::current().mark_soft);
        for r in mv::differ_stretches(c, &app.trajectory) {
            mark_range(buf, plot, axis, r, x, DIFFERS_GLYPH, style);
        }
    }
    if let Some(report) = app.analysis.as_deref() {
        for cause in mv::causes(report, &app.trajectory) {
            let style = match cause.kind {
                CauseKind::NonFinite | CauseKind::LossScaleJump => {
                    Style::new().fg(theme::current().error)
                }
                _ => Style::new().fg(theme::current().warning_soft),
            };
            mark_range(buf, plot, axis, cause.tokens, x, cause.kind.glyph(), style);
        }
    }
}
