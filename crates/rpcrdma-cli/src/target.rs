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

#[cfg(test)]
mod tests {
    use super::*;

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
