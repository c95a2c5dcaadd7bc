//! Structural validity of a configuration for a model, independent of the batch size, and the
//! batch-dependent checks (divisibility into micro-batches).

use super::{Invalid, ModelProfile, ParallelConfig};

/// Check what the stack `e` adds to [`structure`]: all-to-all context parallelism
/// (Ulysses) gives each of the `cp` ranks whole heads of the queries and of the keys and
/// values, so both head counts per TP rank must divide by `cp` (Transformer Engine asserts
/// it for q, k and v alike; DeepSpeed's Ulysses reshapes each by heads).
pub fn stack_structure(
    m: &ModelProfile,
    cfg: &ParallelConfig,
    e: &super::EfficiencyParams,
) -> Result<(), Invalid> {
    let heads_per_rank = m.heads / cfg.tp.max(1);
    let kv_heads_per_rank = (m.kv_heads / cfg.tp.max(1)).max(1);
    if cfg.cp > 1 && e.cp_comm == super::efficiency::CpComm::AllToAll {
        let split = [("", heads_per_rank), (" key/value", kv_heads_per_rank)]
            .into_iter()
            .find(|(_, n)| !n.is_multiple_of(cfg.cp));
        if let Some((which, n)) = split {
            return Err(Invalid::Other(format!(
                "CP {} with cp_comm all_to_all needs the {n}{which} heads per TP rank \
                 divisible by cp: each CP rank takes whole heads (use --cp-comm ring or \
                 all-gather; in a session: Ring or AllGather)",
                cfg.cp
            )));
        }
    }
    // DeepSpeed's pipeline before 0.11 fills stages greedily: few layers on many stages leave
    // the last ones without a transformer layer, which its engine cannot run.
    let greedy = super::efficiency::StageSplit::Greedy;
    if e.stage_split == greedy
        && let Some(stage) = super::memory::empty_stage(m, cfg.pp, greedy)
    {
        let empty = if stage + 1 == cfg.pp {
            format!("stage {} of {}", cfg.pp, cfg.pp)
        } else {
            format!("stages {}–{} of {}", stage + 1, cfg.pp, cfg.pp)
        };
        return Err(Invalid::Other(format!(
            "{} layers on {} pipeline stages split greedily (DeepSpeed's pipeline engine before \
             0.11: {} a stage from the first) leave {empty} without a transformer layer, which \
             that engine cannot run (--stage-split balanced is its split since)",
            m.layers,
            cfg.pp,
            m.layers.div_ceil(cfg.pp.max(1)),
        )));
    }
    // Sequence parallelism splits each rank's sequence (its CP share) along TP: Megatron
    // asserts the split is even.
    let local = m.seq_len / cfg.cp.max(1);
    if e.sequence_parallel && cfg.tp > 1 && !local.is_multiple_of(cfg.tp) {
        return Err(Invalid::Other(format!(
            "sequence parallelism needs the sequence of each rank ({local} tokens) divisible by \
             TP {} (use --sequence-parallel off, or a sequence that TP divides)",
            cfg.tp
        )));
    }
    Ok(())
}

