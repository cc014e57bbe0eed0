//! Transport configuration with documented defaults.

use std::time::Duration;

/// Reconnect policy of a requester (exponential backoff).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// Delay before the first reconnect attempt (default 10 ms).
    pub initial: Duration,
    /// Upper bound of the delay; each failed attempt doubles it (default 1 s).
    pub max: Duration,
    /// Attempts after which outstanding calls fail with
    /// [`TransportError::ReconnectFailed`](crate::TransportError::ReconnectFailed)
    /// (default 8).
    pub max_attempts: u32,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial: Duration::from_millis(10),
            max: Duration::from_secs(1),
            max_attempts: 8,
        }
    }
}

impl Backoff {
    /// The delay before attempt `n` (0-based).
    pub fn delay(&self, n: u32) -> Duration {
        let f = 1u32.checked_shl(n.min(20)).unwrap_or(u32::MAX);
        self.initial.saturating_mul(f).min(self.max)
    }
}

/// The most credits a connection uses, whatever [`RdmaConfig::credits`]
/// says: the receives posted per connection are counted in a `u32` with a
/// margin added, and each costs an `inline_recv` buffer.
pub const MAX_CREDITS: u32 = 4096;

/// The most zero-length RDMA Writes a new connection gets while waiting
/// for its first message (see [`RdmaConfig::first_reply_nudge`]): with the
/// default 100 ms the last is posted 3.1 s after the first call was sent.
pub const FIRST_REPLY_NUDGES: u32 = 5;

