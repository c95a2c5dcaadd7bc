//! Calibration recovers known efficiency and link parameters from noisy synthetic measurements.

use copus::perf::calibrate::{Knob, Target, calibrate};
use copus::perf::crossval::{mean_abs, rel_errors};
use copus::perf::knob_selection::{CANDIDATES, select_knobs};
use copus::perf::measurements::{Measurement, from_step_stats};
use copus::perf::validation;
use copus::perf::{EfficiencyParams, ParallelConfig, PerfContext, Recompute, predict};
use copus::profiles;
use copus::stats::{StepConfig, StepStats};
use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, Normal};
use std::path::Path;

#[test]
fn recovers_parameters_far_from_the_defaults_within_five_percent() {
    let hw = profiles::hardware("h100-sxm", Path::new(".")).expect("hw");
    let model = profiles::model("llama-7b", Path::new(".")).expect("model");
    // Far from the profile: a slower GEMM plateau, a heavy framework cost per micro-batch,
    // and links at half and a third of their datasheet efficiency.
    let truth = EfficiencyParams {
        max_eff: 0.42,
        microbatch_overhead_s: 1.2e-3,
        intra_link_scale: 0.5,
        inter_link_scale: 0.35,
        ..hw.efficiency.clone()
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
    while points.len() < 60 {
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
            zero: [0u8, 1][rng.random_range(0..2usize)],
            recompute: Recompute::Selective,
            vpp: 1,
            cp: 1,
            ep: 1,
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
        Knob::MicrobatchOverhead,
        Knob::IntraLink,
        Knob::InterLink,
    ];
    let fit = calibrate(&target, &hw.efficiency, &knobs, &points, 100).expect("calibrates");
    println!(
        "rms {:.4} -> {:.4} in {} iterations",
        fit.initial_rms, fit.rms, fit.iterations
    );
    assert!(fit.initial_rms > 0.2 && fit.rms < 0.015, "rms {}", fit.rms);
    let (mut got, mut want) = (fit.params.clone(), truth.clone());
    for k in knobs {
        let (g, w) = (*k.slot(&mut got), *k.slot(&mut want));
        println!("{:24} fitted {g:.4e} truth {w:.4e}", k.name());
        // The per-micro-batch cost is a small share of these steps (attention and GEMMs
        // dominate), so the prior toward the start holds it within 20 %, the rest within 5 %.
        let tol = if k == Knob::MicrobatchOverhead {
            0.2
        } else {
            0.05
        };
        assert!((g / w - 1.0).abs() < tol, "{}: {g} vs {w}", k.name());
    }
    assert_eq!(fit.residuals.len(), points.len());
}

#[test]
fn half_the_splits_of_one_job_predict_the_other_half() {
    // Narayanan et al. 2021, Figures 14-16: (TP, DP, PP, micro-batch, batch) splits of one job
    // on 64 A100 (assets/validation/narayanan2021-figures.csv). Start from the generic
    // efficiencies (what an accelerator without a fitted profile gets), calibrate on every
    // other split, predict the rest.
    let text = std::fs::read_to_string("assets/validation/narayanan2021-figures.csv")
        .expect("validation file");
    let all = validation::parse(&text, "figures").expect("parses");
    let hw = profiles::hardware("a100-80g", Path::new(".")).expect("hw");
    let generic = EfficiencyParams::default();
    for job in ["fig14-15-5.9b", "fig16-91b"] {
        let rows: Vec<_> = all.iter().filter(|r| r.set == job).cloned().collect();
        let samples = validation::samples(&rows, &hw, &generic).expect("samples");
        let (stack, target) = (samples[0].eff.clone(), samples[0].target);
        let points: Vec<Measurement> = samples.iter().map(|s| s.measurement).collect();
        let (fit_on, held): (Vec<_>, Vec<_>) =
            points.iter().enumerate().partition(|(i, _)| i % 2 == 0);
        let fit_on: Vec<Measurement> = fit_on.into_iter().map(|(_, m)| *m).collect();
        let held: Vec<Measurement> = held.into_iter().map(|(_, m)| *m).collect();
        let knobs = [Knob::MaxEff, Knob::MicrobatchOverhead];
        let fit = calibrate(&target, &stack, &knobs, &fit_on, 100).expect("calibrates");
        let before = mean_abs(&rel_errors(&target, &stack, &held).expect("runs"));
        let after = mean_abs(&rel_errors(&target, &fit.params, &held).expect("runs"));
        println!(
            "{job}: held-out splits: generic model {:.1}% -> calibrated on the other half {:.1}%",
            before * 100.0,
            after * 100.0
        );
        // What `copus calibrate` frees without --fit: the parameters cross-validation over the
        // fitted half's configurations picks (five configurations: one parameter).
        let sel = select_knobs(&target, &stack, &CANDIDATES, &fit_on, 5).expect("selects");
        let fit = calibrate(&target, &stack, &sel.knobs, &fit_on, 100).expect("calibrates");
        let chosen = mean_abs(&rel_errors(&target, &fit.params, &held).expect("runs"));
        let names: Vec<&str> = sel.knobs.iter().map(|k| k.name()).collect();
        println!(
            "{job}: selected {names:?}: held-out splits {:.1}%",
            chosen * 100.0
        );
        // docs/MODEL.md: on the 91B job both calibrations cut the error by over two thirds; on
        // the 5.9B job (its two cross-node TP-32 splits in the fitted half, predicted within
        // 10 % since the all-reduce may take NCCL's tree) the selection frees the plateau and
        // predicts the other half within the 6 % issue 26 asks, better than the generic model
        // though by less than a third (7.2 -> 5.5 %).
        assert!(chosen <= 0.06, "{job}: selected calibration {chosen}");
        assert!(chosen < before, "{job}: selection {chosen} vs {before}");
        assert_eq!(sel.knobs.len(), 1, "{job}: {names:?}");
        if job == "fig16-91b" {
            assert!(after <= 0.08 && chosen <= 0.08, "{job}: {after} {chosen}");
            assert!(
                after < before / 1.5 && chosen < before / 1.5,
                "{job}: {before}"
            );
        } else {
            assert!(
                after <= 0.07 && after < before,
                "{job}: calibrated mean error {after}"
            );
        }
    }
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
