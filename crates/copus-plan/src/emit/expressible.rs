//! What each framework can express of a configuration, whatever its batch: the checks every
//! emitter makes before it writes a phase, and the filter `plan --emit` searches under, so
//! that the plan it writes is one the framework runs.

use super::EmitTarget;
use crate::perf::config::ParallelConfig;
use crate::perf::efficiency::StageSplit;
use crate::perf::memory::split_layers;
use crate::perf::stack::StackSettingsJson;

/// The parts of a configuration the frameworks' settings are checked on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfigShape<'a> {
    /// Tensor-parallel degree.
    pub tp: u32,
    /// Pipeline-parallel degree.
    pub pp: u32,
    /// Virtual pipeline stages per GPU (1: not interleaved).
    pub vpp: u32,
    /// Context-parallel degree.
    pub cp: u32,
    /// Expert-parallel degree (1: none).
    pub ep: u32,
    /// ZeRO stage 0–3.
    pub zero: u8,
    /// Activation recomputation: "none", "selective", "op" or "full".
    pub recompute: &'a str,
}

impl ConfigShape<'static> {
    /// The shape of a searched configuration.
    pub fn of(config: &ParallelConfig) -> Self {
        Self {
            tp: config.tp,
            pp: config.pp,
            vpp: config.vpp.max(1),
            cp: config.cp.max(1),
            ep: config.ep.max(1),
            zero: config.zero,
            recompute: config.recompute.name(),
        }
    }
}

/// What the frameworks' limits depend on of the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelFacts {
    /// Transformer layers (for pipeline stages).
    pub layers: u32,
    /// Key/value heads (for DeepSpeed-Ulysses, which splits heads over its ranks).
    pub kv_heads: u32,
    /// Whether it has mixture-of-experts layers.
    pub moe: bool,
}

impl ModelFacts {
    /// The facts of a model profile.
    pub fn of(model: &crate::perf::ModelProfile) -> Self {
        Self {
            layers: model.layers,
            kv_heads: model.kv_heads,
            moe: model.moe.is_some(),
        }
    }
}

/// Why `target` cannot express a configuration of `shape` for `model` on the stack
/// `settings`, whatever its batch; `None` where it can (always for JSON).
pub fn shape_problem(
    target: EmitTarget,
    shape: &ConfigShape<'_>,
    model: ModelFacts,
    settings: &StackSettingsJson,
) -> Option<String> {
    let layers = model.layers;
    let split = || split_problem(target, shape, layers, settings);
    // The split's reason first where the framework's own stage counts would fail on it too.
    match target {
        EmitTarget::Json => None,
        EmitTarget::Megatron => split().or_else(|| megatron(shape, model, settings)),
        EmitTarget::Torchtitan => split().or_else(|| torchtitan(shape, layers, settings)),
        EmitTarget::Deepspeed => deepspeed(shape, model, settings).or_else(split),
    }
}

/// Why `target` would split uneven pipeline stages otherwise than the plan costed them
/// (`settings.stage_split`), if it would: Megatron-LM and torchtitan put the short stages at
/// the ends (their first/last-stage layer counts: at most one short stage at each end),
/// today's DeepSpeed pipeline engine fills the first stages (`balanced`).
fn split_problem(
    target: EmitTarget,
    s: &ConfigShape<'_>,
    layers: u32,
    settings: &StackSettingsJson,
) -> Option<String> {
    let runs = match target {
        EmitTarget::Json => return None,
        EmitTarget::Megatron | EmitTarget::Torchtitan => StageSplit::Ends,
        EmitTarget::Deepspeed => StageSplit::Balanced,
    };
    if s.pp <= 1 || layers.is_multiple_of(s.pp) {
        return None;
    }
    let costed = StageSplit::from_name(settings.stage_split).unwrap_or_default();
    let counts = |split| crate::format::runs(&split_layers(layers, s.pp, split));
    if costed != runs {
        let engine = match runs {
            StageSplit::Balanced => "today's DeepSpeed pipeline engine splits them",
            _ => "its first/last-stage layer counts split them",
        };
        return Some(format!(
            "{layers} layers on {} pipeline stages costed as the {} split puts them ({}), where \
             {engine} {} (--stage-split {} costs that)",
            s.pp,
            costed.name(),
            counts(costed),
            counts(runs),
            runs.name()
        ));
    }
    // The ends split of more than two short stages shortens inner stages too, which one count
    // for the first stage and one for the last cannot say.
    let short = s.pp * layers.div_ceil(s.pp) - layers;
    (runs == StageSplit::Ends && short > 2).then(|| {
        format!(
            "{layers} layers on {} pipeline stages costed as {} ({short} short stages at the \
             ends), where its first and last-stage layer counts shorten the two end stages only",
            s.pp,
            counts(runs)
        )
    })
}

