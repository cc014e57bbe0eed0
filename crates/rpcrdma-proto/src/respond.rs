//! What a Responder answers instead of the reply a call asked for: the
//! RDMA_ERROR / ERR_CHUNK cases of a call that passed the header checks
//! (RFC 8166 §4.5), and the GARBAGE_ARGS reply (§4.5.2).
//!
//! The transport reports that a case arose (the RPC layer refused the
//! message, the connection's ORD is 0, a reply needs too many RDMA Writes,
//! the read budget is spent); the rule for each, and the header to send,
//! are here. Every ERR_CHUNK completes the Requester's call with a
//! permanent error and returns its credit (§4.5), instead of leaving the
//! call to time out.

use crate::reassemble::ReadChunkInfo;
use crate::reply::{ReplyPlan, ReplyPlanError};
use crate::wire::{BodyRepr, ChunkListsRepr, ErrorBody, HeaderRepr, ReadList, RPCRDMA_VERSION};

/// Why a Responder answers RDMA_ERROR / ERR_CHUNK to a call it accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ErrChunk {
    /// The GARBAGE_ARGS reply, with the call's chunks echoed, is longer
    /// than the reply inline threshold; no chunk may carry it
    /// ([`garbage_args`]).
    #[error("GARBAGE_ARGS reply of {len} bytes exceeds the reply inline threshold ({limit})")]
    GarbageArgsTooLarge {
        /// Header plus RPC reply.
        len: usize,
        /// The Responder's send threshold.
        limit: u32,
    },
    /// The call has Read chunks and the connection's ORD is 0
    /// ([`check_reads`]).
    #[error("read chunks on a connection whose ORD is 0")]
    NoRdmaRead,
    /// A Read chunk is longer than one region this Responder registers
    /// ([`check_read_chunk`]).
    #[error("read chunk of {len} bytes exceeds the largest region ({max})")]
    ReadChunkTooLarge {
        /// Chunk length.
        len: u64,
        /// Largest region.
        max: u64,
    },
    /// The call's Read chunks need more memory than the read budget can
    /// give it: no room now (after a bounded wait), or never.
    #[error("no room in the read budget for the call's read chunks")]
    ReadBudget,
    /// The RPC layer could not take the Payload stream as a Call
    /// ([`NOT_A_CALL`]).
    #[error("RPC message is not a call")]
    NotACall,
    /// The reply fits none of the ways the call's chunks allow
    /// ([`plan_reply`](crate::reply::plan_reply)).
    #[error("reply cannot be conveyed: {0}")]
    Reply(#[from] ReplyPlanError),
    /// The reply needs more RDMA Writes than one reply may post
    /// ([`check_send_queue_share`]).
    #[error("reply needs {writes} RDMA Writes and its Send; at most {max} work requests fit")]
    TooManyWrites {
        /// RDMA Writes the plan needs.
        writes: usize,
        /// Work requests one reply may post.
        max: usize,
    },
}

impl ErrChunk {
    /// The RDMA_ERROR header to send for call `xid`, granting `credit`.
    pub fn header(&self, xid: u32, credit: u32) -> HeaderRepr {
        err_chunk(xid, credit)
    }
}

/// RDMA_ERROR / ERR_CHUNK for call `xid` (RFC 8166 §4.5: `rdma_xid` and
/// `rdma_vers` of the failing call, which a Responder accepts only at
/// Version One).
pub fn err_chunk(xid: u32, credit: u32) -> HeaderRepr {
    HeaderRepr::error(xid, RPCRDMA_VERSION, credit, ErrorBody::Chunk)
}

/// The RDMA_MSG header of a GARBAGE_ARGS reply (RFC 8166 §4.5.2: the ULP
/// cannot parse the arguments, e.g. a chunk does not match its length word)
/// whose RPC reply is `rpc_reply_len` bytes: it echoes the call's offered
/// chunks unused (`chunks`, §3.4.6). The echo can make the reply longer
/// than the Requester receives (`send_inline`, this Responder's send
/// threshold; RFC 8797 lets a Requester's Receive Size be smaller than its
/// Send Size): that reply cannot be conveyed, so ERR_CHUNK (§4.5.3).
pub fn garbage_args(
    xid: u32,
    credit: u32,
    chunks: ChunkListsRepr,
    rpc_reply_len: usize,
    send_inline: u32,
) -> Result<HeaderRepr, ErrChunk> {
    let h = HeaderRepr {
        xid,
        vers: RPCRDMA_VERSION,
        credit,
        body: BodyRepr::Msg(chunks),
    };
    let len = h.buffer_len() + rpc_reply_len;
    if len > send_inline as usize {
        return Err(ErrChunk::GarbageArgsTooLarge {
            len,
            limit: send_inline,
        });
    }
    Ok(h)
}

/// A call's Read chunks can be pulled only with RDMA Read, which a
/// connection whose negotiated ORD (`ord`, the Read Requests this side may
/// have outstanding) is 0 cannot issue: such a call cannot be processed,
/// and no reply is possible for it (RFC 8166 §4.5.3).
pub fn check_reads(ord: u32, read_list: &ReadList<'_>) -> Result<(), ErrChunk> {
    if ord == 0 && read_list.segments().next().is_some() {
        return Err(ErrChunk::NoRdmaRead);
    }
    Ok(())
}

