//! What `copus watch` follows: a stats file or `tcp://HOST:PORT`, loopback by default.

use super::LiveError;
use std::fmt;
use std::path::PathBuf;

/// Host used when a `tcp://` address names none (`tcp://:7000`): loopback, so nothing is
/// exposed to the network unless the user asks for it.
pub const DEFAULT_HOST: &str = "127.0.0.1";

/// A live source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A growing protocol file (may not exist yet).
    File(PathBuf),
    /// A stats server, as `host:port` ready for `ToSocketAddrs`.
    Tcp(String),
}

impl Target {
    /// `tcp://HOST:PORT` (HOST may be empty for loopback, a name, an IPv4 or `[IPv6]`
    /// address), `-` for standard input (`/dev/stdin`, where the OS has one), or anything
    /// else as a file path (an optional `file://` prefix is stripped).
    pub fn parse(s: &str) -> Result<Self, LiveError> {
        if let Some(rest) = s.strip_prefix("tcp://") {
            return parse_tcp_address(rest).map(Target::Tcp);
        }
        if s == "-" && cfg!(unix) {
            return Ok(Target::File(PathBuf::from("/dev/stdin")));
        }
        let path = s.strip_prefix("file://").unwrap_or(s);
        crate::source::reject_url_scheme(path)?;
        if path.is_empty() {
            return Err(LiveError::Target {
                target: s.to_owned(),
                reason: "empty path".into(),
            });
        }
        if std::path::Path::new(path).is_dir() {
            return Err(LiveError::Target {
                target: s.to_owned(),
                reason: "is a directory; give the stats file that the run writes (e.g. DIR/stats.ndjson)".into(),
            });
        }
        Ok(Target::File(PathBuf::from(path)))
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::File(p) => write!(f, "{}", p.display()),
            Target::Tcp(a) => write!(f, "tcp://{a}"),
        }
    }
}

/// Normalise `HOST:PORT` (without the `tcp://` scheme) to a `host:port` string, filling in
/// [`DEFAULT_HOST`] when HOST is empty. Used both to connect and to bind a server.
pub fn parse_tcp_address(rest: &str) -> Result<String, LiveError> {
    let bad = |reason: &str| LiveError::Target {
        target: format!("tcp://{rest}"),
        reason: reason.to_owned(),
    };
    // Another scheme (`http://:7000`) was read as an IPv6 host ("write IPv6 addresses in
    // brackets").
    if let Some((scheme, _)) = rest.split_once("://") {
        return Err(LiveError::Target {
            target: rest.to_owned(),
            reason: format!(
                "'{scheme}://' is not a scheme copus speaks: the stream is plain TCP, \
                 tcp://HOST:PORT or HOST:PORT"
            ),
        });
    }
    let (host, port) = rest
        .rsplit_once(':')
        .ok_or_else(|| bad("expected tcp://HOST:PORT (HOST may be empty for 127.0.0.1)"))?;
    let port: u16 = port
        .parse()
        .map_err(|_| bad("the port must be a number from 0 to 65535"))?;
    let host = if host.is_empty() { DEFAULT_HOST } else { host };
    if host.contains(':') && !(host.starts_with('[') && host.ends_with(']')) {
        return Err(bad(
            "write IPv6 addresses in brackets, e.g. tcp://[::1]:7000",
        ));
    }
    if host.contains('/') {
        return Err(bad("a host name cannot contain '/'"));
    }
    Ok(format!("{host}:{port}"))
}

/// Whether a `host:port` string names a loopback address (for warnings when it does not).
pub fn is_loopback(addr: &str) -> bool {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A URL of another scheme is named as such, not as an IPv6 address without brackets.
    #[test]
    fn another_scheme_is_named_as_a_scheme() {
        let e = parse_tcp_address("http://:7000")
            .expect_err("http")
            .to_string();
        assert!(e.contains("'http://' is not a scheme copus speaks"), "{e}");
        assert!(!e.contains("IPv6"), "{e}");
        assert!(!e.contains("tcp://http"), "{e}");
    }

    #[test]
    fn tcp_targets_default_to_loopback() {
        assert_eq!(
            Target::parse("tcp://:7000").expect("valid"),
            Target::Tcp("127.0.0.1:7000".into())
        );
        assert_eq!(
            Target::parse("tcp://[::1]:80").expect("valid"),
            Target::Tcp("[::1]:80".into())
        );
        assert!(is_loopback("127.0.0.1:7000") && is_loopback("[::1]:1"));
        assert!(!is_loopback("10.0.0.2:7000"));
    }

    #[test]
    fn bad_tcp_targets_are_errors_and_paths_are_files() {
        for bad in [
            "tcp://7000",
            "tcp://host:port",
            "tcp://::1:80",
            "tcp://h:70000",
        ] {
            assert!(Target::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(
            Target::parse("runs/stats.ndjson").expect("path"),
            Target::File("runs/stats.ndjson".into())
        );
    }
}
