//! The runtime of the explorer: an event loop that turns key presses into messages, runs the
//! update, hands effects to a worker thread and draws the view. The terminal is restored on
//! every exit path (see [`terminal`]). Background work: [`worker`] (tables, plans, loads,
//! writes) and [`live`] (a live run's aggregation).

pub mod frame_log;
pub mod keys;
pub mod live;
pub mod priority;
pub mod terminal;
pub mod worker;

use crate::app::{App, Effect, update};
use crate::ui::palette::ColorMode;
use ratatui::crossterm::event::{self, Event};
use std::sync::mpsc::{Sender, channel};
use std::time::Duration;
use worker::{Job, TableJob};

/// Why the explorer stopped abnormally.
#[derive(Debug, thiserror::Error)]
pub enum TuiError {
    /// Terminal I/O failed.
    #[error("terminal: {0}")]
    Io(#[from] std::io::Error),
    /// Standard input or output is not a terminal (a pipe, a file, no controlling terminal).
    #[error(
        "the explorer needs a terminal, and standard {0} is not one; without one: `copus watch \
         SRC --headless` follows a run, `copus analyze` and `copus grid` print the numbers, \
         `copus snapshot` draws a screen as text"
    )]
    NotATerminal(&'static str),
    /// A termination signal (its number) stopped the explorer (the terminal was restored);
    /// the second field says when unsaved changes were left unsaved (there is no asking
    /// first on a signal).
    #[error(
        "stopped by {}; terminal restored{}",
        crate::signals::signal_name(*.0),
        if *.1 { "; the session's unsaved changes were lost (save with s before stopping the explorer)" } else { "" }
    )]
    Signal(i32, bool),
    /// A background thread panicked (a bug); the explorer stopped and restored the terminal.
    #[error("internal error, the explorer stopped: {0}")]
    Panic(String),
}

/// The settings a throughput table depends on, snapshotted from the app.
pub fn table_job(app: &App) -> TableJob {
    let r = &app.resolved;
    TableJob {
        hardware: r.hardware.clone(),
        model: r.model.clone(),
        efficiency: r.efficiency(),
        cluster: r.cluster(),
        search: r.session.search.clone(),
    }
}

/// Send `effects` to the worker, and what the update replaced to be freed there.
fn dispatch(app: &mut App, jobs: &Sender<Job>, effects: Vec<Effect>) {
    let retired = app.take_retired();
    if !retired.is_empty() {
        let _ = jobs.send(Job::Free(retired));
    }
    for effect in effects {
        if effect == Effect::LoadSource {
            let _ = jobs.send(Job::Load(Box::new(app.resolved.clone()), app.device));
            continue;
        }
        if let (Effect::ComputePlan { generation }, Some(table)) = (&effect, &app.table) {
            let _ = jobs.send(Job::Plan(
                Box::new(app.resolved.clone()),
                app.planning_trajectory(),
                table.clone(),
                *generation,
            ));
            continue;
        }
        let job = matches!(effect, Effect::ComputeTable { .. }).then(|| Box::new(table_job(app)));
        // A closed channel means the worker is gone; the loop notices on the next receive.
        let _ = jobs.send(Job::Run(effect, job));
    }
}

/// Ctrl+Z: in raw mode the terminal sends it as a key, not as SIGTSTP.
fn is_suspend_key(key: &event::KeyEvent) -> bool {
    key.kind == event::KeyEventKind::Press
        && key.modifiers.contains(event::KeyModifiers::CONTROL)
        && matches!(key.code, event::KeyCode::Char('z' | 'Z'))
}

