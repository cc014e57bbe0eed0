//! Calls the Responder accepted but cannot carry out get an
//! RDMA_ERROR (ERR_CHUNK, RFC 8166 §4.5) instead of silence.

mod common;

use std::time::Duration;

use bytes::Bytes;
use rdmatest::ClientError;
use rpcrdma::{RdmaConfig, TransportError};

/// The Requester offers IRD 0, so the Responder's negotiated ORD is 0 and
/// it can pull no Read chunk: a PUT whose data travels in a Read chunk is
/// answered with ERR_CHUNK, not dropped silently after the RDMA Read
/// post fails. Calls without Read chunks keep working.
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

/// Connection requests beyond `max_connections` are rejected;
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

/// A requester that never answers the responder's RDMA Reads
/// (here a proxy stops forwarding the server-to-client direction, so the
/// Read Requests never arrive) no longer holds the call and its read sink
/// forever: after `read_timeout` the responder closes that connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unanswered_rdma_reads_time_out_and_close_the_connection() {
    use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
    use std::sync::Arc;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    let scfg = RdmaConfig {
        read_timeout: Duration::from_millis(300),
        ..RdmaConfig::default()
    };
    let srv = common::server(iwarp::Device::default(), scfg).await;
    let target = srv.local_addr();
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy = l.local_addr().unwrap();
    let frozen = Arc::new(AtomicBool::new(false));
    let f2 = frozen.clone();
    tokio::spawn(async move {
        while let Ok((inbound, _)) = l.accept().await {
            let out = TcpStream::connect(target).await.unwrap();
            let (mut ir, mut iw) = inbound.into_split();
            let (mut or, mut ow) = out.into_split();
            tokio::spawn(async move {
                let _ = tokio::io::copy(&mut ir, &mut ow).await;
            });
            let f3 = f2.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                loop {
                    let n = match or.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    if f3.load(Relaxed) {
                        // Swallow everything from now on.
                        continue;
                    }
                    if iw.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    let ccfg = RdmaConfig {
        call_timeout: Duration::from_millis(500),
        reconnect: rpcrdma::Backoff {
            max_attempts: 0,
            ..RdmaConfig::default().reconnect
        },
        ..RdmaConfig::default()
    };
    let c = common::client(iwarp::Device::default(), proxy, ccfg).await;
    let t = common::typed(&c);
    t.null().await.unwrap();
    assert_eq!(srv.connections(), 1);
    frozen.store(true, Relaxed);
    // A PUT of 64 KiB: its data is in a Read chunk the server must pull.
    assert!(t
        .put(bytes::Bytes::from(vec![1u8; 64 << 10]))
        .await
        .is_err());
    let mut closed = false;
    for _ in 0..300 {
        if srv.stats().read_timeouts.load(Relaxed) == 1 && srv.connections() == 0 {
            closed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        closed,
        "read_timeouts {} connections {}",
        srv.stats().read_timeouts.load(Relaxed),
        srv.connections()
    );
}
