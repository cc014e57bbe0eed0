//! Responder reply plan (RFC 8166 §3.4.6, §3.5.3, §4.3.2, §4.3.3).
//!
//! DDP-eligible results go into the offered Write chunks in order — filled in
//! segment order, actual lengths, the same segment count, never a pad byte.
//! An unused Write chunk keeps its count with zero lengths; an empty Write
//! chunk forces its result inline; results beyond the offered chunks go
//! inline. The reduced reply is written into the offered Reply chunk
//! (RDMA_NOMSG) whenever that chunk can hold it, as Linux's server does
//! (implementation-experience draft §3.4.1: old Linux clients refuse a Short
//! reply that carries a Reply chunk); otherwise it is sent Short (RDMA_MSG)
//! if it fits the reply inline threshold. Every offered chunk is echoed with
//! its actual lengths (zero when unused), even in a Short reply. A reply that fits neither is an error for which
//! the transport sends ERR_CHUNK — never an overrun.

use crate::marshal::OfferedChunks;
use crate::stream::{pad4, push_span, spans_len, split_spans, Item, Span};
use crate::wire::{BodyRepr, ChunkListsRepr, HeaderRepr, Segment, WriteChunkRepr, RPCRDMA_VERSION};

/// One RDMA Write: `source` bytes to remote `handle` at `remote_offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RdmaWrite {
    /// Bytes to write (its length is the write's length).
    pub source: Span,
    /// Remote STag.
    pub handle: u32,
    /// Remote offset or address.
    pub remote_offset: u64,
}

/// How the reply travels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReplyKind {
    /// RDMA_MSG: header plus reduced Payload stream in one Send.
    Short,
    /// RDMA_NOMSG: reduced Payload stream written into the Reply chunk.
    Long,
}

/// A planned reply.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ReplyPlan {
    /// How it travels.
    pub kind: ReplyKind,
    /// The transport header to send.
    pub header: HeaderRepr,
    /// RDMA Writes to post before the Send, in order.
    pub writes: Vec<RdmaWrite>,
    /// Bytes to Send after the header (empty for [`ReplyKind::Long`]).
    pub inline: Vec<Span>,
}

/// Why a reply cannot be conveyed; the transport answers ERR_CHUNK.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum ReplyPlanError {
    /// A result is larger than the Write chunk provisioned for it.
    #[error("result of {len} bytes exceeds write chunk {chunk} ({cap} bytes)")]
    WriteChunkTooSmall {
        /// Write list index.
        chunk: usize,
        /// Result length.
        len: u32,
        /// Chunk capacity.
        cap: u64,
    },
    /// The reduced reply exceeds the Reply chunk.
    #[error("reply of {len} bytes exceeds the reply chunk ({cap} bytes)")]
    ReplyChunkTooSmall {
        /// Reduced reply length.
        len: u64,
        /// Reply chunk capacity.
        cap: u64,
    },
    /// The RDMA_NOMSG header alone (the echoed chunks) exceeds the reply
    /// inline threshold.
    #[error("reply header of {0} bytes exceeds the reply inline threshold")]
    HeaderTooLarge(u64),
    /// The reduced reply exceeds the inline threshold and no Reply chunk
    /// was offered.
    #[error("reply of {len} bytes needs a reply chunk and none was offered")]
    NoReplyChunk {
        /// Send length needed.
        len: u64,
    },
}

impl ReplyPlanError {
    /// The RDMA_ERROR header to send instead (RFC 8166 §4.5.3).
    pub fn error_header(&self, xid: u32, credit: u32) -> HeaderRepr {
        HeaderRepr::error(xid, RPCRDMA_VERSION, credit, crate::wire::ErrorBody::Chunk)
    }
}

/// Writes `spans` into the segments of `chunk` in order; returns the echoed
/// chunk (actual lengths) and appends the writes.
fn fill_chunk(
    spans: &[Span],
    chunk: &WriteChunkRepr,
    writes: &mut Vec<RdmaWrite>,
) -> WriteChunkRepr {
    let mut remaining = spans_len(spans);
    let lens: Vec<u32> = chunk
        .segments
        .iter()
        .map(|s| {
            let l = remaining.min(s.length as u64);
            remaining -= l;
            l as u32
        })
        .collect();
    let pieces = split_spans(spans, &lens);
    let mut echo = Vec::with_capacity(chunk.segments.len());
    for ((seg, &l), piece) in chunk.segments.iter().zip(&lens).zip(pieces) {
        let mut off = seg.offset;
        for s in piece {
            writes.push(RdmaWrite {
                source: s,
                handle: seg.handle,
                remote_offset: off,
            });
            // Validation rejects wrapping segments (validate.rs); wrap rather
            // than panic should an unvalidated chunk ever reach here.
            off = off.wrapping_add(s.len() as u64);
        }
        echo.push(Segment { length: l, ..*seg });
    }
    WriteChunkRepr { segments: echo }
}

