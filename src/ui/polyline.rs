//! A line chart's polyline cut to what its cells can show, drawing the same picture.
//!
//! ratatui's chart draws a `GraphType::Line` dataset as each point plus a segment between each
//! pair of neighbours, on a grid of dots (`Marker::Braille`: 2 × 4 dots a cell, `Dot`: one).
//! A point becomes the dot `round((x − left)·(columns − 1)/(right − left))` (rows alike, from
//! the top), and a segment between two points inside the bounds is a line between their dots.
//! So a run of neighbouring points on one dot column draws that column from its lowest dot
//! to its highest and no more; the run's first point, its lowest, its highest and its last
//! draw exactly the same, with the same segments in and out of the column. A live timeline of
//! 10⁴–10⁵ points on a few hundred dot columns then costs a few thousand segments a frame.
//!
//! Points outside the bounds (their segments are clipped in world coordinates) and points
//! that are not finite are kept as they are, with their neighbours. The picture is compared
//! cell by cell with ratatui's own rendering of the whole polyline in the tests.

use ratatui::layout::Rect;
use ratatui::symbols::Marker;

/// Dots per cell across and down for the markers this module thins for; `None` for others.
pub fn dots_per_cell(marker: Marker) -> Option<(u16, u16)> {
    match marker {
        Marker::Braille => Some((2, 4)),
        Marker::Dot => Some((1, 1)),
        _ => None,
    }
}

/// The dot grid of a chart's plot area for one marker, with the axes' bounds: what ratatui's
/// canvas maps data to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DotGrid {
    /// Data bounds across (the x axis's `[left, right]`).
    pub x_bounds: [f64; 2],
    /// Data bounds down the axis (the y axis's `[bottom, top]`).
    pub y_bounds: [f64; 2],
    /// Dots across and down the plot area.
    pub dots: (f64, f64),
}

impl DotGrid {
    /// The grid of `marker` over a plot area of `plot` cells; `None` for markers
    /// [`dots_per_cell`] does not know.
    pub fn new(plot: Rect, marker: Marker, x_bounds: [f64; 2], y_bounds: [f64; 2]) -> Option<Self> {
        let (across, down) = dots_per_cell(marker)?;
        Some(Self {
            x_bounds,
            y_bounds,
            dots: (
                f64::from(plot.width) * f64::from(across),
                f64::from(plot.height) * f64::from(down),
            ),
        })
    }

    /// The dot of a finite point inside the bounds (column, row from the top), as the canvas
    /// computes it; `None` for any other point.
    fn dot(&self, (x, y): (f64, f64)) -> Option<(usize, usize)> {
        let [left, right] = self.x_bounds;
        let [bottom, top] = self.y_bounds;
        if !(x.is_finite() && y.is_finite()) || x < left || x > right || y < bottom || y > top {
            return None;
        }
        let (width, height) = (right - left, top - bottom);
        if !(width > 0.0 && height > 0.0) {
            return None;
        }
        // The canvas's own expressions, so that rounding agrees to the dot.
        let column = self.column_unchecked(x);
        let row = ((top - y) * (self.dots.1 - 1.0) / height).round() as usize;
        Some((column, row))
    }
}

impl DotGrid {
    /// The dot column of `x` (the canvas's expression) when `x` is finite and inside the
    /// bounds across and the bounds have width; `None` otherwise.
    fn column(&self, x: f64) -> Option<usize> {
        let [left, right] = self.x_bounds;
        let [bottom, top] = self.y_bounds;
        let usable = x.is_finite() && x >= left && x <= right && right > left && top > bottom;
        usable.then(|| self.column_unchecked(x))
    }

    fn column_unchecked(&self, x: f64) -> usize {
        let [left, right] = self.x_bounds;
        ((x - left) * (self.dots.0 - 1.0) / (right - left)).round() as usize
    }
}

/// The raw values a monotone `map` takes inside `[bottom, top]`, finite: `inverse` of the
/// bounds, moved inward (a few ulps) until `map` agrees; `None` when it does not.
fn raw_range(
    map: &impl Fn(f64) -> f64,
    inverse: impl Fn(f64) -> f64,
    [bottom, top]: [f64; 2],
) -> Option<[f64; 2]> {
    let inside = |v: f64| {
        let y = map(v);
        y.is_finite() && y >= bottom && y <= top
    };
    let (mut lo, mut hi) = (inverse(bottom), inverse(top));
    for _ in 0..64 {
        if inside(lo) {
            break;
        }
        lo = lo.next_up();
    }
    for _ in 0..64 {
        if inside(hi) {
            break;
        }
        hi = hi.next_down();
    }
    (lo.is_finite() && hi.is_finite() && lo <= hi && inside(lo) && inside(hi)).then_some([lo, hi])
}

