//! The responder's lifecycle:
//! - peers that trickle their Read Responses must not starve other
//!   clients' Read-chunk calls (bounded wait for the server-wide read
//!   budget, then ERR_CHUNK);
//! - dropping every `RdmaServer` handle stops it;
//! - an idle connection (a client that vanished silently) is closed
//!   after `RdmaConfig::idle_timeout`, and a client that later calls again
//!   reconnects.

mod common;

use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use rpcrdma::{RdmaConfig, TransportError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A TCP proxy that forwards client->server bytes at about `rate` bytes/s
/// (server->client at full speed).
async fn slow_proxy(target: std::net::SocketAddr, rate: u64) -> std::net::SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((a, _)) = l.accept().await else { return };
            let Ok(b) = TcpStream::connect(target).await else {
                continue;
            };
            let (mut ar, mut aw) = a.into_split();
            let (mut br, mut bw) = b.into_split();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                loop {
                    let k = match ar.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(k) => k,
                    };
                    if bw.write_all(&buf[..k]).await.is_err() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_micros(k as u64 * 1_000_000 / rate)).await;
                }
            });
            tokio::spawn(async move {
                let _ = tokio::io::copy(&mut br, &mut aw).await;
            });
        }
    });
    addr
}

/// Four peers behind a 1 MiB/s proxy each PUT almost their whole
/// per-connection read budget; together they hold all but 4 units of the
/// server-wide budget for about 4 s (each 1 MiB RDMA Read completes in
/// about 1 s, well within `read_timeout`, so none is cut). A legitimate
/// client's 1 MiB PUT must be answered (ERR_CHUNK, after
/// `read_budget_wait`) while they still hold it, instead of waiting for
/// them; the trickling PUTs themselves must still complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trickling_peers_do_not_starve_other_clients_reads() {
    const PER_CONN: usize = 4 << 20;
    let scfg = RdmaConfig {
        max_read_bytes_per_connection: PER_CONN,
        max_read_bytes: 4 * PER_CONN,
        read_budget_wait: Duration::from_millis(800),
        ..Default::default()
    };
    let srv = common::server(iwarp::Device::default(), scfg).await;
    let slow = slow_proxy(srv.local_addr(), 1 << 20).await;
    let legit = common::client(
        iwarp::Device::default(),
        srv.local_addr(),
        RdmaConfig::default(),
    )
    .await;
    // Control: the same PUT with nobody else reading.
    common::typed(&legit)
        .put(rdmatest::pattern::pattern(9, 1 << 20))
        .await
        .unwrap();
    let mut hostile = Vec::new();
    for i in 0..4u32 {
        let c = common::client(iwarp::Device::default(), slow, RdmaConfig::default()).await;
        common::typed(&c).null().await.unwrap();
        let t = common::typed(&c);
        hostile.push((
            c,
            tokio::spawn(
                async move { t.put(rdmatest::pattern::pattern(i, PER_CONN - 4096)).await },
            ),
        ));
    }
    // Let the four PUTs take their budget (their Read Requests go out at
    // once; the Read Responses trickle).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = tokio::time::timeout(
        Duration::from_secs(20),
        common::typed(&legit).put(rdmatest::pattern::pattern(9, 1 << 20)),
    )
    .await
    .expect("the legitimate PUT got no answer at all");
    // Answered while the trickling peers still held the budget (without
    // the bound it was answered only once one of them finished).
    let still_trickling = hostile.iter().filter(|(_, h)| !h.is_finished()).count();
    eprintln!(
        "legit PUT: {:?}; trickling PUTs still running {still_trickling}; budget timeouts {}",
        r.as_ref().map(|_| ()),
        srv.stats().read_budget_timeouts.load(Relaxed)
    );
    assert_eq!(
        still_trickling, 4,
        "the legitimate PUT waited for a trickling peer to release the read budget"
    );
    match r {
        Err(rdmatest::ClientError::Rpc(e)) => assert_eq!(
            TransportError::from_rpc(&e),
            Some(&TransportError::ErrChunk),
            "{e:?}"
        ),
        other => panic!("expected ERR_CHUNK, got {other:?}"),
    }
    assert!(srv.stats().read_budget_timeouts.load(Relaxed) >= 1);
    // The slow but progressing PUTs are not cut.
    for (c, h) in hostile {
        h.await.unwrap().expect("a slow, progressing PUT failed");
        c.close();
    }
    assert_eq!(srv.stats().read_timeouts.load(Relaxed), 0);
    // The legitimate client's connection was kept and works.
    common::typed(&legit)
        .put(rdmatest::pattern::pattern(9, 1 << 20))
        .await
        .unwrap();
    assert_eq!(legit.stats().reconnects.load(Relaxed), 0);
    srv.shutdown().await;
}

