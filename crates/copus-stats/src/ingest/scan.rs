//! The fastest path of [`crate::ingest::protocol::parse_line`]: a hand-written scanner for the lines
//! producers actually write (the built-in trainer, the Python hook, `json.dumps` with or
//! without spaces): one JSON object of the protocol's own fields, numbers, `config` and
//! `layers` objects, and an escape-free `skipped` string.
//!
//! It is strict: any other shape — an unknown field, a duplicate, `null`, an escape, a
//! number with a fraction where an integer is due, trailing text — returns `None`, and the
//! serde paths ([`crate::ingest::typed`], then the general one) decide with their exact
//! result. What it accepts it reads exactly as serde_json does: every number correctly
//! rounded (serde_json is built with `float_roundtrip`, so both agree to the bit).

use crate::record::layer_map::{LayerMap, intern};
use crate::record::step::{LayerSq, PROTOCOL_VERSION, StepConfig, StepStats};

thread_local! {
    /// Layers of the last record this thread read (the capacity of the next one's map).
    static LAYERS_SEEN: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// A cursor over the bytes of one line.
struct Scan<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Scan<'a> {
    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    /// Skip whitespace, then take `c`.
    fn eat(&mut self, c: u8) -> Option<()> {
        self.ws();
        (self.b.get(self.i) == Some(&c)).then(|| self.i += 1)
    }

    /// Skip whitespace; true (and taken) when the next byte is `c`.
    fn peek_eat(&mut self, c: u8) -> bool {
        self.ws();
        let hit = self.b.get(self.i) == Some(&c);
        if hit {
            self.i += 1;
        }
        hit
    }

    /// A string without escapes or control characters (its bytes; valid UTF-8 only when the
    /// caller checks it, as [`Self::text`] does).
    fn string(&mut self) -> Option<&'a [u8]> {
        self.eat(b'"')?;
        let rest = self.b.get(self.i..)?;
        // Keys and names are short: one pass, byte by byte, finds the closing quote and
        // refuses escapes and control characters (cheaper than a `memchr` call and a
        // second pass).
        let mut len = 0;
        loop {
            match *rest.get(len)? {
                b'"' => break,
                b'\\' | 0..0x20 => return None,
                _ => len += 1,
            }
        }
        self.i += len + 1;
        Some(&rest[..len])
    }

    /// A string as [`Self::string`], checked to be UTF-8.
    fn text(&mut self) -> Option<&'a str> {
        std::str::from_utf8(self.string()?).ok()
    }

    /// A number read as serde_json reads it into an `f64`: an integer literal converted
    /// with `as` from `u64`/`i64` (round to nearest, ties to even; `-0` is −0.0), any other
    /// number correctly rounded — both the correctly rounded value of the text.
    fn f64(&mut self) -> Option<f64> {
        self.ws();
        let rest = self.b.get(self.i..)?;
        // `fast_float2` is correctly rounded, as `str::parse` is, straight from the bytes; it
        // finds the number's end itself (one pass over the digits), and accepts a superset
        // of JSON's numbers, which `json_number` narrows. A number cut short where JSON
        // would go on (`1e`) leaves bytes that no caller accepts after a number.
        let (x, len) = fast_float2::parse_partial::<f64, _>(rest).ok()?;
        let text = &rest[..len];
        json_number(text)?;
        self.i += len;
        Some(x)
    }

    /// A non-negative integer literal that fits `T`: digits, without a leading zero. A
    /// fraction, exponent or sign after them is left unread, and no caller accepts those bytes
    /// after a value, so such a number is refused all the same.
    fn unsigned<T: TryFrom<u64>>(&mut self) -> Option<T> {
        self.ws();
        let rest = self.b.get(self.i..)?;
        let len = rest.iter().take_while(|c| c.is_ascii_digit()).count();
        if len == 0 || (len > 1 && rest[0] == b'0') {
            return None;
        }
        let mut x: u64 = 0;
        for &d in &rest[..len] {
            x = x.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
        }
        self.i += len;
        T::try_from(x).ok()
    }

    /// `{ "a": .., "b": .. }` with each key handled by `field` (which returns `None` to give
    /// up); an empty object is allowed.
    fn object(&mut self, mut field: impl FnMut(&mut Self, &'a [u8]) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        if self.peek_eat(b'}') {
            return Some(());
        }
        loop {
            let key = self.string()?;
            self.eat(b':')?;
            field(self, key)?;
            if self.peek_eat(b'}') {
                return Some(());
            }
            self.eat(b',')?;
        }
    }
}

