//! Reading a stats protocol v1 stream (file, growing file, socket) into records, counting the
//! lines that could not be used. Garbage never stops the reader; only I/O errors do.

use crate::ingest::coarsen::{Coarsener, Coarsening, RecordBound};
use crate::ingest::protocol::{ProtocolError, parse_line};
use crate::record::step::StepStats;
use rayon::prelude::*;
use serde::Serialize;
use std::io::{BufRead, Read};

/// How many problem lines are kept verbatim (with line number and reason) for display.
pub const KEPT_ERRORS: usize = 20;

/// One line that could not be used, with its 1-based line number.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LineError {
    /// 1-based line number in the stream.
    pub line: usize,
    /// Why it was not used.
    pub reason: String,
    /// True when the line was well-formed but carried NaN/Inf (skipped, not malformed).
    pub non_finite: bool,
}

/// Everything read from a stream: usable records plus counts and examples of rejected lines.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ReadOutcome {
    /// Valid records in stream order (steps flagged `skipped` by the producer included).
    pub records: Vec<StepStats>,
    /// Lines that were not valid protocol v1 records (bad JSON, wrong version, bad fields).
    pub malformed: usize,
    /// Well-formed lines skipped because a value was NaN/±Inf (or `null` where required).
    pub non_finite: usize,
    /// Steps of the non-finite lines whose step number could be read.
    pub non_finite_steps: Vec<u64>,
    /// The first [`KEPT_ERRORS`] problem lines (malformed and non-finite).
    pub errors: Vec<LineError>,
    /// Advice-loop event lines (`advice`, `applied`): neither records nor malformed.
    pub event_lines: usize,
    /// Lines seen, blank ones included.
    pub lines: usize,
    /// What [`read_ndjson_bounded`] merged to keep `records` under its bound; `None` when
    /// every record is kept as read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub coarsening: Option<Coarsening>,
}

impl ReadOutcome {
    /// Feed one line (without its newline); `line_no` is 1-based. Blank lines are ignored.
    /// Used by [`read_ndjson`] and by live followers that receive lines one at a time.
    pub fn push_line(&mut self, line_no: usize, line: &str) {
        self.lines = self.lines.max(line_no);
        let line = line.trim();
        if line.is_empty() {
            return;
        }
        match parse_line(line) {
            Ok(r) => self.records.push(r),
            Err(e) => self.push_error(line_no, &e),
        }
    }

    /// Count problem lines found before the reader (1-based line numbers of the same
    /// stream), kept in line order with the reader's own.
    pub fn add_errors(&mut self, problems: Vec<(usize, ProtocolError)>) {
        if problems.is_empty() {
            return;
        }
        for (line_no, e) in &problems {
            self.push_error(*line_no, e);
        }
        self.errors.sort_by_key(|e| e.line);
    }

    fn push_error(&mut self, line_no: usize, e: &ProtocolError) {
        if e.is_event() {
            self.event_lines += 1;
            return;
        }
        let non_finite = e.is_non_finite();
        if let ProtocolError::NonFinite { step, .. } = e {
            self.non_finite += 1;
            self.non_finite_steps.extend(step);
        } else {
            self.malformed += 1;
        }
        if self.errors.len() < KEPT_ERRORS {
            self.errors.push(LineError {
                line: line_no,
                reason: e.to_string(),
                non_finite,
            });
        }
    }

    /// Record a line that was not valid UTF-8.
    fn push_not_utf8(&mut self, line_no: usize) {
        self.lines = self.lines.max(line_no);
        let e = ProtocolError::Json("line is not valid UTF-8".into());
        self.push_error(line_no, &e);
    }
}

/// Longest line read, bytes, by every reader of the protocol (this one and the live line
/// reader); a longer line is skipped up to its newline and counted as malformed, so memory
/// stays bounded whatever the input.
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// Bytes read at a time; more than [`MAX_LINE_BYTES`], so a block without a newline means an
/// over-long line.
const BLOCK_BYTES: usize = 8 << 20;

/// Bytes of the first block, read before any parsing can start (smaller, so that both cores
/// are busy sooner); also more than [`MAX_LINE_BYTES`].
const FIRST_BLOCK_BYTES: usize = 2 << 20;

/// Lines parsed per parallel task (a few hundred KiB of text).
const LINES_PER_TASK: usize = 512;

