//! Transport tests over the in-process provider (no TCP timing).

mod common;

use bytes::Bytes;
use rpcrdma::memfabric::Fabric;
use rpcrdma::RdmaConfig;

#[tokio::test]
async fn basic_calls_over_memfabric() {
    let dev = Fabric::new();
    let srv = common::server(dev.clone(), RdmaConfig::default()).await;
    let c = common::client(dev.clone(), srv.local_addr(), RdmaConfig::default()).await;
    let t = common::typed(&c);
    t.null().await.unwrap();
    t.echo(Bytes::from_static(b"hello")).await.unwrap();
    let d = t.get(100_000, 3).await.unwrap();
    assert_eq!(d.len(), 100_000);
    t.put(d).await.unwrap();
    t.get2(5000, 7, 9).await.unwrap();
    t.echo(Bytes::from(vec![7u8; 300_000])).await.unwrap();
    srv.shutdown().await;
}

/// `credits` beyond [`rpcrdma::MAX_CREDITS`] is taken as the maximum on
/// both sides (`u32::MAX` must not overflow the count of receives to
/// post and refuse every connection).
#[tokio::test]
async fn credits_beyond_the_maximum_are_capped() {
    let dev = Fabric::new();
    let cfg = RdmaConfig {
        credits: u32::MAX,
        ..RdmaConfig::default()
    };
    let srv = common::server(dev.clone(), cfg.clone()).await;
    let c = common::client(dev.clone(), srv.local_addr(), cfg).await;
    let t = common::typed(&c);
    t.null().await.unwrap();
    let calls = (0..64).map(|i| t.get(1000 + i, i)).collect();
    for r in futures_join_all(calls).await {
        r.unwrap();
    }
    let most = srv
        .stats()
        .max_outstanding
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(most <= u64::from(rpcrdma::MAX_CREDITS), "{most}");
    srv.shutdown().await;
}

#[tokio::test]
async fn message_kinds_inline_4096() {
    let dev = Fabric::new();
    common::message_kinds(dev.clone(), dev, 4096).await;
}

#[tokio::test]
async fn message_kinds_inline_1024() {
    let dev = Fabric::new();
    common::message_kinds(dev.clone(), dev, 1024).await;
}

#[tokio::test]
async fn remote_invalidation_on_and_off() {
    let dev = Fabric::new();
    common::remote_invalidation(dev.clone(), dev).await;
}

