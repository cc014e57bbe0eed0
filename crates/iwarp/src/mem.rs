//! Memory registrations and the STag table (RFC 5040 §6, RFC 5042 §5).
//!
//! An STag is `index << 8 | key`: the 24-bit index is unique per device and
//! handed out cyclically from a random starting point (as Linux siw does),
//! so a new region gets an index no recent region had (an STag is not
//! reused until 2^24 regions later, which keeps a peer or a wire analyser
//! from confusing a new registration with an old one); the 8-bit key is
//! random per registration, so STags are unpredictable. Every region
//! belongs to one protection domain.
//!
//! A region owns its buffer ([`MrBuffer`]) inside a mutex. Every placement
//! and every read of a region locks it, re-checks validity, key, PD, access
//! and bounds (RFC 5040 §8 / RFC 5042 §5: checks at the time of access), and
//! only then touches the bytes, so invalidation (local or remote) and
//! deregistration are atomic with respect to placement.

use rand::Rng;
use rdma_verbs::idhash::IdMap;
use rdma_verbs::{Access, MrBuffer};
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

/// Why a memory access was refused (mapped to a Terminate cause or a local
/// completion status by the caller).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemError {
    /// No such STag, wrong key, invalidated or deregistered.
    InvalidStag,
    /// The STag belongs to another protection domain.
    NotAssociated,
    /// The region does not grant the needed right.
    Access,
    /// The range is outside the region.
    Bounds,
    /// `to + len` overflows 64 bits.
    ToWrap,
}

/// Mutable state of one region.
#[derive(Debug)]
pub struct RegionState {
    /// Key byte of the current STag.
    pub key: u8,
    /// Valid (registered and not invalidated).
    pub valid: bool,
    /// Granted rights.
    pub access: Access,
    /// The owned buffer, if bound.
    pub buffer: Option<MrBuffer>,
}

/// One memory region (a row of the STag table).
#[derive(Debug)]
pub struct Region {
    /// Protection domain id.
    pub pd: u32,
    /// 24-bit STag index.
    pub index: u32,
    /// Largest buffer this region accepts (fast registration).
    pub max_len: usize,
    /// A copy of the state's key byte, written only under the state lock
    /// (see [`Region::set_key`]), so that [`Region::stag`] never waits for
    /// the lock a placement holds across a socket read.
    key: AtomicU8,
    state: Mutex<RegionState>,
}

impl Region {
    /// Locks the state (a poisoned lock is recovered: the state is plain data).
    pub fn lock(&self) -> MutexGuard<'_, RegionState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// STag for a key byte.
    pub fn stag_for(&self, key: u8) -> u32 {
        (self.index << 8) | u32::from(key)
    }

    /// The current STag, without taking the lock (what `lkey`/`rkey`
    /// report; checks of a peer's STag still compare under the lock).
    pub fn stag(&self) -> u32 {
        self.stag_for(self.key.load(Ordering::Acquire))
    }

    /// Sets the key byte; `st` is this region's locked state.
    pub fn set_key(&self, st: &mut RegionState, key: u8) {
        st.key = key;
        self.key.store(key, Ordering::Release);
    }
}

impl RegionState {
    /// Checks an access of `len` bytes at tagged offset `to` through `stag`
    /// from protection domain `pd` needing `need`; returns the byte range.
    /// Check order follows RFC 5040 §8 / siw: valid, PD, rights, wrap, bounds.
    pub fn check(
        &self,
        region: &Region,
        stag: u32,
        pd: u32,
        need: Access,
        to: u64,
        len: u64,
    ) -> Result<core::ops::Range<usize>, MemError> {
        if !self.valid || region.stag_for(self.key) != stag {
            return Err(MemError::InvalidStag);
        }
        let Some(buf) = self.buffer.as_ref() else {
            return Err(MemError::InvalidStag);
        };
        if region.pd != pd {
            return Err(MemError::NotAssociated);
        }
        if !self.access.contains(need) {
            return Err(MemError::Access);
        }
        let end = to.checked_add(len).ok_or(MemError::ToWrap)?;
        if end > buf.len() as u64 {
            return Err(MemError::Bounds);
        }
        Ok(to as usize..end as usize)
    }
}

/// The device-wide STag table.
#[derive(Debug)]
pub struct StagTable {
    /// Keyed by index with [`IdMap`]'s one-multiplication hash: a peer can
    /// look indices up but never choose the ones stored.
    map: RwLock<IdMap<u32, Arc<Region>>>,
    /// Where the cyclic search for the next free index starts.
    cursor: AtomicU32,
}

impl Default for StagTable {
    fn default() -> Self {
        StagTable {
            map: RwLock::new(IdMap::default()),
            cursor: AtomicU32::new(rand::rng().random()),
        }
    }
}

impl StagTable {
    /// Inserts a new region with the next free index (cyclic from a random
    /// start) and a random key.
    pub fn insert(
        &self,
        pd: u32,
        max_len: usize,
        access: Access,
        buffer: Option<MrBuffer>,
    ) -> Arc<Region> {
        let mut rng = rand::rng();
        let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
        loop {
            let index = self.cursor.fetch_add(1, Ordering::Relaxed) & 0x00FF_FFFF;
            if index == 0 || map.contains_key(&index) {
                continue;
            }
            let valid = buffer.is_some();
            let key: u8 = rng.random();
            let region = Arc::new(Region {
                pd,
                index,
                max_len,
                key: AtomicU8::new(key),
                state: Mutex::new(RegionState {
                    key,
                    valid,
                    access,
                    buffer,
                }),
            });
            map.insert(index, region.clone());
            return region;
        }
    }

