//! The explanation popup (`x`): the selected cell's step time and memory as stacked bars of
//! lettered parts (readable without colour, with a legend), its chosen options, and for a cell
//! that cannot run the reason and the nearest change that runs; with a marked cell (`m`), both
//! cells side by side and the difference. The numbers come from [`crate::app::explain`].

use super::format::si;
use super::palette::ColorMode;
use crate::app::App;
use crate::app::explain::{CellKind, CellView, Comparison, cell_view, compare};
use crate::perf::explain::{Explanation, Part};
use crate::ui::theme;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};

/// Colour of a part in a bar (its letter is drawn on it, so colour is never the only cue).
fn part_color(key: &str) -> Color {
    match key {
        "compute" | "activations" => theme::current().good,
        "bubble" | "output" => theme::current().warning,
        "tp" | "cp" | "gradients" => theme::current().mark,
        "pp" | "weights" => theme::current().info,
        "dp" => theme::current().error,
        "optimizer" | "optimizer_state" => theme::current().accent,
        _ => theme::current().muted,
    }
}

/// Cells of a `width`-wide bar each part gets at `scale` (value per full bar; parts adding up
/// to more fill the bar), by largest remainder so that the cells add up to the rounded total.
pub fn bar_cells(values: &[f64], scale: f64, width: usize) -> Vec<usize> {
    if scale.is_nan() || scale <= 0.0 || width == 0 {
        return vec![0; values.len()];
    }
    let scale = scale.max(values.iter().map(|v| v.max(0.0)).sum());
    let exact: Vec<f64> = values
        .iter()
        .map(|v| (v.max(0.0) / scale * width as f64).min(width as f64))
        .collect();
    let total = (exact.iter().sum::<f64>().round() as usize).min(width);
    let mut cells: Vec<usize> = exact.iter().map(|e| e.floor() as usize).collect();
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&a, &b| (exact[b] - exact[b].floor()).total_cmp(&(exact[a] - exact[a].floor())));
    let given: usize = cells.iter().sum();
    for &i in order.iter().take(total.saturating_sub(given)) {
        cells[i] += 1;
    }
    cells
}

/// A stacked bar of `parts` in `width` cells at `scale`, then free space ('·') up to `cap`;
/// when the parts exceed `cap`, a '┃' marks where it lies.
fn bar(
    parts: &[Part],
    scale: f64,
    cap: Option<f64>,
    width: usize,
    mode: ColorMode,
) -> Line<'static> {
    let values: Vec<f64> = parts.iter().map(|p| p.value).collect();
    let cells = bar_cells(&values, scale, width);
    // One (glyph, part key) per cell; `None` for free space and the capacity mark.
    let mut row: Vec<(char, Option<&'static str>)> = Vec::new();
    for (p, &n) in parts.iter().zip(&cells) {
        row.extend(std::iter::repeat_n((p.glyph, Some(p.key)), n));
    }
    if let Some(cap) = cap.filter(|_| scale > 0.0) {
        let cap_cells = ((cap / scale * width as f64).round() as usize).min(width);
        if cap_cells > row.len() {
            row.resize(cap_cells, ('·', None));
        } else if cap_cells < row.len() {
            row[cap_cells] = ('┃', None);
        }
    }
    let mut spans = vec![Span::raw("  ▕")];
    let mut i = 0;
    while i < row.len() {
        let key = row[i].1;
        let mut j = i;
        while j < row.len() && row[j].1 == key && (key.is_some() || row[j].0 == row[i].0) {
            j += 1;
        }
        let text: String = row[i..j].iter().map(|c| c.0).collect();
        spans.push(match (mode, key) {
            (ColorMode::Indexed, Some(k)) => Span::styled(
                text,
                Style::new().bg(part_color(k)).fg(theme::current().on_light),
            ),
            _ => Span::raw(text),
        });
        i = j;
    }
    spans.push(Span::raw("▏"));
    Line::from(spans)
}

fn seconds(s: f64) -> String {
    if s.abs() >= 10.0 {
        format!("{s:.1} s")
    } else if s.abs() >= 0.01 || s == 0.0 {
        format!("{s:.3} s")
    } else {
        format!("{:.2} ms", s * 1e3)
    }
}

fn gb(bytes: f64) -> String {
    format!("{:.1} GB", bytes / 1e9)
}

