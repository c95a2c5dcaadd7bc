//! "What if we trained this on another model, GPU or cluster?" on the command line of `grid`
//! and `plan`: the session's model, hardware and cluster replaced without editing its file.

use super::model_args::ModelArgs;
use crate::profiles;
use crate::session::{ProfileRef, Resolved};
use clap::Args;
use std::path::Path;

/// Replacements for a session's model and cluster.
#[derive(Debug, Args)]
pub struct ScenarioArgs {
    /// The model instead of the session's: a profile or an inline shape (with `--seq` alone:
    /// the session's model at another sequence length).
    #[command(flatten)]
    pub model: ModelArgs,
    /// Hardware profile instead of the session's (built-in name or .ron file).
    #[arg(long)]
    pub hardware: Option<String>,
    /// Nodes in the cluster instead of the session's.
    #[arg(long, value_parser = super::at_least_one_u32)]
    pub nodes: Option<u32>,
    /// GPUs per node instead of the session's.
    #[arg(long, value_parser = super::at_least_one_u32)]
    pub gpus_per_node: Option<u32>,
    /// A stats file or dump given instead of a session: tokens per sample of the run, as
    /// `copus open --seq-len` [default: inferred from the records' `tokens`/`b_big`, else the
    /// model's sequence length].
    #[arg(long = "seq-len", value_name = "TOKENS", value_parser = super::at_least_one_u32)]
    pub run_seq_len: Option<u32>,
    /// Recompute policies to search instead of the session's `search.recompute`,
    /// comma-separated: none, selective, op, full (e.g. `--recompute op` for torchtitan's
    /// op-level checkpointing) [default: the session's list, else the stack's framework's
    /// own]
    #[arg(long, value_enum, value_delimiter = ',', num_args = 1..)]
    pub recompute: Vec<super::stack_args::RecomputePolicy>,
}

/// The session at `path` (or `demo`) with `calibration`, `stack` and `scenario` in force; a
/// stats file or dump directory instead of a session is opened as `copus open` opens it (on
/// the scenario's model and cluster, else the defaults: llama-7b on 1×8 h100-sxm).
pub fn resolve(
    path: &Path,
    calibration: Option<&Path>,
    stack: Option<&crate::perf::Stack>,
    scenario: &ScenarioArgs,
) -> anyhow::Result<Resolved> {
    if !super::model_args::is_data_path(path) {
        if scenario.run_seq_len.is_some() {
            super::flag_bail!(
                "--seq-len is the tokens per sample of a stats file or dump; {} is a session \
                 (its source says it)",
                path.display()
            );
        }
        let mut r = super::model_args::resolve_session(path, calibration, stack)?;
        scenario.apply(&mut r)?;
        scenario.apply_recompute(&mut r)?;
        return Ok(r);
    }
    anyhow::ensure!(
        path.exists(),
        "{}: no such file or directory",
        path.display()
    );
    let m = &scenario.model;
    let shaped = m.name.is_none() && (m.layers.is_some() || m.hidden.is_some());
    if shaped {
        super::flag_bail!(
            "{}: a stats file or dump takes a model by --model NAME|FILE; an inline shape is \
             for a session",
            path.display()
        );
    }
    scenario.check_counts()?;
    let open = super::open::OpenArgs {
        model: m.name.clone(),
        hardware: scenario.hardware.clone(),
        nodes: scenario.nodes,
        gpus_per_node: scenario.gpus_per_node,
        seq_len: scenario.run_seq_len,
        ..super::open::OpenArgs::for_path(path)
    };
    let mut r = super::open::adhoc_session(&open)?;
    super::model_args::apply_overrides(&mut r, calibration, stack)?;
    let c = &r.session.cluster;
    let given = m.name.is_some()
        || scenario.hardware.is_some()
        || scenario.nodes.is_some()
        || scenario.gpus_per_node.is_some();
    r.override_notes.push(format!(
        "{} read as a run of {} on {}×{} {} ({}; --model, --hardware, --nodes and \
         --gpus-per-node change them)",
        path.display(),
        r.model.name,
        c.nodes,
        c.gpus_per_node,
        r.hardware.name,
        if given { "as given" } else { "the defaults" }
    ));
    let flags = sequence_and_dropout(m, &mut r);
    if !flags.is_empty() {
        crate::validate::session::check(&r)
            .map_err(|e| anyhow::anyhow!("{}: {e}", flags.join(" ")))?;
    }
    scenario.apply_recompute(&mut r)?;
    Ok(r)
}

/// `--seq` and `--dropout` applied to the model in force (written inline into the session);
/// the flags given, empty when neither was.
fn sequence_and_dropout(m: &ModelArgs, r: &mut Resolved) -> Vec<String> {
    let mut flags = Vec::new();
    if let Some(s) = m.seq {
        r.model.seq_len = s;
        flags.push(format!("--seq {s}"));
    }
    if let Some(d) = m.dropout {
        r.model.dropout = Some(d.into());
        flags.push("--dropout".into());
    }
    if !flags.is_empty() {
        r.session.model = ProfileRef::Inline(r.model.clone());
    }
    flags
}

