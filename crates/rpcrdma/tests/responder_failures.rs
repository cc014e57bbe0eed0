//! Review F5/F9: calls the Responder accepted but cannot carry out get an
//! RDMA_ERROR (ERR_CHUNK, RFC 8166 §4.5) instead of silence.

mod common;

use std::time::Duration;

use bytes::Bytes;
use rdmatest::ClientError;
use rpcrdma::{RdmaConfig, TransportError};

/// The Requester offers IRD 0, so the Responder's negotiated ORD is 0 and
/// it can pull no Read chunk: a PUT whose data travels in a Read chunk is
/// answered with ERR_CHUNK (it used to be dropped silently after the RDMA
/// Read post failed). Calls without Read chunks keep working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_chunk_with_ord_zero_gets_err_chunk() {
    let srv = common::server(iwarp::Device::default(), RdmaConfig::default()).await;
    let cfg = RdmaConfig {
        ird: 0,
        call_timeout: Duration::from_secs(5),
        ..RdmaConfig::default()
    };
    let c = common::client(iwarp::Device::default(), srv.local_addr(), cfg).await;
    let t = common::typed(&c);
    let r = t.put(Bytes::from(vec![9u8; 64 << 10])).await;
    let err = match r {
        Err(ClientError::Rpc(e)) => e,
        other => panic!("expected ERR_CHUNK, got {other:?}"),
    };
    assert!(
        matches!(
            TransportError::from_rpc(&err),
            Some(TransportError::ErrChunk)
        ),
        "expected ERR_CHUNK, got {err:?}"
    );
    // The connection stays usable.
    t.null().await.unwrap();
    let d = t.get(10_000, 1).await.unwrap();
    assert_eq!(d.len(), 10_000);
    assert_eq!(
        c.stats()
            .reconnects
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    srv.shutdown().await;
}

/// Review F3: connection requests beyond `max_connections` are rejected;
/// a slot frees when a connection ends.
#[tokio::test]
async fn connections_beyond_max_connections_are_rejected() {
    use rpcrdma::memfabric::Fabric;
    use std::sync::atomic::Ordering::Relaxed;
    let dev = Fabric::new();
    let cfg = RdmaConfig {
        max_connections: 2,
        ..RdmaConfig::default()
    };
    let srv = common::server(dev.clone(), cfg).await;
    let a = common::client(dev.clone(), srv.local_addr(), RdmaConfig::default()).await;
    let b = common::client(dev.clone(), srv.local_addr(), RdmaConfig::default()).await;
    common::typed(&a).null().await.unwrap();
    common::typed(&b).null().await.unwrap();
    let third = rpcrdma::RdmaClient::connect(
        dev.clone(),
        srv.local_addr(),
        RdmaConfig::default(),
        rpcrdma::Bindings::rdmatest(),
    )
    .await;
    assert!(third.is_err(), "a third connection was accepted");
    assert_eq!(srv.stats().connections_rejected.load(Relaxed), 1);
    assert_eq!(srv.connections(), 2);
    // Closing one frees its slot.
    a.close();
    drop(a);
    let mut ok = None;
    for _ in 0..200 {
        if srv.connections() < 2 {
            if let Ok(c) = rpcrdma::RdmaClient::connect(
                dev.clone(),
                srv.local_addr(),
                RdmaConfig::default(),
                rpcrdma::Bindings::rdmatest(),
            )
            .await
            {
                ok = Some(c);
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let c = ok.expect("no connection after a slot was freed");
    common::typed(&c).null().await.unwrap();
    common::typed(&b).null().await.unwrap();
}
