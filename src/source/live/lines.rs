//! Turning a byte stream into protocol records: complete lines only (a partial last line is
//! buffered until its newline arrives), each handed to a pluggable parser.

use super::LiveEvent;
use crate::stats::step::StepStats;
use std::fmt::Display;

/// Longest line accepted, in bytes (the cap every protocol reader shares); a longer one is
/// discarded up to its newline and counted as malformed (so a stream without newlines cannot
/// grow memory without bound).
pub use crate::stats::reader::MAX_LINE_BYTES;

/// Splits bytes into lines and parses each with `parser`, emitting [`LiveEvent`]s.
///
/// Blank lines are ignored; a trailing `\r` is stripped. Line numbers are 1-based and count
/// every line of the current stream (a file generation or a TCP connection) including blank
/// ones; [`LineIngest::reset`] starts a new stream.
pub struct LineIngest<P> {
    parser: P,
    partial: Vec<u8>,
    line_no: u64,
    /// Inside an over-long line: drop bytes until the next newline.
    discarding: bool,
}

impl<P, E> LineIngest<P>
where
    P: FnMut(&str) -> Result<StepStats, E>,
    E: Display,
{
    /// An ingest with no buffered bytes, using `parser` for each complete line.
    pub fn new(parser: P) -> Self {
        Self {
            parser,
            partial: Vec::new(),
            line_no: 0,
            discarding: false,
        }
    }

    /// Number of lines completed in the current stream.
    pub fn line_no(&self) -> u64 {
        self.line_no
    }

    /// Bytes buffered of an incomplete last line.
    pub fn pending_bytes(&self) -> usize {
        self.partial.len()
    }

    /// Start a new stream (after a truncation, rotation or reconnect): forget the partial
    /// line and restart line numbers. Returns how many buffered bytes were dropped.
    pub fn reset(&mut self) -> usize {
        let dropped = self.partial.len();
        self.partial.clear();
        self.line_no = 0;
        self.discarding = false;
        dropped
    }

    /// Feed the next bytes of the stream; `emit` receives one event per complete non-blank
    /// line (a `Record` or a `Malformed`).
    pub fn feed(&mut self, mut bytes: &[u8], emit: &mut impl FnMut(LiveEvent)) {
        while let Some(nl) = bytes.iter().position(|&b| b == b'\n') {
            let (head, rest) = (&bytes[..nl], &bytes[nl + 1..]);
            bytes = rest;
            self.line_no += 1;
            if self.discarding {
                self.discarding = false;
                self.partial.clear();
                continue;
            }
            if self.partial.is_empty() {
                self.handle_line(head, emit);
            } else {
                let mut line = std::mem::take(&mut self.partial);
                line.extend_from_slice(head);
                self.handle_line(&line, emit);
                line.clear();
                self.partial = line;
            }
        }
        if self.discarding || bytes.is_empty() {
            return;
        }
        if self.partial.len() + bytes.len() > MAX_LINE_BYTES {
            self.partial.clear();
            self.discarding = true;
            emit(LiveEvent::Malformed {
                line_no: self.line_no + 1,
                reason: format!("line longer than {MAX_LINE_BYTES} bytes: discarded"),
            });
        } else {
            self.partial.extend_from_slice(bytes);
        }
    }

    fn handle_line(&mut self, raw: &[u8], emit: &mut impl FnMut(LiveEvent)) {
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        if raw.len() > MAX_LINE_BYTES {
            emit(LiveEvent::Malformed {
                line_no: self.line_no,
                reason: format!("line longer than {MAX_LINE_BYTES} bytes: discarded"),
            });
            return;
        }
        let text = match std::str::from_utf8(raw) {
            Ok(t) => t,
            Err(e) => {
                emit(LiveEvent::Malformed {
                    line_no: self.line_no,
                    reason: format!("not UTF-8: {e}"),
                });
                return;
            }
        };
        if text.trim().is_empty() {
            return;
        }
        match (self.parser)(text) {
            Ok(record) => emit(LiveEvent::Record(record)),
            Err(e) => emit(LiveEvent::Malformed {
                line_no: self.line_no,
                reason: e.to_string(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::live::parse_record;

    fn collect(chunks: &[&[u8]]) -> Vec<LiveEvent> {
        let mut ingest = LineIngest::new(parse_record);
        let mut out = Vec::new();
        for c in chunks {
            ingest.feed(c, &mut |e| out.push(e));
        }
        out
    }

    const REC: &str = r#"{"v":1,"step":7,"b_small":2,"b_big":8,"sq_small":3,"sq_big":1}"#;

    #[test]
    fn a_line_split_across_chunks_is_parsed_once_complete() {
        let line = format!("{REC}\n");
        let (a, b) = line.as_bytes().split_at(20);
        let events = collect(&[a]);
        assert!(events.is_empty(), "partial line must wait for its newline");
        let events = collect(&[a, b]);
        assert!(matches!(&events[..], [LiveEvent::Record(r)] if r.step == 7));
    }

    #[test]
    fn garbage_is_malformed_with_its_line_number_and_blank_lines_are_ignored() {
        let text = format!("{REC}\n\ngarbage\r\n{REC}\r\n");
        let events = collect(&[text.as_bytes()]);
        assert_eq!(events.len(), 3);
        assert!(matches!(
            &events[1],
            LiveEvent::Malformed { line_no: 3, .. }
        ));
        assert!(matches!(&events[2], LiveEvent::Record(_)));
    }

    #[test]
    fn an_overlong_line_is_dropped_up_to_its_newline() {
        let big = vec![b'x'; MAX_LINE_BYTES + 10];
        let tail = format!("yyy\n{REC}\n");
        let events = collect(&[&big, tail.as_bytes()]);
        assert_eq!(events.len(), 2, "{events:?}");
        assert!(matches!(
            &events[0],
            LiveEvent::Malformed { line_no: 1, .. }
        ));
        assert!(matches!(&events[1], LiveEvent::Record(_)));
    }
}
