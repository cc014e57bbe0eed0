//! Receive half: the TCP byte stream → FPDUs → DDP placement → RDMAP
//! completions (RFC 5044 §4, RFC 5041 §5–§7, RFC 5040 §5–§7).
//!
//! The stream is read in large blocks into a fixed-size staging buffer;
//! payload found there is copied once into the registered buffer. Only the
//! part of a payload that has not arrived yet is read **from the socket
//! straight into the registered buffer** (a vectored read whose second
//! slice is the staging buffer, which takes the trailer and whatever
//! follows; in a stream of large segments only the trailer and the next
//! tagged header, so that the next payload is read directly too). So
//! payload is copied by user space at most once, and there is never a read
//! per small FPDU while data is already waiting. A read that ends between
//! two large segments takes only the next header, so the next payload is
//! read straight into memory too. Optionally, the segments of an RDMA Read
//! Response are read ahead, several per read, into the Read's own sink
//! (`place_read_ahead`, see [`Rx::set_read_ahead`]).
//! Each chunk is placed under the region's lock after re-checking the STag
//! (validity, key, PD, rights, bounds), so an invalidation takes effect
//! atomically with respect to placement. The CRC is computed over the bytes
//! as placed.
//!
//! Errors found in a header are acted upon only after the FPDU's CRC was
//! checked (a corrupted FPDU is reported as a CRC error, RFC 5044 §8);
//! nothing is delivered (no completion, invalidation, Read Response or
//! Terminate processing) before the CRC of its last FPDU checks.

use super::{InboundRead, QpShared};
use crate::crc::{self, Crc32c};
use crate::mem::{MemError, Region};
use crate::wire::ddp::header_len_for;
use crate::wire::fpdu::pad_len;
use crate::wire::rdmap::{ParseFailure, RdmapRepr, ReadRequestRepr, READ_REQUEST_LEN};
use crate::wire::terminate::{TerminateCause, TerminateRepr, MAX_BODY_LEN};
use rdma_verbs::{Access, ConnError, Sge, WcOpcode, WcStatus, WorkCompletion};
use std::io::{self, IoSliceMut};
use std::sync::Arc;

/// Staging buffer size with direct placement: headers, trailers, small
/// messages, and whole FPDUs that arrived together with an earlier one.
const STAGE_CAP: usize = 256 * 1024;
/// Staging buffer size when direct placement is off (large reads).
const STAGE_CAP_COPY: usize = 256 * 1024;
/// Segments a Read Response is read ahead by (see [`Rx::place_read_ahead`]).
const READ_AHEAD_SEGMENTS: usize = 3;
/// A segment payload at least this long counts as "streaming" (see
/// [`Rx::streaming`]).
const BIG_PAYLOAD: usize = 4096;
/// After the last segment of a message in a stream of large segments, the
/// read that takes its trailer also takes up to this many bytes of what
/// follows: a whole small message (an RPC call or reply, a Read Request)
/// in the same read, or the first bytes of the next large segment, staged
/// at the cost of copying at most this much (see [`Rx::header_bound`]).
const PEEK_AFTER_LAST: usize = 4096;
/// Bytes processed per [`Rx::recv`] call before returning to the driver.
const RECV_BUDGET: usize = 8 * 1024 * 1024;

/// Outcome of [`Rx::recv`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxStatus {
    /// The source has no more bytes now.
    WouldBlock,
    /// The processing budget is used up; call again (after yielding).
    Budget,
    /// The stream ended in an orderly way (at an FPDU boundary).
    Eof,
    /// The QP is dead (error detected or Terminate received).
    Dead,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum St {
    Header,
    Payload,
    Trailer,
}

/// A scatter list being filled (receive WR or RDMA Read sink).
#[derive(Debug)]
struct SglCursor {
    sgl: Vec<Sge>,
    /// The list is the current receive's, lent for one Send segment and
    /// given back at the next header (see [`Rx::on_header_inner`]).
    recv: bool,
    idx: usize,
    off: u64,
    cached: Option<(usize, Arc<Region>)>,
}

impl SglCursor {
    fn at(sgl: Vec<Sge>, mut pos: u64) -> Self {
        let mut idx = 0;
        while idx < sgl.len() && pos >= u64::from(sgl[idx].length) {
            pos -= u64::from(sgl[idx].length);
            idx += 1;
        }
        SglCursor {
            sgl,
            recv: false,
            idx,
            off: pos,
            cached: None,
        }
    }
}

#[derive(Debug)]
enum Target {
    /// Payload is skipped (error pending, or zero-length).
    Discard,
    /// Payload is copied into `small` (Read Request body, Terminate body).
    Small,
    /// RDMA Write into a tagged buffer.
    Tagged {
        region: Arc<Region>,
        stag: u32,
        to: u64,
    },
    /// Receive buffer or Read Response sink.
    Sgl(SglCursor),
}

/// Where the current Send lands.
#[derive(Debug)]
struct CurRecv {
    wr_id: u64,
    sgl: Vec<Sge>,
    cap: u64,
    placed: u64,
    msn: u32,
    /// The first segment's RDMAP opcode, as (Solicited Event, Invalidate
    /// STag): every segment of the message must carry the same
    /// (RFC 5040 §4.3: the RDMAP header is in every segment).
    op: (bool, Option<u32>),
}

/// Receive half of one QP.
#[derive(Debug)]
pub struct Rx {
    sh: Arc<QpShared>,
    crc_on: bool,
    stage: Vec<u8>,
    start: usize,
    end: usize,
    st: St,
    crc: Crc32c,
    /// ULPDU_Length + DDP header (+ Read Request body once read).
    hdr: [u8; 2 + 18 + READ_REQUEST_LEN],
    hdr_have: usize,
    hdr_need: usize,
    repr: Option<RdmapRepr>,
    payload_len: usize,
    remaining: usize,
    trailer_need: usize,
    trailer: [u8; 7],
    trailer_have: usize,
    target: Target,
    pending: Option<(TerminateCause, Option<WorkCompletion>)>,
    small: [u8; MAX_BODY_LEN],
    small_len: usize,
    big_mode: bool,
    /// Read Responses are read ahead (see [`Rx::set_read_ahead`]).
    read_ahead: bool,
    /// The previous segment had the DDP Last flag.
    prev_was_last: bool,
    direct: bool,
    send_msn: u32,
    rreq_msn: u32,
    recv_cur: Option<CurRecv>,
    rresp_placed: u64,
    /// Length of the RDMA Read whose response is being received.
    rresp_len: u64,
    dead: bool,
    fpdus: u64,
    delivered: u32,
    /// The transmit half has new work because of what was received (a
    /// Read Request to answer, an ORD slot freed, the transmit gate
    /// opened); see [`Rx::take_tx_work`].
    tx_work: bool,
}