fn legend(parts: &[Part], whole: f64, fmt: fn(f64) -> String) -> Vec<Line<'static>> {
    parts
        .iter()
        .filter(|p| p.value > 0.0)
        .map(|p| {
            Line::from(format!(
                "   {} {:<16}{:>10} {:>5.1}%",
                p.glyph,
                p.label,
                fmt(p.value),
                100.0 * p.value / whole.max(f64::MIN_POSITIVE)
            ))
        })
        .collect()
}

fn options(e: &Explanation) -> String {
    let c = &e.config;
    let mut s = format!(
        "mbs {} · ZeRO-{} · recompute {} · interleave {}",
        c.mbs, c.zero, c.recompute, c.vpp
    );
    if c.ep > 1 {
        s.push_str(&format!(" · EP {}", c.ep));
    }
    let n = e.micro_batches;
    s.push_str(&format!(
        " · {n} micro-batch{} per step",
        if n == 1 { "" } else { "es" }
    ));
    s
}

fn memory_line(e: &Explanation) -> String {
    let need = e.prediction.memory_per_gpu_bytes;
    let over = if need > e.capacity_bytes {
        format!(" — over by {}", gb(need - e.capacity_bytes))
    } else {
        String::new()
    };
    format!(
        "Memory per GPU {} of {} ({:.0}%){over}",
        gb(need),
        gb(e.capacity_bytes),
        100.0 * need / e.capacity_bytes.max(1.0)
    )
}

/// The step and memory bars and legends of `e`, bars `width` cells wide.
fn bars(e: &Explanation, width: usize, mode: ColorMode) -> Vec<Line<'static>> {
    let bold = Style::new().add_modifier(Modifier::BOLD);
    let p = &e.prediction;
    let mut lines = vec![Line::styled(
        format!("Step time {} per step", seconds(p.step_time_s)),
        bold,
    )];
    lines.push(bar(&e.step, p.step_time_s, None, width, mode));
    lines.extend(legend(&e.step, p.step_time_s, seconds));
    lines.push(Line::styled(memory_line(e), bold));
    let scale = p.memory_per_gpu_bytes.max(e.capacity_bytes);
    lines.push(bar(&e.memory, scale, Some(e.capacity_bytes), width, mode));
    lines.extend(legend(&e.memory, p.memory_per_gpu_bytes, gb));
    if e.fragmentation_risk() {
        lines.push(Line::styled(
            {
                let free = e.capacity_bytes - e.logits_stage_bytes;
                let against = if e.largest_buffer_bytes > free {
                    "is larger than"
                } else {
                    "is over half of"
                };
                let stage = if e.config.pp > 1 {
                    " of the last pipeline stage, which holds it"
                } else {
                    ""
                };
                format!(
                    "Caution: one tensor (the logits, {}, counted in the peak) {against} the {} \
                     left free at the peak{stage}: the allocator's fragmentation can stop it",
                    gb(e.largest_buffer_bytes),
                    gb(free)
                )
            },
            Style::new().fg(theme::current().error),
        ));
    }
    if e.host_bound_risk {
        lines.push(Line::styled(
            format!(
                "Caution: each micro-batch is {} of the step, under the {} an eager stack \
                 needs to keep the GPU busy: the host launching kernels can bound it, so read \
                 the step time as a lower bound",
                seconds(e.micro_batch_s),
                seconds(e.host_bound_threshold_s)
            ),
            Style::new().fg(theme::current().warning),
        ));
    }
    lines
}

