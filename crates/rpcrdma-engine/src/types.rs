//! What goes in and out of a [`Connection`](crate::Connection): identifiers,
//! transmits, events and errors.

use bytes::Bytes;
use rpcrdma_proto::marshal::{CallPlan, ReplyShape};
use rpcrdma_proto::reassemble::CallReassembly;
use rpcrdma_proto::reply::RdmaWrite;
use rpcrdma_proto::stream::{Item, Span};
use rpcrdma_proto::wire::{ChunkListsRepr, ErrorBody, Segment};

/// Names one call on one connection engine: a call this side sends, or a
/// call it received. Never reused by the same engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CallId(pub u64);

/// Names one work request the driver posts for the engine (a Send, the
/// RDMA Reads of one chunk, the RDMA Writes of one reply); its completion
/// comes back through
/// [`Connection::handle_completion`](crate::Connection::handle_completion).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Token(pub u64);

/// The RPC direction of a call (RFC 8167 §2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Sent by the active side (the RPC client), answered by the passive side.
    Forward,
    /// Sent by the passive side (the RPC server), answered by the active side.
    Reverse,
}

/// A call to send.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CallSpec {
    /// The unreduced RPC Call message as items (the driver holds the bytes;
    /// the RPC header's XID is [`Connection::xid`](crate::Connection::xid)).
    pub items: Vec<Item>,
    /// What the reply may need (Write chunks, Reply chunk size).
    pub reply: ReplyShape,
    /// Time from submission to giving up; `None`: the configured timeout.
    pub timeout: Option<std::time::Duration>,
}

/// Which of a received call's Read chunks a [`Transmit::Read`] pulls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ChunkRef {
    /// The Position-Zero Read chunk of a Long Call (the reduced stream).
    PositionZero,
    /// Data Read chunk `i` (index into `CallReassembly::chunks`).
    Data(usize),
}

/// Whose items a [`Transmit::Send`]'s inline spans refer to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MessageRef {
    /// The items of a call this side sends ([`CallSpec::items`]).
    Call(CallId),
    /// The items of the reply to a received call (the `items` given to
    /// [`Connection::reply`](crate::Connection::reply)).
    Reply(CallId),
    /// None: the engine built the whole message (an RDMA_ERROR, a
    /// GARBAGE_ARGS reply) and `head` holds all of it.
    Engine,
}

/// A work request the driver must post.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transmit {
    /// A forward call is cleared to go (a credit is held for it): register
    /// `plan.regions`, record each registration with
    /// `CallPlan::set_region`, then hand the plan back with
    /// [`Connection::call_ready`](crate::Connection::call_ready) (or
    /// [`Connection::call_failed`](crate::Connection::call_failed)).
    Prepare {
        /// The call.
        id: CallId,
        /// Its XID.
        xid: u32,
        /// The marshaling plan (RFC 8166 §3.5).
        plan: CallPlan,
    },
    /// RDMA Read the segments of one Read chunk of a received call into one
    /// local sink, in order (RFC 8166 §3.5.3).
    Read {
        /// Completion token.
        token: Token,
        /// The received call.
        id: CallId,
        /// Which chunk.
        chunk: ChunkRef,
        /// The Requester's segments.
        segments: Vec<Segment>,
    },
    /// RDMA Write a reply's results into the Requester's Write chunks and
    /// Reply chunk; posted before the reply's Send on the same queue pair.
    Write {
        /// Completion token.
        token: Token,
        /// The received call being answered.
        id: CallId,
        /// The writes, in order (spans refer to the reply's items).
        writes: Vec<RdmaWrite>,
    },
    /// Send `head` followed by the inline spans of `message`'s items.
    Send {
        /// Completion token.
        token: Token,
        /// Whose items `inline` refers to.
        message: MessageRef,
        /// The transport header (and, for [`MessageRef::Engine`], the RPC
        /// message as well).
        head: Bytes,
        /// Inline payload spans.
        inline: Vec<Span>,
    },
}

/// A reply to one of this side's calls, as received.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// The whole received message (transport header and inline payload).
    pub msg: Bytes,
    /// Length of the transport header in `msg`.
    pub header_len: usize,
    /// RDMA_NOMSG: the reduced reply is in the Reply chunk (RFC 8166
    /// §3.5.3); otherwise it is `msg[header_len..]`.
    pub nomsg: bool,
    /// The Write list and Reply chunk as the Responder returned them (the
    /// lengths it used).
    pub returned: ChunkListsRepr,
    /// The STag the Responder invalidated by Send with Invalidate, if any.
    pub invalidated_rkey: Option<u32>,
}

