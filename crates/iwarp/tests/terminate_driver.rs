//! A local Terminate must go out, and the connection close, in
//! bounded time even when the peer never reads.

use bytes::BytesMut;
use iwarp::wire::rdmap::RdmapRepr;
use iwarp::{Config, Device, MpaConfig};
use rdma_verbs::{
    Access, CmEvent, ConnParam, Device as _, MemoryRegion, MrBuffer, ProtectionDomain, QpInit,
    QueuePair, RemoteAddr, SendWr, Sge,
};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn fpdu(repr: RdmapRepr, payload: &[u8]) -> Vec<u8> {
    let mut hdr = [0u8; 18];
    let hl = repr.emit(&mut hdr).unwrap();
    let ulpdu = hl + payload.len();
    let mut v = (ulpdu as u16).to_be_bytes().to_vec();
    v.extend_from_slice(&hdr[..hl]);
    v.extend_from_slice(payload);
    v.extend(std::iter::repeat_n(0u8, (4 - (ulpdu + 2) % 4) % 4));
    let c = iwarp::crc::crc32c(&v);
    v.extend_from_slice(&iwarp::crc::to_wire(c));
    v
}

/// A raw MPA responder on a fresh port: it answers one MPA Request, `delay`
/// after it arrived, and then reads nothing; the task returns its socket.
async fn raw_mpa_responder(
    delay: Duration,
) -> (
    std::net::SocketAddr,
    tokio::task::JoinHandle<tokio::net::TcpStream>,
) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let peer = tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let mut buf = Vec::new();
        let mut tmp = [0u8; 512];
        let n = loop {
            let k = s.read(&mut tmp).await.unwrap();
            buf.extend_from_slice(&tmp[..k]);
            if let Some(n) = iwarp::handshake::frame_complete(&buf).unwrap() {
                break n;
            }
        };
        let req = iwarp::handshake::parse_request(&buf[..n]).unwrap();
        let (reply, _neg) =
            iwarp::handshake::accept(&MpaConfig::default(), &req, 4, 4, &[]).unwrap();
        tokio::time::sleep(delay).await;
        s.write_all(&reply).await.unwrap();
        s
    });
    (addr, peer)
}

/// A QP connected to a raw MPA responder (which completes the handshake
/// and then reads nothing) with 64 MiB of RDMA Writes queued, far more
/// than both socket buffers; the responder then makes a protection error
/// (an RDMA Write to an invalid STag) and the consumer disconnects.
/// Returns the QP, the responder's socket and when the QP stopped.
async fn stopped_behind_a_peer_that_does_not_read(
    close_grace: Duration,
) -> (iwarp::Qp, tokio::net::TcpStream, std::time::Instant) {
    let (addr, peer) = raw_mpa_responder(Duration::ZERO).await;
    let dev = Device::new(Config {
        close_grace,
        ..Config::default()
    });
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(4096).unwrap();
    let mut init = QpInit::with_cq(cq.clone());
    init.max_send_wr = 64;
    let qp = dev.create_qp(&pd, init).unwrap();
    dev.connect(&qp, addr, ConnParam::new(&b""[..], 4, 4))
        .await
        .unwrap();
    let mut s = peer.await.unwrap();
    let src = pd
        .register(
            MrBuffer::from(BytesMut::zeroed(64 << 20)),
            Access::LOCAL_WRITE,
        )
        .unwrap();
    qp.post_send(SendWr::write(
        1,
        vec![Sge::new(src.lkey(), 0, 64 << 20)],
        RemoteAddr {
            rkey: 0x1234,
            offset: 0,
        },
    ))
    .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    s.write_all(&fpdu(
        RdmapRepr::RdmaWrite {
            stag: 0x5555_5500,
            to: 0,
            last: true,
        },
        b"abcd",
    ))
    .await
    .unwrap();
    let ev = tokio::time::timeout(Duration::from_secs(5), qp.next_event()).await;
    assert!(matches!(ev, Ok(CmEvent::ConnectionError(_))), "{ev:?}");
    let stopped = std::time::Instant::now();
    qp.disconnect();
    (qp, s, stopped)
}

/// Reads the stream to its end; returns the bytes read and the last 64.
async fn drain(s: &mut tokio::net::TcpStream) -> (usize, Vec<u8>) {
    let mut total = 0usize;
    let mut tail = Vec::new();
    let mut tmp = vec![0u8; 1 << 20];
    loop {
        let k = s.read(&mut tmp).await.unwrap_or(0);
        if k == 0 {
            return (total, tail);
        }
        total += k;
        tail.extend_from_slice(&tmp[..k]);
        let cut = tail.len().saturating_sub(64);
        tail.drain(..cut);
    }
}

/// A peer that never reads cannot hold a stopped QP's
/// connection open: after `close_grace` the transmit half gives up on the
/// queued bytes (and the Terminate behind them) and shuts the connection,
/// though the consumer still holds the QP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_never_reads_cannot_hold_a_stopped_connection() {
    let grace = Duration::from_millis(300);
    let (qp, mut s, stopped) = stopped_behind_a_peer_that_does_not_read(grace).await;
    let mut closed = false;
    while stopped.elapsed() < Duration::from_secs(5) {
        if qp.shared().lock().tx_closed {
            closed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        closed,
        "the connection stayed open 5 s after the error and a disconnect"
    );
    assert!(stopped.elapsed() >= grace, "shut before the grace ran out");
    // What the peer reads now ends: the connection is shut (no Terminate:
    // it never got out).
    let r = tokio::time::timeout(Duration::from_secs(10), drain(&mut s)).await;
    assert!(r.is_ok(), "no end of stream");
    drop(qp);
}

