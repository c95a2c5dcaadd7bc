//! Scanning a dump directory: find the steps and their gradient files, read every header,
//! and check that the files of a step agree on tensor names, shapes and dtypes.

use super::error::{DumpError, io};
use super::index::{DumpIndex, GradFile, LeftOutStep, StepEntry};
use super::{npy, st_file};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Scan `dir`: either a dump root holding `step_<N>/` directories, or one step directory.
///
/// Every step must hold the same tensors (names and shapes) as the first, or its norms would
/// cover other parameters than the rest of the run: a step that differs is an error naming it
/// and the tensor. The one exception is the newest step of a dump with complete steps before
/// it: a trainer may still be writing it (a file missing or truncated, a set or tensors still
/// to come: [`DumpError::may_be_unfinished`]), so it is left out and said in
/// [`DumpIndex::left_out`] instead of stopping the analysis of the steps that are complete.
/// A fault no further writing mends (a header that is not valid, a file that cannot be read,
/// a shape that differs) is an error there as anywhere.
pub fn scan(dir: &Path) -> Result<DumpIndex, DumpError> {
    let dirs: Vec<PathBuf> = list(dir)?.into_iter().filter(|p| p.is_dir()).collect();
    // A directory numbered like a step that is none (`step_-1`, a number past 2^64 − 1) was
    // passed over without a word: its gradients were not analysed.
    if let Some(p) = dirs.iter().find(|p| numbered_but_no_step(p)) {
        return Err(DumpError::StepNumber { path: p.clone() });
    }
    let skipped_dirs: Vec<PathBuf> = dirs
        .iter()
        .filter(|p| named_step_but_no_number(p))
        .cloned()
        .collect();
    let mut steps: Vec<(u64, PathBuf)> = dirs
        .into_iter()
        .filter_map(|p| step_number(&p).map(|n| (n, p)))
        .collect();
    if steps.is_empty() {
        steps.push((step_number(dir).unwrap_or(0), dir.to_path_buf()));
    }
    steps.sort();
    if let Some(w) = steps.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(DumpError::DuplicateStep {
            path: w[1].1.clone(),
            step: w[0].0,
            other: w[0].1.display().to_string(),
        });
    }
    let newest = steps.len() - 1;
    let mut out: Vec<StepEntry> = Vec::with_capacity(steps.len());
    let mut left_out = None;
    for (i, (step, sdir)) in steps.into_iter().enumerate() {
        let entry = step_files(&sdir).and_then(|files| {
            if files.is_empty() && out.is_empty() && sdir == dir {
                return Err(DumpError::Empty { path: dir.into() });
            }
            let files = align(&sdir, files)?;
            let entry = StepEntry {
                step,
                dir: sdir.clone(),
                bytes: tensor_bytes(&files),
                files,
            };
            match out.first() {
                Some(first) => same_tensors(first, &entry).map(|()| entry),
                None => Ok(entry),
            }
        });
        // The newest step may still be gaining gradient sets (or a set its sample count):
        // fewer sets than the step before it, or a set without the count the sets before it
        // had, would read as a smaller batch.
        let entry = match (entry, out.last()) {
            (Ok(e), Some(before)) if i == newest => match unfinished(before, &e) {
                Some(why) => {
                    left_out = Some(LeftOutStep {
                        step,
                        dir: sdir,
                        reason: why,
                    });
                    continue;
                }
                None => Ok(e),
            },
            (entry, _) => entry,
        };
        match entry {
            Ok(mut e) => {
                // Checked against the first step: its tensors are read again when it is
                // reduced (1,000 steps of 2,000 tensors held 900 MB of entries).
                if !out.is_empty() {
                    for f in &mut e.files {
                        f.tensors = Vec::new();
                    }
                }
                out.push(e);
            }
            Err(e) if i == newest && !out.is_empty() && e.may_be_unfinished() => {
                left_out = Some(LeftOutStep {
                    step,
                    dir: sdir,
                    reason: e.to_string(),
                });
            }
            Err(e) => return Err(e),
        }
    }
    Ok(DumpIndex {
        root: dir.into(),
        steps: out,
        left_out: left_out.into_iter().collect(),
        skipped_dirs,
    })
}

/// Total tensor bytes of a step's gradient files.
fn tensor_bytes(files: &[GradFile]) -> u64 {
    files
        .iter()
        .flat_map(|f| &f.tensors)
        .map(|t| t.nbytes)
        .sum()
}

