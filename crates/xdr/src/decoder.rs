//! Decoders over one contiguous buffer: the borrowing [`Decoder`] and the
//! zero-copy [`BytesDecoder`].

use bytes::Bytes;

use crate::read::{pad_len, XdrRead};
use crate::{Error, Result};

/// Read the big-endian word at `*pos` and advance.
#[inline]
fn read_word(buf: &[u8], pos: &mut usize) -> Result<u32> {
    match buf.get(*pos..).and_then(|r| r.first_chunk::<4>()) {
        Some(w) => {
            *pos += 4;
            Ok(u32::from_be_bytes(*w))
        }
        None => Err(Error::Truncated {
            needed: 4,
            remaining: buf.len().saturating_sub(*pos),
        }),
    }
}

/// A borrowing XDR decoder over `&'a [u8]`.
///
/// Opaque data and strings are returned as sub-slices of the input, so
/// decoding never copies payload bytes and never allocates.
///
/// ```
/// use xdr::{Decoder, XdrRead};
/// let buf = [0, 0, 0, 7, 0, 0, 0, 3, b'a', b'b', b'c', 0];
/// let mut d = Decoder::new(&buf);
/// assert_eq!(d.u32().unwrap(), 7);
/// assert_eq!(d.opaque(16).unwrap(), b"abc");
/// d.finish().unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct Decoder<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Decoder<'a> {
    /// A decoder reading `buf` from its start.
    pub fn new(buf: &'a [u8]) -> Self {
        Decoder { buf, pos: 0 }
    }

    /// The input not consumed yet.
    pub fn rest(&self) -> &'a [u8] {
        &self.buf[self.pos..]
    }

    /// The whole input, consumed part included.
    pub fn input(&self) -> &'a [u8] {
        self.buf
    }

    /// Take `n` raw bytes (no padding).
    pub fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let rest = self.rest();
        if n > rest.len() {
            return Err(Error::Truncated {
                needed: n,
                remaining: rest.len(),
            });
        }
        self.pos += n;
        Ok(&rest[..n])
    }

    /// Decode fixed-length opaque data of `len` bytes (RFC 4506 §4.9),
    /// checking that its padding is zero.
    pub fn fixed_opaque(&mut self, len: usize) -> Result<&'a [u8]> {
        let pad = pad_len(len);
        let rest = self.rest();
        let needed = len.saturating_add(pad);
        if needed > rest.len() {
            return Err(Error::Truncated {
                needed,
                remaining: rest.len(),
            });
        }
        if rest[len..needed].iter().any(|&b| b != 0) {
            return Err(Error::NonZeroPadding);
        }
        self.pos += needed;
        Ok(&rest[..len])
    }

    /// Decode variable-length opaque data `opaque<max>` (RFC 4506 §4.10).
    pub fn opaque(&mut self, max: u32) -> Result<&'a [u8]> {
        let start = self.pos;
        let len = self.length(max)?;
        self.fixed_opaque(len as usize)
            .inspect_err(|_| self.pos = start)
    }

    /// Decode a `string<max>` (RFC 4506 §4.11) as raw bytes.
    pub fn string_bytes(&mut self, max: u32) -> Result<&'a [u8]> {
        self.opaque(max)
    }

    /// Decode a `string<max>` (RFC 4506 §4.11) that must be UTF-8.
    pub fn string(&mut self, max: u32) -> Result<&'a str> {
        let start = self.pos;
        let b = self.opaque(max)?;
        core::str::from_utf8(b).map_err(|_| {
            self.pos = start;
            Error::InvalidUtf8
        })
    }

    /// Decode a value of type `T`.
    pub fn decode<T: crate::XdrDecode>(&mut self) -> Result<T> {
        T::decode(self)
    }
}