/// What became of one line, in parallel, before it is counted in stream order.
// Almost every line is a `Record`, kept in one vector per block: boxing it to shrink the rare
// variants would cost an allocation per line.
#[allow(clippy::large_enum_variant)]
enum Parsed {
    Blank,
    Record(StepStats),
    Error(ProtocolError),
    NotUtf8,
}

fn parse_bytes(bytes: &[u8]) -> Parsed {
    // The usual line, read straight from its bytes: what `parse_line` gives it.
    if let Some(r) = crate::ingest::typed::parse_scanned_bytes(bytes) {
        return match crate::ingest::protocol::validate(&r) {
            Ok(()) => Parsed::Record(r),
            Err(e) => Parsed::Error(e),
        };
    }
    match std::str::from_utf8(bytes) {
        Ok(s) => match s.trim() {
            "" => Parsed::Blank,
            line => match parse_line(line) {
                Ok(r) => Parsed::Record(r),
                Err(e) => Parsed::Error(e),
            },
        },
        Err(_) => Parsed::NotUtf8,
    }
}

/// One line of a block: its bytes (without the newline), or `None` when it was longer than
/// [`MAX_LINE_BYTES`] (newline included).
type Span = Option<std::ops::Range<usize>>;

/// Read until `buf` holds at least `block` bytes or the stream ends; true at the end.
/// The bytes go straight into `buf`'s spare capacity (no intermediate chunk, no zeroing).
fn top_up<R: Read>(reader: &mut R, buf: &mut Vec<u8>, block: usize) -> std::io::Result<bool> {
    let want = block.saturating_sub(buf.len());
    if want == 0 {
        return Ok(false);
    }
    let got = reader.by_ref().take(want as u64).read_to_end(buf)?;
    Ok(got < want)
}

/// Read a whole protocol v1 stream. Malformed and non-finite lines are counted and skipped;
/// only an I/O error stops the read. Lines are parsed in parallel, block by block, and
/// counted in stream order. Every record is kept: memory grows with the stream (see
/// [`read_ndjson_bounded`]).
pub fn read_ndjson<R: BufRead + Send>(reader: R) -> std::io::Result<ReadOutcome> {
    read_blocks(reader, None)
}

/// [`read_ndjson`] keeping at most the records `bound` allows ([`RecordBound::All`]: all of
/// them, as [`read_ndjson`]): consecutive compatible steps are merged into one record each
/// ([`Coarsener`]) and `coarsening` says how. Counts of lines and the kept errors are those of
/// the whole stream. A stream with fewer records than the bound reads exactly as
/// [`read_ndjson`].
pub fn read_ndjson_bounded<R: BufRead + Send>(
    reader: R,
    bound: RecordBound,
) -> std::io::Result<ReadOutcome> {
    read_blocks(reader, bound.coarsener())
}

/// Where parsed lines go, in stream order: counts, kept errors and records.
struct Sequencer {
    out: ReadOutcome,
    line_no: usize,
    coarsener: Option<Coarsener>,
}

impl Sequencer {
    /// Count one block's lines (in order) and keep its records; `parsed` is left empty (its
    /// capacity is the next block's).
    fn take(&mut self, spans: &[Span], parsed: &mut Vec<Parsed>) {
        let out = &mut self.out;
        for (span, p) in spans.iter().zip(parsed.drain(..)) {
            self.line_no += 1;
            out.lines = out.lines.max(self.line_no);
            if span.is_none() {
                let e = ProtocolError::Json(format!(
                    "line longer than {MAX_LINE_BYTES} bytes: skipped"
                ));
                out.push_error(self.line_no, &e);
                continue;
            }
            match p {
                Parsed::Blank => {}
                Parsed::Record(r) => match self.coarsener.as_mut() {
                    Some(c) => c.push(r),
                    None => out.records.push(r),
                },
                Parsed::Error(e) => out.push_error(self.line_no, &e),
                Parsed::NotUtf8 => out.push_not_utf8(self.line_no),
            }
        }
    }

    fn finish(mut self) -> ReadOutcome {
        if let Some(c) = self.coarsener {
            (self.out.records, self.out.coarsening) = c.finish();
        }
        self.out
    }
}

/// The lines of a block: their spans, and where the unfinished last line starts (the whole
/// block at the end of the stream). `skipping` is true inside an over-long line whose start
/// was dropped: its end is skipped up to the first newline.
fn split_lines(buf: &[u8], eof: bool, skipping: &mut bool) -> (Vec<Span>, usize) {
    let mut spans: Vec<Span> = Vec::with_capacity(buf.len() / 256);
    let mut start = 0;
    for nl in memchr::memchr_iter(b'\n', buf) {
        let span = (start..nl, true);
        start = nl + 1;
        if std::mem::take(skipping) {
            spans.push(None);
            continue;
        }
        spans.push(keep(span));
    }
    if eof && (start < buf.len() || *skipping) {
        let span = (start..buf.len(), false);
        start = buf.len();
        spans.push(if *skipping { None } else { keep(span) });
        *skipping = false;
    }
    (spans, start)
}

