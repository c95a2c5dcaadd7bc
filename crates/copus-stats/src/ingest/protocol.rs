//! Stats protocol v1: one JSON object per line, parsed into a validated [`StepStats`].
//!
//! JSON cannot hold NaN or ±Inf, so producers write `null`, strings such as `"NaN"` or
//! `"-Infinity"`, or overflowing numbers instead. Those come back as
//! [`ProtocolError::NonFinite`], distinct from malformed lines, so the analysis can skip the
//! step and say so. The format is documented in `docs/PROTOCOL.md`.

use crate::record::step::{PROTOCOL_VERSION, StepStats};
use serde_json::{Map, Value};

/// Magnitudes at or beyond this (f32::MAX) are read as the ±Inf sentinel of f32 producers.
pub const INF_SENTINEL: f64 = f32::MAX as f64;

/// Why a finite value at or beyond [`INF_SENTINEL`] counts as non-finite.
const F32_SENTINEL_WHY: &str = "at or beyond f32's largest value, the ±Inf of an f32 producer";

/// Numeric fields a record must carry; `null` in any of them means "non-finite".
const REQUIRED: [&str; 4] = ["b_small", "b_big", "sq_small", "sq_big"];
/// Optional numeric fields; `null` there means "absent".
const OPTIONAL: [&str; 5] = ["tokens", "loss", "lr", "step_time_s", "dot_prev"];