/// `Some` when `text`, a number `fast_float2` read whole, is also a JSON number: no `+`,
/// `inf` or `nan`, a digit first (after an optional `-`), no leading zero, and a digit on
/// each side of a decimal point (its exponent, when it has one, has digits: `fast_float2`
/// leaves an exponent without them unread).
fn json_number(text: &[u8]) -> Option<()> {
    let int_start = usize::from(text.first() == Some(&b'-'));
    let first = *text.get(int_start)?;
    if !first.is_ascii_digit()
        || (first == b'0' && text.get(int_start + 1).is_some_and(u8::is_ascii_digit))
    {
        return None;
    }
    if let Some(dot) = text.iter().position(|&c| c == b'.')
        && !text.get(dot + 1).is_some_and(u8::is_ascii_digit)
    {
        return None;
    }
    Some(())
}

/// Bits of the fields seen, to refuse duplicates (serde_json rejects a duplicate field).
fn once(seen: &mut u32, bit: u32) -> Option<()> {
    (*seen & bit == 0).then(|| *seen |= bit)
}

/// A layer's `{"sq_small": x, "sq_big": y}`.
fn layer(s: &mut Scan<'_>) -> Option<LayerSq> {
    let (mut small, mut big) = (None, None);
    s.object(|s, key| {
        let slot = match key {
            b"sq_small" => &mut small,
            b"sq_big" => &mut big,
            _ => return None,
        };
        if slot.is_some() {
            return None;
        }
        *slot = Some(s.f64()?);
        Some(())
    })?;
    Some(LayerSq {
        sq_small: small?,
        sq_big: big?,
    })
}

/// `{"dp": .., "tp": .., "pp": .., "mbs": ..}`.
fn config(s: &mut Scan<'_>) -> Option<StepConfig> {
    let mut v: [Option<u32>; 4] = [None; 4];
    s.object(|s, key| {
        let k = [&b"dp"[..], b"tp", b"pp", b"mbs"]
            .iter()
            .position(|n| *n == key)?;
        if v[k].is_some() {
            return None;
        }
        v[k] = Some(s.unsigned()?);
        Some(())
    })?;
    Some(StepConfig {
        dp: v[0]?,
        tp: v[1]?,
        pp: v[2]?,
        mbs: v[3]?,
    })
}

/// The record of a line in the shape described above (before any range check), or `None`.
pub(crate) fn scan(line: &str) -> Option<StepStats> {
    scan_bytes(line.as_bytes())
}

/// [`scan`] on the bytes of a line not yet known to be UTF-8: a line it accepts is UTF-8
/// (its strings are checked, everything else it takes is ASCII), so a reader can skip that
/// check for it.
pub(crate) fn scan_bytes(line: &[u8]) -> Option<StepStats> {
    let mut s = Scan { b: line, i: 0 };
    let mut r = StepStats::new(0, 0.0, 0.0, 0.0, 0.0);
    let mut seen = 0u32;
    s.object(|s, key| {
        let (bit, slot): (u32, Option<&mut Option<f64>>) = match key {
            b"tokens" => (1 << 6, Some(&mut r.tokens)),
            b"loss" => (1 << 7, Some(&mut r.loss)),
            b"lr" => (1 << 8, Some(&mut r.lr)),
            b"step_time_s" => (1 << 9, Some(&mut r.step_time_s)),
            b"dot_prev" => (1 << 10, Some(&mut r.dot_prev)),
            _ => (0, None),
        };
        if let Some(slot) = slot {
            once(&mut seen, bit)?;
            *slot = Some(s.f64()?);
            return Some(());
        }
        match key {
            b"v" => {
                once(&mut seen, 1)?;
                r.v = s.unsigned()?;
            }
            b"step" => {
                once(&mut seen, 1 << 1)?;
                r.step = s.unsigned()?;
            }
            b"b_small" => {
                once(&mut seen, 1 << 2)?;
                r.b_small = s.f64()?;
            }
            b"b_big" => {
                once(&mut seen, 1 << 3)?;
                r.b_big = s.f64()?;
            }
            b"sq_small" => {
                once(&mut seen, 1 << 4)?;
                r.sq_small = s.f64()?;
            }
            b"sq_big" => {
                once(&mut seen, 1 << 5)?;
                r.sq_big = s.f64()?;
            }
            b"n_small" => {
                once(&mut seen, 1 << 11)?;
                r.n_small = Some(s.unsigned()?);
            }
            b"config" => {
                once(&mut seen, 1 << 12)?;
                r.config = Some(config(s)?);
            }
            b"skipped" => {
                once(&mut seen, 1 << 13)?;
                r.skipped = Some(s.text()?.to_string());
            }
            b"layers" => {
                once(&mut seen, 1 << 14)?;
                // Room for as many layers as the previous record of this thread had (a run
                // reports the same layers at every step): one allocation of the right size.
                let mut layers = LayerMap::with_capacity(LAYERS_SEEN.get());
                s.object(|s, name| {
                    let name = std::str::from_utf8(name).ok()?;
                    // A layer named twice is left to the serde paths (malformed there).
                    layers
                        .insert(intern(name), layer(s)?)
                        .is_none()
                        .then_some(())
                })?;
                LAYERS_SEEN.set(layers.len());
                r.layers = layers;
            }
            _ => return None,
        }
        Some(())
    })?;
    s.ws();
    // Every required field present, the whole line used, the version this build reads.
    (seen & 0b11_1111 == 0b11_1111 && s.i == s.b.len() && r.v == PROTOCOL_VERSION).then_some(r)
}

