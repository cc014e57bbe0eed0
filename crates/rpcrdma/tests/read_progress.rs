//! The responder's deadline for RDMA Reads counts from the
//! connection's last Read progress, not from the start of a call's Reads.
//! A peer that stops answering Read Requests is closed soon, which frees the
//! server-wide read budget other connections' calls wait for; a slow
//! transfer that keeps completing Reads is never cut.

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rpcrdma::RdmaConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A TCP proxy (one connection at a time is enough here). Bytes from the
/// client go to the server at `rate` bytes per second (0: unthrottled);
/// bytes from the server stop being forwarded once `frozen` is set.
async fn proxy(target: SocketAddr, rate: u64, frozen: Arc<AtomicBool>) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((inbound, _)) = l.accept().await {
            let Ok(out) = TcpStream::connect(target).await else {
                continue;
            };
            let (mut ci, mut co) = inbound.into_split();
            let (mut si, mut so) = out.into_split();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 16 * 1024];
                let start = Instant::now();
                let mut sent = 0u64;
                while let Ok(n) = ci.read(&mut buf).await {
                    if n == 0 || so.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                    sent += n as u64;
                    if rate > 0 {
                        let due = Duration::from_secs_f64(sent as f64 / rate as f64);
                        tokio::time::sleep_until((start + due).into()).await;
                    }
                }
            });
            let frozen = frozen.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 16 * 1024];
                while let Ok(n) = si.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    if frozen.load(Relaxed) {
                        // Swallowed: the client never sees these bytes.
                        continue;
                    }
                    if co.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

/// A PUT of 4 MiB (four 1 MiB segments, four RDMA Reads) through a link of
/// 8 MB/s takes ~0.5 s, longer than the 300 ms `read_timeout`, but each Read
/// completes within ~130 ms of the last: it must go through. (With a total
/// deadline per call, as before, the connection was closed mid-transfer.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_transfer_that_progresses_is_not_cut() {
    let scfg = RdmaConfig {
        read_timeout: Duration::from_millis(300),
        ..RdmaConfig::default()
    };
    let srv = common::server(iwarp::Device::default(), scfg).await;
    let addr = proxy(srv.local_addr(), 8_000_000, Arc::default()).await;
    let ccfg = RdmaConfig {
        reconnect: common::no_reconnect(),
        ..RdmaConfig::default()
    };
    let c = common::client(iwarp::Device::default(), addr, ccfg).await;
    let t = common::typed(&c);
    let data = rdmatest::pattern::pattern(7, 4 << 20);
    let started = Instant::now();
    let r = t.put(data).await.expect("slow PUT");
    let took = started.elapsed();
    assert_eq!(r.length, 4 << 20);
    assert!(
        took > Duration::from_millis(300),
        "the link was not slow enough to test anything ({took:?})"
    );
    assert_eq!(srv.stats().read_timeouts.load(Relaxed), 0);
    assert_eq!(c.stats().reconnects.load(Relaxed), 0);
}

/// A connection whose peer stops answering Read Requests holds the whole
/// server-wide read budget; another client's PUT waits for it. The stalled
/// connection is closed `read_timeout` after its last progress, and the
/// waiting PUT then completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_connection_releases_the_read_budget() {
    let scfg = RdmaConfig {
        read_timeout: Duration::from_millis(300),
        max_read_bytes_per_connection: 4 << 20,
        max_read_bytes: 4 << 20,
        ..RdmaConfig::default()
    };
    let srv = common::server(iwarp::Device::default(), scfg).await;
    let frozen = Arc::new(AtomicBool::new(false));
    let addr = proxy(srv.local_addr(), 0, frozen.clone()).await;
    let hcfg = RdmaConfig {
        call_timeout: Duration::from_secs(3),
        reconnect: common::no_reconnect(),
        ..RdmaConfig::default()
    };
    let hostile = common::client(iwarp::Device::default(), addr, hcfg).await;
    let ht = common::typed(&hostile);
    ht.null().await.unwrap();
    // From now on the server's Read Requests never reach this client.
    frozen.store(true, Relaxed);
    let mut stuck = Vec::new();
    for i in 0..4u32 {
        let ht = common::typed(&hostile);
        stuck.push(tokio::spawn(async move {
            ht.put(rdmatest::pattern::pattern(i, 1 << 20)).await
        }));
    }
    // Let the server take the whole budget for those four.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let legit = common::client(
        iwarp::Device::default(),
        srv.local_addr(),
        RdmaConfig::default(),
    )
    .await;
    let lt = common::typed(&legit);
    let started = Instant::now();
    let r = tokio::time::timeout(
        Duration::from_secs(10),
        lt.put(rdmatest::pattern::pattern(99, 1 << 20)),
    )
    .await
    .expect("the PUT waited for the stalled connection's budget for good")
    .expect("PUT");
    assert_eq!(r.length, 1 << 20);
    eprintln!("legit PUT done after {:?}", started.elapsed());
    assert!(srv.stats().read_timeouts.load(Relaxed) >= 1);
    for h in stuck {
        // Typed failures (timeout or lost connection), never data.
        assert!(h.await.unwrap().is_err());
    }
}
