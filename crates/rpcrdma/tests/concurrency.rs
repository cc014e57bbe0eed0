//! 1,000 calls in flight over 8 connections with mixed procedures; every
//! result verifies and the responder never sees more calls in process than
//! it granted.

mod common;

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use bytes::Bytes;
use rdma_verbs::Device;
use rpcrdma::RdmaConfig;

async fn thousand_calls<D: Device>(srv_dev: D, cli_dev: impl Fn() -> D) {
    const GRANT: u32 = 32;
    let scfg = RdmaConfig {
        credits: GRANT,
        ..Default::default()
    };
    let srv = common::server(srv_dev, scfg).await;
    let mut clients = Vec::new();
    for _ in 0..8 {
        let c = common::client(cli_dev(), srv.local_addr(), RdmaConfig::default()).await;
        clients.push(Arc::new(common::typed(&c)));
    }
    let mut tasks = Vec::new();
    for i in 0..1000u32 {
        let t = clients[(i % 8) as usize].clone();
        tasks.push(tokio::spawn(async move {
            let x = i.wrapping_mul(2_654_435_761);
            let size = 1 + (x >> 8) % 200_000;
            match i % 6 {
                0 => t.null().await.map(|_| ()),
                1 => t
                    .echo(rdmatest::pattern::pattern(x, (size % 9000) as usize))
                    .await
                    .map(|_| ()),
                2 => t
                    .put(rdmatest::pattern::pattern(x, size as usize))
                    .await
                    .map(|_| ()),
                3 => t.get(size, x).await.map(|_| ()),
                4 => t.get2(size / 3, size % 5000, x).await.map(|_| ()),
                _ => t.echo(Bytes::new()).await.map(|_| ()),
            }
        }));
    }
    for (i, h) in tasks.into_iter().enumerate() {
        h.await.unwrap().unwrap_or_else(|e| panic!("call {i}: {e}"));
    }
    let st = srv.stats();
    let max = st.max_outstanding.load(Relaxed);
    assert!(
        max <= GRANT as u64,
        "credits in use {max} exceeded the grant {GRANT}"
    );
    assert!(max > 1, "calls did overlap ({max})");
    assert_eq!(st.credit_overruns.load(Relaxed), 0);
    assert!(st.dispatched.load(Relaxed) >= 1000);
    srv.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousand_calls_eight_connections_iwarp() {
    thousand_calls(iwarp::Device::default(), iwarp::Device::default).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousand_calls_eight_connections_memfabric() {
    let f = rpcrdma::memfabric::Fabric::new();
    let f2 = f.clone();
    thousand_calls(f, move || f2.clone()).await;
}

/// A Requester that runs at its full grant reuses a credit the moment a
/// reply arrives (RFC 8166 §3.3.1). The responder must have returned that
/// credit before the reply reached the wire, or it would count a legal call
/// as an overrun and close a healthy connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_window_reuse_is_never_an_overrun() {
    const GRANT: u32 = 2;
    let scfg = RdmaConfig {
        credits: GRANT,
        ..Default::default()
    };
    let srv = common::server(iwarp::Device::default(), scfg).await;
    let c = common::client(
        iwarp::Device::default(),
        srv.local_addr(),
        RdmaConfig::default(),
    )
    .await;
    let t = Arc::new(common::typed(&c));
    let mut tasks = Vec::new();
    // PUTs carry a Read chunk, so each call runs on its own task: the path
    // where the reply was posted before the credit came back.
    for w in 0..16u32 {
        let t = t.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..150u32 {
                let data = rdmatest::pattern::pattern(w * 1000 + i, 8192);
                t.put(data)
                    .await
                    .unwrap_or_else(|e| panic!("put {w}/{i}: {e}"));
            }
        }));
    }
    for h in tasks {
        h.await.unwrap();
    }
    let st = srv.stats();
    assert_eq!(
        st.credit_overruns.load(Relaxed),
        0,
        "spurious credit overruns"
    );
    assert_eq!(
        c.stats().reconnects.load(Relaxed),
        0,
        "connection was torn down"
    );
    assert!(st.max_outstanding.load(Relaxed) <= GRANT as u64);
    srv.shutdown().await;
}
