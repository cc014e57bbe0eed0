//! Requester marshaling plan (RFC 8166 §3.5): choose Short, Chunked or Long
//! Call, provision Write chunks and a Reply chunk, and list the memory the
//! transport must register.
//!
//! Flow for the transport:
//! 1. describe the call as [`Item`]s and the expected reply as a
//!    [`ReplyShape`]; call [`plan_call`];
//! 2. register every [`Region`] (a call item, the reduced Payload stream, or
//!    a receive buffer for a Write chunk / the Reply chunk) with its
//!    [`Access`]; then [`CallPlan::set_region`] with the handle and the base
//!    address (or offset) the registration produced;
//! 3. encode [`CallPlan::header`] and Send it followed by
//!    [`CallPlan::inline`] (empty for a Long Call);
//! 4. keep [`CallPlan::offered`] to validate and reassemble the reply.

use crate::stream::{pad4, push_span, roundup4, spans_len, Item, Span};
use crate::wire::{
    BodyRepr, ChunkListsRepr, HeaderRepr, ReadSegment, Segment, WriteChunkRepr, FIXED_LEN,
    RPCRDMA_VERSION,
};

/// The two inline thresholds of a connection (RFC 8166 §3.3.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Thresholds {
    /// Largest Send from Requester to Responder.
    pub call_inline: u32,
    /// Largest Send from Responder to Requester.
    pub reply_inline: u32,
}

/// The inline thresholds as one end of a connection uses them, named by
/// direction: the largest Send it may post and the largest Send it can
/// receive (RFC 8166 §3.3.2). Whichever end calls, a message travels under
/// its sender's `send`: a reverse-direction Call (RFC 8167 §4.2), from
/// server to client, under the limit that forward Replies use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct InlineLimits {
    /// Largest Send this end may post.
    pub send: u32,
    /// Largest Send this end can receive.
    pub recv: u32,
}

impl Thresholds {
    /// The thresholds as `side` uses them: the client sends under the call
    /// threshold and receives under the reply threshold, the server the
    /// other way round (each computed by RFC 8797 §7 from one peer's Send
    /// Size and the other's Receive Size).
    pub fn side(&self, side: crate::classify::Side) -> InlineLimits {
        match side {
            crate::classify::Side::Client => InlineLimits {
                send: self.call_inline,
                recv: self.reply_inline,
            },
            crate::classify::Side::Server => InlineLimits {
                send: self.reply_inline,
                recv: self.call_inline,
            },
        }
    }
}

impl Default for Thresholds {
    /// 1024 bytes each way (RFC 8166 §3.3.3).
    fn default() -> Self {
        Thresholds {
            call_inline: 1024,
            reply_inline: 1024,
        }
    }
}

/// Limits on the chunks this Requester builds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ChunkLimits {
    /// Segments per chunk (default 16, as Linux and RFC 8267).
    pub max_segments_per_chunk: u32,
    /// Bytes per segment (what one registration may cover; default 1 MiB).
    pub max_segment_bytes: u32,
    /// Whether a Long Call may carry its reduced DDP-eligible items in Read
    /// chunks of their own beside the Position-Zero chunk (RFC 8166 §3.5.3,
    /// implementation-experience draft §3.3), keeping their direct
    /// placement. Default off: the whole call goes in Position Zero, as
    /// Linux's client sends it, since Linux's server before 5.11 takes a
    /// single Read chunk Position only.
    pub long_call_item_chunks: bool,
}

impl Default for ChunkLimits {
    fn default() -> Self {
        ChunkLimits {
            max_segments_per_chunk: 16,
            max_segment_bytes: 1 << 20,
            long_call_item_chunks: false,
        }
    }
}

/// What the Requester expects back (RFC 8166 §6.2).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplyShape {
    /// One entry per DDP-eligible result, in XDR order: the largest content
    /// length to provision a Write chunk for. Zero offers an empty Write
    /// chunk, which forces that result inline (§4.3.2). An empty vector
    /// offers an empty Write list.
    pub write_chunks: Vec<u32>,
    /// Largest reply Payload stream (RPC reply header included) when the
    /// offered Write chunks are used; results forced inline must be counted.
    pub max_reduced_len: u64,
    /// Offer XDR roundup space after each Write chunk whose largest result
    /// is not a multiple of 4 bytes: one more segment of [`WRITE_PAD_LEN`]
    /// bytes, a region of its own ([`RegionSource::WritePad`]), never
    /// holding result data. RFC 8166 §3.4.6 says a Requester SHOULD NOT
    /// (a Responder MUST NOT write roundup), so the default is off; the
    /// implementation-experience draft §3.6 reports a server that relies on
    /// the extra segment being there and another that writes zeros into it,
    /// and Linux's client offers it (a separate segment, the draft's case 2,
    /// so that nothing after the result buffer can be overwritten). It is
    /// left out when the data already takes every segment a chunk may have.
    pub write_pad: bool,
}

