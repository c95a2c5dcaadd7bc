//! Mixture-of-experts batch floor: at small batches each expert sees few tokens, per-expert
//! load fluctuates around its mean, and tokens above an expert's capacity are dropped. The
//! smallest batch whose expected dropped share is acceptable is a floor on the batch axis that
//! has nothing to do with gradient noise.
//!
//! Model: the `B·s` tokens of a step each pick `k` of `E` experts uniformly, so one expert's
//! load is Binomial(B·s, k/E) with mean `B·s·k/E`; capacity is `capacity_factor` × the mean;
//! the expected overflow E[(X − C)⁺] uses the normal approximation.

use super::MoeSpec;

/// Default acceptable share of dropped token-expert assignments for the floor (1 %).
pub const DEFAULT_MAX_DROP: f64 = 0.01;

/// Mean tokens routed to one expert per step: B·s·k/E.
pub fn tokens_per_expert(spec: &MoeSpec, batch: u64, seq_len: u32) -> f64 {
    batch as f64 * seq_len as f64 * spec.top_k as f64 / spec.experts.max(1) as f64
}

/// Expected share of token-expert assignments dropped at capacity, 0–1 (0 for dropless
/// routing, no capacity factor).
pub fn dropped_share(spec: &MoeSpec, batch: u64, seq_len: u32) -> f64 {
    let n = batch as f64 * seq_len as f64;
    let p = (spec.top_k as f64 / spec.experts.max(1) as f64).min(1.0);
    let mean = n * p;
    if mean <= 0.0 {
        return 1.0;
    }
    // Dropless routing drops nothing.
    let Some(capacity_factor) = spec.capacity_factor else {
        return 0.0;
    };
    let sd = (n * p * (1.0 - p)).sqrt();
    let capacity = capacity_factor * mean;
    if sd <= 0.0 {
        return ((mean - capacity) / mean).max(0.0);
    }
    let z = (capacity - mean) / sd;
    let overflow = sd * (normal_pdf(z) - z * normal_sf(z));
    (overflow / mean).clamp(0.0, 1.0)
}

/// Smallest batch (samples) whose expected dropped share is at most `max_drop`, searched up to
/// `max_batch`; `None` if no batch up to there qualifies (e.g. capacity factor below 1).
pub fn batch_floor(spec: &MoeSpec, seq_len: u32, max_drop: f64, max_batch: u64) -> Option<u64> {
    let ok = |b: u64| dropped_share(spec, b, seq_len) <= max_drop;
    if !ok(max_batch.max(1)) {
        return None;
    }
    // The share falls monotonically with the batch: bisect.
    let (mut lo, mut hi) = (0u64, max_batch.max(1));
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if ok(mid) { hi = mid } else { lo = mid }
    }
    Some(hi)
}

fn normal_pdf(z: f64) -> f64 {
    (-0.5 * z * z).exp() / (2.0 * std::f64::consts::PI).sqrt()
}

/// Upper tail 1 − Φ(z) via erfc.
fn normal_sf(z: f64) -> f64 {
    0.5 * erfc(z / std::f64::consts::SQRT_2)
}

fn erfc(x: f64) -> f64 {
    // Numerical Recipes erfcc (Chebyshev fit), fractional error < 1.2e-7 everywhere.
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let r = t * poly.exp();
    if x >= 0.0 { r } else { 2.0 - r }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{RngExt, SeedableRng};

    fn spec(e: u32, k: u32, cf: f64) -> MoeSpec {
        MoeSpec {
            experts: e,
            top_k: k,
            capacity_factor: Some(cf),
        }
    }

    /// A router without a capacity (dropless, the field left out) drops nothing at any
    /// batch, so it puts no floor on the batch; each way of writing the factor reads the same.
    #[test]
    fn dropless_routing_has_no_floor_and_each_spelling_of_the_factor_reads_the_same() {
        let read = |moe: &str| -> MoeSpec { ron::from_str(moe).expect(moe) };
        let dropless = read("(experts: 8, top_k: 2)");
        assert_eq!(dropless.capacity_factor, None);
        assert_eq!(
            read("(experts: 8, top_k: 2, capacity_factor: None)"),
            dropless
        );
        assert_eq!(dropped_share(&dropless, 1, 1), 0.0);
        assert_eq!(
            batch_floor(&dropless, 1, DEFAULT_MAX_DROP, 1 << 20),
            Some(1)
        );
        let plain = read("(experts: 8, top_k: 2, capacity_factor: 1.25)");
        assert_eq!(plain.capacity_factor, Some(1.25));
        assert_eq!(
            read("(experts: 8, top_k: 2, capacity_factor: Some(1.25))"),
            plain
        );
        assert!(dropped_share(&plain, 1, 16) > DEFAULT_MAX_DROP);
        let json: MoeSpec =
            serde_json::from_str(r#"{"experts":8,"top_k":2,"capacity_factor":null}"#)
                .expect("json null");
        assert_eq!(json, dropless);
        assert!(
            ron::from_str::<MoeSpec>("(experts: 8, top_k: 2, capacity_factor: \"x\")").is_err()
        );
    }

    #[test]
    fn erfc_matches_known_values() {
        for (x, want) in [
            (0.0, 1.0),
            (0.5, 0.479_500_122),
            (1.0, 0.157_299_207),
            (-1.0, 1.842_700_793),
        ] {
            assert!((erfc(x) - want).abs() < 1e-6, "erfc({x})");
        }
    }

    #[test]
    fn dropped_share_matches_simulated_routing() {
        let s = spec(16, 2, 1.1);
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let (batch, seq) = (4u64, 256u32);
        let n = batch as usize * seq as usize;
        let cap = (s.capacity_factor.unwrap_or(f64::INFINITY) * tokens_per_expert(&s, batch, seq))
            .floor() as usize;
        let trials = 400;
        let mut dropped = 0usize;
        for _ in 0..trials {
            let mut load = [0usize; 16];
            for _ in 0..n {
                let a = rng.random_range(0..16usize);
                let mut b = rng.random_range(0..15usize);
                if b >= a {
                    b += 1;
                }
                load[a] += 1;
                load[b] += 1;
            }
            dropped += load.iter().map(|&l| l.saturating_sub(cap)).sum::<usize>();
        }
        let simulated = dropped as f64 / (trials * n * 2) as f64;
        let model = dropped_share(&s, batch, seq);
        assert!(
            (model - simulated).abs() < 0.2 * simulated + 0.002,
            "{model} vs {simulated}"
        );
    }

    #[test]
    fn floor_is_where_the_share_crosses_the_threshold() {
        let s = spec(64, 2, 1.0);
        let floor = batch_floor(&s, 1024, 0.01, 1 << 20).expect("a floor exists");
        assert!(dropped_share(&s, floor, 1024) <= 0.01);
        assert!(dropped_share(&s, floor - 1, 1024) > 0.01);
        // More experts per token budget → higher floor.
        let more = batch_floor(&spec(256, 2, 1.0), 1024, 0.01, 1 << 20).expect("floor");
        assert!(more > floor);
        // Capacity below the mean always drops tokens.
        assert_eq!(batch_floor(&spec(8, 1, 0.8), 1024, 0.01, 1 << 20), None);
    }
}
