//! The explorer's what-if settings on the command line of `grid` and `plan`: each row of the
//! what-if that has no other flag (ZeRO stage, CP and EP degrees, B_crit scale, efficiency
//! form, current batch, GEMM plateau, scale-out bandwidth, objective, and for `plan` the
//! switch costs) set to a value, through the same edits the what-if makes
//! (`crate::session_edit`), so that every figure the explorer shows after a what-if change is
//! also available headless.

use crate::app::whatif::{self, Field};
use crate::goodput::StatEffForm;
use crate::plan::Objective;
use crate::plan::costs::ReshardMode;
use crate::session::Resolved;
use clap::Args;

/// What-if settings shared by `grid` and `plan`.
#[derive(Debug, Args, Default)]
pub struct WhatIfArgs {
    /// ZeRO stages to search, comma-separated, 0–3 (the what-if's "ZeRO stage") [default: the
    /// session's `search.zero`, else the stack's own stage]
    #[arg(long, value_delimiter = ',', num_args = 1.., value_parser = clap::value_parser!(u8).range(0..=3))]
    pub zero: Vec<u8>,
    /// Context-parallel degrees to search, comma-separated (`1,2,4`; the what-if's "CP
    /// degrees") [default: the session's `search.context_parallel`]
    #[arg(long, value_delimiter = ',', num_args = 1.., value_name = "DEGREES")]
    pub cp: Vec<u32>,
    /// Expert-parallel degrees to search for a mixture-of-experts model, comma-separated, or
    /// `any` for every degree the layout allows (the what-if's "EP degree") [default: the
    /// session's `search.expert_parallel`]
    #[arg(long, value_delimiter = ',', num_args = 1.., value_parser = parse_ep, value_name = "DEGREES|any")]
    pub ep: Vec<Option<u32>>,
    /// Multiplier on the estimated B_crit (dimensionless; the what-if's "B_crit scale")
    /// [default: the session's `b_crit_scale`]
    #[arg(long, value_name = "FACTOR")]
    pub b_crit_scale: Option<f64>,
    /// Statistical-efficiency form: `mccandlish` (B_crit/(B + B_crit)), `pollux` (reference
    /// batch: the current batch, else the smallest searched) or `pollux:B0` (B0 in samples)
    /// [default: the session's `stat_eff`]
    #[arg(long, value_parser = parse_stat_eff, value_name = "FORM")]
    pub stat_eff: Option<StatEffForm>,
    /// The batch the run uses now, samples: one of the session's `search.batch_sizes` (marked
    /// on the heatmap; `current` and `gain_over_current` in `--json`)
    #[arg(long, value_name = "SAMPLES")]
    pub current_batch: Option<u64>,
    /// GEMM plateau: the fraction of peak that large GEMMs reach (0–1; the what-if's "GEMM
    /// plateau"), laid over the efficiency model in force
    #[arg(long, value_name = "FRACTION")]
    pub gemm_plateau: Option<f64>,
    /// Multiplier on the scale-out (inter-node) bandwidth of the efficiency model in force
    /// (the what-if's "scale-out bw")
    #[arg(long, value_name = "FACTOR")]
    pub inter_link_scale: Option<f64>,
    /// Objective: mccandlish (learning rate re-tuned per batch) or lr-sqrt (tuned at a
    /// reference batch, scaled by √B; `grid` marks the batches where that diverges)
    /// [default: the session's]
    #[arg(long, value_parser = Objective::parse)]
    pub objective: Option<Objective>,
}

/// The what-if's switch-cost settings, for `plan`.
#[derive(Debug, Args, Default)]
pub struct SwitchCostArgs {
    /// Process-group restart on a TP/PP change, seconds (the what-if's "TP/PP restart")
    #[arg(long, value_name = "SECONDS")]
    pub restart_cost: Option<f64>,
    /// Storage bandwidth of the checkpoint written and read on a TP/PP change, bytes/s
    /// (`5e9`; the what-if's "checkpoint bw")
    #[arg(long, value_name = "BYTES_PER_S")]
    pub checkpoint_bw: Option<f64>,
    /// How a TP/PP change is carried out: `checkpoint-restart` or `in-place` (state moved
    /// over the network, 30 s re-initialisation unless the session sets another) (the
    /// what-if's "TP/PP switch")
    #[arg(long, value_parser = parse_reshard, value_name = "MODE")]
    pub reshard: Option<ReshardChoice>,
    /// Smallest predicted gain (0–1) that makes the greedy strategies switch (the what-if's
    /// "switch threshold")
    #[arg(long, value_name = "FRACTION")]
    pub switch_threshold: Option<f64>,
}

