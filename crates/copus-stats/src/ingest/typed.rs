//! The fast path of [`crate::ingest::protocol::parse_line`]: a protocol v1 line deserialised straight
//! into its typed fields (no `serde_json::Value` tree; unknown fields skipped by serde's
//! `IgnoredAny` without being built).
//!
//! It accepts only lines the general path accepts with the same result: a JSON object whose
//! fields have their plain types and whose numbers are finite and below the ±Inf sentinel.
//! Anything else (NaN markers, `null` where a number is required, wrong types, duplicate
//! fields, bad JSON) returns `None`, and the general path then produces the exact error.

use crate::ingest::protocol::INF_SENTINEL;
use crate::record::layer_map::{LayerMap, intern};
use crate::record::step::{LayerSq, PROTOCOL_VERSION, StepConfig, StepStats};
use serde::Deserialize;
use serde::de::{MapAccess, Visitor};

/// One record's fields as written on the line.
#[derive(Deserialize)]
struct Line {
    v: u32,
    step: u64,
    b_small: f64,
    b_big: f64,
    sq_small: f64,
    sq_big: f64,
    #[serde(default)]
    n_small: Option<u32>,
    #[serde(default)]
    tokens: Option<f64>,
    #[serde(default)]
    loss: Option<f64>,
    #[serde(default)]
    lr: Option<f64>,
    #[serde(default)]
    step_time_s: Option<f64>,
    #[serde(default)]
    dot_prev: Option<f64>,
    #[serde(default)]
    config: Option<StepConfig>,
    #[serde(default)]
    layers: Option<Layers>,
    #[serde(default)]
    skipped: Option<String>,
}

/// The `layers` object, read entry by entry into the record's map (a repeated name is left
/// to the general path, which refuses the line).
struct Layers(LayerMap);

impl<'de> Deserialize<'de> for Layers {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Layers;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object of layers")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Layers, A::Error> {
                let mut m = LayerMap::new();
                while let Some((k, v)) = a.next_entry::<std::borrow::Cow<'de, str>, LayerSq>()? {
                    if m.insert(intern(&k), v).is_some() {
                        // A layer named twice: the general path names it as malformed.
                        return Err(serde::de::Error::custom("a layer named twice"));
                    }
                }
                Ok(Layers(m))
            }
        }
        d.deserialize_map(V)
    }
}

/// A number the general path would take as it is (finite, below the ±Inf sentinel).
fn plain(x: f64) -> bool {
    x.is_finite() && x.abs() < INF_SENTINEL
}

/// The record of a well-formed line (before the domain checks of `validate`), or `None` when
/// the general path must decide. The hand scanner ([`crate::ingest::scan`]) reads the usual
/// shapes; serde's typed deserialiser the rest of the well-formed ones.
pub(crate) fn parse(line: &str) -> Option<StepStats> {
    match crate::ingest::scan::scan(line) {
        Some(r) => accept(r),
        None => parse_serde(line),
    }
}

/// [`parse`] for a line's raw bytes (not yet checked to be UTF-8, not trimmed), when the hand
/// scanner reads it; `None` means the caller takes the usual path (UTF-8 check, trim,
/// [`crate::ingest::protocol::parse_line`]), which gives the same result for the lines read here.
pub(crate) fn parse_scanned_bytes(line: &[u8]) -> Option<StepStats> {
    crate::ingest::scan::scan_bytes(line).and_then(accept)
}

/// The record when every number is one the general path takes as it is.
fn accept(r: StepStats) -> Option<StepStats> {
    let numbers = [r.b_small, r.b_big, r.sq_small, r.sq_big];
    let optional = [r.tokens, r.loss, r.lr, r.step_time_s, r.dot_prev];
    let ok = r.v == PROTOCOL_VERSION
        && numbers.into_iter().all(plain)
        && optional.into_iter().flatten().all(plain)
        && r.layers
            .values()
            .all(|x| plain(x.sq_small) && plain(x.sq_big));
    ok.then_some(r)
}

/// [`parse`] through serde's typed deserialiser only.
pub(crate) fn parse_serde(line: &str) -> Option<StepStats> {
    // A top-level array would deserialise positionally into the struct: not a record.
    if !line.trim_start().starts_with('{') {
        return None;
    }
    let l: Line = serde_json::from_str(line).ok()?;
    accept(StepStats {
        v: l.v,
        step: l.step,
        b_small: l.b_small,
        b_big: l.b_big,
        sq_small: l.sq_small,
        sq_big: l.sq_big,
        n_small: l.n_small,
        tokens: l.tokens,
        loss: l.loss,
        lr: l.lr,
        step_time_s: l.step_time_s,
        config: l.config,
        layers: l.layers.map(|x| x.0).unwrap_or_default(),
        skipped: l.skipped,
        dot_prev: l.dot_prev,
    })
}

