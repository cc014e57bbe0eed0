//! Reassembly of received Payload streams.
//!
//! - Responder: [`plan_call_reassembly`] turns a call's Read list and inline
//!   bytes into an ordered list of [`CallPiece`]s — inline byte ranges and
//!   Read chunk contents — that rebuild the unreduced call stream (RFC 8166
//!   §3.4.5). Inline content after a chunk resumes 4-byte aligned and the
//!   chunk's pad never appears inline (draft-cel-nfsv4-rfc5666-implementation-
//!   experience §3.5); the pad is implied, so a transport maps a piece list
//!   straight onto a zero-copy payload.
//! - Requester: [`WriteChunkCursor`] tells the reply decoder, for each
//!   DDP-eligible result it meets, whether the data came in the next Write
//!   chunk or inline (RFC 8166 §3.4.6, §4.3.2).

use std::ops::Range;

use crate::stream::roundup4;
use crate::wire::{ChunkLists, WriteChunkRepr, WriteList};

/// A Read chunk to pull with RDMA Read.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ReadChunkInfo {
    /// Position in the unreduced stream (0 for the Position-Zero chunk).
    pub position: u32,
    /// Read-list entries making up the chunk.
    pub segments: Range<usize>,
    /// Sum of the segment lengths.
    pub len: u64,
}

/// One piece of the unreduced call stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CallPiece {
    /// Bytes `[offset, offset + len)` of the reduced stream (the inline
    /// payload of RDMA_MSG, or the Position-Zero chunk's data).
    Inline {
        /// Offset in the reduced stream.
        offset: u64,
        /// Length.
        len: u64,
    },
    /// The content of data chunk `chunk` (an index into
    /// [`CallReassembly::chunks`]); its XDR pad is implied.
    Chunk {
        /// Index into [`CallReassembly::chunks`].
        chunk: usize,
        /// Content length: the chunk length, or the item's length word when
        /// the Requester included the pad in the chunk.
        len: u64,
    },
}

/// Why a call's chunks cannot be reassembled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum ReassemblyError {
    /// A Read chunk Position is not a multiple of 4 (RFC 8166 §3.4.5).
    #[error("read chunk position {0} is not a multiple of 4")]
    Misaligned(u32),
    /// A Read chunk starts inside or before the previous one.
    #[error("read chunk at position {0} overlaps the previous chunk")]
    Overlap(u32),
    /// A Read chunk starts past the end of the Payload stream.
    #[error("read chunk at position {0} lies past the end of the payload")]
    PastPayload(u32),
    /// RDMA_MSG with a Position-Zero Read chunk (the draft's §3.4: the RPC
    /// header already starts at Position zero inline).
    #[error("RDMA_MSG carries a Position-Zero read chunk")]
    PositionZeroInMsg,
    /// RDMA_NOMSG call without a Position-Zero Read chunk to hold the
    /// Payload stream (RFC 8166 §4.2.4).
    #[error("RDMA_NOMSG call has no Position-Zero read chunk")]
    MissingPositionZero,
    /// The chunk's length does not match the item's length word (RFC 8166
    /// §4.5.2: answer GARBAGE_ARGS).
    #[error("read chunk {chunk} length {chunk_len} does not match its length word")]
    LengthMismatch {
        /// Data chunk index.
        chunk: usize,
        /// Chunk length.
        chunk_len: u64,
    },
}

/// How to rebuild a call's unreduced Payload stream.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CallReassembly {
    /// The Position-Zero chunk of a Long Call, whose data is the reduced
    /// stream; `None` when the reduced stream is the inline payload.
    pub position_zero: Option<ReadChunkInfo>,
    /// Data Read chunks (non-zero Position) in stream order.
    pub chunks: Vec<ReadChunkInfo>,
    /// Length of the reduced stream.
    pub reduced_len: u64,
    /// Length of the unreduced stream (chunk pads counted).
    pub unreduced_len: u64,
    /// The pieces, in order.
    pub pieces: Vec<CallPiece>,
}

