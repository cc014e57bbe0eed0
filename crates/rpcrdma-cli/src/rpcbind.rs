//! A small rpcbind client (RFC 1833, RPCBPROG 100000 version 4): register
//! and unregister a program's addresses with the local rpcbind, so
//! `rpcinfo` and clients that look servers up find them.
//!
//! Only SET (1) and UNSET (2) are implemented, over ONC RPC over TCP. The
//! argument of both is the `rpcb` structure (RFC 1833 §2.1):
//!
//! ```text
//! struct rpcb { unsigned long r_prog; unsigned long r_vers;
//!               string r_netid<>; string r_addr<>; string r_owner<>; };
//! ```
//!
//! and both return a `bool`. Addresses are RFC 5665 universal addresses
//! (`h1.h2.h3.h4.p1.p2` for IPv4), and netids are the RFC 5665 ones:
//! `tcp`/`tcp6` and `rdma`/`rdma6`.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use anyhow::Context;
use oncrpc::{Channel, Payload, Request};
use oncrpc_tcp::{ClientConfig, TcpChannel};
use xdr::XdrRead;

/// The rpcbind program number.
pub const RPCBPROG: u32 = 100_000;
/// The rpcbind protocol version used (RFC 1833 version 4).
pub const RPCBVERS4: u32 = 4;
/// RPCBPROC_SET: register a mapping.
pub const RPCBPROC_SET: u32 = 1;
/// RPCBPROC_UNSET: remove a mapping.
pub const RPCBPROC_UNSET: u32 = 2;
/// RPCBPROC_GETADDR: look up a mapping's universal address.
pub const RPCBPROC_GETADDR: u32 = 3;
/// The port rpcbind listens on (RFC 1833).
pub const RPCBIND_PORT: u16 = 111;
/// Where the local rpcbind listens.
pub const LOCAL_RPCBIND: &str = "127.0.0.1:111";

/// An `rpcb` mapping (RFC 1833 §2.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    /// Program number.
    pub prog: u32,
    /// Program version.
    pub vers: u32,
    /// Network id (RFC 5665): `tcp`, `tcp6`, `rdma`, `rdma6`.
    pub netid: String,
    /// Universal address (RFC 5665 §5.2.3).
    pub uaddr: String,
    /// Owner (libtirpc sends the effective uid; rpcbind records the
    /// caller's own view of it).
    pub owner: String,
}

impl Mapping {
    /// The mapping of `prog`/`vers` served over `transport` ("tcp" or
    /// "rdma") at `addr`; the netid gets a `6` for IPv6 addresses.
    pub fn new(prog: u32, vers: u32, transport: &str, addr: SocketAddr) -> Self {
        let netid = match addr.ip() {
            IpAddr::V4(_) => transport.to_string(),
            IpAddr::V6(_) => format!("{transport}6"),
        };
        Mapping {
            prog,
            vers,
            netid,
            uaddr: universal_address(addr),
            owner: rustix::process::geteuid().as_raw().to_string(),
        }
    }

    fn encode(&self) -> Payload {
        let mut b = Payload::builder();
        b.u32(self.prog)
            .u32(self.vers)
            .string(&self.netid)
            .string(&self.uaddr)
            .string(&self.owner);
        b.finish()
    }
}

/// The RFC 5665 universal address of `addr`: the host's usual text form,
/// then the port's high and low octets in decimal (`127.0.0.1.78.81` for
/// port 20049).
pub fn universal_address(addr: SocketAddr) -> String {
    let port = addr.port();
    format!("{}.{}.{}", addr.ip(), port >> 8, port & 0xff)
}

/// The port of an RFC 5665 universal address (`h1.h2.h3.h4.p1.p2` or an
/// IPv6 form with the same two port octets at the end).
pub fn port_of_universal_address(uaddr: &str) -> Option<u16> {
    let mut parts = uaddr.rsplitn(3, '.');
    let lo: u8 = parts.next()?.parse().ok()?;
    let hi: u8 = parts.next()?.parse().ok()?;
    parts.next()?;
    Some(u16::from(hi) << 8 | u16::from(lo))
}

/// A connection to an rpcbind server.
#[derive(Debug)]
pub struct Rpcbind {
    channel: TcpChannel,
    server: String,
}

