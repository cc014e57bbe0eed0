//! Liveness checks must not tear down healthy connections: a connection
//! busy moving a large result or argument (RDMA Writes, Read Responses: no
//! message the requester sees) is not judged silent; a NULL probe still
//! waiting for a credit does not condemn its connection; a reply still
//! going out counts as activity for the responder's idle timeout, and
//! connections that carried data for a while do not count as failed
//! reconnect attempts. The other tests are controls for the same paths.

mod common;

use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use oncrpc::{Call, Dispatcher, Payload, ProcError, Service};
use rdmatest::RdmatestServer;
use rpcrdma::memfabric::Fabric;
use rpcrdma::RdmaConfig;

static GETS: AtomicU64 = AtomicU64::new(0);

/// GET takes `ms` at the server; NULL is instant.
struct SlowGet(Arc<RdmatestServer>, u64);

impl Service for SlowGet {
    fn program(&self) -> u32 {
        rdmatest::PROGRAM
    }
    fn versions(&self) -> RangeInclusive<u32> {
        1..=1
    }
    fn handle(
        &self,
        call: Call,
    ) -> impl std::future::Future<Output = Result<Payload, ProcError>> + Send {
        let inner = self.0.clone();
        let ms = self.1;
        async move {
            if call.procedure == rdmatest::proto::PROC_GET {
                GETS.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            inner.handle(call).await
        }
    }
}

/// Probe: the NULL probe's timeout counts time spent waiting for a
/// credit, so a healthy connection whose credits are all held by slow calls
/// is torn down although the probe was never sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_waiting_for_a_credit_tears_down_a_healthy_connection() {
    let fabric = Fabric::new();
    let disp = Dispatcher::builder()
        .service(SlowGet(Arc::new(RdmatestServer::default()), 400))
        .build();
    let scfg = RdmaConfig {
        credits: 2,
        ..Default::default()
    };
    let srv = common::server_with(fabric.clone(), disp, scfg).await;
    let c = common::client(fabric, srv.local_addr(), RdmaConfig::default()).await;
    common::typed(&c).null().await.unwrap(); // learn the grant (2)
    let c1 = c.clone();
    let a = tokio::spawn(async move {
        c1.call_with_report(common::get_req(1024, 1, None).with_timeout(Duration::from_secs(5)))
            .await
    });
    tokio::time::sleep(Duration::from_millis(5)).await;
    let c2 = c.clone();
    let b = tokio::spawn(async move {
        c2.call_with_report(common::get_req(1024, 2, None).with_timeout(Duration::from_millis(100)))
            .await
    });
    assert!(b.await.unwrap().is_err(), "B times out");
    let (p, report) = a.await.unwrap().expect("A completes");
    common::check_get(&p, 1024, 1);
    let s = c.stats();
    eprintln!(
        "silent_disconnects={} reconnects={} retransmits={} A.report={report} server GETs executed={}",
        s.silent_disconnects.load(Ordering::Relaxed),
        s.reconnects.load(Ordering::Relaxed),
        s.retransmits.load(Ordering::Relaxed),
        GETS.load(Ordering::SeqCst)
    );
    assert_eq!(
        s.silent_disconnects.load(Ordering::Relaxed),
        0,
        "a healthy connection was torn down by a probe that never left the queue"
    );
}

/// A TCP relay to `to` that passes one direction at about `bps` bytes/s:
/// server-to-client when `down`, else client-to-server.
async fn relay(to: std::net::SocketAddr, bps: u64, down: bool) -> std::net::SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((c, _)) = l.accept().await else { return };
            let s = tokio::net::TcpStream::connect(to).await.unwrap();
            let (c, s) = if down { (c, s) } else { (s, c) };
            // Copied freely from `c` to `s`; throttled from `s` to `c`.
            let (mut cr, mut cw) = c.into_split();
            let (mut sr, mut sw) = s.into_split();
            tokio::spawn(async move {
                let _ = tokio::io::copy(&mut cr, &mut sw).await;
                let _ = sw.shutdown().await;
            });
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                loop {
                    let n = match sr.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    if cw.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                    tokio::time::sleep(Duration::from_micros(n as u64 * 1_000_000 / bps)).await;
                }
                let _ = cw.shutdown().await;
            });
        }
    });
    addr
}