/// A Read chunk is pulled into one region of at most `max_region` bytes; a
/// longer chunk cannot be pulled (RFC 8166 §4.5.3).
pub fn check_read_chunk(chunk: &ReadChunkInfo, max_region: u64) -> Result<(), ErrChunk> {
    if chunk.len > max_region {
        return Err(ErrChunk::ReadChunkTooLarge {
            len: chunk.len,
            max: max_region,
        });
    }
    Ok(())
}

/// An RPC message the RPC layer drops (truncated, or not a CALL) would
/// simply be dropped over TCP; here the transport header already named the
/// XID, and such a message is an XDR error of the Transport stream, which
/// RFC 8166 §4.5.2 answers with ERR_CHUNK. That also completes the
/// Requester's call and returns its credit.
pub const NOT_A_CALL: ErrChunk = ErrChunk::NotACall;

/// A reply posts its RDMA Writes and then its Send on one send queue of
/// `sq_depth` work requests. One reply may use at most a quarter of it, so
/// that the replies of the other calls in process still find room; a plan
/// needing more cannot be conveyed (RFC 8166 §4.5.3).
pub fn check_send_queue_share(plan: &ReplyPlan, sq_depth: u32) -> Result<(), ErrChunk> {
    let max = (sq_depth / 4) as usize;
    let writes = plan.writes.len();
    if writes + 1 > max {
        return Err(ErrChunk::TooManyWrites { writes, max });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::marshal::OfferedChunks;
    use crate::reply::{plan_reply, RdmaWrite};
    use crate::stream::{Item, Span};
    use crate::wire::{DecodeLimits, Header, Segment, WriteChunkRepr};

    #[test]
    fn rfc8166_s4_5_err_chunk_header() {
        let h = err_chunk(7, 32);
        let mut b = vec![0u8; h.buffer_len()];
        h.emit(&mut b).unwrap();
        assert_eq!(b.len(), 20, "fixed fields and rdma_err");
        let p = Header::parse(&b, &DecodeLimits::default()).unwrap();
        assert_eq!((p.xid, p.vers, p.credit), (7, RPCRDMA_VERSION, 32));
        assert_eq!(ErrChunk::NotACall.header(7, 32), h);
        assert_eq!(NOT_A_CALL, ErrChunk::NotACall);
    }

    fn echoed(segments: usize) -> ChunkListsRepr {
        OfferedChunks {
            write_list: vec![WriteChunkRepr {
                segments: vec![
                    Segment {
                        handle: 1,
                        length: 0,
                        offset: 0,
                    };
                    segments
                ],
            }],
            reply_chunk: None,
        }
        .echo_unused()
    }

    #[test]
    fn rfc8166_s4_5_2_garbage_args_fits_or_err_chunk() {
        // 16 fixed + 4 (read list) + 8 + 16 (one segment) + 4 + 4 = 52.
        let h = garbage_args(7, 1, echoed(1), 24, 1024).unwrap();
        assert_eq!(h.buffer_len(), 52);
        assert!(matches!(h.body, BodyRepr::Msg(_)));
        assert_eq!(garbage_args(7, 1, echoed(1), 24, 76).map(|_| ()), Ok(()));
        assert_eq!(
            garbage_args(7, 1, echoed(1), 24, 75),
            Err(ErrChunk::GarbageArgsTooLarge { len: 76, limit: 75 })
        );
        // Many echoed segments overflow a 1024-byte threshold.
        assert!(garbage_args(7, 1, echoed(64), 24, 1024).is_err());
    }

    #[test]
    fn rfc8166_s4_5_3_no_reads_at_ord_zero() {
        let none = ReadList::EMPTY;
        assert_eq!(check_reads(0, &none), Ok(()));
        assert_eq!(check_reads(16, &none), Ok(()));
        // A call with one Read segment.
        let mut b = Vec::new();
        for w in [1u32, 1, 8, 0, 1, 0, 4, 9, 0, 0] {
            b.extend_from_slice(&w.to_be_bytes());
        }
        for w in [0u32, 0, 0, 0, 0] {
            b.extend_from_slice(&w.to_be_bytes());
        }
        let h = Header::parse(&b, &DecodeLimits::default()).unwrap();
        let rl = h.chunks().unwrap().read_list;
        assert_eq!(check_reads(0, &rl), Err(ErrChunk::NoRdmaRead));
        assert_eq!(check_reads(1, &rl), Ok(()));
    }

    #[test]
    fn read_chunk_within_a_region() {
        let c = ReadChunkInfo {
            position: 4,
            segments: 0..1,
            len: 100,
        };
        assert_eq!(check_read_chunk(&c, 100), Ok(()));
        assert_eq!(
            check_read_chunk(&c, 99),
            Err(ErrChunk::ReadChunkTooLarge { len: 100, max: 99 })
        );
    }

    #[test]
    fn a_quarter_of_the_send_queue_per_reply() {
        let mut plan = plan_reply(1, 1, &[Item::Xdr(8)], &OfferedChunks::default(), 1024).unwrap();
        let w = RdmaWrite {
            source: Span::Zeros(4),
            handle: 1,
            remote_offset: 0,
        };
        // sq_depth 16: four work requests per reply, the Send included.
        plan.writes = vec![w; 3];
        assert_eq!(check_send_queue_share(&plan, 16), Ok(()));
        plan.writes.push(w);
        assert_eq!(
            check_send_queue_share(&plan, 16),
            Err(ErrChunk::TooManyWrites { writes: 4, max: 4 })
        );
        plan.writes.clear();
        assert!(
            check_send_queue_share(&plan, 3).is_err(),
            "no room even for the Send"
        );
    }
}