/// Check that `cfg` can run `m` at all (before memory and batch size).
pub fn structure(m: &ModelProfile, cfg: &ParallelConfig) -> Result<(), Invalid> {
    let other = |s: String| Err(Invalid::Other(s));
    if cfg.dp == 0 || cfg.tp == 0 || cfg.pp == 0 || cfg.mbs == 0 || cfg.vpp == 0 || cfg.cp == 0 {
        return other(format!("degrees and micro-batch must be ≥ 1 ({cfg})"));
    }
    if m.layers == 0 || m.hidden == 0 || m.heads == 0 || m.kv_heads == 0 || m.seq_len == 0 {
        return other(format!("model '{}' has a zero dimension", m.name));
    }
    if !m.heads.is_multiple_of(cfg.tp) {
        return other(format!("TP {} does not divide {} heads", cfg.tp, m.heads));
    }
    if !m.kv_heads.is_multiple_of(cfg.tp) {
        return other(format!(
            "TP {} does not divide {} key/value heads",
            cfg.tp, m.kv_heads
        ));
    }
    if !m.ffn_hidden.is_multiple_of(cfg.tp) {
        return other(format!(
            "TP {} does not divide the feed-forward width {}",
            cfg.tp, m.ffn_hidden
        ));
    }
    if m.layers < cfg.pp {
        return other(format!("PP {} exceeds the {} layers", cfg.pp, m.layers));
    }
    let total = u64::from(cfg.dp) * u64::from(cfg.cp) * u64::from(cfg.tp) * u64::from(cfg.pp);
    if total > u64::from(u32::MAX) {
        return other(format!("dp·cp·tp·pp = {total} GPUs is too many"));
    }
    if cfg.cp > 1 && !m.seq_len.is_multiple_of(2 * cfg.cp) {
        return other(format!(
            "CP {} needs the sequence ({}) divisible by 2·cp (load-balanced chunks)",
            cfg.cp, m.seq_len
        ));
    }
    if let Some(why) = interleave_problem(m, cfg.pp, cfg.vpp) {
        return other(why);
    }
    if cfg.zero > 3 {
        return other(format!("ZeRO stage {} (0–3)", cfg.zero));
    }
    expert_parallel_problem(m, cfg).map_or(Ok(()), other)
}

/// Why `cfg`'s expert-parallel degree cannot run `m`, if it cannot: EP needs a
/// mixture-of-experts model whose experts it divides, and ranks of the data-parallel
/// (× context-parallel) group to split them over.
fn expert_parallel_problem(m: &ModelProfile, cfg: &ParallelConfig) -> Option<String> {
    let ep = cfg.ep;
    if ep == 0 {
        return Some("EP must be ≥ 1".into());
    }
    if ep == 1 {
        return None;
    }
    let Some(moe) = &m.moe else {
        return Some(format!(
            "EP {ep} needs a mixture-of-experts model; '{}' is dense",
            m.name
        ));
    };
    if !moe.experts.is_multiple_of(ep) {
        return Some(format!("EP {ep} does not divide {} experts", moe.experts));
    }
    let ranks = cfg.grad_ranks();
    (!ranks.is_multiple_of(ep)).then(|| {
        format!("EP {ep} does not divide the {ranks} data-parallel (× context-parallel) ranks")
    })
}

/// The expert-parallel degrees an automatic choice searches for `m` over `ranks`
/// data-parallel (× context-parallel) ranks: every common divisor of the experts and the
/// ranks; `[1]` for a dense model.
pub fn expert_candidates(m: &ModelProfile, ranks: u32) -> Vec<u32> {
    match &m.moe {
        None => vec![1],
        Some(moe) => (1..=moe.experts.min(ranks).max(1))
            .filter(|&d| moe.experts.is_multiple_of(d) && ranks.is_multiple_of(d))
            .collect(),
    }
}

/// Why `vpp` virtual stages cannot run `m` on `pp` pipeline stages, if they cannot: one rule
/// for even and uneven stages, `vpp` divides the layers of a full stage (⌈layers/pp⌉). A
/// stage with fewer (Megatron's first and last stages a layer short, beside the embedding
/// and the output layer) has as many virtual stages, some a layer short: Llama 3 405B's
/// 126 layers on PP 16 ran vpp 8, its end stages' 7 layers and the embedding (output layer)
/// in 8 virtual stages. (vpp 3 was refused on 20 layers a stage but taken on 7 and 8.)
fn interleave_problem(m: &ModelProfile, pp: u32, vpp: u32) -> Option<String> {
    if vpp <= 1 {
        return None;
    }
    if pp <= 1 {
        return Some("interleaving needs PP > 1".into());
    }
    let per_stage = m.layers.div_ceil(pp);
    if per_stage < vpp {
        return Some(format!(
            "{vpp} virtual stages exceed the {per_stage} layers per stage"
        ));
    }
    let full = if m.layers.is_multiple_of(pp) {
        "per stage"
    } else {
        "of a full stage"
    };
    (!per_stage.is_multiple_of(vpp))
        .then(|| format!("{vpp} virtual stages do not divide the {per_stage} layers {full}"))
}

