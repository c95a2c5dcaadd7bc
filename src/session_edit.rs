//! Edits of a resolved session that the explorer's what-if and the command line of `grid` and
//! `plan` both make: one definition, so that `copus grid --b-crit-scale 2 --json` prints what
//! the explorer shows after the same change in its what-if.

use crate::goodput::StatEffForm;
use crate::perf::EfficiencyParams;
use crate::plan::costs::ReshardMode;
use crate::session::Resolved;

/// Re-initialisation after an in-place TP/PP change when a session is switched to it (the
/// what-if, `plan --reshard in-place`), seconds.
pub const IN_PLACE_REINIT_S: f64 = 30.0;

impl Resolved {
    /// Search exactly these ZeRO stages (0–3). Chosen by hand, they no longer follow the
    /// stack (a session without a `zero` list searches its stack's own stage) nor give way
    /// to another framework's stages as the session file's list would.
    pub fn search_zero(&mut self, stages: Vec<u8>) {
        self.session.search.zero = stages;
        self.zero_from_stack = false;
        self.zero_from_file = false;
    }

    /// Multiply the estimated B_crit by `scale` (dimensionless) on the heatmap and in the
    /// planner. A scale set by hand is no longer the measured conversion a source named: its
    /// range is cleared and its source says it was set by hand (`plan` credited a typed 0.5
    /// to "session b_crit_scale (no source given)" and a typed 1 to "default").
    pub fn set_b_crit_scale(&mut self, scale: f64) {
        self.session.b_crit_scale = scale;
        self.session.planner.b_crit_scale_source =
            Some("set by hand (--b-crit-scale, or the what-if's B_crit scale)".into());
        self.session.planner.b_crit_scale_range = None;
    }

    /// The Pollux efficiency form with its reference batch `b0` (samples) at the batch the
    /// user runs now, else the smallest batch searched: the what-if's choice of Pollux.
    pub fn pollux_at_current_batch(&self) -> StatEffForm {
        let s = &self.session;
        let first = s.search.batch_sizes.first().copied().unwrap_or(1);
        StatEffForm::Pollux {
            b0: s.current_batch.unwrap_or(first) as f64,
        }
    }

    /// Carry out TP/PP changes in place (`true`) or by checkpoint and restart. Switched to in
    /// place, a session's own in-place settings stay; otherwise the state moves over the fast
    /// network and re-initialisation takes [`IN_PLACE_REINIT_S`].
    pub fn set_reshard_in_place(&mut self, in_place: bool) {
        let costs = &mut self.session.costs;
        costs.reshard = match (in_place, &costs.reshard) {
            (false, _) => ReshardMode::CheckpointRestart,
            (true, kept @ ReshardMode::InPlace { .. }) => kept.clone(),
            (true, ReshardMode::CheckpointRestart) => ReshardMode::InPlace {
                network_bw_bytes_per_s: None,
                reinit_s: IN_PLACE_REINIT_S,
            },
        };
    }

    /// Change parameters of the efficiency model in force (the session's own, the
    /// calibration's or the hardware profile's), keeping the rest: the result becomes the
    /// session's own efficiency model, which takes precedence over a calibration (edited from
    /// a calibration in force, outputs still name it:
    /// [`Resolved::efficiency_edited_from_calibration`]).
    pub fn edit_efficiency(&mut self, edit: impl FnOnce(&mut EfficiencyParams)) {
        if self.session.efficiency.is_none() && self.use_calibration && self.calibration.is_some() {
            self.efficiency_edited_from_calibration = true;
        }
        let mut e = self.efficiency();
        edit(&mut e);
        self.session.efficiency = Some(e);
    }
}