    /// Looks a region up by STag (index bits only; the key is checked
    /// under the region's lock).
    pub fn lookup(&self, stag: u32) -> Option<Arc<Region>> {
        let map = self.map.read().unwrap_or_else(|e| e.into_inner());
        map.get(&(stag >> 8)).cloned()
    }

    /// Removes a region.
    pub fn remove(&self, index: u32) {
        let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
        map.remove(&index);
    }

    /// Number of regions (tests, diagnostics).
    pub fn len(&self) -> usize {
        self.map.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// True if empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Invalidates `stag` if it names a valid region of `pd` that may be
    /// invalidated: remote invalidation requires a remote right (RFC 5040
    /// §6.2: the STag must be associated with the stream). Returns false if
    /// the STag cannot be invalidated.
    pub fn invalidate(&self, stag: u32, pd: u32, remote: bool) -> bool {
        let Some(region) = self.lookup(stag) else {
            return false;
        };
        let mut st = region.lock();
        if !st.valid || region.stag_for(st.key) != stag || region.pd != pd {
            return false;
        }
        if remote
            && !(st.access.contains(Access::REMOTE_READ)
                || st.access.contains(Access::REMOTE_WRITE))
        {
            return false;
        }
        st.valid = false;
        true
    }
}

/// Draws a new random key byte different from `old`.
pub fn next_key(old: u8) -> u8 {
    let mut rng = rand::rng();
    loop {
        let k: u8 = rng.random();
        if k != old {
            return k;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;

    #[test]
    fn checks_in_order() {
        let t = StagTable::default();
        let r = t.insert(
            1,
            16,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE,
            Some(MrBuffer::from(BytesMut::zeroed(16))),
        );
        let st = r.lock();
        let stag = r.stag_for(st.key);
        assert_eq!(
            st.check(&r, stag, 1, Access::REMOTE_WRITE, 0, 16),
            Ok(0..16)
        );
        assert_eq!(
            st.check(&r, stag ^ 1, 1, Access::REMOTE_WRITE, 0, 1),
            Err(MemError::InvalidStag)
        );
        assert_eq!(
            st.check(&r, stag, 2, Access::REMOTE_WRITE, 0, 1),
            Err(MemError::NotAssociated)
        );
        assert_eq!(
            st.check(&r, stag, 1, Access::REMOTE_READ, 0, 1),
            Err(MemError::Access)
        );
        assert_eq!(
            st.check(&r, stag, 1, Access::REMOTE_WRITE, 8, 9),
            Err(MemError::Bounds)
        );
        assert_eq!(
            st.check(&r, stag, 1, Access::REMOTE_WRITE, u64::MAX, 2),
            Err(MemError::ToWrap)
        );
        drop(st);
        assert!(!t.invalidate(stag, 2, true));
        assert!(t.invalidate(stag, 1, true));
        assert!(!t.invalidate(stag, 1, true));
        let st = r.lock();
        assert_eq!(
            st.check(&r, stag, 1, Access::REMOTE_WRITE, 0, 1),
            Err(MemError::InvalidStag)
        );
    }

    #[test]
    fn stags_are_distinct_and_nonzero() {
        let t = StagTable::default();
        let mut seen = std::collections::HashSet::new();
        for _ in 0..1000 {
            let r = t.insert(1, 0, Access::NONE, None);
            assert_ne!(r.index, 0);
            assert!(seen.insert(r.index));
        }
        assert_eq!(t.len(), 1000);
    }

    #[test]
    fn an_index_is_not_reused_soon_after_its_region_is_gone() {
        // Register and drop one region at a time (the pattern of a
        // registration per call): every index differs from all before it.
        let t = StagTable::default();
        let mut seen = std::collections::HashSet::new();
        for _ in 0..20_000 {
            let r = t.insert(1, 0, Access::NONE, None);
            assert!(seen.insert(r.index), "index {:#x} reused", r.index);
            t.remove(r.index);
        }
        assert!(t.is_empty());
    }

    #[test]
    fn cursor_wraps_past_zero_and_skips_live_indices() {
        let t = StagTable::default();
        let live = t.insert(1, 0, Access::NONE, None);
        t.cursor
            .store(live.index.wrapping_sub(1) | 0xFF00_0000, Ordering::Relaxed);
        let a = t.insert(1, 0, Access::NONE, None);
        let b = t.insert(1, 0, Access::NONE, None);
        assert_ne!(a.index, live.index);
        assert_ne!(b.index, live.index);
        assert_ne!(a.index, 0);
        assert_ne!(b.index, 0);
    }

    #[test]
    fn local_only_region_cannot_be_remotely_invalidated() {
        let t = StagTable::default();
        let r = t.insert(
            1,
            4,
            Access::LOCAL_WRITE,
            Some(MrBuffer::from(vec![0u8; 4])),
        );
        let stag = r.stag_for(r.lock().key);
        assert!(!t.invalidate(stag, 1, true));
        assert!(t.invalidate(stag, 1, false));
    }
}