/// Plans reassembly of a call from its chunk lists. `inline_len` is the
/// inline payload length for RDMA_MSG, `None` for RDMA_NOMSG.
pub fn plan_call_reassembly(
    chunks: &ChunkLists<'_>,
    inline_len: Option<u64>,
) -> Result<CallReassembly, ReassemblyError> {
    let mut position_zero = None;
    let mut data = Vec::new();
    let mut seg = 0usize;
    for (i, c) in chunks.read_list.chunks().enumerate() {
        let info = ReadChunkInfo {
            position: c.position(),
            segments: seg..seg + c.segment_count(),
            len: c.total_len(),
        };
        seg += c.segment_count();
        if !c.position().is_multiple_of(4) {
            return Err(ReassemblyError::Misaligned(c.position()));
        }
        if i == 0 && c.position() == 0 {
            if inline_len.is_some() {
                return Err(ReassemblyError::PositionZeroInMsg);
            }
            position_zero = Some(info);
        } else {
            data.push(info);
        }
    }
    let reduced_len = match inline_len {
        Some(n) => n,
        None => match &position_zero {
            Some(p) => p.len,
            None => return Err(ReassemblyError::MissingPositionZero),
        },
    };
    let mut pieces = Vec::with_capacity(2 * data.len() + 1);
    let mut u = 0u64; // unreduced cursor
    let mut r = 0u64; // reduced cursor
    for (ci, c) in data.iter().enumerate() {
        let p = c.position as u64;
        if p < u || (p == 0 && ci == 0 && position_zero.is_some()) {
            return Err(ReassemblyError::Overlap(c.position));
        }
        let gap = p - u;
        if r + gap > reduced_len {
            return Err(ReassemblyError::PastPayload(c.position));
        }
        if gap > 0 {
            pieces.push(CallPiece::Inline {
                offset: r,
                len: gap,
            });
        }
        r += gap;
        pieces.push(CallPiece::Chunk {
            chunk: ci,
            len: c.len,
        });
        u = p + roundup4(c.len);
    }
    if r < reduced_len {
        pieces.push(CallPiece::Inline {
            offset: r,
            len: reduced_len - r,
        });
    }
    Ok(CallReassembly {
        position_zero,
        chunks: data,
        reduced_len,
        unreduced_len: u + (reduced_len - r),
        pieces,
    })
}

impl CallReassembly {
    /// The kind of call this is (RFC 8166 §3.5): Long when a Position-Zero
    /// Read chunk carries the Payload stream, Chunked when data Read chunks
    /// carry reduced arguments, Short otherwise.
    pub fn kind(&self) -> crate::marshal::CallKind {
        use crate::marshal::CallKind;
        if self.position_zero.is_some() {
            CallKind::Long
        } else if !self.chunks.is_empty() {
            CallKind::Chunked
        } else {
            CallKind::Short
        }
    }

    /// Checks each data chunk against the length word that precedes it in
    /// the reduced stream: the chunk must hold exactly the item's content, or
    /// the content plus its roundup pad (RFC 8166 §3.4.5). Trims the pieces
    /// to the content length. A mismatch means the arguments cannot be
    /// parsed: answer GARBAGE_ARGS (§4.5.2).
    pub fn check_length_words(&mut self, reduced: &[u8]) -> Result<(), ReassemblyError> {
        let mut prev: Option<CallPiece> = None;
        for piece in self.pieces.iter_mut() {
            if let CallPiece::Chunk { chunk, len } = piece {
                let word = match prev {
                    Some(CallPiece::Inline { offset, len: il }) if il >= 4 => {
                        let at = (offset + il - 4) as usize;
                        reduced
                            .get(at..at + 4)
                            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as u64)
                    }
                    _ => None,
                };
                let Some(w) = word else {
                    return Err(ReassemblyError::LengthMismatch {
                        chunk: *chunk,
                        chunk_len: *len,
                    });
                };
                if *len != w && !(*len == roundup4(w) && *len > w) {
                    return Err(ReassemblyError::LengthMismatch {
                        chunk: *chunk,
                        chunk_len: *len,
                    });
                }
                *len = w;
            }
            prev = Some(*piece);
        }
        Ok(())
    }

    /// Contiguous unreduced stream, from the reduced stream and each data
    /// chunk's bytes (convenience for tests; pads are written as zeros).
    pub fn to_contiguous(&self, reduced: &[u8], chunk_data: &[&[u8]]) -> Option<Vec<u8>> {
        // Never reserve on the peer's say-so; grow as real bytes arrive.
        let mut out = Vec::with_capacity(self.unreduced_len.min(1 << 20) as usize);
        for p in &self.pieces {
            match *p {
                CallPiece::Inline { offset, len } => {
                    out.extend_from_slice(reduced.get(offset as usize..(offset + len) as usize)?)
                }
                CallPiece::Chunk { chunk, len } => {
                    out.extend_from_slice(chunk_data.get(chunk)?.get(..len as usize)?);
                    out.resize(out.len() + crate::stream::pad4(len) as usize, 0);
                }
            }
        }
        Some(out)
    }
}

