//! A responder may lower its credit grant (RFC 8166 §3.3.1).
//! A call whose reply never came keeps its credit; if a later reply lowers
//! the grant to what such calls already hold, no call can ever be sent
//! again on that connection. The requester must treat that as a major
//! timeout and reconnect, not leave every later call to time out in its
//! queue.
//!
//! Calls given up keep their registered buffers while their
//! replies are outstanding; beyond `RdmaConfig::max_abandoned_bytes` the
//! requester treats the connection as failed.
//!
//! The responder here is a stand-in written with raw verbs over the software
//! iWARP provider, answering NULL replies (whatever the procedure) with the
//! grant its policy gives, or not at all.

mod common;

use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use common::stand_in;
use rpcrdma::{RdmaClient, RdmaConfig};
use rpcrdma_proto::wire::{DecodeLimits, Header};

/// RPC-over-RDMA header (RDMA_MSG, empty chunk lists) and an RPC reply
/// (MSG_ACCEPTED, AUTH_NONE, SUCCESS) of a NULL call.
fn null_reply(xid: u32, grant: u32) -> bytes::Bytes {
    stand_in::words(&[xid, 1, grant, 0, 0, 0, 0, xid, 1, 0, 0, 0, 0])
}

/// Which calls are answered, with what grant: `policy(first connection,
/// call number from 1, the call is a NULL)`; `None` leaves the call
/// unanswered.
type Policy = fn(bool, u32, bool) -> Option<u32>;

/// A stand-in responder on loopback and a client of it.
async fn pair(policy: Policy, cfg: RdmaConfig) -> RdmaClient<iwarp::Device> {
    stand_in::client_of(cfg, move |req, dev, conn| {
        let mut n = 0u32;
        stand_in::serve(req, dev, move |msg, pd, qp| {
            let xid = u32::from_be_bytes([msg[0], msg[1], msg[2], msg[3]]);
            let h = Header::parse(msg, &DecodeLimits::default()).unwrap();
            let proc_ = h
                .payload()
                .and_then(|p| p.get(20..24))
                .map(|w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]));
            n += 1;
            let Some(grant) = policy(conn == 0, n, proc_ == Some(0)) else {
                return Some(vec![]); // never answered
            };
            Some(vec![stand_in::send(
                pd,
                qp,
                u64::from(n),
                null_reply(xid, grant),
            )?])
        })
    })
    .await
}

/// On its first connection the responder grants 2, ignores the second
/// call, and answers later ones with a grant of 1; on later connections it
/// answers every call with a grant of 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lower_grant_with_a_lost_reply_outstanding_reconnects() {
    let policy: Policy = |first, n, _| match (first, n) {
        (true, 1) => Some(2),
        (true, 2) => None,
        _ => Some(1),
    };
    let cfg = RdmaConfig {
        call_timeout: Duration::from_millis(300),
        ..Default::default()
    };
    let c = pair(policy, cfg).await;
    let t = rdmatest::RdmatestClient::new(c.clone());
    // Grant 2.
    t.null().await.unwrap();
    // Never answered: it times out and keeps its credit (1 of 2).
    assert!(t.null().await.is_err());
    // Answered with a grant of 1: the lost call now holds every credit.
    t.null().await.unwrap();
    // Every later call must still go through, on a new connection.
    for i in 0..3 {
        let r = t.null().await;
        assert!(
            r.is_ok(),
            "call {i} after the grant fell: {r:?} (outstanding {}, reconnects {})",
            c.outstanding(),
            c.stats().reconnects.load(Relaxed)
        );
    }
    assert!(c.stats().reconnects.load(Relaxed) >= 1);
}

/// The responder grants 32 with its first reply and never answers
/// again. Each GET given up keeps its 2 MiB Write chunk registered; the
/// second one takes the given-up calls past a 3 MiB budget, and the client
/// reconnects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abandoned_buffers_beyond_the_budget_reconnect() {
    // NULL calls are answered: the connection is alive (a requester probes
    // a connection silent for a call's timeout with a NULL).
    let policy: Policy = |first, n, null| (null || (first && n == 1)).then_some(32);
    let cfg = RdmaConfig {
        call_timeout: Duration::from_millis(200),
        max_abandoned_bytes: 3 << 20,
        ..Default::default()
    };
    let c = pair(policy, cfg).await;
    let t = rdmatest::RdmatestClient::new(c.clone());
    t.null().await.unwrap();
    assert!(t.get(2 << 20, 1).await.is_err());
    assert_eq!(c.stats().reconnects.load(Relaxed), 0, "within the budget");
    // The given-up GET (once the NULL probe that its silent timeout sent
    // has been answered).
    for _ in 0..100 {
        if c.outstanding() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(c.outstanding(), 1);
    assert!(t.get(2 << 20, 2).await.is_err());
    // Past the budget: the connection is broken and a new one made.
    for _ in 0..100 {
        if c.stats().reconnects.load(Relaxed) >= 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(c.stats().reconnects.load(Relaxed), 1);
    assert_eq!(c.outstanding(), 0, "the given-up calls were dropped");
}