/// Length of the XDR roundup segment [`ReplyShape::write_pad`] offers: one
/// XDR unit, as Linux's client offers it.
pub const WRITE_PAD_LEN: u32 = 4;

impl ReplyShape {
    /// From a binding's estimate (RFC 8166 §6.2): one Write chunk per
    /// DDP-eligible result, and the largest reduced reply given the largest
    /// RPC reply header (24 bytes with an AUTH_NONE verifier; more with
    /// RPCSEC_GSS).
    pub fn from_estimate(est: &crate::binding::ReplyEstimate, max_rpc_reply_header: u64) -> Self {
        ReplyShape {
            write_chunks: est.ddp_results.clone(),
            max_reduced_len: max_rpc_reply_header + est.max_reduced_results,
            write_pad: false,
        }
    }

    /// Offers Write chunks only for the results that have a caller's buffer
    /// (`capacities`, in XDR order), each no larger than its buffer; the
    /// results left without a chunk, or with an empty one, come inline with
    /// their pads and are added to the reduced reply (RFC 8166 §4.3.2).
    fn fit_result_buffers(
        mut self,
        est: &crate::binding::ReplyEstimate,
        capacities: &[usize],
    ) -> Self {
        let n = capacities.len().min(est.ddp_results.len());
        self.write_chunks.truncate(n);
        for (wc, &cap) in self.write_chunks.iter_mut().zip(capacities) {
            *wc = (*wc).min(cap.min(u32::MAX as usize) as u32);
        }
        let inline: u64 = est
            .ddp_results
            .iter()
            .enumerate()
            .filter(|&(i, _)| i >= n || self.write_chunks[i] == 0)
            .map(|(_, &l)| roundup4(u64::from(l)))
            .sum();
        self.max_reduced_len += inline;
        self
    }
}

/// What a Requester knows when it provisions the reply resources of a call
/// (RFC 8166 §6.2: a Requester allocates them for the largest possible
/// reply before the Responder forms it): the Upper-Layer Binding's estimate
/// and what the caller brought.
#[derive(Clone, Copy, Debug)]
pub struct ReplyBounds<'a> {
    /// The binding's estimate for this call (`None`: no binding, an unknown
    /// procedure, or arguments too short to tell).
    pub estimate: Option<&'a crate::binding::ReplyEstimate>,
    /// The binding can put Write-chunk data back into a reply (it has a
    /// [`ReplyLayout`](crate::binding::ReplyLayout)); without one no Write
    /// chunk is offered and every result comes inline or in the Reply chunk.
    pub layout: bool,
    /// Capacities of the caller's result buffers, in XDR order: the `i`-th
    /// DDP-eligible result may be placed in the `i`-th buffer.
    pub result_buffers: &'a [usize],
    /// The RPC procedure; procedure 0 (NULL) has a void result.
    pub procedure: u32,
    /// The caller's bound on the reply, if it gave one.
    pub max_reply_len: Option<u64>,
    /// The largest RPC reply header (24 bytes with an AUTH_NONE verifier,
    /// more with RPCSEC_GSS).
    pub rpc_reply_header: u64,
    /// The reply size assumed with neither an estimate nor a caller's bound.
    pub default_max_reply: u64,
    /// Offer XDR roundup space after Write chunks ([`ReplyShape::write_pad`]).
    pub write_pad: bool,
}