/// Where a DDP-eligible result's data is, as the reply decoder meets it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DdpResult {
    /// In Write chunk `chunk` (index in the Write list), `len` bytes.
    Chunk {
        /// Write list index.
        chunk: usize,
        /// Content length (no pad was written).
        len: u32,
    },
    /// Inline in the Payload stream, with its pad.
    Inline,
}

/// A reply's DDP-eligible results do not match its Write list.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum ReplyDdpError {
    /// The returned chunk length differs from the item's length word
    /// (RFC 8166 §3.4.6).
    #[error("write chunk {chunk} returned {returned} bytes for a {declared}-byte result")]
    LengthMismatch {
        /// Write list index.
        chunk: usize,
        /// Bytes the chunk reports.
        returned: u64,
        /// The result's length word.
        declared: u32,
    },
    /// A DDP-eligible result came inline although a Write chunk was
    /// available (RFC 8166 §6.1: a permanent error for the transaction).
    #[error("result not reduced into available write chunk {0}")]
    NotReduced(usize),
}

/// Walks a reply's Write list as the decoder meets DDP-eligible results.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct WriteChunkCursor {
    /// (returned total length, segment count) per Write chunk.
    chunks: Vec<(u64, usize)>,
    next: usize,
}

impl WriteChunkCursor {
    /// From a received reply's Write list.
    pub fn new(write_list: &WriteList<'_>) -> WriteChunkCursor {
        WriteChunkCursor {
            chunks: write_list
                .chunks()
                .map(|c| (c.total_len(), c.segment_count()))
                .collect(),
            next: 0,
        }
    }

    /// From an owned Write list.
    pub fn from_repr(write_list: &[WriteChunkRepr]) -> WriteChunkCursor {
        WriteChunkCursor {
            chunks: write_list
                .iter()
                .map(|c| (c.total_len(), c.segments.len()))
                .collect(),
            next: 0,
        }
    }

    /// The decoder met a DDP-eligible result whose length word is
    /// `declared`: where is its data?
    pub fn next_result(&mut self, declared: u32) -> Result<DdpResult, ReplyDdpError> {
        let Some(&(total, count)) = self.chunks.get(self.next) else {
            return Ok(DdpResult::Inline);
        };
        let chunk = self.next;
        self.next += 1;
        if count == 0 {
            // Empty Write chunk: the Requester asked for it inline (§4.3.2).
            return Ok(DdpResult::Inline);
        }
        if total == 0 && declared != 0 {
            return Err(ReplyDdpError::NotReduced(chunk));
        }
        // RFC 8166 §3.4.6: the returned length is the item's. A Responder
        // following RFC 5666 §3.7 reports it rounded up to a multiple of 4
        // (padding it did not write; implementation-experience draft §3.6):
        // accepted, and only the declared bytes are the result.
        let rounded = u64::from(declared).next_multiple_of(4);
        if total != u64::from(declared) && total != rounded {
            return Err(ReplyDdpError::LengthMismatch {
                chunk,
                returned: total,
                declared,
            });
        }
        Ok(DdpResult::Chunk {
            chunk,
            len: declared,
        })
    }
}

/// One part of a reply's results as the RPC consumer gets them back.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ResultPiece {
    /// Bytes `range` of the reduced results (after the RPC reply header).
    Inline(Range<usize>),
    /// The first `len` bytes of the buffer of Write chunk `chunk`: a
    /// DDP-eligible result, without pad (RFC 8166 §3.4.6).
    Chunk {
        /// Write list index.
        chunk: usize,
        /// Content length.
        len: usize,
    },
}

