//! The memory regions of a call: one fast registration (one STag) per
//! chunk segment, and the result buffers they hold put back together when
//! the registrations end.

use bytes::{Bytes, BytesMut};
use oncrpc::Piece;
use rdma_verbs::{
    Access, Device, FastRegWr, MemoryRegion, MrBuffer, ProtectionDomain, QueuePair, VerbsError,
};
use rpcrdma_proto::marshal::{CallPlan, RegionSource};

use super::{gather_into, Conn, Shared};
use crate::error::TransportError;
use std::sync::Arc;

/// One registration of a call: a segment of a chunk, with its own STag.
pub(super) struct Reg<D: Device> {
    pub(super) source: RegionSource,
    pub(super) mr: D::Mr,
    pub(super) rkey: u32,
}

impl<D: Device> Conn<D> {
    /// A fresh region for one registration. Regions are not pooled: a
    /// re-registered region would keep its STag index and change only the
    /// 8-bit key, so handles would repeat within a few hundred calls and a
    /// late or duplicated RDMA operation of an old call, or a wire analyser
    /// (tshark matches chunks by handle and offset), could take a new
    /// call's chunk for an old one.
    fn take_mr(&self, max: usize) -> Result<D::Mr, VerbsError> {
        self.ep.pd.alloc_mr(max)
    }
}

impl<D: Device> Shared<D> {
    /// Registers every region of `plan` by fast registration, one
    /// registration per segment, and fills the plan's segments in.
    pub(super) fn register_regions(
        &self,
        conn: &Arc<Conn<D>>,
        plan: &mut CallPlan,
        pieces: &[Piece],
        bufs: &mut [BytesMut],
        regs: &mut Vec<Reg<D>>,
        failed: &mut Vec<(usize, BytesMut)>,
    ) -> Result<(), TransportError> {
        let max = self.config.max_region_len;
        for i in 0..plan.regions.len() {
            let r = &plan.regions[i];
            let len = r.len as usize;
            if len > max {
                return Err(TransportError::TooLarge { len, max });
            }
            let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
            let (buffer, access) = match r.source {
                RegionSource::CallItem { item } => (
                    MrBuffer::Frozen(
                        pieces
                            .get(item)
                            .map(|p| p.bytes().clone())
                            .unwrap_or_default(),
                    ),
                    Access::REMOTE_READ,
                ),
                RegionSource::CallPayload => {
                    let mut b = BytesMut::with_capacity(len);
                    gather_into(&mut b, &plan.payload, pieces);
                    (MrBuffer::Frozen(b.freeze()), Access::REMOTE_READ)
                }
                RegionSource::ReplyWriteChunk { chunk } => {
                    let mut b = bufs.get_mut(chunk).map(std::mem::take).unwrap_or_default();
                    // Only bytes never initialised are zeroed: a reused
                    // buffer is registered as it is. The result is the
                    // length the reply's Write list declares (RFC 8166
                    // §3.5.4; at most what was offered): the requester
                    // cannot see which bytes the responder wrote, so bytes
                    // it declared but did not write keep the buffer's
                    // earlier contents (zeros, the caller's old data, or a
                    // first attempt's data after a retransmission). The
                    // region is never remotely readable.
                    if b.len() >= len {
                        b.truncate(len);
                    } else {
                        b.resize(len, 0);
                    }
                    (MrBuffer::Mutable(b), rw)
                }
                RegionSource::ReplyChunk => (MrBuffer::Mutable(BytesMut::zeroed(len)), rw),
                // A few bytes per call, registered and invalidated with the
                // call like every other region (Linux keeps one pad region
                // per connection instead, which it must then keep out of
                // remote invalidation). Never part of the result.
                RegionSource::WritePad { .. } => (MrBuffer::Mutable(BytesMut::zeroed(len)), rw),
            };
            let source = r.source;
            let segments = r.segments.clone();
            // One registration, hence one STag, per segment, as xprtrdma
            // registers one MR per segment: a handle then names exactly one
            // segment (RFC 8166 §3.4.2 allows either), so a peer or a wire
            // analyser (tshark keys chunk reassembly by handle) never has to
            // tell two segments of one handle apart.
            let mut rest = buffer;
            let n = segments.len();
            for (k, seg) in segments.into_iter().enumerate() {
                let piece = if k + 1 == n {
                    std::mem::replace(&mut rest, MrBuffer::Frozen(Bytes::new()))
                } else {
                    split_front(&mut rest, seg.len as usize)
                };
                let mr = match conn.take_mr(max) {
                    Ok(m) => m,
                    Err(e) => {
                        give_back(source, piece, rest, failed);
                        return Err(e.into());
                    }
                };
                let rkey = match conn.ep.qp.post_fast_reg(
                    &mr,
                    FastRegWr {
                        wr_id: 0,
                        buffer: piece,
                        access,
                        signaled: false,
                    },
                ) {
                    Ok(k) => k,
                    Err(e) => {
                        give_back(source, e.buffer, rest, failed);
                        return Err(e.error.into());
                    }
                };
                plan.set_segment(seg.slot, rkey, 0);
                regs.push(Reg { source, mr, rkey });
            }
        }
        Ok(())
    }
}

