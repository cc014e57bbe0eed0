//! Validation of received messages (RFC 8166 §4.5), returning the action the
//! receiver must take as a value: deliver, reply ERR_VERS, reply ERR_CHUNK,
//! reply GARBAGE_ARGS, or discard silently. Calls (received by a Responder)
//! and replies (received by a Requester) have separate entry points:
//! [`check_call`] and [`check_reply`].

use crate::binding::BindingLookup;
use crate::error::DecodeErrorKind;
use crate::marshal::OfferedChunks;
use crate::reassemble::{plan_call_reassembly, CallPiece, CallReassembly};
use crate::wire::{
    Body, ChunkLists, ChunkListsRepr, DecodeLimits, ErrorBody, Header, HeaderRepr, Proc, Segment,
    WriteChunk, WriteChunkRepr, RPCRDMA_VERSION,
};

/// The receiver's required action, without its data (for counters and
/// logging).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Hand the message to the RPC layer.
    Deliver,
    /// Answer RDMA_ERROR / ERR_VERS.
    ReplyErrVers,
    /// Answer RDMA_ERROR / ERR_CHUNK.
    ReplyErrChunk,
    /// Answer an RPC reply with accept status GARBAGE_ARGS (RFC 8166 §4.5.2).
    GarbageArgs,
    /// Drop the message without answering.
    Discard,
    /// Close the connection.
    Close,
}

/// Why a message is dropped silently.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DiscardReason {
    /// Shorter than 28 bytes: the XID cannot be trusted (RFC 8166 §4.5).
    TooShort,
    /// RDMA_DONE (RFC 8166 §4.6.2).
    Done,
    /// RDMA_MSGP received by a Requester (RFC 8166 §4.6.1).
    Msgp,
    /// RDMA_ERROR received by a Responder (RFC 8166 §4.2.4).
    ErrorAtResponder,
    /// A reply header that cannot be decoded (RFC 8166 §4.5).
    Undecodable(DecodeErrorKind),
    /// A reply for no pending call.
    UnknownXid,
    /// A reply carrying a Read list (RFC 8166 §4.3.1).
    ReadListInReply,
    /// More Write chunks returned than offered (RFC 8166 §4.3.2).
    TooManyWriteChunks,
    /// A returned Write chunk differs from the offered one in more than
    /// its lengths (RFC 8166 §3.4.6).
    WriteChunkMismatch(usize),
    /// A returned Reply chunk differs from the offered one in more than its
    /// lengths, or none was offered (RFC 8166 §4.3.3).
    ReplyChunkMismatch,
    /// An RDMA_MSG reply whose Reply chunk reports data (RFC 8166 §4.3.3).
    ReplyChunkUsedInMsg,
    /// An RDMA_NOMSG reply whose Reply chunk holds nothing (§4.2.4).
    NoPayload,
    /// The RPC message's XID differs from `rdma_xid` (RFC 8166 §4.2.1).
    XidMismatch,
    /// An RPC message of the wrong direction (e.g. a REPLY received by a
    /// forward-channel-only Responder).
    WrongDirection,
}

/// The RPC call header fields the Responder checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RpcCallInfo {
    /// RPC program.
    pub prog: u32,
    /// Program version.
    pub vers: u32,
    /// Procedure.
    pub proc_: u32,
}

/// A call that passed the header checks.
#[derive(Clone, Debug)]
pub struct ReceivedCall<'a> {
    /// The decoded header.
    pub header: Header<'a>,
    /// How to rebuild the Payload stream.
    pub reassembly: CallReassembly,
    /// The Write chunks and Reply chunk the call offers for its reply.
    pub offered: OfferedChunks,
    /// The RPC call header fields, once seen (immediately for RDMA_MSG; for
    /// a Long Call after [`ReceivedCall::check_payload`]).
    pub rpc: Option<RpcCallInfo>,
}

