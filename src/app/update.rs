//! `update`: the only place the explorer's state changes.

use super::export::{export_view, to_csv};
use super::state::{Confirm, Overlay, OverlayKind};
use super::state::{Prompt, PromptKind};
use super::whatif::{self, FIELDS};
use super::{App, Msg, PromptEdit};
use crate::config::keys::Action;
use crate::session::{Panel, Session};
use std::path::PathBuf;

/// Work the update asks the runtime to do off the UI thread.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Compute the throughput table for the current what-if settings.
    ComputeTable {
        /// Generation to tag the answer with.
        generation: u64,
    },
    /// Load the session's data source.
    LoadSource,
    /// Plan switch points over the current trajectory and table.
    ComputePlan {
        /// Generation to tag the answer with.
        generation: u64,
    },
    /// Write files atomically (a save or an export), then answer `Msg::Written`.
    Write(WriteJob),
    /// Append one line to an existing file (approved advice), then answer `Msg::Appended`.
    AppendLine {
        /// The file.
        path: PathBuf,
        /// The line, without its newline.
        line: String,
    },
}

/// Files to write and what the write means, echoed back in `Msg::Written`.
#[derive(Debug, Clone, PartialEq)]
pub struct WriteJob {
    /// (path, contents) pairs.
    pub files: Vec<(PathBuf, String)>,
    /// Description for the status line.
    pub what: String,
    /// Whether existing files may be replaced; when false and one exists, the worker writes
    /// nothing and answers `Msg::WouldOverwrite` so the user is asked first.
    pub overwrite: bool,
    /// Fingerprints ([`crate::fsutil::content_hash`]) of what files it may replace held when
    /// this session last read or wrote them: one that holds something else now (edited by
    /// hand or by another program meanwhile) is not replaced without asking either.
    pub expected: Vec<(PathBuf, u64)>,
    /// Files copied into place with the write, (from, to): a Save as into another directory
    /// takes the calibration and branch records its session must keep beside it. The worker
    /// reads each into `files` before anything is written.
    pub copies: Vec<(PathBuf, PathBuf)>,
    /// For a save into another directory than the session's: the directory its relative
    /// paths now resolve against (the explorer continues as that session once written).
    pub rebased_to: Option<PathBuf>,
    /// For a save: the session written (it becomes the clean state).
    pub saved: Option<Box<Session>>,
}

fn clamp_add(value: usize, delta: i64, len: usize) -> usize {
    if len == 0 {
        return 0;
    }
    let v = value as i64 + delta;
    v.clamp(0, len as i64 - 1) as usize
}

/// The session as it stands now, with the view state folded in (what `s` saves).
pub fn session_snapshot(app: &App) -> Session {
    let mut s = app.resolved.session.clone();
    s.view.cursor = app.cursor;
    s.view.focus = app.focus;
    s.view.side = app.side;
    s.view.selected = Some(app.selected);
    s.view.whatif_row = app.whatif_row;
    s.view.tour_step = app.tour_step;
    s
}

/// Request a fresh throughput table (after a start or a what-if change).
pub fn request_table(app: &mut App) -> Effect {
    app.table_generation += 1;
    app.table = None;
    app.grid = None;
    Effect::ComputeTable {
        generation: app.table_generation,
    }
}

/// Request a fresh plan when there is a table and a trajectory to plan over.
pub fn request_plan(app: &mut App) -> Option<Effect> {
    app.plan_generation += 1;
    app.plan = None;
    app.switch_points.clear();
    (app.table.is_some() && app.trajectory.points.len() >= 2).then_some(Effect::ComputePlan {
        generation: app.plan_generation,
    })
}

fn set_cursor(app: &mut App, cursor: usize) {
    let last = app.trajectory.points.len().saturating_sub(1);
    app.cursor = cursor.min(last);
    // Follow mode (live runs): on while the cursor sits on the newest point.
    app.follow = app.cursor == last;
    app.refresh_grid();
}

