//! A small least-recently-used map (for open file descriptors and negative
//! handle results). Eviction scans the map: meant for a few thousand
//! entries at most.

use std::collections::HashMap;
use std::hash::Hash;

/// A bounded map that drops its least recently used entry when full.
#[derive(Debug)]
pub struct Lru<K, V> {
    map: HashMap<K, (V, u64)>,
    cap: usize,
    tick: u64,
}

impl<K: Hash + Eq + Clone, V: Clone> Lru<K, V> {
    /// An empty map holding at most `cap` (≥ 1) entries.
    pub fn new(cap: usize) -> Self {
        Lru {
            map: HashMap::new(),
            cap: cap.max(1),
            tick: 0,
        }
    }

    /// The value for `k`, marking it most recently used.
    pub fn get(&mut self, k: &K) -> Option<V> {
        self.tick += 1;
        let t = self.tick;
        self.map.get_mut(k).map(|(v, used)| {
            *used = t;
            v.clone()
        })
    }

    /// Insert (or replace) `k`; returns the entry evicted to make room.
    pub fn insert(&mut self, k: K, v: V) -> Option<(K, V)> {
        self.tick += 1;
        let mut evicted = None;
        if !self.map.contains_key(&k) && self.map.len() >= self.cap {
            if let Some(old) = self
                .map
                .iter()
                .min_by_key(|(_, (_, t))| *t)
                .map(|(k, _)| k.clone())
            {
                evicted = self.map.remove(&old).map(|(v, _)| (old, v));
            }
        }
        self.map.insert(k, (v, self.tick));
        evicted
    }

    /// Remove `k`.
    pub fn remove(&mut self, k: &K) -> Option<V> {
        self.map.remove(k).map(|(v, _)| v)
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// All values (any order).
    pub fn values(&self) -> Vec<V> {
        self.map.values().map(|(v, _)| v.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_least_recent() {
        let mut l = Lru::new(2);
        l.insert(1, "a");
        l.insert(2, "b");
        assert_eq!(l.get(&1), Some("a"));
        assert_eq!(l.insert(3, "c"), Some((2, "b")));
        assert_eq!(l.get(&2), None);
        assert_eq!(l.len(), 2);
        assert_eq!(l.remove(&1), Some("a"));
    }
}
