//! File-system helpers shared by everything that writes user data.

use std::io::Write;
use std::path::{Path, PathBuf};

/// Where a write to a user's path lands, decided before anything is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteTarget {
    /// Nothing is at the path: a new file is created there.
    New(PathBuf),
    /// A regular file (the path itself, or the real file a symlink points to) that the
    /// write replaces atomically; the symlink, if any, is kept.
    Existing(PathBuf),
}

impl WriteTarget {
    /// The file that is written (a symlink's real file, never the link).
    pub fn file(&self) -> &Path {
        match self {
            WriteTarget::New(p) | WriteTarget::Existing(p) => p,
        }
    }
}

/// Decide where writing `path` lands. A regular file is replaced, a symlink is written
/// through to the regular file it names (the link is kept), and anything else (a FIFO, a
/// device, a socket, a directory, a dangling link) is refused: copus never replaces what is
/// not a regular file.
pub fn write_target(path: &Path) -> std::io::Result<WriteTarget> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(WriteTarget::New(path.to_owned()));
        }
        Err(e) => return Err(e),
    };
    if meta.file_type().is_symlink() {
        let real = std::fs::canonicalize(path).map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("is a symlink whose target cannot be reached ({e}); not replaced"),
            )
        })?;
        let real_meta = std::fs::metadata(&real)?;
        if !real_meta.is_file() {
            return Err(not_regular(&real_meta.file_type()));
        }
        return Ok(WriteTarget::Existing(real));
    }
    if !meta.is_file() {
        return Err(not_regular(&meta.file_type()));
    }
    Ok(WriteTarget::Existing(path.to_owned()))
}

fn not_regular(ft: &std::fs::FileType) -> std::io::Error {
    let what = if ft.is_dir() {
        "a directory"
    } else if is_fifo(ft) {
        "a FIFO"
    } else {
        "not a regular file (a device or socket)"
    };
    std::io::Error::other(format!(
        "is {what}; copus writes only regular files and does not replace it"
    ))
}

/// Whether `ft` is a named pipe (always false where the OS has none).
#[cfg(unix)]
pub fn is_fifo(ft: &std::fs::FileType) -> bool {
    std::os::unix::fs::FileTypeExt::is_fifo(ft)
}

/// Whether `ft` is a named pipe (always false where the OS has none).
#[cfg(not(unix))]
pub fn is_fifo(_: &std::fs::FileType) -> bool {
    false
}

/// Whether `path` names an anonymous pipe (a shell's `|`, reached as `/dev/stdin` or
/// `/proc/self/fd/N`): a link that resolves to `pipe:[…]`. Unlike a named pipe, whose writer
/// may open it again, its end is the end of the stream. False where the OS has no such links.
pub fn is_anonymous_pipe(path: &Path) -> bool {
    let mut at = path.to_path_buf();
    // /dev/stdin → /proc/self/fd/0 → pipe:[…]: a few links at most.
    for _ in 0..8 {
        let Ok(target) = std::fs::read_link(&at) else {
            return false;
        };
        if target.to_string_lossy().starts_with("pipe:[") {
            return true;
        }
        at = match at.parent() {
            Some(dir) if target.is_relative() => dir.join(target),
            _ => target,
        };
    }
    false
}

/// Whether `a` and `b` name the same file: the same device and inode where both exist (on
/// Unix; through symlinks and hard links), else the same absolute path once the existing
/// directories are resolved (two outputs not yet created).
pub fn same_file(a: &Path, b: &Path) -> bool {
    #[cfg(unix)]
    if let (Ok(x), Ok(y)) = (std::fs::metadata(a), std::fs::metadata(b)) {
        use std::os::unix::fs::MetadataExt;
        return x.dev() == y.dev() && x.ino() == y.ino();
    }
    match (resolved_path(a), resolved_path(b)) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

/// Most symlinks followed to a file that does not exist yet.
const MAX_LINK_HOPS: usize = 40;

/// `path` made absolute with its symlinks resolved: the whole path where it exists; else,
/// following a dangling symlink to where it points (a link to an output not yet written is
/// that output), its directory with the file name appended.
fn resolved_path(path: &Path) -> Option<std::path::PathBuf> {
    let mut p = path.to_path_buf();
    for _ in 0..MAX_LINK_HOPS {
        if let Ok(real) = std::fs::canonicalize(&p) {
            return Some(real);
        }
        let Ok(target) = std::fs::read_link(&p) else {
            break;
        };
        p = match p.parent() {
            Some(dir) if target.is_relative() => dir.join(target),
            _ => target,
        };
    }
    let name = p.file_name()?;
    let dir = match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::canonicalize(dir).ok().map(|d| d.join(name))
}

/// Refuse to write `out` (given as `out_flag`) when it is one of `others` (a flag or role and
/// its path: the command's inputs or its other outputs): writing would truncate what is read
/// or interleave two streams, `--force` or not.
pub fn check_distinct(out_flag: &str, out: &Path, others: &[(&str, &Path)]) -> std::io::Result<()> {
    match others.iter().find(|(_, p)| same_file(out, p)) {
        Some((role, _)) => Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "{out_flag} {} is also {role}: writing it would destroy what copus reads or \
                 mix two outputs in one file (--force does not change that); choose another path",
                out.display()
            ),
        )),
        None => Ok(()),
    }
}

