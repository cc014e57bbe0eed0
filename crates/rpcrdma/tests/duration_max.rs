//! Durations too long to represent as a deadline
//! (`Duration::MAX`) in an [`RdmaConfig`] or a call's timeout mean "no
//! deadline", never a panic: neither `Instant + shutdown_grace` at shutdown
//! nor `last Read progress + read_timeout` at a call with a Read chunk may
//! overflow.
//!
//! Alone in its test binary: it counts panics with a process-wide hook
//! (some panics happen in spawned tasks whose failure nobody reports).

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use oncrpc::{Channel, Payload, Request};
use rpcrdma::memfabric::Fabric;
use rpcrdma::RdmaConfig;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duration_max_everywhere_means_no_deadline() {
    let panics = Arc::new(AtomicUsize::new(0));
    let seen = panics.clone();
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        seen.fetch_add(1, Ordering::SeqCst);
        default_hook(info);
    }));

    let forever = RdmaConfig {
        call_timeout: Duration::MAX,
        connect_timeout: Duration::MAX,
        read_budget_wait: Duration::MAX,
        shutdown_grace: Duration::MAX,
        read_timeout: Duration::MAX,
        idle_timeout: Some(Duration::MAX),
        ..RdmaConfig::default()
    };
    let dev = Fabric::new();
    let srv = common::server(dev.clone(), forever.clone()).await;
    let c = common::client(
        dev.clone(),
        srv.local_addr(),
        RdmaConfig {
            reconnect: common::no_reconnect(),
            ..forever
        },
    )
    .await;
    let t = common::typed(&c);
    let work = async {
        t.null().await.unwrap();
        c.call(
            Request::new(
                rdmatest::PROGRAM,
                rdmatest::proto::VERSION,
                0,
                Payload::new(),
            )
            .with_timeout(Duration::MAX),
        )
        .await
        .unwrap();
        // Above the inline size: the argument travels in a Read chunk.
        t.put(Bytes::from(vec![5u8; 200_000])).await.unwrap();
        assert_eq!(t.get(200_000, 3).await.unwrap().len(), 200_000);
        // A call in progress while the server shuts down.
        let slow = {
            let t = t.clone();
            tokio::spawn(async move { t.get(4 << 20, 9).await })
        };
        tokio::time::sleep(Duration::from_millis(5)).await;
        srv.shutdown().await;
        // Finished within the grace period, or failed when the
        // connection closed: either way, promptly and without a panic.
        let _ = slow.await.expect("the call's task panicked");
    };
    tokio::time::timeout(Duration::from_secs(20), work)
        .await
        .expect("calls or the shutdown hung");
    assert_eq!(panics.load(Ordering::SeqCst), 0, "something panicked");
}
