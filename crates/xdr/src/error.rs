//! Typed errors of the XDR codec.

/// An error found while decoding XDR data (RFC 4506).
///
/// Every variant describes a defect of the *input*; none of them is a bug in
/// the caller, so a decoder fed hostile bytes returns one of these and never
/// panics.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The input ended before the item was complete.
    #[error("XDR input truncated: needed {needed} bytes, {remaining} remain")]
    Truncated {
        /// Bytes the item needed (including padding).
        needed: usize,
        /// Bytes that were left in the input.
        remaining: usize,
    },
    /// A variable-length item (opaque, string, array) declared a length above
    /// the maximum the caller allows for it.
    #[error("XDR length {len} exceeds the maximum {max}")]
    TooLong {
        /// Length word found on the wire.
        len: u32,
        /// Maximum allowed by the caller.
        max: u32,
    },
    /// The padding after an opaque or string was not zero. RFC 4506 §3 and
    /// §4.9 define the residual bytes as zero; this decoder rejects any
    /// other value.
    #[error("XDR padding is not zero")]
    NonZeroPadding,
    /// A boolean was neither 0 nor 1 (RFC 4506 §4.4).
    #[error("XDR boolean has invalid value {0}")]
    InvalidBool(u32),
    /// An enum or union discriminant had a value the type does not define.
    #[error("XDR discriminant {value} is not valid for {what}")]
    InvalidDiscriminant {
        /// Name of the enum or union being decoded.
        what: &'static str,
        /// The value found on the wire.
        value: u32,
    },
    /// A string was required to be UTF-8 and was not.
    #[error("XDR string is not valid UTF-8")]
    InvalidUtf8,
    /// A length word disagrees with the length of the data it describes
    /// when that data travels separately (e.g. an `oncrpc` DDP piece moved
    /// by RPC-over-RDMA in a chunk).
    #[error("length word {declared} disagrees with separately carried data of {actual} bytes")]
    SeparateLengthMismatch {
        /// Length word in the stream.
        declared: usize,
        /// Length of the separately carried data.
        actual: usize,
    },
    /// Bytes were left over after the last expected item.
    #[error("{0} trailing bytes after the XDR data")]
    TrailingBytes(usize),
}

/// An error found while encoding into a caller-provided buffer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// The buffer was too small for the encoded items.
    #[error("encode buffer too small: needed {needed} bytes, {available} available")]
    BufferTooSmall {
        /// Bytes the encoding needed in total.
        needed: usize,
        /// Size of the buffer.
        available: usize,
    },
    /// A variable-length item was longer than a 32-bit length word can say.
    #[error("length {0} does not fit an XDR length word")]
    LengthOverflow(usize),
    /// An [`XdrEncode`](crate::XdrEncode) implementation wrote a different
    /// number of bytes than its `encoded_len` declared (a bug in that impl).
    #[error("encoded_len declared {declared} bytes but encode wrote {written}")]
    LengthMismatch {
        /// What `encoded_len` returned.
        declared: usize,
        /// What `encode` wrote.
        written: usize,
    },
}

/// Result type of the decoders.
pub type Result<T, E = Error> = core::result::Result<T, E>;
