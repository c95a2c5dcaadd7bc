//! Optional log of frame render times, for measuring the explorer (e.g. the live view under
//! load): with `COPUS_FRAME_LOG=PATH` set, each drawn frame appends one line to PATH: the
//! microseconds spent in `draw` (view and terminal output), wall-clock then CPU time of the
//! drawing thread (the second is what the frame costs, whatever else runs on the machine).
//! Off when unset.

use std::fs::File;
use std::io::Write;
use std::time::Duration;

/// The environment variable naming the log file.
pub const ENV: &str = "COPUS_FRAME_LOG";

/// Where frame times go, if anywhere.
pub struct FrameLog(Option<File>);

impl FrameLog {
    /// Open the file named by [`ENV`] (created or truncated); off when unset or unwritable.
    /// Lines are written unbuffered, so the log survives the explorer being killed.
    pub fn from_env() -> Self {
        Self(std::env::var_os(ENV).and_then(|p| File::create(p).ok()))
    }

    /// Whether frames are logged.
    pub fn is_on(&self) -> bool {
        self.0.is_some()
    }

    /// Record one frame: its wall-clock render time and the thread CPU time it used.
    pub fn record(&mut self, wall: Duration, cpu: Duration) {
        if let Some(w) = self.0.as_mut() {
            let _ = writeln!(w, "{} {}", wall.as_micros(), cpu.as_micros());
        }
    }
}

/// CPU time used so far by the calling thread (zero where the OS does not say).
pub fn thread_cpu() -> Duration {
    #[cfg(unix)]
    {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        if rc == 0 {
            return Duration::new(
                u64::try_from(ts.tv_sec).unwrap_or(0),
                u32::try_from(ts.tv_nsec).unwrap_or(0),
            );
        }
    }
    Duration::ZERO
}
