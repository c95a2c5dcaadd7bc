//! Structural validity of a configuration for a model, independent of the batch size, and the
//! batch-dependent checks (divisibility into micro-batches).

use super::{Invalid, ModelProfile, ParallelConfig};

/// Check that `cfg` can run `m` at all (before memory and batch size).
pub fn structure(m: &ModelProfile, cfg: &ParallelConfig) -> Result<(), Invalid> {
    let other = |s: String| Err(Invalid::Other(s));
    if cfg.dp == 0 || cfg.tp == 0 || cfg.pp == 0 || cfg.mbs == 0 || cfg.vpp == 0 {
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
    if !m.layers.is_multiple_of(cfg.pp) {
        return other(format!("PP {} does not divide {} layers", cfg.pp, m.layers));
    }
    if cfg.vpp > 1 {
        if cfg.pp == 1 {
            return other("interleaving needs PP > 1".into());
        }
        let per_stage = m.layers / cfg.pp;
        if !per_stage.is_multiple_of(cfg.vpp) {
            return other(format!(
                "{} virtual stages do not divide {per_stage} layers per stage",
                cfg.vpp
            ));
        }
    }
    if cfg.zero > 3 {
        return other(format!("ZeRO stage {} (0–3)", cfg.zero));
    }
    if cfg.zero >= 2 && cfg.pp > 1 {
        return other(format!(
            "ZeRO-{} shards gradients per micro-batch: not combinable with PP {}",
            cfg.zero, cfg.pp
        ));
    }
    Ok(())
}

/// Micro-batches per step of `cfg` at `global_batch` samples, or why the batch does not split.
pub fn micro_batches(cfg: &ParallelConfig, global_batch: u64) -> Result<u64, Invalid> {
    let per_step = cfg.dp as u64 * cfg.mbs as u64;
    if per_step == 0 || global_batch == 0 || !global_batch.is_multiple_of(per_step) {
        return Err(Invalid::Other(format!(
            "batch {global_batch} not divisible by dp·mbs = {per_step}"
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