/// Polls `f` every 20 ms for up to 10 s.
async fn eventually(mut f: impl FnMut() -> bool) -> bool {
    for _ in 0..500 {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    f()
}

/// A clone keeps the server; dropping the last handle without
/// `shutdown()` stops accepting and closes the open connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_last_server_handle_stops_the_server() {
    let srv = common::server(iwarp::Device::default(), RdmaConfig::default()).await;
    let addr = srv.local_addr();
    let stats = srv.stats();
    let cfg = RdmaConfig {
        reconnect: common::no_reconnect(),
        ..Default::default()
    };
    let c = common::client(iwarp::Device::default(), addr, cfg.clone()).await;
    common::typed(&c).null().await.unwrap();
    // Dropping one of two handles changes nothing.
    let clone = srv.clone();
    drop(srv);
    tokio::time::sleep(Duration::from_millis(100)).await;
    common::typed(&c).null().await.unwrap();
    let c2 = common::client(iwarp::Device::default(), addr, cfg.clone()).await;
    common::typed(&c2).null().await.unwrap();
    c2.close();
    // The last handle goes: the open connection is closed (no call is in
    // flight, so no grace is needed) and new ones are refused.
    drop(clone);
    assert!(
        eventually(|| stats.connections_closed.load(Relaxed) >= 2).await,
        "a dropped server kept its connections"
    );
    let r = rpcrdma::RdmaClient::connect(
        iwarp::Device::default(),
        addr,
        cfg,
        rpcrdma::Bindings::rdmatest(),
    )
    .await;
    let served = match &r {
        Ok(c) => common::typed(c).null().await.is_ok(),
        Err(_) => false,
    };
    assert!(r.is_err() && !served, "a dropped server still accepts");
}

/// A TCP proxy that can go silent: once `silent` is set, the bytes of the
/// connections it already carries are dropped both ways, and their closes
/// are not passed on (the sockets stay open), like a NAT or firewall that
/// lost its state or a client host that vanished.
async fn silencing_proxy(
    target: std::net::SocketAddr,
    silent: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::net::SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((a, _)) = l.accept().await else { return };
            let Ok(b) = TcpStream::connect(target).await else {
                continue;
            };
            let (ar, aw) = a.into_split();
            let (br, bw) = b.into_split();
            for (mut r, mut w) in [(ar, bw), (br, aw)] {
                let s = silent.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 65536];
                    loop {
                        let k = match r.read(&mut buf).await {
                            Ok(0) | Err(_) if s.load(Relaxed) => {
                                let _hold = w;
                                std::future::pending::<()>().await;
                                return;
                            }
                            Ok(0) | Err(_) => return,
                            Ok(k) => k,
                        };
                        if s.load(Relaxed) {
                            continue;
                        }
                        if w.write_all(&buf[..k]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        }
    });
    addr
}

