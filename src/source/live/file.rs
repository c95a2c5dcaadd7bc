//! Following a growing protocol file, like `tail -F`: wait for it to appear, read appended
//! complete lines, restart from the beginning after a truncation, reopen after a rotation.
//!
//! Semantics (documented in docs/LIVE.md):
//! - **Truncation**: when the file's size drops below the bytes already read, it is read
//!   again from offset 0 and every line in it is ingested (a restarted writer); the partial
//!   line buffered before is dropped. A writer that truncates *and* writes past the old
//!   length between two polls looks like an append and cannot be told apart (as with
//!   `tail -F`).
//! - **Rotation** (the path now names another file, by device and inode on Unix): the old
//!   file is drained to its end first, then the new one is read from offset 0, so every line
//!   of both is ingested exactly once. On non-Unix systems rotation is not detected.
//! - Whatever is read again (a rewrite renamed over the file, a truncation followed by the
//!   same lines) passes the follower's exactly-once filter: records already delivered with
//!   the same values are dropped as duplicates, and a step delivered before with other
//!   values announces a restarted run (see `dedupe.rs`).
//! - **Removal**: the open file keeps being read; when a file reappears at the path it is
//!   treated as a rotation.

use super::LinkState;
use super::RecordError;
use super::{Emitter, FollowOptions, LineIngest};
use crate::stats::record::step::StepStats;
use std::fs::{File, Metadata};
use std::io::{ErrorKind, Read, Seek, SeekFrom};
use std::path::Path;

/// Identity of a file independent of its name (device, inode), where the OS offers one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileId(u64, u64);

#[cfg(unix)]
fn file_id(m: &Metadata) -> Option<FileId> {
    use std::os::unix::fs::MetadataExt;
    Some(FileId(m.dev(), m.ino()))
}

#[cfg(not(unix))]
fn file_id(_m: &Metadata) -> Option<FileId> {
    None
}

struct OpenFile {
    file: File,
    id: Option<FileId>,
    offset: u64,
    /// A named pipe: read as it comes, never truncated or rotated.
    pipe: bool,
    /// An anonymous pipe (`… | copus watch /dev/stdin`): its end is the end of the stream.
    ends: bool,
}

/// Open `path` for following. A FIFO is opened without blocking (a pipe with no writer yet
/// would otherwise block the open, and a stop or a timeout could never end the follower);
/// its reads then return "would block" while the writer is silent.
fn open_for_follow(path: &Path) -> std::io::Result<(File, bool)> {
    let pipe = std::fs::metadata(path).is_ok_and(|m| crate::fsutil::is_fifo(&m.file_type()));
    if !pipe {
        return File::open(path).map(|f| (f, false));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .map(|f| (f, true))
    }
    #[cfg(not(unix))]
    {
        File::open(path).map(|f| (f, true))
    }
}

/// Bytes read from the file at a time: a follower catching up with a long file gets a couple
/// of thousand lines a read, which [`LineIngest::feed`] parses in parallel.
const READ_CHUNK_BYTES: usize = 1 << 20;