fn megatron(
    s: &ConfigShape<'_>,
    model: ModelFacts,
    settings: &StackSettingsJson,
) -> Option<String> {
    if (s.pp > 1 || s.vpp > 1)
        && embedding_in_split(s.pp, s.vpp, model.layers).is_none()
        && let Err(why) = stage_split(s.pp, s.vpp, model.layers, false)
    {
        return Some(why);
    }
    if let Some(why) = a2a_heads_problem(s, model, settings) {
        return Some(why);
    }
    match s.recompute {
        "none" | "selective" | "full" => None,
        other => Some(format!(
            "recompute '{other}' (op-level selective checkpointing is torchtitan's policy; \
             Megatron's selective recompute covers the attention core only)"
        )),
    }
}

/// Where context parallelism by all-to-all (Megatron-Core's `--cp-comm-type a2a`, Transformer
/// Engine's) cannot hand each CP rank whole key/value heads: it asserts that the heads on a TP
/// rank divide by the CP size.
fn a2a_heads_problem(
    s: &ConfigShape<'_>,
    model: ModelFacts,
    settings: &StackSettingsJson,
) -> Option<String> {
    let kv_per_tp = (model.kv_heads / s.tp.max(1)).max(1);
    (s.cp > 1 && settings.cp_comm == "all_to_all" && !kv_per_tp.is_multiple_of(s.cp)).then(|| {
        format!(
            "context parallelism by all-to-all over {} ranks with {kv_per_tp} key/value heads \
             per TP rank (Transformer Engine's all-to-all hands each rank whole heads and \
             asserts that they divide by the CP size; --cp-comm ring runs it)",
            s.cp
        )
    })
}

fn torchtitan(s: &ConfigShape<'_>, layers: u32, settings: &StackSettingsJson) -> Option<String> {
    if s.zero == 0 && (s.tp > 1 || s.pp > 1 || s.cp > 1) {
        // torchtitan's parallelize functions raise "DDP has not supported > 1D parallelism".
        return Some(
            "ZeRO-0 is torchtitan's DDP, which it runs only as the sole parallelism (\"DDP has \
             not supported > 1D parallelism\"): plan with ZeRO 1-3 (FSDP2) beside TP, PP or CP"
                .into(),
        );
    }
    if !matches!(s.recompute, "none" | "selective" | "op" | "full") {
        return Some(format!("recompute '{}'", s.recompute));
    }
    if s.pp > 1
        && let Err(why) = stage_split(s.pp, s.vpp, layers, true)
    {
        return Some(why);
    }
    if s.cp > 1 && !matches!(settings.cp_comm, "ring" | "all_gather") {
        return Some(format!(
            "context parallelism by '{}' (torchtitan exchanges keys and values by a ring \
             rotation or an all-gather, not by DeepSpeed-Ulysses' all-to-all over heads)",
            settings.cp_comm
        ));
    }
    None
}