fn tour(app: &mut App, delta: i64) {
    let count = app.resolved.session.tour.len();
    if count == 0 {
        app.status = "this session has no guided tour".into();
        return;
    }
    let kind = app.tour_kind();
    // Back from the first step stays there (it ended the lesson: "p" is not "end").
    if app.tour_step == Some(0) && delta < 0 {
        app.status = format!("{kind} 1/{count} · already the first step (n goes on)");
        return;
    }
    let next = match app.tour_step {
        None if delta > 0 => Some(app.tour_closed_at.take().unwrap_or(0).min(count - 1)),
        None => None,
        Some(i) => {
            let j = i as i64 + delta;
            (0..count as i64).contains(&j).then_some(j as usize)
        }
    };
    app.tour_step = next;
    app.tour_scroll = 0;
    app.tour_revealed = false;
    if let Some(i) = next {
        let step = app.resolved.session.tour[i].clone();
        if step.panel.is_side() {
            app.side = step.panel;
        }
        app.focus = step.panel;
        if let Some(c) = step.cursor {
            set_cursor(app, c);
        }
        // A step on the what-if editor reads from its first row ("the first row is the number
        // of nodes"), wherever an earlier step's exploring left the selection.
        if step.panel == Panel::WhatIf {
            app.whatif_row = 0;
        }
        app.status = format!("{kind} {}/{count}", i + 1);
        // The step's numbers are those of the lesson's own settings: said where they were
        // changed before it (the what-if lesson's 7/8 read against 5 nodes), first.
        if app.dirty() && step.answer.is_some() && kind == "lesson" {
            app.status
                .push_str(" · settings changed earlier: its answer is for the lesson's own");
        }
        if i + 1 == count {
            app.status
                .push_str(&format!(" · the last step: n ends the {kind}"));
        }
    } else {
        app.tour_closed_at = None;
        app.status = format!("{kind} ended (n starts it again)");
    }
}

/// Smallest and largest smoother bandwidth the keys reach, steps.
const SMOOTHING_RANGE: (f64, f64) = (1.0, 5000.0);

/// With `--b-crit-from`, set the session's B_crit scale to the measured ratio of the branch
/// file ([`super::branches::apply_conversion`]); the outcome waits in `app.notice` for the
/// status line. Runs on every completed load (and on opening, when the run was loaded before
/// the branch file was attached).
pub fn convert_from_branches(app: &mut App) {
    use super::branches::{apply_conversion, marks};
    let (Some(kind), Some(report)) = (app.convert_from_branches, app.branches.clone()) else {
        return;
    };
    let m = marks(&report, &app.raw_trajectory);
    let outcome = apply_conversion(&mut app.resolved.session, &m, kind);
    if outcome.is_ok() {
        app.rescale();
    }
    app.notice = Some(outcome.unwrap_or_else(|left| left));
}

/// `P`: switch a measured run's estimate between the raw and the Adam-preconditioned gradient
/// (the records' `precond` norms) and analyse it again.
fn toggle_gradient(app: &mut App) -> Vec<Effect> {
    use crate::session::DataSource;
    use crate::stats::analysis::settings::GradientKind;
    if !matches!(app.resolved.session.source, DataSource::Stats { .. }) || app.live_target.is_some()
    {
        app.status = "P applies to a recorded stats file (its records' `precond` norms)".into();
        return Vec::new();
    }
    let est = &mut app.resolved.session.estimator;
    est.gradient = match est.gradient {
        GradientKind::Raw => GradientKind::AdamPreconditioned,
        GradientKind::AdamPreconditioned => GradientKind::Raw,
    };
    app.status = format!(
        "estimate: {} gradient (P switches); re-analysing…",
        est.gradient.name()
    );
    app.loading = true;
    vec![Effect::LoadSource]
}

/// `<` / `>`: the two-sided kernel's bandwidth (or the one-sided EMA's memory) ÷/× 1.5 on a
/// measured file or dump, then the run is analysed again; a live run keeps its one-sided
/// smoother.
fn smoothing(app: &mut App, direction: i8) -> Vec<Effect> {
    use crate::session::DataSource;
    use crate::stats::SmootherKind;
    if !matches!(
        app.resolved.session.source,
        DataSource::Stats { .. } | DataSource::Dumps { .. }
    ) {
        app.status = "smoothing applies to a measured run (a stats file or a dump)".into();
        return Vec::new();
    }
    let factor = if direction > 0 { 1.5 } else { 1.0 / 1.5 };
    let est = &mut app.resolved.session.estimator;
    match est.smoother {
        SmootherKind::TwoSided => {
            // The bandwidth the shown analysis used (its default depends on the records'
            // spacing, which only the analysis saw).
            let used = app.analysis.as_ref().map(|a| a.summary.bandwidth_steps);
            let now = est
                .bandwidth_steps
                .or(used)
                .unwrap_or_else(|| est.bandwidth_for(100, 1.0));
            // Never narrower than the gap between the logged steps (the analysis refuses a
            // kernel that smooths nothing).
            let steps: Vec<u64> = app.raw_trajectory.points.iter().map(|p| p.step).collect();
            let floor =
                crate::stats::analysis::settings::typical_spacing(&steps).max(SMOOTHING_RANGE.0);
            let next = (now * factor).clamp(floor, SMOOTHING_RANGE.1.max(floor));
            est.bandwidth_steps = Some(next);
            app.status = format!(
                "smoother: Gaussian σ = {next:.1} steps (> wider, < narrower); re-analysing…"
            );
        }
        SmootherKind::OneSided => {
            // The EMA remembers 1/(1−θ) reference batches: scale that memory.
            let memory = 1.0 / (1.0 - est.ema_decay).max(1e-9);
            let next = (memory * factor).clamp(SMOOTHING_RANGE.0 + 1.0, SMOOTHING_RANGE.1);
            est.ema_decay = 1.0 - 1.0 / next;
            app.status = format!(
                "smoother: one-sided EMA over about {next:.0} reference batches (> longer, < \
                 shorter); re-analysing…"
            );
        }
    }
    app.loading = true;
    vec![Effect::LoadSource]
}

