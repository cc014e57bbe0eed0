//! Loopback tests: two software iWARP endpoints over real TCP on 127.0.0.1.

use bytes::{Bytes, BytesMut};
use iwarp::wire::rdmap::RdmapRepr;
use iwarp::wire::terminate::{TerminateCause, TerminateRepr};
use iwarp::{Config, Device, MpaConfig};
use rdma_verbs::{
    Access, CmEvent, CompletionQueue, ConnParam, ConnectRequest, Device as _, Listener as _,
    MemoryRegion, ProtectionDomain, QpInit, QueuePair, RecvWr, RemoteAddr, SendWr, Sge, VerbsError,
    WcOpcode, WcStatus, WorkCompletion,
};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

struct End {
    dev: Device,
    pd: iwarp::Pd,
    cq: iwarp::Cq,
    qp: iwarp::Qp,
}

/// Connects `a` to `l` with private data "real", accepted onto `b`'s QP;
/// how long the connect took.
async fn timed_real_connect(a: &End, b: &End, l: iwarp::Listener) -> Duration {
    let addr = l.local_addr();
    let bqp = b.qp.clone();
    let server = tokio::spawn(async move {
        let req = l.next_request().await.unwrap();
        assert_eq!(req.private_data(), b"real");
        req.accept(&bqp, ConnParam::new(Bytes::new(), 1, 1))
            .await
            .unwrap()
    });
    let t = std::time::Instant::now();
    a.dev
        .connect(&a.qp, addr, ConnParam::new(&b"real"[..], 1, 1))
        .await
        .unwrap();
    server.await.unwrap();
    t.elapsed()
}

fn end(cfg: Config) -> End {
    let dev = Device::new(cfg);
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(4096).unwrap();
    let mut init = QpInit::with_cq(cq.clone());
    init.max_send_wr = 1024;
    init.max_recv_wr = 1024;
    let qp = dev.create_qp(&pd, init).unwrap();
    End { dev, pd, cq, qp }
}

/// Connects `a` (active) to `b` (passive) with private data and ORD/IRD.
async fn connect(a: &End, b: &End, ord: u16) -> (rdma_verbs::ConnInfo, rdma_verbs::ConnInfo) {
    let l = b.dev.listen("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = l.local_addr();
    let bqp = b.qp.clone();
    let server = tokio::spawn(async move {
        let req = l.next_request().await.unwrap();
        assert_eq!(req.private_data(), b"client hello");
        req.accept(&bqp, ConnParam::new(&b"server hello"[..], ord, ord))
            .await
            .unwrap()
    });
    let ca = a
        .dev
        .connect(&a.qp, addr, ConnParam::new(&b"client hello"[..], ord, ord))
        .await
        .unwrap();
    let cb = server.await.unwrap();
    assert_eq!(&ca.private_data[..], b"server hello");
    assert_eq!(&cb.private_data[..], b"client hello");
    (ca, cb)
}

async fn next(cq: &iwarp::Cq) -> WorkCompletion {
    tokio::time::timeout(Duration::from_secs(20), cq.next())
        .await
        .expect("completion timed out")
}

async fn event(qp: &iwarp::Qp) -> CmEvent {
    tokio::time::timeout(Duration::from_secs(10), qp.next_event())
        .await
        .expect("event timed out")
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn reg_mut(pd: &iwarp::Pd, n: usize, access: Access) -> iwarp::Mr {
    pd.register(BytesMut::zeroed(n).into(), access).unwrap()
}

fn reg_bytes(pd: &iwarp::Pd, data: Vec<u8>, access: Access) -> iwarp::Mr {
    pd.register(Bytes::from(data).into(), access).unwrap()
}

/// Two connected ends (ORD/IRD 1), `b` with one receive of `len` bytes
/// posted (as `wr_id`) in the region returned.
async fn connected_with_receive(len: usize, wr_id: u64) -> (End, End, iwarp::Mr) {
    let a = end(Config::default());
    let b = end(Config::default());
    let r = reg_mut(&b.pd, len, Access::LOCAL_WRITE);
    b.qp.post_recv(RecvWr::new(wr_id, vec![Sge::new(r.lkey(), 0, len as u32)]))
        .unwrap();
    connect(&a, &b, 1).await;
    (a, b, r)
}

/// Connects `a` to `b` (ORD 1) and sends one 64-byte message from the
/// source region returned, so that the connection's opening exchange is
/// over; `b` must have a receive posted for it.
async fn connect_with_first_send(a: &End, b: &End) -> iwarp::Mr {
    connect(a, b, 1).await;
    let src = reg_bytes(&a.pd, pattern(64, 1), Access::NONE);
    a.qp.post_send(SendWr::send(0, vec![Sge::new(src.lkey(), 0, 64)]))
        .unwrap();
    assert_eq!(next(&b.cq).await.status, WcStatus::Success);
    assert_eq!(next(&a.cq).await.status, WcStatus::Success);
    src
}

/// Two unconnected ends; what `a` writes is counted by the capture.
fn counted_pair() -> (iwarp::capture::Capture, End, End) {
    let cap = iwarp::capture::Capture::new(std::io::sink()).unwrap();
    let a = end(Config {
        capture: Some(cap.clone()),
        ..Config::default()
    });
    (cap, a, end(Config::default()))
}

/// SGL of `parts` entries over one region covering `len` bytes.
fn split_sgl(lkey: u32, len: usize, parts: usize) -> Vec<Sge> {
    let mut v = Vec::new();
    let mut off = 0;
    for i in 0..parts {
        let n = if i + 1 == parts {
            len - off
        } else {
            len / parts
        };
        v.push(Sge::new(lkey, off as u64, n as u32));
        off += n;
    }
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_recv_with_sgls_and_private_data() {
    let a = end(Config::default());
    let b = end(Config::default());
    // Receive side: three regions, one SGE each.
    let r1 = reg_mut(&b.pd, 10, Access::LOCAL_WRITE);
    let r2 = reg_mut(&b.pd, 20, Access::LOCAL_WRITE);
    let r3 = reg_mut(&b.pd, 100, Access::LOCAL_WRITE);
    b.qp.post_recv(RecvWr::new(
        1,
        vec![
            Sge::new(r1.lkey(), 0, 10),
            Sge::new(r2.lkey(), 0, 20),
            Sge::new(r3.lkey(), 0, 100),
        ],
    ))
    .unwrap();
    let (ca, cb) = connect(&a, &b, 4).await;
    assert_eq!(ca.initiator_depth, 4);
    assert_eq!(cb.responder_resources, 4);
    // Send side: a 45-byte message gathered from two regions.
    let data = pattern(45, 3);
    let s1 = reg_bytes(&a.pd, data[..17].to_vec(), Access::NONE);
    let s2 = reg_mut(&a.pd, 28, Access::LOCAL_WRITE);
    let s2 = {
        let mut buf = s2.deregister().unwrap().try_into_bytes_mut().unwrap();
        buf.copy_from_slice(&data[17..]);
        a.pd.register(buf.into(), Access::NONE).unwrap()
    };
    a.qp.post_send(SendWr::send(
        7,
        vec![Sge::new(s1.lkey(), 0, 17), Sge::new(s2.lkey(), 0, 28)],
    ))
    .unwrap();
    let wc = next(&a.cq).await;
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (7, WcStatus::Success, WcOpcode::Send)
    );
    let wc = next(&b.cq).await;
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode, wc.byte_len),
        (1, WcStatus::Success, WcOpcode::Recv, 45)
    );
    let mut got = Vec::new();
    for r in [r1, r2, r3] {
        got.extend_from_slice(&r.deregister().unwrap().into_bytes());
    }
    assert_eq!(&got[..45], &data[..]);
    assert!(got[45..].iter().all(|&x| x == 0));
    assert_eq!(a.qp.peer_addr(), Some(cb.local_addr));
}

