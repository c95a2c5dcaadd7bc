//! Stats protocol v1: parsing, validation, the garbage-tolerant reader, non-finite handling and
//! the errors of empty or all-bad input.

use crate::stats_support;

use copus::stats::{
    DiagnosticKind, EstimatorSettings, ProtocolError, StatsError, analyze, parse_line, read_ndjson,
};
use stats_support::{Model, to_ndjson};

const FULL: &str = r#"{"v":1,"step":7,"b_small":4,"b_big":32,"sq_small":2.5,"sq_big":0.75,
"n_small":8,"tokens":1048576,"loss":3.2,"lr":0.0003,"step_time_s":0.41,
"config":{"dp":8,"tp":1,"pp":1,"mbs":4},"layers":{"emb":{"sq_small":1.0,"sq_big":0.25}}}"#;

#[test]
fn a_full_record_parses_with_every_field() {
    let r = parse_line(&FULL.replace('\n', "")).expect("valid line");
    assert_eq!((r.step, r.b_small, r.b_big), (7, 4.0, 32.0));
    assert_eq!((r.sq_small, r.sq_big), (2.5, 0.75));
    assert_eq!(r.n_small, Some(8));
    assert_eq!(r.config.map(|c| c.dp), Some(8));
    assert_eq!(r.layers["emb"].sq_big, 0.25);
    assert_eq!(r.lr, Some(0.0003));
}

