//! Shared by the decoder targets: build a payload from fuzz bytes in one
//! of several shapes, so decoders are exercised through
//! `oncrpc::PayloadDecoder` across piece boundaries and DDP pieces.

use bytes::Bytes;
use oncrpc::{Payload, Piece};

/// Input layout: byte 0 = procedure, byte 1 = shape, bytes 2..4 = a split
/// offset; the rest is the XDR stream.
pub fn split(data: &[u8]) -> Option<(u32, Payload, Bytes)> {
    let (&[p, shape, s0, s1], rest) = data.split_first_chunk::<4>()?;
    let stream = Bytes::copy_from_slice(rest);
    let at = (usize::from(u16::from_be_bytes([s0, s1]))).min(stream.len());
    let payload = match shape % 3 {
        // One contiguous piece.
        0 => Payload::from_xdr(stream.clone()),
        // Two Xdr pieces split anywhere.
        1 => Payload::from_pieces([
            Piece::Xdr(stream.slice(..at)),
            Piece::Xdr(stream.slice(at..)),
        ]),
        // A Ddp piece at a word boundary, as a transport would deliver a
        // reduced item: its length word is the last word before it.
        _ => {
            let at = at & !3;
            if at < 4 {
                Payload::from_xdr(stream.clone())
            } else {
                let len = u32::from_be_bytes(stream[at - 4..at].try_into().ok()?) as usize;
                let end = at.checked_add(len)?;
                if end > stream.len() {
                    return None;
                }
                let pad = (4 - (len & 3)) & 3;
                // The pad is implied by the Ddp piece: it must be in the
                // stream (and zero) for the logical streams to agree.
                let tail = end.checked_add(pad)?;
                if tail > stream.len() || stream[end..tail].iter().any(|&b| b != 0) {
                    return None;
                }
                Payload::from_pieces([
                    Piece::Xdr(stream.slice(..at)),
                    Piece::Ddp(stream.slice(at..end)),
                    Piece::Xdr(stream.slice(tail..)),
                ])
            }
        }
    };
    Some((u32::from(p), payload, stream))
}