/// A server without idle timeout, a relay passing 2 MiB/s one way
/// (server-to-client when `down`), and a client through it that has made
/// one call.
async fn slow_pair(
    down: bool,
) -> (
    rpcrdma::RdmaServer<iwarp::Device>,
    rpcrdma::RdmaClient<iwarp::Device>,
) {
    let scfg = RdmaConfig {
        idle_timeout: None,
        ..Default::default()
    };
    let srv = common::server(iwarp::Device::default(), scfg).await;
    let proxy = relay(srv.local_addr(), 2 << 20, down).await;
    let c = common::client(iwarp::Device::default(), proxy, RdmaConfig::default()).await;
    common::typed(&c).null().await.unwrap();
    (srv, c)
}

/// The responder's idle timeout did not count a reply still being
/// transmitted (the call's `in_process` ends when the reply is posted), so
/// a client on a slow path lost a long reply mid-transfer, again on every
/// retransmission. A reply's work requests in progress now count as
/// activity. (The bytes in kernel socket buffers after the last work
/// request completed are not seen: the idle timeout here, 1 s, is several
/// times their drain time through the 6 MiB/s relay.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_timeout_cuts_a_long_reply_still_being_sent() {
    let scfg = RdmaConfig {
        idle_timeout: if std::env::var("LIVENESS_CONTROL").is_ok() {
            None
        } else {
            Some(Duration::from_millis(1000))
        },
        ..Default::default()
    };
    let srv = common::server(iwarp::Device::default(), scfg).await;
    let proxy = relay(srv.local_addr(), 6 << 20, true).await;
    let ccfg = RdmaConfig {
        call_timeout: Duration::from_secs(20),
        ..Default::default()
    };
    let c = common::client(iwarp::Device::default(), proxy, ccfg).await;
    common::typed(&c).null().await.unwrap();
    const LEN: u32 = 16 << 20; // ~2.7 s through the relay
    let t0 = std::time::Instant::now();
    let r = c
        .call_with_report(common::get_req(LEN, 3, Some(LEN as usize)))
        .await;
    let took = t0.elapsed();
    let s = srv.stats();
    eprintln!(
        "took {took:?}; ok={} err={:?}; server idle_closes={} client retransmits={} reconnects={}",
        r.is_ok(),
        r.as_ref().err().map(|e| e.to_string()),
        s.idle_closes.load(Ordering::Relaxed),
        c.stats().retransmits.load(Ordering::Relaxed),
        c.stats().reconnects.load(Ordering::Relaxed),
    );
    assert_eq!(s.idle_closes.load(Ordering::Relaxed), 0, "closed mid-reply");
    let (p, _) = r.unwrap();
    common::check_get(&p, LEN, 3);
}

/// Barren race: a call that crosses the responder's idle close of a
/// connection that carried nothing yet is failed with ReconnectFailed
/// once the barren count reaches max_attempts, although the server is up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_crossing_idle_closes_fail_with_reconnect_failed() {
    let fabric = Fabric::new();
    let scfg = RdmaConfig {
        idle_timeout: Some(Duration::from_millis(20)),
        ..Default::default()
    };
    let srv = common::server(fabric.clone(), scfg).await;
    let attempts: u32 = std::env::var("LIVENESS_ATTEMPTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8);
    let ccfg = RdmaConfig {
        reconnect: rpcrdma::Backoff {
            initial: Duration::from_millis(1),
            max: Duration::from_millis(4),
            max_attempts: attempts,
        },
        ..Default::default()
    };
    let c = common::client(fabric, srv.local_addr(), ccfg).await;
    let t = common::typed(&c);
    let (mut ok, mut rf, mut other) = (0, 0, 0);
    for i in 0..300u64 {
        tokio::time::sleep(Duration::from_micros(18_000 + (i * 7919) % 12_000)).await;
        match t.null().await {
            Ok(()) => ok += 1,
            Err(e) if e.to_string().contains("reconnect failed") => {
                rf += 1;
                if rf <= 2 {
                    eprintln!("call {i}: {e}");
                }
            }
            Err(e) => {
                other += 1;
                eprintln!("call {i}: {e}");
            }
        }
    }
    eprintln!(
        "max_attempts={attempts}: ok={ok} reconnect_failed={rf} other={other}; idle_closes={} reconnects={}",
        srv.stats().idle_closes.load(Ordering::Relaxed),
        c.stats().reconnects.load(Ordering::Relaxed)
    );
    assert_eq!(rf + other, 0);
}

