//! Turning a byte stream into protocol records: complete lines only (a partial last line is
//! buffered until its newline arrives), each handed to a pluggable parser.

use super::LiveEvent;
use super::RecordError;
use crate::stats::record::step::StepStats;

/// Longest line accepted, in bytes (the cap every protocol reader shares); a longer one is
/// discarded up to its newline and counted as malformed (so a stream without newlines cannot
/// grow memory without bound).
pub use crate::stats::ingest::reader::MAX_LINE_BYTES;

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

/// Complete lines in one chunk from which they are parsed in parallel (a follower catching up
/// with a long file reads ~2,000 lines a chunk; a live run appends a few at a time).
const PARALLEL_LINES: usize = 256;

impl<P, E> LineIngest<P>
where
    P: Fn(&str) -> Result<StepStats, E> + Sync,
    E: RecordError,
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
    /// line (a `Record` or a `Malformed`), in stream order. Many complete lines in one chunk
    /// are parsed in parallel.
    pub fn feed(&mut self, mut bytes: &[u8], emit: &mut impl FnMut(LiveEvent)) {
        // The line in progress (buffered or being discarded) ends at the first newline.
        if self.discarding || !self.partial.is_empty() {
            let Some(nl) = memchr::memchr(b'\n', bytes) else {
                self.keep_tail(bytes, emit);
                return;
            };
            let head = &bytes[..nl];
            bytes = &bytes[nl + 1..];
            self.line_no += 1;
            if self.discarding {
                self.discarding = false;
                self.partial.clear();
            } else {
                let mut line = std::mem::take(&mut self.partial);
                line.extend_from_slice(head);
                emit_some(classify(&self.parser, self.line_no, &line), emit);
                line.clear();
                self.partial = line;
            }
        }
        let end = memchr::memrchr(b'\n', bytes).map_or(0, |i| i + 1);
        let (whole, tail) = bytes.split_at(end);
        if let Some(whole) = whole.strip_suffix(b"\n") {
            let mut lines: Vec<&[u8]> = Vec::with_capacity(whole.len() / 256 + 1);
            let mut start = 0;
            for nl in memchr::memchr_iter(b'\n', whole) {
                lines.push(&whole[start..nl]);
                start = nl + 1;
            }
            lines.push(&whole[start..]);
            let first = self.line_no + 1;
            let parser = &self.parser;
            if lines.len() >= PARALLEL_LINES {
                use rayon::prelude::*;
                let events: Vec<Option<LiveEvent>> = lines
                    .par_iter()
                    .enumerate()
                    .map(|(k, raw)| classify(parser, first + k as u64, raw))
                    .collect();
                for ev in events {
                    emit_some(ev, emit);
                }
            } else {
                for (k, raw) in lines.iter().enumerate() {
                    emit_some(classify(parser, first + k as u64, raw), emit);
                }
            }
            self.line_no += lines.len() as u64;
        }
        self.keep_tail(tail, emit);
    }

    /// Buffer the bytes of an unfinished line (or drop them while discarding one too long).
    fn keep_tail(&mut self, bytes: &[u8], emit: &mut impl FnMut(LiveEvent)) {
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
}

fn emit_some(ev: Option<LiveEvent>, emit: &mut impl FnMut(LiveEvent)) {
    if let Some(ev) = ev {
        emit(ev);
    }
}

/// The event of complete line `line_no` (without its newline): `None` for a blank line.
fn classify<P, E>(parser: &P, line_no: u64, raw: &[u8]) -> Option<LiveEvent>
where
    P: Fn(&str) -> Result<StepStats, E>,
    E: RecordError,
{
    let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
    if raw.len() > MAX_LINE_BYTES {
        return Some(LiveEvent::Malformed {
            line_no,
            reason: format!("line longer than {MAX_LINE_BYTES} bytes: discarded"),
        });
    }
    let text = match std::str::from_utf8(raw) {
        Ok(t) => t,
        Err(e) => {
            return Some(LiveEvent::Malformed {
                line_no,
                reason: format!("not UTF-8: {e}"),
            });
        }
    };
    if text.trim().is_empty() {
        return None;
    }
    Some(match parser(text) {
        Ok(record) => LiveEvent::Record(record),
        Err(e) if e.event().is_some() => {
            let (kind, at_step) = e.event().unwrap_or(("event", None));
            LiveEvent::Event {
                line_no,
                kind,
                at_step,
            }
        }
        Err(e) if e.is_non_finite() => LiveEvent::NonFinite {
            line_no,
            reason: e.to_string(),
        },
        Err(e) => LiveEvent::Malformed {
            line_no,
            reason: e.to_string(),
        },
    })
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

    /// Many lines in one chunk (parsed in parallel) give the events, in order and with the
    /// line numbers, that the same bytes fed a few at a time (parsed one by one) give.
    #[test]
    fn a_large_chunk_parses_as_small_chunks_do() {
        let mut bytes = Vec::new();
        for i in 0..3 * PARALLEL_LINES {
            match i % 7 {
                0 => bytes.extend_from_slice(b"\n"),
                1 => bytes.extend_from_slice(b"garbage\r\n"),
                2 => bytes.extend_from_slice(b"\xff\xfe\n"),
                3 => bytes.extend_from_slice(b"   \t\n"),
                _ => bytes.extend_from_slice(
                    format!(
                        "{}\r\n",
                        REC.replace("\"step\":7", &format!("\"step\":{i}"))
                    )
                    .as_bytes(),
                ),
            }
        }
        bytes.extend_from_slice(REC.as_bytes()); // an unfinished last line
        let whole = collect(&[&bytes]);
        let pieces: Vec<&[u8]> = bytes.chunks(37).collect();
        let small = collect(&pieces);
        assert_eq!(format!("{whole:?}"), format!("{small:?}"));
        let records = whole
            .iter()
            .filter(|e| matches!(e, LiveEvent::Record(_)))
            .count();
        assert_eq!(
            records,
            (0..3 * PARALLEL_LINES).filter(|i| i % 7 >= 4).count()
        );
        // The last garbage line keeps its own (1-based) number.
        let last_garbage = (0..3 * PARALLEL_LINES)
            .rfind(|i| i % 7 == 1)
            .map(|i| i as u64 + 1);
        assert!(whole.iter().any(
            |e| matches!(e, LiveEvent::Malformed { line_no, .. } if Some(*line_no) == last_garbage)
        ));
    }
}
