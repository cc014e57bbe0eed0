//! Encoding into caller-provided buffers: [`Encoder`], [`XdrEncode`] and
//! functions for `BytesMut`/`Vec`.

use bytes::{Bytes, BytesMut};

use crate::read::pad_len;
use crate::EncodeError;

const ZEROS: [u8; 4] = [0; 4];

/// Encoded size of an `opaque<>`/`string<>` holding `len` bytes: the length
/// word, the data and its padding.
#[inline]
pub const fn opaque_encoded_len(len: usize) -> usize {
    4 + crate::padded_len(len)
}

/// A value with an XDR encoding whose exact size is known before encoding.
///
/// `encoded_len` must return exactly the number of bytes `encode` writes;
/// transports use it to size buffers and to decide between inline and chunked
/// transfer before any byte is written.
pub trait XdrEncode {
    /// Exact number of bytes [`encode`](Self::encode) writes.
    fn encoded_len(&self) -> usize;
    /// Write the encoding.
    fn encode(&self, e: &mut Encoder<'_>);
}

/// An XDR encoder writing into a caller-provided `&mut [u8]` (a cursor).
///
/// The methods do not fail individually: if the buffer is too small, or a
/// length does not fit the 32-bit length word, the encoder stops writing and
/// remembers the error, which [`finish`](Self::finish) reports. Size the
/// buffer with [`XdrEncode::encoded_len`] and this never happens.
///
/// ```
/// use xdr::Encoder;
/// let mut buf = [0u8; 12];
/// let mut e = Encoder::new(&mut buf);
/// e.u32(7);
/// e.opaque(b"abc");
/// assert_eq!(e.finish().unwrap(), 12);
/// assert_eq!(buf, [0, 0, 0, 7, 0, 0, 0, 3, b'a', b'b', b'c', 0]);
/// ```
#[derive(Debug)]
pub struct Encoder<'a> {
    buf: &'a mut [u8],
    pos: usize,
    needed: usize,
    error: Option<EncodeError>,
}

impl<'a> Encoder<'a> {
    /// An encoder writing at the start of `buf`.
    pub fn new(buf: &'a mut [u8]) -> Self {
        Encoder {
            buf,
            pos: 0,
            needed: 0,
            error: None,
        }
    }

    /// Bytes written so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Space left in the buffer.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Bytes written, or the first error met.
    pub fn finish(self) -> Result<usize, EncodeError> {
        match self.error {
            None => Ok(self.pos),
            Some(EncodeError::BufferTooSmall { .. }) => Err(EncodeError::BufferTooSmall {
                needed: self.needed,
                available: self.buf.len(),
            }),
            Some(e) => Err(e),
        }
    }

    /// Write raw bytes (no length word, no padding).
    pub fn raw(&mut self, b: &[u8]) {
        self.needed += b.len();
        if self.error.is_some() {
            return;
        }
        if b.len() > self.remaining() {
            self.error = Some(EncodeError::BufferTooSmall {
                needed: self.needed,
                available: self.buf.len(),
            });
            return;
        }
        self.buf[self.pos..self.pos + b.len()].copy_from_slice(b);
        self.pos += b.len();
    }

    /// Write `n` zero bytes.
    pub fn zeros(&mut self, n: usize) {
        let mut left = n;
        while left > 0 {
            let k = left.min(ZEROS.len());
            self.raw(&ZEROS[..k]);
            left -= k;
        }
    }

    /// Encode an unsigned integer (RFC 4506 §4.2).
    pub fn u32(&mut self, v: u32) {
        self.raw(&v.to_be_bytes());
    }

    /// Encode a signed integer (RFC 4506 §4.1).
    pub fn i32(&mut self, v: i32) {
        self.raw(&v.to_be_bytes());
    }

    /// Encode an unsigned hyper integer (RFC 4506 §4.5).
    pub fn u64(&mut self, v: u64) {
        self.raw(&v.to_be_bytes());
    }

    /// Encode a hyper integer (RFC 4506 §4.5).
    pub fn i64(&mut self, v: i64) {
        self.raw(&v.to_be_bytes());
    }

    /// Encode a boolean (RFC 4506 §4.4).
    pub fn bool(&mut self, v: bool) {
        self.u32(v as u32);
    }

    /// Encode a length word; records [`EncodeError::LengthOverflow`] if
    /// `len` does not fit 32 bits.
    pub fn length(&mut self, len: usize) {
        match u32::try_from(len) {
            Ok(l) => self.u32(l),
            Err(_) => {
                if self.error.is_none() {
                    self.error = Some(EncodeError::LengthOverflow(len));
                }
            }
        }
    }