/// The status line after a jump to trajectory point `i`: which planned switch it is, where
/// (the trajectory's step and tokens, as the timeline shows them, and the step and tokens of
/// a trainer following the plan, as `plan --emit` writes them), what changes and at what cost.
fn switch_status(app: &App, i: usize) -> Option<String> {
    let plan = app.plan.as_ref()?;
    let n = plan.switches.len();
    let (k, s) = plan
        .switches
        .iter()
        .enumerate()
        .find(|(_, s)| app.trajectory.index_at_tokens(s.at_tokens) == i)?;
    // What changes first, in a few words (a narrow status line cuts the end), then where: the
    // timeline's step (also under the cursor) and the trainer's (what `plan --emit` writes,
    // shown nowhere else), then the full states.
    let (a, b) = (&s.from_state, &s.to_state);
    let layout = |x: &crate::plan::report::StateJson| {
        crate::perf::config::layout_label_cp(x.dp, x.cp, x.tp, x.pp)
    };
    let same_layout = layout(a) == layout(b);
    let change = if same_layout {
        format!("batch {}→{}", a.batch, b.batch)
    } else if a.batch == b.batch {
        format!("{}→{} at batch {}", layout(a), layout(b), a.batch)
    } else {
        format!("batch {}→{}, {}→{}", a.batch, b.batch, layout(a), layout(b))
    };
    // Both steps with their tokens before anything else, compact (at 80 columns the tokens,
    // the one thing that explains the two step counts, were cut off); then the rest of the
    // configuration, each part once with what changes (the two full states repeated the
    // batch and layout and were cut even at 120 columns).
    let details = match (&a.config, &b.config) {
        (Some(x), Some(y)) if same_layout => format!("{} {}", layout(a), config_change(x, y)),
        (Some(x), Some(y)) => config_change(x, y),
        _ => format!("{} → {}", s.from, s.to),
    };
    Some(format!(
        "switch {}/{n}: {change}, step {} ({} tok) = trainer {} ({}) · {} costs {:.0} s · {details}",
        k + 1,
        s.at_step,
        crate::format::tokens(s.at_tokens),
        s.plan_steps,
        crate::format::tokens(s.consumed_tokens),
        s.kind,
        s.cost_s,
    ))
}

/// The micro-batch, ZeRO stage, recompute policy and interleave of a switch, each once and
/// with its new value where it changes (`mbs1→2 Z1 rc:none`).
fn config_change(
    from: &crate::perf::config::ConfigJson,
    to: &crate::perf::config::ConfigJson,
) -> String {
    let part = |name: &str, x: String, y: String| {
        if x == y {
            format!("{name}{x}")
        } else {
            format!("{name}{x}→{y}")
        }
    };
    let mut parts = vec![
        part("mbs", from.mbs.to_string(), to.mbs.to_string()),
        part("Z", from.zero.to_string(), to.zero.to_string()),
        part("rc:", from.recompute.clone(), to.recompute.clone()),
    ];
    if from.vpp > 1 || to.vpp > 1 {
        parts.push(part("vpp", from.vpp.to_string(), to.vpp.to_string()));
    }
    parts.join(" ")
}

/// Directory exports go to: beside the save path (the working directory for the demo).
fn export_dir(app: &App) -> PathBuf {
    app.save_path
        .parent()
        .map_or_else(|| PathBuf::from("."), std::path::Path::to_path_buf)
}

/// File stem of exports: the save path's name without its `.ron` (dots inside are kept).
fn export_stem(app: &App) -> String {
    let name = app
        .save_path
        .file_name()
        .map_or_else(|| "copus".into(), |n| n.to_string_lossy().into_owned());
    name.strip_suffix(".ron").unwrap_or(&name).to_string()
}

