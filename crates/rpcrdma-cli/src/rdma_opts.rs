//! Options of the RPC-over-RDMA transport shared by `serve`, `call`,
//! `bench` and `demo`: they map onto [`rpcrdma::RdmaConfig`] and the
//! software iWARP device ([`iwarp::Config`]).

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use rpcrdma::RdmaConfig;

use crate::size::parse_size_u32;

/// RPC-over-RDMA tuning (all optional; defaults are the transport's).
///
/// Every option is `global`, so under `call` it may also follow the
/// procedure and its arguments (`call URL get 1MiB --inline 1k`).
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct RdmaArgs {
    /// RDMA: inline threshold in bytes, both directions (RFC 8797 private
    /// data; multiples of 1024 from 1 KiB to 256 KiB). Messages larger than
    /// this move their data in chunks.
    #[arg(long, global = true, value_name = "SIZE", default_value = "4096", value_parser = parse_inline, allow_negative_numbers = true)]
    pub inline: u32,

    /// RDMA: credits (requester: asked for; responder: granted), i.e. calls
    /// in flight per connection.
    #[arg(long, global = true, value_name = "N", default_value = "128", value_parser = parse_credits, allow_negative_numbers = true)]
    pub credits: u32,

    /// RDMA: segments per chunk (each at most 1 MiB). The default, 32,
    /// lets a 16 MiB ECHO travel as a Long Call and Long Reply (the
    /// transport's own default is 16). Both sides must allow the segments
    /// the other sends.
    #[arg(long, global = true, value_name = "N", default_value = "32", value_parser = clap::value_parser!(u32).range(1..), allow_negative_numbers = true)]
    pub max_segments: u32,

    /// RDMA: do not advertise or use remote invalidation (RFC 8797 §6);
    /// the requester then invalidates its registrations itself.
    #[arg(long, global = true)]
    pub no_remote_invalidate: bool,

    /// RDMA: do not ask for the MPA CRC32c (RFC 5044 §7.1: CRCs are used
    /// when either end asks, so both ends must give this flag to go
    /// without). On by default; TCP's own checksum still protects the bytes.
    #[arg(long, global = true)]
    pub no_mpa_crc: bool,

    /// RDMA requester: offer a 4-byte segment for the XDR pad after each
    /// Write chunk whose result buffer (the largest result accepted) is not
    /// a multiple of 4 bytes, for servers that need one (the RFC 5666 implementation-experience draft §3.6;
    /// Linux's client does). Off by default, as RFC 8166 §3.4.6 asks; a
    /// server ignores it.
    #[arg(long, global = true)]
    pub write_pad: bool,

    /// RDMA: write this process's iWARP traffic (MPA, DDP, RDMAP with
    /// synthesized Ethernet/IP/TCP headers) to a pcap file, for Wireshark
    /// or tshark.
    #[arg(long, global = true, value_name = "FILE.pcap")]
    pub capture: Option<PathBuf>,
}

impl Default for RdmaArgs {
    fn default() -> Self {
        RdmaArgs {
            inline: 4096,
            credits: 128,
            max_segments: 32,
            no_remote_invalidate: false,
            no_mpa_crc: false,
            write_pad: false,
            capture: None,
        }
    }
}

/// `--inline`: a size that RFC 8797 private data can convey.
fn parse_inline(text: &str) -> Result<u32, String> {
    check_inline(parse_size_u32(text)?)
}

/// `--credits`: 1 ..= [`rpcrdma::MAX_CREDITS`].
fn parse_credits(text: &str) -> Result<u32, String> {
    let n = text
        .trim()
        .parse::<u32>()
        .map_err(|_| format!("expected 1 to {}", rpcrdma::MAX_CREDITS))?;
    check_credits(n)
}

/// An inline threshold RFC 8797 private data can convey.
fn check_inline(n: u32) -> Result<u32, String> {
    if !(1024..=256 * 1024).contains(&n) || !n.is_multiple_of(1024) {
        return Err(format!(
            "{n}: RFC 8797 conveys multiples of 1024 bytes from 1 KiB to 256 KiB"
        ));
    }
    Ok(n)
}

/// A credit count the transport accepts.
fn check_credits(n: u32) -> Result<u32, String> {
    if !(1..=rpcrdma::MAX_CREDITS).contains(&n) {
        return Err(format!("{n}: expected 1 to {}", rpcrdma::MAX_CREDITS));
    }
    Ok(n)
}

impl RdmaArgs {
    /// The transport configuration these options describe (the values are
    /// checked again here for callers that build `RdmaArgs` themselves).
    pub fn config(&self) -> anyhow::Result<RdmaConfig> {
        check_inline(self.inline).map_err(|e| anyhow::anyhow!("invalid --inline {e}"))?;
        check_credits(self.credits).map_err(|e| anyhow::anyhow!("invalid --credits {e}"))?;
        if self.max_segments == 0 {
            anyhow::bail!("invalid --max-segments 0");
        }
        Ok(RdmaConfig {
            credits: self.credits,
            max_segments: self.max_segments,
            remote_invalidation: !self.no_remote_invalidate,
            write_pad: self.write_pad,
            ..RdmaConfig::default().with_inline(self.inline)
        })
    }

    /// The RDMA options given with values other than their defaults, as
    /// they are spelled on the command line.
    pub fn given(&self) -> Vec<&'static str> {
        let d = RdmaArgs::default();
        let mut given = Vec::new();
        if self.inline != d.inline {
            given.push("--inline");
        }
        if self.credits != d.credits {
            given.push("--credits");
        }
        if self.max_segments != d.max_segments {
            given.push("--max-segments");
        }
        if self.no_remote_invalidate {
            given.push("--no-remote-invalidate");
        }
        if self.no_mpa_crc {
            given.push("--no-mpa-crc");
        }
        if self.write_pad {
            given.push("--write-pad");
        }
        if self.capture.is_some() {
            given.push("--capture");
        }
        given
    }

    /// Warns on stderr that the RDMA options given do nothing `where`
    /// (e.g. "for tcp:// URLs"). The run goes on.
    pub fn warn_if_given(&self, r#where: &str) {
        let given = self.given();
        if !given.is_empty() {
            eprintln!(
                "rpcrdma: warning: {} {} RDMA-only, ignored {where}{}",
                given.join(", "),
                if given.len() == 1 { "is" } else { "are" },
                if self.capture.is_some() {
                    " (no capture file is written)"
                } else {
                    ""
                }
            );
        }
    }

    /// A software iWARP device, capturing to `--capture` if given.
    pub fn device(&self) -> anyhow::Result<iwarp::Device> {
        self.device_with_handshake(None)
    }

    /// [`device`](Self::device), with the MPA handshake bounded by
    /// `handshake` instead of the provider's default (10 s) if given.
    pub fn device_with_handshake(
        &self,
        handshake: Option<std::time::Duration>,
    ) -> anyhow::Result<iwarp::Device> {
        let capture = match &self.capture {
            Some(path) => Some(
                iwarp::capture::Capture::create(path)
                    .with_context(|| format!("cannot create capture file {}", path.display()))?,
            ),
            None => None,
        };
        let defaults = iwarp::Config::default();
        Ok(iwarp::Device::new(iwarp::Config {
            capture,
            handshake_timeout: handshake.unwrap_or(defaults.handshake_timeout),
            mpa: iwarp::MpaConfig {
                crc: !self.no_mpa_crc,
                ..defaults.mpa
            },
            ..defaults
        }))
    }
}
