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
    assert!(sh.establish(ord, ird, gate, None, None));
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

/// A 4-byte RDMA Write to `tstag`, then an 8-byte RDMA Read Request of
/// `sstag`: what a peer must not get placed or answered after the QP stops.
fn write_and_read_request(tstag: u32, sstag: u32) -> Vec<u8> {
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
    bytes
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

/// A receive WR taken for a multi-segment Send completes (with
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

/// After a local disconnect the receive half places nothing
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
    let bytes = write_and_read_request(tstag, sstag);
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

/// `a` RDMA-Writes `n` pattern bytes (`seed`) to offset 0 of `tstag` (wr_id
/// 1), then Sends `send.1` bytes of the same pattern from offset `send.0`
/// (wr_id 2): returns the pattern and the bytes `a` put on the wire.
fn write_then_send(
    a: &mut Side,
    tstag: u32,
    n: usize,
    seed: u8,
    send: (u64, u32),
) -> (Vec<u8>, Vec<u8>) {
    let payload = data(n, seed);
    let (_s, sstag) = a.reg(MrBuffer::from(Bytes::from(payload.clone())), Access::NONE);
    a.post_send(SendWr::write(
        1,
        vec![Sge::new(sstag, 0, n as u32)],
        RemoteAddr {
            rkey: tstag,
            offset: 0,
        },
    ));
    a.post_send(SendWr::send(2, vec![Sge::new(sstag, send.0, send.1)]));
    let bytes = a.out();
    (payload, bytes)
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
        let (payload, bytes) = write_then_send(&mut a, tstag, n, 5, (1000, 250_000));
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
fn small_message_after_a_large_one_takes_one_read() {
    // A 1 MiB Write in 64 KiB FPDUs, then a 200-byte Send (an RPC reply
    // after its Write chunk), every byte available: the read that ends the
    // Write takes the Send whole, rather than its header, the rest of its
    // header and its payload in three reads.
    let (mut a, mut b) = pair(true, 65_535);
    let n = 1 << 20;
    let (tr, tstag) = b.reg_zeroed(n, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let (rr, rstag) = b.reg_zeroed(4096, Access::LOCAL_WRITE);
    b.post_recv(RecvWr::new(7, vec![Sge::new(rstag, 0, 4096)]));
    let (payload, bytes) = write_then_send(&mut a, tstag, n, 4, (5, 200));
    // The Send is the last FPDU: 2 + 18-byte untagged header + 200 bytes
    // + pad + CRC.
    let send_len = 2 + 18 + 200 + crate::wire::fpdu::pad_len(218) + 4;
    let write_end = bytes.len() - send_len;
    let mut pos = 0;
    let mut touching = 0;
    let st =
        b.rx.recv(|bufs| {
            if pos == bytes.len() {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let start = pos;
            for buf in bufs.iter_mut() {
                let k = buf.len().min(bytes.len() - pos);
                buf[..k].copy_from_slice(&bytes[pos..pos + k]);
                pos += k;
            }
            if pos > write_end {
                touching += 1;
            }
            Ok(pos - start)
        })
        .unwrap();
    assert_eq!(st, RxStatus::WouldBlock);
    assert_eq!(tr.lock().buffer.as_ref().unwrap().as_slice(), &payload[..]);
    assert_eq!(
        &rr.lock().buffer.as_ref().unwrap().as_slice()[..200],
        &payload[5..205]
    );
    let wcs: Vec<_> = b
        .wcs()
        .iter()
        .map(|w| (w.wr_id, w.status, w.byte_len))
        .collect();
    assert_eq!(wcs, vec![(7, WcStatus::Success, 200)]);
    assert_eq!(touching, 1, "the Send took {touching} reads");
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

// ---------------------------------------------------------------------
// Terminate at awkward moments, Send with Invalidate
// ---------------------------------------------------------------------

fn peer_terminate(cause: TerminateCause) -> Vec<u8> {
    let t = TerminateRepr::for_cause(cause, &[]);
    super::tx::terminate_fpdu(&t, true)
}

fn ids(wcs: &[WorkCompletion]) -> Vec<(u64, WcStatus)> {
    wcs.iter().map(|w| (w.wr_id, w.status)).collect()
}

/// Two outstanding RDMA Reads with the same wr_id (legal in verbs);
/// a Terminate arrives: each Read must complete once.
#[test]
fn terminate_with_two_reads_of_the_same_wr_id() {
    let (mut a, _b) = pair(true, 1024);
    let (_s1, s1) = a.reg_zeroed(16, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let (_s2, s2) = a.reg_zeroed(16, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    a.post_send(SendWr::read(
        7,
        vec![Sge::new(s1, 0, 16)],
        RemoteAddr {
            rkey: 0x100,
            offset: 0,
        },
    ));
    a.post_send(SendWr::read(
        7,
        vec![Sge::new(s2, 0, 16)],
        RemoteAddr {
            rkey: 0x200,
            offset: 0,
        },
    ));
    let _ = a.out();
    assert_eq!(a.sh.lock().orq.len(), 2);
    assert_eq!(
        a.feed(
            &peer_terminate(TerminateCause::RdmapInvalidStag),
            usize::MAX
        ),
        RxStatus::Dead
    );
    let st = ids(&a.wcs());
    eprintln!("completions: {st:?}");
    assert_eq!(st.len(), 2, "each Read completes once: {st:?}");
}

/// A peer's Terminate arrives while our transmit half is in the
/// middle of a multi-FPDU Send (WR 1); WR 2 is queued behind it.
#[test]
fn peer_terminate_while_mid_message() {
    let (mut a, _b) = pair(true, 128);
    let (_s, sstag) = a.reg(MrBuffer::from(Bytes::from(data(1000, 1))), Access::NONE);
    a.post_send(SendWr::send(1, vec![Sge::new(sstag, 0, 1000)]));
    a.post_send(SendWr::send(2, vec![Sge::new(sstag, 0, 10)]));
    let mut bufs = Vec::new();
    let n = a.tx.poll_transmit(&mut bufs, 100);
    assert!(n > 0 && n < 1000);
    assert_eq!(
        a.feed(&peer_terminate(TerminateCause::DdpNoBuffer), usize::MAX),
        RxStatus::Dead
    );
    let after = a.out();
    let st = ids(&a.wcs());
    eprintln!(
        "bytes sent after the peer's Terminate: {}; completions in CQ order: {st:?}",
        after.len()
    );
    assert!(
        after.is_empty(),
        "{} bytes sent after receiving a Terminate",
        after.len()
    );
    assert_eq!(st.len(), 2);
    assert_eq!(st[0].0, 1, "send completions out of order: {st:?}");
    assert_ne!(
        st[0].1,
        WcStatus::Success,
        "WR 1 reported Success after the QP failed: {st:?}"
    );
}

/// The local side fails (protection error found by the receive
/// half) while its transmit half is mid-message: the Terminate goes out
/// framed at a segment boundary, and the WRs complete once each, in order.
#[test]
fn local_terminate_while_mid_message_order() {
    let mut bad = Vec::new();
    for signaled in [true, false] {
        let (mut a, _b) = pair(true, 128);
        let (_s, sstag) = a.reg(MrBuffer::from(Bytes::from(data(1000, 1))), Access::NONE);
        a.post_send(SendWr::send(1, vec![Sge::new(sstag, 0, 1000)]).signaled(signaled));
        a.post_send(SendWr::send(2, vec![Sge::new(sstag, 0, 10)]).signaled(signaled));
        let mut bufs = Vec::new();
        let n = a.tx.poll_transmit(&mut bufs, 100);
        let mut before: Vec<u8> = Vec::new();
        for b in bufs.drain(..) {
            before.extend_from_slice(&b);
        }
        assert!(n > 0 && n < 1000);
        // A Write to an invalid STag: a protection error.
        let w = fpdu(
            RdmapRepr::RdmaWrite {
                stag: 0x1234_5600,
                to: 0,
                last: true,
            },
            b"abcd",
        );
        assert_eq!(a.feed(&w, usize::MAX), RxStatus::Dead);
        let after = a.out();
        let mut all = before.clone();
        all.extend_from_slice(&after);
        let t = terminate_in(&all);
        assert_eq!(t.cause(), Some(TerminateCause::DdpTaggedInvalidStag));
        let st = ids(&a.wcs());
        eprintln!("signaled={signaled}: completions in CQ order: {st:?}");
        bad.push((signaled, st));
    }
    for (signaled, st) in &bad {
        assert_eq!(
            st.len(),
            2,
            "signaled={signaled}: each WR completes once: {st:?}"
        );
        assert_eq!(st[0].0, 1, "signaled={signaled}: out of order: {st:?}");
    }
}

/// A Terminate between two segments of a Read Response being
/// received: the Read completes once, with an error.
#[test]
fn terminate_mid_read_response() {
    let (mut a, mut b) = pair(true, 128);
    let (_src, sstag) = b.reg(
        MrBuffer::from(Bytes::from(data(600, 3))),
        Access::REMOTE_READ,
    );
    let (sink, kstag) = a.reg_zeroed(600, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    a.post_send(SendWr::read(
        5,
        vec![Sge::new(kstag, 0, 600)],
        RemoteAddr {
            rkey: sstag,
            offset: 0,
        },
    ));
    a.post_send(SendWr::send(6, vec![]));
    b.post_recv(RecvWr::new(60, vec![]));
    let req = a.out();
    b.feed(&req, usize::MAX);
    let resp = b.out();
    let first = first_fpdu_len(&resp);
    assert!(first < resp.len());
    assert_eq!(a.feed(&resp[..first], usize::MAX), RxStatus::WouldBlock);
    let mut bytes = peer_terminate(TerminateCause::RdmapCatastrophicStream);
    bytes.extend_from_slice(&resp[first..]);
    assert_eq!(a.feed(&bytes, usize::MAX), RxStatus::Dead);
    let st = ids(&a.wcs());
    eprintln!("{st:?}");
    assert_eq!(st.iter().filter(|w| w.0 == 5).count(), 1, "{st:?}");
    assert_eq!(st.iter().filter(|w| w.0 == 6).count(), 1, "{st:?}");
    assert_ne!(st.iter().find(|w| w.0 == 5).unwrap().1, WcStatus::Success);
    // Nothing after the Terminate was placed.
    let placed = sink
        .lock()
        .buffer
        .as_ref()
        .unwrap()
        .as_slice()
        .iter()
        .filter(|&&x| x != 0)
        .count();
    assert!(placed <= 128, "{placed} bytes placed");
}

/// Two Terminates in a row, then a Write and a Read Request.
#[test]
fn terminate_then_more_fpdus() {
    let (mut a, _b) = pair(true, 1024);
    let (tr, tstag) = a.reg_zeroed(8, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let (_src, sstag) = a.reg(
        MrBuffer::from(Bytes::from_static(b"secret!!")),
        Access::REMOTE_READ,
    );
    a.post_recv(RecvWr::new(1, vec![]));
    let mut bytes = peer_terminate(TerminateCause::DdpNoBuffer);
    bytes.extend(peer_terminate(TerminateCause::RdmapInvalidStag));
    bytes.extend(write_and_read_request(tstag, sstag));
    assert_eq!(a.feed(&bytes, 7), RxStatus::Dead);
    assert_eq!(tr.lock().buffer.as_ref().unwrap().as_slice(), &[0u8; 8]);
    assert!(a.sh.lock().irq.is_empty());
    assert!(a.out().is_empty(), "no reply to a Terminate");
    let st = ids(&a.wcs());
    assert_eq!(st, vec![(1, WcStatus::WrFlushError)]);
    assert_eq!(a.error_cause(), Some(TerminateCause::DdpNoBuffer));
}

/// Hostile Terminate bodies never panic, kill the QP, and are not
/// answered with a Terminate.
#[test]
fn hostile_terminate_bodies() {
    let bodies: Vec<Vec<u8>> = vec![
        vec![],
        vec![0x11],
        vec![0x11, 0x00, 0x00],
        vec![0x11, 0x00, 0xC0, 0x00],             // M+D, nothing follows
        vec![0x11, 0x00, 0xC0, 0x00, 0, 4, 0x80], // D with a 1-byte header
        vec![0x11, 0x00, 0x20, 0x00, 1, 2, 3],    // R without the 28 bytes
        vec![0xFF, 0xFF, 0xFF, 0xFF],             // undefined layer/etype
        vec![0x11; 4000],                         // far longer than any Terminate
        vec![0x11; 65000],
    ];
    for (i, body) in bodies.iter().enumerate() {
        for last in [true, false] {
            let (mut a, _b) = pair(true, 1024);
            a.post_recv(RecvWr::new(1, vec![]));
            let f = fpdu(
                RdmapRepr::Terminate {
                    msn: 1,
                    mo: 0,
                    last,
                },
                body,
            );
            let st = a.feed(&f, 33);
            assert_eq!(st, RxStatus::Dead, "body {i} last {last}");
            assert!(a.out().is_empty(), "body {i} last {last}: answered");
            assert_eq!(ids(&a.wcs()), vec![(1, WcStatus::WrFlushError)]);
            assert!(a.sh.lock().error.as_ref().unwrap().remote);
        }
    }
}

/// Send with Invalidate over several FPDUs: the STag stays valid
/// until the last segment is delivered, and is invalidated once.
#[test]
fn swi_multi_segment_invalidates_at_the_end() {
    let (mut a, mut b) = pair(true, 128);
    let (res, rkey) = b.reg_zeroed(16, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let (_r, rstag) = b.reg_zeroed(1000, Access::LOCAL_WRITE);
    b.post_recv(RecvWr::new(1, vec![Sge::new(rstag, 0, 1000)]));
    let (_s, sstag) = a.reg(MrBuffer::from(Bytes::from(data(600, 0))), Access::NONE);
    a.post_send(SendWr::send_with_invalidate(
        5,
        vec![Sge::new(sstag, 0, 600)],
        rkey,
    ));
    let out = a.out();
    let first = first_fpdu_len(&out);
    b.feed(&out[..first], usize::MAX);
    assert!(res.lock().valid, "invalidated before the Send is complete");
    // A Write into it between the segments is still accepted.
    let w = fpdu(
        RdmapRepr::RdmaWrite {
            stag: rkey,
            to: 0,
            last: true,
        },
        b"abcd",
    );
    assert_eq!(b.feed(&w, usize::MAX), RxStatus::WouldBlock);
    b.feed(&out[first..], usize::MAX);
    assert!(!res.lock().valid);
    let st = b.wcs();
    assert_eq!(st.len(), 1);
    assert_eq!(
        (st[0].status, st[0].invalidated_rkey, st[0].byte_len),
        (WcStatus::Success, Some(rkey), 600)
    );
}

/// The segments of one Send disagree on the opcode /
/// Invalidate STag: a protocol error, nothing invalidated or delivered.
#[test]
fn swi_segments_disagree() {
    for case in 0..2 {
        let (mut a, mut b) = pair(true, 1024);
        let (res, rkey) = b.reg_zeroed(16, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
        let (_r, rstag) = b.reg_zeroed(100, Access::LOCAL_WRITE);
        b.post_recv(RecvWr::new(1, vec![Sge::new(rstag, 0, 100)]));
        let (i0, i1) = if case == 0 {
            (Some(rkey), None)
        } else {
            (None, Some(rkey))
        };
        let mut bytes = fpdu(
            RdmapRepr::Send {
                solicited: false,
                invalidate: i0,
                msn: 1,
                mo: 0,
                last: false,
            },
            b"abcd",
        );
        bytes.extend(fpdu(
            RdmapRepr::Send {
                solicited: false,
                invalidate: i1,
                msn: 1,
                mo: 4,
                last: true,
            },
            b"efgh",
        ));
        let t = expect_terminate(
            &mut a,
            &mut b,
            &bytes,
            TerminateCause::RdmapUnexpectedOpcode,
        );
        assert_eq!(
            t.header_control(),
            TerminateCause::RdmapUnexpectedOpcode.header_control()
        );
        assert!(
            res.lock().valid,
            "case {case}: invalidated by a bad message"
        );
        assert_eq!(
            ids(&b.wcs()),
            vec![(1, WcStatus::LocalQpOperationError)],
            "case {case}"
        );
    }
}

/// SWI of an STag that is already invalid (locally invalidated).
#[test]
fn swi_of_already_invalid_stag() {
    let (mut a, mut b) = pair(true, 1024);
    let (res, rkey) = b.reg_zeroed(16, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    res.lock().valid = false;
    b.post_recv(RecvWr::new(1, vec![]));
    let f = fpdu(
        RdmapRepr::Send {
            solicited: false,
            invalidate: Some(rkey),
            msn: 1,
            mo: 0,
            last: true,
        },
        b"",
    );
    expect_terminate(&mut a, &mut b, &f, TerminateCause::RdmapCannotInvalidate);
    assert_eq!(ids(&b.wcs()), vec![(1, WcStatus::RemoteInvalidRequest)]);
}

/// A Terminate as the responder's very first FPDU (gate closed,
/// a Send queued): nothing is sent, everything completes once.
#[test]
fn terminate_as_first_fpdu_to_gated_responder() {
    let mut b = side(true, 1024, 1, 1, false);
    b.post_send(SendWr::send(2, vec![]));
    b.post_recv(RecvWr::new(3, vec![]));
    assert!(b.out().is_empty());
    assert_eq!(
        b.feed(
            &peer_terminate(TerminateCause::MpaNoMatchingRtr),
            usize::MAX
        ),
        RxStatus::Dead
    );
    let _ = b.rx.take_tx_work();
    assert!(b.out().is_empty(), "sent after a Terminate");
    assert!(b.tx.finished());
    let mut st = ids(&b.wcs());
    st.sort_by_key(|w| w.0);
    assert_eq!(
        st,
        vec![(2, WcStatus::WrFlushError), (3, WcStatus::WrFlushError)]
    );
}

/// Terminate while the initiator's internal RTR Read is in the ORQ.
#[test]
fn terminate_with_rtr_read_outstanding() {
    let table = Arc::new(StagTable::default());
    let cq = Cq::new(1 << 10);
    let sh = established(&table, &cq, 2, 2, true);
    let mut tx = Tx::new(sh.clone(), true, 1024, Some(super::tx::Rtr::Read));
    let mut rx = Rx::new(sh.clone(), true);
    {
        let mut g = sh.lock();
        g.sq_outstanding += 1;
        g.sq.push_back(SqItem::Wr(SendWr::read(
            9,
            vec![],
            RemoteAddr { rkey: 1, offset: 0 },
        )));
    }
    let mut bufs = Vec::new();
    tx.poll_transmit(&mut bufs, usize::MAX);
    assert_eq!(sh.lock().orq.len(), 2);
    let f = peer_terminate(TerminateCause::MpaNoMatchingRtr);
    let mut pos = 0;
    let st = rx
        .recv(|b| {
            let n = b[0].len().min(f.len() - pos);
            if n == 0 {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            b[0][..n].copy_from_slice(&f[pos..pos + n]);
            pos += n;
            Ok(n)
        })
        .unwrap();
    assert_eq!(st, RxStatus::Dead);
    let mut v = Vec::new();
    cq.poll(&mut v, 100);
    let st = ids(&v);
    eprintln!("{st:?}");
    assert_eq!(st.len(), 1);
    assert_eq!(st[0].0, 9);
}

/// The QP is closed locally (disconnect) or fails from another
/// thread (e.g. the transmit half's Read Request source check queues a
/// Terminate) while the receive half is in the middle of a Send segment's
/// payload. The receive WR is flushed at once; the rest of that FPDU must
/// not be placed into its buffer, and the WR must not complete again.
#[test]
fn close_or_fail_in_the_middle_of_a_send_fpdu() {
    let mut res = Vec::new();
    for (scenario, corrupt, direct) in [
        (0, false, true),
        (0, true, true),
        (1, false, true),
        (1, true, true),
        (0, false, false),
        (0, true, false),
        (1, false, false),
        (1, true, false),
    ] {
        let (mut a, mut b) = pair(true, 1024);
        b.rx = Rx::with_placement(b.sh.clone(), true, direct);
        let (rr, rstag) = b.reg_zeroed(1000, Access::LOCAL_WRITE);
        b.post_recv(RecvWr::new(9, vec![Sge::new(rstag, 0, 1000)]));
        let (_s, sstag) = a.reg(MrBuffer::from(Bytes::from(data(600, 1))), Access::NONE);
        a.post_send(SendWr::send(1, vec![Sge::new(sstag, 0, 600)]));
        let mut out = a.out();
        assert_eq!(first_fpdu_len(&out), out.len(), "one FPDU");
        if corrupt {
            let n = out.len();
            out[n - 1] ^= 1;
        }
        // Header and 100 payload bytes arrive; while the receive half
        // waits for the rest (inside the same `recv` call, as the reader
        // task does), another thread closes or fails the QP.
        let sh = b.sh.clone();
        let mut pos = 0usize;
        let mut fired = false;
        let mut flushed = Vec::new();
        let cq = b.cq.clone();
        let rr2 = rr.clone();
        let st = b.rx.recv(|bufs| {
            if pos == 120 && !fired {
                fired = true;
                match scenario {
                    0 => sh.close(),
                    _ => sh.fail(
                        rdma_verbs::ConnError {
                            remote: false,
                            code: None,
                            description: "tx-side error".into(),
                        },
                        Some(TerminateRepr::for_cause(
                            TerminateCause::RdmapInvalidStag,
                            &[],
                        )),
                        None,
                    ),
                }
                cq.poll(&mut flushed, usize::MAX);
                // The consumer owns buffer 9 again and clears it (the
                // receive half holds the region lock during this read in
                // direct placement, so only check afterwards).
                let _ = &rr2;
            }
            if pos == out.len() {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            // Then at most 200 bytes per read: more than one read's worth
            // placed would mean placement went on after the stop.
            let limit = if pos < 120 {
                120
            } else {
                (pos + 200).min(out.len())
            };
            let mut total = 0;
            for buf in bufs.iter_mut() {
                let n = buf.len().min(limit - pos);
                buf[..n].copy_from_slice(&out[pos..pos + n]);
                pos += n;
                total += n;
            }
            Ok(total)
        });
        eprintln!("recv -> {st:?}");
        assert_eq!(ids(&flushed), vec![(9, WcStatus::WrFlushError)]);
        let placed = rr.lock().buffer.as_ref().unwrap().as_slice()[100..]
            .iter()
            .filter(|&&x| x != 0)
            .count();
        let again = ids(&b.wcs());
        let events: Vec<_> =
            b.sh.lock()
                .events
                .iter()
                .map(|e| format!("{e:?}"))
                .collect();
        eprintln!("scenario {scenario} corrupt {corrupt} direct {direct}: {placed} bytes placed into the flushed buffer after the flush; later completions {again:?}; events {events:?}; terminate queued {:?}", b.sh.lock().terminate.map(|t| t.cause()));
        res.push((scenario, corrupt, direct, placed, again));
    }
    for (scenario, corrupt, direct, placed, again) in res {
        assert!(
            again.is_empty(),
            "scenario {scenario} corrupt {corrupt}: WR completed again: {again:?}"
        );
        // Direct placement: the read in flight when the QP stopped lands
        // (it holds the region's lock, so the consumer gets the buffer back
        // only after it, and a flushed buffer's contents are undefined);
        // nothing after it. Staged placement: nothing.
        let most = if direct { 200 } else { 0 };
        assert!(
            placed <= most,
            "scenario {scenario} corrupt {corrupt} direct {direct}: {placed} bytes placed after the flush"
        );
    }
}

#[test]
fn terminate_mid_incoming_write() {
    let (mut a, mut b) = pair(true, 128);
    let (t, tstag) = b.reg_zeroed(600, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let (_s, sstag) = a.reg(MrBuffer::from(Bytes::from(vec![0xAAu8; 600])), Access::NONE);
    a.post_send(SendWr::write(
        1,
        vec![Sge::new(sstag, 0, 600)],
        RemoteAddr {
            rkey: tstag,
            offset: 0,
        },
    ));
    let out = a.out();
    let first = first_fpdu_len(&out);
    let mut bytes = out[..first].to_vec();
    bytes.extend(peer_terminate(TerminateCause::DdpTaggedBaseBounds));
    bytes.extend_from_slice(&out[first..]);
    assert_eq!(b.feed(&bytes, 13), RxStatus::Dead);
    let placed = t
        .lock()
        .buffer
        .as_ref()
        .unwrap()
        .as_slice()
        .iter()
        .filter(|&&x| x != 0)
        .count();
    assert_eq!(placed, 128 - 14);
    assert!(b.out().is_empty());
}

#[test]
fn peer_terminate_while_answering_a_read() {
    let (mut a, mut b) = pair(true, 128);
    let (_src, sstag) = b.reg(
        MrBuffer::from(Bytes::from(data(6000, 3))),
        Access::REMOTE_READ,
    );
    let (_sink, kstag) = a.reg_zeroed(6000, Access::LOCAL_WRITE);
    a.post_send(SendWr::read(
        5,
        vec![Sge::new(kstag, 0, 6000)],
        RemoteAddr {
            rkey: sstag,
            offset: 0,
        },
    ));
    b.feed(&a.out(), usize::MAX);
    let mut bufs = Vec::new();
    let n = b.tx.poll_transmit(&mut bufs, 100);
    assert!(n > 0 && n < 6000);
    assert_eq!(
        b.feed(
            &peer_terminate(TerminateCause::RdmapCatastrophicStream),
            usize::MAX
        ),
        RxStatus::Dead
    );
    let after = b.out();
    eprintln!(
        "Read Response bytes sent after the peer's Terminate: {}",
        after.len()
    );
    assert!(
        after.is_empty(),
        "{} bytes sent after receiving a Terminate",
        after.len()
    );
}

/// The Terminate for a failed Send with Invalidate carries M + D
/// (header_control of RdmapCannotInvalidate) with the offending header.
#[test]
fn swi_terminate_carries_the_ddp_header() {
    let (mut a, mut b) = pair(true, 1024);
    b.post_recv(RecvWr::new(4, vec![]));
    let f = fpdu(
        RdmapRepr::Send {
            solicited: false,
            invalidate: Some(0x4242_4200),
            msn: 1,
            mo: 0,
            last: true,
        },
        b"",
    );
    let t = expect_terminate(&mut a, &mut b, &f, TerminateCause::RdmapCannotInvalidate);
    let hc = TerminateCause::RdmapCannotInvalidate.header_control();
    eprintln!("header_control {hc:?}; sent {t:?}");
    assert_eq!(
        t.header_control(),
        hc,
        "Terminate lacks the parts its cause calls for"
    );
    assert_eq!(t.ddp_header.unwrap().as_bytes(), &f[2..20]);
}

// ---------------------------------------------------------------------
// Local failures and closes racing the transmit half
// ---------------------------------------------------------------------

/// Runs `a`'s transmit half on another thread with the race window `widen`
/// opened, closes the QP from here meanwhile, and returns the send
/// completions in CQ order.
fn transmit_while_closing(
    a: Side,
    widen: &'static std::sync::atomic::AtomicBool,
) -> Vec<(u64, WcStatus)> {
    use std::sync::atomic::Ordering::SeqCst;
    let sh = a.sh.clone();
    let Side { mut tx, cq, .. } = a;
    widen.store(true, SeqCst);
    let t = std::thread::spawn(move || {
        let mut bufs = Vec::new();
        tx.poll_transmit(&mut bufs, usize::MAX);
    });
    std::thread::sleep(std::time::Duration::from_millis(50));
    sh.close();
    t.join().unwrap();
    widen.store(false, SeqCst);
    let mut v = Vec::new();
    cq.poll(&mut v, usize::MAX);
    ids(&v)
}

/// A local failure of the send WR in progress (gather fails the
/// protection check) races with a local disconnect (close()) on another
/// thread. The WR has left sq and sq_cur before fail() runs; fail() then
/// returns early (QP Disconnected) and drops `first`: the WR never completes.
#[test]
fn local_failure_racing_close_completes_the_wr() {
    let mut bad = Vec::new();
    for kind in ["send_bad_lkey", "local_invalidate_unknown"] {
        let (a, _b) = pair(true, 1024);
        match kind {
            "send_bad_lkey" => a.post_send(SendWr::send(1, vec![Sge::new(0xdead_0000, 0, 16)])),
            _ => a.post_send(SendWr {
                wr_id: 1,
                op: rdma_verbs::SendOp::LocalInvalidate { rkey: 0xdead_0000 },
                sgl: vec![],
                signaled: true,
                fence: false,
            }),
        }
        let st = transmit_while_closing(a, &super::tx::TEST_WIDEN_LOCAL_FAILURE);
        eprintln!("{kind}: completions {st:?}");
        if st.len() != 1 {
            bad.push((kind, st));
        }
    }
    assert!(bad.is_empty(), "WR 1 must complete exactly once: {bad:?}");
}

/// A multi-segment Send with Solicited Event (and one with
/// Invalidate) from our own transmitter passes our receiver's check that every
/// segment of a message carries the same opcode flags.
#[test]
fn multi_segment_solicited_send_is_consistent() {
    let (mut a, mut b) = pair(true, 128);
    let (_s, sstag) = a.reg(MrBuffer::from(Bytes::from(data(1000, 1))), Access::NONE);
    let (_r, rstag) = b.reg_zeroed(1000, Access::LOCAL_WRITE);
    let (_inv, istag) = b.reg_zeroed(16, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    b.post_recv(RecvWr::new(10, vec![Sge::new(rstag, 0, 1000)]));
    b.post_recv(RecvWr::new(11, vec![Sge::new(rstag, 0, 1000)]));
    a.post_send(SendWr {
        wr_id: 1,
        op: rdma_verbs::SendOp::Send { solicited: true },
        sgl: vec![Sge::new(sstag, 0, 1000)],
        signaled: true,
        fence: false,
    });
    a.post_send(SendWr {
        wr_id: 2,
        op: rdma_verbs::SendOp::SendWithInvalidate {
            invalidate_rkey: istag,
            solicited: true,
        },
        sgl: vec![Sge::new(sstag, 0, 1000)],
        signaled: true,
        fence: false,
    });
    let bytes = a.out();
    assert_eq!(b.feed(&bytes, 37), RxStatus::WouldBlock);
    let st = b.wcs();
    eprintln!("{st:?}");
    assert_eq!(st.len(), 2);
    assert!(st
        .iter()
        .all(|w| w.status == WcStatus::Success && w.solicited));
    assert_eq!(st[1].invalidated_rkey, Some(istag));
}

/// A LocalInvalidate (or FastReg) leaves sq before it is done and
/// completes outside the lock: a close() meanwhile flushes the WRs behind
/// it first, and its Success lands after their WrFlushError (send
/// completions out of order).
#[test]
fn local_invalidate_racing_close_completes_in_order() {
    let (a, _b) = pair(true, 1024);
    let (_r, stag) = a.reg_zeroed(16, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    a.post_send(SendWr {
        wr_id: 1,
        op: rdma_verbs::SendOp::LocalInvalidate { rkey: stag },
        sgl: vec![],
        signaled: true,
        fence: false,
    });
    a.post_send(SendWr::send(2, vec![]));
    let st = transmit_while_closing(a, &super::tx::TEST_WIDEN_LOCAL_INVALIDATE);
    eprintln!("completions in CQ order: {st:?}");
    assert_eq!(
        st.iter().map(|w| w.0).collect::<Vec<_>>(),
        vec![1, 2],
        "{st:?}"
    );
}
