//! The Adam-preconditioned noise scale (docs/CBS.md): a stats stream whose records carry
//! `precond` (the norms of P ⊙ g) read as if those were its raw norms, so every estimator,
//! smoother and interval applies unchanged.

use crate::analysis::settings::GradientKind;
use crate::{ReadOutcome, RecordBound, read_ndjson_bounded};
use std::io::{BufReader, Read};

/// The records of a stats stream with their `sq_small` / `sq_big` replaced by the `precond`
/// pair (and their layers dropped), as protocol lines; lines that are not step records pass
/// through unchanged (the reader counts them as before). A record whose `precond` names a
/// key twice becomes a blank line and one of the returned problems (1-based line, what is
/// wrong): which value is meant cannot be known. Returns the text, how many records had no
/// `precond`, and those problems.
pub fn preconditioned_lines(reader: impl std::io::BufRead) -> std::io::Result<PreconditionedText> {
    let mut out = Vec::new();
    let mut left_out = 0usize;
    let mut problems = Vec::new();
    // Line by line as bytes: every input line gives exactly one output line (a record left
    // out becomes a blank line, which the reader skips), so the reader's line numbers are
    // the file's; a line that is not UTF-8 goes through for the reader to count.
    for (n, line) in reader.split(b'\n').enumerate() {
        let line = line?;
        // A key named twice in `precond` (a JSON map keeps the last of the two): refused.
        let text = std::str::from_utf8(&line).ok();
        if let Some(found) =
            text.and_then(|t| crate::ingest::protocol::repeated_key(t, &["precond"]))
            && found.0.is_some()
        {
            problems.push((n + 1, crate::ingest::protocol::repeated_key_error(found)));
            out.push(b'\n');
            continue;
        }
        let rec = text.and_then(|text| serde_json::from_str::<serde_json::Value>(text).ok());
        let Some(serde_json::Value::Object(mut rec)) = rec.filter(|r| r.get("step").is_some())
        else {
            out.extend_from_slice(&line);
            out.push(b'\n');
            continue;
        };
        let pre = rec.remove("precond");
        let pair = pre
            .as_ref()
            .and_then(|p| Some((p.get("sq_small")?.clone(), p.get("sq_big")?.clone())));
        let Some((small, big)) = pair else {
            left_out += 1;
            out.push(b'\n');
            continue;
        };
        rec.insert("sq_small".into(), small);
        rec.insert("sq_big".into(), big);
        rec.remove("layers");
        serde_json::to_writer(&mut out, &rec).map_err(std::io::Error::other)?;
        out.push(b'\n');
    }
    Ok(PreconditionedText {
        text: out,
        left_out,
        problems,
    })
}

/// What [`preconditioned_lines`] makes of a stream.
#[derive(Debug)]
pub struct PreconditionedText {
    /// The protocol lines, one per input line.
    pub text: Vec<u8>,
    /// Records without a `precond` pair (left out).
    pub left_out: usize,
    /// Lines refused before the reader sees them (1-based line, why).
    pub problems: Vec<(usize, crate::ingest::protocol::ProtocolError)>,
}

/// What a preconditioned read says about the `left_out` records that had no `precond`
/// pair: one is the hook's first step (no Adam state before the optimizer's first step); more
/// may also be records of a run measured without the preconditioner.
pub fn left_out_note(left_out: usize) -> String {
    if left_out == 1 {
        "1 record without `precond` left out (the first optimizer step has no Adam state yet)"
            .to_string()
    } else {
        format!(
            "{left_out} records without `precond` left out (the hook writes none before the \
             optimizer's first step, and none without GradNoiseMeter(precondition=optimizer))"
        )
    }
}

/// Read a stats stream for `gradient`: as it is (raw), or with the `precond` pair in place of
/// the raw norms. Returns the outcome and how many records were left out for want of the
/// pair (0 for raw). An Adam-preconditioned read of a stream without any `precond` is an
/// error that says where the pair comes from.
pub fn read_for(
    reader: impl Read + Send,
    gradient: GradientKind,
    bound: RecordBound,
) -> std::io::Result<(ReadOutcome, usize)> {
    match gradient {
        GradientKind::Raw => Ok((read_ndjson_bounded(BufReader::new(reader), bound)?, 0)),
        GradientKind::AdamPreconditioned => {
            let PreconditionedText {
                text,
                left_out,
                problems,
            } = preconditioned_lines(BufReader::new(reader))?;
            // No record carried the pair (lines that are not records, malformed ones
            // included, pass through and do not count).
            let mut outcome = read_ndjson_bounded(std::io::Cursor::new(text), bound)?;
            outcome.add_errors(problems);
            if outcome.records.is_empty() && left_out > 0 {
                return Err(std::io::Error::other(format!(
                    "no record carries `precond` (the hook writes it with \
                     GradNoiseMeter(precondition=optimizer)); {left_out} records without it"
                )));
            }
            Ok((outcome, left_out))
        }
    }
}
