//! The default protocol-v1 line parser of the live follower: `serde_json` into [`StepStats`]
//! plus the checks a record must pass before it may reach the estimators.
//!
//! The stats engine has a stricter parser of its own; the follower is generic over the parser
//! (see [`super::LineIngest`]) so either can be plugged in.

use super::LiveError;
use crate::stats::step::{PROTOCOL_VERSION, StepStats};
use serde::Deserialize;

/// Parse and check one protocol line (without its newline).
///
/// Accepts unknown fields (forward compatibility) but rejects: another protocol version,
/// non-positive or non-finite batch sizes (samples), `b_big <= b_small`, and negative or
/// non-finite squared norms. A record with `skipped` set (the producer flagged it, e.g. a
/// non-finite step) is returned with its squared norms unchecked: consumers must not feed it
/// to the estimators.
pub fn parse_record(line: &str) -> Result<StepStats, LiveError> {
    let record: StepStats = serde_json::from_str(line).map_err(|e| version_or_json(line, e))?;
    check_record(&record)?;
    Ok(record)
}

/// On a decoding error, say "wrong version" when the line carries another `v`, else the JSON
/// error (which names the column).
fn version_or_json(line: &str, e: serde_json::Error) -> LiveError {
    #[derive(Deserialize)]
    struct VersionOnly {
        v: u32,
    }
    match serde_json::from_str::<VersionOnly>(line) {
        Ok(VersionOnly { v }) if v != PROTOCOL_VERSION => LiveError::Version(v),
        _ => LiveError::Json(e.to_string()),
    }
}

/// The semantic checks of [`parse_record`], on an already decoded record.
pub fn check_record(r: &StepStats) -> Result<(), LiveError> {
    if r.v != PROTOCOL_VERSION {
        return Err(LiveError::Version(r.v));
    }
    positive("b_small", r.b_small)?;
    positive("b_big", r.b_big)?;
    if r.b_big <= r.b_small {
        return Err(field(
            "b_big",
            format!("must exceed b_small ({} <= {} samples)", r.b_big, r.b_small),
        ));
    }
    if let Some(n) = r.n_small
        && n == 0
    {
        return Err(field("n_small", "must be at least 1".into()));
    }
    optional_non_negative("tokens", r.tokens)?;
    optional_non_negative("lr", r.lr)?;
    optional_non_negative("step_time_s", r.step_time_s)?;
    if let Some(loss) = r.loss
        && !loss.is_finite()
        && r.skipped.is_none()
    {
        return Err(field("loss", format!("{loss} is not finite")));
    }
    if let Some(c) = r.config
        && [c.dp, c.tp, c.pp, c.mbs].contains(&0)
    {
        return Err(field(
            "config",
            "dp, tp, pp and mbs must be at least 1".into(),
        ));
    }
    if r.skipped.is_some() {
        return Ok(());
    }
    non_negative("sq_small", r.sq_small)?;
    non_negative("sq_big", r.sq_big)?;
    for (name, l) in &r.layers {
        if !(l.sq_small.is_finite() && l.sq_small >= 0.0 && l.sq_big.is_finite() && l.sq_big >= 0.0)
        {
            return Err(LiveError::Layer {
                layer: name.clone(),
                reason: format!(
                    "squared norms must be finite and >= 0 (sq_small {}, sq_big {})",
                    l.sq_small, l.sq_big
                ),
            });
        }
    }
    Ok(())
}

fn field(field: &'static str, reason: String) -> LiveError {
    LiveError::Field { field, reason }
}

fn positive(name: &'static str, x: f64) -> Result<(), LiveError> {
    if x.is_finite() && x > 0.0 {
        Ok(())
    } else {
        Err(field(name, format!("{x} must be finite and > 0")))
    }
}

fn non_negative(name: &'static str, x: f64) -> Result<(), LiveError> {
    if x.is_finite() && x >= 0.0 {
        Ok(())
    } else {
        Err(field(name, format!("{x} must be finite and >= 0")))
    }
}

fn optional_non_negative(name: &'static str, x: Option<f64>) -> Result<(), LiveError> {
    x.map_or(Ok(()), |x| non_negative(name, x))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_a_minimal_record_and_ignores_unknown_fields() {
        let r = parse_record(
            r#"{"v":1,"step":3,"b_small":4,"b_big":32,"sq_small":2.5,"sq_big":0.5,"extra":1}"#,
        )
        .expect("valid record");
        assert_eq!(r.step, 3);
        assert_eq!(r.b_big, 32.0);
    }

    #[test]
    fn rejects_bad_records_with_a_reason() {
        let cases = [
            (r#"{"v":2,"step":1}"#, "version 2"),
            (
                r#"{"v":1,"step":1,"b_small":8,"b_big":8,"sq_small":1,"sq_big":1}"#,
                "b_big",
            ),
            (
                r#"{"v":1,"step":1,"b_small":0,"b_big":8,"sq_small":1,"sq_big":1}"#,
                "b_small",
            ),
            (
                r#"{"v":1,"step":1,"b_small":1,"b_big":8,"sq_small":-1,"sq_big":1}"#,
                "sq_small",
            ),
            (
                r#"{"v":1,"step":1,"b_small":1,"b_big":8,"sq_small":1}"#,
                "sq_big",
            ),
            ("not json", "JSON"),
        ];
        for (line, needle) in cases {
            let err = parse_record(line).expect_err(line).to_string();
            assert!(err.contains(needle), "{line}: {err}");
        }
    }

    #[test]
    fn skipped_records_pass_without_norm_checks() {
        let r = parse_record(r#"{"v":1,"step":1,"b_small":1,"b_big":8,"sq_small":-1,"sq_big":0,"skipped":"non-finite"}"#)
            .expect("flagged record");
        assert_eq!(r.skipped.as_deref(), Some("non-finite"));
    }
}
