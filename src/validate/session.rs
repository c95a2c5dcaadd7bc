//! Ranges and sizes of a resolved session, checked once in [`crate::session::Session::resolve`]
//! so that every command (open, grid, plan, watch) sees the same errors: cluster size without
//! u32 wrap-around, search lists of bounded length, scenario laws that give a positive
//! B_crit, reconfiguration costs and estimator settings in range, and the profiles.

use super::{Invalid, all_finite, non_negative, positive, profile};
use crate::goodput::StatEffForm;
use crate::session::{DataSource, Resolved};
use crate::source::scenario::{Scenario, ScenarioLaw};

/// Most GPUs a cluster may have (nodes × gpus_per_node), 2²⁰.
pub const MAX_GPUS: u32 = 1 << 20;
/// Most batch sizes on the grid's batch axis.
pub const MAX_BATCH_SIZES: usize = 256;
/// Most entries of each of the other search lists (micro-batches, ZeRO stages, recompute
/// policies, interleave factors).
pub const MAX_SEARCH_LIST: usize = 64;
/// Largest global batch size, samples (2⁴⁰).
pub const MAX_BATCH: u64 = 1 << 40;
/// Most phases (timeline points) of a scenario.
pub const MAX_PHASES: usize = 100_000;
/// Most points of a piecewise scenario law.
pub const MAX_PIECEWISE_POINTS: usize = 10_000;
/// Most steps of a guided tour.
pub const MAX_TOUR_STEPS: usize = 1_000;

/// Smallest `b_crit_scale` accepted (a conversion factor; beyond this the grid underflows).
pub const MIN_B_CRIT_SCALE: f64 = 1e-6;
/// Largest `b_crit_scale` accepted.
pub const MAX_B_CRIT_SCALE: f64 = 1e6;
/// Largest micro-batch size, samples (2²⁰).
pub const MAX_MICRO_BATCH: u32 = 1 << 20;
/// Largest virtual-pipeline (interleave) factor.
pub const MAX_INTERLEAVE: u32 = 1024;
/// Longest `planner.loss_window`, points.
pub const MAX_LOSS_WINDOW: u32 = 1 << 20;
/// Largest token count of a scenario (10¹⁸: some 10⁴ times the largest published training
/// runs); far beyond it the timeline's axis arithmetic overflows (1e307 tokens hung the
/// explorer's chart).
pub const MAX_TOKENS: f64 = 1e18;

/// A token count of a scenario: finite, at least 0 (positive when `strict`), at most
/// [`MAX_TOKENS`].
fn tokens_in_range(field: &str, v: f64, strict: bool) -> Result<(), Invalid> {
    if strict {
        positive(field, v)?;
    } else {
        non_negative(field, v)?;
    }
    if v > MAX_TOKENS {
        return Err(Invalid::new(
            field,
            format!("must be at most {MAX_TOKENS:e} tokens, got {v:e}"),
        ));
    }
    Ok(())
}

/// A batch size in samples: 1 to [`MAX_BATCH`].
fn batch_in_range(field: &str, b: u64) -> Result<(), Invalid> {
    if (1..=MAX_BATCH).contains(&b) {
        Ok(())
    } else {
        Err(Invalid::new(
            field,
            format!("must lie in 1..={MAX_BATCH} samples, got {b}"),
        ))
    }
}

/// The planner's settings: a reference batch in range, a positive finite target loss and a
/// loss window of bounded length.
fn planner(p: &crate::plan::objective::PlannerSettings) -> Result<(), Invalid> {
    if let Some(b) = p.lr_reference_batch
        && !(1..=MAX_BATCH).contains(&b)
    {
        return Err(Invalid::new(
            "planner.lr_reference_batch",
            format!("the reference batch must lie in 1..={MAX_BATCH} samples, got {b}"),
        ));
    }
    if let Some(t) = p.target_loss {
        positive("planner.target_loss", t)?;
    }
    if let Some(w) = p.loss_window
        && !(1..=MAX_LOSS_WINDOW).contains(&w)
    {
        return Err(Invalid::new(
            "planner.loss_window",
            format!("must lie in 1..={MAX_LOSS_WINDOW} points, got {w}"),
        ));
    }
    Ok(())
}

