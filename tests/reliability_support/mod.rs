//! Running the real binary as a user would, under the limits of the reliability issue: the
//! command must end within 10 s, under 2 GB of address space, with an exit status in 1–100
//! (or 0 where a correct result is expected), and never with a panic or a signal.
#![allow(dead_code)]

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What a run produced.
#[derive(Debug)]
pub struct Run {
    /// Exit status (None: killed by a signal).
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

/// Most seconds a case may take.
pub const LIMIT: Duration = Duration::from_secs(10);

/// Run `copus ARGS` with a 2 GB address-space limit, in `dir`, with extra environment.
pub fn copus_in(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    let bin = env!("CARGO_BIN_EXE_copus");
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg("ulimit -v 2097152; exec \"$0\" \"$@\"")
        .arg(bin)
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let start = Instant::now();
    let mut child = cmd.spawn().expect("spawn copus");
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let t_out = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = out.read_to_end(&mut s);
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err.read_to_end(&mut s);
        s
    });
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break st;
        }
        if start.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("copus {args:?} ran past {LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let elapsed = start.elapsed();
    let stdout = String::from_utf8_lossy(&t_out.join().expect("stdout thread")).into_owned();
    let stderr = String::from_utf8_lossy(&t_err.join().expect("stderr thread")).into_owned();
    Run {
        code: status.code(),
        stdout,
        stderr,
        elapsed,
    }
}

/// Run `copus ARGS` in the crate root.
pub fn copus(args: &[&str]) -> Run {
    copus_in(Path::new(env!("CARGO_MANIFEST_DIR")), args, &[])
}

impl Run {
    /// The run failed cleanly: status 1–100, no panic, and stderr holds every one of `needles`.
    pub fn fails_with(&self, needles: &[&str]) -> &Self {
        let code = self
            .code
            .unwrap_or_else(|| panic!("killed by a signal: {self:?}"));
        assert!((1..=100).contains(&code), "exit status {code}: {self:?}");
        assert!(!self.stderr.contains("panicked"), "panic: {}", self.stderr);
        for n in needles {
            assert!(
                self.stderr.contains(n),
                "stderr lacks {n:?}:\n{}",
                self.stderr
            );
        }
        self
    }

    /// The run succeeded without a panic.
    pub fn succeeds(&self) -> &Self {
        assert_eq!(self.code, Some(0), "{self:?}");
        assert!(!self.stderr.contains("panicked"), "panic: {}", self.stderr);
        self
    }
}

/// Write a minimal .npy (version 1) with a header of `descr` and `shape` and `data` after it.
pub fn write_npy_raw(path: &Path, descr: &str, shape: &str, data: &[u8]) {
    let mut h = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    while (10 + h.len() + 1) % 64 != 0 {
        h.push(' ');
    }
    h.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(h.len() as u16).to_le_bytes());
    bytes.extend_from_slice(h.as_bytes());
    bytes.extend_from_slice(data);
    std::fs::write(path, bytes).expect("write npy");
}

/// The bundled demo session's text with `from` replaced by `to` (must occur).
pub fn demo_with(from: &str, to: &str) -> String {
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("sessions/demo.ron"))
            .expect("demo session");
    assert!(text.contains(from), "demo lacks {from:?}");
    text.replacen(from, to, 1)
}

/// The JSON a successful `copus ARGS` prints on stdout (run as [`copus`] runs it).
pub fn copus_json(args: &[&str]) -> serde_json::Value {
    let run = copus(args);
    run.succeeds();
    serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}: {}", run.stdout))
}
