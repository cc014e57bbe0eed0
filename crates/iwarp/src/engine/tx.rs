//! Transmit half: send-queue work requests, Read Responses and Terminate
//! become DDP segments framed as FPDUs (RFC 5040 §5, RFC 5041 §5, RFC 5044 §4).
//!
//! Output is a list of `Bytes` per FPDU: `length + header`, the payload as
//! slices of the source buffers (zero-copy for `Bytes`-backed regions), and
//! `pad + CRC`, ready for a vectored write. Messages are never interleaved:
//! each message's segments are produced back to back (RFC 5040 §5.5).

use super::{InboundRead, OrqEntry, QpShared, SqItem};
use crate::crc::{self, Crc32c};
use crate::mem::MemError;
use crate::wire::fpdu::pad_len;
use crate::wire::rdmap::{RdmapRepr, ReadRequestRepr};
use crate::wire::terminate::{TerminateCause, TerminateRepr};
use bytes::{BufMut, Bytes, BytesMut};
use rdma_verbs::{
    Access, ConnError, MrBuffer, SendOp, SendWr, Sge, WcOpcode, WcStatus, WorkCompletion,
};
use std::sync::Arc;

/// The completion opcode for a send-queue operation.
pub fn wc_opcode(op: &SendOp) -> WcOpcode {
    match op {
        SendOp::Send { .. } | SendOp::SendWithInvalidate { .. } => WcOpcode::Send,
        SendOp::RdmaWrite { .. } => WcOpcode::RdmaWrite,
        SendOp::RdmaRead { .. } => WcOpcode::RdmaRead,
        SendOp::LocalInvalidate { .. } => WcOpcode::LocalInvalidate,
    }
}

/// The RFC 6581 ready-to-receive message an initiator sends first in
/// peer-to-peer mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rtr {
    /// Zero-length RDMA Write (STag 0, TO 0).
    Write,
    /// Zero-length RDMA Read.
    Read,
}

#[derive(Debug)]
enum Kind {
    Send {
        solicited: bool,
        invalidate: Option<u32>,
        msn: u32,
    },
    Write {
        stag: u32,
        to: u64,
    },
    ReadResponse {
        stag: u32,
        to: u64,
    },
    ReadRequest {
        msn: u32,
    },
    Terminate,
}

#[derive(Debug)]
struct OutMsg {
    kind: Kind,
    pieces: Vec<Bytes>,
    piece: usize,
    piece_off: usize,
    total: usize,
    sent: usize,
    /// Pushed when the last segment is produced.
    done: Option<WorkCompletion>,
    /// Counts as one send-queue WR finished.
    sq_done: bool,
    /// Ends an inbound read (IRD accounting).
    read_done: bool,
}

/// Transmit half of one QP.
#[derive(Debug)]
pub struct Tx {
    sh: Arc<QpShared>,
    crc: bool,
    mulpdu: usize,
    send_msn: u32,
    rreq_msn: u32,
    cur: Option<OutMsg>,
    arena: BytesMut,
    /// Copies of small pieces of mutable source buffers (see [`gather`]).
    copies: BytesMut,
    /// The piece list of the last finished message, emptied, for the next.
    spare_pieces: Vec<Bytes>,
    finished: bool,
    rtr: Option<Rtr>,
}

/// Payload pieces up to this size are copied into the FPDU's own buffer
/// rather than sent as a separate slice of the source.
const COPY_MAX: usize = 512;

/// Smallest MULPDU the engine accepts (room for a Terminate with all parts).
pub const MIN_MULPDU: usize = 128;

impl Tx {
    /// A transmit half with CRC on/off and the given MULPDU
    /// (clamped to [`MIN_MULPDU`]..=65535).
    pub fn new(sh: Arc<QpShared>, crc: bool, mulpdu: usize, rtr: Option<Rtr>) -> Self {
        Tx {
            sh,
            crc,
            mulpdu: mulpdu.clamp(MIN_MULPDU, u16::MAX as usize),
            send_msn: 0,
            rreq_msn: 0,
            cur: None,
            arena: BytesMut::with_capacity(64 * 1024),
            copies: BytesMut::new(),
            spare_pieces: Vec::new(),
            finished: false,
            rtr,
        }
    }

