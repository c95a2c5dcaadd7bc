//! The measured critical batch size of a branched experiment laid over a measured run's
//! timeline (`copus open RUN --branches FILE`, docs/CBS.md): where each branch point sits on
//! the token axis, its threshold CBS and fitted B_noise, and the ratio measured / estimated.

use crate::stats::estimate::cbs::{CbsReport, EstimateComparison, compare_with_estimate};
use crate::trajectory::Trajectory;

/// One branch point as the timeline shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct BranchMark {
    /// The branch point's step.
    pub from_step: u64,
    /// Its position on the token axis (the run's point at or before the step).
    pub tokens: f64,
    /// Threshold CBS, samples.
    pub threshold: f64,
    /// The threshold in words: the batch, or the bound it is where it sits at an end of the
    /// batches run ("below 16" at the smallest, "256 or more" at the largest).
    pub threshold_words: String,
    /// Fitted B_noise, samples, when there is one.
    pub fitted: Option<f64>,
    /// The threshold sits at the top of the batches run: a lower bound, not a measurement.
    pub at_least: bool,
    /// The threshold sits at the smallest batch run: an upper bound (the CBS lies below the
    /// next batch), not a measurement.
    pub at_most: bool,
    /// The reference (smallest) batch trained worse than larger ones
    /// ([`crate::stats::estimate::cbs::PointReport::poor_reference`]): with `at_least`, the
    /// threshold is not measured at all.
    pub poor_reference: bool,
    /// What limits this point's numbers (`copus cbs`'s cautions).
    pub cautions: Vec<String>,
    /// The measurements beside the run's estimate there.
    pub comparison: EstimateComparison,
}

/// The marks of `report` on `raw` (the run's trajectory in its own samples, before the
/// session's B_crit scale): branch points outside the run are left out.
pub fn marks(report: &CbsReport, raw: &Trajectory) -> Vec<BranchMark> {
    let pts = &raw.points;
    let last = pts.last().map(|p| p.step);
    let at = |step: u64| {
        if last.is_none_or(|last| step > last) {
            return None;
        }
        pts.partition_point(|p| p.step <= step).checked_sub(1)
    };
    let comparison = compare_with_estimate(report, |step| {
        let p = &pts[at(step)?];
        let ci = p.ci.map_or([f64::NAN, f64::NAN], |(lo, hi)| [lo, hi]);
        Some((p.step, Some(p.b_crit), ci))
    });
    report
        .points
        .iter()
        .zip(comparison)
        .filter_map(|(p, c)| {
            let i = at(p.from_step)?;
            Some(BranchMark {
                from_step: p.from_step,
                tokens: pts[i].tokens,
                threshold: p.threshold_cbs.batch as f64,
                threshold_words: threshold_words(p),
                fitted: p.b_noise_fit.map(|f| f.value),
                at_least: p.threshold_cbs.at_least,
                at_most: p.threshold_cbs.at_most,
                poor_reference: p.poor_reference,
                cautions: p.cautions.clone(),
                comparison: c,
            })
        })
        .collect()
}

impl BranchMark {
    /// Whether the threshold CBS is a number or a bound at all: not where every batch beat a
    /// reference that itself trained worse than larger batches (`copus cbs`: "not measured").
    pub fn threshold_measured(&self) -> bool {
        !(self.at_least && self.poor_reference)
    }
}

/// A point's threshold CBS in words: a bound where it sits at an end of the batches run (a
/// censored measurement, as `copus cbs` says), "not measured" where that bound is against a
/// reference that trained worse than larger batches, else the batch.
fn threshold_words(p: &crate::stats::estimate::cbs::PointReport) -> String {
    if p.threshold_cbs.at_least && p.poor_reference {
        return "not measured".to_string();
    }
    let mut batches: Vec<u64> = p.branches.iter().map(|b| b.batch).collect();
    batches.sort_unstable();
    batches.dedup();
    let th = p.threshold_cbs.batch;
    match batches.as_slice() {
        [first, next, ..] if th == *first => format!("below {next}"),
        [.., last] if batches.len() >= 2 && th == *last => format!("{th} or more"),
        _ => th.to_string(),
    }
}

