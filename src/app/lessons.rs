//! Lessons: short guided tours that teach the method, stored as data in
//! `sessions/lessons/*.ron` and embedded in the binary (so an installed `copus lesson NAME`
//! works away from the source tree). A lesson runs on the explorer's guided-tour machinery:
//! each step moves the cursor, focuses (highlights) the panel it points at, tells the user
//! what to press, and asks a question to predict before `r` reveals the answer.
//!
//! The keys a step tells the user to press and the change they make are part of the data
//! (`keys`, `change`), so the tests walk every step of every lesson and check it; adding a
//! step or a lesson is a matter of editing a file (and listing a new file in [`FILES`]).

use crate::session::{Panel, TourStep};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The embedded lesson files, in the order they are listed.
pub const FILES: &[(&str, &str)] = &[
    (
        "noise-scale.ron",
        include_str!("../../sessions/lessons/noise-scale.ron"),
    ),
    (
        "coupling.ron",
        include_str!("../../sessions/lessons/coupling.ron"),
    ),
    (
        "measured-run.ron",
        include_str!("../../sessions/lessons/measured-run.ron"),
    ),
    (
        "what-if.ron",
        include_str!("../../sessions/lessons/what-if.ron"),
    ),
    (
        "estimate-right.ron",
        include_str!("../../sessions/lessons/estimate-right.ron"),
    ),
];

/// The data a lesson explores.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum LessonData {
    /// The bundled demo session (a published B_crit law).
    Demo,
    /// A run of the built-in trainer (`copus demo-train`, seed 0) of this many steps, trained
    /// when the lesson opens, each of its samples read as one sequence of the model.
    TrainerRun {
        /// Optimizer steps.
        steps: u64,
        /// Steps to run a small branched experiment from (docs/CBS.md) when the lesson
        /// opens, laid over the timeline; empty for none.
        #[serde(default)]
        branch_at: Vec<u64>,
    },
}

/// What the keys of a step change, as the tests check it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Change {
    /// The cursor moves along training.
    Cursor,
    /// The best cell (★) of the heatmap moves.
    Best,
    /// This side panel is shown.
    Side(Panel),
    /// The session is modified (what-if).
    Modified,
}

/// One step of a lesson.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LessonStep {
    /// The panel the step points at (focused and highlighted).
    pub panel: Panel,
    /// Trajectory index the step moves the cursor to.
    #[serde(default)]
    pub cursor: Option<usize>,
    /// What to do.
    pub text: String,
    /// What to predict before revealing.
    pub question: String,
    /// The answer, revealed on `r`.
    pub answer: String,
    /// The keys the text tells the user to press, as tmux names ("End", "S-Left", "3").
    pub keys: Vec<String>,
    /// What those keys change.
    pub change: Change,
    /// The panel the step's box covers, when its text asks to read the panel the default
    /// would cover (`TourStep::popup`).
    #[serde(default)]
    pub popup: Option<Panel>,
}

/// A lesson.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Lesson {
    /// Name used on the command line (`copus lesson NAME`).
    pub name: String,
    /// Title.
    pub title: String,
    /// The data it explores.
    pub data: LessonData,
    /// Its steps.
    pub steps: Vec<LessonStep>,
}

/// Why a lesson could not be read or found.
#[derive(Debug, thiserror::Error)]
pub enum LessonError {
    /// A lesson file is not valid RON for a lesson.
    #[error("lesson {file}: {msg}")]
    Parse {
        /// The file.
        file: String,
        /// What is wrong.
        msg: String,
    },
    /// No lesson of that name.
    #[error("no lesson named '{name}'; lessons: {known}")]
    Unknown {
        /// The name asked for.
        name: String,
        /// The names there are.
        known: String,
    },
}

impl Lesson {
    /// Parse a lesson from RON text (`file` names it in errors). A lesson needs at least one
    /// step, and every step a question, an answer and the keys it tells the user to press.
    pub fn from_ron(text: &str, file: &str) -> Result<Self, LessonError> {
        let err = |msg: String| LessonError::Parse {
            file: file.to_string(),
            msg,
        };
        let lesson: Lesson = ron::from_str(text).map_err(|e| {
            err(format!(
                "{}:{}: {}",
                e.span.start.line, e.span.start.col, e.code
            ))
        })?;
        if lesson.steps.is_empty() {
            return Err(err("a lesson needs at least one step".into()));
        }
        for (i, s) in lesson.steps.iter().enumerate() {
            if s.question.trim().is_empty() || s.answer.trim().is_empty() || s.keys.is_empty() {
                return Err(err(format!(
                    "step {}: needs a question, an answer and the keys it asks for",
                    i + 1
                )));
            }
        }
        Ok(lesson)
    }

    /// The lesson as guided-tour steps of a session.
    pub fn tour(&self) -> Vec<TourStep> {
        self.steps
            .iter()
            .map(|s| TourStep {
                text: s.text.clone(),
                panel: s.panel,
                cursor: s.cursor,
                question: Some(s.question.clone()),
                answer: Some(s.answer.clone()),
                popup: s.popup,
            })
            .collect()
    }
}

/// Every embedded lesson, in order.
pub fn builtin() -> Result<Vec<Lesson>, LessonError> {
    FILES
        .iter()
        .map(|(file, text)| Lesson::from_ron(text, file))
        .collect()
}

/// The embedded lesson named `name`.
pub fn find(name: &str) -> Result<Lesson, LessonError> {
    let all = builtin()?;
    let known = all
        .iter()
        .map(|l| l.name.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    all.into_iter()
        .find(|l| l.name == name)
        .ok_or(LessonError::Unknown {
            name: name.to_string(),
            known,
        })
}

/// Where a lesson's data file is written (trainer runs): `dir`/`lesson-NAME.ndjson`.
pub fn data_path(dir: &Path, lesson: &Lesson) -> std::path::PathBuf {
    dir.join(format!("lesson-{}.ndjson", lesson.name))
}

/// The next reveal state on `r`: the answer shows when a step with a question is on screen;
/// `r` again hides it. `None` (no step) leaves it hidden.
pub fn reveal(step: Option<&TourStep>, revealed: bool) -> bool {
    match step {
        Some(s) if s.answer.is_some() => !revealed,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_embedded_lesson_parses_with_unique_names() {
        let all = builtin().expect("lessons parse");
        assert!(all.len() >= 4);
        let mut names: Vec<&str> = all.iter().map(|l| l.name.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), all.len(), "unique names");
        for l in &all {
            assert_eq!(l.tour().len(), l.steps.len());
        }
    }

    #[test]
    fn unknown_names_and_bad_files_are_named() {
        let e = find("nope").expect_err("unknown");
        assert!(e.to_string().contains("coupling"), "{e}");
        let e = Lesson::from_ron(
            "(name: \"x\", title: \"t\", data: Demo, steps: [])",
            "x.ron",
        )
        .expect_err("no steps");
        assert!(e.to_string().contains("x.ron"), "{e}");
    }

    #[test]
    fn reveal_toggles_only_on_a_step_with_an_answer() {
        let mut step = find("coupling").expect("lesson").tour()[0].clone();
        assert!(reveal(Some(&step), false));
        assert!(!reveal(Some(&step), true));
        assert!(!reveal(None, false));
        step.answer = None;
        assert!(!reveal(Some(&step), false));
    }
}