#[test]
fn version_and_required_fields_are_checked() {
    let base = r#"{"v":1,"step":1,"b_small":1,"b_big":8,"sq_small":2,"sq_big":1}"#;
    assert!(parse_line(base).is_ok());
    let v2 = base.replace(r#""v":1"#, r#""v":2"#);
    assert!(matches!(parse_line(&v2), Err(ProtocolError::Version(_))));
    let no_v = base.replace(r#""v":1,"#, "");
    assert_eq!(parse_line(&no_v), Err(ProtocolError::MissingVersion));
    let no_big = base.replace(r#","sq_big":1"#, "");
    assert!(matches!(parse_line(&no_big), Err(ProtocolError::Field(m)) if m.contains("sq_big")));
    let not_num = base.replace(r#""sq_big":1"#, r#""sq_big":"one""#);
    assert!(matches!(parse_line(&not_num), Err(ProtocolError::Field(_))));
    assert!(matches!(
        parse_line("[1,2]"),
        Err(ProtocolError::NotObject(_))
    ));
    assert!(matches!(
        parse_line("{\"v\":1,"),
        Err(ProtocolError::Json(_))
    ));
}

#[test]
fn batch_sizes_and_norms_are_validated() {
    let line = |bs: &str, bb: &str, ss: &str| {
        format!(r#"{{"v":1,"step":1,"b_small":{bs},"b_big":{bb},"sq_small":{ss},"sq_big":1}}"#)
    };
    let invalid = |l: String| matches!(parse_line(&l), Err(ProtocolError::Invalid { .. }));
    assert!(invalid(line("0", "8", "2")));
    assert!(invalid(line("-1", "8", "2")));
    assert!(invalid(line("16", "8", "2")));
    assert!(invalid(line("1", "8", "-2")));
    // b_small == b_big is a single-gradient record: valid, estimated by differencing.
    assert!(parse_line(&line("8", "8", "2")).is_ok());
}

#[test]
fn nan_and_inf_encodings_are_non_finite_not_malformed() {
    let base = r#"{"v":1,"step":9,"b_small":1,"b_big":8,"sq_small":2,"sq_big":X}"#;
    for enc in [
        "null",
        "\"NaN\"",
        "\"-Infinity\"",
        "\"inf\"",
        "1e400",
        "3.5e38",
    ] {
        let err = parse_line(&base.replace('X', enc)).expect_err(enc);
        assert!(err.is_non_finite(), "{enc}: {err}");
        // The step is named in every case; why a finite-looking value is non-finite too.
        let why = match enc {
            "1e400" => Some("a number out of f64 range"),
            "3.5e38" => Some("at or beyond f32's largest value, the ±Inf of an f32 producer"),
            _ => None,
        };
        assert_eq!(
            err,
            ProtocolError::NonFinite {
                field: "sq_big".into(),
                step: Some(9),
                why,
            },
            "{enc}"
        );
    }
    // In a layer as well; and null in an optional field just means absent.
    let layer = r#"{"v":1,"step":2,"b_small":1,"b_big":8,"sq_small":2,"sq_big":1,"layers":{"a":{"sq_small":"NaN","sq_big":1}}}"#;
    assert!(parse_line(layer).expect_err("nan layer").is_non_finite());
    let null_loss = r#"{"v":1,"step":2,"b_small":1,"b_big":8,"sq_small":2,"sq_big":1,"loss":null}"#;
    assert_eq!(parse_line(null_loss).expect("null loss").loss, None);
    let nan_loss = null_loss.replace("null", "\"NaN\"");
    assert!(parse_line(&nan_loss).expect_err("nan loss").is_non_finite());
}

#[test]
fn reader_counts_and_skips_garbage_with_line_numbers() {
    let m = Model::power_law(50, 1.0, 100.0, 2.0, 4);
    let records = m.run(5, 200, |_| 1.0);
    let mut text = to_ndjson(&records).into_bytes();
    text.extend_from_slice(b"this is not json\n\n{\"v\":1}\n");
    text.extend_from_slice(
        b"{\"v\":1,\"step\":900,\"b_small\":1,\"b_big\":4,\"sq_small\":\"NaN\",\"sq_big\":1}\n",
    );
    text.extend_from_slice(&[0xff, 0xfe, b'\n']);
    text.extend_from_slice(b"{\"v\":3,\"step\":901}");
    let out = read_ndjson(text.as_slice()).expect("in-memory read");
    assert_eq!(out.records.len(), 200);
    assert_eq!(out.malformed, 4);
    assert_eq!(out.non_finite, 1);
    assert_eq!(out.non_finite_steps, vec![900]);
    let lines: Vec<usize> = out.errors.iter().map(|e| e.line).collect();
    assert_eq!(lines, vec![201, 203, 204, 205, 206]);
    assert!(out.errors[1].reason.contains("sq_big") || out.errors[1].reason.contains("missing"));

    let report = analyze_read(&out, &EstimatorSettings::default()).expect("analysis");
    assert_eq!(report.summary.malformed_lines, 4);
    assert_eq!(report.summary.non_finite_skipped, 1);
    assert_eq!(report.summary.steps, 200);
    let kinds: Vec<DiagnosticKind> = report.summary.diagnostics.iter().map(|d| d.kind).collect();
    assert!(
        kinds.contains(&DiagnosticKind::NonFiniteSkipped),
        "{kinds:?}"
    );
    assert!(kinds.contains(&DiagnosticKind::MalformedLines), "{kinds:?}");
}

#[test]
fn non_finite_records_from_other_sources_are_skipped_with_a_diagnostic() {
    let m = Model::power_law(50, 1.0, 100.0, 2.0, 4);
    let mut records = m.run(6, 100, |_| 1.0);
    records[10].sq_big = f64::NAN;
    records[20].sq_small = f64::INFINITY;
    records[30].skipped = Some("loss-scale overflow".into());
    let report = analyze(&records, &EstimatorSettings::default()).expect("analysis");
    assert_eq!(report.summary.steps, 97);
    assert_eq!(report.summary.non_finite_skipped, 2);
    let nf = report
        .summary
        .diagnostics
        .iter()
        .find(|d| d.kind == DiagnosticKind::NonFiniteSkipped)
        .expect("non-finite diagnostic");
    assert_eq!(nf.steps, Some([10, 20]));
    assert!(
        report
            .summary
            .diagnostics
            .iter()
            .any(|d| d.kind == DiagnosticKind::ProducerSkipped && d.message.contains("overflow"))
    );
    assert!(report.steps.iter().all(|s| ![10, 20, 30].contains(&s.step)));
}

#[test]
fn empty_or_all_bad_input_is_an_error() {
    let s = EstimatorSettings::default();
    let empty = read_ndjson(&b""[..]).expect("read");
    assert!(matches!(
        analyze_read(&empty, &s),
        Err(StatsError::Empty { malformed: 0, .. })
    ));
    let bad = read_ndjson(&b"nope\n{\"v\":1,\"step\":1,\"b_small\":1,\"b_big\":2,\"sq_small\":null,\"sq_big\":1}\n"[..])
        .expect("read");
    let err = analyze_read(&bad, &s).expect_err("all bad");
    assert_eq!(
        err,
        StatsError::Empty {
            malformed: 1,
            non_finite: 1
        }
    );
    assert!(err.to_string().contains("1 malformed"));
    // Records exist, but none is usable: single-gradient records without dot_prev.
    let single = copus::stats::StepStats::new(1, 8.0, 8.0, 1.0, 1.0);
    assert!(matches!(
        analyze(&[single], &s),
        Err(StatsError::NoUsableSteps { .. })
    ));
    let bad_settings = EstimatorSettings {
        confidence: 1.5,
        ..EstimatorSettings::default()
    };
    let one = copus::stats::StepStats::new(1, 1.0, 8.0, 2.0, 1.0);
    assert!(matches!(
        analyze(&[one], &bad_settings),
        Err(StatsError::Settings(_))
    ));
}

#[test]
fn extreme_step_numbers_do_not_panic() {
    let mut a = copus::stats::StepStats::new(u64::MAX - 1, 8.0, 8.0, 2.0, 2.0);
    a.tokens = Some(1.0);
    let mut b = copus::stats::StepStats::new(u64::MAX, 8.0, 8.0, 2.0, 2.0);
    b.dot_prev = Some(0.5);
    b.tokens = Some(2.0);
    let c = copus::stats::StepStats::new(0, 1.0, 8.0, 3.0, 1.0);
    let r = analyze(&[a, b, c], &EstimatorSettings::default()).expect("analysis");
    assert_eq!(r.summary.steps, 2);
    let line = format!(
        r#"{{"v":1,"step":{},"b_small":1,"b_big":2,"sq_small":2,"sq_big":1}}"#,
        u64::MAX
    );
    assert_eq!(parse_line(&line).expect("max step").step, u64::MAX);
}

/// What `copus analyze` does with a reader's outcome.
fn analyze_read(
    out: &copus::stats::ReadOutcome,
    s: &EstimatorSettings,
) -> Result<copus::stats::AnalyzeReport, copus::stats::StatsError> {
    copus::stats::analyze(&out.records, copus::stats::AnalyzeOptions::read(out, s))
}