/// Which measurement a session's B_crit conversion follows (`open --b-crit-from`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConversionKind {
    /// Fitted B_noise ÷ B_simple.
    BNoise,
    /// Threshold CBS ÷ B_simple.
    ThresholdCbs,
}

impl ConversionKind {
    /// How the kind reads in titles and sources.
    pub fn name(self) -> &'static str {
        match self {
            Self::BNoise => "B_noise",
            Self::ThresholdCbs => "threshold CBS",
        }
    }
}

/// The ratios a conversion to `kind` averages, with their branch points' steps: a threshold
/// at an end of the batches run is a bound, not a value, and stays out (averaging it in would
/// pull the factor toward whatever batch happened to be the largest or the smallest: "<16"
/// read as 8 made a ×0.024 conversion).
fn used_ratios(
    marks: &[BranchMark],
    kind: ConversionKind,
) -> Vec<(u64, crate::stats::estimate::cbs::WithCi)> {
    marks
        .iter()
        .filter_map(|m| {
            let r = match kind {
                ConversionKind::BNoise => m.comparison.b_noise_ratio,
                ConversionKind::ThresholdCbs if m.at_least || m.at_most => None,
                ConversionKind::ThresholdCbs => m.comparison.threshold_ratio,
            }?;
            (r.value.is_finite() && r.value > 0.0).then_some((m.from_step, r))
        })
        .collect()
}

/// The geometric mean of `xs` (positive and finite), `None` when empty or any is not.
fn geometric_mean(xs: impl Iterator<Item = f64>) -> Option<f64> {
    let logs: Option<Vec<f64>> = xs
        .map(|x| (x.is_finite() && x > 0.0).then(|| x.ln()))
        .collect();
    let logs = logs.filter(|l| !l.is_empty())?;
    Some((logs.iter().sum::<f64>() / logs.len() as f64).exp())
}

/// A conversion from the run's B_simple to a measured kind ([`conversion`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Conversion {
    /// The factor: the geometric mean of the measured ratios.
    pub factor: f64,
    /// Steps of the branch points it averages.
    pub points: Vec<u64>,
    /// The geometric means of the ratios' interval ends, when every ratio has both (a range
    /// for the reader, not an interval of the mean).
    pub range: Option<[f64; 2]>,
    /// Steps of the branch points whose ratio's interval is open at an end (0 below: its
    /// B_simple unbounded above; or unbounded above): where there is one, `range` is `None`
    /// though the ratios are uncertain, not exact.
    pub open_points: Vec<u64>,
}

/// The conversion from the run's B_simple to the measured `kind` over the branch points that
/// have a ratio of it, `None` where none has.
pub fn conversion(marks: &[BranchMark], kind: ConversionKind) -> Option<Conversion> {
    let used = used_ratios(marks, kind);
    let factor = geometric_mean(used.iter().map(|(_, r)| r.value))?;
    let lo = geometric_mean(used.iter().map(|(_, r)| r.ci[0].unwrap_or(f64::NAN)));
    let hi = geometric_mean(used.iter().map(|(_, r)| r.ci[1].unwrap_or(f64::NAN)));
    Some(Conversion {
        factor,
        points: used.iter().map(|(s, _)| *s).collect(),
        range: lo.zip(hi).map(|(a, b)| [a, b]),
        open_points: used
            .iter()
            .filter(|(_, r)| {
                r.ci.iter()
                    .any(|e| e.is_none_or(|x| !(x.is_finite() && x > 0.0)))
            })
            .map(|(s, _)| *s)
            .collect(),
    })
}