impl Rx {
    /// A receive half; `crc_on` if CRC was negotiated.
    pub fn new(sh: Arc<QpShared>, crc_on: bool) -> Self {
        Self::with_placement(sh, crc_on, true)
    }

    /// A receive half choosing the placement strategy. With `direct`
    /// (the default) payload already in the staging buffer is copied from
    /// there, and the rest of a payload that has not arrived yet is read
    /// from the stream straight into registered memory. Without it every
    /// payload byte goes through the staging buffer (one copy).
    pub fn with_placement(sh: Arc<QpShared>, crc_on: bool, direct: bool) -> Self {
        let cap = if direct { STAGE_CAP } else { STAGE_CAP_COPY };
        Rx {
            sh,
            crc_on,
            stage: vec![0; cap],
            start: 0,
            end: 0,
            st: St::Header,
            crc: Crc32c::new(),
            hdr: [0; 2 + 18 + READ_REQUEST_LEN],
            hdr_have: 0,
            hdr_need: 3,
            repr: None,
            payload_len: 0,
            remaining: 0,
            trailer_need: 0,
            trailer: [0; 7],
            trailer_have: 0,
            target: Target::Discard,
            pending: None,
            small: [0; MAX_BODY_LEN],
            small_len: 0,
            big_mode: false,
            read_ahead: false,
            prev_was_last: true,
            direct,
            send_msn: 1,
            rreq_msn: 1,
            recv_cur: None,
            rresp_placed: 0,
            rresp_len: 0,
            dead: false,
            fpdus: 0,
            delivered: 0,
            tx_work: false,
        }
    }

    /// Reads RDMA Read Responses ahead: several segments per read, each
    /// payload straight into the Read's own sink (`place_read_ahead`). Off
    /// unless set; the device sets it from `Config::read_ahead`, on by
    /// default. It cuts `recvmsg` calls per MiB from ~18 to ~7. Measured on
    /// the 2-core loopback test machine with the 512 KiB send buffer
    /// (`PERF_ONLY=2 PERF_MIB=1024 PERF_ROUNDS=2 cargo bench -p iwarp
    /// --bench perf`, three alternating runs each): RDMA Read 6.4–7.0 GB/s
    /// at 250–260 ms/GiB with it, 3.9–4.8 GB/s at 350–420 ms/GiB without;
    /// a later check with the host in a faster state had both at 6.5–6.9
    /// GB/s. (Before the send buffer it measured slower: 3.1 against 3.4
    /// GB/s.)
    pub fn set_read_ahead(&mut self, on: bool) {
        self.read_ahead = on;
    }

    /// FPDUs received so far.
    pub fn fpdus(&self) -> u64 {
        self.fpdus
    }

    /// True if, since the last call, something received gave the transmit
    /// half work (a Read Request to answer, an ORD slot freed for a queued
    /// RDMA Read, the transmit gate opened). The driver transmits it, or
    /// wakes the task that does: the receive half never does either itself,
    /// so that a driver can answer a batch of Read Requests with one write
    /// from the reading thread instead of a wakeup per request.
    pub fn take_tx_work(&mut self) -> bool {
        std::mem::take(&mut self.tx_work)
    }

    /// Messages delivered (receive completions) since the last call.
    pub fn take_delivered(&mut self) -> u32 {
        std::mem::take(&mut self.delivered)
    }

    /// True while a large segment's payload is being received: more bytes
    /// are certainly on their way, so a driver may let them accumulate
    /// before reading again.
    pub fn streaming(&self) -> bool {
        self.big_mode && self.st == St::Payload && self.remaining > 0
    }

    /// True once an error was detected or a Terminate received.
    pub fn is_dead(&self) -> bool {
        self.dead
    }

    /// Bytes already read from the stream but not processed (e.g. the
    /// first FPDU bytes that arrived with the MPA Reply).
    pub fn push_initial(&mut self, bytes: &[u8]) {
        let n = bytes.len().min(self.stage.len() - self.end);
        self.stage[self.end..self.end + n].copy_from_slice(&bytes[..n]);
        self.end += n;
    }

