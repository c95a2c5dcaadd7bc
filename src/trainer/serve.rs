//! A protocol v1 stats server: one listener, any number of clients. Each new client first
//! receives every line published so far (so a watcher attaching late sees the whole run),
//! then each new line as it is published. A client that stops reading is dropped after a
//! write timeout; the trainer never waits on a slow watcher for longer than that.

use super::TrainerError;
use crate::source::live::{is_loopback, parse_tcp_address};
use std::io::{ErrorKind, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

/// How long one write to a client may block before that client is dropped.
const CLIENT_WRITE_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Default)]
struct Shared {
    history: Vec<u8>,
    clients: Vec<TcpStream>,
}

/// A running stats server. Dropping it stops accepting and closes every connection.
pub struct StatsServer {
    addr: SocketAddr,
    shared: Arc<Mutex<Shared>>,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
}

impl StatsServer {
    /// Listen on `HOST:PORT` (after `tcp://`; an empty HOST is 127.0.0.1, port 0 picks a
    /// free port). Binding to a non-loopback address is allowed but is the caller's choice.
    pub fn bind(address: &str) -> Result<Self, TrainerError> {
        let addr = parse_tcp_address(address.strip_prefix("tcp://").unwrap_or(address))
            .map_err(|e| TrainerError::Config(e.to_string()))?;
        let io = |context: String| move |source| TrainerError::Io { context, source };
        let listener = TcpListener::bind(&addr).map_err(io(format!("cannot listen on {addr}")))?;
        listener
            .set_nonblocking(true)
            .map_err(io(format!("cannot configure {addr}")))?;
        let local = listener
            .local_addr()
            .map_err(io(format!("cannot read the address of {addr}")))?;
        let shared = Arc::new(Mutex::new(Shared::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (s2, stop2) = (Arc::clone(&shared), Arc::clone(&stop));
        let accept = std::thread::Builder::new()
            .name("copus-stats-server".into())
            .spawn(move || accept_loop(&listener, &s2, &stop2))
            .map_err(io("cannot start the server thread".into()))?;
        Ok(Self {
            addr: local,
            shared,
            stop,
            accept: Some(accept),
        })
    }

    /// The bound address (with the real port when 0 was asked).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Whether the server only listens on a loopback address.
    pub fn is_loopback(&self) -> bool {
        is_loopback(&self.addr.to_string())
    }

    /// Number of connected clients.
    pub fn clients(&self) -> usize {
        lock(&self.shared).clients.len()
    }

    /// Send one protocol line (without newline) to every client and keep it for later ones.
    pub fn publish(&self, line: &str) {
        let mut s = lock(&self.shared);
        let start = s.history.len();
        s.history.extend_from_slice(line.as_bytes());
        s.history.push(b'\n');
        let Shared { history, clients } = &mut *s;
        let bytes = &history[start..];
        clients.retain_mut(|c| c.write_all(bytes).is_ok());
    }
}

impl Drop for StatsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(j) = self.accept.take() {
            let _ = j.join();
        }
        for c in lock(&self.shared).clients.drain(..) {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
    }
}

fn lock(m: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    // A panic while holding the lock leaves plain bytes and sockets: still usable.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn accept_loop(listener: &TcpListener, shared: &Mutex<Shared>, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((mut stream, _)) => {
                let ok = stream.set_nonblocking(false).is_ok()
                    && stream.set_write_timeout(Some(CLIENT_WRITE_TIMEOUT)).is_ok()
                    && stream.set_nodelay(true).is_ok();
                let mut s = lock(shared);
                if ok && stream.write_all(&s.history).is_ok() {
                    s.clients.push(stream);
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}
