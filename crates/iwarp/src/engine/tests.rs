//! Engine tests: two engines wired back to back in memory (deterministic),
//! plus crafted FPDUs for every Terminate cause the receiver can raise.

use super::rx::{Rx, RxStatus};
use super::tx::Tx;
use super::{Limits, QpShared, SqItem};
use crate::cq::Cq;
use crate::crc;
use crate::mem::{Region, StagTable};
use crate::wire::fpdu::pad_len;
use crate::wire::rdmap::{RdmapRepr, ReadRequestRepr};
use crate::wire::terminate::{TerminateCause, TerminateRepr};
use bytes::{Bytes, BytesMut};
use rdma_verbs::{
    Access, CompletionQueue, MrBuffer, QpState, RecvWr, RemoteAddr, SendWr, Sge, WcOpcode,
    WcStatus, WorkCompletion,
};
use std::io;
use std::sync::Arc;

struct Side {
    sh: Arc<QpShared>,
    rx: Rx,
    tx: Tx,
    table: Arc<StagTable>,
    cq: Cq,
    pd: u32,
}

/// An established QP's shared state over `table`, in PD 7, both queues
/// completing to `cq`.
pub(super) fn established(
    table: &Arc<StagTable>,
    cq: &Cq,
    ord: u32,
    ird: u32,
    gate: bool,
) -> Arc<QpShared> {
    let limits = Limits {
        max_send_wr: 1024,
        max_recv_wr: 1024,
        max_send_sge: 16,
        max_recv_sge: 16,
    };
    let sh = Arc::new(QpShared::new(
        1,
        7,
        table.clone(),
        cq.clone(),
        cq.clone(),
        limits,
    ));
    sh.establish(ord, ird, gate, None, None);
    sh
}

fn side(crc: bool, mulpdu: usize, ord: u32, ird: u32, gate: bool) -> Side {
    let table = Arc::new(StagTable::default());
    let cq = Cq::new(1 << 16);
    let sh = established(&table, &cq, ord, ird, gate);
    Side {
        rx: Rx::new(sh.clone(), crc),
        tx: Tx::new(sh.clone(), crc, mulpdu, None),
        sh,
        table,
        cq,
        pd: 7,
    }
}

fn pair(crc: bool, mulpdu: usize) -> (Side, Side) {
    (side(crc, mulpdu, 4, 4, true), side(crc, mulpdu, 4, 4, true))
}

impl Side {
    fn reg(&self, buf: MrBuffer, access: Access) -> (Arc<Region>, u32) {
        let r = self.table.insert(self.pd, buf.len(), access, Some(buf));
        let stag = r.stag_for(r.lock().key);
        (r, stag)
    }
    fn reg_zeroed(&self, n: usize, access: Access) -> (Arc<Region>, u32) {
        self.reg(MrBuffer::from(BytesMut::zeroed(n)), access)
    }
    fn post_send(&self, wr: SendWr) {
        let mut g = self.sh.lock();
        g.sq_outstanding += 1;
        g.sq.push_back(SqItem::Wr(wr));
    }
    fn post_recv(&self, wr: RecvWr) {
        self.sh.lock().rq.push_back(wr);
    }
    /// Everything the transmit half has to send now.
    fn out(&mut self) -> Vec<u8> {
        let mut v = Vec::new();
        let mut bufs = Vec::new();
        while self.tx.poll_transmit(&mut bufs, usize::MAX) > 0 {
            for b in bufs.drain(..) {
                v.extend_from_slice(&b);
            }
        }
        v
    }
    /// Feeds bytes to the receive half in chunks of `chunk` bytes.
    fn feed(&mut self, bytes: &[u8], chunk: usize) -> RxStatus {
        let mut pos = 0;
        loop {
            let st = self
                .rx
                .recv(|bufs| {
                    if pos == bytes.len() {
                        return Err(io::ErrorKind::WouldBlock.into());
                    }
                    let mut total = 0;
                    for buf in bufs.iter_mut() {
                        let n = buf.len().min(chunk - total).min(bytes.len() - pos);
                        buf[..n].copy_from_slice(&bytes[pos..pos + n]);
                        pos += n;
                        total += n;
                    }
                    Ok(total)
                })
                .unwrap();
            if st != RxStatus::Budget {
                return st;
            }
        }
    }
    /// After a transmit-side error, the receive half stops too.
    fn rx_dead_after_feed(&mut self) -> bool {
        self.feed(&[], 1) == RxStatus::Dead
    }
    fn wcs(&self) -> Vec<WorkCompletion> {
        let mut v = Vec::new();
        self.cq.poll(&mut v, usize::MAX);
        v
    }
    fn error_cause(&self) -> Option<TerminateCause> {
        let c = self.sh.lock().error.as_ref()?.code?;
        TerminateCause::from_codes(
            (c >> 28) as u8,
            ((c >> 24) & 0xF) as u8,
            ((c >> 16) & 0xFF) as u8,
        )
    }
}

/// Moves bytes both ways until quiet (byte-at-a-time every other round to
/// exercise arbitrary segmentation).
fn pump(a: &mut Side, b: &mut Side) {
    for round in 0..64 {
        let chunk = if round % 2 == 0 { usize::MAX } else { 7 };
        let ab = a.out();
        let ba = b.out();
        if ab.is_empty() && ba.is_empty() {
            return;
        }
        if !ab.is_empty() {
            b.feed(&ab, chunk);
        }
        if !ba.is_empty() {
            a.feed(&ba, chunk);
        }
    }
    panic!("engines did not settle");
}

/// One FPDU with the given header and payload (CRC on).
fn fpdu(repr: RdmapRepr, payload: &[u8]) -> Vec<u8> {
    let mut hdr = [0u8; 18];
    let hl = repr.emit(&mut hdr).unwrap();
    fpdu_raw(&hdr[..hl], payload)
}

fn fpdu_raw(hdr: &[u8], payload: &[u8]) -> Vec<u8> {
    let ulpdu = hdr.len() + payload.len();
    let mut v = (ulpdu as u16).to_be_bytes().to_vec();
    v.extend_from_slice(hdr);
    v.extend_from_slice(payload);
    v.extend(std::iter::repeat_n(0u8, pad_len(ulpdu)));
    let c = crc::crc32c(&v);
    v.extend_from_slice(&crc::to_wire(c));
    v
}

