//! Expert parallelism for mixture-of-experts models (issue 26): the experts' states split over
//! the EP ranks, the all-to-all that exchanges the tokens, the structural rules, and the
//! search that picks a degree (`predict --ep auto`, the Goodput grid).

use crate::perf_cli::{copus, copus_json};
use copus::goodput::{Cluster, SearchSpace, TableCell, throughput_table};
use copus::perf::memory::{peak_memory, zero_bytes_per_param};
use copus::perf::validate::{expert_candidates, structure};
use copus::perf::{EfficiencyParams, ModelProfile, ParallelConfig, PerfContext, Recompute};
use copus::profiles;
use std::path::{Path, PathBuf};

fn mixtral() -> ModelProfile {
    profiles::model("mixtral-8x7b", Path::new(".")).expect("model")
}

/// `f` with Mixtral 8x7B on H100 nodes of 8, the generic efficiencies.
fn on_h100<R>(f: impl FnOnce(&PerfContext) -> R) -> R {
    let hw = profiles::hardware("h100-sxm", Path::new(".")).expect("hw");
    let m = mixtral();
    let eff = EfficiencyParams::default();
    f(&PerfContext {
        hw: &hw,
        model: &m,
        eff: &eff,
        gpus_per_node: 8,
    })
}

/// The bundled 32-H100 paper session with its model swapped for Mixtral 8x7B (every layout that
/// runs there needs expert parallelism) and `search_extra` added to its search block, written
/// into `dir`.
fn mixtral_session(dir: &Path, search_extra: &str) -> PathBuf {
    let text = std::fs::read_to_string("sessions/paper-32b-32xh100.ron").expect("session");
    let moe = text.replace("Named(\"llama-32b\")", "Named(\"mixtral-8x7b\")");
    assert_ne!(moe, text, "the session names llama-32b");
    let extended = moe.replace(
        "allow_cross_node_tp: false,",
        &format!("allow_cross_node_tp: false,{search_extra}"),
    );
    assert!(
        search_extra.is_empty() || extended != moe,
        "the session has a search block"
    );
    let path = dir.join("mixtral.ron");
    std::fs::write(&path, extended).expect("write");
    path
}

fn cfg(dp: u32, tp: u32, ep: u32, zero: u8) -> ParallelConfig {
    ParallelConfig {
        dp,
        tp,
        pp: 1,
        mbs: 1,
        zero,
        recompute: Recompute::Full,
        vpp: 1,
        cp: 1,
        ep,
    }
}

#[test]
fn expert_parallel_degrees_must_divide_the_experts_and_the_data_parallel_ranks() {
    let (m, dense) = (
        mixtral(),
        profiles::model("llama3-8b", Path::new(".")).expect("model"),
    );
    assert!(structure(&m, &cfg(32, 2, 8, 1)).is_ok());
    let why = |m: &ModelProfile, c| structure(m, &c).expect_err("refused").to_string();
    assert!(why(&m, cfg(32, 2, 3, 1)).contains("does not divide 8 experts"));
    assert!(why(&m, cfg(4, 2, 8, 1)).contains("does not divide the 4 data-parallel"));
    assert!(why(&dense, cfg(32, 2, 2, 1)).contains("is dense"));
    assert!(why(&m, cfg(32, 2, 0, 1)).contains("EP must be"));
    // The automatic choice searches exactly the common divisors; a dense model only 1.
    assert_eq!(expert_candidates(&m, 32), vec![1, 2, 4, 8]);
    assert_eq!(expert_candidates(&m, 6), vec![1, 2]);
    assert_eq!(expert_candidates(&dense, 32), vec![1]);
    for ranks in 1..=48 {
        for ep in 1..=16 {
            let ok = structure(&m, &cfg(ranks, 1, ep, 1)).is_ok();
            assert_eq!(
                ok,
                expert_candidates(&m, ranks).contains(&ep),
                "{ranks} {ep}"
            );
        }
    }
}

