//! Measured step times for calibration: from `StepStats` records (`step_time_s` + `config`) or
//! from a CSV file.
//!
//! CSV format: a header line naming the columns, then one measured step (or the mean of several)
//! per line. Required columns: `dp`, `tp`, `pp`, `mbs`, `batch` (global batch, samples),
//! `step_time_s` (seconds). Optional: `zero` (0–3) and `recompute` (`none|selective|op|full`),
//! where absent or empty the caller's defaults ([`CsvDefaults`]: `calibrate` takes `--zero`
//! and `--recompute`, else the stack's own), `vpp`, `cp` and `ep` (context- and
//! expert-parallel degrees; each default 1; `dp` is the data-parallel degree beside them). Column order is free;
//! blank lines and lines starting with `#` are skipped.

use super::{ParallelConfig, Recompute};
use copus_stats::StepStats;
use std::collections::BTreeMap;

/// Measured step times (seconds) grouped by configuration and global batch, in a fixed order.
pub type ConfigGroups = BTreeMap<(ParallelConfig, u64), Vec<f64>>;

/// `points` grouped by (configuration, batch).
pub fn group_by_configuration(points: &[Measurement]) -> ConfigGroups {
    let mut groups = ConfigGroups::new();
    for p in points {
        groups
            .entry((p.config, p.batch))
            .or_default()
            .push(p.step_time_s);
    }
    groups
}

/// The median of `values` (the mean of the middle two for an even count); `values` must not
/// be empty.
pub fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The median step time of each group, as one measurement per (configuration, batch).
pub fn group_medians(groups: &ConfigGroups) -> Vec<Measurement> {
    groups
        .iter()
        .map(|(&(config, batch), times)| Measurement {
            config,
            batch,
            step_time_s: median(times),
        })
        .collect()
}

/// The median step time of each distinct (configuration, batch) of `points`, in a fixed
/// order: steps of one configuration differ only by noise, so a long run of one layout does
/// not outweigh the few steps of another.
pub fn per_configuration(points: &[Measurement]) -> Vec<Measurement> {
    group_medians(&group_by_configuration(points))
}

/// One measured step: the configuration, its global batch (samples) and its step time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measurement {
    /// Configuration the step ran with.
    pub config: ParallelConfig,
    /// Global batch, samples.
    pub batch: u64,
    /// Measured wall-clock seconds per step.
    pub step_time_s: f64,
}

/// Most measurements a calibration reads (a fit needs tens; beyond this is not a
/// measurement table).
pub const MAX_MEASUREMENTS: usize = 10_000;
/// Largest measurement file read, bytes.
pub const MAX_MEASUREMENT_BYTES: u64 = 16 << 20;

/// Why measurements could not be read.
#[derive(Debug, thiserror::Error)]
pub enum MeasurementError {
    /// A CSV line is malformed.
    #[error("{origin}:{line}: {msg}")]
    Csv {
        /// File name or other origin.
        origin: String,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        msg: String,
    },
}

/// Measurements from stats records that carry `step_time_s` and `config` (others and skipped
/// records are ignored); ZeRO stage and recompute are not in the protocol, so they are given.
pub fn from_step_stats(stats: &[StepStats], zero: u8, recompute: Recompute) -> Vec<Measurement> {
    stats
        .iter()
        .filter(|s| s.skipped.is_none())
        .filter_map(|s| {
            let (t, c) = (s.step_time_s?, s.config?);
            (t.is_finite() && t > 0.0 && s.b_big >= 1.0).then_some(Measurement {
                config: ParallelConfig {
                    dp: c.dp,
                    tp: c.tp,
                    pp: c.pp,
                    mbs: c.mbs,
                    zero,
                    recompute,
                    vpp: 1,
                    cp: 1,
                    ep: 1,
                },
                batch: s.b_big.round() as u64,
                step_time_s: t,
            })
        })
        .collect()
}

/// Shortest step time a measurement may state, seconds (a microsecond: no training step of a
/// model this tool plans is faster; shorter is a unit mistake).
pub const MIN_STEP_TIME_S: f64 = 1e-6;
/// Longest step time a measurement may state, seconds (about 116 days).
pub const MAX_STEP_TIME_S: f64 = 1e7;

/// Whether `t` seconds is a step time a measurement can state: finite, within
/// [`MIN_STEP_TIME_S`]–[`MAX_STEP_TIME_S`].
pub fn plausible_step_time(t: f64) -> bool {
    (MIN_STEP_TIME_S..=MAX_STEP_TIME_S).contains(&t)
}

/// What a CSV row without a `zero` or `recompute` value ran with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CsvDefaults {
    /// ZeRO stage, 0–3.
    pub zero: u8,
    /// Recompute policy.
    pub recompute: Recompute,
}

impl Default for CsvDefaults {
    /// ZeRO-1 and selective recompute (Megatron-Core's distributed optimizer and default).
    fn default() -> Self {
        Self {
            zero: 1,
            recompute: Recompute::Selective,
        }
    }
}