fn export(app: &App) -> Result<Effect, String> {
    let (Some(table), Some(grid), Some(at)) =
        (&app.table, &app.grid, app.trajectory.points.get(app.cursor))
    else {
        return Err("nothing to export yet".into());
    };
    let mut view = export_view(table, grid, at, &super::export::context(app));
    view.comparison = super::export::comparison(app);
    let json = serde_json::to_string_pretty(&view).map_err(|e| e.to_string())?;
    let base = format!("{}-step{}", export_stem(app), at.step);
    let dir = export_dir(app);
    let (csv, json_path) = (
        dir.join(format!("{base}.csv")),
        dir.join(format!("{base}.json")),
    );
    let files = vec![(csv, to_csv(&view)), (json_path, json)];
    let (overwrite, expected) = may_replace(app, files.iter().map(|(p, _)| p));
    Ok(Effect::Write(WriteJob {
        what: format!("exported {} and .json", files[0].0.display()),
        files,
        overwrite,
        expected,
        copies: Vec::new(),
        rebased_to: None,
        saved: None,
    }))
}

/// What marks a session name as edited in the what-if.
const EDITED: &str = " · edited: ";

/// The name a session is saved under: its own, or, when the what-if changed its model,
/// hardware or cluster since it was loaded or saved, the name with what it now describes
/// (a name such as "7B on 8×8 H100" would otherwise describe the session it was, not this).
fn saved_name(app: &App) -> Option<String> {
    let (now, before) = (&app.resolved.session, &app.clean);
    if now.model == before.model && now.cluster == before.cluster {
        return None;
    }
    let c = &now.cluster;
    let base = now.name.split(EDITED).next().unwrap_or(&now.name);
    Some(format!(
        "{base}{EDITED}{} on {}×{} {}",
        app.resolved.model.name, c.nodes, c.gpus_per_node, app.resolved.hardware.name
    ))
}

/// Whether `files` may replace what is there without asking (each one this session may
/// overwrite), and the fingerprints the worker checks they still hold.
fn may_replace<'a>(
    app: &App,
    files: impl IntoIterator<Item = &'a PathBuf>,
) -> (bool, Vec<(PathBuf, u64)>) {
    let known: Option<Vec<(PathBuf, u64)>> = files
        .into_iter()
        .map(|p| app.may_overwrite.get(p).map(|h| (p.clone(), *h)))
        .collect();
    match known {
        Some(expected) => (true, expected),
        None => (false, Vec::new()),
    }
}

/// The save of the session as it stands to `app.save_path`.
fn save(app: &mut App) -> Vec<Effect> {
    if let Some(name) = saved_name(app) {
        app.resolved.session.name = name;
    }
    let mut snapshot = session_snapshot(app);
    // Saved into another directory (Save as): its relative paths must lead where they did.
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let (old_dir, new_dir) = (
        super::rebase::lexical_absolute(&app.resolved.base, &cwd),
        super::rebase::lexical_absolute(&export_dir(app), &cwd),
    );
    let travelling: Vec<&str> = app.save_with.iter().map(|(n, _)| n.as_str()).collect();
    let mut copies = super::rebase::rebase(&mut snapshot, (&old_dir, &new_dir), &travelling);
    // A calibration given on the command line is kept: copied beside the session, named in it.
    if let Some(flag) = &app.resolved.calibration_from_flag
        && app.resolved.use_calibration
        && let Some(name) = flag.file_name()
    {
        let from = super::rebase::lexical_absolute(flag, &cwd);
        let to = new_dir.join(name);
        snapshot.calibration = Some(name.to_string_lossy().into_owned());
        copies.retain(|(_, t)| *t != to);
        copies.push((from, to));
    }
    let rebased_to = (old_dir != new_dir).then(|| export_dir(app));
    match snapshot.to_ron() {
        Ok(text) => {
            app.status = "saving…".into();
            let path = app.save_path.clone();
            let dir = export_dir(app);
            let mut files = vec![(path.clone(), text)];
            files.extend(
                app.save_with
                    .iter()
                    .map(|(name, contents)| (dir.join(name), contents.clone())),
            );
            let (overwrite, expected) = may_replace(
                app,
                files
                    .iter()
                    .map(|(p, _)| p)
                    .chain(copies.iter().map(|(_, to)| to)),
            );
            let what = match app.save_with.len() {
                0 => format!("saved {}", path.display()),
                n => format!("saved {} and {n} data file(s) beside it", path.display()),
            };
            vec![Effect::Write(WriteJob {
                files,
                what,
                overwrite,
                expected,
                copies,
                rebased_to,
                saved: Some(Box::new(snapshot)),
            })]
        }
        Err(e) => {
            app.status = format!("save failed: {e}");
            app.quit_after_save = false;
            Vec::new()
        }
    }
}