#[test]
fn each_gpu_holds_its_share_of_the_experts_states() {
    let m = mixtral();
    let eff = EfficiencyParams::default();
    let layers = m.layers as f64;
    let expert_layer = m.expert_layer_params() / 2.0; // TP 2
    for zero in [0u8, 1, 2, 3] {
        let states = |ep| peak_memory(&m, &cfg(32, 2, ep, zero), 16, 0.0, &eff).model_states;
        let whole = states(1);
        for ep in [2u32, 4, 8] {
            // The experts leave the GPU at ZeRO's bytes over the data-parallel group and come
            // back, 1/ep of them, at ZeRO's bytes over the expert-data-parallel group.
            let want = whole - layers * expert_layer * zero_bytes_per_param(zero, 32, 4.0)
                + layers * expert_layer / f64::from(ep) * zero_bytes_per_param(zero, 32 / ep, 4.0);
            let got = states(ep);
            assert!(
                (got / want - 1.0).abs() < 1e-9,
                "Z{zero} EP{ep}: {got} vs {want}"
            );
            // ZeRO-3 already shards every state over the whole group: EP leaves the same
            // 1/dp of each expert's states per GPU. Below stage 3 it saves memory.
            if zero < 3 {
                assert!(got < whole, "Z{zero} EP{ep}");
            } else {
                assert!(
                    (got / whole - 1.0).abs() < 1e-9,
                    "Z3 EP{ep}: {got} vs {whole}"
                );
            }
        }
    }
    // Without ZeRO, EP 8 holds an eighth of the experts: Mixtral's states drop by over 2/3.
    let z0 = |ep| peak_memory(&m, &cfg(32, 2, ep, 0), 16, 0.0, &eff).model_states;
    assert!(z0(8) < z0(1) / 3.0, "{} vs {}", z0(8), z0(1));
}

#[test]
fn the_all_to_all_is_costed_and_slower_across_nodes() {
    // EP 4 with TP 2 stays inside an 8-GPU node; EP 8 spans two nodes.
    let [none, inside, across] = on_h100(|ctx| {
        [1, 4, 8].map(|ep| copus::perf::predict(ctx, &cfg(32, 2, ep, 1), 512).expect("runs"))
    });
    assert_eq!(none.breakdown.ep_s, 0.0);
    assert!(inside.breakdown.ep_s > 0.0);
    assert!(
        across.breakdown.ep_s > 2.0 * inside.breakdown.ep_s,
        "{} vs {}",
        across.breakdown.ep_s,
        inside.breakdown.ep_s
    );
    // The same FLOPs: compute within a few per cent (larger expert GEMMs are a bit faster).
    let ratio = inside.breakdown.compute_s / none.breakdown.compute_s;
    assert!((0.9..=1.0 + 1e-9).contains(&ratio), "{ratio}");
    // Fewer expert gradients to reduce.
    assert!(inside.breakdown.dp_s < none.breakdown.dp_s);
    // The step is the sum of its parts.
    let b = across.breakdown;
    let sum = b.compute_s + b.bubble_s + b.tp_s + b.ep_s + b.pp_s + b.dp_s + b.optimizer_s;
    assert!((sum / across.step_time_s - 1.0).abs() < 1e-12);
}

#[test]
fn the_grid_searches_expert_parallelism_for_a_moe_model() {
    let cluster = Cluster {
        nodes: 8,
        gpus_per_node: 8,
    };
    let search = SearchSpace {
        batch_sizes: vec![512],
        ..SearchSpace::default()
    };
    let table = on_h100(|ctx| throughput_table(ctx, &cluster, &search));
    let feasible: Vec<&ParallelConfig> = table
        .cells
        .iter()
        .filter_map(|c| match c {
            TableCell::Feasible { config, .. } => Some(config),
            TableCell::Infeasible(_) => None,
        })
        .collect();
    assert!(!feasible.is_empty());
    // Mixtral's 47B parameters do not fit 64 H100 with every expert on every GPU at TP ≤ 2:
    // the layouts that run there do so with expert parallelism.
    assert!(
        feasible.iter().any(|c| c.ep > 1),
        "{:?}",
        feasible.iter().map(|c| c.to_string()).collect::<Vec<_>>()
    );
    assert!(
        feasible
            .iter()
            .all(|c| 8 % c.ep == 0 && c.grad_ranks() % c.ep == 0)
    );
}

