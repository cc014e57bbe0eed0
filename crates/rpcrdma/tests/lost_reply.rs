//! A call whose reply never comes keeps its credit; on a fresh
//! connection (one credit until the first reply) that would stall the
//! client for good, so the Requester treats "abandoned calls hold every
//! credit" as a major timeout and reconnects.

use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use oncrpc::{Call, Dispatcher, Payload, ProcError, Request, RpcError, Service};
use rpcrdma::memfabric::Fabric;
use rpcrdma::{Bindings, RdmaClient, RdmaConfig, RdmaServer};

const PROG: u32 = 0x2000_5300;

/// Never answers the first call it sees (the procedure never completes);
/// answers every later one, and NULL, with an empty result. `dropped` counts the
/// unanswered calls whose futures the responder dropped.
#[derive(Default)]
struct IgnoreFirst {
    seen: Arc<AtomicU32>,
    dropped: Arc<AtomicU32>,
}

struct CountDrop(Arc<AtomicU32>);

impl Drop for CountDrop {
    fn drop(&mut self) {
        self.0.fetch_add(1, Relaxed);
    }
}

impl Service for IgnoreFirst {
    fn program(&self) -> u32 {
        PROG
    }
    fn versions(&self) -> RangeInclusive<u32> {
        1..=1
    }
    fn handle(
        &self,
        call: Call,
    ) -> impl std::future::Future<Output = Result<Payload, ProcError>> + Send {
        // NULL (the requester's probe of a connection that has been silent
        // for a call's timeout) is answered and not counted.
        let n = if call.procedure == 0 {
            u32::MAX
        } else {
            self.seen.fetch_add(1, Relaxed)
        };
        let guard = CountDrop(self.dropped.clone());
        async move {
            if n == 0 {
                let _guard = guard;
                std::future::pending::<()>().await;
            }
            Ok(Payload::builder().finish())
        }
    }
}

/// A server serving `disp` and a client connected to it over `dev`.
async fn pair(
    dev: Fabric,
    disp: Dispatcher,
    scfg: RdmaConfig,
    ccfg: RdmaConfig,
) -> (RdmaServer<Fabric>, RdmaClient<Fabric>) {
    let addr = "127.0.0.1:0".parse().unwrap();
    let srv = RdmaServer::bind(dev.clone(), addr, disp, scfg, Bindings::rdmatest())
        .await
        .unwrap();
    let c = RdmaClient::connect(dev, srv.local_addr(), ccfg, Bindings::rdmatest())
        .await
        .unwrap();
    (srv, c)
}

fn req() -> Request {
    Request::new(PROG, 1, 1, Payload::builder().finish()).with_timeout(Duration::from_millis(300))
}

#[tokio::test]
async fn one_unanswered_call_on_a_fresh_connection_does_not_stall_the_client() {
    let dev = Fabric::new();
    let seen = Arc::new(AtomicU32::new(0));
    let disp = Dispatcher::builder()
        .service(IgnoreFirst {
            seen: seen.clone(),
            ..Default::default()
        })
        .build();
    let (_srv, c) = pair(dev, disp, RdmaConfig::default(), RdmaConfig::default()).await;
    // The first call is never answered.
    assert!(matches!(
        c.call_with_report(req()).await,
        Err(RpcError::Timeout)
    ));
    // The next calls must reach the responder and be answered.
    for i in 0..3 {
        let r = c.call_with_report(req()).await;
        assert!(r.is_ok(), "call {i} after the lost reply: {r:?}");
    }
    assert!(
        seen.load(Relaxed) >= 4,
        "responder saw {} calls",
        seen.load(Relaxed)
    );
    assert!(c.stats().reconnects.load(Relaxed) >= 1);
    assert_eq!(c.outstanding(), 0);
}

#[tokio::test]
async fn outstanding_counts_abandoned_calls_still_holding_a_credit() {
    let dev = Fabric::new();
    let seen = Arc::new(AtomicU32::new(0));
    let disp = Dispatcher::builder()
        .service(IgnoreFirst {
            seen: seen.clone(),
            ..Default::default()
        })
        .build();
    let cfg = RdmaConfig {
        // No reconnection: the abandoned call stays visible.
        reconnect: rpcrdma::Backoff {
            max_attempts: 0,
            ..RdmaConfig::default().reconnect
        },
        ..RdmaConfig::default()
    };
    let (_srv, c) = pair(dev, disp, RdmaConfig::default(), cfg).await;
    // A grant is seen first (the connection then has more than one credit),
    // so a single abandoned call does not break the connection.
    seen.store(1, Relaxed);
    c.call_with_report(req()).await.unwrap();
    seen.store(0, Relaxed);
    assert!(matches!(
        c.call_with_report(req()).await,
        Err(RpcError::Timeout)
    ));
    assert!(c.is_connected());
    assert_eq!(
        c.outstanding(),
        1,
        "the abandoned call still holds its credit"
    );
}