/// Parse the CSV format described in the module docs (rows without `zero` or `recompute`:
/// [`CsvDefaults::default`]); `origin` names the file in errors.
pub fn parse_csv(text: &str, origin: &str) -> Result<Vec<Measurement>, MeasurementError> {
    Ok(parse_csv_lines(text, origin, CsvDefaults::default())?
        .into_iter()
        .map(|(_, m)| m)
        .collect())
}

/// The fields of one CSV line, trimmed: commas inside double quotes belong to the field (a
/// user's column `"run a, b"`), and a quote inside quotes is written twice (RFC 4180). A
/// quote left open is an error.
pub fn split_csv_line(line: &str) -> Result<Vec<String>, String> {
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                field.push('"');
                chars.next();
            }
            ('"', true) => quoted = false,
            ('"', false) if field.trim().is_empty() => {
                field.clear();
                quoted = true;
            }
            (',', false) => fields.push(std::mem::take(&mut field).trim().to_string()),
            _ => field.push(c),
        }
    }
    if quoted {
        return Err(
            "a quoted field is not closed on its line (a \" without its pair; a field cannot \
             span lines here)"
                .into(),
        );
    }
    fields.push(field.trim().to_string());
    Ok(fields)
}

/// [`parse_csv`] with `defaults` for rows that do not say, each measurement with the 1-based
/// line of the file it came from (for errors found later, when the model costs it).
pub fn parse_csv_lines(
    text: &str,
    origin: &str,
    defaults: CsvDefaults,
) -> Result<Vec<(usize, Measurement)>, MeasurementError> {
    let err = |line: usize, msg: String| MeasurementError::Csv {
        origin: origin.to_string(),
        line,
        msg,
    };
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'));
    let (hline, header) = lines
        .next()
        .ok_or_else(|| err(1, "no header line".into()))?;
    let cols = split_csv_line(header).map_err(|e| err(hline, e))?;
    let find = |name: &str| cols.iter().position(|c| c.eq_ignore_ascii_case(name));
    let need =
        |name: &str| find(name).ok_or_else(|| err(hline, format!("missing column '{name}'")));
    let (dp, tp, pp, mbs) = (need("dp")?, need("tp")?, need("pp")?, need("mbs")?);
    let (batch, time) = (need("batch")?, need("step_time_s")?);
    let (zero, rc, vpp) = (find("zero"), find("recompute"), find("vpp"));
    let (cp, ep) = (find("cp"), find("ep"));
    let mut out = Vec::new();
    for (n, line) in lines {
        let owned = split_csv_line(line).map_err(|e| err(n, e))?;
        let f: Vec<&str> = owned.iter().map(String::as_str).collect();
        if f.len() != cols.len() {
            return Err(err(
                n,
                format!(
                    "{} fields but the header names {} columns (a decimal comma, as in '1,5', is not a number here: write 1.5)",
                    f.len(),
                    cols.len()
                ),
            ));
        }
        if out.len() == MAX_MEASUREMENTS {
            return Err(err(
                n,
                format!("more than {MAX_MEASUREMENTS} measurements; a calibration needs far fewer"),
            ));
        }
        let field = |i: usize, name: &str| {
            f.get(i)
                .copied()
                .filter(|s| !s.is_empty())
                .ok_or_else(|| err(n, format!("missing value for '{name}'")))
        };
        let int = |i: usize, name: &str| -> Result<u64, MeasurementError> {
            let v = field(i, name)?;
            v.parse::<u64>()
                .map_err(|_| err(n, format!("'{name}' = '{v}' is not a whole number")))
        };
        let small = |i: usize, name: &str| -> Result<u32, MeasurementError> {
            u32::try_from(int(i, name)?).map_err(|_| err(n, format!("'{name}' too large")))
        };
        let t = field(time, "step_time_s")?;
        let step_time_s: f64 = t
            .parse()
            .ok()
            .filter(|x: &f64| plausible_step_time(*x))
            .ok_or_else(|| {
                err(
                    n,
                    format!(
                        "'step_time_s' = '{t}' is not a step time in seconds \
                         ({MIN_STEP_TIME_S:e} to {MAX_STEP_TIME_S:e})"
                    ),
                )
            })?;
        let optional =
            |i: Option<usize>| i.and_then(|i| f.get(i).copied().filter(|s| !s.is_empty()));
        // An optional degree column: 1 where absent or empty, else a positive whole number.
        let degree = |i: Option<usize>, name: &str| -> Result<u32, MeasurementError> {
            let Some(i) = i.filter(|_| optional(i).is_some()) else {
                return Ok(1);
            };
            match small(i, name)? {
                0 => Err(err(n, format!("'{name}' must be at least 1"))),
                v => Ok(v),
            }
        };
        let recompute = match optional(rc) {
            None => defaults.recompute,
            Some("selective") => Recompute::Selective,
            Some("none") => Recompute::None,
            Some("full") => Recompute::Full,
            Some("op") => Recompute::Op,
            Some(o) => return Err(err(n, format!("recompute '{o}' (none|selective|op|full)"))),
        };
        let zero = match zero.filter(|_| optional(zero).is_some()) {
            Some(i) => u8::try_from(int(i, "zero")?)
                .ok()
                .filter(|z| *z <= 3)
                .ok_or_else(|| err(n, "'zero' must be 0–3".into()))?,
            None => defaults.zero,
        };
        out.push((
            n,
            Measurement {
                config: ParallelConfig {
                    dp: small(dp, "dp")?,
                    tp: small(tp, "tp")?,
                    pp: small(pp, "pp")?,
                    mbs: small(mbs, "mbs")?,
                    zero,
                    recompute,
                    vpp: degree(vpp, "vpp")?,
                    cp: degree(cp, "cp")?,
                    ep: degree(ep, "ep")?,
                },
                batch: int(batch, "batch")?,
                step_time_s,
            },
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A user's quoted column holds commas (RFC 4180): the row has the header's width and
    /// its measurement reads (it was refused as "8 fields but the header names 7").
    #[test]
    fn quoted_fields_keep_their_commas() {
        assert_eq!(
            split_csv_line(r#" 4, "run a, b" ,"say ""hi""",x"#).expect("fields"),
            ["4", "run a, b", r#"say "hi""#, "x"]
        );
        assert!(split_csv_line(r#"4,"open"#).is_err());
        let text = "dp,tp,pp,mbs,batch,step_time_s,note\n4,8,2,1,256,39,\"run a, b\"\n";
        let rows = parse_csv(text, "q.csv").expect("parses");
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].step_time_s, 39.0);
    }

    #[test]
    fn csv_reads_the_optional_degrees() {
        let text =
            "dp,tp,pp,mbs,batch,step_time_s,vpp,cp,ep\n8,1,2,1,64,2.5,4,2,8\n16,1,1,1,64,2,,,\n";
        let m = parse_csv(text, "d.csv").expect("parses");
        let c = m[0].config;
        assert_eq!((c.vpp, c.cp, c.ep), (4, 2, 8));
        let c = m[1].config;
        assert_eq!((c.vpp, c.cp, c.ep), (1, 1, 1));
        let zero = parse_csv(
            "dp,tp,pp,mbs,batch,step_time_s,ep\n8,1,1,1,8,1,0\n",
            "z.csv",
        );
        let msg = zero.expect_err("ep 0").to_string();
        assert!(
            msg.starts_with("z.csv:2:") && msg.contains("'ep' must be at least 1"),
            "{msg}"
        );
    }

    #[test]
    fn csv_parses_and_errors_name_the_line() {
        let text = "# measured on 2 nodes\nbatch,dp,tp,pp,mbs,step_time_s,recompute\n\
                    64,8,2,1,2,1.25,full\n128,16,1,1,4,0.8,\n";
        let m = parse_csv(text, "m.csv").expect("parses");
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].config.recompute, Recompute::Full);
        assert_eq!((m[1].batch, m[1].config.dp, m[1].config.zero), (128, 16, 1));
        let bad = parse_csv("dp,tp,pp,mbs,batch,step_time_s\n1,1,1,1,8,-2\n", "b.csv");
        let msg = bad.expect_err("negative time").to_string();
        assert!(
            msg.starts_with("b.csv:2:") && msg.contains("step_time_s"),
            "{msg}"
        );
        let missing = parse_csv("dp,tp,pp,mbs,batch\n", "c.csv").expect_err("no time column");
        assert!(missing.to_string().contains("step_time_s"));
        // A time no step takes (a unit mistake) is named, not turned into infinite errors.
        for t in ["1e-300", "1e300", "0.0000001"] {
            let text = format!("dp,tp,pp,mbs,batch,step_time_s\n1,1,1,1,8,{t}\n");
            let msg = parse_csv(&text, "d.csv").expect_err(t).to_string();
            assert!(msg.starts_with("d.csv:2:") && msg.contains(t), "{msg}");
        }
        let op = parse_csv(
            "dp,tp,pp,mbs,batch,step_time_s,recompute\n1,1,1,1,8,2,op\n",
            "e",
        );
        assert_eq!(op.expect("op parses")[0].config.recompute, Recompute::Op);
    }

    #[test]
    fn repeated_steps_of_one_configuration_are_one_configuration() {
        let config = ParallelConfig {
            dp: 1,
            tp: 1,
            pp: 1,
            mbs: 1,
            zero: 1,
            recompute: Recompute::Full,
            vpp: 1,
            cp: 1,
            ep: 1,
        };
        let m = |t| Measurement {
            config,
            batch: 8,
            step_time_s: t,
        };
        let c = per_configuration(&[m(1.0), m(3.0), m(2.0), m(10.0)]);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].step_time_s, 2.5);
    }
}