/// Deregisters `regions`, collecting the result buffers (by Write chunk).
pub(super) fn release_regions<D: Device>(regions: Vec<Reg<D>>, bufs: &mut Vec<(usize, BytesMut)>) {
    for r in regions {
        let buf = r.mr.deregister();
        if let (RegionSource::ReplyWriteChunk { chunk }, Some(b)) = (r.source, buf) {
            if let Ok(b) = b.try_into_bytes_mut() {
                bufs.push((chunk, b));
            }
        }
    }
}

/// Puts result buffers back in place; the pieces of a buffer registered
/// segment by segment are joined in the order given (no copy when they are
/// the adjacent halves of one split).
pub(super) fn restore(slot_bufs: &mut Vec<BytesMut>, back: Vec<(usize, BytesMut)>) {
    for (i, b) in back {
        if slot_bufs.len() <= i {
            slot_bufs.resize_with(i + 1, BytesMut::new);
        }
        if slot_bufs[i].is_empty() {
            slot_bufs[i] = b;
        } else {
            slot_bufs[i].unsplit(b);
        }
    }
}

/// Splits the first `at` bytes off `b` (a zero-copy split of the same
/// allocation).
fn split_front(b: &mut MrBuffer, at: usize) -> MrBuffer {
    match b {
        MrBuffer::Mutable(m) => MrBuffer::Mutable(m.split_to(at.min(m.len()))),
        MrBuffer::Frozen(f) => MrBuffer::Frozen(f.split_to(at.min(f.len()))),
        MrBuffer::Vec(v) => {
            let tail = v.split_off(at.min(v.len()));
            MrBuffer::Vec(std::mem::replace(v, tail))
        }
    }
}

/// Joins the next piece of a result buffer onto what came before it.
pub(super) fn join(head: Option<MrBuffer>, next: Option<MrBuffer>) -> Option<MrBuffer> {
    match (head, next) {
        (None, n) => n,
        (h, None) => h,
        (Some(h), Some(n)) => {
            let mut h = h
                .try_into_bytes_mut()
                .unwrap_or_else(|b| BytesMut::from(&b[..]));
            match n.try_into_bytes_mut() {
                Ok(n) => h.unsplit(n),
                Err(n) => h.extend_from_slice(&n),
            }
            Some(MrBuffer::Mutable(h))
        }
    }
}

/// A registration failed: the piece that was not registered and the rest
/// of the region's buffer go back to the caller (only result buffers are
/// kept: argument bytes are still in the request).
fn give_back(
    source: RegionSource,
    piece: MrBuffer,
    rest: MrBuffer,
    failed: &mut Vec<(usize, BytesMut)>,
) {
    if let RegionSource::ReplyWriteChunk { chunk } = source {
        for b in [piece, rest] {
            if let Ok(b) = b.try_into_bytes_mut() {
                failed.push((chunk, b));
            }
        }
    }
}
