//! The per-layer points of the step rows held flat, and the report written as pretty JSON in
//! parallel chunks (`copus analyze --json`): the same bytes as
//! `serde_json::to_writer_pretty(&report)` on the report with its per-row layer maps, without
//! building one map per step (a run of 10⁵ steps × 4 layers otherwise allocates 4·10⁵ names
//! and 10⁵ map nodes of about 1 KB each).

use crate::report::{AnalyzeReport, LayerPoint, StepRow};
use rayon::prelude::*;
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::Write;

/// Per-layer points of each step row, in layer-name order; a name repeated within a row
/// (repeated step numbers) keeps its last point, as inserting into a map would.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RowLayers {
    names: Vec<String>,
    /// Each name as a JSON string (quoted and escaped), for the JSON writer.
    escaped: Vec<Vec<u8>>,
    layout: Layout,
}

/// Where row `i`'s points are.
#[derive(Debug, Clone, PartialEq)]
enum Layout {
    /// Row `i` owns `entries[starts[i]..starts[i + 1]]` as (layer index, point).
    Scattered {
        starts: Vec<usize>,
        entries: Vec<(u32, LayerPoint)>,
    },
    /// Every layer has exactly one point per row, at the row's step (distinct steps): row
    /// `i`'s point of layer `k` is `points[k][i]`, the layer's trajectory as the analysis
    /// gave it (nothing copied).
    Dense {
        rows: usize,
        points: Vec<Vec<(u64, LayerPoint)>>,
    },
}

impl Default for Layout {
    fn default() -> Self {
        Layout::Scattered {
            starts: Vec::new(),
            entries: Vec::new(),
        }
    }
}

impl RowLayers {
    /// Assign each layer's points (steps in any order) to the row of the same step, row `i`
    /// being the row at `rows[i]` (the rows' steps, sorted): the row a binary search over
    /// `rows` finds; points without a row are dropped. (The steps rather than the rows
    /// themselves: rows are ~200 bytes each, and walking them misses the cache at every step.)
    ///
    /// The usual case (distinct steps, every layer at every step) keeps the trajectories as
    /// they are; otherwise the points are sorted into rows.
    pub fn assign(rows: &[u64], traj: BTreeMap<String, Vec<(u64, LayerPoint)>>) -> Self {
        let distinct = rows.windows(2).all(|w| w[0] < w[1]);
        let aligned = traj.values().all(|points| {
            points.len() == rows.len() && points.iter().zip(rows).all(|(p, &r)| p.0 == r)
        });
        if distinct && aligned {
            let mut names = Vec::with_capacity(traj.len());
            let mut escaped = Vec::with_capacity(traj.len());
            let mut points = Vec::with_capacity(traj.len());
            for (name, layer_points) in traj {
                escaped.push(crate::report::row_json::escaped_key(&name));
                names.push(name);
                points.push(layer_points);
            }
            return Self {
                names,
                escaped,
                layout: Layout::Dense {
                    rows: rows.len(),
                    points,
                },
            };
        }
        Self::scatter(rows, traj)
    }

    /// The general assignment: a counting sort of the points by row.
    fn scatter(rows: &[u64], traj: BTreeMap<String, Vec<(u64, LayerPoint)>>) -> Self {
        // Two passes over the points (count per row, then place), so that only the final
        // entries are held: a counting sort by row, stable, so within a row name order and
        // then arrival order.
        let mut starts = vec![0usize; rows.len() + 1];
        for points in traj.values() {
            for i in RowWalk::new(rows, points).flatten() {
                starts[i + 1] += 1;
            }
        }
        for i in 0..rows.len() {
            starts[i + 1] += starts[i];
        }
        let mut next = starts.clone();
        let filler = (
            0u32,
            LayerPoint {
                b_simple: None,
                ci: [0.0, 0.0],
            },
        );
        let mut entries = vec![filler; starts[rows.len()]];
        let mut names = Vec::with_capacity(traj.len());
        let mut escaped = Vec::with_capacity(traj.len());
        for (k, (name, points)) in traj.into_iter().enumerate() {
            for (i, (_, p)) in RowWalk::new(rows, &points).zip(&points) {
                if let Some(i) = i {
                    entries[next[i]] = (k as u32, *p);
                    next[i] += 1;
                }
            }
            escaped.push(crate::report::row_json::escaped_key(&name));
            names.push(name);
        }
        Self {
            names,
            escaped,
            layout: Layout::Scattered { starts, entries },
        }
    }

