//! Connection configuration: side, credits, inline thresholds, limits.

use std::sync::Arc;
use std::time::Duration;

use rpcrdma_proto::binding::{BindingLookup, NoBindings};
use rpcrdma_proto::marshal::ChunkLimits;
use rpcrdma_proto::wire::DecodeLimits;

/// Which end of the connection this engine is (RFC 8166 §2.2.2, RFC 8167
/// §2.2): the active side connects and is the forward-direction Requester;
/// the passive side accepts and is the forward-direction Responder.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    /// The RPC client: connects, and reconnects after a loss.
    Active,
    /// The RPC server: accepts; it can never reconnect to its client
    /// (RFC 8167 §5.4).
    Passive,
}

/// The inline thresholds of one connection, named by the direction of the
/// Send rather than by RPC role (RFC 8166 §3.3.2, RFC 8797 §3.1), so that a
/// reverse-direction Call, which travels from the passive side, is held to
/// the passive side's send limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Thresholds {
    /// Largest Send this side may post.
    pub send: u32,
    /// Largest message this side can receive in one Receive.
    pub recv: u32,
}

impl Default for Thresholds {
    /// 1024 bytes each way (RFC 8166 §3.3.3).
    fn default() -> Self {
        Thresholds {
            send: 1024,
            recv: 1024,
        }
    }
}

impl Thresholds {
    /// The Requester's view used by `rpcrdma_proto::marshal::plan_call`
    /// (call = this side's send, reply = this side's receive).
    pub fn as_requester(&self) -> rpcrdma_proto::marshal::Thresholds {
        rpcrdma_proto::marshal::Thresholds {
            call_inline: self.send,
            reply_inline: self.recv,
        }
    }
}

/// Configuration of one [`Connection`](crate::Connection).
#[derive(Clone)]
pub struct Config {
    /// Active (client) or passive (server).
    pub side: Side,
    /// Forward-direction credits: what the active side requests in every
    /// call, and the most the passive side grants (RFC 8166 §3.3.1). At
    /// least 1.
    pub credits: u32,
    /// Reverse-direction credits: what the passive side requests in every
    /// reverse-direction call, and the most the active side grants. Counted
    /// apart from the forward credits (RFC 8167 §4.1). At least 1.
    pub backward_credits: u32,
    /// Receives kept posted beyond the credits (see
    /// [`Connection::recv_target`](crate::Connection::recv_target)).
    pub recv_margin: u32,
    /// The inline thresholds of the first connection.
    pub thresholds: Thresholds,
    /// Limits on the chunks this side builds.
    pub chunk_limits: ChunkLimits,
    /// Limits on what a peer's header may make this side decode.
    pub decode_limits: DecodeLimits,
    /// Timeout of a call that does not name one.
    pub call_timeout: Duration,
    /// DDP-eligibility of received calls' arguments (RFC 8166 §6).
    pub bindings: Arc<dyn BindingLookup + Send + Sync>,
    /// The XID of the first call; later calls count up from it.
    pub first_xid: u32,
}

impl Config {
    /// Defaults for `side`: 32 forward credits (as Linux grants), 8
    /// reverse-direction credits, a margin of 4 receives, 1024-byte
    /// thresholds, 30 s call timeout, no bindings.
    pub fn new(side: Side) -> Config {
        Config {
            side,
            credits: 32,
            backward_credits: 8,
            recv_margin: 4,
            thresholds: Thresholds::default(),
            chunk_limits: ChunkLimits::default(),
            decode_limits: DecodeLimits::default(),
            call_timeout: Duration::from_secs(30),
            bindings: Arc::new(NoBindings),
            first_xid: 1,
        }
    }
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("side", &self.side)
            .field("credits", &self.credits)
            .field("backward_credits", &self.backward_credits)
            .field("recv_margin", &self.recv_margin)
            .field("thresholds", &self.thresholds)
            .field("call_timeout", &self.call_timeout)
            .field("first_xid", &self.first_xid)
            .finish_non_exhaustive()
    }
}
