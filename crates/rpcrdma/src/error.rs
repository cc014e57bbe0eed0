//! Typed transport errors.

use rdma_verbs::VerbsError;

/// An RPC-over-RDMA transport failure. Calls fail with
/// [`oncrpc::RpcError::Transport`] wrapping this type (downcast to inspect),
/// except for timeouts ([`oncrpc::RpcError::Timeout`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransportError {
    /// The responder answered RDMA_ERROR / ERR_VERS (RFC 8166 §4.5.1).
    #[error("responder answered ERR_VERS (supports versions {low}..={high})")]
    ErrVers {
        /// Lowest supported version.
        low: u32,
        /// Highest supported version.
        high: u32,
    },
    /// The responder answered RDMA_ERROR / ERR_CHUNK (RFC 8166 §4.5.2, §4.5.3).
    #[error("responder answered ERR_CHUNK")]
    ErrChunk,
    /// The call cannot be conveyed (marshal plan failed: too many segments,
    /// header too large, …).
    #[error("call cannot be conveyed: {0}")]
    Plan(String),
    /// The reply's chunks do not match what the call offered, or its
    /// DDP-eligible results cannot be located.
    #[error("malformed reply: {0}")]
    BadReply(String),
    /// A verbs operation failed.
    #[error("verbs error: {0}")]
    Verbs(#[from] VerbsError),
    /// The connection was lost and could not be re-established within the
    /// reconnect policy.
    #[error("reconnect failed after {attempts} attempts: {last}")]
    ReconnectFailed {
        /// Attempts made.
        attempts: u32,
        /// The last error.
        last: String,
    },
    /// The connection was lost and the call cannot be retried (the client
    /// is shutting down).
    #[error("connection lost")]
    ConnectionLost,
    /// The client was closed.
    #[error("client closed")]
    Closed,
    /// A buffer is larger than the configured registration limit.
    #[error("buffer of {len} bytes exceeds the registration limit {max}")]
    TooLarge {
        /// Requested length.
        len: usize,
        /// Limit.
        max: usize,
    },
}

impl TransportError {
    /// Wraps into [`oncrpc::RpcError::Transport`].
    pub fn into_rpc(self) -> oncrpc::RpcError {
        oncrpc::RpcError::Transport(Box::new(self))
    }

    /// The transport error inside an [`oncrpc::RpcError`], if any.
    pub fn from_rpc(e: &oncrpc::RpcError) -> Option<&TransportError> {
        match e {
            oncrpc::RpcError::Transport(b) => b.downcast_ref::<TransportError>(),
            _ => None,
        }
    }
}