    /// Rows covered (0 when nothing was assigned).
    pub fn rows(&self) -> usize {
        match &self.layout {
            Layout::Scattered { starts, .. } => starts.len().saturating_sub(1),
            Layout::Dense { rows, .. } => *rows,
        }
    }

    /// Row `i`'s entries as (layer index, point), a repeated name keeping its last point.
    fn row_entries(&self, i: usize) -> RowEntries<'_> {
        match &self.layout {
            Layout::Scattered { starts, entries } => {
                let slice = match (starts.get(i), starts.get(i + 1)) {
                    (Some(&a), Some(&b)) => &entries[a..b],
                    _ => &[],
                };
                RowEntries::Scattered { slice, at: 0 }
            }
            Layout::Dense { rows, points } => RowEntries::Dense {
                points: if i < *rows { points } else { &[] },
                row: i,
                layer: 0,
            },
        }
    }

    /// Row `i`'s entries as (layer name, point), a repeated name keeping its last point.
    fn row(&self, i: usize) -> impl Iterator<Item = (&str, &LayerPoint)> {
        self.row_entries(i)
            .map(|(k, p)| (self.names[k].as_str(), p))
    }

    /// Row `i`'s entries as (name as a quoted, escaped JSON string, point).
    pub(crate) fn row_escaped(&self, i: usize) -> impl Iterator<Item = (&[u8], &LayerPoint)> {
        self.row_entries(i)
            .map(|(k, p)| (self.escaped[k].as_slice(), p))
    }

    /// Put the points into the rows' own maps (`StepRow::layers`).
    pub fn attach(&self, rows: &mut [StepRow]) {
        for (i, row) in rows.iter_mut().enumerate().take(self.rows()) {
            row.layers
                .extend(self.row(i).map(|(name, p)| (name.to_string(), *p)));
        }
    }
}

/// The iterator of [`RowLayers::row_entries`].
enum RowEntries<'a> {
    Scattered {
        slice: &'a [(u32, LayerPoint)],
        at: usize,
    },
    Dense {
        points: &'a [Vec<(u64, LayerPoint)>],
        row: usize,
        layer: usize,
    },
}

impl<'a> Iterator for RowEntries<'a> {
    type Item = (usize, &'a LayerPoint);

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            RowEntries::Scattered { slice, at } => loop {
                let (k, p) = slice.get(*at)?;
                *at += 1;
                // A name repeated within the row keeps its last point.
                if slice.get(*at).is_none_or(|(next, _)| next != k) {
                    return Some((*k as usize, p));
                }
            },
            RowEntries::Dense { points, row, layer } => {
                let p = &points.get(*layer)?.get(*row)?.1;
                *layer += 1;
                Some((*layer - 1, p))
            }
        }
    }
}

/// The row of each point of one layer: a walk over the rows when the points are in step
/// order (the analysis gives them so), else a binary search per point. Either way a point
/// goes to the row `binary_search_by_key` finds, also among rows of a repeated step.
struct RowWalk<'a> {
    rows: &'a [u64],
    points: std::slice::Iter<'a, (u64, LayerPoint)>,
    sorted: bool,
    at: usize,
}

impl<'a> RowWalk<'a> {
    fn new(rows: &'a [u64], points: &'a [(u64, LayerPoint)]) -> Self {
        Self {
            rows,
            points: points.iter(),
            sorted: points.windows(2).all(|w| w[0].0 <= w[1].0),
            at: 0,
        }
    }

    fn search(&self, step: u64) -> Option<usize> {
        self.rows.binary_search(&step).ok()
    }
}

impl Iterator for RowWalk<'_> {
    type Item = Option<usize>;

    fn next(&mut self) -> Option<Option<usize>> {
        let &(step, _) = self.points.next()?;
        if !self.sorted {
            return Some(self.search(step));
        }
        while self.rows.get(self.at).is_some_and(|&r| r < step) {
            self.at += 1;
        }
        let here = self.rows.get(self.at) == Some(&step);
        let repeated = self.rows.get(self.at + 1) == Some(&step);
        Some(match (here, repeated) {
            (false, _) => None,
            (true, false) => Some(self.at),
            // Rows of a repeated step: the one the binary search picks.
            (true, true) => self.search(step),
        })
    }
}

/// Rows serialised by one task.
const CHUNK_ROWS: usize = 1024;
/// Chunks serialised before their text is written, per worker thread (bounds the text held
/// in memory: a few MB per thread).
const CHUNKS_PER_THREAD: usize = 4;