#[test]
fn predict_chooses_or_takes_the_expert_parallel_degree() {
    let base = [
        "predict",
        "--model",
        "mixtral-8x7b",
        "--hardware",
        "h100-sxm",
        "--gpus",
        "64",
        "--tp",
        "2",
        "--batch",
        "512",
    ];
    let json = |extra: &[&str]| copus_json(&[&base[..], extra].concat());
    let auto = json(&["--json"]);
    let chosen = auto["ep"].as_u64().expect("ep");
    assert!([2, 4, 8].contains(&chosen), "{auto}");
    assert!(auto["breakdown"]["ep_s"].as_f64().expect("ep_s") > 0.0);
    // The prediction says what it leaves out for a MoE model.
    let caveat = auto["caveats"][0].as_str().expect("a caveat");
    assert!(
        caveat.contains("8 experts, top-2") && caveat.contains("not modelled"),
        "{caveat}"
    );
    assert_eq!(auto["fits"], true);
    // Auto is the fastest of the degrees that fit.
    for ep in ["1", "2", "4", "8"] {
        let fixed = json(&["--json", "--ep", ep]);
        assert_eq!(fixed["ep"].as_u64(), ep.parse().ok());
        if fixed["fits"] == true {
            assert!(
                fixed["tokens_per_s"].as_f64() <= auto["tokens_per_s"].as_f64(),
                "EP {ep}: {fixed}"
            );
        }
    }
    // EP 1 does not fit; the nearest change names an EP degree.
    let one = json(&["--json", "--ep", "1"]);
    assert_eq!(one["fits"], false);
    let flags = one["nearest_change"]["flags"].as_str().expect("flags");
    assert!(flags.contains("--ep "), "{flags}");
    // Text names the degree and the all-to-all share.
    let (ok, text, _) = copus(&base);
    assert!(
        ok && text.contains(&format!("EP {chosen}")) && text.contains("EP "),
        "{text}"
    );
    // Bad degrees are clear errors naming the flag's value.
    let (ok, _, err) = copus(&[&base[..], &["--ep", "3"]].concat());
    assert!(
        !ok && err.contains("--ep 3") && err.contains("does not divide 8 experts"),
        "{err}"
    );
    let (ok, _, err) = copus(&[&base[..], &["--ep", "zero"]].concat());
    assert!(
        !ok && err.contains("'--ep <EP>': must be a positive whole number"),
        "{err}"
    );
    let dense = [
        "predict",
        "--model",
        "llama3-8b",
        "--hardware",
        "h100-sxm",
        "--gpus",
        "64",
        "--batch",
        "512",
        "--ep",
        "2",
    ];
    let (ok, _, err) = copus(&dense);
    assert!(!ok && err.contains("is dense"), "{err}");
    let dense_ok: Vec<&str> = dense[..dense.len() - 2]
        .iter()
        .chain(&["--json"])
        .copied()
        .collect();
    let caveats = copus_json(&dense_ok)["caveats"].clone();
    let caveats = caveats.as_array().expect("caveats");
    assert!(
        caveats
            .iter()
            .all(|c| !c.as_str().unwrap_or_default().contains("expert")),
        "a dense model gets no expert caveat: {caveats:?}"
    );
}