impl ReplyBounds<'_> {
    /// The reply to provision for:
    /// - with an estimate and a layout, one Write chunk per DDP-eligible
    ///   result that has a caller's buffer, as large as the smaller of the
    ///   buffer and the binding's maximum; a result without one (or with an
    ///   empty one, which offers an empty Write chunk) comes inline and
    ///   counts in the reduced reply (RFC 8166 §4.3.2);
    /// - with an estimate and no layout, no Write chunk and every result
    ///   inline;
    /// - with no estimate, the RPC reply header alone for NULL, otherwise
    ///   the caller's bound or the default.
    ///
    /// The caller's bound raises an estimate it exceeds. [`plan_call`]
    /// offers a Reply chunk when the largest reduced reply may exceed the
    /// reply inline threshold (RFC 8166 §3.5.3, §4.3.3).
    pub fn shape(&self) -> ReplyShape {
        let hdr = self.rpc_reply_header;
        let mut shape = match (self.estimate, self.layout) {
            (Some(est), true) => {
                ReplyShape::from_estimate(est, hdr).fit_result_buffers(est, self.result_buffers)
            }
            (Some(est), false) => ReplyShape {
                write_chunks: Vec::new(),
                max_reduced_len: hdr + est.max_unreduced_results(),
                write_pad: false,
            },
            (None, _) if self.procedure == 0 => ReplyShape {
                write_chunks: Vec::new(),
                max_reduced_len: hdr,
                write_pad: false,
            },
            (None, _) => ReplyShape {
                write_chunks: Vec::new(),
                max_reduced_len: self.max_reply_len.map_or(self.default_max_reply, u64::from),
                write_pad: false,
            },
        };
        if let (Some(_), Some(m)) = (self.estimate, self.max_reply_len) {
            shape.max_reduced_len = shape.max_reduced_len.max(m);
        }
        shape.write_pad = self.write_pad;
        shape
    }
}

/// The message type a plan chose (RFC 8166 §3.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CallKind {
    /// RDMA_MSG with the whole Payload stream inline.
    Short,
    /// RDMA_MSG with DDP-eligible items reduced into Read chunks.
    Chunked,
    /// RDMA_NOMSG with a Position-Zero Read chunk (plus Read chunks for
    /// reduced items).
    Long,
}

/// What a region to register holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RegionSource {
    /// The content of call item `item` (a reduced DDP item; no pad).
    CallItem {
        /// Index into the call's items.
        item: usize,
    },
    /// The Payload stream, as [`CallPlan::payload`] describes it (the
    /// content of a Position-Zero Read chunk).
    CallPayload,
    /// A receive buffer for the reply's Write chunk `chunk`.
    ReplyWriteChunk {
        /// Index in the Write list.
        chunk: usize,
    },
    /// A receive buffer for the reply's Reply chunk.
    ReplyChunk,
    /// Room for the XDR roundup of Write chunk `chunk`'s result, offered as
    /// the chunk's last segment ([`ReplyShape::write_pad`]); whatever a
    /// Responder writes there is discarded.
    WritePad {
        /// Index in the Write list.
        chunk: usize,
    },
}

/// Remote access a region needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// The Responder reads it (Read chunks).
    RemoteRead,
    /// The Responder writes it (Write and Reply chunks).
    RemoteWrite,
}

/// Which header segment a [`SegmentRef`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SegmentSlot {
    /// Entry `i` of the Read list.
    Read(usize),
    /// Segment `segment` of Write chunk `chunk`.
    Write {
        /// Write chunk index.
        chunk: usize,
        /// Segment index.
        segment: usize,
    },
    /// Segment `i` of the Reply chunk.
    Reply(usize),
}

/// A header segment that covers part of a region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SegmentRef {
    /// The segment in the header.
    pub slot: SegmentSlot,
    /// Its byte offset within the region.
    pub offset: u64,
    /// Its length.
    pub len: u32,
}

/// A memory region the transport must register before sending.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Region {
    /// What it holds.
    pub source: RegionSource,
    /// Its length in bytes.
    pub len: u64,
    /// The access to grant.
    pub access: Access,
    /// The header segments that describe it, in order.
    pub segments: Vec<SegmentRef>,
}

/// The chunks a call offered for its reply, kept to validate the reply
/// (RFC 8166 §3.4.6, §4.3.3) and to locate the returned data.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct OfferedChunks {
    /// Offered Write chunks.
    pub write_list: Vec<WriteChunkRepr>,
    /// Offered Reply chunk.
    pub reply_chunk: Option<WriteChunkRepr>,
}