/// `step` with its files' tensors, read again from its directory where the scan dropped them
/// (every step after the first), and checked again against `first` (the files may have been
/// rewritten since the scan). The first step, or a step that kept them, is returned as is.
pub fn with_tensors<'a>(
    first: &StepEntry,
    step: &'a StepEntry,
) -> Result<std::borrow::Cow<'a, StepEntry>, DumpError> {
    if step.files.iter().all(|f| !f.tensors.is_empty()) || std::ptr::eq(first, step) {
        return Ok(std::borrow::Cow::Borrowed(step));
    }
    let mut files = align(&step.dir, step_files(&step.dir)?)?;
    // The sample counts as scanned (a count the option overrode, or one read then).
    for (f, scanned) in files.iter_mut().zip(&step.files) {
        if f.path == scanned.path {
            f.samples = scanned.samples;
        }
    }
    let reloaded = StepEntry {
        step: step.step,
        dir: step.dir.clone(),
        bytes: tensor_bytes(&files),
        files,
    };
    if reloaded.files.len() != step.files.len()
        || reloaded
            .files
            .iter()
            .zip(&step.files)
            .any(|(a, b)| a.path != b.path)
    {
        return Err(DumpError::Changed {
            path: step.dir.clone(),
            what: format!(
                "its gradient files changed while the dump was read: {} set(s) when scanned, \
                 {} now, or others by name (a set added, removed or renamed since)",
                step.files.len(),
                reloaded.files.len()
            ),
        });
    }
    same_tensors(first, &reloaded)?;
    Ok(std::borrow::Cow::Owned(reloaded))
}

/// Why the newest step `step` looks unfinished beside the step `before` it, if it does: fewer
/// gradient sets, or a set without the sample count every set before it had.
fn unfinished(before: &StepEntry, step: &StepEntry) -> Option<String> {
    let (had, has) = (before.files.len(), step.files.len());
    if has < had {
        return Some(format!(
            "{}: {has} of the {had} gradient sets step {} has (a smaller batch, or sets still \
             to come)",
            step.dir.display(),
            before.step
        ));
    }
    let counted = |e: &StepEntry| e.files.iter().all(|f| f.samples.is_some());
    let missing = step.files.iter().find(|f| f.samples.is_none());
    match missing {
        Some(f) if counted(before) => Some(format!(
            "{}: no sample count yet (every set of step {} has one)",
            f.path.display(),
            before.step
        )),
        _ => None,
    }
}

/// Check that `step` holds the tensors of `first` (the same names and shapes; the order may
/// differ), or name the step and the first tensor that differs.
fn same_tensors(first: &StepEntry, step: &StepEntry) -> Result<(), DumpError> {
    let shapes = |e: &StepEntry| -> HashMap<String, Vec<usize>> {
        e.files[0]
            .tensors
            .iter()
            .map(|t| (t.name.clone(), t.shape.clone()))
            .collect()
    };
    let (want, have) = (shapes(first), shapes(step));
    let differs = |tensor: &str, what: String| DumpError::Mismatch {
        path: step.dir.clone(),
        tensor: tensor.into(),
        what: format!(
            "{what}: every step must dump the same tensors, or its norms cover other \
             parameters than the rest of the run (analyse such steps as a dump of their own)"
        ),
    };
    let first_dir = first.dir.display();
    let mut missing: Vec<&String> = want.keys().filter(|n| !have.contains_key(*n)).collect();
    missing.sort();
    if let Some(name) = missing.first() {
        return Err(differs(name, format!("missing (present in {first_dir})")));
    }
    let mut names: Vec<&String> = have.keys().collect();
    names.sort();
    for name in names {
        match want.get(name) {
            None => return Err(differs(name, format!("not present in {first_dir}"))),
            Some(shape) if *shape != have[name] => {
                return Err(differs(
                    name,
                    format!(
                        "shape {:?} differs from {:?} in {first_dir}",
                        have[name], shape
                    ),
                ));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// `step_` followed by a number (digits, with a sign or not) that is no step number.
fn numbered_but_no_step(p: &Path) -> bool {
    let Some(rest) = p
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix("step_"))
    else {
        return false;
    };
    let digits = rest.strip_prefix(['-', '+']).unwrap_or(rest);
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) && step_number(p).is_none()
}

/// `step_` followed by something that is no number at all (`step_abc`, `step_5.tmp`): not a
/// step directory, but likely one the user meant as one (it had been skipped silently).
fn named_step_but_no_number(p: &Path) -> bool {
    p.file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix("step_"))
        .is_some_and(|_| step_number(p).is_none() && !numbered_but_no_step(p))
}

/// `step_<N>` → N.
fn step_number(p: &Path) -> Option<u64> {
    p.file_name()?.to_str()?.strip_prefix("step_")?.parse().ok()
}

fn list(dir: &Path) -> Result<Vec<PathBuf>, DumpError> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io(dir))?
        .map(|e| e.map(|e| e.path()).map_err(io(dir)))
        .collect::<Result<_, _>>()?;
    v.sort();
    Ok(v)
}

