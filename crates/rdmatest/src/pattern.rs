//! The RDMATEST data pattern: `data[i] = (seed + i) mod 256`.

use bytes::{Bytes, BytesMut};

/// One full period of the pattern for seed 0, twice (so any 256-byte window
/// starting in the first period is contiguous).
fn period() -> [u8; 512] {
    let mut p = [0u8; 512];
    for (i, b) in p.iter_mut().enumerate() {
        *b = i as u8;
    }
    p
}

/// The pattern byte at index `i` for `seed`.
#[inline]
pub fn pattern_byte(seed: u32, i: usize) -> u8 {
    (seed as u8).wrapping_add(i as u8)
}

/// Fill `buf` with the pattern for `seed`.
pub fn fill_pattern(seed: u32, buf: &mut [u8]) {
    let p = period();
    let start = (seed & 0xFF) as usize;
    // Every chunk starts at an index that is a multiple of 256, so each
    // starts with the same byte.
    for chunk in buf.chunks_mut(256) {
        chunk.copy_from_slice(&p[start..start + chunk.len()]);
    }
}

/// A new buffer of `len` pattern bytes for `seed`.
pub fn pattern(seed: u32, len: usize) -> Bytes {
    let mut b = BytesMut::zeroed(len);
    fill_pattern(seed, &mut b);
    b.freeze()
}

/// Check `data` against the pattern for `seed`; `Err(offset)` of the first
/// wrong byte.
pub fn verify_pattern(seed: u32, data: &[u8]) -> Result<(), usize> {
    let p = period();
    let start = (seed & 0xFF) as usize;
    for (k, chunk) in data.chunks(256).enumerate() {
        let want = &p[start..start + chunk.len()];
        if chunk != want {
            let i = chunk
                .iter()
                .zip(want)
                .position(|(a, b)| a != b)
                .unwrap_or(0);
            return Err(k * 256 + i);
        }
    }
    Ok(())
}

/// A shared, read-only source of pattern data: slices of one buffer, so a
/// server answers GET without generating data per call (zero-copy).
#[derive(Debug, Clone)]
pub struct PatternSource {
    buf: Bytes,
}

impl PatternSource {
    /// A source able to produce up to `max_len` bytes for any seed
    /// (allocates `max_len + 256` bytes).
    pub fn new(max_len: usize) -> Self {
        PatternSource {
            buf: pattern(0, max_len.saturating_add(256)),
        }
    }

    /// The longest slice available.
    pub fn max_len(&self) -> usize {
        self.buf.len().saturating_sub(256)
    }

    /// `len` pattern bytes for `seed`, zero-copy; `None` if `len` exceeds
    /// [`max_len`](Self::max_len).
    pub fn get(&self, seed: u32, len: usize) -> Option<Bytes> {
        if len > self.max_len() {
            return None;
        }
        let start = (seed & 0xFF) as usize;
        Some(self.buf.slice(start..start + len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_matches_definition() {
        for seed in [0u32, 1, 200, 255, 256, 0xFFFF_FFFF] {
            let p = pattern(seed, 1000);
            for (i, b) in p.iter().enumerate() {
                assert_eq!(*b as u32, (seed.wrapping_add(i as u32)) % 256);
            }
            verify_pattern(seed, &p).unwrap();
        }
    }

    #[test]
    fn verify_reports_first_difference() {
        let mut p = pattern(7, 700).to_vec();
        p[513] ^= 1;
        assert_eq!(verify_pattern(7, &p), Err(513));
        assert_eq!(verify_pattern(8, &pattern(7, 10)), Err(0));
    }

    #[test]
    fn source_slices_are_patterns() {
        let s = PatternSource::new(4096);
        for seed in [0, 3, 255, 1000] {
            let b = s.get(seed, 4096).unwrap();
            verify_pattern(seed, &b).unwrap();
        }
        assert!(s.get(0, 4097).is_none());
    }
}
