//! File handles (RFC 1813 §2.5 `nfs_fh3`, at most 64 bytes).
//!
//! A handle is built only from facts that survive a server restart, so a
//! handle stays valid for as long as its object exists:
//!
//! | bytes | field |
//! |---|---|
//! | 0 | format version ([`FH_VERSION`]) |
//! | 1..4 | zero |
//! | 4..12 | export identity ([`crate::Export`]: derived from the export root's inode number and birth time) |
//! | 12..20 | inode number |
//! | 20..28 | birth time, seconds (two's complement) |
//! | 28..32 | birth time, nanoseconds |
//!
//! The birth time (`statx` `STX_BTIME`) tells a reused inode number from the
//! object that had it before; on a file system without birth times it is
//! zero and a reused inode number is not told apart (documented limitation).
//! A handle carries no path and no in-memory id: the server locates the
//! object by its inode number (see [`crate::locate`]) and checks the birth
//! time before using it.

/// The version byte of the handles this server makes.
pub const FH_VERSION: u8 = 1;

/// Length of every handle this server makes.
pub const FH_LEN: usize = 32;

/// What identifies one object of the file system across restarts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileId {
    /// Inode number (also the NFS `fileid3`).
    pub ino: u64,
    /// Birth time, seconds.
    pub btime_sec: i64,
    /// Birth time, nanoseconds (zero when the file system has none).
    pub btime_nsec: u32,
}

/// Why bytes are not a handle of this export.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FhError {
    /// Wrong length, version or reserved bytes: NFS3ERR_BADHANDLE.
    #[error("not a handle of this server")]
    Malformed,
    /// Well formed, but of another export: NFS3ERR_STALE.
    #[error("handle of another export")]
    OtherExport,
}

/// A decoded handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileHandle {
    /// Export identity.
    pub export: u64,
    /// The object.
    pub id: FileId,
}

impl FileHandle {
    /// The wire bytes.
    pub fn encode(&self) -> [u8; FH_LEN] {
        let mut b = [0u8; FH_LEN];
        b[0] = FH_VERSION;
        b[4..12].copy_from_slice(&self.export.to_be_bytes());
        b[12..20].copy_from_slice(&self.id.ino.to_be_bytes());
        b[20..28].copy_from_slice(&self.id.btime_sec.to_be_bytes());
        b[28..32].copy_from_slice(&self.id.btime_nsec.to_be_bytes());
        b
    }

    /// Parse handle bytes received from a client, for the export `export`.
    pub fn decode(b: &[u8], export: u64) -> Result<FileHandle, FhError> {
        if b.len() != FH_LEN || b[0] != FH_VERSION || b[1..4] != [0, 0, 0] {
            return Err(FhError::Malformed);
        }
        let u64_at = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[i..i + 8]);
            u64::from_be_bytes(w)
        };
        let mut n = [0u8; 4];
        n.copy_from_slice(&b[28..32]);
        let btime_nsec = u32::from_be_bytes(n);
        if btime_nsec >= 1_000_000_000 {
            return Err(FhError::Malformed);
        }
        let fh = FileHandle {
            export: u64_at(4),
            id: FileId {
                ino: u64_at(12),
                btime_sec: u64_at(20) as i64,
                btime_nsec,
            },
        };
        if fh.export != export {
            return Err(FhError::OtherExport);
        }
        Ok(fh)
    }
}

/// FNV-1a 64-bit, for the export identity and cookie verifiers (not a
/// security measure: a handle grants nothing by itself, every use is
/// checked against the live object).
pub(crate) fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for &b in *p {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_trip() {
        let fh = FileHandle {
            export: 7,
            id: FileId {
                ino: 12,
                btime_sec: -3,
                btime_nsec: 999_999_999,
            },
        };
        let b = fh.encode();
        assert!(b.len() <= 64);
        assert_eq!(FileHandle::decode(&b, 7), Ok(fh));
        assert_eq!(FileHandle::decode(&b, 8), Err(FhError::OtherExport));
        assert_eq!(FileHandle::decode(&b[..31], 7), Err(FhError::Malformed));
        let mut bad = b;
        bad[0] = 2;
        assert_eq!(FileHandle::decode(&bad, 7), Err(FhError::Malformed));
    }

    proptest! {
        #[test]
        fn decode_never_panics(b in proptest::collection::vec(any::<u8>(), 0..80), e in any::<u64>()) {
            if let Ok(fh) = FileHandle::decode(&b, e) {
                prop_assert_eq!(&fh.encode()[..], &b[..]);
            }
        }
    }
}