/// Configuration shared by the requester ([`RdmaClient`](crate::RdmaClient))
/// and the responder ([`RdmaServer`](crate::RdmaServer)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RdmaConfig {
    /// Largest Send this side transmits, advertised in RFC 8797 private data
    /// (default 4096; RFC 8797 encodes multiples of 1024 from 1024 to 256 KiB).
    pub inline_send: u32,
    /// Largest Send this side can receive: the size of each posted receive
    /// buffer, advertised in RFC 8797 private data (default 4096).
    pub inline_recv: u32,
    /// Requester: credits asked for in `rdma_credit`. Responder: credits
    /// granted (never 0); the responder keeps this many receives posted plus
    /// a margin (default 128). Taken as 1 ..= [`MAX_CREDITS`]: each credit
    /// costs a posted receive of `inline_recv` bytes per connection.
    pub credits: u32,
    /// Segments per chunk (default 16).
    pub max_segments: u32,
    /// Bytes per segment (default 1 MiB).
    pub max_segment_size: u32,
    /// Largest single registration (a call argument, a result buffer, a
    /// Reply chunk, a Read chunk sink); larger requests fail (default 64 MiB).
    pub max_region_len: usize,
    /// Default per-call timeout when the request carries none (default 30 s).
    pub call_timeout: Duration,
    /// Reconnect policy (requester only).
    pub reconnect: Backoff,
    /// Advertise (and use) remote invalidation, RFC 8797 §6 (default on).
    pub remote_invalidation: bool,
    /// Requester: offer XDR roundup space after each Write chunk whose
    /// largest result is not a multiple of 4, as one more 4-byte segment
    /// (default off, as RFC 8166 §3.4.6 asks). For servers that read RFC
    /// 5666 §3.7 as the implementation-experience draft §3.6 reports: one
    /// relies on the extra segment, another writes zeros into it. Linux's
    /// client offers it. See [`ReplyShape::write_pad`](rpcrdma_proto::marshal::ReplyShape::write_pad).
    pub write_pad: bool,
    /// Requester: a Long Call (one whose non-DDP part alone exceeds the call
    /// inline threshold) keeps its DDP-eligible arguments in Read chunks of
    /// their own beside the Position-Zero chunk, so they keep direct
    /// placement (RFC 8166 §3.5.3). Default off: the whole call goes in
    /// Position Zero, as Linux's client sends it, because Linux's server
    /// before 5.11 takes one Read chunk Position only (implementation-
    /// experience draft §3.1, §3.3). Our responder takes both. See
    /// [`ChunkLimits::long_call_item_chunks`](rpcrdma_proto::marshal::ChunkLimits::long_call_item_chunks).
    pub long_call_item_chunks: bool,
    /// ORD: RDMA Reads this side keeps in flight as a responder (default 16).
    pub ord: u16,
    /// IRD: RDMA Reads the peer may have in flight at this side (default 16).
    pub ird: u16,
    /// Default Reply-chunk provision, in bytes of reply beyond what the
    /// Upper-Layer Binding estimates (RPC reply header with a verifier of up
    /// to 400 bytes; default 512).
    pub reply_overhead: u32,
    /// Largest reply Payload to provision a Reply chunk for when neither the
    /// binding nor the request bounds it (default 1 MiB). Never used for
    /// NULL (procedure 0), whose void result needs no Reply chunk. A Reply
    /// chunk is offered only when the reply may exceed the reply inline
    /// threshold (see [`RdmaClient::call_with_report`](crate::RdmaClient::call_with_report)):
    /// a responder such as Linux's uses any Reply chunk it is offered, so
    /// a needless one turns a small reply into RDMA Writes and an
    /// RDMA_NOMSG, and costs a registration per call.
    pub default_max_reply: u32,
    /// Connection establishment timeout (default 5 s).
    pub connect_timeout: Duration,
    /// Requester: when nothing has arrived on a new connection this long
    /// after a call was sent on it, post a zero-length RDMA Write, again
    /// after twice the wait, and so on, [`FIRST_REPLY_NUDGES`] times at
    /// most, until a message arrives (default 100 ms; `None`: never).
    ///
    /// Linux's soft-iWARP (siw) as responder installs its RDMA-mode receive
    /// callback only after it has sent the MPA Reply; bytes that reach it
    /// in between (often the initiator's RTR and first Send, in one TCP
    /// segment) stay unread until more bytes arrive. The first call would
    /// then wait for its timeout, holding the only credit a new connection
    /// has (RFC 8166 §3.3.1), so nothing else could be sent to wake it. A
    /// zero-length RDMA Write needs no credit and no receive, carries no
    /// data, and is what RFC 6581 §3 uses as RTR; siw ignores one after
    /// RTS, and so does this crate's iWARP provider. It is not posted on
    /// the in-memory provider ([`memfabric`](crate::memfabric)), which has
    /// no such race and checks the STag of every RDMA Write. Waiting before
    /// the first Send instead would only narrow the window and would delay
    /// every new connection's first call.
    pub first_reply_nudge: Option<Duration>,
    /// Responder: bytes of RDMA Read sinks (call data pulled from Read
    /// chunks) one connection may hold at once; calls wait for room, a single
    /// call needing more is answered ERR_CHUNK (default 256 MiB).
    pub max_read_bytes_per_connection: usize,
    /// Responder: bytes of RDMA Read sinks all connections together may
    /// hold at once, so that many connections cannot add up to more memory
    /// than this (default 1 GiB). Calls wait for room; a single call needing
    /// more than this (or than the per-connection limit) is answered
    /// ERR_CHUNK. A quarter of it at most is kept as pooled sinks for reuse.
    pub max_read_bytes: usize,
    /// Responder: longest time a call with Read chunks waits for room in
    /// the server-wide read budget ([`max_read_bytes`](Self::max_read_bytes));
    /// then it is answered RDMA_ERROR/ERR_CHUNK (RFC 8166 §4.5.2: the
    /// Responder cannot pull the call's chunks) and its connection stays
    /// open. Other connections' slow but progressing Reads are never cut
    /// (see [`read_timeout`](Self::read_timeout)), so without this bound a
    /// few peers that trickle their Read Responses could hold the whole
    /// budget and make every other client's Read-chunk call wait until it
    /// times out. Waits for the connection's own budget
    /// ([`max_read_bytes_per_connection`](Self::max_read_bytes_per_connection))
    /// are not bounded: only the connection's own calls are ahead there.
    /// Default 5 s: well inside the default 30 s
    /// [`call_timeout`](Self::call_timeout), so the requester gets a typed
    /// error rather than a timeout, and long enough for the default 1 GiB
    /// budget to turn over under legitimate load at 205 MiB/s or more.
    pub read_budget_wait: Duration,
    /// Responder: how long [`RdmaServer::shutdown`](crate::RdmaServer::shutdown)
    /// waits for in-flight calls before closing (default 5 s;
    /// [`Duration::MAX`]: no limit).
    pub shutdown_grace: Duration,
    /// Responder: RDMA connections open at once; connection requests beyond
    /// it are rejected (default 1024, like `oncrpc-tcp`).
    pub max_connections: usize,
    /// Responder: longest time a connection's outstanding RDMA Reads may
    /// make no progress (no Read posted or completed on it); then the
    /// connection is closed. A peer that never answers a Read must not hold
    /// its read sinks and the server-wide read budget (which other
    /// connections' calls wait for) for long; a slow transfer that keeps
    /// completing Reads is never cut. Default 15 s, half the default
    /// [`call_timeout`](Self::call_timeout), so that a call queued behind a
    /// stalled connection's Reads still completes in time.
    /// [`Duration::MAX`]: no limit.
    pub read_timeout: Duration,
    /// Responder: a connection on which no message has arrived and no call
    /// has been in process for this long is closed, alone (`None`: never).
    /// A requester that vanished without closing (a host that crashed or
    /// rebooted, a NAT or firewall that dropped its state) otherwise keeps
    /// its connection, its [`max_connections`](Self::max_connections) slot,
    /// its posted receives and its queue pair for as long as the server
    /// runs. A live requester loses nothing: its next
    /// call reconnects and is sent on the new connection. The connection is
    /// closed between this and 1.25 times this after its last activity.
    /// Default 300 s, like the RPC-over-TCP server's idle timeout
    /// (`oncrpc-tcp` `ServerConfig::idle_timeout`).
    pub idle_timeout: Option<Duration>,
    /// Requester: bytes of registered buffers that calls given up (timed
    /// out, or their futures dropped) may keep while their replies are
    /// outstanding; beyond it the connection is treated as failed (a major
    /// timeout: reconnect, retransmit the live calls). Those calls keep
    /// their buffers because the responder may still be moving their data
    /// (default 256 MiB).
    pub max_abandoned_bytes: usize,
}

