//! Calibration recovers known efficiency and link parameters from noisy synthetic measurements.

use copus::perf::calibrate::{Knob, Target, calibrate};
use copus::perf::measurements::{Measurement, from_step_stats};
use copus::perf::{EfficiencyParams, ParallelConfig, PerfContext, Recompute, predict};
use copus::profiles;
use copus::stats::{StepConfig, StepStats};
use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, Normal};
use std::path::Path;

#[test]
fn recovers_known_parameters_from_noisy_measurements() {
    let hw = profiles::hardware("h100-sxm", Path::new(".")).expect("hw");
    let model = profiles::model("llama-7b", Path::new(".")).expect("model");
    let truth = EfficiencyParams {
        max_eff: 0.52,
        gemm_overhead_s: 40e-6,
        intra_link_scale: 0.8,
        inter_link_scale: 0.55,
        ..EfficiencyParams::default()
    };
    let ctx = PerfContext {
        hw: &hw,
        model: &model,
        eff: &truth,
        gpus_per_node: 8,
    };
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    let noise = Normal::<f64>::new(0.0, 0.01).expect("normal");
    let mut points = Vec::new();
    while points.len() < 40 {
        let tp = [1u32, 2, 4, 8][rng.random_range(0..4usize)];
        let pp = [1u32, 2, 4][rng.random_range(0..3usize)];
        let dp = 32 / tp / pp;
        let mbs = [1u32, 2, 4][rng.random_range(0..3usize)];
        let batch = dp as u64 * mbs as u64 * [1u64, 2, 4, 8, 16][rng.random_range(0..5usize)];
        let config = ParallelConfig {
            dp,
            tp,
            pp,
            mbs,
            zero: 1,
            recompute: Recompute::Selective,
            vpp: 1,
        };
        let Ok(p) = predict(&ctx, &config, batch) else {
            continue;
        };
        points.push(Measurement {
            config,
            batch,
            step_time_s: p.step_time_s * noise.sample(&mut rng).exp(),
        });
    }
    let target = Target {
        hw: &hw,
        model: &model,
        gpus_per_node: 8,
    };
    let knobs = [
        Knob::MaxEff,
        Knob::GemmOverhead,
        Knob::IntraLink,
        Knob::InterLink,
    ];
    let fit =
        calibrate(&target, &EfficiencyParams::default(), &knobs, &points, 100).expect("calibrates");
    println!(
        "rms {:.4} → {:.4} in {} iterations; max_eff {:.3}, gemm_overhead {:.1} µs, intra {:.3}, inter {:.3}",
        fit.initial_rms,
        fit.rms,
        fit.iterations,
        fit.params.max_eff,
        fit.params.gemm_overhead_s * 1e6,
        fit.params.intra_link_scale,
        fit.params.inter_link_scale
    );
    let worst = fit.residuals.iter().fold(0.0f64, |a, r| a.max(r.abs()));
    println!("worst residual {:.2}%", worst * 100.0);
    assert!(fit.initial_rms > 0.1 && fit.rms < 0.015, "rms {}", fit.rms);
    let close = |got: f64, want: f64, tol: f64| (got / want - 1.0).abs() < tol;
    assert!(close(fit.params.max_eff, truth.max_eff, 0.03));
    assert!(close(
        fit.params.inter_link_scale,
        truth.inter_link_scale,
        0.05
    ));
    assert!(close(
        fit.params.intra_link_scale,
        truth.intra_link_scale,
        0.15
    ));
    assert!(close(
        fit.params.gemm_overhead_s,
        truth.gemm_overhead_s,
        0.2
    ));
    assert_eq!(fit.residuals.len(), points.len());
}

#[test]
fn step_stats_with_time_and_config_become_measurements() {
    let mut a = StepStats::new(1, 4.0, 64.0, 2.0, 1.0);
    a.step_time_s = Some(1.5);
    a.config = Some(StepConfig {
        dp: 8,
        tp: 2,
        pp: 2,
        mbs: 2,
    });
    let b = StepStats::new(2, 4.0, 64.0, 2.0, 1.0); // no timing: ignored
    let mut c = a.clone();
    c.skipped = Some("non-finite".into());
    let m = from_step_stats(&[a, b, c], 1, Recompute::Full);
    assert_eq!(m.len(), 1);
    assert_eq!((m[0].batch, m[0].config.tp, m[0].step_time_s), (64, 2, 1.5));
    assert_eq!(m[0].config.recompute, Recompute::Full);
}