impl XdrRead for Decoder<'_> {
    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn position(&self) -> usize {
        self.pos
    }

    #[inline]
    fn u32(&mut self) -> Result<u32> {
        read_word(self.buf, &mut self.pos)
    }

    fn fixed_opaque_into(&mut self, out: &mut [u8]) -> Result<()> {
        let b = self.fixed_opaque(out.len())?;
        out.copy_from_slice(b);
        Ok(())
    }

    /// Copies: a borrowing decoder has no `Bytes` to slice.
    fn fixed_opaque_bytes(&mut self, len: usize) -> Result<Bytes> {
        Ok(Bytes::copy_from_slice(self.fixed_opaque(len)?))
    }

    fn skip(&mut self, n: usize) -> Result<()> {
        self.take(n).map(|_| ())
    }
}

/// An XDR decoder over [`Bytes`] that returns opaque data as zero-copy
/// [`Bytes`] slices of the input (sharing its allocation).
///
/// ```
/// use bytes::Bytes;
/// use xdr::{BytesDecoder, XdrRead};
/// let buf = Bytes::from_static(&[0, 0, 0, 2, 0xAB, 0xCD, 0, 0]);
/// let mut d = BytesDecoder::new(buf);
/// assert_eq!(&d.opaque(8).unwrap()[..], &[0xAB, 0xCD]);
/// ```
#[derive(Debug, Clone)]
pub struct BytesDecoder {
    buf: Bytes,
    pos: usize,
}

impl BytesDecoder {
    /// A decoder reading `buf` from its start.
    pub fn new(buf: Bytes) -> Self {
        BytesDecoder { buf, pos: 0 }
    }

    /// A borrowing view of the unconsumed input.
    pub fn as_decoder(&self) -> Decoder<'_> {
        Decoder::new(&self.buf[self.pos..])
    }

    /// The unconsumed input as a zero-copy slice.
    pub fn rest(&self) -> Bytes {
        self.buf.slice(self.pos..)
    }

    /// Take `n` raw bytes (no padding) as a zero-copy slice.
    pub fn take(&mut self, n: usize) -> Result<Bytes> {
        let remaining = self.remaining();
        if n > remaining {
            return Err(Error::Truncated {
                needed: n,
                remaining,
            });
        }
        let b = self.buf.slice(self.pos..self.pos + n);
        self.pos += n;
        Ok(b)
    }

    /// Decode variable-length opaque data `opaque<max>` (RFC 4506 §4.10) as a
    /// zero-copy slice.
    pub fn opaque(&mut self, max: u32) -> Result<Bytes> {
        self.opaque_bytes(max)
    }

    /// Decode fixed-length opaque data of `len` bytes as a zero-copy slice.
    pub fn fixed_opaque(&mut self, len: usize) -> Result<Bytes> {
        self.fixed_opaque_bytes(len)
    }

    /// Decode a `string<max>` that must be UTF-8, as a zero-copy slice.
    pub fn string(&mut self, max: u32) -> Result<Bytes> {
        let start = self.pos;
        let b = self.opaque_bytes(max)?;
        if core::str::from_utf8(&b).is_err() {
            self.pos = start;
            return Err(Error::InvalidUtf8);
        }
        Ok(b)
    }

    /// Decode a value of type `T`.
    pub fn decode<T: crate::XdrDecode>(&mut self) -> Result<T> {
        T::decode(self)
    }
}

impl XdrRead for BytesDecoder {
    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn position(&self) -> usize {
        self.pos
    }

    #[inline]
    fn u32(&mut self) -> Result<u32> {
        read_word(&self.buf, &mut self.pos)
    }

    fn fixed_opaque_into(&mut self, out: &mut [u8]) -> Result<()> {
        let mut d = self.as_decoder();
        d.fixed_opaque_into(out)?;
        self.pos += d.position();
        Ok(())
    }

    fn opaque_bytes(&mut self, max: u32) -> Result<Bytes> {
        let start = self.pos;
        let len = self.length(max)?;
        self.fixed_opaque_bytes(len as usize)
            .inspect_err(|_| self.pos = start)
    }

    fn fixed_opaque_bytes(&mut self, len: usize) -> Result<Bytes> {
        let mut d = self.as_decoder();
        d.fixed_opaque(len)?;
        let b = self.buf.slice(self.pos..self.pos + len);
        self.pos += d.position();
        Ok(b)
    }

    fn skip(&mut self, n: usize) -> Result<()> {
        self.take(n).map(|_| ())
    }
}
