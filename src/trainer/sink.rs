//! Where the trainer's records go: a protocol file (flushed per line) or a stats server.

use super::{StatsServer, TrainerError};
use crate::stats::record::step::StepStats;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

/// A destination for protocol v1 records.
pub trait RecordSink {
    /// Write one record as one line.
    fn write_record(&mut self, record: &StepStats) -> Result<(), TrainerError>;
}

/// One protocol line (JSON, no trailing newline) for `record`.
pub fn protocol_line(record: &StepStats) -> String {
    // Serialising a plain struct of numbers, strings and maps cannot fail.
    serde_json::to_string(record).unwrap_or_default()
}

/// Appends records to a file, one `write` per complete line, so a follower never sees a
/// half-written line unless the OS splits the write.
pub struct FileSink {
    file: File,
    path: PathBuf,
}

impl FileSink {
    /// Create `path` (a new file or a FIFO; an existing regular file only with `force`, then
    /// truncated; a device or directory never).
    pub fn create(path: &Path, force: bool) -> Result<Self, TrainerError> {
        let file = crate::fsutil::create_stream_output(path, force).map_err(|source| {
            TrainerError::Io {
                context: format!("cannot write {}", path.display()),
                source,
            }
        })?;
        Ok(Self {
            file,
            path: path.to_owned(),
        })
    }
}

impl RecordSink for FileSink {
    fn write_record(&mut self, record: &StepStats) -> Result<(), TrainerError> {
        let mut line = protocol_line(record);
        line.push('\n');
        self.file
            .write_all(line.as_bytes())
            .and_then(|()| self.file.flush())
            .map_err(|source| TrainerError::Io {
                context: format!("cannot write to {}", self.path.display()),
                source,
            })
    }
}

impl RecordSink for StatsServer {
    fn write_record(&mut self, record: &StepStats) -> Result<(), TrainerError> {
        self.publish(&protocol_line(record));
        Ok(())
    }
}
