//! Where objects are: a map from inode number to (parent inode number,
//! name), filled by LOOKUP, READDIR(PLUS), the creating procedures and
//! RENAME, and by a bounded walk of the export when a handle names an
//! inode the map does not know (after a server restart).
//!
//! A location is only ever a path of names from the export root, opened
//! one component at a time relative to directory descriptors with
//! `O_NOFOLLOW`: whatever the map says, what it finds is inside the export.
//! It is a hint, checked against the handle's inode number and birth time
//! before use.

use std::collections::HashMap;

/// Most locations kept; past this the map is cleared (objects are found
/// again by LOOKUP or a walk).
pub const MAX_LOCATIONS: usize = 1 << 20;

/// Deepest path the map resolves (longer chains are treated as unknown).
pub const MAX_DEPTH: usize = 4096;

/// A name of an object in its parent directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loc {
    /// The parent directory's inode number.
    pub parent: u64,
    /// The name in the parent.
    pub name: Box<[u8]>,
}

/// The location map.
#[derive(Debug)]
pub struct Locations {
    root: u64,
    map: HashMap<u64, Loc>,
}

impl Locations {
    /// An empty map for the export whose root has inode number `root`.
    pub fn new(root: u64) -> Self {
        Locations {
            root,
            map: HashMap::new(),
        }
    }

    /// Record that `ino` is `name` in directory `parent`.
    pub fn record(&mut self, ino: u64, parent: u64, name: &[u8]) {
        if ino == self.root {
            return;
        }
        if self.map.len() >= MAX_LOCATIONS && !self.map.contains_key(&ino) {
            self.map.clear();
        }
        match self.map.get_mut(&ino) {
            Some(l) if l.parent == parent && &*l.name == name => {}
            Some(l) => {
                l.parent = parent;
                l.name = name.into();
            }
            None => {
                self.map.insert(
                    ino,
                    Loc {
                        parent,
                        name: name.into(),
                    },
                );
            }
        }
    }

    /// Forget `ino`'s location.
    pub fn forget(&mut self, ino: u64) {
        self.map.remove(&ino);
    }

    /// Forget `ino`'s location if it is `name` in `parent`.
    pub fn forget_name(&mut self, ino: u64, parent: u64, name: &[u8]) {
        if self
            .map
            .get(&ino)
            .is_some_and(|l| l.parent == parent && &*l.name == name)
        {
            self.map.remove(&ino);
        }
    }

    /// The names from the root down to `ino` (empty for the root), with
    /// the inode number each one should have; `None` when unknown, too
    /// deep, or looping.
    pub fn path_of(&self, ino: u64) -> Option<Vec<(u64, Box<[u8]>)>> {
        let mut out = Vec::new();
        let mut cur = ino;
        while cur != self.root {
            if out.len() >= MAX_DEPTH {
                return None;
            }
            let l = self.map.get(&cur)?;
            out.push((cur, l.name.clone()));
            cur = l.parent;
        }
        out.reverse();
        Some(out)
    }

    /// Number of locations known.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether none is known.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_loops() {
        let mut l = Locations::new(2);
        l.record(10, 2, b"a");
        l.record(11, 10, b"b");
        let p = l.path_of(11).unwrap();
        assert_eq!(p, vec![(10, b"a"[..].into()), (11, b"b"[..].into())]);
        assert_eq!(l.path_of(2).unwrap(), vec![]);
        assert!(l.path_of(99).is_none());
        // A loop (from a stale hint) ends instead of spinning.
        l.record(20, 21, b"x");
        l.record(21, 20, b"y");
        assert!(l.path_of(20).is_none());
        l.forget_name(11, 10, b"other");
        assert!(l.path_of(11).is_some());
        l.forget_name(11, 10, b"b");
        assert!(l.path_of(11).is_none());
    }
}
