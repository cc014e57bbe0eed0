//! Where a call goes: the transport is chosen by the URL scheme, here and
//! nowhere else.

use std::fmt;

/// A parsed server URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `tcp://HOST:PORT`: ONC RPC over TCP with record marking.
    Tcp {
        /// `HOST:PORT`, as given (resolved when connecting).
        addr: String,
    },
    /// `rdma://HOST:PORT`: RPC-over-RDMA (RFC 8166).
    Rdma {
        /// `HOST:PORT`, as given.
        addr: String,
    },
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Tcp { addr } => write!(f, "tcp://{addr}"),
            Target::Rdma { addr } => write!(f, "rdma://{addr}"),
        }
    }
}

/// Parses `SCHEME://HOST:PORT`. IPv6 hosts are written in brackets:
/// `tcp://[::1]:20049`.
pub fn parse_target(url: &str) -> Result<Target, String> {
    let (scheme, rest) = url.split_once("://").ok_or_else(|| {
        format!("invalid server URL {url:?}: expected rdma://HOST:PORT or tcp://HOST:PORT")
    })?;
    let addr = rest.trim_end_matches('/');
    let port_ok = addr
        .rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
    if !port_ok {
        return Err(format!(
            "invalid server URL {url:?}: expected {scheme}://HOST:PORT with a numeric port"
        ));
    }
    let addr = addr.to_string();
    match scheme.to_ascii_lowercase().as_str() {
        "tcp" => Ok(Target::Tcp { addr }),
        "rdma" => Ok(Target::Rdma { addr }),
        other => Err(format!(
            "unsupported URL scheme {other:?} in {url:?}: use rdma:// or tcp://"
        )),
    }
}

/// A parsed NFS URL: `rdma://HOST:PORT/EXPORT` or `tcp://HOST:PORT/EXPORT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NfsTarget {
    /// Where NFS calls go.
    pub target: Target,
    /// The host part, as given (without brackets for IPv6).
    pub host: String,
    /// The port of NFS on that host.
    pub port: u16,
    /// The export path to MOUNT, starting with `/` (`/` when the URL has
    /// no path).
    pub export: String,
}

impl fmt::Display for NfsTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.target, self.export)
    }
}

/// Parses `SCHEME://HOST:PORT/EXPORT` (EXPORT may be empty: `/`).
pub fn parse_nfs_target(url: &str) -> Result<NfsTarget, String> {
    let bad = || {
        format!(
            "invalid NFS URL {url:?}: expected rdma://HOST:PORT/EXPORT or tcp://HOST:PORT/EXPORT"
        )
    };
    let (scheme, rest) = url.split_once("://").ok_or_else(bad)?;
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let target = parse_target(&format!("{scheme}://{authority}"))?;
    let (host, port) = authority.rsplit_once(':').ok_or_else(bad)?;
    let port: u16 = port.parse().map_err(|_| bad())?;
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let mut export = path.trim_end_matches('/').to_string();
    if export.is_empty() {
        export.push('/');
    }
    Ok(NfsTarget {
        target,
        host,
        port,
        export,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nfs_urls() {
        let t = parse_nfs_target("rdma://127.0.0.1:20049/srv/data/").unwrap();
        assert_eq!(
            t.target,
            Target::Rdma {
                addr: "127.0.0.1:20049".into()
            }
        );
        assert_eq!((t.host.as_str(), t.port), ("127.0.0.1", 20049));
        assert_eq!(t.export, "/srv/data");
        assert_eq!(t.to_string(), "rdma://127.0.0.1:20049/srv/data");
        let t = parse_nfs_target("tcp://[::1]:2049").unwrap();
        assert_eq!((t.host.as_str(), t.export.as_str()), ("::1", "/"));
        assert!(parse_nfs_target("udp://h:1/x").is_err());
        assert!(parse_nfs_target("tcp://h/x").is_err());
        assert!(parse_nfs_target("h:1/x").is_err());
    }

    #[test]
    fn urls() {
        assert_eq!(
            parse_target("tcp://127.0.0.1:20049"),
            Ok(Target::Tcp {
                addr: "127.0.0.1:20049".into()
            })
        );
        assert_eq!(
            parse_target("TCP://localhost:1/"),
            Ok(Target::Tcp {
                addr: "localhost:1".into()
            })
        );
        assert_eq!(
            parse_target("tcp://[::1]:20049"),
            Ok(Target::Tcp {
                addr: "[::1]:20049".into()
            })
        );
        assert_eq!(
            parse_target("rdma://10.0.0.1:20049"),
            Ok(Target::Rdma {
                addr: "10.0.0.1:20049".into()
            })
        );
        assert!(parse_target("127.0.0.1:20049").is_err());
        assert!(parse_target("udp://127.0.0.1:1").is_err());
        assert!(parse_target("tcp://127.0.0.1").is_err());
        assert!(parse_target("tcp://:1").is_err());
        assert!(parse_target("tcp://h:99999").is_err());
    }
}