/// The lines explaining one cell.
pub fn cell_lines(v: &CellView, width: usize, mode: ColorMode) -> Vec<Line<'static>> {
    let bold = Style::new().add_modifier(Modifier::BOLD);
    let red = Style::new().fg(theme::current().error);
    let mut lines = vec![Line::styled(
        format!("{} @ batch {}", v.layout, v.batch),
        bold,
    )];
    match &v.kind {
        CellKind::Runs(e) => {
            let p = &e.prediction;
            lines.push(Line::from(format!("  {}", options(e))));
            lines.push(Line::from(format!(
                "  {} tok/s · MFU {:.0}% · stat. eff. {:.2} · goodput {}",
                si(p.tokens_per_s),
                p.mfu * 100.0,
                v.stat_eff,
                v.goodput.map_or_else(|| "-".into(), si)
            )));
            lines.push(Line::from(format!(
                "  exposed communication {:.0}% · pipeline bubble {:.0}% of the step",
                e.exposed_comm_share() * 100.0,
                e.bubble_share() * 100.0
            )));
            lines.extend(bars(e, width, mode));
        }
        CellKind::Infeasible {
            reason,
            closest,
            nearest,
            batch_floor,
        } => {
            lines.push(Line::styled(format!("  cannot run: {reason}"), red));
            if let Some(c) = closest {
                lines.push(Line::from(format!(
                    "  closest searched configuration: {}",
                    options(c)
                )));
                lines.extend(bars(c, width, mode));
            }
            if let Some(f) = batch_floor {
                lines.push(Line::styled(
                    format!("Nearest change: a batch of at least {f} (the MoE floor)"),
                    bold,
                ));
            }
            match nearest {
                Some(n) => {
                    lines.push(Line::styled(
                        format!(
                            "Nearest change that runs ({} step{}, {} neighbours tried):",
                            n.distance,
                            if n.distance == 1 { "" } else { "s" },
                            n.tried
                        ),
                        bold.fg(theme::current().good),
                    ));
                    lines.push(Line::from(format!("  {}", n.changes.join(" · "))));
                    lines.push(Line::from(format!(
                        "  → {}: {} per step, {} tok/s, {} per GPU",
                        n.config,
                        seconds(n.prediction.step_time_s),
                        si(n.prediction.tokens_per_s),
                        gb(n.prediction.memory_per_gpu_bytes)
                    )));
                }
                None if batch_floor.is_none() => lines.push(Line::styled(
                    "No neighbouring configuration runs (TP/PP ×4, any ZeRO, recompute, smaller micro-batch).",
                    red,
                )),
                None => {}
            }
        }
    }
    lines
}

fn delta_row(glyph: char, label: &str, a: f64, b: f64, fmt: fn(f64) -> String) -> Line<'static> {
    let d = b - a;
    let sign = if d > 0.0 { "+" } else { "" };
    let diff = format!("{sign}{}", fmt(d));
    Line::from(format!(
        " {glyph} {label:<16}{:>11}{:>11}{diff:>12}",
        fmt(a),
        fmt(b)
    ))
}

fn ratio_row(label: &str, a: String, b: String, ratio: f64) -> Line<'static> {
    Line::from(format!(
        "   {label:<16}{a:>11}{b:>11}{:>+11.1}%",
        (ratio - 1.0) * 100.0
    ))
}

/// The lines comparing marked cell `a` with selected cell `b`.
pub fn comparison_lines(
    a: &CellView,
    b: &CellView,
    c: &Comparison,
    width: usize,
    mode: ColorMode,
) -> Vec<Line<'static>> {
    let bold = Style::new().add_modifier(Modifier::BOLD);
    let (Some(ea), Some(eb)) = (a.runs(), b.runs()) else {
        return Vec::new();
    };
    let mut lines = vec![
        Line::styled(
            format!("A (marked)   {} @ batch {}", a.layout, a.batch),
            bold,
        ),
        Line::from(format!("  {}", options(ea))),
        Line::styled(
            format!("B (selected) {} @ batch {}", b.layout, b.batch),
            bold,
        ),
        Line::from(format!("  {}", options(eb))),
        Line::styled(c.summary.clone(), Style::new().fg(theme::current().warning)),
    ];
    let step_scale = ea.prediction.step_time_s.max(eb.prediction.step_time_s);
    lines.push(Line::styled(
        "Step time (bars on a common scale)".to_string(),
        bold,
    ));
    for (tag, e) in [("A", ea), ("B", eb)] {
        let mut l = bar(&e.step, step_scale, None, width.saturating_sub(3), mode);
        l.spans.insert(0, Span::raw(tag));
        lines.push(l);
    }
    lines.push(Line::styled(
        format!("Memory per GPU (of {})", gb(ea.capacity_bytes)),
        bold,
    ));
    let mem_scale = ea
        .prediction
        .memory_per_gpu_bytes
        .max(eb.prediction.memory_per_gpu_bytes)
        .max(ea.capacity_bytes);
    for (tag, e) in [("A", ea), ("B", eb)] {
        let mut l = bar(
            &e.memory,
            mem_scale,
            Some(e.capacity_bytes),
            width.saturating_sub(3),
            mode,
        );
        l.spans.insert(0, Span::raw(tag));
        lines.push(l);
    }
    lines.push(Line::styled(
        format!(" {:<18}{:>11}{:>11}{:>12}", "part", "A", "B", "B − A"),
        bold,
    ));
    for d in c.step.iter().filter(|d| d.a > 0.0 || d.b > 0.0) {
        lines.push(delta_row(d.glyph, d.label, d.a, d.b, seconds));
    }
    lines.push(delta_row(
        '=',
        "step time",
        ea.prediction.step_time_s,
        eb.prediction.step_time_s,
        seconds,
    ));
    for d in c.memory.iter().filter(|d| d.a > 0.0 || d.b > 0.0) {
        lines.push(delta_row(d.glyph, d.label, d.a, d.b, gb));
    }
    lines.push(delta_row(
        '=',
        "memory per GPU",
        ea.prediction.memory_per_gpu_bytes,
        eb.prediction.memory_per_gpu_bytes,
        gb,
    ));
    lines.push(ratio_row(
        "tokens/s",
        si(ea.prediction.tokens_per_s),
        si(eb.prediction.tokens_per_s),
        c.throughput_ratio,
    ));
    lines.push(ratio_row(
        "stat. eff.",
        format!("{:.3}", a.stat_eff),
        format!("{:.3}", b.stat_eff),
        c.stat_eff_ratio,
    ));
    lines.push(ratio_row(
        "goodput",
        a.goodput.map_or_else(|| "-".into(), si),
        b.goodput.map_or_else(|| "-".into(), si),
        c.goodput_ratio,
    ));
    lines
}

