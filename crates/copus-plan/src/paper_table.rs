//! The README's comparison with the COPUS paper: one row per shipped session and objective,
//! built from the same [`PlanReport`] that `copus plan --json` prints
//! (`cargo run --example paper_table`, spliced into the README by `scripts/paper_table.sh`).

use super::progress::TokenAxis;
use super::report::PlanReport;
use std::fmt::Write as _;

/// One row of the table.
#[derive(Debug, Clone, PartialEq)]
pub struct PaperRow {
    /// Session file name (in `sessions/`).
    pub file: String,
    /// "law" or "measured", with the B_crit kind ("measured noise-scale").
    pub source: String,
    /// Target loss of a short horizon, nats.
    pub target_loss: Option<f64>,
    /// Objective name.
    pub objective: String,
    /// Fastest paper baseline.
    pub fastest_baseline: String,
    /// Its time / optimal-joint's time.
    pub speedup_vs_fastest_baseline: f64,
    /// Hindsight static's time / optimal-joint's time.
    pub speedup_vs_hindsight_static: f64,
    /// Switches of optimal-joint.
    pub switches: usize,
    /// Distinct kinds of those switches, in order of first use.
    pub switch_kinds: Vec<String>,
    /// Global batches optimal-joint runs at, in order (consecutive repeats merged), samples.
    pub batches: Vec<u64>,
}

/// The batch of a state label ("DP8·TP1·PP1 B=32 (mbs2 …)").
fn label_batch(label: &str) -> Option<u64> {
    let rest = label.split("B=").nth(1)?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// The row of a plan report for session file `file`.
pub fn row(file: &str, rep: &PlanReport) -> PaperRow {
    let origin = match rep.token_axis {
        TokenAxis::FromSteps => "measured",
        _ => "law",
    };
    let mut batches = Vec::new();
    let start = rep
        .strategies
        .iter()
        .find(|s| s.name == "optimal-joint")
        .and_then(|s| label_batch(&s.start));
    for b in start
        .into_iter()
        .chain(rep.switches.iter().filter_map(|s| label_batch(&s.to)))
    {
        if batches.last() != Some(&b) {
            batches.push(b);
        }
    }
    let mut switch_kinds: Vec<String> = Vec::new();
    for s in &rep.switches {
        if !switch_kinds.contains(&s.kind) {
            switch_kinds.push(s.kind.clone());
        }
    }
    PaperRow {
        file: file.to_string(),
        source: format!("{origin} {}", rep.b_crit.kind),
        target_loss: rep.horizon.as_ref().map(|h| h.target_loss),
        objective: rep.objective.clone(),
        fastest_baseline: rep.fastest_baseline.clone(),
        speedup_vs_fastest_baseline: rep.speedup_vs_fastest_baseline,
        speedup_vs_hindsight_static: rep.speedup_vs_hindsight_static,
        switches: rep.switches.len(),
        switch_kinds,
        batches,
    }
}

/// A speedup as a signed percentage gain with `decimals` places ("+20.4 %").
pub fn percent(speedup: f64, decimals: usize) -> String {
    format!("{:+.*} %", decimals, (speedup - 1.0) * 100.0)
}

/// The Markdown table (header included). Gains vs the fastest baseline have one decimal, vs
/// hindsight static two.
pub fn render_markdown(rows: &[PaperRow]) -> String {
    let mut o = String::from(
        "| session | B_crit | horizon | objective | vs fastest paper baseline | vs hindsight static | switches | batches of optimal-joint |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let horizon = r
            .target_loss
            .map_or_else(|| "whole run".to_string(), |l| format!("to loss {l}"));
        let switches = if r.switches == 0 {
            "0".to_string()
        } else {
            format!("{} ({})", r.switches, r.switch_kinds.join(", "))
        };
        let b: Vec<String> = r.batches.iter().map(u64::to_string).collect();
        let batches = if b.len() > 5 {
            format!("{} → {} → … → {}", b[0], b[1], b[b.len() - 1])
        } else {
            b.join(" → ")
        };
        let _ = writeln!(
            o,
            "| `{}` | {} | {} | {} | {} ({}) | {} | {} | {} |",
            r.file,
            r.source,
            horizon,
            r.objective,
            percent(r.speedup_vs_fastest_baseline, 1),
            r.fastest_baseline,
            percent(r.speedup_vs_hindsight_static, 2),
            switches,
            batches
        );
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_come_from_state_labels() {
        assert_eq!(label_batch("DP8·TP1·PP1 B=32 (mbs2 Z1 rc:none)"), Some(32));
        assert_eq!(label_batch("DP8·TP1·PP1 B=4096"), Some(4096));
        assert_eq!(label_batch("no batch"), None);
        assert_eq!(percent(1.2049, 1), "+20.5 %");
        assert_eq!(percent(0.99, 2), "-1.00 %");
    }
}
