//! Encoding into [`oncrpc::Payload`]s, and the building blocks shared by
//! every NFS and MOUNT type: linked lists, bounded byte strings, and the
//! macros that define XDR structs and enums.
//!
//! Every argument and result type implements [`xdr::XdrEncode`] (one
//! contiguous XDR encoding, every opaque inline), [`xdr::XdrDecode`]
//! (from any [`xdr::XdrRead`]: `Decoder`, the zero-copy `BytesDecoder`, or
//! `oncrpc::PayloadDecoder`) and [`PayloadEncode`], which appends the value
//! to an [`oncrpc::PayloadBuilder`] with its DDP-eligible opaques (RFC 8267)
//! as [`oncrpc::Piece::Ddp`] pieces, so an RPC-over-RDMA transport can move
//! them by direct data placement. Client and server use the same calls:
//! `value.to_payload()` to send, `decode_payload::<T>(&payload)` to receive.

use oncrpc::{Payload, PayloadBuilder};
use xdr::{Encoder, XdrDecode, XdrEncode, XdrRead};

/// A value that can be appended to an [`oncrpc::PayloadBuilder`].
///
/// Types without DDP-eligible items append their XDR encoding as one item;
/// the WRITE `data` and SYMLINK `symlink_data` arguments and the READ
/// `data` and READLINK `data` results are appended with
/// [`PayloadBuilder::ddp_opaque`] (RFC 8267 §3: the only DDP-eligible items
/// of NFS version 3), without copying their bytes.
pub trait PayloadEncode {
    /// Append the value's encoding to `b`.
    fn encode_payload(&self, b: &mut PayloadBuilder);

    /// The value as a new [`Payload`].
    fn to_payload(&self) -> Payload {
        let mut b = PayloadBuilder::new();
        self.encode_payload(&mut b);
        b.finish()
    }
}

impl PayloadEncode for () {
    fn encode_payload(&self, _b: &mut PayloadBuilder) {}
}

/// Decode a whole payload as one `T`: the value must take every byte
/// ([`xdr::Error::TrailingBytes`] otherwise). DDP-eligible opaques are
/// returned as zero-copy slices of the payload's pieces.
pub fn decode_payload<T: XdrDecode>(p: &Payload) -> xdr::Result<T> {
    let mut d = p.decoder();
    let v = T::decode(&mut d)?;
    d.finish()?;
    Ok(v)
}

/// Encoded length of an XDR optional-data linked list (RFC 4506 §4.19) of
/// `items`: a `TRUE` word before each item, a `FALSE` word at the end.
pub(crate) fn list_encoded_len<T: XdrEncode>(items: &[T]) -> usize {
    items.iter().map(|i| 4 + i.encoded_len()).sum::<usize>() + 4
}

/// Encode `items` as an XDR linked list (see [`list_encoded_len`]).
pub(crate) fn encode_list<T: XdrEncode>(items: &[T], e: &mut Encoder<'_>) {
    for i in items {
        e.bool(true);
        i.encode(e);
    }
    e.bool(false);
}

/// Decode an XDR linked list of at most `max` items. Every item is
/// preceded by a 4-byte boolean, so the list never holds more items than
/// the input has words; more than `max` is [`xdr::Error::TooLong`].
pub(crate) fn decode_list<T: XdrDecode, R: XdrRead + ?Sized>(
    r: &mut R,
    max: u32,
) -> xdr::Result<Vec<T>> {
    let mut out = Vec::new();
    while r.bool()? {
        if out.len() >= max as usize {
            return Err(xdr::Error::TooLong {
                len: max.saturating_add(1),
                max,
            });
        }
        out.push(T::decode(r)?);
    }
    Ok(out)
}

/// Encoded length of a counted array `T<>` of `items`.
pub(crate) fn array_encoded_len<T: XdrEncode>(items: &[T]) -> usize {
    4 + items.iter().map(XdrEncode::encoded_len).sum::<usize>()
}

/// Encode a counted array `T<>`.
pub(crate) fn encode_array<T: XdrEncode>(items: &[T], e: &mut Encoder<'_>) {
    e.length(items.len());
    for i in items {
        i.encode(e);
    }
}

/// Decode a counted array `T<max>` whose items take at least `min_size`
/// bytes each (the count is checked against the input before allocating).
pub(crate) fn decode_array<T: XdrDecode, R: XdrRead + ?Sized>(
    r: &mut R,
    max: u32,
    min_size: usize,
) -> xdr::Result<Vec<T>> {
    let n = r.array_len(max, min_size)?;
    (0..n).map(|_| T::decode(r)).collect()
}

