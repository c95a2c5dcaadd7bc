//! Following a stats server over TCP: connect, read lines, reconnect with exponential backoff
//! when the connection drops or cannot be made.
//!
//! Servers (the built-in trainer, the Python hook) replay their history to each new client.
//! After a reconnect, records already delivered with the same values are that replay and are
//! dropped as duplicates (see `dedupe.rs`; an out-of-order step no longer lets the rest of
//! the replay through, and a restarted producer is detected); the partial line cut by a drop
//! is discarded. Malformed lines are counted as received (a replay counts its
//! garbage again).

use super::LinkState;
use super::RecordError;
use super::{Admit, Emitter, FollowOptions, LineIngest};
use crate::stats::record::step::StepStats;
use std::io::{ErrorKind, Read};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

/// Follow the server at `addr` (`host:port`) until `em` says to stop.
pub(super) fn follow_tcp<P, E>(addr: &str, parser: P, opts: &FollowOptions, em: &mut Emitter)
where
    P: Fn(&str) -> Result<StepStats, E> + Sync,
    E: RecordError,
{
    let mut conn = TcpConnection::new(parser);
    let mut buf = vec![0u8; 64 * 1024];
    let mut backoff = opts.backoff_min;
    let mut failing_since_report = false;
    while !em.should_stop() {
        let stream = match connect(addr, opts.connect_timeout) {
            Ok(s) => s,
            Err(reason) => {
                if !failing_since_report {
                    em.status(
    LinkState::Waiting,
    format!(
                        "cannot connect to tcp://{addr} ({reason}); retrying with backoff up to {} ms",
                        opts.backoff_max.as_millis()
                    ),
);
                    failing_since_report = true;
                }
                em.sleep(backoff);
                backoff = (backoff * 2).min(opts.backoff_max);
                continue;
            }
        };
        failing_since_report = false;
        backoff = opts.backoff_min;
        conn.connected(addr, em);
        let why = read_connection(stream, opts.poll, &mut buf, em, |bytes, em| {
            conn.received(bytes, em)
        });
        if em.should_stop() {
            return;
        }
        conn.lost(addr, &why, em);
        em.sleep(backoff);
    }
}

/// The byte-level state of a TCP follower across its connections, without the socket: line
/// framing, the exactly-once filter (through the [`Emitter`]), the count of replayed records
/// and the line cut by a dropped connection. [`follow_tcp`] drives it from a socket;
/// [`super::follow_tcp_chunks`] drives it from byte chunks in memory (fuzzing, tests).
pub(super) struct TcpConnection<P> {
    ingest: LineIngest<P>,
    /// Records of the current connection dropped as already delivered (the server's replay).
    replayed: u64,
    /// Whether the replay count of the current connection was reported.
    said: bool,
}

impl<P, E> TcpConnection<P>
where
    P: Fn(&str) -> Result<StepStats, E> + Sync,
    E: RecordError,
{
    /// No connection yet; each complete line is parsed with `parser`.
    pub(super) fn new(parser: P) -> Self {
        Self {
            ingest: LineIngest::new(parser),
            replayed: 0,
            said: false,
        }
    }

    /// A connection to `addr` was made.
    pub(super) fn connected(&mut self, addr: &str, em: &mut Emitter) {
        em.status(LinkState::Flowing, format!("connected to tcp://{addr}"));
        // Replayed history comes back as duplicates of what was delivered (see dedupe.rs).
        self.replayed = 0;
        self.said = false;
    }

    /// The connection delivered `bytes`.
    pub(super) fn received(&mut self, bytes: &[u8], em: &mut Emitter) {
        let (replayed, said) = (&mut self.replayed, &mut self.said);
        self.ingest.feed(bytes, &mut |ev| match em.deliver(ev) {
            Some(Admit::Duplicate) => *replayed += 1,
            Some(_) if *replayed > 0 && !*said => {
                em.status(
                    LinkState::Flowing,
                    format!("skipped {replayed} replayed records already received"),
                );
                *said = true;
            }
            _ => {}
        });
    }

    /// The connection ended (`why`): report the replay and the cut line, start a new stream.
    pub(super) fn lost(&mut self, addr: &str, why: &str, em: &mut Emitter) {
        if self.replayed > 0 && !self.said {
            em.status(
                LinkState::Flowing,
                format!(
                    "skipped {} replayed records already received",
                    self.replayed
                ),
            );
        }
        let pending = self.ingest.reset();
        let cut = if pending > 0 {
            format!("; dropped an incomplete line ({pending} bytes)")
        } else {
            String::new()
        };
        em.status(
            LinkState::Waiting,
            format!("connection to tcp://{addr} lost ({why}){cut}; reconnecting"),
        );
    }
}

fn connect(addr: &str, timeout: Duration) -> Result<TcpStream, String> {
    let addrs: Vec<SocketAddr> = addr
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve: {e}"))?
        .collect();
    let mut last = String::from("no address");
    for a in addrs {
        match TcpStream::connect_timeout(&a, timeout) {
            Ok(s) => return Ok(s),
            Err(e) => last = e.to_string(),
        }
    }
    Err(last)
}

/// Read until the peer closes, an error occurs, or the follower is stopped; returns why.
fn read_connection(
    mut stream: TcpStream,
    poll: Duration,
    buf: &mut [u8],
    em: &mut Emitter,
    mut on_bytes: impl FnMut(&[u8], &mut Emitter),
) -> String {
    if let Err(e) = stream.set_read_timeout(Some(poll.max(Duration::from_millis(1)))) {
        return format!("cannot set a read timeout: {e}");
    }
    while !em.should_stop() {
        match stream.read(buf) {
            Ok(0) => return "closed by the server".into(),
            Ok(n) => {
                on_bytes(&buf[..n], em);
                em.flush();
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return e.to_string(),
        }
    }
    "stopped".into()
}