impl Rpcbind {
    /// Connects to the rpcbind at `server` (usually [`LOCAL_RPCBIND`]).
    pub async fn connect(server: &str) -> anyhow::Result<Self> {
        let config = ClientConfig {
            connect_timeout: Duration::from_secs(3),
            default_timeout: Some(Duration::from_secs(5)),
            ..ClientConfig::default()
        };
        let channel = TcpChannel::connect_with(server, config)
            .await
            .with_context(|| format!("cannot reach rpcbind at {server} (is rpcbind running?)"))?;
        Ok(Rpcbind {
            channel,
            server: server.to_string(),
        })
    }

    /// RPCBPROC_SET; `Ok(false)` when rpcbind refused (e.g. the program,
    /// version and netid are registered already).
    pub async fn set(&self, m: &Mapping) -> anyhow::Result<bool> {
        self.call(RPCBPROC_SET, m).await
    }

    /// RPCBPROC_UNSET (all addresses of `m`'s program, version and netid).
    pub async fn unset(&self, m: &Mapping) -> anyhow::Result<bool> {
        self.call(RPCBPROC_UNSET, m).await
    }

    /// RPCBPROC_GETADDR: the universal address registered for `prog`,
    /// `vers` and `netid`, or `None` when there is none (RFC 1833 §2.2.1:
    /// an empty string).
    pub async fn getaddr(
        &self,
        prog: u32,
        vers: u32,
        netid: &str,
    ) -> anyhow::Result<Option<String>> {
        let mut b = Payload::builder();
        b.u32(prog).u32(vers).string(netid).string("").string("");
        let res = self
            .channel
            .call(Request::new(
                RPCBPROG,
                RPCBVERS4,
                RPCBPROC_GETADDR,
                b.finish(),
            ))
            .await
            .with_context(|| format!("rpcbind GETADDR at {} failed", self.server))?;
        let mut d = res.decoder();
        let addr = d
            .opaque(1024)
            .and_then(|a| d.finish().map(|()| a))
            .context("malformed rpcbind GETADDR reply")?;
        if addr.is_empty() {
            return Ok(None);
        }
        Ok(Some(String::from_utf8_lossy(&addr).into_owned()))
    }

    async fn call(&self, procedure: u32, m: &Mapping) -> anyhow::Result<bool> {
        let what = if procedure == RPCBPROC_SET {
            "SET"
        } else {
            "UNSET"
        };
        let res = self
            .channel
            .call(Request::new(RPCBPROG, RPCBVERS4, procedure, m.encode()))
            .await
            .with_context(|| format!("rpcbind {what} at {} failed", self.server))?;
        let mut d = res.decoder();
        let ok = d
            .bool()
            .and_then(|ok| d.finish().map(|()| ok))
            .with_context(|| format!("malformed rpcbind {what} reply"))?;
        Ok(ok)
    }
}

/// How long [`Registered::register`] may take in all (connecting, and an
/// UNSET and a SET per mapping, each of which may wait 5 s for its
/// answer).
pub const REGISTER_LIMIT: Duration = Duration::from_secs(10);

/// How long [`Registered::unregister`] may take in all (connecting and
/// every UNSET): a hung rpcbind must not hold up a shutdown.
pub const UNREGISTER_LIMIT: Duration = Duration::from_secs(2);

/// Mappings registered with an rpcbind; [`unregister`](Self::unregister)
/// removes exactly these again.
///
/// rpcbind holds one address per (program, version, netid) (RFC 1833 §2.2:
/// SET fails for a registered triple, UNSET removes the triple), so of
/// several mappings with one triple only the first is registered; the
/// others are reported by [`skipped`](Self::skipped).
#[derive(Debug)]
pub struct Registered {
    server: String,
    mappings: Vec<Mapping>,
    skipped: Vec<Mapping>,
}

impl Registered {
    /// Registers the first mapping of each (program, version, netid) with
    /// the rpcbind at `server`; the later ones of a triple are kept in
    /// [`skipped`](Self::skipped), never sent. A stale mapping of a
    /// triple (e.g. left by a killed server) is removed before its SET, as
    /// servers conventionally do; a triple is never UNSET after this call
    /// SET it. The whole registration (connect included) is bounded by
    /// [`REGISTER_LIMIT`]. If it fails (a SET refused, rpcbind unreachable,
    /// a connection lost, the limit reached), every mapping whose SET was
    /// sent is removed again (within [`UNREGISTER_LIMIT`]), so no mapping
    /// is left pointing at a server that is not running, and the error is
    /// returned.
    pub async fn register(server: &str, mappings: Vec<Mapping>) -> anyhow::Result<Self> {
        Self::register_within(server, mappings, REGISTER_LIMIT).await
    }