impl OfferedChunks {
    /// Taken from a received call's chunk lists (what a Responder answers).
    pub fn from_chunks(c: &crate::wire::ChunkLists<'_>) -> OfferedChunks {
        OfferedChunks {
            write_list: c.write_list.chunks().map(|w| w.to_repr()).collect(),
            reply_chunk: c.reply_chunk.map(|r| r.to_repr()),
        }
    }

    /// The chunk lists of a reply that uses none of the offered chunks:
    /// every offered Write chunk and the Reply chunk, returned with their
    /// segments and zero lengths (RFC 8166 §3.4.6: the Responder MUST copy
    /// the segment count and the segments, with the lengths it used).
    pub fn echo_unused(&self) -> ChunkListsRepr {
        ChunkListsRepr {
            read_list: vec![],
            write_list: self.write_list.iter().map(WriteChunkRepr::zeroed).collect(),
            reply_chunk: self.reply_chunk.as_ref().map(WriteChunkRepr::zeroed),
        }
    }
}

/// A planned call.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CallPlan {
    /// Message type chosen.
    pub kind: CallKind,
    /// The transport header; segment handles are zero and offsets are
    /// region-relative until [`set_region`](Self::set_region) fills them.
    pub header: HeaderRepr,
    /// Regions to register.
    pub regions: Vec<Region>,
    /// The Payload stream to send: for a Chunked call the reduced stream
    /// (reduced DDP items are gone), for a Short call the whole stream, for
    /// a Long Call what its Position-Zero chunk carries (the whole stream,
    /// or the reduced one with [`ChunkLimits::long_call_item_chunks`]);
    /// pads are [`Span::Zeros`].
    pub payload: Vec<Span>,
    /// Length of the unreduced Payload stream.
    pub unreduced_len: u64,
}

impl CallPlan {
    /// What follows the header in the Send (empty for a Long Call).
    pub fn inline(&self) -> &[Span] {
        match self.kind {
            CallKind::Long => &[],
            _ => &self.payload,
        }
    }

    /// Bytes of the Send: header plus inline Payload.
    pub fn send_len(&self) -> u64 {
        self.header.buffer_len() as u64 + spans_len(self.inline())
    }

    /// Records the registration of region `region`: every segment in it gets
    /// `handle`, and `base` plus its offset within the region.
    pub fn set_region(&mut self, region: usize, handle: u32, base: u64) {
        let Some(r) = self.regions.get(region) else {
            return;
        };
        let refs = r.segments.clone();
        for s in refs {
            self.set_segment(s.slot, handle, base + s.offset);
        }
    }

    /// Sets one segment's handle and offset.
    pub fn set_segment(&mut self, slot: SegmentSlot, handle: u32, offset: u64) {
        let Some(c) = self.header.chunks_mut() else {
            return;
        };
        let seg = match slot {
            SegmentSlot::Read(i) => c.read_list.get_mut(i).map(|r| &mut r.segment),
            SegmentSlot::Write { chunk, segment } => c
                .write_list
                .get_mut(chunk)
                .and_then(|w| w.segments.get_mut(segment)),
            SegmentSlot::Reply(i) => c.reply_chunk.as_mut().and_then(|w| w.segments.get_mut(i)),
        };
        if let Some(seg) = seg {
            seg.handle = handle;
            seg.offset = offset;
        }
    }

    /// The Write chunks and Reply chunk offered, as currently filled in.
    pub fn offered(&self) -> OfferedChunks {
        match self.header.chunks() {
            Some(c) => OfferedChunks {
                write_list: c.write_list.clone(),
                reply_chunk: c.reply_chunk.clone(),
            },
            None => OfferedChunks::default(),
        }
    }
}

/// Why a call cannot be planned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum PlanError {
    /// A DDP item is not at a 4-byte aligned Position (RFC 8166 §3.4.5).
    #[error("DDP item {item} is at unaligned position {position}")]
    Misaligned {
        /// Item index.
        item: usize,
        /// Its unreduced offset.
        position: u64,
    },
    /// A chunk would need more segments than allowed.
    #[error("a chunk of {len} bytes needs more than {max} segments")]
    TooManySegments {
        /// Chunk length.
        len: u64,
        /// Segment limit.
        max: u32,
    },
    /// The transport header alone does not fit the call inline threshold.
    #[error("transport header of {0} bytes exceeds the call inline threshold")]
    HeaderTooLarge(usize),
    /// A stream longer than 4 GiB cannot be described by 32-bit Positions.
    #[error("Payload stream too long for RPC-over-RDMA")]
    TooLong,
    /// Limits are unusable (zero segments or zero bytes per segment).
    #[error("chunk limits allow no segment")]
    BadLimits,
}