/// Why a reply's results cannot be put back together: a permanent error
/// for the RPC transaction (RFC 8166 §6.1).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    /// Write chunks hold data but the program has no reply layout to say
    /// where it belongs.
    #[error("write chunk data for a program without reply layout")]
    NoLayout,
    /// The layout could not walk the results, or a result does not match
    /// its Write chunk.
    #[error("{0}")]
    Layout(#[from] crate::binding::LayoutError),
    /// The layout reported results out of XDR order or past the end.
    #[error("DDP result out of order")]
    OutOfOrder,
    /// No receive buffer for that Write chunk, or one taken twice.
    #[error("no buffer for write chunk {0}")]
    NoBuffer(usize),
    /// The result is longer than the buffer registered for its chunk.
    #[error("write chunk overrun: a result of {len} bytes in Write chunk {chunk} is longer than its buffer ({buffer} bytes)")]
    Overrun {
        /// Result length.
        len: u32,
        /// Write list index.
        chunk: usize,
        /// Buffer length.
        buffer: usize,
    },
}

/// Puts a reply's results back together (RFC 8166 §3.4.6, §4.3.2): when
/// the returned Write list carries data, the program's `layout` walks the
/// reduced `results` of procedure `proc_` and says where each DDP-eligible
/// result placed in a Write chunk belongs; `buffer_len(chunk)` is the length
/// of the buffer that received chunk `chunk` (`None`: no buffer). Without
/// Write-chunk data the results are one inline piece.
pub fn place_results(
    layout: Option<&dyn crate::binding::ReplyLayout>,
    proc_: u32,
    results: &[u8],
    write_list: &[WriteChunkRepr],
    buffer_len: impl Fn(usize) -> Option<usize>,
) -> Result<Vec<ResultPiece>, PlacementError> {
    if write_list.iter().all(|c| c.total_len() == 0) {
        return Ok(vec![ResultPiece::Inline(0..results.len())]);
    }
    let layout = layout.ok_or(PlacementError::NoLayout)?;
    let mut cursor = WriteChunkCursor::from_repr(write_list);
    let placements = layout.locate(proc_, results, &mut cursor)?;
    let mut out = Vec::with_capacity(2 * placements.len() + 1);
    let mut taken: Vec<usize> = Vec::with_capacity(placements.len());
    let mut at = 0usize;
    for p in placements {
        if p.offset < at || p.offset > results.len() {
            return Err(PlacementError::OutOfOrder);
        }
        let buffer = buffer_len(p.chunk)
            .filter(|_| !taken.contains(&p.chunk))
            .ok_or(PlacementError::NoBuffer(p.chunk))?;
        taken.push(p.chunk);
        if p.len as usize > buffer {
            return Err(PlacementError::Overrun {
                len: p.len,
                chunk: p.chunk,
                buffer,
            });
        }
        out.push(ResultPiece::Inline(at..p.offset));
        out.push(ResultPiece::Chunk {
            chunk: p.chunk,
            len: p.len as usize,
        });
        at = p.offset;
    }
    out.push(ResultPiece::Inline(at..results.len()));
    Ok(out)
}

/// Shape of a reply stream as a test decoder knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReplyItemShape {
    /// `n` XDR bytes.
    Xdr(u32),
    /// A DDP-eligible opaque whose length word ends the preceding bytes.
    Ddp,
}

