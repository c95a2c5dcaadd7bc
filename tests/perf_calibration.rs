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

/// FP8 step times of six 16-GPU layouts of llama-7b under `truth`, times `slow`.
fn fp8_points(truth: &EfficiencyParams, slow: f64) -> Vec<Measurement> {
    let hw = profiles::hardware("h100-sxm", Path::new(".")).expect("hw");
    let model = profiles::model("llama-7b", Path::new(".")).expect("model");
    let ctx = PerfContext {
        hw: &hw,
        model: &model,
        eff: truth,
        gpus_per_node: 8,
    };
    let layouts = [
        (1u32, 1u32, 1u32),
        (2, 1, 1),
        (1, 2, 2),
        (4, 1, 2),
        (2, 2, 1),
        (1, 1, 4),
    ];
    layouts
        .into_iter()
        .enumerate()
        .map(|(i, (tp, pp, mbs))| {
            let dp = 16 / tp / pp;
            let config = crate::perf_model::cfg(dp, tp, pp, mbs);
            let batch = u64::from(dp * mbs) * 8;
            let t = predict(&ctx, &config, batch).expect("runs").step_time_s;
            Measurement {
                config,
                batch,
                step_time_s: t * slow * (1.0 + 0.005 * (i as f64 - 2.5)),
            }
        })
        .collect()
}

/// The H100 profile under an FP8 stack.
fn fp8_start() -> EfficiencyParams {
    let hw = profiles::hardware("h100-sxm", Path::new(".")).expect("hw");
    copus::perf::Stack {
        precision: Some(copus::perf::efficiency::Precision::Fp8),
        ..copus::perf::Stack::default()
    }
    .apply(&hw.efficiency)
}

/// FP8 step times from a cluster whose FP8 GEMMs run below the profile's plateau: the
/// selection frees the FP8 plateau (it was no candidate, and FP8 rows freed far-off proxies).
#[test]
fn fp8_steps_free_the_fp8_gemm_plateau() {
    let hw = profiles::hardware("h100-sxm", Path::new(".")).expect("hw");
    let model = profiles::model("llama-7b", Path::new(".")).expect("model");
    let start = fp8_start();
    let truth = EfficiencyParams {
        fp8_max_eff: start.fp8_max_eff * 0.7,
        ..start.clone()
    };
    let points = fp8_points(&truth, 1.0);
    let target = Target {
        hw: &hw,
        model: &model,
        gpus_per_node: 8,
    };
    let sel = select_knobs(&target, &start, &CANDIDATES, &points, 5).expect("selects");
    let names: Vec<&str> = sel.knobs.iter().map(|k| k.name()).collect();
    assert_eq!(names.first(), Some(&"fp8_max_eff"), "{names:?}");
    let fit = calibrate(&target, &start, &sel.knobs, &points, 100).expect("fits");
    assert!(
        (fit.params.fp8_max_eff / truth.fp8_max_eff - 1.0).abs() < 0.05,
        "{} vs {}",
        fit.params.fp8_max_eff,
        truth.fp8_max_eff
    );
}

/// A parameter swapped in for an earlier choice needs the margin a far-moving first choice
/// needs: these FP8 rows of llama3-70b (a reviewer's, about 15 % slower than the profile) had
/// the plateau swapped for the per-GEMM cost at 2.6× its profile value.
#[test]
fn a_swap_moves_no_parameter_far_from_the_profile_without_the_margin() {
    let dir = tempfile::tempdir().expect("tempdir");
    let csv = dir.path().join("fp8.csv");
    std::fs::write(
        &csv,
        "dp,tp,pp,mbs,batch,recompute,step_time_s\n4,8,2,1,256,selective,28.184\n\
         8,8,2,1,512,selective,28.272\n4,8,4,1,512,selective,30.072\n\
         8,4,4,1,512,full,30.931\n8,8,4,1,1024,selective,29.748\n1,8,4,1,128,full,37.256\n",
    )
    .expect("write");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_copus"))
        .args([
            "calibrate",
            "--hardware",
            "h100-sxm",
            "--model",
            "llama3-70b",
        ])
        .args(["--precision", "fp8", "--json"])
        .arg(&csv)
        .output()
        .expect("runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let profile = fp8_start();
    let profile = serde_json::to_value(&profile).expect("json");
    let knobs = v["selection"]["knobs"].as_array().expect("knobs");
    assert!(!knobs.is_empty());
    for k in knobs {
        let k = k.as_str().expect("name");
        let (got, was) = (
            v["params"][k].as_f64().expect("fitted"),
            profile[k].as_f64().expect("profile"),
        );
        assert!(
            was == 0.0 || (0.5..=2.0).contains(&(got / was)),
            "{k}: {got} against the profile's {was} ({knobs:?})"
        );
    }
}