fn deepspeed(
    s: &ConfigShape<'_>,
    model: ModelFacts,
    settings: &StackSettingsJson,
) -> Option<String> {
    if s.pp > 1 && s.zero >= 2 {
        return Some(format!(
            "ZeRO-{} with pipeline parallelism (DeepSpeed's pipeline engine runs ZeRO-0 or \
             ZeRO-1 only)",
            s.zero
        ));
    }
    if model.moe && s.zero >= 3 {
        // deepspeed.initialize asserts "MoE not supported with Stage 3".
        return Some(
            "ZeRO-3 with mixture-of-experts layers (DeepSpeed's engine refuses it)".into(),
        );
    }
    if s.vpp > 1 {
        return Some("an interleaved (virtual-stage) pipeline".into());
    }
    if s.cp > 1 && settings.cp_comm != "all_to_all" {
        return Some(format!(
            "context parallelism by '{}' (Megatron-DeepSpeed splits sequences by \
             DeepSpeed-Ulysses' all-to-all only: --cp-comm all-to-all)",
            settings.cp_comm
        ));
    }
    if s.cp > 1 && s.pp > 1 {
        return Some(
            "DeepSpeed-Ulysses with pipeline parallelism (Megatron-DeepSpeed splits sequences \
             over its sequence-parallel ranks in the plain engine's batches, not in the \
             pipeline engine's)"
                .into(),
        );
    }
    let kv_per_tp = model.kv_heads / s.tp.max(1);
    if s.cp > 1 && !kv_per_tp.is_multiple_of(s.cp) {
        return Some(format!(
            "DeepSpeed-Ulysses over {} ranks with {kv_per_tp} key/value heads per TP rank (its \
             all-to-all hands each rank whole heads)",
            s.cp
        ));
    }
    if s.cp > 1 && s.tp > 1 && settings.sequence_parallel {
        return Some(
            "DeepSpeed-Ulysses beside Megatron's sequence parallelism (Megatron-DeepSpeed runs \
             one or the other: --sequence-parallel off)"
                .into(),
        );
    }
    if settings.precision == "fp8" {
        return Some("FP8 GEMMs in its configuration".into());
    }
    match s.recompute {
        "none" | "selective" | "full" => None,
        other => Some(format!(
            "recompute '{other}' (op-level selective checkpointing)"
        )),
    }
}

/// An interleaved schedule over end stages one layer short (the first, or the first and the
/// last): Megatron-Core counts the embedding (and the output layer) as a layer of the split
/// (`--account-for-embedding-in-pipeline-split`, `--account-for-loss-in-pipeline-split`), so
/// `layers` + the short count split evenly into `pp·vpp` virtual stages, as copus costs them
/// (Llama 3 405B: 126 + 2 on PP 16 × vpp 8). The layers of one virtual stage and how many
/// end stages are short (1: the first; 2: both), or `None` when the split is not that one.
pub(super) fn embedding_in_split(pp: u32, vpp: u32, layers: u32) -> Option<(u32, u32)> {
    if vpp <= 1 || pp <= 1 {
        return None;
    }
    let full = layers.div_ceil(pp);
    let short = pp.checked_mul(full)?.checked_sub(layers)?;
    ((1..=2).contains(&short) && full.is_multiple_of(vpp)).then_some((full / vpp, short))
}

/// How a phase's transformer layers split over its pipeline stages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct StageLayers {
    /// Layers on a full (virtual) stage: ⌈layers / (pp·vpp)⌉.
    pub(super) per_stage: u32,
    /// Layers fewer than `per_stage` on the first stage (it also holds the embedding).
    pub(super) first_less: u32,
    /// Layers fewer than `per_stage` on the last stage (it also holds the output layer).
    pub(super) last_less: u32,
}