fn expect_err_chunk<T: std::fmt::Debug>(r: Result<T, rdmatest::ClientError>) {
    match r {
        Err(rdmatest::ClientError::Rpc(e)) => assert_eq!(
            rpcrdma::TransportError::from_rpc(&e),
            Some(&rpcrdma::TransportError::ErrChunk)
        ),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn server_wide_read_budget_is_shared_by_connections() {
    let dev = Fabric::new();
    let scfg = RdmaConfig {
        max_read_bytes: 64 << 10,
        ..Default::default()
    };
    let srv = common::server(dev.clone(), scfg).await;
    let a = common::client(dev.clone(), srv.local_addr(), RdmaConfig::default()).await;
    let b = common::client(dev.clone(), srv.local_addr(), RdmaConfig::default()).await;
    let (ta, tb) = (common::typed(&a), common::typed(&b));
    // Above the server-wide budget although far below the connection's.
    expect_err_chunk(tb.put(Bytes::from(vec![1u8; 100_000])).await);
    // Calls on both connections wait for room in turn and all complete.
    let mut hs = Vec::new();
    for i in 0..20u8 {
        let t = if i % 2 == 0 { ta.clone() } else { tb.clone() };
        hs.push(tokio::spawn(async move {
            t.put(Bytes::from(vec![i; 40_000])).await
        }));
    }
    for h in hs {
        h.await.unwrap().unwrap();
    }
    srv.shutdown().await;
}

#[tokio::test]
async fn read_budget_bounds_what_a_peer_makes_us_allocate() {
    let dev = Fabric::new();
    let scfg = RdmaConfig {
        max_read_bytes_per_connection: 64 << 10,
        ..Default::default()
    };
    let srv = common::server(dev.clone(), scfg).await;
    let c = common::client(dev.clone(), srv.local_addr(), RdmaConfig::default()).await;
    let t = common::typed(&c);
    t.put(Bytes::from(vec![1u8; 60_000])).await.unwrap();
    expect_err_chunk(t.put(Bytes::from(vec![1u8; 100_000])).await);
    // Many calls sharing the budget still all complete.
    let mut hs = Vec::new();
    for i in 0..20u8 {
        let t = t.clone();
        hs.push(tokio::spawn(async move {
            t.put(Bytes::from(vec![i; 40_000])).await
        }));
    }
    for h in hs {
        h.await.unwrap().unwrap();
    }
    srv.shutdown().await;
}

#[tokio::test]
async fn fabric_failure_reconnects_and_retransmits() {
    let dev = Fabric::new();
    let srv = common::server(dev.clone(), RdmaConfig::default()).await;
    let c = common::client(dev.clone(), srv.local_addr(), RdmaConfig::default()).await;
    let t = common::typed(&c);
    let mut hs = Vec::new();
    for i in 0..50u32 {
        let t = t.clone();
        hs.push(tokio::spawn(async move { t.sleep(20 + i % 5).await }));
    }
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    dev.fail_all();
    for h in hs {
        h.await.unwrap().unwrap();
    }
    assert!(
        c.stats()
            .retransmits
            .load(std::sync::atomic::Ordering::Relaxed)
            > 0
    );
    assert!(
        c.stats()
            .reconnects
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 1
    );
    srv.shutdown().await;
}

#[tokio::test]
async fn reused_result_buffer_with_stale_bytes() {
    let dev = Fabric::new();
    let srv = common::server(dev.clone(), RdmaConfig::default()).await;
    let c = common::client(dev.clone(), srv.local_addr(), RdmaConfig::default()).await;
    let t = common::typed(&c);
    // A buffer that still holds older (longer) data: only what the
    // responder wrote comes back.
    let stale = bytes::BytesMut::from(&vec![0xEEu8; 300_000][..]);
    let d = t.get_into(100_000, 8, stale).await.unwrap();
    assert_eq!(d.len(), 100_000);
    // And the buffer comes back to the caller for the next call.
    drop(t);
    let d = d.try_into_mut().expect("unique: the caller's own buffer");
    assert!(d.capacity() >= 300_000);
    let t = common::typed(&c);
    t.get_into(250_000, 9, d).await.unwrap();
    srv.shutdown().await;
}

#[tokio::test]
async fn failed_post_in_the_middle_of_a_reply_gets_err_chunk_and_the_connection_lives() {
    use oncrpc::{Payload, Request};
    let dev = Fabric::new();
    let srv = common::server(dev.clone(), RdmaConfig::default()).await;
    let c = common::client(dev.clone(), srv.local_addr(), RdmaConfig::default()).await;
    let get2 = || {
        let mut a = Payload::builder();
        a.item(&rdmatest::Get2Args {
            len_a: 10_000,
            len_b: 20_000,
            seed: 3,
        });
        Request::new(
            common::PROG,
            common::VERS,
            rdmatest::proto::PROC_GET2,
            a.finish(),
        )
        .with_result_buf(bytes::BytesMut::with_capacity(10_000))
        .with_result_buf(bytes::BytesMut::with_capacity(20_000))
    };
    // GET2's reply is two RDMA Writes, then the Send: the first Write is
    // posted, the second refused.
    dev.refuse_rdma_write_after(1);
    match c.call_with_report(get2()).await {
        Err(e) => assert_eq!(
            rpcrdma::TransportError::from_rpc(&e),
            Some(&rpcrdma::TransportError::ErrChunk),
            "{e:?}"
        ),
        Ok((_, r)) => panic!("call succeeded: {r}"),
    }
    // Same connection, no reconnect: later calls, GET2 included, verify.
    let t = common::typed(&c);
    let r = t.get2(10_000, 20_000, 3).await.unwrap();
    assert_eq!((r.a.len(), r.b.len()), (10_000, 20_000));
    t.null().await.unwrap();
    assert_eq!(
        c.stats()
            .reconnects
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    srv.shutdown().await;
}

/// Receive buffers are posted again as they are and Sends go through
/// pooled send buffers: a stream of calls registers no memory per message.
#[tokio::test]
async fn calls_do_not_register_memory_per_message() {
    let dev = Fabric::new();
    let srv = common::server(dev.clone(), RdmaConfig::default()).await;
    let c = common::client(dev.clone(), srv.local_addr(), RdmaConfig::default()).await;
    let t = common::typed(&c);
    for _ in 0..5 {
        t.null().await.unwrap();
    }
    let before = dev.registrations();
    for _ in 0..200 {
        t.null().await.unwrap();
    }
    // Registering per message would take 4 per call (a Send buffer and a
    // receive buffer on each side): 800 here. Only the send-buffer pools
    // grow, to the Sends in flight between two signaled ones (16).
    let made = dev.registrations() - before;
    assert!(made <= 2 * 17, "{made} registrations for 200 calls");
    let calls: Vec<_> = (0..64).map(|_| t.null()).collect();
    for r in futures_join_all(calls).await {
        r.unwrap();
    }
    // 64 calls at once: a send buffer per call and per reply in flight.
    let made = dev.registrations() - before;
    assert!(made <= 2 * (64 + 17), "{made} registrations for 264 calls");
    srv.shutdown().await;
}

/// A provider that cannot read or write registered memory in place: the
/// transport registers each message instead, and calls still work.
#[tokio::test]
async fn calls_work_without_in_place_access() {
    let dev = Fabric::new();
    dev.refuse_in_place_access();
    let srv = common::server(dev.clone(), RdmaConfig::default()).await;
    let c = common::client(dev.clone(), srv.local_addr(), RdmaConfig::default()).await;
    let t = common::typed(&c);
    let before = dev.registrations();
    for _ in 0..20 {
        t.null().await.unwrap();
    }
    t.echo(Bytes::from_static(b"hello")).await.unwrap();
    let calls: Vec<_> = (0..32).map(|_| t.null()).collect();
    for r in futures_join_all(calls).await {
        r.unwrap();
    }
    assert!(dev.registrations() - before >= 4 * 20);
    srv.shutdown().await;
}

/// The responder posts the replies of calls that arrived together as one
/// batch; when the batch cannot be posted the connection is closed, and the
/// requester retransmits the unanswered call on a new one: every call
/// completes, once.
#[tokio::test]
async fn a_reply_batch_that_cannot_be_posted_closes_the_connection() {
    let dev = Fabric::new();
    let srv = common::server(dev.clone(), RdmaConfig::default()).await;
    let c = common::client(dev.clone(), srv.local_addr(), RdmaConfig::default()).await;
    let t = common::typed(&c);
    t.null().await.unwrap();
    // Send posts from here: the two calls, then the two replies (one
    // batch: both calls were received in one poll of the server's CQ);
    // the second reply is refused.
    dev.refuse_send_after(3);
    let (a, b) = tokio::join!(
        t.echo(Bytes::from_static(b"a")),
        t.echo(Bytes::from_static(b"b"))
    );
    assert_eq!(&a.unwrap()[..], b"a");
    assert_eq!(&b.unwrap()[..], b"b");
    assert!(
        c.stats()
            .reconnects
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 1
    );
    assert!(
        c.stats()
            .retransmits
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 1
    );
    assert_eq!(
        srv.stats()
            .connections_closed
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    t.null().await.unwrap();
    srv.shutdown().await;
}

/// Awaits all futures (polled together, in one task).
async fn futures_join_all<F: std::future::Future>(fs: Vec<F>) -> Vec<F::Output> {
    let mut fs: Vec<_> = fs.into_iter().map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = fs.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut done = true;
        for (f, o) in fs.iter_mut().zip(out.iter_mut()) {
            if o.is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => *o = Some(v),
                    std::task::Poll::Pending => done = false,
                }
            }
        }
        if done {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    out.into_iter().map(|o| o.expect("ready")).collect()
}