impl RdmaConfig {
    /// [`RdmaConfig::credits`] within 1 ..= [`MAX_CREDITS`].
    pub fn effective_credits(&self) -> u32 {
        self.credits.clamp(1, MAX_CREDITS)
    }
}

impl Default for RdmaConfig {
    fn default() -> Self {
        RdmaConfig {
            inline_send: 4096,
            inline_recv: 4096,
            credits: 128,
            max_segments: 16,
            max_segment_size: 1 << 20,
            max_region_len: 64 << 20,
            call_timeout: Duration::from_secs(30),
            reconnect: Backoff::default(),
            remote_invalidation: true,
            write_pad: false,
            long_call_item_chunks: false,
            ord: 16,
            ird: 16,
            reply_overhead: 512,
            default_max_reply: 1 << 20,
            connect_timeout: Duration::from_secs(5),
            first_reply_nudge: Some(Duration::from_millis(100)),
            max_read_bytes_per_connection: 256 << 20,
            max_read_bytes: 1 << 30,
            read_budget_wait: Duration::from_secs(5),
            shutdown_grace: Duration::from_secs(5),
            max_connections: 1024,
            read_timeout: Duration::from_secs(15),
            idle_timeout: Some(Duration::from_secs(300)),
            max_abandoned_bytes: 256 << 20,
        }
    }
}

impl RdmaConfig {
    /// Both inline thresholds set to `n` bytes.
    pub fn with_inline(mut self, n: u32) -> Self {
        self.inline_send = n;
        self.inline_recv = n;
        self
    }

    /// The RFC 8797 private data this side advertises.
    pub fn private_data(&self) -> rpcrdma_proto::private_data::PrivateData {
        rpcrdma_proto::private_data::PrivateData {
            remote_invalidation: self.remote_invalidation,
            send_size: self.inline_send,
            recv_size: self.inline_recv,
        }
    }

    /// Chunk limits for the marshal plan.
    pub(crate) fn chunk_limits(&self) -> rpcrdma_proto::marshal::ChunkLimits {
        rpcrdma_proto::marshal::ChunkLimits {
            max_segments_per_chunk: self.max_segments,
            max_segment_bytes: self.max_segment_size,
            long_call_item_chunks: self.long_call_item_chunks,
        }
    }

    /// Decoding limits for received headers.
    pub(crate) fn decode_limits(&self) -> rpcrdma_proto::DecodeLimits {
        rpcrdma_proto::DecodeLimits {
            max_segments_per_chunk: self.max_segments,
            ..Default::default()
        }
    }

    /// Size of each pooled send buffer: our send threshold (no message we
    /// send inline exceeds it, RFC 8797 §5), at least 1024 bytes and at
    /// most 64 KiB (larger messages are registered one by one).
    pub(crate) fn send_buffer_len(&self) -> usize {
        (self.inline_send as usize).clamp(1024, 64 << 10)
    }

    /// Size of each posted receive buffer: what we advertised, as RFC 8797
    /// encodes it (a multiple of 1024, at least 1024).
    pub(crate) fn recv_buffer_len(&self) -> usize {
        let pd = rpcrdma_proto::private_data::PrivateData::find(&self.private_data().encode())
            .unwrap_or_default();
        pd.recv_size as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_max() {
        let b = Backoff::default();
        assert_eq!(b.delay(0), Duration::from_millis(10));
        assert_eq!(b.delay(1), Duration::from_millis(20));
        assert_eq!(b.delay(30), Duration::from_secs(1));
    }

    #[test]
    fn recv_buffer_matches_advertised_size() {
        assert_eq!(RdmaConfig::default().recv_buffer_len(), 4096);
        let c = RdmaConfig {
            inline_recv: 1500,
            ..Default::default()
        };
        assert_eq!(c.recv_buffer_len(), 1024);
    }
}