/// Pretty JSON of `value` with every line after the first indented by `indent` more spaces
/// (serde_json escapes newlines inside strings, so every raw newline is formatting).
fn pretty_indented<T: Serialize>(
    value: &T,
    indent: &[u8],
    out: &mut Vec<u8>,
) -> serde_json::Result<()> {
    let mut buf = Vec::with_capacity(1024);
    serde_json::to_writer_pretty(&mut buf, value)?;
    out.reserve(buf.len() + buf.len() / 8);
    for &b in &buf {
        out.push(b);
        if b == b'\n' {
            out.extend_from_slice(indent);
        }
    }
    Ok(())
}

/// How `copus analyze` writes its report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JsonStyle {
    /// `{"summary": ..., "steps": [...]}`, indented (a terminal, or `--pretty`).
    Pretty,
    /// The same document without whitespace (a pipe or a file).
    Compact,
    /// One compact step row per line, nothing else (`--json-lines`: jq, pandas, polars
    /// `read_ndjson`).
    Lines,
    /// `{"summary": ...}` only (`--summary-only`), compact or pretty.
    SummaryOnly {
        /// Indented.
        pretty: bool,
    },
}

/// Write `report` in `style` (see [`write_report_pretty`] for the layers).
pub fn write_report<W: Write>(
    report: &AnalyzeReport,
    layers: &RowLayers,
    style: JsonStyle,
    out: &mut W,
) -> std::io::Result<()> {
    match style {
        JsonStyle::Pretty => write_report_pretty(report, layers, out),
        JsonStyle::SummaryOnly { pretty } => {
            // A struct, not `json!`: its fields keep their order (a `Value` map sorts them).
            #[derive(Serialize)]
            struct SummaryOnly<'a> {
                summary: &'a crate::report::Summary,
            }
            let doc = SummaryOnly {
                summary: &report.summary,
            };
            let text = if pretty {
                serde_json::to_vec_pretty(&doc)
            } else {
                serde_json::to_vec(&doc)
            }
            .map_err(std::io::Error::other)?;
            out.write_all(&text)?;
            out.write_all(b"\n")
        }
        JsonStyle::Compact => {
            let mut head = b"{\"summary\":".to_vec();
            serde_json::to_writer(&mut head, &report.summary).map_err(std::io::Error::other)?;
            head.extend_from_slice(b",\"steps\":[");
            let tail: &[u8] = b"]}\n";
            write_streamed::<true, _>(report, layers, &head, (b"", b","), b"", (tail, tail), out)
        }
        JsonStyle::Lines => {
            write_streamed::<true, _>(report, layers, b"", (b"", b""), b"\n", (b"", b""), out)
        }
    }
}

/// Write `report` (its rows' own `layers` maps left empty) with `layers` as the rows' layers,
/// as pretty JSON followed by a newline: the bytes `serde_json::to_writer_pretty` writes for
/// the report with [`RowLayers::attach`] applied. Rows are serialised in parallel chunks and
/// written in order.
pub fn write_report_pretty<W: Write>(
    report: &AnalyzeReport,
    layers: &RowLayers,
    out: &mut W,
) -> std::io::Result<()> {
    let mut head = Vec::new();
    head.extend_from_slice(b"{\n  \"summary\": ");
    pretty_indented(&report.summary, b"  ", &mut head)?;
    head.extend_from_slice(b",\n  \"steps\": [");
    write_streamed::<false, _>(
        report,
        layers,
        &head,
        (b"\n    ", b",\n    "),
        b"",
        (b"]\n}\n", b"\n  ]\n}\n"),
        out,
    )
}

