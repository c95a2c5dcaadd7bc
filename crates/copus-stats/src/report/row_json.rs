//! One step row of `copus analyze --json` written straight as pretty JSON bytes: the bytes
//! `serde_json::to_writer_pretty` writes for a [`StepRow`] with its layers, at the depth of
//! the report's `steps` array, without going through serde's (flattened, map-based)
//! serialisation. A long run's report is mostly these rows (10⁵ steps × 4 layers ≈ 126 MB),
//! so their writer sets the speed of `--json`.
//!
//! Numbers are written as serde_json writes them: integers by `itoa`, finite floats by
//! `zmij` (shortest round-trip form), NaN and ±∞ as `null`, `None` as `null`.

use crate::estimate::per_step::EstimatorKind;
use crate::report::{LayerPoint, StepRow};

/// A layer name as a JSON string (quotes and escapes included), as serde_json writes it.
pub(crate) fn escaped_key(name: &str) -> Vec<u8> {
    // Serialising a string into a Vec cannot fail.
    serde_json::to_vec(name).unwrap_or_else(|_| b"\"\"".to_vec())
}

/// Append `s` (a number's text: at most 32 bytes, else an ordinary copy) with fixed-size
/// copies instead of a call to `memcpy` per number: two overlapping moves of 16, 8 or 4
/// bytes cover any length from 4 to 32. A row is ~30 numbers, a long run's report millions.
#[inline(always)]
fn push_short(out: &mut Vec<u8>, s: &[u8]) {
    let n = s.len();
    if !(4..=32).contains(&n) {
        out.extend_from_slice(s);
        return;
    }
    out.reserve(n);
    let at = out.len();
    let src = s.as_ptr();
    // SAFETY: `reserve` made room for `n` bytes after `at`; each copy reads inside `s` (the
    // chunk sizes are at most `n`, the second starts at `n - chunk`) and writes inside
    // `[at, at + n)`; together the two copies cover all `n` bytes before `set_len`.
    unsafe {
        let dst = out.as_mut_ptr().add(at);
        let chunk = if n >= 16 {
            16
        } else if n >= 8 {
            8
        } else {
            4
        };
        match chunk {
            16 => {
                std::ptr::copy_nonoverlapping(src, dst, 16);
                std::ptr::copy_nonoverlapping(src.add(n - 16), dst.add(n - 16), 16);
            }
            8 => {
                std::ptr::copy_nonoverlapping(src, dst, 8);
                std::ptr::copy_nonoverlapping(src.add(n - 8), dst.add(n - 8), 8);
            }
            _ => {
                std::ptr::copy_nonoverlapping(src, dst, 4);
                std::ptr::copy_nonoverlapping(src.add(n - 4), dst.add(n - 4), 4);
            }
        }
        out.set_len(at + n);
    }
}

#[inline(always)]
fn f64_json(out: &mut Vec<u8>, x: f64) {
    if x.is_finite() {
        push_short(out, zmij::Buffer::new().format_finite(x).as_bytes());
    } else {
        out.extend_from_slice(b"null");
    }
}

#[inline(always)]
fn opt_json(out: &mut Vec<u8>, x: Option<f64>) {
    match x {
        Some(x) => f64_json(out, x),
        None => out.extend_from_slice(b"null"),
    }
}

/// `,\n` + the row's field indentation + `"name": `, as one constant.
macro_rules! field {
    ($name:literal) => {
        concat!(",\n      \"", $name, "\": ").as_bytes()
    };
}

/// The same at a layer's field indentation (`first`: without the comma).
macro_rules! layer_field {
    (first $name:literal) => {
        concat!("\n          \"", $name, "\": ").as_bytes()
    };
    ($name:literal) => {
        concat!(",\n          \"", $name, "\": ").as_bytes()
    };
}

/// A two-number array (`ci`) whose opening bracket is already on the line of its key, at
/// the given depth: `open` is `[` + newline + the numbers' indentation, `mid` the comma
/// between them, `close` the newline and indentation before `]`.
#[inline(always)]
fn pair(out: &mut Vec<u8>, (open, mid, close): (&[u8], &[u8], &[u8]), ci: [f64; 2]) {
    if crate::estimate::interval::is_empty(ci) {
        // As `interval::serialize_ci`: an interval without a positive value is `null`.
        out.extend_from_slice(b"null");
        return;
    }
    out.extend_from_slice(open);
    f64_json(out, ci[0]);
    out.extend_from_slice(mid);
    f64_json(out, ci[1]);
    out.extend_from_slice(close);
}

