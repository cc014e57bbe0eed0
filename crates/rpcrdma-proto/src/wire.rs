//! The RPC-over-RDMA Version One transport header (RFC 8166 §4.1.2):
//! zero-copy decoding views ([`Header`], [`ReadList`], [`WriteList`],
//! [`WriteChunk`]) and owned representations for encoding ([`HeaderRepr`]).
//!
//! Decoding never allocates: [`Header::parse`] checks the whole structure in
//! one pass (every list bounded by the buffer and by [`DecodeLimits`]) and
//! then hands out views that re-read the already-checked bytes on demand.
//!
//! Encoding writes into a caller buffer; [`HeaderRepr::buffer_len`] gives the
//! exact encoded size beforehand.

use crate::error::{DecodeError, DecodeErrorKind, EmitError};

/// The only RPC-over-RDMA version this crate speaks (RFC 8166 §4.2.2).
pub const RPCRDMA_VERSION: u32 = 1;
/// Size of the smallest valid transport header: four fixed words plus three
/// empty chunk lists (RFC 8166 §4.5). Anything shorter is silently discarded.
pub const MIN_HEADER_LEN: usize = 28;
/// Size of the four fixed header words (xid, vers, credit, proc).
pub const FIXED_LEN: usize = 16;
/// Encoded size of a plain segment, HLOO (RFC 8166 §4.7).
pub const SEGMENT_LEN: usize = 16;
/// Encoded size of a read segment, PHLOO (RFC 8166 §4.7).
pub const READ_SEGMENT_LEN: usize = 20;

/// Read-list entry stride on the wire: the "1" discriminator plus PHLOO.
const READ_ENTRY_LEN: usize = 4 + READ_SEGMENT_LEN;

/// The `rdma_proc` discriminator (RFC 8166 §4.2.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Proc {
    /// RDMA_MSG = 0: chunk lists, then the Payload stream.
    Msg,
    /// RDMA_NOMSG = 1: chunk lists only; a chunk carries the Payload stream.
    NoMsg,
    /// RDMA_MSGP = 2: no longer supported (RFC 8166 §4.6.1).
    Msgp,
    /// RDMA_DONE = 3: no longer supported (RFC 8166 §4.6.2).
    Done,
    /// RDMA_ERROR = 4: header error report (RFC 8166 §4.5).
    Error,
}

impl Proc {
    /// Maps an on-the-wire value to a procedure.
    pub fn from_u32(v: u32) -> Option<Proc> {
        Some(match v {
            0 => Proc::Msg,
            1 => Proc::NoMsg,
            2 => Proc::Msgp,
            3 => Proc::Done,
            4 => Proc::Error,
            _ => return None,
        })
    }

    /// The on-the-wire value.
    pub fn as_u32(self) -> u32 {
        match self {
            Proc::Msg => 0,
            Proc::NoMsg => 1,
            Proc::Msgp => 2,
            Proc::Done => 3,
            Proc::Error => 4,
        }
    }
}

/// `rpc_rdma_errcode` value ERR_VERS (RFC 8166 §4.1.2).
pub const ERR_VERS: u32 = 1;
/// `rpc_rdma_errcode` value ERR_CHUNK (RFC 8166 §4.1.2).
pub const ERR_CHUNK: u32 = 2;

/// A plain RDMA segment, `xdr_rdma_segment` (RFC 8166 §3.4.3).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Segment {
    /// Steering tag (STag / R_key) of the registered region.
    pub handle: u32,
    /// Length of the segment in bytes.
    pub length: u32,
    /// Offset or virtual address of the segment.
    pub offset: u64,
}

impl Segment {
    fn read_at(b: &[u8], off: usize) -> Segment {
        Segment {
            handle: be32(b, off),
            length: be32(b, off + 4),
            offset: be64(b, off + 8),
        }
    }

