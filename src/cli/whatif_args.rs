//! The explorer's what-if settings on the command line of `grid` and `plan`: each row of the
//! what-if that has no other flag (ZeRO stage, CP and EP degrees, B_crit scale, efficiency
//! form, current batch, GEMM plateau, scale-out bandwidth, objective, and for `plan` the
//! switch costs) set to a value, through the same edits the what-if makes
//! (`crate::session_edit`), so that every figure the explorer shows after a what-if change is
//! also available headless.

use crate::app::whatif::{self, Field};
use crate::goodput::StatEffForm;
use crate::plan::Objective;
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
    /// Multiplier on the estimated B_crit, 1e-6 to 1e6 (dimensionless; the what-if's "B_crit
    /// scale") [default: the session's `b_crit_scale`, 1 unless it says]
    #[arg(long, value_name = "FACTOR", allow_hyphen_values = true)]
    pub b_crit_scale: Option<f64>,
    /// Statistical-efficiency form: `mccandlish` (B_crit/(B + B_crit)), `pollux` (reference
    /// batch: the current batch, else the smallest searched) or `pollux:B0` (B0 in samples)
    /// [default: the session's `stat_eff`]
    #[arg(long, value_parser = parse_stat_eff, value_name = "FORM")]
    pub stat_eff: Option<StatEffForm>,
    /// The batch the run uses now, samples: one of the session's `search.batch_sizes` (marked
    /// on the heatmap; `current` and `gain_over_current` in `--json`) [default: the session's
    /// `current_batch`, else for a run the batch its records imply]
    #[arg(long, value_name = "SAMPLES")]
    pub current_batch: Option<u64>,
    /// GEMM plateau: the fraction of peak that large BF16 GEMMs reach, from 0.01 to 1 (the
    /// what-if's "GEMM plateau", which steps from 0.3 to 0.9), laid over the efficiency model
    /// in force; the FP8 plateau moves by the same factor [default: that model's, e.g. 0.66
    /// for h100-sxm]
    #[arg(long, value_name = "FRACTION", allow_hyphen_values = true)]
    pub gemm_plateau: Option<f64>,
    /// Multiplier on the scale-out (inter-node) bandwidth of the efficiency model in force,
    /// 0.001 to 100 (the what-if's "scale-out bw") [default: that model's, 1 for a profile]
    #[arg(long, value_name = "FACTOR", allow_hyphen_values = true)]
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
    /// Process-group restart on a TP/PP change, seconds, with checkpoint-and-restart switches
    /// (the what-if's "TP/PP restart") [default: the session's `costs.restart_s`, 60]
    #[arg(long, value_name = "SECONDS", allow_hyphen_values = true)]
    pub restart_cost: Option<f64>,
    /// Storage bandwidth of the checkpoint written and read on a TP/PP change, bytes/s
    /// (`5e9`), with checkpoint-and-restart switches (the what-if's "checkpoint bw")
    /// [default: the session's `costs.checkpoint_bw_bytes_per_s`, 5e9]
    #[arg(long, value_name = "BYTES_PER_S", allow_hyphen_values = true)]
    pub checkpoint_bw: Option<f64>,
    /// How a TP/PP change is carried out: `checkpoint-restart` or `in-place` (state moved
    /// over the network, 30 s re-initialisation unless the session sets another) (the
    /// what-if's "TP/PP switch") [default: the session's `costs.reshard`,
    /// checkpoint-restart]
    #[arg(long, value_parser = parse_reshard, value_name = "MODE")]
    pub reshard: Option<ReshardChoice>,
    /// Smallest predicted gain (0–1) that makes the greedy strategies switch (the what-if's
    /// "switch threshold") [default: the session's `costs.switch_threshold`, 0.05]
    #[arg(long, value_name = "FRACTION", allow_hyphen_values = true)]
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

/// Which command the flags are given to: a flag can change one and not the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// `copus grid`.
    Grid,
    /// `copus plan`.
    Plan,
}

/// The flags given, the changes they made (in the what-if's words) and those that can change
/// nothing here.
struct Changes {
    command: Command,
    flags: Vec<String>,
    changed: Vec<String>,
    without_effect: Vec<String>,
}

