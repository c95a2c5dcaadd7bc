//! Model, hardware and efficiency profiles: finite, positive, in range, and a model shape
//! the performance model can split (hidden divisible by heads, key/value heads dividing the
//! heads). Fields added to these types later are still checked to be finite (see
//! [`super::all_finite`]); their ranges need a line here.

use super::{Invalid, all_finite, fraction, in_range, non_negative, positive, unit};
use crate::perf::{EfficiencyParams, HardwareProfile, ModelProfile};

/// Check a model profile's shape; `at` prefixes field paths (e.g. "model").
pub fn model(m: &ModelProfile, at: &str) -> Result<(), Invalid> {
    let f = |name: &str| format!("{at}.{name}");
    let nonzero = |name: &str, v: u32| {
        if v == 0 {
            Err(Invalid::new(f(name), "must be at least 1, got 0"))
        } else {
            Ok(())
        }
    };
    nonzero("layers", m.layers)?;
    nonzero("hidden", m.hidden)?;
    nonzero("heads", m.heads)?;
    nonzero("kv_heads", m.kv_heads)?;
    nonzero("ffn_hidden", m.ffn_hidden)?;
    nonzero("vocab", m.vocab)?;
    nonzero("seq_len", m.seq_len)?;
    if !m.hidden.is_multiple_of(m.heads) {
        return Err(Invalid::new(
            f("hidden"),
            format!(
                "{} is not divisible by {} heads (each head needs a whole width)",
                m.hidden, m.heads
            ),
        ));
    }
    if m.kv_heads > m.heads || !m.heads.is_multiple_of(m.kv_heads) {
        return Err(Invalid::new(
            f("kv_heads"),
            format!(
                "{} key/value heads must be at most {} heads and divide them",
                m.kv_heads, m.heads
            ),
        ));
    }
    if let Some(moe) = &m.moe {
        if moe.experts == 0 {
            return Err(Invalid::new(f("moe.experts"), "must be at least 1, got 0"));
        }
        if moe.top_k == 0 || moe.top_k > moe.experts {
            return Err(Invalid::new(
                f("moe.top_k"),
                format!(
                    "must lie in 1..={} (the experts), got {}",
                    moe.experts, moe.top_k
                ),
            ));
        }
        positive(&f("moe.capacity_factor"), moe.capacity_factor)?;
    }
    Ok(())
}

/// Check a hardware profile; `at` prefixes field paths (e.g. "cluster.hardware").
pub fn hardware(h: &HardwareProfile, at: &str) -> Result<(), Invalid> {
    let f = |name: &str| format!("{at}.{name}");
    all_finite(at, h)?;
    if h.fp8_peak_flops != 0.0 {
        // 0: no FP8 peak known.
        in_range(&f("fp8_peak_flops"), h.fp8_peak_flops, 1e9, 1e18, "FLOP/s")?;
    }
    // Physical ranges, wide enough for any accelerator of the next decades and narrow enough
    // that step times stay finite numbers.
    in_range(&f("peak_flops"), h.peak_flops, 1e9, 1e18, "FLOP/s")?;
    in_range(&f("hbm_bytes"), h.hbm_bytes, 1e6, 1e14, "bytes")?;
    for (name, v) in [
        ("mem_bw_bytes_per_s", h.mem_bw_bytes_per_s),
        ("intra_bw_bytes_per_s", h.intra_bw_bytes_per_s),
        ("inter_bw_bytes_per_s", h.inter_bw_bytes_per_s),
    ] {
        in_range(&f(name), v, 1e3, 1e16, "bytes/s")?;
    }
    if h.scale_up_domain == 0 {
        return Err(Invalid::new(
            f("scale_up_domain"),
            "must be at least 1, got 0",
        ));
    }
    in_range(&f("intra_latency_s"), h.intra_latency_s, 0.0, 1.0, "s")?;
    in_range(&f("inter_latency_s"), h.inter_latency_s, 0.0, 1.0, "s")?;
    fraction(&f("intra_link_eff"), h.intra_link_eff)?;
    fraction(&f("inter_link_eff"), h.inter_link_eff)?;
    non_negative(&f("reserved_bytes"), h.reserved_bytes)?;
    if h.reserved_bytes >= h.hbm_bytes {
        return Err(Invalid::new(
            f("reserved_bytes"),
            format!(
                "{} leaves no memory of the {} bytes of HBM",
                h.reserved_bytes, h.hbm_bytes
            ),
        ));
    }
    // The profile's kernel efficiencies: every command that loads a profile computes with them.
    efficiency(&h.efficiency, &f("efficiency"))?;
    Ok(())
}

