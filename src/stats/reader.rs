//! Reading a stats protocol v1 stream (file, growing file, socket) into records, counting the
//! lines that could not be used. Garbage never stops the reader; only I/O errors do.

use super::protocol::{ProtocolError, parse_line};
use super::step::StepStats;
use serde::Serialize;
use std::io::BufRead;

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
    /// Lines seen, blank ones included.
    pub lines: usize,
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

    fn push_error(&mut self, line_no: usize, e: &ProtocolError) {
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

/// Longest line read, bytes; a longer line is skipped up to its newline and counted as
/// malformed, so memory stays bounded whatever the input.
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// Read one line (through its `\n`) into `buf`, keeping at most `max` bytes. Returns the
/// bytes consumed and whether the line was longer than `max` (its content then dropped).
fn read_line_capped<R: BufRead>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<(usize, bool)> {
    let (mut consumed, mut overlong) = (0usize, false);
    loop {
        let chunk = match reader.fill_buf() {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if chunk.is_empty() {
            return Ok((consumed, overlong));
        }
        let (take, done) = match chunk.iter().position(|b| *b == b'\n') {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        if !overlong && buf.len() + take <= max {
            buf.extend_from_slice(&chunk[..take]);
        } else {
            overlong = true;
            buf.clear();
        }
        reader.consume(take);
        consumed += take;
        if done {
            return Ok((consumed, overlong));
        }
    }
}

/// Read a whole protocol v1 stream. Malformed and non-finite lines are counted and skipped;
/// only an I/O error stops the read.
pub fn read_ndjson<R: BufRead>(mut reader: R) -> std::io::Result<ReadOutcome> {
    let mut out = ReadOutcome::default();
    let mut buf = Vec::new();
    let mut line_no = 0;
    loop {
        buf.clear();
        let (read, overlong) = read_line_capped(&mut reader, &mut buf, MAX_LINE_BYTES)?;
        if read == 0 {
            break;
        }
        line_no += 1;
        if overlong {
            out.lines = out.lines.max(line_no);
            let e =
                ProtocolError::Json(format!("line longer than {MAX_LINE_BYTES} bytes: skipped"));
            out.push_error(line_no, &e);
            continue;
        }
        match std::str::from_utf8(&buf) {
            Ok(s) => out.push_line(line_no, s),
            Err(_) => out.push_not_utf8(line_no),
        }
    }
    Ok(out)
}