/// Refuse to write over an existing file unless `force` is set: the check every command
/// with an output path makes before it computes anything (errors name the path).
pub fn check_output(path: &Path, force: bool) -> std::io::Result<WriteTarget> {
    let target = write_target(path)?;
    if let WriteTarget::Existing(real) = &target
        && !force
    {
        let via = if real != path {
            format!(" (a symlink to {})", real.display())
        } else {
            String::new()
        };
        return Err(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            format!("exists{via}; pass --force to replace it"),
        ));
    }
    Ok(target)
}

/// How long a writer waits for a process to open a FIFO's other end for reading.
pub const FIFO_READER_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Open the FIFO `path` for writing once a reader has opened it, waiting at most `wait`: a
/// plain open blocks until a reader comes, for ever if none does (and neither a timeout nor
/// anything else of the command's runs meanwhile). The file returned blocks on writes as a
/// pipe does.
#[cfg(unix)]
pub fn open_fifo_for_writing(
    path: &Path,
    wait: std::time::Duration,
) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::io::AsRawFd;
    let deadline = std::time::Instant::now() + wait;
    loop {
        match std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
        {
            Ok(f) => {
                // SAFETY: `f` is an open descriptor this function owns; F_GETFL/F_SETFL only
                // change its status flags.
                unsafe {
                    let flags = libc::fcntl(f.as_raw_fd(), libc::F_GETFL);
                    if flags < 0
                        || libc::fcntl(f.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK) < 0
                    {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                return Ok(f);
            }
            // ENXIO: no process has the FIFO open for reading yet.
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {
                if std::time::Instant::now() >= deadline {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!(
                            "a FIFO no process reads (waited {} s for a reader): start the \
                             reader first",
                            wait.as_secs()
                        ),
                    ));
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            Err(e) => return Err(e),
        }
    }
}

/// Open the FIFO `path` for writing (no FIFOs here: a plain open).
#[cfg(not(unix))]
pub fn open_fifo_for_writing(
    path: &Path,
    _wait: std::time::Duration,
) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new().write(true).open(path)
}

/// Whether [`create_stream_output`] would open `path` (a FIFO, a new file, or an existing
/// regular file with `force`), without creating anything: a command writing two files checks
/// both before it creates either (`branch --out F --run-out EXISTING` left an empty `F`).
pub fn check_stream_output(path: &Path, force: bool) -> std::io::Result<()> {
    if let Ok(meta) = std::fs::metadata(path)
        && is_fifo(&meta.file_type())
    {
        return Ok(());
    }
    check_output(path, force).map(|_| ())
}

/// Open `path` for a stream of records written as they come: a new file, a FIFO (a reader
/// at its other end) or, with `force`, an existing regular file (truncated; through a
/// symlink to it). A device, directory or socket is refused, and so is an existing file
/// without `force`.
pub fn create_stream_output(path: &Path, force: bool) -> std::io::Result<std::fs::File> {
    if let Ok(meta) = std::fs::metadata(path)
        && is_fifo(&meta.file_type())
    {
        return open_fifo_for_writing(path, FIFO_READER_WAIT);
    }
    let target = check_output(path, force)?;
    std::fs::File::create(target.file())
}

