//! Counters of one connection engine, in the spirit of the kernel's
//! xprtrdma and svcrdma statistics (plain integers: the engine is one
//! `&mut` state machine).

/// Counters of one [`Connection`](crate::Connection), over all of its
/// connection generations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Calls this side sent (first transmissions and retransmissions).
    pub calls_sent: u64,
    /// Of which retransmissions after a reconnect.
    pub retransmits: u64,
    /// Replies (RDMA_MSG, RDMA_NOMSG) matched to one of this side's calls.
    pub replies_received: u64,
    /// RDMA_ERROR replies matched to one of this side's calls.
    pub rdma_errors_received: u64,
    /// Received replies discarded: unknown XID, malformed, mismatched
    /// chunks (RFC 8166 §4.5).
    pub bad_replies: u64,
    /// Replies that came after their call timed out (their credit returns).
    pub late_replies: u64,
    /// Calls that reached the head of the queue and found every credit in
    /// use (each call counted once).
    pub credit_waits: u64,
    /// Calls that timed out.
    pub timeouts: u64,
    /// Calls received and admitted.
    pub calls_received: u64,
    /// Replies (including RDMA_ERROR and GARBAGE_ARGS) this side sent.
    pub replies_sent: u64,
    /// Received calls discarded without a reply (RFC 8166 §4.5).
    pub calls_discarded: u64,
    /// Calls received beyond the grant (the connection is closed).
    pub credit_overruns: u64,
    /// Reverse-direction calls this side sent (passive side).
    pub reverse_calls_sent: u64,
    /// Reverse-direction calls this side received (active side).
    pub reverse_calls_received: u64,
    /// Reverse-direction messages dropped because reverse-direction
    /// operation is off (RFC 8167 §6).
    pub reverse_refused: u64,
    /// Receives from an earlier connection generation, dropped.
    pub stale_receives: u64,
    /// Connections lost.
    pub connections_lost: u64,
    /// Highest number of this side's calls outstanding at once.
    pub max_outstanding: u64,
    /// Highest number of received calls in process at once.
    pub max_in_process: u64,
}