/// A caller that drops its call future (here: an outer
/// timeout) gives the call up; a still-queued call is never sent.
#[tokio::test]
async fn dropped_call_future_is_not_sent_later() {
    let dev = Fabric::new();
    let seen = Arc::new(AtomicU32::new(1));
    let disp = Dispatcher::builder()
        .service(IgnoreFirst {
            seen: seen.clone(),
            ..Default::default()
        })
        .build();
    // One credit: a second call waits in the queue while the first is out.
    let scfg = RdmaConfig {
        credits: 1,
        ..RdmaConfig::default()
    };
    let (_srv, c) = pair(dev, disp, scfg, RdmaConfig::default()).await;
    // A grant of 1 is seen.
    c.call_with_report(req()).await.unwrap();
    assert_eq!(seen.load(Relaxed), 2);
    // A: never answered (timeout 300 ms) and holds the only credit.
    seen.store(0, Relaxed);
    let c2 = c.clone();
    let a = tokio::spawn(async move { c2.call_with_report(req()).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(seen.load(Relaxed), 1, "A reached the responder");
    // B: queued behind A; its caller goes away.
    let b = c.call_with_report(req().with_timeout(Duration::from_secs(10)));
    assert!(tokio::time::timeout(Duration::from_millis(50), b)
        .await
        .is_err());
    // A times out; the connection is replaced (F4); later calls work.
    assert!(matches!(a.await.unwrap(), Err(RpcError::Timeout)));
    c.call_with_report(req()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The responder saw A and the last call, never B.
    assert_eq!(seen.load(Relaxed), 2, "the dropped call B was sent");
    assert_eq!(c.outstanding(), 0);
}

/// Panics in its first call; answers later ones.
struct PanicFirst {
    seen: Arc<AtomicU32>,
}

impl Service for PanicFirst {
    fn program(&self) -> u32 {
        PROG
    }
    fn versions(&self) -> RangeInclusive<u32> {
        1..=1
    }
    fn handle(
        &self,
        call: Call,
    ) -> impl std::future::Future<Output = Result<Payload, ProcError>> + Send {
        // NULL (the requester's probe of a connection that has been silent
        // for a call's timeout) is answered and not counted.
        let n = if call.procedure == 0 {
            u32::MAX
        } else {
            self.seen.fetch_add(1, Relaxed)
        };
        assert!(n != 0, "PanicFirst: deliberate panic in the first call");
        async move { Ok(Payload::builder().finish()) }
    }
}

/// A procedure that panics is answered SYSTEM_ERR by the dispatcher;
/// its connection and the calls after it go on. (Before,
/// the transport's own backstop closed the connection and the
/// requester retransmitted the call, to panic again; that backstop stays
/// for panics in the transport itself.)
#[tokio::test]
async fn panicking_procedure_is_answered_system_err() {
    let dev = Fabric::new();
    let seen = Arc::new(AtomicU32::new(0));
    let disp = Dispatcher::builder()
        .service(PanicFirst { seen: seen.clone() })
        .build();
    let (srv, c) = pair(dev, disp, RdmaConfig::default(), RdmaConfig::default()).await;
    let r = c
        .call_with_report(req().with_timeout(Duration::from_secs(5)))
        .await;
    assert!(matches!(r, Err(oncrpc::RpcError::SystemErr)), "{r:?}");
    let r = c
        .call_with_report(req().with_timeout(Duration::from_secs(5)))
        .await;
    assert!(r.is_ok(), "{r:?}");
    assert_eq!(srv.stats().call_panics.load(Relaxed), 0);
    assert_eq!(c.stats().retransmits.load(Relaxed), 0);
    assert_eq!(c.stats().reconnects.load(Relaxed), 0);
    assert_eq!(seen.load(Relaxed), 2);
    srv.shutdown().await;
}

/// Calls still running when their connection ends are
/// stopped with it, instead of holding the connection (its socket, buffers
/// and read budget) after its slot was given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_running_when_the_connection_ends_are_stopped() {
    let dropped = Arc::new(AtomicU32::new(0));
    let disp = Dispatcher::builder()
        .service(IgnoreFirst {
            dropped: dropped.clone(),
            ..Default::default()
        })
        .build();
    let addr = "127.0.0.1:0".parse().unwrap();
    let dev = iwarp::Device::default();
    let srv = RdmaServer::bind(
        dev.clone(),
        addr,
        disp,
        RdmaConfig::default(),
        Bindings::rdmatest(),
    )
    .await
    .unwrap();
    let c = RdmaClient::connect(
        dev,
        srv.local_addr(),
        RdmaConfig::default(),
        Bindings::rdmatest(),
    )
    .await
    .unwrap();
    // One call (a fresh connection has one credit until a reply grants
    // more, and none comes): it reaches the responder and runs there.
    let call = {
        let c = c.clone();
        tokio::spawn(async move { c.call_with_report(req()).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(dropped.load(Relaxed), 0);
    // The connection ends: the call's future on the responder goes too.
    c.close();
    for _ in 0..200 {
        if dropped.load(Relaxed) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(dropped.load(Relaxed), 1, "the call outlived its connection");
    assert!(call.await.unwrap().is_err());
}
