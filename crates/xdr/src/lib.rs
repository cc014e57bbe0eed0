//! # xdr — a small RFC 4506 External Data Representation codec
//!
//! Built for RPC transports that move large payloads without copying:
//!
//! * [`Decoder`] reads from `&'a [u8]` and returns opaque data and strings as
//!   borrowed sub-slices;
//! * [`BytesDecoder`] reads from [`bytes::Bytes`] and returns opaque data as
//!   zero-copy `Bytes` slices of the input;
//! * both implement the [`XdrRead`] trait, which other multi-buffer decoders
//!   (like `oncrpc::PayloadDecoder`) implement too, and against which
//!   [`XdrDecode`] types are written;
//! * [`Encoder`] writes into a caller-provided `&mut [u8]`; [`XdrEncode`]
//!   types report their exact [`encoded_len`](XdrEncode::encoded_len) before
//!   any byte is written ([`encode_append`], [`encode_to_bytes`] for
//!   `BytesMut`/`Bytes`).
//!
//! ## Hostile input
//!
//! Every variable-length item (`opaque<max>`, `string<max>`, `T<max>`) takes
//! an explicit maximum; a length word above it is [`Error::TooLong`]. Nothing
//! is allocated on the strength of a peer's length word beyond that maximum
//! and beyond what the input actually holds. Padding must be zero
//! ([`Error::NonZeroPadding`]). Booleans must be 0 or 1. Decoding arbitrary
//! bytes never panics (property-tested).
//!
//! ```
//! use xdr::{encode_to_bytes, Decoder, Encoder, XdrEncode, XdrRead};
//!
//! struct Pair<'a> { id: u32, name: &'a str }
//! impl XdrEncode for Pair<'_> {
//!     fn encoded_len(&self) -> usize { 4 + xdr::opaque_encoded_len(self.name.len()) }
//!     fn encode(&self, e: &mut Encoder<'_>) { e.u32(self.id); e.string(self.name); }
//! }
//! let bytes = encode_to_bytes(&Pair { id: 9, name: "hello" }).unwrap();
//! assert_eq!(bytes.len(), 16);
//! let mut d = Decoder::new(&bytes);
//! assert_eq!(d.u32().unwrap(), 9);
//! assert_eq!(d.string(255).unwrap(), "hello");
//! d.finish().unwrap();
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod decoder;
mod encoder;
mod error;
mod read;

pub use decoder::{BytesDecoder, Decoder};
pub use encoder::{
    encode_append, encode_into_slice, encode_to_bytes, encode_to_vec, opaque_encoded_len, Encoder,
    Opaque, Str, XdrEncode,
};
pub use error::{EncodeError, Error, Result};
pub use read::{pad_len, padded_len, XdrDecode, XdrRead};

#[cfg(test)]
pub(crate) mod tests;