    /// True once the Terminate was produced, or the QP closed: nothing more
    /// will be sent.
    pub fn finished(&self) -> bool {
        self.finished
    }

    /// Produces FPDUs (as `Bytes` pieces appended to `out`) until about
    /// `budget` bytes are produced or nothing is ready; returns the bytes
    /// produced.
    pub fn poll_transmit(&mut self, out: &mut Vec<Bytes>, budget: usize) -> usize {
        let mut produced = 0;
        while !self.finished && produced < budget {
            if self.cur.is_none() || self.sh.stopped() {
                match self.next_message() {
                    Some(m) => self.cur = Some(m),
                    None => break,
                }
            }
            produced += self.emit_segments(out, budget - produced);
        }
        // The last trailer.
        if !self.arena.is_empty() {
            out.push(self.arena.split().freeze());
        }
        produced
    }

    /// Chooses the next message: Terminate first; then the RTR; then Read
    /// Responses; then the send queue in order.
    fn next_message(&mut self) -> Option<OutMsg> {
        loop {
            let mut g = self.sh.lock();
            if let Some(t) = g.terminate.take() {
                // A partially sent message is abandoned at a segment
                // boundary; its WR was flushed by `fail`.
                drop(g);
                // Its WR (if any) was flushed, in order, by `fail`/`close`.
                self.cur = None;
                return Some(self.terminate_msg(&t));
            }
            if g.error.is_some() || g.state == rdma_verbs::QpState::Disconnected {
                drop(g);
                // Its WR (if any) was flushed, in order, by `fail`/`close`.
                self.cur = None;
                self.finished = true;
                self.sh.lock().tx_closed = true;
                return None;
            }
            if g.state != rdma_verbs::QpState::Connected || !g.tx_gate_open {
                return None;
            }
            if let Some(rtr) = self.rtr.take() {
                drop(g);
                return Some(match rtr {
                    Rtr::Write => OutMsg::new(Kind::Write { stag: 0, to: 0 }, Vec::new(), None),
                    Rtr::Read => {
                        self.rreq_msn = self.rreq_msn.wrapping_add(1);
                        let body = ReadRequestRepr {
                            sink_stag: 0,
                            sink_to: 0,
                            size: 0,
                            src_stag: 0,
                            src_to: 0,
                        };
                        let mut g = self.sh.lock();
                        g.orq.push_back(OrqEntry {
                            wr: SendWr::read(
                                0,
                                Vec::new(),
                                rdma_verbs::RemoteAddr { rkey: 0, offset: 0 },
                            ),
                            sink_stag: 0,
                            sink_to: 0,
                            len: 0,
                            internal: true,
                        });
                        drop(g);
                        OutMsg::new(
                            Kind::ReadRequest { msn: self.rreq_msn },
                            vec![Bytes::copy_from_slice(&body.to_bytes())],
                            None,
                        )
                    }
                });
            }
            if let Some(ir) = g.irq.pop_front() {
                drop(g);
                match self.read_response(&ir) {
                    Ok(m) => return Some(m),
                    Err(cause) => {
                        let t = TerminateRepr::for_cause(cause, &ir.raw);
                        let e = super::terminate_error(&t, false, "RDMA Read Request source check");
                        self.sh.fail(e, Some(t), None);
                        continue;
                    }
                }
            }
            let front = g.sq.front()?;
            if let SqItem::Wr(wr) = front {
                let fenced = wr.fence && !g.orq.is_empty();
                let ord_full =
                    matches!(wr.op, SendOp::RdmaRead { .. }) && g.orq.len() as u32 >= g.ord;
                if fenced || ord_full {
                    return None;
                }
            }
            let item = g.sq.pop_front()?;
            match item {
                SqItem::FastReg { wr_id, signaled } => {
                    g.sq_outstanding = g.sq_outstanding.saturating_sub(1);
                    g.sq_cur = Some(self.sh.wc(wr_id, WcStatus::Success, WcOpcode::FastReg, 0));
                    drop(g);
                    let mine = self.sh.lock().sq_cur.take().is_some();
                    if mine && signaled {
                        self.sh.send_cq.push(self.sh.wc(
                            wr_id,
                            WcStatus::Success,
                            WcOpcode::FastReg,
                            0,
                        ));
                    }
                    continue;
                }
                SqItem::Wr(wr) => match wr.op {
                    SendOp::LocalInvalidate { rkey } => {
                        g.sq_outstanding = g.sq_outstanding.saturating_sub(1);
                        g.sq_cur = Some(self.sh.wc(
                            wr.wr_id,
                            WcStatus::Success,
                            WcOpcode::LocalInvalidate,
                            0,
                        ));
                        drop(g);
                        if self.local_invalidate(rkey) {
                            let mine = self.sh.lock().sq_cur.take().is_some();
                            if mine && wr.signaled {
                                self.sh.send_cq.push(self.sh.wc(
                                    wr.wr_id,
                                    WcStatus::Success,
                                    WcOpcode::LocalInvalidate,
                                    0,
                                ));
                            }
                        } else {
                            let wc = self.sh.wc(
                                wr.wr_id,
                                WcStatus::LocalProtectionError,
                                WcOpcode::LocalInvalidate,
                                0,
                            );
                            self.local_failure(wc, "local invalidate of an unknown STag");
                        }
                        continue;
                    }
                    SendOp::RdmaRead { remote } => {
                        let len = wr.sgl_len();
                        let (sink_stag, sink_to) =
                            wr.sgl.first().map(|s| (s.lkey, s.offset)).unwrap_or((0, 0));
                        self.rreq_msn = self.rreq_msn.wrapping_add(1);
                        let body = ReadRequestRepr {
                            sink_stag,
                            sink_to,
                            size: len.min(u64::from(u32::MAX)) as u32,
                            src_stag: remote.rkey,
                            src_to: remote.offset,
                        };
                        if len > u64::from(u32::MAX) {
                            g.sq_cur = Some(self.sh.wc(
                                wr.wr_id,
                                WcStatus::Success,
                                WcOpcode::RdmaRead,
                                0,
                            ));
                            drop(g);
                            let wc = self.sh.wc(
                                wr.wr_id,
                                WcStatus::LocalLengthError,
                                WcOpcode::RdmaRead,
                                0,
                            );
                            self.local_failure(wc, "RDMA Read longer than 4 GiB");
                            continue;
                        }
                        g.orq.push_back(OrqEntry {
                            wr,
                            sink_stag,
                            sink_to,
                            len,
                            internal: false,
                        });
                        drop(g);
                        return Some(OutMsg::new(
                            Kind::ReadRequest { msn: self.rreq_msn },
                            vec![Bytes::copy_from_slice(&body.to_bytes())],
                            None,
                        ));
                    }
                    _ => {
                        let opcode = wc_opcode(&wr.op);
                        g.sq_cur = Some(self.sh.wc(wr.wr_id, WcStatus::Success, opcode, 0));
                        drop(g);
                        let mut pieces = std::mem::take(&mut self.spare_pieces);
                        match gather(&self.sh, &wr.sgl, &mut pieces, &mut self.copies) {
                            Ok(()) => {}
                            Err(_) => {
                                let wc =
                                    self.sh
                                        .wc(wr.wr_id, WcStatus::LocalProtectionError, opcode, 0);
                                self.local_failure(
                                    wc,
                                    "send SGL failed the local protection check",
                                );
                                continue;
                            }
                        };
                        let kind = match wr.op {
                            SendOp::Send { solicited } => {
                                self.send_msn = self.send_msn.wrapping_add(1);
                                Kind::Send {
                                    solicited,
                                    invalidate: None,
                                    msn: self.send_msn,
                                }
                            }
                            SendOp::SendWithInvalidate {
                                invalidate_rkey,
                                solicited,
                            } => {
                                self.send_msn = self.send_msn.wrapping_add(1);
                                Kind::Send {
                                    solicited,
                                    invalidate: Some(invalidate_rkey),
                                    msn: self.send_msn,
                                }
                            }
                            SendOp::RdmaWrite { remote } => Kind::Write {
                                stag: remote.rkey,
                                to: remote.offset,
                            },
                            SendOp::RdmaRead { .. } | SendOp::LocalInvalidate { .. } => {
                                unreachable!("handled above")
                            }
                        };
                        let done = self.sh.wc(wr.wr_id, WcStatus::Success, opcode, 0);
                        let mut m = OutMsg::new(kind, pieces, wr.signaled.then_some(done));
                        m.sq_done = true;
                        if m.total > u32::MAX as usize && matches!(m.kind, Kind::Send { .. }) {
                            let wc = self.sh.wc(wr.wr_id, WcStatus::LocalLengthError, opcode, 0);
                            self.local_failure(wc, "Send longer than 4 GiB");
                            continue;
                        }
                        return Some(m);
                    }
                },
            }
        }
    }

