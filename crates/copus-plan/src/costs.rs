//! Reconfiguration costs by kind of switch, set per session.
//!
//! Three kinds of switch, ordered by how much of the job they disturb:
//! - [`SwitchKind::Batch`]: same 3D layout (dp, tp, pp); only the global batch size (and with it
//!   the micro-batch / recompute options the table picked) changes — data loader and learning
//!   rate rescale, no regrouping.
//! - [`SwitchKind::DpResize`]: same (tp, pp), different dp — data-parallel groups are rebuilt.
//!   On a fixed cluster every layout uses all GPUs, so dp is fixed by (tp, pp) and this kind only
//!   appears in elastic or synthetic instances.
//! - [`SwitchKind::Reshard`]: tp, pp, cp, ep or the ZeRO stage changes — the model and
//!   optimizer state is resharded
//!   either by writing and reading a checkpoint at the storage bandwidth, then process groups
//!   restart and the job warms up ([`ReshardMode::CheckpointRestart`]), or in place
//!   ([`ReshardMode::InPlace`], as the COPUS paper does): the state is sent over the fast
//!   network to its new owners and the job re-initialises its process groups and buffers.
//!
//! The reshard cost depends only on the model size, which is fixed for a session, so every
//! kind has one constant cost per session. A checkpoint-restart can perform any change, so the
//! *effective* cost of a kind is the cheapest mechanism able to perform it (see
//! [`SwitchCosts::effective`]); this keeps costs ordered Batch ≤ DpResize ≤ Reshard, which the
//! dynamic programme relies on to stay exact with per-group minima.

use serde::{Deserialize, Serialize};

/// What a switch between two (batch, configuration) points costs, seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ReconfigCosts {
    /// Changing only the global batch size (data loader, lr rescale), seconds.
    pub batch_only_s: f64,
    /// Resizing data parallelism (regrouping processes), seconds.
    pub dp_resize_s: f64,
    /// Aggregate storage bandwidth for the checkpoint written and read on a TP/PP change,
    /// bytes/s.
    pub checkpoint_bw_bytes_per_s: f64,
    /// Process-group restart on a TP/PP change, seconds.
    pub restart_s: f64,
    /// Warm-up after a TP/PP change (compilation, allocator, data pipeline), seconds.
    pub warmup_s: f64,
    /// Minimum time between two switches, in phases (a switch may happen at phase boundary k
    /// only if the previous switch, or the start, is at least this many phases earlier).
    pub min_dwell_phases: u32,
    /// Checkpointed bytes per parameter: bf16 weights (2) + fp32 master weights (4) + Adam
    /// moments (4 + 4) = 14 bytes by default (gradients are not checkpointed).
    pub checkpoint_bytes_per_param: f64,
    /// How often the seed's greedy-joint strategy re-checks the argmax, in phases; `None`
    /// means every `min_dwell_phases` phases.
    pub greedy_every_phases: Option<u32>,
    /// Goodput gain (fraction) a greedy switch (batch-adaptive, greedy-joint) must predict in
    /// the phase it is considered at, e.g. 0.05 as Pollux (Qiao et al. 2021, arXiv 2008.12260).
    #[serde(alias = "batch_adaptive_threshold")]
    pub switch_threshold: f64,
    /// How a TP/PP change moves the state.
    pub reshard: ReshardMode,
}

/// How a TP/PP change (reshard) is carried out.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub enum ReshardMode {
    /// Write and read a checkpoint at `checkpoint_bw_bytes_per_s`, restart, warm up.
    #[default]
    CheckpointRestart,
    /// Move the checkpointed bytes over the fast network, then re-initialise.
    InPlace {
        /// Aggregate bandwidth of the move, bytes/s; `None`: every GPU at its fast-network
        /// bandwidth (NVLink within a node, the inter-node NIC across nodes).
        #[serde(default)]
        network_bw_bytes_per_s: Option<f64>,
        /// Re-initialising process groups, buffers and the data pipeline, seconds.
        reinit_s: f64,
    },
}

impl ReshardMode {
    /// "checkpoint-restart" or "in-place".
    pub fn name(&self) -> &'static str {
        match self {
            ReshardMode::CheckpointRestart => "checkpoint-restart",
            ReshardMode::InPlace { .. } => "in-place",
        }
    }
}

impl Default for ReconfigCosts {
    fn default() -> Self {
        Self {
            batch_only_s: 1.0,
            dp_resize_s: 30.0,
            checkpoint_bw_bytes_per_s: 5e9,
            restart_s: 60.0,
            warmup_s: 60.0,
            min_dwell_phases: 1,
            checkpoint_bytes_per_param: 14.0,
            greedy_every_phases: None,
            switch_threshold: 0.05,
            reshard: ReshardMode::CheckpointRestart,
        }
    }
}

impl ReconfigCosts {
    /// Seconds to write and read back a checkpoint of `params` parameters.
    pub fn checkpoint_s(&self, params: f64) -> f64 {
        2.0 * params * self.checkpoint_bytes_per_param / self.checkpoint_bw_bytes_per_s
    }