impl ScenarioArgs {
    /// `--recompute`, where given: the policies searched (a policy the stack's framework
    /// lacks is costed as asked, with the session's caveat that says so).
    fn apply_recompute(&self, r: &mut Resolved) -> anyhow::Result<()> {
        if self.recompute.is_empty() {
            return Ok(());
        }
        let mut list: Vec<crate::perf::Recompute> = Vec::new();
        for p in &self.recompute {
            let p = crate::perf::Recompute::from(*p);
            if !list.contains(&p) {
                list.push(p);
            }
        }
        r.session.search.recompute = list;
        r.recompute_from_file = false;
        crate::validate::session::check(r).map_err(|e| anyhow::anyhow!("--recompute: {e}"))
    }

    /// `--nodes` and `--gpus-per-node`, where given, are at least 1.
    fn check_counts(&self) -> anyhow::Result<()> {
        for (flag, v) in [
            ("--nodes", self.nodes),
            ("--gpus-per-node", self.gpus_per_node),
        ] {
            if let Some(v) = v {
                anyhow::ensure!(v >= 1, "{flag} {v}: at least 1");
            }
        }
        Ok(())
    }

    /// Replace what the flags name; returns the replacements, as "model llama3-70b (was
    /// llama-7b), nodes 16 (was 8)", or `None` when nothing was replaced. They are also a
    /// note in `r.override_notes`.
    pub fn apply(&self, r: &mut Resolved) -> anyhow::Result<Option<String>> {
        self.check_counts()?;
        let m = &self.model;
        let shaped = m.name.is_some()
            || m.layers.is_some()
            || m.hidden.is_some()
            || m.heads.is_some()
            || m.vocab.is_some()
            || m.ffn.is_some()
            || m.kv_heads.is_some()
            || m.swiglu
            || m.tied_embeddings;
        let mut changes: Vec<String> = Vec::new();
        let mut flags: Vec<String> = Vec::new();
        let was_model = r.model.clone();
        if shaped {
            r.model = m.profile()?;
            r.session.model = match &m.name {
                Some(name) if !name.ends_with(".ron") && m.seq.is_none() && m.dropout.is_none() => {
                    ProfileRef::Named(name.clone())
                }
                _ => ProfileRef::Inline(r.model.clone()),
            };
            flags.push(match &m.name {
                Some(n) => format!("--model {n}"),
                None => "the inline shape".into(),
            });
        } else {
            flags.extend(sequence_and_dropout(m, r));
        }
        if r.model.name != was_model.name {
            changes.push(format!(
                "model to {} (was {})",
                r.model.name, was_model.name
            ));
        }
        if r.model.seq_len != was_model.seq_len {
            changes.push(format!(
                "sequence to {} tokens (was {})",
                r.model.seq_len, was_model.seq_len
            ));
            // B_crit keeps its tokens; the current batch is counted in sequences and keeps
            // those, so its tokens change (said: its efficiency moved without a word).
            if let Some(b) = r.session.current_batch {
                let tokens = |seq: u32| crate::format::tokens(b as f64 * f64::from(seq));
                changes.push(format!(
                    "current batch kept at {b} sequences, so {} tokens (was {}; \
                     --current-batch sets another)",
                    tokens(r.model.seq_len),
                    tokens(was_model.seq_len)
                ));
            }
        }
        if r.model != was_model && changes.is_empty() {
            changes.push(format!("model {}'s shape or dropout", r.model.name));
        }
        if let Some(h) = &self.hardware {
            let was = r.hardware.name.clone();
            r.hardware = super::flag_profile(
                &format!("--hardware {h}"),
                profiles::hardware(h, Path::new(".")),
            )?;
            // A file given here is relative to the working directory, not to the session.
            r.session.cluster.hardware = if h.ends_with(".ron") {
                ProfileRef::Inline(r.hardware.clone())
            } else {
                ProfileRef::Named(h.clone())
            };
            flags.push(format!("--hardware {h}"));
            if r.hardware.name != was {
                changes.push(format!("hardware to {} (was {was})", r.hardware.name));
            }
        }
        let c = &mut r.session.cluster;
        for (flag, value, field, what) in [
            ("--nodes", self.nodes, &mut c.nodes, "nodes"),
            (
                "--gpus-per-node",
                self.gpus_per_node,
                &mut c.gpus_per_node,
                "GPUs per node",
            ),
        ] {
            if let Some(v) = value {
                flags.push(format!("{flag} {v}"));
                if *field != v {
                    changes.push(format!("{what} to {v} (was {field})"));
                }
                *field = v;
            }
        }
        if flags.is_empty() {
            return Ok(None);
        }
        crate::validate::session::check(r)
            .map_err(|e| super::FlagValueError(format!("{}: {e}", flags.join(" "))))?;
        if changes.is_empty() {
            return Ok(None);
        }
        let what = changes.join(", ");
        let c = &r.session.cluster;
        r.override_notes.push(format!(
            "the command line changed the session's {what}: {} on {}×{} {} (the trajectory and \
             the B_crit scale stay the session's; --b-crit-scale sets another)",
            r.model.name, c.nodes, c.gpus_per_node, r.hardware.name
        ));
        Ok(Some(what))
    }
}