/// [`pair`]'s pieces for a row's field and for a layer's field.
const ROW_PAIR: (&[u8], &[u8], &[u8]) = (b"[\n        ", b",\n        ", b"\n      ]");
const LAYER_PAIR: (&[u8], &[u8], &[u8]) =
    (b"[\n            ", b",\n            ", b"\n          ]");

fn estimator_name(k: EstimatorKind) -> &'static [u8] {
    match k {
        EstimatorKind::TwoBatch => b"\"two_batch\"",
        EstimatorKind::PerExample => b"\"per_example\"",
        EstimatorKind::Differencing => b"\"differencing\"",
    }
}

/// Bytes a row usually takes (room reserved up front, so that writing it does not grow the
/// buffer piece by piece).
const ROW_BYTES: usize = 2048;

/// `pretty` or, with `C`, `compact` (chosen at compile time).
#[inline(always)]
fn sel<const C: bool>(pretty: &'static [u8], compact: &'static [u8]) -> &'static [u8] {
    if C { compact } else { pretty }
}

/// The row key `name` after its comma, pretty or compact.
macro_rules! key {
    ($c:ident, $name:literal) => {
        sel::<$c>(field!($name), concat!(",\"", $name, "\":").as_bytes())
    };
}

/// [`pair`]'s pieces without whitespace.
const COMPACT_PAIR: (&[u8], &[u8], &[u8]) = (b"[", b",", b"]");