/// [`thin`] of `points` with `map` applied to each y, without mapping or keeping every point:
/// a run of neighbours on one dot column whose raw y lie where `map` lands inside the bounds
/// is cut to its first, lowest, highest and last points before mapping (with `map`
/// non-decreasing, the raw extremes are the mapped ones), and the rest go through [`thin`] as
/// they are. Draws the same dots as `thin` of the whole mapped series. `inverse` is `map`'s
/// inverse, used only to find that raw range (e.g. `log10` and `10^y`).
pub fn thin_mapped(
    points: impl Iterator<Item = (f64, f64)>,
    map: impl Fn(f64) -> f64,
    inverse: impl Fn(f64) -> f64,
    grid: &DotGrid,
) -> Vec<(f64, f64)> {
    let Some([lo, hi]) = raw_range(&map, inverse, grid.y_bounds) else {
        let all: Vec<(f64, f64)> = points.map(|(x, y)| (x, map(y))).collect();
        return thin(&all, grid);
    };
    let mut reduced: Vec<(f64, f64)> = Vec::new();
    let mut run: Option<RawRun> = None;
    for (x, y) in points {
        let column = grid.column(x).filter(|_| y >= lo && y <= hi);
        match (column, run.as_mut()) {
            (Some(c), Some(r)) if r.column == c => r.add((x, y)),
            (Some(c), _) => {
                if let Some(r) = run.replace(RawRun::start(c, (x, y))) {
                    r.flush(&map, &mut reduced);
                }
            }
            (None, _) => {
                if let Some(r) = run.take() {
                    r.flush(&map, &mut reduced);
                }
                reduced.push((x, map(y)));
            }
        }
    }
    if let Some(r) = run {
        r.flush(&map, &mut reduced);
    }
    thin(&reduced, grid)
}

/// A run of raw points on one dot column: first, lowest, highest and last, with their
/// positions in the run for order.
struct RawRun {
    column: usize,
    len: usize,
    first: (f64, f64),
    low: ((f64, f64), usize),
    high: ((f64, f64), usize),
    last: ((f64, f64), usize),
}

impl RawRun {
    fn start(column: usize, p: (f64, f64)) -> Self {
        Self {
            column,
            len: 1,
            first: p,
            low: (p, 0),
            high: (p, 0),
            last: (p, 0),
        }
    }

    fn add(&mut self, p: (f64, f64)) {
        let i = self.len;
        self.len += 1;
        if p.1 < self.low.0.1 {
            self.low = (p, i);
        }
        if p.1 > self.high.0.1 {
            self.high = (p, i);
        }
        self.last = (p, i);
    }

    /// Append the kept points in their order, each once, mapped.
    fn flush(&self, map: &impl Fn(f64) -> f64, out: &mut Vec<(f64, f64)>) {
        let keep = [(self.first, 0), self.low, self.high, self.last].map(|(p, i)| (i, p));
        push_in_order(keep, out, |(x, y)| (x, map(y)));
    }
}

/// A run of neighbouring points on one dot column, being gathered.
struct Run {
    column: usize,
    first: usize,
    last: usize,
    /// (row, index) of the point on the lowest row number (the highest dot).
    top: (usize, usize),
    /// (row, index) of the point on the highest row number (the lowest dot).
    bottom: (usize, usize),
}

impl Run {
    fn start(i: usize, (column, row): (usize, usize)) -> Self {
        Self {
            column,
            first: i,
            last: i,
            top: (row, i),
            bottom: (row, i),
        }
    }

    /// Append the run's first, extreme and last points, in their order, each once.
    fn flush(&self, points: &[(f64, f64)], out: &mut Vec<(f64, f64)>) {
        let keep = [self.first, self.top.1, self.bottom.1, self.last].map(|i| (i, i));
        push_in_order(keep, out, |i| points[i]);
    }
}

/// Append `emit` of each kept point in the order of its position (the first number), once per
/// position: a run's first, extreme and last points may coincide.
fn push_in_order<P: Copy>(
    mut keep: [(usize, P); 4],
    out: &mut Vec<(f64, f64)>,
    emit: impl Fn(P) -> (f64, f64),
) {
    keep.sort_unstable_by_key(|k| k.0);
    let mut previous = None;
    for (i, p) in keep {
        if previous != Some(i) {
            out.push(emit(p));
            previous = Some(i);
        }
    }
}