/// Why one protocol line could not become a usable [`StepStats`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProtocolError {
    /// The line is not valid JSON.
    #[error("not valid JSON: {0}")]
    Json(String),
    /// The line is JSON but not an object.
    #[error("expected a JSON object, found {0}")]
    NotObject(&'static str),
    /// The `v` field is missing.
    #[error("missing protocol version field \"v\"")]
    MissingVersion,
    /// The `v` field names a version this build does not read.
    #[error("unsupported protocol version {0} (this build reads v1, written \"v\":1)")]
    Version(String),
    /// A numeric field holds NaN, ±Inf, `null` (required fields) or an overflowing number.
    #[error("non-finite value in \"{field}\"{}{}", why.map(|w| format!(" ({w})")).unwrap_or_default(), step.map(|s| format!(" at step {s}")).unwrap_or_default())]
    NonFinite {
        /// The offending field (`layers.NAME.sq_big` for a layer).
        field: String,
        /// The record's step, when it could be read.
        step: Option<u64>,
        /// Why a finite-looking value counts as non-finite (a number beyond f64's range, one
        /// at f32's ±Inf sentinel); `None` for NaN, ±Inf or `null`.
        why: Option<&'static str>,
    },
    /// The line is an event of the advice loop (`{"v":1,"advice":{...}}` written by
    /// `copus watch --advise`, `{"v":1,"applied":{...}}` written by the hook's Advisor), not a
    /// step record: counted apart, neither a record nor malformed.
    #[error("{kind} event{}", at_step.map(|s| format!(" at step {s}")).unwrap_or_default())]
    Event {
        /// "advice" or "applied".
        kind: &'static str,
        /// Its `at_step`, when it has one.
        at_step: Option<u64>,
    },
    /// A field is missing or has the wrong type.
    #[error("bad field: {0}")]
    Field(String),
    /// A field has a value outside its domain (e.g. `b_small <= 0`, `b_big < b_small`).
    #[error("invalid \"{field}\": {reason}")]
    Invalid {
        /// The offending field.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
}

impl ProtocolError {
    /// True for the non-finite class (skipped with a diagnostic rather than counted malformed).
    pub fn is_non_finite(&self) -> bool {
        matches!(self, ProtocolError::NonFinite { .. })
    }

    /// True for an advice-loop event line ([`ProtocolError::Event`]).
    pub fn is_event(&self) -> bool {
        matches!(self, ProtocolError::Event { .. })
    }
}

/// Parse and validate one protocol v1 line.
///
/// Well-formed lines take a typed fast path (no JSON tree); any other line goes through the
/// general path below, which names what is wrong.
pub fn parse_line(line: &str) -> Result<StepStats, ProtocolError> {
    // A UTF-8 byte-order mark (written by some editors and PowerShell) is not part of a record.
    let line = line.strip_prefix('\u{feff}').unwrap_or(line);
    if let Some(record) = crate::ingest::typed::parse(line) {
        validate(&record)?;
        return Ok(record);
    }
    parse_general(line)
}

/// `line` with every bare `NaN`, `Infinity` and `-Infinity` outside strings written as a
/// string (`"NaN"`, …), or `None` when it has none.
fn quote_bare_non_finite(line: &str) -> Option<String> {
    const TOKENS: [&str; 3] = ["-Infinity", "Infinity", "NaN"];
    let mut out = String::with_capacity(line.len() + 8);
    let (mut in_string, mut escaped, mut changed) = (false, false, false);
    let mut rest = line;
    while let Some(c) = rest.chars().next() {
        if in_string {
            in_string = escaped || c != '"';
            escaped = !escaped && c == '\\';
        } else if c == '"' {
            in_string = true;
        } else if let Some(t) = TOKENS.iter().find(|t| rest.starts_with(**t)) {
            out.push('"');
            out.push_str(t);
            out.push('"');
            rest = &rest[t.len()..];
            changed = true;
            continue;
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    changed.then_some(out)
}

/// The field of `line` whose number does not fit an f64 (`"sq_small":1e400`), if one can be
/// told: the key before the first numeric literal that parses as infinite.
fn out_of_range_field(line: &str) -> Option<&str> {
    let mut rest = line;
    while let Some(colon) = rest.find(':') {
        let key = rest[..colon].trim_end().strip_suffix('"').and_then(|k| {
            let start = k.rfind('"')?;
            Some(&k[start + 1..])
        });
        let after = rest[colon + 1..].trim_start();
        let literal: String = after
            .chars()
            .take_while(|c| c.is_ascii_digit() || matches!(c, '-' | '+' | '.' | 'e' | 'E'))
            .collect();
        if let (Some(key), Ok(x)) = (key, literal.parse::<f64>())
            && x.is_infinite()
        {
            return Some(key);
        }
        rest = &rest[colon + 1..];
    }
    None
}

/// `message`, and where a second record starts inside the line (`{"v":1,"step":12{"v":1,…`),
/// why: a writer stopped mid-line (killed) and the next run appended its first record to the
/// torn one, so both are lost (the restart then seemed to begin a step late).
fn torn_line_hint(line: &str, message: String) -> String {
    let inner = line
        .char_indices()
        .skip(1)
        .any(|(i, _)| line[i..].starts_with("{\"v\"") || line[i..].starts_with("{ \"v\""));
    if inner {
        format!(
            "{message} (a second record starts inside this line: a writer stopped mid-line and \
             the next one's first record was appended to it; both are lost)"
        )
    } else {
        message
    }
}

/// The value of a top-level `"step":` written as digits, if the line has one.
fn step_digits(line: &str) -> Option<u64> {
    let at = line.find("\"step\"")?;
    let rest = line[at + 6..].trim_start().strip_prefix(':')?.trim_start();
    let digits: &str = &rest[..rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len())];
    digits.parse().ok()
}

/// The general path of [`parse_line`] (through a JSON tree), for any line: the exact error of
/// a bad one. `line` has no byte-order mark.
pub(crate) fn parse_general(line: &str) -> Result<StepStats, ProtocolError> {
    let parsed = serde_json::from_str::<Value>(line);
    // Python's `json.dumps` writes NaN and ±inf as bare `NaN`, `Infinity`, `-Infinity`: not
    // JSON, but a non-finite value all the same (as the strings "NaN" and "Infinity" are).
    let parsed = match (parsed, quote_bare_non_finite(line)) {
        (Err(_), Some(quoted)) => serde_json::from_str::<Value>(&quoted),
        (p, _) => p,
    };
    let value: Value = parsed.map_err(|e| {
        if e.to_string().contains("number out of range") {
            match out_of_range_field(line) {
                // A step is a count, not a measurement: out of range, it is malformed.
                Some("step") => ProtocolError::Field(format!(
                    "step: must be a whole number from 0 to {}, written as digits only (a \
                     number out of f64 range)",
                    u64::MAX
                )),
                field => ProtocolError::NonFinite {
                    field: field.unwrap_or("a number").to_string(),
                    // The step of the record, where it reads (the skipped step is then named).
                    step: step_digits(line),
                    why: Some("a number out of f64 range"),
                },
            }
        } else {
            ProtocolError::Json(torn_line_hint(line, e.to_string()))
        }
    })?;
    let Value::Object(mut obj) = value else {
        return Err(ProtocolError::NotObject(kind_name(&value)));
    };
    if let Some(found) = repeated_key(line, &["layers", "config"]) {
        return Err(repeated_key_error(found));
    }
    check_version(&obj)?;
    if !obj.contains_key("step") {
        for kind in ["advice", "applied"] {
            if let Some(Value::Object(e)) = obj.get(kind) {
                return Err(ProtocolError::Event {
                    kind,
                    at_step: e.get("at_step").and_then(Value::as_u64),
                });
            }
        }
    }
    let step = obj.get("step").and_then(Value::as_u64);
    for field in REQUIRED {
        if let Some(v) = obj.get(field) {
            check_number(v, field, true, step)?;
        }
    }
    for field in OPTIONAL {
        match obj.get(field) {
            Some(Value::Null) => {
                obj.remove(field);
            }
            Some(v) => check_number(v, field, false, step)?,
            None => {}
        }
    }
    check_layers(&obj, step)?;
    check_skipped_and_config(&obj)?;
    for field in ["n_small", "config", "skipped", "layers"] {
        if obj.get(field) == Some(&Value::Null) {
            obj.remove(field);
        }
    }
    // The whole-number fields, named (serde's message names only the type it expected).
    for (field, max) in [("step", u64::MAX), ("n_small", u64::from(u32::MAX))] {
        if let Some(v) = obj.get(field)
            && v.as_u64().is_none_or(|n| n > max)
        {
            return Err(ProtocolError::Field(format!(
                "{field}: must be a whole number from 0 to {max}, written as digits only (no \
                 fraction or exponent), got {v}"
            )));
        }
    }
    let record: StepStats = serde_json::from_value(Value::Object(obj))
        .map_err(|e| ProtocolError::Field(e.to_string()))?;
    validate(&record)?;
    Ok(record)
}

/// Smallest relative gap between `b_big` and `b_small` of a two-batch record: the estimate
/// divides by `1/b_small − 1/b_big`, so a gap of rounding size (a producer that meant equal
/// sizes) turns noise into a huge, often negative, |G|² that sinks the whole run.
pub const MIN_BATCH_GAP: f64 = 1e-6;

/// Domain checks of a parsed record: positive batch sizes, `b_big >= b_small`, finite
/// non-negative squared norms. Also used on records that did not come through the parser.
pub fn validate(r: &StepStats) -> Result<(), ProtocolError> {
    let non_finite = |field: &str| ProtocolError::NonFinite {
        field: field.to_string(),
        step: Some(r.step),
        why: None,
    };
    for (field, x) in [
        ("b_small", r.b_small),
        ("b_big", r.b_big),
        ("sq_small", r.sq_small),
        ("sq_big", r.sq_big),
    ] {
        if !x.is_finite() {
            return Err(non_finite(field));
        }
        if x.abs() >= INF_SENTINEL {
            return Err(ProtocolError::NonFinite {
                field: field.to_string(),
                step: Some(r.step),
                why: Some(F32_SENTINEL_WHY),
            });
        }
    }
    for (name, l) in &r.layers {
        if !(l.sq_small.is_finite() && l.sq_big.is_finite()) {
            return Err(non_finite(&format!("layers.{name}")));
        }
        if l.sq_small < 0.0 || l.sq_big < 0.0 {
            let reason = format!(
                "squared norms of layer {:?} cannot be negative, got {} and {}",
                name, l.sq_small, l.sq_big
            );
            return Err(invalid("layers", reason));
        }
    }
    // Below f64's smallest normal number a batch size is a corrupt value, not a count.
    if r.b_small < f64::MIN_POSITIVE {
        return Err(invalid(
            "b_small",
            format!("must be > 0 samples, got {:e}", r.b_small),
        ));
    }
    if r.b_big < r.b_small {
        let reason = format!("must be >= b_small ({}), got {}", r.b_small, r.b_big);
        return Err(invalid("b_big", reason));
    }
    if r.b_big > r.b_small && r.b_big - r.b_small < MIN_BATCH_GAP * r.b_small {
        let reason = format!(
            "differs from b_small ({}) by less than one part in a million ({}): the two-batch \
             estimate divides by the difference; write equal sizes for a single-gradient record",
            r.b_small, r.b_big
        );
        return Err(invalid("b_big", reason));
    }
    if r.sq_small < 0.0 || r.sq_big < 0.0 {
        let reason = "squared norms cannot be negative".to_string();
        return Err(invalid("sq_small/sq_big", reason));
    }
    if let Some(n) = r.n_small
        && n == 0
    {
        return Err(invalid("n_small", "must be >= 1".into()));
    }
    Ok(())
}

fn invalid(field: &'static str, reason: String) -> ProtocolError {
    ProtocolError::Invalid { field, reason }
}

fn check_version(obj: &Map<String, Value>) -> Result<(), ProtocolError> {
    match obj.get("v") {
        None => Err(ProtocolError::MissingVersion),
        Some(v) if v.as_u64() == Some(u64::from(PROTOCOL_VERSION)) => Ok(()),
        Some(v) => Err(ProtocolError::Version(v.to_string())),
    }
}

/// Classify one numeric JSON value: finite numbers pass, NaN/Inf markers are non-finite,
/// anything else is left for serde to reject with a type error.
fn check_number(
    v: &Value,
    field: &str,
    required: bool,
    step: Option<u64>,
) -> Result<(), ProtocolError> {
    let non_finite = || ProtocolError::NonFinite {
        field: field.to_string(),
        step,
        why: None,
    };
    match v {
        Value::Null if required => Err(non_finite()),
        Value::Number(n) => match n.as_f64() {
            Some(x) if x.is_finite() && x.abs() < INF_SENTINEL => Ok(()),
            Some(x) if x.is_finite() => Err(ProtocolError::NonFinite {
                field: field.to_string(),
                step,
                why: Some(F32_SENTINEL_WHY),
            }),
            _ => Err(non_finite()),
        },
        Value::String(s) if is_non_finite_word(s) => Err(non_finite()),
        Value::String(s) => Err(ProtocolError::Field(format!(
            "\"{field}\" must be a number, found string {s:?}"
        ))),
        other => Err(ProtocolError::Field(format!(
            "\"{field}\" must be a number, found {}",
            kind_name(other)
        ))),
    }
}

/// The first key named twice in one object of `line`: in the record itself, or at any depth
/// inside the top-level fields named in `within` (the objects the reader uses: `layers` and
/// `config` for a record, `precond` for a preconditioned read; an unknown field is skipped
/// whole, as every parsing path skips it). Returns the object's path (`None` for the record,
/// `Some("layers.embedding")` for a layer) and the key. A `serde_json::Value` keeps the last of
/// two; the protocol calls such a line malformed (a layer's `sq_small` given twice was read
/// with its last value, without a word).
pub(crate) fn repeated_key(line: &str, within: &[&str]) -> Option<(Option<String>, String)> {
    use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
    /// Finds the first repeated key of a value (its object's path, the key); `top` holds the
    /// fields to descend into at the top level (`None`: every field, below it).
    #[derive(Clone, Copy)]
    struct Repeated<'w> {
        top: Option<&'w [&'w str]>,
    }
    type Found = Option<(Option<String>, String)>;
    impl<'de> DeserializeSeed<'de> for Repeated<'_> {
        type Value = Found;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Found, D::Error> {
            d.deserialize_any(self)
        }
    }
    impl<'de> Visitor<'de> for Repeated<'_> {
        type Value = Found;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON value")
        }
        fn visit_bool<E>(self, _: bool) -> Result<Found, E> {
            Ok(None)
        }
        fn visit_i64<E>(self, _: i64) -> Result<Found, E> {
            Ok(None)
        }
        fn visit_u64<E>(self, _: u64) -> Result<Found, E> {
            Ok(None)
        }
        fn visit_f64<E>(self, _: f64) -> Result<Found, E> {
            Ok(None)
        }
        fn visit_str<E>(self, _: &str) -> Result<Found, E> {
            Ok(None)
        }
        fn visit_unit<E>(self) -> Result<Found, E> {
            Ok(None)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Found, A::Error> {
            let mut found = None;
            while let Some(inner) = a.next_element_seed(Repeated { top: None })? {
                if found.is_none() {
                    found = inner;
                }
            }
            Ok(found)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Found, A::Error> {
            let mut seen: Vec<String> = Vec::new();
            let mut found: Found = None;
            while let Some(k) = a.next_key::<std::borrow::Cow<'de, str>>()? {
                let inner = if self.top.is_none_or(|top| top.contains(&k.as_ref())) {
                    a.next_value_seed(Repeated { top: None })?
                } else {
                    a.next_value::<IgnoredAny>()?;
                    None
                };
                if found.is_none() {
                    if seen.iter().any(|s| s == &k) {
                        found = Some((None, k.to_string()));
                    } else if let Some((path, key)) = inner {
                        let path = match path {
                            Some(p) => format!("{k}.{p}"),
                            None => k.to_string(),
                        };
                        found = Some((Some(path), key));
                    }
                }
                seen.push(k.into_owned());
            }
            Ok(found)
        }
    }
    let mut d = serde_json::Deserializer::from_str(line);
    Repeated { top: Some(within) }
        .deserialize(&mut d)
        .ok()
        .flatten()
}