/// Splits `len` bytes into segment lengths.
fn split(len: u64, limits: &ChunkLimits) -> Result<Vec<u32>, PlanError> {
    let per = limits.max_segment_bytes as u64;
    if per == 0 || limits.max_segments_per_chunk == 0 {
        return Err(PlanError::BadLimits);
    }
    let n = len.div_ceil(per).max(1);
    if n > limits.max_segments_per_chunk as u64 {
        return Err(PlanError::TooManySegments {
            len,
            max: limits.max_segments_per_chunk,
        });
    }
    let mut out = Vec::with_capacity(n as usize);
    let mut rest = len;
    for _ in 0..n {
        let l = rest.min(per);
        out.push(l as u32);
        rest -= l;
    }
    Ok(out)
}

/// The segments of a Write or Reply chunk of `len` bytes (handles left 0,
/// offsets relative to the region) and where each sits in the header.
fn write_segments(
    len: u64,
    limits: &ChunkLimits,
    slot: impl Fn(usize) -> SegmentSlot,
) -> Result<(Vec<Segment>, Vec<SegmentRef>), PlanError> {
    let lens = split(len, limits)?;
    let mut refs = Vec::with_capacity(lens.len());
    let mut segs = Vec::with_capacity(lens.len());
    let mut off = 0u64;
    for (si, &l) in lens.iter().enumerate() {
        segs.push(Segment {
            handle: 0,
            length: l,
            offset: off,
        });
        refs.push(SegmentRef {
            slot: slot(si),
            offset: off,
            len: l,
        });
        off += l as u64;
    }
    Ok((segs, refs))
}

/// Plans the Write list and Reply chunk for the expected reply.
fn plan_reply_chunks(
    reply: &ReplyShape,
    recv_inline: u32,
    limits: &ChunkLimits,
    chunks: &mut ChunkListsRepr,
    regions: &mut Vec<Region>,
) -> Result<(), PlanError> {
    for (ci, &max) in reply.write_chunks.iter().enumerate() {
        if max == 0 {
            chunks.write_list.push(WriteChunkRepr::default());
            continue;
        }
        // No pad space unless asked for: a Responder MUST NOT write roundup
        // (§3.4.6).
        let (mut segs, refs) = write_segments(max as u64, limits, |segment| SegmentSlot::Write {
            chunk: ci,
            segment,
        })?;
        regions.push(Region {
            source: RegionSource::ReplyWriteChunk { chunk: ci },
            len: max as u64,
            access: Access::RemoteWrite,
            segments: refs,
        });
        if reply.write_pad && max % 4 != 0 && segs.len() < limits.max_segments_per_chunk as usize {
            regions.push(Region {
                source: RegionSource::WritePad { chunk: ci },
                len: WRITE_PAD_LEN as u64,
                access: Access::RemoteWrite,
                segments: vec![SegmentRef {
                    slot: SegmentSlot::Write {
                        chunk: ci,
                        segment: segs.len(),
                    },
                    offset: 0,
                    len: WRITE_PAD_LEN,
                }],
            });
            segs.push(Segment {
                handle: 0,
                length: WRITE_PAD_LEN,
                offset: 0,
            });
        }
        chunks.write_list.push(WriteChunkRepr { segments: segs });
    }
    // A Reply chunk whenever the largest reply might not fit inline (§4.3.3):
    // the reply's header echoes our Write list and an absent Reply chunk.
    let reply_hdr = FIXED_LEN as u64
        + ChunkListsRepr {
            read_list: vec![],
            write_list: chunks.write_list.clone(),
            reply_chunk: None,
        }
        .buffer_len() as u64;
    if reply_hdr + reply.max_reduced_len > recv_inline as u64 {
        let cap = roundup4(reply.max_reduced_len);
        if cap > u32::MAX as u64 {
            return Err(PlanError::TooLong);
        }
        let (segs, refs) = write_segments(cap, limits, SegmentSlot::Reply)?;
        chunks.reply_chunk = Some(WriteChunkRepr { segments: segs });
        regions.push(Region {
            source: RegionSource::ReplyChunk,
            len: cap,
            access: Access::RemoteWrite,
            segments: refs,
        });
    }
    Ok(())
}