/// The gradient sets of one step: `*.safetensors` files and directories of `*.npy` files.
fn step_files(sdir: &Path) -> Result<Vec<GradFile>, DumpError> {
    let mut files = Vec::new();
    crate::signals::set_mapped_context(&format!("dump step directory {}", sdir.display()));
    for p in list(sdir)? {
        if p.extension().is_some_and(|x| x == "safetensors") {
            regular_file(&p)?;
            files.push(st_file::read_header(&p)?);
        } else if p.is_dir()
            && list(&p)?
                .iter()
                .any(|q| q.extension().is_some_and(|x| x == "npy"))
        {
            files.push(npy::read_part_dir(&p)?);
        }
    }
    Ok(files)
}

/// Check that a gradient file is a regular file (following symlinks): a dangling link, a
/// FIFO or a device would otherwise be skipped or block, and a step silently reduced with
/// fewer ranks.
pub(crate) fn regular_file(p: &Path) -> Result<(), DumpError> {
    // A link whose target is missing is a fault, not a file still to come (the link itself
    // was written, to a wrong place).
    if std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink())
        && let Err(e) = std::fs::metadata(p)
    {
        return Err(DumpError::Header {
            path: p.into(),
            message: format!("a symbolic link that leads to no file ({e})"),
        });
    }
    let meta = std::fs::metadata(p).map_err(io(p))?;
    if meta.is_file() {
        Ok(())
    } else {
        Err(DumpError::Header {
            path: p.into(),
            message: "not a regular file (a gradient file must be a plain file)".into(),
        })
    }
}

/// Check K ≥ 2 and put every file's tensors in the first file's order, or say which file and
/// tensor differ.
fn align(sdir: &Path, mut files: Vec<GradFile>) -> Result<Vec<GradFile>, DumpError> {
    if files.len() < 2 {
        return Err(DumpError::TooFewFiles {
            path: sdir.into(),
            found: files.len(),
        });
    }
    let first = files[0].clone();
    for f in files.iter_mut().skip(1) {
        let mut by_name: HashMap<String, _> =
            f.tensors.drain(..).map(|t| (t.name.clone(), t)).collect();
        let mismatch = |tensor: &str, what: String| DumpError::Mismatch {
            path: f.path.clone(),
            tensor: tensor.into(),
            what,
        };
        let mut aligned = Vec::with_capacity(first.tensors.len());
        for t0 in &first.tensors {
            let Some(t) = by_name.remove(&t0.name) else {
                return Err(mismatch(
                    &t0.name,
                    format!("missing (present in {})", first.path.display()),
                ));
            };
            if t.fortran != t0.fortran {
                return Err(mismatch(
                    &t0.name,
                    format!(
                        "memory order {} differs from {} in {}",
                        order(t.fortran),
                        order(t0.fortran),
                        first.path.display()
                    ),
                ));
            }
            if t.shape != t0.shape {
                return Err(mismatch(
                    &t0.name,
                    format!(
                        "shape {:?} differs from {:?} in {}",
                        t.shape,
                        t0.shape,
                        first.path.display()
                    ),
                ));
            }
            if t.dtype != t0.dtype {
                return Err(mismatch(
                    &t0.name,
                    format!(
                        "dtype {} differs from {} in {}",
                        t.dtype.name(),
                        t0.dtype.name(),
                        first.path.display()
                    ),
                ));
            }
            aligned.push(t);
        }
        if let Some(extra) = by_name.keys().min() {
            return Err(mismatch(
                extra,
                format!(
                    "not present in {} (every set of a step holds the same tensors: one of the \
                     two has one too many, or the other one too few)",
                    first.path.display()
                ),
            ));
        }
        f.tensors = aligned;
    }
    Ok(files)
}

fn order(fortran: bool) -> &'static str {
    if fortran {
        "Fortran (column-major)"
    } else {
        "C (row-major)"
    }
}