    fn write_at(&self, b: &mut [u8], off: usize) {
        put32(b, off, self.handle);
        put32(b, off + 4, self.length);
        put64(b, off + 8, self.offset);
    }
}

/// An RDMA read segment, `xdr_read_chunk` (RFC 8166 §3.4.5): a Position in
/// the unreduced Payload stream plus a plain segment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ReadSegment {
    /// Byte offset in the unreduced Payload stream; the same for every
    /// segment of one Read chunk.
    pub position: u32,
    /// Where the bytes live on the Requester.
    pub segment: Segment,
}

/// Structural limits applied while decoding, so that a peer cannot make us
/// walk or keep more than we are prepared for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodeLimits {
    /// Maximum segments in one Read chunk, Write chunk or Reply chunk
    /// (default 16, as Linux and RFC 8267 use).
    pub max_segments_per_chunk: u32,
    /// Maximum number of Read chunks (distinct runs of Positions).
    pub max_read_chunks: u32,
    /// Maximum number of Write chunks in the Write list.
    pub max_write_chunks: u32,
    /// Largest Position-Zero Read chunk (a Long Call's whole Payload
    /// stream) a Responder accepts to pull; larger ones earn ERR_CHUNK
    /// rather than an allocation of the peer's choosing.
    pub max_long_call: u64,
}

impl Default for DecodeLimits {
    fn default() -> Self {
        DecodeLimits {
            max_segments_per_chunk: 16,
            max_read_chunks: 8,
            max_write_chunks: 8,
            max_long_call: (16 << 20) + (64 << 10),
        }
    }
}

#[inline(always)]
fn be32(b: &[u8], off: usize) -> u32 {
    u32::from_be_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

#[inline]
fn be64(b: &[u8], off: usize) -> u64 {
    ((be32(b, off) as u64) << 32) | be32(b, off + 4) as u64
}

#[inline]
fn put32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_be_bytes());
}

#[inline]
fn put64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_be_bytes());
}

/// Reads a word if it is inside the buffer.
#[inline(always)]
fn word(b: &[u8], off: usize) -> Option<u32> {
    let w = b.get(off..off.checked_add(4)?)?;
    Some(u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
}

/// The Read list (RFC 8166 §4.3.1): read segments, grouped by Position into
/// Read chunks. A checked view into the receive buffer.
#[derive(Clone, Copy, Debug)]
pub struct ReadList<'a> {
    /// `count` entries of [1, P, H, L, OO].
    entries: &'a [u8],
    count: usize,
}

impl<'a> ReadList<'a> {
    /// An empty Read list.
    pub const EMPTY: ReadList<'static> = ReadList {
        entries: &[],
        count: 0,
    };

    /// Number of read segments.
    pub fn segment_count(&self) -> usize {
        self.count
    }

    /// True when the list is empty (encoded as a single zero word).
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The `i`-th read segment.
    pub fn get(&self, i: usize) -> Option<ReadSegment> {
        if i >= self.count {
            return None;
        }
        let off = i * READ_ENTRY_LEN + 4;
        Some(ReadSegment {
            position: be32(self.entries, off),
            segment: Segment::read_at(self.entries, off + 4),
        })
    }

    /// All read segments in list order.
    pub fn segments(&self) -> impl Iterator<Item = ReadSegment> + 'a {
        let me = *self;
        (0..me.count).filter_map(move |i| me.get(i))
    }

    /// Read chunks: maximal runs of consecutive segments sharing one Position
    /// (RFC 8166 §3.4.5).
    pub fn chunks(&self) -> ReadChunks<'a> {
        ReadChunks {
            rest: self.entries,
            count: self.count,
        }
    }
}

/// Iterator over the Read chunks of a [`ReadList`].
#[derive(Clone, Debug)]
pub struct ReadChunks<'a> {
    rest: &'a [u8],
    count: usize,
}

impl<'a> Iterator for ReadChunks<'a> {
    type Item = ReadChunk<'a>;