/// [`repeated_key`] as the sentence a malformed line gets.
pub(crate) fn repeated_key_error((path, key): (Option<String>, String)) -> ProtocolError {
    let within = path.map_or_else(|| "the record".to_string(), |p| format!("\"{p}\""));
    ProtocolError::Field(format!(
        "\"{key}\" appears twice in {within}: which value is meant cannot be known"
    ))
}

/// `skipped` and `config` checked by name (serde's message names only the type it expected:
/// "invalid type: boolean `true`, expected a string").
fn check_skipped_and_config(obj: &Map<String, Value>) -> Result<(), ProtocolError> {
    match obj.get("skipped") {
        None | Some(Value::Null) | Some(Value::String(_)) => {}
        Some(other) => {
            return Err(ProtocolError::Field(format!(
                "\"skipped\" must be a string (why the step is unusable), found {}",
                kind_name(other)
            )));
        }
    }
    const KEYS: [&str; 4] = ["dp", "tp", "pp", "mbs"];
    let values: Vec<(&str, Option<&Value>)> = match obj.get("config") {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::Object(c)) => KEYS.iter().map(|k| (*k, c.get(*k))).collect(),
        // [dp, tp, pp, mbs] in order, as serde reads a struct from an array.
        Some(Value::Array(a)) if a.len() == KEYS.len() => {
            KEYS.iter().zip(a).map(|(k, v)| (*k, Some(v))).collect()
        }
        Some(other) => {
            return Err(ProtocolError::Field(format!(
                "\"config\" must be an object {{dp, tp, pp, mbs}}, found {}",
                kind_name(other)
            )));
        }
    };
    for (key, value) in values {
        match value {
            None => {
                return Err(ProtocolError::Field(format!(
                    "config: missing {key} (config holds dp, tp, pp and mbs)"
                )));
            }
            Some(v) if v.as_u64().is_none_or(|n| n > u64::from(u32::MAX)) => {
                return Err(ProtocolError::Field(format!(
                    "config.{key}: must be a whole number from 0 to {}, written as digits only \
                     (no fraction or exponent), got {v}",
                    u32::MAX
                )));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

fn check_layers(obj: &Map<String, Value>, step: Option<u64>) -> Result<(), ProtocolError> {
    let layers = match obj.get("layers") {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::Object(layers)) => layers,
        Some(other) => {
            return Err(ProtocolError::Field(format!(
                "\"layers\" must be an object of layers {{name: {{sq_small, sq_big}}}}, found {}",
                kind_name(other)
            )));
        }
    };
    const KEYS: [&str; 2] = ["sq_small", "sq_big"];
    for (name, layer) in layers {
        let values: Vec<(&str, Option<&Value>)> = match layer {
            Value::Object(l) => KEYS.iter().map(|k| (*k, l.get(*k))).collect(),
            // [sq_small, sq_big] in order, as serde reads a struct from an array.
            Value::Array(a) if a.len() == KEYS.len() => {
                KEYS.iter().zip(a).map(|(k, v)| (*k, Some(v))).collect()
            }
            other => {
                return Err(ProtocolError::Field(format!(
                    "layers.{name}: must be an object {{sq_small, sq_big}}, found {}",
                    kind_name(other)
                )));
            }
        };
        for (key, value) in values {
            match value {
                Some(v) => check_number(v, &format!("layers.{name}.{key}"), true, step)?,
                None => {
                    return Err(ProtocolError::Field(format!(
                        "layers.{name}: missing {key} (each layer holds sq_small and sq_big)"
                    )));
                }
            }
        }
    }
    Ok(())
}

fn is_non_finite_word(s: &str) -> bool {
    let t = s.trim().trim_start_matches(['+', '-']).to_ascii_lowercase();
    matches!(t.as_str(), "nan" | "inf" | "infinity")
}

fn kind_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(b_small: f64, b_big: f64) -> StepStats {
        StepStats::new(50, b_small, b_big, 2.0, 1.0)
    }

    #[test]
    fn a_wrongly_typed_step_and_an_out_of_range_number_name_their_field() {
        let step =
            parse_line(r#"{"v":1,"step":"50","b_small":8,"b_big":64,"sq_small":2,"sq_big":1}"#)
                .expect_err("a string step");
        assert!(
            step.to_string().contains("step: must be a whole number"),
            "{step}"
        );
        let huge =
            parse_line(r#"{"v":1,"step":5,"b_small":8,"b_big":64,"sq_small":1e400,"sq_big":1}"#)
                .expect_err("out of range");
        assert_eq!(
            huge.to_string(),
            "non-finite value in \"sq_small\" (a number out of f64 range) at step 5"
        );
        let step =
            parse_line(r#"{"v":1,"step":1e400,"b_small":8,"b_big":64,"sq_small":1,"sq_big":1}"#)
                .expect_err("a step out of range");
        assert!(!step.is_non_finite(), "{step}");
        assert!(
            step.to_string().contains("step: must be a whole number"),
            "{step}"
        );
    }

    /// A record appended to a torn line (a writer killed mid-line, then restarted): said.
    #[test]
    fn a_record_glued_to_a_torn_line_is_named_so() {
        let torn =
            r#"{"v":1,"step":12{"v":1,"step":0,"b_small":8,"b_big":64,"sq_small":2,"sq_big":1}"#;
        let e = parse_line(torn).expect_err("torn");
        assert!(
            e.to_string()
                .contains("a second record starts inside this line"),
            "{e}"
        );
        let plain = parse_line(r#"{"v":1,"step":12"#).expect_err("cut");
        assert!(!plain.to_string().contains("second record"), "{plain}");
    }

    /// A field of the wrong type or shape is named, with what it must be (serde's own
    /// message named only the type it expected: "expected u32", "missing field `sq_big`").
    #[test]
    fn wrongly_typed_fields_are_named() {
        let base = r#""v":1,"step":3,"b_small":16,"b_big":128,"sq_small":0.5,"sq_big":0.25"#;
        for (tail, says) in [
            (r#","skipped":true"#, "\"skipped\" must be a string"),
            (
                r#","loss":true"#,
                "\"loss\" must be a number, found a boolean",
            ),
            (r#","lr":[1]"#, "\"lr\" must be a number, found an array"),
            (r#","step":0"#, "\"step\" appears twice in the record"),
            // Inside nested objects too: a JSON map kept the last of the two without a word.
            (
                r#","layers":{"embed":{"sq_small":0.1,"sq_big":0.01,"sq_small":50}}"#,
                "\"sq_small\" appears twice in \"layers.embed\"",
            ),
            (
                r#","layers":{"embed":{"sq_small":0.1,"sq_big":0.01},"embed":{"sq_small":1,"sq_big":2}}"#,
                "\"embed\" appears twice in \"layers\"",
            ),
            (
                r#","config":{"dp":8,"tp":1,"pp":1,"mbs":1,"dp":4}"#,
                "\"dp\" appears twice in \"config\"",
            ),
            (
                r#","config":{"dp":4294967296,"tp":1,"pp":1,"mbs":1}"#,
                "config.dp: must be a whole number from 0 to 4294967295",
            ),
            (
                r#","config":{"dp":2,"tp":1,"pp":1,"mbs":"four"}"#,
                "config.mbs:",
            ),
            (r#","config":{"dp":2}"#, "config: missing tp"),
            (r#","config":5"#, "\"config\" must be an object"),
            (
                r#","layers":{"embed":{"sq_small":0.1}}"#,
                "layers.embed: missing sq_big",
            ),
            (
                r#","layers":{"embed":5}"#,
                "layers.embed: must be an object",
            ),
            (r#","layers":[]"#, "\"layers\" must be an object of layers"),
        ] {
            let e = parse_line(&format!("{{{base}{tail}}}")).expect_err(tail);
            assert!(e.to_string().contains(says), "{tail}: {e}");
        }
        // The array forms serde reads positionally stay accepted.
        for tail in [r#","config":[2,1,1,4]"#, r#","layers":{"a":[0.1,0.01]}"#] {
            assert!(parse_line(&format!("{{{base}{tail}}}")).is_ok(), "{tail}");
        }
    }

    #[test]
    fn batch_sizes_of_rounding_size_apart_or_subnormal_are_invalid() {
        assert!(validate(&record(16.0, 64.0)).is_ok());
        assert!(
            validate(&record(16.0, 16.0)).is_ok(),
            "a single-gradient record"
        );
        let near = validate(&record(16.0, 16.000_000_1)).expect_err("rounding-size gap");
        assert!(near.to_string().contains("one part in a million"), "{near}");
        assert!(validate(&record(16.0, 16.0 * (1.0 + 2.0 * MIN_BATCH_GAP))).is_ok());
        let tiny = validate(&record(1e-320, 64.0)).expect_err("subnormal");
        assert!(tiny.to_string().contains("1e-320"), "{tiny}");
    }
}
