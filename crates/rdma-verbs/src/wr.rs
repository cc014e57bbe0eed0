//! Work requests: what a consumer posts on a queue pair.

use crate::access::Access;

/// One scatter/gather element: `length` bytes at byte `offset` of the local
/// memory region named by `lkey`.
///
/// Offsets are zero-based within the region (the region's first byte is
/// offset 0), like zero-based-TO registrations in verbs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sge {
    /// Local key of the region.
    pub lkey: u32,
    /// Byte offset within the region.
    pub offset: u64,
    /// Number of bytes.
    pub length: u32,
}

impl Sge {
    /// Shorthand constructor.
    pub const fn new(lkey: u32, offset: u64, length: u32) -> Self {
        Sge {
            lkey,
            offset,
            length,
        }
    }
}

/// A remote buffer advertised by the peer: STag/rkey and tagged offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteAddr {
    /// The peer's rkey (iWARP STag).
    pub rkey: u32,
    /// Tagged offset (zero-based within the peer's region).
    pub offset: u64,
}

/// The operation of a send-queue work request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SendOp {
    /// Send: the gathered bytes land in the peer's next posted receive.
    Send {
        /// Set the solicited-event bit.
        solicited: bool,
    },
    /// Send with Invalidate: as Send, and the peer invalidates
    /// `invalidate_rkey` before delivering it.
    SendWithInvalidate {
        /// The peer's rkey to invalidate.
        invalidate_rkey: u32,
        /// Set the solicited-event bit.
        solicited: bool,
    },
    /// RDMA Write of the gathered bytes to `remote`.
    RdmaWrite {
        /// Where to write.
        remote: RemoteAddr,
    },
    /// RDMA Read of `sum(sgl lengths)` bytes from `remote` into the SGL
    /// (whose regions need [`Access::LOCAL_WRITE`]).
    RdmaRead {
        /// Where to read from.
        remote: RemoteAddr,
    },
    /// Invalidate one of our own registrations (ordered in the send queue).
    LocalInvalidate {
        /// The local rkey/lkey to invalidate.
        rkey: u32,
    },
}

impl SendOp {
    /// True for operations that move data (use the SGL).
    pub fn uses_sgl(&self) -> bool {
        !matches!(self, SendOp::LocalInvalidate { .. })
    }
}

/// A send-queue work request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendWr {
    /// Returned in the completion.
    pub wr_id: u64,
    /// What to do.
    pub op: SendOp,
    /// Local gather list (scatter list for an RDMA Read).
    pub sgl: Vec<Sge>,
    /// Generate a completion on success (failures always complete).
    pub signaled: bool,
    /// Wait for all earlier RDMA Reads to complete before starting (read fence).
    pub fence: bool,
}

impl SendWr {
    /// A signalled Send.
    pub fn send(wr_id: u64, sgl: Vec<Sge>) -> Self {
        Self::new(wr_id, SendOp::Send { solicited: false }, sgl)
    }

    /// A signalled Send with Invalidate.
    pub fn send_with_invalidate(wr_id: u64, sgl: Vec<Sge>, invalidate_rkey: u32) -> Self {
        Self::new(
            wr_id,
            SendOp::SendWithInvalidate {
                invalidate_rkey,
                solicited: false,
            },
            sgl,
        )
    }

    /// A signalled RDMA Write.
    pub fn write(wr_id: u64, sgl: Vec<Sge>, remote: RemoteAddr) -> Self {
        Self::new(wr_id, SendOp::RdmaWrite { remote }, sgl)
    }

    /// A signalled RDMA Read.
    pub fn read(wr_id: u64, sgl: Vec<Sge>, remote: RemoteAddr) -> Self {
        Self::new(wr_id, SendOp::RdmaRead { remote }, sgl)
    }

    /// A signalled local invalidate.
    pub fn local_invalidate(wr_id: u64, rkey: u32) -> Self {
        Self::new(wr_id, SendOp::LocalInvalidate { rkey }, Vec::new())
    }

    /// A signalled work request with no fence.
    pub fn new(wr_id: u64, op: SendOp, sgl: Vec<Sge>) -> Self {
        SendWr {
            wr_id,
            op,
            sgl,
            signaled: true,
            fence: false,
        }
    }

    /// Builder: set whether a successful completion is generated.
    pub fn signaled(mut self, signaled: bool) -> Self {
        self.signaled = signaled;
        self
    }

    /// Builder: set the read fence.
    pub fn fenced(mut self, fence: bool) -> Self {
        self.fence = fence;
        self
    }

    /// Total bytes of the SGL (saturating).
    pub fn sgl_len(&self) -> u64 {
        self.sgl.iter().map(|s| u64::from(s.length)).sum()
    }
}

/// A fast-registration work request (FRWR): bind a buffer to an allocated
/// region with new rights and a new key, ordered in the send queue.
#[derive(Debug)]
pub struct FastRegWr {
    /// Returned in the completion.
    pub wr_id: u64,
    /// The buffer to bind (moved into the region).
    pub buffer: crate::MrBuffer,
    /// Rights to grant.
    pub access: Access,
    /// Generate a completion on success.
    pub signaled: bool,
}

/// A receive-queue work request: one incoming Send is scattered over `sgl`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecvWr {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Scatter list (regions need [`Access::LOCAL_WRITE`]).
    pub sgl: Vec<Sge>,
}

impl RecvWr {
    /// Constructor.
    pub fn new(wr_id: u64, sgl: Vec<Sge>) -> Self {
        RecvWr { wr_id, sgl }
    }

    /// Total bytes of the SGL (saturating).
    pub fn sgl_len(&self) -> u64 {
        self.sgl.iter().map(|s| u64::from(s.length)).sum()
    }
}