/// Esc: close the topmost popup; nothing open is not a reason to quit.
fn escape(app: &mut App) {
    if let Some(top) = app.overlays.pop() {
        match top {
            Overlay::Confirm(_) => {
                app.quit_after_save = false;
                app.status = "cancelled".into();
            }
            Overlay::Prompt(p) => {
                app.status = match p.kind {
                    PromptKind::SaveAs => "save as: cancelled",
                    PromptKind::GoTo => "go to: cancelled",
                    PromptKind::Filter => "filter: unchanged",
                }
                .into();
            }
            Overlay::Help | Overlay::Explain | Overlay::Ranked => {}
        }
    } else if let Some(i) = app.tour_step.take() {
        app.tour_closed_at = Some(i);
        app.status = format!(
            "{} closed at step {} (n resumes there)",
            app.tour_kind(),
            i + 1
        );
    } else {
        app.status = format!("{} quits", app.keymap.key_label(Action::Quit));
    }
}

/// Close `overlay` if it is open, else open it on top (only once the grid it shows exists).
fn toggle(app: &mut App, overlay: Overlay) {
    if app.close(overlay.kind()).is_none() && app.table.is_some() {
        app.open(overlay);
    }
}

fn answer(app: &mut App, c: char) -> Vec<Effect> {
    let question = match app.close(OverlayKind::Confirm) {
        Some(Overlay::Confirm(q)) => Some(q),
        _ => None,
    };
    match (question, c) {
        (Some(Confirm::Quit), 'y') => app.quit = true,
        (Some(Confirm::Quit), 's') => {
            app.quit_after_save = true;
            return save(app);
        }
        (Some(Confirm::Overwrite { mut job, .. }), 'y') => {
            job.overwrite = true;
            job.expected.clear();
            return vec![Effect::Write(*job)];
        }
        (Some(_), _) => {
            app.quit_after_save = false;
            app.status = "cancelled: nothing written".into();
        }
        (None, _) => {}
    }
    Vec::new()
}

fn prompt(app: &mut App, edit: PromptEdit) -> Vec<Effect> {
    let Some(p) = app.prompt_mut() else {
        return Vec::new();
    };
    match edit {
        PromptEdit::Char(c) => p.text.push(c),
        PromptEdit::Backspace => {
            p.text.pop();
        }
        PromptEdit::Clear => p.text.clear(),
        PromptEdit::DeleteWord => {
            let is_sep = |c: char| c.is_whitespace() || c == '/';
            let kept = p
                .text
                .trim_end_matches(is_sep)
                .trim_end_matches(|c| !is_sep(c));
            p.text.truncate(kept.len());
        }
        PromptEdit::Submit if p.kind == PromptKind::Filter => {
            let text = p.text.clone();
            app.close(OverlayKind::Prompt);
            apply_filter(app, &text);
        }
        PromptEdit::Submit if p.kind == PromptKind::GoTo => {
            let text = p.text.trim().to_string();
            app.close(OverlayKind::Prompt);
            match super::goto::target(&app.trajectory, &text) {
                Ok(i) => {
                    set_cursor(app, i);
                    let q = &app.trajectory.points[app.cursor];
                    // A step between the trajectory's points lands on the nearest one: said,
                    // not done silently (`g 1200` on the demo went to step 477).
                    let nearest = match super::goto::parse(&text) {
                        Ok(super::goto::Position::Step(s)) if s != q.step => {
                            format!(" (the nearest point to step {s})")
                        }
                        _ => String::new(),
                    };
                    app.status = format!(
                        "at step {} · {} tokens{nearest}",
                        q.step,
                        crate::format::tokens(q.tokens)
                    );
                }
                Err(e) => app.status = format!("go to: {e}"),
            }
        }
        PromptEdit::Submit => {
            let path = p.text.trim().to_string();
            app.close(OverlayKind::Prompt);
            if path.is_empty() {
                app.status = "save as: no path given".into();
                return Vec::new();
            }
            let path = PathBuf::from(path);
            app.save_path = if path.extension().is_some() {
                path
            } else {
                path.with_extension("ron")
            };
            return save(app);
        }
    }
    Vec::new()
}