    fn next(&mut self) -> Option<ReadChunk<'a>> {
        if self.count == 0 {
            return None;
        }
        let position = be32(self.rest, 4);
        let mut n = 1;
        while n < self.count && be32(self.rest, n * READ_ENTRY_LEN + 4) == position {
            n += 1;
        }
        let (head, tail) = self.rest.split_at(n * READ_ENTRY_LEN);
        self.rest = tail;
        self.count -= n;
        Some(ReadChunk {
            entries: head,
            count: n,
            position,
        })
    }
}

/// One Read chunk: one or more read segments with the same Position.
#[derive(Clone, Copy, Debug)]
pub struct ReadChunk<'a> {
    entries: &'a [u8],
    count: usize,
    position: u32,
}

impl<'a> ReadChunk<'a> {
    /// The shared Position field.
    pub fn position(&self) -> u32 {
        self.position
    }

    /// Number of segments.
    pub fn segment_count(&self) -> usize {
        self.count
    }

    /// The plain segments, in list order.
    pub fn segments(&self) -> impl Iterator<Item = Segment> + 'a {
        let e = self.entries;
        (0..self.count).map(move |i| Segment::read_at(e, i * READ_ENTRY_LEN + 8))
    }

    /// Sum of the segment lengths.
    pub fn total_len(&self) -> u64 {
        self.segments().map(|s| s.length as u64).sum()
    }
}

/// The Write list (RFC 8166 §4.3.2): a list of counted arrays of plain
/// segments. A checked view into the receive buffer.
#[derive(Clone, Copy, Debug)]
pub struct WriteList<'a> {
    /// `count` entries of [1, N, HLOO * N].
    bytes: &'a [u8],
    count: usize,
}

impl<'a> WriteList<'a> {
    /// An empty Write list.
    pub const EMPTY: WriteList<'static> = WriteList {
        bytes: &[],
        count: 0,
    };

    /// Number of Write chunks.
    pub fn len(&self) -> usize {
        self.count
    }

    /// True when the list holds no Write chunk.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The Write chunks in list order.
    pub fn chunks(&self) -> WriteChunks<'a> {
        WriteChunks {
            rest: self.bytes,
            count: self.count,
        }
    }

    /// The `i`-th Write chunk.
    pub fn get(&self, i: usize) -> Option<WriteChunk<'a>> {
        self.chunks().nth(i)
    }
}

/// Iterator over the chunks of a [`WriteList`].
#[derive(Clone, Debug)]
pub struct WriteChunks<'a> {
    rest: &'a [u8],
    count: usize,
}

impl<'a> Iterator for WriteChunks<'a> {
    type Item = WriteChunk<'a>;

    fn next(&mut self) -> Option<WriteChunk<'a>> {
        if self.count == 0 {
            return None;
        }
        let n = be32(self.rest, 4) as usize;
        let end = 8 + n * SEGMENT_LEN;
        let chunk = WriteChunk {
            segs: &self.rest[8..end],
            count: n,
        };
        self.rest = &self.rest[end..];
        self.count -= 1;
        Some(chunk)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.count, Some(self.count))
    }
}

/// A Write chunk or the Reply chunk (RFC 8166 §3.4.6): a counted array of
/// plain segments. An *empty* Write chunk has no segments; an *unused* one has
/// segments that are all empty.
#[derive(Clone, Copy, Debug)]
pub struct WriteChunk<'a> {
    segs: &'a [u8],
    count: usize,
}

impl<'a> WriteChunk<'a> {
    /// Number of segments (the array count).
    pub fn segment_count(&self) -> usize {
        self.count
    }

    /// The `i`-th segment.
    pub fn get(&self, i: usize) -> Option<Segment> {
        (i < self.count).then(|| Segment::read_at(self.segs, i * SEGMENT_LEN))
    }

