//! File-system helpers shared by everything that writes user data.

use std::io::Write;
use std::path::Path;

/// Write `bytes` to `path` atomically: a temporary file in the same directory is written,
/// synced and renamed over `path`, so a crash leaves either the old or the new file.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::other("path has no file name"))?;
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        name.to_string_lossy(),
        std::process::id()
    ));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Read a regular file of at most `max` bytes as UTF-8 (a FIFO, a device such as
/// `/dev/zero` or an oversized file is an error, not a hang or an allocation). A leading
/// UTF-8 byte-order mark is dropped.
pub fn read_capped(path: &Path, max: u64) -> std::io::Result<String> {
    use std::io::Read;
    let meta = std::fs::metadata(path)?;
    if !meta.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
        .take(max + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(std::io::Error::other(format!("larger than {max} bytes")));
    }
    let text = String::from_utf8(bytes)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
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
    #[cfg(unix)]
    let pipe = std::os::unix::fs::FileTypeExt::is_fifo(&ft);
    #[cfg(not(unix))]
    let pipe = false;
    if ft.is_file() || pipe {
        Ok(())
    } else if ft.is_dir() {
        Err(std::io::Error::other("is a directory, not a stats file"))
    } else {
        Err(std::io::Error::other(
            "not a regular file or a pipe (a device or socket cannot be read as a stats file)",
        ))
    }
}