/// A fingerprint of a file's contents (64-bit SipHash with fixed keys: the same bytes give the
/// same value within one build), to tell whether a file still holds what was read or written.
pub fn content_hash(bytes: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

/// Whether `path` holds other contents than those of fingerprint `hash` ([`content_hash`]); a
/// file that is gone or cannot be read counts as unchanged (writing it loses nothing).
pub fn changed_since(path: &Path, hash: u64) -> bool {
    std::fs::read(path).is_ok_and(|bytes| content_hash(&bytes) != hash)
}

/// Write `bytes` to `path` atomically: a temporary file in the same directory as the file
/// written is created (never reusing a name), synced and renamed over it, so a crash leaves
/// either the old or the new file. What `path` may be is decided by [`write_target`]: a
/// symlink is written through (the link is kept), a FIFO, device or directory is refused.
/// An existing file's permissions are kept.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let target = write_target(path)?;
    let file = target.file();
    let dir = match file.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = file
        .file_name()
        .ok_or_else(|| std::io::Error::other("path has no file name"))?;
    let permissions = match &target {
        WriteTarget::Existing(p) => Some(std::fs::metadata(p)?.permissions()),
        WriteTarget::New(_) => None,
    };
    let (tmp, mut handle) = create_temporary(dir, &name.to_string_lossy())?;
    let result = (|| {
        handle.write_all(bytes)?;
        if let Some(perm) = permissions {
            handle.set_permissions(perm)?;
        }
        handle.sync_all()?;
        drop(handle);
        std::fs::rename(&tmp, file)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// A new temporary file beside `name` in `dir`, created exclusively (a name that exists,
/// even a link planted there, is never opened).
fn create_temporary(dir: &Path, name: &str) -> std::io::Result<(PathBuf, std::fs::File)> {
    let pid = std::process::id();
    for attempt in 0..64u32 {
        let tmp = dir.join(format!(".{name}.{pid}.{attempt}.tmp"));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
        {
            Ok(f) => return Ok((tmp, f)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other(
        "cannot create a temporary file beside it (64 names taken)",
    ))
}

/// Read a regular file of at most `max` bytes as UTF-8 (a FIFO, a device such as
/// `/dev/zero` or an oversized file is an error, not a hang or an allocation). A leading
/// UTF-8 byte-order mark is dropped.
pub fn read_capped(path: &Path, max: u64) -> std::io::Result<String> {
    let meta = std::fs::metadata(path)?;
    if !meta.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    text_capped(std::fs::File::open(path)?, max)
}

/// [`read_capped`] of a regular file or a pipe (standard input through `/dev/stdin`): a pipe
/// is read to its end, within `max` bytes, like a file ([`open_readable_stream`]).
pub fn read_stream_capped(path: &Path, max: u64) -> std::io::Result<String> {
    text_capped(open_readable_stream(path)?, max)
}

/// At most `max` bytes of `reader` as UTF-8 text, a leading byte-order mark dropped.
fn text_capped(reader: impl std::io::Read, max: u64) -> std::io::Result<String> {
    use std::io::Read;
    let mut bytes = Vec::new();
    reader.take(max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(std::io::Error::other(format!("larger than {max} bytes")));
    }
    let text = String::from_utf8(bytes).map_err(|e| {
        // Where, as a line and column a reader can go to (the byte index alone was given).
        let at = e.utf8_error().valid_up_to();
        let good = &e.as_bytes()[..at];
        let line = good.iter().filter(|b| **b == b'\n').count() + 1;
        let start = good.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        let col = String::from_utf8_lossy(&good[start..]).chars().count() + 1;
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("line {line}, column {col}: not valid UTF-8 text (byte {at})"),
        )
    })?;
    Ok(match text.strip_prefix('\u{feff}') {
        Some(rest) => rest.to_owned(),
        None => text,
    })
}

/// Check that `path` is something a stream of records can be read from to its end: a regular
/// file or a pipe. A device (`/dev/zero`, a terminal), a socket or a directory is an error,
/// so that a reader neither hangs nor runs forever.
pub fn check_readable_stream(path: &Path) -> std::io::Result<()> {
    let ft = std::fs::metadata(path)?.file_type();
    let pipe = is_fifo(&ft);
    if ft.is_file() || pipe {
        Ok(())
    } else if ft.is_dir() {
        Err(std::io::Error::other("is a directory, not a file"))
    } else {
        // Said of any input read to its end (branch records read "as a stats file").
        Err(std::io::Error::other(
            "not a regular file or a pipe (a device or socket has no end to read to)",
        ))
    }
}

/// How long a reader that runs to the end of its input (`analyze`, `open`) waits for the first
/// byte of a named pipe before it gives up: a FIFO nobody writes to would block for ever.
pub const FIFO_FIRST_DATA_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The compression format of a regular file, read from its first bytes (`gzip`, `zstd`,
/// `bzip2`, `xz`), or `None` (not compressed, not a regular file, or unreadable: the caller's
/// open reports that).
pub fn compression_of(path: &Path) -> Option<&'static str> {
    use std::io::Read;
    if !std::fs::metadata(path).ok()?.is_file() {
        return None;
    }
    let mut head = [0u8; 6];
    let mut f = std::fs::File::open(path).ok()?;
    let n = f.read(&mut head).ok()?;
    let head = &head[..n];
    [
        (&[0x1f, 0x8b][..], "gzip"),
        (&[0x28, 0xb5, 0x2f, 0xfd][..], "zstd"),
        (&b"BZh"[..], "bzip2"),
        (&[0xfd, b'7', b'z', b'X', b'Z', 0x00][..], "xz"),
    ]
    .into_iter()
    .find(|(magic, _)| head.starts_with(magic))
    .map(|(_, name)| name)
}

/// Open a stats stream that is read to its end: a regular file, or a pipe that delivers its
/// first byte within [`FIFO_FIRST_DATA_WAIT`] (a pipe without a writer, or whose writer
/// stays silent, is an error after that wait, not a hang). The check of
/// [`check_readable_stream`] comes first.
pub fn open_readable_stream(path: &Path) -> std::io::Result<std::fs::File> {
    check_readable_stream(path)?;
    let ft = std::fs::metadata(path)?.file_type();
    if !is_fifo(&ft) {
        return std::fs::File::open(path);
    }
    open_fifo_bounded(path, FIFO_FIRST_DATA_WAIT)
}

/// Open a FIFO without blocking on its writer, wait up to `wait` for data (or the end of a
/// writer that came and went), then hand it back in blocking mode.
#[cfg(unix)]
fn open_fifo_bounded(path: &Path, wait: std::time::Duration) -> std::io::Result<std::fs::File> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let fd = file.as_raw_fd();
    let deadline = std::time::Instant::now() + wait;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(std::io::Error::other(format!(
                "a named pipe that gave no data within {} s (no writer?); copus watch follows a \
                 live stream",
                wait.as_secs()
            )));
        }
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = i32::try_from(left.as_millis().min(200))
            .unwrap_or(200)
            .max(1);
        // SAFETY: one valid pollfd, owned by this frame, for the duration of the call.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n > 0 && pfd.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0 {
            break;
        }
    }
    // SAFETY: fcntl on a descriptor this function owns; only the O_NONBLOCK bit changes.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(file)
}

