//! Software iWARP RNIC in userspace: MPA (RFC 5044, RFC 6581), DDP (RFC 5041) and
//! RDMAP (RFC 5040) over TCP, implementing the `rdma-verbs` provider interface.
//!
//! * [`device`]: [`Device`] implements [`rdma_verbs::Device`]; a tokio driver
//!   runs one reader and one writer task per connection.
//! * [`engine`]: the sans-IO per-QP engine (receive half with direct
//!   placement, transmit half with segmentation), testable without sockets.
//! * [`handshake`]: the MPA Request/Reply exchange, sans-IO.
//! * [`mem`]: STag table and protection checks.
//! * [`wire`], [`crc`], [`capture`]: wire formats, CRC32c, pcap capture.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod capture;
pub mod cq;
pub mod crc;
pub mod device;
pub mod engine;
pub mod handshake;
pub mod mem;
pub mod wire;

pub use cq::Cq;
pub use device::{Config, ConnRequest, Device, Listener, Mr, Pd, Qp};
pub use handshake::MpaConfig;
