//! Work completions.

/// Completion status (the subset of `ibv_wc_status` an RDMA transport acts on).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WcStatus {
    /// The operation completed.
    Success,
    /// Local length error: an incoming Send was larger than the receive
    /// buffer, or an SGL was longer than the device allows.
    LocalLengthError,
    /// Local QP operation error (internal consistency, e.g. bad WR).
    LocalQpOperationError,
    /// Local protection error: an SGE names an invalid lkey, exceeds its
    /// region, or lacks local-write access.
    LocalProtectionError,
    /// The work request was flushed because the QP entered the error state.
    WrFlushError,
    /// The peer reported a protection error (bad rkey, bounds, access).
    RemoteAccessError,
    /// The peer reported an operation error (e.g. no posted receive).
    RemoteOperationError,
    /// The peer reported an invalid request (bad opcode, too long, …).
    RemoteInvalidRequest,
    /// The transport failed (connection lost, CRC error, timeout).
    TransportError,
    /// Any other fatal error.
    FatalError,
}

impl WcStatus {
    /// True for [`WcStatus::Success`].
    pub fn is_success(self) -> bool {
        self == WcStatus::Success
    }
}

/// What a completion is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WcOpcode {
    /// A Send (or Send with Invalidate) on the send queue.
    Send,
    /// An RDMA Write.
    RdmaWrite,
    /// An RDMA Read.
    RdmaRead,
    /// A local invalidate.
    LocalInvalidate,
    /// A fast registration.
    FastReg,
    /// A receive (an incoming Send landed in a posted buffer).
    Recv,
}

/// One work completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkCompletion {
    /// The consumer's id from the work request.
    pub wr_id: u64,
    /// Outcome.
    pub status: WcStatus,
    /// Operation type. For flushed receives this is [`WcOpcode::Recv`].
    pub opcode: WcOpcode,
    /// Bytes received (receives) or read (RDMA Read); 0 otherwise.
    pub byte_len: u32,
    /// For a receive: the local rkey the peer invalidated with Send with
    /// Invalidate (already invalid when this completion is seen).
    pub invalidated_rkey: Option<u32>,
    /// For a receive: the Send carried the solicited-event bit.
    pub solicited: bool,
    /// The QP number the work request was posted on.
    pub qp_num: u32,
}

impl WorkCompletion {
    /// True if the status is success.
    pub fn is_success(&self) -> bool {
        self.status.is_success()
    }
}
