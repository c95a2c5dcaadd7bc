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
    #[arg(long)]
    pub nodes: Option<u32>,
    /// GPUs per node instead of the session's.
    #[arg(long)]
    pub gpus_per_node: Option<u32>,
    /// A stats file or dump given instead of a session: tokens per sample of the run, as
    /// `copus open --seq-len` [default: inferred from the records' `tokens`/`b_big`, else the
    /// model's sequence length].
    #[arg(long = "seq-len", value_name = "TOKENS")]
    pub run_seq_len: Option<u32>,
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
        anyhow::ensure!(
            scenario.run_seq_len.is_none(),
            "--seq-len is the tokens per sample of a stats file or dump; {} is a session \
             (its source says it)",
            path.display()
        );
        let mut r = super::model_args::resolve_session(path, calibration, stack)?;
        scenario.apply(&mut r)?;
        return Ok(r);
    }
    let m = &scenario.model;
    let shaped = m.name.is_none() && (m.layers.is_some() || m.hidden.is_some());
    anyhow::ensure!(
        !shaped,
        "{}: a stats file or dump takes a model by --model NAME|FILE; an inline shape is for a \
         session",
        path.display()
    );
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
    if m.seq.is_some() || m.dropout.is_some() {
        if let Some(s) = m.seq {
            r.model.seq_len = s;
        }
        if let Some(d) = m.dropout {
            r.model.dropout = Some(d.into());
        }
        r.session.model = ProfileRef::Inline(r.model.clone());
        crate::validate::session::check(&r)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    }
    Ok(r)
}

impl ScenarioArgs {
    /// What was replaced, as "llama3-70b on 16×8 h100-sxm", or `None` when nothing was.
    pub fn apply(&self, r: &mut Resolved) -> anyhow::Result<Option<String>> {
        let m = &self.model;
        let named_or_shaped = m.name.is_some() || m.layers.is_some() || m.hidden.is_some();
        let mut changed = false;
        if named_or_shaped {
            r.model = m.profile()?;
            r.session.model = match &m.name {
                Some(name) if !name.ends_with(".ron") && m.seq.is_none() && m.dropout.is_none() => {
                    ProfileRef::Named(name.clone())
                }
                _ => ProfileRef::Inline(r.model.clone()),
            };
            changed = true;
        } else if m.seq.is_some() || m.dropout.is_some() {
            if let Some(s) = m.seq {
                r.model.seq_len = s;
            }
            if let Some(d) = m.dropout {
                r.model.dropout = Some(d.into());
            }
            r.session.model = ProfileRef::Inline(r.model.clone());
            changed = true;
        }
        if let Some(h) = &self.hardware {
            r.hardware = profiles::hardware(h, Path::new("."))?;
            // A file given here is relative to the working directory, not to the session.
            r.session.cluster.hardware = if h.ends_with(".ron") {
                ProfileRef::Inline(r.hardware.clone())
            } else {
                ProfileRef::Named(h.clone())
            };
            changed = true;
        }
        if let Some(n) = self.nodes {
            anyhow::ensure!(n >= 1, "--nodes {n}: at least 1");
            r.session.cluster.nodes = n;
            changed = true;
        }
        if let Some(g) = self.gpus_per_node {
            anyhow::ensure!(g >= 1, "--gpus-per-node {g}: at least 1");
            r.session.cluster.gpus_per_node = g;
            changed = true;
        }
        if !changed {
            return Ok(None);
        }
        crate::validate::session::check(r)
            .map_err(|e| anyhow::anyhow!("{}: {e}", r.path.display()))?;
        let c = &r.session.cluster;
        let what = format!(
            "{} on {}×{} {}",
            r.model.name, c.nodes, c.gpus_per_node, r.hardware.name
        );
        r.override_notes.push(format!(
            "the session's model and cluster replaced on the command line: {what} (its \
             trajectory, B_crit scale and search are the session's)"
        ));
        Ok(Some(what))
    }
}