/// A `--reshard` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReshardChoice {
    /// Write and read a checkpoint, restart.
    CheckpointRestart,
    /// Move the state over the network.
    InPlace,
}

fn parse_ep(s: &str) -> Result<Option<u32>, String> {
    if s == "any" {
        return Ok(None);
    }
    s.parse::<u32>()
        .map(Some)
        .map_err(|_| format!("'{s}': a whole number of GPUs, or `any`"))
}

fn parse_stat_eff(s: &str) -> Result<StatEffForm, String> {
    match s.split_once(':') {
        None if s == "mccandlish" => Ok(StatEffForm::McCandlish),
        // Resolved against the session once it is loaded (see `WhatIfArgs::apply`).
        None if s == "pollux" => Ok(StatEffForm::Pollux { b0: f64::NAN }),
        Some(("pollux", b0)) => match b0.parse::<f64>() {
            Ok(b) if b.is_finite() && b > 0.0 => Ok(StatEffForm::Pollux { b0: b }),
            _ => Err(format!(
                "'{b0}': Pollux's reference batch is a positive number of samples"
            )),
        },
        _ => Err(format!(
            "'{s}': expected mccandlish, pollux or pollux:B0 (B0 in samples)"
        )),
    }
}

fn parse_reshard(s: &str) -> Result<ReshardChoice, String> {
    match s {
        "checkpoint-restart" => Ok(ReshardChoice::CheckpointRestart),
        "in-place" => Ok(ReshardChoice::InPlace),
        _ => Err(format!("'{s}': expected checkpoint-restart or in-place")),
    }
}

/// Record one flag's change: the flag as given and the row's value before and after, in the
/// what-if's words.
struct Changes {
    flags: Vec<String>,
    changed: Vec<String>,
}

impl Changes {
    fn new() -> Self {
        Self {
            flags: Vec::new(),
            changed: Vec::new(),
        }
    }

    /// Apply `edit` for `flag`, noting the `field`'s value before and after.
    fn edit(
        &mut self,
        r: &mut Resolved,
        flag: String,
        field: Field,
        edit: impl FnOnce(&mut Resolved),
    ) {
        let before = whatif::value(r, field);
        edit(r);
        let after = whatif::value(r, field);
        let unused = whatif::without_effect(r, field);
        if after != before {
            let unused = unused
                .map(|why| format!(": without effect here, {why}"))
                .unwrap_or_default();
            self.changed.push(format!(
                "{} to {after} (was {before}){unused}",
                field.label()
            ));
        } else if let Some(why) = unused {
            self.changed.push(format!(
                "{flag} ({}) is without effect here: {why}",
                field.label()
            ));
        }
        self.flags.push(flag);
    }

    /// Check the session as edited (an error names the flags) and note what changed.
    fn finish(self, r: &mut Resolved) -> anyhow::Result<()> {
        if self.flags.is_empty() {
            return Ok(());
        }
        crate::validate::session::check(r)
            .map_err(|e| anyhow::anyhow!("{}: {e}", self.flags.join(" ")))?;
        if !self.changed.is_empty() {
            r.override_notes.push(format!(
                "the command line set {} ({})",
                self.changed.join(", "),
                self.flags.join(" ")
            ));
        }
        Ok(())
    }
}

