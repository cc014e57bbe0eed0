//! The [`XdrRead`] trait shared by every XDR decoder, and [`XdrDecode`].

use bytes::Bytes;

use crate::{Error, Result};

/// Number of zero bytes that follow `len` bytes of opaque data so that the
/// item ends on a 4-byte boundary (RFC 4506 §3, "roundup").
#[inline]
pub const fn pad_len(len: usize) -> usize {
    (4 - (len & 3)) & 3
}

/// `len` rounded up to a multiple of four (RFC 4506 §3).
#[inline]
pub const fn padded_len(len: usize) -> usize {
    len + pad_len(len)
}

/// A source of XDR items (RFC 4506).
///
/// Implemented by the borrowing [`Decoder`](crate::Decoder), the zero-copy
/// [`BytesDecoder`](crate::BytesDecoder) and by decoders of other crates that
/// read a stream made of several buffers (e.g. `oncrpc::PayloadDecoder`).
/// Types implement [`XdrDecode`] against this trait so they can be decoded
/// from any of them.
///
/// Every variable-length item takes an explicit maximum; a decoder never
/// allocates more than that maximum (and never more than the input holds),
/// whatever a peer's length word says.
///
/// After an error, the position is unspecified unless the method says
/// otherwise (the single-buffer decoders leave it unchanged for a failed
/// opaque or string); callers normally abandon the input.
pub trait XdrRead {
    /// Bytes left in the input.
    fn remaining(&self) -> usize;

    /// Bytes consumed so far.
    fn position(&self) -> usize;

    /// Decode an unsigned integer (RFC 4506 §4.2).
    fn u32(&mut self) -> Result<u32>;

    /// Copy `out.len()` bytes of fixed-length opaque data into `out` and
    /// consume its zero padding (RFC 4506 §4.9).
    fn fixed_opaque_into(&mut self, out: &mut [u8]) -> Result<()>;

    /// Decode fixed-length opaque data of `len` bytes (RFC 4506 §4.9) as
    /// [`Bytes`]; zero-copy where the implementation can slice its input.
    fn fixed_opaque_bytes(&mut self, len: usize) -> Result<Bytes>;

    /// Decode variable-length opaque data `opaque<max>` (RFC 4506 §4.10) as
    /// [`Bytes`]; zero-copy where the implementation can slice its input.
    fn opaque_bytes(&mut self, max: u32) -> Result<Bytes> {
        let len = self.length(max)?;
        self.fixed_opaque_bytes(len as usize)
    }

    /// Skip `n` raw bytes (no padding is added).
    fn skip(&mut self, n: usize) -> Result<()>;

    /// Decode a length word (of an opaque, string or array) and check it
    /// against `max`.
    fn length(&mut self, max: u32) -> Result<u32> {
        let len = self.u32()?;
        if len > max {
            return Err(Error::TooLong { len, max });
        }
        Ok(len)
    }

    /// Decode a signed integer (RFC 4506 §4.1).
    fn i32(&mut self) -> Result<i32> {
        Ok(self.u32()? as i32)
    }

    /// Decode an unsigned hyper integer (RFC 4506 §4.5).
    fn u64(&mut self) -> Result<u64> {
        let hi = self.u32()? as u64;
        let lo = self.u32()? as u64;
        Ok((hi << 32) | lo)
    }

    /// Decode a hyper integer (RFC 4506 §4.5).
    fn i64(&mut self) -> Result<i64> {
        Ok(self.u64()? as i64)
    }

    /// Decode a boolean (RFC 4506 §4.4); values other than 0 and 1 are errors.
    fn bool(&mut self) -> Result<bool> {
        match self.u32()? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(Error::InvalidBool(v)),
        }
    }

    /// Decode an enum discriminant (RFC 4506 §4.3) as its raw value. Callers
    /// map it to their type and report unknown values with
    /// [`Error::InvalidDiscriminant`].
    fn enum_value(&mut self) -> Result<i32> {
        self.i32()
    }

    /// Decode the element count of a variable-length array `T<max>`
    /// (RFC 4506 §4.13) and check it against `max`. The caller then decodes
    /// the elements. The count is also checked against the remaining input
    /// assuming each element takes at least `min_elem_size` bytes, so a
    /// caller may pre-allocate `count` elements safely.
    fn array_len(&mut self, max: u32, min_elem_size: usize) -> Result<u32> {
        let n = self.length(max)?;
        let needed = (n as usize).saturating_mul(min_elem_size);
        if needed > self.remaining() {
            return Err(Error::Truncated {
                needed,
                remaining: self.remaining(),
            });
        }
        Ok(n)
    }

    /// Decode a variable-length opaque `opaque<max>` into a new `Vec`.
    fn opaque_vec(&mut self, max: u32) -> Result<Vec<u8>> {
        Ok(self.opaque_bytes(max)?.to_vec())
    }

    /// Decode a `string<max>` that must be UTF-8 into a new `String`.
    fn string_owned(&mut self, max: u32) -> Result<String> {
        let b = self.opaque_bytes(max)?;
        String::from_utf8(b.to_vec()).map_err(|_| Error::InvalidUtf8)
    }

    /// Fail with [`Error::TrailingBytes`] unless the input is exhausted.
    fn finish(&self) -> Result<()> {
        match self.remaining() {
            0 => Ok(()),
            n => Err(Error::TrailingBytes(n)),
        }
    }
}

/// A type that can be decoded from any [`XdrRead`] source.
pub trait XdrDecode: Sized {
    /// Decode one value, consuming exactly its encoding.
    fn decode<R: XdrRead + ?Sized>(r: &mut R) -> Result<Self>;
}

impl XdrDecode for u32 {
    fn decode<R: XdrRead + ?Sized>(r: &mut R) -> Result<Self> {
        r.u32()
    }
}
impl XdrDecode for i32 {
    fn decode<R: XdrRead + ?Sized>(r: &mut R) -> Result<Self> {
        r.i32()
    }
}
impl XdrDecode for u64 {
    fn decode<R: XdrRead + ?Sized>(r: &mut R) -> Result<Self> {
        r.u64()
    }
}
impl XdrDecode for i64 {
    fn decode<R: XdrRead + ?Sized>(r: &mut R) -> Result<Self> {
        r.i64()
    }
}
impl XdrDecode for bool {
    fn decode<R: XdrRead + ?Sized>(r: &mut R) -> Result<Self> {
        r.bool()
    }
}
impl XdrDecode for () {
    fn decode<R: XdrRead + ?Sized>(_r: &mut R) -> Result<Self> {
        Ok(())
    }
}

/// XDR optional-data `T *` (RFC 4506 §4.19).
impl<T: XdrDecode> XdrDecode for Option<T> {
    fn decode<R: XdrRead + ?Sized>(r: &mut R) -> Result<Self> {
        if r.bool()? {
            Ok(Some(T::decode(r)?))
        } else {
            Ok(None)
        }
    }
}