/// The interleaving degrees an automatic choice searches for `m` on `pp` pipeline stages:
/// every vpp [`structure`] allows (the divisors of the layers of a full stage, ⌈layers/pp⌉);
/// `[1]` without a pipeline.
pub fn interleave_candidates(m: &ModelProfile, pp: u32) -> Vec<u32> {
    (1..=m.layers.div_ceil(pp.max(1)).max(1))
        .filter(|&v| interleave_problem(m, pp, v).is_none())
        .collect()
}

/// Micro-batches per step of `cfg` at `global_batch` samples, or why the batch does not split.
pub fn micro_batches(cfg: &ParallelConfig, global_batch: u64) -> Result<u64, Invalid> {
    let per_step = cfg.dp as u64 * cfg.mbs as u64;
    if per_step > 0 && global_batch > 0 && global_batch < per_step {
        // Not a divisibility problem: the batch is too small for one micro-batch a replica.
        // The largest micro-batch this batch feeds every replica with, where there is one.
        let most = global_batch / u64::from(cfg.dp).max(1);
        let hint = if most == 1 {
            "; each replica gets 1 sample of this batch: mbs 1".to_string()
        } else if most > 1 {
            format!("; each replica gets {most} samples of this batch: an mbs that divides {most}")
        } else {
            String::new()
        };
        return Err(Invalid::Other(format!(
            "batch {global_batch} is smaller than dp·mbs = {per_step} ({} replicas × mbs {}){hint}",
            cfg.dp, cfg.mbs
        )));
    }
    if per_step == 0 || global_batch == 0 || !global_batch.is_multiple_of(per_step) {
        let below = global_batch / per_step.max(1) * per_step;
        let nearest = match below.checked_add(per_step) {
            Some(above) if below > 0 => format!(" (the nearest: {below} or {above})"),
            _ => String::new(),
        };
        return Err(Invalid::Other(format!(
            "batch {global_batch} not divisible by dp·mbs = {per_step}{nearest}"
        )));
    }
    let m = global_batch / per_step;
    if cfg.vpp > 1 && !m.is_multiple_of(cfg.pp as u64) {
        return Err(Invalid::Other(format!(
            "interleaving needs micro-batches ({m}) divisible by PP {}",
            cfg.pp
        )));
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interleave_candidates_are_exactly_the_structurally_valid_degrees() {
        let model = |layers| ModelProfile {
            name: "m".into(),
            layers,
            hidden: 64,
            heads: 8,
            kv_heads: 8,
            ffn_hidden: 256,
            vocab: 100,
            seq_len: 64,
            swiglu: false,
            tied_embeddings: false,
            dropout: None,
            moe: None,
            source: String::new(),
        };
        assert_eq!(interleave_candidates(&model(96), 1), vec![1]);
        assert_eq!(
            interleave_candidates(&model(96), 8),
            vec![1, 2, 3, 4, 6, 12]
        );
        // Uneven stages (7 and 8 layers): the divisors of the full stage's 8, as for even ones.
        assert_eq!(interleave_candidates(&model(126), 16), vec![1, 2, 4, 8]);
        // Brute force against the structural check.
        for layers in [7u32, 24, 30, 48, 126] {
            for pp in 1..=8u32.min(layers) {
                let m = model(layers);
                let valid: Vec<u32> = (1..=layers)
                    .filter(|&vpp| {
                        let cfg = ParallelConfig {
                            dp: 1,
                            tp: 1,
                            pp,
                            mbs: 1,
                            zero: 0,
                            recompute: super::super::Recompute::None,
                            vpp,
                            cp: 1,
                            ep: 1,
                        };
                        structure(&m, &cfg).is_ok()
                    })
                    .collect();
                assert_eq!(
                    interleave_candidates(&m, pp),
                    valid,
                    "{layers} layers, pp {pp}"
                );
            }
        }
    }
}