/// Append `row` (its own `layers` map ignored) with `layers` (name as an escaped JSON string,
/// point) as its `layers` object, from its opening brace to its closing one: pretty at the
/// depth of the report's `steps` array, or with `C` compact (no whitespace), as
/// `serde_json::to_writer` writes it.
pub(crate) fn write_row<'a, const C: bool>(
    out: &mut Vec<u8>,
    row: &StepRow,
    layers: impl Iterator<Item = (&'a [u8], &'a LayerPoint)>,
) {
    out.reserve(ROW_BYTES);
    out.extend_from_slice(sel::<C>(b"{\n      \"step\": ", b"{\"step\":"));
    push_short(out, itoa::Buffer::new().format(row.step).as_bytes());
    out.extend_from_slice(key!(C, "b_simple"));
    opt_json(out, row.b_simple);
    out.extend_from_slice(key!(C, "ci"));
    pair(out, if C { COMPACT_PAIR } else { ROW_PAIR }, row.ci);
    // Each key a constant at its call site (copied inline, not by a call per key).
    macro_rules! number {
        ($name:literal, $x:expr) => {
            out.extend_from_slice(key!(C, $name));
            f64_json(out, $x);
        };
    }
    number!("sq_small", row.sq_small);
    number!("sq_big", row.sq_big);
    number!("b_small", row.b_small);
    number!("b_big", row.b_big);
    number!("g2", row.g2);
    number!("trace_sigma", row.trace_sigma);
    number!("g2_step", row.g2_step);
    number!("trace_step", row.trace_step);
    out.extend_from_slice(key!(C, "ratio_ema"));
    opt_json(out, row.ratio_ema);
    out.extend_from_slice(key!(C, "estimator"));
    out.extend_from_slice(estimator_name(row.estimator));
    macro_rules! optional {
        ($name:literal, $x:expr) => {
            if let Some(x) = $x {
                number!($name, x);
            }
        };
    }
    optional!("tokens", row.tokens);
    optional!("loss", row.loss);
    optional!("lr", row.lr);
    let mut layers = layers.peekable();
    if layers.peek().is_some() {
        out.extend_from_slice(key!(C, "layers"));
        out.push(b'{');
        let mut first = true;
        for (name, p) in layers {
            out.extend_from_slice(match (first, C) {
                (true, false) => b"\n        ",
                (false, false) => b",\n        ",
                (true, true) => b"",
                (false, true) => b",",
            });
            first = false;
            out.extend_from_slice(name);
            out.extend_from_slice(sel::<C>(b": {", b":{"));
            out.extend_from_slice(sel::<C>(layer_field!(first "b_simple"), b"\"b_simple\":"));
            opt_json(out, p.b_simple);
            out.extend_from_slice(sel::<C>(layer_field!("ci"), b",\"ci\":"));
            pair(out, if C { COMPACT_PAIR } else { LAYER_PAIR }, p.ci);
            out.extend_from_slice(sel::<C>(b"\n        }", b"}"));
        }
        out.extend_from_slice(sel::<C>(b"\n      }", b"}"));
    }
    out.extend_from_slice(sel::<C>(b"\n    }", b"}"));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn row(k: u64) -> StepRow {
        // Values across every case the writer distinguishes: None, NaN, ±∞, −0, subnormal,
        // huge and tiny, integers stored as floats.
        let pick = |i: u64| -> f64 {
            match (k + i) % 11 {
                0 => f64::NAN,
                1 => f64::INFINITY,
                2 => f64::NEG_INFINITY,
                3 => -0.0,
                4 => 5e-324,
                5 => 1.7976931348623157e308,
                6 => 128.0,
                7 => 1e-7 * (k as f64 + 1.0),
                8 => -123.456e20,
                9 => 0.1 + 0.2,
                _ => (k as f64).sqrt() * 1e5,
            }
        };
        let opt = |i: u64| (!(k + i).is_multiple_of(3)).then(|| pick(i));
        let mut layers = BTreeMap::new();
        for j in 0..(k % 4) {
            layers.insert(
                ["a", "b\"\\\n\u{1}", "ü/z", ""][j as usize].to_string(),
                LayerPoint {
                    b_simple: opt(j + 20),
                    ci: [pick(j + 21), pick(j + 22)],
                },
            );
        }
        StepRow {
            step: k * 7919 + if k == 5 { u64::MAX - 7919 * 5 } else { 0 },
            b_simple: opt(1),
            ci: [pick(2), pick(3)],
            sq_small: pick(4),
            sq_big: pick(5),
            b_small: pick(6),
            b_big: pick(7),
            g2: pick(8),
            trace_sigma: pick(9),
            g2_step: pick(10),
            trace_step: pick(11),
            ratio_ema: opt(12),
            estimator: [
                EstimatorKind::TwoBatch,
                EstimatorKind::PerExample,
                EstimatorKind::Differencing,
            ][(k % 3) as usize],
            tokens: opt(13),
            loss: opt(14),
            lr: opt(15),
            layers,
        }
    }

    #[test]
    fn short_pushes_copy_every_length() {
        let text: Vec<u8> = (0..40u8).map(|i| b'a' + i % 26).collect();
        for n in 0..=text.len() {
            let mut out = b"prefix".to_vec();
            push_short(&mut out, &text[..n]);
            assert_eq!(&out[..6], b"prefix");
            assert_eq!(&out[6..], &text[..n], "length {n}");
        }
    }

    /// The hand-written row is byte for byte what serde_json's pretty printer writes for the
    /// row inside the report's `steps` array (two levels deep).
    #[test]
    fn equals_serde_pretty_at_depth_two() {
        for k in 0..200 {
            let r = row(k);
            let escaped: Vec<(Vec<u8>, LayerPoint)> =
                r.layers.iter().map(|(n, p)| (escaped_key(n), *p)).collect();
            let mut got = Vec::new();
            write_row::<false>(&mut got, &r, escaped.iter().map(|(n, p)| (n.as_slice(), p)));
            let mut compact = Vec::new();
            write_row::<true>(
                &mut compact,
                &r,
                escaped.iter().map(|(n, p)| (n.as_slice(), p)),
            );
            let serde_compact = serde_json::to_string(&r).expect("json");
            assert_eq!(
                String::from_utf8_lossy(&compact),
                serde_compact,
                "compact row {k}"
            );
            #[derive(serde::Serialize)]
            struct Wrapper<'a> {
                steps: [&'a StepRow; 1],
            }
            let wrapped = Wrapper { steps: [&r] };
            let text = serde_json::to_string_pretty(&wrapped).expect("json");
            let want = text
                .strip_prefix("{\n  \"steps\": [\n    ")
                .and_then(|t| t.strip_suffix("\n  ]\n}"))
                .expect("the wrapper's shape");
            assert_eq!(String::from_utf8_lossy(&got), want, "row {k}");
        }
    }
}