    /// The segments in array order.
    pub fn segments(&self) -> impl Iterator<Item = Segment> + 'a {
        let s = self.segs;
        (0..self.count).map(move |i| Segment::read_at(s, i * SEGMENT_LEN))
    }

    /// Sum of segment lengths.
    pub fn total_len(&self) -> u64 {
        self.segments().map(|s| s.length as u64).sum()
    }

    /// An empty Write chunk: segment count zero (RFC 8166 §3.4.6).
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// An unused Write chunk: non-zero count, every segment empty.
    pub fn is_unused(&self) -> bool {
        self.count != 0 && self.segments().all(|s| s.length == 0)
    }

    /// Copies into an owned representation.
    pub fn to_repr(&self) -> WriteChunkRepr {
        WriteChunkRepr {
            segments: self.segments().collect(),
        }
    }
}

/// The three chunk lists of RDMA_MSG and RDMA_NOMSG (RFC 8166 §4.3).
#[derive(Clone, Copy, Debug)]
pub struct ChunkLists<'a> {
    /// The Read list.
    pub read_list: ReadList<'a>,
    /// The Write list.
    pub write_list: WriteList<'a>,
    /// The Reply chunk, if present.
    pub reply_chunk: Option<WriteChunk<'a>>,
}

impl<'a> ChunkLists<'a> {
    /// True when all three are "not present".
    pub fn is_empty(&self) -> bool {
        self.read_list.is_empty() && self.write_list.is_empty() && self.reply_chunk.is_none()
    }

    /// Copies into an owned representation.
    pub fn to_repr(&self) -> ChunkListsRepr {
        ChunkListsRepr {
            read_list: self.read_list.segments().collect(),
            write_list: self.write_list.chunks().map(|c| c.to_repr()).collect(),
            reply_chunk: self.reply_chunk.map(|c| c.to_repr()),
        }
    }

    /// Parses the three lists starting at `off`; returns them and the offset
    /// just past them.
    fn parse(
        b: &'a [u8],
        mut off: usize,
        limits: &DecodeLimits,
    ) -> Result<(ChunkLists<'a>, usize), DecodeErrorKind> {
        let max_segs = limits.max_segments_per_chunk as usize;

        // Read list: a linked list of read segments.
        let start = off;
        let mut count = 0usize;
        let mut chunks = 0usize;
        let mut run = 0usize;
        let mut last_pos: Option<u32> = None;
        loop {
            let disc = word(b, off).ok_or(DecodeErrorKind::Truncated)?;
            match disc {
                0 => break,
                1 => {}
                v => return Err(DecodeErrorKind::BadDiscriminator(v)),
            }
            if b.len() < off + READ_ENTRY_LEN {
                return Err(DecodeErrorKind::Truncated);
            }
            let pos = be32(b, off + 4);
            if last_pos == Some(pos) {
                run += 1;
                if run > max_segs {
                    return Err(DecodeErrorKind::TooManySegments);
                }
            } else {
                chunks += 1;
                run = 1;
                if chunks > limits.max_read_chunks as usize {
                    return Err(DecodeErrorKind::TooManyChunks);
                }
            }
            last_pos = Some(pos);
            count += 1;
            off += READ_ENTRY_LEN;
        }
        let read_list = ReadList {
            entries: &b[start..off],
            count,
        };
        off += 4;

        // Write list: a linked list of counted arrays.
        let start = off;
        let mut count = 0usize;
        loop {
            let disc = word(b, off).ok_or(DecodeErrorKind::Truncated)?;
            match disc {
                0 => break,
                1 => {}
                v => return Err(DecodeErrorKind::BadDiscriminator(v)),
            }
            count += 1;
            if count > limits.max_write_chunks as usize {
                return Err(DecodeErrorKind::TooManyChunks);
            }
            off = Self::skip_array(b, off + 4, max_segs)?;
        }
        let write_list = WriteList {
            bytes: &b[start..off],
            count,
        };
        off += 4;

        // Reply chunk: optional counted array.
        let disc = word(b, off).ok_or(DecodeErrorKind::Truncated)?;
        let reply_chunk = match disc {
            0 => {
                off += 4;
                None
            }
            1 => {
                let arr = off + 4;
                off = Self::skip_array(b, arr, max_segs)?;
                let n = be32(b, arr) as usize;
                Some(WriteChunk {
                    segs: &b[arr + 4..off],
                    count: n,
                })
            }
            v => return Err(DecodeErrorKind::BadDiscriminator(v)),
        };
        Ok((
            ChunkLists {
                read_list,
                write_list,
                reply_chunk,
            },
            off,
        ))
    }