#[test]
fn plans_and_the_explorer_name_the_expert_parallel_degree() {
    // Every layout that runs Mixtral on 32 H100 needs expert parallelism, and the plan and
    // the recommendation say which.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = mixtral_session(dir.path(), "");
    let path = path.to_str().expect("utf-8 path");
    let (ok, plan, err) = copus(&["plan", path]);
    assert!(ok, "{err}");
    let starts: Vec<&str> = plan.lines().filter(|l| l.contains(" B=")).collect();
    assert!(!starts.is_empty(), "{plan}");
    assert!(starts.iter().all(|l| l.contains(" EP")), "{plan}");
    let (ok, screen, err) = copus(&["snapshot", path, "--size", "120x40"]);
    assert!(ok, "{err}");
    assert!(screen.contains("· EP "), "{screen}");
    assert!(screen.contains("note: 8 experts, top-2"), "{screen}");
    // The schedules a trainer runs carry the degree, or say they cannot.
    let v = copus_json(&["plan", path, "--emit", "json"]);
    let phases = v["phases"].as_array().expect("phases");
    let eps: Vec<u64> = phases.iter().filter_map(|p| p["ep"].as_u64()).collect();
    assert!(
        !eps.is_empty() && eps.len() == phases.len() && eps.iter().all(|&e| e > 1),
        "{v}"
    );
    let (ok, megatron, err) = copus(&["plan", path, "--emit", "megatron"]);
    assert!(ok, "{err}");
    assert!(
        megatron.contains(&format!("--expert-model-parallel-size {}", eps[0])),
        "{megatron}"
    );
    let (ok, titan, err) = copus(&["plan", path, "--emit", "torchtitan"]);
    assert!(ok, "{err}");
    assert!(
        titan.contains(&format!("expert_parallel_degree = {}", eps[0])),
        "{titan}"
    );
    // DeepSpeed takes the degree in Megatron-DeepSpeed's arguments, and runs no ZeRO-3 with
    // experts (ZeRO-2 there).
    let (ok, ds, err) = copus(&["plan", path, "--stack", "deepspeed", "--emit", "deepspeed"]);
    assert!(ok, "{err}");
    let ds: serde_json::Value = serde_json::from_str(&ds).expect("JSON");
    let phases = ds["phases"].as_array().expect("phases");
    assert!(!phases.is_empty(), "{ds}");
    for p in phases {
        let args = p["megatron_deepspeed_args"].to_string();
        assert!(args.contains("--moe-expert-parallel-size"), "{args}");
        assert!(
            p["ds_config"]["zero_optimization"]["stage"].as_u64() < Some(3),
            "{p}"
        );
    }
    assert!(
        ds["notes"]
            .to_string()
            .contains("MoE not supported with Stage 3"),
        "{ds}"
    );
}

#[test]
fn a_session_can_state_its_expert_parallel_degree() {
    let (eight, zero) = (
        tempfile::tempdir().expect("tempdir"),
        tempfile::tempdir().expect("tempdir"),
    );
    let eight = mixtral_session(eight.path(), " expert_parallel: [8],");
    let zero = mixtral_session(zero.path(), " expert_parallel: [0],");
    let v = copus_json(&["grid", eight.to_str().expect("utf-8"), "--json"]);
    let caveat = v["caveats"][0]
        .as_str()
        .expect("a MoE grid names its caveat");
    assert!(
        caveat.contains("8 experts") && caveat.contains("not modelled"),
        "{caveat}"
    );
    let cells = v["cells"].as_array().expect("cells");
    let mut feasible = 0;
    for c in cells {
        if c["feasible"] == true {
            feasible += 1;
            assert_eq!(c["config"]["ep"], 8, "{c}");
        } else if c["layout"].as_str().is_some_and(|l| l.starts_with("DP4·")) {
            let why = c["reason"].as_str().expect("reason");
            assert!(why.contains("EP 8 does not divide the 4"), "{why}");
        }
    }
    assert!(feasible > 0);
    let (ok, _, err) = copus(&["grid", zero.to_str().expect("utf-8")]);
    assert!(!ok && err.contains("search.expert_parallel"), "{err}");
}