/// A measured conversion's range: positive, finite, ordered and holding the factor.
fn scale_range(range: Option<[f64; 2]>, scale: f64) -> Result<(), Invalid> {
    let Some([lo, hi]) = range else {
        return Ok(());
    };
    let field = "planner.b_crit_scale_range";
    super::in_range(
        field,
        lo,
        MIN_B_CRIT_SCALE,
        MAX_B_CRIT_SCALE,
        "(its lower end)",
    )?;
    super::in_range(
        field,
        hi,
        MIN_B_CRIT_SCALE,
        MAX_B_CRIT_SCALE,
        "(its upper end)",
    )?;
    if !(lo <= scale && scale <= hi) {
        return Err(Invalid::new(
            field,
            format!("({lo}, {hi}) must hold b_crit_scale {scale} (lower end first)"),
        ));
    }
    Ok(())
}

/// Check everything of a resolved session that a command will compute with.
pub fn check(r: &Resolved) -> Result<(), Invalid> {
    let s = &r.session;
    cluster(s.cluster.nodes, s.cluster.gpus_per_node)?;
    profile::model(&r.model, "model")?;
    profile::hardware(&r.hardware, "cluster.hardware")?;
    if let Some(e) = &s.efficiency {
        profile::efficiency(e, "efficiency")?;
    }
    if let Some(c) = &r.calibration {
        profile::efficiency(&c.params, "calibration")?;
    }
    if let Some(why) = crate::perf::stack::hardware_problem(&r.hardware, &r.efficiency()) {
        return Err(Invalid::new("stack.precision", why));
    }
    super::in_range(
        "b_crit_scale",
        s.b_crit_scale,
        MIN_B_CRIT_SCALE,
        MAX_B_CRIT_SCALE,
        "(a conversion factor)",
    )?;
    planner(&s.planner)?;
    scale_range(s.planner.b_crit_scale_range, s.b_crit_scale)?;
    if let StatEffForm::Pollux { b0 } = s.stat_eff {
        positive("stat_eff.Pollux.b0", b0)?;
        if b0 > MAX_BATCH as f64 {
            return Err(Invalid::new(
                "stat_eff.Pollux.b0",
                format!("the reference batch must lie in 1..={MAX_BATCH} samples, got {b0:e}"),
            ));
        }
    }
    search(&s.search)?;
    costs(&s.costs)?;
    s.estimator
        .validate()
        .map_err(|msg| Invalid::new("estimator", msg))?;
    // 0 means "no autocorrelation terms" to the library (a test's naive baseline); as
    // `--block-length 0` is, it is refused where a user writes it.
    if s.estimator.block_length == Some(0) {
        return Err(Invalid::new(
            "estimator.block_length",
            "must be at least 1 step (leave it out to choose it), got 0",
        ));
    }
    if let Some(b) = s.current_batch {
        batch_in_range("current_batch", b)?;
        // The heatmap marks it, the plan compares with it and static-gbs runs it: a batch
        // off the searched list lost all three without a word.
        if !s.search.batch_sizes.contains(&b) {
            return Err(Invalid::new(
                "current_batch",
                format!(
                    "{b} is not one of search.batch_sizes {:?}: add it there (or pick one of them)",
                    s.search.batch_sizes
                ),
            ));
        }
    }
    if s.tour.len() > MAX_TOUR_STEPS {
        return Err(Invalid::new(
            "tour",
            format!("{} steps; at most {MAX_TOUR_STEPS}", s.tour.len()),
        ));
    }
    source(&s.source)
}

/// Nodes and GPUs per node: both ≥ 1, product at most [`MAX_GPUS`] (no u32 wrap-around).
pub fn cluster(nodes: u32, gpus_per_node: u32) -> Result<u32, Invalid> {
    if nodes == 0 {
        return Err(Invalid::new("cluster.nodes", "must be at least 1, got 0"));
    }
    if gpus_per_node == 0 {
        return Err(Invalid::new(
            "cluster.gpus_per_node",
            "must be at least 1, got 0",
        ));
    }
    match nodes.checked_mul(gpus_per_node) {
        Some(g) if g <= MAX_GPUS => Ok(g),
        _ => Err(Invalid::new(
            "cluster",
            format!(
                "{nodes} nodes × {gpus_per_node} GPUs = {} GPUs; at most {MAX_GPUS} are supported",
                nodes as u64 * gpus_per_node as u64
            ),
        )),
    }
}