    /// Encode fixed-length opaque data (RFC 4506 §4.9): the bytes and their
    /// zero padding.
    pub fn fixed_opaque(&mut self, b: &[u8]) {
        self.raw(b);
        self.raw(&ZEROS[..pad_len(b.len())]);
    }

    /// Encode variable-length opaque data (RFC 4506 §4.10).
    pub fn opaque(&mut self, b: &[u8]) {
        self.length(b.len());
        self.fixed_opaque(b);
    }

    /// Encode a string (RFC 4506 §4.11).
    pub fn string(&mut self, s: &str) {
        self.opaque(s.as_bytes());
    }

    /// Encode a value.
    pub fn item<T: XdrEncode + ?Sized>(&mut self, v: &T) {
        v.encode(self);
    }
}

/// Encode `v` into `buf`, returning the number of bytes written.
pub fn encode_into_slice<T: XdrEncode + ?Sized>(
    v: &T,
    buf: &mut [u8],
) -> Result<usize, EncodeError> {
    let mut e = Encoder::new(buf);
    v.encode(&mut e);
    e.finish()
}

/// Append the encoding of `v` to `buf` (growing it by exactly
/// `v.encoded_len()` bytes).
pub fn encode_append<T: XdrEncode + ?Sized>(v: &T, buf: &mut BytesMut) -> Result<(), EncodeError> {
    let start = buf.len();
    let n = v.encoded_len();
    buf.resize(start + n, 0);
    let r = encode_into_slice(v, &mut buf[start..]);
    match r {
        Ok(w) if w == n => Ok(()),
        Ok(w) => {
            buf.truncate(start);
            Err(EncodeError::LengthMismatch {
                declared: n,
                written: w,
            })
        }
        Err(e) => {
            buf.truncate(start);
            Err(e)
        }
    }
}

/// Encode `v` into a new [`Bytes`] of exactly `v.encoded_len()` bytes.
pub fn encode_to_bytes<T: XdrEncode + ?Sized>(v: &T) -> Result<Bytes, EncodeError> {
    let mut b = BytesMut::with_capacity(v.encoded_len());
    encode_append(v, &mut b)?;
    Ok(b.freeze())
}

/// Encode `v` into a new `Vec<u8>` of exactly `v.encoded_len()` bytes.
pub fn encode_to_vec<T: XdrEncode + ?Sized>(v: &T) -> Result<Vec<u8>, EncodeError> {
    Ok(encode_to_bytes(v)?.to_vec())
}

macro_rules! prim {
    ($t:ty, $m:ident, $n:expr) => {
        impl XdrEncode for $t {
            fn encoded_len(&self) -> usize {
                $n
            }
            fn encode(&self, e: &mut Encoder<'_>) {
                e.$m(*self)
            }
        }
    };
}
prim!(u32, u32, 4);
prim!(i32, i32, 4);
prim!(u64, u64, 8);
prim!(i64, i64, 8);
prim!(bool, bool, 4);

impl XdrEncode for () {
    fn encoded_len(&self) -> usize {
        0
    }
    fn encode(&self, _e: &mut Encoder<'_>) {}
}

impl<T: XdrEncode + ?Sized> XdrEncode for &T {
    fn encoded_len(&self) -> usize {
        (**self).encoded_len()
    }
    fn encode(&self, e: &mut Encoder<'_>) {
        (**self).encode(e)
    }
}

/// XDR optional-data `T *` (RFC 4506 §4.19): a boolean, then the value if
/// present.
impl<T: XdrEncode> XdrEncode for Option<T> {
    fn encoded_len(&self) -> usize {
        4 + self.as_ref().map_or(0, XdrEncode::encoded_len)
    }
    fn encode(&self, e: &mut Encoder<'_>) {
        e.bool(self.is_some());
        if let Some(v) = self {
            v.encode(e);
        }
    }
}

/// A variable-length opaque `opaque<>` to encode (length word, bytes, pad).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opaque<'a>(pub &'a [u8]);

impl XdrEncode for Opaque<'_> {
    fn encoded_len(&self) -> usize {
        opaque_encoded_len(self.0.len())
    }
    fn encode(&self, e: &mut Encoder<'_>) {
        e.opaque(self.0)
    }
}

/// A `string<>` to encode (length word, bytes, pad).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Str<'a>(pub &'a str);

impl XdrEncode for Str<'_> {
    fn encoded_len(&self) -> usize {
        opaque_encoded_len(self.0.len())
    }
    fn encode(&self, e: &mut Encoder<'_>) {
        e.string(self.0)
    }
}