/// The outcome of [`check_call`].
#[derive(Clone, Debug)]
pub enum CallVerdict<'a> {
    /// Process it. For a Long Call, pull the Position-Zero chunk (bounded by
    /// [`DecodeLimits::max_long_call`]) and call
    /// [`ReceivedCall::check_payload`] before pulling any other Read chunk:
    /// only then are their lengths checked against the binding.
    Deliver(Box<ReceivedCall<'a>>),
    /// Send this RDMA_ERROR header (ERR_VERS or ERR_CHUNK).
    ReplyError(HeaderRepr),
    /// Answer the RPC with GARBAGE_ARGS via RDMA_MSG (RFC 8166 §4.5.2).
    GarbageArgs {
        /// The call's XID.
        xid: u32,
        /// The chunk lists the reply carries: the call's offered chunks,
        /// unused (RFC 8166 §3.4.6; see [`OfferedChunks::echo_unused`]).
        chunks: ChunkListsRepr,
    },
    /// Drop silently.
    Discard(DiscardReason),
}

impl CallVerdict<'_> {
    /// The action, without data.
    pub fn action(&self) -> Action {
        match self {
            CallVerdict::Deliver(_) => Action::Deliver,
            CallVerdict::ReplyError(h) => match h.body {
                crate::wire::BodyRepr::Error(ErrorBody::Vers { .. }) => Action::ReplyErrVers,
                _ => Action::ReplyErrChunk,
            },
            CallVerdict::GarbageArgs { .. } => Action::GarbageArgs,
            CallVerdict::Discard(_) => Action::Discard,
        }
    }
}

fn err_chunk<'a>(xid: u32, vers: u32, grant: u32) -> CallVerdict<'a> {
    CallVerdict::ReplyError(HeaderRepr::error(xid, vers, grant, ErrorBody::Chunk))
}

/// Checks a message received by a Responder. `grant` is the credit value to
/// put in an error reply.
pub fn check_call<'a>(
    msg: &'a [u8],
    limits: &DecodeLimits,
    bindings: &dyn BindingLookup,
    grant: u32,
) -> CallVerdict<'a> {
    let header = match Header::parse(msg, limits) {
        Ok(h) => h,
        Err(e) => {
            let Some(f) = e.fixed else {
                return CallVerdict::Discard(DiscardReason::TooShort);
            };
            return match e.kind {
                // §4.2.4: a Responder silently discards RDMA_ERROR, even
                // one it cannot decode or of another version (§4.2: the
                // fixed fields keep their meaning in every version, so it
                // is never answered with ERR_VERS).
                _ if f.proc_ == Proc::Error.as_u32() => {
                    CallVerdict::Discard(DiscardReason::ErrorAtResponder)
                }
                // §4.5.1: ERR_VERS with our range; rdma_vers echoes theirs.
                DecodeErrorKind::UnsupportedVersion(_) => {
                    CallVerdict::ReplyError(HeaderRepr::error(
                        f.xid,
                        f.vers,
                        grant,
                        ErrorBody::Vers {
                            low: RPCRDMA_VERSION,
                            high: RPCRDMA_VERSION,
                        },
                    ))
                }
                // §4.5.2: any other XDR error.
                _ => err_chunk(f.xid, f.vers, grant),
            };
        }
    };
    let (xid, vers) = (header.xid, header.vers);
    let (chunks, inline_len) = match &header.body {
        Body::Done => return CallVerdict::Discard(DiscardReason::Done),
        Body::Error(_) => return CallVerdict::Discard(DiscardReason::ErrorAtResponder),
        // §4.6.1: Responders SHOULD answer ERR_CHUNK.
        Body::Msgp { .. } => return err_chunk(xid, vers, grant),
        Body::Msg { chunks, payload } => (*chunks, Some(payload.len() as u64)),
        Body::NoMsg { chunks } => {
            // §4.2.4 / §4.5.2: RDMA_NOMSG needs a chunk holding the payload.
            if chunks.is_empty() {
                return err_chunk(xid, vers, grant);
            }
            (*chunks, None)
        }
    };
    // §4.5.2: a segment whose offset + length wraps the 64-bit address
    // space cannot describe memory; the chunk lists are malformed.
    if !segments_in_range(&chunks) {
        return err_chunk(xid, vers, grant);
    }
    let reassembly = match plan_call_reassembly(&chunks, inline_len) {
        Ok(r) => r,
        Err(_) => return err_chunk(xid, vers, grant),
    };
    if reassembly
        .position_zero
        .as_ref()
        .is_some_and(|p| p.len > limits.max_long_call)
    {
        return err_chunk(xid, vers, grant);
    }
    let mut call = ReceivedCall {
        header,
        reassembly,
        offered: OfferedChunks::from_chunks(&chunks),
        rpc: None,
    };
    if let Some(payload) = header.payload() {
        if let Err(v) = call.check_payload(payload, bindings, grant) {
            return v;
        }
    }
    CallVerdict::Deliver(Box::new(call))
}