/// Defines a newtype over [`Bytes`] encoded as `opaque<MAX>` or
/// `string<MAX>` (bytes, not required to be UTF-8).
macro_rules! bounded_bytes {
    ($(#[$m:meta])* $name:ident, $max:expr) => {
        $(#[$m])*
        #[derive(Clone, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
        pub struct $name(pub bytes::Bytes);

        impl $name {
            /// Largest length the decoder accepts.
            pub const MAX: u32 = $max;

            /// The bytes.
            pub fn as_bytes(&self) -> &[u8] {
                &self.0
            }

            /// Whether the value is within [`Self::MAX`] bytes.
            pub fn is_valid(&self) -> bool {
                self.0.len() <= Self::MAX as usize
            }
        }

        impl core::fmt::Debug for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                write!(f, "{}({:?})", stringify!($name), String::from_utf8_lossy(&self.0))
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                $name(bytes::Bytes::copy_from_slice(s.as_bytes()))
            }
        }

        impl From<&[u8]> for $name {
            fn from(s: &[u8]) -> Self {
                $name(bytes::Bytes::copy_from_slice(s))
            }
        }

        impl From<bytes::Bytes> for $name {
            fn from(b: bytes::Bytes) -> Self {
                $name(b)
            }
        }

        impl xdr::XdrEncode for $name {
            fn encoded_len(&self) -> usize {
                xdr::opaque_encoded_len(self.0.len())
            }
            fn encode(&self, e: &mut xdr::Encoder<'_>) {
                e.opaque(&self.0)
            }
        }

        impl xdr::XdrDecode for $name {
            fn decode<R: xdr::XdrRead + ?Sized>(r: &mut R) -> xdr::Result<Self> {
                Ok($name(r.opaque_bytes(Self::MAX)?))
            }
        }
    };
}
pub(crate) use bounded_bytes;

/// Defines a fixed-size opaque newtype (`opaque name[N]`).
macro_rules! fixed_opaque {
    ($(#[$m:meta])* $name:ident, $n:expr) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub struct $name(pub [u8; $n]);

        impl xdr::XdrEncode for $name {
            fn encoded_len(&self) -> usize {
                $n
            }
            fn encode(&self, e: &mut xdr::Encoder<'_>) {
                e.fixed_opaque(&self.0)
            }
        }

        impl xdr::XdrDecode for $name {
            fn decode<R: xdr::XdrRead + ?Sized>(r: &mut R) -> xdr::Result<Self> {
                let mut b = [0u8; $n];
                r.fixed_opaque_into(&mut b)?;
                Ok($name(b))
            }
        }
    };
}
pub(crate) use fixed_opaque;

/// Defines an XDR struct: the Rust struct, its [`XdrEncode`] and
/// [`XdrDecode`] (fields in order), and a [`PayloadEncode`] that appends it
/// as one item (for types with no DDP-eligible field).
macro_rules! xdr_struct {
    (
        $(#[$m:meta])*
        pub struct $name:ident {
            $( $(#[$fm:meta])* pub $f:ident : $t:ty ),* $(,)?
        }
    ) => {
        $(#[$m])*
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct $name {
            $( $(#[$fm])* pub $f: $t ),*
        }

        impl xdr::XdrEncode for $name {
            fn encoded_len(&self) -> usize {
                0 $( + xdr::XdrEncode::encoded_len(&self.$f) )*
            }
            #[allow(unused_variables)]
            fn encode(&self, e: &mut xdr::Encoder<'_>) {
                $( xdr::XdrEncode::encode(&self.$f, e); )*
            }
        }

        impl xdr::XdrDecode for $name {
            #[allow(unused_variables)]
            fn decode<R: xdr::XdrRead + ?Sized>(r: &mut R) -> xdr::Result<Self> {
                Ok($name { $( $f: xdr::XdrDecode::decode(r)? ),* })
            }
        }

        impl $crate::codec::PayloadEncode for $name {
            fn encode_payload(&self, b: &mut oncrpc::PayloadBuilder) {
                b.item(self);
            }
        }
    };
}
pub(crate) use xdr_struct;

/// Defines a C-like XDR enum with its RFC names: `from_u32`, `name`,
/// `Display` (the RFC name), [`XdrEncode`] and [`XdrDecode`] (an unknown
/// value is [`xdr::Error::InvalidDiscriminant`]).
macro_rules! xdr_enum {
    (
        $(#[$m:meta])*
        pub enum $name:ident ($what:literal) {
            $( $(#[$vm:meta])* $v:ident = $n:literal => $rfc:literal ),* $(,)?
        }
    ) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u32)]
        pub enum $name {
            $( $(#[$vm])* $v = $n ),*
        }

        impl $name {
            /// Every value, in numeric order.
            pub const ALL: &'static [$name] = &[$($name::$v),*];

            /// The value with wire number `n`.
            pub fn from_u32(n: u32) -> Option<Self> {
                match n {
                    $( $n => Some($name::$v), )*
                    _ => None,
                }
            }

            /// The RFC name of the value.
            pub fn name(self) -> &'static str {
                match self {
                    $( $name::$v => $rfc, )*
                }
            }
        }

        impl core::fmt::Display for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                f.write_str(self.name())
            }
        }

        impl From<$name> for u32 {
            fn from(v: $name) -> u32 {
                v as u32
            }
        }

        impl xdr::XdrEncode for $name {
            fn encoded_len(&self) -> usize {
                4
            }
            fn encode(&self, e: &mut xdr::Encoder<'_>) {
                e.u32(*self as u32)
            }
        }

        impl xdr::XdrDecode for $name {
            fn decode<R: xdr::XdrRead + ?Sized>(r: &mut R) -> xdr::Result<Self> {
                let n = r.u32()?;
                $name::from_u32(n).ok_or(xdr::Error::InvalidDiscriminant { what: $what, value: n })
            }
        }
    };
}
pub(crate) use xdr_enum;

/// Zero-copy check: whether `inner` is a slice of `outer`'s memory.
#[cfg(test)]
pub(crate) fn shares_memory(outer: &bytes::Bytes, inner: &bytes::Bytes) -> bool {
    let o = outer.as_ptr() as usize;
    let i = inner.as_ptr() as usize;
    i >= o && i + inner.len() <= o + outer.len()
}
