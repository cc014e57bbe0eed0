//! Owned buffers handed to a registration.
//!
//! Memory a peer may write is owned by the registration, never borrowed from
//! safe Rust: the caller moves a buffer in with
//! [`ProtectionDomain::register`](crate::ProtectionDomain::register) and gets
//! it back from [`MemoryRegion::deregister`](crate::MemoryRegion::deregister)
//! (or [`MemoryRegion::take_buffer`](crate::MemoryRegion::take_buffer) after an
//! invalidation). While registered, no safe code outside the provider can
//! observe or alias the bytes.

use bytes::{Bytes, BytesMut};

use crate::{Access, VerbsError};

/// A buffer owned by a memory registration.
#[derive(Debug)]
pub enum MrBuffer {
    /// A mutable buffer (receive buffers, RDMA Read sinks, RDMA Write targets).
    /// Its length (not capacity) is the registered length.
    Mutable(BytesMut),
    /// A mutable `Vec` (same role as [`MrBuffer::Mutable`]).
    Vec(Vec<u8>),
    /// An immutable buffer: only valid for registrations without
    /// [`Access::LOCAL_WRITE`](crate::Access::LOCAL_WRITE) /
    /// [`Access::REMOTE_WRITE`](crate::Access::REMOTE_WRITE) (gather sources,
    /// remote-read-only regions). Registering it never copies.
    Frozen(Bytes),
}

impl MrBuffer {
    /// Registered length in bytes.
    pub fn len(&self) -> usize {
        match self {
            MrBuffer::Mutable(b) => b.len(),
            MrBuffer::Vec(v) => v.len(),
            MrBuffer::Frozen(b) => b.len(),
        }
    }

    /// True if the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Read access to the bytes.
    pub fn as_slice(&self) -> &[u8] {
        match self {
            MrBuffer::Mutable(b) => b,
            MrBuffer::Vec(v) => v,
            MrBuffer::Frozen(b) => b,
        }
    }

    /// Write access to the bytes; `None` for [`MrBuffer::Frozen`].
    pub fn as_mut_slice(&mut self) -> Option<&mut [u8]> {
        match self {
            MrBuffer::Mutable(b) => Some(&mut b[..]),
            MrBuffer::Vec(v) => Some(&mut v[..]),
            MrBuffer::Frozen(_) => None,
        }
    }

    /// True if the buffer can be written.
    pub fn is_mutable(&self) -> bool {
        !matches!(self, MrBuffer::Frozen(_))
    }

    /// Checks that this buffer may be registered with `access`, by the rules
    /// every provider applies alike: remote write needs local write, write
    /// access needs a mutable buffer, and a region is addressed with 32-bit
    /// lengths (at most 4 GiB).
    pub fn check_registration(&self, access: Access) -> Result<(), VerbsError> {
        if !access.is_consistent() {
            return Err(VerbsError::InvalidAccess(
                "remote write requires local write",
            ));
        }
        if access.needs_mutable_buffer() && !self.is_mutable() {
            return Err(VerbsError::InvalidAccess(
                "write access on an immutable buffer",
            ));
        }
        if self.len() as u64 > u64::from(u32::MAX) {
            return Err(VerbsError::InvalidArgument("region larger than 4 GiB"));
        }
        Ok(())
    }

    /// Turns the buffer into immutable `Bytes` without copying.
    pub fn into_bytes(self) -> Bytes {
        match self {
            MrBuffer::Mutable(b) => b.freeze(),
            MrBuffer::Vec(v) => Bytes::from(v),
            MrBuffer::Frozen(b) => b,
        }
    }

    /// Returns the mutable buffer as `BytesMut` (zero-copy for `Mutable` and
    /// `Vec`); `Frozen` buffers are returned unchanged as the error.
    pub fn try_into_bytes_mut(self) -> Result<BytesMut, Bytes> {
        match self {
            MrBuffer::Mutable(b) => Ok(b),
            MrBuffer::Vec(v) => Ok(BytesMut::from(Bytes::from(v))),
            MrBuffer::Frozen(b) => Err(b),
        }
    }
}

impl From<BytesMut> for MrBuffer {
    fn from(b: BytesMut) -> Self {
        MrBuffer::Mutable(b)
    }
}

impl From<Vec<u8>> for MrBuffer {
    fn from(v: Vec<u8>) -> Self {
        MrBuffer::Vec(v)
    }
}

impl From<Bytes> for MrBuffer {
    fn from(b: Bytes) -> Self {
        MrBuffer::Frozen(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_keep_bytes() {
        let mut b = MrBuffer::from(BytesMut::zeroed(8));
        b.as_mut_slice().unwrap()[3] = 7;
        assert_eq!(b.len(), 8);
        let bytes = b.into_bytes();
        assert_eq!(bytes[3], 7);
        let mut f = MrBuffer::from(bytes);
        assert!(f.as_mut_slice().is_none());
        assert!(!f.is_mutable());
        assert_eq!(f.try_into_bytes_mut().unwrap_err().len(), 8);
        let v = MrBuffer::from(vec![1u8, 2, 3]);
        assert_eq!(v.try_into_bytes_mut().unwrap().as_ref(), &[1, 2, 3]);
    }
}