    fn local_failure(&self, wc: WorkCompletion, what: &str) {
        // Tests only: widen the window before `fail` takes the lock (a
        // close or another failure can come first).
        #[cfg(test)]
        if TEST_WIDEN_LOCAL_FAILURE.load(std::sync::atomic::Ordering::SeqCst) {
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        let t = TerminateRepr::for_cause(TerminateCause::RdmapLocalCatastrophic, &[]);
        self.sh.fail(
            ConnError {
                remote: false,
                code: None,
                description: what.to_string(),
            },
            Some(t),
            Some(wc),
        );
    }

    fn local_invalidate(&self, rkey: u32) -> bool {
        #[cfg(test)]
        if TEST_WIDEN_LOCAL_INVALIDATE.load(std::sync::atomic::Ordering::SeqCst) {
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        let Some(region) = self.sh.table.lookup(rkey) else {
            return false;
        };
        let mut st = region.lock();
        if region.pd != self.sh.pd || region.stag_for(st.key) != rkey {
            return false;
        }
        st.valid = false;
        true
    }

    fn read_response(&mut self, ir: &InboundRead) -> Result<OutMsg, TerminateCause> {
        let req = &ir.req;
        let pieces = if req.size == 0 {
            Vec::new()
        } else {
            let region = self
                .sh
                .table
                .lookup(req.src_stag)
                .ok_or(TerminateCause::RdmapInvalidStag)?;
            let st = region.lock();
            let range = st
                .check(
                    &region,
                    req.src_stag,
                    self.sh.pd,
                    Access::REMOTE_READ,
                    req.src_to,
                    u64::from(req.size),
                )
                .map_err(rdmap_cause)?;
            vec![slice_of(
                st.buffer.as_ref().ok_or(TerminateCause::RdmapInvalidStag)?,
                range,
            )]
        };
        let mut m = OutMsg::new(
            Kind::ReadResponse {
                stag: req.sink_stag,
                to: req.sink_to,
            },
            pieces,
            None,
        );
        m.read_done = true;
        Ok(m)
    }

    fn terminate_msg(&mut self, t: &TerminateRepr) -> OutMsg {
        let mut body = [0u8; crate::wire::terminate::MAX_BODY_LEN];
        let n = t.emit_body(&mut body).unwrap_or(0);
        OutMsg::new(
            Kind::Terminate,
            vec![Bytes::copy_from_slice(&body[..n])],
            None,
        )
    }

    fn emit_segments(&mut self, out: &mut Vec<Bytes>, budget: usize) -> usize {
        let Some(mut m) = self.cur.take() else {
            return 0;
        };
        let mut produced = 0;
        loop {
            let hdr_len = match m.kind {
                Kind::Write { .. } | Kind::ReadResponse { .. } => 14,
                _ => 18,
            };
            let max_payload = self.mulpdu - hdr_len;
            let len = (m.total - m.sent).min(max_payload);
            let last = m.sent + len == m.total;
            let off = m.sent as u64;
            let repr = match m.kind {
                Kind::Send {
                    solicited,
                    invalidate,
                    msn,
                } => RdmapRepr::Send {
                    solicited,
                    invalidate,
                    msn,
                    mo: off as u32,
                    last,
                },
                Kind::Write { stag, to } => RdmapRepr::RdmaWrite {
                    stag,
                    to: to.wrapping_add(off),
                    last,
                },
                Kind::ReadResponse { stag, to } => RdmapRepr::RdmaReadResponse {
                    stag,
                    to: to.wrapping_add(off),
                    last,
                },
                Kind::ReadRequest { msn } => RdmapRepr::RdmaReadRequest {
                    msn,
                    mo: 0,
                    last: true,
                },
                Kind::Terminate => RdmapRepr::Terminate {
                    msn: 1,
                    mo: 0,
                    last: true,
                },
            };
            let ulpdu_len = hdr_len + len;
            let pad = pad_len(ulpdu_len);
            if self.arena.capacity() - self.arena.len() < 64 {
                self.arena.reserve(64 * 1024);
            }
            // The arena may still hold the previous FPDU's trailer: it is
            // sent in the same buffer as this prefix (fewer iovecs).
            let pre_start = self.arena.len();
            self.arena.put_u16(ulpdu_len as u16);
            let mut hdr = [0u8; 18];
            let _ = repr.emit(&mut hdr);
            self.arena.put_slice(&hdr[..hdr_len]);
            let mut c = Crc32c::new();
            if self.crc {
                c.update(&self.arena[pre_start..]);
            }
            let mut left = len;
            while left > 0 {
                let p = &m.pieces[m.piece];
                let n = (p.len() - m.piece_off).min(left);
                let s = &p[m.piece_off..m.piece_off + n];
                if self.crc {
                    c.update(s);
                }
                if n <= COPY_MAX {
                    // Small: copied next to its header (one iovec, no
                    // reference count per piece).
                    self.arena.put_slice(s);
                } else {
                    out.push(self.arena.split().freeze());
                    out.push(p.slice(m.piece_off..m.piece_off + n));
                }
                left -= n;
                m.piece_off += n;
                if m.piece_off == p.len() {
                    m.piece += 1;
                    m.piece_off = 0;
                }
            }
            let zeros = [0u8; 3];
            if self.crc {
                c.update(&zeros[..pad]);
            }
            self.arena.put_slice(&zeros[..pad]);
            let crc_bytes = if self.crc {
                crc::to_wire(c.finish())
            } else {
                [0; 4]
            };
            self.arena.put_slice(&crc_bytes);
            produced += 2 + ulpdu_len + pad + 4;
            m.sent += len;
            if last {
                self.finish_message(m);
                return produced;
            }
            if produced >= budget {
                self.cur = Some(m);
                return produced;
            }
        }
    }

    fn finish_message(&mut self, mut m: OutMsg) {
        // The piece list serves the next message (no allocation per WR).
        if m.pieces.capacity() <= SPARE_PIECES_MAX {
            m.pieces.clear();
            self.spare_pieces = std::mem::take(&mut m.pieces);
        }
        if matches!(m.kind, Kind::Terminate) {
            self.finished = true;
            self.sh.lock().tx_closed = true;
            return;
        }
        let mut mine = true;
        if m.sq_done || m.read_done {
            let mut g = self.sh.lock();
            if m.sq_done {
                g.sq_outstanding = g.sq_outstanding.saturating_sub(1);
                // Flushed meanwhile: completes once, as flushed.
                mine = g.sq_cur.take().is_some();
            }
            if m.read_done {
                g.reads_in_service = g.reads_in_service.saturating_sub(1);
            }
        }
        if let (true, Some(wc)) = (mine, m.done) {
            self.sh.send_cq.push(wc);
        }
    }
}

impl OutMsg {
    fn new(kind: Kind, pieces: Vec<Bytes>, done: Option<WorkCompletion>) -> Self {
        let total = pieces.iter().map(|p| p.len()).sum();
        let pieces = pieces.into_iter().filter(|p| !p.is_empty()).collect();
        OutMsg {
            kind,
            pieces,
            piece: 0,
            piece_off: 0,
            total,
            sent: 0,
            done,
            sq_done: false,
            read_done: false,
        }
    }
}

/// Maps a memory check failure to the RDMAP remote-protection cause
/// (RFC 5040 §7.2, used for RDMA Read Request sources).
pub fn rdmap_cause(e: MemError) -> TerminateCause {
    match e {
        MemError::InvalidStag => TerminateCause::RdmapInvalidStag,
        MemError::NotAssociated => TerminateCause::RdmapStagNotAssociated,
        MemError::Access => TerminateCause::RdmapAccessRights,
        MemError::Bounds => TerminateCause::RdmapBaseBounds,
        MemError::ToWrap => TerminateCause::RdmapToWrap,
    }
}

fn slice_of(buf: &MrBuffer, range: core::ops::Range<usize>) -> Bytes {
    match buf {
        MrBuffer::Frozen(b) => b.slice(range),
        other => Bytes::copy_from_slice(&other.as_slice()[range]),
    }
}

/// Most capacity of a piece list kept for the next message.
const SPARE_PIECES_MAX: usize = 16;

/// Pieces of mutable buffers up to this size are copied into the
/// transmitter's shared copy buffer instead of an allocation of their own.
const SHARED_COPY_MAX: usize = 4096;

/// How much the shared copy buffer grows by when full.
const SHARED_COPY_CHUNK: usize = 64 * 1024;

/// Like [`slice_of`], but a small piece of a mutable buffer is copied into
/// `copies`, a buffer shared by many such copies (its storage is allocated
/// once per [`SHARED_COPY_CHUNK`] bytes, not once per piece).
fn slice_or_copy(buf: &MrBuffer, range: core::ops::Range<usize>, copies: &mut BytesMut) -> Bytes {
    match buf {
        MrBuffer::Frozen(b) => b.slice(range),
        other if range.len() <= SHARED_COPY_MAX => {
            if copies.capacity() - copies.len() < range.len() {
                copies.reserve(SHARED_COPY_CHUNK);
            }
            copies.extend_from_slice(&other.as_slice()[range]);
            copies.split().freeze()
        }
        other => Bytes::copy_from_slice(&other.as_slice()[range]),
    }
}

/// Resolves a gather list to payload pieces appended to `pieces`, checking
/// each SGE against the QP's PD (local read needs no right). Bytes of
/// mutable buffers are copied (the WR owns them only until it completes);
/// small copies (up to 4 KiB each) go to `copies`, a buffer shared by
/// many of them and allocated 64 KiB at a time.
pub fn gather(
    sh: &QpShared,
    sgl: &[Sge],
    pieces: &mut Vec<Bytes>,
    copies: &mut BytesMut,
) -> Result<(), MemError> {
    pieces.clear();
    pieces.reserve(sgl.len());
    for sge in sgl {
        if sge.length == 0 {
            continue;
        }
        let region = sh.table.lookup(sge.lkey).ok_or(MemError::InvalidStag)?;
        let st = region.lock();
        let range = st.check(
            &region,
            sge.lkey,
            sh.pd,
            Access::NONE,
            sge.offset,
            u64::from(sge.length),
        )?;
        let buf = st.buffer.as_ref().ok_or(MemError::InvalidStag)?;
        pieces.push(slice_or_copy(buf, range, copies));
    }
    Ok(())
}

/// A complete Terminate FPDU (for errors outside a running engine, e.g. an
/// RFC 6581 IRD/ORD or RTR mismatch found while processing the MPA Reply).
pub fn terminate_fpdu(t: &TerminateRepr, crc_on: bool) -> Vec<u8> {
    let (ulpdu, n) = t.to_ulpdu();
    let mut v = Vec::with_capacity(2 + n + 3 + 4);
    v.extend_from_slice(&(n as u16).to_be_bytes());
    v.extend_from_slice(&ulpdu[..n]);
    v.resize(v.len() + pad_len(n), 0);
    let c = if crc_on { crc::crc32c(&v) } else { 0 };
    v.extend_from_slice(&crc::to_wire(c));
    v
}

/// Tests only: `local_failure` sleeps 200 ms first, widening
/// its race with a concurrent close.
#[cfg(test)]
pub static TEST_WIDEN_LOCAL_FAILURE: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Tests only: `local_invalidate` sleeps 200 ms first, widening
/// its race with a concurrent close.
#[cfg(test)]
pub static TEST_WIDEN_LOCAL_INVALIDATE: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);