/// Whether `session`'s B_crit scale is a conversion measured by branched training (the
/// source [`apply_conversion`] names), not one set by hand or left at its default.
pub fn is_measured_conversion(session: &crate::session::Session) -> bool {
    session
        .planner
        .b_crit_scale_source
        .as_deref()
        .is_some_and(|s| s.starts_with("measured"))
}

/// Set `session`'s B_crit conversion to the measured ratio of a branch file's `marks`
/// ([`conversion`]: the geometric mean over its branch points) and name it as the
/// conversion's source (`b_crit_scale`, `planner.b_crit_scale_range` and
/// `planner.b_crit_scale_source`). `Ok`: what was applied, in words; `Err`: why the session was
/// left unconverted. The explorer (`open --b-crit-from`), `plan` and `grid` share it.
pub fn apply_conversion(
    session: &mut crate::session::Session,
    marks: &[BranchMark],
    kind: ConversionKind,
) -> Result<String, String> {
    let lo = crate::validate::session::MIN_B_CRIT_SCALE;
    let hi = crate::validate::session::MAX_B_CRIT_SCALE;
    match conversion(marks, kind) {
        Some(c) if (lo..=hi).contains(&c.factor) => {
            // Which points, and the range their ratios' intervals give: B_crit's interval
            // carries it (each end times its end of the range).
            let f = c.factor;
            let range = c
                .range
                .filter(|&[a, b]| a <= f && f <= b && a >= lo && b <= hi);
            let steps: Vec<String> = c.points.iter().map(u64::to_string).collect();
            let range_text = range.map_or_else(String::new, |[a, b]| format!(" [{a:.3}–{b:.3}]"));
            let s = session;
            s.b_crit_scale = f;
            s.planner.b_crit_scale_range = range;
            s.planner.b_crit_scale_source = Some(format!(
                "measured {} ÷ B_simple by branched training, geometric mean over {} branch \
                 point(s) (step {})",
                kind.name(),
                c.points.len(),
                steps.join(", ")
            ));
            let open: Vec<String> = c.open_points.iter().map(u64::to_string).collect();
            let interval = if range.is_some() {
                "B_crit's interval is B_simple's times that range".to_string()
            } else if !open.is_empty() {
                // Not "no range": the ratios there are uncertain without bound on a side.
                format!(
                    "B_crit's interval is B_simple's times the factor and understates the \
                     conversion's uncertainty: the ratio's interval at step {} is open at an end",
                    open.join(", ")
                )
            } else {
                "B_crit's interval is B_simple's times the factor: the ratios have no interval"
                    .to_string()
            };
            Ok(format!(
                "B_crit × {f:.3}{range_text}: the measured {} ÷ B_simple of the branch file at \
                 step {}, applied at every step ({interval})",
                kind.name(),
                steps.join(", ")
            ))
        }
        Some(c) => Err(format!(
            "measured {} ÷ B_simple is {:.3e}, outside {lo}..{hi}: B_crit left unconverted",
            kind.name(),
            c.factor
        )),
        None => {
            let why = match kind {
                ConversionKind::BNoise => "no fitted B_noise",
                // Bounds at an end of the batches run and unmeasured thresholds are left out.
                ConversionKind::ThresholdCbs => {
                    "no threshold CBS measured inside its batches (one at an end of them is a \
                     bound, not a value)"
                }
            };
            Err(format!(
                "the branch file has {why} at a step of this run: B_crit left unconverted"
            ))
        }
    }
}

/// The branch point at or before `step` (before the first: the first).
fn mark_at(marks: &[BranchMark], step: u64) -> Option<&BranchMark> {
    marks
        .iter()
        .rev()
        .find(|m| m.from_step <= step)
        .or_else(|| marks.first())
}