/// Rebuilds a reply's unreduced stream from its Payload stream (inline or
/// from the Reply chunk) and the data landed in each Write chunk, walking a
/// known shape (convenience for tests; a real decoder uses
/// [`WriteChunkCursor`] as it goes).
pub fn reassemble_reply(
    shape: &[ReplyItemShape],
    payload: &[u8],
    write_list: &[WriteChunkRepr],
    write_data: &[&[u8]],
) -> Result<Vec<u8>, ReplyDdpError> {
    let mut cur = WriteChunkCursor::from_repr(write_list);
    let mut out = Vec::new();
    let mut p = 0usize;
    let take = |p: &mut usize, n: usize, out: &mut Vec<u8>| {
        let end = (*p + n).min(payload.len());
        out.extend_from_slice(&payload[(*p).min(end)..end]);
        *p = end;
    };
    for s in shape {
        match *s {
            ReplyItemShape::Xdr(n) => take(&mut p, n as usize, &mut out),
            ReplyItemShape::Ddp => {
                let w = out
                    .len()
                    .checked_sub(4)
                    .map(|i| u32::from_be_bytes([out[i], out[i + 1], out[i + 2], out[i + 3]]))
                    .unwrap_or(0);
                match cur.next_result(w)? {
                    DdpResult::Chunk { chunk, len } => {
                        let d = write_data.get(chunk).copied().unwrap_or(&[]);
                        out.extend_from_slice(&d[..(len as usize).min(d.len())]);
                        out.resize(out.len() + crate::stream::pad4(len as u64) as usize, 0);
                    }
                    DdpResult::Inline => take(&mut p, roundup4(w as u64) as usize, &mut out),
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::binding::rdmatest::{procs, RdmatestBinding};
    use crate::binding::UpperLayerBinding;
    use crate::wire::Segment;

    fn chunk(lens: &[u32]) -> WriteChunkRepr {
        WriteChunkRepr {
            segments: lens
                .iter()
                .map(|&length| Segment {
                    handle: 1,
                    length,
                    offset: 0,
                })
                .collect(),
        }
    }

    /// GET results: status 0, then the data's length word.
    fn get_results(len: u32) -> Vec<u8> {
        [0u32, len].iter().flat_map(|w| w.to_be_bytes()).collect()
    }

    #[test]
    fn rfc8166_s3_4_6_result_placed_after_its_length_word() {
        let layout = RdmatestBinding.reply_layout();
        let r = get_results(10);
        let wl = [chunk(&[10])];
        let p = place_results(layout, procs::GET, &r, &wl, |_| Some(16)).unwrap();
        assert_eq!(
            p,
            vec![
                ResultPiece::Inline(0..8),
                ResultPiece::Chunk { chunk: 0, len: 10 },
                ResultPiece::Inline(8..8),
            ]
        );
    }

    #[test]
    fn rfc8166_s3_5_kind_of_a_received_call() {
        use crate::marshal::CallKind;
        let info = |position| ReadChunkInfo {
            position,
            segments: 0..1,
            len: 8,
        };
        let mut r = CallReassembly {
            position_zero: None,
            chunks: vec![],
            reduced_len: 40,
            unreduced_len: 40,
            pieces: vec![],
        };
        assert_eq!(r.kind(), CallKind::Short);
        r.chunks.push(info(32));
        assert_eq!(r.kind(), CallKind::Chunked);
        r.position_zero = Some(info(0));
        assert_eq!(r.kind(), CallKind::Long);
    }

    #[test]
    fn no_write_chunk_data_is_one_inline_piece() {
        let r = get_results(0);
        for wl in [vec![], vec![chunk(&[0])]] {
            let p = place_results(None, procs::GET, &r, &wl, |_| None).unwrap();
            assert_eq!(p, vec![ResultPiece::Inline(0..8)]);
        }
    }

    #[test]
    fn placement_errors() {
        let r = get_results(10);
        let wl = [chunk(&[10])];
        assert_eq!(
            place_results(None, procs::GET, &r, &wl, |_| Some(16)),
            Err(PlacementError::NoLayout)
        );
        let layout = RdmatestBinding.reply_layout();
        assert_eq!(
            place_results(layout, procs::GET, &r, &wl, |_| None),
            Err(PlacementError::NoBuffer(0))
        );
        assert_eq!(
            place_results(layout, procs::GET, &r, &wl, |_| Some(9)),
            Err(PlacementError::Overrun {
                len: 10,
                chunk: 0,
                buffer: 9
            })
        );
        // 13 bytes returned for a 10-byte result: neither its length nor
        // its roundup (RFC 8166 §3.4.6).
        let wl = [chunk(&[13])];
        assert!(matches!(
            place_results(layout, procs::GET, &r, &wl, |_| Some(16)),
            Err(PlacementError::Layout(_))
        ));
    }
}