    /// Checks a counted segment array at `off`; returns the offset past it.
    fn skip_array(b: &[u8], off: usize, max_segs: usize) -> Result<usize, DecodeErrorKind> {
        let n = word(b, off).ok_or(DecodeErrorKind::Truncated)? as usize;
        if n > max_segs {
            return Err(DecodeErrorKind::TooManySegments);
        }
        let end = off + 4 + n * SEGMENT_LEN;
        if end > b.len() {
            return Err(DecodeErrorKind::Truncated);
        }
        Ok(end)
    }
}

/// The body of an RDMA_ERROR message (`rpc_rdma_error`, RFC 8166 §4.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorBody {
    /// ERR_VERS with the inclusive range of supported versions (§4.5.1).
    Vers {
        /// Lowest supported version.
        low: u32,
        /// Highest supported version.
        high: u32,
    },
    /// ERR_CHUNK (§4.5.2, §4.5.3).
    Chunk,
}

impl ErrorBody {
    /// Encoded size after the fixed words.
    pub fn buffer_len(&self) -> usize {
        match self {
            ErrorBody::Vers { .. } => 12,
            ErrorBody::Chunk => 4,
        }
    }
}

/// The decoded `rdma_body` union (RFC 8166 §4.1.2).
#[derive(Clone, Copy, Debug)]
pub enum Body<'a> {
    /// RDMA_MSG: chunk lists and the (possibly reduced) Payload stream.
    Msg {
        /// The chunk lists.
        chunks: ChunkLists<'a>,
        /// Everything after the transport header.
        payload: &'a [u8],
    },
    /// RDMA_NOMSG: chunk lists only.
    NoMsg {
        /// The chunk lists.
        chunks: ChunkLists<'a>,
    },
    /// RDMA_MSGP (no longer supported; decoded only so it can be answered).
    Msgp {
        /// `rdma_align`.
        align: u32,
        /// `rdma_thresh`.
        thresh: u32,
        /// The chunk lists.
        chunks: ChunkLists<'a>,
        /// Everything after the transport header.
        payload: &'a [u8],
    },
    /// RDMA_DONE (no longer supported).
    Done,
    /// RDMA_ERROR.
    Error(ErrorBody),
}

/// A decoded transport header: a checked, allocation-free view into the
/// receive buffer.
#[derive(Clone, Copy, Debug)]
pub struct Header<'a> {
    /// `rdma_xid`.
    pub xid: u32,
    /// `rdma_vers` (always [`RPCRDMA_VERSION`] once parsed).
    pub vers: u32,
    /// `rdma_credit`: requested (in calls) or granted (in replies).
    pub credit: u32,
    /// The body.
    pub body: Body<'a>,
    /// Length of the Transport stream in bytes.
    pub header_len: usize,
}