#[cfg(test)]
mod tests {
    use super::scan;

    /// What the scanner takes it reads as the serde fast path does, to the bit.
    #[test]
    fn accepted_lines_equal_the_serde_path() {
        let lines = [
            r#"{"v":1,"step":3,"b_small":16,"b_big":128.0,"sq_small":0.5,"sq_big":0.25}"#,
            r#"{ "v": 1, "step": 3, "b_small": 16, "b_big": 1.28e2, "sq_small": 5E-1, "sq_big": 0.25 } "#,
            r#"{"sq_big":0.25,"sq_small":0.5,"b_big":128,"b_small":16,"step":18446744073709551615,"v":1}"#,
            r#"{"v":1,"step":3,"b_small":16,"b_big":128,"sq_small":-0,"sq_big":-0.0,"loss":-7,"lr":123456789012345678901234567890}"#,
            r#"{"v":1,"step":3,"b_small":16,"b_big":128,"sq_small":0.1,"sq_big":2.2250738585072011e-308,"tokens":9007199254740993,"dot_prev":-9223372036854775809}"#,
            r#"{"v":1,"step":3,"b_small":16,"b_big":128,"sq_small":0.5,"sq_big":0.25,"n_small":8,"config":{"mbs":4,"dp":2,"tp":1,"pp":1},"skipped":"loss-scale change ü","step_time_s":0.2}"#,
            r#"{"v":1,"step":3,"b_small":16,"b_big":128,"sq_small":0.5,"sq_big":0.25,"layers":{"a":{"sq_small":0.1,"sq_big":0.01},"b.c":{"sq_small":1,"sq_big":2}}}"#,
            r#"{"v":1,"step":3,"b_small":16,"b_big":128,"sq_small":0.5,"sq_big":0.25,"layers":{}}"#,
        ];
        for line in lines {
            let fast = scan(line).unwrap_or_else(|| panic!("scanned: {line}"));
            let serde = crate::ingest::typed::parse_serde(line).expect("serde path");
            assert_eq!(format!("{fast:?}"), format!("{serde:?}"), "{line}");
            assert_eq!(fast.sq_small.to_bits(), serde.sq_small.to_bits(), "{line}");
        }
    }

    /// Shapes it leaves to the serde paths.
    #[test]
    fn refuses_what_it_does_not_read() {
        let base = r#""v":1,"step":3,"b_small":16,"b_big":128,"sq_small":0.5,"sq_big":0.25"#;
        for tail in [
            r#","loss":null"#,
            r#","extra":1"#,
            r#","layers":{"a":{"sq_small":0.1,"sq_big":0.01},"a":{"sq_big":0.03,"sq_small":0.3}}"#,
            r#","layers":{"a":{"sq_small":0.1,"sq_big":0.01,"sq_small":0.3}}"#,
            r#","config":{"dp":2,"tp":1,"pp":1,"mbs":1,"dp":4}"#,
            r#","step":4"#,
            r#","loss":"NaN""#,
            r#","skipped":"a\"b""#,
            r#","n_small":8.0"#,
            r#","n_small":-1"#,
            r#","n_small":08"#,
            r#","n_small":8e0"#,
            r#","config":{"dp":2.0,"tp":1,"pp":1,"mbs":1}"#,
            r#","n_small":4294967296"#,
            r#","loss":01"#,
            r#","loss":1."#,
            r#","loss":.5"#,
            r#","loss":1e"#,
            r#","loss":+1"#,
            r#","loss":-.5"#,
            r#","loss":1.e5"#,
            r#","loss":-01.5"#,
            r#","loss":00"#,
            r#","loss":-inf"#,
            r#","loss":nan"#,
            r#","loss":Infinity"#,
            r#","loss":1.5e+"#,
            r#","config":{"dp":2,"tp":1,"pp":1}"#,
            r#","layers":{"a":{"sq_small":1}}"#,
            r#","layers":{"a":{"sq_small":1,"sq_big":2,"x":3}}"#,
            r#","layers":{"a":[1,2]}"#,
            r#","layers":{"a\n":{"sq_small":1,"sq_big":2}}"#,
            r#","v":2"#,
        ] {
            let line = format!("{{{base}{tail}}}");
            assert!(scan(&line).is_none(), "{line}");
        }
        for line in [
            format!("{{{base}}} x"),
            format!("{{{base},}}"),
            format!("[{base}]"),
            format!("{{{base}"),
            r#"{"v":1,"step":3,"b_small":16,"b_big":128,"sq_small":0.5}"#.to_string(),
            String::new(),
        ] {
            assert!(scan(&line).is_none(), "{line}");
        }
    }