/// Within the grace, a peer that reads again gets the rest of the queued
/// bytes and then our Terminate, the last thing on the connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_reads_within_the_grace_gets_the_terminate() {
    let (qp, mut s, _) = stopped_behind_a_peer_that_does_not_read(Duration::from_secs(30)).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!qp.shared().lock().tx_closed);
    let (total, tail) = tokio::time::timeout(Duration::from_secs(10), drain(&mut s))
        .await
        .expect("no end of stream");
    assert!(total > 0);
    // The Terminate for the Write to an invalid STag (RFC 5040 §7.1: layer
    // 1 DDP, type 1 tagged buffer, code 0x00 invalid STag; M and D set),
    // with the offending DDP header (STag 0x55555500) copied in, is among
    // the last bytes; the data written before it is all zeros.
    let body = tail.windows(3).rposition(|w| w == [0x11, 0x00, 0xc0]);
    let stag = tail.windows(4).rposition(|w| w == [0x55, 0x55, 0x55, 0x00]);
    let t = body.zip(stag).filter(|(b, s)| b < s);
    assert!(t.is_some(), "no Terminate at the end: {tail:02x?}");
    drop(qp);
}

/// A raw initiator sends a Terminate as its very first FPDU, right behind
/// the MPA Request: the responder's QP fails (remote), its posted
/// receive and queued Send are flushed once, nothing is sent after the
/// MPA Reply, and the connection is closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminate_right_after_the_handshake() {
    use iwarp::wire::terminate::{TerminateCause, TerminateRepr};
    use rdma_verbs::{CompletionQueue, ConnectRequest, Listener as _, RecvWr};
    let dev = Device::new(Config::default());
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(64).unwrap();
    let qp = dev.create_qp(&pd, QpInit::with_cq(cq.clone())).unwrap();
    qp.post_recv(RecvWr::new(3, vec![])).unwrap();
    let l = dev.listen("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = l.local_addr();
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = iwarp::handshake::request(&MpaConfig::default(), 4, 4, b"").unwrap();
    let mut bytes = req.clone();
    let t = TerminateRepr::for_cause(TerminateCause::RdmapCatastrophicStream, &[]);
    bytes.extend(iwarp::engine::tx::terminate_fpdu(&t, true));
    s.write_all(&bytes).await.unwrap();
    let r = l.next_request().await.unwrap();
    r.accept(&qp, ConnParam::new(&b""[..], 4, 4)).await.unwrap();
    let _ = qp.post_send(SendWr::send(2, vec![]));
    let ev = tokio::time::timeout(Duration::from_secs(5), qp.next_event()).await;
    eprintln!("event: {ev:?}");
    let mut got = Vec::new();
    let r = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut got)).await;
    eprintln!(
        "peer got {} bytes then {:?}",
        got.len(),
        r.as_ref().map(|x| x.as_ref().map(|_| ()))
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut wcs = Vec::new();
    cq.poll(&mut wcs, 64);
    eprintln!(
        "wcs: {:?}",
        wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>()
    );
    assert!(matches!(ev, Ok(CmEvent::ConnectionError(ref e)) if e.remote));
    assert!(r.is_ok(), "connection not closed");
}

/// A peer that reads all the time, only slowly (about 0.5 MB/s),
/// is treated like one that never reads: the close grace is a deadline
/// from the stop, not a bound on a lack of progress, so the connection is
/// shut mid-stream and the Terminate never reaches a reading peer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_but_reading_peer_gets_the_terminate() {
    let (qp, mut s, stopped) =
        stopped_behind_a_peer_that_does_not_read(Duration::from_secs(1)).await;
    let mut total = 0usize;
    let mut tail = Vec::new();
    let mut tmp = vec![0u8; 8 << 10];
    let mut longest_gap = Duration::ZERO;
    let mut last = std::time::Instant::now();
    loop {
        let k = s.read(&mut tmp).await.unwrap_or(0);
        if k == 0 {
            break;
        }
        longest_gap = longest_gap.max(last.elapsed());
        last = std::time::Instant::now();
        total += k;
        tail.extend_from_slice(&tmp[..k]);
        let cut = tail.len().saturating_sub(64);
        tail.drain(..cut);
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
    eprintln!(
        "peer read {total} bytes over {:?} (longest gap between reads {longest_gap:?})",
        stopped.elapsed()
    );
    let body = tail.windows(3).rposition(|w| w == [0x11, 0x00, 0xc0]);
    assert!(
        body.is_some(),
        "the reading peer never got the Terminate: {tail:02x?}"
    );
    drop(qp);
}

/// `disconnect()` while `connect()` is in progress. close() moves the
/// QP to Disconnected and sets `stopped`; the handshake then completes and
/// `establish` moves it back to Connected (it only checks `error`): a
/// "Connected" QP whose receive half is dead at once, which still sends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disconnect_during_connect() {
    use rdma_verbs::QpState;
    let (addr, peer) = raw_mpa_responder(Duration::from_millis(300)).await;
    let dev = Device::new(Config::default());
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(64).unwrap();
    let qp = dev.create_qp(&pd, QpInit::with_cq(cq.clone())).unwrap();
    let qp2 = qp.clone();
    let d2 = dev.clone();
    let conn =
        tokio::spawn(async move { d2.connect(&qp2, addr, ConnParam::new(&b""[..], 4, 4)).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    qp.disconnect();
    let r = conn.await.unwrap();
    let _s = peer.await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let st = qp.state();
    eprintln!(
        "connect after disconnect: {:?}; state now {st:?}",
        r.as_ref().map(|_| ())
    );
    assert!(
        r.is_err() || st != QpState::Connected,
        "disconnected QP came back as Connected"
    );
}
