//! Memory access rights granted by a registration.

use core::fmt;
use core::ops::{BitOr, BitOrAssign};

/// Access rights of a memory region (the `IBV_ACCESS_*` flags that matter
/// to RDMA over iWARP/RoCE/IB).
///
/// Local read is always granted. A region that a peer may write, or that a
/// local RDMA Read/receive places into, needs [`Access::LOCAL_WRITE`]; remote
/// write additionally requires local write (as in verbs).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Access(u8);

impl Access {
    /// No rights beyond local read (a gather source for Send / RDMA Write).
    pub const NONE: Access = Access(0);
    /// The local QP may place data here (receive buffers, RDMA Read sinks).
    pub const LOCAL_WRITE: Access = Access(0x1);
    /// A peer may RDMA Write here.
    pub const REMOTE_WRITE: Access = Access(0x2);
    /// A peer may RDMA Read from here.
    pub const REMOTE_READ: Access = Access(0x4);

    /// The raw bits.
    pub const fn bits(self) -> u8 {
        self.0
    }

    /// True if every right in `other` is also in `self`.
    pub const fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }

    /// True if the region may be written by anyone (locally or remotely).
    pub const fn needs_mutable_buffer(self) -> bool {
        self.0 & (Self::LOCAL_WRITE.0 | Self::REMOTE_WRITE.0) != 0
    }

    /// Checks the verbs rule "remote write requires local write".
    pub const fn is_consistent(self) -> bool {
        !self.contains(Self::REMOTE_WRITE) || self.contains(Self::LOCAL_WRITE)
    }
}

impl BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        Access(self.0 | rhs.0)
    }
}

impl BitOrAssign for Access {
    fn bitor_assign(&mut self, rhs: Access) {
        self.0 |= rhs.0;
    }
}

impl fmt::Debug for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if self.contains(Self::LOCAL_WRITE) {
            parts.push("LOCAL_WRITE");
        }
        if self.contains(Self::REMOTE_WRITE) {
            parts.push("REMOTE_WRITE");
        }
        if self.contains(Self::REMOTE_READ) {
            parts.push("REMOTE_READ");
        }
        if parts.is_empty() {
            parts.push("NONE");
        }
        write!(f, "Access({})", parts.join("|"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_combine_and_check() {
        let a = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
        assert!(a.contains(Access::REMOTE_WRITE));
        assert!(!a.contains(Access::REMOTE_READ));
        assert!(a.is_consistent());
        assert!(!Access::REMOTE_WRITE.is_consistent());
        assert!(!Access::REMOTE_READ.needs_mutable_buffer());
        assert_eq!(format!("{:?}", Access::NONE), "Access(NONE)");
    }
}
