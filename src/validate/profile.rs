//! Model, hardware and efficiency profiles: finite, positive, in range, and a model shape
//! the performance model can split (hidden divisible by heads, key/value heads dividing the
//! heads). Fields added to these types later are still checked to be finite (see
//! [`super::all_finite`]); their ranges need a line here.

use super::{Invalid, all_finite, fraction, in_range, non_negative, positive, unit};
use crate::perf::{EfficiencyParams, HardwareProfile, ModelProfile};

/// Longest profile name accepted, characters.
const MAX_NAME_CHARS: usize = 128;

/// A profile's `name` as every output prints it: one line of printable text, 1 to
/// [`MAX_NAME_CHARS`] characters (a control character would reach the user's terminal as an
/// escape sequence).
pub fn name(field: &str, name: &str) -> Result<(), Invalid> {
    if name.trim().is_empty() {
        return Err(Invalid::new(field, "must not be empty"));
    }
    if name.chars().count() > MAX_NAME_CHARS {
        return Err(Invalid::new(
            field,
            format!("must be at most {MAX_NAME_CHARS} characters"),
        ));
    }
    if let Some(c) = name.chars().find(|c| c.is_control()) {
        return Err(Invalid::new(
            field,
            format!("must be printable text; it holds the control character {c:?}"),
        ));
    }
    Ok(())
}

/// Check a model profile's shape; `at` prefixes field paths (e.g. "model").
pub fn model(m: &ModelProfile, at: &str) -> Result<(), Invalid> {
    let f = |name: &str| format!("{at}.{name}");
    name(&f("name"), &m.name)?;
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
        if let Some(cf) = moe.capacity_factor {
            positive(&f("moe.capacity_factor"), cf)?;
        }
    }
    Ok(())
}