/// Run the explorer until the user quits.
pub fn run(mut app: App) -> Result<(), TuiError> {
    let mode = ColorMode::from_env();
    // Analyses run below this (the drawing) thread's priority.
    priority::lower_rayon_pool();
    {
        use std::io::IsTerminal;
        if !std::io::stdin().is_terminal() {
            return Err(TuiError::NotATerminal("input"));
        }
        if !std::io::stdout().is_terminal() {
            return Err(TuiError::NotATerminal("output"));
        }
    }
    let mut guard = terminal::TerminalGuard::enter()?;
    let signals = crate::signals::StopSignals::register()?;
    let _hangup = crate::signals::HangupWatch::spawn();
    let (results_tx, results) = channel();
    let live = match &app.live_target {
        Some(t) => {
            let target = crate::source::live::Target::parse(t)
                .map_err(|e| std::io::Error::other(e.to_string()))?;
            let settings = app.resolved.session.estimator.clone();
            let seq_len = app.resolved.model.seq_len;
            let given = match &app.resolved.session.source {
                crate::session::DataSource::Live { seq_len, .. } => *seq_len,
                _ => None,
            };
            Some(
                live::spawn(target, settings, (seq_len, given), results_tx.clone())
                    .map_err(|e| std::io::Error::other(e.to_string()))?,
            )
        }
        None => None,
    };
    let (jobs, worker) = worker::spawn(results_tx);
    let mut first = vec![crate::app::update::request_table(&mut app)];
    if app.loading {
        first.push(Effect::LoadSource);
    }
    dispatch(&mut app, &jobs, first);
    let mut frames = frame_log::FrameLog::from_env();
    // Redraw only when something changed: an input event or a message from a worker.
    let mut dirty = true;
    while !app.quit {
        if let Some(sig) = signals.received() {
            // Leave without waiting for the worker: it may be inside a long reduction.
            drop(guard);
            return Err(TuiError::Signal(sig, app.dirty()));
        }
        if crate::signals::take_suspend_request() {
            guard.suspend()?;
            dirty = true;
        }
        if let Some(msg) = terminal::take_thread_panic() {
            drop(guard);
            return Err(TuiError::Panic(msg));
        }
        if worker.is_finished() {
            drop(guard);
            return Err(TuiError::Panic(
                "the worker thread ended unexpectedly".into(),
            ));
        }
        if dirty {
            let (started, cpu) = (std::time::Instant::now(), frame_log::thread_cpu());
            guard
                .terminal
                .draw(|frame| crate::ui::view::draw(frame, &app, mode))?;
            if frames.is_on() {
                frames.record(
                    started.elapsed(),
                    frame_log::thread_cpu().saturating_sub(cpu),
                );
            }
            dirty = false;
        }
        if event::poll(Duration::from_millis(50))? {
            dirty = true;
            let msg = match event::read()? {
                Event::Key(key) if is_suspend_key(&key) => {
                    guard.suspend()?;
                    None
                }
                Event::Key(key) => {
                    let msg = keys::key_to_msg(&app, key);
                    let size = guard.terminal.size()?;
                    if crate::ui::view::too_small(size.width, size.height) {
                        // The screen shows only "terminal too small … q quits": the other
                        // keys would act unseen (a scrub, an open help page found later).
                        msg.filter(keys::acts_on_a_too_small_screen)
                    } else {
                        msg
                    }
                }
                Event::Mouse(m) => {
                    let size = guard.terminal.size()?;
                    let screen = ratatui::layout::Rect::new(0, 0, size.width, size.height);
                    keys::mouse_to_msg(&app, &crate::ui::geometry::areas(screen), m)
                }
                _ => None,
            };
            if let Some(msg) = msg {
                let effects = update(&mut app, msg);
                dispatch(&mut app, &jobs, effects);
            }
        }
        while let Ok(msg) = results.try_recv() {
            dirty = true;
            let effects = update(&mut app, msg);
            dispatch(&mut app, &jobs, effects);
        }
    }
    drop(live);
    drop(jobs);
    let joined = worker.join();
    drop(guard);
    drop(signals);
    match (joined, terminal::take_thread_panic()) {
        (_, Some(msg)) => Err(TuiError::Panic(msg)),
        (Err(_), None) => Err(TuiError::Panic("the worker thread panicked".into())),
        (Ok(()), None) => Ok(()),
    }
}
