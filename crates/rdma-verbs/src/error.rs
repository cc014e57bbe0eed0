//! Errors returned synchronously by verbs calls and the connection manager.

use crate::buffer::MrBuffer;
use bytes::Bytes;

/// A verbs error.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum VerbsError {
    /// An argument is invalid (the message says which).
    #[error("invalid argument: {0}")]
    InvalidArgument(&'static str),
    /// The access rights cannot be granted on this buffer (e.g. write
    /// access on an immutable `Bytes`).
    #[error("access rights not allowed for this buffer: {0}")]
    InvalidAccess(&'static str),
    /// A queue is full (send queue, receive queue, completion queue).
    #[error("queue full: {0}")]
    QueueFull(&'static str),
    /// The object is in the wrong state for the call.
    #[error("invalid state: {0}")]
    InvalidState(&'static str),
    /// The region is still valid (not invalidated) or holds no buffer.
    #[error("memory region busy: {0}")]
    RegionBusy(&'static str),
    /// The peer rejected the connection, with its private data.
    #[error("connection rejected by peer ({} bytes of private data)", .private_data.len())]
    Rejected {
        /// The reject's private data.
        private_data: Bytes,
    },
    /// Connection establishment timed out.
    #[error("timed out: {0}")]
    Timeout(&'static str),
    /// A protocol error during connection establishment.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// An I/O error from the underlying transport.
    #[error("i/o error: {0}")]
    Io(String),
    /// The connection was lost or is closed.
    #[error("not connected")]
    NotConnected,
}

impl From<std::io::Error> for VerbsError {
    fn from(e: std::io::Error) -> Self {
        VerbsError::Io(e.to_string())
    }
}

/// A batch post ([`QueuePair::post_send_batch`](crate::QueuePair::post_send_batch),
/// [`QueuePair::post_recv_batch`](crate::QueuePair::post_recv_batch)) stopped
/// at a work request that could not be posted (`bad_wr` in verbs).
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[error("work request {posted} of a batch could not be posted: {error}")]
pub struct PostBatchError {
    /// Work requests posted before the failing one (the failing one is
    /// `posted`, counting from 0; it and those after it were not posted).
    pub posted: usize,
    /// Why the failing one was refused.
    pub error: VerbsError,
}

/// A failed registration: the error and the caller's buffer, handed back.
#[derive(Debug, thiserror::Error)]
#[error("registration failed: {error}")]
pub struct RegisterError {
    /// Why.
    pub error: VerbsError,
    /// The buffer the caller passed in.
    pub buffer: MrBuffer,
}