    /// Processes the stream: `read` fills the slice it is given with the
    /// next stream bytes (returns 0 at end of stream, `WouldBlock` when no
    /// bytes are available now). Payload is read straight into registered
    /// memory when possible.
    pub fn recv<F>(&mut self, mut read: F) -> io::Result<RxStatus>
    where
        F: FnMut(&mut [IoSliceMut<'_>]) -> io::Result<usize>,
    {
        let mut budget = RECV_BUDGET;
        if self.sh.stopped() {
            // The QP failed elsewhere (e.g. a Read Response source check)
            // or was disconnected locally: nothing more is placed.
            self.dead = true;
        }
        loop {
            if self.dead {
                return Ok(RxStatus::Dead);
            }
            // Consume staged bytes first.
            if self.start < self.end {
                let before = self.start;
                self.step_staged();
                budget = budget.saturating_sub(self.start.saturating_sub(before));
            }
            if self.dead {
                return Ok(RxStatus::Dead);
            }
            if budget == 0 {
                return Ok(RxStatus::Budget);
            }
            // Need more bytes.
            let direct = self.direct
                && self.st == St::Payload
                && self.remaining > 0
                && matches!(self.target, Target::Tagged { .. } | Target::Sgl(_));
            let r = if direct {
                self.place_direct(&mut read)
            } else {
                self.fill_stage(&mut read)
            };
            match r {
                Ok(0) => {
                    if self.st == St::Header && self.hdr_have == 0 && self.start == self.end {
                        return Ok(RxStatus::Eof);
                    }
                    self.fatal_llp("connection closed in the middle of an FPDU");
                    return Ok(RxStatus::Dead);
                }
                Ok(n) => budget = budget.saturating_sub(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(RxStatus::WouldBlock),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    fn fill_stage<F>(&mut self, read: &mut F) -> io::Result<usize>
    where
        F: FnMut(&mut [IoSliceMut<'_>]) -> io::Result<usize>,
    {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.start > self.stage.len() / 2 || self.end == self.stage.len() {
            self.stage.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        // Read as much as the stream has (up to the stage's fixed size):
        // payload that arrives here is copied once into registered memory,
        // which costs far less than a read per FPDU. In a stream of large
        // segments, though, only the rest of the trailer and the next
        // header are taken, so that the next payload is read straight into
        // memory (see `place_direct`) even when a read ended between a
        // payload and its trailer.
        let want = self.header_bound().unwrap_or(usize::MAX);
        let room = &mut self.stage[self.end..];
        let take = want.min(room.len());
        let n = read(&mut [IoSliceMut::new(&mut room[..take])])?;
        self.end += n;
        Ok(n)
    }

    /// In a stream of large segments (the last header announced a payload
    /// of at least [`BIG_PAYLOAD`]), the bytes still missing up to the end
    /// of the next DDP header, assuming it is tagged (the common case for
    /// bulk data; an untagged header just takes one more small read).
    /// `None` when the stage should be filled as far as it goes.
    fn header_bound(&self) -> Option<usize> {
        if !self.direct || !self.big_mode || self.start != self.end {
            return None;
        }
        let next = self.next_bound();
        match self.st {
            St::Trailer => Some(self.trailer_need - self.trailer_have + next),
            St::Header if self.hdr_have >= 3 => Some(self.hdr_need - self.hdr_have),
            St::Header => Some(next.saturating_sub(self.hdr_have).max(1)),
            St::Payload => None,
        }
    }

    /// How much of what follows the current FPDU a bounded read takes: in
    /// the middle of a message, the next tagged header (its payload is then
    /// read straight into memory); after a message's last segment,
    /// [`PEEK_AFTER_LAST`] bytes, so that a small message that follows a
    /// large one (the reply after a Write, the next call after a Read
    /// Response) costs one read rather than three (header, rest of the
    /// header, payload).
    fn next_bound(&self) -> usize {
        if self.prev_was_last {
            PEEK_AFTER_LAST
        } else {
            2 + crate::wire::ddp::TAGGED_HEADER_LEN
        }
    }

    /// Advances the state machine over staged bytes.
    fn step_staged(&mut self) {
        while self.start < self.end && !self.dead {
            if self.sh.stopped() {
                // Stopped by another thread in the middle of an FPDU:
                // nothing more is placed; its WR was flushed.
                self.dead = true;
                return;
            }
            match self.st {
                St::Header => {
                    let take = (self.hdr_need - self.hdr_have).min(self.end - self.start);
                    self.hdr[self.hdr_have..self.hdr_have + take]
                        .copy_from_slice(&self.stage[self.start..self.start + take]);
                    self.hdr_have += take;
                    self.start += take;
                    if self.hdr_have == 3 && self.hdr_need == 3 {
                        self.hdr_need = 2 + header_len_for(self.hdr[2]);
                    }
                    if self.hdr_have == self.hdr_need {
                        self.on_header();
                    }
                }
                St::Payload => {
                    if self.remaining == 0 {
                        self.enter_trailer();
                        continue;
                    }
                    let n = self.remaining.min(self.end - self.start);
                    match self.place_from_stage(n) {
                        Ok(()) => {}
                        Err(()) => return,
                    }
                    if self.remaining == 0 {
                        self.enter_trailer();
                    }
                }
                St::Trailer => {
                    let take = (self.trailer_need - self.trailer_have).min(self.end - self.start);
                    self.trailer[self.trailer_have..self.trailer_have + take]
                        .copy_from_slice(&self.stage[self.start..self.start + take]);
                    self.trailer_have += take;
                    self.start += take;
                    if self.trailer_have == self.trailer_need {
                        self.on_trailer();
                    }
                }
            }
        }
    }

    fn enter_trailer(&mut self) {
        let ulpdu_len = self.hdr_need - 2 + self.payload_len;
        self.trailer_need = pad_len(ulpdu_len) + 4;
        self.trailer_have = 0;
        self.st = St::Trailer;
    }

    fn defer(&mut self, cause: TerminateCause, wc: Option<WorkCompletion>) {
        if self.pending.is_none() {
            self.pending = Some((cause, wc));
        }
        self.target = Target::Discard;
    }

    fn on_header(&mut self) {
        self.on_header_inner();
        if !self.dead && self.st == St::Payload && self.remaining == 0 {
            self.enter_trailer();
        }
    }

    fn on_header_inner(&mut self) {
        if self.sh.stopped() {
            // Failed or disconnected while this stream was being read: the
            // rest of the stream is ignored.
            self.dead = true;
            return;
        }
        let ulpdu_len = usize::from(u16::from_be_bytes([self.hdr[0], self.hdr[1]]));
        let hlen = self.hdr_need - 2;
        if self.crc_on {
            self.crc.update(&self.hdr[..self.hdr_need]);
        }
        self.st = St::Payload;
        if let Target::Sgl(c) = std::mem::replace(&mut self.target, Target::Discard) {
            // The receive's scatter list, lent to the last Send segment's
            // cursor, goes back to the receive if it is still in progress
            // (a receive completed by that segment dropped it).
            if let (true, Some(cur)) = (c.recv, self.recv_cur.as_mut()) {
                cur.sgl = c.sgl;
            }
        }
        self.pending = None;
        self.small_len = 0;
        self.repr = None;
        if ulpdu_len < hlen {
            // The length cannot even hold the header: the framing is lost,
            // so no CRC can be checked. Fatal at once.
            self.payload_len = 0;
            self.remaining = 0;
            self.fatal(
                TerminateCause::DdpLocalCatastrophic,
                None,
                "ULPDU_Length shorter than the DDP header",
            );
            return;
        }
        self.payload_len = ulpdu_len - hlen;
        self.remaining = self.payload_len;
        // A stream of large segments stays one through the short last
        // segment of a large message (e.g. the 848 bytes that end a 1 MiB
        // Write in 64 KiB FPDUs), so that the read after it is bounded too
        // and the next message's payload is not staged.
        let last = self.hdr[2] & crate::wire::ddp::control::LAST != 0;
        self.big_mode = self.payload_len >= BIG_PAYLOAD || (self.big_mode && !self.prev_was_last);
        self.prev_was_last = last;
        let repr = match RdmapRepr::parse_ulpdu(&self.hdr[2..self.hdr_need]) {
            Ok(r) => r,
            Err(ParseFailure::Terminate(c)) => {
                self.defer(c, None);
                return;
            }
            Err(ParseFailure::Malformed(_)) => {
                self.defer(TerminateCause::DdpLocalCatastrophic, None);
                return;
            }
        };
        self.repr = Some(repr);
        match repr {
            RdmapRepr::RdmaWrite { stag, to, .. } => {
                if self.payload_len == 0 {
                    return; // zero-length Write: no checks (also the RTR).
                }
                let Some(region) = self.sh.table.lookup(stag) else {
                    self.defer(TerminateCause::DdpTaggedInvalidStag, None);
                    return;
                };
                let check = {
                    let st = region.lock();
                    st.check(
                        &region,
                        stag,
                        self.sh.pd,
                        Access::REMOTE_WRITE,
                        to,
                        self.payload_len as u64,
                    )
                    .map(|_| ())
                };
                match check {
                    Ok(()) => self.target = Target::Tagged { region, stag, to },
                    Err(e) => self.defer(write_cause(e), None),
                }
            }
            RdmapRepr::RdmaReadResponse { stag, to, last } => {
                let g = self.sh.lock();
                let Some(e) = g.orq.front() else {
                    drop(g);
                    self.defer(TerminateCause::RdmapUnexpectedOpcode, None);
                    return;
                };
                let (sink_stag, sink_to, len, sgl, wr_id, internal) = (
                    e.sink_stag,
                    e.sink_to,
                    e.len,
                    e.wr.sgl.clone(),
                    e.wr.wr_id,
                    e.internal,
                );
                drop(g);
                let fail_wc = (!internal).then(|| {
                    self.sh
                        .wc(wr_id, WcStatus::LocalProtectionError, WcOpcode::RdmaRead, 0)
                });
                let placed = self.rresp_placed;
                self.rresp_len = len;
                if stag != sink_stag {
                    self.defer(TerminateCause::DdpTaggedInvalidStag, fail_wc);
                } else if sink_to.checked_add(placed) != Some(to)
                    || placed + self.payload_len as u64 > len
                    || (last && placed + self.payload_len as u64 != len)
                {
                    self.defer(TerminateCause::DdpTaggedBaseBounds, fail_wc);
                } else if self.payload_len > 0 {
                    self.target = Target::Sgl(SglCursor::at(sgl, placed));
                }
            }
            RdmapRepr::RdmaReadRequest { msn, mo, last } => {
                let g = self.sh.lock();
                let full = g.reads_in_service >= g.ird;
                drop(g);
                if msn != self.rreq_msn {
                    self.defer(TerminateCause::DdpMsnRange, None);
                } else if mo != 0 {
                    self.defer(TerminateCause::DdpInvalidMo, None);
                } else if !last || self.payload_len != READ_REQUEST_LEN {
                    self.defer(TerminateCause::DdpMessageTooLong, None);
                } else if full {
                    self.defer(TerminateCause::DdpNoBuffer, None);
                } else {
                    self.target = Target::Small;
                }
            }
            RdmapRepr::Send {
                msn,
                mo,
                solicited,
                invalidate,
                ..
            } => {
                if self.recv_cur.is_none() {
                    if msn != self.send_msn {
                        self.defer(TerminateCause::DdpMsnRange, None);
                        return;
                    }
                    if mo != 0 {
                        self.defer(TerminateCause::DdpInvalidMo, None);
                        return;
                    }
                    let mut g = self.sh.lock();
                    let Some(wr) = g.rq.pop_front() else {
                        drop(g);
                        self.defer(TerminateCause::DdpNoBuffer, None);
                        return;
                    };
                    g.rq_taken = Some(wr.wr_id);
                    drop(g);
                    let cap = wr.sgl_len();
                    self.recv_cur = Some(CurRecv {
                        wr_id: wr.wr_id,
                        sgl: wr.sgl,
                        cap,
                        placed: 0,
                        msn,
                        op: (solicited, invalidate),
                    });
                }
                let Some(cur) = self.recv_cur.as_mut() else {
                    return;
                };
                let wr_id = cur.wr_id;
                let fail = |status| Some(self.sh.wc(wr_id, status, WcOpcode::Recv, 0));
                if msn != cur.msn {
                    let wc = fail(WcStatus::LocalQpOperationError);
                    self.defer(TerminateCause::DdpMsnRange, wc);
                } else if (solicited, invalidate) != cur.op {
                    let wc = fail(WcStatus::LocalQpOperationError);
                    self.defer(TerminateCause::RdmapUnexpectedOpcode, wc);
                } else if u64::from(mo) != cur.placed {
                    let wc = fail(WcStatus::LocalQpOperationError);
                    self.defer(TerminateCause::DdpInvalidMo, wc);
                } else if cur.placed + self.payload_len as u64 > cur.cap {
                    let wc = fail(WcStatus::LocalLengthError);
                    self.defer(TerminateCause::DdpMessageTooLong, wc);
                } else if self.payload_len > 0 {
                    // Lent, not cloned: no allocation per segment.
                    let mut cursor = SglCursor::at(std::mem::take(&mut cur.sgl), cur.placed);
                    cursor.recv = true;
                    self.target = Target::Sgl(cursor);
                }
            }
            RdmapRepr::Terminate { .. } => {
                self.target = Target::Small;
            }
        }
    }

    /// Copies `n` staged bytes to the current target.
    fn place_from_stage(&mut self, n: usize) -> Result<(), ()> {
        let mut done = 0;
        while done < n {
            let s = self.start;
            let src_len = n - done;
            let r = match &mut self.target {
                Target::Discard => {
                    if self.crc_on {
                        self.crc.update(&self.stage[s..s + src_len]);
                    }
                    Ok(src_len)
                }
                Target::Small => {
                    let room = MAX_BODY_LEN - self.small_len;
                    let k = src_len.min(room);
                    self.small[self.small_len..self.small_len + k]
                        .copy_from_slice(&self.stage[s..s + k]);
                    self.small_len += k;
                    if self.crc_on {
                        self.crc.update(&self.stage[s..s + src_len]);
                    }
                    Ok(src_len)
                }
                t => {
                    let stage = &self.stage;
                    let crc = &mut self.crc;
                    let crc_on = self.crc_on;
                    place_into(&self.sh, t, src_len, |dst| {
                        dst.copy_from_slice(&stage[s..s + dst.len()]);
                        if crc_on {
                            crc.update(dst);
                        }
                        Ok(dst.len())
                    })
                }
            };
            match r {
                Ok(k) => {
                    self.start += k;
                    self.remaining -= k;
                    done += k;
                }
                Err(PlaceErr::Mem(cause, wc)) => {
                    let wc = wc.or_else(|| self.place_fail_wc());
                    self.fatal(cause, wc, "placement check failed");
                    return Err(());
                }
                Err(PlaceErr::Io(_)) => return Err(()),
            }
        }
        Ok(())
    }

    /// Reads payload from the source straight into the target.
    fn place_direct<F>(&mut self, read: &mut F) -> io::Result<usize>
    where
        F: FnMut(&mut [IoSliceMut<'_>]) -> io::Result<usize>,
    {
        // The stage is empty here. If this read can finish the segment's
        // payload, let the same read also fill the stage with whatever
        // follows (trailer, next FPDUs): those are then processed from the
        // stage with one copy each, and only a payload that is not yet
        // buffered is read straight into memory. So a read never takes
        // less than the rest of a payload, and never more than the stage's
        // fixed size beyond it.
        self.start = 0;
        self.end = 0;
        if self.sh.stopped() {
            self.dead = true;
            return Ok(1);
        }
        if let Some(seg) = self.read_ahead_segment() {
            return self.place_read_ahead(read, seg);
        }
        let remaining = self.remaining;
        // In a stream of large segments, take only this FPDU's trailer and
        // the next tagged header (ULPDU_Length + 14 bytes) into the stage,
        // so that the next payload too is read straight into memory rather
        // than through the stage (one copy less per byte; a read per FPDU
        // costs far less than copying 64 KiB). After a message's last
        // segment, a small message may follow instead (`next_bound`).
        let tail = if self.big_mode {
            let ulpdu_len = self.hdr_need - 2 + self.payload_len;
            (pad_len(ulpdu_len) + 4 + self.next_bound()).min(self.stage.len())
        } else {
            self.stage.len()
        };
        let stage = &mut self.stage[..tail];
        let crc = &mut self.crc;
        let crc_on = self.crc_on;
        let mut extra = 0usize;
        let r = place_into(&self.sh, &mut self.target, remaining, |dst| {
            let dl = dst.len();
            let k = if dl == remaining {
                let mut iov = [IoSliceMut::new(dst), IoSliceMut::new(stage)];
                read(&mut iov)?
            } else {
                read(&mut [IoSliceMut::new(dst)])?
            };
            let in_dst = k.min(dl);
            extra = k - in_dst;
            if crc_on {
                crc.update(&dst[..in_dst]);
            }
            Ok(in_dst)
        });
        match r {
            Ok(k) => {
                self.remaining -= k;
                self.end = extra;
                if k > 0 && self.remaining == 0 {
                    self.enter_trailer();
                }
                Ok(k + extra)
            }
            Err(PlaceErr::Io(e)) => Err(e),
            Err(PlaceErr::Mem(cause, wc)) => {
                let wc = wc.or_else(|| self.place_fail_wc());
                self.fatal(cause, wc, "placement check failed");
                Ok(1) // progress: the QP is dead now
            }
        }
    }

    /// The segment size to expect in the rest of the Read Response being
    /// received, if reading ahead applies: a large, error-free segment of a
    /// response that does not end with it.
    fn read_ahead_segment(&self) -> Option<usize> {
        let more = matches!(
            self.repr,
            Some(RdmapRepr::RdmaReadResponse { last: false, .. })
        );
        (self.read_ahead
            && self.direct
            && more
            && self.pending.is_none()
            && self.payload_len >= BIG_PAYLOAD
            && matches!(self.target, Target::Sgl(_)))
        .then_some(self.payload_len)
    }

    /// Reads the rest of the current segment of a Read Response **and the
    /// segments that follow it** with one read: each payload straight into
    /// the sink where the response will put it if the responder keeps its
    /// segment size (a responder segments to a fixed MULPDU), each trailer
    /// and next header into the stage.
    ///
    /// This is safe only because the sink is ours: the bytes land in the
    /// part of this RDMA Read's sink that the rest of the response must
    /// fill (RFC 5040 §4.4: the response writes the whole requested range,
    /// in order), never in a buffer a peer advertised. Every header is then
    /// checked as usual, in order, before its payload is accepted (its CRC
    /// is computed over the bytes where they were placed); if a header is
    /// not the one guessed, every byte read after it is handed back to the
    /// stage and processed from there (later segments overwrite the guessed
    /// area). Nothing is delivered before its CRC is checked.
    fn place_read_ahead<F>(&mut self, read: &mut F, seg: usize) -> io::Result<usize>
    where
        F: FnMut(&mut [IoSliceMut<'_>]) -> io::Result<usize>,
    {
        let next_header = 2 + crate::wire::ddp::TAGGED_HEADER_LEN;
        let tail_of =
            |len: usize| pad_len(crate::wire::ddp::TAGGED_HEADER_LEN + len) + 4 + next_header;
        let cur = self.remaining;
        let Target::Sgl(c) = &self.target else {
            return Ok(0);
        };
        let sgl = c.sgl.clone();
        // Response offset where the first guessed payload would go.
        let base = self.rresp_placed + self.payload_len as u64;
        let rest = self.rresp_len.saturating_sub(base);
        // tails[0] follows the current payload, tails[i + 1] guessed
        // payload i; all of it must fit the stage if handed back there.
        let mut plan: Vec<usize> = Vec::with_capacity(READ_AHEAD_SEGMENTS);
        let mut tails = vec![pad_len(self.hdr_need - 2 + self.payload_len) + 4 + next_header];
        let mut ahead = 0u64;
        let mut staged = tails[0];
        while plan.len() < READ_AHEAD_SEGMENTS && ahead < rest {
            let len = (rest - ahead).min(seg as u64) as usize;
            if staged + len + tail_of(len) > self.stage.len() {
                break;
            }
            plan.push(len);
            tails.push(tail_of(len));
            ahead += len as u64;
            staged += len + tail_of(len);
        }
        let crc_on = self.crc_on;
        let crc = &mut self.crc;
        let stage = &mut self.stage[..];
        // The read's length, and how many guessed payloads it covered (those
        // that fit into the sink's current chunk).
        let mut total = 0usize;
        let mut guessed = 0usize;
        let r = place_into(&self.sh, &mut self.target, cur + ahead as usize, |dst| {
            let (mine, mut after) = dst.split_at_mut(cur.min(dst.len()));
            let mut iov: Vec<IoSliceMut<'_>> = Vec::with_capacity(2 + 2 * plan.len());
            let whole = mine.len() == cur;
            iov.push(IoSliceMut::new(mine));
            if whole {
                let mut stage_rest = &mut stage[..];
                for (i, &t) in tails.iter().enumerate() {
                    let (tail, more) = std::mem::take(&mut stage_rest).split_at_mut(t);
                    stage_rest = more;
                    iov.push(IoSliceMut::new(tail));
                    match plan.get(i) {
                        Some(&len) if len <= after.len() => {
                            let (p, more) = std::mem::take(&mut after).split_at_mut(len);
                            after = more;
                            iov.push(IoSliceMut::new(p));
                            guessed += 1;
                        }
                        _ => break,
                    }
                }
            }
            let k = read(&mut iov)?;
            drop(iov);
            total = k;
            let in_mine = k.min(cur).min(dst.len());
            if crc_on {
                crc.update(&dst[..in_mine]);
            }
            Ok(in_mine)
        });
        let k = match r {
            Ok(k) => k,
            Err(PlaceErr::Io(e)) => return Err(e),
            Err(PlaceErr::Mem(cause, wc)) => {
                let wc = wc.or_else(|| self.place_fail_wc());
                self.fatal(cause, wc, "placement check failed");
                return Ok(1);
            }
        };
        self.remaining -= k;
        if self.remaining > 0 {
            return Ok(total);
        }
        self.enter_trailer();
        if total == k {
            return Ok(total);
        }
        // Walk what was read beyond the current payload, in stream order:
        // tail 0, guessed payload 0, tail 1, ...
        let mut left = total - k;
        let mut tail_at = 0usize;
        let mut i = 0usize;
        loop {
            let t = tails[i];
            let tk = left.min(t);
            self.start = tail_at;
            self.end = tail_at + tk;
            self.step_staged();
            left -= tk;
            tail_at += t;
            if self.dead || left == 0 || i == guessed {
                break;
            }
            // Guessed payload i: accepted where it lies if the header just
            // parsed is the one expected.
            let len = plan[i];
            let expected = self.st == St::Payload
                && self.pending.is_none()
                && self.payload_len == len
                && self.rresp_placed == base + plan[..i].iter().sum::<usize>() as u64
                && matches!(self.repr, Some(RdmapRepr::RdmaReadResponse { .. }))
                && matches!(self.target, Target::Sgl(_));
            if !expected {
                let at = base + plan[..i].iter().sum::<usize>() as u64;
                self.hand_back(&sgl, at, &plan[i..guessed], &tails[i + 1..], tail_at, left);
                return Ok(total);
            }
            let pk = left.min(len);
            let crc = &mut self.crc;
            let r = place_into(&self.sh, &mut self.target, pk, |dst| {
                if crc_on {
                    crc.update(dst);
                }
                Ok(dst.len())
            });
            match r {
                Ok(n) if n == pk => {}
                Ok(_) | Err(PlaceErr::Io(_)) => {
                    self.fatal(
                        TerminateCause::DdpLocalCatastrophic,
                        None,
                        "read-ahead sink changed",
                    );
                    return Ok(total);
                }
                Err(PlaceErr::Mem(cause, wc)) => {
                    let wc = wc.or_else(|| self.place_fail_wc());
                    self.fatal(cause, wc, "placement check failed");
                    return Ok(total);
                }
            }
            self.remaining -= pk;
            left -= pk;
            if self.remaining > 0 {
                break;
            }
            self.enter_trailer();
            i += 1;
        }
        self.start = 0;
        self.end = 0;
        Ok(total)
    }

    /// A guessed header did not match: the `left` bytes read after it are
    /// moved, in stream order, to the start of the stage — guessed payload
    /// `plan[0]` from the sink at response offset `at`, the tail
    /// `tails[0]` from the stage at `tail_at`, and so on.
    fn hand_back(
        &mut self,
        sgl: &[Sge],
        mut at: u64,
        plan: &[usize],
        tails: &[usize],
        mut tail_at: usize,
        mut left: usize,
    ) {
        let mut bytes = Vec::with_capacity(left);
        for (i, &len) in plan.iter().enumerate() {
            if left == 0 {
                break;
            }
            let n = left.min(len);
            let from = bytes.len();
            bytes.resize(from + n, 0);
            if !copy_from_sgl(&self.sh, sgl, at, &mut bytes[from..]) {
                self.fatal(
                    TerminateCause::DdpLocalCatastrophic,
                    None,
                    "read-ahead sink changed",
                );
                return;
            }
            at += len as u64;
            left -= n;
            let t = left.min(tails[i]);
            bytes.extend_from_slice(&self.stage[tail_at..tail_at + t]);
            tail_at += tails[i];
            left -= t;
        }
        self.stage[..bytes.len()].copy_from_slice(&bytes);
        self.start = 0;
        self.end = bytes.len();
    }

    fn on_trailer(&mut self) {
        let pad = self.trailer_need - 4;
        if self.crc_on {
            self.crc.update(&self.trailer[..pad]);
            let got = crc::from_wire([
                self.trailer[pad],
                self.trailer[pad + 1],
                self.trailer[pad + 2],
                self.trailer[pad + 3],
            ]);
            let want = self.crc.finish();
            if got != want {
                let wc = self.current_failed_wc();
                self.fatal(
                    TerminateCause::MpaCrcError,
                    wc,
                    &format!("MPA CRC mismatch: received {got:#010x}, computed {want:#010x}"),
                );
                return;
            }
        }
        if let Some((cause, wc)) = self.pending.take() {
            self.fatal(cause, wc, "invalid segment");
            return;
        }
        self.crc = Crc32c::new();
        self.st = St::Header;
        self.fpdus += 1;
        if self.fpdus == 1 {
            let mut g = self.sh.lock();
            if !g.tx_gate_open {
                g.tx_gate_open = true;
                drop(g);
                self.tx_work = true;
            }
        }
        if let Some(repr) = self.repr.take() {
            self.deliver(repr);
        }
        // The header is kept through delivery: a Terminate for a failure
        // found there (a Send with Invalidate of an STag that cannot be
        // invalidated) carries it (RFC 5040 §7.2).
        self.hdr_have = 0;
        self.hdr_need = 3;
    }

    /// The receive or read WR in progress, as a failed completion.
    fn current_failed_wc(&self) -> Option<WorkCompletion> {
        match self.repr {
            Some(RdmapRepr::Send { .. }) => self.recv_cur.as_ref().map(|c| {
                self.sh
                    .wc(c.wr_id, WcStatus::TransportError, WcOpcode::Recv, 0)
            }),
            _ => None,
        }
    }

    /// Segment-complete actions, after its CRC checked.
    fn deliver(&mut self, repr: RdmapRepr) {
        match repr {
            RdmapRepr::RdmaWrite { .. } => {}
            RdmapRepr::RdmaReadResponse { last, .. } => {
                self.rresp_placed += self.payload_len as u64;
                if last {
                    self.rresp_placed = 0;
                    let mut g = self.sh.lock();
                    let e = g.orq.pop_front();
                    if let Some(e) = &e {
                        if !e.internal {
                            g.sq_outstanding = g.sq_outstanding.saturating_sub(1);
                        }
                    }
                    drop(g);
                    if let Some(e) = e {
                        if !e.internal && e.wr.signaled {
                            self.sh.send_cq.push(self.sh.wc(
                                e.wr.wr_id,
                                WcStatus::Success,
                                WcOpcode::RdmaRead,
                                e.len as u32,
                            ));
                        }
                    }
                    self.tx_work = true;
                }
            }
            RdmapRepr::RdmaReadRequest { .. } => {
                let Ok(req) = ReadRequestRepr::parse(&self.small[..self.small_len]) else {
                    self.fatal(
                        TerminateCause::DdpMessageTooLong,
                        None,
                        "short Read Request",
                    );
                    return;
                };
                self.rreq_msn = self.rreq_msn.wrapping_add(1);
                let mut raw = [0u8; 2 + 18 + READ_REQUEST_LEN];
                raw[..20].copy_from_slice(&self.hdr[..20]);
                raw[20..].copy_from_slice(&self.small[..READ_REQUEST_LEN]);
                let mut g = self.sh.lock();
                if self.sh.stopped() {
                    // Failed or disconnected meanwhile: not answered.
                    drop(g);
                    self.dead = true;
                    return;
                }
                g.irq.push_back(InboundRead { req, raw });
                g.reads_in_service += 1;
                drop(g);
                self.tx_work = true;
            }
            RdmapRepr::Send {
                last,
                invalidate,
                solicited,
                ..
            } => {
                let Some(cur) = self.recv_cur.as_mut() else {
                    return;
                };
                cur.placed += self.payload_len as u64;
                if !last {
                    return;
                }
                let Some(cur) = self.recv_cur.take() else {
                    return;
                };
                self.send_msn = self.send_msn.wrapping_add(1);
                // The WR stays taken until the invalidation is done, so that
                // a close or failure meanwhile flushes it, and `fail`
                // reports it with the error below.
                if let Some(stag) = invalidate {
                    if !self.still_taken(cur.wr_id) {
                        return;
                    }
                    if !self.sh.table.invalidate(stag, self.sh.pd, true) {
                        let wc = self.sh.wc(
                            cur.wr_id,
                            WcStatus::RemoteInvalidRequest,
                            WcOpcode::Recv,
                            0,
                        );
                        self.fatal(
                            TerminateCause::RdmapCannotInvalidate,
                            Some(wc),
                            "Send with Invalidate of an STag that cannot be invalidated",
                        );
                        return;
                    }
                }
                {
                    let mut g = self.sh.lock();
                    if g.rq_taken != Some(cur.wr_id) {
                        // The QP died meanwhile: the WR completed as flushed.
                        drop(g);
                        self.dead = true;
                        return;
                    }
                    g.rq_taken = None;
                }
                self.delivered = self.delivered.saturating_add(1);
                self.sh.recv_cq.push(WorkCompletion {
                    wr_id: cur.wr_id,
                    status: WcStatus::Success,
                    opcode: WcOpcode::Recv,
                    byte_len: cur.placed as u32,
                    invalidated_rkey: invalidate,
                    solicited,
                    qp_num: self.sh.qp_num,
                });
            }
            RdmapRepr::Terminate { .. } => {
                self.dead = true;
                let t = TerminateRepr::parse(&self.small[..self.small_len]);
                let (err, status) = match &t {
                    Ok(t) => {
                        let status = if t.etype == 1 && t.layer < 2 {
                            WcStatus::RemoteAccessError
                        } else {
                            WcStatus::RemoteOperationError
                        };
                        (super::terminate_error(t, true, "peer sent"), status)
                    }
                    Err(_) => (
                        ConnError {
                            remote: true,
                            code: None,
                            description: "peer sent a malformed Terminate".into(),
                        },
                        WcStatus::RemoteOperationError,
                    ),
                };
                // The oldest outstanding Read is the likely victim.
                let first = {
                    let g = self.sh.lock();
                    g.orq
                        .front()
                        .filter(|e| !e.internal)
                        .map(|e| self.sh.wc(e.wr.wr_id, status, WcOpcode::RdmaRead, 0))
                };
                self.sh.fail(err, None, first);
            }
        }
    }

    fn fatal(&mut self, cause: TerminateCause, wc: Option<WorkCompletion>, what: &str) {
        self.dead = true;
        let hc = cause.header_control();
        let mut off = [0u8; 2 + 18 + READ_REQUEST_LEN];
        let mut n = self.hdr_have.min(self.hdr_need);
        off[..n].copy_from_slice(&self.hdr[..n]);
        if hc.r
            && matches!(self.repr, Some(RdmapRepr::RdmaReadRequest { .. }))
            && self.small_len >= READ_REQUEST_LEN
        {
            off[20..48].copy_from_slice(&self.small[..READ_REQUEST_LEN]);
            n = 48;
        }
        let t = TerminateRepr::for_cause(cause, &off[..n]);
        let err = super::terminate_error(&t, false, what);
        self.sh.fail(err, Some(t), wc);
    }

    /// Whether receive `wr_id` is still the one taken (not flushed by a
    /// close or failure meanwhile); if not, the receive half stops.
    fn still_taken(&mut self, wr_id: u64) -> bool {
        let taken = self.sh.lock().rq_taken == Some(wr_id);
        if !taken {
            self.dead = true;
        }
        taken
    }

    /// The work request whose memory a failed placement was filling (a
    /// receive buffer or an RDMA Read's sink that went away under the
    /// message, e.g. deregistered), completed with a local protection
    /// error; the others are flushed.
    fn place_fail_wc(&self) -> Option<WorkCompletion> {
        match self.repr {
            Some(RdmapRepr::RdmaReadResponse { .. }) => {
                let g = self.sh.lock();
                let e = g.orq.front().filter(|e| !e.internal)?;
                Some(self.sh.wc(
                    e.wr.wr_id,
                    WcStatus::LocalProtectionError,
                    WcOpcode::RdmaRead,
                    0,
                ))
            }
            Some(RdmapRepr::Send { .. }) => self.recv_cur.as_ref().map(|c| {
                self.sh
                    .wc(c.wr_id, WcStatus::LocalProtectionError, WcOpcode::Recv, 0)
            }),
            _ => None,
        }
    }

    fn fatal_llp(&mut self, what: &str) {
        self.dead = true;
        self.sh.fail(
            ConnError {
                remote: false,
                code: None,
                description: what.into(),
            },
            None,
            None,
        );
    }
}

enum PlaceErr {
    Mem(TerminateCause, Option<WorkCompletion>),
    Io(io::Error),
}

/// Places up to `max` bytes at the target's current position: locks the
/// region, re-checks it, hands the destination slice to `fill`, advances.
fn place_into<G>(sh: &QpShared, target: &mut Target, max: usize, fill: G) -> Result<usize, PlaceErr>
where
    G: FnOnce(&mut [u8]) -> io::Result<usize>,
{
    match target {
        Target::Tagged { region, stag, to } => {
            let mut st = region.lock();
            let range = st
                .check(region, *stag, sh.pd, Access::REMOTE_WRITE, *to, max as u64)
                .map_err(|e| PlaceErr::Mem(write_cause(e), None))?;
            let Some(buf) = st.buffer.as_mut().and_then(|b| b.as_mut_slice()) else {
                return Err(PlaceErr::Mem(TerminateCause::DdpTaggedInvalidStag, None));
            };
            let k = fill(&mut buf[range]).map_err(PlaceErr::Io)?;
            *to += k as u64;
            Ok(k)
        }
        Target::Sgl(c) => {
            while c.idx < c.sgl.len() && u64::from(c.sgl[c.idx].length) == c.off {
                c.idx += 1;
                c.off = 0;
            }
            let Some(sge) = c.sgl.get(c.idx).copied() else {
                return Err(PlaceErr::Mem(TerminateCause::DdpMessageTooLong, None));
            };
            let region = match &c.cached {
                Some((i, r)) if *i == c.idx => r.clone(),
                _ => {
                    let r = sh
                        .table
                        .lookup(sge.lkey)
                        .ok_or(PlaceErr::Mem(TerminateCause::DdpLocalCatastrophic, None))?;
                    c.cached = Some((c.idx, r.clone()));
                    r
                }
            };
            let n = (u64::from(sge.length) - c.off).min(max as u64);
            let mut st = region.lock();
            let range = st
                .check(
                    &region,
                    sge.lkey,
                    sh.pd,
                    Access::LOCAL_WRITE,
                    sge.offset.saturating_add(c.off),
                    n,
                )
                .map_err(|_| PlaceErr::Mem(TerminateCause::DdpLocalCatastrophic, None))?;
            let Some(buf) = st.buffer.as_mut().and_then(|b| b.as_mut_slice()) else {
                return Err(PlaceErr::Mem(TerminateCause::DdpLocalCatastrophic, None));
            };
            let k = fill(&mut buf[range]).map_err(PlaceErr::Io)?;
            c.off += k as u64;
            Ok(k)
        }
        Target::Discard | Target::Small => Ok(0),
    }
}

/// Copies `out.len()` bytes at byte `pos` of the scatter list `sgl` out of
/// registered memory (local access, under each region's lock); false if a
/// region is gone or the range is outside the list.
fn copy_from_sgl(sh: &QpShared, sgl: &[Sge], pos: u64, out: &mut [u8]) -> bool {
    let mut target = Target::Sgl(SglCursor::at(sgl.to_vec(), pos));
    let mut done = 0;
    while done < out.len() {
        let want = out.len() - done;
        let r = place_into(sh, &mut target, want, |src| {
            out[done..done + src.len()].copy_from_slice(src);
            Ok(src.len())
        });
        match r {
            Ok(n) if n > 0 => done += n,
            _ => return false,
        }
    }
    true
}

/// Cause for a failed check of an RDMA Write's sink (RFC 5041 §7.2 tagged
/// buffer errors; a missing Remote Write right is RFC 5040's access rights
/// violation, for which DDP has no code).
fn write_cause(e: MemError) -> TerminateCause {
    match e {
        MemError::InvalidStag => TerminateCause::DdpTaggedInvalidStag,
        MemError::NotAssociated => TerminateCause::DdpTaggedStagNotAssociated,
        MemError::Access => TerminateCause::RdmapAccessRights,
        MemError::Bounds => TerminateCause::DdpTaggedBaseBounds,
        MemError::ToWrap => TerminateCause::DdpTaggedToWrap,
    }
}