    /// The constant per-kind costs of a session whose model has `params` parameters, with
    /// in-place resharding (if chosen) at its own bandwidth or, when it has none, at infinite
    /// bandwidth (re-initialisation only).
    pub fn switch_costs(&self, params: f64) -> SwitchCosts {
        self.switch_costs_on(params, f64::INFINITY)
    }

    /// [`Self::switch_costs`] with `fast_network_bw` (aggregate bytes/s) for an in-place
    /// reshard that sets no bandwidth of its own.
    pub fn switch_costs_on(&self, params: f64, fast_network_bw: f64) -> SwitchCosts {
        let reshard_s = match &self.reshard {
            ReshardMode::CheckpointRestart => {
                self.checkpoint_s(params) + self.restart_s + self.warmup_s
            }
            ReshardMode::InPlace {
                network_bw_bytes_per_s,
                reinit_s,
            } => {
                let bw = network_bw_bytes_per_s.unwrap_or(fast_network_bw);
                params * self.checkpoint_bytes_per_param / bw + reinit_s
            }
        };
        SwitchCosts {
            batch_s: self.batch_only_s,
            dp_resize_s: self.dp_resize_s,
            reshard_s,
        }
    }

    /// Check that every cost is a finite non-negative number and the bandwidth is positive.
    pub fn validate(&self) -> Result<(), String> {
        let named = [
            ("batch_only_s", self.batch_only_s),
            ("dp_resize_s", self.dp_resize_s),
            ("restart_s", self.restart_s),
            ("warmup_s", self.warmup_s),
            (
                "checkpoint_bytes_per_param",
                self.checkpoint_bytes_per_param,
            ),
            ("switch_threshold", self.switch_threshold),
        ];
        for (name, v) in named {
            if !(v.is_finite() && v >= 0.0) {
                return Err(format!("costs.{name} must be finite and ≥ 0, got {v}"));
            }
        }
        let bw = self.checkpoint_bw_bytes_per_s;
        if !(bw.is_finite() && bw > 0.0) {
            return Err(format!(
                "costs.checkpoint_bw_bytes_per_s must be positive, got {bw}"
            ));
        }
        if let ReshardMode::InPlace {
            network_bw_bytes_per_s,
            reinit_s,
        } = &self.reshard
        {
            if !(reinit_s.is_finite() && *reinit_s >= 0.0) {
                return Err(format!(
                    "costs.reshard.reinit_s must be finite and ≥ 0, got {reinit_s}"
                ));
            }
            if let Some(bw) = network_bw_bytes_per_s
                && !(bw.is_finite() && *bw > 0.0)
            {
                return Err(format!(
                    "costs.reshard.network_bw_bytes_per_s must be positive, got {bw}"
                ));
            }
        }
        Ok(())
    }
}

/// The kind of a switch between two planner states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SwitchKind {
    /// Same 3D layout; batch size (and micro-batch options) change.
    Batch,
    /// Same (tp, pp); data-parallel degree changes.
    DpResize,
    /// Tensor- or pipeline-parallel degree changes: checkpoint, restart, warm-up.
    Reshard,
}

impl SwitchKind {
    /// Kebab-case name used in reports ("batch", "dp-resize", "reshard").
    pub fn name(self) -> &'static str {
        match self {
            SwitchKind::Batch => "batch",
            SwitchKind::DpResize => "dp-resize",
            SwitchKind::Reshard => "reshard",
        }
    }
}

/// One constant cost per switch kind, seconds (resolved for a session's model size).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SwitchCosts {
    /// Batch-only switch, seconds.
    pub batch_s: f64,
    /// DP resize, seconds.
    pub dp_resize_s: f64,
    /// TP/PP change (checkpoint write + read, restart, warm-up), seconds.
    pub reshard_s: f64,
}

impl SwitchCosts {
    /// Every switch costs `s` seconds.
    pub fn uniform(s: f64) -> Self {
        Self {
            batch_s: s,
            dp_resize_s: s,
            reshard_s: s,
        }
    }

    /// Costs made monotone (Batch ≤ DpResize ≤ Reshard) by letting each kind use the cheapest
    /// mechanism that can perform it: a reshard can do anything, a DP resize can change the batch.
    pub fn effective(&self) -> Self {
        let reshard_s = self.reshard_s.max(0.0);
        let dp_resize_s = self.dp_resize_s.max(0.0).min(reshard_s);
        let batch_s = self.batch_s.max(0.0).min(dp_resize_s);
        Self {
            batch_s,
            dp_resize_s,
            reshard_s,
        }
    }

    /// Cost of a switch of `kind`, seconds (as stored; call on [`Self::effective`] values).
    pub fn of(&self, kind: SwitchKind) -> f64 {
        match kind {
            SwitchKind::Batch => self.batch_s,
            SwitchKind::DpResize => self.dp_resize_s,
            SwitchKind::Reshard => self.reshard_s,
        }
    }
}
