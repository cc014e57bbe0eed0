//! Reply layouts: the part of an Upper-Layer Binding a Requester needs to
//! put Write-chunk data back into a reply (RFC 8166 §3.4.6, §6).
//!
//! A Responder that writes a DDP-eligible result into a Write chunk leaves
//! the item's length word in the reduced reply and removes the data. Only
//! the upper layer's XDR says where, in the reduced results, such an item
//! sat: a [`ReplyLayout`] walks the reduced results of a reply and reports
//! each DDP-eligible result it meets, with a [`WriteChunkCursor`] telling
//! whether that result came in a chunk or inline.

use crate::reassemble::{DdpResult, WriteChunkCursor};
use crate::stream::roundup4;

/// A DDP-eligible result that arrived in a Write chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DdpPlacement {
    /// Offset in the reduced results (after the RPC reply header) right
    /// after the result's length word: where its data belongs.
    pub offset: usize,
    /// Write list index holding the data.
    pub chunk: usize,
    /// Content length.
    pub len: u32,
}

/// Why a reply's DDP-eligible results cannot be located.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct LayoutError(pub String);

/// Walks the reduced results of a successful reply and reports where each
/// DDP-eligible result placed in a Write chunk belongs.
pub trait ReplyLayout: Send + Sync {
    /// For a reply to procedure `proc_`: `results` are the reduced results
    /// (the bytes after the RPC reply header); call `cursor.next_result`
    /// (or [`locate_opaque`]) for every DDP-eligible result met, in XDR
    /// order, and skip those it reports inline.
    fn locate(
        &self,
        proc_: u32,
        results: &[u8],
        cursor: &mut WriteChunkCursor,
    ) -> Result<Vec<DdpPlacement>, LayoutError>;
}

/// The XDR word at byte offset `off` of `results`.
pub fn word(results: &[u8], off: usize) -> Result<u32, LayoutError> {
    off.checked_add(4)
        .and_then(|end| results.get(off..end))
        .map(|w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
        .ok_or_else(|| LayoutError(format!("reply results end before offset {off} + 4")))
}

/// One DDP-eligible opaque whose length word is at `at` in the reduced
/// results: records its placement when it came in a Write chunk and returns
/// the offset right after the item in the reduced stream.
pub fn locate_opaque(
    results: &[u8],
    at: usize,
    cursor: &mut WriteChunkCursor,
    out: &mut Vec<DdpPlacement>,
) -> Result<usize, LayoutError> {
    let len = word(results, at)?;
    let data = at + 4;
    match cursor
        .next_result(len)
        .map_err(|e| LayoutError(e.to_string()))?
    {
        DdpResult::Chunk { chunk, len } => {
            out.push(DdpPlacement {
                offset: data,
                chunk,
                len,
            });
            Ok(data)
        }
        DdpResult::Inline => Ok(data + roundup4(len as u64) as usize),
    }
}