fn written(app: &mut App, job: WriteJob, result: Result<(), super::msg::WriteFailed>) {
    match result {
        Ok(()) => {
            app.may_overwrite.extend(
                job.files
                    .iter()
                    .map(|(p, text)| (p.clone(), crate::fsutil::content_hash(text.as_bytes()))),
            );
            if let Some(saved) = &job.saved {
                // The explorer is now the session just written: its paths as saved (a
                // command-line calibration now named in it), read from its directory.
                let s = &mut app.resolved.session;
                s.source = saved.source.clone();
                s.calibration = saved.calibration.clone();
                s.branches = saved.branches.clone();
                if let Some(dir) = &job.rebased_to {
                    app.resolved.base = dir.clone();
                    app.resolved.path = app.save_path.clone();
                }
                if saved.calibration.is_some() {
                    app.resolved.calibration_from_flag = None;
                }
                app.mark_clean(saved);
                if app.quit_after_save {
                    app.quit = true;
                }
            }
            app.status = job.what;
        }
        Err(e) => {
            app.quit_after_save = false;
            app.status = format!("write failed: {e}");
        }
    }
}

/// Whether `msg` comes from the user (a key or the mouse): it replaces a stale status line
/// with the key hints.
fn from_user(msg: &Msg) -> bool {
    !matches!(
        msg,
        // Revealing a lesson's answer or scrolling its text reads what the screen shows:
        // the status line (a switch point's description, say) stays for the answer to name.
        Msg::Reveal
            | Msg::TourScroll(_)
            | Msg::TableReady { .. }
            | Msg::PlanReady { .. }
            | Msg::SourceLoaded(_)
            | Msg::Live { .. }
            | Msg::LiveStatus(_)
            | Msg::Progress(..)
            | Msg::Written { .. }
            | Msg::Appended { .. }
            | Msg::WouldOverwrite { .. }
    )
}

pub(super) fn select_best(app: &mut App) {
    if let Some(best) = app.best_visible() {
        app.selected = best;
    }
}

/// Move the selection by `dr` visible rows and `dc` columns.
fn move_selection(app: &mut App, dr: i64, dc: i64) {
    let Some(cols) = app.table.as_ref().map(|t| t.batches.len()) else {
        return;
    };
    let rows = app.visible_rows();
    if rows.is_empty() {
        return;
    }
    let at = rows.iter().position(|&r| r == app.selected.0).unwrap_or(0);
    app.selected = (
        rows[clamp_add(at, dr, rows.len())],
        clamp_add(app.selected.1, dc, cols),
    );
}

/// Apply the filter typed at `/`: keep the selection on a visible row (the best visible cell
/// when the selected row is hidden) and say how many layouts remain.
fn apply_filter(app: &mut App, text: &str) {
    match super::filter::parse(text) {
        Err(e) => app.status = format!("filter: {e}"),
        Ok(f) => {
            app.layout_filter = f;
            let rows = app.visible_rows();
            let total = app.table.as_ref().map_or(0, |t| t.layouts.len());
            if !rows.contains(&app.selected.0) {
                match app.best_visible() {
                    Some(best) => app.selected = best,
                    None => {
                        if let Some(&r) = rows.first() {
                            app.selected.0 = r;
                        }
                    }
                }
            }
            app.status = match &app.layout_filter {
                None => format!("filter cleared: all {total} layouts"),
                Some(f) if rows.is_empty() => {
                    format!(
                        "filter '{}': no layout matches (/ edits it; an empty filter shows all)",
                        f.text
                    )
                }
                Some(f) => format!(
                    "filter '{}': {} of {total} layouts (/ edits it; an empty filter shows all)",
                    f.text,
                    rows.len()
                ),
            };
        }
    }
}

/// `m`: mark the selected cell for comparison, or unmark it when it is the marked one.
fn mark(app: &mut App) {
    let Some(t) = &app.table else {
        app.status = "nothing to mark until the grid is computed".into();
        return;
    };
    let (r, c) = app.selected;
    let label = match (t.layouts.get(r), t.batches.get(c)) {
        (Some(l), Some(b)) => format!("{} @ batch {b}", l.label()),
        _ => return,
    };
    if app.marked == Some(app.selected) {
        app.marked = None;
        app.status = format!("unmarked {label}");
    } else {
        app.marked = Some(app.selected);
        app.status = format!("marked {label}: select another cell, x compares them");
    }
}

