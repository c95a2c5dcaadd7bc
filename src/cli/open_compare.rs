//! `copus open A --compare B`: a second stats file, analysed with A's estimator settings, laid
//! over A's timeline (aligned by tokens; the comparison is `stats::analysis::compare`, the same as
//! `copus analyze A --compare B --json`).

use crate::app::App;
use crate::app::measured_view::CompareRun;
use crate::session::DataSource;
use std::path::Path;
use std::sync::Arc;

/// Analyse `other` with the settings of `app`'s run and attach it as the compared run. A must
/// be a stats file already loaded (see `open::prepared`); B a stats file.
pub fn attach(app: &mut App, other: &Path) -> anyhow::Result<()> {
    if !matches!(app.resolved.session.source, DataSource::Stats { .. }) {
        anyhow::bail!(
            "--compare {}: the run opened must be a stats file (.ndjson); gradient dumps, \
             scenarios and live runs are not compared",
            other.display()
        );
    }
    let Some(a) = app.analysis.clone() else {
        anyhow::bail!(
            "--compare {}: the run opened has no analysis to compare with",
            other.display()
        );
    };
    if !other.is_file() {
        anyhow::bail!(
            "--compare {}: not a file (expected a stats file, .ndjson)",
            other.display()
        );
    }
    let settings = &app.resolved.session.estimator;
    // B is read with A's tokens per sample when A's was given (`--seq-len`): both runs then
    // share one token axis, as the header's comparison assumes.
    let given = match &app.resolved.session.source {
        DataSource::Stats { seq_len, .. } => *seq_len,
        _ => None,
    };
    let (trajectory, report, _, _) = crate::source::measured::load_stats_file(
        other,
        settings,
        given,
        app.resolved.model.seq_len,
    )
    .map_err(|e| anyhow::anyhow!("--compare: {e}"))?;
    if trajectory.points.is_empty() {
        anyhow::bail!(
            "--compare {}: no step gives a usable B_crit estimate (see `copus analyze`)",
            other.display()
        );
    }
    let comparison = crate::stats::compare(&a, &report, settings);
    let label = other.file_name().map_or_else(
        || other.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    app.compare = Some(Arc::new(CompareRun {
        label,
        // Equal tokens: B counted in A's samples, so both lines share the axis.
        trajectory: trajectory.in_sequences_of(app.trajectory.seq_len),
        comparison,
    }));
    Ok(())
}