/// `points` as a line dataset on `grid`, thinned: at most four points per run of neighbours
/// on one dot column, drawing the same dots as all of them (module docs).
pub fn thin(points: &[(f64, f64)], grid: &DotGrid) -> Vec<(f64, f64)> {
    let mut out = Vec::with_capacity(points.len().min(4 * grid.dots.0 as usize + 16));
    let mut run: Option<Run> = None;
    for (i, &p) in points.iter().enumerate() {
        match grid.dot(p) {
            Some(dot) => match run.as_mut() {
                Some(r) if r.column == dot.0 => {
                    r.last = i;
                    if dot.1 < r.top.0 {
                        r.top = (dot.1, i);
                    }
                    if dot.1 > r.bottom.0 {
                        r.bottom = (dot.1, i);
                    }
                }
                _ => {
                    if let Some(r) = run.replace(Run::start(i, dot)) {
                        r.flush(points, &mut out);
                    }
                }
            },
            None => {
                if let Some(r) = run.take() {
                    r.flush(points, &mut out);
                }
                out.push(p);
            }
        }
    }
    if let Some(r) = run {
        r.flush(points, &mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::buffer::Buffer;
    use ratatui::style::{Color, Style};
    use ratatui::text::Span;
    use ratatui::widgets::{Axis, Chart, Dataset, GraphType, Widget};

    /// A chart with the timeline's kind of axes and the given line datasets.
    fn render(area: Rect, x: [f64; 2], y: [f64; 2], sets: &[(Marker, &[(f64, f64)])]) -> Buffer {
        let colours = [Color::Yellow, Color::DarkGray, Color::Cyan];
        let datasets = sets
            .iter()
            .zip(colours.iter().cycle())
            .map(|(&(marker, data), &c)| {
                Dataset::default()
                    .marker(marker)
                    .graph_type(GraphType::Line)
                    .style(Style::new().fg(c))
                    .data(data)
            })
            .collect();
        let chart = Chart::new(datasets)
            .legend_position(None)
            .x_axis(
                Axis::default()
                    .title("tokens")
                    .bounds(x)
                    .labels(vec![Span::raw("0"), Span::raw("1M")]),
            )
            .y_axis(
                Axis::default()
                    .title("samples")
                    .bounds(y)
                    .labels(vec![Span::raw("10"), Span::raw("1k")]),
            );
        let mut buf = Buffer::empty(area);
        chart.render(area, &mut buf);
        buf
    }

    /// The plot area of a chart with those axes in `area`: right of the y labels and axis,
    /// above the x axis and its labels (ratatui's layout for one-line labels).
    fn plot(area: Rect, y_label_width: u16) -> Rect {
        Rect::new(
            area.x + y_label_width + 1,
            area.y,
            area.width - y_label_width - 1,
            area.height - 2,
        )
    }

    /// A deterministic wandering series with jumps, flat stretches, repeats and points
    /// outside the bounds.
    fn series(n: usize, seed: u64, y_spread: f64) -> Vec<(f64, f64)> {
        let mut s = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let mut next = move || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 11) as f64 / (1u64 << 53) as f64
        };
        let mut x = 0.0;
        (0..n)
            .map(|i| {
                x += next() * 1.9e6 / n as f64;
                let u = next();
                // A slow swing inside the bounds, noise, and now and then a spike past a
                // bound, a point not finite, or x past the right bound.
                let mut y = 2.0 + 0.6 * (i as f64 * 7e-4).sin() + (next() - 0.5) * y_spread;
                if u < 0.003 {
                    y += 1.5;
                } else if u < 0.006 {
                    y -= 1.5;
                } else if u > 0.998 {
                    y = f64::NAN;
                }
                let x = if u > 0.996 && u <= 0.998 { x + 5e4 } else { x };
                (x.min(1.02e6), y)
            })
            .collect()
    }

    #[test]
    fn thinned_lines_draw_the_same_cells() {
        let (x, y) = ([0.0, 1e6], [1.0, 3.0]);
        for (k, &(w, h)) in [(40u16, 12u16), (80, 24), (197, 45), (7, 5)]
            .iter()
            .enumerate()
        {
            let area = Rect::new(3, 2, w, h);
            let grid_area = plot(area, 2);
            for seed in 0..6u64 {
                let spread = [0.01, 0.05, 0.2][seed as usize % 3];
                let line = series(20_000 + 977 * k, seed, spread);
                let band = series(5_000, seed + 100, spread * 3.0);
                let braille = DotGrid::new(grid_area, Marker::Braille, x, y).unwrap();
                let dot = DotGrid::new(grid_area, Marker::Dot, x, y).unwrap();
                let (thin_line, thin_band) = (thin(&line, &braille), thin(&band, &dot));
                if w >= 40 {
                    assert!(
                        thin_line.len() * 4 < line.len(),
                        "{} of {} points kept",
                        thin_line.len(),
                        line.len()
                    );
                }
                let whole = render(
                    area,
                    x,
                    y,
                    &[(Marker::Dot, &band), (Marker::Braille, &line)],
                );
                let thinned = render(
                    area,
                    x,
                    y,
                    &[(Marker::Dot, &thin_band), (Marker::Braille, &thin_line)],
                );
                assert_eq!(whole, thinned, "{w}x{h}, seed {seed}");
            }
        }
    }

    /// Thinning before mapping (the timeline's log axis) draws what the whole mapped series
    /// draws, also with points at and past the bounds, zeros and NaN among the raw values.
    #[test]
    fn thinning_raw_values_draws_the_mapped_series() {
        let (x, y) = ([0.0, 1e6], [1.0, 3.0]);
        let log = |v: f64| v.max(1e-9).log10();
        let exp = |v: f64| 10f64.powf(v);
        for (w, h) in [(40u16, 12u16), (197, 45), (7, 5)] {
            let area = Rect::new(3, 2, w, h);
            let grid_area = plot(area, 2);
            for seed in 0..4u64 {
                let mut raw: Vec<(f64, f64)> = series(20_000, seed, 0.2)
                    .into_iter()
                    .map(|(x, y)| (x, 10f64.powf(y)))
                    .collect();
                // Exactly on the bounds' raw values, and raw values the map floors.
                raw[10].1 = 10.0;
                raw[11].1 = 1000.0;
                raw[500].1 = 0.0;
                raw[501].1 = -3.0;
                for marker in [Marker::Braille, Marker::Dot] {
                    let grid = DotGrid::new(grid_area, marker, x, y).unwrap();
                    let mapped: Vec<(f64, f64)> = raw.iter().map(|&(a, b)| (a, log(b))).collect();
                    let quick = thin_mapped(raw.iter().copied(), log, exp, &grid);
                    assert!(quick.len() <= thin(&mapped, &grid).len());
                    let whole = render(area, x, y, &[(marker, &mapped)]);
                    let thinned = render(area, x, y, &[(marker, &quick)]);
                    assert_eq!(whole, thinned, "{w}x{h}, seed {seed}, {marker:?}");
                }
            }
        }
    }

    #[test]
    fn a_wrong_grid_would_change_the_picture() {
        // The comparison above can fail: thinning for a grid coarser than the chart's
        // (one dot a cell for Braille's two) draws other cells.
        let (x, y) = ([0.0, 1e6], [1.0, 3.0]);
        let area = Rect::new(0, 0, 80, 24);
        let line = series(20_000, 7, 0.2);
        let coarse = DotGrid::new(plot(area, 2), Marker::Dot, x, y).unwrap();
        let whole = render(area, x, y, &[(Marker::Braille, &line)]);
        let wrong = render(area, x, y, &[(Marker::Braille, &thin(&line, &coarse))]);
        assert_ne!(whole, wrong);
    }

    #[test]
    fn runs_keep_first_extremes_and_last_in_order() {
        let grid = DotGrid {
            x_bounds: [0.0, 10.0],
            y_bounds: [0.0, 10.0],
            dots: (2.0, 11.0),
        };
        // Column 0 holds x < 5, column 1 x ≥ 5; rows count down from y = 10.
        let pts = [
            (0.0, 5.0),
            (1.0, 9.0),
            (2.0, 1.0),
            (3.0, 4.0),
            (4.0, 6.0),
            (6.0, 2.0),
            (f64::NAN, 1.0),
            (7.0, 3.0),
            (8.0, 20.0),
            (9.0, 3.0),
        ];
        let bits = |v: &[(f64, f64)]| -> Vec<(u64, u64)> {
            v.iter().map(|p| (p.0.to_bits(), p.1.to_bits())).collect()
        };
        let expected = [
            (0.0, 5.0),
            (1.0, 9.0), // the column's highest dot (lowest row number is y = 9)
            (2.0, 1.0), // its lowest
            (4.0, 6.0), // its last; (3, 4) is dropped
            (6.0, 2.0),
            (f64::NAN, 1.0), // not finite: kept, ends the run
            (7.0, 3.0),
            (8.0, 20.0), // outside the bounds: kept
            (9.0, 3.0),
        ];
        assert_eq!(bits(&thin(&pts, &grid)), bits(&expected));
        assert!(dots_per_cell(Marker::Block).is_none());
    }
}