/// The Terminate in a transmitted byte stream (it is the last FPDU).
fn terminate_in(bytes: &[u8]) -> TerminateRepr {
    let mut pos = 0;
    let mut last = None;
    while pos + 2 <= bytes.len() {
        let len = u16::from_be_bytes([bytes[pos], bytes[pos + 1]]) as usize;
        let ulpdu = &bytes[pos + 2..pos + 2 + len];
        let end = pos + 2 + len + pad_len(len);
        assert_eq!(
            crc::from_wire(bytes[end..end + 4].try_into().unwrap()),
            crc::crc32c(&bytes[pos..end])
        );
        if let Ok(RdmapRepr::Terminate { msn, mo, last: l }) = RdmapRepr::parse_ulpdu(ulpdu) {
            assert_eq!((msn, mo, l), (1, 0, true));
            last = Some(TerminateRepr::parse(&ulpdu[18..]).unwrap());
            assert_eq!(end + 4, bytes.len(), "Terminate must be the last message");
        }
        pos = end + 4;
    }
    last.expect("no Terminate sent")
}

/// Feeds `bytes` to `b`, expects it to die with `cause` and to send exactly
/// that Terminate, which `a` then receives.
fn expect_terminate(
    a: &mut Side,
    b: &mut Side,
    bytes: &[u8],
    cause: TerminateCause,
) -> TerminateRepr {
    let st = b.feed(bytes, usize::MAX);
    // Read Request sources are checked when the response is generated.
    let out = b.out();
    assert!(st == RxStatus::Dead || b.rx_dead_after_feed(), "{st:?}");
    assert_eq!(b.error_cause(), Some(cause));
    assert_eq!(b.sh.state(), QpState::Error);
    let t = terminate_in(&out);
    assert_eq!(t.cause(), Some(cause));
    assert!(b.tx.finished());
    assert!(b.out().is_empty(), "nothing after a Terminate");
    assert_eq!(a.feed(&out, usize::MAX), RxStatus::Dead);
    assert_eq!(a.sh.state(), QpState::Error);
    assert!(a.sh.lock().error.as_ref().unwrap().remote);
    t
}

fn data(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
        .collect()
}

