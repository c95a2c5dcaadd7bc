//! The default protocol-v1 line parser of the live follower: the stats engine's strict parser
//! ([`crate::stats::parse_line`]), so a live run and a recorded file are read by one set of
//! rules (version, required fields, finite values, batch sizes).

use super::LiveError;
use crate::stats::StepStats;

/// Parse and check one protocol line (without its newline). A record the producer flagged
/// `skipped` is returned as it is: the estimators leave it out.
pub fn parse_record(line: &str) -> Result<StepStats, LiveError> {
    crate::stats::parse_line(line).map_err(LiveError::Protocol)
}

/// The semantic checks of [`parse_record`], on an already decoded record.
pub fn check_record(r: &StepStats) -> Result<(), LiveError> {
    crate::stats::ingest::protocol::validate(r).map_err(LiveError::Protocol)
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
            r#"{"v":2,"step":1,"b_small":1,"b_big":8,"sq_small":1,"sq_big":1}"#,
            r#"{"v":1,"step":1,"b_small":16,"b_big":8,"sq_small":1,"sq_big":1}"#,
            r#"{"v":1,"step":1,"b_small":0,"b_big":8,"sq_small":1,"sq_big":1}"#,
            r#"{"v":1,"step":1,"b_small":1,"b_big":8,"sq_small":-1,"sq_big":1}"#,
            r#"{"v":1,"step":1,"b_small":1,"b_big":8,"sq_small":1}"#,
            "not json",
        ];
        for line in cases {
            let err = parse_record(line).expect_err(line).to_string();
            assert!(!err.is_empty(), "{line}");
        }
    }
}