#[test]
fn the_what_if_fixes_the_expert_parallel_degree() {
    use copus::app::whatif::{FIELDS, Field, value};
    use copus::app::{Effect, Msg, update};
    use copus::cli::open::app_for_session;
    use copus::goodput::TableCell;
    use std::sync::Arc;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut app = app_for_session(&mixtral_session(dir.path(), "")).expect("loads");
    assert_eq!(value(&app.resolved, Field::ExpertParallel), "any that fits");
    let row = FIELDS
        .iter()
        .position(|f| *f == Field::ExpertParallel)
        .expect("listed") as i64;
    update(&mut app, Msg::ShowSide(copus::session::Panel::WhatIf));
    update(&mut app, Msg::WhatIfRow(row));
    // any → 1 → 2 → 4.
    let mut effects = Vec::new();
    for _ in 0..3 {
        effects = update(&mut app, Msg::WhatIfChange(1));
    }
    assert_eq!(value(&app.resolved, Field::ExpertParallel), "EP 4");
    assert_eq!(app.resolved.session.search.expert_parallel, vec![4]);
    let generation = effects
        .iter()
        .find_map(|e| match e {
            Effect::ComputeTable { generation } => Some(*generation),
            _ => None,
        })
        .expect("a new table");
    let table = Arc::new(copus::runtime::table_job(&app).compute());
    update(&mut app, Msg::TableReady { generation, table });
    let t = app.table.as_ref().expect("table");
    let eps: Vec<u32> = t
        .cells
        .iter()
        .filter_map(|c| match c {
            TableCell::Feasible { config, .. } => Some(config.ep),
            TableCell::Infeasible(_) => None,
        })
        .collect();
    assert!(!eps.is_empty() && eps.iter().all(|&e| e == 4), "{eps:?}");
    // A dense model says so.
    let dense = app_for_session(Path::new("sessions/paper-32b-32xh100.ron")).expect("loads");
    assert_eq!(
        value(&dense.resolved, Field::ExpertParallel),
        "none (dense model)"
    );
}

#[test]
fn the_token_permutation_moves_eight_bytes_per_routed_hidden_element() {
    use copus::perf::moe_permute_bytes;
    let m = mixtral();
    // Permute and unpermute, each a read and a write of k·h BF16 values a token.
    let want = 2.0 * 2.0 * 2.0 * 1000.0 * 2.0 * 4096.0;
    assert_eq!(moe_permute_bytes(&m, 1000.0), want);
    let dense = profiles::model("llama3-8b", Path::new(".")).expect("model");
    assert_eq!(moe_permute_bytes(&dense, 1000.0), 0.0);
}

/// A switch that changes the expert-parallel degree moves expert weights between ranks: the
/// planner costs it as a reshard, not as a batch change (it labelled `EP8 → EP4` on one
/// DP·TP·PP layout "batch, cost 1 s"), and the emitted phases name the degree.
#[test]
fn a_switch_that_changes_the_expert_parallel_degree_is_a_reshard() {
    let v = copus_json(&["plan", "demo", "--model", "mixtral-8x7b", "--json"]);
    // Every switch the plan makes: a change of degree is a reshard, a batch change keeps it
    // (the planner's kinds on a constructed pair: tests/plan_costs.rs).
    let ep = |s: &serde_json::Value| s["config"]["ep"].as_u64().expect("ep");
    let switches = v["switches"].as_array().expect("switches");
    assert!(!switches.is_empty());
    for sw in switches {
        let (from, to) = (&sw["from_state"], &sw["to_state"]);
        let same_layout = ["dp", "tp", "pp", "cp"].iter().all(|k| from[k] == to[k]);
        let kind = sw["kind"].as_str().expect("kind");
        if ep(from) != ep(to) {
            assert_eq!(kind, "reshard", "{sw}");
        } else if same_layout {
            assert_eq!(kind, "batch", "{sw}");
        }
    }
    let (ok, text, err) = copus(&["plan", "demo", "--model", "mixtral-8x7b", "--emit", "json"]);
    assert!(ok, "{err}");
    let emitted: serde_json::Value = serde_json::from_str(&text).expect("json");
    for p in emitted["phases"].as_array().expect("phases") {
        assert!(p["ep"].as_u64().is_some(), "{p}");
    }
}
