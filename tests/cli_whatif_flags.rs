//! Every what-if row without a flag of its own elsewhere has one on `grid` and `plan`
//! (`src/cli/whatif_args.rs`), and a flag sets the session exactly as the explorer's what-if
//! edit does: everything the explorer shows after a what-if change is available headless.

use crate::reliability_support;

use clap::Parser;
use copus::app::whatif::{self, Field};
use copus::cli::whatif_args::{Command, SwitchCostArgs, WhatIfArgs};
use copus::session::{Resolved, Session};
use reliability_support::{copus, copus_json as json};
use std::path::Path;

const DEMO: &str = "sessions/demo.ron";

fn demo() -> Resolved {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(DEMO);
    Session::load(&path)
        .expect("load")
        .resolve(&path)
        .expect("resolve")
}

/// The flags as a user types them.
#[derive(Debug, Parser)]
struct Flags {
    #[command(flatten)]
    whatif: WhatIfArgs,
    #[command(flatten)]
    costs: SwitchCostArgs,
}

fn flags(args: &[&str]) -> Flags {
    Flags::try_parse_from(std::iter::once("copus").chain(args.iter().copied()))
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// Everything of a resolved session a command computes with, as text.
fn state(r: &Resolved) -> String {
    format!(
        "{}\nzero_from_stack {} zero_from_file {} use_calibration {}\nefficiency {:?}",
        r.session.to_ron().expect("ron"),
        r.zero_from_stack,
        r.zero_from_file,
        r.use_calibration,
        r.efficiency()
    )
}

#[test]
fn each_flag_sets_the_session_as_the_what_if_edit_does() {
    // (row, steps of the what-if, the flags that ask for the same value)
    let cases: &[(Field, i32, &[&str])] = &[
        (Field::Zero, 1, &["--zero", "2"]),
        (Field::Zero, -1, &["--zero", "0"]),
        (Field::ContextParallel, 1, &["--cp", "1,2"]),
        (Field::BCritScale, 2, &["--b-crit-scale", "4"]),
        (Field::StatEff, 1, &["--stat-eff", "pollux"]),
        (Field::CurrentBatch, 1, &["--current-batch", "1024"]),
        (Field::GemmPlateau, -2, &["--gemm-plateau", "0.6"]),
        (Field::InterLinkScale, -1, &["--inter-link-scale", "0.5"]),
        (Field::Objective, 1, &["--objective", "lr-sqrt"]),
        (Field::RestartCost, 1, &["--restart-cost", "120"]),
        (Field::CheckpointBandwidth, 1, &["--checkpoint-bw", "10e9"]),
        (Field::Reshard, 1, &["--reshard", "in-place"]),
        (Field::SwitchThreshold, 1, &["--switch-threshold", "0.1"]),
    ];
    for &(field, steps, args) in cases {
        let mut edited = demo();
        for _ in 0..steps.unsigned_abs() {
            whatif::apply(&mut edited, field, steps.signum()).expect("what-if edit");
        }
        let mut flagged = demo();
        let f = flags(args);
        f.whatif
            .apply(&mut flagged, Command::Grid)
            .expect("whatif flags");
        f.costs.apply(&mut flagged).expect("cost flags");
        assert_ne!(
            state(&edited),
            state(&demo()),
            "{field:?}: the what-if changed nothing"
        );
        assert_eq!(state(&flagged), state(&edited), "{field:?} {args:?}");
        // The change is said, in the what-if's words.
        let note = flagged.override_notes.join(" ");
        assert!(note.contains(field.label()), "{field:?}: {note}");
        if whatif::value(&flagged, field) == whatif::value(&demo(), field) {
            // Set, but nothing it can change here (EP on a dense model): said.
            assert!(note.contains("without effect here"), "{field:?}: {note}");
        } else {
            assert!(note.contains(&whatif::value(&flagged, field)), "{note}");
        }
    }
}

#[test]
fn the_expert_parallel_row_and_flag_agree_on_a_mixture_of_experts_and_refuse_a_dense_model() {
    let moe = |r: &mut Resolved| {
        r.model = copus::profiles::model("mixtral-8x7b", Path::new(".")).expect("mixtral");
        r.session.model = copus::session::ProfileRef::Named("mixtral-8x7b".into());
    };
    let (mut edited, mut flagged) = (demo(), demo());
    moe(&mut edited);
    moe(&mut flagged);
    for _ in 0..2 {
        whatif::apply(&mut edited, Field::ExpertParallel, 1).expect("EP");
    }
    flags(&["--ep", "2"])
        .whatif
        .apply(&mut flagged, Command::Grid)
        .expect("--ep 2");
    assert_eq!(edited.session.search.expert_parallel, vec![2]);
    assert_eq!(state(&flagged), state(&edited));
    // An EP the experts do not allow, and any EP on a dense model: refused, by name.
    let err = flags(&["--ep", "16"])
        .whatif
        .apply(&mut flagged, Command::Grid)
        .expect_err("EP 16 of 8 experts");
    assert!(err.to_string().contains("--ep 16"), "{err}");
    let mut dense = demo();
    let err = flags(&["--ep", "2"])
        .whatif
        .apply(&mut dense, Command::Grid)
        .expect_err("dense");
    assert!(err.to_string().contains("is dense"), "{err}");
    // EP 1 is how a dense model runs: accepted as `any` is, said to change nothing.
    for ep in ["1", "any"] {
        let mut one = demo();
        flags(&["--ep", ep])
            .whatif
            .apply(&mut one, Command::Grid)
            .expect("--ep 1 on a dense model");
        assert_eq!(state(&one), state(&demo()), "--ep {ep}");
        let note = one.override_notes.join(" ");
        assert!(
            note.contains("without effect here: --ep"),
            "--ep {ep}: {note}"
        );
    }
    // The what-if row steps only through degrees the 8 experts and the 64 GPUs allow.
    let mut stepped = demo();
    moe(&mut stepped);
    for _ in 0..10 {
        whatif::apply(&mut stepped, Field::ExpertParallel, 1).expect("EP");
        let ep = &stepped.session.search.expert_parallel;
        assert!(ep.iter().all(|&d| 8 % d == 0), "{ep:?}");
    }
    assert_eq!(stepped.session.search.expert_parallel, vec![8]);
    let why = whatif::apply(&mut dense, Field::ExpertParallel, 1).expect_err("dense row");
    assert!(why.contains("is dense"), "{why}");
    assert!(dense.session.search.expert_parallel.is_empty());
}

#[test]
fn grid_json_follows_the_flags() {
    let base = json(&["grid", DEMO, "--json"]);
    let b_crit = base["b_crit"].as_f64().expect("b_crit");

    // A larger B_crit: the scale is applied and the best batch moves up.
    let scaled = json(&["grid", DEMO, "--json", "--b-crit-scale", "8"]);
    assert_eq!(scaled["b_crit_scale"], 8.0);
    let scaled_b = scaled["b_crit"].as_f64().expect("b_crit");
    assert!(
        (scaled_b / b_crit - 8.0).abs() < 1e-9,
        "{scaled_b} vs {b_crit}"
    );
    let batch = |v: &serde_json::Value| v["best_overall"]["batch"].as_u64().expect("batch");
    assert!(
        batch(&scaled) > batch(&base),
        "{} {}",
        batch(&scaled),
        batch(&base)
    );
    let caveats = scaled["caveats"].to_string();
    assert!(caveats.contains("B_crit scale to ×8 (was ×1)"), "{caveats}");

    // The current batch is the cell the recommendation compares with.
    let current = json(&["grid", DEMO, "--json", "--current-batch", "2048"]);
    assert_eq!(current["current_batch"], 2048);
    assert_eq!(current["current"]["batch"], 2048);
    assert!(current["gain_over_current"].as_f64().expect("gain") > 0.0);

    // A lower GEMM plateau makes every cell slower; ZeRO-3 alone is searched when asked.
    let slow = json(&[
        "grid",
        DEMO,
        "--json",
        "--gemm-plateau",
        "0.4",
        "--zero",
        "3",
    ]);
    let speed = |v: &serde_json::Value| {
        v["best_overall"]["tokens_per_s"]
            .as_f64()
            .expect("tokens/s")
    };
    assert!(
        speed(&slow) < 0.8 * speed(&base),
        "{} {}",
        speed(&slow),
        speed(&base)
    );
    let cells = slow["cells"].as_array().expect("cells");
    crate::perf_cli::assert_fsdp_zero3_cells(cells);

    // Context parallelism searched when asked: layouts with CP 2 appear.
    let cp = json(&["grid", DEMO, "--json", "--cp", "1,2"]);
    let cps: Vec<u64> = cp["cells"]
        .as_array()
        .expect("cells")
        .iter()
        .filter_map(|c| c["config"]["cp"].as_u64())
        .collect();
    assert!(cps.contains(&2), "{cps:?}");
}

#[test]
fn plan_takes_the_switch_costs_of_the_what_if() {
    let base = json(&["plan", DEMO, "--json"]);
    let plan = json(&[
        "plan",
        DEMO,
        "--json",
        "--reshard",
        "in-place",
        "--switch-threshold",
        "0.2",
    ]);
    assert_eq!(base["reshard_mode"], "checkpoint-restart");
    assert_eq!(plan["reshard_mode"], "in-place");
    assert_eq!(plan["switch_threshold"], 0.2);
    let reshard = |v: &serde_json::Value| v["costs"]["reshard_s"].as_f64().expect("reshard_s");
    assert!(
        reshard(&plan) < reshard(&base),
        "{} {}",
        reshard(&plan),
        reshard(&base)
    );
    // A slower checkpoint store makes a checkpoint-and-restart switch dearer.
    let slow = json(&["plan", DEMO, "--json", "--checkpoint-bw", "1e9"]);
    assert!(
        reshard(&slow) > reshard(&base),
        "{} {}",
        reshard(&slow),
        reshard(&base)
    );
}

#[test]
fn a_value_the_session_cannot_hold_is_refused_naming_the_flag() {
    copus(&["grid", DEMO, "--current-batch", "500"])
        .fails_with(&["--current-batch 500", "not one of the batch sizes searched"]);
    copus(&["grid", DEMO, "--gemm-plateau", "1.5"]).fails_with(&["--gemm-plateau 1.5"]);
    copus(&["grid", DEMO, "--b-crit-scale", "0"]).fails_with(&["--b-crit-scale 0"]);
    copus(&["grid", DEMO, "--zero", "4"]).fails_with(&["--zero"]);
    copus(&["grid", DEMO, "--ep", "2,any"]).fails_with(&["--ep", "stands alone"]);
    copus(&["plan", DEMO, "--switch-threshold", "2"]).fails_with(&["--switch-threshold 2"]);
    copus(&["grid", DEMO, "--cp", "3"]).fails_with(&["--cp 3: the sequence (4096 tokens)"]);
    copus(&["grid", DEMO, "--cp", "3", "--seq", "6144"])
        .fails_with(&["--cp 3: no layout of the 64 GPUs"]);
    copus(&["plan", DEMO, "--cp", "1,3"]).fails_with(&["--cp 3"]);
    copus(&["grid", DEMO, "--ep", "2"]).fails_with(&["--ep 2", "is dense"]);
    copus(&["grid", DEMO, "--b-crit-scale", "-inf"]).fails_with(&["--b-crit-scale"]);
    copus(&["grid", DEMO, "--stat-eff", "pollux:1e300"]).fails_with(&["1e300"]);
    // Flags that cannot change the result there are said to be so, not reported as set.
    let p = json(&[
        "plan",
        DEMO,
        "--json",
        "--reshard",
        "in-place",
        "--restart-cost",
        "1000",
        "--stat-eff",
        "pollux",
    ]);
    let caveats = p["caveats"].to_string();
    assert!(
        caveats.contains("without effect here: --restart-cost 1000"),
        "{caveats}"
    );
    assert!(
        caveats.contains("without effect here: --stat-eff pollux"),
        "{caveats}"
    );
    copus(&["grid", DEMO, "--gemm-plateau", "1e-300"]).fails_with(&["--gemm-plateau 1e-300"]);
    copus(&["plan", DEMO, "--restart-cost", "1e300"]).fails_with(&["--restart-cost 1e300"]);
    copus(&["plan", DEMO, "--checkpoint-bw", "0.001"]).fails_with(&["--checkpoint-bw"]);
    // A stack flag that --cp gives an effect is not called without one; a flag that sets a
    // value to what it was is not a change.
    let g = json(&[
        "grid",
        DEMO,
        "--json",
        "--cp",
        "2",
        "--cp-comm",
        "all-gather",
    ]);
    assert!(
        !g["caveats"].to_string().contains("--cp-comm has no effect"),
        "{}",
        g["caveats"]
    );
    let g = json(&["grid", DEMO, "--json", "--inter-link-scale", "1"]);
    assert_eq!(g["caveats"], serde_json::json!([]), "{}", g["caveats"]);
    // A change below the display's rounding is still said.
    let g = json(&["grid", DEMO, "--json", "--gemm-plateau", "0.66"]);
    let caveats = g["caveats"].to_string();
    assert!(
        caveats.contains("GEMM plateau by --gemm-plateau 0.66"),
        "{caveats}"
    );
    // Under lr-sqrt the form draws nothing, and the note says so instead of dropping it.
    let g = json(&[
        "grid",
        DEMO,
        "--json",
        "--objective",
        "lr-sqrt",
        "--stat-eff",
        "pollux",
    ]);
    let caveats = g["caveats"].to_string();
    assert!(
        caveats.contains("without effect here: --stat-eff pollux (efficiency form)"),
        "{caveats}"
    );
    let reasons = g["reasons"].to_string();
    assert!(
        !reasons.contains("B0"),
        "lr-sqrt is read as a fraction: {reasons}"
    );
}

#[test]
fn a_calibration_edited_by_a_flag_is_still_named_as_edited() {
    // Step times of llama-7b on H100 (a made-up cluster 20 % slower than the profile).
    let dir = tempfile::tempdir().expect("tempdir");
    let csv = dir.path().join("steps.csv");
    std::fs::write(
        &csv,
        "dp,tp,pp,mbs,batch,step_time_s\n8,1,1,1,64,2.9\n4,2,1,1,64,3.1\n4,1,2,1,64,3.6\n\
         2,4,1,2,64,3.4\n2,2,2,2,64,3.5\n8,1,1,2,128,5.6\n",
    )
    .expect("csv");
    let cal = dir.path().join("cal.ron");
    let cal_s = cal.to_str().expect("utf-8");
    copus(&[
        "calibrate",
        csv.to_str().expect("utf-8"),
        "--hardware",
        "h100-sxm",
        "--model",
        "llama-7b",
        "--fit",
        "max_eff",
        "--out",
        cal_s,
    ])
    .succeeds();
    let plain = json(&["grid", DEMO, "--json", "--calibration", cal_s]);
    let edited = json(&[
        "grid",
        DEMO,
        "--json",
        "--calibration",
        cal_s,
        "--inter-link-scale",
        "0.25",
    ]);
    // Named in both; the edit said, and it slows the cells that cross nodes.
    assert_eq!(plain["calibration"]["path"], edited["calibration"]["path"]);
    let caveats = edited["caveats"].to_string();
    assert!(
        caveats.contains("in force with parameters the command line changed"),
        "{caveats}"
    );
    assert!(
        caveats.contains("scale-out bw to ×0.25 (was ×1)"),
        "{caveats}"
    );
    let speed = |v: &serde_json::Value| v["best_overall"]["tokens_per_s"].as_f64().expect("tok/s");
    assert!(
        speed(&edited) < speed(&plain),
        "{} {}",
        speed(&edited),
        speed(&plain)
    );

    // In the explorer's what-if the perf-model row says so, and switching it off goes back
    // to the profile without the edit.
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(DEMO);
    let mut r = Session::load(&path)
        .expect("load")
        .resolve(&path)
        .expect("resolve");
    r.calibration = Some(copus::perf::calibration_file::CalibrationFile::load(&cal).expect("cal"));
    r.session.calibration = Some(cal_s.to_string());
    assert!(whatif::value(&r, Field::PerfModel).starts_with("calibrated"));
    whatif::apply(&mut r, Field::GemmPlateau, -1).expect("plateau");
    assert!(
        whatif::value(&r, Field::PerfModel).starts_with("edited cal.ron"),
        "{}",
        whatif::value(&r, Field::PerfModel)
    );
    whatif::apply(&mut r, Field::PerfModel, 1).expect("off");
    assert_eq!(
        whatif::value(&r, Field::PerfModel),
        "profile (calibration off)"
    );
    assert!(r.session.efficiency.is_none());
}

/// The what-if's plateau and link-scale rows step through round values and the session's
/// own: stepping away from the profile's fitted plateau (or a calibration's) and back returns
/// to it exactly, where before it landed on the nearest round value.
#[test]
fn the_plateau_row_steps_back_to_the_fitted_value() {
    let mut r = demo();
    let fitted = r.hardware.efficiency.max_eff;
    assert!(
        (fitted * 20.0).fract() != 0.0,
        "the profile's plateau {fitted} is a fitted value"
    );
    whatif::apply(&mut r, Field::GemmPlateau, 1).expect("up");
    assert!(r.efficiency().max_eff > fitted);
    whatif::apply(&mut r, Field::GemmPlateau, -1).expect("back");
    assert_eq!(r.efficiency().max_eff, fitted);
    whatif::apply(&mut r, Field::GemmPlateau, -1).expect("down");
    assert!(r.efficiency().max_eff < fitted);
    // A calibration's own plateau is a stop too.
    let mut cal = demo();
    let mut params = cal.hardware.efficiency.clone();
    params.max_eff = 0.5123;
    params.inter_link_scale = 0.37;
    cal.calibration = Some(copus::perf::calibration_file::CalibrationFile {
        hardware: cal.hardware.name.clone(),
        model: cal.model.name.clone(),
        n: 4,
        rms_rel_error: 0.01,
        cv_rel_error: 0.02,
        profile_rms_rel_error: 0.1,
        fitted: vec!["max_eff".into(), "inter_link_scale".into()],
        params,
        stack: None,
        recompute: Vec::new(),
        unwritten: Vec::new(),
    });
    assert_eq!(cal.efficiency().max_eff, 0.5123);
    whatif::apply(&mut cal, Field::GemmPlateau, -1).expect("down");
    whatif::apply(&mut cal, Field::GemmPlateau, 1).expect("back");
    assert_eq!(cal.efficiency().max_eff, 0.5123);
    whatif::apply(&mut cal, Field::InterLinkScale, 1).expect("up");
    whatif::apply(&mut cal, Field::InterLinkScale, -1).expect("back");
    assert_eq!(cal.efficiency().inter_link_scale, 0.37);
}

/// A CP degree the sequence does not divide is refused for that reason (it blamed the GPU
/// count: "no layout of the 64 GPUs splits sequences 4 ways (a CP degree must divide the GPUs")).
#[test]
fn a_cp_degree_the_sequence_does_not_split_names_the_sequence() {
    for cmd in ["grid", "plan"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_copus"))
            .args([cmd, "demo", "--seq", "4100", "--cp", "1,2,4"])
            .output()
            .expect("runs");
        assert!(!out.status.success(), "{cmd}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("--cp 4: the sequence (4100 tokens) is not divisible by 2·cp = 8"),
            "{cmd}: {err}"
        );
    }
}

/// A current batch the grid itself adds (a multiple of 24 GPUs beside 512) is accepted, as
/// `--rank` accepts it: it was refused as "not one of the batch sizes searched".
#[test]
fn the_current_batch_may_be_one_the_grid_adds() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_copus"))
        .args([
            "grid",
            "demo",
            "--nodes",
            "3",
            "--current-batch",
            "528",
            "--json",
        ])
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["current"]["batch"], 528, "{v}");
}

