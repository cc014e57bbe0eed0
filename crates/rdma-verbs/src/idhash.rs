//! A hasher for maps keyed by identifiers the local side hands out itself:
//! work request ids, STag indices, RPC transaction ids.
//!
//! One multiplication (Fibonacci hashing) per key instead of SipHash: these
//! maps are looked up on every completion and every message. Flooding is not
//! a concern, because a peer can only *look up* keys (an xid in a reply, an
//! STag in a segment) but never chooses the keys that are stored: those are
//! handed out by a counter or a cyclic allocator on this side.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Multiplicative hasher for integer identifiers (see the module docs).
///
/// The low bits of a product depend only on the low bits of the key, so the
/// result is rotated to bring the well-mixed middle bits down: `hashbrown`
/// picks the bucket from the low bits and its control byte from the top
/// ones, and both then depend on every key bit (keys with a common stride,
/// such as multiples of a power of two, still spread).
#[derive(Debug, Default, Clone, Copy)]
pub struct IdHasher(u64);

/// 2^64 / φ, the Fibonacci hashing multiplier.
const K: u64 = 0x9E37_79B9_7F4A_7C15;

impl Hasher for IdHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0.rotate_left(26)
    }

    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(K);
        }
    }

    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.write_u64(u64::from(i));
    }

    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0 ^ i).wrapping_mul(K);
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }
}

/// Builds [`IdHasher`]s.
pub type BuildIdHasher = BuildHasherDefault<IdHasher>;

/// A `HashMap` keyed by locally assigned identifiers.
pub type IdMap<K, V> = HashMap<K, V, BuildIdHasher>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn consecutive_ids_spread_over_the_top_bits() {
        // hashbrown's control byte comes from the top 7 bits: consecutive
        // ids must not all share it.
        let b = BuildIdHasher::default();
        let tops: std::collections::HashSet<u64> =
            (0u64..64).map(|i| b.hash_one(1000 + i) >> 57).collect();
        assert!(
            tops.len() > 32,
            "only {} distinct control bytes",
            tops.len()
        );
    }

    #[test]
    fn strided_ids_spread_over_the_low_bits() {
        // The bucket comes from the low bits: multiples of 4096 must not
        // all land in one bucket of a 1024-bucket table.
        let b = BuildIdHasher::default();
        let buckets: std::collections::HashSet<u64> =
            (0u64..256).map(|i| b.hash_one(i << 12) & 1023).collect();
        assert!(buckets.len() > 128, "only {} buckets", buckets.len());
    }

    #[test]
    fn integer_widths_hash_alike_and_maps_work() {
        let b = BuildIdHasher::default();
        assert_eq!(b.hash_one(7u32), b.hash_one(7u64));
        let mut m: IdMap<u64, u32> = IdMap::default();
        for i in 0..10_000u64 {
            m.insert(i * 3, i as u32);
        }
        for i in 0..10_000u64 {
            assert_eq!(m.get(&(i * 3)), Some(&(i as u32)));
            assert_eq!(m.get(&(i * 3 + 1)), None);
        }
        // Byte-wise input (e.g. a tuple or a string key) still hashes.
        let mut h = IdHasher::default();
        h.write(b"abc");
        assert_ne!(h.finish(), 0);
    }
}