fn list<T: std::fmt::Display>(values: &[T]) -> String {
    values
        .iter()
        .map(T::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

impl WhatIfArgs {
    /// Set what the flags name on `r`, as the explorer's what-if sets it; the changes are a
    /// note in `r.override_notes`. A value the session cannot hold (a current batch off the
    /// searched batches, a plateau above 1) is an error naming the flag.
    pub fn apply(&self, r: &mut Resolved) -> anyhow::Result<()> {
        let mut c = Changes::new();
        // First: it decides whether the efficiency form below has an effect.
        if let Some(o) = self.objective {
            c.edit(
                r,
                format!("--objective {}", o.name()),
                Field::Objective,
                |r| r.session.planner.objective = o,
            );
        }
        if !self.zero.is_empty() {
            let mut stages = self.zero.clone();
            stages.dedup();
            c.edit(
                r,
                format!("--zero {}", list(&self.zero)),
                Field::Zero,
                |r| r.search_zero(stages),
            );
        }
        if !self.cp.is_empty() {
            let degrees = self.cp.clone();
            c.edit(
                r,
                format!("--cp {}", list(&self.cp)),
                Field::ContextParallel,
                |r| r.session.search.context_parallel = degrees,
            );
        }
        if !self.ep.is_empty() {
            let any = self.ep.contains(&None);
            anyhow::ensure!(
                !any || self.ep.len() == 1,
                "--ep: `any` stands alone (every degree the layout allows)"
            );
            let degrees: Vec<u32> = self.ep.iter().flatten().copied().collect();
            let text = if any { "any".into() } else { list(&degrees) };
            c.edit(r, format!("--ep {text}"), Field::ExpertParallel, |r| {
                r.session.search.expert_parallel = degrees
            });
        }
        if let Some(b) = self.current_batch {
            c.edit(
                r,
                format!("--current-batch {b}"),
                Field::CurrentBatch,
                |r| r.session.current_batch = Some(b),
            );
        }
        if let Some(x) = self.b_crit_scale {
            c.edit(r, format!("--b-crit-scale {x}"), Field::BCritScale, |r| {
                r.set_b_crit_scale(x)
            });
        }
        if let Some(form) = self.stat_eff {
            let flag = match form {
                StatEffForm::McCandlish => "--stat-eff mccandlish".to_string(),
                StatEffForm::Pollux { b0 } if b0.is_nan() => "--stat-eff pollux".into(),
                StatEffForm::Pollux { b0 } => format!("--stat-eff pollux:{b0}"),
            };
            c.edit(r, flag, Field::StatEff, |r| {
                r.session.stat_eff = match form {
                    StatEffForm::Pollux { b0 } if b0.is_nan() => r.pollux_at_current_batch(),
                    other => other,
                }
            });
        }
        if let Some(x) = self.gemm_plateau {
            c.edit(r, format!("--gemm-plateau {x}"), Field::GemmPlateau, |r| {
                r.edit_efficiency(|e| e.max_eff = x)
            });
        }
        if let Some(x) = self.inter_link_scale {
            c.edit(
                r,
                format!("--inter-link-scale {x}"),
                Field::InterLinkScale,
                |r| r.edit_efficiency(|e| e.inter_link_scale = x),
            );
        }
        c.finish(r)
    }
}

impl SwitchCostArgs {
    /// Set the switch costs the flags name on `r`, as the what-if sets them (see
    /// [`WhatIfArgs::apply`]).
    pub fn apply(&self, r: &mut Resolved) -> anyhow::Result<()> {
        let mut c = Changes::new();
        if let Some(s) = self.restart_cost {
            c.edit(r, format!("--restart-cost {s}"), Field::RestartCost, |r| {
                r.session.costs.restart_s = s
            });
        }
        if let Some(bw) = self.checkpoint_bw {
            c.edit(
                r,
                format!("--checkpoint-bw {bw}"),
                Field::CheckpointBandwidth,
                |r| r.session.costs.checkpoint_bw_bytes_per_s = bw,
            );
        }
        if let Some(mode) = self.reshard {
            let flag = match mode {
                ReshardChoice::CheckpointRestart => "--reshard checkpoint-restart",
                ReshardChoice::InPlace => "--reshard in-place",
            };
            c.edit(r, flag.into(), Field::Reshard, |r| {
                let costs = &mut r.session.costs;
                costs.reshard = match (mode, &costs.reshard) {
                    (ReshardChoice::CheckpointRestart, _) => ReshardMode::CheckpointRestart,
                    // The session's own in-place settings stay.
                    (ReshardChoice::InPlace, kept @ ReshardMode::InPlace { .. }) => kept.clone(),
                    (ReshardChoice::InPlace, ReshardMode::CheckpointRestart) => {
                        ReshardMode::InPlace {
                            network_bw_bytes_per_s: None,
                            reinit_s: whatif::IN_PLACE_REINIT_S,
                        }
                    }
                }
            });
        }
        if let Some(t) = self.switch_threshold {
            c.edit(
                r,
                format!("--switch-threshold {t}"),
                Field::SwitchThreshold,
                |r| r.session.costs.switch_threshold = t,
            );
        }
        c.finish(r)
    }
}