impl<'a> Header<'a> {
    /// Decodes a received message (RFC 8166 §4.1.2). Never allocates and
    /// never panics; every error tells which fixed fields could be read so the
    /// caller can answer as §4.5 requires (see [`crate::validate`]).
    pub fn parse(buf: &'a [u8], limits: &DecodeLimits) -> Result<Header<'a>, DecodeError> {
        let too_short = DecodeError {
            fixed: None,
            kind: DecodeErrorKind::TooShort(buf.len()),
        };
        if buf.len() < FIXED_LEN + 4 {
            return Err(too_short);
        }
        let xid = be32(buf, 0);
        let vers = be32(buf, 4);
        let credit = be32(buf, 8);
        let proc_ = be32(buf, 12);
        // RFC 8166 §4.5: shorter than 28 bytes is discarded unread. The one
        // exception is RDMA_ERROR/ERR_CHUNK, whose own encoding (§4.1.2) is
        // 20 bytes and which Linux sends as such.
        if buf.len() < MIN_HEADER_LEN
            && !(vers == RPCRDMA_VERSION
                && proc_ == Proc::Error.as_u32()
                && be32(buf, 16) == ERR_CHUNK)
        {
            return Err(too_short);
        }
        let fail = |kind| DecodeError {
            fixed: Some(crate::error::FixedFields {
                xid,
                vers,
                credit,
                proc_,
            }),
            kind,
        };
        if vers != RPCRDMA_VERSION {
            return Err(fail(DecodeErrorKind::UnsupportedVersion(vers)));
        }
        let (body, header_len) = match Proc::from_u32(proc_) {
            Some(Proc::Msg) => {
                let (chunks, end) = ChunkLists::parse(buf, FIXED_LEN, limits).map_err(fail)?;
                (
                    Body::Msg {
                        chunks,
                        payload: &buf[end..],
                    },
                    end,
                )
            }
            Some(Proc::NoMsg) => {
                let (chunks, end) = ChunkLists::parse(buf, FIXED_LEN, limits).map_err(fail)?;
                (Body::NoMsg { chunks }, end)
            }
            Some(Proc::Msgp) => {
                if buf.len() < FIXED_LEN + 8 {
                    return Err(fail(DecodeErrorKind::Truncated));
                }
                let align = be32(buf, 16);
                let thresh = be32(buf, 20);
                let (chunks, end) = ChunkLists::parse(buf, FIXED_LEN + 8, limits).map_err(fail)?;
                (
                    Body::Msgp {
                        align,
                        thresh,
                        chunks,
                        payload: &buf[end..],
                    },
                    end,
                )
            }
            Some(Proc::Done) => (Body::Done, FIXED_LEN),
            Some(Proc::Error) => match be32(buf, 16) {
                ERR_VERS => {
                    if buf.len() < FIXED_LEN + 12 {
                        // (unreachable: shorter messages were refused above)
                        return Err(fail(DecodeErrorKind::Truncated));
                    }
                    (
                        Body::Error(ErrorBody::Vers {
                            low: be32(buf, 20),
                            high: be32(buf, 24),
                        }),
                        FIXED_LEN + 12,
                    )
                }
                ERR_CHUNK => (Body::Error(ErrorBody::Chunk), FIXED_LEN + 4),
                e => return Err(fail(DecodeErrorKind::UnknownErrorCode(e))),
            },
            None => return Err(fail(DecodeErrorKind::UnknownProc(proc_))),
        };
        Ok(Header {
            xid,
            vers,
            credit,
            body,
            header_len,
        })
    }

    /// The procedure.
    pub fn proc_(&self) -> Proc {
        match self.body {
            Body::Msg { .. } => Proc::Msg,
            Body::NoMsg { .. } => Proc::NoMsg,
            Body::Msgp { .. } => Proc::Msgp,
            Body::Done => Proc::Done,
            Body::Error(_) => Proc::Error,
        }
    }

    /// The chunk lists of RDMA_MSG, RDMA_NOMSG or RDMA_MSGP.
    pub fn chunks(&self) -> Option<&ChunkLists<'a>> {
        match &self.body {
            Body::Msg { chunks, .. } | Body::NoMsg { chunks } | Body::Msgp { chunks, .. } => {
                Some(chunks)
            }
            _ => None,
        }
    }