    /// [`register`](Self::register) with the whole registration bounded by
    /// `limit`.
    pub async fn register_within(
        server: &str,
        mappings: Vec<Mapping>,
        limit: Duration,
    ) -> anyhow::Result<Self> {
        let (first, skipped) = first_of_each_triple(mappings);
        // The mappings whose SET was sent: registered, or (after a lost
        // answer) possibly registered.
        let mut sent = Vec::new();
        let outcome = match tokio::time::timeout(limit, set_all(server, first, &mut sent)).await {
            Ok(outcome) => outcome,
            Err(_) => Err(anyhow::anyhow!(
                "rpcbind at {server} did not answer within {limit:?}"
            )),
        };
        let mut done = Registered {
            server: server.to_string(),
            mappings: sent,
            skipped,
        };
        if let Err(e) = outcome {
            if let Err(undo) = done.unregister(UNREGISTER_LIMIT).await {
                tracing::warn!(error = %undo, "cannot remove the mappings registered so far");
            }
            return Err(e);
        }
        Ok(done)
    }

    /// The registered mappings.
    pub fn mappings(&self) -> &[Mapping] {
        &self.mappings
    }

    /// The mappings not registered because an earlier one had the same
    /// program, version and netid.
    pub fn skipped(&self) -> &[Mapping] {
        &self.skipped
    }

    /// Removes every registered mapping, over a new connection (rpcbind may
    /// have closed an idle one), with the UNSETs sent concurrently and the
    /// whole of it (connect included) bounded by `limit`. The mappings are
    /// forgotten either way: a second call does nothing.
    pub async fn unregister(&mut self, limit: Duration) -> anyhow::Result<()> {
        let mappings = std::mem::take(&mut self.mappings);
        if mappings.is_empty() {
            return Ok(());
        }
        let count = mappings.len();
        let server = self.server.clone();
        match tokio::time::timeout(limit, unset_all(server, mappings)).await {
            Ok(result) => result,
            Err(_) => anyhow::bail!(
                "rpcbind at {} did not answer within {limit:?}; {count} mapping(s) may remain",
                self.server
            ),
        }
    }
}

/// Splits `mappings` into the first of each (program, version, netid),
/// in order, and the rest.
fn first_of_each_triple(mappings: Vec<Mapping>) -> (Vec<Mapping>, Vec<Mapping>) {
    let mut first: Vec<Mapping> = Vec::new();
    let mut rest = Vec::new();
    for m in mappings {
        let taken = first
            .iter()
            .any(|f| f.prog == m.prog && f.vers == m.vers && f.netid == m.netid);
        if taken {
            rest.push(m);
        } else {
            first.push(m);
        }
    }
    (first, rest)
}

/// For each mapping in turn: UNSET a stale registration of its triple, then
/// SET it. Each mapping is added to `sent` before its SET goes out and taken
/// off again only if rpcbind refused it, so after an error `sent` holds
/// every mapping that may be registered.
async fn set_all(
    server: &str,
    mappings: Vec<Mapping>,
    sent: &mut Vec<Mapping>,
) -> anyhow::Result<()> {
    let rpcbind = Rpcbind::connect(server).await?;
    for m in mappings {
        if rpcbind.unset(&m).await? {
            tracing::info!(netid = %m.netid, "removed a stale rpcbind mapping");
        }
        sent.push(m.clone());
        if !rpcbind.set(&m).await? {
            sent.pop();
            anyhow::bail!(
                "rpcbind refused to register program {} version {} netid {} at {}",
                m.prog,
                m.vers,
                m.netid,
                m.uaddr
            );
        }
    }
    Ok(())
}

