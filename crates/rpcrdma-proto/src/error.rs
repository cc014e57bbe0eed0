//! Error types.

/// The four fixed header words, as far as they could be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FixedFields {
    /// `rdma_xid`.
    pub xid: u32,
    /// `rdma_vers`.
    pub vers: u32,
    /// `rdma_credit`.
    pub credit: u32,
    /// `rdma_proc` as received.
    pub proc_: u32,
}

/// Why a transport header could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum DecodeErrorKind {
    /// Shorter than the 28-byte minimum header (RFC 8166 §4.5).
    #[error("message of {0} bytes is shorter than the minimal 28-byte header")]
    TooShort(usize),
    /// `rdma_vers` is not 1 (RFC 8166 §4.5.1).
    #[error("unsupported RPC-over-RDMA version {0}")]
    UnsupportedVersion(u32),
    /// `rdma_proc` is not one of the five defined values (RFC 8166 §4.5.2).
    #[error("unknown rdma_proc {0}")]
    UnknownProc(u32),
    /// A list or array runs past the end of the message.
    #[error("chunk list runs past the end of the message")]
    Truncated,
    /// An XDR optional-data discriminator is neither 0 nor 1.
    #[error("optional-data discriminator {0} is neither 0 nor 1")]
    BadDiscriminator(u32),
    /// A chunk has more segments than the configured limit.
    #[error("a chunk has more segments than the configured limit")]
    TooManySegments,
    /// More Read or Write chunks than the configured limit.
    #[error("more chunks than the configured limit")]
    TooManyChunks,
    /// RDMA_ERROR with an unknown `rdma_err`.
    #[error("unknown rdma_err {0}")]
    UnknownErrorCode(u32),
}

/// A header decoding failure, with the fixed fields when they were readable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[error("{kind}")]
pub struct DecodeError {
    /// The fixed words, `None` when the message is shorter than 28 bytes.
    pub fixed: Option<FixedFields>,
    /// What went wrong.
    pub kind: DecodeErrorKind,
}

/// Encoding failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum EmitError {
    /// The caller's buffer is shorter than the encoded header.
    #[error("buffer of {have} bytes is too small for a {need}-byte header")]
    BufferTooSmall {
        /// Bytes needed.
        need: usize,
        /// Bytes available.
        have: usize,
    },
}