    /// Random edits of real lines: whatever the scanner makes of them, `parse_line` (scanner,
    /// then serde, then the general path) gives what the general path alone gives.
    #[test]
    fn mutated_lines_parse_as_the_general_path_parses_them() {
        use crate::ingest::protocol::{parse_general, parse_line};
        let seeds = [
            r#"{"v":1,"step":3,"b_small":16.0,"b_big":128.0,"sq_small":0.096,"sq_big":0.0658,"n_small":8,"tokens":524288.0,"loss":3.3,"lr":0.0003,"step_time_s":0.27,"layers":{"layer0":{"sq_small":0.03,"sq_big":0.02},"layer1":{"sq_small":0.018,"sq_big":0.012}}}"#,
            r#"{"v": 1, "step": 7, "b_small": 1, "b_big": 64, "sq_small": 2e-3, "sq_big": 1.5E-4, "config": {"dp": 2, "tp": 1, "pp": 1, "mbs": 4}, "skipped": "loss-scale change"}"#,
        ];
        let alphabet = b"{}[]:,\" -.+eE0123456789nulabsq_ \t";
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = |n: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n as u64) as usize
        };
        let mut scanned = 0;
        for case in 0..20_000 {
            let mut b = seeds[case % seeds.len()].as_bytes().to_vec();
            for _ in 0..1 + next(3) {
                let at = next(b.len());
                match next(4) {
                    0 => {
                        b.remove(at);
                    }
                    1 => b.insert(at, alphabet[next(alphabet.len())]),
                    2 => b[at] = alphabet[next(alphabet.len())],
                    _ => {
                        let end = (at + next(12)).min(b.len());
                        let piece = b[at..end].to_vec();
                        b.splice(at..at, piece);
                    }
                }
            }
            let Ok(line) = String::from_utf8(b) else {
                continue;
            };
            scanned += usize::from(scan(&line).is_some());
            assert_eq!(parse_line(&line), parse_general(&line), "{line}");
        }
        // The edits leave many lines readable, so the scanner's answers were compared.
        assert!(scanned > 1_000, "only {scanned} lines scanned");
    }

    /// Numbers are read to the bit as `str::parse` reads them (correctly rounded): random
    /// doubles written shortest, with 17 significant digits and with few, and random digit
    /// strings with exponents near the edges of the range.
    #[test]
    fn numbers_are_read_as_str_parse_reads_them() {
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let read = |text: &str| {
            let mut s = super::Scan {
                b: text.as_bytes(),
                i: 0,
            };
            s.f64()
        };
        for _ in 0..100_000 {
            let x = f64::from_bits(next());
            if !x.is_finite() {
                continue;
            }
            let digits = (next() % 25) as usize;
            for text in [
                format!("{x:?}"),
                format!("{x:.16e}"),
                format!("{x:.digits$e}"),
            ] {
                let want = text.parse::<f64>().expect("a number");
                assert_eq!(
                    read(&text).map(f64::to_bits),
                    Some(want.to_bits()),
                    "{text}"
                );
            }
            let mantissa = next() % 10_000_000_000_000_000_000;
            let exp = (next() % 660) as i64 - 340;
            let text = format!("{mantissa}e{exp}");
            let want = text.parse::<f64>().expect("a number");
            assert_eq!(
                read(&text).map(f64::to_bits),
                Some(want.to_bits()),
                "{text}"
            );
        }
    }
}