/// The split of `layers` over the phase's `pp·vpp` stages: even, or with the stages short of
/// ⌈layers/pp⌉ at the two ends (the heaviest stage holds ⌈layers/pp⌉, as copus's model
/// costs it: 126 layers on PP 8 are 15, 16 × 6, 15, as Llama 3 405B ran); why not, when the
/// split is uneven with an interleaved schedule or leaves an end stage without a layer.
///
/// `interleaved_uneven`: whether the target splits uneven interleaved stages too (torchtitan
/// counts virtual stages over `layers + first_less + last_less`; Megatron's layer-count flags
/// take no virtual stages).
pub(super) fn stage_split(
    pp: u32,
    vpp: u32,
    layers: u32,
    interleaved_uneven: bool,
) -> Result<StageLayers, String> {
    let stages = pp.saturating_mul(vpp);
    if stages == 0 || layers == 0 {
        return Err(format!("{layers} layers on pp·vpp = {stages} stages"));
    }
    let per_stage = layers.div_ceil(stages);
    let deficit = u64::from(per_stage) * u64::from(stages) - u64::from(layers);
    let deficit = u32::try_from(deficit).map_err(|_| "too many stages".to_string())?;
    if deficit > 0 && vpp > 1 && !interleaved_uneven {
        return Err(format!(
            "{layers} layers do not split evenly into pp·vpp = {stages} stages (uneven stages \
             with an interleaved schedule)"
        ));
    }
    // Interleaved, the middle pipeline stages hold vpp full virtual stages: only where that is
    // the ⌈layers/pp⌉ copus costs (126 layers on PP 8 × VPP 2: 2 × 8 = 16) is the split the
    // plan's.
    let heaviest = layers.div_ceil(pp.max(1));
    if deficit > 0 && vpp > 1 && per_stage.saturating_mul(vpp) != heaviest {
        return Err(format!(
            "{layers} layers on pp·vpp = {stages} stages would put {} layers on a middle \
             stage where the plan costs {heaviest}",
            per_stage.saturating_mul(vpp)
        ));
    }
    let (first_less, last_less) = (deficit.div_ceil(2), deficit / 2);
    if first_less >= per_stage {
        return Err(format!(
            "{layers} layers on {stages} stages: with at most {per_stage} a stage, an end \
             stage would hold none"
        ));
    }
    Ok(StageLayers {
        per_stage,
        first_less,
        last_less,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::stack::{StackPreset, StackSettingsJson};

    fn shape(
        pp: u32,
        vpp: u32,
        cp: u32,
        zero: u8,
        recompute: &'static str,
    ) -> ConfigShape<'static> {
        ConfigShape {
            tp: 2,
            pp,
            vpp,
            cp,
            ep: 1,
            zero,
            recompute,
        }
    }

    /// A 32-layer model with 8 key/value heads, dense or with experts.
    fn facts(moe: bool) -> ModelFacts {
        ModelFacts {
            layers: 32,
            kv_heads: 8,
            moe,
        }
    }

    fn settings(preset: StackPreset) -> StackSettingsJson {
        preset.settings().into()
    }

    #[test]
    fn each_framework_refuses_what_it_has_no_setting_for_and_nothing_else() {
        let mc = settings(StackPreset::MegatronCore);
        let refused = |t, s: ConfigShape<'static>, layers| {
            shape_problem(
                t,
                &s,
                ModelFacts {
                    layers,
                    ..facts(false)
                },
                &mc,
            )
        };
        // Everything is expressible as plain JSON.
        assert_eq!(refused(EmitTarget::Json, shape(7, 3, 4, 3, "op"), 10), None);
        // Megatron: op-level recompute, uneven interleaved stages.
        assert!(refused(EmitTarget::Megatron, shape(1, 1, 1, 1, "op"), 32).is_some());
        assert!(refused(EmitTarget::Megatron, shape(4, 3, 1, 1, "full"), 30).is_some());
        // ... unless the end stages are a layer short and vpp divides the full ones: the
        // embedding and the output layer counted in the split (Llama 3 405B's vpp 8).
        assert_eq!(
            refused(EmitTarget::Megatron, shape(4, 2, 1, 1, "full"), 30),
            None
        );
        assert_eq!(
            refused(EmitTarget::Megatron, shape(16, 8, 1, 1, "full"), 126),
            None
        );
        assert_eq!(
            refused(EmitTarget::Megatron, shape(4, 2, 2, 3, "selective"), 32),
            None
        );
        assert_eq!(
            refused(EmitTarget::Megatron, shape(8, 1, 1, 1, "none"), 126),
            None
        );
        // torchtitan: DDP beside TP; op-level recompute and uneven interleaving are fine.
        assert!(refused(EmitTarget::Torchtitan, shape(1, 1, 1, 0, "none"), 32).is_some());
        assert_eq!(
            refused(EmitTarget::Torchtitan, shape(8, 2, 1, 3, "op"), 126),
            None
        );
        // DeepSpeed: ZeRO-2/3 with PP, interleaving, CP, op recompute.
        for s in [
            shape(2, 1, 1, 3, "none"),
            shape(2, 2, 1, 1, "none"),
            shape(1, 1, 2, 3, "none"),
            shape(1, 1, 1, 3, "op"),
        ] {
            assert!(refused(EmitTarget::Deepspeed, s, 126).is_some(), "{s:?}");
        }
        assert_eq!(
            refused(EmitTarget::Deepspeed, shape(2, 1, 1, 1, "full"), 126),
            None
        );
        assert_eq!(
            refused(EmitTarget::Deepspeed, shape(1, 1, 1, 3, "none"), 126),
            None
        );
        // Uneven stages: its pipeline engine partitions them, the full stages first; written
        // where the plan was costed with that split (the DeepSpeed stack's), else refused.
        let uneven = shape(4, 1, 1, 1, "none");
        assert!(refused(EmitTarget::Deepspeed, uneven, 126).is_some_and(|w| w.contains("ends")));
        let ds = settings(StackPreset::DeepSpeed);
        let facts126 = ModelFacts {
            layers: 126,
            ..facts(false)
        };
        assert_eq!(
            shape_problem(EmitTarget::Deepspeed, &uneven, facts126, &ds),
            None
        );
        // ... and the other way round for Megatron-LM and torchtitan (the short stages at the
        // ends), whatever the preset.
        for t in [EmitTarget::Megatron, EmitTarget::Torchtitan] {
            assert!(
                shape_problem(t, &uneven, facts126, &ds).is_some_and(|w| w.contains("balanced"))
            );
            assert_eq!(shape_problem(t, &uneven, facts126, &mc), None);
        }
    }

    /// The split Megatron-Core expresses with the embedding (and the output layer) counted as
    /// layers: end stages a layer short, vpp dividing the full stages' layers.
    #[test]
    fn the_embedding_counted_in_the_split_is_found_exactly_where_it_runs() {
        // 126 + 2 = 128 on PP 16 × vpp 8: one layer a virtual stage, both ends short.
        assert_eq!(embedding_in_split(16, 8, 126), Some((1, 2)));
        assert_eq!(embedding_in_split(8, 2, 126), Some((8, 2)));
        // 80 + 1 = 81 on PP 3 × vpp 3: the first stage short only.
        assert_eq!(embedding_in_split(3, 3, 80), Some((9, 1)));
        // Even stages, no interleave, more than two short stages, vpp not dividing: not it.
        for (pp, vpp, layers) in [(4, 2, 32), (16, 1, 126), (6, 2, 80), (16, 3, 126)] {
            assert_eq!(
                embedding_in_split(pp, vpp, layers),
                None,
                "{pp} {vpp} {layers}"
            );
        }
        // Brute force: where found, Megatron's own arithmetic holds (layers + short divide
        // by pp, and the stage's share by the layers of a virtual stage).
        for layers in 1..=130u32 {
            for pp in 2..=16u32 {
                for vpp in 2..=8u32 {
                    if let Some((per, short)) = embedding_in_split(pp, vpp, layers) {
                        let counted = layers + short;
                        assert!(counted.is_multiple_of(pp), "{layers} {pp} {vpp}");
                        assert_eq!(counted / pp, per * vpp, "{layers} {pp} {vpp}");
                        assert_eq!(counted / pp, layers.div_ceil(pp), "{layers} {pp} {vpp}");
                    }
                }
            }
        }
    }

    /// Megatron-Core's all-to-all context parallelism (Transformer Engine's) needs the key/value
    /// heads on a TP rank to divide by the CP size; the ring has no such limit.
    #[test]
    fn megatron_refuses_an_all_to_all_that_splits_heads() {
        let dense = facts(false);
        let mut a2a = settings(StackPreset::MegatronCore);
        a2a.cp_comm = "all_to_all";
        // (8 key/value heads over TP 2: 4 a TP rank.)
        let four = shape(1, 1, 4, 1, "selective");
        let eight = shape(1, 1, 8, 1, "selective");
        assert_eq!(
            shape_problem(EmitTarget::Megatron, &four, dense, &a2a),
            None
        );
        let why = shape_problem(EmitTarget::Megatron, &eight, dense, &a2a).expect("refused");
        assert!(why.contains("4 key/value heads per TP rank"), "{why}");
        a2a.cp_comm = "ring";
        assert_eq!(
            shape_problem(EmitTarget::Megatron, &eight, dense, &a2a),
            None
        );
    }

    #[test]
    fn stack_settings_the_frameworks_cannot_run_are_refused() {
        let dense = facts(false);
        let mut fp8 = settings(StackPreset::DeepSpeed);
        fp8.precision = "fp8";
        let plain = shape(1, 1, 1, 3, "none");
        assert!(shape_problem(EmitTarget::Deepspeed, &plain, dense, &fp8).is_some());
        assert_eq!(
            shape_problem(EmitTarget::Megatron, &plain, dense, &fp8),
            None
        );
        let mut ulysses = settings(StackPreset::TorchtitanFsdp2);
        ulysses.cp_comm = "all_to_all";
        let cp = shape(1, 1, 2, 3, "none");
        assert!(shape_problem(EmitTarget::Torchtitan, &cp, dense, &ulysses).is_some());
        ulysses.cp_comm = "all_gather";
        assert_eq!(
            shape_problem(EmitTarget::Torchtitan, &cp, dense, &ulysses),
            None
        );
        // DeepSpeed: Ulysses only, and not beside Megatron's sequence parallelism; no ZeRO-3
        // with experts.
        let mut ds = settings(StackPreset::DeepSpeed);
        ds.cp_comm = "all_to_all";
        ds.sequence_parallel = false;
        let ds_cp = ConfigShape { zero: 1, ..cp };
        assert_eq!(
            shape_problem(EmitTarget::Deepspeed, &ds_cp, dense, &ds),
            None
        );
        ds.sequence_parallel = true;
        assert!(shape_problem(EmitTarget::Deepspeed, &ds_cp, dense, &ds).is_some());
        ds.cp_comm = "ring";
        ds.sequence_parallel = false;
        assert!(shape_problem(EmitTarget::Deepspeed, &ds_cp, dense, &ds).is_some());
        // Ulysses hands each rank whole key/value heads, and not in the pipeline engine.
        ds.cp_comm = "all_to_all";
        // (8 key/value heads over TP 2: 4 a TP rank.)
        let four = ConfigShape { cp: 4, ..ds_cp };
        assert_eq!(
            shape_problem(EmitTarget::Deepspeed, &four, dense, &ds),
            None
        );
        let eight = ConfigShape { cp: 8, ..ds_cp };
        assert!(shape_problem(EmitTarget::Deepspeed, &eight, dense, &ds).is_some());
        let piped = ConfigShape { pp: 2, ..ds_cp };
        assert!(shape_problem(EmitTarget::Deepspeed, &piped, dense, &ds).is_some());
        let moe = facts(true);
        let experts = ConfigShape { ep: 8, ..plain };
        assert!(shape_problem(EmitTarget::Deepspeed, &experts, moe, &ds).is_some());
        let experts = ConfigShape { zero: 2, ..experts };
        assert_eq!(
            shape_problem(EmitTarget::Deepspeed, &experts, moe, &ds),
            None
        );
    }
}