/// Follow `path` until `em` says to stop. Runs on the follower thread.
pub(super) fn follow_file<P, E>(path: &Path, parser: P, opts: &FollowOptions, em: &mut Emitter)
where
    P: Fn(&str) -> Result<StepStats, E> + Sync,
    E: RecordError,
{
    let mut ingest = LineIngest::new(parser);
    let mut buf = vec![0u8; READ_CHUNK_BYTES];
    let mut open: Option<OpenFile> = None;
    let mut said_waiting = false;
    let mut said_removed = false;
    let mut said_read_error = false;
    let shown = path.display();
    while !em.should_stop() {
        let Some(of) = open.as_mut() else {
            match open_for_follow(path) {
                Ok((file, pipe)) => {
                    let id = file.metadata().ok().as_ref().and_then(file_id);
                    em.status(LinkState::Flowing, format!("following {shown}"));
                    open = Some(OpenFile {
                        file,
                        id,
                        offset: 0,
                        pipe,
                        ends: pipe && crate::fsutil::is_anonymous_pipe(path),
                    });
                    said_waiting = false;
                }
                Err(e) => {
                    if !said_waiting {
                        em.status(
                            LinkState::Waiting,
                            format!("waiting for {shown} to appear ({e})"),
                        );
                        said_waiting = true;
                    }
                    em.sleep(opts.poll);
                }
            }
            continue;
        };
        match of.file.read(&mut buf) {
            Ok(0) => {}
            Ok(n) => {
                of.offset += n as u64;
                ingest.feed(&buf[..n], &mut |ev| {
                    em.deliver(ev);
                });
                em.flush();
                continue;
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                // A pipe whose writer is silent: wait for the next poll.
                em.sleep(opts.poll);
                continue;
            }
            Err(e) => {
                // Keep the handle and position: reopening from the start would ingest
                // the file's lines twice. Retry at the next poll.
                if !said_read_error {
                    em.status(
                        LinkState::Waiting,
                        format!("reading {shown} failed ({e}); retrying"),
                    );
                    said_read_error = true;
                }
                em.sleep(opts.poll);
                continue;
            }
        }
        said_read_error = false;
        if of.ends {
            // Nobody can open an anonymous pipe again: the stream ended. A last line without
            // its newline is complete, as `analyze` reads it; then the follower stops.
            if ingest.pending_bytes() > 0 {
                ingest.feed(b"\n", &mut |ev| {
                    em.deliver(ev);
                });
            }
            em.status(
                LinkState::Quiet,
                format!("{shown} ended: its writer closed the pipe"),
            );
            em.flush();
            return;
        }
        if of.pipe {
            // The end of a pipe's data (no writer now): a writer may open it again.
            em.sleep(opts.poll);
            continue;
        }
        // At the end of what has been written so far: look for truncation and rotation.
        match std::fs::metadata(path) {
            Ok(meta) => {
                said_removed = false;
                let now = file_id(&meta);
                if now.is_some() && now != of.id {
                    drain(of, &mut ingest, &mut buf, em);
                    em.status(
                        LinkState::Flowing,
                        format!(
                            "{shown} was replaced (rotated): reading the new file from its start"
                        ),
                    );
                    drop_partial(&mut ingest, em, "the rotated-away file");
                    ingest.reset();
                    open = None;
                    continue;
                }
                if meta.len() < of.offset {
                    em.status(
    LinkState::Flowing,
    format!(
                        "{shown} was truncated ({} < {} bytes read): reading again from its start",
                        meta.len(),
                        of.offset
                    ),
);
                    drop_partial(&mut ingest, em, "the truncated file");
                    ingest.reset();
                    match of.file.seek(SeekFrom::Start(0)) {
                        Ok(_) => of.offset = 0,
                        Err(_) => open = None,
                    }
                    continue;
                }
            }
            Err(_) if !said_removed => {
                em.status(
                    LinkState::Waiting,
                    format!(
                        "{shown} was removed: still reading the open file, waiting for a new one"
                    ),
                );
                said_removed = true;
            }
            Err(_) => {}
        }
        em.sleep(opts.poll);
    }
}

/// Read what is left of a rotated-away file (written between our last read and the rename).
fn drain<P, E>(of: &mut OpenFile, ingest: &mut LineIngest<P>, buf: &mut [u8], em: &mut Emitter)
where
    P: Fn(&str) -> Result<StepStats, E> + Sync,
    E: RecordError,
{
    loop {
        match of.file.read(buf) {
            Ok(0) => return,
            Ok(n) => {
                of.offset += n as u64;
                ingest.feed(&buf[..n], &mut |ev| {
                    em.deliver(ev);
                });
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

fn drop_partial<P, E>(ingest: &mut LineIngest<P>, em: &mut Emitter, what: &str)
where
    P: Fn(&str) -> Result<StepStats, E> + Sync,
    E: RecordError,
{
    let pending = ingest.pending_bytes();
    if pending > 0 {
        em.status(
            LinkState::Flowing,
            format!("dropped an incomplete last line ({pending} bytes) of {what}"),
        );
    }
}