/// The bytes of an offered Write chunk a result may take: its total length,
/// less a trailing XDR pad segment, the extra segment of the
/// implementation-experience draft §3.6 (case 2) that Linux's requester,
/// and ours with `ReplyShape::write_pad`, offer after a buffer whose length
/// is not a multiple of 4. Such a segment is recognised as a last segment of
/// 1 to 4 bytes after segments whose total is not a multiple of 4 (a buffer
/// split into segments ends unaligned only at its end). A Responder MUST NOT
/// write roundup into it (RFC 8166 §3.4.6), and a result that would need it
/// is longer than the Requester's buffer: too long for the chunk.
pub fn result_capacity(chunk: &WriteChunkRepr) -> u64 {
    let total = chunk.total_len();
    match chunk.segments.split_last() {
        Some((last, before)) if !before.is_empty() && (1..=4).contains(&last.length) => {
            let data = total - u64::from(last.length);
            if !data.is_multiple_of(4) {
                data
            } else {
                total
            }
        }
        _ => total,
    }
}

/// Plans a reply to a call that offered `offered`, whose reply stream is
/// `items`, sent by a Responder whose send limit is `reply_inline` (its
/// [`InlineLimits::send`](crate::marshal::InlineLimits): the reply inline
/// threshold for a forward-direction reply).
pub fn plan_reply(
    xid: u32,
    credit: u32,
    items: &[Item],
    offered: &OfferedChunks,
    reply_inline: u32,
) -> Result<ReplyPlan, ReplyPlanError> {
    let mut writes = Vec::new();
    let mut reduced: Vec<Span> = Vec::with_capacity(items.len() + 2);
    let mut echo: Vec<WriteChunkRepr> = offered.write_list.iter().map(|c| c.zeroed()).collect();
    let mut next_chunk = 0usize;
    for (i, it) in items.iter().enumerate() {
        match *it {
            Item::Xdr(n) => push_span(
                &mut reduced,
                Span::Item {
                    item: i,
                    offset: 0,
                    len: n,
                },
            ),
            Item::Ddp(n) => {
                let chunk = offered.write_list.get(next_chunk);
                let ci = next_chunk;
                next_chunk += 1;
                match chunk {
                    Some(c) if !c.is_empty() => {
                        let cap = result_capacity(c);
                        if n as u64 > cap {
                            return Err(ReplyPlanError::WriteChunkTooSmall {
                                chunk: ci,
                                len: n,
                                cap,
                            });
                        }
                        let src = [Span::Item {
                            item: i,
                            offset: 0,
                            len: n,
                        }];
                        echo[ci] = fill_chunk(&src, c, &mut writes);
                    }
                    // Empty Write chunk, or none left: the result goes inline.
                    _ => {
                        push_span(
                            &mut reduced,
                            Span::Item {
                                item: i,
                                offset: 0,
                                len: n,
                            },
                        );
                        push_span(&mut reduced, Span::Zeros(pad4(n as u64) as u32));
                    }
                }
            }
        }
    }
    let reduced_len = spans_len(&reduced);
    let mut chunks = ChunkListsRepr {
        write_list: echo,
        ..offered.echo_unused()
    };
    let short_len = (crate::wire::FIXED_LEN + chunks.buffer_len()) as u64 + reduced_len;
    // An offered Reply chunk that can hold the reply is used even when the
    // reply would fit inline (as Linux's server does). RFC 8166 §4.3.3 lets
    // a Short reply echo the unused chunk with zero lengths, but Linux
    // clients up to 4.9 fail any RDMA_MSG reply that carries a Reply chunk
    // (implementation-experience draft §3.4.1 asks to prohibit it); a used
    // chunk suits every Requester. A chunk too small for the reply is
    // echoed unused in a Short reply when that fits.
    let use_reply_chunk = offered
        .reply_chunk
        .as_ref()
        .is_some_and(|rc| reduced_len <= rc.total_len());
    if !use_reply_chunk && short_len <= reply_inline as u64 {
        return Ok(ReplyPlan {
            kind: ReplyKind::Short,
            header: HeaderRepr {
                xid,
                vers: RPCRDMA_VERSION,
                credit,
                body: BodyRepr::Msg(chunks),
            },
            writes,
            inline: reduced,
        });
    }
    let Some(rc) = &offered.reply_chunk else {
        return Err(ReplyPlanError::NoReplyChunk { len: short_len });
    };
    let cap = rc.total_len();
    if reduced_len > cap {
        return Err(ReplyPlanError::ReplyChunkTooSmall {
            len: reduced_len,
            cap,
        });
    }
    chunks.reply_chunk = Some(fill_chunk(&reduced, rc, &mut writes));
    let hdr_len = (crate::wire::FIXED_LEN + chunks.buffer_len()) as u64;
    if hdr_len > reply_inline as u64 {
        return Err(ReplyPlanError::HeaderTooLarge(hdr_len));
    }
    Ok(ReplyPlan {
        kind: ReplyKind::Long,
        header: HeaderRepr {
            xid,
            vers: RPCRDMA_VERSION,
            credit,
            body: BodyRepr::NoMsg(chunks),
        },
        writes,
        inline: vec![],
    })
}