/// Adds a Read chunk for each reduced DDP item `(item, position, length)`.
fn push_item_chunks(
    ddp: &[(usize, u64, u32)],
    limits: &ChunkLimits,
    chunks: &mut ChunkListsRepr,
    regions: &mut Vec<Region>,
) -> Result<(), PlanError> {
    for &(item, position, n) in ddp {
        push_read_chunk(
            position as u32,
            n as u64,
            RegionSource::CallItem { item },
            limits,
            chunks,
            regions,
        )?;
    }
    Ok(())
}

/// Adds a Read chunk at `position` covering `len` bytes of `source`.
fn push_read_chunk(
    position: u32,
    len: u64,
    source: RegionSource,
    limits: &ChunkLimits,
    chunks: &mut ChunkListsRepr,
    regions: &mut Vec<Region>,
) -> Result<(), PlanError> {
    let lens = split(len, limits)?;
    let mut refs = Vec::with_capacity(lens.len());
    let mut off = 0u64;
    for &l in &lens {
        refs.push(SegmentRef {
            slot: SegmentSlot::Read(chunks.read_list.len()),
            offset: off,
            len: l,
        });
        chunks.read_list.push(ReadSegment {
            position,
            segment: Segment {
                handle: 0,
                length: l,
                offset: off,
            },
        });
        off += l as u64;
    }
    regions.push(Region {
        source,
        len,
        access: Access::RemoteRead,
        segments: refs,
    });
    Ok(())
}

/// Plans an RPC Call (RFC 8166 §3.5):
/// - **Short** when header plus the whole stream fit the call inline
///   threshold;
/// - otherwise **Chunked**: every non-empty DDP item reduced into a Read
///   chunk at its exact Position, pad removed from the stream and not put in
///   the chunk (§3.4.5);
/// - otherwise **Long**: RDMA_NOMSG whose Position-Zero Read chunk carries
///   the reduced stream, pads included (§3.5.3), beside the item chunks.
///
/// Write chunks and a Reply chunk are provisioned from `reply` (§3.4.6,
/// §4.3.3) whatever the call's kind.
///
/// Only items the binding declares DDP-eligible may be [`Item::Ddp`]
/// (§6.1); with RPCSEC_GSS integrity or privacy, pass none at all (§8.2.2:
/// the stream MUST NOT be reduced).
pub fn plan_call(
    xid: u32,
    credit: u32,
    items: &[Item],
    reply: &ReplyShape,
    th: &Thresholds,
    limits: &ChunkLimits,
) -> Result<CallPlan, PlanError> {
    let inline = th.side(crate::classify::Side::Client);
    plan_call_within(xid, credit, items, reply, inline, limits)
}