/// Check the efficiency parameters; `at` prefixes field paths (e.g. "efficiency").
pub fn efficiency(e: &EfficiencyParams, at: &str) -> Result<(), Invalid> {
    let f = |name: &str| format!("{at}.{name}");
    all_finite(at, e)?;
    fraction(&f("max_eff"), e.max_eff)?;
    non_negative(&f("gemm_overhead_s"), e.gemm_overhead_s)?;
    non_negative(&f("gemm_k_half"), e.gemm_k_half)?;
    fraction(&f("attn_eff"), e.attn_eff)?;
    positive(&f("attn_native_speedup"), e.attn_native_speedup)?;
    fraction(&f("mem_eff"), e.mem_eff)?;
    non_negative(&f("kernel_overhead_s"), e.kernel_overhead_s)?;
    unit(&f("tp_overlap"), e.tp_overlap)?;
    non_negative(&f("overlap_cost"), e.overlap_cost)?;
    positive(&f("grad_bytes"), e.grad_bytes)?;
    positive(&f("intra_link_scale"), e.intra_link_scale)?;
    positive(&f("inter_link_scale"), e.inter_link_scale)?;
    non_negative(&f("intra_latency_scale"), e.intra_latency_scale)?;
    non_negative(&f("inter_latency_scale"), e.inter_latency_scale)?;
    non_negative(&f("microbatch_overhead_s"), e.microbatch_overhead_s)?;
    non_negative(&f("vpp_stage_overhead_s"), e.vpp_stage_overhead_s)?;
    unit(&f("grad_reduce_overlap"), e.grad_reduce_overlap)?;
    positive(&f("grad_bucket_bytes"), e.grad_bucket_bytes)?;
    non_negative(
        &f("grad_bucket_params_per_dp_rank"),
        e.grad_bucket_params_per_dp_rank,
    )?;
    positive(
        &f("zero3_collectives_per_layer"),
        e.zero3_collectives_per_layer,
    )?;
    unit(&f("zero3_overlap"), e.zero3_overlap)?;
    non_negative(&f("hop_latency_intra_s"), e.hop_latency_intra_s)?;
    non_negative(&f("hop_latency_inter_s"), e.hop_latency_inter_s)?;
    non_negative(&f("coll_chunk_half_bytes"), e.coll_chunk_half_bytes)?;
    non_negative(&f("zero3_chunk_half_bytes"), e.zero3_chunk_half_bytes)?;
    Ok(())
}

/// Read a calibration file and check its parameters: the one loader every path uses
/// (`--calibration` on each command, a session's `calibration:`), so that a file is accepted
/// or refused the same way everywhere; the error names the file and the field.
pub fn load_calibration(
    path: &std::path::Path,
) -> Result<crate::perf::calibration_file::CalibrationFile, String> {
    let c =
        crate::perf::calibration_file::CalibrationFile::load(path).map_err(|e| e.to_string())?;
    efficiency(&c.params, "params").map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn llama() -> ModelProfile {
        crate::profiles::model("llama-7b", Path::new(".")).expect("built-in")
    }

    #[test]
    fn builtin_profiles_pass() {
        for (name, _) in crate::profiles::BUILTIN_MODELS {
            let m = crate::profiles::model(name, Path::new(".")).expect("built-in");
            model(&m, "model").expect(name);
        }
        for (name, _) in crate::profiles::BUILTIN_HARDWARE {
            let h = crate::profiles::hardware(name, Path::new(".")).expect("built-in");
            hardware(&h, "hardware").expect(name);
        }
        efficiency(&EfficiencyParams::default(), "efficiency").expect("defaults");
    }

    #[test]
    fn bad_shapes_name_the_field() {
        type Edit = fn(&mut ModelProfile);
        let cases: [(Edit, &str); 6] = [
            (|m| m.hidden = 4097, "model.hidden"),
            (|m| m.kv_heads = m.heads * 2, "model.kv_heads"),
            (|m| m.kv_heads = 3, "model.kv_heads"),
            (|m| m.ffn_hidden = 0, "model.ffn_hidden"),
            (|m| m.vocab = 0, "model.vocab"),
            (
                |m| {
                    m.moe = Some(crate::perf::MoeSpec {
                        experts: 8,
                        top_k: 2,
                        capacity_factor: f64::NAN,
                    })
                },
                "model.moe.capacity_factor",
            ),
        ];
        for (edit, field) in cases {
            let mut m = llama();
            edit(&mut m);
            let err = model(&m, "model").expect_err(field);
            assert_eq!(err.field, field, "{err}");
        }
    }

    #[test]
    fn non_finite_hardware_and_efficiency_are_errors() {
        let mut h = crate::profiles::hardware("h100-sxm", Path::new(".")).expect("built-in");
        h.mem_bw_bytes_per_s = f64::NAN;
        let err = hardware(&h, "hw").expect_err("NaN bandwidth");
        assert_eq!(err.field, "hw.mem_bw_bytes_per_s", "{err}");
        let e = EfficiencyParams {
            tp_overlap: f64::NAN,
            ..EfficiencyParams::default()
        };
        let err = efficiency(&e, "efficiency").expect_err("NaN overlap");
        assert_eq!(err.field, "efficiency.tp_overlap", "{err}");
        let e = EfficiencyParams {
            max_eff: -0.5,
            ..EfficiencyParams::default()
        };
        assert_eq!(
            efficiency(&e, "efficiency").expect_err("negative").field,
            "efficiency.max_eff"
        );
    }
}