/// The block reader; records go to `coarsener` when given, else all into `records`.
///
/// A pipeline of three stages over blocks of [`BLOCK_BYTES`]: while block k is parsed in
/// parallel, block k−1's lines are counted and kept (in order) and block k+1 is read and
/// split into lines.
fn read_blocks<R: BufRead + Send>(
    mut reader: R,
    coarsener: Option<Coarsener>,
) -> std::io::Result<ReadOutcome> {
    let mut seq = Sequencer {
        out: ReadOutcome::default(),
        line_no: 0,
        coarsener,
    };
    let mut buf: Vec<u8> = Vec::with_capacity(FIRST_BLOCK_BYTES + (1 << 16));
    let mut skipping = false;
    let mut eof = top_up(&mut reader, &mut buf, FIRST_BLOCK_BYTES)?;
    let mut lines = split_lines(&buf, eof, &mut skipping);
    let mut pending: Option<(Vec<Span>, Vec<Parsed>)> = None;
    // Two vectors of parsed lines take turns (one filled while the other is counted), so a
    // block's parsed lines land in pages touched before: a fresh vector per block (~5 MB, its
    // size never quite the last one's) took new pages from the kernel each time, zero-filled.
    let mut spare: Vec<Parsed> = Vec::new();
    // The byte buffers take turns the same way: the block just parsed is read into next time
    // but one (a fresh 8 MB buffer per block took new, zero-filled pages for every block).
    let mut spare_bytes: Vec<u8> = Vec::new();
    loop {
        let (spans, start) = lines;
        let mut next: Vec<u8> = std::mem::take(&mut spare_bytes);
        next.clear();
        if !eof {
            next.reserve(BLOCK_BYTES + (1 << 16));
            let tail = &buf[start..];
            // A partial line already longer than the cap: drop it and skip to its newline.
            if tail.len() > MAX_LINE_BYTES {
                skipping = true;
            } else {
                next.extend_from_slice(tail);
            }
        }
        let previous = pending.take();
        let mut parsed = std::mem::take(&mut spare);
        let (_, read) = rayon::join(
            || {
                spans
                    .par_iter()
                    .with_min_len(LINES_PER_TASK)
                    .map(|s| match s {
                        Some(r) => parse_bytes(&buf[r.clone()]),
                        None => Parsed::Blank,
                    })
                    .collect_into_vec(&mut parsed);
            },
            || -> std::io::Result<_> {
                let emptied = previous.map(|(spans, mut parsed)| {
                    seq.take(&spans, &mut parsed);
                    parsed
                });
                if eof {
                    return Ok((emptied, None));
                }
                let next_eof = top_up(&mut reader, &mut next, BLOCK_BYTES)?;
                let next_lines = split_lines(&next, next_eof, &mut skipping);
                Ok((emptied, Some((next_eof, next_lines))))
            },
        );
        let (emptied, read) = read?;
        let Some((next_eof, next_lines)) = read else {
            seq.take(&spans, &mut parsed);
            return Ok(seq.finish());
        };
        spare = emptied.unwrap_or_default();
        pending = Some((spans, parsed));
        (eof, lines) = (next_eof, next_lines);
        spare_bytes = std::mem::replace(&mut buf, next);
    }
}