/// Apply `msg` to `app`; return the effects to run.
pub fn update(app: &mut App, msg: Msg) -> Vec<Effect> {
    let n = app.trajectory.points.len();
    if from_user(&msg) && app.load_error.is_none() {
        app.status.clear();
    }
    match msg {
        Msg::Scrub(d) => set_cursor(app, clamp_add(app.cursor, d, n)),
        Msg::ScrubTo(i) => set_cursor(app, i),
        Msg::Home => set_cursor(app, 0),
        Msg::End => {
            set_cursor(app, n.saturating_sub(1));
            // End is the last step with an estimate, not the run's last: say so where they
            // differ (the run seemed to end early).
            if let Some(words) = app.tail_words() {
                app.status = words;
            }
        }
        Msg::JumpSwitch(d) => {
            let target = if d > 0 {
                app.switch_points.iter().find(|&&i| i > app.cursor)
            } else {
                app.switch_points.iter().rev().find(|&&i| i < app.cursor)
            };
            match target {
                Some(&i) => {
                    set_cursor(app, i);
                    if let Some(status) = switch_status(app, i) {
                        app.status = status;
                    }
                }
                None if app.switch_points.is_empty() => {
                    app.status = "no planned switch points".into()
                }
                None if d > 0 => app.status = "no later switch point".into(),
                None => app.status = "no earlier switch point".into(),
            }
        }
        Msg::SelectBest => {
            select_best(app);
            // The selection follows the ★ again as the cursor moves (until a cell is picked).
            app.user_selected = false;
            app.focus = Panel::Heatmap;
        }
        Msg::MoveSelection(dr, dc) => {
            app.user_selected = true;
            move_selection(app, dr, dc);
        }
        Msg::Select(r, c) => {
            if let Some(t) = &app.table
                && r < t.layouts.len()
                && c < t.batches.len()
            {
                app.selected = (r, c);
                app.user_selected = true;
                app.focus = Panel::Heatmap;
            }
        }
        Msg::CycleLayer => {
            if let Some(name) = app.cycle_layer() {
                app.status = format!("timeline: layer {name} (l: next layer)");
            } else if app
                .analysis
                .as_ref()
                .is_some_and(|r| !r.summary.layers.is_empty())
            {
                app.status = "timeline: whole model".into();
            }
        }
        Msg::DrillIn => {
            app.side = Panel::Throughput;
            app.side_scroll = 0;
        }
        Msg::Explain => {
            toggle(app, Overlay::Explain);
            app.explain_scroll = 0;
            if app.table.is_none() {
                app.status = "nothing to explain until the grid is computed".into();
            }
        }
        Msg::ExplainScroll(d) => {
            // The view clamps to the text's length; this bounds the state.
            app.explain_scroll = (app.explain_scroll as i64 + d).clamp(0, 500) as u16;
        }
        Msg::Mark => mark(app),
        Msg::FocusNext => {
            app.focus = match app.focus {
                Panel::Timeline => Panel::Heatmap,
                Panel::Heatmap => app.side,
                _ => Panel::Timeline,
            }
        }
        Msg::ShowSide(p) => {
            if p.is_side() {
                app.side = p;
                app.focus = p;
                app.side_scroll = 0;
            }
        }
        Msg::ScrollSide(d) => {
            // The view clamps to the text's length; this bounds the state.
            app.side_scroll = (app.side_scroll as i64 + d).clamp(0, 500) as u16;
        }
        Msg::WhatIfRow(d) => app.whatif_row = clamp_add(app.whatif_row, d, FIELDS.len()),
        Msg::WhatIfChange(d) => {
            let field = FIELDS[app.whatif_row.min(FIELDS.len() - 1)];
            let search_before = app.resolved.session.search.clone();
            let value_before = whatif::value(&app.resolved, field);
            match whatif::apply(&mut app.resolved, field, d) {
                Ok(()) => {
                    let value = whatif::value(&app.resolved, field);
                    // At the end of the row's choices the key changes nothing: said.
                    let end = if value == value_before && d != 0 {
                        if d > 0 {
                            " (the largest choice)"
                        } else {
                            " (the smallest choice)"
                        }
                    } else {
                        ""
                    };
                    app.status = format!("{} = {value}{end}", field.label());
                    // Another framework searches its own ZeRO stages and recompute policies.
                    let search = &app.resolved.session.search;
                    if field != whatif::Field::Zero
                        && field != whatif::Field::Recompute
                        && (search.zero != search_before.zero
                            || search.recompute != search_before.recompute)
                    {
                        let policies: Vec<String> =
                            search.recompute.iter().map(|p| p.to_string()).collect();
                        app.status.push_str(&format!(
                            " · searching its own ZeRO {:?}, recompute {}",
                            search.zero,
                            policies.join("/")
                        ));
                    }
                    app.status
                        .push_str(&whatif::no_effect_note(&app.resolved, field));
                    app.rescale();
                    if field.affects_throughput() {
                        return vec![request_table(app)];
                    }
                    return request_plan(app).into_iter().collect();
                }
                Err(e) => app.status = e,
            }
        }
        Msg::Tour(d) => tour(app, d),
        Msg::Reveal => {
            let step = app.tour_step.and_then(|i| app.resolved.session.tour.get(i));
            app.tour_revealed = super::lessons::reveal(step, app.tour_revealed);
            // A revealed answer is read from its first line (the view scrolls to it): at 80x24 a
            // long step showed no change on `r`, the answer below the box's fold.
            app.tour_scroll = 0;
        }
        Msg::TourScroll(d) => {
            if app.tour_step.is_some() {
                // The view clamps to the text's length; this bounds the state.
                app.tour_scroll = (app.tour_scroll as i64 + d).clamp(0, 100) as u16;
            }
        }
        Msg::ToggleHelp => {
            if app.close(OverlayKind::Help).is_none() {
                app.open(Overlay::Help);
            }
            app.help_scroll = 0;
        }
        Msg::HelpScroll(d) => {
            app.help_scroll = (app.help_scroll as i64 + d).clamp(0, 100) as u16;
        }
        Msg::Escape => escape(app),
        Msg::Save => return save(app),
        Msg::SaveAs => {
            app.open(Overlay::Prompt(Prompt {
                kind: PromptKind::SaveAs,
                text: app.save_path.display().to_string(),
            }));
            app.status = "save as: type a path, Enter saves, Esc cancels".into();
        }
        Msg::Smoothing(d) => return smoothing(app, d),
        Msg::ToggleGradient => return toggle_gradient(app),
        Msg::Filter => {
            app.open(Overlay::Prompt(Prompt {
                kind: PromptKind::Filter,
                // The filter in force and a space: what is typed adds a condition (all
                // must hold); Backspace edits it.
                text: app
                    .layout_filter
                    .as_ref()
                    .map_or_else(String::new, |f| format!("{} ", f.text.trim_end())),
            }));
            app.status = "filter layouts: e.g. tp<=4 pp=1 (all must hold) · empty shows all · \
                          Enter · Esc"
                .into();
        }
        Msg::Ranked => {
            toggle(app, Overlay::Ranked);
            app.ranked_scroll = 0;
            if app.table.is_none() {
                app.status = "nothing to rank until the grid is computed".into();
            }
        }
        Msg::RankedScroll(d) => {
            // The view clamps to the text's length; this bounds the state.
            app.ranked_scroll = (app.ranked_scroll as i64 + d).clamp(0, 2000) as u16;
        }
        Msg::GoTo => {
            app.open(Overlay::Prompt(Prompt {
                kind: PromptKind::GoTo,
                text: String::new(),
            }));
            app.status = "go to: a step (1200), tokens (150B) or a share of the run (40%)".into();
        }
        Msg::Prompt(edit) => return prompt(app, edit),
        Msg::Answer(c) => return answer(app, c),
        Msg::Export => match export(app) {
            Ok(effect) => return vec![effect],
            Err(e) => app.status = format!("export failed: {e}"),
        },
        Msg::Quit => {
            if app.dirty() {
                app.open(Overlay::Confirm(Confirm::Quit));
            } else {
                app.quit = true;
            }
        }
        Msg::TableReady { generation, table } => {
            return super::answers::table_ready(app, generation, table);
        }
        Msg::PlanReady { generation, plan } => super::answers::plan_ready(app, generation, *plan),
        Msg::SourceLoaded(result) => return super::answers::source_loaded(app, result),
        Msg::Live {
            update,
            steps,
            malformed,
            non_finite,
            dropped,
        } => {
            let counts = super::answers::LiveCounts {
                steps,
                malformed,
                non_finite,
                dropped,
            };
            return super::answers::live(app, update, counts);
        }
        Msg::LiveStatus(s) => {
            app.status = match super::advice::pending_note(app) {
                Some(note) => format!("{note} · {}", s.text),
                None => s.text.clone(),
            };
            app.live_link = Some(s);
        }
        Msg::Progress(f, what) => {
            app.status = format!("{what} {:.0}%", f * 100.0);
            app.progress = Some((f.clamp(0.0, 1.0), what));
        }
        Msg::Written { job, result } => written(app, *job, result),
        Msg::Appended { path, result } => {
            if let Err(e) = result {
                app.status = format!("advice not written to {}: {e}", path.display());
            }
        }
        Msg::ApproveAdvice => return super::advice::approve(app),
        Msg::WouldOverwrite { job, existing } => {
            app.status = format!("{} exists", existing.display());
            app.open(Overlay::Confirm(Confirm::Overwrite { job, existing }));
        }
    }
    Vec::new()
}