/// Everything of `r` a command computes with, to tell whether a flag changed it (the display
/// strings round: a plateau of 0.66 against 0.6615 reads "66%" both times).
fn fingerprint(r: &Resolved) -> String {
    // The efficiency in force, not whether the session writes it out (a flag that sets a
    // parameter to its value makes it the session's own, changing nothing).
    let mut session = r.session.clone();
    session.efficiency = None;
    format!("{session:?}|{:?}", r.efficiency())
}

impl Changes {
    fn new(command: Command) -> Self {
        Self {
            command,
            flags: Vec::new(),
            changed: Vec::new(),
            without_effect: Vec::new(),
        }
    }

    /// The value of `field` in `r` as the note says it.
    fn value(r: &Resolved, field: Field) -> String {
        match field {
            Field::CurrentBatch
                if r.session.current_batch.is_none()
                    && !matches!(r.session.source, crate::session::DataSource::Scenario(_)) =>
            {
                "the batch the run's records imply".to_string()
            }
            _ => whatif::value(r, field),
        }
    }

    /// Apply `edit` for `flag` (the flag and its value as text), noting the `field`'s value
    /// before and after, or that it cannot change anything here.
    fn edit(
        &mut self,
        r: &mut Resolved,
        flag: String,
        field: Field,
        edit: impl FnOnce(&mut Resolved),
    ) {
        let before = Self::value(r, field);
        let state = fingerprint(r);
        edit(r);
        let after = Self::value(r, field);
        let unused = match (self.command, field) {
            (Command::Plan, Field::StatEff) => Some(
                "the planner weighs batches by its objective (--objective), not by the \
                 heatmap's efficiency form",
            ),
            _ => whatif::without_effect(r, field),
        };
        if let Some(why) = unused {
            self.without_effect
                .push(format!("{flag} ({}): {why}", field.label()));
        } else if after != before {
            self.changed
                .push(format!("{} to {after} (was {before})", field.label()));
        } else if fingerprint(r) != state {
            // A change below the display's rounding: said with the value as given.
            self.changed.push(format!(
                "{} by {flag} (was {before}, the same when rounded)",
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
        // The session was valid before these flags: what is wrong now is their values.
        crate::validate::session::check(r)
            .map_err(|e| super::FlagValueError(format!("{}: {e}", self.flags.join(" "))))?;
        if !self.changed.is_empty() {
            r.override_notes.push(format!(
                "the command line set {} ({})",
                self.changed.join(", "),
                self.flags.join(" ")
            ));
        }
        for unused in self.without_effect {
            r.override_notes
                .push(format!("without effect here: {unused}"));
        }
        Ok(())
    }
}

/// `x` within `range` (what a flag can mean), or an error naming the flag and the range.
fn bounded(
    flag: &str,
    x: f64,
    range: std::ops::RangeInclusive<f64>,
    what: &str,
) -> anyhow::Result<()> {
    if !range.contains(&x) {
        return Err(super::FlagValueError(format!("{flag} {}: {what}", num(x))).into());
    }
    Ok(())
}

/// A flag's number as text: plain, or in exponent form when very large or small (`1e300`, not
/// three hundred digits).
fn num(x: f64) -> String {
    if x != 0.0 && x.is_finite() && !(1e-3..1e6).contains(&x.abs()) {
        format!("{x:e}")
    } else {
        format!("{x}")
    }
}

fn list<T: std::fmt::Display>(values: &[T]) -> String {
    values
        .iter()
        .map(T::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// `values` sorted, without repeats.
fn sorted<T: Ord + Copy>(values: &[T]) -> Vec<T> {
    let mut v = values.to_vec();
    v.sort_unstable();
    v.dedup();
    v
}

/// Each CP degree of `cp` lays out at least one layout of the cluster: a degree that can never
/// run is an error naming the flag (it would leave the grid without its rows and the planner
/// with nothing to plan).
fn check_cp(r: &Resolved, cp: &[u32]) -> anyhow::Result<()> {
    let eff = r.efficiency();
    let ctx = r.perf_context(&eff);
    let cluster = r.cluster();
    let layouts = crate::goodput::layouts(&ctx, &cluster, &r.session.search);
    let seq = r.model.seq_len;
    for &d in cp {
        // The sequence first: it is the usual reason, and the GPU count would be wrongly blamed.
        anyhow::ensure!(
            d <= 1 || seq.is_multiple_of(2 * d),
            "--cp {d}: the sequence ({seq} tokens) is not divisible by 2·cp = {} (context \
             parallelism cuts each sequence into 2·cp load-balanced chunks); choose a CP \
             degree that divides {seq}/2",
            2 * d
        );
        anyhow::ensure!(
            layouts.iter().any(|l| l.cp == d),
            "--cp {d}: no layout of the {} GPUs splits sequences {d} ways (a CP degree must \
             divide the GPUs, and the rest must split into DP, TP and PP the model allows)",
            cluster.gpus()
        );
    }
    Ok(())
}

/// Each EP degree of `ep` is one the model's experts and the GPUs allow; on a dense model
/// any degree but 1 (how it runs already) is an error naming the flag (every cell would be ×).
fn check_ep(r: &Resolved, ep: &[u32]) -> anyhow::Result<()> {
    if ep.is_empty() {
        return Ok(());
    }
    let Some(moe) = &r.model.moe else {
        // EP 1 is how a dense model runs already: allowed (and noted as without effect),
        // as `--ep any` is.
        if ep == [1] {
            return Ok(());
        }
        anyhow::bail!(
            "--ep {}: {} is dense; expert parallelism splits a mixture of experts (leave --ep \
             out, or `--ep any`)",
            list(ep),
            r.model.name
        );
    };
    let gpus = r.cluster().gpus();
    for &d in ep {
        anyhow::ensure!(
            d >= 1 && moe.experts.is_multiple_of(d) && gpus.is_multiple_of(d),
            "--ep {d}: an expert-parallel degree must divide the {} experts of {} and the {gpus} \
             GPUs",
            moe.experts,
            r.model.name
        );
    }
    Ok(())
}

impl WhatIfArgs {
    /// Set what the flags name on `r`, as the explorer's what-if sets it, for `command`; the
    /// changes (and the flags that can change nothing there) are notes in
    /// `r.override_notes`. A value the session cannot hold (a current batch off the searched
    /// batches, a plateau above 1, a CP or EP degree no layout runs) is an error naming the
    /// flag.
    pub fn apply(&self, r: &mut Resolved, command: Command) -> anyhow::Result<()> {
        // Every error here is about a flag's value: exit status 2 (docs/RELIABILITY.md).
        super::as_flag_error(self.set_on(r, command))
    }

    /// [`WhatIfArgs::apply`]'s work, its errors as they come.
    fn set_on(&self, r: &mut Resolved, command: Command) -> anyhow::Result<()> {
        let mut c = Changes::new(command);
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
            let stages = sorted(&self.zero);
            c.edit(r, format!("--zero {}", list(&stages)), Field::Zero, |r| {
                r.search_zero(stages.clone())
            });
        }
        let cp = sorted(&self.cp);
        if !cp.is_empty() {
            c.edit(
                r,
                format!("--cp {}", list(&cp)),
                Field::ContextParallel,
                |r| r.session.search.context_parallel = cp.clone(),
            );
        }
        if !self.ep.is_empty() {
            let any = self.ep.contains(&None);
            anyhow::ensure!(
                !any || self.ep.len() == 1,
                "--ep: `any` stands alone (every degree the layout allows)"
            );
            let degrees = sorted(&self.ep.iter().flatten().copied().collect::<Vec<_>>());
            check_ep(r, &degrees)?;
            let text = if any { "any".into() } else { list(&degrees) };
            c.edit(r, format!("--ep {text}"), Field::ExpertParallel, |r| {
                // A dense model keeps its search as it is (`--ep 1` or `any`: nothing to split).
                if r.model.moe.is_some() {
                    r.session.search.expert_parallel = degrees
                }
            });
        }
        if let Some(b) = self.current_batch {
            // The grid's batch axis: the session's batches and the multiples of the GPU count
            // it adds beside them (a run's batch on 24 GPUs is such a multiple).
            let searched = crate::goodput::batch_axis(&r.session.search, &r.cluster());
            anyhow::ensure!(
                searched.contains(&b),
                "--current-batch {b}: not one of the batch sizes searched ({}); pick one of them",
                list(&searched)
            );
            c.edit(
                r,
                format!("--current-batch {b}"),
                Field::CurrentBatch,
                |r| {
                    // One the grid added: listed with the session's own, as it is on the axis.
                    let listed = &mut r.session.search.batch_sizes;
                    if let Err(at) = listed.binary_search(&b) {
                        listed.insert(at, b);
                    }
                    r.session.current_batch = Some(b)
                },
            );
        }
        if let Some(x) = self.b_crit_scale {
            c.edit(
                r,
                format!("--b-crit-scale {}", num(x)),
                Field::BCritScale,
                |r| r.set_b_crit_scale(x),
            );
        }
        if let Some(form) = self.stat_eff {
            let flag = match form {
                StatEffForm::McCandlish => "--stat-eff mccandlish".to_string(),
                StatEffForm::Pollux { b0 } if b0.is_nan() => "--stat-eff pollux".into(),
                StatEffForm::Pollux { b0 } => format!("--stat-eff pollux:{}", num(b0)),
            };
            c.edit(r, flag, Field::StatEff, |r| {
                r.session.stat_eff = match form {
                    StatEffForm::Pollux { b0 } if b0.is_nan() => r.pollux_at_current_batch(),
                    other => other,
                }
            });
        }
        if let Some(x) = self.gemm_plateau {
            // What a GEMM reaches on any GPU copus knows lies far above 1 % of peak; below it
            // every figure is noise (a plateau of 1e-300 gave 0 tokens/s and a +423 % gain).
            bounded(
                "--gemm-plateau",
                x,
                0.01..=1.0,
                "a fraction of peak from 0.01 to 1",
            )?;
            c.edit(
                r,
                format!("--gemm-plateau {}", num(x)),
                Field::GemmPlateau,
                |r| r.edit_efficiency(|e| e.set_gemm_plateau(x)),
            );
        }
        if let Some(x) = self.inter_link_scale {
            let flag = format!("--inter-link-scale {}", num(x));
            c.edit(r, flag, Field::InterLinkScale, |r| {
                r.edit_efficiency(|e| e.inter_link_scale = x)
            });
        }
        c.finish(r)?;
        // After the session is checked: the layouts need a valid cluster and model.
        check_cp(r, &cp)
    }
}

impl SwitchCostArgs {
    /// Set the switch costs the flags name on `r`, as the what-if sets them (see
    /// [`WhatIfArgs::apply`]).
    pub fn apply(&self, r: &mut Resolved) -> anyhow::Result<()> {
        super::as_flag_error(self.set_on(r))
    }

    /// [`SwitchCostArgs::apply`]'s work, its errors as they come.
    fn set_on(&self, r: &mut Resolved) -> anyhow::Result<()> {
        let mut c = Changes::new(Command::Plan);
        // First: it decides whether the restart and checkpoint costs below have an effect.
        if let Some(mode) = self.reshard {
            let flag = match mode {
                ReshardChoice::CheckpointRestart => "--reshard checkpoint-restart",
                ReshardChoice::InPlace => "--reshard in-place",
            };
            c.edit(r, flag.into(), Field::Reshard, |r| {
                r.set_reshard_in_place(mode == ReshardChoice::InPlace)
            });
        }
        if let Some(s) = self.restart_cost {
            bounded(
                "--restart-cost",
                s,
                0.0..=1e6,
                "seconds from 0 to 1e6 (about 12 days)",
            )?;
            c.edit(
                r,
                format!("--restart-cost {}", num(s)),
                Field::RestartCost,
                |r| r.session.costs.restart_s = s,
            );
        }
        if let Some(bw) = self.checkpoint_bw {
            bounded(
                "--checkpoint-bw",
                bw,
                1e6..=1e13,
                "bytes/s from 1e6 (1 MB/s) to 1e13",
            )?;
            let flag = format!("--checkpoint-bw {}", num(bw));
            c.edit(r, flag, Field::CheckpointBandwidth, |r| {
                r.session.costs.checkpoint_bw_bytes_per_s = bw
            });
        }
        if let Some(t) = self.switch_threshold {
            let flag = format!("--switch-threshold {}", num(t));
            c.edit(r, flag, Field::SwitchThreshold, |r| {
                r.session.costs.switch_threshold = t
            });
        }
        c.finish(r)
    }
}
