//! Calls the requester gives up, and calls made while
//! its connection is going down, over the software iWARP provider.
//!
//! - A call made after the QP left Connected but before the completion task
//!   ran `conn_lost` must not spin in `pump` (post fails, the call is
//!   requeued, popped again) without yielding, leaking a send buffer per
//!   turn; on a current-thread runtime the completion task would never run.
//! - Giving up a call with chunks (timeout, or the caller dropping its
//!   future) must not deregister its regions while the responder could
//!   still be moving its data: the late RDMA Write, Read, or Send with
//!   Invalidate would hit a dead STag, the QP would be terminated, and every
//!   other call on the connection retransmitted.

mod common;

use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use bytes::Bytes;

/// A call racing the connection's loss. Runs on its own thread with a current-thread runtime, watched from
/// the test thread: a livelock would never let the runtime answer.
#[test]
fn call_made_as_the_qp_goes_down_is_retransmitted() {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let r = rt.block_on(async {
            let (_srv, c) = common::iwarp_pair().await;
            let t = common::typed(&c);
            t.null().await.unwrap();
            // The QP goes down (as a peer's Terminate or a TCP reset would
            // take it); the next calls come before the completion task has
            // seen it.
            c.disconnect_for_test();
            let a = t.null().await.map_err(|e| e.to_string());
            let b = t
                .echo(Bytes::from_static(b"after the reconnect"))
                .await
                .map_err(|e| e.to_string());
            (a, b, c.stats().reconnects.load(Relaxed))
        });
        let _ = tx.send(r);
    });
    // A few milliseconds when it works (one 10 ms reconnect delay). The
    // bound is short on purpose: the old livelock grew by ~1 GB/s.
    match rx.recv_timeout(Duration::from_secs(5)) {
        Ok((a, b, reconnects)) => {
            assert_eq!(a, Ok(()), "NULL after the QP went down");
            assert_eq!(b.as_deref().ok(), Some(&b"after the reconnect"[..]));
            assert!(reconnects >= 1, "no reconnect counted");
        }
        Err(_) => {
            eprintln!("a call made as the QP went down never returned (busy loop in pump)");
            std::process::exit(101);
        }
    }
}

/// Calls with Write chunks (GET), a Read chunk (PUT) and both (large
/// ECHO) are given up at random points by a short caller-side timeout while
/// other calls run. Giving up must not break the connection: no reconnect,
/// no retransmission, and every call that was not given up verifies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn giving_up_calls_with_chunks_does_not_break_the_connection() {
    let (_srv, c) = common::iwarp_pair().await;
    // The first reply carries the grant: until then the connection has a
    // single credit, and a call given up while holding it is a major
    // timeout that reconnects by design (see `lost_reply.rs`).
    common::typed(&c).null().await.unwrap();
    const ROUNDS: u32 = 120;
    let mut given_up = 0u32;
    for i in 0..ROUNDS {
        let t = common::typed(&c);
        let size = 256 * 1024 + (i * 7919) % (768 * 1024);
        // A call that runs to completion alongside each given-up one.
        let steady = {
            let t = common::typed(&c);
            tokio::spawn(async move { t.get(4096 + i, i).await.map(|b| b.len()) })
        };
        // Given up somewhere between before its Send and after its data
        // moved: 0..200 µs.
        let wait = Duration::from_micros(u64::from((i * 37) % 200));
        let r = match i % 3 {
            0 => tokio::time::timeout(wait, t.get(size, i))
                .await
                .map(|r| r.map(|_| ())),
            1 => tokio::time::timeout(wait, t.put(rdmatest::pattern::pattern(i, size as usize)))
                .await
                .map(|r| r.map(|_| ())),
            _ => tokio::time::timeout(wait, t.echo(rdmatest::pattern::pattern(i, size as usize)))
                .await
                .map(|r| r.map(|_| ())),
        };
        match r {
            Err(_) => given_up += 1,
            Ok(r) => r.unwrap_or_else(|e| panic!("round {i}: {e}")),
        }
        assert_eq!(steady.await.unwrap().unwrap(), 4096 + i as usize);
    }
    // Every abandoned call's reply has come back once these complete (the
    // responder answers in order of arrival on one connection only loosely,
    // so wait for the count rather than assume it).
    let t = common::typed(&c);
    for _ in 0..200 {
        if c.outstanding() == 0 {
            break;
        }
        t.null().await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let s = c.stats();
    eprintln!(
        "given up {given_up} of {ROUNDS}; reconnects {}, retransmits {}, outstanding {}",
        s.reconnects.load(Relaxed),
        s.retransmits.load(Relaxed),
        c.outstanding()
    );
    assert!(
        given_up > 0,
        "no call was given up: the test proves nothing"
    );
    assert_eq!(
        s.reconnects.load(Relaxed),
        0,
        "a given-up call broke the connection"
    );
    assert_eq!(s.retransmits.load(Relaxed), 0);
    assert_eq!(c.outstanding(), 0, "abandoned calls still hold credits");
    assert!(c.is_connected());
}
