//! Optional log of frame render times, for measuring the explorer (e.g. the live view under
//! load): with `COPUS_FRAME_LOG=PATH` set, each drawn frame appends one line to PATH, the
//! microseconds spent in `draw` (view and terminal output). Off when unset.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::time::Duration;

/// The environment variable naming the log file.
pub const ENV: &str = "COPUS_FRAME_LOG";

/// Where frame times go, if anywhere.
pub struct FrameLog(Option<BufWriter<File>>);

impl FrameLog {
    /// Open the file named by [`ENV`] (created or truncated); off when unset or unwritable.
    pub fn from_env() -> Self {
        let file = std::env::var_os(ENV).and_then(|p| File::create(p).ok());
        Self(file.map(BufWriter::new))
    }

    /// Record one frame's render time.
    pub fn record(&mut self, took: Duration) {
        if let Some(w) = self.0.as_mut() {
            let _ = writeln!(w, "{}", took.as_micros());
        }
    }
}

impl Drop for FrameLog {
    fn drop(&mut self) {
        if let Some(w) = self.0.as_mut() {
            let _ = w.flush();
        }
    }
}