async fn write_read_roundtrip(a: &End, b: &End, len: usize, ord: usize) {
    // b exposes a writable/readable region; a writes `len` bytes from a
    // 3-entry gather list, then reads them back into a 2-entry scatter list.
    let target = reg_mut(
        &b.pd,
        len,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
    );
    let data = pattern(len, len as u8);
    let src = reg_bytes(&a.pd, data.clone(), Access::NONE);
    let parts = if len >= 3 { 3 } else { 1 };
    a.qp.post_send(SendWr::write(
        10,
        split_sgl(src.lkey(), len, parts),
        RemoteAddr {
            rkey: target.rkey(),
            offset: 0,
        },
    ))
    .unwrap();
    let wc = next(&a.cq).await;
    assert_eq!((wc.wr_id, wc.status), (10, WcStatus::Success));
    // Read back in `ord` chunks, all outstanding at once.
    let sink = reg_mut(&a.pd, len, Access::LOCAL_WRITE);
    let chunks = ord.min(len);
    let mut off = 0;
    for i in 0..chunks {
        let n = if i + 1 == chunks {
            len - off
        } else {
            len / chunks
        };
        let sgl = if n >= 2 {
            vec![
                Sge::new(sink.lkey(), off as u64, (n / 2) as u32),
                Sge::new(sink.lkey(), (off + n / 2) as u64, (n - n / 2) as u32),
            ]
        } else {
            vec![Sge::new(sink.lkey(), off as u64, n as u32)]
        };
        a.qp.post_send(SendWr::read(
            100 + i as u64,
            sgl,
            RemoteAddr {
                rkey: target.rkey(),
                offset: off as u64,
            },
        ))
        .unwrap();
        off += n;
    }
    for i in 0..chunks {
        let wc = next(&a.cq).await;
        if wc.status != WcStatus::Success {
            let ev = a.qp.next_event().await;
            panic!("read {i} of {len} failed: {wc:?} {ev:?}");
        }
        assert_eq!(
            (wc.wr_id, wc.status, wc.opcode),
            (100 + i as u64, WcStatus::Success, WcOpcode::RdmaRead)
        );
    }
    let got = sink.deregister().unwrap().into_bytes();
    assert!(got[..] == data[..], "read-back mismatch at len {len}");
    let placed = target.deregister().unwrap().into_bytes();
    assert!(placed[..] == data[..], "write mismatch at len {len}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_and_read_1b_to_16mib_ord16() {
    let a = end(Config::default());
    let b = end(Config::default());
    connect(&a, &b, 16).await;
    for len in [1usize, 3, 4095, 65_536 + 7, 1 << 20, 16 << 20] {
        write_read_roundtrip(&a, &b, len, 16).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_and_read_ord1_crc_off_rev1() {
    let cfg = Config {
        mpa: MpaConfig {
            crc: false,
            revision: 1,
            peer_to_peer: false,
        },
        ..Config::default()
    };
    let a = end(cfg.clone());
    let b = end(cfg);
    // Revision 1: no IRD/ORD negotiation, local values are used.
    connect(&a, &b, 1).await;
    // rev 1: the responder must not send before the initiator's first FPDU.
    for len in [1usize, 100_000, 1 << 20] {
        write_read_roundtrip(&a, &b, len, 1).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_length_read_and_send() {
    let a = end(Config::default());
    let b = end(Config::default());
    let rbuf = reg_mut(&b.pd, 8, Access::LOCAL_WRITE);
    b.qp.post_recv(RecvWr::new(5, vec![Sge::new(rbuf.lkey(), 0, 8)]))
        .unwrap();
    connect(&a, &b, 2).await;
    let target = reg_mut(&b.pd, 8, Access::LOCAL_WRITE | Access::REMOTE_READ);
    a.qp.post_send(SendWr::read(
        1,
        vec![],
        RemoteAddr {
            rkey: target.rkey(),
            offset: 0,
        },
    ))
    .unwrap();
    let wc = next(&a.cq).await;
    assert_eq!(
        (wc.wr_id, wc.status, wc.byte_len),
        (1, WcStatus::Success, 0)
    );
    a.qp.post_send(SendWr::send(2, vec![])).unwrap();
    assert_eq!(next(&a.cq).await.status, WcStatus::Success);
    let wc = next(&b.cq).await;
    assert_eq!(
        (wc.wr_id, wc.status, wc.byte_len),
        (5, WcStatus::Success, 0)
    );
}

fn is_terminate(ev: &CmEvent, remote: bool) -> Option<TerminateCause> {
    match ev {
        CmEvent::ConnectionError(e) if e.remote == remote => {
            let c = e.code?;
            TerminateCause::from_codes(
                (c >> 28) as u8,
                ((c >> 24) & 0xF) as u8,
                ((c >> 16) & 0xFF) as u8,
            )
        }
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_with_invalidate_then_write_through_invalidated_stag_terminates() {
    let a = end(Config::default());
    let b = end(Config::default());
    let rbuf = reg_mut(&a.pd, 64, Access::LOCAL_WRITE);
    a.qp.post_recv(RecvWr::new(1, vec![Sge::new(rbuf.lkey(), 0, 64)]))
        .unwrap();
    connect(&a, &b, 2).await;
    // a advertises a result buffer; b writes it, then Send with Invalidate.
    let result = reg_mut(&a.pd, 16, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let rkey = result.rkey();
    let src = reg_bytes(&b.pd, pattern(16, 9), Access::NONE);
    let msg = reg_bytes(&b.pd, b"reply".to_vec(), Access::NONE);
    b.qp.post_send(
        SendWr::write(
            1,
            vec![Sge::new(src.lkey(), 0, 16)],
            RemoteAddr { rkey, offset: 0 },
        )
        .signaled(false),
    )
    .unwrap();
    b.qp.post_send(SendWr::send_with_invalidate(
        2,
        vec![Sge::new(msg.lkey(), 0, 5)],
        rkey,
    ))
    .unwrap();
    let wc = next(&a.cq).await;
    assert_eq!(
        (wc.status, wc.byte_len, wc.invalidated_rkey),
        (WcStatus::Success, 5, Some(rkey))
    );
    assert!(
        !result.is_valid(),
        "invalidated before the receive completes"
    );
    // The Write was placed before the Send was delivered (RFC 5040 §5.5).
    let buf = result.take_buffer().unwrap().into_bytes();
    assert_eq!(&buf[..], &pattern(16, 9)[..]);
    assert_eq!(next(&b.cq).await.wr_id, 2);
    // A further Write through the invalidated STag must Terminate.
    b.qp.post_send(SendWr::write(
        3,
        vec![Sge::new(src.lkey(), 0, 16)],
        RemoteAddr { rkey, offset: 0 },
    ))
    .unwrap();
    let ev = event(&a.qp).await;
    assert_eq!(
        is_terminate(&ev, false),
        Some(TerminateCause::DdpTaggedInvalidStag),
        "{ev:?}"
    );
    let ev = event(&b.qp).await;
    assert_eq!(
        is_terminate(&ev, true),
        Some(TerminateCause::DdpTaggedInvalidStag),
        "{ev:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_without_posted_receive_terminates() {
    let a = end(Config::default());
    let b = end(Config::default());
    connect(&a, &b, 1).await;
    let msg = reg_bytes(&a.pd, b"hello".to_vec(), Access::NONE);
    a.qp.post_send(SendWr::send(1, vec![Sge::new(msg.lkey(), 0, 5)]))
        .unwrap();
    let ev = event(&b.qp).await;
    assert_eq!(
        is_terminate(&ev, false),
        Some(TerminateCause::DdpNoBuffer),
        "{ev:?}"
    );
    let ev = event(&a.qp).await;
    assert_eq!(
        is_terminate(&ev, true),
        Some(TerminateCause::DdpNoBuffer),
        "{ev:?}"
    );
    // Posting on a dead QP fails.
    assert!(a.qp.post_send(SendWr::send(2, vec![])).is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn receive_too_small_terminates_and_flushes() {
    let a = end(Config::default());
    let b = end(Config::default());
    let small = reg_mut(&b.pd, 4, Access::LOCAL_WRITE);
    b.qp.post_recv(RecvWr::new(1, vec![Sge::new(small.lkey(), 0, 4)]))
        .unwrap();
    b.qp.post_recv(RecvWr::new(2, vec![Sge::new(small.lkey(), 0, 4)]))
        .unwrap();
    connect(&a, &b, 1).await;
    let msg = reg_bytes(&a.pd, b"hello".to_vec(), Access::NONE);
    a.qp.post_send(SendWr::send(1, vec![Sge::new(msg.lkey(), 0, 5)]))
        .unwrap();
    let wc = next(&b.cq).await;
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::LocalLengthError));
    let wc = next(&b.cq).await;
    assert_eq!((wc.wr_id, wc.status), (2, WcStatus::WrFlushError));
    assert_eq!(
        is_terminate(&event(&a.qp).await, true),
        Some(TerminateCause::DdpMessageTooLong)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_to_stag_of_another_connection_terminates() {
    let a = end(Config::default());
    let b = end(Config::default());
    connect(&a, &b, 1).await;
    // A second connection into the same passive device, its own PD.
    let c = end(Config::default());
    let b2_pd = b.dev.alloc_pd().unwrap();
    let b2_qp = b
        .dev
        .create_qp(&b2_pd, QpInit::with_cq(b.cq.clone()))
        .unwrap();
    let b2 = End {
        dev: b.dev.clone(),
        pd: b2_pd,
        cq: b.cq.clone(),
        qp: b2_qp,
    };
    connect(&c, &b2, 1).await;
    let other = reg_mut(&b2.pd, 64, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let src = reg_bytes(&a.pd, pattern(8, 1), Access::NONE);
    a.qp.post_send(SendWr::write(
        1,
        vec![Sge::new(src.lkey(), 0, 8)],
        RemoteAddr {
            rkey: other.rkey(),
            offset: 0,
        },
    ))
    .unwrap();
    let ev = event(&b.qp).await;
    assert_eq!(
        is_terminate(&ev, false),
        Some(TerminateCause::DdpTaggedStagNotAssociated),
        "{ev:?}"
    );
    assert_eq!(
        is_terminate(&event(&a.qp).await, true),
        Some(TerminateCause::DdpTaggedStagNotAssociated)
    );
    // The other connection is unaffected, its memory untouched.
    assert_eq!(b2.qp.state(), rdma_verbs::QpState::Connected);
    assert!(other
        .deregister()
        .unwrap()
        .as_slice()
        .iter()
        .all(|&x| x == 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bounds_and_access_violations_terminate() {
    // Out of bounds Write.
    let a = end(Config::default());
    let b = end(Config::default());
    connect(&a, &b, 1).await;
    let t = reg_mut(&b.pd, 8, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let src = reg_bytes(&a.pd, pattern(8, 1), Access::NONE);
    a.qp.post_send(SendWr::write(
        1,
        vec![Sge::new(src.lkey(), 0, 8)],
        RemoteAddr {
            rkey: t.rkey(),
            offset: 4,
        },
    ))
    .unwrap();
    assert_eq!(
        is_terminate(&event(&b.qp).await, false),
        Some(TerminateCause::DdpTaggedBaseBounds)
    );
    // Read from a region without Remote Read.
    let a = end(Config::default());
    let b = end(Config::default());
    connect(&a, &b, 1).await;
    let t = reg_mut(&b.pd, 8, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let sink = reg_mut(&a.pd, 8, Access::LOCAL_WRITE);
    a.qp.post_send(SendWr::read(
        1,
        vec![Sge::new(sink.lkey(), 0, 8)],
        RemoteAddr {
            rkey: t.rkey(),
            offset: 0,
        },
    ))
    .unwrap();
    let wc = next(&a.cq).await;
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::RemoteAccessError));
    assert_eq!(
        is_terminate(&event(&b.qp).await, false),
        Some(TerminateCause::RdmapAccessRights)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reject_with_private_data() {
    let a = end(Config::default());
    let b = end(Config::default());
    let l = b.dev.listen("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = l.local_addr();
    let server = tokio::spawn(async move {
        let req = l.next_request().await.unwrap();
        assert_eq!(req.private_data(), b"let me in");
        req.reject(b"no thanks").await.unwrap();
    });
    let err = a
        .dev
        .connect(&a.qp, addr, ConnParam::new(&b"let me in"[..], 1, 1))
        .await
        .unwrap_err();
    server.await.unwrap();
    assert_eq!(
        err,
        VerbsError::Rejected {
            private_data: Bytes::from_static(b"no thanks")
        }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disconnect_flushes_and_notifies_peer() {
    let (a, b, _r) = connected_with_receive(8, 9).await;
    a.qp.disconnect();
    assert_eq!(event(&a.qp).await, CmEvent::Disconnected);
    assert_eq!(event(&b.qp).await, CmEvent::Disconnected);
    let wc = next(&b.cq).await;
    assert_eq!((wc.wr_id, wc.status), (9, WcStatus::WrFlushError));
}

/// A raw TCP peer performs the MPA exchange by hand and sends an FPDU with
/// a corrupted CRC: the device must answer with Terminate (LLP, CRC error).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupted_crc_terminates() {
    let b = end(Config::default());
    let l = b.dev.listen("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = l.local_addr();
    let bqp = b.qp.clone();
    let server = tokio::spawn(async move {
        let req = l.next_request().await.unwrap();
        req.accept(&bqp, ConnParam::new(&b""[..], 1, 1))
            .await
            .unwrap();
    });
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mpa = MpaConfig {
        crc: true,
        revision: 2,
        peer_to_peer: false,
    };
    s.write_all(&iwarp::handshake::request(&mpa, 1, 1, b"").unwrap())
        .await
        .unwrap();
    let mut rep = vec![0u8; 24];
    s.read_exact(&mut rep).await.unwrap();
    let neg = iwarp::handshake::process_reply(&mpa, 1, 1, &rep).unwrap();
    assert!(neg.crc);
    server.await.unwrap();
    // A zero-length RDMA Write FPDU with a wrong CRC.
    let mut hdr = [0u8; 14];
    RdmapRepr::RdmaWrite {
        stag: 0,
        to: 0,
        last: true,
    }
    .emit(&mut hdr)
    .unwrap();
    let mut fpdu = vec![0, 14];
    fpdu.extend_from_slice(&hdr);
    let crc = iwarp::crc::crc32c(&fpdu) ^ 1;
    fpdu.extend_from_slice(&iwarp::crc::to_wire(crc));
    s.write_all(&fpdu).await.unwrap();
    // Read the Terminate FPDU.
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut buf)).await;
    assert!(
        buf.len() >= 2 + 18 + 4 + 4,
        "no Terminate received: {buf:?}"
    );
    let ulpdu_len = u16::from_be_bytes([buf[0], buf[1]]) as usize;
    let ulpdu = &buf[2..2 + ulpdu_len];
    assert!(matches!(
        RdmapRepr::parse_ulpdu(ulpdu).unwrap(),
        RdmapRepr::Terminate {
            msn: 1,
            mo: 0,
            last: true
        }
    ));
    let t = TerminateRepr::parse(&ulpdu[18..]).unwrap();
    assert_eq!(t.cause(), Some(TerminateCause::MpaCrcError));
    // Its own CRC is good.
    let pad = iwarp::wire::fpdu::pad_len(ulpdu_len);
    let end = 2 + ulpdu_len + pad;
    assert_eq!(
        iwarp::crc::from_wire(buf[end..end + 4].try_into().unwrap()),
        iwarp::crc::crc32c(&buf[..end])
    );
    assert_eq!(
        is_terminate(&event(&b.qp).await, false),
        Some(TerminateCause::MpaCrcError)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_ping_pong_reposting_receives() {
    let a = end(Config::default());
    let b = end(Config::default());
    const DEPTH: usize = 4;
    let prep = |e: &End| {
        let rbuf = reg_mut(&e.pd, 64 * DEPTH, Access::LOCAL_WRITE);
        for i in 0..DEPTH {
            e.qp.post_recv(RecvWr::new(
                i as u64,
                vec![Sge::new(rbuf.lkey(), (i * 64) as u64, 64)],
            ))
            .unwrap();
        }
        let sbuf = reg_bytes(&e.pd, pattern(64, 1), Access::NONE);
        (rbuf, sbuf)
    };
    let (arb, asb) = prep(&a);
    let (brb, bsb) = prep(&b);
    connect(&a, &b, 1).await;
    for i in 0..500 {
        a.qp.post_send(SendWr::send(1000 + i, vec![Sge::new(asb.lkey(), 0, 64)]).signaled(false))
            .unwrap();
        let wc = next(&b.cq).await;
        assert_eq!(
            wc.status,
            WcStatus::Success,
            "{i} server {wc:?} {:?}",
            b.qp.next_event().await
        );
        b.qp.post_recv(RecvWr::new(
            wc.wr_id,
            vec![Sge::new(brb.lkey(), wc.wr_id * 64, 64)],
        ))
        .unwrap();
        b.qp.post_send(SendWr::send(0, vec![Sge::new(bsb.lkey(), 0, 64)]).signaled(false))
            .unwrap();
        let wc = next(&a.cq).await;
        assert_eq!(
            wc.status,
            WcStatus::Success,
            "{i} client {wc:?} {:?}",
            a.qp.next_event().await
        );
        a.qp.post_recv(RecvWr::new(
            wc.wr_id,
            vec![Sge::new(arb.lkey(), wc.wr_id * 64, 64)],
        ))
        .unwrap();
    }
}

/// A responder that claims an ORD above our IRD: the initiator fails the
/// connect and reports it with Terminate (LLP, Insufficient IRD; RFC 6581).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insufficient_ird_in_reply_is_terminated() {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let mut req = vec![0u8; 20 + 4];
        s.read_exact(&mut req).await.unwrap();
        let r = iwarp::handshake::parse_request(&req).unwrap();
        assert_eq!(r.ird(), 2);
        let mut fake = r.clone();
        fake.ird_ord.as_mut().unwrap().ird = 9; // so that our reply says ORD 9
        let (rep, _) = iwarp::handshake::accept(&MpaConfig::default(), &fake, 9, 9, b"").unwrap();
        s.write_all(&rep).await.unwrap();
        let mut buf = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut buf)).await;
        buf
    });
    let a = end(Config::default());
    let err = a
        .dev
        .connect(&a.qp, addr, ConnParam::new(Bytes::new(), 2, 2))
        .await
        .unwrap_err();
    assert!(matches!(err, VerbsError::Protocol(_)), "{err:?}");
    let buf = server.await.unwrap();
    let len = u16::from_be_bytes([buf[0], buf[1]]) as usize;
    let t = TerminateRepr::parse(&buf[2 + 18..2 + len]).unwrap();
    assert_eq!(t.cause(), Some(TerminateCause::MpaInsufficientIrd));
    assert_eq!(a.qp.state(), rdma_verbs::QpState::Error);
}

/// FRWR cycle: allocate, fast-register (new key), remote write, remote
/// invalidate, take the buffer back, re-register with another key; a local
/// invalidate posted on the send queue; the old key is dead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fast_registration_and_local_invalidate() {
    use rdma_verbs::FastRegWr;
    let a = end(Config::default());
    let b = end(Config::default());
    let rbuf = reg_mut(&a.pd, 64, Access::LOCAL_WRITE);
    a.qp.post_recv(RecvWr::new(1, vec![Sge::new(rbuf.lkey(), 0, 64)]))
        .unwrap();
    connect(&a, &b, 1).await;
    let mr = a.pd.alloc_mr(4096).unwrap();
    assert!(!mr.is_valid());
    let rkey1 =
        a.qp.post_fast_reg(
            &mr,
            FastRegWr {
                wr_id: 50,
                buffer: BytesMut::zeroed(32).into(),
                access: Access::LOCAL_WRITE | Access::REMOTE_WRITE,
                signaled: true,
            },
        )
        .unwrap();
    assert_eq!(rkey1, mr.rkey());
    let wc = next(&a.cq).await;
    assert_eq!(
        (wc.wr_id, wc.opcode, wc.status),
        (50, WcOpcode::FastReg, WcStatus::Success)
    );
    // Peer writes, then invalidates with its reply.
    let src = reg_bytes(&b.pd, pattern(32, 4), Access::NONE);
    b.qp.post_send(
        SendWr::write(
            1,
            vec![Sge::new(src.lkey(), 0, 32)],
            RemoteAddr {
                rkey: rkey1,
                offset: 0,
            },
        )
        .signaled(false),
    )
    .unwrap();
    b.qp.post_send(SendWr::send_with_invalidate(2, vec![], rkey1))
        .unwrap();
    let wc = next(&a.cq).await;
    assert_eq!(wc.invalidated_rkey, Some(rkey1));
    let buf = mr.take_buffer().unwrap().into_bytes();
    assert_eq!(&buf[..], &pattern(32, 4)[..]);
    // Re-register: a new key.
    let rkey2 =
        a.qp.post_fast_reg(
            &mr,
            FastRegWr {
                wr_id: 51,
                buffer: BytesMut::zeroed(16).into(),
                access: Access::LOCAL_WRITE | Access::REMOTE_READ,
                signaled: false,
            },
        )
        .unwrap();
    assert_ne!(rkey1, rkey2);
    assert!(mr.take_buffer().is_err(), "valid region keeps its buffer");
    // Local invalidate through the send queue.
    a.qp.post_send(SendWr::local_invalidate(52, rkey2)).unwrap();
    let wc = next(&a.cq).await;
    assert_eq!(
        (wc.wr_id, wc.opcode, wc.status),
        (52, WcOpcode::LocalInvalidate, WcStatus::Success)
    );
    assert!(!mr.is_valid());
    assert_eq!(mr.take_buffer().unwrap().len(), 16);
    // The first key is dead: a Write through it terminates.
    b.qp.post_send(SendWr::write(
        3,
        vec![Sge::new(src.lkey(), 0, 8)],
        RemoteAddr {
            rkey: rkey1,
            offset: 0,
        },
    ))
    .unwrap();
    assert_eq!(
        is_terminate(&event(&a.qp).await, false),
        Some(TerminateCause::DdpTaggedInvalidStag)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registration_rules() {
    let a = end(Config::default());
    // Write access on an immutable buffer is refused and the buffer returned.
    let e =
        a.pd.register(Bytes::from_static(b"abc").into(), Access::LOCAL_WRITE)
            .unwrap_err();
    assert_eq!(e.buffer.len(), 3);
    // Remote write without local write is refused.
    assert!(a
        .pd
        .register(BytesMut::zeroed(4).into(), Access::REMOTE_WRITE)
        .is_err());
    // Keys differ between registrations; deregistration hands the buffer back.
    let m1 = reg_mut(&a.pd, 8, Access::LOCAL_WRITE);
    let m2 = reg_mut(&a.pd, 8, Access::LOCAL_WRITE);
    assert_ne!(m1.rkey(), m2.rkey());
    let before = a.dev.regions();
    assert_eq!(m1.deregister().unwrap().len(), 8);
    assert_eq!(a.dev.regions(), before - 1);
    // Sends need a connection; receives may be posted before.
    assert!(a.qp.post_send(SendWr::send(1, vec![])).is_err());
    assert!(a
        .qp
        .post_recv(RecvWr::new(1, vec![Sge::new(m2.lkey(), 0, 8)]))
        .is_ok());
}

/// A silent peer and a peer sending garbage do not delay a real one; the
/// garbage connection is closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_peers_do_not_block_the_listener() {
    let b = end(Config::default());
    let l = b.dev.listen("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = l.local_addr();
    let _silent = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut garbage = tokio::net::TcpStream::connect(addr).await.unwrap();
    garbage
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let a = end(Config::default());
    let took = timed_real_connect(&a, &b, l).await;
    assert!(took < Duration::from_secs(5), "real peer was delayed");
    let mut buf = [0u8; 16];
    let n = tokio::time::timeout(Duration::from_secs(5), garbage.read(&mut buf))
        .await
        .unwrap()
        .unwrap_or(0);
    assert_eq!(n, 0, "garbage connection must be closed without a reply");
}

/// Small Sends posted back to back are coalesced into a few vectored
/// writes (counted as captured TCP segments of the sender), not one write
/// each, and still arrive complete and in order.
///
/// Coalescing depends on timing (a burst is posts a few microseconds
/// apart, and a writer task that runs in lock-step with the poster on the
/// other core drains each post alone), so the test sends up to five bursts
/// and requires one of them to be coalesced; every burst must arrive
/// intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn burst_of_small_sends_is_coalesced() {
    let (cap, a, b) = counted_pair();
    const N: usize = 64;
    const BURSTS: usize = 5;
    let rbuf = reg_mut(&b.pd, 64 * (N * BURSTS + 1), Access::LOCAL_WRITE);
    for i in 0..=N * BURSTS {
        b.qp.post_recv(RecvWr::new(
            i as u64,
            vec![Sge::new(rbuf.lkey(), (i * 64) as u64, 64)],
        ))
        .unwrap();
    }
    let src = connect_with_first_send(&a, &b).await;
    let mut counts = Vec::new();
    for burst in 0..BURSTS {
        let before = cap.frames();
        let ids = burst * N + 1..=(burst + 1) * N;
        for i in ids.clone() {
            a.qp.post_send(SendWr::send(i as u64, vec![Sge::new(src.lkey(), 0, 64)]))
                .unwrap();
        }
        for i in ids.clone() {
            let wc = next(&b.cq).await;
            assert_eq!((wc.wr_id, wc.status), (i as u64, WcStatus::Success));
            assert_eq!(wc.byte_len, 64);
        }
        for _ in ids {
            assert_eq!(next(&a.cq).await.status, WcStatus::Success);
        }
        // Without coalescing every Send is its own write (N).
        let writes = cap.frames() - before;
        counts.push(writes);
        if writes <= (N / 2) as u64 {
            break;
        }
    }
    assert!(
        counts.iter().any(|&w| w <= (N / 2) as u64),
        "no burst of {N} back-to-back Sends was coalesced: writes per burst {counts:?}"
    );
}

/// Many idle TCP connections (more than the listener's pending
/// handshake slots) do not delay a real MPA handshake, and a silent
/// connection is closed after the short header timeout, well before the
/// 10 s handshake timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_do_not_block_handshakes() {
    let b = end(Config::default());
    let l = b.dev.listen("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = l.local_addr();
    let mut idle = Vec::new();
    for _ in 0..100 {
        idle.push(tokio::net::TcpStream::connect(addr).await.unwrap());
    }
    // Some time for the listener to accept them all.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let a = end(Config::default());
    let took = timed_real_connect(&a, &b, l).await;
    assert!(
        took < Duration::from_secs(3),
        "real peer delayed by idle connections: {took:?}"
    );
    // The newest idle connection (still pending) is closed by the header
    // timeout, not after the 10 s handshake timeout.
    let mut last = idle.pop().unwrap();
    let mut buf = [0u8; 1];
    let n = tokio::time::timeout(Duration::from_secs(6), last.read(&mut buf))
        .await
        .expect("silent connection not closed by the header timeout")
        .unwrap_or(0);
    assert_eq!(n, 0);
}

/// RFC 5044 §7.1.2 without RFC 6581 peer-to-peer mode: the responder's
/// first FPDU waits for the initiator's first FPDU.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rev1_responder_waits_for_initiators_first_fpdu() {
    let rev1 = Config {
        mpa: MpaConfig {
            crc: true,
            revision: 1,
            peer_to_peer: false,
        },
        ..Config::default()
    };
    let a = end(rev1);
    let b = end(Config::default());
    let r = reg_mut(&a.pd, 16, Access::LOCAL_WRITE);
    a.qp.post_recv(RecvWr::new(1, vec![Sge::new(r.lkey(), 0, 16)]))
        .unwrap();
    let target = reg_mut(&b.pd, 16, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    connect(&a, &b, 1).await;
    let msg = reg_bytes(&b.pd, b"early".to_vec(), Access::NONE);
    b.qp.post_send(SendWr::send(9, vec![Sge::new(msg.lkey(), 0, 5)]))
        .unwrap();
    // Held back: nothing reaches the initiator.
    assert!(
        tokio::time::timeout(Duration::from_millis(300), a.cq.next())
            .await
            .is_err()
    );
    // The initiator's first FPDU (a Write) opens the gate.
    let src = reg_bytes(&a.pd, vec![1u8; 4], Access::NONE);
    a.qp.post_send(
        SendWr::write(
            2,
            vec![Sge::new(src.lkey(), 0, 4)],
            RemoteAddr {
                rkey: target.rkey(),
                offset: 0,
            },
        )
        .signaled(false),
    )
    .unwrap();
    let wc = next(&a.cq).await;
    assert_eq!(
        (wc.wr_id, wc.status, wc.byte_len),
        (1, WcStatus::Success, 5)
    );
}

/// Write/Read round trips of the given lengths between two ends of `cfg`.
async fn roundtrips_with(cfg: Config, lens: &[usize]) {
    let a = end(cfg.clone());
    let b = end(cfg);
    connect(&a, &b, 4).await;
    for &len in lens {
        write_read_roundtrip(&a, &b, len, 4).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_and_read_with_staged_copy_placement() {
    let cfg = Config {
        direct_placement: false,
        ..Config::default()
    };
    roundtrips_with(cfg, &[1, 70_000, 4 << 20]).await;
}

/// Read Responses read one segment at a time (read-ahead, the default,
/// turned off) over real sockets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_and_read_without_read_ahead() {
    let cfg = Config {
        read_ahead: false,
        ..Config::default()
    };
    roundtrips_with(cfg, &[1, 70_000, 4 << 20, 16 << 20]).await;
}

/// `read_at`/`write_at`: the CPU's own access to registered memory, checked
/// against the buffer; a receive buffer is read in place and reposted
/// without re-registration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registered_memory_is_read_and_written_in_place() {
    let (a, b, rbuf) = connected_with_receive(64, 1).await;
    // A send buffer registered once and filled in place before each post.
    let sbuf = reg_mut(&a.pd, 64, Access::NONE);
    for round in 0..3u8 {
        let msg = pattern(40 + usize::from(round), round);
        sbuf.write_at(0, &msg).unwrap();
        a.qp.post_send(SendWr::send(
            u64::from(round),
            vec![Sge::new(sbuf.lkey(), 0, msg.len() as u32)],
        ))
        .unwrap();
        assert_eq!(next(&a.cq).await.status, WcStatus::Success);
        let wc = next(&b.cq).await;
        assert_eq!(
            (wc.status, wc.byte_len),
            (WcStatus::Success, msg.len() as u32)
        );
        let mut got = vec![0; msg.len()];
        rbuf.read_at(0, &mut got).unwrap();
        assert_eq!(got, msg);
        // The same registration is posted again.
        b.qp.post_recv(RecvWr::new(2, vec![Sge::new(rbuf.lkey(), 0, 64)]))
            .unwrap();
    }
    // Range and mutability checks.
    let mut four = [0u8; 4];
    assert!(matches!(
        rbuf.read_at(61, &mut four),
        Err(VerbsError::InvalidArgument(_))
    ));
    assert!(matches!(
        rbuf.read_at(usize::MAX, &mut four),
        Err(VerbsError::InvalidArgument(_))
    ));
    assert!(matches!(
        sbuf.write_at(64, &[1]),
        Err(VerbsError::InvalidArgument(_))
    ));
    let frozen = reg_bytes(&a.pd, pattern(8, 1), Access::NONE);
    assert!(matches!(
        frozen.write_at(0, &[1]),
        Err(VerbsError::InvalidAccess(_))
    ));
    frozen.read_at(4, &mut four).unwrap();
    assert_eq!(&four[..], &pattern(8, 1)[4..]);
}

/// `post_send_batch` puts a batch of Sends on the wire in one write, in
/// order; a bad WR stops the batch there, with the earlier ones posted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_of_sends_goes_out_in_one_write() {
    let (cap, a, b) = counted_pair();
    const N: usize = 32;
    let rbuf = reg_mut(&b.pd, 64 * (2 * N + 1), Access::LOCAL_WRITE);
    b.qp.post_recv_batch(
        (0..=2 * N)
            .map(|i| RecvWr::new(i as u64, vec![Sge::new(rbuf.lkey(), (i * 64) as u64, 64)]))
            .collect(),
    )
    .unwrap();
    let src = connect_with_first_send(&a, &b).await;
    let before = cap.frames();
    a.qp.post_send_batch(
        (1..=N)
            .map(|i| SendWr::send(i as u64, vec![Sge::new(src.lkey(), 0, i as u32)]))
            .collect(),
    )
    .unwrap();
    for i in 1..=N {
        // Receive i (0 took the first Send) holds Send i, of i bytes.
        let wc = next(&b.cq).await;
        assert_eq!(
            (wc.wr_id, wc.status, wc.byte_len),
            (i as u64, WcStatus::Success, i as u32)
        );
        assert_eq!(next(&a.cq).await.wr_id, i as u64);
    }
    let writes = cap.frames() - before;
    assert!(writes <= 2, "a batch of {N} Sends took {writes} writes");
    // A WR with too many SGEs in the middle: the ones before it are posted.
    let mut wrs: Vec<SendWr> = (0..3)
        .map(|i| SendWr::send(100 + i, vec![Sge::new(src.lkey(), 0, 8)]))
        .collect();
    wrs.insert(2, SendWr::send(99, vec![Sge::new(src.lkey(), 0, 1); 1000]));
    let err = a.qp.post_send_batch(wrs).unwrap_err();
    assert_eq!(err.posted, 2);
    assert!(matches!(err.error, VerbsError::InvalidArgument(_)));
    for (recv, send) in [(N + 1, 100), (N + 2, 101)] {
        let wc = next(&b.cq).await;
        assert_eq!((wc.wr_id, wc.byte_len), (recv as u64, 8));
        assert_eq!(next(&a.cq).await.wr_id, send);
    }
}

/// `Config::send_buffer` reaches the socket of both ends (Linux reports
/// twice the value asked, capped at `net.core.wmem_max`); `None` leaves
/// the kernel's own size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_buffer_is_set_on_both_ends() {
    let wmem_max: usize = std::fs::read_to_string("/proc/sys/net/core/wmem_max")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(usize::MAX);
    let asked = 300_000;
    let want = 2 * asked.min(wmem_max);
    let cfg = Config {
        send_buffer: Some(asked),
        ..Config::default()
    };
    let (a, b) = (end(cfg.clone()), end(cfg));
    assert_eq!(a.qp.send_buffer_size(), None, "not connected yet");
    connect(&a, &b, 1).await;
    assert_eq!(a.qp.send_buffer_size(), Some(want));
    assert_eq!(b.qp.send_buffer_size(), Some(want));
    assert_eq!(
        Config::default().send_buffer,
        Some(iwarp::DEFAULT_SEND_BUFFER)
    );
    let auto = Config {
        send_buffer: None,
        ..Config::default()
    };
    let (a, b) = (end(auto.clone()), end(auto));
    connect(&a, &b, 1).await;
    let got = a.qp.send_buffer_size().expect("connected");
    assert_ne!(got, want, "autotuned, not the size asked elsewhere");
}