/// A client that vanished silently (its close never reaches the
/// server) loses its server connection after `idle_timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vanished_client_connection_is_closed_when_idle() {
    let scfg = RdmaConfig {
        idle_timeout: Some(Duration::from_millis(300)),
        ..Default::default()
    };
    let srv = common::server(iwarp::Device::default(), scfg).await;
    let silent = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let addr = silencing_proxy(srv.local_addr(), silent.clone()).await;
    let cfg = RdmaConfig {
        reconnect: common::no_reconnect(),
        ..Default::default()
    };
    let c = common::client(iwarp::Device::default(), addr, cfg).await;
    common::typed(&c).null().await.unwrap();
    assert_eq!(srv.connections(), 1);
    silent.store(true, Relaxed);
    c.close();
    drop(c);
    assert!(
        eventually(|| srv.connections() == 0).await,
        "a vanished client's connection is kept"
    );
    assert_eq!(srv.stats().idle_closes.load(Relaxed), 1);
    srv.shutdown().await;
}

/// Over memfabric: a call in process longer than `idle_timeout`
/// keeps its connection; an idle connection is closed; the client's next
/// call reconnects and succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_close_spares_calls_in_process_and_later_calls_reconnect() {
    let fabric = rpcrdma::memfabric::Fabric::new();
    let scfg = RdmaConfig {
        idle_timeout: Some(Duration::from_millis(200)),
        ..Default::default()
    };
    let srv = common::server(fabric.clone(), scfg).await;
    let c = common::client(fabric.clone(), srv.local_addr(), RdmaConfig::default()).await;
    let t = common::typed(&c);
    t.null().await.unwrap();
    // A call in process for 3 idle timeouts: not idle.
    t.sleep(600).await.unwrap();
    assert_eq!(srv.stats().idle_closes.load(Relaxed), 0);
    assert_eq!(c.stats().reconnects.load(Relaxed), 0);
    // Nothing to do: the server closes the connection.
    assert!(
        eventually(|| srv.stats().idle_closes.load(Relaxed) >= 1).await,
        "an idle connection was not closed"
    );
    // The client calls again: it reconnects and the call succeeds.
    t.null().await.unwrap();
    t.put(rdmatest::pattern::pattern(3, 1 << 20)).await.unwrap();
    assert!(c.stats().reconnects.load(Relaxed) >= 1);
    // Idle timeout off: an idle connection is kept.
    let srv2 = common::server(
        fabric.clone(),
        RdmaConfig {
            idle_timeout: None,
            ..Default::default()
        },
    )
    .await;
    let c2 = common::client(fabric.clone(), srv2.local_addr(), RdmaConfig::default()).await;
    common::typed(&c2).null().await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(srv2.connections(), 1);
    assert_eq!(srv2.stats().idle_closes.load(Relaxed), 0);
    c.close();
    c2.close();
    srv.shutdown().await;
    srv2.shutdown().await;
}

/// The idle close with the requester's reconnect policy: an idle client's eager
/// reconnections carry no message and are idle-closed in turn (counted as
/// failed attempts); after more such closes than
/// `max_attempts` (the client may then stop reconnecting until it is
/// used) it still serves its next call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_idle_through_many_idle_closes_still_calls() {
    let fabric = rpcrdma::memfabric::Fabric::new();
    let scfg = RdmaConfig {
        idle_timeout: Some(Duration::from_millis(40)),
        ..Default::default()
    };
    let srv = common::server(fabric.clone(), scfg).await;
    let ccfg = RdmaConfig {
        reconnect: rpcrdma::Backoff {
            max_attempts: 3,
            max: Duration::from_millis(40),
            ..Default::default()
        },
        ..Default::default()
    };
    let c = common::client(fabric.clone(), srv.local_addr(), ccfg).await;
    let t = common::typed(&c);
    t.null().await.unwrap();
    let closes = srv.stats();
    assert!(
        eventually(|| closes.idle_closes.load(Relaxed) >= 4).await,
        "idle closes: {}",
        closes.idle_closes.load(Relaxed)
    );
    eprintln!(
        "idle closes {}, client reconnects {}",
        closes.idle_closes.load(Relaxed),
        c.stats().reconnects.load(Relaxed)
    );
    t.null().await.unwrap();
    t.put(rdmatest::pattern::pattern(5, 64 << 10))
        .await
        .unwrap();
    c.close();
    srv.shutdown().await;
}
