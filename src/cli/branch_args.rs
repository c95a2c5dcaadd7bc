//! `--branches FILE --b-crit-from KIND` of `plan` and `grid`: the session's B_crit converted by
//! the critical batch size measured by branched training of its own run (docs/CBS.md), as the
//! explorer's `open --branches FILE --b-crit-from KIND` converts it.

use crate::app::branches::{ConversionKind, apply_conversion, conversion, marks};
use crate::session::{DataSource, Resolved};
use std::path::PathBuf;

/// The branched experiment a plan or grid converts B_crit by.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct BranchArgs {
    /// Branch records of a branched experiment on this session's run (`copus branch --out`,
    /// `copus_hook.branch_experiment`) [default with --b-crit-from: the session's `branches`]
    #[arg(long, value_name = "FILE", requires = "b_crit_from")]
    pub branches: Option<PathBuf>,
    /// B_crit = the run's B_simple × the measured ratio (fitted B_noise or threshold CBS ÷
    /// B_simple, the geometric mean over the branch points), its range carried into B_crit's
    /// interval and its source named, as `open --b-crit-from` sets it (instead of
    /// --b-crit-scale)
    #[arg(long, value_enum, value_name = "KIND")]
    pub b_crit_from: Option<super::open::BCritFrom>,
}

impl BranchArgs {
    /// Convert `resolved`'s B_crit by the branch file, where asked; the notes to print beside
    /// the result (what was applied; a branch file whose learning rates say it may come from
    /// another run). `scale_given`: `--b-crit-scale` was given too (a command-line error).
    pub fn apply(&self, resolved: &mut Resolved, scale_given: bool) -> anyhow::Result<Vec<String>> {
        let Some(from) = self.b_crit_from else {
            return Ok(Vec::new());
        };
        if scale_given {
            super::flag_bail!(
                "--b-crit-from and --b-crit-scale: one conversion of B_crit (--b-crit-from \
                 measures it from the branch file)"
            );
        }
        if !matches!(resolved.session.source, DataSource::Stats { .. }) {
            super::flag_bail!(
                "--b-crit-from converts a run's noise scale by its branched experiment; this \
                 session's source is {}",
                resolved.session.source.kind_label()
            );
        }
        let file = match (&self.branches, &resolved.session.branches) {
            (Some(f), _) => f.clone(),
            (None, Some(rel)) => crate::session::branches_in(&resolved.base, rel)
                .map_err(|e| anyhow::anyhow!("the session's branches: {e}"))?,
            (None, None) => super::flag_bail!(
                "--b-crit-from needs a branch file: --branches FILE (the session names none)"
            ),
        };
        let report = super::cbs::load_branch_file(&file, resolved.session.estimator.confidence)
            .map_err(|e| anyhow::anyhow!("--branches {e}"))?;
        let loaded = crate::pipeline::load(resolved)?;
        let kind = match from {
            super::open::BCritFrom::BNoise => ConversionKind::BNoise,
            super::open::BCritFrom::ThresholdCbs => ConversionKind::ThresholdCbs,
        };
        let marks = marks(&report, &loaded.trajectory);
        let applied = apply_conversion(&mut resolved.session, &marks, kind).map_err(|left| {
            let why = left.trim_end_matches(": B_crit left unconverted");
            anyhow::anyhow!(
                "--branches {}: {why}: no conversion to plan with (another --b-crit-from, or \
                 none)",
                file.display()
            )
        })?;
        let mut notes = vec![format!("--branches {}: {applied}", file.display())];
        notes.extend(points_note(&report, &marks, kind, &file));
        // A branch file whose rates disagree with this run's (another run's experiment): said,
        // as `analyze --branches` and the explorer say it.
        if let Some(a) = &loaded.analysis {
            let sigma = a.summary.bandwidth_steps;
            notes.extend(
                crate::stats::estimate::cbs::run_mismatches(&report, &a.steps)
                    .into_iter()
                    .chain(crate::stats::estimate::cbs::steep_estimates(
                        &report, &a.steps, sigma,
                    ))
                    .map(|m| format!("--branches {}: caution: {m}", file.display())),
            );
        }
        Ok(notes)
    }
}

/// Which branch points the factor leaves out, and how many cautions `copus cbs` gives on the
/// ones it rests on (the plan dropped points without a word and passed on no caution).
fn points_note(
    report: &crate::stats::estimate::cbs::CbsReport,
    marks: &[crate::app::branches::BranchMark],
    kind: ConversionKind,
    file: &std::path::Path,
) -> Option<String> {
    let used = conversion(marks, kind)
        .map(|c| c.points)
        .unwrap_or_default();
    let mut left: Vec<String> = report
        .points
        .iter()
        .filter(|p| !used.contains(&p.from_step))
        .map(|p| p.from_step.to_string())
        .collect();
    left.extend(report.unmeasured.iter().map(|u| u.from_step.to_string()));
    let cautions: usize = report
        .points
        .iter()
        .filter(|p| used.contains(&p.from_step))
        .map(|p| p.cautions.len())
        .sum();
    let mut parts = Vec::new();
    if !left.is_empty() {
        parts.push(format!(
            "left out of the factor: step {} (no {} ratio there: past the run, not measured, or \
             a bound at an end of the batches run)",
            left.join(", "),
            kind.name()
        ));
    }
    if cautions > 0 {
        parts.push(format!(
            "{cautions} caution{} on the steps it rests on (`copus cbs {}` lists them)",
            if cautions == 1 { "" } else { "s" },
            file.display()
        ));
    }
    (!parts.is_empty()).then(|| format!("--branches {}: {}", file.display(), parts.join("; ")))
}