/// Check a hardware profile; `at` prefixes field paths (e.g. "cluster.hardware").
pub fn hardware(h: &HardwareProfile, at: &str) -> Result<(), Invalid> {
    let f = |name: &str| format!("{at}.{name}");
    name(&f("name"), &h.name)?;
    all_finite(at, h)?;
    // Physical ranges, wide enough for any accelerator of the next decades and narrow enough
    // that step times stay finite numbers.
    in_range(&f("peak_flops"), h.peak_flops, 1e9, 1e18, "FLOP/s")?;
    // After peak_flops is in range: the comparison is with a physical peak.
    if h.fp8_peak_flops != 0.0 {
        // 0: no FP8 peak known. FP8 tensor cores are never slower than the 16-bit ones.
        in_range(&f("fp8_peak_flops"), h.fp8_peak_flops, 1e9, 1e18, "FLOP/s")?;
        if h.fp8_peak_flops < h.peak_flops {
            return Err(Invalid::new(
                f("fp8_peak_flops"),
                format!(
                    "{} is below peak_flops {}: FP8 is at least as fast as BF16",
                    super::num(h.fp8_peak_flops),
                    super::num(h.peak_flops)
                ),
            ));
        }
    }
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

/// Longest fixed cost any one kernel, micro-batch or ring step may be given, seconds: far
/// beyond any real one, short enough that step times stay readable numbers.
const MAX_FIXED_COST_S: f64 = 10.0;

/// Check the efficiency parameters; `at` prefixes field paths (e.g. "efficiency"). Every
/// field is bounded on both sides: a value outside its range would make the model report a
/// throughput above the GPU's peak, a negative or non-finite time, or a cost nobody measured.
pub fn efficiency(e: &EfficiencyParams, at: &str) -> Result<(), Invalid> {
    let f = |name: &str| format!("{at}.{name}");
    all_finite(at, e)?;
    fraction(&f("max_eff"), e.max_eff)?;
    fraction(&f("attn_eff"), e.attn_eff)?;
    fraction(&f("attn_bwd_eff"), e.attn_bwd_eff)?;
    fraction(&f("mem_eff"), e.mem_eff)?;
    fraction(&f("fp8_max_eff"), e.fp8_max_eff)?;
    // Speed-ups and slowdowns of one attention kernel against another: positive, and no
    // kernel a hundred times another.
    in_range(
        &f("attn_native_speedup"),
        e.attn_native_speedup,
        0.01,
        100.0,
        "x",
    )?;
    in_range(
        &f("attn_triton_slowdown"),
        e.attn_triton_slowdown,
        0.01,
        100.0,
        "x",
    )?;
    for (name, v) in [
        ("gemm_overhead_s", e.gemm_overhead_s),
        ("kernel_overhead_s", e.kernel_overhead_s),
        ("microbatch_overhead_s", e.microbatch_overhead_s),
        ("vpp_stage_overhead_s", e.vpp_stage_overhead_s),
        ("hop_latency_intra_s", e.hop_latency_intra_s),
        ("hop_latency_inter_s", e.hop_latency_inter_s),
    ] {
        in_range(&f(name), v, 0.0, MAX_FIXED_COST_S, "s")?;
    }
    in_range(&f("gemm_k_half"), e.gemm_k_half, 0.0, 1e9, "elements")?;
    for (name, v) in [
        ("coll_chunk_half_bytes", e.coll_chunk_half_bytes),
        ("zero3_chunk_half_bytes", e.zero3_chunk_half_bytes),
    ] {
        in_range(&f(name), v, 0.0, 1e12, "bytes")?;
    }
    in_range(
        &f("grad_bucket_bytes"),
        e.grad_bucket_bytes,
        1.0,
        1e12,
        "bytes",
    )?;
    in_range(
        &f("grad_bucket_params_per_dp_rank"),
        e.grad_bucket_params_per_dp_rank,
        0.0,
        1e12,
        "parameters",
    )?;
    unit(&f("tp_overlap"), e.tp_overlap)?;
    unit(&f("grad_reduce_overlap"), e.grad_reduce_overlap)?;
    unit(&f("zero3_overlap"), e.zero3_overlap)?;
    unit(&f("fsdp_overlap"), e.fsdp_overlap)?;
    in_range(&f("overlap_cost"), e.overlap_cost, 0.0, 10.0, "x")?;
    // Bytes a gradient element is kept and reduced in: FP8 to FP64.
    in_range(&f("grad_bytes"), e.grad_bytes, 1.0, 8.0, "bytes")?;
    in_range(&f("hsdp_shard_gpus"), e.hsdp_shard_gpus, 1.0, 1e7, "GPUs")?;
    in_range(
        &f("zero3_collectives_per_layer"),
        e.zero3_collectives_per_layer,
        1.0,
        1e4,
        "collectives",
    )?;
    for (name, v) in [
        ("intra_link_scale", e.intra_link_scale),
        ("inter_link_scale", e.inter_link_scale),
    ] {
        in_range(&f(name), v, 1e-3, 100.0, "x")?;
    }
    for (name, v) in [
        ("intra_latency_scale", e.intra_latency_scale),
        ("inter_latency_scale", e.inter_latency_scale),
    ] {
        in_range(&f(name), v, 0.0, 1e4, "x")?;
    }
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
    name("hardware", &c.hardware).map_err(|e| format!("{}: {e}", path.display()))?;
    name("model", &c.model).map_err(|e| format!("{}: {e}", path.display()))?;
    for (field, v) in [
        ("rms_rel_error", c.rms_rel_error),
        ("profile_rms_rel_error", c.profile_rms_rel_error),
    ] {
        if !(v.is_finite() && v >= 0.0) {
            return Err(format!(
                "{}: {field}: must be a finite number ≥ 0, got {v}",
                path.display()
            ));
        }
    }
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

    /// A peak out of range is named as such, not as an FP8 peak "below" it.
    #[test]
    fn an_absurd_peak_is_named_before_the_fp8_peak_is_compared_with_it() {
        let mut h = crate::profiles::hardware("h100-sxm", Path::new(".")).expect("built-in");
        h.peak_flops = 1e30;
        let e = hardware(&h, "hardware").expect_err("out of range");
        assert!(e.to_string().contains("hardware.peak_flops"), "{e}");
        h.peak_flops = 2.5e15;
        let e = hardware(&h, "hardware").expect_err("fp8 below");
        assert!(e.to_string().contains("hardware.fp8_peak_flops"), "{e}");
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
                        capacity_factor: Some(f64::NAN),
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