/// A flag's value out of what it takes, found after parsing, exits 2 with the flag named, as
/// docs/RELIABILITY.md says (these exited 1); a missing file named by a flag stays 1.
#[test]
fn flag_values_out_of_range_exit_2_and_name_the_flag() {
    let sample = concat!(env!("CARGO_MANIFEST_DIR"), "/assets/data/sample-run.ndjson");
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("b.ndjson");
    let out = out.to_str().expect("utf-8");
    let cases: [(&[&str], &str); 12] = [
        (
            &["analyze", sample, "--confidence", "1.5"],
            "--confidence 1.5",
        ),
        (&["analyze", sample, "--bandwidth", "0"], "--bandwidth 0"),
        (
            &["plan", "demo", "--current-batch", "100"],
            "--current-batch 100",
        ),
        (&["grid", "demo", "--cp", "3"], "--cp 3"),
        (&["grid", "demo", "--nodes", "1048577"], "--nodes 1048577"),
        (&["grid", "demo", "--rank", "100"], "--rank 100"),
        (&["grid", "demo", "--filter", "tp<=x"], "--filter"),
        (
            &["demo-train", "--steps", "1", "--micro-batches", "1"],
            "--micro-batches 1",
        ),
        (&["demo-train", "--steps", "1", "--lr", "nan"], "--lr NaN"),
        (
            &["branch", "--at", "30", "--out", out, "--seeds", "1"],
            "--seeds 1",
        ),
        (
            &[
                "branch",
                "--at",
                "30",
                "--out",
                out,
                "--budget-samples",
                "100",
            ],
            "--budget-samples 100: must be from 1024",
        ),
        (
            &[
                "predict",
                "--layers",
                "2",
                "--hidden",
                "4294967295",
                "--heads",
                "8",
                "--vocab",
                "100",
                "--seq",
                "16",
                "--gpus",
                "8",
                "--batch",
                "8",
            ],
            "--hidden 4294967295",
        ),
    ];
    for (args, says) in cases {
        let run = crate::reliability_support::copus(args);
        assert_eq!(run.code, Some(2), "{args:?}: {run:?}");
        assert!(run.stderr.contains(says), "{args:?}: {}", run.stderr);
        assert!(!run.stderr.contains("momentum"), "{}", run.stderr);
    }
    let missing = crate::reliability_support::copus(&["plan", "demo", "--calibration", "nope.ron"]);
    assert_eq!(missing.code, Some(1), "{missing:?}");
}