#[test]
fn write_then_send_places_before_delivery_and_segments() {
    for crc_on in [true, false] {
        let (mut a, mut b) = pair(crc_on, 128);
        let (tr, tstag) = b.reg_zeroed(1000, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
        let (rr, rstag) = b.reg_zeroed(300, Access::LOCAL_WRITE);
        b.post_recv(RecvWr::new(
            9,
            vec![Sge::new(rstag, 0, 100), Sge::new(rstag, 100, 200)],
        ));
        let payload = data(1000, 1);
        let (_s, sstag) = a.reg(MrBuffer::from(Bytes::from(payload.clone())), Access::NONE);
        a.post_send(SendWr::write(
            1,
            vec![Sge::new(sstag, 0, 400), Sge::new(sstag, 400, 600)],
            RemoteAddr {
                rkey: tstag,
                offset: 0,
            },
        ));
        a.post_send(SendWr::send(2, vec![Sge::new(sstag, 10, 250)]));
        pump(&mut a, &mut b);
        let wcs = b.wcs();
        assert_eq!(wcs.len(), 1);
        assert_eq!(
            (wcs[0].wr_id, wcs[0].status, wcs[0].byte_len),
            (9, WcStatus::Success, 250)
        );
        assert_eq!(tr.lock().buffer.as_ref().unwrap().as_slice(), &payload[..]);
        assert_eq!(
            &rr.lock().buffer.as_ref().unwrap().as_slice()[..250],
            &payload[10..260]
        );
        let ids: Vec<_> = a.wcs().iter().map(|w| (w.wr_id, w.status)).collect();
        assert_eq!(ids, vec![(1, WcStatus::Success), (2, WcStatus::Success)]);
        // 1000 bytes at MULPDU 128 (114 per tagged segment) = 9 FPDUs + Send 3.
        assert_eq!(b.rx.fpdus(), 9 + 3);
    }
}

/// A peer may put tagged segments between the segments of one Send (RFC
/// 5041 orders only each queue): the receive's scatter list, lent to the
/// first segment's cursor, must come back for the second.
#[test]
fn send_segments_around_a_tagged_write_fill_the_receive() {
    for chunk in [1, 7, 4096] {
        let (_a, mut b) = pair(true, 1024);
        let (rr, rstag) = b.reg_zeroed(300, Access::LOCAL_WRITE);
        let (tr, tstag) = b.reg_zeroed(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
        b.post_recv(RecvWr::new(
            5,
            vec![Sge::new(rstag, 0, 100), Sge::new(rstag, 100, 200)],
        ));
        let msg = data(230, 9);
        let seg = |mo: u32, last: bool| RdmapRepr::Send {
            solicited: false,
            invalidate: None,
            msn: 1,
            mo,
            last,
        };
        let mut bytes = fpdu(seg(0, false), &msg[..120]);
        let written = data(40, 77);
        bytes.extend(fpdu(
            RdmapRepr::RdmaWrite {
                stag: tstag,
                to: 8,
                last: true,
            },
            &written,
        ));
        bytes.extend(fpdu(seg(120, true), &msg[120..]));
        b.feed(&bytes, chunk);
        let wcs = b.wcs();
        assert_eq!(wcs.len(), 1, "chunk {chunk}");
        assert_eq!(
            (wcs[0].wr_id, wcs[0].status, wcs[0].byte_len),
            (5, WcStatus::Success, 230)
        );
        assert_eq!(
            &rr.lock().buffer.as_ref().unwrap().as_slice()[..230],
            &msg[..]
        );
        assert_eq!(
            &tr.lock().buffer.as_ref().unwrap().as_slice()[8..48],
            &written[..]
        );
        assert_eq!(b.error_cause(), None);
    }
}

/// Sends gathered from a mutable region are copies taken when they are
/// transmitted; small ones share the transmitter's copy buffer, which
/// fills up and is replaced several times here (sizes around the copy
/// limits, 130 KiB in all). Every message arrives intact, and a source
/// changed after its Sends were produced does not change what was sent.
#[test]
fn many_small_sends_from_a_mutable_region_arrive_intact() {
    let (mut a, mut b) = pair(true, 8192);
    let src = data(5000, 21);
    let (sr, sstag) = a.reg(
        MrBuffer::from(BytesMut::from(&src[..])),
        Access::LOCAL_WRITE,
    );
    let sizes: Vec<usize> = [1, 100, 511, 512, 513, 2000, 4095, 4096, 4097, 4999]
        .iter()
        .copied()
        .cycle()
        .take(60)
        .collect();
    let mut regions = Vec::new();
    for (i, _) in sizes.iter().enumerate() {
        let (r, stag) = b.reg_zeroed(5000, Access::LOCAL_WRITE);
        b.post_recv(RecvWr::new(100 + i as u64, vec![Sge::new(stag, 0, 5000)]));
        regions.push(r);
    }
    for (i, &n) in sizes.iter().enumerate() {
        let off = (i * 7) % (5000 - n + 1);
        a.post_send(SendWr::send(
            i as u64,
            vec![Sge::new(sstag, off as u64, n as u32)],
        ));
    }
    let bytes = a.out();
    // The source changes after the Sends were produced.
    sr.lock()
        .buffer
        .as_mut()
        .unwrap()
        .as_mut_slice()
        .unwrap()
        .fill(0xee);
    b.feed(&bytes, usize::MAX);
    let wcs = b.wcs();
    assert_eq!(wcs.len(), sizes.len());
    for (i, &n) in sizes.iter().enumerate() {
        let off = (i * 7) % (5000 - n + 1);
        assert_eq!(
            (wcs[i].wr_id, wcs[i].status, wcs[i].byte_len as usize),
            (100 + i as u64, WcStatus::Success, n)
        );
        let got = regions[i].lock().buffer.as_ref().unwrap().as_slice()[..n].to_vec();
        assert_eq!(got, src[off..off + n], "message {i} ({n} bytes)");
    }
    assert_eq!(a.wcs().len(), sizes.len());
}

#[test]
fn reads_in_order_with_sgl_and_zero_length() {
    let (mut a, mut b) = pair(true, 200);
    let src_data = data(5000, 3);
    let (_src, src) = b.reg(
        MrBuffer::from(Bytes::from(src_data.clone())),
        Access::REMOTE_READ,
    );
    let (sink, sstag) = a.reg_zeroed(5000, Access::LOCAL_WRITE);
    a.post_send(SendWr::read(
        1,
        vec![Sge::new(sstag, 0, 1000), Sge::new(sstag, 1000, 1500)],
        RemoteAddr {
            rkey: src,
            offset: 0,
        },
    ));
    a.post_send(SendWr::read(
        2,
        vec![],
        RemoteAddr {
            rkey: src,
            offset: 0,
        },
    ));
    a.post_send(SendWr::read(
        3,
        vec![Sge::new(sstag, 2500, 2500)],
        RemoteAddr {
            rkey: src,
            offset: 2500,
        },
    ));
    pump(&mut a, &mut b);
    let wcs = a.wcs();
    let got: Vec<_> = wcs
        .iter()
        .map(|w| (w.wr_id, w.status, w.opcode, w.byte_len))
        .collect();
    assert_eq!(
        got,
        vec![
            (1, WcStatus::Success, WcOpcode::RdmaRead, 2500),
            (2, WcStatus::Success, WcOpcode::RdmaRead, 0),
            (3, WcStatus::Success, WcOpcode::RdmaRead, 2500)
        ]
    );
    assert_eq!(
        sink.lock().buffer.as_ref().unwrap().as_slice(),
        &src_data[..]
    );
    assert!(b.wcs().is_empty(), "no completion at the data source");
}

#[test]
fn ord_limits_outstanding_reads() {
    let mut a = side(true, 1024, 1, 1, true);
    let mut b = side(true, 1024, 1, 1, true);
    let (_src, src) = b.reg(
        MrBuffer::from(Bytes::from(data(64, 1))),
        Access::REMOTE_READ,
    );
    let (_sink, sstag) = a.reg_zeroed(64, Access::LOCAL_WRITE);
    for i in 0..3 {
        a.post_send(SendWr::read(
            i,
            vec![Sge::new(sstag, 0, 64)],
            RemoteAddr {
                rkey: src,
                offset: 0,
            },
        ));
    }
    let out = a.out();
    // Only one Read Request (18 + 28 bytes ULPDU) may be outstanding.
    assert_eq!(out.len(), 2 + 46 + 4);
    assert_eq!(a.sh.lock().orq.len(), 1);
    assert!(!b.rx.take_tx_work());
    b.feed(&out, usize::MAX);
    // The Read Request gave the responder's transmit half work: the driver
    // is told (once), so that it answers from the reading thread.
    assert!(b.rx.take_tx_work());
    assert!(!b.rx.take_tx_work());
    let resp = b.out();
    assert!(!resp.is_empty());
    a.feed(&resp, usize::MAX);
    // The Read Response freed the ORD slot: the next queued Read may go.
    assert!(a.rx.take_tx_work());
    pump(&mut a, &mut b);
    assert_eq!(a.wcs().len(), 3);
}

#[test]
fn send_with_invalidate_invalidates_before_completion() {
    let (mut a, mut b) = pair(true, 1024);
    let (res, rkey) = b.reg_zeroed(16, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let (_r, rstag) = b.reg_zeroed(16, Access::LOCAL_WRITE);
    b.post_recv(RecvWr::new(1, vec![Sge::new(rstag, 0, 16)]));
    let (_s, sstag) = a.reg(MrBuffer::from(Bytes::from(data(16, 0))), Access::NONE);
    a.post_send(SendWr::send_with_invalidate(
        5,
        vec![Sge::new(sstag, 0, 4)],
        rkey,
    ));
    pump(&mut a, &mut b);
    let wc = b.wcs()[0];
    assert_eq!(
        (wc.status, wc.invalidated_rkey, wc.byte_len),
        (WcStatus::Success, Some(rkey), 4)
    );
    assert!(!res.lock().valid);
    // A Write through it now terminates.
    a.post_send(SendWr::write(
        6,
        vec![Sge::new(sstag, 0, 4)],
        RemoteAddr { rkey, offset: 0 },
    ));
    let bytes = a.out();
    expect_terminate(&mut a, &mut b, &bytes, TerminateCause::DdpTaggedInvalidStag);
}

#[test]
fn terminate_invalid_stag() {
    let (mut a, mut b) = pair(true, 1024);
    let f = fpdu(
        RdmapRepr::RdmaWrite {
            stag: 0x1234_5600,
            to: 0,
            last: true,
        },
        b"abcd",
    );
    let t = expect_terminate(&mut a, &mut b, &f, TerminateCause::DdpTaggedInvalidStag);
    // M + D: the payload length and the offending tagged header.
    assert_eq!(t.ddp_segment_length, Some(4));
    assert_eq!(t.ddp_header.unwrap().as_bytes(), &f[2..16]);
}

#[test]
fn terminate_bounds_access_pd_wrap() {
    let cases: Vec<(Access, bool, u64, TerminateCause)> = vec![
        (
            Access::LOCAL_WRITE | Access::REMOTE_WRITE,
            false,
            6,
            TerminateCause::DdpTaggedBaseBounds,
        ),
        (
            Access::REMOTE_READ,
            false,
            0,
            TerminateCause::RdmapAccessRights,
        ),
        (
            Access::LOCAL_WRITE | Access::REMOTE_WRITE,
            true,
            0,
            TerminateCause::DdpTaggedStagNotAssociated,
        ),
        (
            Access::LOCAL_WRITE | Access::REMOTE_WRITE,
            false,
            u64::MAX - 1,
            TerminateCause::DdpTaggedToWrap,
        ),
    ];
    for (access, other_pd, to, cause) in cases {
        let (mut a, mut b) = pair(true, 1024);
        let buf = if access.needs_mutable_buffer() {
            MrBuffer::from(BytesMut::zeroed(8))
        } else {
            MrBuffer::from(Bytes::from(vec![0u8; 8]))
        };
        let pd = if other_pd { 99 } else { b.pd };
        let r = b.table.insert(pd, 8, access, Some(buf));
        let stag = r.stag_for(r.lock().key);
        let f = fpdu(
            RdmapRepr::RdmaWrite {
                stag,
                to,
                last: true,
            },
            b"abcd",
        );
        expect_terminate(&mut a, &mut b, &f, cause);
        let st = r.lock();
        let untouched = st
            .buffer
            .as_ref()
            .is_none_or(|b| b.as_slice().iter().all(|&x| x == 0));
        assert!(untouched, "nothing placed for {cause:?}");
    }
}

#[test]
fn terminate_no_posted_receive_and_too_small() {
    let (mut a, mut b) = pair(true, 1024);
    let (_s, sstag) = a.reg(MrBuffer::from(Bytes::from(data(32, 0))), Access::NONE);
    a.post_send(SendWr::send(1, vec![Sge::new(sstag, 0, 32)]));
    let bytes = a.out();
    expect_terminate(&mut a, &mut b, &bytes, TerminateCause::DdpNoBuffer);

    let (mut a, mut b) = pair(true, 1024);
    let (_r, rstag) = b.reg_zeroed(16, Access::LOCAL_WRITE);
    b.post_recv(RecvWr::new(4, vec![Sge::new(rstag, 0, 16)]));
    b.post_recv(RecvWr::new(5, vec![Sge::new(rstag, 0, 16)]));
    let (_s, sstag) = a.reg(MrBuffer::from(Bytes::from(data(32, 0))), Access::NONE);
    a.post_send(SendWr::send(1, vec![Sge::new(sstag, 0, 32)]));
    let bytes = a.out();
    expect_terminate(&mut a, &mut b, &bytes, TerminateCause::DdpMessageTooLong);
    let st: Vec<_> = b.wcs().iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        st,
        vec![(4, WcStatus::LocalLengthError), (5, WcStatus::WrFlushError)]
    );
}

#[test]
fn terminate_msn_and_mo_errors() {
    let send = |msn, mo| RdmapRepr::Send {
        solicited: false,
        invalidate: None,
        msn,
        mo,
        last: true,
    };
    let (mut a, mut b) = pair(true, 1024);
    let (_r, rstag) = b.reg_zeroed(16, Access::LOCAL_WRITE);
    b.post_recv(RecvWr::new(4, vec![Sge::new(rstag, 0, 16)]));
    expect_terminate(
        &mut a,
        &mut b,
        &fpdu(send(2, 0), b"x"),
        TerminateCause::DdpMsnRange,
    );
    let (mut a, mut b) = pair(true, 1024);
    b.post_recv(RecvWr::new(4, vec![]));
    expect_terminate(
        &mut a,
        &mut b,
        &fpdu(send(1, 4), b"x"),
        TerminateCause::DdpInvalidMo,
    );
    // A middle segment with a wrong MO.
    let (mut a, mut b) = pair(true, 1024);
    let (_r, rstag) = b.reg_zeroed(16, Access::LOCAL_WRITE);
    b.post_recv(RecvWr::new(4, vec![Sge::new(rstag, 0, 16)]));
    let mut bytes = fpdu(
        RdmapRepr::Send {
            solicited: false,
            invalidate: None,
            msn: 1,
            mo: 0,
            last: false,
        },
        b"abcd",
    );
    bytes.extend(fpdu(send(1, 5), b"ef"));
    expect_terminate(&mut a, &mut b, &bytes, TerminateCause::DdpInvalidMo);
}

#[test]
fn terminate_version_opcode_qn() {
    // DDP version 0 on a tagged and an untagged segment.
    let (mut a, mut b) = pair(true, 1024);
    let mut hdr = [0u8; 14];
    RdmapRepr::RdmaWrite {
        stag: 0,
        to: 0,
        last: true,
    }
    .emit(&mut hdr)
    .unwrap();
    hdr[0] &= !0x03;
    let t = expect_terminate(
        &mut a,
        &mut b,
        &fpdu_raw(&hdr, b""),
        TerminateCause::DdpTaggedInvalidVersion,
    );
    assert_eq!(t.ddp_header, None, "no headers for an unknown layout");
    let (mut a, mut b) = pair(true, 1024);
    let mut hdr = [0u8; 18];
    RdmapRepr::Send {
        solicited: false,
        invalidate: None,
        msn: 1,
        mo: 0,
        last: true,
    }
    .emit(&mut hdr)
    .unwrap();
    hdr[0] &= !0x03;
    expect_terminate(
        &mut a,
        &mut b,
        &fpdu_raw(&hdr, b""),
        TerminateCause::DdpUntaggedInvalidVersion,
    );
    // RDMAP version 0.
    let (mut a, mut b) = pair(true, 1024);
    let mut hdr = [0u8; 18];
    RdmapRepr::Send {
        solicited: false,
        invalidate: None,
        msn: 1,
        mo: 0,
        last: true,
    }
    .emit(&mut hdr)
    .unwrap();
    hdr[1] &= 0x3F;
    expect_terminate(
        &mut a,
        &mut b,
        &fpdu_raw(&hdr, b""),
        TerminateCause::RdmapInvalidVersion,
    );
    // Reserved opcode 8.
    let (mut a, mut b) = pair(true, 1024);
    hdr[1] = 0x48;
    expect_terminate(
        &mut a,
        &mut b,
        &fpdu_raw(&hdr, b""),
        TerminateCause::RdmapUnexpectedOpcode,
    );
    // Send on QN 3.
    let (mut a, mut b) = pair(true, 1024);
    let mut hdr = [0u8; 18];
    RdmapRepr::Send {
        solicited: false,
        invalidate: None,
        msn: 1,
        mo: 0,
        last: true,
    }
    .emit(&mut hdr)
    .unwrap();
    hdr[9] = 3;
    expect_terminate(
        &mut a,
        &mut b,
        &fpdu_raw(&hdr, b""),
        TerminateCause::DdpInvalidQn,
    );
}

#[test]
fn terminate_crc_error_delivers_nothing() {
    let (mut a, mut b) = pair(true, 1024);
    let (r, rstag) = b.reg_zeroed(16, Access::LOCAL_WRITE);
    b.post_recv(RecvWr::new(4, vec![Sge::new(rstag, 0, 16)]));
    let mut f = fpdu(
        RdmapRepr::Send {
            solicited: false,
            invalidate: None,
            msn: 1,
            mo: 0,
            last: true,
        },
        b"hello",
    );
    let n = f.len();
    f[n - 1] ^= 0x80;
    expect_terminate(&mut a, &mut b, &f, TerminateCause::MpaCrcError);
    let wcs = b.wcs();
    assert_eq!(
        wcs[0].status,
        WcStatus::TransportError,
        "the receive is not delivered"
    );
    drop(r);
    // A header error inside an FPDU with a bad CRC is reported as the CRC error.
    let (mut a, mut b) = pair(true, 1024);
    let mut f = fpdu(
        RdmapRepr::RdmaWrite {
            stag: 0xdead_0000,
            to: 0,
            last: true,
        },
        b"abcd",
    );
    let n = f.len();
    f[n - 2] ^= 1;
    expect_terminate(&mut a, &mut b, &f, TerminateCause::MpaCrcError);
    // With CRC off the field is not checked.
    let mut a = side(false, 1024, 1, 1, true);
    let mut b = side(false, 1024, 1, 1, true);
    let f = fpdu(
        RdmapRepr::RdmaWrite {
            stag: 0,
            to: 0,
            last: true,
        },
        b"",
    );
    assert_eq!(b.feed(&f, 1), RxStatus::WouldBlock);
    assert_eq!(b.sh.state(), QpState::Connected);
    drop(a.out());
}

#[test]
fn terminate_unexpected_read_response_and_bad_sink() {
    let (mut a, mut b) = pair(true, 1024);
    let f = fpdu(
        RdmapRepr::RdmaReadResponse {
            stag: 5,
            to: 0,
            last: true,
        },
        b"zz",
    );
    expect_terminate(&mut a, &mut b, &f, TerminateCause::RdmapUnexpectedOpcode);
    // A response naming another sink STag than the request did.
    let (mut a, mut b) = pair(true, 1024);
    let (_sink, sstag) = a.reg_zeroed(8, Access::LOCAL_WRITE);
    a.post_send(SendWr::read(
        1,
        vec![Sge::new(sstag, 0, 8)],
        RemoteAddr {
            rkey: 77,
            offset: 0,
        },
    ));
    let _ = a.out();
    let f = fpdu(
        RdmapRepr::RdmaReadResponse {
            stag: sstag ^ 0x100,
            to: 0,
            last: true,
        },
        &[0; 8],
    );
    expect_terminate(&mut b, &mut a, &f, TerminateCause::DdpTaggedInvalidStag);
    let wcs = a.wcs();
    assert_eq!(wcs[0].status, WcStatus::LocalProtectionError);
    // The failed Read completes once, with its error (not flushed again).
    assert_eq!(wcs.iter().filter(|w| w.wr_id == 1).count(), 1, "{wcs:?}");
}

/// A Read's sink that goes away before its response arrives (the consumer
/// released it early): the response is refused, and the Read completes
/// once, with a local protection error, not flushed as well.
#[test]
fn read_sink_gone_before_the_response() {
    let (mut a, mut b) = pair(true, 1454);
    let (_src, src_stag) = b.reg(
        MrBuffer::from(BytesMut::from(&[7u8; 4096][..])),
        Access::REMOTE_READ,
    );
    let (sink, sink_stag) = a.reg_zeroed(4096, Access::LOCAL_WRITE);
    a.post_send(SendWr::read(
        1,
        vec![Sge::new(sink_stag, 0, 4096)],
        RemoteAddr {
            rkey: src_stag,
            offset: 0,
        },
    ));
    let ab = a.out();
    assert!(a.table.invalidate(sink_stag, a.pd, false));
    b.feed(&ab, usize::MAX);
    let ba = b.out();
    assert_eq!(a.feed(&ba, usize::MAX), RxStatus::Dead);
    let wcs: Vec<_> = a.wcs().iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(wcs, vec![(1, WcStatus::LocalProtectionError)]);
    assert!(sink
        .lock()
        .buffer
        .as_ref()
        .unwrap()
        .as_slice()
        .iter()
        .all(|&x| x == 0));
}

#[test]
fn terminate_read_request_errors() {
    let req = |src_stag, size| {
        ReadRequestRepr {
            sink_stag: 1,
            sink_to: 0,
            size,
            src_stag,
            src_to: 0,
        }
        .to_bytes()
    };
    let rr = |msn| RdmapRepr::RdmaReadRequest {
        msn,
        mo: 0,
        last: true,
    };
    // Source STag invalid: RDMAP remote protection with M + D + R.
    let (mut a, mut b) = pair(true, 1024);
    let f = fpdu(rr(1), &req(0x4242_4200, 8));
    let t = expect_terminate(&mut a, &mut b, &f, TerminateCause::RdmapInvalidStag);
    assert_eq!(t.rdma_header, Some(req(0x4242_4200, 8)));
    assert!(t.ddp_header.is_some());
    // Source without Remote Read.
    let (mut a, mut b) = pair(true, 1024);
    let (_r, stag) = b.reg_zeroed(8, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    expect_terminate(
        &mut a,
        &mut b,
        &fpdu(rr(1), &req(stag, 8)),
        TerminateCause::RdmapAccessRights,
    );
    // Out of bounds.
    let (mut a, mut b) = pair(true, 1024);
    let (_r, stag) = b.reg(
        MrBuffer::from(Bytes::from(vec![0u8; 8])),
        Access::REMOTE_READ,
    );
    expect_terminate(
        &mut a,
        &mut b,
        &fpdu(rr(1), &req(stag, 9)),
        TerminateCause::RdmapBaseBounds,
    );
    // IRD exceeded (IRD 1, two requests).
    let mut a = side(true, 1024, 1, 1, true);
    let mut b = side(true, 1024, 1, 1, true);
    let (_r, stag) = b.reg(
        MrBuffer::from(Bytes::from(vec![0u8; 8])),
        Access::REMOTE_READ,
    );
    let mut bytes = fpdu(rr(1), &req(stag, 8));
    bytes.extend(fpdu(rr(2), &req(stag, 8)));
    expect_terminate(&mut a, &mut b, &bytes, TerminateCause::DdpNoBuffer);
    // Wrong MSN, and a request with extra payload.
    let (mut a, mut b) = pair(true, 1024);
    expect_terminate(
        &mut a,
        &mut b,
        &fpdu(rr(3), &req(stag, 8)),
        TerminateCause::DdpMsnRange,
    );
    let (mut a, mut b) = pair(true, 1024);
    let mut long = req(stag, 8).to_vec();
    long.push(0);
    expect_terminate(
        &mut a,
        &mut b,
        &fpdu(rr(1), &long),
        TerminateCause::DdpMessageTooLong,
    );
}

#[test]
fn terminate_cannot_invalidate() {
    let (mut a, mut b) = pair(true, 1024);
    b.post_recv(RecvWr::new(4, vec![]));
    // A local-only region cannot be invalidated remotely.
    let (_r, stag) = b.reg_zeroed(8, Access::LOCAL_WRITE);
    let f = fpdu(
        RdmapRepr::Send {
            solicited: false,
            invalidate: Some(stag),
            msn: 1,
            mo: 0,
            last: true,
        },
        b"",
    );
    expect_terminate(&mut a, &mut b, &f, TerminateCause::RdmapCannotInvalidate);
}

#[test]
fn responder_gate_holds_output_until_first_fpdu() {
    let mut a = side(true, 1024, 1, 1, true);
    let mut b = side(true, 1024, 1, 1, false);
    a.post_recv(RecvWr::new(1, vec![]));
    b.post_send(SendWr::send(2, vec![]));
    assert!(
        b.out().is_empty(),
        "responder must wait for the initiator's first FPDU"
    );
    b.feed(
        &fpdu(
            RdmapRepr::RdmaWrite {
                stag: 0,
                to: 0,
                last: true,
            },
            b"",
        ),
        usize::MAX,
    );
    let out = b.out();
    assert!(!out.is_empty());
    a.feed(&out, usize::MAX);
    assert_eq!(a.wcs()[0].wr_id, 1);
}

/// Length of the first FPDU in a byte stream.
fn first_fpdu_len(bytes: &[u8]) -> usize {
    let ulpdu = usize::from(u16::from_be_bytes([bytes[0], bytes[1]]));
    2 + ulpdu + pad_len(ulpdu) + 4
}

/// Review F6: a receive WR taken for a multi-segment Send completes (with
/// an error or flush status) however the QP dies before the Send's last
/// segment: a fatal error in another message, a CRC error, an orderly
/// close or end of stream, or an error raised elsewhere.
#[test]
fn receive_taken_by_unfinished_send_is_flushed() {
    for scenario in 0..5 {
        let (mut a, mut b) = pair(true, 128);
        let (_rr, rstag) = b.reg_zeroed(1000, Access::LOCAL_WRITE);
        b.post_recv(RecvWr::new(9, vec![Sge::new(rstag, 0, 1000)]));
        b.post_recv(RecvWr::new(10, vec![Sge::new(rstag, 0, 1000)]));
        let (_s, sstag) = a.reg(MrBuffer::from(Bytes::from(data(600, 1))), Access::NONE);
        a.post_send(SendWr::send(1, vec![Sge::new(sstag, 0, 600)]));
        let out = a.out();
        let first = first_fpdu_len(&out);
        assert!(first < out.len(), "the Send must take several FPDUs");
        assert_eq!(b.feed(&out[..first], usize::MAX), RxStatus::WouldBlock);
        assert!(b.wcs().is_empty());
        match scenario {
            0 => {
                // An RDMA Write to an invalid STag between the segments.
                let w = fpdu(
                    RdmapRepr::RdmaWrite {
                        stag: 0x1234_5600,
                        to: 0,
                        last: true,
                    },
                    b"abcd",
                );
                assert_eq!(b.feed(&w, usize::MAX), RxStatus::Dead);
            }
            1 => {
                // A valid Write whose CRC is corrupted.
                let (_t, tstag) = b.reg_zeroed(8, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
                let mut w = fpdu(
                    RdmapRepr::RdmaWrite {
                        stag: tstag,
                        to: 0,
                        last: true,
                    },
                    b"abcd",
                );
                let n = w.len();
                w[n - 1] ^= 1;
                assert_eq!(b.feed(&w, usize::MAX), RxStatus::Dead);
            }
            2 => {
                // End of stream at an FPDU boundary: the driver closes.
                let st = b.rx.recv(|_| Ok(0)).unwrap();
                assert_eq!(st, RxStatus::Eof);
                b.sh.close();
            }
            3 => b.sh.close(),
            _ => {
                b.sh.fail(
                    rdma_verbs::ConnError {
                        remote: false,
                        code: None,
                        description: "elsewhere".into(),
                    },
                    None,
                    None,
                );
                assert!(b.rx_dead_after_feed());
            }
        }
        let st: Vec<_> = b.wcs().iter().map(|w| (w.wr_id, w.status)).collect();
        // A CRC error in a Write (not a Send segment) flushes the receive
        // like every other case.
        assert_eq!(
            st,
            vec![(9, WcStatus::WrFlushError), (10, WcStatus::WrFlushError)],
            "scenario {scenario}"
        );
        // The rest of the Send changes nothing.
        b.feed(&out[first..], usize::MAX);
        assert!(b.wcs().is_empty(), "scenario {scenario}");
    }
}

/// Review F7: after a local disconnect the receive half places nothing
/// more and queues no Read Request.
#[test]
fn nothing_is_placed_after_local_close() {
    let (_a, mut b) = pair(true, 1024);
    let (tr, tstag) = b.reg_zeroed(8, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let (_src, sstag) = b.reg(
        MrBuffer::from(Bytes::from_static(b"secret!!")),
        Access::REMOTE_READ,
    );
    b.sh.close();
    let mut bytes = fpdu(
        RdmapRepr::RdmaWrite {
            stag: tstag,
            to: 0,
            last: true,
        },
        b"abcd",
    );
    let req = ReadRequestRepr {
        sink_stag: 0x100,
        sink_to: 0,
        size: 8,
        src_stag: sstag,
        src_to: 0,
    };
    bytes.extend(fpdu(
        RdmapRepr::RdmaReadRequest {
            msn: 1,
            mo: 0,
            last: true,
        },
        &req.to_bytes(),
    ));
    assert_eq!(b.feed(&bytes, usize::MAX), RxStatus::Dead);
    assert_eq!(tr.lock().buffer.as_ref().unwrap().as_slice(), &[0u8; 8]);
    assert!(b.sh.lock().irq.is_empty());
    assert_eq!(b.sh.state(), QpState::Disconnected);
}

#[test]
fn local_errors_fail_the_wr_and_flush_the_rest() {
    let (mut a, _b) = pair(true, 1024);
    a.post_recv(RecvWr::new(10, vec![]));
    a.post_send(SendWr::send(1, vec![Sge::new(0xabcd_ef00, 0, 4)]));
    a.post_send(SendWr::send(2, vec![]));
    let out = a.out();
    let t = terminate_in(&out);
    assert_eq!(t.cause(), Some(TerminateCause::RdmapLocalCatastrophic));
    let st: Vec<_> = a.wcs().iter().map(|w| (w.wr_id, w.status)).collect();
    assert!(st.contains(&(1, WcStatus::LocalProtectionError)));
    assert!(st.contains(&(2, WcStatus::WrFlushError)));
    assert!(st.contains(&(10, WcStatus::WrFlushError)));
    // Each work request completes once.
    assert_eq!(st.len(), 3, "{st:?}");
}

#[test]
fn large_messages_stream_through_direct_placement() {
    for (chunk, direct) in [
        (usize::MAX, true),
        (65_536 + 17, true),
        (4093, true),
        (usize::MAX, false),
        (4093, false),
    ] {
        let (mut a, mut b) = pair(true, 65_535);
        b.rx = Rx::with_placement(b.sh.clone(), true, direct);
        let n = 1 << 20;
        let (tr, tstag) = b.reg_zeroed(n, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
        let (rr, rstag) = b.reg_zeroed(300_000, Access::LOCAL_WRITE);
        b.post_recv(RecvWr::new(
            1,
            vec![
                Sge::new(rstag, 0, 100_000),
                Sge::new(rstag, 100_000, 200_000),
            ],
        ));
        let payload = data(n, 5);
        let (_s, sstag) = a.reg(MrBuffer::from(Bytes::from(payload.clone())), Access::NONE);
        a.post_send(SendWr::write(
            1,
            vec![Sge::new(sstag, 0, n as u32)],
            RemoteAddr {
                rkey: tstag,
                offset: 0,
            },
        ));
        a.post_send(SendWr::send(2, vec![Sge::new(sstag, 1000, 250_000)]));
        let bytes = a.out();
        assert_eq!(b.feed(&bytes, chunk), RxStatus::WouldBlock);
        assert_eq!(tr.lock().buffer.as_ref().unwrap().as_slice(), &payload[..]);
        assert_eq!(
            &rr.lock().buffer.as_ref().unwrap().as_slice()[..250_000],
            &payload[1000..251_000]
        );
        let wc = b.wcs()[0];
        assert_eq!(
            (wc.wr_id, wc.status, wc.byte_len),
            (1, WcStatus::Success, 250_000)
        );
    }
}

/// FPDUs that arrive together are processed from the staging buffer, not
/// with a read each (and a large payload that is not buffered yet is still
/// read straight into memory, in few reads).
/// With all bytes of a stream of large tagged FPDUs available at once,
/// nearly every payload byte is read straight into the registered buffer:
/// a direct read takes only the trailer and the next header into the
/// staging buffer, not the next FPDUs (which would cost a copy each).
/// One `recv` of the bytes in `bytes[..arrived]` from `*pos` on, as a
/// socket that has that much; bytes read into the stage (a single slice,
/// or the second of two) are added to `staged`.
fn recv_counting_stage(
    rx: &mut Rx,
    bytes: &[u8],
    arrived: usize,
    pos: &mut usize,
    staged: &mut usize,
) -> RxStatus {
    rx.recv(|bufs| {
        if *pos == arrived {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let (k, mut total) = (bufs.len(), 0);
        for (i, buf) in bufs.iter_mut().enumerate() {
            let m = buf.len().min(arrived - *pos);
            buf[..m].copy_from_slice(&bytes[*pos..*pos + m]);
            *pos += m;
            total += m;
            if k == 1 || i == 1 {
                *staged += m;
            }
        }
        Ok(total)
    })
    .unwrap()
}

#[test]
fn large_fpdu_stream_is_not_staged() {
    let (mut a, mut b) = pair(true, 65_535);
    let n = 4 << 20;
    let (tr, tstag) = b.reg_zeroed(n, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let payload = data(n, 9);
    let (_s, sstag) = a.reg(MrBuffer::from(Bytes::from(payload.clone())), Access::NONE);
    a.post_send(SendWr::write(
        1,
        vec![Sge::new(sstag, 0, n as u32)],
        RemoteAddr {
            rkey: tstag,
            offset: 0,
        },
    ));
    let bytes = a.out();
    let (mut pos, mut staged) = (0, 0);
    let mut st = RxStatus::Budget;
    while st == RxStatus::Budget {
        st = recv_counting_stage(&mut b.rx, &bytes, bytes.len(), &mut pos, &mut staged);
    }
    assert_eq!(st, RxStatus::WouldBlock);
    assert_eq!(tr.lock().buffer.as_ref().unwrap().as_slice(), &payload[..]);
    // The first read (no header known yet) fills the stage; after that only
    // trailers and headers go there.
    assert!(
        staged < n / 8,
        "{staged} of {n} bytes went through the stage"
    );
}

#[test]
fn large_fpdu_stream_cut_anywhere_is_not_staged() {
    // As above, but the bytes arrive in pieces, as from TCP: the receiver
    // reads what has arrived so far, which ends at an FPDU boundary (the
    // sender wrote whole FPDUs) or anywhere (a TCP segment boundary). A read
    // that ends there must not make the next read take whole payloads into
    // the stage.
    let (mut a, mut b) = pair(true, 65_535);
    let n = 4 << 20;
    let (tr, tstag) = b.reg_zeroed(n, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let payload = data(n, 3);
    let (_s, sstag) = a.reg(MrBuffer::from(Bytes::from(payload.clone())), Access::NONE);
    // Four Writes of 1 MiB: each ends with a short segment, after which
    // the stream is still one of large segments.
    for i in 0..4u32 {
        a.post_send(SendWr::write(
            u64::from(i),
            vec![Sge::new(sstag, u64::from(i) << 20, 1 << 20)],
            RemoteAddr {
                rkey: tstag,
                offset: u64::from(i) << 20,
            },
        ));
    }
    let bytes = a.out();
    // FPDU boundaries: length field + ULPDU + pad + CRC.
    let mut bounds = Vec::new();
    let mut p = 0;
    while p < bytes.len() {
        let ulpdu = usize::from(u16::from_be_bytes([bytes[p], bytes[p + 1]]));
        p += 2 + ulpdu + crate::wire::fpdu::pad_len(ulpdu) + 4;
        bounds.push(p);
    }
    assert_eq!(p, bytes.len());
    let (mut pos, mut arrived, mut staged) = (0, 0, 0);
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    while pos < bytes.len() {
        // More bytes arrive: up to a later FPDU boundary, or anywhere.
        let r = next();
        arrived = if r % 2 == 0 {
            *bounds.iter().find(|&&x| x > arrived).unwrap()
        } else {
            (arrived + 1 + (r >> 8) as usize % (96 * 1024)).min(bytes.len())
        };
        let st = recv_counting_stage(&mut b.rx, &bytes, arrived, &mut pos, &mut staged);
        assert_eq!(st, RxStatus::WouldBlock);
    }
    assert_eq!(tr.lock().buffer.as_ref().unwrap().as_slice(), &payload[..]);
    assert!(
        staged < n / 32,
        "{staged} of {n} bytes went through the stage"
    );
}

#[test]
fn buffered_fpdus_need_no_read_each() {
    let (mut a, mut b) = pair(true, 4096);
    let n = 128 * 1024; // 33 FPDUs of at most 4 KiB
    let (tr, tstag) = b.reg_zeroed(n, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let payload = data(n, 9);
    let (_s, sstag) = a.reg(MrBuffer::from(Bytes::from(payload.clone())), Access::NONE);
    a.post_send(SendWr::write(
        1,
        vec![Sge::new(sstag, 0, n as u32)],
        RemoteAddr {
            rkey: tstag,
            offset: 0,
        },
    ));
    let bytes = a.out();
    let mut pos = 0;
    let mut reads = 0;
    let st =
        b.rx.recv(|bufs| {
            if pos == bytes.len() {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            reads += 1;
            let mut total = 0;
            for buf in bufs.iter_mut() {
                let k = buf.len().min(bytes.len() - pos);
                buf[..k].copy_from_slice(&bytes[pos..pos + k]);
                pos += k;
                total += k;
            }
            Ok(total)
        })
        .unwrap();
    assert_eq!(st, RxStatus::WouldBlock);
    // ULPDU = 14-byte tagged header + up to 4082 bytes of payload.
    assert_eq!(b.rx.fpdus() as usize, n.div_ceil(4096 - 14));
    assert!(reads <= 2, "{reads} reads for 33 buffered FPDUs");
    assert_eq!(tr.lock().buffer.as_ref().unwrap().as_slice(), &payload[..]);
}

mod hostile {
    use super::*;
    use proptest::prelude::*;

    /// A valid stream (Send, segmented Write, Read Request), the receiver
    /// ready for it, and its receive buffer.
    fn valid_stream() -> (Side, Vec<u8>, Arc<Region>) {
        let (mut a, b) = pair(true, 256);
        let (rr, rstag) = b.reg_zeroed(512, Access::LOCAL_WRITE);
        b.post_recv(RecvWr::new(1, vec![Sge::new(rstag, 0, 512)]));
        let (_t, tstag) = b.reg_zeroed(
            4096,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
        );
        let (_s, sstag) = a.reg(MrBuffer::from(Bytes::from(data(600, 1))), Access::NONE);
        a.post_send(SendWr::send(1, vec![Sge::new(sstag, 0, 300)]));
        a.post_send(SendWr::write(
            2,
            vec![Sge::new(sstag, 0, 600)],
            RemoteAddr {
                rkey: tstag,
                offset: 0,
            },
        ));
        a.post_send(SendWr::read(
            3,
            vec![Sge::new(sstag, 0, 10)],
            RemoteAddr {
                rkey: tstag,
                offset: 0,
            },
        ));
        let bytes = a.out();
        (b, bytes, rr)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Arbitrary bytes never panic the receive half; it either waits
        /// for more or dies with a Terminate queued.
        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048), chunk in 1usize..300) {
            let (_a, mut b) = pair(true, 256);
            let (_r, rstag) = b.reg_zeroed(512, Access::LOCAL_WRITE);
            b.post_recv(RecvWr::new(1, vec![Sge::new(rstag, 0, 512)]));
            let st = b.feed(&bytes, chunk);
            prop_assert!(st == RxStatus::WouldBlock || st == RxStatus::Dead);
            let _ = b.out();
        }

        /// A single corrupted byte in a valid stream never panics, is never
        /// delivered (the receive completes only with the original bytes),
        /// and the stream is never accepted whole.
        #[test]
        fn corrupted_byte_is_never_delivered(pos in 0usize..4096, xor in 1u8..=255, chunk in 1usize..500) {
            let (mut b, mut bytes, rr) = valid_stream();
            let p = pos % bytes.len();
            bytes[p] ^= xor;
            let st = b.feed(&bytes, chunk);
            prop_assert!(st == RxStatus::WouldBlock || st == RxStatus::Dead);
            let total = 3 + 600usize.div_ceil(256 - 14) as u64;
            prop_assert!(b.rx.fpdus() < total, "corruption at {} accepted", p);
            for wc in b.wcs() {
                if wc.status == WcStatus::Success && wc.opcode == WcOpcode::Recv {
                    let st = rr.lock();
                    prop_assert_eq!(&st.buffer.as_ref().unwrap().as_slice()[..300], &data(600, 1)[..300]);
                }
            }
            let _ = b.out();
        }
    }

    #[test]
    fn unmodified_stream_is_accepted() {
        let (mut b, bytes, _) = valid_stream();
        assert_eq!(b.feed(&bytes, 97), RxStatus::WouldBlock);
        assert_eq!(b.rx.fpdus(), 3 + 600usize.div_ceil(256 - 14) as u64);
        assert_eq!(b.wcs()[0].status, WcStatus::Success);
    }
}

#[test]
fn standalone_terminate_fpdu_is_received_as_terminate() {
    let (mut a, _b) = pair(true, 1024);
    let t = TerminateRepr::for_cause(TerminateCause::MpaNoMatchingRtr, &[]);
    let f = super::tx::terminate_fpdu(&t, true);
    assert_eq!(
        terminate_in(&f).cause(),
        Some(TerminateCause::MpaNoMatchingRtr)
    );
    assert_eq!(a.feed(&f, 3), RxStatus::Dead);
    assert_eq!(a.error_cause(), Some(TerminateCause::MpaNoMatchingRtr));
}
