//! Timeouts, clean server shutdown, reconnect failure, RPC-level errors.

mod common;

use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use oncrpc::{Payload, Request, RpcError};
use rdmatest::ClientError;
use rpcrdma::{Backoff, RdmaConfig, TransportError};

fn dev() -> iwarp::Device {
    iwarp::Device::default()
}

fn sleep_req(ms: u32) -> Request {
    let mut a = Payload::builder();
    a.u32(ms);
    Request::new(
        common::PROG,
        common::VERS,
        rdmatest::proto::PROC_SLEEP,
        a.finish(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_call_timeout_then_connection_still_works() {
    let srv = common::server(dev(), RdmaConfig::default()).await;
    let c = common::client(dev(), srv.local_addr(), RdmaConfig::default()).await;
    // A grant is seen first, so one abandoned call does not hold every
    // credit (that case reconnects: see lost_reply.rs).
    common::typed(&c).null().await.unwrap();
    let e = c
        .call_with_report(sleep_req(300).with_timeout(Duration::from_millis(30)))
        .await
        .unwrap_err();
    assert!(matches!(e, RpcError::Timeout), "{e}");
    assert_eq!(c.stats().timeouts.load(Relaxed), 1);
    // The late reply is absorbed (its credit comes back); calls go on.
    let t = common::typed(&c);
    t.get(50_000, 1).await.unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    for _ in 0..10 {
        t.null().await.unwrap();
    }
    assert_eq!(c.outstanding(), 0);
    assert_eq!(c.stats().reconnects.load(Relaxed), 0);
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_finishes_in_flight_calls_and_reconnect_fails_typed() {
    let srv = common::server(dev(), RdmaConfig::default()).await;
    let cfg = RdmaConfig {
        reconnect: Backoff {
            initial: Duration::from_millis(5),
            max: Duration::from_millis(20),
            max_attempts: 3,
        },
        ..Default::default()
    };
    let c = common::client(dev(), srv.local_addr(), cfg).await;
    // One reply first: until the grant is seen only one call may be
    // outstanding (RFC 8166 §3.3.1), and calls still queued at the client
    // when the server closes are not "in flight" at the server.
    common::typed(&c).null().await.unwrap();
    let mut calls = Vec::new();
    for _ in 0..4 {
        let t = common::typed(&c);
        calls.push(tokio::spawn(async move { t.sleep(150).await }));
    }
    tokio::time::sleep(Duration::from_millis(40)).await;
    srv.shutdown().await;
    for h in calls {
        h.await
            .unwrap()
            .expect("in-flight call finished before the close");
    }
    assert_eq!(srv.connections(), 0);
    // The server is gone: the client fails calls with a typed error.
    let e = common::typed(&c).null().await.unwrap_err();
    match e {
        ClientError::Rpc(e) => assert!(
            matches!(
                TransportError::from_rpc(&e),
                Some(TransportError::ReconnectFailed { attempts: 3, .. })
            ),
            "{e}"
        ),
        other => panic!("{other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rpc_errors_pass_through() {
    let srv = common::server(dev(), RdmaConfig::default()).await;
    let c = common::client(dev(), srv.local_addr(), RdmaConfig::default()).await;
    let e = c
        .call_with_report(Request::new(common::PROG, common::VERS, 77, Payload::new()))
        .await
        .unwrap_err();
    assert!(matches!(e, RpcError::ProcUnavail), "{e}");
    let e = c
        .call_with_report(Request::new(0x4000_0000, 1, 0, Payload::new()))
        .await
        .unwrap_err();
    assert!(matches!(e, RpcError::ProgUnavail), "{e}");
    // GET2 above the server maximum: GARBAGE_ARGS from the service.
    let e = common::typed(&c).get2(17 << 20, 1, 1).await.unwrap_err();
    assert!(matches!(e, ClientError::Rpc(RpcError::GarbageArgs)), "{e}");
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_client_fails_typed() {
    let srv = common::server(dev(), RdmaConfig::default()).await;
    let c = common::client(dev(), srv.local_addr(), RdmaConfig::default()).await;
    c.close();
    let e = c.call_with_report(sleep_req(1)).await.unwrap_err();
    assert_eq!(TransportError::from_rpc(&e), Some(&TransportError::Closed));
    srv.shutdown().await;
}