#[cfg(test)]
mod tests {
    use crate::ingest::protocol::{parse_general, parse_line};

    /// The fast path never changes a result: every line, good or bad, parses (or fails) as the
    /// general path alone parses it.
    #[test]
    fn agrees_with_the_general_path() {
        let base = r#""v":1,"step":3,"b_small":16,"b_big":128.0,"sq_small":0.5,"sq_big":0.25"#;
        let tails = [
            "",
            r#","n_small":8,"tokens":1e6,"loss":2.5,"lr":3e-4,"step_time_s":0.2,"dot_prev":0.1"#,
            r#","loss":null,"n_small":null,"config":null,"layers":null,"skipped":null"#,
            r#","loss":"NaN""#,
            r#","loss":"abc""#,
            r#","loss":1e39"#,
            r#","loss":1e400"#,
            r#","loss":-3.4028235e38"#,
            r#","extra":{"deep":[1,2,{"x":null}]},"other":"s\"q""#,
            r#","config":{"dp":2,"tp":1,"pp":1,"mbs":4}"#,
            r#","config":[2,1,1,4]"#,
            r#","config":{"dp":2}"#,
            r#","layers":{"a":{"sq_small":0.1,"sq_big":0.01},"b":{"sq_small":0.2,"sq_big":0.02}}"#,
            r#","layers":{"a":{"sq_small":0.1,"sq_big":0.01},"a":{"sq_small":0.3,"sq_big":0.03}}"#,
            r#","layers":{"a":{"sq_small":null,"sq_big":0.01}}"#,
            r#","layers":{"a":{"sq_small":"inf","sq_big":0.01}}"#,
            r#","layers":{"a":[0.1,0.01]}"#,
            r#","layers":{"a":[0.1,1e39]}"#,
            r#","layers":{"a":{"sq_small":-0.1,"sq_big":0.01}}"#,
            r#","layers":{"a":5}"#,
            r#","layers":[]"#,
            r#","skipped":"loss-scale change""#,
            r#","skipped":"non-finite: loss""#,
            r#","skipped":5"#,
            r#","step":4"#,
            r#","sq_big":null"#,
            r#","sq_big":"-Infinity""#,
            r#","b_big":8"#,
            r#","b_small":0"#,
            r#","n_small":0"#,
            r#","n_small":-1"#,
            r#","v":2"#,
            r#","v":1.0"#,
            r#","st\u0065p":9"#,
        ];
        let mut lines: Vec<String> = tails.iter().map(|t| format!("{{{base}{t}}}")).collect();
        lines.extend(
            [
                "[1,3,16,128,0.5,0.25]",
                "{}",
                r#"{"step":1}"#,
                "null",
                "not json",
                r#"{"v":1,"step":3,"b_small":16,"b_big":128,"sq_small":0.5}"#,
                r#"{"v":1,"step":3,"b_small":16,"b_big":128,"sq_small":0.5,"sq_big":0.25} x"#,
                r#"  {"v":1,"step":-3,"b_small":16,"b_big":128,"sq_small":0.5,"sq_big":0.25}  "#,
                r#"{"v":"1","step":3,"b_small":16,"b_big":128,"sq_small":0.5,"sq_big":0.25}"#,
            ]
            .map(String::from),
        );
        for line in &lines {
            assert_eq!(parse_line(line), parse_general(line), "line {line}");
        }
        // The fast path does take the plain lines (or the test above proves nothing).
        assert!(
            [1, 2, 12]
                .iter()
                .all(|&i| super::parse(&lines[i]).is_some())
        );
        // ... and the serde path alone agrees with the scanner wherever the scanner reads.
        for line in &lines {
            if crate::ingest::scan::scan(line).is_some() {
                assert_eq!(
                    format!("{:?}", super::parse(line)),
                    format!("{:?}", super::parse_serde(line)),
                    "line {line}"
                );
            }
        }
        assert!(
            [3, 5, 14]
                .iter()
                .all(|&i| super::parse(&lines[i]).is_none())
        );
    }
}