/// True when every segment of every list ends inside the 64-bit address
/// space (`offset + length` does not overflow).
fn segments_in_range(chunks: &ChunkLists<'_>) -> bool {
    let fits = |s: Segment| s.offset.checked_add(u64::from(s.length)).is_some();
    chunks.read_list.segments().all(|r| fits(r.segment))
        && chunks.write_list.chunks().all(|c| c.segments().all(fits))
        && chunks
            .reply_chunk
            .as_ref()
            .is_none_or(|c| c.segments().all(fits))
}

fn be32(b: &[u8], i: usize) -> Option<u32> {
    let w = b.get(i * 4..i * 4 + 4)?;
    Some(u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
}

impl ReceivedCall<'_> {
    /// Checks the reduced Payload stream (the inline payload of RDMA_MSG, or
    /// the Position-Zero chunk's data of a Long Call): the RPC XID must equal
    /// `rdma_xid` (§4.2.1, §4.5.2), every data Read chunk must reduce an
    /// argument the procedure's binding declares DDP-eligible, within its
    /// size (§6.1: MUST NOT be processed otherwise), and each chunk must
    /// match the length word before it (else GARBAGE_ARGS, §4.5.2).
    pub fn check_payload(
        &mut self,
        reduced: &[u8],
        bindings: &dyn BindingLookup,
        grant: u32,
    ) -> Result<(), CallVerdict<'static>> {
        let (xid, vers) = (self.header.xid, self.header.vers);
        let rpc_xid = be32(reduced, 0).ok_or(err_chunk(xid, vers, grant))?;
        if rpc_xid != xid {
            return Err(err_chunk(xid, vers, grant));
        }
        if be32(reduced, 1).is_some_and(|t| t != 0) {
            return Err(CallVerdict::Discard(DiscardReason::WrongDirection));
        }
        // The RPC header (xid, type, rpcvers, prog, vers, proc) must be
        // inline: a chunk may only hold an argument.
        let inline_head = match self.reassembly.pieces.first() {
            Some(CallPiece::Inline { offset: 0, len }) => *len,
            _ => 0,
        };
        let data = &self.reassembly.chunks;
        let rpc = match (be32(reduced, 3), be32(reduced, 4), be32(reduced, 5)) {
            (Some(prog), Some(v), Some(proc_)) if inline_head >= 24 || data.is_empty() => {
                Some(RpcCallInfo {
                    prog,
                    vers: v,
                    proc_,
                })
            }
            _ => None,
        };
        self.rpc = rpc;
        if !data.is_empty() {
            let Some(info) = rpc else {
                return Err(err_chunk(xid, vers, grant));
            };
            let Some(pb) = bindings.lookup(info.prog, info.vers, info.proc_) else {
                return Err(err_chunk(xid, vers, grant));
            };
            if data.len() > pb.ddp_args.len() {
                return Err(err_chunk(xid, vers, grant));
            }
            // Reduction is optional per item (RFC 8166 §3.4.2): a requester
            // may keep a DDP-eligible argument inline (ours keeps an empty
            // one), so the i-th chunk need not reduce the i-th eligible
            // argument, and which one it reduces is known only to the ULP's
            // decoder. Each chunk is therefore bounded by the largest
            // eligible argument (what a peer can make us read); the
            // service's own XDR limits refuse an argument too large for its
            // place (GARBAGE_ARGS).
            let largest = pb
                .ddp_args
                .iter()
                .map(|a| crate::stream::roundup4(a.max_len as u64))
                .max()
                .unwrap_or(0);
            if data.iter().any(|c| c.len > largest) {
                return Err(err_chunk(xid, vers, grant));
            }
            if self.reassembly.check_length_words(reduced).is_err() {
                return Err(CallVerdict::GarbageArgs {
                    xid,
                    chunks: self.offered.echo_unused(),
                });
            }
        }
        Ok(())
    }
}