/// The headline segment for the branch point at or before the cursor's step (else the
/// first): "measured B_noise ÷ B_simple ×0.46 [0.32–0.63] at step 30", or the threshold's
/// ratio when no B_noise was fitted there.
pub fn headline_segment(marks: &[BranchMark], cursor_step: u64) -> Option<String> {
    let m = mark_at(marks, cursor_step)?;
    let words = |r: &crate::stats::estimate::cbs::WithCi| {
        // An unbounded end: 0 below, ∞ above.
        let end = |x: Option<f64>, open: &str| x.map_or(open.to_string(), |v| format!("{v:.2}"));
        format!(
            "×{:.2} [{}–{}]",
            r.value,
            end(r.ci[0], "0"),
            end(r.ci[1], "∞")
        )
    };
    let c = &m.comparison;
    match (&c.b_noise_ratio, &c.threshold_ratio) {
        (Some(r), _) => Some(format!(
            "measured B_noise ÷ B_simple {} at step {}",
            words(r),
            m.from_step
        )),
        (None, _) if !m.threshold_measured() => Some(format!(
            "threshold CBS not measured at step {} (the reference batch trained worse than \
             larger ones; no B_noise fit)",
            m.from_step
        )),
        (None, Some(r)) if m.at_most => Some(format!(
            "threshold CBS ÷ B_simple below ×{:.2} at step {} (an upper bound; no B_noise fit)",
            r.value, m.from_step
        )),
        (None, Some(r)) if m.at_least => Some(format!(
            "threshold CBS ÷ B_simple ×{:.2} or more at step {} (a lower bound; no B_noise fit)",
            r.value, m.from_step
        )),
        (None, Some(r)) => Some(format!(
            "threshold CBS ÷ B_simple {} at step {} (no B_noise fit)",
            words(r),
            m.from_step
        )),
        (None, None) => None,
    }
}

/// Where the noise scale sits against a measured ratio (measured ÷ B_simple with its
/// interval): below, above, or not distinguishable from it.
fn direction(r: &crate::stats::estimate::cbs::WithCi) -> &'static str {
    match r.ci {
        [_, Some(hi)] if hi < 1.0 => "overestimates",
        [Some(lo), _] if lo > 1.0 => "underestimates",
        _ => "agrees, within the interval, with",
    }
}