/// The span of a complete line, or `None` when it is over the cap (counting its newline).
fn keep((range, newline): (std::ops::Range<usize>, bool)) -> Span {
    (range.len() + usize::from(newline) <= MAX_LINE_BYTES).then_some(range)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reader before issue 15 (one line at a time through a capped line buffer): the oracle.
    fn sequential(mut reader: impl BufRead) -> ReadOutcome {
        let mut out = ReadOutcome::default();
        let (mut buf, mut line_no) = (Vec::new(), 0);
        loop {
            buf.clear();
            let (mut read, mut overlong) = (0usize, false);
            loop {
                let chunk = reader.fill_buf().expect("in memory");
                if chunk.is_empty() {
                    break;
                }
                let (take, done) = match chunk.iter().position(|b| *b == b'\n') {
                    Some(i) => (i + 1, true),
                    None => (chunk.len(), false),
                };
                if !overlong && buf.len() + take <= MAX_LINE_BYTES {
                    buf.extend_from_slice(&chunk[..take]);
                } else {
                    overlong = true;
                    buf.clear();
                }
                reader.consume(take);
                read += take;
                if done {
                    break;
                }
            }
            if read == 0 {
                return out;
            }
            line_no += 1;
            if overlong {
                out.lines = out.lines.max(line_no);
                let e = ProtocolError::Json(format!(
                    "line longer than {MAX_LINE_BYTES} bytes: skipped"
                ));
                out.push_error(line_no, &e);
                continue;
            }
            match std::str::from_utf8(&buf) {
                Ok(s) => out.push_line(line_no, s),
                Err(_) => out.push_not_utf8(line_no),
            }
        }
    }

    fn record(step: u64) -> String {
        format!(r#"{{"v":1,"step":{step},"b_small":2,"b_big":8,"sq_small":1.5,"sq_big":0.5}}"#)
    }

    /// Blocks, parallel parsing and over-long lines across block boundaries give exactly what
    /// the line-by-line reader gave: records, counts, kept errors and line numbers.
    #[test]
    fn block_reader_equals_the_line_reader() {
        let long = |n: usize| "x".repeat(n);
        let mut text = String::new();
        for i in 0..2000 {
            text.push_str(&record(i));
            text.push_str(["\n", "\r\n", "\n\n", "\n  \n"][i as usize % 4]);
            if i % 500 == 7 {
                text.push_str("{\"v\":1,\"step\":\"bad\"}\n{\"v\":1,\"step\":3,\"b_small\":2,\"b_big\":8,\"sq_small\":null,\"sq_big\":1}\n");
            }
        }
        // Exactly at the cap (newline included), one over, and lines several blocks long.
        text.push_str(&long(MAX_LINE_BYTES - 1));
        text.push('\n');
        text.push_str(&long(MAX_LINE_BYTES));
        text.push('\n');
        text.push_str(&record(5000));
        text.push('\n');
        text.push_str(&long(BLOCK_BYTES + 3 * MAX_LINE_BYTES));
        text.push('\n');
        text.push_str(&record(5001));
        let mut bytes = text.into_bytes();
        bytes.extend_from_slice(b"\n\xff\xfe\n");
        bytes.extend_from_slice(record(5002).as_bytes());
        for tail in [&b""[..], b"\n", b"\nxxxx"] {
            let mut input = bytes.clone();
            input.extend_from_slice(tail);
            let want = sequential(std::io::Cursor::new(&input));
            let got = read_ndjson(std::io::Cursor::new(&input)).expect("in memory");
            assert_eq!(got, want);
            assert!(got.records.len() >= 2003 && got.malformed >= 8 && got.non_finite == 4);
        }
        // A final over-long line without a newline.
        let input = format!("{}\n{}", record(1), long(BLOCK_BYTES + 5)).into_bytes();
        let got = read_ndjson(std::io::Cursor::new(&input)).expect("in memory");
        assert_eq!(got, sequential(std::io::Cursor::new(&input)));
        assert_eq!((got.records.len(), got.malformed, got.lines), (1, 1, 2));
    }

    /// The bounded reader: below its bound it reads exactly as [`read_ndjson`]; above, it
    /// keeps the bound, with the same line counts and a report of the merging.
    #[test]
    fn bounded_reader_keeps_counts_and_the_bound() {
        let mut text = String::new();
        for i in 0..3000 {
            text.push_str(&record(i));
            text.push('\n');
            if i % 1000 == 3 {
                text.push_str("garbage\n");
            }
        }
        let all = read_ndjson(text.as_bytes()).expect("in memory");
        let same =
            read_ndjson_bounded(text.as_bytes(), RecordBound::Records(3000)).expect("in memory");
        assert_eq!(same, all);
        let none = read_ndjson_bounded(text.as_bytes(), RecordBound::All).expect("in memory");
        assert_eq!(none, all);
        let small =
            read_ndjson_bounded(text.as_bytes(), RecordBound::Records(500)).expect("in memory");
        assert!(small.records.len() <= 500);
        assert_eq!(
            (small.malformed, small.lines, &small.errors),
            (3, 3003, &all.errors)
        );
        let c = small.coarsening.expect("coarsened");
        assert_eq!(c.records_read, 3000);
        assert_eq!(c.records_kept, small.records.len() as u64);
        assert_eq!(c.steps_per_record, 8);
    }
}