    /// The inline Payload stream (RDMA_MSG and RDMA_MSGP only).
    pub fn payload(&self) -> Option<&'a [u8]> {
        match self.body {
            Body::Msg { payload, .. } | Body::Msgp { payload, .. } => Some(payload),
            _ => None,
        }
    }

    /// Copies into an owned representation (RDMA_MSGP and RDMA_DONE, which
    /// must never be sent, have none).
    pub fn to_repr(&self) -> Option<HeaderRepr> {
        let body = match &self.body {
            Body::Msg { chunks, .. } => BodyRepr::Msg(chunks.to_repr()),
            Body::NoMsg { chunks } => BodyRepr::NoMsg(chunks.to_repr()),
            Body::Error(e) => BodyRepr::Error(*e),
            Body::Msgp { .. } | Body::Done => return None,
        };
        Some(HeaderRepr {
            xid: self.xid,
            vers: self.vers,
            credit: self.credit,
            body,
        })
    }
}

/// An owned Write chunk or Reply chunk.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct WriteChunkRepr {
    /// The segments in array order.
    pub segments: Vec<Segment>,
}

impl WriteChunkRepr {
    /// Sum of segment lengths.
    pub fn total_len(&self) -> u64 {
        self.segments.iter().map(|s| s.length as u64).sum()
    }

    /// Segment count zero (RFC 8166 §3.4.6 "empty Write chunk").
    pub fn is_empty(&self) -> bool {
        self.segments.is_empty()
    }

    /// Non-zero count, all segments empty (RFC 8166 §3.4.6 "unused").
    pub fn is_unused(&self) -> bool {
        !self.segments.is_empty() && self.segments.iter().all(|s| s.length == 0)
    }

    /// Encoded size of the counted array.
    pub fn buffer_len(&self) -> usize {
        4 + self.segments.len() * SEGMENT_LEN
    }

    /// The same chunk with every length set to zero.
    pub fn zeroed(&self) -> WriteChunkRepr {
        WriteChunkRepr {
            segments: self
                .segments
                .iter()
                .map(|s| Segment { length: 0, ..*s })
                .collect(),
        }
    }

    fn emit_at(&self, b: &mut [u8], mut off: usize) -> usize {
        put32(b, off, self.segments.len() as u32);
        off += 4;
        for s in &self.segments {
            s.write_at(b, off);
            off += SEGMENT_LEN;
        }
        off
    }
}

/// Owned chunk lists for encoding.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ChunkListsRepr {
    /// Read segments in list order; segments of one Read chunk are adjacent
    /// and share their Position.
    pub read_list: Vec<ReadSegment>,
    /// Write chunks in list order.
    pub write_list: Vec<WriteChunkRepr>,
    /// The Reply chunk, if present.
    pub reply_chunk: Option<WriteChunkRepr>,
}

impl ChunkListsRepr {
    /// Encoded size.
    pub fn buffer_len(&self) -> usize {
        self.read_list.len() * READ_ENTRY_LEN
            + 4
            + self
                .write_list
                .iter()
                .map(|c| 4 + c.buffer_len())
                .sum::<usize>()
            + 4
            + 4
            + self.reply_chunk.as_ref().map_or(0, |c| c.buffer_len())
    }

    /// True when all three lists are "not present".
    pub fn is_empty(&self) -> bool {
        self.read_list.is_empty() && self.write_list.is_empty() && self.reply_chunk.is_none()
    }

    fn emit_at(&self, b: &mut [u8], mut off: usize) -> usize {
        for r in &self.read_list {
            put32(b, off, 1);
            put32(b, off + 4, r.position);
            r.segment.write_at(b, off + 8);
            off += READ_ENTRY_LEN;
        }
        put32(b, off, 0);
        off += 4;
        for c in &self.write_list {
            put32(b, off, 1);
            off = c.emit_at(b, off + 4);
        }
        put32(b, off, 0);
        off += 4;
        match &self.reply_chunk {
            None => {
                put32(b, off, 0);
                off + 4
            }
            Some(c) => {
                put32(b, off, 1);
                c.emit_at(b, off + 4)
            }
        }
    }
}