/// The estimators panel's lines on the branched experiment at the branch point at or before
/// `cursor_step` (else the first): what was measured there and which way the noise scale is
/// off, so that the advice follows this run's measurement rather than another model's. Empty
/// without marks.
///
/// `applied`: the factor the session's B_crit is already scaled by from this branch file
/// (`--b-crit-from`), said instead of advising the conversion. `another_run`: the branch file
/// may come from another run (its learning rates disagree with this run's): the conversion
/// is not advised.
///
/// `unit`: what the run's samples are called on screen ("sequences" where a sample is a
/// sequence of several tokens, as the panel's title counts them).
pub fn estimator_lines(
    marks: &[BranchMark],
    cursor_step: u64,
    applied: Option<f64>,
    another_run: bool,
    unit: &str,
) -> Vec<String> {
    let Some(m) = mark_at(marks, cursor_step) else {
        return Vec::new();
    };
    let unit = if m.threshold_measured() {
        format!(" {unit}")
    } else {
        String::new()
    };
    let mut lines = vec![format!(
        "branched training at step {}: threshold CBS {}{unit}{}",
        m.from_step,
        m.threshold_words,
        m.fitted
            .map(|f| format!(", fitted B_noise {}", crate::format::si(f)))
            .unwrap_or_default()
    )];
    if let Some(seg) = headline_segment(std::slice::from_ref(m), m.from_step) {
        lines.push(seg);
    }
    let c = &m.comparison;
    let (what, r) = match (&c.b_noise_ratio, &c.threshold_ratio) {
        (Some(r), _) => ("the fitted B_noise", r),
        (None, _) if !m.threshold_measured() => {
            lines.push(
                "every batch came within the tolerance of the reference (the smallest batch), \
                 which itself trained worse than larger batches: against it the largest batch \
                 bounds nothing, and this experiment cannot tell which way the noise scale is \
                 off; branch again with a larger smallest batch"
                    .to_string(),
            );
            lines.extend(m.cautions.iter().map(|c| format!("caution: {c}")));
            return lines;
        }
        (None, Some(r)) if m.at_least => {
            let low = r.ci[0].map_or_else(|| "0".to_string(), |lo| format!("{lo:.2}"));
            lines.push(format!(
                "the threshold CBS is at least ×{:.2} of the noise scale here at the point \
                 estimates (the largest batch run came within the tolerance; with the \
                 uncertainty of both, ×{low} or more): this experiment cannot tell which way \
                 the noise scale is off; branch with larger batches to measure it",
                r.value
            ));
            lines.extend(m.cautions.iter().map(|c| format!("caution: {c}")));
            return lines;
        }
        (None, Some(r)) => ("the threshold CBS", r),
        (None, None) => return lines,
    };
    let agrees =
        !matches!(r.ci, [_, Some(hi)] if hi < 1.0) && !matches!(r.ci, [Some(lo), _] if lo > 1.0);
    lines.push(match applied {
        // The interval holds 1: this point supports no correction (panel 4 advised scaling by
        // ×0.34 [0.11–1.43] beside a lesson answer that the branches cannot tell).
        None if agrees => format!(
            "here the noise scale {} {what}: this point supports no correction of B_crit \
             (more seeds or samples a batch would narrow the ratio)",
            direction(r)
        ),
        Some(f) => format!(
            "here the noise scale {} {what}; B_crit is B_simple × {f:.3} from this branch file \
             (--b-crit-from: the geometric mean of its measured ratios)",
            direction(r)
        ),
        None if another_run => format!(
            "here the noise scale {} {what}, if the branch file is this run's (see the caution \
             above): check that before scaling B_crit by its ratio",
            direction(r)
        ),
        None => format!(
            "here the noise scale {} {what}: scale B_crit by the measured ratio (what-if \
             panel, or --branches FILE --b-crit-from of open, plan and grid) rather than by \
             another model's",
            direction(r)
        ),
    });
    lines.extend(m.cautions.iter().map(|c| format!("caution: {c}")));
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::estimate::cbs::{PointReport, ThresholdCbs, WithCi};
    use crate::trajectory::TrajectoryPoint;

    fn traj() -> Trajectory {
        Trajectory {
            label: "run".into(),
            seq_len: 1,
            points: (0..100)
                .map(|i| TrajectoryPoint {
                    step: i * 10,
                    tokens: (i * 1280) as f64,
                    b_crit: 100.0 + i as f64,
                    ci: Some((80.0 + i as f64, 125.0 + i as f64)),
                    loss: None,
                })
                .collect(),
        }
    }

    /// A branch report of `points` (tolerance 0.01 nats, 95 % intervals).
    fn report_of(points: Vec<PointReport>) -> CbsReport {
        CbsReport {
            tolerance: 0.01,
            confidence: 0.95,
            resamples: 10,
            points,
            unmeasured: Vec::new(),
        }
    }

    fn point(step: u64, fitted: Option<f64>) -> PointReport {
        PointReport {
            from_step: step,
            budget_samples: 1e4,
            target_loss: 2.0,
            threshold_cbs: ThresholdCbs {
                batch: 64,
                ci: [32, 128],
                at_least: false,
                at_most: false,
                below: None,
                measured: true,
            },
            b_noise_fit: fitted.map(|value| WithCi {
                value,
                ci: [Some(value * 0.8), Some(value * 1.3)],
            }),
            b_noise_note: None,
            poor_reference: false,
            base: None,
            branches: Vec::new(),
            left_out: Vec::new(),
            budget_set_by: None,
            cautions: Vec::new(),
        }
    }

    #[test]
    fn marks_sit_on_the_run_and_the_headline_follows_the_cursor() {
        let report = report_of(vec![
            point(105, Some(55.0)),
            point(500, None),
            point(950, Some(1.0)),
            // After the run's last step (990): no estimate at it, no mark.
            point(5000, Some(1.0)),
        ]);
        let m = marks(&report, &traj());
        assert_eq!(m.len(), 3);
        assert_eq!(m[2].from_step, 950);
        // Step 105 lies between the run's steps 100 and 110: the point at or before it.
        assert_eq!(m[0].comparison.estimate_step, Some(100));
        assert_eq!(m[0].tokens, 10.0 * 1280.0);
        let r = m[0].comparison.b_noise_ratio.unwrap();
        assert!((r.value - 55.0 / 110.0).abs() < 1e-12);
        let h = headline_segment(&m, 200).unwrap();
        assert!(
            h.starts_with("measured B_noise ÷ B_simple ×0.50") && h.ends_with("step 105"),
            "{h}"
        );
        let h = headline_segment(&m, 600).unwrap();
        assert!(h.contains("threshold CBS") && h.contains("step 500"), "{h}");
        assert!(headline_segment(&m, 0).unwrap().contains("step 105"));
        assert!(headline_segment(&[], 0).is_none());
        // The conversion: the geometric mean of the ratios that exist.
        let c = conversion(&m, ConversionKind::BNoise).unwrap();
        let want = ((55.0 / 110.0f64).ln() + (1.0 / 195.0f64).ln()) / 2.0;
        assert_eq!(c.points.len(), 2);
        assert!((c.factor - want.exp()).abs() < 1e-12, "{}", c.factor);
        let t = conversion(&m, ConversionKind::ThresholdCbs).unwrap();
        assert_eq!(t.points.len(), 3);
        assert!(t.factor > 0.0);
        assert!(conversion(&[], ConversionKind::BNoise).is_none());
    }

    /// The estimators panel says which way the noise scale is off at the branch point, from
    /// the measured ratio's interval: over where it lies below 1, under where above, neither
    /// where it spans 1 (the advice no longer assumes Merrill et al.'s direction).
    #[test]
    fn estimator_lines_follow_the_measured_direction() {
        let report = |fitted: f64| report_of(vec![point(105, Some(fitted))]);
        // B_simple at step 100 is 110 [90, 135].
        let says = |fitted: f64| {
            estimator_lines(&marks(&report(fitted), &traj()), 0, None, false, "samples").join("\n")
        };
        let over = says(20.0);
        assert!(over.contains("branched training at step 105"), "{over}");
        assert!(over.contains("overestimates the fitted B_noise"), "{over}");
        assert!(says(1000.0).contains("underestimates"), "{}", says(1000.0));
        assert!(
            says(110.0).contains("agrees, within the interval"),
            "{}",
            says(110.0)
        );
        assert!(estimator_lines(&[], 0, None, false, "samples").is_empty());
        let applied = estimator_lines(
            &marks(&report(20.0), &traj()),
            0,
            Some(0.182),
            false,
            "samples",
        )
        .join("\n");
        assert!(
            applied.contains("B_simple × 0.182") && !applied.contains("scale B_crit by"),
            "{applied}"
        );
        // A branch file that may be another run's: the conversion is not advised.
        let suspect =
            estimator_lines(&marks(&report(20.0), &traj()), 0, None, true, "samples").join("\n");
        assert!(
            suspect.contains("check that before scaling") && !suspect.contains("--b-crit-from"),
            "{suspect}"
        );
    }

    /// A threshold at an end of the batches run is a bound, said as one (the lesson's run
    /// showed "threshold CBS 8 samples" at its smallest batch, 8).
    #[test]
    fn a_threshold_at_an_end_of_the_batches_is_a_bound() {
        use crate::stats::estimate::cbs::BatchSummary;
        let with = |th: u64| {
            let mut p = point(105, None);
            p.threshold_cbs.batch = th;
            p.branches = [8u64, 16, 32, 64]
                .iter()
                .map(|&batch| BatchSummary {
                    batch,
                    seeds: 2,
                    loss_at_budget: 2.0,
                    samples_to_target: None,
                    lr: None,
                })
                .collect();
            threshold_words(&p)
        };
        assert_eq!(with(8), "below 16");
        assert_eq!(with(16), "16");
        assert_eq!(with(64), "64 or more");
        assert_eq!(threshold_words(&point(105, None)), "64");
    }

    /// A threshold at the largest batch against a reference that trained worse than larger
    /// batches is not measured, as `copus cbs` says: the headline, the panel and the marks do
    /// not read it as a ratio or a bound (the estimate-right lesson read "×0.12" beside cbs's
    /// "not measured"). At the largest batch against a sound reference it is a lower bound.
    #[test]
    fn a_bound_against_a_poor_reference_is_not_measured() {
        let report = |poor: bool| {
            let mut p = point(105, None);
            p.threshold_cbs.at_least = true;
            p.poor_reference = poor;
            report_of(vec![p])
        };
        let poor = marks(&report(true), &traj());
        assert!(!poor[0].threshold_measured());
        let h = headline_segment(&poor, 200).unwrap();
        assert!(h.contains("not measured") && !h.contains('×'), "{h}");
        let lines = estimator_lines(&poor, 200, None, false, "samples").join("\n");
        assert!(lines.contains("threshold CBS not measured"), "{lines}");
        assert!(!lines.contains("not measured samples") && !lines.contains("at least ×"));
        assert!(lines.contains("larger smallest batch"), "{lines}");
        let sound = marks(&report(false), &traj());
        assert!(sound[0].threshold_measured());
        let h = headline_segment(&sound, 200).unwrap();
        assert!(h.contains("or more") && h.contains("lower bound"), "{h}");
        assert!(
            estimator_lines(&sound, 200, None, false, "samples")
                .join(" ")
                .contains("at least ×")
        );
    }

    /// A threshold at the smallest batch is an upper bound, and so is its ratio: the row reads
    /// "below ×(next batch ÷ B_simple)", not the smallest batch's ratio as a value.
    #[test]
    fn a_threshold_at_the_smallest_batch_reads_as_an_upper_bound() {
        let mut p = point(105, None);
        p.threshold_cbs.batch = 8;
        p.threshold_cbs.at_most = true;
        p.threshold_cbs.below = Some(16);
        let report = report_of(vec![p]);
        let m = marks(&report, &traj());
        // B_simple at step 100 is 110.
        let h = headline_segment(&m, 200).unwrap();
        assert!(h.contains(&format!("below ×{:.2}", 16.0 / 110.0)), "{h}");
        assert!(!h.contains(&format!("×{:.2}", 8.0 / 110.0)), "{h}");
        assert!(conversion(&m, ConversionKind::ThresholdCbs).is_none());
    }

    /// The conversion names the points it averages and the range of their ratios' intervals,
    /// around the factor.
    #[test]
    fn the_conversion_names_its_points_and_range() {
        let report = report_of(vec![
            point(105, Some(55.0)),
            point(500, None),
            point(950, Some(80.0)),
        ]);
        let m = marks(&report, &traj());
        let c = conversion(&m, ConversionKind::BNoise).unwrap();
        assert_eq!(c.points, [105, 950]);
        let [lo, hi] = c.range.expect("both ends");
        assert!(lo < c.factor && c.factor < hi, "{lo} {} {hi}", c.factor);
        assert!(c.open_points.is_empty());
        // A ratio whose interval reaches 0 (its B_simple unbounded above) leaves the range
        // out and is named, not read as "no range".
        let mut m = m;
        if let Some(r) = m[0].comparison.b_noise_ratio.as_mut() {
            r.ci[0] = Some(0.0);
        }
        let c = conversion(&m, ConversionKind::BNoise).unwrap();
        assert!(c.range.is_none());
        assert_eq!(c.open_points, [105]);
    }
}