/// The outcome of [`check_reply`].
#[derive(Clone, Copy, Debug)]
pub enum ReplyVerdict<'a> {
    /// A valid reply: hand it to the reply decoder.
    Deliver(Header<'a>),
    /// RDMA_ERROR for a pending call: complete it with a permanent error
    /// (RFC 8166 §4.5).
    Error {
        /// The failed call's XID.
        xid: u32,
        /// The error.
        err: ErrorBody,
        /// The credit value the Responder sent.
        credit: u32,
    },
    /// Drop silently (RFC 8166 §4.5: header errors in replies).
    Discard(DiscardReason),
}

impl ReplyVerdict<'_> {
    /// The action, without data.
    pub fn action(&self) -> Action {
        match self {
            ReplyVerdict::Deliver(_) | ReplyVerdict::Error { .. } => Action::Deliver,
            ReplyVerdict::Discard(_) => Action::Discard,
        }
    }
}

/// Returned chunk matches the offered one except for lengths: same
/// handles and offsets, no length above the offered one, filled in segment
/// order (RFC 8166 §3.4.6).
///
/// Accepted from Responders that read RFC 5666 differently (the
/// implementation-experience draft, §3.6–§3.7): a Write list chunk returned
/// with no segments (one server's way of saying "unused"), or with only the
/// segments it filled (a prefix of the offered ones); and, when
/// `roundup`, a last filled segment up to 3 bytes longer than offered (RFC
/// 5666 §3.7 had the Responder report the XDR roundup it did not write).
/// A Requester reads the result through [`WriteChunkCursor`] from what was
/// returned: the declared length of the result decides (a chunk returned
/// with no segments is read as a request for the result inline, which a
/// Responder that leaves the chunk unused does not have).
///
/// [`WriteChunkCursor`]: crate::reassemble::WriteChunkCursor
fn same_but_lengths(got: &WriteChunk<'_>, offered: &WriteChunkRepr, roundup: bool) -> bool {
    if got.segment_count() > offered.segments.len() {
        return false;
    }
    let mut short = false;
    // Bytes in the segments before this one.
    let mut before = 0u64;
    for (g, o) in got.segments().zip(&offered.segments) {
        if g.handle != o.handle || g.offset != o.offset {
            return false;
        }
        if short && g.length != 0 {
            return false;
        }
        if g.length > o.length {
            // Only as the roundup of data that ends by filling this segment
            // (the last filled one) at a length not a multiple of 4.
            let end = before + u64::from(o.length);
            if !roundup || before + u64::from(g.length) != end.next_multiple_of(4) {
                return false;
            }
            short = true;
        } else if g.length < o.length {
            short = true;
        }
        before += u64::from(g.length);
    }
    true
}