/// Why a call of this side ended without a reply.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// Its timeout passed (it is [`CallState::Abandoned`](crate::CallState)
    /// until its reply or the connection's end returns its credit).
    #[error("call timed out")]
    Timeout,
    /// The caller gave it up ([`Connection::cancel`](crate::Connection::cancel));
    /// like a timeout, it keeps its credit until its reply or the
    /// connection's end.
    #[error("call cancelled")]
    Cancelled,
    /// The Responder answered RDMA_ERROR (RFC 8166 §4.5).
    #[error("responder answered RDMA_ERROR {0:?}")]
    RdmaError(ErrorBody),
    /// The connection was lost and this call cannot be sent again
    /// (reverse-direction calls, RFC 8167 §5.4).
    #[error("connection lost")]
    ConnectionLost,
    /// It could not be planned (RFC 8166 §3.5).
    #[error("call cannot be conveyed: {0}")]
    Plan(#[from] rpcrdma_proto::marshal::PlanError),
    /// The driver could not prepare it (registration failed).
    #[error("call preparation failed: {0}")]
    Prepare(String),
}

/// A call received from the peer, ready for the upper layer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IncomingCall {
    /// Names it for [`Connection::reply`](crate::Connection::reply).
    pub id: CallId,
    /// Its XID.
    pub xid: u32,
    /// Forward (on the passive side) or reverse (on the active side).
    pub direction: Direction,
    /// The received message.
    pub msg: Bytes,
    /// Length of the transport header in `msg`.
    pub header_len: usize,
    /// How to rebuild the call from the inline payload and the pulled
    /// chunks (data of [`Transmit::Read`]s of this call).
    pub reassembly: CallReassembly,
}

/// Why the engine considers the connection gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LostReason {
    /// The driver reported it ([`Connection::handle_connection_lost`](crate::Connection::handle_connection_lost)).
    Driver,
    /// The peer sent more calls than granted (RFC 8166 §3.3.1): close.
    CreditOverrun,
    /// Abandoned calls hold every credit (or a grant lowered under them):
    /// no reply can free one, so the connection is replaced, as after a
    /// major timeout.
    Stuck,
    /// A work request completed in error.
    WorkRequestFailed,
}

/// Something the driver or the upper layer must learn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// One of this side's calls ended: exactly once per call.
    CallDone {
        /// The call.
        id: CallId,
        /// Its XID.
        xid: u32,
        /// The reply, or why there is none.
        result: Result<Reply, CallError>,
    },
    /// A call arrived (its chunks, if any, have been pulled).
    IncomingCall(IncomingCall),
    /// An abandoned call is finished with: its late reply came, or its
    /// connection ended. Its registrations may be released now (a Responder
    /// may move its data until then).
    Retired {
        /// The call.
        id: CallId,
    },
    /// The connection is gone: the driver disconnects the queue pair. On
    /// the active side forward calls in flight wait for
    /// [`Connection::handle_reconnected`](crate::Connection::handle_reconnected)
    /// and go out again.
    ConnectionLost {
        /// Why.
        reason: LostReason,
    },
}

/// Why a call cannot be submitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    /// Reverse-direction operation is off on this connection (RFC 8167
    /// §6: not before the peer indicated support).
    #[error("reverse-direction operation is not enabled")]
    ReverseDisabled,
    /// The passive side lost its connection and cannot reconnect (RFC 8167
    /// §5.4).
    #[error("connection closed")]
    Closed,
    /// A reverse-direction call travels as RDMA_MSG without chunks: it must
    /// fit the send threshold and its reply the receive threshold, with no
    /// DDP-eligible item (RFC 8167 §5.3).
    #[error("reverse-direction call of {len} bytes exceeds the inline limit {limit}")]
    TooLarge {
        /// Bytes needed.
        len: u64,
        /// The limit.
        limit: u32,
    },
    /// Reverse-direction calls travel inline only here: chunks are optional
    /// in that direction (RFC 8167 §5.3) and this implementation sends none.
    #[error("reverse-direction calls carry no chunks")]
    ChunksNotSupported,
}

/// Why an answer or driver report is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EngineError {
    /// No received call of that id awaits a reply (already answered,
    /// dropped, or its connection ended).
    #[error("no such call awaiting a reply")]
    UnknownCall,
    /// The passive side never reconnects (RFC 8167 §5.4).
    #[error("the passive side cannot reconnect")]
    PassiveCannotReconnect,
    /// The connection is still up.
    #[error("the connection is still established")]
    StillConnected,
}
