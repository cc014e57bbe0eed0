//! Connection-manager types: parameters, results and events.

use bytes::Bytes;
use std::net::SocketAddr;

/// Largest private data a consumer may pass. iWARP (MPA) allows 512 bytes in
/// total, of which RFC 6581 takes 4 for IRD/ORD; InfiniBand CM allows less
/// (56 bytes for a REQ on IB). Providers report their own limit with
/// [`Device::max_private_data`](crate::Device::max_private_data).
pub const MAX_PRIVATE_DATA_IWARP: usize = 508;

/// Parameters of `connect` / `accept` (the `rdma_conn_param` subset).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConnParam {
    /// Private data sent with the request / reply.
    pub private_data: Bytes,
    /// Outbound RDMA Reads this side wants to have outstanding (ORD,
    /// `initiator_depth`).
    pub initiator_depth: u16,
    /// Inbound RDMA Reads this side accepts outstanding (IRD,
    /// `responder_resources`).
    pub responder_resources: u16,
}

impl ConnParam {
    /// Parameters with private data and the given ORD/IRD.
    pub fn new(
        private_data: impl Into<Bytes>,
        initiator_depth: u16,
        responder_resources: u16,
    ) -> Self {
        ConnParam {
            private_data: private_data.into(),
            initiator_depth,
            responder_resources,
        }
    }
}

/// What a successful connect/accept established.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnInfo {
    /// Our address.
    pub local_addr: SocketAddr,
    /// The peer's address.
    pub peer_addr: SocketAddr,
    /// The peer's private data (from the reply on the active side, from the
    /// request on the passive side).
    pub private_data: Bytes,
    /// Negotiated ORD: RDMA Reads we may have outstanding.
    pub initiator_depth: u16,
    /// Negotiated IRD: RDMA Reads the peer may have outstanding at us.
    pub responder_resources: u16,
}

/// Lifecycle state of a queue pair (a simplification of `ibv_qp_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QpState {
    /// Created; receives may be posted, sends are refused until connected.
    Init,
    /// Connection being established.
    Connecting,
    /// Ready to send and receive.
    Connected,
    /// Disconnected cleanly (all outstanding work flushed).
    Disconnected,
    /// Failed; outstanding work flushed with [`WcStatus::WrFlushError`](crate::WcStatus::WrFlushError).
    Error,
}

/// A provider-specific description of why a connection failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnError {
    /// True if the peer reported the error (e.g. an iWARP Terminate it sent),
    /// false if this side detected it.
    pub remote: bool,
    /// Protocol-level code, if the transport has one (for iWARP: the 32-bit
    /// Terminate control word `layer<<28 | etype<<24 | code<<16`).
    pub code: Option<u32>,
    /// Human-readable description.
    pub description: String,
}

impl core::fmt::Display for ConnError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let side = if self.remote { "remote" } else { "local" };
        match self.code {
            Some(c) => write!(f, "{side} error {c:#010x}: {}", self.description),
            None => write!(f, "{side} error: {}", self.description),
        }
    }
}

/// Asynchronous connection events of an established queue pair
/// (`RDMA_CM_EVENT_DISCONNECTED`, error events).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CmEvent {
    /// The connection closed in an orderly way (either side disconnected).
    Disconnected,
    /// The connection failed; the QP is in [`QpState::Error`].
    ConnectionError(ConnError),
}