fn search(s: &crate::goodput::SearchSpace) -> Result<(), Invalid> {
    let list = |field: &str, len: usize, max: usize| {
        if len == 0 {
            Err(Invalid::new(field, "must not be empty"))
        } else if len > max {
            Err(Invalid::new(field, format!("{len} entries; at most {max}")))
        } else {
            Ok(())
        }
    };
    list("search.batch_sizes", s.batch_sizes.len(), MAX_BATCH_SIZES)?;
    if let Some(b) = s.batch_sizes.iter().find(|b| **b == 0 || **b > MAX_BATCH) {
        return Err(Invalid::new(
            "search.batch_sizes",
            format!("batch sizes must lie in 1..={MAX_BATCH} samples, got {b}"),
        ));
    }
    list(
        "search.micro_batches",
        s.micro_batches.len(),
        MAX_SEARCH_LIST,
    )?;
    if let Some(m) = s
        .micro_batches
        .iter()
        .find(|m| **m == 0 || **m > MAX_MICRO_BATCH)
    {
        return Err(Invalid::new(
            "search.micro_batches",
            format!("micro-batch sizes must lie in 1..={MAX_MICRO_BATCH} samples, got {m}"),
        ));
    }
    list("search.zero", s.zero.len(), MAX_SEARCH_LIST)?;
    if let Some(z) = s.zero.iter().find(|z| **z > 3) {
        return Err(Invalid::new(
            "search.zero",
            format!("ZeRO stages are 0–3, got {z}"),
        ));
    }
    list("search.recompute", s.recompute.len(), MAX_SEARCH_LIST)?;
    list("search.interleave", s.interleave.len(), MAX_SEARCH_LIST)?;
    if let Some(v) = s
        .interleave
        .iter()
        .find(|v| **v == 0 || **v > MAX_INTERLEAVE)
    {
        return Err(Invalid::new(
            "search.interleave",
            format!("interleave factors must lie in 1..={MAX_INTERLEAVE}, got {v}"),
        ));
    }
    list(
        "search.context_parallel",
        s.context_parallel.len(),
        MAX_SEARCH_LIST,
    )?;
    if let Some(c) = s.context_parallel.iter().find(|c| **c == 0 || **c > 1024) {
        return Err(Invalid::new(
            "search.context_parallel",
            format!("context-parallel degrees lie in 1..=1024, got {c}"),
        ));
    }
    // Empty is allowed here: every degree the model and layout allow.
    if s.expert_parallel.len() > MAX_SEARCH_LIST {
        return Err(Invalid::new(
            "search.expert_parallel",
            format!(
                "{} entries; at most {MAX_SEARCH_LIST}",
                s.expert_parallel.len()
            ),
        ));
    }
    if let Some(e) = s.expert_parallel.iter().find(|e| **e == 0 || **e > 1024) {
        return Err(Invalid::new(
            "search.expert_parallel",
            format!("expert-parallel degrees lie in 1..=1024, got {e}"),
        ));
    }
    Ok(())
}

fn costs(c: &crate::plan::ReconfigCosts) -> Result<(), Invalid> {
    all_finite("costs", c)?;
    non_negative("costs.batch_only_s", c.batch_only_s)?;
    non_negative("costs.dp_resize_s", c.dp_resize_s)?;
    positive(
        "costs.checkpoint_bw_bytes_per_s",
        c.checkpoint_bw_bytes_per_s,
    )?;
    non_negative("costs.restart_s", c.restart_s)?;
    non_negative("costs.warmup_s", c.warmup_s)?;
    non_negative(
        "costs.checkpoint_bytes_per_param",
        c.checkpoint_bytes_per_param,
    )?;
    super::unit("costs.switch_threshold", c.switch_threshold)?;
    if let crate::plan::ReshardMode::InPlace {
        network_bw_bytes_per_s,
        reinit_s,
    } = &c.reshard
    {
        non_negative("costs.reshard.InPlace.reinit_s", *reinit_s)?;
        if let Some(bw) = network_bw_bytes_per_s {
            positive("costs.reshard.InPlace.network_bw_bytes_per_s", *bw)?;
        }
    }
    Ok(())
}

