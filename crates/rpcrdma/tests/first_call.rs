//! The first call on a new connection must not be lost to a responder that
//! leaves early bytes unread, as Linux's soft-iWARP (siw) does: it installs
//! its RDMA-mode receive callback only after it has sent the MPA Reply, so
//! bytes that arrive in between (the initiator's RTR and first Send, often
//! in one TCP segment) stay unread until more bytes arrive.
//!
//! The stand-in here is a TCP relay between our requester and our own
//! responder (both over the software iWARP provider) that reproduces that
//! window: every byte the initiator sends within [`WINDOW`] after the MPA
//! Reply was relayed is held back until a byte arrives after the window.
//! See `RdmaConfig::first_reply_nudge`.

mod common;

use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use rpcrdma::{Bindings, RdmaClient, RdmaConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

/// How long after relaying the MPA Reply the relay holds the initiator's
/// bytes (siw's window is the time between sending the MPA Reply and
/// installing its receive callback).
const WINDOW: Duration = Duration::from_millis(50);
/// Length of an MPA Request/Reply header (RFC 5044 §7.1): key, flags,
/// revision, private data length.
const MPA_HEADER: usize = 20;

/// Reads one MPA Request or Reply frame (header and private data).
async fn read_mpa_frame(s: &mut tokio::net::tcp::OwnedReadHalf) -> std::io::Result<Vec<u8>> {
    let mut f = vec![0u8; MPA_HEADER];
    s.read_exact(&mut f).await?;
    let pd = u16::from_be_bytes([f[18], f[19]]) as usize;
    f.resize(MPA_HEADER + pd, 0);
    s.read_exact(&mut f[MPA_HEADER..]).await?;
    Ok(f)
}

/// Relays one connection, holding back what the initiator sends within
/// [`WINDOW`] after the MPA Reply until it sends more after the window.
async fn relay(client: TcpStream, server: SocketAddr) -> std::io::Result<()> {
    let server = TcpStream::connect(server).await?;
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let (replied_tx, replied_rx) = oneshot::channel::<Instant>();
    tokio::spawn(async move {
        let Ok(reply) = read_mpa_frame(&mut sr).await else {
            return;
        };
        if cw.write_all(&reply).await.is_err() {
            return;
        }
        let _ = replied_tx.send(Instant::now());
        let mut b = vec![0u8; 64 << 10];
        while let Ok(n) = sr.read(&mut b).await {
            if n == 0 || cw.write_all(&b[..n]).await.is_err() {
                break;
            }
        }
        let _ = cw.shutdown().await;
    });
    let request = read_mpa_frame(&mut cr).await?;
    sw.write_all(&request).await?;
    let Ok(replied) = replied_rx.await else {
        return Ok(());
    };
    let mut held = Vec::new();
    let mut b = vec![0u8; 64 << 10];
    loop {
        let n = cr.read(&mut b).await?;
        if n == 0 {
            break;
        }
        if held.is_empty() && replied.elapsed() >= WINDOW {
            sw.write_all(&b[..n]).await?;
            continue;
        }
        held.extend_from_slice(&b[..n]);
        if replied.elapsed() >= WINDOW {
            sw.write_all(&held).await?;
            held.clear();
        }
    }
    sw.shutdown().await
}

/// Our responder behind the relay; the relay's address.
async fn responder_behind_relay() -> (rpcrdma::RdmaServer<iwarp::Device>, SocketAddr) {
    let srv = common::server(iwarp::Device::default(), RdmaConfig::default()).await;
    let target = srv.local_addr();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((c, _)) = listener.accept().await {
            tokio::spawn(relay(c, target));
        }
    });
    (srv, addr)
}

async fn connect(addr: SocketAddr, cfg: RdmaConfig) -> RdmaClient<iwarp::Device> {
    RdmaClient::connect(iwarp::Device::default(), addr, cfg, Bindings::rdmatest())
        .await
        .unwrap()
}

/// The stand-in really loses a first call when nothing follows it.
#[tokio::test]
async fn relay_holds_an_immediate_first_call_without_the_nudge() {
    let (srv, addr) = responder_behind_relay().await;
    let cfg = RdmaConfig {
        first_reply_nudge: None,
        reconnect: common::no_reconnect(),
        ..Default::default()
    };
    let c = connect(addr, cfg).await;
    let r = tokio::time::timeout(Duration::from_secs(1), common::typed(&c).null()).await;
    assert!(r.is_err(), "the first call was answered: {r:?}");
    c.close();
    srv.shutdown().await;
}

/// 50 new connections, each with a call sent at once: every one is
/// answered within a second.
#[tokio::test]
async fn fifty_immediate_first_calls_are_answered_within_a_second() {
    let (srv, addr) = responder_behind_relay().await;
    let mut slowest = Duration::ZERO;
    for i in 0..50 {
        let c = connect(addr, RdmaConfig::default()).await;
        let t0 = Instant::now();
        let r = tokio::time::timeout(Duration::from_secs(1), common::typed(&c).null()).await;
        assert!(
            matches!(r, Ok(Ok(_))),
            "connection {i}: first call not answered within 1 s: {r:?}"
        );
        slowest = slowest.max(t0.elapsed());
        // The relay held the call: a zero-length RDMA Write released it.
        assert!(c.stats().first_reply_nudges.load(Relaxed) >= 1);
        c.close();
    }
    eprintln!("slowest first call: {slowest:?}");
    srv.shutdown().await;
}

/// A connection that answers at once gets no zero-length Write.
#[tokio::test]
async fn no_nudge_when_the_reply_comes_in_time() {
    let srv = common::server(iwarp::Device::default(), RdmaConfig::default()).await;
    let c = connect(srv.local_addr(), RdmaConfig::default()).await;
    common::typed(&c).null().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(c.stats().first_reply_nudges.load(Relaxed), 0);
    c.close();
    srv.shutdown().await;
}