/// Write `head`, each row (compact with `C`) after `before.0` (the first) or `before.1` (the
/// others) and followed by `after`, then `tail.0` (no rows) or `tail.1`. Rows are serialised
/// in parallel chunks while the batch before is written.
fn write_streamed<const C: bool, W: Write>(
    report: &AnalyzeReport,
    layers: &RowLayers,
    head: &[u8],
    before: (&[u8], &[u8]),
    after: &[u8],
    tail: (&[u8], &[u8]),
    out: &mut W,
) -> std::io::Result<()> {
    out.write_all(head)?;
    let rows = &report.steps;
    let batch_rows = CHUNK_ROWS * CHUNKS_PER_THREAD * rayon::current_num_threads().max(2);
    // A batch is serialised (in parallel) while the one before it is written on this thread:
    // into a pipe or a file, writing 10⁸ bytes takes about as long as serialising them.
    // Each batch's text buffers come back to be reused (their pages are touched once).
    let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel::<Vec<Vec<u8>>>(1);
    let (spent_tx, spent_rx) = std::sync::mpsc::channel::<Vec<Vec<u8>>>();
    std::thread::scope(|scope| -> std::io::Result<()> {
        scope.spawn(move || {
            for (b, batch) in rows.chunks(batch_rows).enumerate() {
                let mut texts = spent_rx.try_recv().unwrap_or_default();
                let chunks = batch.len().div_ceil(CHUNK_ROWS);
                texts.resize_with(chunks, Vec::new);
                texts
                    .par_iter_mut()
                    .zip(batch.par_chunks(CHUNK_ROWS))
                    .enumerate()
                    .for_each(|(c, (text, chunk))| {
                        text.clear();
                        for (j, row) in chunk.iter().enumerate() {
                            let i = b * batch_rows + c * CHUNK_ROWS + j;
                            text.extend_from_slice(if i == 0 { before.0 } else { before.1 });
                            crate::report::row_json::write_row::<C>(
                                text,
                                row,
                                layers.row_escaped(i),
                            );
                            text.extend_from_slice(after);
                        }
                    });
                if ready_tx.send(texts).is_err() {
                    return; // the writer stopped (an error it reports)
                }
            }
        });
        for texts in ready_rx {
            for t in &texts {
                out.write_all(t)?;
            }
            // The serialiser may have finished: then the buffers are simply dropped.
            let _ = spent_tx.send(texts);
        }
        Ok(())
    })?;
    out.write_all(if rows.is_empty() { tail.0 } else { tail.1 })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{EstimatorSettings, StepStats, analyze, analyze_parts};

    fn records(repeat: bool) -> Vec<StepStats> {
        records_with_gaps(repeat, true)
    }

    /// With `gaps`, layer "c" is missing on every fifth step.
    fn records_with_gaps(repeat: bool, gaps: bool) -> Vec<StepStats> {
        (0..3000u64)
            .map(|i| {
                let step = if repeat { i / 3 } else { i };
                let x = 1.0 + (i % 7) as f64 * 0.1;
                let mut r =
                    StepStats::new(step, 8.0, 64.0, 1.0 + 50.0 / 8.0 * x, 1.0 + 50.0 / 64.0 * x);
                for (k, name) in ["b.1", "a\n\"0", "c"].iter().enumerate() {
                    if gaps && k == 2 && i % 5 == 0 {
                        continue; // a layer missing on some steps
                    }
                    r.layers.insert(
                        (*name).to_string(),
                        crate::record::step::LayerSq {
                            sq_small: r.sq_small / 3.0,
                            sq_big: r.sq_big / 3.0 * (1.0 + k as f64 * 0.01),
                        },
                    );
                }
                r
            })
            .collect()
    }

    #[test]
    fn streamed_pretty_json_equals_serde_pretty_of_the_attached_report() {
        for (repeat, gaps) in [(false, true), (true, true), (false, false), (true, false)] {
            let recs = records_with_gaps(repeat, gaps);
            let s = EstimatorSettings::default();
            let full = analyze(&recs, &s).expect("an estimate");
            assert!(full.steps.iter().any(|r| r.layers.len() == 3));
            let mut expected = serde_json::to_vec_pretty(&full).expect("json");
            expected.push(b'\n');
            let (bare, layers) = analyze_parts(&recs, &s)
                .map(|a| (a.report, a.layers))
                .expect("an estimate");
            assert!(bare.steps.iter().all(|r| r.layers.is_empty()));
            let dense = matches!(layers.layout, Layout::Dense { .. });
            assert_eq!(dense, !repeat && !gaps);
            let mut got = Vec::new();
            write_report_pretty(&bare, &layers, &mut got).expect("written");
            assert_eq!(
                String::from_utf8_lossy(&got),
                String::from_utf8_lossy(&expected)
            );
        }
    }

    #[test]
    fn compact_lines_and_summary_only_carry_the_pretty_values() {
        let recs = records_with_gaps(true, true);
        let s = EstimatorSettings::default();
        let (bare, layers) = analyze_parts(&recs, &s)
            .map(|a| (a.report, a.layers))
            .expect("an estimate");
        let mut pretty = Vec::new();
        write_report_pretty(&bare, &layers, &mut pretty).expect("written");
        let pretty: serde_json::Value = serde_json::from_slice(&pretty).expect("pretty JSON");
        let mut compact = Vec::new();
        write_report(&bare, &layers, JsonStyle::Compact, &mut compact).expect("written");
        assert!(!compact[..compact.len() - 1].contains(&b'\n'), "one line");
        assert_eq!(
            serde_json::from_slice::<serde_json::Value>(&compact).expect("JSON"),
            pretty
        );
        let mut lines = Vec::new();
        write_report(&bare, &layers, JsonStyle::Lines, &mut lines).expect("written");
        let rows: Vec<serde_json::Value> = String::from_utf8(lines)
            .expect("utf-8")
            .lines()
            .map(|l| serde_json::from_str(l).expect("a row per line"))
            .collect();
        assert_eq!(serde_json::Value::Array(rows), pretty["steps"]);
        let mut summary = Vec::new();
        write_report(
            &bare,
            &layers,
            JsonStyle::SummaryOnly { pretty: false },
            &mut summary,
        )
        .expect("written");
        // The summary's fields in the order of the full report (not sorted by name).
        let full = String::from_utf8(compact).expect("utf-8");
        let head = String::from_utf8(summary.clone()).expect("utf-8");
        let inner = head
            .strip_prefix("{\"summary\":")
            .and_then(|h| h.trim_end().strip_suffix('}'))
            .expect("one summary object");
        assert!(
            full.starts_with(&format!("{{\"summary\":{inner},")),
            "{head}"
        );
        let summary: serde_json::Value = serde_json::from_slice(&summary).expect("JSON");
        assert_eq!(summary, serde_json::json!({ "summary": pretty["summary"] }));
    }

    /// The kept trajectories (distinct steps, every layer at every step) give every row the
    /// points the counting sort gives it; a layer missing one step falls back to the sort.
    #[test]
    fn dense_rows_equal_sorted_rows() {
        let steps: Vec<u64> = (0..500u64).map(|i| 3 * i + 1).collect();
        let p = |x: f64| LayerPoint {
            b_simple: (x > 1.0).then_some(x),
            ci: [x - 0.5, x + 0.5],
        };
        let mut traj = BTreeMap::new();
        for (k, name) in ["b", "a\"q", "c"].iter().enumerate() {
            let points: Vec<(u64, LayerPoint)> = steps
                .iter()
                .map(|&s| (s, p(s as f64 * 0.1 + k as f64)))
                .collect();
            traj.insert((*name).to_string(), points);
        }
        let rows_of = |l: &RowLayers| -> Vec<Vec<(String, LayerPoint)>> {
            (0..l.rows())
                .map(|i| l.row(i).map(|(n, p)| (n.to_string(), *p)).collect())
                .collect()
        };
        let dense = RowLayers::assign(&steps, traj.clone());
        assert!(matches!(dense.layout, Layout::Dense { .. }));
        let sorted = RowLayers::scatter(&steps, traj.clone());
        assert_eq!(rows_of(&dense), rows_of(&sorted));
        assert_eq!(rows_of(&dense)[7].len(), 3);
        let escaped = |l: &RowLayers, i| -> Vec<Vec<u8>> {
            l.row_escaped(i).map(|(n, _)| n.to_vec()).collect()
        };
        assert_eq!(escaped(&dense, 9), escaped(&sorted, 9));
        assert!(dense.row(500).next().is_none());
        // One layer without step 4: the general assignment.
        if let Some(points) = traj.get_mut("c") {
            points.remove(1);
        }
        let gap = RowLayers::assign(&steps, traj.clone());
        assert!(matches!(gap.layout, Layout::Scattered { .. }));
        assert_eq!(rows_of(&gap)[1].len(), 2);
        assert_eq!(rows_of(&gap), rows_of(&RowLayers::scatter(&steps, traj)));
    }

    #[test]
    fn a_repeated_name_in_a_row_keeps_its_last_point() {
        let row = |step| {
            let recs = records(false);
            let mut r = analyze(&recs[..50], &EstimatorSettings::default())
                .expect("an estimate")
                .steps
                .remove(0);
            r.step = step;
            r.layers.clear();
            r
        };
        let rows = vec![row(1), row(2)];
        let p = |b| LayerPoint {
            b_simple: Some(b),
            ci: [0.0, 1.0],
        };
        let mut traj = BTreeMap::new();
        traj.insert("x".to_string(), vec![(2, p(1.0)), (2, p(2.0)), (9, p(3.0))]);
        let steps: Vec<u64> = rows.iter().map(|r| r.step).collect();
        let layers = RowLayers::assign(&steps, traj);
        let mut attached = rows.clone();
        layers.attach(&mut attached);
        assert!(attached[0].layers.is_empty());
        assert_eq!(attached[1].layers.len(), 1);
        assert_eq!(attached[1].layers["x"].b_simple, Some(2.0));
    }
}
