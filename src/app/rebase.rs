//! A session saved into another directory than the one its relative paths are read from
//! (Save as): the data source's path is rewritten to lead to the same file from the new
//! place, and the files a session must keep beside itself (calibration, branch records) are
//! copied there. Pure path arithmetic: nothing here touches the disk.

use crate::session::{DataSource, Session};
use std::path::{Component, Path, PathBuf};

/// A file to copy beside the saved session: (from, to).
pub type FileCopy = (PathBuf, PathBuf);

/// `path` made absolute against `cwd` with `.` and `..` resolved lexically (symbolic links
/// are not followed: the same rule the session's own checks use on written paths).
pub fn lexical_absolute(path: &Path, cwd: &Path) -> PathBuf {
    let joined = if path.is_absolute() {
        path.to_path_buf()
    } else {
        cwd.join(path)
    };
    let mut out = PathBuf::new();
    for c in joined.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// The path that leads from directory `from` to `to` (both absolute and lexically clean).
pub fn relative_path(to: &Path, from: &Path) -> PathBuf {
    let (t, f): (Vec<_>, Vec<_>) = (to.components().collect(), from.components().collect());
    let common = t.iter().zip(&f).take_while(|(a, b)| a == b).count();
    let mut out = PathBuf::new();
    for _ in common..f.len() {
        out.push("..");
    }
    for c in &t[common..] {
        out.push(c);
    }
    if out.as_os_str().is_empty() {
        out.push(".");
    }
    out
}

/// Rewrite `session`'s relative paths, read from directory `old_dir`, for a session file
/// saved in `new_dir` (both absolute and clean); returns the files to copy beside it. A data
/// path leads to the same file from the new place; a calibration or branch-records file,
/// which must lie beside or below its session, is copied there under its file name. Paths in
/// `travelling` name files the save writes beside the session anyway (a lesson's run): they
/// stay as written.
pub fn rebase(
    session: &mut Session,
    (old_dir, new_dir): (&Path, &Path),
    travelling: &[&str],
) -> Vec<FileCopy> {
    if old_dir == new_dir {
        return Vec::new();
    }
    let moved = |p: &str| -> Option<String> {
        let written = Path::new(p);
        (!written.is_absolute() && !travelling.contains(&p)).then(|| {
            let target = lexical_absolute(written, old_dir);
            relative_path(&target, new_dir)
                .to_string_lossy()
                .into_owned()
        })
    };
    match &mut session.source {
        DataSource::Stats { path, .. } | DataSource::Dumps { path, .. } => {
            if let Some(p) = moved(path) {
                *path = p;
            }
        }
        DataSource::Live { target, .. } if !target.contains("://") => {
            if let Some(p) = moved(target) {
                *target = p;
            }
        }
        _ => {}
    }
    let mut copies = Vec::new();
    for field in [&mut session.calibration, &mut session.branches] {
        let Some(rel) = field.as_deref() else {
            continue;
        };
        if travelling.contains(&rel) {
            continue;
        }
        let written = Path::new(rel);
        let Some(name) = written.file_name() else {
            continue;
        };
        let from = lexical_absolute(written, old_dir);
        let to = new_dir.join(name);
        *field = Some(name.to_string_lossy().into_owned());
        copies.push((from, to));
    }
    copies
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_between_directories() {
        let p = |s: &str| PathBuf::from(s);
        assert_eq!(
            relative_path(&p("/a/b/c.ndjson"), &p("/a/x")),
            p("../b/c.ndjson")
        );
        assert_eq!(
            relative_path(&p("/a/b/c.ndjson"), &p("/a/b")),
            p("c.ndjson")
        );
        assert_eq!(relative_path(&p("/a"), &p("/a")), p("."));
        assert_eq!(
            lexical_absolute(&p("../data/./r.ndjson"), &p("/w/s")),
            p("/w/data/r.ndjson")
        );
    }
}