/// Control: a slow call alone (credits to spare) times out, its probe is
/// answered, the connection stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_call_with_credits_to_spare_keeps_the_connection() {
    let fabric = Fabric::new();
    let disp = Dispatcher::builder()
        .service(SlowGet(Arc::new(RdmatestServer::default()), 400))
        .build();
    let srv = common::server_with(fabric.clone(), disp, RdmaConfig::default()).await;
    let c = common::client(fabric, srv.local_addr(), RdmaConfig::default()).await;
    common::typed(&c).null().await.unwrap();
    let r = c
        .call_with_report(common::get_req(1024, 2, None).with_timeout(Duration::from_millis(100)))
        .await;
    assert!(r.is_err());
    tokio::time::sleep(Duration::from_millis(300)).await;
    common::typed(&c).null().await.unwrap();
    let s = c.stats();
    eprintln!(
        "control: silent_disconnects={} reconnects={}",
        s.silent_disconnects.load(Ordering::Relaxed),
        s.reconnects.load(Ordering::Relaxed)
    );
    assert_eq!(s.silent_disconnects.load(Ordering::Relaxed), 0);
}

/// Probe and bulk: a connection busy moving a large result (RDMA Writes
/// toward the client, no message received) counts as silent; a short
/// call queued behind the bulk data times out, its NULL probe (queued
/// behind the same data) times out too, and the connection is torn down
/// in the middle of the transfer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_moving_a_large_result_is_not_silent() {
    let (_srv, c) = slow_pair(true).await;
    const LEN: u32 = 8 << 20; // ~4 s through the relay
    let c1 = c.clone();
    let get = tokio::spawn(async move {
        c1.call_with_report(
            common::get_req(LEN, 3, Some(LEN as usize)).with_timeout(Duration::from_secs(20)),
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let short = c
        .call_with_report(
            oncrpc::Request::new(common::PROG, common::VERS, 0, Payload::new())
                .with_timeout(Duration::from_millis(300)),
        )
        .await;
    let (p, report) = get.await.unwrap().expect("GET");
    common::check_get(&p, LEN, 3);
    let s = c.stats();
    eprintln!(
        "short call ok={}; GET retransmitted {}x; silent_disconnects={} reconnects={}",
        short.is_ok(),
        report.retransmits,
        s.silent_disconnects.load(Ordering::Relaxed),
        s.reconnects.load(Ordering::Relaxed)
    );
    assert_eq!(
        s.silent_disconnects.load(Ordering::Relaxed),
        0,
        "torn down mid-transfer"
    );
}

/// Probe and bulk, repeated: a short call every 700 ms while a 4 MiB GET
/// (about 2 s through the relay) runs: can the GET ever finish?
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_result_with_periodic_short_calls() {
    let (_srv, c) = slow_pair(true).await;
    const LEN: u32 = 4 << 20;
    let c1 = c.clone();
    let get = tokio::spawn(async move {
        c1.call_with_report(
            common::get_req(LEN, 3, Some(LEN as usize)).with_timeout(Duration::from_secs(15)),
        )
        .await
    });
    let c2 = c.clone();
    let ticker = tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(700)).await;
            let _ = c2
                .call_with_report(
                    oncrpc::Request::new(common::PROG, common::VERS, 0, Payload::new())
                        .with_timeout(Duration::from_millis(300)),
                )
                .await;
        }
    });
    let r = get.await.unwrap();
    ticker.abort();
    let s = c.stats();
    eprintln!(
        "GET ok={} ({:?}); silent_disconnects={} retransmits={}",
        r.is_ok(),
        r.as_ref()
            .map(|(_, rep)| rep.retransmits)
            .map_err(|e| e.to_string()),
        s.silent_disconnects.load(Ordering::Relaxed),
        s.retransmits.load(Ordering::Relaxed)
    );
    assert!(r.is_ok());
}

/// Probe and bulk, Read direction: a PUT whose Read chunk the server pulls
/// slowly; a short call during it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_moving_a_large_argument_is_not_silent() {
    let (_srv, c) = slow_pair(false).await;
    let c1 = c.clone();
    let put = tokio::spawn(async move {
        common::typed(&c1)
            .put(rdmatest::pattern::pattern(3, 4 << 20))
            .await
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let short = c
        .call_with_report(
            oncrpc::Request::new(common::PROG, common::VERS, 0, Payload::new())
                .with_timeout(Duration::from_millis(300)),
        )
        .await;
    let r = put.await.unwrap();
    let s = c.stats();
    eprintln!(
        "PUT ok={}; short ok={}; silent_disconnects={} retransmits={}",
        r.is_ok(),
        short.is_ok(),
        s.silent_disconnects.load(Ordering::Relaxed),
        s.retransmits.load(Ordering::Relaxed)
    );
    assert_eq!(
        s.silent_disconnects.load(Ordering::Relaxed),
        0,
        "torn down mid-transfer"
    );
}