/// Everything the popup shows for `app`, bars `width` cells wide, and its title.
pub fn popup_lines(app: &App, width: usize, mode: ColorMode) -> (String, Vec<Line<'static>>) {
    let Some(b) = cell_view(app, app.selected) else {
        return (
            " Explain ".into(),
            vec![Line::from("waiting for the grid…")],
        );
    };
    let marked = app
        .marked
        .filter(|&m| m != app.selected)
        .and_then(|m| cell_view(app, m));
    match marked {
        Some(a) => {
            let title = " Compare A (marked, m) with B (selected) · x/Esc close ".to_string();
            match compare(&a, &b) {
                Some(c) => (title, comparison_lines(&a, &b, &c, width, mode)),
                None => {
                    let mut lines = vec![Line::styled(
                        "Both cells must run to be compared; each explained:",
                        Style::new().fg(theme::current().warning),
                    )];
                    lines.push(Line::from("A (marked)"));
                    lines.extend(cell_lines(&a, width, mode));
                    lines.push(Line::from(""));
                    lines.push(Line::from("B (selected)"));
                    lines.extend(cell_lines(&b, width, mode));
                    (title, lines)
                }
            }
        }
        None => {
            let mut lines = Vec::new();
            if app.marked == Some(app.selected) {
                lines.push(Line::styled(
                    "This cell is marked: select another and press x to compare.",
                    Style::new().fg(theme::current().warning),
                ));
            }
            lines.extend(cell_lines(&b, width, mode));
            (
                " Explain the selected cell · m marks it to compare · x/Esc close ".into(),
                lines,
            )
        }
    }
}

/// Where the popup goes in `area`: between the title and the key line, at most 110 columns
/// wide and 44 rows high (all of the width on a narrow terminal).
pub fn popup_area(area: Rect) -> Rect {
    let width = if area.width <= 114 { area.width } else { 110 };
    let height = area.height.saturating_sub(2).min(44);
    Rect::new(
        area.x + (area.width - width) / 2,
        area.y + (area.height - height) / 2,
        width,
        height,
    )
}

/// Draw the popup over `area` when it is open.
pub fn draw(frame: &mut Frame, area: Rect, app: &App, mode: ColorMode) {
    if !app.is_open(crate::app::OverlayKind::Explain) {
        return;
    }
    let r = popup_area(area);
    if r.width < 20 || r.height < 5 {
        return;
    }
    // Bars fill the inside less the indent and the end marks, at most 60 cells.
    let width = (r.width as usize).saturating_sub(8).min(60);
    let (title, lines) = popup_lines(app, width, mode);
    super::panel::draw_popup(frame, r, title, lines, app.explain_scroll);
}