/// Owned `rdma_body` for encoding. RDMA_MSGP and RDMA_DONE are absent on
/// purpose: senders MUST NOT send them (RFC 8166 §4.6).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum BodyRepr {
    /// RDMA_MSG; the Payload stream follows the header in the same Send.
    Msg(ChunkListsRepr),
    /// RDMA_NOMSG.
    NoMsg(ChunkListsRepr),
    /// RDMA_ERROR.
    Error(ErrorBody),
}

/// An owned transport header for encoding.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HeaderRepr {
    /// `rdma_xid`.
    pub xid: u32,
    /// `rdma_vers`.
    pub vers: u32,
    /// `rdma_credit`.
    pub credit: u32,
    /// The body.
    pub body: BodyRepr,
}

impl HeaderRepr {
    /// An RDMA_ERROR reply to a failing request: `rdma_xid` and `rdma_vers`
    /// copied from it (RFC 8166 §4.5).
    pub fn error(xid: u32, vers: u32, credit: u32, err: ErrorBody) -> HeaderRepr {
        HeaderRepr {
            xid,
            vers,
            credit,
            body: BodyRepr::Error(err),
        }
    }

    /// The procedure.
    pub fn proc_(&self) -> Proc {
        match self.body {
            BodyRepr::Msg(_) => Proc::Msg,
            BodyRepr::NoMsg(_) => Proc::NoMsg,
            BodyRepr::Error(_) => Proc::Error,
        }
    }

    /// The chunk lists, if the body has them.
    pub fn chunks(&self) -> Option<&ChunkListsRepr> {
        match &self.body {
            BodyRepr::Msg(c) | BodyRepr::NoMsg(c) => Some(c),
            BodyRepr::Error(_) => None,
        }
    }

    /// Mutable access to the chunk lists, if the body has them.
    pub fn chunks_mut(&mut self) -> Option<&mut ChunkListsRepr> {
        match &mut self.body {
            BodyRepr::Msg(c) | BodyRepr::NoMsg(c) => Some(c),
            BodyRepr::Error(_) => None,
        }
    }

    /// Exact encoded size of the Transport stream.
    pub fn buffer_len(&self) -> usize {
        FIXED_LEN
            + match &self.body {
                BodyRepr::Msg(c) | BodyRepr::NoMsg(c) => c.buffer_len(),
                BodyRepr::Error(e) => e.buffer_len(),
            }
    }

    /// Encodes into the front of `buf`; returns the number of bytes written
    /// (always [`buffer_len`](Self::buffer_len)).
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, EmitError> {
        let need = self.buffer_len();
        if buf.len() < need {
            return Err(EmitError::BufferTooSmall {
                need,
                have: buf.len(),
            });
        }
        put32(buf, 0, self.xid);
        put32(buf, 4, self.vers);
        put32(buf, 8, self.credit);
        put32(buf, 12, self.proc_().as_u32());
        let end = match &self.body {
            BodyRepr::Msg(c) | BodyRepr::NoMsg(c) => c.emit_at(buf, FIXED_LEN),
            BodyRepr::Error(ErrorBody::Chunk) => {
                put32(buf, 16, ERR_CHUNK);
                20
            }
            BodyRepr::Error(ErrorBody::Vers { low, high }) => {
                put32(buf, 16, ERR_VERS);
                put32(buf, 20, *low);
                put32(buf, 24, *high);
                28
            }
        };
        debug_assert_eq!(end, need);
        Ok(end)
    }

    /// Encodes into a new vector (convenience for tests and tools).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.buffer_len()];
        let n = self.emit(&mut v).unwrap_or(0);
        v.truncate(n);
        v
    }
}