fn source(src: &DataSource) -> Result<(), Invalid> {
    match src {
        DataSource::Scenario(s) => scenario(s),
        DataSource::Stats { path, .. } | DataSource::Dumps { path, .. } if path.is_empty() => {
            Err(Invalid::new("source.path", "is empty"))
        }
        DataSource::Stats {
            seq_len: Some(0), ..
        }
        | DataSource::Dumps {
            seq_len: Some(0), ..
        }
        | DataSource::Live {
            seq_len: Some(0), ..
        } => Err(Invalid::new(
            "source.seq_len",
            "must be at least 1 token (leave it out to infer it), got 0",
        )),
        DataSource::Dumps {
            samples: Some(v), ..
        } => positive("source.samples", *v),
        DataSource::Live { target, .. } if target.is_empty() => {
            Err(Invalid::new("source.target", "is empty"))
        }
        _ => Ok(()),
    }
}

/// A scenario's law must give a finite, positive B_crit; its phases are bounded.
pub fn scenario(s: &Scenario) -> Result<(), Invalid> {
    if !(2..=MAX_PHASES).contains(&s.phases) {
        return Err(Invalid::new(
            "source.phases",
            format!("must lie in 2..={MAX_PHASES}, got {}", s.phases),
        ));
    }
    tokens_in_range("source.start_tokens", s.start_tokens, false)?;
    tokens_in_range("source.total_tokens", s.total_tokens, true)?;
    if s.nominal_batch == 0 || s.nominal_batch > MAX_BATCH {
        return Err(Invalid::new(
            "source.nominal_batch",
            format!(
                "must lie in 1..={MAX_BATCH} samples, got {}",
                s.nominal_batch
            ),
        ));
    }
    let law = "source.law";
    match &s.law {
        ScenarioLaw::KaplanChinchilla {
            b_star_tokens,
            alpha_b,
            loss,
            params,
        } => {
            positive(&format!("{law}.b_star_tokens"), *b_star_tokens)?;
            positive(&format!("{law}.alpha_b"), *alpha_b)?;
            positive(&format!("{law}.params"), *params)?;
            positive(&format!("{law}.loss.e"), loss.e)?;
            non_negative(&format!("{law}.loss.a"), loss.a)?;
            non_negative(&format!("{law}.loss.b"), loss.b)?;
            positive(&format!("{law}.loss.alpha"), loss.alpha)?;
            positive(&format!("{law}.loss.beta"), loss.beta)
        }
        ScenarioLaw::MerrillPlateau => Ok(()),
        ScenarioLaw::ZhangDataScaling {
            coefficient,
            exponent,
            tokens_per_param,
            reference_seq_len,
        } => {
            positive(&format!("{law}.coefficient"), *coefficient)?;
            positive(&format!("{law}.exponent"), *exponent)?;
            positive(&format!("{law}.tokens_per_param"), *tokens_per_param)?;
            positive(&format!("{law}.reference_seq_len"), *reference_seq_len)
        }
        ScenarioLaw::Piecewise { points } => {
            let field = format!("{law}.points");
            if points.is_empty() || points.len() > MAX_PIECEWISE_POINTS {
                return Err(Invalid::new(
                    field,
                    format!("{} points; give 1..={MAX_PIECEWISE_POINTS}", points.len()),
                ));
            }
            for (i, (t, b)) in points.iter().enumerate() {
                if !(t.is_finite() && b.is_finite() && *b > 0.0) {
                    return Err(Invalid::new(
                        format!("{field}[{i}]"),
                        format!("needs finite tokens and a positive finite B_crit, got ({t}, {b})"),
                    ));
                }
            }
            Ok(())
        }
    }
}