/// Where the OS has no FIFOs, a plain open.
#[cfg(not(unix))]
fn open_fifo_bounded(path: &Path, _: std::time::Duration) -> std::io::Result<std::fs::File> {
    std::fs::File::open(path)
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::OpenOptionsExt;

    fn fifo(dir: &Path) -> std::path::PathBuf {
        let path = dir.join("pipe");
        let c = std::ffi::CString::new(path.to_str().expect("utf-8")).expect("no NUL");
        // SAFETY: `c` is a valid NUL-terminated path for the duration of the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
        path
    }

    #[test]
    fn a_fifo_without_a_reader_is_an_error_after_the_wait_not_a_hang() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = fifo(dir.path());
        let started = std::time::Instant::now();
        let e = open_fifo_for_writing(&path, std::time::Duration::from_millis(200))
            .expect_err("no reader");
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
        assert!(e.to_string().contains("start the reader first"), "{e}");
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        // With a reader at the other end it opens, and writes reach the reader.
        let mut reader = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&path)
            .expect("reader");
        let mut w = open_fifo_for_writing(&path, std::time::Duration::from_millis(200))
            .expect("a reader is there");
        std::io::Write::write_all(&mut w, b"line\n").expect("write");
        let mut got = String::new();
        std::io::Read::read_to_string(&mut reader, &mut got).ok();
        assert_eq!(got, "line\n");
    }
}