/// [`plan_call`] for a Requester whose inline limits are `inline`: the Call
/// is sent under `inline.send`, and a Reply chunk is offered when the reply
/// may exceed `inline.recv`. The forward-direction Requester is the client
/// (`Thresholds::side(Side::Client)`); a reverse-direction Requester is the
/// server (RFC 8167 §4.2).
pub fn plan_call_within(
    xid: u32,
    credit: u32,
    items: &[Item],
    reply: &ReplyShape,
    inline: InlineLimits,
    limits: &ChunkLimits,
) -> Result<CallPlan, PlanError> {
    let mut chunks = ChunkListsRepr::default();
    let mut regions = Vec::new();
    plan_reply_chunks(reply, inline.recv, limits, &mut chunks, &mut regions)?;

    // Unreduced positions of the items, and the two candidate payloads.
    let mut pos = 0u64;
    let mut full = Vec::with_capacity(items.len() + 4);
    let mut reduced = Vec::with_capacity(items.len());
    let mut ddp: Vec<(usize, u64, u32)> = Vec::new(); // (item, position, len)
    for (i, it) in items.iter().enumerate() {
        match *it {
            Item::Xdr(n) => {
                push_span(
                    &mut full,
                    Span::Item {
                        item: i,
                        offset: 0,
                        len: n,
                    },
                );
                push_span(
                    &mut reduced,
                    Span::Item {
                        item: i,
                        offset: 0,
                        len: n,
                    },
                );
            }
            Item::Ddp(n) => {
                if !pos.is_multiple_of(4) {
                    return Err(PlanError::Misaligned {
                        item: i,
                        position: pos,
                    });
                }
                let pad = Span::Zeros(pad4(n as u64) as u32);
                push_span(
                    &mut full,
                    Span::Item {
                        item: i,
                        offset: 0,
                        len: n,
                    },
                );
                push_span(&mut full, pad);
                if n == 0 || pos == 0 {
                    // Nothing to move, or an item where the RPC header must
                    // start (Position Zero is reserved for Long Calls): the
                    // item stays in the stream.
                    push_span(
                        &mut reduced,
                        Span::Item {
                            item: i,
                            offset: 0,
                            len: n,
                        },
                    );
                    push_span(&mut reduced, pad);
                } else {
                    ddp.push((i, pos, n));
                }
            }
        }
        pos += it.unreduced_len();
    }
    let unreduced_len = pos;
    if unreduced_len > u32::MAX as u64 {
        return Err(PlanError::TooLong);
    }
    let base_hdr = FIXED_LEN + chunks.buffer_len();

    // Short message.
    if base_hdr as u64 + unreduced_len <= inline.send as u64 {
        return Ok(CallPlan {
            kind: CallKind::Short,
            header: HeaderRepr {
                xid,
                vers: RPCRDMA_VERSION,
                credit,
                body: BodyRepr::Msg(chunks),
            },
            regions,
            payload: full,
            unreduced_len,
        });
    }

    // Chunked message: reduce the DDP items.
    let mut ch = chunks.clone();
    let mut rg = regions.clone();
    push_item_chunks(&ddp, limits, &mut ch, &mut rg)?;
    let hdr = FIXED_LEN + ch.buffer_len();
    let reduced_len = spans_len(&reduced);
    if !ddp.is_empty() && hdr as u64 + reduced_len <= inline.send as u64 {
        return Ok(CallPlan {
            kind: CallKind::Chunked,
            header: HeaderRepr {
                xid,
                vers: RPCRDMA_VERSION,
                credit,
                body: BodyRepr::Msg(ch),
            },
            regions: rg,
            payload: reduced,
            unreduced_len,
        });
    }

    // Long Call. By default the whole call, DDP-eligible items included,
    // in one Position-Zero Read chunk: RFC 8166 §3.5.3 (and the
    // implementation-experience draft §3.3) also allow item chunks at their
    // own Positions beside it, but Linux's server before 5.11 handles a
    // single Read chunk Position only and answers ERR_CHUNK; Linux's client
    // sends the whole message in Position Zero as well. Those items then
    // lose direct placement (they are copied into the Position-Zero
    // buffer), which only calls whose non-DDP part alone exceeds the inline
    // threshold pay. With `long_call_item_chunks`, Position Zero carries the
    // reduced stream and each item keeps its own chunk.
    let mut ch = chunks;
    let mut rg = regions;
    let (p0_len, payload) = if limits.long_call_item_chunks {
        (spans_len(&reduced), reduced)
    } else {
        (unreduced_len, full)
    };
    // Read list entries for Position Zero come first; item chunks keep
    // increasing Positions after it.
    push_read_chunk(
        0,
        p0_len,
        RegionSource::CallPayload,
        limits,
        &mut ch,
        &mut rg,
    )?;
    if limits.long_call_item_chunks {
        push_item_chunks(&ddp, limits, &mut ch, &mut rg)?;
    }
    let hdr = FIXED_LEN + ch.buffer_len();
    if hdr > inline.send as usize {
        return Err(PlanError::HeaderTooLarge(hdr));
    }
    Ok(CallPlan {
        kind: CallKind::Long,
        header: HeaderRepr {
            xid,
            vers: RPCRDMA_VERSION,
            credit,
            body: BodyRepr::NoMsg(ch),
        },
        regions: rg,
        payload,
        unreduced_len,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::binding::ReplyEstimate;

    fn bounds<'a>(est: Option<&'a ReplyEstimate>, bufs: &'a [usize]) -> ReplyBounds<'a> {
        ReplyBounds {
            estimate: est,
            layout: true,
            result_buffers: bufs,
            procedure: 1,
            max_reply_len: None,
            rpc_reply_header: 24,
            default_max_reply: 1 << 20,
            write_pad: false,
        }
    }

    fn est() -> ReplyEstimate {
        ReplyEstimate {
            max_reduced_results: 100,
            ddp_results: vec![4096, 10],
        }
    }

    #[test]
    fn rfc8166_s6_2_a_write_chunk_per_result_buffer() {
        let e = est();
        let s = bounds(Some(&e), &[8192, 6]).shape();
        assert_eq!(
            s.write_chunks,
            vec![4096, 6],
            "capped by the binding and the buffer"
        );
        assert_eq!(s.max_reduced_len, 124);
        assert_eq!(s, {
            let mut f = ReplyShape::from_estimate(&e, 24);
            f.write_chunks[1] = 6;
            f
        });
    }

    #[test]
    fn rfc8166_s4_3_2_results_without_a_chunk_come_inline() {
        let e = est();
        // One buffer: the second result is inline (10 bytes + 2 pad).
        let s = bounds(Some(&e), &[8192]).shape();
        assert_eq!(s.write_chunks, vec![4096]);
        assert_eq!(s.max_reduced_len, 24 + 100 + 12);
        // An empty buffer offers an empty Write chunk: its result is inline.
        let s = bounds(Some(&e), &[0, 16]).shape();
        assert_eq!(s.write_chunks, vec![0, 10]);
        assert_eq!(s.max_reduced_len, 24 + 100 + 4096);
        // No buffers: no Write chunk, everything inline.
        let s = bounds(Some(&e), &[]).shape();
        assert!(s.write_chunks.is_empty());
        assert_eq!(s.max_reduced_len, 24 + e.max_unreduced_results());
    }

    #[test]
    fn no_layout_no_write_chunks() {
        let e = est();
        let mut b = bounds(Some(&e), &[8192, 8192]);
        b.layout = false;
        let s = b.shape();
        assert!(s.write_chunks.is_empty());
        assert_eq!(s.max_reduced_len, 24 + 100 + 4096 + 12);
    }

    #[test]
    fn without_an_estimate() {
        let mut b = bounds(None, &[]);
        assert_eq!(b.shape().max_reduced_len, 1 << 20, "the default");
        b.max_reply_len = Some(5000);
        assert_eq!(b.shape().max_reduced_len, 5000, "the caller's bound");
        b.procedure = 0;
        assert_eq!(b.shape().max_reduced_len, 24, "NULL: the reply header");
        b.write_pad = true;
        assert!(b.shape().write_pad);
    }

    #[test]
    fn rfc8166_s3_3_2_thresholds_by_direction() {
        use crate::classify::Side;
        let th = Thresholds {
            call_inline: 4096,
            reply_inline: 1024,
        };
        let c = th.side(Side::Client);
        let s = th.side(Side::Server);
        assert_eq!((c.send, c.recv), (4096, 1024));
        assert_eq!((s.send, s.recv), (1024, 4096));
        // What one end sends, the other receives.
        assert_eq!((c.send, c.recv), (s.recv, s.send));
    }

    #[test]
    fn rfc8167_s4_2_a_reverse_call_travels_under_the_servers_send_limit() {
        use crate::classify::Side;
        use crate::stream::Item;
        let th = Thresholds {
            call_inline: 4096,
            reply_inline: 1024,
        };
        let reply = ReplyShape {
            max_reduced_len: 100,
            ..Default::default()
        };
        let items = [Item::Xdr(2000)];
        let lim = ChunkLimits::default();
        // Forward: 2000 bytes fit the client's 4096-byte send limit.
        let fwd = plan_call(1, 1, &items, &reply, &th, &lim).unwrap();
        assert_eq!(fwd.kind, CallKind::Short);
        assert_eq!(
            plan_call_within(1, 1, &items, &reply, th.side(Side::Client), &lim).unwrap(),
            fwd
        );
        // Reverse: the server may send only 1024 bytes.
        let rev = plan_call_within(1, 1, &items, &reply, th.side(Side::Server), &lim).unwrap();
        assert_eq!(rev.kind, CallKind::Long);
    }

    #[test]
    fn callers_bound_raises_an_estimate() {
        let e = est();
        let mut b = bounds(Some(&e), &[8192, 8192]);
        b.max_reply_len = Some(9000);
        assert_eq!(b.shape().max_reduced_len, 9000);
        b.max_reply_len = Some(10);
        assert_eq!(b.shape().max_reduced_len, 124);
    }
}