/// UNSETs every mapping at `server`, all calls in flight at once; the first
/// error is returned after every answer has come.
async fn unset_all(server: String, mappings: Vec<Mapping>) -> anyhow::Result<()> {
    let rpcbind = std::sync::Arc::new(Rpcbind::connect(&server).await?);
    let mut calls = tokio::task::JoinSet::new();
    for m in mappings {
        let rpcbind = rpcbind.clone();
        calls.spawn(async move {
            match rpcbind.unset(&m).await {
                Ok(true) => Ok(()),
                Ok(false) => {
                    tracing::warn!(netid = %m.netid, "rpcbind had no such mapping");
                    Ok(())
                }
                Err(e) => Err(e),
            }
        });
    }
    let mut first_error = None;
    while let Some(joined) = calls.join_next().await {
        if let Err(e) = joined.map_err(anyhow::Error::from).and_then(|r| r) {
            first_error.get_or_insert(e);
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An rpcbind that accepts connections and never answers: the
    /// registration fails after the limit, not after 5 s per call.
    #[tokio::test]
    async fn registration_is_bounded_in_all() {
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let server = silent.local_addr().unwrap().to_string();
        let keep = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((s, _)) = silent.accept().await {
                held.push(s);
            }
        });
        let mappings = vec![Mapping::new(
            0x2000_0123,
            1,
            "tcp",
            "127.0.0.1:9".parse().unwrap(),
        )];
        let t0 = std::time::Instant::now();
        let err = Registered::register_within(&server, mappings, Duration::from_millis(300))
            .await
            .unwrap_err();
        let took = t0.elapsed();
        assert!(err.to_string().contains("did not answer within"), "{err:#}");
        // 0.3 s, then at most UNREGISTER_LIMIT for the undo.
        assert!(
            took < Duration::from_millis(300) + UNREGISTER_LIMIT + Duration::from_millis(500),
            "{took:?}"
        );
        keep.abort();
    }

    #[test]
    fn universal_addresses() {
        assert_eq!(
            universal_address("127.0.0.1:20049".parse().unwrap()),
            "127.0.0.1.78.81"
        );
        assert_eq!(
            universal_address("0.0.0.0:111".parse().unwrap()),
            "0.0.0.0.0.111"
        );
        assert_eq!(universal_address("[::1]:2049".parse().unwrap()), "::1.8.1");
    }

    #[test]
    fn netids_follow_the_address_family() {
        let m = Mapping::new(1, 2, "rdma", "10.0.0.1:1".parse().unwrap());
        assert_eq!(m.netid, "rdma");
        let m = Mapping::new(1, 2, "tcp", "[::1]:1".parse().unwrap());
        assert_eq!(m.netid, "tcp6");
    }

    #[test]
    fn one_mapping_per_program_version_and_netid() {
        let m = |vers, transport, port| {
            Mapping::new(7, vers, transport, SocketAddr::from(([127, 0, 0, 1], port)))
        };
        let v6 = Mapping::new(7, 1, "rdma", "[::1]:5".parse().unwrap());
        let (first, rest) = first_of_each_triple(vec![
            m(1, "rdma", 1),
            m(1, "rdma", 2),
            m(1, "tcp", 3),
            m(2, "rdma", 4),
            v6.clone(),
            m(1, "tcp", 6),
        ]);
        assert_eq!(
            first,
            [m(1, "rdma", 1), m(1, "tcp", 3), m(2, "rdma", 4), v6]
        );
        assert_eq!(rest, [m(1, "rdma", 2), m(1, "tcp", 6)]);
    }

    #[test]
    fn rpcb_encoding() {
        let m = Mapping {
            prog: 0x2000_5244,
            vers: 1,
            netid: "rdma".into(),
            uaddr: "1.2.3.4.0.1".into(),
            owner: "0".into(),
        };
        let bytes = m.encode().flatten();
        let mut want = Vec::new();
        want.extend_from_slice(&0x2000_5244u32.to_be_bytes());
        want.extend_from_slice(&1u32.to_be_bytes());
        want.extend_from_slice(&4u32.to_be_bytes());
        want.extend_from_slice(b"rdma");
        want.extend_from_slice(&11u32.to_be_bytes());
        want.extend_from_slice(b"1.2.3.4.0.1\0");
        want.extend_from_slice(&1u32.to_be_bytes());
        want.extend_from_slice(b"0\0\0\0");
        assert_eq!(&bytes[..], &want[..]);
    }
}