/// Checks a message received by a Requester. `offered_for` looks up the
/// chunks the pending call with that XID offered (`None`: no such call).
///
/// Discards: undecodable headers, RDMA_MSGP, RDMA_DONE, unknown XIDs, a Read
/// list, more Write chunks than offered, returned chunks differing from the
/// offered ones in anything but (not larger, prefix-filled) lengths, an
/// unoffered Reply chunk, an RDMA_MSG whose Reply chunk reports data or
/// whose RPC XID differs, an RDMA_NOMSG whose Reply chunk holds nothing.
/// Tolerated for interoperability: fewer Write chunks than offered, an
/// offered Reply chunk left out of an RDMA_MSG reply, and Write chunks
/// returned with no segments, with fewer segments, or with a length rounded
/// up to a multiple of 4 (see `same_but_lengths`).
pub fn check_reply<'a, 'o>(
    msg: &'a [u8],
    limits: &DecodeLimits,
    offered_for: impl FnOnce(u32) -> Option<&'o OfferedChunks>,
) -> ReplyVerdict<'a> {
    let header = match Header::parse(msg, limits) {
        Ok(h) => h,
        Err(e) if e.fixed.is_none() => return ReplyVerdict::Discard(DiscardReason::TooShort),
        Err(e) => return ReplyVerdict::Discard(DiscardReason::Undecodable(e.kind)),
    };
    let chunks = match &header.body {
        Body::Done => return ReplyVerdict::Discard(DiscardReason::Done),
        Body::Msgp { .. } => return ReplyVerdict::Discard(DiscardReason::Msgp),
        Body::Error(err) => {
            return match offered_for(header.xid) {
                Some(_) => ReplyVerdict::Error {
                    xid: header.xid,
                    err: *err,
                    credit: header.credit,
                },
                None => ReplyVerdict::Discard(DiscardReason::UnknownXid),
            }
        }
        Body::Msg { chunks, .. } | Body::NoMsg { chunks } => *chunks,
    };
    let Some(offered) = offered_for(header.xid) else {
        return ReplyVerdict::Discard(DiscardReason::UnknownXid);
    };
    if !chunks.read_list.is_empty() {
        return ReplyVerdict::Discard(DiscardReason::ReadListInReply);
    }
    if chunks.write_list.len() > offered.write_list.len() {
        return ReplyVerdict::Discard(DiscardReason::TooManyWriteChunks);
    }
    for (i, (got, off)) in chunks
        .write_list
        .chunks()
        .zip(&offered.write_list)
        .enumerate()
    {
        if !same_but_lengths(&got, off, true) {
            return ReplyVerdict::Discard(DiscardReason::WriteChunkMismatch(i));
        }
    }
    match (&chunks.reply_chunk, &offered.reply_chunk) {
        (Some(got), Some(off)) if !same_but_lengths(got, off, false) => {
            return ReplyVerdict::Discard(DiscardReason::ReplyChunkMismatch)
        }
        (Some(_), None) => return ReplyVerdict::Discard(DiscardReason::ReplyChunkMismatch),
        _ => {}
    }
    match header.body {
        Body::Msg { payload, .. } => {
            if chunks.reply_chunk.is_some_and(|c| c.total_len() != 0) {
                return ReplyVerdict::Discard(DiscardReason::ReplyChunkUsedInMsg);
            }
            match be32(payload, 0) {
                Some(x) if x == header.xid => {}
                _ => return ReplyVerdict::Discard(DiscardReason::XidMismatch),
            }
            if be32(payload, 1).is_some_and(|t| t != 1) {
                return ReplyVerdict::Discard(DiscardReason::WrongDirection);
            }
        }
        _ => {
            if chunks.reply_chunk.is_none_or(|c| c.total_len() == 0) {
                return ReplyVerdict::Discard(DiscardReason::NoPayload);
            }
        }
    }
    ReplyVerdict::Deliver(header)
}

/// Checks the Payload stream of a Long Reply once the Reply chunk's data is
/// at hand: the RPC XID must equal `rdma_xid` and the message must be a
/// REPLY (RFC 8166 §4.2.1, §4.5).
pub fn check_reply_payload(rdma_xid: u32, payload: &[u8]) -> Result<(), DiscardReason> {
    match be32(payload, 0) {
        Some(x) if x == rdma_xid => {}
        _ => return Err(DiscardReason::XidMismatch),
    }
    if be32(payload, 1).is_some_and(|t| t != 1) {
        return Err(DiscardReason::WrongDirection);
    }
    Ok(())
}
